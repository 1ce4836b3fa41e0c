"""Compile time as a measured budget, per model family: the seconds to compile a Multi30k run's train step (per
program) and its decoding program, and how many train programs the run compiles; with --scan the same with
``model.scan_layers=true`` (each layer stack one nn.scan) beside them.

    python bench/compile_time.py --data-dir ../shared/data/multi30k --pairs-dir PAIRS [--scan] [--repeats 3] \
        [--families ar,levt,editor,cmlm,nat,vecconst] [--config-name multi30k] [--set model.dropout=0 ...]

Each family's ``configs/<family>/<config-name>.py`` on the real data (PAIRS: the vectorized model's constraint
pairs, `python -m jaxnat.data.alignment`; the other families need none), with the --set overrides (config keys
without their --config. prefix; a config of the embedded corpus, `--config-name demo`, reads no --data-dir).
Per family, as a run would:

  programs  — the train programs a run compiles: one per batch shape (``len(batcher.shapes)``; one when packing)
  train (s) — compiling one train program (forward, backward, Adam; `Trainer.trace_train_step`), the mean over
              the run's programs
  temp (GiB) — the train program's temporaries by XLA's memory analysis of the compiled program (the largest over
              the run's programs): the device memory a step needs beyond parameters and optimizer state
  decode (s) — compiling the ModelSpec's ``generate`` as `Translator` jits it, at eval.batch_size and
              eval.beam_size, for the source bucket that holds the median validation source, with the validation
              sentences' constraint pairs for the vectorized model; a model with a length plan gets the plan's
              shapes (its small plan program is not counted)
  hard (s)  — the same with hard constraints, for families that take them: two phrases of each sentence's
              reference (its pieces 1–2 and 4–5, or one where the reference is short), as `Translator` pads them

Every figure compiles a freshly traced and lowered program (lowering is not timed; the persistent compilation cache
is off, and jax's in-memory caches hold only what it traced before), median of --repeats; with --scan the two
variants alternate within each repeat, so that both see the same machine load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jaxnat import models  # noqa: E402
from jaxnat.config import apply_override, build_config, load_config, parse_overrides  # noqa: E402
from jaxnat.decoding.translator import Start, Translator  # noqa: E402
from jaxnat.errors import ConfigError, run_script  # noqa: E402
from jaxnat.provenance import machine  # noqa: E402
from jaxnat.training.trainer import Trainer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAMILIES = models.FAMILIES


class Family:
    """One family's run, built as `Trainer.train` builds it: batcher, initial state, translator, and the decoding
    request its validation would send."""

    def __init__(self, family: str, args, scan: bool, workdir: str, spm_from: str = ""):
        overrides = [f"--config.data.spm_from={spm_from}", "--config.train.init_from=",
                     f"--config.model.scan_layers={scan}"]
        overrides += [f"--config.{key_value}" for key_value in args.set]
        path = os.path.join(ROOT, "configs", family, f"{args.config_name}.py")
        if reads_files(path, overrides):  # a demo config reads the embedded corpus
            overrides.append(f"--config.data.dir={args.data_dir}")
            if family == "vecconst":
                overrides.append(f"--config.data.pairs_dir={args.pairs_dir}")
        self.config = build_config(path, overrides)
        self.trainer = Trainer(self.config, workdir)
        self.batcher = self.trainer.make_batcher()
        self.state = self.trainer.init_state(self.batcher.batch(0))
        self.request = self.typical_request()
        self.hard_request = self.typical_request(hard=True) if self.trainer.spec.supports.hard_constraints else None

    def typical_request(self, hard: bool = False):
        """The `DecodeRequest` of eval.batch_size validation sentences in the bucket of the median source (hard:
        with two phrases of each one's reference as hard constraints)."""
        t, e = self.trainer, self.config.eval
        prepared = t.encoded_split("valid")
        valid = prepared.src
        bucket = min(b for b in t.buckets if b >= statistics.median(len(s) for s in valid))
        chosen = [i for i, s in enumerate(valid) if len(s) <= bucket][: e.batch_size]
        src = np.stack([np.pad(valid[i], (0, bucket - len(valid[i]))) for i in chosen]).astype(np.int32)
        pairs = t.pairs["valid"] if t.spec.supports.pairs else None
        starts = [Start(pairs=[tuple(p) for p in pairs[i]] if pairs else None,
                        phrases=reference_phrases(prepared.tgt[i]) if hard else None, hard=hard) for i in chosen]
        translator = Translator(t.spec, self.state["params"], t.tokenizer, self.config)
        request = translator.request(src, starts, e.beam_size, trace=False)
        if t.spec.plan is not None:  # generate then decodes the planned lengths: their shapes suffice to compile it
            request = request.replace(extras={**request.extras,
                                              "plan": jax.eval_shape(t.spec.plan, self.state["params"], request)})
        return request

    def compile_train(self) -> tuple[float, float]:
        """Seconds to compile the train programs, per program; the largest program's temporaries in GiB."""
        lowered = [self.trainer.trace_train_step(self.state, self.batcher, jax.random.PRNGKey(0), shape).lower()
                   for shape in sorted(self.batcher.shapes)]
        t0 = time.perf_counter()
        compiled = [program.compile() for program in lowered]
        seconds = (time.perf_counter() - t0) / len(lowered)
        return seconds, max(c.memory_analysis().temp_size_in_bytes for c in compiled) / 2**30

    def compile_decode(self, request) -> float:
        # a function jit has not traced yet: jax reuses the lowering (and then the executable) of one it has
        generate = self.trainer.spec.generate
        lowered = jax.jit(lambda params, request: generate(params, request)).lower(self.state["params"], request)
        t0 = time.perf_counter()
        lowered.compile()
        return time.perf_counter() - t0


def reads_files(path: str, overrides: list[str]) -> bool:
    """Whether a config with ``overrides`` reads its corpus from files (data.source text), so needs --data-dir:
    asked before validating, which refuses such a config without its data.dir."""
    config = load_config(path)
    for key, value in parse_overrides(overrides):
        apply_override(config, key, value)
    return config.data.source == "text"


def reference_phrases(tgt) -> list[list[int]]:
    """Two phrases of a [BOS … EOS] reference: its pieces 1–2 and 4–5 (one phrase where it is too short)."""
    pieces = [int(x) for x in tgt[1:-1]]
    return [pieces[0:2], pieces[3:5]] if len(pieces) >= 5 else [pieces[:2]]


def median(values):
    return f"{statistics.median(values):.1f}" if values else "—"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=os.path.join(ROOT, "..", "shared", "data", "multi30k"))
    parser.add_argument("--pairs-dir", default="", help="the vectorized model's constraint pairs, for a config that "
                        "reads files (else it is left out of the default --families, and refused when named)")
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--config-name", default="multi30k", help="configs/<family>/<this>.py")
    parser.add_argument("--scan", action="store_true", help="also with model.scan_layers=true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override for every family, e.g. model.dropout=0 (repeatable)")
    args = parser.parse_args()
    if args.repeats < 1:
        raise SystemExit("error: --repeats must be at least 1")
    jax.config.update("jax_enable_compilation_cache", False)  # even where JAX_COMPILATION_CACHE_DIR is set
    families = args.families.split(",")
    vecconst = os.path.join(ROOT, "configs", "vecconst", f"{args.config_name}.py")
    if "vecconst" in families and not args.pairs_dir and reads_files(vecconst, []):  # it trains on pairs of files
        if args.families != parser.get_default("families"):  # asked by name: an empty table said nothing
            raise SystemExit(f"error: --families vecconst with {os.path.relpath(vecconst, ROOT)} needs --pairs-dir "
                             f"PAIRS (python -m jaxnat.data.alignment writes them)")
        families.remove("vecconst")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for family in families:
            runs = {"plain": Family(family, args, False, os.path.join(tmp, family))}
            note = ""
            if args.scan:
                try:  # the plain run's vocabulary: the same pieces, no second SentencePiece training
                    runs["scan"] = Family(family, args, True, os.path.join(tmp, family + "-scan"),
                                          spm_from=os.path.join(tmp, family))
                except ConfigError as e:
                    note = str(e)
            times = {(name, what): [] for name in runs for what in ("train", "decode", "hard")}
            temp = {}
            for r in range(args.repeats):
                for name, run in runs.items():
                    seconds, temp[name] = run.compile_train()
                    times[name, "train"].append(seconds)
                    times[name, "decode"].append(run.compile_decode(run.request))
                    if run.hard_request is not None:
                        times[name, "hard"].append(run.compile_decode(run.hard_request))
                    print(f"{family} repeat {r} {name}: train {times[name, 'train'][-1]:.1f} s/program, "
                          f"decode {times[name, 'decode'][-1]:.1f} s, hard {median(times[name, 'hard'][-1:])} s",
                          flush=True)
            cfg = runs["plain"].config
            req = runs["plain"].request
            rows.append((family, cfg, len(runs["plain"].batcher.shapes), req, times, temp, note))
    print(f"\n{machine()}\nmedian of {args.repeats}; configs/<family>/{args.config_name}.py {' '.join(args.set)}")
    head = "| family | model | train programs | train, per program (s) | temp (GiB) | decode (s) | hard (s) |"
    if args.scan:
        head = ("| family | model | train programs | train, per program (s) | with scan (s) | temp (GiB) | "
                "with scan (GiB) | decode (s) | with scan (s) | hard (s) | with scan (s) |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for family, cfg, programs, req, times, temp, note in rows:
        m = cfg.model
        model = f"d {m.d_model}, {m.enc_layers}+{m.dec_layers}; decode {req.src.shape[0]}×{req.src.shape[1]}, " \
                f"beam {req.beam_size}"
        cells = [median(times["plain", "train"])]
        if args.scan:
            cells.append(median(times.get(("scan", "train"), [])))
        variants = ("plain", "scan") if args.scan else ("plain",)
        cells += [f"{temp[name]:.1f}" if name in temp else "—" for name in variants]
        for what in ("decode", "hard"):
            cells.append(median(times["plain", what]))
            if args.scan:
                cells.append(median(times.get(("scan", what), [])))
        print(f"| {family} | {model} | {programs} | " + " | ".join(cells) + " |")
        if note:
            print(f"  {family}, scan: {note}")


if __name__ == "__main__":
    run_script(main)
