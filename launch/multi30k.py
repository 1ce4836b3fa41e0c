"""The Multi30k En→De tables of docs/results.md as one resumable pipeline: the AR teacher, its distilled training
set and constraint-pair alignments, the students of each paper with the controls and ablations of its table, the
one-pass models (DA-Transformer, CTC), their evaluations, speed tables and reports, and three seeds of each paper's
central comparison (the seeds table).

    python launch/multi30k.py --data-dir DATA --runs RUNS [--gpu [--teacher ar|ar-small]]
                              [--tables teacher,vecconst,nat,cmlm,edit,onepass,seeds] [--only JOB ...]
                              [--align-from DIR] [--parallel N] [--time-limit SECONDS] [--config.KEY=VALUE ...]
                              [--status] [--dry-run]

Jobs run one after another (one machine, one device), each after the jobs it needs; a finished job is marked done
(RUNS/pipeline/done/JOB, with its command) and not run again, even with other options (a start and --status say
which were done with others: delete a job's workdir and mark to run it again), a failed one is reported and the jobs
that need it are left for the next start, whose jobs resume from their newest checkpoints: run the same command
again after a kill or in the next session. Each job's output is in RUNS/pipeline/JOB.log; the reports (python -m
jaxnat.report: a table in the paper's shape with each row's training and convergence, BLEU with confidence intervals
and significance, the papers' analyses, the validation curves) in RUNS/reports/TABLE/; launch/targets.py says which
of the study's targets hold so far.

--gpu trains the configs sized for one GPU (configs/*/multi30k_gpu.py and their variants: the papers' base
model, bf16, packed batches), and the AR model at d 256, 3+3 as well (ar-small, configs/ar/multi30k_small_gpu.py;
the teacher table compares the two); without it, the CPU-sized configs. The budgets are the configs' own.
--teacher: which AR model distils, lends the students its vocabulary, rescores and is the edit models' speed
baseline (default ar; the vectorized model's stage 2 starts from ar whichever teaches).
--only JOB ...: those jobs and the jobs they need. --align-from DIR: the constraint pairs made elsewhere (by the
align job's command: eflomal need not be installed where the models train), copied instead of aligning.
--parallel N: up to N jobs at once on the one device, each process given 0.9/N of its memory
(XLA_PYTHON_CLIENT_MEM_FRACTION, unless set): a small model leaves most of a large GPU idle, and the host's cores
compile N programs at once. A speed job runs alone (its figures are latencies); the training jobs' own tokens/s
and MFU are then those of a shared device. Jobs start in the listed order as the jobs they need finish.
--time-limit SECONDS: no job starts after that many seconds, and those running then are stopped (SIGTERM: a
training job checkpoints first) and left to resume at the next start (a rented machine's hour); Ctrl-C or SIGTERM
stops them so too, a line each, exit 130 or 143 (a second Ctrl-C kills them at once). --config.KEY=VALUE:
appended to every training, evaluation and speed job (e.g. the autotuner level, a smaller batch).
--status: where each job stands (a training job: its newest checkpoint, of train.steps, and validation BLEU).
--dry-run: the commands, in order, without running them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from jaxnat.errors import interrupt_status, sigterm_interrupts  # noqa: E402  (signals alone: no JAX started)
TEST = "test_2016_flickr"
TABLES = ("teacher", "vecconst", "nat", "cmlm", "edit", "onepass", "seeds")
SEEDS = (1, 2)  # the seeds table's runs of a configuration beside its seed-0 run in its paper's table
# the AR models that can teach (distillation, the students' vocabulary, rescoring): configs/<name>[_gpu].py
TEACHERS = {"ar": "ar/multi30k", "ar-small": "ar/multi30k_small"}  # ar-small: with --gpu only (d 256, 3+3)


# each table's report opens with its paper's columns (`python -m jaxnat.report --column LABEL=KEY`: a path into a
# system's entry of report.json; KEY/KEY2 shows "value (value2)"; "–" where a run has no such value), then where
# the validation curve ended
CONSTRAINED = (("soft: BLEU (CPR %)", "rows.soft.bleu/rows.soft.cpr"),
               ("hard: BLEU (CPR %)", "rows.hard.bleu/rows.hard.cpr"))
PAIRS = (("without pairs: BLEU (CSR %)", "bleu/cpr"),
         ("with its pairs: BLEU (CSR %)", "rows.pairs.bleu/rows.pairs.cpr"),
         ("+ VDBA: BLEU (CSR %)", "rows.pairs_hard.bleu/rows.pairs_hard.cpr"))
REPEATED = (("repeated %", "metrics.repeated"), ("short", "metrics.repeated_short"),
            ("long", "metrics.repeated_long"))
MASK_PREDICT = (("T = 1", "rows.T1.bleu"), ("T = 10", "bleu"), ("tok. BLEU", "tok_bleu"), *CONSTRAINED)
SPEED = (("latency ms", "latency_ms"), ("speed-up", "speedup"), ("sentences/s", "sentences_per_s"))
COLUMNS = {  # by the report's name (RUNS/reports/NAME)
    "teacher": (("BLEU", "bleu"), ("tok. BLEU", "tok_bleu"), ("chrF", "chrf"), ("TER", "ter"), *SPEED),
    "vecconst": (*PAIRS, *SPEED),
    "vecconst-cs": PAIRS,
    "nat": (("BLEU", "bleu"), ("tok. BLEU", "tok_bleu"), *REPEATED, *SPEED),
    "cmlm": (*MASK_PREDICT, ("repeated words %", "repetition"), *SPEED),
    "cmlm-kd": (*MASK_PREDICT, ("repeated words %", "repetition")),
    "edit": (("BLEU", "bleu"), ("tok. BLEU", "tok_bleu"), *CONSTRAINED,
             ("iterations (the papers' count)", "mean_steps"), ("passes", "mean_iterations"), *SPEED),
    "onepass": (("BLEU", "bleu"), ("tok. BLEU", "tok_bleu"), *CONSTRAINED, ("repeated words %", "repetition"),
                *SPEED),
    "edit-seeds": (("BLEU", "bleu"), *CONSTRAINED),
    "nat-seeds": (("BLEU", "bleu"), *REPEATED),
    "cmlm-seeds": MASK_PREDICT,
    "vecconst-seeds": PAIRS,
}
TRAINING_COLUMNS = (("best valid BLEU (step)", "training.best/training.best_step"),
                    ("gain, last fifth", "training.gain"))


@dataclasses.dataclass(frozen=True)
class Job:
    """One step: ``argv`` after the Python interpreter, run in the repository root once ``needs`` are done.
    copy_from: a finished workdir first copied to the job's --workdir (evaluated again with other settings)."""

    name: str
    needs: tuple[str, ...]
    argv: tuple[str, ...]
    table: str = ""
    copy_from: str = ""
    copy_to: str = ""  # where copy_from goes when it is not the --workdir; a job of a copy alone has no argv

    @property
    def alone(self) -> bool:
        """A timing job (its figures are latencies and throughputs): no other job runs beside it."""
        return self.argv[:1] == ("bench/decode_speed.py",)

    def workdir(self) -> str | None:
        return self.argv[self.argv.index("--workdir") + 1] if "--workdir" in self.argv else None

    def output(self) -> str | None:
        """What the job writes: its --output or --out (a distillation, alignment or report), a copy's
        destination, else its --workdir (None: it names none, e.g. a speed table)."""
        for flag in ("--output", "--out"):
            if flag in self.argv:
                return self.argv[self.argv.index(flag) + 1]
        return self.copy_to or self.workdir()


