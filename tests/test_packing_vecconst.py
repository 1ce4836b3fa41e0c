"""Sequence packing of the vectorized constraints model: a packed batch gives each pair the log-probabilities,
loss and gradients it gets alone, with constraints on some pairs and none on others; a segment's tokens and
constraints reach no other segment; the data rule that sizes a packed row's constraint entries."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from jaxnat.data.batching import max_segments
from jaxnat.data.phrase_pairs import check_packable
from jaxnat.data.vocab import PAD_ID
from jaxnat.errors import DataError
from jaxnat.models.vecconst.model import VecConstTransformer, phrase_tokens, vecconst_loss
from tests.packing_helpers import (SEGMENT_WIDTH, assert_teacher_forced_pairs_match, pack_and_pad, random_pairs,
                                   rows_of_segments, segment_ids)
from tests.test_packing import CFG, FAST

N, PS, PT = 3, 3, 3  # pairs a sentence, pieces a phrase


def random_constraints(rng, src, tgt, none=0.3):
    """{'pair_src': int32[n, N, PS], 'pair_tgt': int32[n, N, PT]}: for each example up to N pairs whose phrases
    are consecutive spans of its own sentences from their first piece on, so that they fit the sentence
    (`check_packable`) and fill the shorter ones (a packed row's entries then near its capacity, `row_capacity`);
    none for a share ``none``. A sentence that runs out first leaves its side of the last pairs empty."""
    pairs = {"pair_src": np.full((len(src), N, PS), PAD_ID, np.int32),
             "pair_tgt": np.full((len(src), N, PT), PAD_ID, np.int32)}
    for i, sides in enumerate(zip(src, tgt)):
        if rng.random() < none:
            continue
        for key, x, most in zip(pairs, sides, (PS, PT)):
            at = 1  # after BOS
            for k in range(N):
                n = min(int(rng.integers(1, most + 1)), len(x) - 1 - at)  # EOS left out
                pairs[key][i, k, :max(n, 0)] = x[at:at + max(n, 0)]
                at += max(n, 0)
    return pairs


@functools.lru_cache(maxsize=None)
def _model(authors: bool = False, packed_entries: int = 0):
    """The model with eqs. 6 and 11, or with the authors' adapters and output plug-in; ``packed_entries``: the
    constraint entries of a packed row (0: its width)."""
    model = VecConstTransformer(CFG, pair_adapters="separate", pair_output="authors") if authors else \
        VecConstTransformer(CFG, packed_entries=packed_entries)
    no_pair = jnp.full((1, 1, 1), PAD_ID, jnp.int32)
    params = jax.jit(model.init)(jax.random.PRNGKey(0), jnp.ones((1, 4), jnp.int32), jnp.ones((1, 4), jnp.int32),
                                 no_pair, no_pair)
    logp = jax.jit(lambda p, b: model.apply(
        p, b["src"], b["tgt"][:, :-1], b["pair_src"], b["pair_tgt"], src_seg=b.get("src_seg"),
        tgt_seg=None if "tgt_seg" not in b else b["tgt_seg"][:, :-1]))
    return model, params, logp


@pytest.mark.slow
@pytest.mark.parametrize("authors", [False, True])
def test_packed_vecconst_loss_and_gradients_equal_the_unpacked_ones(authors):
    """(the authors' forms: their adapters and output, α on the first spans; the paper's with a row's entries
    cut to the most any row here has, vecconst.packed_entries: none may be lost)"""
    rng = np.random.default_rng(10)
    src, tgt = random_pairs(rng, 9)
    pairs = random_constraints(rng, src, tgt)
    check_packable(src, tgt, pairs["pair_src"], pairs["pair_tgt"])
    packed, padded, members = pack_and_pad(src, tgt, extras=pairs)
    assert int((np.asarray(packed["tgt_seg"]).max(axis=1) > 1).sum()) >= 2  # some rows do hold several pairs
    has_pairs = (pairs["pair_src"] != PAD_ID).any(axis=(1, 2))
    assert 0 < has_pairs.sum() < len(src)  # constraints on some pairs, none on others
    pieces = {key: (np.asarray(packed[key]) != PAD_ID).reshape(len(members), -1).sum(axis=1)
              for key in ("pair_src", "pair_tgt")}
    for key in pieces:  # a row's constraint pieces near its width: the capacity is exercised
        assert pieces[key].max() > 28 // 2
    model, params, logp_fn = _model(authors, 0 if authors else int(pieces["pair_src"].max()))
    lp_packed, lp_padded = logp_fn(params, packed), logp_fn(params, padded)
    assert_teacher_forced_pairs_match(lp_packed, lp_padded, packed, members, tgt)
    loss = lambda p, b: vecconst_loss(model, p, b, jax.random.PRNGKey(0), label_smoothing=0.1,  # noqa: E731
                                      alpha=0.8, beta=0.2, span=authors, train=False)
    # the gradients with the paper's forms; the authors' reach the loss through the same segment masks, checked
    # in the log-probabilities and the loss (a gradient program costs about three forward ones to compile)
    if authors:
        value = jax.jit(loss)
        (l1, aux1), (l2, aux2) = value(params, packed), value(params, padded)
    else:
        grad = jax.jit(jax.value_and_grad(loss, has_aux=True))
        ((l1, aux1), g1), ((l2, aux2), g2) = grad(params, packed), grad(params, padded)
        # float order: the two batches' sums run over other shapes (entries near 10 here; as tests/test_packing_nat)
        jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5,
                                                                       atol=1e-4), g1, g2)
    assert float(aux1["count"]) == float(aux2["count"]) == sum(len(t) - 1 for t in tgt)
    assert float(aux1["constraint_tokens"]) == float(aux2["constraint_tokens"]) > 0
    np.testing.assert_allclose(float(l1), float(l2), rtol=1e-5)
    np.testing.assert_allclose(float(aux1["nll"]), float(aux2["nll"]), rtol=1e-5)


@pytest.mark.slow
@FAST
@given(st.integers(0, 10_000), st.sampled_from(["tokens", "constraints"]))
@example(729, "constraints")  # 2.2e-5 apart at -5.33: float32 rounding (4e-6 relative), no leak
def test_changing_one_segment_leaves_the_others_unchanged(seed, what):
    _, params, logp_fn = _model()
    rng = np.random.default_rng(seed)
    src, tgt = random_pairs(rng, 6, longest=5)
    packed, _, members = pack_and_pad(src, tgt, width=64, extras=random_constraints(rng, src, tgt))
    packed = jax.device_get(packed)  # edited on the host: each eager scatter of a new shape compiles a program
    row = int(np.argmax((members >= 0).sum(axis=1)))
    victim = int(rng.integers((members[row] >= 0).sum())) + 1
    changed = {k: v.copy() for k, v in packed.items()}
    if what == "tokens":
        for side in ("src", "tgt"):
            at = np.flatnonzero(packed[side + "_seg"][row] == victim)[1:-1]  # BOS and EOS kept
            changed[side][row, at] = rng.integers(5, 40, len(at))
    else:  # any other constraints, none included, not necessarily from the sentence
        for key, pieces in (("pair_src", PS), ("pair_tgt", PT)):
            new = np.where(rng.random((N, pieces)) < 0.6, rng.integers(5, 40, (N, pieces)), PAD_ID)
            new[int(rng.integers(N + 1)):] = PAD_ID
            changed[key][row, victim - 1] = new
    before, after = np.asarray(logp_fn(params, packed)), np.asarray(logp_fn(params, changed))
    seg = np.asarray(packed["tgt_seg"])[:, :-1]
    others = seg > 0
    others[row] &= seg[row] != victim
    np.testing.assert_allclose(after[others], before[others], rtol=1e-5, atol=2e-5)


@FAST
@given(rows_of_segments, st.integers(0, 10_000))
def test_phrase_tokens_match_plain_python(rows, seed):
    """Each position sees exactly its own segment's target-phrase tokens; a segment of n positions has at most
    n − 2 of them (`check_packable`), in random slots of its N × PT."""
    rng, width = np.random.default_rng(seed), SEGMENT_WIDTH
    segments = segment_ids(rows, width)
    pair_tgt = np.full((len(rows), max_segments(width), N, PT), PAD_ID, np.int32)
    for r, lengths in enumerate(rows):
        for k, n in enumerate(lengths):
            slots = rng.permutation(N * PT)[:int(rng.integers(0, min(n - 2, N * PT) + 1))]
            pair_tgt[r, k].reshape(-1)[slots] = rng.integers(5, 40, len(slots))
    ids, visible = map(np.asarray, jax.jit(phrase_tokens)(jnp.asarray(pair_tgt), jnp.asarray(segments)))
    for r in range(len(rows)):
        for t in range(width):
            own = pair_tgt[r, segments[r, t] - 1].reshape(-1) if segments[r, t] else np.zeros(0, np.int32)
            assert sorted(ids[r][visible[r, t]].tolist()) == sorted(own[own != PAD_ID].tolist())


def test_check_packable_refuses_phrases_longer_than_their_sentence():
    src, tgt = random_pairs(np.random.default_rng(4), 3, longest=2)
    pairs = random_constraints(np.random.default_rng(5), src, tgt, none=0.0)
    check_packable(src, tgt, pairs["pair_src"], pairs["pair_tgt"])
    pairs["pair_tgt"][1, :, :] = 7  # 9 target pieces for a sentence of at most 2
    with pytest.raises(DataError, match="1 training examples have constraint phrases with more pieces"):
        check_packable(src, tgt, pairs["pair_src"], pairs["pair_tgt"])
    # at the bound, on the source side: as many pieces as the sentence passes, one more does not
    one = [np.array([1, 7, 8, 2], np.int32)]
    phrase = np.full((1, 2, 2), PAD_ID, np.int32)
    phrase[0, 0] = [7, 8]
    check_packable(one, one, phrase, phrase.copy())
    phrase[0, 1, 0] = 9
    with pytest.raises(DataError, match="1 training examples"):
        check_packable(one, one, phrase, np.full((1, 2, 2), PAD_ID, np.int32))
