"""A model family's own analysis of its trained workdirs (`Family.analysis`), from the command line:

    python -m jaxnat.analyse RUN [RUN ...] [--split valid] [--sentences 500] [--OPTION VALUE ...]

Each workdir is restored here (its config, with the data of its evaluation if it has one: `evaluated_config`; its
best checkpoint as a `Translator`; the first ``--sentences`` pairs of ``--split``) and handed to its family's
`Analysis.measure` as an `AnalysisRun`; the family's own options (`Analysis.options`) are flags of this command.
Prints one table per family. `jaxnat.report --model-analyses` adds the same tables to a report.
"""

from __future__ import annotations

import argparse
import logging
import sys

from jaxnat.errors import ConfigError, JaxnatError, run_command

SPLIT, SENTENCES = "valid", 500  # what an analysis reads unless told otherwise (the report's too)


def _families_with_analysis() -> list:
    from jaxnat import models

    return [f for f in map(models.family_of, models.names()) if f.analysis is not None]


def with_analysis() -> str:
    """The families that have an analysis, as a message names them ("model.name=..., ...")."""
    return ", ".join(f"model.name={f.name}" for f in _families_with_analysis())


def analysis_of(config, workdir: str):
    """The `Analysis` of ``workdir``'s family (``config``: its `evaluated_config`); a one-line ConfigError where it
    has none, or where it is an imported model with no data of its own to be analysed on."""
    from jaxnat.data import piece_vocab
    from jaxnat.models import family_of

    analysis = family_of(config.model.name).analysis
    if analysis is None:
        raise ConfigError(f"{workdir}: its family (model.name={config.model.name}) has no analysis of its own "
                          f"(analyses: {with_analysis()})")
    piece_vocab.check_has_data(config, workdir, "evaluate it on its data first (--mode eval --config.data.source="
                                                "text --config.data.dir=DIR), whose --split the analysis reads")
    return analysis


def measure(workdir: str, split: str = SPLIT, sentences: int = SENTENCES, **options) -> dict:
    """Its family's analysis of ``workdir`` on the first ``sentences`` pairs of ``split``, as a JSON-able dict
    with 'workdir', 'checkpoint' (which parameters), 'split' and 'sentences' beside the family's own keys.
    options: values of the family's `Analysis.options` (the others take their defaults)."""
    from jaxnat.data.sources import load_corpus
    from jaxnat.evaluate import evaluated_config
    from jaxnat.models.family import AnalysisRun
    from jaxnat.restore import load_translator

    config = evaluated_config(workdir)  # the data of its evaluation, if any: an import's config.json names none
    analysis = analysis_of(config, workdir)
    corpus = load_corpus(config.data)
    if split not in corpus or corpus[split][1] is None:
        raise JaxnatError(f"{workdir}'s data has no references for split {split!r} (splits: {', '.join(corpus)})")
    src, ref = (side[:sentences] for side in corpus[split])
    if not ref:
        raise JaxnatError(f"{workdir}'s split {split!r} is empty")
    translator = load_translator(config, workdir)
    chosen = {name: options.get(name, default) for name, (default, _) in analysis.options.items()}
    result = analysis.measure(AnalysisRun(workdir, config, translator, src, ref), **chosen)
    return {"workdir": workdir, "checkpoint": translator.checkpoint, "split": split, "sentences": len(ref), **result}


def tables(results: list[tuple[str, dict]]) -> str:
    """(model.name, `measure`'s dict) pairs → one titled table per family, in the order they first appear."""
    from jaxnat.models import family_of

    names = list(dict.fromkeys(name for name, _ in results))
    sections = []
    for name in names:
        analysis = family_of(name).analysis
        sections.append(f"## {analysis.title}\n\n{analysis.markdown([r for n, r in results if n == name])}")
    return "\n\n".join(sections)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jaxnat.analyse", description=__doc__.split("\n")[0])
    parser.add_argument("workdirs", nargs="+", help="trained workdirs (of families with an analysis)")
    parser.add_argument("--split", default=SPLIT, help=f"the split whose pairs are read (default: {SPLIT})")
    parser.add_argument("--sentences", type=int, default=SENTENCES,
                        help=f"how many of its first pairs (default {SENTENCES})")
    for family in _families_with_analysis():
        for name, (default, text) in family.analysis.options.items():
            parser.add_argument(f"--{name}", type=type(default), default=default,
                                help=f"{family.name}: {text} (default {default})")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")

    def measure_all() -> int:
        from jaxnat.evaluate import evaluated_config

        if args.sentences < 1:
            raise ConfigError(f"--sentences must be positive, got {args.sentences}")
        options = {k: v for k, v in vars(args).items() if k not in ("workdirs", "split", "sentences")}
        configs = [evaluated_config(w) for w in args.workdirs]
        for w, config in zip(args.workdirs, configs):  # every workdir before the first one's minutes of measuring
            analysis_of(config, w)
        results = [(config.model.name, measure(w, args.split, args.sentences, **options))
                   for w, config in zip(args.workdirs, configs)]
        print(tables(results))
        return 0
    return run_command(measure_all, "nothing was measured to keep: the same command measures again",
                       (JaxnatError, OSError))


if __name__ == "__main__":
    sys.exit(main())
