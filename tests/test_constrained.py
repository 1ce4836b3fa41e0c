"""Constrained beam search (`jaxnat/decoding/constrained.py`) against the plain-Python reference of
tests/constrained_reference.py, on a toy model whose distributions depend on the whole prefix."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxnat.data.vocab import EOS_ID, PAD_ID, UNK_ID
from jaxnat.decoding import constrained
from jaxnat.decoding.search import ar_search
from tests import constrained_reference as ref

V, C, P, B, MAX_OUT = 10, 3, 3, 3, 12
WORDS = (UNK_ID, 6, 7, 8, 9)  # the generable ids besides EOS


def make_table(seed: int, peak: float = 2.0) -> np.ndarray:
    logits = np.random.default_rng(seed).normal(size=(ref.TABLE_ROWS, V)) * peak
    return np.asarray(jax.nn.log_softmax(jnp.asarray(logits, jnp.float32)))


def toy_model(table):
    """tokens_to_logprobs of the toy model: the cache is each row's rolling hash of its prefix."""
    table = jnp.asarray(table)

    def tokens_to_logprobs(tokens, cache, index):
        h = (cache * 31 + tokens + 7) % ref.HASH_MOD
        return table[h % ref.TABLE_ROWS], h
    return tokens_to_logprobs


@partial(jax.jit, static_argnames=("beam_size", "ordered", "nbest"))
def run(table, seeds, src_len, phrases, length_penalty, beam_size, ordered, continues=np.zeros(V, bool),
        joins=np.zeros(V, bool), trails=np.zeros(V, bool), nbest=1):
    cache = jnp.repeat(seeds, beam_size)
    return constrained.constrained_search(toy_model(table), cache, src_len, phrases, beam_size=beam_size,
                                          ordered=ordered, continues=continues, joins=joins, trails=trails,
                                          length_penalty=length_penalty,
                                          max_len_a=1.0, max_len_b=0, max_out=MAX_OUT, nbest=nbest)


# the searches and the tracker jit'd: eagerly, each of their ops would compile its own program
@partial(jax.jit, static_argnames="beam_size")
def plain_search(table, seeds, src_len, beam_size, length_penalty=1.0):
    return ar_search(toy_model(table), jnp.repeat(seeds, beam_size), src_len, beam_size=beam_size,
                     length_penalty=length_penalty, max_len_a=1.0, max_len_b=0, max_out=MAX_OUT)


def pad(sentences):
    out = np.full((len(sentences), C, P), PAD_ID, np.int32)
    for b, phrases in enumerate(sentences):
        for c, p in enumerate(phrases):
            out[b, c, :len(p)] = p
    return out


def until_eos(row):
    row = [int(t) for t in row]
    return row[: row.index(EOS_ID) + 1]


def contains(row, phrase):
    return any(row[i:i + len(phrase)] == phrase for i in range(len(row)))


phrase = st.lists(st.sampled_from(WORDS), min_size=1, max_size=P)
sentence = st.lists(phrase, min_size=0, max_size=C)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(st.lists(sentence, min_size=B, max_size=B), st.lists(st.integers(1, MAX_OUT), min_size=B, max_size=B),
       st.integers(0, 10_000), st.sampled_from([1, 2, 3]), st.booleans(), st.sampled_from([0.0, 0.6, 1.0]),
       st.sets(st.sampled_from(WORDS)), st.sets(st.sampled_from(WORDS)), st.sets(st.sampled_from(WORDS)))
