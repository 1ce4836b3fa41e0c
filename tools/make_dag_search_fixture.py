"""Makes tests/data/dag_search/: the DA-Transformer authors' beam search (their DAG-Search extension,
thu-coai/DAG-Search, `dag_search.dag_search`) run on seeded random graphs with several settings, which
tests/test_dag_search.py requires jaxnat's `dat.dag_search` to reproduce. Run it in the reference environment with
the extension built there (a C++ compiler, Cython and a checkout of thu-coai/DAG-Search):

    .refenv/bin/pip install --no-build-isolation ../DAG-Search
    .refenv/bin/python tools/make_dag_search_fixture.py

The candidates are made as their `inference_beamsearch` makes them (torch's topk); the n-gram LM is
tests/data/ngram/lm.arpa over that fixture's pieces. Deterministic: rerun, it writes the same outputs.
"""

from __future__ import annotations

import json
import os

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "dag_search")
NGRAM = os.path.join(ROOT, "tests", "data", "ngram")
PAD, BOS = 0, 1
# (beam, per_length, top_cand, top_p, alpha, beta, gamma, no_consecutive, no_repeat)
SETTINGS = [
    (4, 2, 3, 0.9, 1.1, 1.0, 0.0, 0, 0),
    (8, 3, 5, 1.0, 1.0, 1.0, 0.0, 0, 0),
    (3, 1, 2, 0.5, 1.1, 1.0, 0.0, 0, 0),
    (6, 2, 4, 0.9, 0.8, 0.5, 0.0, 0, 0),
    (5, 2, 4, 0.9, 1.1, 1.0, 0.0, 0, 2),
    (5, 2, 4, 0.9, 1.1, 1.0, 0.0, 2, 0),
    (5, 2, 4, 0.9, 1.1, 1.0, 0.0, 0, 1),
    (5, 3, 4, 0.95, 1.1, 1.0, 0.5, 0, 0),
    (5, 3, 4, 0.95, 1.1, 1.0, 2.0, 1, 3),
]


def graphs(rng, batch: int, width: int, vocab: int):
    """Random graphs: links float32[B, L, L] (log P(j | i), j > i within each row's n vertices), logp float32[B, L,
    V] (PAD never emitted, so that it marks the end of their outputs alone), n int32[B]."""
    n = rng.integers(3, width + 1, size=batch).astype(np.int32)
    n[0] = width
    links = np.full((batch, width, width), -np.inf, np.float32)
    for b in range(batch):
        for i in range(n[b] - 1):
            row = rng.normal(size=n[b] - i - 1) * 1.5 - 0.7 * np.arange(n[b] - i - 1)   # mostly short jumps
            links[b, i, i + 1:n[b]] = row - np.logaddexp.reduce(row)
    logp = rng.normal(size=(batch, width, vocab)) * 1.5
    logp[..., PAD] = -np.inf
    logp = (logp - np.logaddexp.reduce(logp, axis=-1, keepdims=True)).astype(np.float32)
    return links, logp, n


def candidates(links, logp, top: int, beta: float):
    """Their inference_beamsearch's candidate pairs (dagscores, nextstep_idx, logits_idx)."""
    links, logp = torch.from_numpy(links), torch.from_numpy(logp)
    B, L, _ = links.shape
    top_logits, top_logits_idx = logp.topk(top, dim=-1)
    dagscores, top_cand_idx = (links.unsqueeze(-1) + top_logits.unsqueeze(1) * beta).reshape(B, L, -1).topk(top, -1)
    nextstep_idx = torch.div(top_cand_idx, top, rounding_mode="floor")
    idx1 = torch.arange(B).unsqueeze(-1).unsqueeze(-1).expand(*nextstep_idx.shape)
    logits_idx = top_logits_idx[idx1, nextstep_idx, top_cand_idx % top]
    return (np.ascontiguousarray(dagscores.numpy()), np.ascontiguousarray(nextstep_idx.int().numpy()),
            np.ascontiguousarray(logits_idx.int().numpy()))


def main() -> int:
    import dag_search

    with open(os.path.join(NGRAM, "kenlm_scores.json"), encoding="utf-8") as f:
        pieces = json.load(f)["pieces"]

    class Dictionary:
        symbols = pieces

    rng = np.random.default_rng(0)
    batch, width = 16, 14
    links, logp, n = graphs(rng, batch, width, len(pieces))
    dag_search.beam_search_init(batch, max(s[0] for s in SETTINGS), max(s[2] for s in SETTINGS), width + 1,
                                batch * (width + 1), 1, Dictionary(), os.path.join(NGRAM, "lm.arpa"))
    out = {"links": links, "logp": logp, "n": n, "settings": np.asarray(SETTINGS, np.float64)}
    for k, (beam, per_length, top, top_p, alpha, beta, gamma, consecutive, repeat) in enumerate(SETTINGS):
        score, vertex, token = candidates(links, logp, top, beta)
        tokens, scores = dag_search.dag_search(score, vertex, token, n, alpha, gamma, beam, per_length, top_p, PAD,
                                               BOS, 0, consecutive, repeat)
        rows = np.full((batch, width + 1), PAD, np.int32)
        rows[:, :tokens.shape[1]] = tokens
        out[f"tokens{k}"], out[f"scores{k}"] = rows, scores
    os.makedirs(OUT, exist_ok=True)
    np.savez_compressed(os.path.join(OUT, "dag_search.npz"), **out)
    print(f"wrote {os.path.join(OUT, 'dag_search.npz')}: {len(SETTINGS)} settings × {batch} graphs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
