"""`Family`: everything jaxnat's shared code knows of one model family, declared by its package
(`jaxnat/models/<name>/__init__.py`, `FAMILY`). The configuration, the trainer, the translator, the evaluator and
the restorer loop over the registered families (`jaxnat.models.family_of`) and call these hooks; none of them
names a family. docs/design.md, "How to add a model family", walks through one.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, NamedTuple

from jaxnat.decoding.request import Supports
from jaxnat.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Family:
    """One model family.

    name: model.name, and the name of its config section (`config.<name>`).
    build(config, cfg: TransformerConfig, pieces: PieceTables) -> ModelSpec: the model of a config.
    supports: what its ``generate`` honours (checked before anything trains or decodes).
    doc: its page under docs/.
    defaults() -> {key: default}: its config section; ``choices`` {key: allowed strings} and ``ranges``
      {key: (low, high)} (`jaxnat.config.RANGES`' notation) are checked for it like the shared keys.
    architecture: keys of its section that define the trained parameters (a workdir is decoded only with the
      values it was trained with).
    moved: {flat key of before the sections ("model.masked_attn"): its key in this section}, so that a workdir
      trained before the sections still loads (`jaxnat.config.workdir_config`).
    before_added: {key: (value, switch)}: keys added to the section after runs were trained, and what such a run
      did before (`jaxnat.config.BEFORE_ADDED`; switch: a key of the section that must be on, or None).
    switched: {key: switch}: keys of its section that act only with the section's boolean ``switch`` on; set away
      from their defaults with it off they are refused (`jaxnat.config.check_switched`), as the shared keys of
      `jaxnat.config.SWITCHED` are.
    validate(config) -> None: checks across keys, one-line `ConfigError`s.
    extends: the family whose parameters this one keeps under the same names (its runs can start this one's
      training, train.init_from); its section is then part of this family's configuration too.
    train_extras(config, tokenizer, src: list[str], tgt: list[str], pairs: list | None) -> ({key: int32[N, ...]},
      summary): per-example arrays the family's loss reads beside src and tgt, from a split's sentences (and
      their constraint pairs, where the data has them); batches carry them (`jaxnat.data.batching`).
    check_packable(src, tgt, extras) -> None: a one-line error where packed rows could not hold the extras.
    pack_budget(config, extras) -> (sizes int[N], capacity) | None: a second quantity, beside the tokens, that a
      packed row holds at most ``capacity`` of (the sum of its examples' sizes): slots the family's model gives
      each row, sized by its config (`jaxnat.data.batching.pack_rows`).
    aux_run(config) -> (key, workdir, family) | None: another trained run whose parameters decoding reads (an
      AR rescorer, say), named by ``key`` of the config; `jaxnat.restore` checks it is a run of ``family`` with
      this run's vocabulary and hands its parameters to the `Translator` as ``aux``, which the model's
      `ModelSpec.request_extras` may put in its requests.
    output_metrics(outs, srcs) -> {metric: float}: per-split metrics of its own from generate's outputs.
    sweep: (key of its section that eval.iteration_sweep sets, the rows' label), or () for no sweep.
    analysis: an `Analysis` of the family's trained workdirs (`python -m jaxnat.analyse`; `jaxnat.report
      --model-analyses` adds it).
    conventions: the keys of `MODEL_CONVENTIONS` its model honours (the shared layers honour the others): a
      config that sets another one away from its default is refused.
    shared: {flat key of a shared section ("eval.beam_size"): value}: the defaults its runs take instead of the
      shared ones (a family without beam search: {"eval.beam_size": 1}), where neither the config file nor the
      command line sets the key (`jaxnat.config.family_defaults`).
    reads: the keys of `jaxnat.config.READ_BY_SOME` (shared keys that only some families read: a left-to-right
      search's length rules, a canvas's capacity, refinement passes, fairseq's decoding rules, packed training) that
      its runs read: "data.pack" for a model whose `ModelSpec.packs`, the eval keys its build, capacity and generate
      read. Its own, not those of the family it extends. Another set away from its default is refused
      (`jaxnat.config.check_read`): the run would train and decode as without it.
    """

    name: str
    build: Callable
    supports: Supports
    doc: str
    defaults: Callable[[], dict] = dict
    choices: Mapping[str, tuple] = dataclasses.field(default_factory=dict)
    ranges: Mapping[str, tuple] = dataclasses.field(default_factory=dict)
    architecture: tuple[str, ...] = ()
    moved: Mapping[str, str] = dataclasses.field(default_factory=dict)
    before_added: Mapping[str, tuple] = dataclasses.field(default_factory=dict)
    switched: Mapping[str, str] = dataclasses.field(default_factory=dict)
    validate: Callable | None = None
    extends: str = ""
    train_extras: Callable | None = None
    check_packable: Callable | None = None
    pack_budget: Callable | None = None
    aux_run: Callable | None = None
    output_metrics: Callable | None = None
    sweep: tuple[str, str] | tuple = ()
    analysis: Analysis | None = None
    conventions: tuple[str, ...] = ()
    shared: Mapping[str, object] = dataclasses.field(default_factory=dict)
    reads: tuple[str, ...] = ()

    def __post_init__(self):
        # a key of its section these name that the section lacks (a typo) would be checked, compared with a workdir's
        # or swept nowhere, and nothing would say so
        named = {"choices": tuple(self.choices), "ranges": tuple(self.ranges), "architecture": self.architecture,
                 "sweep": self.sweep[:1], "moved": tuple(self.moved.values()),
                 "before_added": tuple(self.before_added) + tuple(s for _, s in self.before_added.values() if s),
                 "switched": tuple(self.switched) + tuple(self.switched.values())}
        keys = self.defaults()
        for field, names in named.items():
            if unknown := [name for name in names if name not in keys]:
                raise ConfigError(f"model family {self.name!r}: its {field} names {', '.join(unknown)}, not a key of "
                                  f"its section (its defaults())")


# model.* conventions of models trained elsewhere (docs/import.md) that each model must apply itself, with jaxnat's
# own values: a family lists in `Family.conventions` those its model applies
MODEL_CONVENTIONS = {"layernorm_embedding": False, "output_bias": False, "decoder_start": "bos", "source_bos": True,
                     "absent_tokens": "", "alignment_layer": -1, "alignment_heads": 0, "full_context_alignment": False}


class AnalysisRun(NamedTuple):
    """A trained workdir as the shared code hands it to its family's `Analysis` (`jaxnat.analyse`): its config,
    its chosen parameters as a `jaxnat.decoding.translator.Translator` (``translator.spec``, ``.params``,
    ``.tokenizer``), and the source and reference sentences of the split analysed."""
    workdir: str
    config: object
    translator: object
    src: list
    ref: list


class Analysis(NamedTuple):
    """A family's own measure of its trained workdirs, run by `python -m jaxnat.analyse` and `jaxnat.report
    --model-analyses`: measure(run: AnalysisRun, **options) -> JSON-able dict (the shared code adds 'workdir',
    'checkpoint', 'split' and 'sentences'); markdown(list of those) -> a table, under the heading ``title``;
    plot(list of those, path, matplotlib's Figure class) -> path, or None for no plot; options: {name: (default,
    help)}, measure's keyword arguments, each a flag ``--name`` of the command (its type the default's)."""
    title: str
    measure: Callable[..., dict]
    markdown: Callable[[list], str]
    plot: Callable | None = None
    options: Mapping[str, tuple] = {}
