"""jaxnat's dat.decode=dagsearch beside the DA-Transformer authors' DAG-Search extension, on a trained run's graphs:
the share of identical outputs and the time of the search itself, each side given the same candidate pairs.

    .refenv/bin/pip install --no-build-isolation ../DAG-Search   # once: their extension (thu-coai/DAG-Search)
    python bench/vs_dag_search.py --run runs/dat-m30k --config.data.dir=../shared/data/multi30k \
        [--beam 100] [--per-length 10] [--top-p 0.9] [--sentences 1000] [--batch 32] [--repeats 3] [--lm LM.arpa]

For each batch of the first test split's sources the run's model computes its graphs and the candidate pairs their
`inference_beamsearch` makes (`dag.candidates`, β = dat.lookahead_beta, dat.top_cand per vertex); both
searches then read those arrays: jaxnat's `dag_search.search` here (NumPy, vectorised over the batch) and theirs
(C++, one thread) in a worker under .refenv/bin/python that answers one request at a time over a pipe, so only one
computes at any moment. No output capacity (theirs has none); α, γ (with --lm: its LM over the run's target pieces)
as the run's dat.beam_alpha and dat.lm_weight. The outputs compared are what fairseq prints of theirs (BOS, EOS, PAD
dropped). Each repeat times jaxnat's search then theirs over all batches; the figures are the medians, the ratio
the median of the repeats' own ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from jaxnat.config import apply_override, parse_overrides, workdir_config  # noqa: E402
from jaxnat.data.sources import load_corpus  # noqa: E402
from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID  # noqa: E402
from jaxnat.errors import run_script  # noqa: E402
from jaxnat.provenance import machine  # noqa: E402
from jaxnat.restore import load_translator  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = """
import json, sys, time, numpy as np, dag_search
arrays = np.load(sys.argv[1])
meta = json.loads(sys.argv[2])
class Dictionary:
    symbols = meta["pieces"]
batches = [(arrays[f"score{k}"], arrays[f"vertex{k}"], arrays[f"token{k}"], arrays[f"n{k}"])
           for k in range(meta["batches"])]
dag_search.beam_search_init(meta["batch"], meta["beam"], meta["top"], meta["width"] + 1,
                            meta["batch"] * (meta["width"] + 1), 1, Dictionary(), meta["lm"])
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    out, t0 = [], time.perf_counter()
    for score, vertex, token, n in batches:
        tokens, _ = dag_search.dag_search(score, vertex, token, n, meta["alpha"], meta["gamma"], meta["beam"],
                                          meta["per_length"], meta["top_p"], 0, 1, 0, 0, 0)
        out += tokens.tolist()
    print(json.dumps({"seconds": time.perf_counter() - t0, "tokens": out}), flush=True)
"""


def printed(row) -> list[int]:
    """An output as fairseq prints the authors' (BOS, EOS, PAD dropped)."""
    return [int(t) for t in row if t not in (PAD_ID, BOS_ID, EOS_ID)]


