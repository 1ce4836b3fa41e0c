"""Issue 48's GPU figures in one command: per family, the time to the first train step, steady training speed,
MFU and decoding speed of its GPU config; and the edit models' step cost against the AR model's on one batch.

    python bench/gpu_figures.py --data-dir .gpu/multi30k --pairs-dir .gpu/pairs --out $OUT \
        [--families ar,levt,editor,cmlm,ctc,dat,nat,vecconst] [--steps 150] [--autotune -1] [--budget SECONDS]
        [--step-cost] [--variant FAMILY:KEY=VALUE[,KEY=VALUE] ...]
    python bench/gpu_figures.py --data-dir .gpu/multi30k --out DIR --step-flops

Each family trains its `configs/<family>/multi30k_gpu.py` for --steps steps in a fresh workdir, as a user's
command would (`python -m jaxnat.main`, the persistent compilation cache off, so every program compiles), then
evaluates on the first test split: latency at batch 1 and throughput at eval.throughput_batch (128). Raw
Multi30k stands in for the distilled data of LevT, EDITOR and NAT (speed does not depend on it); the vectorized
model starts from the AR run. Read from each run:

  first_step_s   — seconds from the command's start to its first train step (the log's line)
  tokens_per_s   — real target tokens a second, median of the log windows after the first
  mfu            — model FLOPs utilisation of those windows (the trainer's, against the peak it measures: XLA's
                   FLOP count of the step, for a scanned model that of its unrolled twin); marked (6·N·T) where
                   the run had no count and estimated 6 · parameters · tokens
  latency_ms, sentences_per_s — from metrics.json

Then `--step-cost` times the AR, LevT and EDITOR train steps side by side on the same batches (one bucket shape,
jit'd, compilation excluded, median of alternating repeats) beside each step's arithmetic (XLA's FLOP count, also
with the papers' roll-in; `--step-flops` gives it alone, on any machine), and each `--variant` runs its family
once more with those config overrides, e.g. `ar:train.xla_gpu_autotune_level=4` (XLA's GPU autotuner at its
default level, against off, which `--autotune 0` sets for every other run, the step cost's included: what
autotuning costs in time to the first step and gains in speed), `ar:train.prng_impl=rbg` (dropout's random
bits). The first GPU call (carrying .gpu; the wheels installed as bench/gpu_prepare.sh says) runs

    JAXNAT_COMMIT=<this checkout's commit> PYTHONPATH=/tmp/site:$PWD python3 bench/gpu_figures.py \
        --data-dir .gpu/multi30k --pairs-dir .gpu/pairs --out $OUT --budget 540 \
        --step-cost --autotune 0 --variant ar:train.xla_gpu_autotune_level=4 --variant ar:train.prng_impl=rbg

with the autotuner off for the families because, on, no train program of the three GPU sessions so far finished
compiling within minutes (docs/benchmarks.md, "On a GPU"): every family's figures first (by default the AR model
and the edit models before the others: a budget that runs out cuts the families that fewer of the GPU issue's bars
read), then what it buys. The copy there has no .git: JAXNAT_COMMIT names the commit in the table's last line.
Results go to OUT/figures.json after every family (a run cut short keeps what it measured) and a Markdown table to
OUT/figures.md, ending with the line that names the machine and the commit; each run's log to OUT/logs.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from jaxnat.errors import run_script  # noqa: E402
from jaxnat.models import FAMILIES  # noqa: E402  (listed, not imported: the driver starts no JAX)


def family_overrides(family: str, args, workdirs: dict) -> list[str]:
    """The command-line overrides of one family's short run."""
    steps = args.steps
    out = [f"--config.data.dir={args.data_dir}", f"--config.train.steps={steps}",
           f"--config.train.log_every={max(1, steps // 6)}", f"--config.train.eval_every={steps}",
           f"--config.train.checkpoint_every={steps}", "--config.train.valid_bleu_sentences=64",
           "--config.eval.constraints=", "--config.eval.iteration_sweep=", "--config.eval.trace_sentences=0",
           "--config.eval.diagnostic=false",  # the refinement diagnostic's four more decodings: no speed figure
           f"--config.train.xla_gpu_autotune_level={args.autotune}",
           f"--config.train.warmup_steps={min(10, steps // 2)}",  # below the steps, which a cosine decay needs
           "--config.train.init_from="]
    if family == "vecconst":
        out += [f"--config.data.pairs_dir={args.pairs_dir}", f"--config.train.init_from={workdirs['ar']}"]
    if family in ("levt", "editor", "cmlm", "nat") and "ar" in workdirs:  # the AR run's vocabulary, as the
        out += [f"--config.data.spm_from={workdirs['ar']}"]  # Multi30k recipes do (and no second spm training)
    return out + args.overrides


