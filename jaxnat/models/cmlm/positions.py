"""Does a mask-predict model tell its target positions apart, and does it read the target tokens it is shown?

CMLMC's RevealPosition (Huang et al. 2022, §3.1 and Figure 1) starts from two observations about CMLM: its
learned position embeddings are alike (many pairs with cosine similarity above 0.5), so a fully masked canvas
gives the decoder little to tell neighbouring positions apart, and the first pass repeats tokens. This module
measures both on a trained CMLM/CMLMC workdir (the family's `Analysis`):

* `position_similarity` — the cosine similarity of every pair of the first N position embeddings (the
  paper's Figure 1(a)), of the table and of the positions' part of the decoder input (the same vectors when
  the input is the sum token + position; their image under the position half of the input map with
  ``cmlm.concat_pe``), and how large that part is beside the tokens' (`decoder_inputs`);
* `context_use` — the masked tokens' negative log-likelihood and accuracy on reference targets with a given
  share of their tokens masked (all of them, ..., exactly one). A model that reads its observed tokens
  predicts a lone masked token far better than a fully masked canvas; one that does not, scores alike at
  every share — and then mask-predict's later passes have nothing to improve on.

    python -m jaxnat.analyse RUN [RUN ...] [--split valid] [--sentences 500] [--positions 40]
"""

from __future__ import annotations

import jax
import numpy as np

from jaxnat.data.vocab import MASK_ID, NUM_RESERVED, PAD_ID
from jaxnat.errors import ConfigError
from jaxnat.oracle import real_mask

SHARES = (1.0, 0.5, 0.2, "one")  # the share of a target's real tokens masked; "one": exactly one token
COSINE_EDGES = (0.5, 0.7)        # the thresholds the paper's Figure 1(a) discussion counts pairs above


def position_similarity(vectors: np.ndarray) -> dict:
    """vectors: float[N, D], one per position → {'pairs', 'above_0.5', 'above_0.7', 'mean', 'adjacent',
    'histogram'}: the number of unique pairs, how many have cosine similarity above each edge, the mean over
    pairs, the mean over neighbouring positions (i, i+1), and the pairs per bin of 0.1 from -1 to 1."""
    v = np.asarray(vectors, np.float64)
    if v.ndim != 2 or v.shape[0] < 2:
        raise ConfigError(f"position_similarity needs at least two position vectors, got shape {v.shape}")
    unit = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    cos = unit @ unit.T
    pairs = cos[np.triu_indices(len(v), 1)]
    out = {"pairs": int(pairs.size), "mean": float(pairs.mean()), "adjacent": float(np.diag(cos, 1).mean())}
    out.update({f"above_{edge}": int(np.sum(pairs > edge)) for edge in COSINE_EDGES})
    # the pairs per bin of width 0.1 from -1 to 1 (the paper's Figure 1(a)); the top bin holds 1.0 too
    out["histogram"] = np.histogram(np.clip(pairs, -1.0, 1.0), bins=20, range=(-1.0, 1.0))[0].tolist()
    return out


def plot(results: list[dict], path: str, figure) -> str:
    """Draws each run's binned cosine similarity of its position embeddings (the table's; the paper's Figure
    1(a)) with matplotlib's ``figure`` class at ``path``."""
    fig = figure(figsize=(6, 4))
    ax = fig.subplots()
    centres = np.linspace(-0.95, 0.95, 20)
    for r in results:
        if "error" not in r["similarity"]:
            ax.plot(centres, r["similarity"]["table"]["histogram"], marker="o", label=r["workdir"])
    ax.set(xlabel="cosine similarity", ylabel="position pairs", title="position embeddings' cosine similarity")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def decoder_inputs(params: dict, concat_pe: bool, count: int, scale: bool = True) -> dict:
    """What the first ``count`` positions and the target tokens add to the decoder input, as
    {'table': float[count, D] the position embeddings, 'positions': float[count, D] their part of the input,
    'tokens': float[V, D] the tokens' part}: with a summed input the table and the embeddings (× √D with
    ``scale``, model.scale_embeddings); with ``concat_pe`` each half of the input map (``combine``:
    Linear([token embedding (× √D), position] → D), bias left out) applied to them. The decoder's own position
    table where it has one (model.separate_positions). Learned positions only (ConfigError otherwise)."""
    p = params["params"]
    embedder = p.get("tgt_embed", p["src_embed"])
    if "positions" not in embedder:
        raise ConfigError("the model has sinusoidal positions (model.positions=sinusoidal): nothing was learned")
    table = np.asarray(embedder["positions"], np.float64)[:count]
    matrix = embedder["tokens"] if "tokens" in embedder else p["src_embed"]["tokens"]  # shared with the encoder
    tokens = np.asarray(matrix["embedding"], np.float64) * (np.sqrt(table.shape[1]) if scale else 1.0)
    if not concat_pe:
        return {"table": table, "positions": table, "tokens": tokens}
    kernel = np.asarray(p["combine"]["kernel"], np.float64)  # [2D, D]: token rows first, position rows after
    half = kernel.shape[0] // 2
    return {"table": table, "positions": table @ kernel[half:], "tokens": tokens @ kernel[:half]}


def mean_norm(v: np.ndarray) -> float:
    return float(np.linalg.norm(v, axis=-1).mean())


