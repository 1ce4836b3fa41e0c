"""Forced decoding (`ModelSpec.score`, `Translator.score`, `--mode score`): the log-probability of given translations.
A left-to-right model's score of each output its search found is the search's own score (greedy, beam, fairseq's
rules, a forced prefix, a length penalty; the vectorized model's plug-in consuming its phrase tokens); DA-Transformer's
log P is the sum over every path of its graph and CTC's over every alignment of its frames, both enumerated here on
tiny inputs (tests/dat_reference.py, tests/ctc_reference.py); the translator's batching, notes and refusals; the
score lines' parsing."""

import functools
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxnat.config import build_config
from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID
from jaxnat.decoding.request import DecodeRequest
from jaxnat.errors import DataError
from jaxnat.models import build_model
from tests import ctc_reference, dat_reference

TINY = "tests/configs/tiny.py"
SRC = np.asarray([[BOS_ID, 7, 8, 9, EOS_ID], [BOS_ID, 10, 11, EOS_ID, PAD_ID]], np.int32)


@functools.lru_cache(maxsize=None)
def _spec(*overrides):
    return build_model(build_config(TINY, ["--config.model.dropout=0", *overrides]), 40, 40)


def _params(spec, src=SRC, seed=0):
    return spec.init(jax.random.PRNGKey(seed), {"src": jnp.asarray(src), "tgt": jnp.asarray(src)})


def _listed(out, beam):
    """Each sentence's outputs with finite scores: [(row int32[T], score)] per sentence."""
    if beam == 1:
        return [[(out["tokens"][b], out["score"][b])] for b in range(len(out["score"]))]
    return [[(row, s) for row, s in zip(out["nbest_tokens"][b], out["nbest_score"][b]) if np.isfinite(s)]
            for b in range(len(out["nbest_score"]))]


@pytest.mark.parametrize("overrides, beam, prefix, free", [
    (("--config.eval.length_penalty=0.6", "--config.eval.search_rules=fairseq"), 3, None, None),
    # a forced first token (a multilingual model's language: adds nothing, counts in n), then given starts (scored as
    # the model's own tokens); the second sentence's prefix all given
    ((), 3, [[12, 9, 14], [13, 0, 0]], [1, 0]),
    (("--config.model.name=vecconst", "--config.vecconst.consume=true", "--config.data.pairs_dir=synthetic"), 3,
     [[9], [0]], [0, 0]),  # the plug-in consumes its tokens; a given start
])
def test_a_left_to_right_models_score_of_each_output_it_found_is_the_searchs(overrides, beam, prefix, free):
    """Scored by teacher forcing (AR) or by the search's own callback (the vectorized model), every output of the
    search's n-best list gets the search's score, its log P the sum of the output's token log-probabilities: with a
    forced prefix too, whose free tokens add nothing and whose given ones count (`search.force_prefix`). (jaxnat's
    own beam search: the ensemble's constrained test, tests/test_ensemble.py.)"""
    spec = _spec(*overrides)
    params = _params(spec)
    extras = {}
    if "vecconst" in spec.name:  # one pair a sentence, its target phrase some of the vocabulary's tokens
        from jaxnat.models.vecconst.model import PairInputs

        pair = np.asarray([[[7, 8]], [[10, 0]]], np.int32)
        extras = {"pairs": PairInputs(jnp.asarray(pair), jnp.asarray(pair + np.where(pair > 0, 5, 0)))}
    prefix = None if prefix is None else jnp.asarray(prefix, jnp.int32)
    request = DecodeRequest(jnp.asarray(SRC), extras=extras, prefix=prefix,
                            prefix_free=None if free is None else jnp.asarray(free, jnp.int32), max_out=9,
                            beam_size=beam, nbest=beam)
    out = jax.device_get(jax.jit(spec.generate)(params, request))
    if prefix is not None:  # every output starts with its prefix, whose given tokens have their log-probabilities
        assert all((out["tokens"][b, 1:1 + len(p)] == p)[p > 0].all() for b, p in enumerate(np.asarray(prefix)))
        given = np.arange(prefix.shape[1])[None, :] >= request.free_prefix()[:, None]
        scored = out["token_logp"][:, 1:1 + prefix.shape[1]]
        assert (scored[given & (np.asarray(prefix) > 0)] < 0).all() and (scored[~given] == 0).all()
    score = jax.jit(spec.score)
    for j in range(beam):
        rows = [listed[min(j, len(listed) - 1)] for listed in _listed(out, beam)]
        tgt = jnp.asarray(np.stack([row for row, _ in rows]))
        got = jax.device_get(score(params, request.replace(max_out=0, beam_size=1, nbest=1), tgt))
        np.testing.assert_allclose(got["score"], [s for _, s in rows], rtol=1e-5, atol=1e-5)
    got = jax.device_get(score(params, request, jnp.asarray(out["tokens"])))
    np.testing.assert_allclose(got["logp"], out["token_logp"].sum(axis=1), rtol=1e-5, atol=1e-5)