def read_run(workdir: str, log_text: str) -> dict:
    """The figures of one finished (or cut short) run."""
    out = {}
    m = re.search(r"first train step done ([\d.]+) s after the command started", log_text)
    if m:
        out["first_step_s"] = float(m.group(1))
    history = []
    path = os.path.join(workdir, "history.jsonl")
    if os.path.isfile(path):
        with open(path) as f:
            history = [json.loads(line) for line in f if line.strip()]
    # the first window holds the warm-up; none beside the train programs' compiling
    windows = [h for h in [h for h in history if "tokens_per_s" in h][1:] if not h.get("compiling")]
    if windows:
        out["tokens_per_s"] = statistics.median(h["tokens_per_s"] for h in windows)
        if all("mfu" in h for h in windows):
            out["mfu"] = statistics.median(h["mfu"] for h in windows)
    m = re.search(r"MFU [\d.]+% of ([\d.]+) TFLOP/s", log_text)
    if m:
        out["peak_tflops"] = float(m.group(1))
    m = re.search(r"step FLOPs from (.+)", log_text)
    if m:  # XLA's count (every loop's iterations), or 6·params·tokens
        out["flops_from"] = m.group(1).strip()
    m = re.search(r"batch shapes (\[.*?\])", log_text) or re.search(r"rows of (\d+) tokens", log_text)
    if m:
        out["batch"] = m.group(1)
    path = os.path.join(workdir, "metrics.json")
    if os.path.isfile(path):
        with open(path) as f:
            metrics = json.load(f)
        split = next((v for v in metrics.values() if isinstance(v, dict) and "latency_ms" in v), None)
        if split:
            out.update({k: split[k] for k in ("latency_ms", "sentences_per_s", "bleu") if k in split})
    return out


# the train steps whose arithmetic the step cost is read against: each family's GPU config, and the edit models
# with the papers' roll-in (jaxnat's roll-in additions off)
PAPER_ROLL_IN = {f"{family}, the paper's roll-in": (family, [f"--config.{family}.own_insertion_roll_in=0",
                                                             f"--config.{family}.global_shuffle=0"])
                 for family in ("levt", "editor")}


def unpacked(family: str) -> list[str]:
    """The override that trains ``family`` on unpacked batches: data.pack=false where it packs (a family that does
    not refuses the key, `jaxnat.config.check_read`)."""
    from jaxnat import models

    return ["--config.data.pack=false"] if "data.pack" in models.family_of(family).reads else []


def step_flops(args, batch: dict, tokenizer) -> dict:
    """{label: TFLOP of one train step on ``batch``} by XLA's count of the lowered program with every loop's
    iterations (`lowered_step_flops`): AR, LevT and EDITOR as configured and with the papers' roll-in. Lowered
    only, not compiled: seconds on any machine."""
    import jax

    from jaxnat.config import build_config
    from jaxnat.models import build_model
    from jaxnat.training.optim import make_optimizer
    from jaxnat.training.trainer import lowered_step_flops

    out = {}
    for label, (family, extra) in {"ar": ("ar", []), "levt": ("levt", []), "editor": ("editor", []),
                                   **PAPER_ROLL_IN}.items():
        config = build_config(os.path.join(ROOT, f"configs/{family}/{args.config_name}.py"),
                              [f"--config.data.dir={args.data_dir}", *unpacked(family), *args.overrides, *extra])
        spec = build_model(config, tokenizer.vocab_size("src"), tokenizer.vocab_size("tgt"),
                           tokenizer.piece_tables("tgt"))
        out[label] = lowered_step_flops(spec, *make_optimizer(config.train), batch, jax.random.PRNGKey(0)) / 1e12
    return out