def jobs(data: str, runs: str, gpu: bool, overrides: tuple[str, ...] = (), align_from: str = "",
         teacher: str = "ar") -> list[Job]:
    """Every job of the tables, in the order they run; ``overrides`` (--config.KEY=VALUE) end every command that
    takes a config; ``teacher`` (a key of TEACHERS) distils, lends the students its vocabulary and rescores."""
    def config(name):  # configs/<family>/<name>.py, or its one-GPU variant
        return os.path.join("configs", f"{name}_gpu.py" if gpu else f"{name}.py")

    def run(name):
        return os.path.join(runs, name)

    def main(cfg, workdir, *flags, mode=()):
        return ("-m", "jaxnat.main", *mode, "--config", config(cfg), "--workdir", run(workdir), *flags, *overrides)

    ar, kd, align, teach = run("ar"), run("kd"), run("align"), run(teacher)
    raw, distilled = f"--config.data.dir={data}", f"--config.data.dir={kd}"
    pairs = (raw, f"--config.data.pairs_dir={align}")
    code_switched = (f"--config.data.dir={align}", f"--config.data.pairs_dir={align}",
                     "--config.data.train_split=train.cs", "--config.data.valid_split=val.cs",
                     f"--config.data.test_splits={TEST}.cs")
    student = (f"--config.data.spm_from={teach}",)
    stage_two = (f"--config.train.init_from={ar}",)

    def lm(name):  # the 4-gram LM of a run's training targets (`--mode lm`), beside its run
        return os.path.join(runs, f"{name}.arpa")

    def speed(*flags):
        return ("bench/decode_speed.py", *flags, *overrides)

    def report(table, *names, split=TEST, out="", labels=()):  # RUNS/reports/OUT (default: the table's name)
        out = out or table  # labels: the systems' names in the report (default the jobs'; one repeated: seeds)
        columns = [f"--column={label}={key}" for label, key in (*COLUMNS[out], *TRAINING_COLUMNS)]
        return Job(f"report-{out}", names, ("-m", "jaxnat.report", *(run(n) for n in names), "--split", split,
                                            "--out", os.path.join(runs, "reports", out),
                                            "--names", ",".join(labels or names), *columns), table)

    no_revpos = ("--config.cmlm.masked_attn=false", "--config.cmlm.concat_pe=false")
    no_corr = ("--config.cmlm.correction=false",)
    rescore = ("--config.nat.length_beam=9", f"--config.nat.rescorer={teach}", "--config.eval.iteration_sweep=")
    evaluate = ("--mode", "eval")
    cmlm_rows = (("cmlm", (*no_revpos, *no_corr)), ("cmlm-revpos", no_corr), ("cmlm-corr", no_revpos), ("cmlmc", ()))
    tables = [
        # the AR models (d 512, 6+6 and, on a GPU, d 256, 3+3), the teacher's distilled data, the constraint pairs
        Job("ar", (), main("ar/multi30k", "ar", raw), "teacher"),
        *([Job("ar-small", (), main("ar/multi30k_small", "ar-small", raw), "teacher"),
           report("teacher", "ar", "ar-small")] if gpu else []),
        Job("distill", (teacher,), main(TEACHERS[teacher], teacher, raw, "--output", kd, mode=("--mode", "distill"))),
        Job("align", (), (), copy_from=align_from, copy_to=align) if align_from else
        Job("align", (), ("-m", "jaxnat.data.alignment", "--data-dir", data, "--src", "en", "--tgt", "de",
                          "--splits", f"val,{TEST}", "--output", align, "--code-switch")),
        # Wang et al. 2022: the AR model with the pairs (vanilla, + VDBA), stage 2 at α/β 0.8/0.2 and 0.5/0.5,
        # code-switched, and the speed table
        Job("ar-pairs", ("ar", "align"), main("ar/multi30k", "ar-pairs", *pairs, mode=evaluate),
            "vecconst", copy_from=ar),
        Job("vecconst", ("ar", "align"), main("vecconst/multi30k", "vecconst", *pairs, *stage_two), "vecconst"),
        Job("vecconst-vdba", ("ar", "align"), main("vecconst/multi30k_vdba", "vecconst-vdba", *pairs, *stage_two),
            "vecconst"),
        Job("ar-pairs-cs", ("ar", "align"), main("ar/multi30k", "ar-pairs-cs", *code_switched,
                                                 mode=evaluate), "vecconst", copy_from=ar),
        Job("vecconst-cs", ("ar", "align"), main("vecconst/multi30k", "vecconst-cs", *code_switched, *stage_two),
            "vecconst"),
        Job("speed-vecconst", ("vecconst",), speed("--run", ar, "--run", run("vecconst"), "--pairs", "--unpacked",
                                            "--batch", "128", *pairs), "vecconst"),
        report("vecconst", "ar-pairs", "vecconst", "vecconst-vdba"),
        report("vecconst", "ar-pairs-cs", "vecconst-cs", split=f"{TEST}.cs", out="vecconst-cs"),
        # Shan et al. 2021: NAT-base, Coverage-NAT, its SCA phase and the control without SCA, each rescored
        Job("natbase", ("distill",), main("nat/multi30k", "natbase", distilled, *student, "--config.nat.coverage=false",
                                          "--config.eval.iteration_sweep="), "nat"),
        Job("covnat", ("distill",), main("nat/multi30k", "covnat", distilled, *student), "nat"),
        Job("covnat-sca", ("covnat",), main("nat/multi30k_sca", "covnat-sca", distilled,
                                           f"--config.train.init_from={run('covnat')}"), "nat"),
        Job("covnat-ft", ("covnat",), main("nat/multi30k_sca", "covnat-ft", distilled,
                                          f"--config.train.init_from={run('covnat')}", "--config.nat.sca_weight=0"),
            "nat"),
        # controls: NAT-base given the same second phase without SCA, and the SCA model decoded with λ forced to 0
        Job("natbase-ft", ("natbase",), main("nat/multi30k_sca", "natbase-ft", distilled, "--config.nat.coverage=false",
                                             "--config.eval.iteration_sweep=", "--config.nat.sca_weight=0",
                                             f"--config.train.init_from={run('natbase')}"), "nat"),
        Job("covnat-sca-lambda0", ("covnat-sca",), main("nat/multi30k_sca", "covnat-sca-lambda0", distilled,
                                                         "--config.nat.coverage_lambda=0",
                                                         "--config.eval.iteration_sweep=", mode=evaluate),
            "nat", copy_from=run("covnat-sca")),
        *(Job(f"{name}-rescored", (name,), main(cfg, f"{name}-rescored", distilled, *flags, *rescore,
                                                 mode=evaluate), "nat", copy_from=run(name))
          for name, cfg, flags in (("natbase", "nat/multi30k", ("--config.nat.coverage=false",)),
                                   ("covnat", "nat/multi30k", ()), ("covnat-sca", "nat/multi30k_sca", ()))),
        Job("speed-nat", ("natbase", "covnat"), speed("--run", run("natbase"), "--run", run("covnat"), distilled),
            "nat"),
        report("nat", "natbase", "covnat", "covnat-sca", "covnat-ft", "natbase-ft", "covnat-sca-lambda0",
               "natbase-rescored", "covnat-rescored", "covnat-sca-rescored"),
        # Huang et al. 2022: CMLM, +RevealPosition, +correction, CMLMC (Table 1), the halves of RevealPosition
        # (Table A.1), on raw data with the teacher's vocabulary (Table 1 on distilled data too); CMLMC rescored
        *(Job(name, (teacher,), main("cmlm/multi30k", name, raw, *student, *flags), "cmlm")
          for name, flags in cmlm_rows),
        Job("cmlmc-rescored", ("cmlmc",), main("cmlm/multi30k", "cmlmc-rescored", raw,
                                               f"--config.cmlm.rescorer={teach}", "--config.eval.constraints=",
                                               "--config.eval.iteration_sweep=", mode=evaluate),
            "cmlm", copy_from=run("cmlmc")),
        Job("cmlm-maskedattn", (teacher,), main("cmlm/multi30k", "cmlm-maskedattn", raw, *student, no_revpos[1],
                                             *no_corr), "cmlm"),
        Job("cmlm-concatpe", (teacher,), main("cmlm/multi30k", "cmlm-concatpe", raw, *student, no_revpos[0], *no_corr),
            "cmlm"),
        Job("positions-cmlm", ("cmlm", "cmlmc"), ("-m", "jaxnat.analyse", run("cmlm"), run("cmlmc")),
            "cmlm"),
        Job("speed-cmlm", ("cmlm", "cmlmc"), speed("--run", run("cmlm"), "--run", run("cmlmc"), "--full-canvas", raw),
            "cmlm"),
        report("cmlm", "cmlm", "cmlm-revpos", "cmlm-corr", "cmlmc", "cmlmc-rescored", "cmlm-maskedattn",
               "cmlm-concatpe"),
        *(Job(f"{name}-kd", ("distill",), main("cmlm/multi30k", f"{name}-kd", distilled, *student, *flags), "cmlm")
          for name, flags in cmlm_rows),
        report("cmlm", *(f"{name}-kd" for name, _ in cmlm_rows), out="cmlm-kd"),
        # Gu et al. 2019 and Xu & Carpuat 2021: the Levenshtein Transformer and EDITOR on the distilled data,
        # plain, with soft and with hard constraints
        Job("levt", ("distill",), main("levt/multi30k", "levt", distilled, *student), "edit"),
        Job("editor", ("distill",), main("editor/multi30k", "editor", distilled, *student), "edit"),
        # the same two with the papers' roll-in (without the model's own insertions and shuffled starts: jaxnat's
        # additions), EDITOR without dual-path roll-in (its Table 5; the control: editor-paper), and EDITOR's hard
        # constraints as its paper makes them (editor.hard_mode=paper) beside jaxnat's block repositioning
        *(Job(f"{m}-paper", ("distill",), main(f"{m}/multi30k", f"{m}-paper", distilled, *student,
                                              f"--config.{m}.own_insertion_roll_in=0",
                                              f"--config.{m}.global_shuffle=0"), "edit") for m in ("levt", "editor")),
        Job("editor-nodual", ("distill",), main("editor/ablation_no_dual_path", "editor-nodual", distilled, *student),
            "edit"),
        Job("editor-hardpaper", ("editor",), main("editor/multi30k", "editor-hardpaper", distilled,
                                                   "--config.editor.hard_mode=paper", "--config.eval.constraints=hard",
                                                   "--config.eval.diagnostic=false", mode=evaluate),
            "edit", copy_from=run("editor")),
        Job("speed-edit", ("levt", "editor"), speed("--run", teach, "--run", run("levt"), "--run", run("editor"),
                                              distilled), "edit"),
        report("edit", "levt", "editor", "levt-paper", "editor-paper", "editor-nodual", "editor-hardpaper"),
        # the one-pass models: Huang et al. 2022's DA-Transformer on raw data (its headline setting: no
        # distillation), decoded with lookahead and joint Viterbi, and on the distilled data; CTC with glancing (Qian
        # et al. 2021) and without (Libovický & Helcl 2018) on the distilled data, as their papers train them (joint
        # Viterbi's copy decodes plain only: the constrained search does not depend on dat.decode)
        Job("dat", (teacher,), main("dat/multi30k", "dat", raw, *student), "onepass"),
        Job("dat-viterbi", ("dat",), main("dat/multi30k", "dat-viterbi", raw, "--config.dat.decode=viterbi",
                                          "--config.eval.constraints=", mode=evaluate),
            "onepass", copy_from=run("dat")),
        Job("dat-kd", ("distill",), main("dat/multi30k", "dat-kd", distilled, *student), "onepass"),
        Job("ctc", ("distill",), main("ctc/multi30k", "ctc", distilled, *student), "onepass"),
        Job("ctc-plain", ("distill",), main("ctc/multi30k", "ctc-plain", distilled, *student,
                                            "--config.ctc.glancing=false"), "onepass"),
        # and their papers' best decodings: DA-Transformer's beam search alone and with a 4-gram LM of its training
        # targets (the authors' own, dat.decode=dagsearch, at their defaults: beam 100, 10 a length, γ 0.1, α 1.1),
        # CTC's prefix beam with one (Gu & Kong's ctcdecode: beam 20; α 0.3, β 1.5, the best on the Multi30k short
        # run); `--mode lm` writes each LM
        *(Job(f"{name}-lm", (name,), main(cfg, name, data, *student, mode=("--mode", "lm", "--output", lm(name))),
              "onepass") for name, cfg, data in (("dat", "dat/multi30k", raw), ("ctc", "ctc/multi30k", distilled))),
        *(Job(f"dat-{row}", ("dat",) + (("dat-lm",) if extra else ()),
              main("dat/multi30k", f"dat-{row}", raw, "--config.dat.decode=dagsearch", "--config.eval.beam_size=100",
                   "--config.eval.constraints=", "--config.eval.iteration_sweep=", *extra, mode=evaluate),
              "onepass", copy_from=run("dat"))
          for row, extra in (("beam", ()), ("beam-lm", (f"--config.eval.lm={lm('dat')}",)))),
        Job("ctc-beam-lm", ("ctc", "ctc-lm"),
            main("ctc/multi30k", "ctc-beam-lm", distilled, "--config.eval.beam_size=20",
                 f"--config.eval.lm={lm('ctc')}", "--config.eval.constraints=", mode=evaluate),
            "onepass", copy_from=run("ctc")),
        # the LMs' weights as the papers choose them, on the validation split (their logs: a table of valid BLEU per
        # weight, then the test split with the best); the rows above keep the papers' own weights
        *(Job(f"{name}-lm-sweep", (name, f"{name}-lm"), ("bench/lm_sweep.py", run(name), "--lm", lm(name), "--weights",
                                                         weights, "--repeats", "1", *flags, *overrides), "onepass")
          for name, weights, flags in (("dat", "0.1,0.3,1,2", ("--config.dat.decode=dagsearch", "--beam", "100")),
                                       ("ctc", "0.1,0.3,0.5,1", ()))),
        Job("speed-onepass", ("dat-kd", "ctc"), speed("--run", teach, "--run", run("dat-kd"), "--run", run("ctc"),
                                                      distilled), "onepass"),
        report("onepass", "dat", "dat-viterbi", "dat-beam", "dat-beam-lm", "dat-kd", "ctc", "ctc-plain", "ctc-beam-lm"),
    ]
    # three seeds of the comparisons each paper makes its case with (seed 0: the runs above), reported together
    by_name = {j.name: j for j in tables}

    def seeds(out, trained, reported):
        reseeded = [reseed(by_name[name], seed, runs, set(trained)) for name in trained for seed in SEEDS]
        names = [name if seed == 0 else f"{name}-s{seed}" for name in reported for seed in (0, *SEEDS)]
        return [*reseeded, report("seeds", *names, out=out, labels=[n for n in reported for _ in (0, *SEEDS)])]

    return [*tables,
            *seeds("edit-seeds", ("levt", "editor"), ("levt", "editor")),  # with soft constraints: their rows
            *seeds("cmlm-seeds", ("cmlm", "cmlmc"), ("cmlm", "cmlmc")),
            *seeds("nat-seeds", ("natbase", "covnat"), ("natbase", "covnat")),
            # vanilla + VDBA (the AR model of that seed with the pairs) against the vectorized model started from it
            *seeds("vecconst-seeds", ("ar", "ar-pairs", "vecconst"), ("ar-pairs", "vecconst"))]


