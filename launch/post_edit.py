"""The post-editing protocol of the Levenshtein Transformer paper (Gu et al. 2019, Appendix C.2) as one resumable
pipeline: an MT model trained on half of the training data translates the other half, and a LevT trained for
translation is fine-tuned to post-edit that MT output into the reference.

    python launch/post_edit.py --data-dir DIR --runs RUNS [--mt-config CONFIG] [--levt-config CONFIG]
                               [--levt-from WORKDIR] [--set KEY=VALUE ...] [--status] [--dry-run]

DIR holds a text corpus ({split}.{lang}[.gz], data.source=text). The jobs, each after the jobs it needs:

  split      DIR's training pairs shuffled with --seed and cut into two halves: RUNS/data/mt (half A) and
             RUNS/data/pe (half B), each with the valid and test files of DIR linked in (RUNS/data/split.json)
  mt         the MT model (--mt-config) trained on half A and evaluated (RUNS/mt); its evaluation translates the
             test splits and, as two more test splits, half B (mt-TRAIN) and the valid split (mt-VALID)
  pe-data    the post-editing corpus RUNS/data/pe: {split}.mt = the MT model's output (hyps/ of RUNS/mt) for
             half B (its training split), the valid split and every test split
  levt       the LevT for translation (--levt-config) trained on the whole of DIR (RUNS/levt); not run with
             --levt-from, which names an already trained one
  levt-pe    that LevT evaluated on the post-editing corpus, without fine-tuning (a copy of its workdir,
             RUNS/levt-pe, --mode eval with data.init_lang=mt): from scratch, and post-editing the MT output
  levt-ft    the LevT fine-tuned to post-edit (RUNS/levt-ft): train.init_from the LevT (its parameters and
             vocabulary), data.init_lang=mt on the post-editing corpus, then evaluated
  report     RUNS/post_edit.md and RUNS/post_edit.json: BLEU and TER on each test split of the MT output (the
             "do nothing" baseline), the LevT from scratch and post-editing before and after fine-tuning, with
             the command and config of each row

A finished job is marked done (RUNS/pipeline/done/JOB) and not run again; a failed one is reported and the jobs
that need it wait for the next start, whose training jobs resume from their newest checkpoints. Each job's output
is in RUNS/pipeline/JOB.log. Changing the options of a finished job does not run it again: delete its workdir and
its done mark. docs/levt.md ("The post-editing protocol") says what each row means.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import sys

from multi30k import ROOT, Job, OneLineParser, other_options, progress, run_jobs

SCRIPT = os.path.relpath(os.path.abspath(__file__), ROOT)
INIT = "mt"  # data.init_lang of the post-editing corpus: {split}.mt
# Algorithm 1's roll-in for the post-editing runs (data.init_lang needs alpha or beta above 0 for LevT): with
# probability alpha the deletion head, with beta the insertion heads start from the MT output; --ft-set changes it
ROLL_IN = ("levt.roll_in_alpha=0.5", "levt.roll_in_beta=0.5")
# what the script sets itself on every run (its own options set them)
RESERVED = ("data.source", "data.dir", "data.src_lang", "data.tgt_lang", "data.train_split", "data.valid_split",
            "data.test_splits", "data.init_lang", "train.init_from")
KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*=")


class Failed(Exception):
    """What stops one of the script's own jobs: one line for its log."""


class Layout:
    """Where everything is, from the parsed options."""

    def __init__(self, args):
        self.runs = args.runs
        self.data = os.path.join(args.runs, "data")
        self.mt_data, self.pe_data = os.path.join(self.data, "mt"), os.path.join(self.data, "pe")
        self.mt, self.levt_pe, self.levt_ft = (os.path.join(args.runs, n) for n in ("mt", "levt-pe", "levt-ft"))
        self.levt = args.levt_from or os.path.join(args.runs, "levt")
        self.tests = [s for s in args.test_splits.split(",") if s]
        # the extra test splits of the MT run: what it translates for the post-editing corpus, and where it goes
        # (the real test splits first: the evaluation measures speed on its first split)
        self.translated = {**{t: t for t in self.tests}, f"mt-{args.train_split}": args.train_split,
                           f"mt-{args.valid_split}": args.valid_split}


def overrides(pairs) -> tuple[str, ...]:
    return tuple(f"--config.{p}" for p in pairs)


