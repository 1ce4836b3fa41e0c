"""Ensembles (eval.ensemble, `search.ensembled`): the AR models' searches over the mean of several models'
probabilities, against greedy search's definition over teacher-forced distributions; an ensemble's scores are its
forced decoding's; one model twice is the model alone; members of other architectures; the constrained search
carries the members' caches; the members a workdir names are loaded and checked (another family or vocabulary: one
line). fairseq's ensembles, of one architecture and of two: tests/test_import.py."""

import json
import math
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jaxnat.config import build_config
from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID
from jaxnat.decoding.request import DecodeRequest, Member
from jaxnat.decoding.search import FORBIDDEN_IDS, mean_probability
from jaxnat.errors import ConfigError, JaxnatError
from jaxnat.models.transformer import source_tokens
from tests.test_score import SRC, _params, _spec


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**16), st.integers(1, 4))
def test_mean_probability_is_the_log_of_the_mean(seed, members):
    """`mean_probability` against the mean of the members' probabilities, entry by entry in plain Python; forbidden
    ids (−inf in every member) stay −inf, and an id one member forbids keeps the others' share."""
    rng = np.random.default_rng(seed)
    logp = np.log(rng.dirichlet(np.ones(6), (members, 4)))  # [M, rows, V]
    logp[:, :, 0] = -np.inf
    logp[0, :, 1] = -np.inf
    got = np.asarray(_mean_probability(jnp.asarray(logp, jnp.float32)))
    for r in range(4):
        for v in range(6):
            want = sum(math.exp(logp[m, r, v]) for m in range(members)) / members
            assert (got[r, v] == -np.inf) if want == 0 else math.isclose(got[r, v], math.log(want), rel_tol=1e-5,
                                                                          abs_tol=1e-6)


_mean_probability = jax.jit(mean_probability)


def _check_greedy(models, src, rows, max_len):
    """Greedy search's definition, one sentence and one position at a time: each token of a row is the most probable
    allowed one under the mean of the models' ((spec, params) pairs) probabilities given the tokens before it (every
    model teacher-forced on the row, one pass each), and the row ends at its first EOS, forced once max_len tokens
    stand."""
    width = max(map(len, rows))
    tgt = jnp.asarray([row + [PAD_ID] * (width - len(row)) for row in rows], jnp.int32)
    probs = np.mean([np.exp(jax.nn.log_softmax(jax.jit(spec.module.apply)(
        p, source_tokens(spec.cfg, jnp.asarray(src))[0], tgt[:, :-1]))) for spec, p in models], 0)
    probs[..., list(FORBIDDEN_IDS)] = -1
    for b, row in enumerate(rows):
        assert row[0] == BOS_ID and row[-1] == EOS_ID and EOS_ID not in row[1:-1]
        for t in range(1, len(row)):
            want = EOS_ID if t - 1 == max_len else int(np.argmax(probs[b, t - 1]))
            assert row[t] == want, (b, t, row)


@pytest.mark.parametrize("other", [(), ("--config.model.dec_layers=2", "--config.model.ffn_dim=48",
                                           "--config.model.source_bos=false", "--config.model.decoder_start=eos")])
def test_an_ensembles_greedy_search_follows_the_mean_of_its_models_probabilities(other):
    """Two models with other weights, of the same config or of another architecture and conventions (fairseq's
    ensembles need one dictionary only): greedy search over their mean probability takes the most probable token of
    their mean teacher-forced distribution at every step; the forced decoding of each output (with the same members)
    gives the search's score; a model ensembled with itself decodes as the model alone."""
    spec = _spec("--config.eval.max_len_a=0", "--config.eval.max_len_b=6")
    spec_b = _spec("--config.eval.max_len_a=0", "--config.eval.max_len_b=6", *other)
    a, b = _params(spec, seed=0), _params(spec_b, seed=1)
    generate, score = jax.jit(spec.generate), jax.jit(spec.score)
    request = DecodeRequest(jnp.asarray(SRC), extras={"ensemble": (Member(b, spec_b.cfg),)}, max_out=9)
    out = jax.device_get(generate(a, request))
    rows = [[int(t) for t in row if t != PAD_ID] for row in out["tokens"]]
    _check_greedy(((spec, a), (spec_b, b)), SRC, rows, 6)
    scored = jax.device_get(score(a, request, jnp.asarray(out["tokens"])))
    np.testing.assert_allclose(scored["score"], out["score"], rtol=1e-5, atol=1e-5)
    alone = jax.device_get(generate(a, request.replace(extras={})))
    twice = jax.device_get(generate(a, request.replace(extras={"ensemble": (Member(a, spec.cfg),)})))
    assert np.array_equal(alone["tokens"], twice["tokens"])
    np.testing.assert_allclose(alone["score"], twice["score"], rtol=1e-5, atol=1e-6)