def step_cost(args, timed: bool = True) -> dict:
    """Seconds per train step of AR, LevT and EDITOR on the same batches ({family: s}), alternating repeats,
    and each step's TFLOP (`step_flops`; only these without ``timed``)."""
    import jax

    from jaxnat.config import build_config
    from jaxnat.data.batching import TrainBatcher
    from jaxnat.main import set_xla_flags
    from jaxnat.training.trainer import Trainer, make_train_step

    times, batches = {}, None
    with tempfile.TemporaryDirectory() as tmp:
        steps = {}
        for family in ("ar", "levt", "editor"):
            config = build_config(os.path.join(ROOT, f"configs/{family}/{args.config_name}.py"),
                                  [f"--config.data.dir={args.data_dir}", *unpacked(family),
                                   f"--config.train.xla_gpu_autotune_level={args.autotune}"] + args.overrides)
            if family == "ar":  # the autotuner's level as the families' runs have it (before the first computation)
                set_xla_flags(config)
            trainer = Trainer(config, os.path.join(tmp, family))
            if batches is None:  # the AR config's batches, unpacked, one shape, for all three models
                batcher = trainer.make_batcher()
                assert isinstance(batcher, TrainBatcher)
                shape = max(batcher.shapes, key=lambda s: s[0] * s[1])
                batches = [batcher.first_batch_of_shape(shape)] * 2
                flops = step_flops(args, batches[0], trainer.tokenizer)
                if not timed:
                    return {"batch_shape": list(shape), "tflop": flops}
            state = trainer.init_state(batches[0])
            step = jax.jit(make_train_step(trainer.spec, trainer.optimizer, trainer.schedule,
                                           trainer.config.train.microbatches), donate_argnums=(0,))
            on_device = [jax.device_put(b) for b in batches]
            key = jax.random.PRNGKey(0)
            state, m = step(state, on_device[0], key)
            jax.block_until_ready(m)
            steps[family] = [step, state, on_device, key]
            times[family] = []
        for _ in range(args.repeats):
            for family, entry in steps.items():
                step, state, on_device, key = entry
                t0 = time.perf_counter()
                for _ in range(5):
                    for b in on_device:
                        state, m = step(state, b, key)
                jax.block_until_ready(m)
                entry[1] = state
                times[family].append((time.perf_counter() - t0) / (5 * len(on_device)))
    return {"batch_shape": list(shape), **{f: statistics.median(t) for f, t in times.items()}, "tflop": flops}


