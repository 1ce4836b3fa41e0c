"""Evaluation reports: several evaluated workdirs on one test split, as the papers' tables.

    python -m jaxnat.report RUN_A RUN_B ... --split test --out reports/NAME [--baseline RUN_A]
        [--test bs|ar] [--samples 1000] [--names a,b,...] [--flat-within 0.5] [--model-analyses]
        [--column LABEL=KEY ...]

Runs of one configuration trained with other seeds share a name (`--names a,a,a,b,b,b`): each is a row of its
own (`a#1`, `a#2`, …), and the report adds their mean ± standard deviation and an independent two-sample t-test
of each configuration against the baseline's (Xu & Carpuat 2021, Tables 3-4).

Reads each workdir's `hyps/<split>.txt` and `metrics.json` (written by --mode eval or at the end of training)
and the split's references (from the config of the workdir's evaluation, `evaluate.evaluated_config`, so every
system must have been evaluated on the same references), and writes to --out:

* `report.md` / `report.json`: with --column, first a table in a paper's shape (the columns asked for, each row's
  training: steps, time, devices, commit, and whether it had converged); then per system BLEU with its 95%
  confidence interval and the p-value of the paired test against the baseline (sacreBLEU's own paired bootstrap
  resampling, `bs`, or approximate randomisation, `ar`, with its signature), chrF (the same test), TER, RIBES,
  repetition rate, mean length, the model's counts (iterations, edits), latency at batch 1 and throughput; the
  evaluation's other rows of the split (constraints, pairs, post-editing, diagnostic starts, iteration sweeps) with
  BLEU and CPR; target-word F1 by frequency bin of the word in the baseline's training targets (the analysis of the
  non-autoregressive translation papers); BLEU by source length (`LENGTH_BUCKETS` source words, Shan et al. 2021,
  Figure 3); for refining models (`hyps/<split>.counts.jsonl`), the histogram of iterations per sentence and their
  mean by source length (Gu et al. 2019, Table 6 and Figure 4a); with constraint pairs (data.pairs_dir), the share
  of the split's pairs that are training pairs and CSR over the seen and unseen ones (Wang et al. 2022, Table 8);
  with seeds, their mean ± standard deviation and t-test (BLEU, and CPR, in every evaluation row they share); where
  the workdirs record them (`runs.jsonl`, `jaxnat.provenance`), each system's training command, commits, devices,
  steps and training time; from each workdir's history.jsonl, its validation BLEU over training and whether it had
  stopped improving (flat over its last fifth of training, within --flat-within BLEU).
* `bleu_latency.png`: BLEU against latency (batch 1) per system, and BLEU against decoding time per
  sentence in batches across each system's iteration sweep (eval.iteration_sweep rows).
* `bleu_by_length.png`: BLEU per source-length bucket, a line per system (and the mean iterations).
* `valid_bleu.png`: each system's validation BLEU against its training steps.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import math
import os
import re
import statistics
import sys

from jaxnat import analyse, provenance, strict_json
from jaxnat.errors import ConfigError, JaxnatError, run_command
from jaxnat.optional import install_hint, optional
from jaxnat.paths import check_creatable_dir

log = logging.getLogger("jaxnat")

# target-word frequency bins, by the word's count in the training targets (compare-mt's defaults)
FREQUENCY_BINS = ((0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (5, 9), (10, 99), (100, 999), (1000, math.inf))
# init_bleu, init_ter: a post-editing row's initial hypotheses scored as they are, the "do nothing" it must beat
ROW_COLUMNS = ("bleu", "ter", "init_bleu", "init_ter", "cpr", "mean_length", "mean_iterations", "latency_ms", "seconds")
# the rows of eval.iteration_sweep / eval.oracle (T5, I3_oracle_deletion) and of eval.constraint_counts (hard_c4)
SWEEP_ROW = re.compile(r"([A-Z])(\d+)(?:_oracle_(\w+))?")
COUNT_ROW = re.compile(r"(soft|hard)_c(\d+)")
LAST_PART_START = 0.8  # convergence: the last fifth of a run's training, after this share of its validated steps
FLAT_WITHIN = 0.5  # ... is flat when its best validation BLEU gains at most this much over the best before it
# the report's pictures, as `main` draws them (`plot`, `plot_by_length`, `plot_curves`, `plot_training`)
PICTURES = ("bleu_latency.png", "bleu_by_length.png", "curves.png", "valid_bleu.png")
ABSENT = object()  # `lookup`'s answer, when asked, for a path a system's entry lacks (not one whose value is None)


# source-length buckets, in source words (`source_length`): 1-10, 11-20, …, 51+
LENGTH_BUCKETS = ((1, 10), (11, 20), (21, 30), (31, 40), (41, 50), (51, math.inf))


def source_length(src: str, lang: str) -> int:
    """A source sentence's words for its length bucket, at least 1: 13a's, or in a language written without spaces
    its characters (`jaxnat.data.words.word_tokens`; 13a would count a clause as one word)."""
    from jaxnat.data.words import unspaced, word_tokens
    from jaxnat.evaluation.metrics import tokenize

    return max(len(word_tokens(src, lang) if unspaced(lang) else tokenize(src)), 1)


def bleu_by_source_length(hyps: list[str], refs: list[str], srcs: list[str], src_lang: str = "en",
                          tokenize: str = "13a") -> dict[str, dict]:
    """sacreBLEU (tokenizer ``tokenize``) per bucket of source length (`LENGTH_BUCKETS`, `source_length` in
    ``src_lang``): {bucket label: {'sentences', 'bleu'}}; a bucket without sentences has BLEU None."""
    from jaxnat.evaluation.metrics import bleu

    out = {}
    for lo, hi in LENGTH_BUCKETS:
        chosen = [i for i, s in enumerate(srcs) if lo <= source_length(s, src_lang) <= hi]
        score = bleu([hyps[i] for i in chosen], [refs[i] for i in chosen], tokenize)[0] if chosen else None
        out[bin_label(lo, hi)] = {"sentences": len(chosen), "bleu": score}
    return out


def iteration_statistics(iterations: list[int], srcs: list[str], src_lang: str = "en") -> dict:
    """The decoding iterations of each sentence (Gu et al. 2019, Table 6 and Figure 4a): {'histogram': {iterations:
    sentences}, 'by_length': {source-length bucket (`LENGTH_BUCKETS`, `source_length`): mean iterations, None where
    empty}}."""
    histogram = collections.Counter(iterations)
    by_length = {}
    for lo, hi in LENGTH_BUCKETS:
        chosen = [n for n, s in zip(iterations, srcs) if lo <= source_length(s, src_lang) <= hi]
        by_length[bin_label(lo, hi)] = statistics.fmean(chosen) if chosen else None
    return {"histogram": {str(k): histogram[k] for k in sorted(histogram)}, "by_length": by_length}


def sweep_curves(rows: dict) -> dict[str, dict[int, dict]]:
    """The iteration-sweep rows of a system (`SWEEP_ROW`), as {curve: {depth: row}}: curve "" for plain decoding,
    "oracle_<mode>" for decoding with the oracle taking some steps (Gu et al. 2019, Figure 5)."""
    curves: dict[str, dict[int, dict]] = {}
    for name, row in rows.items():
        if m := SWEEP_ROW.fullmatch(name):
            curves.setdefault(f"oracle_{m[3]}" if m[3] else "", {})[int(m[2])] = row
    return {c: dict(sorted(v.items())) for c, v in sorted(curves.items())}


def count_curves(rows: dict) -> dict[str, dict[int, dict]]:
    """The constraint-count rows of a system (`COUNT_ROW`), as {mode: {number of constraints: row}} (Xu & Carpuat
    2021, Figure 5)."""
    curves: dict[str, dict[int, dict]] = {}
    for name, row in rows.items():
        if m := COUNT_ROW.fullmatch(name):
            curves.setdefault(m[1], {})[int(m[2])] = row
    return {c: dict(sorted(v.items())) for c, v in sorted(curves.items())}


def repetition_histogram(hyps: list[str], tokenize: str = "13a") -> dict[str, int]:
    """{r: the number of sentences where some word is repeated r times in a row (r + 1 equal consecutive words of
    sacreBLEU's tokenizer ``tokenize``)}, for every r that occurs (Huang et al. 2022, Figure 1(b), there after the
    first decoding pass)."""
    from jaxnat.evaluation.metrics import tokenize as words_of

    histogram: collections.Counter = collections.Counter()
    for hyp in hyps:
        runs, words = set(), words_of(hyp, tokenize)
        run = 0
        for k in range(1, len(words) + 1):
            if k < len(words) and words[k] == words[k - 1]:
                run += 1
            else:
                if run:
                    runs.add(run)
                run = 0
        histogram.update(runs)
    return {str(r): histogram[r] for r in sorted(histogram)}


def constraint_overlap(train: list[list[tuple[str, str]]], test: list[list[tuple[str, str]]],
                       hyps: dict[str, list[str]], lang: str) -> dict:
    """How many of the split's constraint pairs the training pairs hold, and whether that matters (Wang et al.
    2022, Table 8): {'pairs', 'seen' (% of the test pairs also a training pair, case kept), 'rows': {row: {'csr_seen',
    'csr_unseen'}}} for each decoding of the split (``hyps``: {row name: hypotheses}), CSR the share of the
    pairs' target phrases in the output (`contains_phrase`), over the seen and the unseen pairs apart."""
    from jaxnat.evaluation.metrics import contains_phrase

    known = {tuple(p) for sentence in train for p in sentence}
    pairs = [(i, tuple(p)) for i, sentence in enumerate(test) for p in sentence]
    seen = [p in known for _, p in pairs]
    rows = {}
    for row, outputs in hyps.items():
        found = [contains_phrase(outputs[i], p[1], lang=lang) for i, p in pairs]
        rows[row] = {f"csr_{kind}": (100.0 * sum(f for f, s in zip(found, seen) if s == want) / count
                                     if (count := sum(s == want for s in seen)) else None)
                     for kind, want in (("seen", True), ("unseen", False))}
    return {"pairs": len(pairs), "seen": 100.0 * sum(seen) / len(pairs) if pairs else None, "rows": rows}


