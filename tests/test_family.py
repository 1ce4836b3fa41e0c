"""A model family is one folder: a family defined here, outside jaxnat, registers itself and is configured,
trained, evaluated and translated through every hook of `jaxnat.models.family.Family`, with no shared module
changed; and the shared modules name no family (docs/design.md, "How to add a model family")."""

from __future__ import annotations

import dataclasses
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxnat import models
from tests.family_contract import check_contract
from jaxnat.config import build_config, check_matches_workdir
from jaxnat.decoding.request import Supports
from jaxnat.errors import ConfigError
from jaxnat.models.family import Family
from jaxnat.training.history import read_history

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "tests", "configs", "tiny.py")

# the modules every family goes through, which must not know any of them (issue: a family is one folder)
SHARED = ["jaxnat/config.py", "jaxnat/evaluate.py", "jaxnat/training/trainer.py", "jaxnat/data/batching.py",
          "jaxnat/decoding/request.py", "jaxnat/decoding/translator.py", "jaxnat/restore.py", "jaxnat/report.py",
          "jaxnat/analyse.py"]


# ------------------------------------------------------------------ the family: an AR model with hooks of its own

def _defaults() -> dict:
    return dict(shift=0.0, offset=0.5, deep=False, teacher="")


def _build(config, cfg, pieces):
    """The AR model, whose loss also reports the mean source length the batches carry (its train extras) and
    whose scores are shifted by its request's extras (`ModelSpec.request_extras`)."""
    from jaxnat.models.ar.model import build_spec

    ar = build_spec(config, cfg, pieces)

    def loss(params, batch, rng, train=True):
        loss_sum, aux = ar.loss(params, {k: batch[k] for k in ("src", "tgt")}, rng, train)
        return loss_sum, {**aux, "source_words": jnp.mean(batch["source_words"].astype(jnp.float32))}

    def generate(params, request):
        out = ar.generate(params, request)
        return {**out, "score": out["score"] + request.extras["shift"]}

    def request_extras(translator, starts):
        return {"shift": jnp.float32(translator.config.toy.shift + translator.config.toy.offset)}

    return dataclasses.replace(ar, name="toy", loss=loss, generate=generate, supports=_SUPPORTS, packs=False,
                               terms=("source_words",), request_extras=request_extras)


def _validate(config) -> None:
    if config.toy.deep and config.model.dec_layers < 2:
        raise ConfigError("toy.deep needs model.dec_layers >= 2")


def _train_extras(config, tokenizer, src, tgt, pairs):
    words = np.asarray([[len(s.split())] for s in src], np.int32)
    return {"source_words": words}, f"{len(src)} sentences, {int(words.sum())} source words"


_SUPPORTS = Supports(beam=True)
TOY = Family(
    "toy", _build, _SUPPORTS, doc="tests/test_family.py", defaults=_defaults, ranges={"offset": ("[0", None)},
    architecture=("deep",), validate=_validate, extends="ar", train_extras=_train_extras,
    aux_run=lambda config: ("toy.teacher", config.toy.teacher, "ar") if config.toy.teacher else None,
    output_metrics=lambda outs, srcs: {"toy_output_words": float(np.mean([len(o["hyp"].split()) for o in outs]))},
    sweep=("shift", "s"), reads=("eval.length_penalty", "eval.max_len_a", "eval.max_len_b", "eval.search_rules",
                                 "eval.no_repeat_ngram", "eval.no_consecutive_repeat", "eval.allow_unk"))


@pytest.fixture
def toy():
    models.register(TOY)
    yield TOY
    models.unregister(TOY.name)


def _config(*overrides):
    return build_config(TINY, ["--config.model.name=toy", "--config.data.synthetic_train=400",
                               "--config.data.max_buckets=1", "--config.train.steps=8", "--config.train.eval_every=8",
                               "--config.train.valid_bleu_sentences=8", "--config.eval.beam_size=1",
                               "--config.eval.latency_sentences=0", "--config.data.synthetic_test=8", *overrides])