def test_dat_log_p_sums_every_path_of_its_graph():
    """log P(y | x) = log Σ over the paths of |y| vertices of the decoders' graph (tests/dat_reference.py, every
    path enumerated); a target longer than the graph has none (−inf); the one-pass decoders' path score of their
    output is one of those paths, so at most its log P."""
    spec = _spec("--config.model.name=dat", "--config.dat.upsample=2", "--config.eval.beam_size=1",
                 "--config.dat.remove_repeats=false", "--config.dat.decode=lookahead")
    params = _params(spec)
    logits, links, n = jax.device_get(jax.jit(spec.module.apply)(params, jnp.asarray(SRC)))
    emit = jax.device_get(jax.nn.log_softmax(logits))
    tgt = np.asarray([[BOS_ID, 20, 21, 22, EOS_ID], [BOS_ID, 23, EOS_ID, PAD_ID, PAD_ID]], np.int32)
    too_long = np.asarray([[BOS_ID, *range(5, 5 + n[1] - 1), EOS_ID]] * 2, np.int32)  # n[1] + 1 tokens
    score = jax.jit(spec.score)
    for rows in (tgt, too_long):
        got = jax.device_get(score(params, DecodeRequest(jnp.asarray(SRC)), jnp.asarray(rows)))
        for b in range(2):
            t = int(np.sum(rows[b] != PAD_ID))
            want = dat_reference.loglik(emit[b][:, rows[b][:t]].T, links[b], t, int(n[b]))
            assert (want == -math.inf and got["logp"][b] == -np.inf) or abs(got["logp"][b] - want) < 1e-4, (b, rows)
        np.testing.assert_array_equal(got["score"], got["logp"])
    out = jax.device_get(jax.jit(spec.generate)(params, DecodeRequest(jnp.asarray(SRC), max_out=12)))
    got = jax.device_get(score(params, DecodeRequest(jnp.asarray(SRC)), jnp.asarray(out["tokens"])))
    assert np.all(got["logp"] >= out["score"] - 1e-5) and np.all(np.isfinite(got["logp"]))


def test_ctc_log_p_sums_every_alignment_of_its_frames():
    """log P(y | x) = log Σ over every frame labelling that collapses to y (tests/ctc_reference.py, every labelling
    of the model's 3 and 2 frames enumerated), the forbidden ids never a label; −inf for a y its frames cannot hold."""
    from jaxnat.models.ctc.model import FORBIDDEN, frame_log_probs

    spec = _spec("--config.model.name=ctc", "--config.ctc.upsample=1", "--config.eval.beam_size=1")
    src = np.asarray([[BOS_ID, 7, EOS_ID], [BOS_ID, EOS_ID, PAD_ID]], np.int32)
    params = _params(spec, src)
    lp, frames = jax.device_get(jax.jit(frame_log_probs, static_argnums=(0, 3, 4))(
        spec.module, params, jnp.asarray(src), 1, 3))
    labels = [v for v in range(40) if v not in FORBIDDEN]
    totals = [ctc_reference.string_totals(lp[b], int(frames[b]), labels) for b in range(2)]
    best = [sorted(t, key=t.get, reverse=True)[:3] for t in totals]
    score = jax.jit(spec.score)
    for k in range(3):
        ys = [best[0][k], best[1][k]] if k < 2 else [(20, 21, 22), (20, 21)]  # the last: too long for the frames
        tgt = np.full((2, 6), PAD_ID, np.int32)
        for b, y in enumerate(ys):
            tgt[b, :len(y) + 2] = [BOS_ID, *y, EOS_ID]
        got = jax.device_get(score(params, DecodeRequest(jnp.asarray(src)), jnp.asarray(tgt)))
        for b, y in enumerate(ys):
            want = totals[b].get(tuple(y), -math.inf)
            assert (want == -math.inf and got["logp"][b] == -np.inf) or abs(got["logp"][b] - want) < 1e-4, (b, y)


