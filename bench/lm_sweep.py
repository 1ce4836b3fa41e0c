"""The weight of an n-gram LM fused into a beam search (eval.lm), chosen on the validation split and then measured
on the test split: BLEU and decoding time per weight, beside the same beam without the LM.

    python bench/lm_sweep.py WORKDIR --lm LM.arpa --weights 0.3,1,2 [--key dat.lm_weight] [--beam 8] \
        [--repeats 3] [--config.KEY=VALUE ...]

WORKDIR decodes with its own config and the overrides (e.g. --config.dat.decode=beam for a DA-Transformer, whose
default decoder is lookahead); --key is the family's weight (`<family>.lm_weight` by default: DA-Transformer's γ on
log10 P_lm, CTC's α on ln P_lm). Each row decodes the whole split at eval.batch_size, the time the median of
--repeats passes after a first one that compiles. The table ends with the test split's BLEU without the LM and with
the weight of the best validation BLEU (docs/language_models.md).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jaxnat.config import apply_override, parse_overrides, workdir_config  # noqa: E402
from jaxnat.data.sources import load_corpus  # noqa: E402
from jaxnat.errors import run_script  # noqa: E402
from jaxnat.evaluation.metrics import bleu, run_bleu_tokenize  # noqa: E402
from jaxnat.provenance import machine  # noqa: E402
from jaxnat.restore import load_translator  # noqa: E402


def decode(workdir: str, overrides: list, lm: str, key: str, weight: float, beam: int, texts: dict,
           repeats: int) -> dict:
    """{split: (BLEU, seconds a pass)} of the workdir decoding each split with the LM at ``weight`` ('' : none)."""
    config = workdir_config(workdir)
    for k, value in parse_overrides(overrides):
        apply_override(config, k, value)
    config.eval.beam_size, config.eval.lm = beam, lm
    if lm:
        apply_override(config, key, str(weight))
    translator = load_translator(config, workdir)
    out = {}
    for split, (srcs, refs) in texts.items():
        translator.translate(srcs, beam_size=beam)  # compiles every shape
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            hyps = [o["hyp"] for o in translator.translate(srcs, beam_size=beam)]
            times.append(time.perf_counter() - start)
        out[split] = (bleu(hyps, refs, run_bleu_tokenize(config))[0], statistics.median(times))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workdir")
    parser.add_argument("--lm", required=True, help="an ARPA file (--mode lm writes one)")
    parser.add_argument("--weights", required=True, help="comma list of weights tried on the validation split")
    parser.add_argument("--key", default="", help="the weight's config key (default <family>.lm_weight)")
    parser.add_argument("--beam", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args, overrides = parser.parse_known_args()
    weights = [float(w) for w in args.weights.split(",")]
    logging.basicConfig(level=logging.WARNING)
    config = workdir_config(args.workdir)
    key = args.key or f"{config.model.name}.lm_weight"
    corpus = load_corpus(config.data)
    test = [s for s in corpus if s not in ("train", "valid")][0]
    valid = {"valid": corpus["valid"]}
    rows = [("none", decode(args.workdir, overrides, "", key, 0.0, args.beam, valid, args.repeats)["valid"])]
    for w in weights:
        rows.append((w, decode(args.workdir, overrides, args.lm, key, w, args.beam, valid, args.repeats)["valid"]))
    best = max(rows[1:], key=lambda r: r[1][0])[0]
    print(f"| {key} | valid BLEU | seconds a pass over valid ({len(corpus['valid'][0])} sentences, beam {args.beam}) |")
    print("|---|---|---|")
    for w, (score, seconds) in rows:
        print(f"| {w} | {score:.2f} | {seconds:.2f} |")
    tests = {test: corpus[test]}
    plain = decode(args.workdir, overrides, "", key, 0.0, args.beam, tests, args.repeats)[test]
    fused = decode(args.workdir, overrides, args.lm, key, best, args.beam, tests, args.repeats)[test]
    print(f"\n{test}: BLEU {plain[0]:.2f} without the LM ({plain[1]:.2f} s), {fused[0]:.2f} with it at {key}={best} "
          f"({fused[1]:.2f} s)")
    print(machine())


if __name__ == "__main__":
    run_script(main)
