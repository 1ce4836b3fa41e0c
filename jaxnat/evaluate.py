"""Evaluation of a trained workdir: translate every test split with the best checkpoint, score it, measure
speed, and write `hyps/<split>.txt` and `metrics.json` = {split: {metric: value}} (constrained runs under
`<split>+soft` / `<split>+hard`, post-editing from the data's initial hypotheses under `<split>+init`, a glossary's
terms as constraints under `<split>+glossary`)."""

from __future__ import annotations

import hashlib
import json
import logging
import os

import numpy as np

from jaxnat import strict_json
from jaxnat.config import ensemble_members
from jaxnat.data.phrase_pairs import encode_pairs
from jaxnat.data.sources import load_corpus, load_inits, load_pairs
from jaxnat.data.text import one_line
from jaxnat.data.vocab import BOS_ID, EOS_ID
from jaxnat.data.words import segmenter, unspaced, word_tokens
from jaxnat.decoding.glossary import constraints_of, Glossary
from jaxnat.decoding.translator import Translator, check_arguments
from jaxnat.errors import DataError
from jaxnat.evaluation import diagnostic
from jaxnat.evaluation.calibration import calibration
from jaxnat.evaluation.constraints import make_constraints, write_constraints
from jaxnat.evaluation.metrics import (bleu, check_bleu_tokenize, constraint_preservation, contains_phrase,
                                      corpus_metrics, format_table, run_bleu_tokenize, ter)
from jaxnat.models import family_of
from jaxnat.paths import write_whole
from jaxnat.restore import load_translator, with_config

log = logging.getLogger("jaxnat")
EVALUATED = "metrics.record.json"  # what metrics.json was computed from (`already_evaluated`)


def _edit_counts(outs: list[dict], names: tuple[str, ...]) -> dict[str, float]:
    """Means per sentence of the model's counts (refining models: iterations, deletions, insertions, …)."""
    return {f"mean_{k}": float(np.mean([o[k] for o in outs])) for k in names}


def _own_metrics(translator: Translator, outs: list[dict], srcs: list[str]) -> dict[str, float]:
    """The metrics the model's family computes from its outputs (`Family.output_metrics`), if any."""
    hook = family_of(translator.spec.name).output_metrics
    return hook(outs, srcs) if hook else {}


def scores(hyps: list[str], refs: list[str], config, constraints: list[list[str]] | None = None) -> dict:
    """`corpus_metrics` in the run's target language (its words for the tokenized scores and CPR, its sacreBLEU
    tokenizer or eval.bleu_tokenize's), with the case-insensitive tokenized BLEU where eval.lowercase asks for it."""
    return corpus_metrics(hyps, refs, constraints, lang=config.data.tgt_lang, lowercase=config.eval.lowercase,
                          bleu_tokenizer=config.eval.bleu_tokenize)


def target_bleu(hyps: list[str], refs: list[str], config) -> float:
    """sacreBLEU of texts in the run's target language, tokenized as `scores` tokenizes them."""
    return bleu(hyps, refs, run_bleu_tokenize(config))[0]


def calibration_metrics(translator: Translator, outs: list[dict], refs: list[str]) -> dict:
    """Inference ECE of the model's own output tokens against the references' pieces (`jaxnat.evaluation.
    calibration`): ece, ece_confidence, ece_accuracy (×100)."""
    ref_pieces = [[str(i) for i in ids] for ids in translator.tokenizer.encode(refs, "tgt")]
    r = calibration([([str(i) for i in o["piece_ids"]], o["token_logp"], o["token_scored"]) for o in outs], ref_pieces)
    return {"ece": r["ece"], "ece_confidence": r["confidence"], "ece_accuracy": r["accuracy"]}


def _writes() -> bool:
    """Whether this process writes the results: with several processes (multi-process training evaluates at
    its end in every process, all computing the same), the first one does."""
    import jax

    return jax.process_index() == 0


def _write_lines(path: str, lines: list[str]) -> None:
    """One line per sentence, aligned with the references (`one_line`: a hypothesis's line break as a space)."""
    if _writes():
        write_whole(path, "".join(one_line(line) + "\n" for line in lines))