def source_batches(ids: list, batch: int):
    """The encoded sources (`Translator.encode`) in batches of ``batch``, each int32[B, S], PAD after."""
    for start in range(0, len(ids), batch):
        chunk = ids[start:start + batch]
        src = np.full((len(chunk), max(map(len, chunk))), PAD_ID, np.int32)
        for r, row in enumerate(chunk):
            src[r, :len(row)] = row
        yield src


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a trained DA-Transformer workdir")
    parser.add_argument("--beam", type=int, default=100)
    parser.add_argument("--per-length", type=int, default=10)
    parser.add_argument("--top-p", type=float, default=0.9)
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lm", default="", help="an ARPA LM of the run's target pieces (γ: dat.lm_weight)")
    parser.add_argument("--refenv", default=os.path.join(ROOT, ".refenv"))
    args, overrides = parser.parse_known_args()
    if min(args.beam, args.per_length, args.sentences, args.batch, args.repeats) < 1:
        sys.exit("error: --beam, --per-length, --sentences, --batch and --repeats must be at least 1")
    import jax
    import jax.numpy as jnp

    from jaxnat.models.dat import dag, dag_search

    config = workdir_config(args.run)
    for key, value in parse_overrides(overrides):
        apply_override(config, key, value)
    if config.model.name != "dat":
        sys.exit(f"error: {args.run} is a {config.model.name} run, not a DA-Transformer")
    python = os.path.join(args.refenv, "bin", "python")
    if subprocess.run([python, "-c", "import dag_search"], capture_output=True).returncode:
        sys.exit(f"error: {python} cannot import dag_search (install thu-coai/DAG-Search there)")
    corpus = load_corpus(config.data)
    split = [s for s in corpus if s not in ("train", "valid")][0]
    srcs = corpus[split][0][:args.sentences]
    translator = load_translator(config, args.run)
    s = config.dat
    decoder = translator.spec.module.clone(graph_upsample=s.decode_upsample)
    pairs = jax.jit(lambda p, src: (lambda lg, lk, n: (*dag.candidates(lk, jax.nn.log_softmax(lg), s.top_cand,
                                                                               s.lookahead_beta), n))(
        *decoder.apply(p, src)))
    ids, _ = translator.encode(srcs)
    batches = [tuple(np.asarray(a) for a in pairs(translator.params, jnp.asarray(src)))
               for src in source_batches(ids, args.batch)]
    width = max(b[0].shape[1] for b in batches)
    vocab = translator.tokenizer.vocab_size("tgt")
    pieces = [translator.tokenizer.id_to_piece(i, "tgt") for i in range(vocab)]
    lm = None
    if args.lm:
        from jaxnat.decoding import ngram
        lm = jax.tree_util.tree_map(np.asarray, ngram.read_arpa(args.lm, pieces))
    gamma = s.lm_weight if lm is not None else 0.0

    def ours():
        out, t0 = [], time.perf_counter()
        for score, vertex, token, n in batches:
            L = score.shape[1]
            tokens, _, _ = dag_search.search(score, vertex, token, n, np.full(len(n), L + 1), L + 1, vocab, args.beam,
                                             args.per_length, args.top_p, s.beam_alpha, gamma, lm)
            out += [printed(row) for row in tokens[:, 0]]
        return time.perf_counter() - t0, out

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "pairs.npz")
        np.savez(path, **{f"{name}{k}": np.ascontiguousarray(a, dtype)
                          for k, b in enumerate(batches)
                          for name, a, dtype in zip(("score", "vertex", "token", "n"), b,
                                                    (np.float32, np.intc, np.intc, np.intc))})
        meta = dict(pieces=pieces, batches=len(batches), batch=args.batch, beam=args.beam, top=s.top_cand,
                    width=width, lm=os.path.abspath(args.lm) if args.lm else None, alpha=s.beam_alpha, gamma=gamma,
                    per_length=args.per_length, top_p=args.top_p)
        worker = subprocess.Popen([python, "-c", WORKER, path, json.dumps(meta)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert json.loads(worker.stdout.readline())["ready"]
        times = []
        for repeat in range(args.repeats):
            our_s, our_out = ours()
            worker.stdin.write("go\n")
            worker.stdin.flush()
            reply = json.loads(worker.stdout.readline())
            their_out = [printed(row) for row in reply["tokens"]]
            times.append((our_s, reply["seconds"]))
            print(f"repeat {repeat + 1}/{args.repeats}: jaxnat {our_s:.2f} s, theirs {reply['seconds']:.2f} s",
                  file=sys.stderr, flush=True)
        worker.stdin.close()
        worker.wait()
    same = sum(a == b for a, b in zip(our_out, their_out))
    ours_s, theirs_s = statistics.median(t[0] for t in times), statistics.median(t[1] for t in times)
    ratio = statistics.median(t[0] / t[1] for t in times)
    print(f"| search ({split}, {len(srcs)} sentences, batch {args.batch}; beam {args.beam}, {args.per_length} a "
          f"length, top-p {args.top_p}{', LM γ ' + str(gamma) if lm is not None else ''}) | identical outputs | "
          f"jaxnat (s) | DAG-Search, C++ 1 thread (s) | jaxnat / theirs |")
    print("|---|---|---|---|---|")
    print(f"| {args.run} | {same}/{len(srcs)} | {ours_s:.2f} | {theirs_s:.2f} | {ratio:.2f}× |")
    print(f"\nmedian of {args.repeats} repeats")
    print(machine())


if __name__ == "__main__":
    run_script(main)