def seed_statistics(names: list[str], bleus: list[float], baseline: str) -> dict[str, dict]:
    """Per configuration (the runs sharing a name): {name: {'runs', 'mean', 'std' (sample standard deviation;
    None for one run), 't', 'p' (Student's independent two-sample t-test against the baseline's runs; None for
    the baseline and where a side has one run)}}."""
    from scipy import stats

    groups: dict[str, list[float]] = {}
    for name, value in zip(names, bleus):
        groups.setdefault(name, []).append(value)
    out = {}
    for name, values in groups.items():
        base = groups[baseline]
        testable = name != baseline and len(values) > 1 and len(base) > 1
        t, p = stats.ttest_ind(values, base) if testable else (None, None)
        out[name] = {"runs": len(values), "mean": statistics.fmean(values),
                     "std": statistics.stdev(values) if len(values) > 1 else None,
                     "t": None if t is None else float(t), "p": None if p is None else float(p)}
    return out


def seed_rows(names: list[str], systems: list[dict]) -> dict[str, dict[str, dict]]:
    """`seed_statistics` of each evaluation row every run has (soft and hard constraints, constraint pairs, VDBA,
    the diagnostic's starts; not the iteration sweeps nor the per-count rows): {row: {'bleu': ..., 'cpr': ...}},
    CPR where every run has it. ``systems``: the report's entries, in the order of ``names``."""
    shared = [row for row in systems[0]["rows"] if all(row in s["rows"] for s in systems)
              and not SWEEP_ROW.fullmatch(row) and not COUNT_ROW.fullmatch(row)]
    out = {}
    for row in shared:
        values = [s["rows"][row] for s in systems]
        out[row] = {metric: seed_statistics(names, [v[metric] for v in values], names[0])
                    for metric in ("bleu", "cpr") if all(v.get(metric) is not None for v in values)}
    return out


def valid_curve(workdir: str) -> list[tuple[int, float]]:
    """(step, validation BLEU) of each validation in a run's history.jsonl, by step; [] where it has none."""
    from jaxnat.training.history import read_history, series

    return sorted(series(read_history(workdir), "valid_bleu", workdir))


def convergence(curve: list[tuple[int, float]], within: float) -> dict:
    """Has a run stopped improving? Its best validation BLEU and step, and the gain of its last fifth of training:
    the best validation after 0.8 × the last validated step minus the best up to it; flat: a gain of at most
    ``within`` BLEU (the Multi30k tables' "valid BLEU flat over the last 20% of training"). Gain and flat are None
    where either part has no validation."""
    if not curve:
        return {"best": None, "best_step": None, "gain": None, "flat": None}
    best_step, best = max(curve, key=lambda sb: (sb[1], -sb[0]))  # the first of equal scores
    cut = LAST_PART_START * curve[-1][0]
    before, last = [b for s, b in curve if s <= cut], [b for s, b in curve if s > cut]
    gain = max(last) - max(before) if before and last else None
    return {"best": best, "best_step": best_step, "gain": gain, "flat": None if gain is None else gain <= within}


def curve_points(curve: list[tuple[int, float]], parts: int = 5) -> list[tuple[int, float]]:
    """The validations nearest 1/parts, 2/parts, …, all of the last validated step (the report's table of the
    curve; the earlier of two equally near)."""
    return [min(curve, key=lambda sb: (abs(sb[0] - k * curve[-1][0] / parts), sb[0])) for k in range(1, parts + 1)]


def bin_label(low: int, high: float) -> str:
    return str(low) if low == high else (f"{low}+" if math.isinf(high) else f"{low}-{high}")