def jobs(args) -> list[Job]:
    """Every job, in the order they run."""
    a, at = args, Layout(args)
    splits = (f"data.src_lang={a.src}", f"data.tgt_lang={a.tgt}", f"data.train_split={a.train_split}",
              f"data.valid_split={a.valid_split}")

    def main(config, workdir, data_dir, tests, *sets, mode=()):
        return ("-m", "jaxnat.main", *mode, "--config", config, "--workdir", workdir,
                *overrides(("data.source=text", f"data.dir={data_dir}", *splits, f"data.test_splits={tests}")),
                *overrides(a.set), *(o for s in sets for o in overrides(s)))

    def step(name):  # a job of this script (not a training run): the same options and --job NAME
        return (SCRIPT, *cli(args), "--job", name)

    post_edit = (f"data.init_lang={INIT}",)
    levt = [] if a.levt_from else [Job("levt", (), main(a.levt_config, at.levt, a.data_dir, a.test_splits,
                                                       a.levt_set))]
    levt_needs = () if a.levt_from else ("levt",)
    return [
        Job("split", (), step("split")),
        Job("mt", ("split",), main(a.mt_config, at.mt, at.mt_data, ",".join(at.translated), a.mt_set)),
        Job("pe-data", ("mt",), step("pe-data")),
        *levt,
        # the roll-in keys only pass the config check of data.init_lang: an evaluation does not read them
        Job("levt-pe", ("pe-data", *levt_needs), main(a.levt_config, at.levt_pe, at.pe_data, a.test_splits,
                                                      a.levt_set, post_edit, ROLL_IN, mode=("--mode", "eval")),
            copy_from=at.levt),
        Job("levt-ft", ("pe-data", *levt_needs), main(a.levt_config, at.levt_ft, at.pe_data, a.test_splits,
                                                      ROLL_IN, a.levt_set, post_edit, (f"train.init_from={at.levt}",),
                                                      a.ft_set)),
        Job("report", ("mt", "levt-pe", "levt-ft"), step("report")),
    ]


def cli(args) -> list[str]:
    """The options of this run, as a command line (what the script's own jobs are started with)."""
    out = ["--data-dir", args.data_dir, "--runs", args.runs, "--mt-config", args.mt_config, "--levt-config",
           args.levt_config, "--src", args.src, "--tgt", args.tgt, "--train-split", args.train_split,
           "--valid-split", args.valid_split, "--test-splits", args.test_splits, "--seed", str(args.seed)]
    if args.levt_from:
        out += ["--levt-from", args.levt_from]
    for option in ("set", "mt_set", "levt_set", "ft_set"):
        for value in getattr(args, option):
            out.append(f"--{option.replace('_', '-')}={value}")
    return out


# -- the script's own jobs ---------------------------------------------------------------------------------------
def _link(target: str, link: str) -> None:
    """link -> target (a copy where the filesystem has no symbolic links)."""
    try:
        os.symlink(target, link)
    except OSError:
        shutil.copyfile(os.path.join(os.path.dirname(link), target), link)


def _write_lines(path: str, lines: list[str]) -> None:
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in lines)
    os.replace(path + ".tmp", path)


