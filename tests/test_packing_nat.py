"""Sequence packing for CMLM/CMLMC and NAT/Coverage-NAT: the per-segment kernels, Coverage-NAT's coverage and
the per-segment counts of the random draws against plain Python (m ~ U{1 … n} masked tokens, ⌊p · #observed⌋
replaced ones, the length classes, each per pair); a packed batch gives the same loss, terms, per-pair outputs
and gradients as its pairs unpacked (the same random numbers handed to both); changing one pair of a row leaves
the others' outputs unchanged."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxnat.config import build_config
from jaxnat.data.batching import max_segments
from jaxnat.data.vocab import MASK_ID, PAD_ID
from jaxnat.models import build_model, packing
from jaxnat.models.cmlm.model import cmlm_loss, full_canvas, real_counts, substitution_mask
from jaxnat.models.nat.model import coverage, uniform_copy
from jaxnat.oracle import draw_subset
from tests.packing_helpers import SEGMENT_WIDTH, pack_and_pad, random_pairs, rows_of_segments, segment_ids
from tests.test_cmlm import _masked_positions, _substituted
from tests.test_nat import coverage_reference

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
V = 40


def _spans(rows):
    """[(row, segment index k, first position, length)] of `segment_ids`' rows."""
    out = []
    for r, lengths in enumerate(rows):
        at = 0
        for k, n in enumerate(lengths):
            out.append((r, k, at, n))
            at += n
    return out


# ------------------------------------------------------------------------------- per-segment kernels

@jax.jit  # one program a batch shape, where the kernels' ops one by one would compile dozens
def _segment_kernels(seg, values, where, scores):
    return (packing.segment_interior(seg), packing.segment_mean(values, seg, where),
            packing.segment_ranks(scores, seg, where), packing.segment_cumsum(values, seg))


@FAST
@given(rows_of_segments, st.integers(0, 10_000))
def test_segment_kernels_match_plain_python(rows, seed):
    """interior, mean over a subset, rank (``first`` positions, then score, then position) and running sum, each
    within its segment; scores drawn from a few values, so that ties occur."""
    width = SEGMENT_WIDTH
    seg = segment_ids(rows, width)
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(len(rows), width)).astype(np.float32)
    where = rng.random((len(rows), width)) < 0.6
    scores = rng.integers(0, 3, (len(rows), width)).astype(np.float32)
    interior, means, ranks, sums = map(np.asarray, _segment_kernels(seg, values, where, scores))
    assert not interior[seg == 0].any()
    for r, k, at, n in _spans(rows):
        span = range(at, at + n)
        assert [bool(interior[r, i]) for i in span] == [at < i < at + n - 1 for i in span]
        chosen = [values[r, i] for i in span if where[r, i]]
        np.testing.assert_allclose(means[r, k], np.mean(chosen) if chosen else 0.0, rtol=1e-5, atol=1e-6)
        order = sorted(span, key=lambda i: (not where[r, i], scores[r, i], i))
        assert [int(ranks[r, i]) for i in order] == list(range(n))
        np.testing.assert_allclose(sums[r, at:at + n], np.cumsum(values[r, at:at + n]), rtol=1e-5, atol=1e-5)
    for r, lengths in enumerate(rows):
        assert (means[r, len(lengths):] == 0).all()


@FAST
@given(rows_of_segments, st.integers(0, 10_000))
def test_coverage_sums_the_steps_of_the_own_segment_only(rows, seed):
    """Eq. 6 per segment: the attention of another segment's steps never counts, even where it is not zero."""
    width, sources = SEGMENT_WIDTH, 5
    seg = segment_ids(rows, width)
    rng = np.random.default_rng(seed)
    attention = rng.dirichlet(np.ones(sources), (len(rows), width)).astype(np.float32)
    counted = (rng.random(seg.shape) < 0.7) & (seg > 0)
    got = np.asarray(jax.jit(coverage)(attention, counted, seg))
    for r, _, at, n in _spans(rows):
        want = coverage_reference(attention[r, at:at + n], counted[r, at:at + n])
        np.testing.assert_allclose(got[r, at:at + n], want, rtol=1e-5, atol=1e-6)


