"""Glancing training on the DAG (DA-Transformer, after GLAT, Qian et al. 2021): the reference's best path
through the graph of a first pass (no gradient) says which vertex each target token sits on; as many tokens as
the ratio times the first pass's mistakes along that path are revealed, each at its vertex, in the second pass's
input. Pure functions of the first pass's arrays and the random numbers; the ratio anneals with the update's
number."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxnat.data.vocab import PAD_ID


def glance_ratio(step, start: float, end: float, steps: int) -> jax.Array:
    """float32[]: the ratio at update ``step`` (int32[] or None = the end of the schedule), linear from ``start``
    to ``end`` over ``steps`` updates, then ``end`` (the paper's 0.5 → 0.1 over 200k)."""
    if step is None or steps <= 0:
        return jnp.asarray(end, jnp.float32)
    frac = jnp.clip(jnp.asarray(step, jnp.float32) / steps, 0.0, 1.0)
    return jnp.asarray(start + (end - start) * frac, jnp.float32)


def glance_counts(path: jax.Array, predicted: jax.Array, tgt: jax.Array, tgt_len: jax.Array, aligned: jax.Array,
                  ratio: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(int32[B] tokens to reveal, int32[B] tokens the first pass got right along the path).

    path: int32[B, T], the vertex of each target position (−1 on padding; `dag.best_alignment`); predicted:
    int32[B, L], each vertex's argmax token; tgt: int32[B, T]; tgt_len: int32[B] (BOS/EOS included); aligned:
    bool[B], the rows with a path. The mistakes are the target positions whose vertex predicts another token
    (BOS and EOS count, as in the authors' code); reveal round(ratio · mistakes), halves up."""
    on = path >= 0
    hit = on & (jnp.take_along_axis(predicted, jnp.maximum(path, 0), axis=1) == tgt)
    right = jnp.sum(hit, axis=1, dtype=jnp.int32)
    wrong = jnp.where(aligned, tgt_len - right, 0)
    return jnp.floor(ratio * wrong.astype(jnp.float32) + 0.5).astype(jnp.int32), right


def choose_glanced(path: jax.Array, number: jax.Array, u: jax.Array, aligned: jax.Array) -> jax.Array:
    """bool[B, T]: ``number`` (int32[B]) target positions of each aligned row, uniformly at random (those of lowest
    ``u`` float32[B, T] ~ U[0, 1)): GLAT's random subset of the counted size."""
    on = (path >= 0) & aligned[:, None]
    rank = jnp.argsort(jnp.argsort(jnp.where(on, u, 2.0), axis=1, stable=True), axis=1, stable=True)
    return on & (rank < number[:, None])


def choose_bernoulli(path: jax.Array, number: jax.Array, tgt_len: jax.Array, u: jax.Array,
                     aligned: jax.Array) -> jax.Array:
    """bool[B, T]: each target position of an aligned row independently with probability number / tgt_len (the
    authors' code without a glance strategy: the same count in expectation)."""
    on = (path >= 0) & aligned[:, None]
    p = number.astype(jnp.float32) / jnp.maximum(tgt_len, 1).astype(jnp.float32)
    return on & (u < p[:, None])


def glanced_inputs(path: jax.Array, chosen: jax.Array, tgt: jax.Array, n_slots: int) -> jax.Array:
    """int32[B, L]: the reference token each glanced vertex reads in the second pass, PAD at the others."""
    rows = jnp.arange(path.shape[0])[:, None]
    return jnp.full((path.shape[0], n_slots), PAD_ID, jnp.int32).at[rows, jnp.where(chosen, path, n_slots)].set(
        tgt, mode="drop")


def fix_alignment(match: jax.Array, path: jax.Array, chosen: jax.Array) -> jax.Array:
    """The authors' code's forced emission (its default since v1.0): in the second pass a glanced target position
    may sit only on its glanced vertex, and its (given) token costs nothing there. match: float32[B, T, L]."""
    here = jnp.arange(match.shape[2])[None, None, :] == path[:, :, None]
    return jnp.where(chosen[:, :, None], jnp.where(here, 0.0, -jnp.inf), match)