def mask_share(real: np.ndarray, share, rng: np.random.Generator) -> np.ndarray:
    """bool[B, T]: which of the ``real`` (bool[B, T]) tokens to mask — each with probability ``share``, or with
    ``share == "one"`` exactly one uniformly chosen real token per row (none in a row without real tokens)."""
    u = rng.random(real.shape)
    if share == "one":
        u = np.where(real, u, np.inf)
        return real & (u == u.min(axis=1, keepdims=True))
    return real & (u < share)


def context_use(token_logits, tgt: np.ndarray, shares=SHARES, seed: int = 0, batch: int = 64) -> list[dict]:
    """token_logits(canvas int32[b, T], start) → float[b, T, V]: the model's logits for the canvases of
    sentences start … start + b − 1 (the sources fixed by the caller); tgt: int32[B, T] reference rows
    [BOS … EOS PAD …]. → per share: {'share', 'masked', 'nll', 'accuracy'} over the masked tokens (natural-log NLL
    without label smoothing; accuracy of the argmax, in percent). The head is asked ``batch`` rows at a time, so
    no more than [batch, T, V] logits are held at once."""
    rng = np.random.default_rng(seed)
    real = np.asarray(real_mask(tgt))
    rows = []
    for share in shares:
        masked = mask_share(real, share, rng)
        canvas = np.where(masked, MASK_ID, tgt).astype(np.int32)
        nll = hits = 0.0
        for start in range(0, len(tgt), batch):
            part, gold = masked[start:start + batch], tgt[start:start + batch]
            logp = np.asarray(jax.nn.log_softmax(token_logits(canvas[start:start + batch], start), axis=-1), np.float64)
            nll -= np.take_along_axis(logp, gold[..., None], axis=-1)[..., 0][part].sum()
            hits += (logp.argmax(-1) == gold)[part].sum()
        n = int(masked.sum())
        rows.append({"share": share, "masked": n, "nll": float(nll / max(n, 1)),
                     "accuracy": float(100.0 * hits / max(n, 1))})
    return rows


def measure(run, positions: int = 40, batch: int = 64) -> dict:
    """Both measures for a trained CMLM/CMLMC model on its run's sentences (`jaxnat.models.family.AnalysisRun`),
    comparing the first ``positions`` position embeddings."""
    from jaxnat.decoding.request import pad_hypotheses
    from jaxnat.models.transformer import token_mask

    config = run.config
    if not 2 <= positions <= config.model.max_len:
        raise ConfigError(f"--positions must be from 2 to what {run.workdir}'s model has (model.max_len="
                          f"{config.model.max_len}), got {positions}")
    module, params, tok = run.translator.spec.module, run.translator.params, run.translator.tokenizer

    def rows(texts, side):  # [BOS … EOS] rows, cut to the model's length, all as wide as the longest
        ids = [r[:config.model.max_len - 2] for r in tok.encode(texts, side)]
        return pad_hypotheses(ids, max(len(r) for r in ids) + 2)

    src, tgt = rows(run.src, "src"), rows(run.ref, "tgt")
    fill = -len(src) % batch  # PAD rows, so that every batch has one shape (one compile)
    src = np.pad(src, ((0, fill), (0, 0)), constant_values=PAD_ID)
    encode = jax.jit(lambda p, s: module.apply(p, s, method="encode")[0])
    logits_of = jax.jit(lambda p, memory, s, t: module.apply(p, t, memory, token_mask(s), method="token_logits"))
    memories = [encode(params, src[i:i + batch]) for i in range(0, len(src), batch)]  # each source encoded once

    def token_logits(canvas, start):
        b = len(canvas)
        canvas = np.pad(canvas, ((0, batch - b), (0, 0)), constant_values=PAD_ID)
        return np.asarray(logits_of(params, memories[start // batch], src[start:start + batch], canvas))[:b]

    try:
        parts = decoder_inputs(params, config.cmlm.concat_pe, positions, config.model.scale_embeddings)
        similarity = {"table": position_similarity(parts["table"]), "input": position_similarity(parts["positions"]),
                      # how loud the position is beside the token in the decoder input (real tokens only)
                      "position_to_token": mean_norm(parts["positions"]) / mean_norm(parts["tokens"][NUM_RESERVED:])}
    except ConfigError as e:
        similarity = {"error": str(e)}
    return {"positions": positions, "similarity": similarity, "context": context_use(token_logits, tgt, batch=batch)}


def to_markdown(results: list[dict]) -> str:
    head = ["run", "checkpoint"] + [f"nll / acc % ({'one masked' if s == 'one' else f'{s:.0%} masked'})"
                                    for s in SHARES]
    head += ["PE pairs cos > 0.5 / > 0.7: table; input", "adjacent cos: table; input", "\\|position\\| / \\|token\\|"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        sim, ck = r["similarity"], r["checkpoint"]
        pe = ["–", "–", "–"]
        if "error" not in sim:
            t, i = sim["table"], sim["input"]
            pe = [f"{t['above_0.5']} / {t['above_0.7']}; {i['above_0.5']} / {i['above_0.7']} (of {t['pairs']})",
                  f"{t['adjacent']:.2f}; {i['adjacent']:.2f}", f"{sim['position_to_token']:.2f}"]
        cells = [f"{c['nll']:.2f} / {c['accuracy']:.1f}" for c in r["context"]]
        lines.append("| " + " | ".join([r["workdir"], f"{ck['kind']} (step {ck['step']})", *cells, *pe]) + " |")
    return "\n".join(lines)