def word_f1_by_frequency(hyps: list[str], refs: list[str], train_refs: list[str], tokenize: str = "13a"
                         ) -> dict[str, dict]:
    """Target-word precision, recall and F1 per frequency bin: a word's bin is its count in `train_refs`;
    a hypothesis word matches a reference word of the same sentence at most once (clipped counts). Words are
    the tokens of sacreBLEU's tokenizer ``tokenize`` (BLEU's). Returns {bin label: {'ref_words', 'precision',
    'recall', 'f1'}} (in 0-100)."""
    from jaxnat.evaluation.metrics import tokenize as words_of

    freq = collections.Counter(w for line in train_refs for w in words_of(line, tokenize))

    def bin_of(word):
        n = freq[word]
        return next(i for i, (lo, hi) in enumerate(FREQUENCY_BINS) if lo <= n <= hi)

    match, hyp_n, ref_n = ([0] * len(FREQUENCY_BINS) for _ in range(3))
    for hyp, ref in zip(hyps, refs):
        h, r = collections.Counter(words_of(hyp, tokenize)), collections.Counter(words_of(ref, tokenize))
        for w, c in h.items():
            hyp_n[bin_of(w)] += c
            match[bin_of(w)] += min(c, r[w])
        for w, c in r.items():
            ref_n[bin_of(w)] += c
    out = {}
    for i, (lo, hi) in enumerate(FREQUENCY_BINS):
        p = 100.0 * match[i] / hyp_n[i] if hyp_n[i] else 0.0
        r = 100.0 * match[i] / ref_n[i] if ref_n[i] else 0.0
        out[bin_label(lo, hi)] = {"ref_words": ref_n[i], "hyp_words": hyp_n[i], "precision": p, "recall": r,
                                  "f1": 2 * p * r / (p + r) if p + r else 0.0}
    return out


class System:
    """One evaluated workdir: its name, config, split hypotheses and metrics rows."""

    def __init__(self, workdir: str, name: str, split: str):
        from jaxnat.evaluate import evaluated_config

        self.workdir, self.name = workdir, name
        self.config = evaluated_config(workdir)
        path = os.path.join(workdir, "metrics.json")
        hyp_path = os.path.join(workdir, "hyps", f"{split}.txt")
        if not (os.path.isfile(path) and os.path.isfile(hyp_path)):
            raise JaxnatError(f"{workdir} has no evaluation of split {split!r} ({path} and {hyp_path}); run "
                              f"--mode eval on it first")
        metrics = _read(path, json.load)
        if not isinstance(metrics, dict) or not all(isinstance(row, dict) for row in metrics.values()):
            raise JaxnatError(f"{path} is not an evaluation's {{row: {{metric: value}}}}; evaluate the run again "
                              f"(--mode eval)")
        if split not in metrics:
            raise JaxnatError(f"{path} has no row {split!r} (rows: {', '.join(sorted(metrics))})")
        self.main = metrics[split]
        self.rows = {k[len(split) + 1:]: v for k, v in metrics.items() if k.startswith(split + "+")}
        self.hyps = _read(hyp_path, lambda f: [line.rstrip("\n") for line in f])
        self.split = split
        counts = os.path.join(workdir, "hyps", f"{split}.counts.jsonl")  # a model's per-sentence counts, if any
        self.counts = _read(counts, lambda f: [json.loads(line) for line in f]) if os.path.isfile(counts) else None


def _read(path: str, parse):
    """``parse`` of the open UTF-8 file ``path`` of an evaluation; a one-line JaxnatError for a damaged one (not
    JSON, not UTF-8: cut short by a full disk, edited by hand)."""
    try:
        with open(path, encoding="utf-8") as f:
            return parse(f)
    except (ValueError, RecursionError) as e:  # (JSONDecodeError, UnicodeDecodeError are ValueErrors; nesting)
        raise JaxnatError(f"{path} cannot be read ({e}); evaluate the run again (--mode eval)") from None


def row_hyps(system: System, rows: tuple[str, ...]) -> dict[str, list[str]]:
    """The hypotheses of the evaluation's rows of the split that ``system`` has (`hyps/<split>.<row>.txt`; "" is
    the plain row): rows of its metrics.json only, since an evaluation leaves the files of an earlier one's other
    rows in hyps/."""
    out = {}
    for row in rows:
        if not row:
            out["plain"] = system.hyps
        elif row in system.rows and os.path.isfile(path := os.path.join(system.workdir, "hyps",
                                                                         f"{system.split}.{row}.txt")):
            with open(path, encoding="utf-8") as f:
                out[row] = [line.rstrip("\n") for line in f]
    return out


def paired_test(systems: list[System], refs: list[str], test: str, samples: int, tokenize: str = "13a"
                ) -> tuple[dict, dict]:
    """sacreBLEU's paired test of every system against the first (BLEU with the tokenizer ``tokenize``): ({metric:
    signature}, {metric: [Result]})."""
    from sacrebleu.metrics import BLEU, CHRF
    from sacrebleu.significance import PairedTest

    pt = PairedTest([(s.name, s.hyps) for s in systems], {"BLEU": BLEU(tokenize=tokenize), "chrF": CHRF()}, [refs],
                    test_type=test, n_samples=samples)
    signatures, results = pt()
    return {k: str(v) for k, v in signatures.items()}, {k: v for k, v in results.items() if k != "System"}


def drawn_constraints(workdir: str, split: str) -> str | None:
    """The constraints a run's evaluation drew from the references of ``split`` (`hyps/<split>.constraints.jsonl`, as
    text), or None where it drew none: two systems' constrained rows compare only on the same set."""
    path = os.path.join(workdir, "hyps", f"{split}.constraints.jsonl")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None