@pytest.mark.slow
def test_a_family_defined_outside_jaxnat_trains_evaluates_and_translates(toy, tmp_path, ar_run):
    from jaxnat.evaluate import evaluate
    from jaxnat.restore import load_translator
    from jaxnat.training.trainer import Trainer

    # its first training stage is an AR run (`Family.extends`), whose vocabulary it keeps; the same run is the
    # "teacher" whose parameters it decodes with (`Family.aux_run`)
    config = _config("--config.toy.shift=2.0", "--config.eval.iteration_sweep=3", f"--config.toy.teacher={ar_run}",
                     f"--config.train.init_from={ar_run}", "--config.eval.lowercase=true")
    assert config.toy.to_dict() == {"shift": 2.0, "offset": 0.5, "deep": False, "teacher": str(ar_run)}
    workdir = str(tmp_path / "run")
    Trainer(config, workdir).train()
    history = read_history(workdir)
    assert all(row["source_words"] > 1 for row in history if "source_words" in row)  # its batch extras
    assert any("valid_source_words" in row for row in history)
    results = evaluate(config, workdir)
    assert "toy_output_words" in results["test"]  # its output metrics
    assert results["test"]["tok_bleu_lc"] >= results["test"]["tok_bleu"]  # (and the shared ones)
    assert "test+s3" in results  # its sweep over a key of its section
    translator = load_translator(config, workdir)
    teacher = load_translator(build_config(TINY, ["--config.eval.beam_size=1"]), str(ar_run)).params
    assert jax.tree.structure(translator.aux) == jax.tree.structure(teacher)
    plain = translator.translate(["a b c"])[0]
    config.toy.shift = 5.0  # its request extras: the scores move with the section's shift
    assert translator.translate(["a b c"])[0]["score"] == pytest.approx(plain["score"] + 3.0, abs=1e-4)
    # its architecture key is checked against the run, its validation runs with the shared one's
    with pytest.raises(ConfigError, match=r"toy.deep=True \(trained: False\)"):
        check_matches_workdir(_config("--config.toy.deep=true", "--config.model.dec_layers=2"), workdir)
    with pytest.raises(ConfigError, match="toy.deep needs model.dec_layers >= 2"):
        _config("--config.toy.deep=true")
    with pytest.raises(ConfigError, match="toy.offset must be >= 0"):
        _config("--config.toy.offset=-1")


def test_registration_mistakes_are_one_line_errors(toy):
    """An unknown model.name, a taken name, a family extending an unknown one or giving a default of no shared key."""
    available = ", ".join(sorted((*models.FAMILIES, "toy")))
    with pytest.raises(ConfigError, match=re.escape(f"unknown model.name 'toys'; available: {available}")):
        models.family_of("toys")
    with pytest.raises(ConfigError, match="a model family named 'nat' exists already"):
        models.register(dataclasses.replace(TOY, name="nat"))
    models.unregister(toy.name)
    models.register(dataclasses.replace(toy, extends="ra"))
    with pytest.raises(ConfigError, match=re.escape(f"model family 'toy' extends 'ra', which is no model family; "
                                                    f"available: {available}")):
        build_config(TINY, ["--config.model.name=toy"])
    models.unregister(toy.name)
    models.register(dataclasses.replace(toy, shared={"eval.beamsize": 1}))
    with pytest.raises(ConfigError, match="model family 'toy': its shared names 'eval.beamsize', not a key of the"):
        build_config(TINY, ["--config.model.name=toy"])


def test_the_shared_modules_name_no_family():
    """No family's name (nor its papers' model names) in the shared modules, comments included. (report.py's
    lowercase `ar` is sacreBLEU's approximate randomisation test; the AR family appears as `ar` in code and `AR`
    in prose, both of which this finds.)"""
    names = [n for n in models.FAMILIES if n != "ar"] + ["cmlmc", "coverage", "mask.predict"]
    pattern = re.compile(r"(?i:(?<![\w])(" + "|".join(names) + r")(?![\w])|[\"']ar[\"'])|(?<![\w])AR(?![\w])")
    randomisation = 'choices=("bs", "ar")'  # report.py's paired tests: sacreBLEU's names
    found = []
    for path in SHARED:
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            found += [f"{path}:{number}: {line.strip()}" for number, line in enumerate(f, 1)
                      if pattern.search(line.replace(randomisation, ""))]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("field, value", [
    ("choices", {"shfit": ("a", "b")}), ("ranges", {"ofset": ("[0", None)}), ("architecture", ("dep",)),
    ("sweep", ("shfit", "s")), ("moved", {"model.toy_shift": "shfit"}), ("before_added", {"deep": (True, "dep")}),
    ("switched", {"shfit": "deep"}), ("switched", {"shift": "dep"})])
def test_a_family_naming_a_key_its_section_lacks_is_refused(field, value):
    with pytest.raises(ConfigError, match=f"model family 'toy': its {field} names (shfit|ofset|dep), not a key"):
        dataclasses.replace(TOY, **{field: value})


def test_every_family_has_its_config_folder_and_docs_page():
    for name in models.FAMILIES:
        family = models.family_of(name)
        assert family.name == name and os.path.isfile(os.path.join(ROOT, family.doc)), name
        assert os.path.isfile(os.path.join(ROOT, "configs", name, "demo.py")), name


@pytest.mark.parametrize("name", models.FAMILIES)
def test_every_family_meets_the_contract(name):
    """tests/family_contract.py: what the shared code relies on of every family."""
    check_contract(name)


def _plain(config, cfg, pieces):
    """The AR model under the toy's name: a family that meets the contract, for the mistakes below to break."""
    from jaxnat.models.ar.model import build_spec

    return dataclasses.replace(build_spec(config, cfg, pieces), name="toy")