@pytest.mark.parametrize("rules", ["jaxnat", "fairseq"])
def test_nat_log_p_is_its_length_times_its_tokens_and_its_pass_scores_as_decoding(rules):
    """NAT-base: P(y | x) = P(|y| | x) Π P(y_i | x, |y|). Over every y of one and of two pieces, log P less the token
    part is the same for every y of a length (the length's probability), and under jaxnat's rules (the ids a pass may
    write, renormalised) the token part sums to 1; the one pass's output (length beam 1) scores what decoding scored
    it, under either rules (fairseq's average BOS and EOS too, which its NAT predicts), and its length's term is the
    largest (decoding took the most probable length)."""
    from jaxnat.decoding.refine import NOT_PREDICTED

    spec = _spec("--config.model.name=nat", "--config.eval.beam_size=1", "--config.nat.length_beam=1",
                 f"--config.eval.search_rules={rules}")
    src = SRC[:1]
    params = _params(spec, src)
    score = jax.jit(spec.score)
    ids = [v for v in range(40) if v not in NOT_PREDICTED]
    lengths = {}
    for m in (1, 2):
        ys = np.array(np.meshgrid(*[ids] * m, indexing="ij")).reshape(m, -1).T
        tgt = np.concatenate([np.full((len(ys), 1), BOS_ID), ys, np.full((len(ys), 1), EOS_ID)], axis=1)
        got = jax.device_get(score(params, DecodeRequest(jnp.asarray(np.repeat(src, len(ys), 0))), jnp.asarray(tgt)))
        tokens_lp = got["score"] * (m + 2 * (rules == "fairseq"))  # the score: the mean over the predicted positions
        length_lp = got["logp"] - tokens_lp
        np.testing.assert_allclose(length_lp, length_lp[0], atol=1e-4)
        lengths[m] = length_lp[0]
        if rules == "jaxnat":
            np.testing.assert_allclose(np.exp(tokens_lp.astype(np.float64)).sum(), 1.0, rtol=1e-4)
    out = jax.device_get(jax.jit(spec.generate)(params, DecodeRequest(jnp.asarray(src), max_out=8)))
    got = jax.device_get(score(params, DecodeRequest(jnp.asarray(src)), jnp.asarray(out["tokens"])))
    np.testing.assert_allclose(got["score"], out["score"], rtol=1e-5, atol=1e-5)
    # decoding took the most probable length: its length term is the largest
    chosen = int(out["chosen_length"][0])
    assert all(v < 0 for v in lengths.values())  # log-probabilities of lengths, one of 256 classes each
    assert got["logp"][0] - got["score"][0] * (chosen + 2 * (rules == "fairseq")) >= max(lengths.values()) - 1e-4


class Pieces:
    """One piece a word: "w<id>" is piece id, other words 7; no languages."""
    languages = {}

    def encode(self, texts, side):
        return [[int(w[1:]) if w.startswith("w") else 7 for w in text.split()] for text in texts]

    def unrepresentable(self, text, side):
        return []

    def decode(self, ids, side):
        return " ".join(f"w{i}" for i in ids if i > EOS_ID)

    def id_to_piece(self, i, side):
        return f"w{i}"


def _translator(*overrides):
    from jaxnat.decoding.translator import Translator

    config = build_config(TINY, ["--config.model.dropout=0", "--config.eval.beam_size=1", *overrides])
    spec = _spec("--config.eval.beam_size=1", *overrides)
    return Translator(spec, _params(spec), Pieces(), config)


def test_the_translator_scores_in_input_order_whatever_the_batches_and_marks_what_it_cannot_score(caplog):
    """Sentences of several lengths over batches of 2 score as they do alone (their order kept); a translation
    longer than the model's max_len is marked "target_too_long" with null scores, a warning counting it; a greedy
    output scored from its text gets the translation's own score."""
    translator = _translator()
    texts = ["a b c", "a", "a b c d e f", "a b"]
    outs = translator.translate(texts)
    targets = [o["hyp"] for o in outs]
    max_len = translator.spec.cfg.max_len
    with caplog.at_level("WARNING", logger="jaxnat"):
        scored = translator.score(texts + ["a"], targets + [" ".join(["w9"] * (max_len - 1))], batch_size=2)
    for o, s, t in zip(outs, scored, targets):
        assert abs(o["score"] - s["score"]) < 1e-5 and s["length"] == len(t.split()) + 1
    alone = [translator.score([text], [target], batch_size=1, token_scores=True)[0]
             for text, target in zip(texts, targets)]
    np.testing.assert_allclose([s["logp"] for s in alone], [s["logp"] for s in scored[:4]], rtol=1e-5, atol=1e-5)
    for s, t in zip(alone, targets):  # each piece's log-probability and the end's, summing to logp
        assert s["pieces"] == t.split() + [f"w{EOS_ID}"] and len(s["token_logp"]) == s["length"]
        assert abs(sum(s["token_logp"]) - s["logp"]) < 1e-4
    assert scored[4] == {"logp": None, "score": None, "length": max_len, "target_too_long": True}
    assert "1 of 5 translations are longer than the model's max_len" in caplog.text