def build_report(workdirs: list[str], split: str, baseline: int = 0, names: list[str] | None = None,
                 test: str = "bs", samples: int = 1000, model_analyses: bool = False,
                 flat_within: float = FLAT_WITHIN, columns: list[tuple[str, str]] = ()) -> dict:
    """The report as a JSON-able dict (see the module docstring); the baseline system is listed first. With
    ``model_analyses``, each system's family's own `Analysis` of its workdir too; ``flat_within``: the gain in
    validation BLEU over the last fifth of training up to which a run counts as converged (`convergence`);
    ``columns``: (label, key) of the report's first table (`parse_column`); a key no system has is logged."""
    from jaxnat.config import workdir_config
    from jaxnat.data.sources import load_corpus, load_pairs
    from jaxnat.evaluate import trained_since_evaluation
    from jaxnat.evaluation.metrics import check_bleu_tokenize, corpus_metrics, run_bleu_tokenize
    from jaxnat.models import family_of

    if not workdirs:
        raise ConfigError("name at least one evaluated workdir")
    names = names or default_names(workdirs)
    if len(names) != len(workdirs):
        raise ConfigError(f"--names must give {len(workdirs)} names, one per workdir (a name repeated: seeds)")
    order = [baseline] + [i for i in range(len(workdirs)) if i != baseline]
    configurations = [names[i] for i in order]  # runs of one configuration (seeds) share a name
    rows = [f"{n}#{configurations[:k + 1].count(n)}" if configurations.count(n) > 1 else n
            for k, n in enumerate(configurations)]
    systems = [System(workdirs[i], row, split) for i, row in zip(order, rows)]
    seeded = {}  # (name, train.seed) -> workdir: runs of one name are seeds, their statistics a mean over seeds
    for s, name in zip(systems, configurations):
        if configurations.count(name) > 1:
            seed = workdir_config(s.workdir).train.seed  # the seed it trained with (its evaluations' may differ)
            if (name, seed) in seeded:
                raise ConfigError(f"--names: {seeded[name, seed]} and {s.workdir} share the name {name!r} and "
                                  f"train.seed={seed}; runs of one name are seeds of one configuration, each trained "
                                  f"with its own train.seed")
            seeded[name, seed] = s.workdir
    corpus = load_corpus(systems[0].config.data)
    if split not in corpus or corpus[split][1] is None:
        raise JaxnatError(f"the baseline's data has no references for split {split!r}")
    refs = corpus[split][1]
    for s in systems:  # other data first: the cause of another number of hypotheses too
        # systems trained on the same data (the usual case) share one load: a synthetic corpus is not regenerated
        data, base = s.config.data.to_dict(), systems[0].config.data.to_dict()
        if data != base and load_corpus(s.config.data).get(split, (None, None))[1] != refs:
            differ = ", ".join(f"{k} {data.get(k)!r} / {base.get(k)!r}" for k in sorted(set(data) | set(base))
                               if data.get(k) != base.get(k))
            raise JaxnatError(f"{s.workdir} was evaluated on other references of {split!r} than the baseline (its "
                              f"evaluation's data / the baseline's: {differ})")
        if len(s.hyps) != len(refs):
            raise JaxnatError(f"{s.workdir}: {len(s.hyps)} hypotheses for the {len(refs)} references of {split!r}")
    langs = systems[0].config.data  # the baseline's languages and BLEU tokenizer
    tokenize = run_bleu_tokenize(systems[0].config)
    check_bleu_tokenize(tokenize)
    signatures, tests = paired_test(systems, refs, test, samples, tokenize)
    train_refs = corpus["train"][1]
    baseline_drawn = drawn_constraints(systems[0].workdir, split)
    report = {"split": split, "sentences": len(refs), "baseline": systems[0].name, "test": test,
              "samples": samples, "flat_within": flat_within, "signatures": signatures, "systems": []}
    for k, s in enumerate(systems):
        m = corpus_metrics(s.hyps, refs, lang=langs.tgt_lang, bleu_tokenizer=tokenize)
        entry = {"name": s.name, "workdir": os.path.abspath(s.workdir), "model": s.config.model.name,
                 "bleu": m["bleu"], "tok_bleu": m["tok_bleu"], "chrf": m["chrf"], "ter": m["ter"], "ribes": m["ribes"],
                 "repetition": m["repetition"], "mean_length": s.main.get("mean_length")}
        for metric, key in (("BLEU", "bleu"), ("chrF2", "chrf")):
            r = tests[metric][k]
            entry[f"{key}_ci"] = None if r.ci is None else float(r.ci)  # ar: no interval
            entry[f"{key}_p"] = None if r.p_value is None else float(r.p_value)
        entry.update({k2: v for k2, v in s.main.items() if k2.startswith("mean_") and k2 != "mean_score"})
        entry.update({k2: s.main[k2] for k2 in ("cpr", "latency_ms", "sentences_per_s", "ece", "ece_confidence",
                                                "ece_accuracy") if k2 in s.main})
        # the split's metrics.json row as evaluated, with the metrics a family adds of its own (`output_metrics`)
        entry["metrics"] = {k2: v for k2, v in s.main.items() if v is None or isinstance(v, (int, float))}
        family = family_of(s.config.model.name)
        entry["architecture"] = {k: s.config[family.name][k] for k in family.architecture}
        base_latency = report["systems"][0].get("latency_ms") if report["systems"] else entry.get("latency_ms")
        if base_latency and entry.get("latency_ms"):
            entry["speedup"] = base_latency / entry["latency_ms"]  # the baseline's latency over this one's
        entry["rows"] = {row: {c: v[c] for c in ROW_COLUMNS if c in v} for row, v in s.rows.items()}
        first_pass = [r for r in s.rows if (m := SWEEP_ROW.fullmatch(r)) and m[2] == "1" and not m[3]]
        entry["repetitions"] = {"output": repetition_histogram(s.hyps, tokenize),
                                **{f"first pass ({r})": repetition_histogram(h, tokenize)
                                   for r, h in row_hyps(s, tuple(first_pass)).items()}}
        if model_analyses and family.analysis is not None:
            entry["analysis"] = analyse.measure(s.workdir)
        elif model_analyses:
            report.setdefault("unanalysed", []).append(s.name)  # said in the report, not left out without a word
        entry["word_f1"] = word_f1_by_frequency(s.hyps, refs, train_refs, tokenize)
        entry["by_length"] = bleu_by_source_length(s.hyps, refs, corpus[split][0], langs.src_lang, tokenize)
        entry["runs"] = provenance.summary(s.workdir)  # None for a workdir trained before runs.jsonl existed
        if (own := run_bleu_tokenize(s.config)) != tokenize:
            # its Scores row is scored here with the baseline's tokenizer, its metrics.json rows were not
            entry["bleu_tokenize"] = own
            log.warning("%s was evaluated with BLEU tokenized by %s, the baseline with %s: its other rows' BLEU is "
                        "not comparable (evaluate it again with --config.eval.bleu_tokenize=%s)", s.workdir, own,
                        tokenize, tokenize)
        if (drawn := drawn_constraints(s.workdir, split)) != baseline_drawn and drawn and baseline_drawn:
            entry["other_constraints"] = True
            log.warning("%s drew other constraints from the references of %s than the baseline (another "
                        "eval.constraint_seed, or Chinese, Japanese or Korean words cut otherwise): its constrained "
                        "rows are not comparable (evaluate it again as the baseline was)", s.workdir, split)
        if trained_since_evaluation(s.workdir):  # its scores are not of the training its row shows
            entry["trained_since_evaluation"] = True
            log.warning("%s trained on after its evaluation (metrics.json): its scores are of earlier checkpoints; "
                        "evaluate it again (--mode eval)", s.workdir)
        curve = valid_curve(s.workdir)
        entry["training"] = {"valid_bleu": [list(sb) for sb in curve], **convergence(curve, flat_within)}
        if s.counts and "iterations" in s.counts[0] and len(s.counts) == len(refs):
            entry["iterations"] = iteration_statistics([c["iterations"] for c in s.counts], corpus[split][0],
                                                       langs.src_lang)
        report["systems"].append(entry)
    # the split's constraint pairs: those of the first system evaluated with pairs (the baseline is often a model
    # that takes none, the one the paired model is compared with), {} where none was
    paired = next((s for s in systems if s.config.data.pairs_dir), None)
    pairs = load_pairs(paired.config.data, corpus) if paired else {}
    if split in pairs:
        for entry, s in zip(report["systems"], systems):
            entry["constraint_overlap"] = constraint_overlap(pairs["train"], pairs[split],
                                                             row_hyps(s, ("", "pairs", "pairs_hard")),
                                                             s.config.data.tgt_lang)
    for label, key in columns:  # a value the evaluations did not measure (no constraints, no latency) shows as "–"
        for part in key.split("/"):
            if all(lookup(e, part, missing=ABSENT) is ABSENT for e in report["systems"]):
                log.warning("--column %s=%s: no system has %r (keys of a system: %s; rows: %s)", label, key, part,
                            ", ".join(sorted(report["systems"][0])), ", ".join(sorted(report["systems"][0]["rows"]))
                            or "none")
    report["columns"] = [list(c) for c in columns]
    if len(set(configurations)) < len(configurations):
        report["seeds"] = seed_statistics(configurations, [e["bleu"] for e in report["systems"]], configurations[0])
        report["seed_rows"] = seed_rows(configurations, report["systems"])
    return report