def _check_hard_phrases(translator: Translator, corpus: dict, pairs: dict, splits: list[str], config,
                        glossary: Glossary | None = None) -> dict:
    """The hard phrases an evaluation will ask, checked as a request's are before anything is decoded: the
    reference words of eval.constraints=hard, the constraint pairs' target phrases of row `<split>+pairs_hard` and the
    glossary's terms of row `<split>+glossary` (`glossary_terms`).
    A phrase the model cannot guarantee (characters its vocabulary lacks) fails at the start, naming the split,
    not after the plain pass. Returns {split: the reference words drawn} (the evaluation's, not drawn again)."""
    drawn = {}
    for split in splits:
        asked = {}
        refs = corpus[split][1]
        if "hard" in _split_list(config.eval.constraints) and refs is not None:
            drawn[split] = make_constraints(refs, config.eval.constraint_seed, lang=config.data.tgt_lang)
            asked["eval.constraints=hard (reference words as phrases)"] = drawn[split]
        if translator.spec.supports.hard_constraints and split in pairs:
            asked[f"data.pairs_dir's target phrases as hard constraints ({split}+pairs_hard)"] = [
                t or None for t in pair_targets(pairs[split])]
        if glossary is not None and refs is not None:
            asked[f"eval.glossary's terms ({split}+glossary)"] = glossary_terms(translator, corpus[split][0],
                                                                                glossary)[0]
        for what, phrases in asked.items():
            try:
                if isinstance(phrases, dict):  # the glossary's row: its constraints, hard or soft, and pairs
                    translator.starts(**phrases)
                    continue
                translator.starts(constraints=phrases, hard=[True] * len(phrases))
            except DataError as err:
                raise DataError(f"{split}, {what}: {err}") from None
    return drawn


