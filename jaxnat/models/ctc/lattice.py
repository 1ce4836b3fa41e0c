"""The CTC alignment lattice (Graves et al. 2006) of a target over the frames of the upsampled canvas: its
forward algorithm (the loss), its best path (Viterbi: the alignment glancing reads) and the feasibility test.

A target y of n labels is aligned to T frames through the *extended* sequence ``y' = [∅, y_1, ∅, y_2, …, y_n, ∅]``
(2n + 1 states, ∅ the blank): a path visits one state per frame, starts in state 0 or 1, ends in state 2n or
2n − 1, and from state s moves to s (repeat), s + 1, or s + 2 when y'_{s+2} is a label different from y'_s
(skipping a blank between two different labels). Its frame labels collapse (merge repeats, drop blanks) to y.
Two equal adjacent labels need a blank frame between them, so a target fits T frames only when
``T >= n + (adjacent equal pairs)`` (`min_frames`).

Everything is in log space over float32 with ``NEG`` (finite) for impossible states, so that sums and gradients
stay finite; rows are padded: frames ``t >= frames[b]`` and labels ``i >= lengths[b]`` are not part of row b.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

NEG = -1e30  # log-probability of what cannot happen (finite: no inf - inf in a gradient)


def extended_labels(labels: jax.Array, blank: int) -> jax.Array:
    """labels: int32[B, N] → int32[B, 2N + 1], ``[∅, y_1, ∅, …, y_N, ∅]``."""
    b, n = labels.shape
    ext = jnp.full((b, 2 * n + 1), blank, labels.dtype)
    return ext.at[:, 1::2].set(labels)


def min_frames(labels: jax.Array, lengths: jax.Array) -> jax.Array:
    """int32[B]: the fewest frames that emit row b's labels: n + the adjacent equal pairs (each needs a blank)."""
    index = jnp.arange(labels.shape[1])[None, :]
    repeats = (labels[:, 1:] == labels[:, :-1]) & (index[:, 1:] < lengths[:, None])
    return lengths + jnp.sum(repeats, axis=1, dtype=jnp.int32)


def _transitions(ext: jax.Array, lengths: jax.Array, blank: int):
    """(skip bool[B, S]: state s may be entered from s − 2; live bool[B, S]: s is a state of the row)."""
    s = jnp.arange(ext.shape[1])[None, :]
    previous = jnp.pad(ext, ((0, 0), (2, 0)), constant_values=blank)[:, :-2]
    skip = (ext != blank) & (ext != previous) & (s >= 2)
    return skip, s <= 2 * lengths[:, None]


def _emissions(log_probs: jax.Array, ext: jax.Array, log_norm: jax.Array | None) -> jax.Array:
    """float32[T, B, S]: log p_t(y'_s), time-major for the scan: ``log_probs`` at the states' labels, less
    ``log_norm`` float32[B, T] when it is given (``log_probs`` are then logits and this is their log-normaliser)."""
    picked = jnp.take_along_axis(log_probs.astype(jnp.float32), ext[:, None, :].astype(jnp.int32), axis=2)
    if log_norm is not None:
        picked = picked - log_norm[..., None]
    return jnp.moveaxis(picked, 1, 0)


def _start(first: jax.Array, live: jax.Array) -> jax.Array:
    """The lattice at frame 0: states 0 and 1 (of rows that have them)."""
    s = jnp.arange(first.shape[1])[None, :]
    return jnp.where((s <= 1) & live, first, NEG)


def _shift(alpha: jax.Array, k: int) -> jax.Array:
    return jnp.pad(alpha, ((0, 0), (k, 0)), constant_values=NEG)[:, :-k]