@jax.jit
def _draw_kernels(tokens, seg, v, scores, u, p):
    """`cmlm_loss`'s packed masking of the real tokens and fixed-count substitution of the observed ones."""
    canvas, real = full_canvas(tokens, seg)
    masked = packing.segment_lowest(real, v, scores, seg, 1)
    return canvas, real, masked, substitution_mask(real & ~masked, u, p, True, seg), real_counts(tokens, seg)


@FAST
@given(rows_of_segments, st.integers(0, 10_000), st.sampled_from([0.0, 0.3, 0.5, 1.0]))
def test_masking_and_substitution_counts_per_segment(rows, seed, p):
    """Each segment a sentence: ⌊n·v_k⌋ + 1 of its n real tokens masked (v_k its slot's draw), those of lowest
    score (`cmlm_loss`'s packed masking); the fixed substitution count, ⌊p · #observed⌋ of each segment's observed
    tokens; the real tokens (every segment's BOS and EOS excluded), their counts and the fully masked canvas."""
    width = SEGMENT_WIDTH
    seg = segment_ids(rows, width)
    rng = np.random.default_rng(seed)
    tokens = np.where(seg > 0, rng.integers(6, V, seg.shape), PAD_ID).astype(np.int32)
    v = rng.random((len(rows), max_segments(width))).astype(np.float32)
    scores = rng.integers(0, 4, seg.shape).astype(np.float32) / 4  # ties: broken by position
    u = rng.random(seg.shape).astype(np.float32)
    canvas, real, masked, replaced, counts = map(np.asarray, _draw_kernels(tokens, seg, v, scores, u, p))
    observed = real & ~masked
    for r, k, at, n in _spans(rows):
        want = {at + i for i in _masked_positions(list(range(n)), v[r, k], scores[r, at:at + n])}
        assert set(np.flatnonzero(masked[r, at:at + n]) + at) == want
        assert set(np.flatnonzero(real[r, at:at + n]) + at) == set(range(at + 1, at + n - 1)) and counts[r, k] == n - 2
        obs = [i for i in range(at, at + n) if observed[r, i]]
        assert set(np.flatnonzero(replaced[r, at:at + n]) + at) == _substituted(obs, u[r], np.float32(p), True)
    assert ((canvas == MASK_ID) == real).all() and (canvas[~real] == tokens[~real]).all()
    assert not (masked | real)[seg == 0].any()
    k = max_segments(width)
    assert draw_subset(jax.random.PRNGKey(seed), (3, width), k)[0].shape == (3, k)


def python_uniform_copy(pairs) -> list[int]:
    """One row's copied source positions: [(S_k, T_k)] its segments' source and canvas lengths; position t of
    canvas k copies round(t · (S_k − 1) / (T_k − 1)) of source k (float32 arithmetic, halves to even, as fairseq)."""
    out, start = [], 0
    for s, t in pairs:
        step = np.float32(s - 1) / np.float32(max(t - 1, 1))
        out += [start + round(float(step * np.float32(p))) for p in range(t)]
        start += s
    return out


_uniform_copy = jax.jit(uniform_copy)


@FAST
@given(st.lists(st.lists(st.tuples(st.integers(1, 7), st.integers(2, 8)), max_size=3), min_size=1, max_size=3))
def test_the_uniform_copy_matches_plain_python(rows):
    """`uniform_copy` against plain Python: each row's first pair as a padded batch (bool masks), and every pair
    packed (segment ids), each canvas position into its own segment's source; 0 on padding."""
    src_width, tgt_width = 21, 24
    src_seg = segment_ids([[s for s, _ in row] for row in rows], src_width)
    tgt_seg = segment_ids([[t for _, t in row] for row in rows], tgt_width)
    packed = np.asarray(_uniform_copy(jnp.asarray(src_seg), jnp.asarray(tgt_seg)))
    padded = np.asarray(_uniform_copy(jnp.asarray(src_seg == 1), jnp.asarray(tgt_seg == 1)))
    for r, row in enumerate(rows):
        want = python_uniform_copy(row)
        assert packed[r].tolist() == want + [0] * (tgt_width - len(want))
        first = python_uniform_copy(row[:1])
        assert padded[r].tolist() == first + [0] * (tgt_width - len(first))


# ------------------------------------------------------------------------------- packed = unpacked

TINY = "tests/configs/tiny.py"
CMLMC = ("--config.cmlm.masked_attn=true", "--config.cmlm.concat_pe=true", "--config.model.positions=learned",
         "--config.cmlm.correction=true", "--config.cmlm.correction_count=fixed")