def evaluate(config, workdir: str) -> dict:
    """Translates every test split (and, with eval.constraints, again with soft/hard constraint sets built
    from its references as in Post & Vilar 2018), writes hyps/ and metrics.json, prints the table."""
    check_bleu_tokenize(run_bleu_tokenize(config))  # not after decoding
    corpus = load_corpus(config.data)
    inits = evaluation_inits(config.data, corpus)
    translator = load_translator(config, workdir)
    e = config.eval
    modes = _split_list(e.constraints)  # config validation checked the model takes them
    pairs = load_pairs(config.data, corpus)  # {split: constraint pairs}; {} without data.pairs_dir
    os.makedirs(os.path.join(workdir, "hyps"), exist_ok=True)
    results = {}
    test_splits = [s for s in corpus if s not in ("train", "valid")]
    glossary = Glossary.of(config)
    drawn = _check_hard_phrases(translator, corpus, pairs, test_splits, config, glossary)
    if _writes():
        forget_evaluation(workdir)
    for i, split in enumerate(test_splits):
        srcs, refs = corpus[split]
        # (with MBR, the chosen output has no token scores: calibration reads the model's own best output's)
        outs = translator.translate(srcs, e.beam_size, e.batch_size, token_scores=not e.mbr, label=split, mbr=e.mbr)
        hyps = hyps_plain = [o["hyp"] for o in outs]
        _write_lines(os.path.join(workdir, "hyps", f"{split}.txt"), hyps)
        if translator.spec.supports.counts:  # per sentence, for the report's analyses (iterations by length)
            _write_lines(os.path.join(workdir, "hyps", f"{split}.counts.jsonl"),
                         [json.dumps({k: int(o[k]) for k in translator.spec.supports.counts}) for o in outs])
        metrics = {"mean_length": mean_length(hyps, config.data.tgt_lang)}
        if refs is not None:  # a test split without references is only translated
            metrics.update(scores(hyps, refs, config), reference_length=mean_length(refs, config.data.tgt_lang))
            metrics["copy_source_bleu"] = target_bleu(srcs, refs, config)
            if not e.mbr:
                metrics.update(calibration_metrics(translator, outs, refs))
        metrics["mean_score"] = float(np.mean([o["score"] for o in outs]))
        if e.mbr:  # how much the chosen outputs agree with the others of their beams
            metrics["mean_mbr_utility"] = float(np.nanmean([o.get("mbr_utility", np.nan) for o in outs]))
        if translator.spec.summary is not None:  # scalars of the decoded parameters (`ModelSpec.summary`)
            metrics.update(translator.spec.summary(translator.params))
        metrics.update(_edit_counts(outs, translator.spec.supports.counts))
        metrics.update(_own_metrics(translator, outs, srcs))
        if i == 0 and e.latency_sentences > 0:
            metrics.update(translator.speed(srcs, e.beam_size, e.latency_sentences, e.throughput_batch))
        results[split] = metrics
        if refs is not None:
            log.info("%s: BLEU %.2f (%s)", split, metrics["bleu"], metrics["bleu_signature"])
        # Moses words of the references: only where constraints are decoded, traced or diagnosed (sacremoses costs
        # half a second to load)
        wanted = modes or (i == 0 and e.trace_sentences > 0) or (e.diagnostic and translator.spec.supports.init)
        constraints = ((drawn[split] if split in drawn else make_constraints(refs, e.constraint_seed,
                                                                              lang=config.data.tgt_lang))
                       if refs is not None and wanted else None)
        if i == 0 and e.trace_sentences > 0:  # config validation checked the model traces
            n = e.trace_sentences
            path = write_trace(translator, os.path.join(workdir, "trace.html"), srcs[:n],
                               refs[:n] if refs else None, constraints[:n] if constraints else None, modes,
                               inits[split][:n] if split in inits else None)
            log.info("edit trace of %d sentences: %s", min(n, len(srcs)), path)
        if refs is None:
            continue
        if modes and _writes():
            write_constraints(os.path.join(workdir, "hyps", f"{split}.constraints.jsonl"), constraints)
        for mode in modes:
            outs = translator.translate(srcs, e.beam_size, e.batch_size, constraints=constraints,
                                        hard=[mode == "hard"] * len(srcs), label=f"{split}+{mode}", mbr=e.mbr)
            hyps = [o["hyp"] for o in outs]
            _write_lines(os.path.join(workdir, "hyps", f"{split}.{mode}.txt"), hyps)
            results[f"{split}+{mode}"] = {**scores(hyps, refs, config, constraints),
                                         "mean_length": mean_length(hyps, config.data.tgt_lang),
                                         **_edit_counts(outs, translator.spec.supports.counts)}
            if i == 0 and e.latency_sentences > 0:
                n = e.latency_sentences
                results[f"{split}+{mode}"]["latency_ms"] = translator.latency(
                    srcs[:n], e.beam_size, constraints[:n], [mode == "hard"] * min(n, len(srcs)))
            log.info("%s with %s constraints: BLEU %.2f, CPR %.1f", split, mode,
                     results[f"{split}+{mode}"]["bleu"], results[f"{split}+{mode}"]["cpr"])
        if split in pairs:
            split_pairs = pairs[split]
            if e.pairs_unproduced:  # the authors' test sets: only the pairs the plain output misses
                split_pairs = unproduced_pairs(split_pairs, hyps_plain, config.data.tgt_lang)
            # the plain output's CSR too: how many of the pairs' target phrases a model produces unasked
            results[split]["cpr"] = constraint_preservation(hyps_plain, pair_targets(split_pairs),
                                                            lang=config.data.tgt_lang)
            results.update(pair_rows(translator, split, srcs, refs, split_pairs, config, workdir, speed=i == 0))
        if glossary is not None:
            results.update(glossary_row(translator, split, srcs, refs, glossary, config, workdir, speed=i == 0))
        if i == 0 and (e.iteration_sweep or e.oracle):
            results.update(iteration_rows(translator, split, srcs, refs, config, workdir))
        if i == 0 and e.constraint_counts:
            results.update(constraint_count_rows(translator, split, srcs, refs, config, workdir, modes))
        if e.diagnostic and translator.spec.supports.init:
            known = {"plain": results[split], "soft": results.get(f"{split}+soft")}
            results.update(diagnostic_rows(translator, split, srcs, refs, constraints, hyps_plain, config, workdir,
                                           known))
    results.update(post_edit_rows(config, corpus, inits, translator, workdir))
    if _writes():
        write_metrics(config, workdir, results)
    print(format_table(results, summary_columns(results)))
    log.info("all metrics: %s", os.path.join(workdir, "metrics.json"))
    return results


def forget_evaluation(workdir: str) -> None:
    """Removes the earlier evaluation's ``metrics.json`` and its record before ``hyps/`` is rewritten: an evaluation
    stopped part way (Ctrl-C, SIGTERM, a crash) leaves new hypotheses, and a report that read them beside the old
    scores, or a finished training command that took those for this config's evaluation, would mix the two."""
    for name in (EVALUATED, "metrics.json"):  # the reverse of write_metrics: never a record without its metrics
        path = os.path.join(workdir, name)
        if os.path.isfile(path):
            os.remove(path)