def reseed(job: Job, seed: int, runs: str, seeded: set[str]) -> Job:
    """``job`` with train.seed ``seed``, in the seeds table: its workdir, and a run it starts from or copies that
    is one of ``seeded``, are that seed's (RUNS/NAME-sSEED)."""
    def own(name):
        return f"{name}-s{seed}" if name in seeded else name

    def rename(arg: str) -> str:
        for name in (job.name, *job.needs):
            path = os.path.join(runs, name)
            if own(name) != name and (arg == path or arg.endswith("=" + path)):
                return arg[:-len(path)] + os.path.join(runs, own(name))
        return arg

    return Job(own(job.name), tuple(map(own, job.needs)), (*map(rename, job.argv), f"--config.train.seed={seed}"),
               "seeds", rename(job.copy_from), rename(job.copy_to))


def selected(all_jobs: list[Job], tables: list[str], only: list[str]) -> list[Job]:
    """The jobs of ``tables`` (or only those named and, transitively, the jobs they need), in order."""
    by_name = {j.name: j for j in all_jobs}
    for name in only:
        if name not in by_name:
            sys.stderr.write(f"multi30k.py: error: no job {name!r} (jobs: {', '.join(by_name)})\n")
            sys.exit(2)
    wanted = set(only) or {j.name for j in all_jobs if j.table in tables}
    stack = list(wanted)
    while stack:
        for need in by_name[stack.pop()].needs:
            if need not in wanted:
                wanted.add(need)
                stack.append(need)
    return [j for j in all_jobs if j.name in wanted]