def machine_apart(env: dict) -> str:
    """`jaxnat.provenance.machine()`, asked of a process of its own: JAX's backend started in this driver would hold
    the GPU memory that the runs need."""
    try:
        done = subprocess.run([sys.executable, "-c", "from jaxnat.provenance import machine; print(machine())"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "machine: unknown (no answer within 120 s)"
    last = next((line for line in reversed((done.stdout + done.stderr).splitlines()) if line.strip()), "")
    return last if done.returncode == 0 else f"machine: unknown (exit {done.returncode}: {last})"


def table(figures: dict) -> str:
    runs = [*figures.get("families", {}).items(), *figures.get("variants", {}).items()]
    rows = ["| family | batch | first step (s) | real tok/s | MFU | peak (TFLOP/s) | latency b1 (ms) | sent/s b128 |",
            "|---|---|---|---|---|---|---|---|"] if runs else []
    fmt = lambda v, f: "–" if v is None else f.format(v)  # noqa: E731
    for family, r in runs:
        rows.append(f"| {family} | {r.get('batch', '–')} | {fmt(r.get('first_step_s'), '{:.0f}')} | "
                    f"{fmt(r.get('tokens_per_s'), '{:.0f}')} | {fmt(r.get('mfu'), '{:.1%}')}"
                    f"{' (6·N·T)' if r.get('flops_from', '').startswith('6') else ''} | "
                    f"{fmt(r.get('peak_tflops'), '{:.3g}')} | {fmt(r.get('latency_ms'), '{:.1f}')} | "
                    f"{fmt(r.get('sentences_per_s'), '{:.0f}')} |")
    rows += [f"\n{family}: exit {r['rc']}: {r['error']}" if r["rc"] != "timeout" else f"\n{family}: {r['error']}"
             for family, r in runs if r.get("error")]
    cost = figures.get("step_cost")
    if cost and "ar" in cost:
        rows += ["", f"Train step on the same {cost['batch_shape']} batches (s): "
                 + ", ".join(f"{f} {cost[f]:.4f} ({cost[f] / cost['ar']:.2f}× AR)" for f in ("ar", "levt", "editor"))]
    if cost and "tflop" in cost:
        flops = cost["tflop"]
        rows += ["", f"One step's arithmetic on {cost['batch_shape']} batches (TFLOP, XLA's count): "
                 + ", ".join(f"{f} {v:.3g} ({v / flops['ar']:.2f}× AR)" for f, v in flops.items())]
    if "machine" in figures:
        rows += ["", figures["machine"]]
    return "\n".join(rows) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--pairs-dir", default="")
    parser.add_argument("--out", required=True)
    # the AR model and the edit models first: the step-cost comparison's families, whose figures the GPU issue's bars
    # read; a --budget that runs out leaves out the last ones
    first = [f for f in ("ar", "levt", "editor") if f in FAMILIES]
    parser.add_argument("--families", default=",".join(first + [f for f in FAMILIES if f not in first]))
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--autotune", type=int, default=-1, help="train.xla_gpu_autotune_level")
    parser.add_argument("--variant", action="append", default=[], metavar="FAMILY:KEY=VALUE[,KEY=VALUE]",
                        help="FAMILY's run once more with these config overrides, after the families and --step-cost "
                             "and within --budget (e.g. ar:train.xla_gpu_autotune_level=0)")
    parser.add_argument("--time-limit", type=int, default=300, help="seconds a family's run may take")
    parser.add_argument("--budget", type=int, default=0,
                        help="seconds for the whole command (0: no limit): no family starts after it, each run is cut "
                             "at it, and --step-cost runs only before it")
    parser.add_argument("--step-cost", action="store_true")
    parser.add_argument("--step-flops", action="store_true",
                        help="only the arithmetic of the --step-cost steps (lowered, not compiled: any machine)")
    parser.add_argument("--step-cost-to", help=argparse.SUPPRESS)  # the step cost alone, as JSON to this file
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--config-name", default="multi30k_gpu",
                        help="each family's config: configs/<family>/<this>.py (multi30k: a CPU check)")
    args, args.overrides = parser.parse_known_args()
    if min(args.steps, args.repeats) < 1:
        raise SystemExit("error: --steps and --repeats must be at least 1")
    if not os.path.isdir(args.data_dir):
        raise SystemExit(f"error: --data-dir {args.data_dir}: no such directory")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise SystemExit(f"error: --out {args.out}: not a directory")
    if args.step_flops:
        os.makedirs(args.out, exist_ok=True)
        from jaxnat.provenance import machine  # here: no run beside this one needs the device

        figures = {"argv": sys.argv[1:], "step_cost": step_cost(args, timed=False), "machine": machine()}
        with open(os.path.join(args.out, "step_flops.json"), "w") as f:
            json.dump(figures, f, indent=2)
        print(table(figures))
        return
    families = [f for f in args.families.split(",") if f]
    variants = [(v.partition(":")[0], [f"--config.{kv}" for kv in v.partition(":")[2].split(",") if kv])
                for v in args.variant]
    unknown = set(families) - set(FAMILIES) | {family for family, _ in variants} - set(families)
    if unknown or (("vecconst" in families) and not (args.pairs_dir and "ar" in families)):
        raise SystemExit(f"error: families are {', '.join(FAMILIES)}; vecconst needs --pairs-dir and ar before it"
                         if not unknown else f"error: unknown families {sorted(unknown)} (--variant: of --families)")
    from jaxnat.config import build_config
    from jaxnat.errors import ConfigError

    # a mistyped flag, key or config name fails here, before any run (the runs' own overrides are every flag this
    # parser does not know: each family's run would fail on it in turn)
    for family, extra, what in [(f, [], f) for f in families] + [(f, e, f"--variant {f}") for f, e in variants]:
        try:
            build_config(os.path.join(ROOT, f"configs/{family}/{args.config_name}.py"),
                         family_overrides(family, args, {"ar": ""}) + extra)
        except ConfigError as e:
            raise SystemExit(f"error: {what}: {e}") from None
    if args.step_cost_to:
        with open(args.step_cost_to, "w") as f:
            json.dump(step_cost(args), f)
        return
    os.makedirs(args.out, exist_ok=True)
    figures = {"argv": sys.argv[1:], "families": {}}
    env = {**os.environ, "JAXNAT_COMPILATION_CACHE": "off", "PYTHONUNBUFFERED": "1"}
    workdirs = {}

    def save():
        with open(os.path.join(args.out, "figures.json"), "w") as f:
            json.dump(figures, f, indent=2)
        with open(os.path.join(args.out, "figures.md"), "w") as f:
            f.write(table(figures))

    start = time.perf_counter()
    figures["machine"] = machine_apart(env)

    def left() -> float:  # seconds of --budget left
        return args.budget - (time.perf_counter() - start) if args.budget else float("inf")

    def run(family: str, workdir: str, extra: list[str]) -> dict:
        """One family's short run in a fresh workdir, its figures (or why there are none)."""
        if left() < 30:
            print(f"{family}: not run, the budget of {args.budget} s is spent", flush=True)
            return {"rc": "budget"}
        cmd = [sys.executable, "-m", "jaxnat.main", "--config",
               os.path.join(ROOT, f"configs/{family}/{args.config_name}.py"), "--workdir", workdir,
               *family_overrides(family, args, workdirs), *extra]
        logs.write(f"\n===== {family}: {' '.join(cmd)}\n")
        logs.flush()
        t0 = time.perf_counter()
        try:
            done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                                  timeout=min(args.time_limit, left()))
            text, rc = done.stdout + done.stderr, done.returncode
        except subprocess.TimeoutExpired as e:  # what it printed until then (bytes, whatever text= says)
            as_text = lambda b: b.decode(errors="replace") if isinstance(b, bytes) else (b or "")  # noqa: E731
            text, rc = as_text(e.stdout) + as_text(e.stderr), "timeout"
        logs.write(text)
        logs.flush()
        out = {"rc": rc, "wall_s": round(time.perf_counter() - t0, 1), **read_run(workdir, text)}
        if rc != 0:  # what stopped it, for the table: a one-line error, the last line of a traceback, or of a log
            last = next((line for line in reversed(text.splitlines()) if line.strip()), "")[:300]
            out["error"] = f"cut at the time limit after: {last}" if rc == "timeout" else last
        print(family, out, flush=True)
        return out

    # the runs' workdirs (checkpoints) go when the figures are written: what comes back is --out
    with (open(os.path.join(args.out, "logs.txt"), "a") as logs,
          tempfile.TemporaryDirectory(prefix="gpu_figures_") as work):
        for family in families:
            workdirs[family] = os.path.join(work, family)
            figures["families"][family] = run(family, workdirs[family], [])
            save()
        if args.step_cost and left() > 60:  # in a process of its own, whose device memory is freed when it ends
            path = os.path.join(work, "step_cost.json")
            cmd = [sys.executable, os.path.abspath(__file__), *sys.argv[1:], "--step-cost-to", path]
            try:
                done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=left())
                logs.write(f"\n===== step cost: {' '.join(cmd)}\n{done.stdout}{done.stderr}")
                with open(path) as f:
                    figures["step_cost"] = json.load(f)
            except (subprocess.TimeoutExpired, OSError, ValueError) as e:
                figures["step_cost"] = {"rc": type(e).__name__}
            save()
        for i, (family, extra) in enumerate(variants):
            label = f"{family}, {', '.join(kv.removeprefix('--config.') for kv in extra)}"
            figures.setdefault("variants", {})[label] = run(family, os.path.join(work, f"{family}-variant{i}"), extra)
            save()
    print(table(figures))
    runs = [*figures["families"].values(), *figures.get("variants", {}).values()]
    if not any(run["rc"] == 0 for run in runs):  # a device call's exit status says that nothing came of it
        raise SystemExit(f"error: no run finished; {os.path.join(args.out, 'logs.txt')} says why")


if __name__ == "__main__":
    run_script(main, "the figures measured so far are in --out's figures.json and figures.md")