CASES = {
    "cmlm-token": ("cmlm", ()),
    "cmlmc": ("cmlm", CMLMC),
    # the source's embeddings copied onto each segment's canvas (NAT's decoder otherwise reads CMLM's inputs)
    "nat-copy": ("nat", ("--config.nat.decoder_input=copy",)),
    # the pooled length classifier, its length offset too: CMLM's encoder and length loss, which NAT inherits (one
    # model fewer to compile than a pooled CMLM of its own)
    "coverage-nat-sca-pooled": ("nat", ("--config.nat.coverage=true", "--config.model.dec_layers=2",
                                        "--config.nat.train_iterations=3", "--config.nat.sca_weight=0.5",
                                        "--config.nat.length_prediction=pooled", "--config.nat.length_offset=true")),
}


@functools.lru_cache(maxsize=None)
def _model(case):
    """(spec, params, run): run(params, batch, draws) → (loss, aux, gradients, the decoder's token log-probs on the
    inputs it was trained on, length log-probs), the model in eval mode (no dropout), jit'd."""
    name, overrides = CASES[case]
    config = build_config(TINY, [f"--config.model.name={name}", "--config.eval.beam_size=1", *overrides])
    spec = build_model(config, V, V)
    module = spec.module

    def loss(params, batch, draws):
        if name == "nat":
            return spec.loss(params, batch, jax.random.PRNGKey(0), train=False)
        return cmlm_loss(module, params, batch, jax.random.PRNGKey(0), label_smoothing=0.1,
                         length_offset=config.cmlm.length_offset, correction=config.cmlm.correction,
                         correction_p=0.5, correction_fixed_count=config.cmlm.correction_count == "fixed",
                         train=False, keep_inputs=True,
                         draws=draws)

    @jax.jit
    def run(params, batch, draws):
        (value, aux), grads = jax.value_and_grad(loss, has_aux=True)(params, batch, draws)
        src_seg, tgt_seg = batch.get("src_seg"), batch.get("tgt_seg")
        memory, length_logits = module.apply(params, batch["src"], segments=src_seg, method="encode")
        src_mask = batch["src"] != PAD_ID if src_seg is None else src_seg
        tokens = aux["masked_in"] if "masked_in" in aux else full_canvas(batch["tgt"], tgt_seg)[0]
        nat = {"iterations": config.nat.train_iterations, "src": batch["src"]} if name == "nat" else {}
        logits = module.apply(params, tokens, memory, src_mask, segments=tgt_seg, method="token_logits", **nat)
        return value, aux, grads, jax.nn.log_softmax(logits), jax.nn.log_softmax(length_logits)

    params = jax.jit(spec.init)(jax.random.PRNGKey(1), {"src": jnp.ones((1, 4), jnp.int32),
                                                        "tgt": jnp.ones((1, 4), jnp.int32)})
    return spec, params, run


def _slots(packed, members):
    """[(row, segment index k, the pair's index, its target's positions in the row)]."""
    seg = np.asarray(packed["tgt_seg"])
    return [(r, k, int(i), np.flatnonzero(seg[r] == k + 1)) for r in range(len(members))
            for k, i in enumerate(members[r][members[r] >= 0])]


