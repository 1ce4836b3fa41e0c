"""Training speed side by side with fairseq: each family's Multi30k config through jaxnat's command line, and
fairseq 0.12.2's AR Transformer and CMLM on the same data, vocabulary, model sizes and batch size, in turn.

    bash tools/reference_env.sh        # once: fairseq in .refenv/ (only for the fairseq rows)
    python bench/train_throughput.py --data-dir ../shared/data/multi30k --work /tmp/throughput \\
        [--families ar,cmlm,levt,editor,nat,ctc,dat,vecconst] [--fairseq ar,cmlm] [--steps 60] [--window 20] \\
        [--repeats 3] [--pairs-dir PAIRS]
    python bench/train_throughput.py --first-step multi30k,demo [--pairs-dir PAIRS] [--repeats 1]

jaxnat: `python -m jaxnat.main --config configs/<family>/multi30k.py` with the persistent compilation cache off
(so the time to the first step includes compiling), stopped once the last log window is out (no evaluation).
Its log gives the time to the first step and, per window of --window steps, the target tokens/s and the MFU
(jaxnat/training/flops.py: XLA's FLOP count of the step less the padding share, against the float32 matmul peak
the run measured at its start); the first window (warm-up) is dropped, and --steps is a multiple of --window.
fairseq: `fairseq_cli.train` under .refenv/bin/python, `--cpu`, the same model (d 256, FFN 1024, 4 heads, 3+3
layers, shared embeddings, dropout 0.3/0.1/0.1, label smoothing 0.1, Adam, inverse-sqrt warm-up), `--max-tokens
4096` (jaxnat's batches hold 4096 slots a side), on the same SentencePiece pieces binarised with jaxnat's
vocabulary as its dictionary; its `wps` per window is target tokens/s, as jaxnat counts them (EOS in, BOS out).
fairseq's MFU is its tokens/s times jaxnat's FLOPs per target token of the same model (the jaxnat run's MFU ×
peak / tokens/s), against the same peak: the two MFUs compare as the two token rates do. fairseq's LevT cannot
train here (its oracle, the C++ libnat, is not in fairseq's PyPI package), so LevT and EDITOR have no fairseq row.
Runs alternate (jaxnat family by family, then fairseq, per repeat), both using every core; medians over repeats.
The machine's speed drifts by ±10% over minutes, so with `ar` among the families an AR run comes before every other
family's and after the last: a family's "÷ AR's" is its FLOP rate over the mean of the two AR runs either side of it
(the median of those ratios over repeats), and AR's row is the median of all its runs.
--first-step times only what a user waits before anything trains: each family's configs/<family>/<name>.py through
the plain command (its own SentencePiece trained, the compilation cache off), from the command's start to the first
train step its log reports; vecconst's Multi30k config needs its constraint pairs (`python -m jaxnat.data.alignment`).
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from jaxnat.errors import run_script  # noqa: E402

FAMILIES = ("ar", "cmlm", "levt", "editor", "nat", "ctc", "dat", "vecconst")
# fairseq's model for a jaxnat row: (its arguments, the jaxnat row whose FLOPs per token it is credited with)
MODEL = ["--encoder-layers", "3", "--decoder-layers", "3", "--encoder-embed-dim", "256", "--decoder-embed-dim", "256",
         "--encoder-ffn-embed-dim", "1024", "--decoder-ffn-embed-dim", "1024", "--encoder-attention-heads", "4",
         "--decoder-attention-heads", "4", "--share-all-embeddings", "--dropout", "0.3", "--attention-dropout", "0.1",
         "--activation-dropout", "0.1", "--max-source-positions", "128", "--max-target-positions", "128"]
TRAIN = ["--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "1e-3", "--lr-scheduler", "inverse_sqrt",
         "--warmup-updates", "1000", "--max-tokens", "4096", "--cpu", "--log-format", "simple", "--disable-validation",
         "--no-save", "--num-workers", "0", "--seed", "1", "--no-progress-bar"]
FAIRSEQ = {
    "ar": ["--task", "translation", "--arch", "transformer", "--criterion", "label_smoothed_cross_entropy",
           "--label-smoothing", "0.1", "--weight-decay", "0.0001"],
    # fairseq's CMLM: the plain model of the CMLMC paper's ablation (no RevealPosition, no correction loss)
    "cmlm": ["--task", "translation_lev", "--noise", "random_mask", "--arch", "cmlm_transformer", "--criterion",
             "nat_loss", "--label-smoothing", "0.1", "--length-loss-factor", "0.1", "--apply-bert-init",
             "--weight-decay", "0.01"],
}
# jaxnat's plain CMLM, the row fairseq's CMLM is compared with (configs/cmlm/multi30k.py says these switches)
PLAIN_CMLM = ["--config.cmlm.masked_attn=false", "--config.cmlm.concat_pe=false", "--config.cmlm.correction=false",
              "--config.cmlm.length_prediction=pooled"]
WINDOW_LINE = re.compile(r"step (\d+): .* ([\d.]+) tok/s MFU ([\d.]+)% of ([\d.]+) TFLOP/s")
FIRST_LINE = re.compile(r"first train step done ([\d.]+) s")
FAIRSEQ_LINE = re.compile(r"train_inner .*wps=([\d.]+).*num_updates=(\d+)")


def prepare(data_dir: str, work: str, fairseq: bool = True) -> tuple[str, str]:
    """(jaxnat workdir holding the SentencePiece model every run shares, fairseq's binarised data directory: made
    only for ``fairseq`` rows, which need .refenv)."""
    from jaxnat.config import build_config
    from jaxnat.data.tokenizer import Tokenizer
    from jaxnat.training.trainer import Trainer

    spm_run, binary = os.path.join(work, "spm"), os.path.join(work, "fairseq-bin")
    # the AR config's joint 8k model, trained as a run would (again where an interrupted one left no model)
    if not Tokenizer.exists(spm_run):
        Trainer(build_config(os.path.join(ROOT, "configs/ar/multi30k.py"), [f"--config.data.dir={data_dir}"]),
                spm_run)
    if not fairseq or os.path.isfile(os.path.join(binary, "train.en-de.de.bin")):
        return spm_run, binary
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=os.path.join(spm_run, "spm", "joint.model"))
    text = os.path.join(work, "fairseq-text")
    os.makedirs(text, exist_ok=True)
    for lang in ("en", "de"):
        with gzip.open(os.path.join(data_dir, f"train.{lang}.gz"), "rt", encoding="utf-8") as f:
            lines = [" ".join(sp.encode(line.strip(), out_type=str)) + "\n" for line in f]
        with open(os.path.join(text, f"train.{lang}"), "w", encoding="utf-8") as out:
            out.writelines(lines)
        with open(os.path.join(text, f"valid.{lang}"), "w", encoding="utf-8") as out:  # fairseq wants one
            out.writelines(lines[:100])
    # fairseq's dictionary: jaxnat's pieces after its six reserved ids, in id order; fairseq puts its own four
    # specials first and pads the table to a multiple of 8, giving the same 8000 rows
    with open(os.path.join(text, "dict.txt"), "w", encoding="utf-8") as out:
        for i in range(6, sp.get_piece_size()):
            out.write(f"{sp.id_to_piece(i)} 1\n")
    dictionary = os.path.join(text, "dict.txt")
    subprocess.run([reference_python(), "-m", "fairseq_cli.preprocess", "--source-lang", "en", "--target-lang", "de",
                    "--trainpref", os.path.join(text, "train"), "--validpref", os.path.join(text, "valid"),
                    "--destdir", binary, "--srcdict", dictionary, "--tgtdict", dictionary, "--workers", "2"],
                   check=True, stdout=subprocess.DEVNULL)
    return spm_run, binary


def reference_python() -> str:
    python = os.path.join(ROOT, ".refenv", "bin", "python")
    if not os.path.isfile(python):
        raise SystemExit("error: the fairseq rows need .refenv (bash tools/reference_env.sh)")
    return python


def watch(command: list[str], env: dict, until, log_path: str) -> list[str]:
    """Runs ``command``, keeping its output in ``log_path``, until ``until(line)`` holds for a line (then stops
    it) or it exits; returns the lines. A run that exits without reaching that line is an error."""
    lines = []
    with open(log_path, "w") as log, subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                                                      stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:
            log.write(line)
            log.flush()
            lines.append(line)
            if until(line):
                proc.kill()  # no evaluation, no graceful stop: the figures are out
                break
        proc.wait()
    if not any(until(line) for line in lines):
        raise SystemExit(f"error: {' '.join(command[:6])} … stopped before its last window; log: {log_path}")
    return lines


def jaxnat_run(family: str, extra: list[str], args, spm_run: str, workdir: str) -> dict:
    """{first_step_s, tok_s, mfu, peak} of one jaxnat training run (medians over its windows after the first)."""
    shutil.rmtree(workdir, ignore_errors=True)
    config = os.path.join(ROOT, "configs", family, "multi30k.py")
    command = [sys.executable, "-m", "jaxnat.main", "--config", config, "--workdir", workdir,
               f"--config.data.dir={args.data_dir}", f"--config.data.spm_from={spm_run}",
               f"--config.train.steps={args.steps}", f"--config.train.log_every={args.window}",
               "--config.train.eval_every=1000000000", "--config.train.checkpoint_every=1000000000",
               # a short run's learning rate is no part of its speed; a cosine schedule needs warm-up < steps
               f"--config.train.warmup_steps={args.steps // 2}", *extra]
    if family == "vecconst":  # stage 1 from scratch: its speed is that of stage 2 from an AR run
        command += [f"--config.data.pairs_dir={args.pairs_dir}", "--config.train.init_from="]
    env = dict(os.environ, JAXNAT_COMPILATION_CACHE="off")
    last = f"step {args.steps}:"
    lines = watch(command, env, lambda line: last in line, workdir + ".log")
    first = [float(m.group(1)) for m in map(FIRST_LINE.search, lines) if m]
    # the first window holds the warm-up; none beside the train programs' compiling
    windows = [m for m in [m for m in map(WINDOW_LINE.search, lines) if m][1:] if "compiling beside it" not in m.string]
    if not windows:
        raise SystemExit(f"error: {family}: no log window after the first beside no compiling; more --steps than "
                         f"--window {args.window}; log: {workdir}.log")
    return {"first_step_s": first[0], "tok_s": statistics.median(float(m.group(2)) for m in windows),
            "mfu": statistics.median(float(m.group(3)) for m in windows) / 100,
            "peak": statistics.median(float(m.group(4)) for m in windows)}


def first_step_run(family: str, name: str, args, workdir: str) -> float:
    """Seconds from the command's start to its first train step: `configs/<family>/<name>.py` as a user runs it
    (its own vocabulary trained, the compilation cache off), stopped there."""
    shutil.rmtree(workdir, ignore_errors=True)
    command = [sys.executable, "-m", "jaxnat.main", "--config", os.path.join(ROOT, "configs", family, f"{name}.py"),
               "--workdir", workdir, "--config.train.init_from="]
    if name != "demo":  # the demos train on the embedded corpus
        command.append(f"--config.data.dir={args.data_dir}")
    if family == "vecconst" and name != "demo":
        command.append(f"--config.data.pairs_dir={args.pairs_dir}")
    lines = watch(command, dict(os.environ, JAXNAT_COMPILATION_CACHE="off"), FIRST_LINE.search, workdir + ".log")
    return float(next(m.group(1) for m in map(FIRST_LINE.search, lines) if m))


def first_steps(args, families: list[str], names: list[str]) -> None:
    from jaxnat.provenance import machine

    runs = {(f, n): [] for n in names for f in families}
    for r in range(args.repeats):
        for family, name in runs:
            runs[family, name].append(first_step_run(family, name, args, os.path.join(args.work, f"{family}-{name}")))
            print(f"repeat {r} {family}/{name}: first step after {runs[family, name][-1]:.1f} s", flush=True)
    print("\n| config | first step (s) |\n|---|---|")
    for (family, name), seconds in runs.items():
        print(f"| `configs/{family}/{name}.py` | {statistics.median(seconds):.1f} |")
    print(f"\nmedians of {args.repeats} repeats; compilation cache off; {machine()}")


def fairseq_run(model: str, args, binary: str, log_path: str) -> float:
    """fairseq's median target tokens/s over its windows after the first."""
    # --save-dir: fairseq makes it even with --no-save, else ./checkpoints in the checkout
    command = [reference_python(), "-m", "fairseq_cli.train", binary, *FAIRSEQ[model], *MODEL, *TRAIN,
               "--max-update", str(args.steps), "--log-interval", str(args.window),
               "--save-dir", os.path.join(args.work, f"fairseq-{model}-checkpoints")]
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    last = lambda line: bool((m := FAIRSEQ_LINE.search(line)) and int(m.group(2)) >= args.steps)  # noqa: E731
    lines = watch(command, env, last, log_path)
    return statistics.median([float(m.group(1)) for m in map(FAIRSEQ_LINE.search, lines) if m][1:])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=os.path.join(ROOT, "..", "shared", "data", "multi30k"))
    parser.add_argument("--work", default="/tmp/jaxnat-throughput")
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--fairseq", default="ar,cmlm", help="fairseq's models beside them ('' for none)")
    parser.add_argument("--steps", type=int, default=60, help="train steps a run (a multiple of --window)")
    parser.add_argument("--window", type=int, default=20, help="steps a log window (the first one dropped)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--first-step", default="", metavar="NAMES",
                        help="comma list of config names (multi30k, demo): only the time from each family's "
                             "configs/<family>/<name>.py command to its first train step, with no throughput")
    parser.add_argument("--pairs-dir", help="vecconst's Multi30k constraint pairs (python -m jaxnat.data.alignment)")
    args = parser.parse_args()
    args.data_dir = os.path.abspath(args.data_dir)
    # fairseq logs only whole windows: a last part window never came, and its run failed after every jaxnat run
    if args.repeats < 1 or args.window < 1 or (not args.first_step and (args.steps <= args.window
                                                                        or args.steps % args.window)):
        raise SystemExit("error: --repeats and --window must be at least 1, and --steps a multiple of --window above "
                         "it (the first window, the warm-up, is dropped; fairseq logs whole windows only)")
    families = [f for f in args.families.split(",") if f]
    fairseq = [m for m in args.fairseq.split(",") if m]
    for name in families + fairseq:
        if name not in FAMILIES:
            raise SystemExit(f"error: unknown family {name!r} (one of {', '.join(FAMILIES)})")
    os.makedirs(args.work, exist_ok=True)
    names = args.first_step.split(",") if args.first_step else ["multi30k"]
    if "vecconst" in families and names != ["demo"] and not args.pairs_dir:
        raise SystemExit("error: vecconst's Multi30k config needs --pairs-dir")
    if args.first_step:
        return first_steps(args, families, names)
    spm_run, binary = prepare(args.data_dir, args.work, bool(fairseq))
    rows = {f: [] for f in families}  # jaxnat rows; "cmlm (plain)" joins them where fairseq's CMLM runs
    if "cmlm" in fairseq:
        rows["cmlm (plain CMLM)"] = []
    theirs = {m: [] for m in fairseq}
    vs_ar = {name: [] for name in rows if name != "ar"}  # each run's rate over its neighbouring AR runs' mean
    rate_of = lambda run: run["mfu"] * run["peak"]  # noqa: E731
    for r in range(args.repeats):
        order = [n for name in rows if name != "ar" for n in ("ar", name)] + ["ar"] if "ar" in rows else list(rows)
        for i, name in enumerate(order):
            family, extra = ("cmlm", PLAIN_CMLM) if name.startswith("cmlm (") else (name, [])
            rows[name].append(jaxnat_run(family, extra, args, spm_run, os.path.join(args.work, f"{family}-{r}-{i}")))
            print(f"repeat {r} jaxnat {name}: {rows[name][-1]}", flush=True)
            if name == "ar" and i > 0:  # the family before it now has an AR run on either side
                before, after = rows["ar"][-2:]
                vs_ar[order[i - 1]].append(rate_of(rows[order[i - 1]][-1]) / ((rate_of(before) + rate_of(after)) / 2))
                print(f"repeat {r} {order[i - 1]} ÷ the AR runs either side: {vs_ar[order[i - 1]][-1]:.3f}", flush=True)
        for model in fairseq:
            theirs[model].append(fairseq_run(model, args, binary, os.path.join(args.work, f"fairseq-{model}-{r}.log")))
            print(f"repeat {r} fairseq {model}: {theirs[model][-1]:.0f} tok/s", flush=True)

    from jaxnat.provenance import machine

    med = lambda runs, key: statistics.median(run[key] for run in runs)  # noqa: E731
    peak = statistics.median(run["peak"] for runs in rows.values() for run in runs)
    # a run's rate: its real tokens' FLOPs a second (MFU x the peak that run measured, since the measured peak moves
    # from run to run); the MFUs below are these rates against the runs' median peak
    rate = lambda runs: statistics.median(map(rate_of, runs))  # noqa: E731
    print("\n| model | first step (s) | jaxnat tok/s | jaxnat GFLOP/s | jaxnat MFU | fairseq tok/s | fairseq MFU | "
          "jaxnat / fairseq |")
    print("|---|---|---|---|---|---|---|---|")
    for name, runs in rows.items():
        tok_s, flops = med(runs, "tok_s"), rate(runs)
        model = "cmlm" if name.startswith("cmlm (") else name if name == "ar" else None
        fs = (f"| {statistics.median(theirs[model]):.0f} | "
              f"{statistics.median(theirs[model]) * flops / tok_s / peak:.1%} | "
              f"{tok_s / statistics.median(theirs[model]):.2f} |") if model in theirs else "| – | – | – |"
        ratio = f" ({statistics.median(vs_ar[name]):.2f}× AR's)" if vs_ar.get(name) else ""
        print(f"| {name} | {med(runs, 'first_step_s'):.0f} | {tok_s:.0f} | {1000 * flops:.1f} | "
              f"{flops / peak:.1%}{ratio} {fs}")
    print(f"\nmedians of {args.repeats} repeats, {args.steps} steps each (windows of {args.window}, the first "
          f"dropped); MFU against the median measured peak {peak:.3f} TFLOP/s; {machine()}")


if __name__ == "__main__":
    run_script(main)