def split_job(args) -> None:
    """RUNS/data/mt and RUNS/data/pe (see the module docstring), whole or not at all."""
    from jaxnat.data.text import find_split_file, find_split_files, read_parallel

    at = Layout(args)
    record = {"data_dir": args.data_dir, "train_split": args.train_split, "src": args.src, "tgt": args.tgt,
              "seed": args.seed}
    if os.path.isdir(at.data):
        with open(os.path.join(at.data, "split.json"), encoding="utf-8") as f:
            old = json.load(f)
        if {k: old.get(k) for k in record} != record:
            raise Failed(f"{at.data} holds another split ({old}); delete it or choose another --runs")
        return  # finished before its job was marked done
    src, tgt = read_parallel(*find_split_files(args.data_dir, args.train_split, args.src, args.tgt))
    if len(src) < 2:
        raise Failed(f"{args.train_split}.{args.src}: {len(src)} line(s); two halves need at least 2")
    order = list(range(len(src)))
    random.Random(args.seed).shuffle(order)
    halves = {"a": sorted(order[:len(order) // 2]), "b": sorted(order[len(order) // 2:])}
    partial = at.data + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    for name, half in (("mt", "a"), ("pe", "b")):
        os.makedirs(os.path.join(partial, name))
        for lang, lines in ((args.src, src), (args.tgt, tgt)):
            _write_lines(os.path.join(partial, name, f"{args.train_split}.{lang}"), [lines[i] for i in halves[half]])
    for lang in (args.src, args.tgt):  # half B, translated by the MT run as a test split
        _link(os.path.join("..", "pe", f"{args.train_split}.{lang}"),
              os.path.join(partial, "mt", f"mt-{args.train_split}.{lang}"))
    for split in (args.valid_split, *at.tests):
        for lang in (args.src, args.tgt):
            if split in at.tests and lang == args.tgt and not any(
                    os.path.isfile(os.path.join(args.data_dir, f"{split}.{lang}{gz}")) for gz in ("", ".gz")):
                continue  # a test split without references: translated, not scored
            path = os.path.abspath(find_split_file(args.data_dir, split, lang))
            suffix = ".gz" if path.endswith(".gz") else ""
            names = [(name, split) for name in ("mt", "pe")]
            if split == args.valid_split:
                names.append(("mt", f"mt-{split}"))  # the valid split, translated by the MT run as a test split
            for name, as_split in names:
                _link(path, os.path.join(partial, name, f"{as_split}.{lang}{suffix}"))
    record.update(sentences=len(src), half_a=len(halves["a"]), half_b=len(halves["b"]),
                  how="the line numbers shuffled with random.Random(seed).shuffle; half A the first half of them "
                      "(mt/), half B the rest (pe/), each in corpus order")
    with open(os.path.join(partial, "split.json"), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2, sort_keys=True)
    os.rename(partial, at.data)
    print(f"{len(src)} training pairs: {len(halves['a'])} in {at.mt_data}, {len(halves['b'])} in {at.pe_data}")


def pe_data_job(args) -> None:
    """RUNS/data/pe/{split}.mt from the MT run's hyps/, each checked line for line against its source."""
    from jaxnat.data.text import find_split_file, read_lines

    at = Layout(args)
    for name, split in at.translated.items():
        hyps = os.path.join(at.mt, "hyps", f"{name}.txt")
        if not os.path.isfile(hyps):
            raise Failed(f"{hyps}: not found; the MT run's evaluation writes it (job mt)")
        lines = read_lines(hyps, blank_ok=True)  # an MT output of empty lines is a start (the usual one) too
        sources = read_lines(find_split_file(at.pe_data, split, args.src))
        if len(lines) != len(sources):
            raise Failed(f"{hyps} has {len(lines)} lines, the {split} sources {len(sources)}")
        _write_lines(os.path.join(at.pe_data, f"{split}.{INIT}"), lines)
        print(f"{split}.{INIT}: {len(lines)} lines from {hyps}")


ROWS = (  # (row, run, metrics.json row of a test split: '{split}' or '{split}+init')
    ("do nothing: the MT output", "mt", "{split}"),
    ("LevT (translation), from scratch", "levt-pe", "{split}"),
    ("LevT (translation), post-editing the MT output", "levt-pe", "{split}+init"),
    ("LevT fine-tuned to post-edit, post-editing the MT output", "levt-ft", "{split}+init"),
    ("LevT fine-tuned to post-edit, from scratch", "levt-ft", "{split}"),
)


def _command(job: Job) -> str:
    copy = f"(copy {job.copy_from} to {job.workdir()}) " if job.copy_from else ""
    return copy + "python " + " ".join(job.argv)


def _read_json(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def report_job(args) -> None:
    """RUNS/post_edit.json and RUNS/post_edit.md from the metrics.json of the runs."""
    at = Layout(args)
    by_name = {j.name: j for j in jobs(args)}
    workdirs = {"mt": at.mt, "levt-pe": at.levt_pe, "levt-ft": at.levt_ft}
    metrics = {run: _read_json(os.path.join(workdir, "metrics.json")) for run, workdir in workdirs.items()}
    made_by = {run: [by_name[run]] for run in workdirs}
    if "levt" in by_name:  # the LevT's own training, before its copy was evaluated
        made_by["levt-pe"].insert(0, by_name["levt"])
    configs = {"mt": args.mt_config, "levt-pe": args.levt_config, "levt-ft": args.levt_config}
    out = {"protocol": "Gu et al. 2019, Appendix C.2", "split": _read_json(
        os.path.join(at.data, "split.json")), "levt": at.levt, "mt": at.mt,
        "commands": {run: [_command(j) for j in js] for run, js in made_by.items()}, "tables": {},
        # the MT output the LevT was fine-tuned on, scored by the MT run's evaluation (a row of its own there)
        "mt_half_b": {k: metrics["mt"].get(f"mt-{args.train_split}", {}).get(k) for k in ("bleu", "ter")}}
    for split in at.tests:
        if "ter" not in metrics["mt"].get(split, {}):
            continue  # no references: nothing to score
        rows = []
        for label, run, key in ROWS:
            row = metrics[run].get(key.format(split=split), {})
            if "bleu" in row:
                rows.append({"row": label, "bleu": row["bleu"], "ter": row["ter"], "run": workdirs[run],
                             "metrics_row": key.format(split=split), "config": configs[run],
                             **{k: row[k] for k in ("init_bleu", "mean_steps") if k in row}})
        out["tables"][split] = rows
    with open(os.path.join(at.runs, "post_edit.json.tmp"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=2)
    os.replace(os.path.join(at.runs, "post_edit.json.tmp"), os.path.join(at.runs, "post_edit.json"))
    _write_lines(os.path.join(at.runs, "post_edit.md"), markdown(out))
    print(os.path.join(at.runs, "post_edit.md"))


def _number(value) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) else "–"


def markdown(out: dict) -> list[str]:
    s = out["split"]
    lines = [f"# Post-editing as in {out['protocol']}", "",
             f"The MT model ({out['mt']}) was trained on half A of the training pairs of {s['data_dir']} "
             f"({s['half_a']} of {s['sentences']}, seed {s['seed']}); its output on half B ({s['half_b']} pairs) is "
             f"what the LevT was fine-tuned to post-edit (BLEU {_number(out['mt_half_b']['bleu'])}, TER "
             f"{_number(out['mt_half_b']['ter'])}), its output on each test split what is post-edited below. "
             f"The LevT for translation: {out['levt']}. BLEU and TER are the evaluation's (metrics.json: sacreBLEU; "
             f"TER case-sensitive, as the paper's) against the references; Δ BLEU is against doing "
             f"nothing; steps are the LevT's mean decoding steps (`mean_steps`, the paper's count).", ""]
    for split, rows in out["tables"].items():
        base = next((r["bleu"] for r in rows if r["run"] == out["mt"]), None)
        lines += [f"## {split}", "", "| | BLEU ↑ | TER ↓ | Δ BLEU | steps | config | run: row of metrics.json |",
                  "|---|---|---|---|---|---|---|"]
        for r in rows:
            delta = f"{r['bleu'] - base:+.2f}" if base is not None and r["run"] != out["mt"] else "–"
            steps = f"{r['mean_steps']:.2f}" if "mean_steps" in r else "–"
            lines.append(f"| {r['row']} | {r['bleu']:.2f} | {r['ter']:.2f} | {delta} | {steps} | `{r['config']}` | "
                         f"`{os.path.basename(r['run'])}`: `{r['metrics_row']}` |")
        lines.append("")
    lines += ["## Commands", ""]
    for run, commands in out["commands"].items():
        lines.append(f"* `{run}`:")
        lines += [f"  * `{c}`" for c in commands]
    return lines


STEPS = {"split": split_job, "pe-data": pe_data_job, "report": report_job}


# -- the command line ------------------------------------------------------------------------------------------
def _config_path(parser, path: str, option: str) -> str:
    for candidate in (path, os.path.join(ROOT, path)):
        if os.path.isfile(candidate):
            full = os.path.abspath(candidate)
            return os.path.relpath(full, ROOT) if full.startswith(ROOT + os.sep) else full
    parser.error(f"{option}: no config file {path}")


def _settings(parser, values: list[str], option: str) -> list[str]:
    for value in values:
        if not KEY.match(value):
            parser.error(f"{option} {value!r}: expected KEY=VALUE with a dotted key, e.g. train.steps=100")
        if value.split("=", 1)[0] in RESERVED:
            parser.error(f"{option} {value!r}: the script sets {value.split('=', 1)[0]} itself "
                         "(--data-dir, --src, --tgt, --*-split(s), --levt-from)")
    return values


def parse_args(argv):
    parser = OneLineParser(prog="python launch/post_edit.py", description=__doc__.split("\n\n")[0],
                                     epilog="\n\n".join(__doc__.split("\n\n")[2:]),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", required=True,
                        help="the text corpus: {split}.{lang}[.gz] files of the train, valid and test splits")
    parser.add_argument("--runs", required=True, help="where the data halves, workdirs, logs and the table go")
    parser.add_argument("--mt-config", default="configs/ar/multi30k.py",
                        help="the MT model's config (default: %(default)s)")
    parser.add_argument("--levt-config", default="configs/levt/multi30k.py",
                        help="the LevT's config, for its training, evaluation and fine-tuning (default: %(default)s)")
    parser.add_argument("--levt-from", metavar="WORKDIR",
                        help="a LevT already trained for translation (with --levt-config and --levt-set): used instead "
                             "of training one on the whole corpus")
    parser.add_argument("--src", default="en", help="source language code of the files (default: %(default)s)")
    parser.add_argument("--tgt", default="de", help="target language code of the files (default: %(default)s)")
    parser.add_argument("--train-split", default="train", help="training split name (default: %(default)s)")
    parser.add_argument("--valid-split", default="val", help="validation split name (default: %(default)s)")
    parser.add_argument("--test-splits", default="test_2016_flickr",
                        help="comma list of test split names (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="the seed of the split into halves (default: 0)")
    for option, whose in (("--set", "every run"), ("--mt-set", "the MT run"),
                          ("--levt-set", "the LevT runs: its training, evaluation and fine-tuning"),
                          ("--ft-set", f"the fine-tuning only (after the roll-in {', '.join(ROLL_IN)})")):
        parser.add_argument(option, action="append", default=[], metavar="KEY=VALUE",
                            help=f"a config override (--config.KEY=VALUE) for {whose}; repeat for more")
    parser.add_argument("--status", action="store_true", help="where each job stands")
    parser.add_argument("--dry-run", action="store_true", help="print the commands without running them")
    parser.add_argument("--python", default=sys.executable, help=argparse.SUPPRESS)  # the tests' stand-in
    parser.add_argument("--job", choices=sorted(STEPS), help=argparse.SUPPRESS)  # one of the script's own jobs
    args = parser.parse_args(argv)
    for option in ("set", "mt_set", "levt_set", "ft_set"):
        _settings(parser, getattr(args, option), f"--{option.replace('_', '-')}")
    args.mt_config = _config_path(parser, args.mt_config, "--mt-config")
    args.levt_config = _config_path(parser, args.levt_config, "--levt-config")
    names = [args.train_split, args.valid_split, *args.test_splits.split(",")]
    if not all(re.fullmatch(r"[A-Za-z0-9_.-]+", n) for n in names) or len(set(names)) != len(names) or any(
            n.startswith("mt-") for n in names):
        parser.error(f"split names must be distinct words (letters, digits, _ . -) not starting with 'mt-' (the MT "
                     f"run's names for the splits it translates): {', '.join(names)}")
    if not re.fullmatch(r"[A-Za-z0-9_-]+", args.src + args.tgt) or args.src == args.tgt or INIT in (args.src,
                                                                                                      args.tgt):
        parser.error(f"--src and --tgt must be two different language codes, neither {INIT!r}")
    args.data_dir, args.runs = os.path.abspath(args.data_dir), os.path.abspath(args.runs)
    if args.levt_from:
        args.levt_from = os.path.abspath(args.levt_from)
    if not (args.status or args.dry_run or args.job):
        if not os.path.isdir(args.data_dir):
            parser.error(f"no data directory {args.data_dir}")
        needed = [(args.train_split, args.src), (args.train_split, args.tgt), (args.valid_split, args.src),
                  (args.valid_split, args.tgt), *((t, args.src) for t in args.test_splits.split(",") if t)]
        for split, lang in needed:
            if not any(os.path.isfile(os.path.join(args.data_dir, f"{split}.{lang}{gz}")) for gz in ("", ".gz")):
                parser.error(f"no {split}.{lang}[.gz] in {args.data_dir}")
        if args.levt_from and not os.path.isfile(os.path.join(args.levt_from, "config.json")):
            parser.error(f"--levt-from {args.levt_from}: not a trained workdir (no config.json)")
        if args.levt_from:  # the post-editing jobs fine-tune and decode it as a LevT: say so now, not in them
            try:
                with open(os.path.join(args.levt_from, "config.json"), encoding="utf-8") as f:
                    name = json.load(f)["model"]["name"]
            except (OSError, ValueError, KeyError, TypeError):
                name = None
            if name != "levt":
                parser.error(f"--levt-from {args.levt_from}: a workdir of model {name!r}, not a LevT")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.job:
        from jaxnat.errors import JaxnatError

        try:
            STEPS[args.job](args)
        except (Failed, JaxnatError, OSError, ValueError) as e:
            print(f"post_edit.py: error: {e}", file=sys.stderr)
            return 2
        return 0
    todo = jobs(args)
    state = os.path.join(args.runs, "pipeline")
    if args.dry_run:
        for job in todo:
            print(f"{job.name}: {_command(job)}")
        return 0
    if args.status:
        for job in todo:
            done = os.path.exists(os.path.join(state, "done", job.name))
            differs = other_options(state, job) if done else ""
            print(f"{job.name:<10} {'done' if done else 'to run' + progress(job)}"
                  + (f" with other options than now ({differs})" if differs else ""))
        return 0
    os.makedirs(os.path.join(state, "done"), exist_ok=True)
    code = run_jobs(todo, state, args.python)
    if os.path.exists(os.path.join(state, "done", "report")):
        print(f"table: {os.path.join(args.runs, 'post_edit.md')}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