def _end(alpha: jax.Array, lengths: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The two final states' values, float32[B, 2] (states 2n and 2n − 1; 2n − 1 is NEG when n = 0)."""
    last = jnp.take_along_axis(alpha, (2 * lengths)[:, None], axis=1)[:, 0]
    before = jnp.take_along_axis(alpha, jnp.maximum(2 * lengths - 1, 0)[:, None], axis=1)[:, 0]
    return jnp.stack([last, jnp.where(lengths > 0, before, NEG)], axis=1)


def ctc_nll(log_probs: jax.Array, frames: jax.Array, labels: jax.Array, lengths: jax.Array, blank: int,
            log_norm: jax.Array | None = None) -> jax.Array:
    """float32[B]: −log Σ_{paths π of the lattice} Π_t p_t(π_t), the forward algorithm as one `lax.scan` over frames.

    log_probs: float32[B, T, V] per-frame log-probabilities, or logits with ``log_norm`` float32[B, T] their
    log-normaliser (the lattice reads a frame's V values only at its labels, so the [B, T, V] log-softmax need not
    be written out, nor its gradient: the normaliser's is the softmax); frames: int32[B] (≥ 1); labels: int32[B, N]
    (PAD after ``lengths`` int32[B]). A target that does not fit its frames (`min_frames`) has no path: NEG's
    magnitude (the caller masks such rows out; `ctc_nll` itself never returns inf or nan).
    """
    ext = extended_labels(labels, blank)
    skip, live = _transitions(ext, lengths, blank)
    emit = _emissions(log_probs, ext, log_norm)

    def step(alpha, xs):
        e, t = xs
        merged = jnp.logaddexp(alpha, _shift(alpha, 1))
        merged = jnp.where(skip, jnp.logaddexp(merged, _shift(alpha, 2)), merged)
        new = jnp.where(live, merged + e, NEG)
        return jnp.where((t < frames)[:, None], new, alpha), None

    alpha = _start(emit[0], live)
    steps = jnp.arange(1, emit.shape[0])
    alpha, _ = lax.scan(step, alpha, (emit[1:], steps))
    return -jax.nn.logsumexp(_end(alpha, lengths), axis=1)


def ctc_nll_optax(log_probs: jax.Array, frames: jax.Array, labels: jax.Array, lengths: jax.Array,
                  blank: int) -> jax.Array:
    """`ctc_nll` by `optax.ctc_loss` (the other kernel the loss could use; docs/ctc.md times both)."""
    import optax

    t = jnp.arange(log_probs.shape[1])[None, :]
    n = jnp.arange(labels.shape[1])[None, :]
    return optax.ctc_loss(log_probs, (t >= frames[:, None]).astype(jnp.float32), labels,
                          (n >= lengths[:, None]).astype(jnp.float32), blank_id=blank, log_epsilon=NEG)


def best_alignment(log_probs: jax.Array, frames: jax.Array, labels: jax.Array, lengths: jax.Array,
                   blank: int, pad: int = 0, log_norm: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """The best path of the lattice (Viterbi): (int32[B, T] its label at every frame — a target label or the
    blank; ``pad`` at frames ≥ frames[b] — and float32[B] its log-probability). Ties: the lower predecessor state
    first (stay, then from s − 1, then from s − 2), the final state 2n before 2n − 1. Rows whose target does not
    fit get some path of log-probability about NEG. ``log_norm``: as `ctc_nll`'s."""
    ext = extended_labels(labels, blank)
    skip, live = _transitions(ext, lengths, blank)
    emit = _emissions(log_probs, ext, log_norm)

    def forward(alpha, xs):
        e, t = xs
        options = jnp.stack([alpha, _shift(alpha, 1), jnp.where(skip, _shift(alpha, 2), NEG)], axis=0)
        choice = jnp.argmax(options, axis=0).astype(jnp.int32)  # first maximum: stay before s − 1 before s − 2
        new = jnp.where(live, jnp.max(options, axis=0) + e, NEG)
        active = (t < frames)[:, None]
        return jnp.where(active, new, alpha), jnp.where(active, choice, 0)

    alpha = _start(emit[0], live)
    alpha, choices = lax.scan(forward, alpha, (emit[1:], jnp.arange(1, emit.shape[0])))
    ends = _end(alpha, lengths)
    state = 2 * lengths - jnp.argmax(ends, axis=1).astype(jnp.int32)
    choices = jnp.concatenate([jnp.zeros_like(choices[:1]), choices], axis=0)  # frame 0 has no predecessor

    def backward(state, xs):
        choice, t = xs
        active = t < frames
        label = jnp.take_along_axis(ext, state[:, None], axis=1)[:, 0]
        back = jnp.take_along_axis(choice, state[:, None], axis=1)[:, 0]
        return jnp.where(active, state - back, state), jnp.where(active, label, pad)

    steps = jnp.arange(emit.shape[0])
    _, path = lax.scan(backward, state, (choices, steps), reverse=True)
    return jnp.moveaxis(path, 0, 1), jnp.max(ends, axis=1)
