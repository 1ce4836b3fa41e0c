"""Hard constraints stay words on real SentencePiece text: after a constraint such as "Zaun", punctuation can
follow ("Zaun." / "Zaun," / 'Zaun"') but no piece that would extend the word ("Zauns", "Zaun-", "Zaun2"),
whatever the model predicts. Uses a SentencePiece model trained here on a small German-like corpus."""

import functools
import re

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxnat.data.pieces import continues_word
from jaxnat.data.tokenizer import Tokenizer
from jaxnat.data.vocab import PAD_ID, PieceTables
from jaxnat.decoding.refine import Heads, RefineOptions, initial_hypotheses, length_cap, refine
from jaxnat.decoding.request import pad_hypotheses
from jaxnat.models.editor.model import editor_reposition
from jaxnat.models.levt.model import levt_delete
from tests.refine_reference import stub_heads

TEXT = [
    'Der Hund springt über den Zaun.', 'Ein Mann, der am Zaun steht, lacht.', 'Sie sagt: "Zaun" und geht.',
    "Die Zäune sind blau-weiß.", "Zwei Kinder spielen am Zaunpfahl, 2 Hunde schauen zu.", 'Das "Haus" ist alt.',
    "Ein Mädchen läuft, ein Junge springt.", "Der Zauns Farbe ist rot!", "Wo ist der Zaun?", "Peter's Hund bellt.",
] * 20
FIRST_EDITS = {"deletion": levt_delete, "reposition": editor_reposition}
# a letter, digit, hyphen or apostrophe right after the word would make it another word
GLUED = re.compile(r"Zaun[\w\-'’]")


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return Tokenizer.train_or_load(str(tmp_path_factory.mktemp("spm")), TEXT, TEXT, vocab_size=150)


def piece_id(tok, piece):
    ids = [i for i in range(tok.vocab_size("tgt")) if tok.id_to_piece(i, "tgt") == piece]
    assert ids, f"the test vocabulary has no piece {piece!r}"
    return ids[0]


def test_continues_word_rule():
    for piece in ("s", "en", "2", "-", "'s", "’", "é", "\u0301x"):
        assert continues_word(piece), piece
    for piece in (".", ",", '"', "?", "!", ")", "▁Zaun", "▁", "", "“", "北", "京城", "ス", "。", "에"):
        # CJK characters are words alone; a Hangul syllable is a Korean particle or ending, which a term may take
        assert not continues_word(piece), piece


def test_a_phrase_inside_unspaced_text_loses_its_word_boundary():
    from jaxnat.data.tokenizer import inside_word

    class Pieces:  # the tokenizer interface inside_word reads
        pieces = ["▁", "北", "京", "▁北京", "北京", "▁上海", "Zaun"]

        def id_to_piece(self, i, side):
            return self.pieces[i]

        def piece_id(self, piece, side):
            return self.pieces.index(piece) if piece in self.pieces else None

    t = Pieces()
    assert inside_word([0, 1, 2], t, "tgt") == [1, 2]  # "▁" "北" "京": the boundary dropped
    assert inside_word([3, 1], t, "tgt") == [4, 1]  # "▁北京": the same piece without it
    assert inside_word([5], t, "tgt") == [5]  # no "上海" piece: kept as it is
    assert inside_word([6, 1], t, "tgt") == [6, 1] and inside_word([], t, "tgt") == []
    assert inside_word([0], t, "tgt") == [0]  # the boundary alone: left for the hard-constraint check to refuse


def test_a_vocabulary_without_word_structure_glues_no_piece_onto_another():
    tables = PieceTables.every_piece_a_word(4)
    assert tables.word_start.tolist() == [True] * 4 and tables.continues.tolist() == [False] * 4
    assert tables.joins is None


def test_table_marks_letters_not_punctuation(tok):
    table = tok.continues_table("tgt")
    for i in range(tok.vocab_size("tgt")):
        p = tok.id_to_piece(i, "tgt")
        if p in (".", ",", '"', "!", "?", ":"):
            assert not table[i], p
        elif p and not p.startswith("▁") and p[0].isalpha():
            assert table[i], p


