"""How well a trained LevT or EDITOR's placeholder head counts on partial sequences: for canvases that keep a
fraction d of each reference's words (in order), the placeholders it opens (argmax per slot, γ = 0) against
the oracle's counts (the reference's missing pieces), by density.

    python bench/placeholder_calibration.py --config configs/editor/demo.py --workdir runs/editor-demo \
        [--sentences 500] [--densities 0,0.1,0.25,0.5,0.75,0.9] [--shuffled]

Columns: predicted / oracle placeholders in total (1.0 = calibrated; below = under-insertion), the share of
slots whose count is exactly right, the share of sentences where the head opens fewer than the oracle, and the
BLEU of one insertion step on the canvas (placeholders, then the token head's argmax fills) with the head's
counts and with the oracle's: what the counts alone cost, the token head being the same.
With --shuffled the kept words are also put in random order (the soft-constraint case; the oracle then counts
what the ed3/ed2 oracle inserts after its deletions or repositions).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import sacrebleu  # noqa: E402

from jaxnat import edit_ops  # noqa: E402

from jaxnat.config import build_config  # noqa: E402
from jaxnat.data.batching import eval_batches  # noqa: E402
from jaxnat.data.sources import load_corpus  # noqa: E402
from jaxnat.data.vocab import PAD_ID, PLH_ID  # noqa: E402
from jaxnat.decoding.request import pad_hypotheses  # noqa: E402
from jaxnat.decoding.refine import forbid_reserved  # noqa: E402
from jaxnat.models.transformer import token_mask  # noqa: E402
from jaxnat.oracle import ed2_labels, ed3_labels  # noqa: E402
from jaxnat.restore import load_translator  # noqa: E402


def partial_canvases(refs_ids: list[list[int]], word_start: np.ndarray, density: float, shuffled: bool,
                     rng: np.random.Generator) -> list[list[int]]:
    """Keep round(density · words) whole words of each reference (pieces of a word stay together)."""
    out = []
    for ids in refs_ids:
        words, cur = [], []
        for t in ids:
            if word_start[t] and cur:
                words.append(cur)
                cur = []
            cur.append(t)
        if cur:
            words.append(cur)
        k = int(round(density * len(words)))
        keep = sorted(rng.choice(len(words), size=k, replace=False).tolist())
        if shuffled:
            rng.shuffle(keep)
        out.append([t for w in keep for t in words[w]])
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--densities", default="0,0.1,0.25,0.5,0.75,0.9")
    parser.add_argument("--shuffled", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args, overrides = parser.parse_known_args()
    config = build_config(args.config, overrides)
    corpus = load_corpus(config.data)
    split = [s for s in corpus if s not in ("train", "valid")][0]
    srcs, refs = corpus[split][0][:args.sentences], corpus[split][1][:args.sentences]
    translator = load_translator(config, args.workdir)
    spec, params, tok = translator.spec, translator.params, translator.tokenizer
    module = spec.module
    oracle = ed3_labels if spec.name == "editor" else ed2_labels
    src_ids, _ = translator.encode(srcs)
    ref_ids = tok.encode(refs, "tgt")

    @jax.jit
    def counts(src, canvas, ref):
        memory = module.apply(params, src, method="encode")
        logits = module.apply(params, canvas, memory, token_mask(src), method="placeholder_logits")
        slots = jnp.arange(canvas.shape[1] - 1)[None, :] < jnp.sum(canvas != PAD_ID, axis=1, keepdims=True) - 1
        predicted = jnp.where(slots, jnp.argmax(logits, axis=-1), 0)
        want = oracle(canvas, ref).insertion

        def fill(slot_counts):  # one insertion step with these counts (no deletion or reposition first)
            with_plh = edit_ops.insert_placeholders(canvas, slot_counts, PAD_ID, PLH_ID).tokens
            tokens = module.apply(params, with_plh, memory, token_mask(src), method="token_logits")
            return edit_ops.fill_placeholders(with_plh, jnp.argmax(forbid_reserved(tokens), -1).astype(jnp.int32),
                                              PLH_ID)
        return predicted, want, slots, fill(predicted), fill(want)

    print(f"{spec.name} ({args.workdir}), {split}, {len(srcs)} sentences, {'shuffled' if args.shuffled else 'ordered'} "
          f"subsets of the reference's words")
    print("| density | predicted / oracle placeholders | slots exactly right | sentences under-inserting "
          "| one step, BLEU with the head's counts | with the oracle's counts |")
    print("|---|---|---|---|---|---|")
    width = max(len(r) for r in ref_ids) + 2
    ref_rows = pad_hypotheses(ref_ids, width)
    for density in [float(d) for d in args.densities.split(",")]:
        rng = np.random.default_rng(args.seed)
        canvases = pad_hypotheses(partial_canvases(ref_ids, tok.word_start_table("tgt"), density, args.shuffled,
                                                   rng), width)
        pred_total = want_total = exact = slots_total = under = 0
        hyps = {"head": [""] * len(srcs), "oracle": [""] * len(srcs)}
        for idx, batch in eval_batches(src_ids, None, 64, translator.buckets):
            rows = np.where(idx >= 0, idx, 0)
            p, w, s, by_head, by_oracle = jax.device_get(
                counts(batch["src"], jnp.asarray(canvases[rows]), jnp.asarray(ref_rows[rows])))
            real = idx >= 0
            for name, filled in (("head", by_head), ("oracle", by_oracle)):
                for row, i in enumerate(idx):
                    if i >= 0:
                        hyps[name][i] = tok.decode([int(t) for t in filled[row]], "tgt")
            pred_total += int(p[real].sum())
            want_total += int(w[real].sum())
            exact += int(((p == w) & s)[real].sum())
            slots_total += int(s[real].sum())
            under += int((p.sum(1) < w.sum(1))[real].sum())
        bleu = {k: sacrebleu.corpus_bleu(h, [refs], force=True).score for k, h in hyps.items()}
        print(f"| {density:.2f} | {pred_total / max(want_total, 1):.3f} | {exact / max(slots_total, 1):.3f} | "
              f"{under / len(srcs):.3f} | {bleu['head']:.2f} | {bleu['oracle']:.2f} |")


if __name__ == "__main__":
    main()
