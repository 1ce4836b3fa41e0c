"""Completing a word typed in part (`jaxnat.decoding.completion`): the automaton of the pieces that spell it, against
a plain-Python reading of piece sequences, and the search callback that keeps each hypothesis to it."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxnat.data.vocab import NUM_RESERVED
from jaxnat.decoding.completion import Completion, FINISHES, GOES_ON, Spelling, spell

RESERVED = ["<pad>", "<s>", "</s>", "<unk>", "<plh>", "<mask>"][:NUM_RESERVED]


def reading(seq: list[int], spelling: Spelling, word: str) -> str:
    """Plain Python: what the pieces ``seq``, chosen right after whole words, make of the typed ``word``: "done" once
    their text starts with it (whatever follows is free), "open" while it is a start of the word, else "dead" (a
    text that leaves the word, a word ended or a new one opened before it is spelt, a piece of no text)."""
    spelt, opened = "", False
    for v in seq:
        text = spelling.texts[v]
        if text is None:
            return "dead"
        if not spelling.bpe:
            if spelling.opens[v] == opened:  # the first piece opens the word, the others continue it
                return "dead"
            opened = True
        spelt += text
        if spelt.startswith(word):
            return "done"
        if not word.startswith(spelt) or (spelling.bpe and not spelling.carries[v]):
            return "dead"
    return "open"


def finishable(seq: list[int], spelling: Spelling, word: str) -> bool:
    """Some pieces after ``seq`` finish the word (each piece but a bare "▁" spells a character at least)."""
    return any(reading(seq + list(more), spelling, word) == "done" for n in range(len(word) + 2)
               for more in itertools.product(range(spelling.size), repeat=n))


def walk(spelling: Spelling, automaton, seq: list[int]) -> str:
    """The automaton's reading of ``seq``: "done", "open" (a state reached), or "refused"."""
    state = 0
    for v in seq:
        pieces, does = automaton[state]
        if v not in pieces:
            return "refused"
        if does[list(pieces).index(v)] == FINISHES:
            return "done"
        state = spelling.next_state(state, v)
    return "open"


vocabularies = st.tuples(
    st.booleans(),  # subword-nmt ("@@") or SentencePiece ("▁")
    st.lists(st.tuples(st.text("ab", max_size=3), st.booleans()), min_size=2, max_size=6),
    st.text("ab", min_size=1, max_size=3))


def spelling_of(bpe: bool, entries) -> Spelling:
    pieces = [(f"{text}@@" if marked else text) if bpe else (f"▁{text}" if marked else text)
              for text, marked in entries if text or (marked and not bpe)]
    return Spelling(RESERVED + (pieces or ["a"]), bpe)


@settings(max_examples=40, deadline=None)
@given(vocabularies)
def test_the_automaton_keeps_exactly_the_pieces_that_go_on_spelling_the_word(vocabulary):
    """Every sequence of up to three pieces: the automaton takes it where the plain reading does and the word can still
    be finished (dead ends are pruned), finishes where it does, and is None where nothing spells the word; no path
    through it takes more pieces than the search leaves room for."""
    bpe, entries, word = vocabulary
    spelling = spelling_of(bpe, entries)
    automaton = spelling.automaton(word)
    assert (automaton is None) == (not finishable([], spelling, word))
    if automaton is None:
        return
    def longest(state: int) -> int:  # the most pieces a path from ``state`` takes to finish the word
        pieces, does = automaton[state]
        return max(1 if d == FINISHES else 1 + longest(spelling.next_state(state, v)) for v, d in zip(pieces, does))

    assert longest(0) <= spelling.most_pieces(word)  # the room the search leaves the word
    for n in range(1, 4):
        for seq in itertools.product(range(spelling.size), repeat=n):
            seq = list(seq)
            read = reading(seq, spelling, word)
            expected = read if read == "done" or (read == "open" and finishable(seq, spelling, word)) else "refused"
            # a sequence finished before its end is read as finished at that point by both
            assert walk(spelling, automaton, seq) == expected, (seq, [spelling.texts[v] for v in seq])


def test_a_word_is_spelt_by_any_cut_of_its_pieces():
    """SentencePiece: "Ma" by a "▁" piece starting it ("▁Ma", "▁Mann", "▁Maus") or one starting it in part ("▁M",
    "▁") and the pieces that go on; subword-nmt: by "ma…" pieces or "m@@" and then "a…", never "m" (its word would end
    unspelt). A word that no pieces spell gives None, and a piece after which none can is left out."""
    pieces = RESERVED + ["▁Ma", "▁Mann", "▁M", "ann", "a", "nn", "▁", "Ma", "▁Maus", "<0xC3>", "▁mA"]
    sp, ids = Spelling(pieces, bpe=False), {p: i for i, p in enumerate(pieces)}
    first = sp.automaton("Ma")[0][0]
    assert sorted(pieces[v] for v in first) == ["▁", "▁M", "▁Ma", "▁Mann", "▁Maus"]
    assert [walk(sp, sp.automaton("Ma"), [ids[a], ids[b]]) for a, b in (("▁M", "ann"), ("▁", "Ma"), ("▁M", "nn"))] == [
        "done", "done", "refused"]
    pieces = RESERVED + ["m@@", "ma", "man@@", "a", "ann", "m", "x@@"]
    bpe = Spelling(pieces, bpe=True)
    first, does = bpe.automaton("ma")[0]
    assert sorted(pieces[v] for v in first) == ["m@@", "ma", "man@@"]
    assert [pieces[v] for v, d in zip(first, does) if d == GOES_ON] == ["m@@"]  # the one that goes on
    assert bpe.automaton("q") is None and sp.automaton("é") is None
    dead = Spelling(RESERVED + ["ab", "a@@"], bpe=True)  # "a@@" leaves "b", which no piece starts: a dead end
    assert [dead.texts[v] for v in dead.automaton("ab")[0][0]] == ["ab"]


@settings(max_examples=25, deadline=None)
@given(vocabularies, st.integers(0, 2), st.randoms(use_true_random=False))
def test_the_search_callback_allows_what_the_automaton_allows_at_every_step(vocabulary, start, rng):
    """Two sentences (one typing the word from position ``start``, one without), two hypotheses each on their own
    random paths through the automaton: at every step each row's allowed pieces are its state's (every piece once the
    word is spelt, or before ``start``, or for the sentence without a word), as the host's walk finds them."""
    bpe, entries, word = vocabulary
    spelling = spelling_of(bpe, entries)
    automaton = spelling.automaton(word)
    if automaton is None:
        return
    v = spelling.size
    completion = Completion.of([word, None], [start, 0], spelling)
    step, cache = spell(lambda tokens, c, index: (jnp.zeros((4, v)), c), None, completion, 2)
    step = jax.jit(step)
    states = [0, 0, -1, -1]
    fed = np.zeros(4, np.int32)
    for index in range(start + len(word) + 3):
        logp, cache = step(jnp.asarray(fed), cache, jnp.int32(index))
        allowed = np.isfinite(np.asarray(logp))
        for row in range(4):
            if states[row] >= 0 and index >= start:
                assert set(np.flatnonzero(allowed[row])) == set(automaton[states[row]][0].tolist()), (row, index)
                pieces, does = automaton[states[row]]
                pick = rng.randrange(len(pieces))
                fed[row] = pieces[pick]
                states[row] = -1 if does[pick] == FINISHES else spelling.next_state(states[row], pieces[pick])
            else:
                assert allowed[row].all()
                fed[row] = rng.randrange(v)