@functools.lru_cache
def _random_model_refine(first: str, vocab: int):
    """jit'd refine of [BOS, Zaun (hard), EOS] with the random heads of stub_heads(seed)."""
    options = RefineOptions(max_iter=4)
    count = ("deletions",) if first == "deletion" else ("repositions", "deletions")

    @jax.jit
    def run(seed, tokens, phrase, src, continues):
        heads = stub_heads(seed, vocab, first, plh_boost=3.0)
        return refine(heads, FIRST_EDITS[first], initial_hypotheses(tokens, phrase),
                      length_cap(src, tokens.shape[1], options), options, count, continues)

    return run


def _decode(tok, first, heads):
    """Refine [BOS, Zaun (hard), EOS] for one sentence (one iteration; ``heads``: Heads, or the seed of
    random heads run for five iterations). Returns, from the output text, the constraint
    "Zaun" and the character after it (the model may write "Zaun…" elsewhere by itself: that is not the constraint)."""
    zaun = tok.encode(["Zaun"], "tgt")[0]
    tokens = jnp.asarray(pad_hypotheses([zaun], 16))
    phrase = jnp.asarray([[0] + [1] * len(zaun) + [0] * (15 - len(zaun))])
    src = jnp.asarray([[1] + [7] * 10 + [2]])
    options = RefineOptions(max_iter=0)
    count = ("deletions",) if first == "deletion" else ("repositions", "deletions")
    continues = jnp.asarray(tok.continues_table("tgt"))
    if isinstance(heads, int):  # a seed of random heads
        out = _random_model_refine(first, tok.vocab_size("tgt"))(jnp.int32(heads), tokens, phrase, src, continues)
    else:
        out = refine(heads, FIRST_EDITS[first], initial_hypotheses(tokens, phrase), length_cap(src, 16, options),
                     options, count, continues)
    tokens = [int(t) for t in out["tokens"][0] if t != PAD_ID]
    end = max(k for k, m in enumerate(out["phrase"][0].tolist()) if m) + 1
    through, after = tok.decode(tokens[:end], "tgt"), tok.decode(tokens[:end + 1], "tgt")
    assert through.endswith("Zaun") and after.startswith(through), (through, after)
    return after[len(through) - 4:len(through) + 1]


def keep_everything(first):
    """A first-edit head that changes nothing: never delete / every slot points at its own token."""
    if first == "deletion":
        return lambda t: jnp.zeros(t.shape + (2,)).at[..., 0].set(9.0)
    return lambda t: jnp.broadcast_to(jnp.where(jnp.eye(t.shape[1], dtype=bool), 9.0, -9.0), t.shape + t.shape[1:])


def preferring(tok, first, piece):
    """Heads that keep everything, open one placeholder in every slot and fill it with ``piece`` if they may."""
    want, vocab = piece_id(tok, piece), tok.vocab_size("tgt")
    return Heads(keep_everything(first), lambda t: jnp.zeros(t.shape[:1] + (t.shape[1] - 1, 256)).at[..., 1].set(9.0),
                 lambda t: jnp.zeros(t.shape + (vocab,)).at[..., want].set(9.0))


@pytest.mark.parametrize("first", list(FIRST_EDITS))
@pytest.mark.parametrize("piece", [".", ",", '"'])
def test_punctuation_may_follow_a_constraint(tok, first, piece):
    assert _decode(tok, first, preferring(tok, first, piece)) == "Zaun" + piece


@pytest.mark.parametrize("first", list(FIRST_EDITS))
@pytest.mark.parametrize("piece", ["s", "-", "2"])
def test_a_word_piece_never_glues_on_even_when_the_model_wants_it(tok, first, piece):
    out = _decode(tok, first, preferring(tok, first, piece))
    assert out.startswith("Zaun") and not GLUED.search(out), out


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(list(FIRST_EDITS)))
def test_random_models_keep_the_constraint_a_word(tok, seed, first):
    out = _decode(tok, first, seed)
    assert not GLUED.search(out), out
