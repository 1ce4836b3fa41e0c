"""jaxnat.models.cmlm.positions against plain Python: the position embeddings' pairwise cosine similarity, the
masking by share, and the masked tokens' NLL/accuracy with stub token heads (one that knows the reference,
one blind to the canvas)."""

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from jaxnat.data.vocab import BOS_ID, EOS_ID, MASK_ID, PAD_ID
from jaxnat.errors import ConfigError
from jaxnat.models.cmlm.positions import context_use, decoder_inputs, mask_share, position_similarity


def plain_similarity(vectors):
    def cos(a, b):
        na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(x * x for x in b))
        return 0.0 if na < 1e-12 or nb < 1e-12 else sum(x * y for x, y in zip(a, b)) / (na * nb)

    n = len(vectors)
    pairs = [cos(vectors[i], vectors[j]) for i in range(n) for j in range(i + 1, n)]
    return {"pairs": len(pairs), "cosines": pairs, "mean": sum(pairs) / len(pairs),
            "adjacent": sum(cos(vectors[i], vectors[i + 1]) for i in range(n - 1)) / (n - 1),
            "above_0.5": sum(c > 0.5 for c in pairs), "above_0.7": sum(c > 0.7 for c in pairs)}


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 7).flatmap(lambda n: st.integers(1, 4).flatmap(lambda d: st.lists(
    st.lists(st.sampled_from([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0]), min_size=d, max_size=d),
    min_size=n, max_size=n))))
def test_position_similarity_is_the_plain_pairwise_cosine(vectors):
    got, want = position_similarity(np.array(vectors)), plain_similarity(vectors)
    # a cosine at an edge (exactly 0.5 in exact arithmetic) falls on either side by rounding
    assume(all(abs(c - edge) > 1e-9 for c in want["cosines"] for edge in (0.5, 0.7)))
    assert got["pairs"] == want["pairs"] and got["above_0.5"] == want["above_0.5"]
    assert got["above_0.7"] == want["above_0.7"]
    assert math.isclose(got["mean"], want["mean"], abs_tol=1e-9)
    assert math.isclose(got["adjacent"], want["adjacent"], abs_tol=1e-9)


def test_position_similarity_histogram_and_edges_by_hand():
    """The bins of 0.1 from −1 to 1 with known cosines: 1 (computed as 1 + 2⁻⁵², kept in the top bin), 1/√3, 0,
    −1/√3 and −1 (the bottom bin); a cosine of exactly 0.5 is not above 0.5."""
    out = position_similarity(np.array([[1, 1, 1], [2, 2, 2], [0, 0, 1], [-1, -1, -1], [1, 0, 0]], float))
    assert out["histogram"] == [2, 0, 0, 0, 2] + [0] * 5 + [1] + [0] * 4 + [4, 0, 0, 0, 1]
    assert position_similarity(np.array([[1, 1, 1, 1], [1, 1, -1, 1]], float))["above_0.5"] == 0


def test_decoder_inputs_by_hand():
    """The summed input: the table and the token embeddings (× √D with scale); the concatenated one: the position
    rows of the input map (after the token rows) applied to the table, the token rows to the scaled embeddings;
    the decoder's own table with the encoder's tokens (separate positions); no learned table: one line."""
    rng = np.random.default_rng(0)
    tokens, table, kernel = rng.normal(size=(3, 2)), rng.normal(size=(4, 2)), rng.normal(size=(4, 2))
    params = {"params": {"src_embed": {"tokens": {"embedding": tokens}, "positions": table},
                         "combine": {"kernel": kernel}}}
    summed = decoder_inputs(params, False, 3)
    np.testing.assert_allclose(summed["positions"], table[:3])
    np.testing.assert_allclose(summed["tokens"], tokens * math.sqrt(2))
    np.testing.assert_allclose(decoder_inputs(params, False, 3, scale=False)["tokens"], tokens)
    concat = decoder_inputs(params, True, 3)
    np.testing.assert_allclose(concat["table"], table[:3])
    np.testing.assert_allclose(concat["positions"], table[:3] @ kernel[2:])
    np.testing.assert_allclose(concat["tokens"], tokens * math.sqrt(2) @ kernel[:2])
    own = {"params": {**params["params"], "tgt_embed": {"positions": -table}}}
    np.testing.assert_allclose(decoder_inputs(own, False, 3, scale=False)["positions"], -table[:3])
    np.testing.assert_allclose(decoder_inputs(own, False, 3, scale=False)["tokens"], tokens)
    with pytest.raises(ConfigError, match="sinusoidal"):
        decoder_inputs({"params": {"src_embed": {"tokens": {"embedding": tokens}}}}, False, 3)


def _targets(lengths, width):
    """[BOS, 10 + k …, EOS, PAD …] rows of the given real lengths (-1: an all-PAD row)."""
    rows = []
    for n in lengths:
        row = [] if n < 0 else [BOS_ID, *range(10, 10 + n), EOS_ID]
        rows.append(row + [PAD_ID] * (width - len(row)))
    return np.array(rows, np.int32)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-1, 6), min_size=1, max_size=5), st.sampled_from([0.0, 0.3, 1.0, "one"]),
       st.integers(0, 99))
def test_mask_share_masks_real_tokens_only_and_one_per_row(lengths, share, seed):
    tgt = _targets(lengths, 8)
    real = (tgt != PAD_ID) & (tgt != BOS_ID) & (tgt != EOS_ID)
    masked = mask_share(real, share, np.random.default_rng(seed))
    assert not (masked & ~real).any()
    if share == "one":
        assert masked.sum(axis=1).tolist() == [min(1, max(n, 0)) for n in lengths]
    elif share == 1.0:
        assert (masked == real).all()
    elif share == 0.0:
        assert not masked.any()


def test_context_use_against_stub_heads():
    tgt, vocab = _targets([3, 1, -1, 6, 0], 9), 20  # log-probabilities in float32, as the model's

    def oracle(canvas, start):
        return np.where(np.arange(vocab) == tgt[start:start + len(canvas), ..., None], 50.0, 0.0)

    for row in context_use(oracle, tgt, batch=2):
        assert row["accuracy"] == 100.0 and row["nll"] < 1e-15
    (lone,) = context_use(oracle, tgt[1:2], shares=("one",), batch=2)  # a single masked token
    assert lone["masked"] == 1 and lone["accuracy"] == 100.0
    # blind to the canvas, so every share scores as the plain mean over its masked tokens
    fixed = np.random.default_rng(0).normal(size=(vocab,))
    seen = []

    def blind(canvas, start):
        assert start % 2 == 0 and len(canvas) <= 2  # asked two rows at a time
        seen.append(canvas)
        return np.broadcast_to(fixed, canvas.shape + (vocab,))

    rows = context_use(blind, tgt, batch=2)
    seen = [np.concatenate(seen[i:i + 3]) for i in range(0, len(seen), 3)]  # each share's canvas, 3 chunks
    logp = fixed - np.log(np.exp(fixed).sum())
    for row, canvas in zip(rows, seen):
        masked = canvas == MASK_ID
        golds = [logp[t] for t in tgt[masked]]
        assert row["masked"] == len(golds) and math.isclose(row["nll"], -sum(golds) / len(golds), rel_tol=1e-5)
        assert row["accuracy"] == 100.0 * sum(t == fixed.argmax() for t in tgt[masked]) / len(golds)
        assert (canvas[~masked] == tgt[~masked]).all()
    assert [r["masked"] for r in rows][0] == 10 and rows[-1]["masked"] == 3  # all real tokens; one in each row
