"""A jaxnat AR model beside itself exported to CTranslate2 (`--mode export`), float32 and int8 weights: greedy and
beam-4 search, BLEU and agreement on a whole test split, batch-1 latency and batch-64 throughput.

    python bench/vs_ctranslate2.py WORKDIR --data-dir ../shared/data/multi30k --split test_2016_flickr --src en \
        --tgt de [--latency 100] [--pairs 3] [--cores 2]

WORKDIR is exported twice (float32, int8) into a temporary directory. Everything runs in this process, pinned to the
last --cores CPUs (CTranslate2 with that many intra-op threads, XLA's pool sized by the same affinity), one system at
a time. Each system is given the same pieces: the split's sources cut by jaxnat (`Translator.encode`), as
CTranslate2's README cuts them; each timed span is pieces in, pieces out, batching included (jaxnat:
`Translator.translate_ids`; CTranslate2: `translate_batch` with the options of the README the export writes: jaxnat's
length limit, `patience=2`, the tokens jaxnat never emits suppressed). Outputs are joined by jaxnat's tokenizer and
scored with sacreBLEU against the split's references.

First pass: every system decodes the whole split at batch 64 (jaxnat's compilation; BLEU; outputs identical to
jaxnat's, piece for piece) and the --latency first sentences at batch 1. Then --pairs rounds, each timing every system
in turn on both workloads: the medians, and CTranslate2's time over jaxnat's per round, median.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vs_fairseq import machine_line, pin, read_gz  # noqa: E402

ROWS = {"greedy": 1, "beam 4": 4}
SYSTEMS = ("jaxnat", "ct2 float32", "ct2 int8")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workdir")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--split", required=True)
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--latency", type=int, default=100, help="sentences timed at batch 1")
    parser.add_argument("--pairs", type=int, default=3, help="timed rounds")
    parser.add_argument("--cores", type=int, default=None, help="pin to the last N CPUs (default: all allowed)")
    args = parser.parse_args(argv)
    cpus = pin(args.cores)

    import ctranslate2
    import sacrebleu

    from jaxnat.config import workdir_config
    from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID
    from jaxnat.exporters import export
    from jaxnat.exporters.ctranslate2 import SUPPRESSED
    from jaxnat.restore import load_translator

    config = workdir_config(args.workdir)
    translator = load_translator(config, args.workdir)
    tok = translator.tokenizer
    sources = read_gz(os.path.join(args.data_dir, f"{args.split}.{args.src}.gz"))
    refs = read_gz(os.path.join(args.data_dir, f"{args.split}.{args.tgt}.gz"))
    src_ids, _ = translator.encode(sources)
    pieces = [[tok.id_to_piece(i, "src") for i in row if i not in (BOS_ID, EOS_ID, PAD_ID)] for row in src_ids]
    never = [[tok.id_to_piece(i, "tgt")] for i in SUPPRESSED]
    extra = 1 + bool(translator.spec.cfg.source_bos)
    e = config.eval

    engines = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, quantization in (("ct2 float32", "float32"), ("ct2 int8", "int8")):
            at = os.path.join(tmp, quantization)
            export(config, args.workdir, f"ctranslate2:{at}", quantization)
            engines[name] = ctranslate2.Translator(at, device="cpu", intra_threads=len(cpus), inter_threads=1)

    def decode(system: str, beam: int, which: list[int], batch: int) -> list[list[int]]:
        """The output ids of the sentences ``which``, decoded in batches of ``batch``."""
        if system == "jaxnat":
            out = translator.translate_ids([src_ids[i] for i in which], beam, batch)
            return [[t for t in o["tokens"].tolist() if t not in (BOS_ID, EOS_ID, PAD_ID)] for o in out]
        outs = []
        for start in range(0, len(which), batch):
            chunk = [pieces[i] for i in which[start:start + batch]]
            limit = int(e.max_len_a * (max(map(len, chunk)) + extra) + e.max_len_b)
            results = engines[system].translate_batch(
                chunk, beam_size=beam, patience=2, length_penalty=e.length_penalty, min_decoding_length=0,
                max_decoding_length=limit, suppress_sequences=never, max_batch_size=batch)
            outs += [[tok.piece_id(p, "tgt") for p in r.hypotheses[0]] for r in results]
        return outs

    def timed(system: str, beam: int, workload: str) -> float:
        if workload == "b1":
            began = time.perf_counter()
            for i in range(args.latency):
                decode(system, beam, [i], 1)
            return 1000.0 * (time.perf_counter() - began) / args.latency  # ms a sentence
        began = time.perf_counter()
        decode(system, beam, list(range(len(sources))), 64)
        return len(sources) / (time.perf_counter() - began)  # sentences a second

    quality, times = {}, {}
    for row, beam in ROWS.items():
        ours = None
        for system in SYSTEMS:
            began = time.perf_counter()
            out = decode(system, beam, list(range(len(sources))), 64)
            decode(system, beam, list(range(args.latency)), 1)
            first = time.perf_counter() - began
            ours = out if system == "jaxnat" else ours
            hyps = [tok.decode(o + [EOS_ID], "tgt") for o in out]
            quality[row, system] = (sacrebleu.corpus_bleu(hyps, [refs]).score, sum(a == b for a, b in zip(out, ours)),
                                    first)
    for _ in range(args.pairs):
        for row, beam in ROWS.items():
            for workload in ("b1", "b64"):
                for system in SYSTEMS:
                    times.setdefault((row, workload, system), []).append(timed(system, beam, workload))

    print(f"\n{machine_line(cpus)}; {len(sources)} sentences of {args.split}, {args.latency} at batch 1, "
          f"{args.pairs} rounds")
    print("\n| search | system | BLEU | outputs identical to jaxnat's | ms a sentence, batch 1 | sentences/s, batch 64 "
          "| batch 1 time / jaxnat's | batch 64 throughput / jaxnat's |")
    print("|---|---|---|---|---|---|---|---|")
    for row in ROWS:
        for system in SYSTEMS:
            bleu, same, _ = quality[row, system]
            b1, b64 = (statistics.median(times[row, w, system]) for w in ("b1", "b64"))
            ratios = [statistics.median(a / b for a, b in zip(times[row, w, system], times[row, w, "jaxnat"]))
                      for w in ("b1", "b64")]
            print(f"| {row} | {system} | {bleu:.2f} | {same}/{len(sources)} | {b1:.2f} | {b64:.1f} | {ratios[0]:.2f} "
                  f"| {ratios[1]:.2f} |")
    print("\nFirst pass (jaxnat: compilation), seconds: " + "; ".join(
        f"{row} {system} {quality[row, system][2]:.1f}" for row in ROWS for system in SYSTEMS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
