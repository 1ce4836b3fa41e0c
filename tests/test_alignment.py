"""Word alignments from the attention (`jaxnat.decoding.alignment`, `ModelSpec.align`, eval.alignment): the hard
alignment and the pieces' words against plain-Python references (hypothesis), the models' attention rows, and the
translator's alignments of its own outputs and of given ones. That they are fairseq's --print-alignment, hard and
soft, by one model and by an ensemble: tests/test_import.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID
from jaxnat.decoding import alignment
from jaxnat.decoding.request import DecodeRequest, Member
from jaxnat.errors import DataError
from tests.test_score import _params, _spec, _translator, SRC


def reference_hard(attention):
    """Each target piece's row (the end's left out) → the first source piece (the end's left out) of its largest
    value."""
    pairs = []
    for j, row in enumerate(attention.tolist()[:-1]):
        values = row[:-1]
        if values:
            pairs.append((values.index(max(values)), j))
    return pairs


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(0, 2**31 - 1), st.booleans())
def test_the_hard_alignment_is_each_target_pieces_most_attended_source_piece(t, s, seed, ties):
    rng = np.random.default_rng(seed)
    attention = rng.random((t, s)).astype(np.float32)
    if ties:  # values drawn from a few: equal ones, where the first counts
        attention = np.round(attention * 2) / 2
    assert alignment.hard(attention) == reference_hard(attention)


PIECES = ["\u2581a", "b", "\u2581", ",", "\u2581cd", "e", ".", "\u2581\u2581"]


def sentencepiece_text(pieces):
    """SentencePiece's decoding of pieces: each "▁" a space, the text's ends stripped."""
    return "".join(p.replace("\u2581", " ") for p in pieces).strip()


def reference_piece_words(pieces):
    """Per piece, the word (whitespace-separated, of the whole text) its first character that is no space lands in,
    -1 for a piece of spaces only: the text written out character by character, each with its piece."""
    chars, owner = [], []
    for k, piece in enumerate(pieces):
        for c in piece.replace("\u2581", " "):
            chars.append(c)
            owner.append(k)
    word, inside, first = -1, False, {}
    for c, k in zip(chars, owner):
        if c == " ":
            inside = False
            continue
        if not inside:
            word, inside = word + 1, True
        first.setdefault(k, word)
    return [first.get(k, -1) for k in range(len(pieces))]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(range(len(PIECES))), max_size=10))
def test_each_piece_is_in_the_word_of_the_text_that_it_writes_into(ids):
    def decode(ids):
        return sentencepiece_text([PIECES[i] for i in ids])

    words = alignment.piece_words(ids, decode)
    assert words == reference_piece_words([PIECES[i] for i in ids])
    assert max(words, default=-1) == len(decode(ids).split()) - 1


def test_source_words_are_the_input_words_where_each_encodes_alone_as_in_the_sentence():
    """Each word of the input encoded alone: its pieces, in order, are the sentence's (or their first ones: a cut
    source), and each piece belongs to its word; a segmenter that cuts a word by the words around it is no such
    mapping (None: the words are read off the pieces' text)."""
    alone = {"a": [5], "dog.": [6, 7], "b": [8]}
    encode = lambda words: [alone[w] for w in words]  # noqa: E731
    assert alignment.source_words("a  dog. b", [5, 6, 7, 8], encode) == [0, 1, 1, 2]
    assert alignment.source_words("a dog. b", [5, 6], encode) == [0, 1]
    assert alignment.source_words("a dog. b", [5, 6, 9, 8], encode) is None


def test_word_pairs_are_each_once_by_target_word_and_leave_out_pieces_in_no_word():
    pairs = [(0, 0), (1, 1), (2, 1), (3, 2), (0, 3)]
    assert alignment.words(pairs, src_words=[0, 0, 1, -1], tgt_words=[1, 0, 0, 1]) == [(0, 0), (1, 0), (0, 1)]
    assert alignment.pharaoh([(0, 0), (1, 0), (0, 1)]) == "0-0 1-0 0-1"


def _align(spec, params, tgt, members=()):
    request = DecodeRequest(jnp.asarray(SRC), extras={"ensemble": tuple(Member(p, spec.cfg) for p in members)})
    return np.asarray(jax.jit(spec.align)(params, request, jnp.asarray(tgt)))


TGT = np.asarray([[BOS_ID, 9, 10, 11, EOS_ID], [BOS_ID, 12, EOS_ID, PAD_ID, PAD_ID]], np.int32)


@pytest.mark.parametrize("overrides", [(), ("--config.model.source_bos=false",)])
def test_an_ar_models_attention_rows_are_distributions_over_the_source_it_read(overrides):
    """Each row sums to 1 over the source's real columns (BOS's 0 where the encoder does not read it, the columns
    still the given source's); a row does not change with the tokens after it (causal); an ensemble's rows are its
    models' mean."""
    spec = _spec(*overrides)
    params, other = _params(spec), _params(spec, seed=1)
    rows = _align(spec, params, TGT)
    assert rows.shape == (2, TGT.shape[1] - 1, SRC.shape[1])
    read = SRC != PAD_ID
    if overrides:
        read[:, 0] = False
        assert np.all(rows[:, :, 0] == 0)
    np.testing.assert_allclose(np.where(read[:, None], rows, 0).sum(axis=-1), 1.0, rtol=1e-5)
    changed = TGT.copy()
    changed[0, 3] = 13
    np.testing.assert_allclose(_align(spec, params, changed)[0, :3], rows[0, :3], rtol=1e-6)
    assert np.abs(_align(spec, params, changed)[0, 3] - rows[0, 3]).max() > 1e-6
    np.testing.assert_allclose(_align(spec, params, TGT, (other,)), (rows + _align(spec, other, TGT)) / 2, rtol=1e-5)


def test_the_vectorized_models_attention_is_over_the_source_beside_its_constraint_entries():
    """With a pair, part of each row's attention goes to the constraint entries, left out: the source's columns sum
    to at most 1; without pairs to 1."""
    from jaxnat.models.vecconst.model import PairInputs

    spec = _spec("--config.model.name=vecconst", "--config.data.pairs_dir=synthetic")
    params = _params(spec)
    for pair, most in ((np.asarray([[[7, 8]], [[10, 0]]], np.int32), 1.0 - 1e-4),
                       (np.full((2, 1, 1), PAD_ID, np.int32), 1.0 + 1e-5)):
        request = DecodeRequest(jnp.asarray(SRC), extras={"pairs": PairInputs(jnp.asarray(pair), jnp.asarray(pair))})
        rows = np.asarray(jax.jit(spec.align)(params, request, jnp.asarray(TGT)))
        total = np.where(SRC[:, None] != PAD_ID, rows, 0).sum(axis=-1)
        assert rows.shape == (2, 4, SRC.shape[1]) and np.all(total <= most)
        assert most < 1 or np.allclose(total, 1.0, rtol=1e-5)


def test_the_translator_aligns_its_outputs_and_given_ones_alike():
    """Each kind: "pieces" pairs every piece of the translation with a source piece, in order; "soft" a row per
    piece and the end over the source's pieces and end; "words" pairs of whitespace words. Scoring the outputs as
    given translations aligns them as translating did, whatever the batches; an MBR choice is aligned as chosen."""
    translator = _translator()
    texts = ["a b c", "a", "a b c d e f", "a b"]
    outs = {kind: translator.translate(texts, alignment=kind) for kind in alignment.KINDS}
    for text, out in zip(texts, outs["pieces"]):
        n = len(out["hyp"].split())
        assert out["src_pieces"] == ["w7"] * len(text.split()) + [f"w{EOS_ID}"]
        assert out["pieces"] == out["hyp"].split() + [f"w{EOS_ID}"]
        pairs = [tuple(map(int, p.split("-"))) for p in out["alignment"].split()]
        assert [j for _, j in pairs] == list(range(n)) and all(0 <= i < len(text.split()) for i, _ in pairs)
    for out in outs["soft"]:
        assert np.asarray(out["alignment"]).shape == (len(out["pieces"]), len(out["src_pieces"]))
    # one piece a word: the word pairs are the piece pairs, ordered by target word
    for words, pieces in zip(outs["words"], outs["pieces"]):
        assert words["alignment"] == pieces["alignment"] and "pieces" not in words
    for kind, out in outs.items():
        scored = translator.score(texts, [o["hyp"] for o in out], batch_size=3, alignment=kind)
        for o, s in zip(out, scored):
            np.testing.assert_allclose(np.asarray(s["alignment"], float) if kind == "soft" else 0,
                                       np.asarray(o["alignment"], float) if kind == "soft" else 0, atol=2e-6)
            assert kind == "soft" or s["alignment"] == o["alignment"]
    chosen = translator.translate(texts, beam_size=3, mbr="chrf", alignment="pieces")
    for out in chosen:
        assert out["pieces"] == out["hyp"].split() + [f"w{EOS_ID}"]


def test_a_model_without_alignments_or_an_unknown_kind_is_one_line():
    from jaxnat.config import build_config
    from jaxnat.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^model 'cmlm' does not take word alignments"):
        build_config("tests/configs/tiny.py", ["--config.model.name=cmlm", "--config.eval.beam_size=1",
                      "--config.eval.alignment=words"])
    with pytest.raises(DataError, match=r"^model 'nat' does not take word alignments \(eval.alignment\), which are "
                                        r"read off a left-to-right model's attention$"):
        _translator("--config.model.name=nat").translate(["a"], alignment="words")
    with pytest.raises(DataError, match=r"^alignment 'hard' is none of words, pieces, soft$"):
        _translator().score(["a"], ["a"], alignment="hard")


def test_the_alignment_layer_heads_and_full_context_are_the_models():
    """model.alignment_layer / alignment_heads: the rows are that layer's first heads' mean, the layer read off a pass
    stopped after it (an early exit), with the layers scanned too (one traced layer, the wanted one's weights kept);
    model.full_context_alignment: a pass without the causal mask, whose rows see the tokens after them."""
    from jaxnat.models.transformer import stack_layers, token_mask

    keys = ("--config.model.dec_layers=2", "--config.model.alignment_layer=0", "--config.model.alignment_heads=1")
    spec = _spec(*keys)
    params = _params(spec)
    rows = _align(spec, params, TGT)

    def first_layer(module, src, tgt_in):
        memory = module.encode(src)
        _, weights = module.decoder(module.embed_target(tgt_in, False), token_mask(tgt_in), memory, token_mask(src),
                                    False, num_layers=1, return_attention=True)
        return weights[:, 0]

    want = spec.module.apply(params, jnp.asarray(SRC), jnp.asarray(TGT[:, :-1]), method=first_layer)
    np.testing.assert_allclose(rows, np.asarray(want), rtol=1e-5, atol=1e-7)
    scanned = _spec(*keys, "--config.model.scan_layers=true")
    np.testing.assert_allclose(_align(scanned, stack_layers(params), TGT), rows, rtol=1e-5, atol=1e-7)
    assert np.abs(_align(_spec("--config.model.dec_layers=2"), params, TGT) - rows).max() > 1e-3
    full = _spec(*keys, "--config.model.full_context_alignment=true")
    changed = TGT.copy()
    changed[0, 3] = 13
    assert np.abs(_align(full, params, changed)[0, 0] - _align(full, params, TGT)[0, 0]).max() > 1e-6