def _mark(job: Job) -> str:
    """What a done mark records: the job's command, to tell a later start that asks for another one."""
    return json.dumps({"argv": list(job.argv), "copy_from": job.copy_from})


def other_options(state: str, job: Job) -> str:
    """Where ``job`` is done with another command than now (other overrides, data or options), what differs, in
    a few words; "" where it is not done, is done with this command, or its mark predates the record."""
    try:
        with open(os.path.join(state, "done", job.name), encoding="utf-8") as f:
            then = json.load(f)
        argv, copy_from = list(then["argv"]), then["copy_from"]
    except (OSError, ValueError, KeyError, TypeError):  # not done, or an empty mark of an older pipeline
        return ""
    if (argv, copy_from) == (list(job.argv), job.copy_from):
        return ""
    gone, new = [a for a in argv if a not in job.argv], [a for a in job.argv if a not in argv]
    text = "; ".join(filter(None, (gone and f"then {' '.join(gone)}", new and f"now {' '.join(new)}"))) or \
        "the same arguments in another order"
    return text if len(text) <= 200 else text[:197] + "..."


def progress(job: Job) -> str:
    """A training job's newest checkpoint (of its config.json's train.steps) and latest validation BLEU, from its
    workdir."""
    workdir = job.workdir()
    if not workdir or job.copy_from or "--mode" in job.argv:
        return ""
    last = os.path.join(workdir, "checkpoints", "last")
    steps = [int(s) for s in (os.listdir(last) if os.path.isdir(last) else []) if s.isdigit()]
    try:  # "step 250" alone left how far the job has to go unsaid
        with open(os.path.join(workdir, "config.json"), encoding="utf-8") as f:
            total = f" of {int(json.load(f)['train']['steps'])}"
    except (OSError, ValueError, KeyError, TypeError):
        total = ""
    text = f", step {max(steps)}{total}" if steps else ""
    try:
        with open(os.path.join(workdir, "history.jsonl"), encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if '"valid_bleu"' in line]
    except (OSError, ValueError):  # no history yet, or a line being written: no validation to show
        rows = []
    return text + (f", valid BLEU {rows[-1]['valid_bleu']:.2f} at step {rows[-1]['step']}" if rows else "")


