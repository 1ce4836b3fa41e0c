"""Sockeye 3 models import and compute what Sockeye computes: tests/data/import/sockeye*/ hold model directories as
`sockeye-train` writes them, with the SentencePiece models that cut their data, and what Sockeye 3.1.34 computed
with them (expected_sockeye.json; tools/make_import_fixtures.py --sockeye PYTHON)."""

import copy
import os

import numpy as np
import pytest

from jaxnat.config import workdir_config
from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID
from jaxnat.errors import DataError
from jaxnat.importers import sockeye, write_workdir
from jaxnat.restore import load_translator
from tests.library_outputs import read_outputs

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "import")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sockeye", "sockeye-postnorm", "sockeye-ssru"])
def test_a_sockeye_model_computes_sockeyes_own_outputs(kind, tmp_path):
    """Sockeye's defaults (pre-norm layers with top norms, one vocabulary and one matrix for the embeddings and the
    output layer, sinusoids) and the other layout (post-norm, a vocabulary and a SentencePiece model a side, an output
    layer of its own, GELU, learned positions) and a decoder of SSRU layers, imported as a user imports them: the
    sources cut into the same pieces; Sockeye's greedy outputs token for token, each token's log-probability (and the
    end's) within 1e-5; its beam-5 outputs scored as Sockeye scores them (its length penalty), jaxnat's beam finding
    outputs as good or better (Sockeye's beam keeps its finished hypotheses, narrowing its search); hard constraints met
    (on the first)."""
    workdir = str(tmp_path / "run")
    write_workdir(f"sockeye:{DATA}/{kind}", workdir)
    config = workdir_config(workdir)
    assert (config.model.pre_norm, config.model.positions, config.model.decoder_autoreg, config.eval.beam_size) == (
        kind != "sockeye-postnorm", "learned" if kind == "sockeye-postnorm" else "sinusoidal",
        "ssru" if kind == "sockeye-ssru" else "self_attention", 5)
    translator = load_translator(config, workdir)
    want, src, ids = read_outputs(translator, os.path.join(DATA, kind, "expected_sockeye.json"), (1, 5))
    greedy = translator.translate_ids(src, beam_size=1, batch_size=len(src))
    assert [[int(t) for t in r["tokens"] if t not in (PAD_ID, BOS_ID, EOS_ID)] for r in greedy] == ids[1]
    scored = translator.score_ids(src + src, ids[1] + ids[5], 2 * len(src), token_scores=True)
    for ours, theirs in zip(scored, want["token_logp"]):
        np.testing.assert_allclose(ours["token_logp"], theirs, atol=1e-5)
    beam = translator.translate_ids(src, beam_size=5, batch_size=len(src))
    same = 0
    for r, ours, h, theirs in zip(beam, scored[len(src):], want["beam5"], ids[5]):
        assert -ours["score"] == pytest.approx(h["score"], abs=1e-5)  # Sockeye's score: a negative log-probability
        assert r["score"] >= ours["score"] - 1e-5
        same += [int(t) for t in r["tokens"] if t not in (PAD_ID, BOS_ID, EOS_ID)] == theirs
    assert same >= len(src) - 2 and sum(len(h["pieces"]) for h in want["beam1"]) > 90
    if kind == "sockeye":
        hyps = translator.translate(want["src"][:4], constraints=[["hund"]] * 4, hard=[True] * 4)
        assert all("hund" in h["hyp"].split() for h in hyps)


def _config(kind="sockeye"):
    return sockeye.read_config(os.path.join(DATA, kind, "config"))


@pytest.mark.parametrize("change, message", [
    (lambda c: c["config_data"].update(num_source_factors=2), "source or target factors"),
    (lambda c: c.update(lhuc=True), "Sockeye setting lhuc=True is not supported"),
    (lambda c: c["config_decoder"].update(decoder_type="rnn"), "Sockeye's decoder 'rnn' is not supported"),
    (lambda c: c["config_encoder"].update(use_glu=True), "encoder use_glu=True is not supported"),
    (lambda c: [c[s].update(preprocess_sequence="n", postprocess_sequence="drn") for s in
                ("config_encoder", "config_decoder")], "transformer-preprocess 'n' with -postprocess 'drn'"),
    (lambda c: c["config_decoder"].update(act_type="swish1"), "encoder and decoder of different act_type"),
    (lambda c: c.update(weight_tying_type="src"), "weight-tying-type 'src' is not supported"),
])
def test_a_sockeye_model_jaxnat_cannot_compute_is_refused_in_one_line(monkeypatch, change, message):
    """Each Sockeye setting jaxnat's model does not compute, named; its config read as data (its class tags as
    maps: nothing of Sockeye's is imported or run)."""
    config = copy.deepcopy(_config())
    assert config["config_encoder"]["model_size"] == 16 and config["weight_tying_type"] == "src_trg_softmax"
    change(config)
    monkeypatch.setattr(sockeye, "read_config", lambda path: config)
    with pytest.raises(DataError, match=message):
        sockeye.read(os.path.join(DATA, "sockeye"))


def test_a_sockeye_model_without_its_sentencepiece_model_is_refused_in_one_line(tmp_path):
    """Sockeye's directory holds no text pipeline: without the SentencePiece model beside it (or in --dict-dir) the
    import says what to put where; with --dict-dir it reads it there. A Sockeye 2 (MXNet) model is named as such."""
    model = tmp_path / "model"
    model.mkdir()
    for name in sockeye.FILES + ("version",):
        (model / name).write_bytes(open(os.path.join(DATA, "sockeye", name), "rb").read())
    with pytest.raises(DataError, match="Sockeye reads text already cut into pieces; .* put it there as "
                                        "sentencepiece.model .* or name its directory with --dict-dir"):
        sockeye.read(str(model))
    assert sockeye.read(str(model), os.path.join(DATA, "sockeye")).files.keys() == {"sentencepiece.model"}
    (model / "version").write_text("2.3.17")
    with pytest.raises(DataError, match="a Sockeye 2.3.17 model; jaxnat reads Sockeye 3's .*mx_to_pt"):
        sockeye.read(str(model))
