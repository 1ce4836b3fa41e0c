"""A jaxnat AR model beside itself exported to CTranslate2 (`--mode export`), float32 and int8 weights: greedy and
beam-4 search, BLEU and agreement on a whole test split, batch-1 latency and batch-64 throughput.

    python bench/vs_ctranslate2.py WORKDIR --data-dir ../shared/data/multi30k --split test_2016_flickr --src en \
        --tgt de [--sentences 0] [--latency 100] [--pairs 3] [--cores 2] [--max-new 0] [--search-rules jaxnat]

WORKDIR is exported twice (float32, int8) into a temporary directory. jaxnat decodes in this process, CTranslate2 in a
worker process of its own (`worker`: ctranslate2 alone imported, the model loaded once, one request at a time over a
pipe; in jaxnat's process XLA's idle thread pool took CTranslate2's cores: 4.6× slower at batch 1), both pinned to the
last --cores CPUs (CTranslate2 with that many intra-op threads, XLA's pool sized by the same affinity), so that one
system computes at a time (a second's pause between two timings: `PAUSE`). Each is given the same pieces: the split's
sources cut by jaxnat (`Translator.encode`), as CTranslate2's README cuts them; each side times the same span, pieces
in, pieces out, batching included (jaxnat: `Translator.translate_ids`; CTranslate2: `translate_batch` with the
options of the README the export writes: jaxnat's length limit, the longest source's in a batch, `patience=2`, the
tokens jaxnat never emits suppressed). Each is handed the whole split at batch 64 and cuts it into batches of
sentences of like length itself (CTranslate2's length limit: then the split's longest source's). Outputs are joined
by jaxnat's tokenizer and scored with sacreBLEU against the split's references.

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
# seconds between two timings: the thread pools of the system timed before stop spinning (OpenMP's and Eigen's wait
# on their cores a while after their work; timed at once, the next system shared its cores with them)
PAUSE = 1.0


def worker(model: str, threads: int) -> int:
    """Reads the settings and the sources' pieces (a JSON line), then answers each request line {"beam", "batch",
    "which": [first, end]} with {"seconds", "outputs"}: the sentences decoded by the model in one call, which cuts
    them into batches of at most "batch" (of sentences of like length, as jaxnat's `translate_ids`)."""
    import json

    import ctranslate2

    setup = json.loads(sys.stdin.readline())
    engine = ctranslate2.Translator(model, device="cpu", intra_threads=threads, inter_threads=1)
    sources, never, (a, b), extra = setup["pieces"], setup["never"], setup["max_len"], setup["extra"]
    for line in sys.stdin:
        request = json.loads(line)
        first, end = request["which"]
        began = time.perf_counter()
        chunk = sources[first:end]
        results = engine.translate_batch(
            chunk, beam_size=request["beam"], patience=2, length_penalty=setup["length_penalty"],
            min_decoding_length=0, max_decoding_length=int(a * (max(map(len, chunk)) + extra) + b),
            suppress_sequences=never, max_batch_size=request["batch"])
        outputs = [r.hypotheses[0] for r in results]
        print(json.dumps({"seconds": time.perf_counter() - began, "outputs": outputs}), flush=True)
    return 0


class Worker:
    """A CTranslate2 model in its worker process."""

    def __init__(self, model: str, threads: int, setup: dict):
        import json
        import subprocess

        self.json = json
        self.process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "worker", model, str(threads)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.ask(setup, answer=False)

    def ask(self, request: dict, answer: bool = True):
        self.process.stdin.write(self.json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self.json.loads(self.process.stdout.readline()) if answer else None

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        return worker(argv[1], int(argv[2]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workdir")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--split", required=True)
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--sentences", type=int, default=0, help="the split's first N sentences (0: all)")
    parser.add_argument("--latency", type=int, default=100, help="sentences timed at batch 1")
    parser.add_argument("--pairs", type=int, default=3, help="timed rounds")
    parser.add_argument("--search-rules", choices=("jaxnat", "fairseq"), default="jaxnat",
                        help="jaxnat's eval.search_rules: fairseq's stops a beam once beam-size hypotheses finished "
                             "(jaxnat's: once none alive can win)")
    parser.add_argument("--max-new", type=int, default=0,
                        help="at most N tokens an output, EOS included, for every sentence (eval.max_len_a=0, "
                             "max_len_b=N-1: a random model writes to its limit, the same on both sides); 0: the "
                             "workdir's limit")
    parser.add_argument("--cores", type=int, default=None, help="pin to the last N CPUs (default: all allowed)")
    args = parser.parse_args(argv)
    if min(args.latency, args.pairs) < 1 or min(args.sentences, args.max_new) < 0:
        raise SystemExit("error: --latency and --pairs take 1 or more, --sentences and --max-new 0 or more")
    cpus = pin(args.cores)

    import sacrebleu

    from jaxnat.config import workdir_config
    from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID
    from jaxnat.exporters import export
    from jaxnat.exporters.ctranslate2 import SUPPRESSED
    from jaxnat.restore import load_translator

    config = workdir_config(args.workdir)
    config.eval.search_rules = args.search_rules
    if args.max_new:
        config.eval.max_len_a, config.eval.max_len_b = 0.0, args.max_new - 1
    translator = load_translator(config, args.workdir)
    tok = translator.tokenizer
    sources = read_gz(os.path.join(args.data_dir, f"{args.split}.{args.src}.gz"))
    refs = read_gz(os.path.join(args.data_dir, f"{args.split}.{args.tgt}.gz"))
    if args.sentences:
        sources, refs = sources[:args.sentences], refs[:args.sentences]
    src_ids, _ = translator.encode(sources)
    pieces = [[tok.id_to_piece(i, "src") for i in row if i not in (BOS_ID, EOS_ID, PAD_ID)] for row in src_ids]
    never = [[tok.id_to_piece(i, "tgt")] for i in SUPPRESSED]
    extra = 1 + bool(translator.spec.cfg.source_bos)
    e = config.eval

    setup = {"pieces": pieces, "never": never, "max_len": [e.max_len_a, e.max_len_b], "extra": extra,
             "length_penalty": e.length_penalty}
    workers = {}
    tmp = tempfile.TemporaryDirectory()
    for name, quantization in (("ct2 float32", "float32"), ("ct2 int8", "int8")):
        at = os.path.join(tmp.name, quantization)
        export(config, args.workdir, f"ctranslate2:{at}", quantization)
        workers[name] = Worker(at, len(cpus), setup)

    def decode(system: str, beam: int, n: int, batch: int) -> tuple[float, list[list[int]]]:
        """(seconds, the output ids) of the first ``n`` sentences decoded in batches of ``batch``, or of the
        ``-n``-th alone (batch 1)."""
        which = (0, n) if n > 0 else (-n, -n + 1)
        if system == "jaxnat":
            began = time.perf_counter()
            out = translator.translate_ids(src_ids[which[0]:which[1]], beam, batch)
            seconds = time.perf_counter() - began
            return seconds, [[t for t in o["tokens"].tolist() if t not in (BOS_ID, EOS_ID, PAD_ID)] for o in out]
        answer = workers[system].ask({"beam": beam, "batch": batch, "which": which})
        return answer["seconds"], [[tok.piece_id(p, "tgt") for p in o] for o in answer["outputs"]]

    def timed(system: str, beam: int, workload: str) -> float:
        time.sleep(PAUSE)
        if workload == "b1":  # ms a sentence
            return 1000.0 * sum(decode(system, beam, -i, 1)[0] for i in range(args.latency)) / args.latency
        return len(sources) / decode(system, beam, len(sources), 64)[0]  # sentences a second

    quality, times = {}, {}
    for row, beam in ROWS.items():
        ours = None
        for system in SYSTEMS:
            began = time.perf_counter()
            out = decode(system, beam, len(sources), 64)[1]
            decode(system, beam, args.latency, 1)
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

    for w in workers.values():
        w.close()
    tmp.cleanup()
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
    from jaxnat.errors import run_script

    run_script(main)