def copy_whole(src: str, dst: str) -> None:
    """dst as a copy of src, whole or not at all (a copy cut short leaves only dst.partial); an evaluation of it
    is then redone (metrics.record.json removed)."""
    if os.path.isdir(dst):
        return
    shutil.rmtree(dst + ".partial", ignore_errors=True)
    shutil.copytree(src, dst + ".partial")
    record = os.path.join(dst + ".partial", "metrics.record.json")
    if os.path.exists(record):
        os.remove(record)
    os.rename(dst + ".partial", dst)


class TimeUp(Exception):
    """The pipeline's time limit came; its argument: the job that was about to start, if any."""


def _stamp(text: str) -> None:
    print(f"{time.strftime('%F %T')} {text}", flush=True)


def _stop(proc: subprocess.Popen, grace: float = 60.0) -> None:
    """SIGTERM (a training run writes its checkpoint, then exits), SIGKILL after ``grace`` seconds."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _stop_all(running: dict, why: str) -> None:
    """Stops every running job as a time limit does (`_stop`: a training job checkpoints first), a line each; a
    Ctrl-C while they stop kills them at once."""
    try:
        for name, (_, proc) in running.items():
            _stop(proc)
            _stamp(f"{why}: stopped {name} (the same command resumes it)")
    except KeyboardInterrupt:  # (SIGTERM too, `sigterm_interrupts`)
        for _, proc in running.values():
            proc.kill()
            proc.wait()
        _stamp(f"{why}, then again: killed the running jobs (the same command resumes them from their newest "
               f"checkpoints)")


@sigterm_interrupts()  # SIGTERM as Ctrl-C: alone, it ended the pipeline without a word, its jobs left running
def run_jobs(todo: list[Job], state: str, python: str, deadline: float = float("inf"), parallel: int = 1) -> int:
    """Runs every job that is not done once the jobs it needs are, until ``deadline`` (time.monotonic): up to
    ``parallel`` at once, started in list order as they become ready; a timing job (bench/decode_speed.py) with
    no other beside it. 0 when all ran, 1 if one failed, 3 when the deadline stopped them (the running ones get
    SIGTERM and resume at the next start; 130 or 143 when Ctrl-C or SIGTERM stops the pipeline, and so its jobs)."""
    env = dict(os.environ)
    if parallel > 1:  # one device shared: each process a share of its memory (JAX takes 75% by default)
        env.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", f"{0.9 / parallel:.2f}")
    waiting = [j for j in todo if not os.path.exists(os.path.join(state, "done", j.name))]
    running: dict[str, tuple[Job, subprocess.Popen]] = {}
    unmet: set[str] = set()  # failed, or skipped because a job they need did not finish
    busy, pause = 0, 0.01

    for job in todo:  # done with another command: not run again, and said so (its results are the earlier ones)
        if differs := other_options(state, job):
            mark = os.path.join(state, "done", job.name)
            _stamp(f"note: {job.name} is done with other options than now ({differs}) and is not run again; to run "
                   f"it with these, delete {job.output() or 'what it wrote'} and {mark}")

    def finish(job: Job, ok: bool) -> None:
        if ok:
            with open(os.path.join(state, "done", job.name), "w", encoding="utf-8") as f:
                f.write(_mark(job))
            _stamp(f"done {job.name}")
        else:
            unmet.add(job.name)
            _stamp(f"FAILED {job.name} (see {state}/{job.name}.log)")

    try:
        while waiting or running:
            for job in list(waiting):
                if missing := [n for n in job.needs if n in unmet]:
                    _stamp(f"skip {job.name} (needs {', '.join(missing)})")
                    unmet.add(job.name)
                    waiting.remove(job)
                    continue
                if any(n in running or n in {w.name for w in waiting} for n in job.needs):
                    continue
                if len(running) >= parallel or job.alone and running or any(j.alone for j, _ in running.values()):
                    break  # no room now: it starts before any job after it
                if time.monotonic() >= deadline:
                    raise TimeUp(job.name)
                waiting.remove(job)
                _stamp(f"start {job.name}")
                log = open(os.path.join(state, f"{job.name}.log"), "a", encoding="utf-8")
                try:
                    if job.copy_from:
                        copy_whole(job.copy_from, job.copy_to or job.workdir())
                    if job.argv:
                        running[job.name] = job, subprocess.Popen([python, *job.argv], cwd=ROOT, env=env,
                                                                  stdout=log, stderr=subprocess.STDOUT)
                except OSError as e:
                    log.write(f"{e}\n")
                    finish(job, False)
                else:
                    if not job.argv:
                        finish(job, True)
                finally:
                    log.close()  # the process holds its own copy
            ended = [name for name, (_, proc) in running.items() if proc.poll() is not None]
            for name in ended:
                job, proc = running.pop(name)
                finish(job, proc.returncode == 0)
            if running and time.monotonic() >= deadline:
                raise TimeUp()
            # wait for a job to end: soon after a change (short jobs), then every half second
            pause = 0.01 if ended or len(running) != busy else min(2 * pause, 0.5)
            busy = len(running)
            time.sleep(pause if running else 0)
    except TimeUp as e:
        if not running:
            _stamp(f"time limit reached before {e.args[0]}: the same command goes on")
        _stop_all(running, "time limit reached")
        return 3
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: killing the jobs lost each one's steps since its checkpoint
        status = interrupt_status(e)
        _stop_all(running, f"interrupted ({signal.Signals(status - 128).name})")
        return status
    except BaseException:  # the pipeline failed: the jobs it started go with it
        for _, proc in running.values():
            proc.kill()
            proc.wait()
        raise
    return 1 if unmet else 0


class OneLineParser(argparse.ArgumentParser):
    """Bad options: one line (no usage block; --help has it), exit 2."""

    def error(self, message):
        sys.stderr.write(f"{os.path.basename(self.prog.split()[-1])}: error: {message} (--help for the options)\n")
        sys.exit(2)


def main(argv: list[str] | None = None) -> int:
    start = time.monotonic()
    parser = OneLineParser(prog="python launch/multi30k.py", description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True, help="the Multi30k folder ({split}.{en,de}[.gz])")
    parser.add_argument("--runs", required=True, help="where the workdirs, logs and reports go")
    parser.add_argument("--gpu", action="store_true", help="the configs sized for one GPU")
    parser.add_argument("--tables", default=",".join(TABLES), help=f"comma list of {', '.join(TABLES)} (default all)")
    parser.add_argument("--only", nargs="+", default=[], metavar="JOB", help="these jobs and what they need")
    parser.add_argument("--align-from", default="", metavar="DIR", help="the constraint pairs, made elsewhere")
    parser.add_argument("--teacher", default="ar", choices=TEACHERS, help="the AR model the students learn from")
    parser.add_argument("--time-limit", type=float, default=0, metavar="SECONDS",
                        help="stop after this long (0, the default: no limit)")
    parser.add_argument("--parallel", type=int, default=1, metavar="N", help="run up to N jobs at once (default 1)")
    parser.add_argument("--status", action="store_true", help="where each job stands")
    parser.add_argument("--dry-run", action="store_true", help="print the commands without running them")
    parser.add_argument("--python", default=sys.executable, help=argparse.SUPPRESS)  # the tests' stand-in
    args, overrides = parser.parse_known_args(argv)
    if wrong := [a for a in overrides if not (a.startswith("--config.") and "=" in a)]:
        parser.error(f"unrecognized argument {wrong[0]!r} (overrides are --config.KEY=VALUE)")
    tables = [t for t in args.tables.split(",") if t]
    if unknown := [t for t in tables if t not in TABLES]:
        parser.error(f"unknown table {unknown[0]!r} (tables: {', '.join(TABLES)})")
    if not os.path.isdir(args.data_dir) and not (args.status or args.dry_run):
        parser.error(f"no data directory {args.data_dir}")
    if args.align_from and not os.path.isfile(os.path.join(args.align_from, "train.cs.pairs.jsonl")):
        parser.error(f"--align-from {args.align_from}: no train.cs.pairs.jsonl there (the align job's command makes "
                     f"it: --dry-run --only align shows it)")
    if args.teacher != "ar" and not args.gpu:
        parser.error(f"--teacher {args.teacher}: with --gpu only (without it, ar is the d 256, 3+3 model)")
    if args.parallel < 1:
        parser.error("--parallel: a number of jobs >= 1")
    if args.time_limit < 0:
        parser.error("--time-limit: a number of seconds >= 0 (0: no limit)")
    runs = os.path.abspath(args.runs)
    align_from = os.path.abspath(args.align_from) if args.align_from else ""
    todo = selected(jobs(os.path.abspath(args.data_dir), runs, args.gpu, tuple(overrides), align_from, args.teacher),
                    tables, args.only)
    state = os.path.join(runs, "pipeline")
    if args.dry_run:
        for job in todo:
            copy = f"(copy {job.copy_from} -> {job.copy_to or job.workdir()})" if job.copy_from else ""
            print(f"{job.name}: " + " ".join(filter(None, [copy, job.argv and f"python {shlex.join(job.argv)}"])))
        return 0
    if args.status:
        for job in todo:
            if os.path.exists(os.path.join(state, "done", job.name)):
                differs = other_options(state, job)
                print(f"{job.name:<20} done" + (f" with other options than now ({differs})" if differs else ""))
            else:
                print(f"{job.name:<20} to run{progress(job)}")
        return 0
    os.makedirs(os.path.join(state, "done"), exist_ok=True)
    return run_jobs(todo, state, args.python, start + args.time_limit if args.time_limit else float("inf"),
                    args.parallel)


if __name__ == "__main__":
    sys.exit(main())
