"""The Multi30k study's targets, checked against the runs of `launch/multi30k.py`: which hold, which miss, which
cannot be told yet (a run not finished), and whether each trained run had stopped improving.

    python launch/targets.py --runs RUNS [--teacher ar|ar-small] [--flat-within 0.5] [--out DIR]

The teacher (the AR job that distilled) is read from the students' configs (data.spm_from) unless given.

Reads each job's workdir under RUNS (metrics.json: the test_2016_flickr row and its constraint, pair and VDBA rows;
history.jsonl: the validation curve) and prints a table, written also to DIR/targets.md and DIR/targets.json
(default RUNS/reports). The targets are those the tables are trained for (at convergence: validation BLEU flat over
the last fifth of training, `jaxnat.report.convergence`):

  AR ≥ 38 BLEU with beam 4 (the better of the AR models trained);
  LevT and EDITOR on distilled data within 1.5 BLEU of their teacher at ≤ 3 iterations (the papers' count:
  `mean_steps`), and CMLMC on distilled data within 1.5 BLEU of it;
  CMLMC on raw data within 2 BLEU of the AR model it shares its vocabulary with (the teacher, trained on the same
  raw data) and above CMLM;
  NAT-base and Coverage-NAT, rescored by the teacher, within 3 BLEU of it; Coverage-NAT repeating fewer tokens
  than NAT-base;
  EDITOR with soft constraints at or above its plain BLEU, CPR ≥ 90% and above LevT's; hard constraints 100% for
  every model that takes them (the one-pass models of the onepass table, DA-Transformer and CTC, a target apart);
  the vectorized model: CSR ≥ 95% with its pairs and beam search, 100% with VDBA, and with VDBA a BLEU above the
  vanilla AR model's with VDBA.

A miss is a finding to explain with its evidence (the reports' curves, controls and diagnostics), not an error:
the command exits 0 whatever holds, and 2 only for bad options or a damaged metrics.json or config.json.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from multi30k import TEACHERS, TEST, OneLineParser, jobs  # noqa: E402

from jaxnat.report import FLAT_WITHIN, cell, convergence, valid_curve  # noqa: E402

HARD = ("levt", "editor", "cmlm", "cmlmc")  # the models evaluated with hard constraints (eval.constraints)
ONEPASS_HARD = ("dat", "dat-kd", "ctc", "ctc-plain")  # ... of the onepass table (its own target: a table of its own)


class Runs:
    """The figures of the pipeline's workdirs under ``root``: metrics.json's rows of the test split."""

    def __init__(self, root: str):
        self.root, self.metrics = root, {}

    def row(self, job: str, row: str = "") -> dict | None:
        """The test split's row ("" the plain one, else e.g. "soft", "pairs_hard") of a job's metrics.json; None
        where the job has not been evaluated (or has no such row)."""
        if job not in self.metrics:  # each file read once
            path = os.path.join(self.root, job, "metrics.json")
            self.metrics[job] = _read(path) if os.path.isfile(path) else {}
        return self.metrics[job].get(f"{TEST}+{row}" if row else TEST)

    def value(self, job: str, key: str, row: str = ""):
        found = self.row(job, row)
        return None if found is None else found.get(key)

    def teacher(self) -> str:
        """The AR job whose vocabulary the students took (data.spm_from in their config.json): the one that
        distilled; "ar" where no student has a config yet."""
        for student in ("levt", "editor", "natbase", "covnat", "cmlm", "cmlmc"):
            path = os.path.join(self.root, student, "config.json")
            if os.path.isfile(path):
                name = os.path.basename(os.path.normpath(_read(path).get("data", {}).get("spm_from") or "ar"))
                if name in TEACHERS:
                    return name
        return "ar"


class Unreadable(Exception):
    """A workdir's file that is not the JSON object it should be (the command stops with one line, exit 2)."""


def _read(path: str) -> dict:
    """A workdir's JSON file (a dict)."""
    try:
        with open(path, encoding="utf-8") as f:
            found = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise Unreadable(f"{path} cannot be read as JSON ({e})") from None
    if not isinstance(found, dict):
        raise Unreadable(f"{path} holds no JSON object")
    return found