def _draws(rng, packed, members, n):
    """The same random numbers for the padded batch of n pairs (width 12) and for its packed batch: (padded draws,
    packed draws), each {'mask': (v, scores), 'substitution': u} as `cmlm_loss` takes them."""
    v, scores, u = rng.random(n, np.float32), rng.random((n, 12), np.float32), rng.random((n, 12), np.float32)
    b, width = packed["tgt"].shape
    vp = np.zeros((b, max_segments(width)), np.float32)
    sp, up = np.ones((b, width), np.float32), np.ones((b, width), np.float32)
    for r, k, i, at in _slots(packed, members):
        vp[r, k], sp[r, at], up[r, at] = v[i], scores[i, :len(at)], u[i, :len(at)]
    return ({"mask": (v, scores), "substitution": u}, {"mask": (vp, sp), "substitution": up})


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_packed_loss_outputs_and_gradients_equal_the_unpacked_ones(case):
    _, params, run = _model(case)
    src, tgt = random_pairs(np.random.default_rng(3), 9)
    packed, padded, members = pack_and_pad(src, tgt)
    assert int((np.asarray(packed["tgt_seg"]).max(axis=1) > 1).sum()) >= 2  # some rows do hold several pairs
    draws_padded, draws_packed = _draws(np.random.default_rng(4), packed, members, len(tgt))
    # NumPy arrays: indexing a jax array compiles a program for each shape of index
    loss1, aux1, grads1, logp1, length1 = jax.tree_util.tree_map(np.asarray, run(params, packed, draws_packed))
    loss2, aux2, grads2, logp2, length2 = jax.tree_util.tree_map(np.asarray, run(params, padded, draws_padded))
    for r, k, i, at in _slots(packed, members):
        for key in ("masked_in", "corr_in"):
            if key in aux1:
                assert np.asarray(aux1[key][r, at]).tolist() == np.asarray(aux2[key][i, :len(at)]).tolist(), key
        np.testing.assert_allclose(np.asarray(logp1[r, at]), np.asarray(logp2[i, :len(at)]), atol=2e-5)
        np.testing.assert_allclose(np.asarray(length1[r, k]), np.asarray(length2[i]), atol=2e-5)
    if "replaced" in aux1:
        assert float(aux1["replaced"]) == float(aux2["replaced"]) > 0  # the correction pass ran on some tokens
    assert float(aux1["count"]) == float(aux2["count"]) == sum(len(t) for t in tgt)
    np.testing.assert_allclose(float(loss1), float(loss2), rtol=1e-5)
    for key in ("nll", "length_loss", "mask_loss", "correction_loss", "coverage_loss"):
        if key in aux2:
            np.testing.assert_allclose(float(aux1[key]), float(aux2[key]), rtol=1e-5, err_msg=key)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4,
                                                                   atol=1e-4), grads1, grads2)


def _row(src, tgt, shape=(9, 28)):
    """The pairs packed in order into the first row of a batch {'src', 'tgt', 'src_seg', 'tgt_seg'} int32[shape],
    the other rows padding: the shape of the packed batch above (9 pairs, rows of 28), whose program it reuses."""
    out = {}
    for side, seqs in (("src", src), ("tgt", tgt)):
        tokens, seg = np.full(shape, PAD_ID, np.int32), np.zeros(shape, np.int32)
        at = 0
        for k, x in enumerate(seqs):
            tokens[0, at:at + len(x)], seg[0, at:at + len(x)] = x, k + 1
            at += len(x)
        out[side], out[side + "_seg"] = jnp.asarray(tokens), jnp.asarray(seg)
    return out


@pytest.mark.slow
@FEW
@given(st.sampled_from(["cmlmc", "coverage-nat-sca-pooled"]), st.integers(0, 10_000))
def test_changing_one_pair_leaves_the_others_in_its_row_unchanged(case, seed):
    """Another pair (other tokens, other lengths) in one segment's place: every other segment's length and token
    log-probabilities stay, though they move along the row (three pairs: the segment slots of a row of 28)."""
    _, params, run = _model(case)
    rng = np.random.default_rng(seed)
    slots = max_segments(28)
    src, tgt = random_pairs(rng, slots, longest=5)
    victim = int(rng.integers(slots))
    other_src, other_tgt = random_pairs(rng, 1, longest=5)
    changed_src, changed_tgt = list(src), list(tgt)
    changed_src[victim], changed_tgt[victim] = other_src[0], other_tgt[0]
    # NumPy draws, as the packed batch's above: the same argument types, the same program
    draws = {"mask": (np.full((9, slots), 0.5, np.float32), np.zeros((9, 28), np.float32)),
             "substitution": np.ones((9, 28), np.float32)}
    outputs = []
    for s, t in ((src, tgt), (changed_src, changed_tgt)):
        row = _row(s, t)
        logp, length = (np.asarray(a) for a in run(params, row, draws)[3:])  # indexed in NumPy: no programs
        seg = np.asarray(row["tgt_seg"])[0]
        outputs.append(([np.asarray(logp[0, seg == k + 1]) for k in range(slots)], np.asarray(length[0, :slots])))
    for k in set(range(slots)) - {victim}:
        np.testing.assert_allclose(outputs[1][0][k], outputs[0][0][k], atol=2e-5)
        np.testing.assert_allclose(outputs[1][1][k], outputs[0][1][k], atol=2e-5)