def write_metrics(config, workdir: str, results: dict) -> None:
    """``workdir/metrics.json`` (``results``), as standard JSON (a CPR of no constraints is null, not NaN), then the
    record of what it was computed from."""
    write_whole(os.path.join(workdir, "metrics.json"), strict_json.dumps(results, indent=2, sort_keys=True))
    # after metrics.json: a kill between them redoes it
    write_whole(os.path.join(workdir, EVALUATED), json.dumps(_evaluation_record(config, workdir), indent=2,
                                                             sort_keys=True))


def _checkpoints(workdir: str) -> dict[str, list[str]]:
    """The checkpoints on disk: {kind (best, last, averaged): every saved step}."""
    root = os.path.join(workdir, "checkpoints")
    kinds = sorted(os.listdir(root)) if os.path.isdir(root) else []
    return {kind: sorted(os.listdir(os.path.join(root, kind))) for kind in kinds
            if os.path.isdir(os.path.join(root, kind))}


def _evaluation_record(config, workdir: str) -> dict:
    """The config and the checkpoints on disk (every saved step, best and last) an evaluation used (an ensemble's
    members' too), and the segmenter that cut its references into the words of its drawn constraints (a Chinese,
    Japanese or Korean target, where one is installed: without, characters or Moses words, and the record as
    before), so that the same command after a segmenter's install evaluates again; and the glossary's contents."""
    record = {"config": json.loads(config.to_json_best_effort(sort_keys=True)), "checkpoints": _checkpoints(workdir)}
    e, lang = config.eval, config.data.tgt_lang
    draws = _split_list(e.constraints) or e.constraint_counts or (e.diagnostic and
                                                                  family_of(config.model.name).supports.init)
    if draws and (name := segmenter(lang)):
        record["constraint_words"] = name
    if members := ensemble_members(config):  # an ensemble's other runs may train on: their checkpoints too
        record["ensemble"] = {path: _checkpoints(path) for path in members}
    if e.glossary:  # a glossary edited in place is another evaluation (an unreadable one: evaluating names it)
        try:
            with open(e.glossary, "rb") as f:
                record["glossary"] = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            record["glossary"] = None
    return record