def test_a_model_without_a_probability_of_its_outputs_refuses_to_score_in_one_line():
    """And one whose probability is no product of each piece's (a sum over alignments) refuses per-piece scores."""
    translator = _translator("--config.model.name=cmlm")
    with pytest.raises(DataError, match=r"^model 'cmlm' does not take forced decoding \(scoring given translations\): "
                                        r"it defines no probability of a whole output$"):
        translator.score(["a"], ["a"])
    with pytest.raises(DataError, match=r"targets\[1\] is NoneType, not a string"):
        _translator().score(["a", "b"], ["a", None])
    with pytest.raises(DataError, match=r"^model 'ctc' scores whole translations only: its probability is no "):
        _translator("--config.model.name=ctc").score(["a"], ["a"], token_scores=True)


@pytest.mark.parametrize("line, message", [
    ("a dog .", r"in:2: a plain line to score is a source and its translation separated by one tab; this one has 0"),
    ("a\tb\tc", r"in:2: .* this one has 2 tabs$"),
    ('{"src": "a dog ."}', r'in:2: a JSON line to score needs a string "tgt" field'),
    ('{"src": "a", "tgt": "b", "logp": 1}', r'in:2: "logp" is a key score writes, so this line\'s would be lost'),
    ('{"src": "a", "tgtt": "b"}', r'in:2: unknown key "tgtt"; did you mean "tgt"\?'),
])
def test_score_lines_that_are_neither_form_are_refused_by_their_line(line, message):
    from jaxnat.decoding.score_io import parse_scored

    with pytest.raises(DataError, match=message):
        parse_scored(["a\tb", line], "in")


def test_score_stream_writes_each_line_with_its_scores(tmp_path):
    """Plain tab lines and JSON lines (their own keys echoed) in; the scores out in order, a -inf log P as null."""
    from jaxnat.decoding.score_io import score_stream

    class Stub:
        spec, config = _spec(), build_config(TINY, [])

        def score(self, texts, targets, batch_size, **options):
            return [{"logp": -float(len(t)) if t != "x" else -math.inf, "score": -1.0, "length": 2} for t in targets]

    (tmp_path / "in.txt").write_text('a dog .\tein Hund .\n{"src": "b", "tgt": "x", "id": 7}\n')
    config = build_config(TINY, [])
    score_stream(Stub, config, str(tmp_path / "in.txt"), str(tmp_path / "out.jsonl"))
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert lines == [{"src": "a dog .", "tgt": "ein Hund .", "logp": -10.0, "score": -1.0, "length": 2},
                     {"src": "b", "tgt": "x", "id": 7, "logp": None, "score": -1.0, "length": 2}]


@pytest.mark.slow
def test_score_a_translations_own_outputs_from_the_command_line(ar_run, tmp_path):
    """The workflow of reranking or quality estimation: --mode translate's outputs, fed to --mode score as JSON lines
    (their "id" echoed) and as tab lines, score as translate scored them, with each piece's log-probability
    (eval.token_scores) and translate's word alignment (eval.alignment); --output over the input is refused."""
    from tests.test_translate import _main

    sources = ["the old man reads a book .", "a dog runs ."]
    result = _main(ar_run, "--mode", "translate", "--config.eval.beam_size=2", "--config.eval.alignment=words",
                   stdin="\n".join(sources) + "\n")
    assert result.returncode == 0, result.stderr
    translated = [json.loads(line) for line in result.stdout.splitlines()]
    (tmp_path / "in.txt").write_text(json.dumps({"src": sources[0], "tgt": translated[0]["hyp"], "id": 1}) + "\n"
                                     + f"{sources[1]}\t{translated[1]['hyp']}\n")
    out = tmp_path / "out.jsonl"
    result = _main(ar_run, "--mode", "score", "--input", str(tmp_path / "in.txt"), "--output", str(out),
                   "--config.eval.token_scores=true", "--config.eval.alignment=words")
    assert result.returncode == 0, result.stderr
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    for s, t in zip(scored, translated):  # the same word alignment of the same translation, over their words
        pairs = [tuple(map(int, pair.split("-"))) for pair in s["alignment"].split()]
        assert s["alignment"] == t["alignment"] and {j for _, j in pairs} == set(range(len(t["hyp"].split())))
        assert all(i < len(t["src"].split()) for i, _ in pairs)
    assert scored[0]["id"] == 1 and [s["tgt"] for s in scored] == [t["hyp"] for t in translated]
    np.testing.assert_allclose([s["score"] for s in scored], [t["score"] for t in translated], rtol=1e-5, atol=1e-5)
    assert all(s["logp"] <= s["score"] < 0 and s["length"] >= 1 for s in scored)
    for s in scored:  # each piece's log-probability, the end's last
        assert len(s["pieces"]) == len(s["token_logp"]) == s["length"] and s["pieces"][-1] == "</s>"
        assert abs(sum(s["token_logp"]) - s["logp"]) < 1e-4
    result = _main(ar_run, "--mode", "score", "--input", str(out), "--output", str(out))
    assert result.returncode == 2 and "is the --input file, which the scores would replace" in result.stderr