def default_names(workdirs: list[str]) -> list[str]:
    """The systems' names without --names: their workdirs' names, each once (runs that share a name are seeds of one
    configuration, which only --names says: two runs/<family>/run would have been averaged as seeds)."""
    names = [os.path.basename(os.path.normpath(w)) for w in workdirs]
    for k, name in enumerate(names):
        if name in names[:k]:
            raise ConfigError(f"the workdirs {workdirs[names.index(name)]} and {workdirs[k]} are both named {name!r}: "
                              f"name the systems with --names (a name repeated only for seeds of one configuration)")
    return names


def parse_names(text: str) -> list[str]:
    """--names a,b,... → the names, without the spaces around each: "a, a" names one configuration twice (seeds),
    not "a" and " a". An empty name is refused."""
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise ConfigError(f"--names has an empty name: {text!r} (comma-separated names, one per workdir)")
    return names


def parse_column(spec: str) -> tuple[str, str]:
    """--column LABEL=KEY → (label, key). KEY: a dotted path into a system's entry of report.json (`bleu`,
    `tok_bleu`, `metrics.repeated`, `rows.soft.bleu`, `training.best`, `runs.steps`), or two of them as
    KEY/KEY2, shown as "value (value2)" (a BLEU with its CPR)."""
    label, eq, key = spec.rpartition("=")
    if not eq or not label.strip() or not key.strip() or any(not p for p in key.strip().split("/")):
        raise ConfigError(f"--column wants LABEL=KEY or LABEL=KEY/KEY2 (e.g. 'soft: BLEU (CPR)=rows.soft.bleu/"
                          f"rows.soft.cpr'), got {spec!r}")
    return label.strip(), key.strip()


def lookup(entry: dict, key: str, missing=None):
    """The value at a dotted path of a system's report entry; ``missing`` where it has none."""
    value = entry
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return missing
        value = value[part]
    return value