# mistake -> (the family's build with it, what the contract's error says)
MISTAKES = {
    # a family copied from another that still reads the original's section: its own section would do nothing
    "another family's section": (lambda config, cfg, pieces: _plain(config, cfg, pieces) if config.nat else None,
                                 "nat"),
    # ... and still builds its ModelSpec under the original's name
    "the original's spec name": (lambda *args: dataclasses.replace(_plain(*args), name="ar"), "named 'ar'"),
    # a loss term added to the spec's terms but not to the loss's aux (or misspelt in one of them)
    "a term not in aux": (lambda *args: dataclasses.replace(_plain(*args), terms=("length_los",)), "length_los"),
    "left out, not a term": (lambda *args: dataclasses.replace(_plain(*args), left_out=("unfit", "")), "left_out"),
    # outputs as wide as the model's capacity, whatever width the request asks
    "the capacity's width": (lambda *args: _capacity_wide(_plain(*args)), r"shape=\(1, \d+\).*, asked \d+"),
    # a shared key of READ_BY_SOME read but not in Family.reads: refused where it acts
    "a key read undeclared": (lambda config, *args: _plain(config, *args) if config.eval.length_cap_min else None,
                              r"lacks \['eval.length_cap_min'\]"),
    # forced decoding declared (the translator would score with it) but without its hook
    "a score declared, no hook": (lambda *args: dataclasses.replace(_plain(*args), score=None), "ModelSpec.score None"),
}


def _capacity_wide(spec):
    return dataclasses.replace(spec, generate=lambda params, request: spec.generate(params, request.replace(max_out=0)))


# (the AR spec of _plain packs, samples and weighs a guided alignment's loss)
PLAIN_READS = TOY.reads + ("data.pack", "eval.sampling", "train.alignment_lambda", "data.alignments_dir")


def _registered(toy, build, reads=PLAIN_READS):
    models.unregister(toy.name)
    models.register(dataclasses.replace(toy, build=build, train_extras=None, reads=reads,
                                        supports=dataclasses.replace(toy.supports, score=True)))  # (and scores)


def test_the_contract_passes_a_plain_family(toy):
    _registered(toy, _plain)
    check_contract(toy.name)


@pytest.mark.parametrize("mistake", MISTAKES)
def test_the_contract_catches_a_familys_mistake(toy, mistake):
    build, error = MISTAKES[mistake]
    _registered(toy, build)
    with pytest.raises((AssertionError, AttributeError), match=error):
        check_contract(toy.name)


def test_the_contract_catches_a_key_declared_unread(toy):
    """A key of Family.reads the family's build, capacity and generate never read: accepted where it does nothing."""
    _registered(toy, _plain, reads=PLAIN_READS + ("eval.run_all_iterations",))
    with pytest.raises(AssertionError, match=r"names unread \['eval.run_all_iterations'\]"):
        check_contract(toy.name)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in models.FAMILIES if models.family_of(n).supports.soft_constraints
                                  or models.family_of(n).supports.hard_constraints])
def test_a_sentence_without_constraints_decodes_beside_constrained_ones_as_alone(name):
    """A request's rows without phrases decode as a plain request's (the model's own strategy and beam), whatever
    the other rows of the batch ask: a family whose constrained search is another decoder must not lend it them."""
    from jaxnat.data.vocab import PAD_ID
    from jaxnat.decoding.request import DecodeRequest
    from jaxnat.models import build_model
    from tests.refine_reference import random_batch

    def spec_of(beam):
        return build_model(build_config(TINY, [f"--config.model.name={name}", f"--config.eval.beam_size={beam}",
                                               "--config.data.pairs_dir=synthetic", "--config.model.dropout=0"]),
                           40, 40)
    spec = spec_of(1)
    sup = spec.supports
    beam = 2 if sup.beam else 1
    spec = spec_of(beam) if sup.beam else spec
    batch = random_batch(3, 40, b=4, s=9)
    params = spec.init(jax.random.PRNGKey(1), batch)
    generate = jax.jit(spec.generate)
    plain = generate(params, DecodeRequest(batch["src"], max_out=20, beam_size=beam))
    phrases = np.full((4, 2, 2), PAD_ID, np.int32)  # rows 1-3 with phrases, row 0 none
    phrases[1, 0], phrases[2, 0, :1], phrases[3, 1] = [7, 8], [9], [10, 11]
    hard = jnp.asarray([sup.hard_constraints] * 4)
    mixed = generate(params, DecodeRequest(batch["src"], constraints=jnp.asarray(phrases), hard=hard, max_out=20,
                                           beam_size=beam))
    assert np.asarray(mixed["tokens"][0]).tolist() == np.asarray(plain["tokens"][0]).tolist()
    np.testing.assert_allclose(float(mixed["score"][0]), float(plain["score"][0]), rtol=1e-5, atol=1e-5)