def _check(key: str, name: str, figures: str, *conditions) -> dict:
    """One target (``key``: its short name in targets.json): holds when every condition holds; None (not yet) where
    one could not be computed."""
    holds = None if any(c is None for c in conditions) else all(conditions)
    return {"key": key, "target": name, "figures": figures, "holds": holds}


def _le(a, b):
    """a ≤ b, or None where either is unknown."""
    return None if a is None or b is None else a <= b


def _lt(a, b):
    return None if a is None or b is None else a < b


def _minus(a, b):
    return None if a is None or b is None else a - b


def targets(runs: Runs, teacher: str) -> list[dict]:
    """Every target of the module docstring, checked against ``runs``; ``teacher``: the AR job that distilled."""
    bleu = {job: runs.value(job, "bleu") for job in (
        "ar", "ar-small", "levt", "editor", "cmlm", "cmlmc", "cmlmc-kd", "natbase-rescored", "covnat-rescored")}
    t = runs.value(teacher, "bleu")
    best_ar = max((b for b in (bleu["ar"], bleu["ar-small"]) if b is not None), default=None)
    out = [_check("ar", "AR ≥ 38 BLEU, beam 4", f"ar {cell(bleu['ar'])}, ar-small {cell(bleu['ar-small'])}",
                  _le(38.0, best_ar))]
    for job in ("levt", "editor"):
        steps, gap = runs.value(job, "mean_steps"), _minus(t, bleu[job])
        out.append(_check(job, f"{job} (distilled) within 1.5 BLEU of the teacher at ≤ 3 iterations",
                          f"{cell(bleu[job])} against {cell(t)} (gap {cell(gap)}), {cell(steps)} iterations",
                          _le(gap, 1.5), _le(steps, 3.0)))
    gap = _minus(t, bleu["cmlmc-kd"])
    out.append(_check("cmlmc-kd", "cmlmc (distilled) within 1.5 BLEU of the teacher",
                      f"{cell(bleu['cmlmc-kd'])} against {cell(t)} (gap {cell(gap)})", _le(gap, 1.5)))
    gap = _minus(t, bleu["cmlmc"])  # the teacher: the AR model on the same raw data, with the same vocabulary
    out.append(_check("cmlmc", "cmlmc (raw) within 2 BLEU of the teacher (raw) and above cmlm",
                      f"cmlmc {cell(bleu['cmlmc'])} against {cell(t)} (gap {cell(gap)}), cmlm {cell(bleu['cmlm'])}",
                      _le(gap, 2.0), _lt(bleu["cmlm"], bleu["cmlmc"])))
    for job in ("natbase-rescored", "covnat-rescored"):
        gap = _minus(t, bleu[job])
        out.append(_check(job, f"{job} within 3 BLEU of the teacher",
                          f"{cell(bleu[job])} against {cell(t)} (gap {cell(gap)})", _le(gap, 3.0)))
    nat, cov = runs.value("natbase", "repeated"), runs.value("covnat", "repeated")
    out.append(_check("covnat-repeats", "covnat repeats fewer tokens than natbase",
                      f"repeated % {cell(cov)} against {cell(nat)}", _lt(cov, nat)))
    soft, cpr, levt_cpr = (runs.value("editor", "bleu", "soft"), runs.value("editor", "cpr", "soft"),
                           runs.value("levt", "cpr", "soft"))
    out.append(_check("editor-soft", "editor's soft constraints: BLEU ≥ plain, CPR ≥ 90% and above levt's",
                      f"BLEU {cell(soft)} against {cell(bleu['editor'])}, CPR {cell(cpr)} (levt {cell(levt_cpr)})",
                      _le(bleu["editor"], soft), _le(90.0, cpr), _lt(levt_cpr, cpr)))
    hard = {job: runs.value(job, "cpr", "hard") for job in HARD}
    hard |= {f"{job} + VDBA": runs.value(job, "cpr", "pairs_hard") for job in ("ar-pairs", "vecconst", "vecconst-vdba")}
    out.append(_check("hard", "hard constraints: 100% CPR (CSR) for every model that takes them",
                      ", ".join(f"{job} {cell(c)}" for job, c in hard.items()),
                      *(_le(100.0, c) for c in hard.values())))
    onepass = {job: runs.value(job, "cpr", "hard") for job in ONEPASS_HARD}
    out.append(_check("hard-onepass", "hard constraints of the one-pass models: 100% CPR",
                      ", ".join(f"{job} {cell(c)}" for job, c in onepass.items()),
                      *(_le(100.0, c) for c in onepass.values())))
    beam_csr, vdba_csr = runs.value("vecconst", "cpr", "pairs"), hard["vecconst-vdba + VDBA"]
    vdba, vanilla = runs.value("vecconst-vdba", "bleu", "pairs_hard"), runs.value("ar-pairs", "bleu", "pairs_hard")
    out.append(_check("vecconst", "vecconst: CSR ≥ 95% with its pairs (beam), 100% with VDBA, and BLEU with VDBA "
                      "above vanilla + VDBA",
                      f"CSR {cell(beam_csr)}, with VDBA {cell(vdba_csr)}; "
                      f"BLEU + VDBA {cell(vdba)} against {cell(vanilla)}",
                      _le(95.0, beam_csr), _le(100.0, vdba_csr), _lt(vanilla, vdba)))
    return out