def _value(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return cell(value) if isinstance(value, float) or value is None else str(value)


def _table_section(report: dict) -> list[str]:
    """Markdown lines of the table of --column: a row per system, the columns asked for, then its training (steps,
    time, devices, commit: runs.jsonl) and whether it had converged; no lines without columns."""
    if not report.get("columns"):
        return []
    labels = [label for label, _ in report["columns"]]
    lines = ["## Table", "", "The columns asked for (`--column`); then each system's training from its workdir's "
             "runs.jsonl (steps, wall time from the command's start, devices, commit) and whether its validation BLEU "
             "had stopped improving (\"Training curves\" below).", "",
             "| system | " + " | ".join(labels) + " | steps | training time | devices | commit | converged |",
             "|" + "---|" * (len(labels) + 6)]
    for s in report["systems"]:
        cells = []
        for _, key in report["columns"]:
            first, *second = values = [lookup(s, k) for k in key.split("/")]
            cells.append("–" if all(v is None for v in values) else
                         _value(first) + "".join(f" ({_value(v)})" for v in second))
        lines.append(f"| {s['name']} | " + " | ".join([*cells, *_run_cells(s.get("runs")),
                                                          _value(s["training"]["flat"])]) + " |")
    return lines + [""]


def _run_cells(runs: dict | None) -> list[str]:
    """A system's training as table cells (`provenance.summary`): steps, wall time, devices, commits ("–" without a
    record)."""
    if runs is None:
        return ["–"] * 4
    took = "–" if runs["train_seconds"] is None else f"{runs['train_seconds'] / 60:.1f} min"
    return [_value(runs["steps"]), took, ", ".join(runs["devices"]), ", ".join(_short(c) for c in runs["commits"])]


def _short(commit: str) -> str:
    """A commit as the Runs table shows it: 12 hex digits, and its "+changes" mark (`provenance.commit`)."""
    sha, plus, mark = commit.partition("+")
    return sha[:12] + plus + mark


def cell(value, digits: int = 2) -> str:
    """A number as the report's tables show it (``digits`` decimals; "–" for none or NaN)."""
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def to_markdown(report: dict) -> str:
    systems = report["systems"]
    lines = [f"# {report['split']} ({report['sentences']} sentences)", "",
             f"Paired {'bootstrap resampling' if report['test'] == 'bs' else 'approximate randomisation'} against "
             f"**{report['baseline']}** (sacreBLEU; p < 0.05 marked *). BLEU: sacreBLEU on detokenized text, its "
             f"signature below; tok. BLEU: multi-bleu.perl's on Moses tokens of the target language (Chinese and "
             f"Japanese characters one each), no smoothing (the papers' tables); RIBES on the same tokens.", "",
             *_table_section(report), "## Scores", ""]
    counts = sorted({k for s in systems for k in s if k.startswith("mean_") and k != "mean_length"})
    head = ["system", "model", "BLEU", "± 95% CI", "p", "tok. BLEU", "chrF", "p (chrF)", "TER", "RIBES", "repetition %",
            "mean length", *[c[5:] for c in counts], "CPR %", "ECE (prob. / acc.)", "latency ms", "speed-up",
            "sentences/s", "architecture"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in systems:
        star = "*" if s["bleu_p"] is not None and s["bleu_p"] < 0.05 else ""
        cells = [s["name"], s["model"], cell(s["bleu"]) + star, cell(s["bleu_ci"]), cell(s["bleu_p"], 4),
                 cell(s["tok_bleu"]), cell(s["chrf"]), cell(s["chrf_p"], 4), cell(s["ter"]), cell(s["ribes"]),
                 cell(s["repetition"]), cell(s["mean_length"]), *[cell(s.get(c)) for c in counts],
                 cell(s.get("cpr")),
                 f"{cell(s.get('ece'))} ({cell(s.get('ece_confidence'), 1)} / {cell(s.get('ece_accuracy'), 1)})",
                 cell(s.get("latency_ms")), cell(s.get("speedup")),
                 cell(s.get("sentences_per_s")),
                 " ".join(f"{k}={v}" for k, v in s["architecture"].items()) or "–"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", *[f"- {k}: `{v}`" for k, v in report["signatures"].items()], ""]
    if stale := [s["name"] for s in systems if s.get("trained_since_evaluation")]:
        lines += [f"Trained on after their evaluation, so their scores are of earlier checkpoints than their training "
                  f"and curves show (evaluate them again: --mode eval): {', '.join(stale)}.", ""]
    if other := [f"{s['name']} (tok:{s['bleu_tokenize']})" for s in systems if s.get("bleu_tokenize")]:
        lines += [f"Evaluated with BLEU tokenized otherwise than the baseline, so the BLEU of their other rows below "
                  f"is not comparable with the table above, rescored with the baseline's tokenizer (evaluate them "
                  f"again with --config.eval.bleu_tokenize): {', '.join(other)}.", ""]
    if other := [s["name"] for s in systems if s.get("other_constraints")]:
        lines += [f"Evaluated with other constraints drawn from the references than the baseline (another "
                  f"eval.constraint_seed, or words cut otherwise), so their constrained rows below are not comparable "
                  f"with the baseline's: {', '.join(other)}.", ""]
    rows = sorted({r for s in systems for r in s["rows"]})
    if rows:
        columns = [c for c in ROW_COLUMNS if any(c in row for s in systems for row in s["rows"].values())]
        lines += ["## Other rows of the evaluation", "",
                  "| system | row | " + " | ".join(columns) + " |", "|" + "---|" * (len(columns) + 2)]
        for s in systems:
            for r in rows:
                if r in s["rows"]:
                    lines.append(f"| {s['name']} | {r} | " + " | ".join(cell(s["rows"][r].get(c))
                                                                       for c in columns) + " |")
        lines.append("")
    labels = list(systems[0]["word_f1"])
    lines += ["## Target-word F1 by frequency in the training targets", "",
              "| system | " + " | ".join(labels) + " |", "|" + "---|" * (len(labels) + 1),
              "| reference words | " + " | ".join(str(systems[0]["word_f1"][b]["ref_words"]) for b in labels) + " |"]
    for s in systems:
        lines.append(f"| {s['name']} | " + " | ".join(cell(s["word_f1"][b]["f1"]) for b in labels) + " |")
    buckets = list(systems[0]["by_length"])
    lines += ["", "## BLEU by source length (words)", "", "| system | " + " | ".join(buckets) + " |",
              "|" + "---|" * (len(buckets) + 1),
              "| sentences | " + " | ".join(str(systems[0]["by_length"][b]["sentences"]) for b in buckets) + " |"]
    for s in systems:
        lines.append(f"| {s['name']} | " + " | ".join(cell(s["by_length"][b]["bleu"]) for b in buckets) + " |")
    iterating = [s for s in systems if "iterations" in s]
    if iterating:
        most = max(int(k) for s in iterating for k in s["iterations"]["histogram"])
        counts = [str(k) for k in range(1, most + 1)]
        lines += ["", "## Iterations per sentence", "", "| system | " + " | ".join(counts) + " |",
                  "|" + "---|" * (len(counts) + 1)]
        for s in iterating:
            lines.append(f"| {s['name']} | " + " | ".join(str(s["iterations"]["histogram"].get(k, 0))
                                                         for k in counts) + " |")
        lines += ["", "Mean iterations by source length (words):", "", "| system | " + " | ".join(buckets) + " |",
                  "|" + "---|" * (len(buckets) + 1)]
        for s in iterating:
            lines.append(f"| {s['name']} | " + " | ".join(cell(s["iterations"]["by_length"][b]) for b in buckets)
                         + " |")
    overlaps = [s for s in systems if "constraint_overlap" in s]
    if overlaps:
        first = overlaps[0]["constraint_overlap"]
        lines += ["", "## Constraint pairs seen in training", "",
                  f"{cell(first['seen'])}% of the split's {first['pairs']} constraint pairs are also training pairs. "
                  f"CSR % of the seen and the unseen pairs:", "", "| system | row | seen | unseen |",
                  "|---|---|---|---|"]
        for s in overlaps:
            for row, v in s["constraint_overlap"]["rows"].items():
                lines.append(f"| {s['name']} | {row} | {cell(v['csr_seen'])} | {cell(v['csr_unseen'])} |")
    lines += _curve_sections(systems)
    if "seeds" in report:
        lines += ["", "## Seeds", "", f"BLEU (and CPR) over the runs of each configuration, in each evaluation row "
                  f"they all have; Student's t-test against {next(iter(report['seeds']))}'s runs.", "",
                  "| configuration | row | score | runs | mean | std | t | p |", "|---|---|---|---|---|---|---|---|"]
        tables = [("plain", "bleu", report["seeds"]), *((row, metric, groups)
                  for row, metrics in report.get("seed_rows", {}).items() for metric, groups in metrics.items())]
        for row, metric, groups in tables:
            for name, g in groups.items():
                lines.append(f"| {name} | {row} | {metric.upper()} | {g['runs']} | {cell(g['mean'])} | "
                             f"{cell(g['std'])} | {cell(g['t'])} | {cell(g['p'], 4)} |")
    analysed = [(s["model"], s["analysis"]) for s in systems if "analysis" in s]  # --model-analyses
    if analysed:
        lines += ["", analyse.tables(analysed)]
    if report.get("unanalysed"):
        lines += ["", f"Model analyses (--model-analyses): none of {', '.join(report['unanalysed'])}, whose families "
                  f"have no analysis of their own (analyses: {analyse.with_analysis()})."]
    lines += _training_section(systems, report["flat_within"])
    recorded = [s for s in systems if s.get("runs")]
    if recorded:
        lines += ["", "## Runs", "", "Each system's training command (`runs.jsonl` of its workdir), the commits and "
                  "devices of its recorded commands, and its training: steps, and wall time from the command's start "
                  "(compilation included; a resumed run's parts summed).", "",
                  "| system | steps | training time | devices | commit | command |", "|---|---|---|---|---|---|"]
        for s in recorded:
            lines.append(f"| {s['name']} | " + " | ".join(_run_cells(s["runs"])) + f" | `{s['runs']['command']}` |")
    return "\n".join(lines) + "\n"


def _training_section(systems: list[dict], flat_within: float) -> list[str]:
    """Markdown lines of each run's validation BLEU over training and whether it had converged (no lines where no
    system's history has a validation BLEU)."""
    trained = [s for s in systems if s["training"]["valid_bleu"]]
    if not trained:
        return []
    lines = ["", "## Training curves", "", "Validation BLEU over training (each workdir's history.jsonl, drawn in "
             "`valid_bleu.png`) at the validations nearest a fifth, two fifths, … of the last validated step; gain: "
             "the best validation BLEU of the last fifth of training minus the best before it; flat: a gain of at "
             f"most {cell(flat_within)} BLEU (`--flat-within`), the run has stopped improving.", "",
             "| system | validations | best (step) | 1/5 | 2/5 | 3/5 | 4/5 | last | gain, last fifth | flat |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for s in trained:
        t = s["training"]
        points = [f"{cell(b)} ({step})" for step, b in curve_points([tuple(sb) for sb in t["valid_bleu"]])]
        lines.append(f"| {s['name']} | {len(t['valid_bleu'])} | {cell(t['best'])} ({t['best_step']}) | "
                     + " | ".join(points) + f" | {cell(t['gain'])} | {_value(t['flat'])} |")
    return lines


def _analysed(systems: list[dict]) -> dict[str, list[dict]]:
    """{model: its systems' own analyses} of the families whose systems carry one (--model-analyses)."""
    models = sorted({s["model"] for s in systems if "analysis" in s})
    return {m: [s["analysis"] for s in systems if s["model"] == m and "analysis" in s] for m in models}


def plot_analyses(report: dict, directory: str) -> list[str]:
    """Each family's plot of its own analyses (`Analysis.plot`) at ``directory/<model>_analysis.png``."""
    from jaxnat.models import family_of

    drawn = []
    for m, results in _analysed(report["systems"]).items():
        path = analysis_picture(directory, m)
        if family_of(m).analysis.plot is not None and (Figure := _figure_class(path)) is not None:
            drawn.append(family_of(m).analysis.plot(results, path, Figure))
    return drawn


def analysis_picture(directory: str, model: str) -> str:
    return os.path.join(directory, f"{model}_analysis.png")


def stale_pictures(directory: str) -> list[str]:
    """The pictures of an earlier report in ``directory``, to remove before this one draws its own: it draws only
    those it has data (and matplotlib) for, and an earlier report's would stand beside it as if they were its."""
    from jaxnat import models

    paths = [os.path.join(directory, name) for name in PICTURES] + [analysis_picture(directory, m)
                                                                      for m in models.names()]
    return [p for p in paths if os.path.isfile(p)]


def _curve_table(curves: list[tuple[str, str, dict]], title: str, caption: str, kind: str,
                 second: tuple[str, int]) -> list[str]:
    """Markdown lines of a section with a row per (system, curve, {x: row}) and a column per x: "BLEU / <second>"
    (second: the metric and its digits); no lines without curves."""
    if not curves:
        return []
    xs = sorted({x for _, _, rows in curves for x in rows})
    key, digits = second
    lines = ["", f"## {title}", "", caption, "", f"| system | {kind} | " + " | ".join(map(str, xs)) + " |",
             "|" + "---|" * (len(xs) + 2)]
    for name, curve, rows in curves:
        cells = [f"{cell(rows[x]['bleu'])} / {cell(rows[x].get(key), digits)}" if x in rows else "–" for x in xs]
        lines.append(f"| {name} | {curve} | " + " | ".join(cells) + " |")
    return lines


def _curve_sections(systems: list[dict]) -> list[str]:
    """The iteration sweeps (with the oracle's curves), BLEU and CPR by number of constraints, and the repeated
    words per sentence, as markdown lines (each section only where some system has it)."""
    lines = []
    sweeps = [(s["name"], c or "model", rows) for s in systems for c, rows in sweep_curves(s["rows"]).items()]
    lines += _curve_table(sweeps, "Iteration sweeps", "BLEU / TER at each decoding depth (eval.iteration_sweep); "
                          "oracle_<mode>: the oracle takes those steps against the reference (Gu et al. 2019, "
                          "Figure 5).", "decoding", ("ter", 2))
    counted = [(s["name"], mode, rows) for s in systems for mode, rows in count_curves(s["rows"]).items()]
    lines += _curve_table(counted, "BLEU and CPR by number of constraints", "BLEU / CPR % with k reference words "
                          "as constraints (eval.constraint_counts; Xu & Carpuat 2021, Figure 5).", "mode", ("cpr", 1))
    most = max((int(r) for s in systems for h in s["repetitions"].values() for r in h), default=0)
    if most:
        rs = [str(r) for r in range(1, most + 1)]
        lines += ["", "## Repeated words per sentence", "", "Sentences where some word is repeated r times in a row "
                  "(Huang et al. 2022, Figure 1(b): after the first pass).", "",
                  "| system | decoding | " + " | ".join(rs) + " |", "|" + "---|" * (len(rs) + 2)]
        for s in systems:
            for what, h in s["repetitions"].items():
                lines.append(f"| {s['name']} | {what} | " + " | ".join(str(h.get(r, 0)) for r in rs) + " |")
    return lines


def plot_curves(report: dict, path: str) -> str | None:
    """Draws BLEU and TER against the decoding depth (each system's iteration sweep, and its oracle curves: Gu et
    al. 2019, Figure 5), BLEU and CPR against the number of constraints (Xu & Carpuat 2021, Figure 5) and the
    sentences with r repetitions in a row (Huang et al. 2022, Figure 1(b)) at ``path``, the panels some system
    has data for; returns it (None without data or matplotlib)."""
    systems = report["systems"]
    sweeps = [(f"{s['name']} {c}".strip(), rows) for s in systems for c, rows in sweep_curves(s["rows"]).items()]
    counted = [(f"{s['name']} {m}", rows) for s in systems for m, rows in count_curves(s["rows"]).items()]
    repeated = [(f"{s['name']} {what}", {int(r): {"sentences": n} for r, n in h.items()})
                for s in systems for what, h in s["repetitions"].items() if h]
    panels = [(sweeps, metric, "decoding depth") for metric in ("bleu", "ter") if sweeps]
    panels += [(counted, metric, "constraints (reference words)") for metric in ("bleu", "cpr") if counted]
    if repeated:
        panels.append((repeated, "sentences", "repetitions in a row"))
    if not panels:
        return None
    Figure = _figure_class(path)
    if Figure is None:
        return None
    fig = Figure(figsize=(5 * len(panels), 4))
    for ax, (curves, metric, xlabel) in zip(fig.subplots(1, len(panels), squeeze=False)[0], panels):
        for label, rows in curves:
            points = [(x, r[metric]) for x, r in rows.items() if r.get(metric) is not None]
            ax.plot([x for x, _ in points], [y for _, y in points], marker="o", label=label)
        name = metric.upper() if metric != "sentences" else "sentences"
        ax.set(xlabel=xlabel, ylabel=name, title=f"{name} by {xlabel.split(' (')[0]}")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def plot_training(report: dict, path: str) -> str | None:
    """Draws each system's validation BLEU against its training steps at ``path``, the last fifth of the longest
    run shaded (where `convergence` looks); returns it (None where no system has a validation BLEU, or without
    matplotlib)."""
    trained = [s for s in report["systems"] if s["training"]["valid_bleu"]]
    if not trained or (Figure := _figure_class(path)) is None:
        return None
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    for s in trained:
        steps, bleus = zip(*s["training"]["valid_bleu"])
        ax.plot(steps, bleus, marker=".", label=s["name"])
    last = max(s["training"]["valid_bleu"][-1][0] for s in trained)
    ax.axvspan(LAST_PART_START * last, last, color="0.9", zorder=0)
    ax.set(xlabel="training step", ylabel="validation BLEU", title="validation BLEU over training")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def _figure_class(path: str):
    """matplotlib's Figure, or None with a log line that ``path`` is not drawn (matplotlib: the plots extra)."""
    if optional("matplotlib") is None:
        log.info("%s not drawn: matplotlib is not installed (%s)", os.path.basename(path), install_hint("matplotlib"))
        return None
    from matplotlib.figure import Figure  # no pyplot: the caller's backend (a notebook's) stays as it is

    return Figure


def plot_by_length(report: dict, path: str) -> str | None:
    """Draws BLEU per source-length bucket, a line per system, and beside it the mean decoding iterations per
    bucket of the systems that iterate (Gu et al. 2019, Figure 4a), at ``path``; returns it (None without
    matplotlib)."""
    Figure = _figure_class(path)
    if Figure is None:
        return None
    iterating = [s for s in report["systems"] if "iterations" in s]
    fig = Figure(figsize=(12 if iterating else 6, 4))
    axes = fig.subplots(1, 2 if iterating else 1, squeeze=False)[0]
    panels = [(axes[0], report["systems"], lambda s: {b: v["bleu"] for b, v in s["by_length"].items()}, "BLEU")]
    if iterating:
        panels.append((axes[1], iterating, lambda s: s["iterations"]["by_length"], "mean iterations"))
    for ax, systems, values, label in panels:
        for s in systems:
            points = [(b, v) for b, v in values(s).items() if v is not None]
            ax.plot([b for b, _ in points], [v for _, v in points], marker="o", label=s["name"])
        ax.set(xlabel="source length, words", ylabel=label, title=f"{label} by source length")
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def plot(report: dict, path: str) -> str | None:
    """Draws the BLEU/latency picture at ``path`` and returns it; None, with a log line, without matplotlib (the
    plots extra)."""
    Figure = _figure_class(path)
    if Figure is None:
        return None
    fig = Figure(figsize=(11, 4))
    a, b = fig.subplots(1, 2)
    for s in report["systems"]:
        if "latency_ms" in s:
            a.scatter([s["latency_ms"]], [s["bleu"]])
            a.annotate(s["name"], (s["latency_ms"], s["bleu"]), textcoords="offset points", xytext=(4, 4))
        sweep = sorted(((r, v) for r, v in s["rows"].items() if re.fullmatch(r"[A-Z]\d+", r)),
                       key=lambda rv: int(rv[0][1:]))
        if sweep:
            ms = [1000 * v["seconds"] / report["sentences"] for _, v in sweep]
            b.plot(ms, [v["bleu"] for _, v in sweep], marker="o", label=s["name"])
            for (r, v), x in zip(sweep, ms):
                b.annotate(r, (x, v["bleu"]), textcoords="offset points", xytext=(3, 3), fontsize=8)
    a.set(xlabel="latency, ms per sentence (batch 1)", ylabel="BLEU", title="quality and latency")
    b.set(xlabel="ms per sentence (batches)", ylabel="BLEU", title="iteration sweeps")
    if b.lines:
        b.legend()
    for ax in (a, b):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jaxnat.report", description=__doc__.split("\n")[0])
    parser.add_argument("workdirs", nargs="+", help="evaluated workdirs")
    parser.add_argument("--split", default="test", help="the test split (default: test)")
    parser.add_argument("--out", required=True, help="directory for report.md, report.json and bleu_latency.png")
    parser.add_argument("--baseline", help="the workdir the others are tested against (default: the first)")
    parser.add_argument("--names", help="comma-separated system names, a name repeated for seeds of one configuration "
                                        "(default: the workdirs' names, which must differ)")
    parser.add_argument("--test", choices=("bs", "ar"), default="bs",
                        help="paired bootstrap resampling (bs, default) or approximate randomisation (ar)")
    parser.add_argument("--samples", type=int, default=1000, help="resamples / permutations (default 1000)")
    parser.add_argument("--model-analyses", action="store_true",
                        help="also each model family's own analysis of its workdirs (e.g. Huang et al. 2022's position "
                             "embeddings' cosine similarity and context use on 500 valid sentences)")
    parser.add_argument("--flat-within", type=float, default=FLAT_WITHIN,
                        help="a run has converged when the best validation BLEU of its last fifth of training "
                             f"exceeds the best before by at most this much (default {FLAT_WITHIN})")
    parser.add_argument("--column", action="append", default=[], metavar="LABEL=KEY",
                        help="a column of the report's first table, in the order given: a system's value at KEY, a "
                             "dotted path into its entry of report.json (bleu, rows.soft.bleu, metrics.repeated, "
                             "training.best), or KEY/KEY2 for 'value (value2)'")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("sacrebleu").setLevel(logging.ERROR)
    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # its INFO on the length buckets' string labels

    def write() -> int:
        check_creatable_dir(args.out, "--out")  # first: not after the resampling and the analyses
        if args.samples < 1:
            raise ConfigError(f"--samples must be positive, got {args.samples}")
        if not args.flat_within >= 0:  # (also NaN)
            raise ConfigError(f"--flat-within must be a BLEU difference of 0 or more, got {args.flat_within}")
        baseline = 0
        if args.baseline:
            real = [os.path.realpath(w) for w in args.workdirs]
            if os.path.realpath(args.baseline) not in real:
                raise ConfigError(f"--baseline {args.baseline} is not one of the workdirs")
            baseline = real.index(os.path.realpath(args.baseline))
        names = parse_names(args.names) if args.names else None
        columns = [parse_column(c) for c in args.column]
        report = build_report(args.workdirs, args.split, baseline, names, args.test, args.samples,
                              args.model_analyses, args.flat_within, columns)
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "report.json"), "w") as f:
            f.write(strict_json.dumps(report, indent=2))
        markdown = to_markdown(report)
        with open(os.path.join(args.out, "report.md"), "w") as f:
            f.write(markdown)
        for path in stale_pictures(args.out):
            os.remove(path)
        for draw, name in zip((plot, plot_by_length, plot_curves, plot_training), PICTURES):
            draw(report, os.path.join(args.out, name))
        plot_analyses(report, args.out)
        print(markdown)
        log.info("report: %s", os.path.join(args.out, "report.md"))
        return 0
    return run_command(write, "the same command makes the report again (--out is written at its end)",
                       (JaxnatError, OSError))


if __name__ == "__main__":
    sys.exit(main())