def trained_since_evaluation(workdir: str) -> bool:
    """Whether training saved checkpoints after ``workdir/metrics.json`` was computed: the best and last ones on disk
    are not those its record lists (a run resumed after its evaluation, or training still); False without a record."""
    try:
        with open(os.path.join(workdir, EVALUATED), encoding="utf-8") as f:
            recorded = json.load(f)["checkpoints"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    now = _checkpoints(workdir)
    return isinstance(recorded, dict) and any(recorded.get(kind) != now.get(kind) for kind in ("best", "last"))


def evaluated_config(workdir: str):
    """The config ``workdir/metrics.json`` was computed with: the one it was trained with (`workdir_config`), with
    the values of its evaluation record over it (the data, pairs and decoding options of a `--mode eval` with
    overrides: an evaluated copy of a run on other test data, say). Without a record, the trained one."""
    from jaxnat.config import overlay, workdir_config

    config = workdir_config(workdir)
    try:
        with open(os.path.join(workdir, EVALUATED), encoding="utf-8") as f:
            recorded = json.load(f)["config"]
    except (OSError, ValueError, KeyError, TypeError):  # no record (evaluated before records), or unreadable
        return config
    return overlay(config, recorded)


def already_evaluated(config, workdir: str) -> bool:
    """Whether ``workdir/metrics.json`` is the evaluation of this config on the checkpoints now on disk, so that
    re-running a finished training command (a resumed pipeline, say) does not decode everything again."""
    try:
        with open(os.path.join(workdir, EVALUATED), encoding="utf-8") as f:
            recorded = json.load(f)
    except (OSError, ValueError):
        return False
    return os.path.isfile(os.path.join(workdir, "metrics.json")) and recorded == _evaluation_record(config, workdir)


def unproduced_pairs(pairs: list[list[tuple[str, str]]], plain: list[str], lang: str) -> list[list[tuple[str, str]]]:
    """Each sentence's pairs without those whose target phrase its unconstrained output ``plain`` already has
    (CPR's rule): the constraints a model would miss, as the vectorized-constraints authors extract test sets."""
    return [[(s, t) for s, t in sentence if not contains_phrase(hyp, t, lang=lang)]
            for sentence, hyp in zip(pairs, plain)]


def pair_targets(pairs: list[list[tuple[str, str]]]) -> list[list[str]]:
    """Each sentence's constraint-pair target phrases: what CSR counts."""
    return [[t for _, t in sentence] for sentence in pairs]


def pair_rows(translator: Translator, split: str, srcs: list[str], refs: list[str],
              pairs: list[list[tuple[str, str]]], config, workdir: str, speed: bool) -> dict:
    """The split with its constraint pairs (`{pairs_dir}/{split}.pairs.jsonl`), the rows of the vectorized-
    constraints paper: `<split>+pairs` (a model that reads pairs: the pairs as its input) and `<split>+pairs_hard`
    (a model that takes hard constraints: their target phrases guaranteed by constrained beam search, with the
    pairs too if the model reads them); CSR = `cpr`, the share of target phrases in the output. With ``speed``,
    latency at batch 1 and throughput at eval.throughput_batch (the paper's Table 5)."""
    e, sup = config.eval, translator.spec.supports
    targets = pair_targets(pairs)
    runs = {}
    if sup.pairs:
        runs["pairs"] = dict(pairs=pairs)
    if sup.hard_constraints:
        runs["pairs_hard"] = dict(constraints=[t or None for t in targets], hard=[True] * len(srcs),
                                  pairs=pairs if sup.pairs else None)
    if sup.pairs:
        report_left_out_pairs(translator, split, pairs)
    rows = {}
    for name, kwargs in runs.items():
        outs = translator.translate(srcs, e.beam_size, e.batch_size, drop_long_pairs=True, label=f"{split}+{name}",
                                    **kwargs)
        hyps = [o["hyp"] for o in outs]
        _write_lines(os.path.join(workdir, "hyps", f"{split}.{name}.txt"), hyps)
        row = {**scores(hyps, refs, config, targets), "mean_length": mean_length(hyps, config.data.tgt_lang)}
        if speed and e.latency_sentences > 0:
            row.update(translator.speed(srcs, e.beam_size, e.latency_sentences, e.throughput_batch, **kwargs))
        rows[f"{split}+{name}"] = row
        log.info("%s with constraint pairs (%s): BLEU %.2f, CSR %.1f", split, name, row["bleu"], row["cpr"])
    return rows


def glossary_terms(translator: Translator, srcs: list[str], glossary: Glossary) -> tuple[dict, list[list[str]]]:
    """(`Translator.translate`'s constraints, hard and pairs of each source's glossary terms, `Glossary.match`, as
    translate gives them a line: `constraints_of`; each source's target terms)."""
    e, sup = translator.config.eval, translator.spec.supports
    terms = [glossary.match(src) for src in srcs]
    asked = [constraints_of({"src": src, "terms": found}, sup, e.glossary_hard) for src, found in zip(srcs, terms)]
    constraints, hard, pairs = (list(column) for column in zip(*asked))
    return ({"constraints": constraints, "hard": hard, "pairs": pairs if sup.pairs else None},
            [[t for _, t in found] for found in terms])


def glossary_row(translator: Translator, split: str, srcs: list[str], refs: list[str], glossary: Glossary, config,
                 workdir: str, speed: bool) -> dict:
    """`<split>+glossary`: the split translated with each sentence's glossary terms as its constraints (eval.glossary,
    as translate takes them: `constraints_of`), its CPR the share of the terms' target phrases in the outputs (the
    term usage of WMT 2021's terminology task, exact match), 'term_sentences' the share of sentences with a term;
    with ``speed``, latency at batch 1 (`latency_ms`)."""
    e = config.eval
    asked, targets = glossary_terms(translator, srcs, glossary)
    outs = translator.translate(srcs, e.beam_size, e.batch_size, label=f"{split}+glossary", **asked)
    hyps = [o["hyp"] for o in outs]
    _write_lines(os.path.join(workdir, "hyps", f"{split}.glossary.txt"), hyps)
    row = {**scores(hyps, refs, config, targets), "mean_length": mean_length(hyps, config.data.tgt_lang),
           "term_sentences": 100.0 * sum(map(bool, targets)) / max(len(srcs), 1)}
    if speed and e.latency_sentences > 0:
        n = e.latency_sentences
        row["latency_ms"] = translator.latency(srcs[:n], e.beam_size, asked["constraints"][:n], asked["hard"][:n],
                                               asked["pairs"][:n] if asked["pairs"] else None)
    log.info("%s with the glossary's terms (%.1f%% of its sentences have one): BLEU %.2f, CPR %.1f", split,
             row["term_sentences"], row["bleu"], row["cpr"])
    return {f"{split}+glossary": row}


def report_left_out_pairs(translator: Translator, split: str, pairs: list[list[tuple[str, str]]]) -> dict:
    """Warns of the pairs the model's input leaves out (a phrase over data.max_pair_pieces pieces, or beyond the
    first data.max_pairs of a sentence), as training's log counts its own: the rows still count their target
    phrases in CSR (and `+pairs_hard` still guarantees them). Returns `encode_pairs`' counts."""
    d = translator.config.data
    _, _, counts = encode_pairs(pairs, translator.encode_phrases, d.max_pairs, d.max_pair_pieces)
    if left := counts["too_long"] + counts["too_many"]:
        log.warning("%s: %d of %d constraint pairs are left out of the model's input (%d with a phrase over "
                    "data.max_pair_pieces=%d pieces, %d beyond data.max_pairs=%d a sentence); CSR still counts "
                    "their target phrases", split, left, left + counts["pairs"], counts["too_long"],
                    d.max_pair_pieces, counts["too_many"], d.max_pairs)
    return counts


def mean_length(texts: list[str], lang: str) -> float:
    """Mean number of words per sentence in language ``lang``: whitespace-separated, or in a language written
    without spaces its characters (`word_tokens`; a clause would otherwise be one word)."""
    words = (lambda t: word_tokens(t, lang)) if unspaced(lang) else str.split
    return float(np.mean([len(words(t)) for t in texts])) if texts else 0.0


NOT_ABOUT_THE_START = ("latency_ms", "sentences_per_s", "copy_source_bleu", "reference_length")


def diagnostic_rows(translator: Translator, split: str, srcs: list[str], refs: list[str],
                    constraints: list[list[str]], plain_hyps: list[str], config, workdir: str,
                    known: dict | None = None) -> dict:
    """The refinement diagnostic (`jaxnat.evaluation.diagnostic`): rows `<split>+from_<start>` with BLEU, mean
    length, iterations and edit counts (CPR where the start is constraints); hyps in
    `hyps/<split>.from_<start>.txt`. known: rows already measured for some starts (the plain and soft
    evaluations), copied instead of decoded again."""
    e, lang = config.eval, config.data.tgt_lang
    rows = {}
    for name, kwargs in diagnostic.starts(refs, constraints, plain_hyps, lang).items():
        if (known or {}).get(name) is not None:
            rows[f"{split}+from_{name}"] = {k: v for k, v in known[name].items() if k not in NOT_ABOUT_THE_START}
            continue
        # a start re-tokenised from text (an output, a reference) may be longer than the model holds: cut it
        outs = translator.translate(srcs, e.beam_size, e.batch_size, cut_long_inits=True,
                                    label=f"{split}+from_{name}", **kwargs)
        hyps = [o["hyp"] for o in outs]
        _write_lines(os.path.join(workdir, "hyps", f"{split}.from_{name}.txt"), hyps)
        row = scores(hyps, refs, config, kwargs.get("constraints"))
        row.update(mean_length=mean_length(hyps, config.data.tgt_lang),
                   **_edit_counts(outs, translator.spec.supports.counts))
        rows[f"{split}+from_{name}"] = row
        log.info("%s from %s: BLEU %.2f, %.2f words, %.2f iterations", split, name, row["bleu"],
                 row["mean_length"], row.get("mean_iterations", float("nan")))
    return rows


def _split_list(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def iteration_rows(translator: Translator, split: str, srcs: list[str], refs: list[str], config,
                   workdir: str) -> dict:
    """The split decoded at each depth of ``eval.iteration_sweep``, the key of the model's section that its
    family sweeps (`Family.sweep`: key, label): rows `<split>+<label><depth>` (e.g. `test+T5`) with BLEU, TER,
    RIBES, the repetition rate (and the family's own output metrics) and the seconds the split takes to decode
    after a warm-up pass (compilation excluded); hyps in `hyps/<split>.<label><depth>.txt`. Each depth is its own
    decoding (a schedule may depend on it), not a prefix of a deeper one. With ``eval.oracle``, each depth also
    with an oracle taking some steps against the references (rows `<split>+<label><depth>_oracle_<mode>`; without
    a sweep, at the configured depth only): Gu et al. 2019's Figure 5."""
    import copy
    import time

    e, rows = config.eval, {}
    key, label = family_of(config.model.name).sweep or ("", "")
    section = config.model.name
    depths = [int(v) for v in _split_list(e.iteration_sweep)] or [config[section][key] if key else None]
    oracles = _split_list(e.oracle)
    modes = ([""] if e.iteration_sweep else []) + oracles
    for depth in depths:
        swept = copy.deepcopy(config)
        if key:
            swept[section][key] = depth
        run = with_config(translator, swept)
        for oracle in modes:
            args = dict(references=refs, oracle=oracle) if oracle else {}
            name = f"{label}{depth}" + (f"_oracle_{oracle}" if oracle else "")
            run.translate(srcs, e.beam_size, e.batch_size, label=f"{split}+{name} (warm-up)", **args)
            t0 = time.perf_counter()
            outs = run.translate(srcs, e.beam_size, e.batch_size, label=f"{split}+{name}", **args)
            seconds = time.perf_counter() - t0
            hyps = [o["hyp"] for o in outs]
            _write_lines(os.path.join(workdir, "hyps", f"{split}.{name}.txt"), hyps)
            row = scores(hyps, refs, config)
            rows[f"{split}+{name}"] = {**{k: row[k] for k in ("bleu", "ter", "ribes", "repetition")},
                                       "mean_length": mean_length(hyps, config.data.tgt_lang), "seconds": seconds,
                                       **_edit_counts(outs, run.spec.supports.counts), **_own_metrics(run, outs, srcs)}
            log.info("%s at %s = %s%s: BLEU %.2f, TER %.2f, repetition %.2f%%, %.1f s", split, key, depth,
                     f" with the oracle's {oracle}" if oracle else "", row["bleu"], row["ter"], row["repetition"],
                     seconds)
    return rows


def constraint_count_rows(translator: Translator, split: str, srcs: list[str], refs: list[str], config,
                          workdir: str, modes: list[str]) -> dict:
    """The split decoded with exactly k reference words as constraints (`make_constraints` with k..k, fewer where
    the reference has fewer words) for each k of ``eval.constraint_counts``, in each constraint mode: rows
    `<split>+<mode>_c<k>` with BLEU and CPR (Xu & Carpuat 2021, Figure 5); hyps in `hyps/<split>.<mode>_c<k>.txt`.
    Counts above the model's limit on phrases (`Supports.max_phrases`) are left out, with a log line."""
    e, lang, rows = config.eval, config.data.tgt_lang, {}
    limit = translator.spec.supports.max_phrases
    for k in (int(v) for v in _split_list(e.constraint_counts)):
        if limit and k > limit:
            log.info("eval.constraint_counts: %d constraints left out (model %r takes at most %d)", k,
                     translator.spec.name, limit)
            continue
        constraints = make_constraints(refs, e.constraint_seed, k, k, lang=lang)
        for mode in modes:
            name = f"{mode}_c{k}"
            outs = translator.translate(srcs, e.beam_size, e.batch_size, constraints=constraints,
                                        hard=[mode == "hard"] * len(srcs), label=f"{split}+{name}")
            hyps = [o["hyp"] for o in outs]
            _write_lines(os.path.join(workdir, "hyps", f"{split}.{name}.txt"), hyps)
            row = scores(hyps, refs, config, constraints)
            rows[f"{split}+{name}"] = {"bleu": row["bleu"], "cpr": row["cpr"], "constraints": k,
                                       "mean_length": mean_length(hyps, config.data.tgt_lang)}
            log.info("%s with %d %s constraints: BLEU %.2f, CPR %.1f", split, k, mode, row["bleu"], row["cpr"])
    return rows


def evaluation_inits(data_cfg, corpus) -> dict[str, list[str]]:
    """The initial hypotheses of the test splits that have them (`load_inits`), read before anything is decoded: a
    missing or misaligned file fails at the start, not after the other passes. Only the test splits': an evaluation
    needs no train or valid file. With data.init_lang set and no test split's file, a warning says so."""
    tests = {split: pair for split, pair in corpus.items() if split not in ("train", "valid")}
    inits = load_inits(data_cfg, tests)
    if data_cfg.init_lang and not inits:
        log.warning("data.init_lang=%r: no test split has a file of initial hypotheses (%s), so nothing is "
                    "post-edited", data_cfg.init_lang, ", ".join(f"{s}.{data_cfg.init_lang}[.gz]" for s in tests))
    return inits


def post_edit_rows(config, corpus, inits: dict[str, list[str]], translator: Translator, workdir: str) -> dict:
    """`<split>+init` rows: every test split with initial hypotheses (``inits``: `evaluation_inits`) decoded again
    starting from them (post-editing), hyps in `hyps/<split>.init.txt`. With references the row also
    has `init_bleu` and `init_ter`, the scores of the initial hypotheses themselves: what the refinement starts
    from (Gu et al. 2019's "do nothing")."""
    e = config.eval
    rows = {}
    for split, given in inits.items():
        srcs, refs = corpus[split]
        # an initial hypothesis (another system's output) longer than the model holds is cut to fit
        outs = translator.translate(srcs, e.beam_size, e.batch_size, inits=given, cut_long_inits=True,
                                    label=f"{split}+init")
        hyps = [o["hyp"] for o in outs]
        _write_lines(os.path.join(workdir, "hyps", f"{split}.init.txt"), hyps)
        row = {"mean_score": float(np.mean([o["score"] for o in outs])),
               "mean_length": mean_length(hyps, config.data.tgt_lang),
               **_edit_counts(outs, translator.spec.supports.counts)}
        if refs is not None:  # a test split without references is only post-edited
            row.update(scores(hyps, refs, config), init_bleu=target_bleu(given, refs, config),
                       init_ter=ter(given, refs, config.data.tgt_lang))
            log.info("%s post-edited from %s: BLEU %.2f (initial hypotheses: %.2f)", split, config.data.init_lang,
                     row["bleu"], row["init_bleu"])
        rows[f"{split}+init"] = row
    return rows


SUMMARY = ("bleu", "chrf", "ribes", "ter", "ece", "cpr", "repetition", "repeated", "repeated_short",
           "repeated_long", "mean_length", "latency_ms",
           "sentences_per_s", "seconds",
           "mean_iterations", "mean_steps", "mean_repositions", "mean_deletions", "mean_insertions")


def summary_columns(results: dict) -> list[str]:
    """The printed table's columns: the papers' headline metrics that some row has (metrics.json has all)."""
    return [c for c in SUMMARY if any(c in row for row in results.values())]


def trace_page(translator: Translator, srcs: list[str], refs: list[str] | None,
               constraints: list[list[str]] | None, modes: list[str], inits: list[str] | None = None) -> str:
    """Decodes ``srcs`` with the edit trace on, without constraints, in each of ``modes`` (soft, hard) and, given
    ``inits`` (one initial hypothesis per source, cut to fit as evaluation cuts them), post-edited from them (mode
    "init"): the HTML page of `trace_html` (self-contained; a notebook shows it inline)."""
    from jaxnat.evaluation.trace_html import TracedSentence, render_page

    check_arguments(srcs, references=refs, constraints=constraints, inits=inits)
    if unknown := [mode for mode in modes if mode not in ("soft", "hard")]:  # else traced as soft, labelled so
        raise DataError(f"trace modes are 'soft' and 'hard', not {unknown[0]!r}")
    tok = translator.tokenizer
    src_ids, _ = translator.encode(srcs)
    runs = {"plain": None}
    for mode in modes if constraints is not None else []:
        runs[mode] = translator.starts(None, constraints, [mode == "hard"] * len(srcs))
    if inits is not None:
        runs["init"] = translator.starts(inits, cut_long_inits=True)
    traced = {}
    for mode, starts in runs.items():
        outs = translator.translate_ids(src_ids, 1, len(srcs), starts, trace=True)
        for k, out in enumerate(outs):
            initial = [BOS_ID, *(starts[k].pieces() if starts else []), EOS_ID]
            phrases = list(constraints[k] or []) if mode in modes else []
            traced[k, mode] = TracedSentence(
                srcs[k], refs[k] if refs else None, mode, phrases, initial, np.asarray(out["trace"]),
                int(out["iterations"]), tok.decode(list(out["tokens"]), "tgt"))
    sentences = [traced[k, mode] for k in range(len(srcs)) for mode in runs]
    return render_page(f"jaxnat {translator.spec.name}: edit trace", translator.spec.name, sentences,
                       lambda i: tok.id_to_piece(i, "tgt"), lambda phrases: translator.encode_phrases(phrases, "tgt"))


def write_trace(translator: Translator, path: str, srcs: list[str], refs: list[str] | None,
                constraints: list[list[str]] | None, modes: list[str], inits: list[str] | None = None) -> str:
    """`trace_page` written to ``path``."""
    page = trace_page(translator, srcs, refs, constraints, modes, inits)
    if _writes():
        write_whole(path, page)
    return path