def converged(root: str, within: float) -> list[dict]:
    """Each trained workdir under ``root`` (one with a validation curve, not an evaluated copy of another): its
    best validation BLEU, the gain of its last fifth of training and whether that is flat
    (`jaxnat.report.convergence`)."""
    copies = {job.name for job in jobs("DATA", root, gpu=True) if job.copy_from}
    rows = []
    for job in sorted(set(os.listdir(root)) - copies):
        curve = valid_curve(os.path.join(root, job))
        if curve:
            rows.append({"job": job, "validations": len(curve), **convergence(curve, within)})
    return rows


def to_markdown(checked: list[dict], runs: list[dict], within: float) -> str:
    def verdict(holds):
        return "not yet" if holds is None else ("yes" if holds else "**no**")

    lines = ["| target | figures | holds |", "|---|---|---|"]
    lines += [f"| {c['target']} | {c['figures']} | {verdict(c['holds'])} |" for c in checked]
    lines += ["", f"Converged (validation BLEU of the last fifth of training at most {within:.2f} above the best "
              "before it):", "", "| run | validations | best (step) | gain, last fifth | flat |",
              "|---|---|---|---|---|"]
    lines += [f"| {r['job']} | {r['validations']} | {cell(r['best'])} ({r['best_step']}) | {cell(r['gain'])} | "
              f"{verdict(r['flat'])} |" for r in runs]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = OneLineParser(prog="python launch/targets.py", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", required=True, help="the pipeline's --runs directory")
    parser.add_argument("--teacher", choices=tuple(TEACHERS),
                        help="the AR job that distilled (default: the students' data.spm_from)")
    parser.add_argument("--flat-within", type=float, default=FLAT_WITHIN,
                        help=f"BLEU a run's last fifth of training may gain and still count as converged "
                             f"(default {FLAT_WITHIN})")
    parser.add_argument("--out", help="where targets.md and targets.json go (default RUNS/reports)")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.runs):
        parser.error(f"--runs {args.runs}: no such directory")
    if not args.flat_within >= 0:
        parser.error(f"--flat-within must be a BLEU difference of 0 or more, got {args.flat_within}")
    out = args.out or os.path.join(args.runs, "reports")
    if os.path.exists(out) and not os.path.isdir(out):
        parser.error(f"--out {out}: not a directory")
    found = Runs(args.runs)
    try:
        checked = targets(found, args.teacher or found.teacher())
    except Unreadable as e:
        print(f"targets.py: error: {e}", file=sys.stderr)
        return 2
    runs = converged(args.runs, args.flat_within)
    markdown = to_markdown(checked, runs, args.flat_within)
    try:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "targets.md"), "w", encoding="utf-8") as f:
            f.write(markdown)
        with open(os.path.join(out, "targets.json"), "w", encoding="utf-8") as f:
            json.dump({"targets": checked, "runs": runs, "flat_within": args.flat_within}, f, indent=2)
    except OSError as e:  # --out under a file, or not writable
        print(f"targets.py: error: --out {out}: cannot write there ({e.strerror or e})", file=sys.stderr)
        return 2
    print(markdown, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