def test_an_ensembles_constrained_beam_search_meets_its_phrases_and_scores_as_forced_decoding():
    """The constrained beam search reorders a cache of every member's rows: its outputs hold their phrases and score
    what forced decoding with the same members gives them."""
    spec = _spec("--config.eval.max_len_a=0", "--config.eval.max_len_b=6")
    a, b = _params(spec, seed=0), _params(spec, seed=1)
    phrases = jnp.asarray([[[20, 21]], [[22, 0]]], jnp.int32)
    request = DecodeRequest(jnp.asarray(SRC), constraints=phrases, hard=jnp.asarray([True, True]),
                            extras={"ensemble": (Member(b, spec.cfg),)}, max_out=9, beam_size=3)
    out = jax.device_get(jax.jit(spec.generate)(a, request))
    rows = out["tokens"].tolist()
    assert any(rows[0][i:i + 2] == [20, 21] for i in range(8)) and 22 in rows[1]
    scored = jax.device_get(jax.jit(spec.score)(a, request, jnp.asarray(out["tokens"])))
    np.testing.assert_allclose(scored["score"], out["score"], rtol=1e-5, atol=1e-5)


def _copy(ar_run, tmp_path, name):
    workdir = tmp_path / name
    shutil.copytree(ar_run, workdir)
    return workdir


def test_a_workdir_decodes_with_the_members_it_names_and_refuses_others_in_one_line(ar_run, tmp_path):
    """An ensemble of the run and its copy is the run alone (the same weights); a member that is no run, trained with
    another vocabulary, or of another family is refused, naming it, before anything decodes."""
    from jaxnat.config import workdir_config
    from jaxnat.restore import load_translator

    config = workdir_config(str(ar_run))
    config.eval.beam_size = 2
    texts = ["the old man reads a book .", "a dog runs ."]
    alone = load_translator(config, str(ar_run)).translate(texts)
    config.eval.ensemble = str(_copy(ar_run, tmp_path, "copy"))
    translator = load_translator(config, str(ar_run))
    assert len(translator.members) == 1
    both = translator.translate(texts)
    assert [o["hyp"] for o in both] == [o["hyp"] for o in alone]
    np.testing.assert_allclose([o["score"] for o in both], [o["score"] for o in alone], rtol=1e-5, atol=1e-6)

    other_vocab = _copy(ar_run, tmp_path, "other-vocab")
    model = next((other_vocab / "spm").glob("*.model"))
    model.write_bytes(model.read_bytes() + b"\0")
    other_family = _copy(ar_run, tmp_path, "cmlm")
    recorded = json.loads((other_family / "config.json").read_text())
    recorded["model"]["name"] = "cmlm"
    (other_family / "config.json").write_text(json.dumps(recorded))
    absent = tmp_path / "absent"
    for member, error, message in (
            (absent, ConfigError, rf"^eval.ensemble={absent}: {absent}/config.json: no readable config of a trained "
                                  rf"run$"),
            (other_vocab, JaxnatError, rf"^eval.ensemble={other_vocab} has another vocabulary than {ar_run}"),
            (other_family, JaxnatError, rf"^eval.ensemble={other_family} is a 'cmlm' run; it must be a run of model "
                                        rf"'ar'$")):
        config.eval.ensemble = f"{tmp_path / 'copy'},{member}"
        with pytest.raises(error, match=message):
            load_translator(config, str(ar_run))


def test_a_family_without_ensembles_refuses_members():
    from jaxnat.decoding.translator import Translator

    config = build_config("tests/configs/tiny.py", ["--config.model.name=cmlm", "--config.eval.beam_size=1"])
    spec = _spec("--config.model.name=cmlm", "--config.eval.beam_size=1")
    with pytest.raises(JaxnatError, match=r"^model 'cmlm' does not take ensembles \(eval.ensemble\)$"):
        Translator(spec, None, None, config, members=[{}])