def test_matches_reference(sentences, src_len, seed, beam, ordered, length_penalty, continues, joins, trails):
    """``continues``: pieces that glue onto the word before them (SentencePiece's, never right after a phrase
    nor after the ``trails`` pieces, punctuation, that follow it); ``joins``: pieces that glue the next one onto
    their word (BPE's "@@", never right before a phrase). The n-best list: the reference's finished outputs that
    meet every phrase, best first (the best output first, as the fallback it is, where none does)."""
    continues = continues - {p[0] for phrases in sentences for p in phrases}  # phrases start a word
    trails = trails - continues - {p[0] for phrases in sentences for p in phrases}
    joins = joins - {p[-1] for phrases in sentences for p in phrases}  # and end one
    table = make_table(seed % 7)
    seeds = np.arange(B, dtype=np.int32) + seed
    out = jax.device_get(run(table, seeds, np.asarray(src_len, np.int32), pad(sentences), length_penalty, beam,
                             ordered, np.isin(np.arange(V), list(continues)), np.isin(np.arange(V), list(joins)),
                             np.isin(np.arange(V), list(trails)), nbest=beam))
    for b, phrases in enumerate(sentences):
        padded = phrases + [[]] * (C - len(phrases))
        fin = ref.finished(table, int(seeds[b]), padded, beam_size=beam, ordered=ordered,
                           length_penalty=length_penalty, max_len=src_len[b], max_out=MAX_OUT,
                           continues=continues, joins=joins, trails=trails)
        tokens, score, met = fin[0]
        assert until_eos(out["tokens"][b]) == tokens
        if beam > 1:
            listed = fin[:1] + [f for f in fin[1:] if f[2]]
            got = [(until_eos(t), s) for t, s in zip(out["nbest_tokens"][b], out["nbest_score"][b]) if s > -np.inf]
            assert [t for t, _ in got] == [t for t, _, _ in listed]
            np.testing.assert_allclose([s for _, s in got], [s for _, s, _ in listed], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out["score"][b], score, rtol=1e-5, atol=1e-5)
        assert bool(out["constraints_met"][b]) == met
        # each generated token (constraint tokens and EOS too) with the model's log-probability of it after its
        # prefix; they sum to the score before the length penalty
        steps = [float(ref.toy_logprobs(table, tokens[:i], int(seeds[b]))[tokens[i]]) for i in range(1, len(tokens))]
        rest = MAX_OUT - len(tokens)
        assert out["token_scored"][b].tolist() == [False] + [True] * len(steps) + [False] * rest
        np.testing.assert_allclose(out["token_logp"][b], [0.0] + steps + [0.0] * rest, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(sum(steps) / len(steps) ** length_penalty, score, rtol=1e-5, atol=1e-5)
        # the guarantee: every phrase appears whenever the output has room for them all
        if sum(map(len, phrases)) <= MAX_OUT - 2:
            assert met and all(contains(tokens, p) for p in phrases)
            if ordered:  # in the given order, each after the previous one ends
                rest = tokens
                for p in phrases:
                    at = next(i for i in range(len(rest)) if rest[i:i + len(p)] == p)
                    rest = rest[at + len(p):]


def test_without_constraints_it_is_beam_search():
    table, seeds, src_len = make_table(3), np.arange(B, dtype=np.int32), np.asarray([5, 9, 12], np.int32)
    for beam in (2, 3):
        got = run(table, seeds, src_len, pad([[]] * B), 1.0, beam, False)
        want = plain_search(table, seeds, src_len, beam)
        np.testing.assert_array_equal(got["tokens"], want["tokens"])
        np.testing.assert_allclose(got["score"], want["score"], rtol=1e-6)


def test_beam_search_searches_on_while_a_beam_can_reach_the_longest_output():
    """Both searches stop a sentence once no alive beam can beat its worst finished output, bounding a beam's score
    by the longest output it can reach (max_len + 1 tokens, EOS included). On these rows (found by a sweep) the
    winning output is that long, and a bound one token short stops before it; the reference, without phrases, is
    the same beam search."""
    table, seeds, src_len = make_table(2, peak=3.0), np.asarray([493, 2853], np.int32), np.asarray([8, 11], np.int32)
    plain = jax.device_get(plain_search(table, seeds, src_len, 2, 2.0))
    banked = jax.device_get(run(table, seeds, src_len, pad([[], []]), 2.0, 2, False))
    for b in range(2):
        tokens, score, _ = ref.search(table, int(seeds[b]), [[]] * C, beam_size=2, ordered=False, length_penalty=2.0,
                                      max_len=int(src_len[b]), max_out=MAX_OUT)
        assert len(tokens) == min(src_len[b], MAX_OUT - 2) + 2  # BOS, max_len tokens, EOS
        for got in (plain, banked):
            assert until_eos(got["tokens"][b]) == tokens
            np.testing.assert_allclose(got["score"][b], score, rtol=1e-5)


def test_a_sentence_decodes_alone_as_in_a_batch():
    table, seeds, src_len = make_table(5), np.arange(B, dtype=np.int32), np.asarray([4, 7, 10], np.int32)
    phrases = pad([[[6, 7]], [[8], [9, 6]], []])
    batch = jax.device_get(run(table, seeds, src_len, phrases, 1.0, 3, False))
    for b in range(B):
        alone = run(table, seeds[b:b + 1], src_len[b:b + 1], phrases[b:b + 1], 1.0, 3, False)
        np.testing.assert_array_equal(alone["tokens"][0], batch["tokens"][b])


def test_progress_tracking():
    """fairseq's trie semantics: one path per hypothesis, one token for one constraint. Shared prefixes stay on the
    path; falling off it meets the deepest phrase it completed and may restart at the root; duplicates count
    twice. Returned: which phrases are met or pending, the depth, the bank."""
    start = jax.jit(lambda arr: jax.tree_util.tree_map(lambda x: x[0], constrained.start(arr[None])))
    advance = jax.jit(constrained.advance, static_argnums=3)
    bank = jax.jit(constrained.met)

    def walk(phrases, tokens, ordered=False, glue=(), trail=()):
        arr = jnp.asarray(pad([phrases])[0])
        t = start(arr)
        for tok in tokens:
            t = advance(arr, t, jnp.int32(tok), ordered, jnp.bool_(tok in glue), False, jnp.bool_(tok in trail))
        seen = np.asarray(t.done) | np.asarray(t.pending)
        return [bool(d) for d in seen[:len(phrases)]], int(t.depth), int(bank(arr, t))

    # a phrase that is a prefix of another: "6 7" meets the longer one only, "6" must appear on its own
    assert walk([[6], [6, 7]], [6]) == ([True, False], 1, 1)
    assert walk([[6], [6, 7]], [6, 7]) == ([False, True], 2, 2)
    assert walk([[6], [6, 7]], [6, 8]) == ([True, False], 0, 1)       # fell off: "6" met
    assert walk([[6], [6, 7]], [6, 7, 6]) == ([True, True], 1, 3)
    # overlapping phrases do not share a token: after "6 7 8", "7 8" is still to come
    assert walk([[6, 7], [7, 8]], [6, 7, 8]) == ([True, False], 0, 2)
    assert walk([[6, 7], [7, 8]], [6, 7, 7, 8]) == ([True, True], 2, 4)
    # a phrase that diverges restarts at the root
    assert walk([[6, 7, 8]], [6, 7, 6]) == ([False], 1, 1)
    assert walk([[6, 7, 8]], [6, 7, 6, 7, 8]) == ([True], 3, 3)
    assert walk([[6, 7], [6, 7]], [6, 7]) == ([True, False], 2, 2)    # the same phrase twice: met once
    assert walk([[6, 7], [6, 7]], [6, 7, 6, 7]) == ([True, True], 2, 4)
    assert walk([[8], [6]], [6, 8], ordered=True) == ([True, False], 1, 1)  # 6 before 8 does not count
    # 7 glues onto 6 ("meli" + "en" = "melien"): [6] was no word of its own, only [6, 7] is met
    assert walk([[6], [6, 7]], [6, 7], glue=(7,)) == ([False, True], 2, 2)
    assert walk([[6], [6, 7]], [6, 7, 6], glue=(7,)) == ([True, True], 1, 3)
    assert walk([[6]], [6, 7], glue=(7,)) == ([False], 0, 0)
    # punctuation (5) leaves the word open: "Zaun." + "n" is "Zaun.n", no word "Zaun"; a new word closes it
    assert walk([[6]], [6, 5, 5, 7], glue=(7,), trail=(5,)) == ([False], 0, 0)
    assert walk([[6]], [6, 5, 8, 7], glue=(7,), trail=(5,)) == ([True], 0, 1)
    assert walk([[6]], [6, 5], glue=(7,), trail=(5,)) == ([True], 0, 1)  # pending: ending the output meets it
    # punctuation that continues a longer phrase leaves the word open too: "6 5 8" is no word "6"
    assert walk([[6], [6, 5, 7]], [6, 5, 8], glue=(8,), trail=(5,)) == ([False, False], 0, 0)
    for phrases, tokens, glue in (([[6], [6, 7]], [6, 7], ()), ([[6, 7, 8], [7, 9]], [6, 7, 9, 6], ()),
                                  ([[6], [6, 7]], [6, 7, 6, 8], (7,)), ([[6, 7], [7, 8], [6]], [6, 7, 8, 6, 5], ()),
                                  ([[6], [6, 5, 7]], [6, 5, 5, 7, 6, 5, 8], (7,)), ([[6]], [6, 5, 7, 6, 5], (7,))):
        state = (tuple(False for _ in phrases), 0, frozenset(), None, False)
        for tok in tokens:
            state = ref.advance(phrases, state, tok, False, glue=tok in glue, trail=tok == 5)
        met = [d or c == state[3] for c, d in enumerate(state[0])]
        assert walk(phrases, tokens, glue=glue, trail=(5,)) == (met, state[1], ref.bank(phrases, state))


def test_ordered_offers_the_next_phrase_once_one_is_pending():
    """In order, after "6" completes [6] (pending: the path has not left it), the phrase to start is [8]."""
    phrases = jnp.asarray([[6], [8]], jnp.int32)
    t = jax.tree_util.tree_map(lambda x: x[0], constrained.start(phrases[None]))
    t = constrained.advance(phrases, t, jnp.int32(6), True)
    tokens, ok = constrained.next_tokens(phrases, t, True)
    assert {int(tok) for tok, o in zip(np.asarray(tokens), np.asarray(ok)) if o} == {8}


def test_round_robin_banks_takes_each_banks_best_first():
    """Row 0: the best of bank 0 (index 2) comes before the second best of bank 2 (index 1), however the ranks
    and banks would collide in a narrower order key. Row 1: equal scores in one bank, the lower index first."""
    score = jnp.asarray([[0.0, -1.0, -0.5], [0.0, 0.0, constrained.NEG_INF]])
    bank = jnp.asarray([[2, 2, 0], [1, 1, 0]], jnp.int32)
    pick = constrained.round_robin_banks(score, bank, jnp.asarray([2, 2], jnp.int32), 2)
    assert np.asarray(pick).tolist() == [[0, 2], [0, 1]]


def test_a_met_phrase_is_not_glued_onto():
    """With every generable id but 6 a continuation piece, what follows a met phrase is 6 or EOS."""
    table, seeds, src_len = make_table(2), np.arange(B, dtype=np.int32), np.asarray([8, 10, 12], np.int32)
    continues = np.isin(np.arange(V), [UNK_ID, 7, 8, 9])
    out = run(table, seeds, src_len, pad([[[6, 7]], [[6], [6, 8]], [[6, 9, 9]]]), 1.0, 3, False, continues)
    for row, phrases in zip(out["tokens"], ([[6, 7]], [[6], [6, 8]], [[6, 9, 9]])):
        row = until_eos(row)
        for p in phrases:  # somewhere as whole words: "6 8" on the way to [6, 8] does not count for [6]
            assert any(row[i:i + len(p)] == p and row[i + len(p)] in (6, EOS_ID) for i in range(len(row))), row


def test_punctuation_after_a_met_phrase_keeps_its_word_open():
    """9 is punctuation (trails), every other generable id but 6 a continuation piece: after a met phrase come
    9s, then 6 or EOS: never "Zaun.n"."""
    table, src_len = make_table(3), np.asarray([10, 11, 12], np.int32)
    continues, trails = np.isin(np.arange(V), [UNK_ID, 7, 8]), np.isin(np.arange(V), [9])
    sentences = ([[6, 7]], [[6], [6, 8]], [[6, 9, 9]])
    for seed in range(4):
        seeds = np.arange(B, dtype=np.int32) + 10 * seed
        out = run(table, seeds, src_len, pad(sentences), 1.0, 3, False, continues, trails=trails)
        for row, phrases in zip(out["tokens"], sentences):
            row = until_eos(row)
            for p in phrases:
                def whole(i):
                    j = i + len(p)
                    while row[j] == 9:
                        j += 1
                    return row[j] in (6, EOS_ID)
                assert any(row[i:i + len(p)] == p and whole(i) for i in range(len(row))), row


def test_a_row_without_phrases_beside_constrained_ones_is_greedy_at_beam_one():
    """One beam keeps a finished hypothesis and searches on, so a one-beam constrained search of a row without
    phrases is not greedy search (some seeds below show it); `ar.model.search` gives such a row greedy's output,
    as it would have alone, whatever the other rows ask."""
    from jaxnat.models.ar.model import search

    @jax.jit
    def mixed(table, seeds, phrases):
        return search(toy_model(table), seeds, jnp.full((B, MAX_OUT), 6, jnp.int32), phrases=phrases, beam_size=1,
                      length_penalty=1.0, max_len_a=1.0, max_len_b=0, max_out=MAX_OUT)

    seeds, src_len, differs = np.arange(B, dtype=np.int32), np.full(B, MAX_OUT, np.int32), 0
    phrases = pad([[]] + [[[6, 7]]] * (B - 1))
    for seed in range(8):
        table = make_table(seed)
        greedy = jax.device_get(plain_search(table, seeds, src_len, 1))
        one_beam = jax.device_get(run(table, seeds, src_len, phrases, 1.0, 1, False))
        differs += not np.array_equal(one_beam["tokens"][0], greedy["tokens"][0])
        got = jax.device_get(mixed(table, seeds, phrases))
        np.testing.assert_array_equal(got["tokens"][0], greedy["tokens"][0])
        np.testing.assert_allclose(got["score"][0], greedy["score"][0], rtol=1e-6)
        np.testing.assert_array_equal(got["tokens"][1:], one_beam["tokens"][1:])
    assert differs > 0
