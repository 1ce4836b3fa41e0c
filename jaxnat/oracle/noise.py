"""Roll-in noise: corrupt a reference into the input a model learns to refine (fairseq's ``--noise`` options).

Rows are right-padded ``int32[B, L]`` arrays ``[BOS, t1 … tn, EOS, PAD …]``. BOS is position 0 and EOS the last
non-pad position, found by *position*, never by id; the *real* tokens t1 … tn lie strictly between. Rows of
length 0, 1 or 2 have no real token and pass through every noise unchanged. Every row draws independently.

With n the number of real tokens of a row:

* ``random_delete`` (LevT): keep k = ⌊n·v⌋ real tokens, v ~ U[0, 1), so k is uniform on {0 … n−1} and at least
  one token is always deleted. The kept set is a uniform k-subset (the k lowest of n i.i.d. uniform scores),
  in original order; BOS and EOS are kept and the row is compacted.
* ``random_mask`` (CMLM): replace m = ⌊n·v⌋ + 1 real tokens, m uniform on {1 … n}, by MASK; a uniform m-subset.
* ``full_mask`` (vanilla NAT): replace every real token by MASK.
* ``random_delete_shuffle`` (EDITOR): ``random_delete``, then with probability ``p_shuffle`` a word-level local
  shuffle (Lample et al., 2018): word w gets the key w + U[0, d) and the words are stably sorted by key. Word j
  can only pass word i if |j − i| < d, so no word moves d or more words (at most 2 for the default d = 3).
  Sub-word pieces move with their word, in order. With ``p_global`` > 0 a share of rows is shuffled globally
  instead (an option beyond the paper, for starts such as shuffled lexical constraints).

Each noise is a ``draw_*`` of its random numbers from a PRNG key plus a deterministic ``apply_*`` kernel, so the
tests can feed the same numbers to a plain-Python reference. Counts are ⌊n·v⌋ with n·v rounded to float32,
like fairseq; the rounding never reaches n for v < 1, so k ≤ n − 1 and m ≤ n hold exactly.
Everything is pure and fixed-shape: it runs under ``jit``/``vmap`` without host synchronisation.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxnat.data.vocab import MASK_ID, PAD_ID
from jaxnat.edit_ops.compaction import Sides, compact, lengths, positions


# A shift range so much wider than any sentence that a word's index hardly moves its key: a uniform order.
GLOBAL_DISTANCE = 1e6


def real_mask(tokens: jax.Array, pad_id: int = PAD_ID) -> jax.Array:
    """tokens: int32[B, L] → bool[B, L], True strictly between BOS (position 0) and EOS (last non-pad)."""
    pos = positions(tokens)
    return (pos > 0) & (pos < lengths(tokens, pad_id)[:, None] - 1)


def _lowest(real: jax.Array, v: jax.Array, scores: jax.Array, offset: int) -> jax.Array:
    """bool[B, L]: the c = ⌊n·v⌋ + offset real tokens of lowest score (ties: leftmost first), n = real count.

    With i.i.d. uniform scores the c lowest form a uniformly random c-subset (the rank trick).
    """
    n = jnp.sum(real, axis=1, dtype=jnp.int32)
    count = jnp.floor(n.astype(jnp.float32) * v).astype(jnp.int32) + offset
    order = jnp.lexsort((scores, ~real), axis=1)     # real tokens first, by score; stable, so ties by position
    rank = jnp.argsort(order, axis=1)                # inverse permutation: each token's rank in its row
    return real & (rank < count[:, None])


def draw_subset(key: jax.Array, shape: tuple[int, int], slots: int | None = None) -> tuple[jax.Array, jax.Array]:
    """Random numbers of ``random_delete``/``random_mask``: v f32[B] (subset size), scores f32[B, L] (subset),
    both i.i.d. U[0, 1). With ``slots`` K, v is f32[B, K] instead: one per segment slot of a packed row."""
    k_v, k_scores = jax.random.split(key)
    v_shape = shape[:1] if slots is None else (shape[0], slots)
    return jax.random.uniform(k_v, v_shape), jax.random.uniform(k_scores, shape)


def _delete(tokens, v, scores, pad_id, sides):
    real = real_mask(tokens, pad_id)
    keep = _lowest(real, v, scores, offset=0) | (~real & (tokens != pad_id))  # BOS/EOS always kept
    out, sides = compact(tokens, keep, pad_id, sides)
    return out, sides, keep


def apply_random_delete(tokens: jax.Array, v: jax.Array, scores: jax.Array,
                        pad_id: int = PAD_ID) -> tuple[jax.Array, jax.Array]:
    """Keep the ⌊n·v⌋ real tokens of lowest score, plus BOS and EOS, compacted.

    tokens: int32[B, L]; v: f32[B] in [0, 1); scores: f32[B, L]. Returns ``(tokens, keep)``: the compacted
    int32[B, L] rows and bool[B, L] over the *input* (pass it to ``compact`` to move other arrays alike).
    """
    out, _, keep = _delete(tokens, v, scores, pad_id, None)
    return out, keep


def random_delete(key: jax.Array, tokens: jax.Array, pad_id: int = PAD_ID, sides: Sides = None):
    """LevT noise: delete a uniformly random number (0 … n−1 kept) of uniformly chosen real tokens.

    tokens: int32[B, L]; sides: optional pytree of [B, L, ...] arrays moved with their tokens.
    Returns the int32[B, L] tokens, or ``(tokens, sides)`` when ``sides`` is given.
    """
    out, moved, _ = _delete(tokens, *draw_subset(key, tokens.shape), pad_id, sides)
    return out if sides is None else (out, moved)


def apply_random_mask(tokens: jax.Array, v: jax.Array, scores: jax.Array, pad_id: int = PAD_ID,
                      mask_id: int = MASK_ID) -> tuple[jax.Array, jax.Array]:
    """Replace the ⌊n·v⌋ + 1 real tokens of lowest score by ``mask_id``.

    tokens: int32[B, L]; v: f32[B] in [0, 1); scores: f32[B, L]. Returns ``(tokens, masked)``, masked: bool[B, L].
    """
    masked = _lowest(real_mask(tokens, pad_id), v, scores, offset=1)
    return jnp.where(masked, mask_id, tokens), masked


def random_mask(key: jax.Array, tokens: jax.Array, pad_id: int = PAD_ID,
                mask_id: int = MASK_ID) -> tuple[jax.Array, jax.Array]:
    """CMLM noise: mask a uniformly random number (1 … n) of uniformly chosen real tokens.

    tokens: int32[B, L]. Returns ``(tokens, masked)``: int32[B, L] and bool[B, L].
    """
    return apply_random_mask(tokens, *draw_subset(key, tokens.shape), pad_id, mask_id)


def full_mask(tokens: jax.Array, pad_id: int = PAD_ID, mask_id: int = MASK_ID) -> tuple[jax.Array, jax.Array]:
    """Vanilla-NAT noise: every real token becomes ``mask_id``. tokens: int32[B, L] → (tokens, masked bool[B, L])."""
    masked = real_mask(tokens, pad_id)
    return jnp.where(masked, mask_id, tokens), masked


def apply_word_shuffle(tokens: jax.Array, word_start: jax.Array, shift: jax.Array,
                       pad_id: int = PAD_ID) -> jax.Array:
    """Stably sort the words of each row by key w + shift[w]; BOS, EOS and padding stay in place.

    tokens: int32[B, L]; word_start: bool[B, L], True where a piece begins a word (read on real tokens only; the
    first real token always begins one); shift: f32[B, L], indexed by word number w (not by position).
    Returns the int32[B, L] permuted rows.
    """
    real = real_mask(tokens, pad_id)
    pos = positions(tokens)
    starts = real & (word_start.astype(bool) | (pos == 1))
    word = jnp.cumsum(starts, axis=1, dtype=jnp.int32) - 1            # word number of each real piece
    word_key = word.astype(jnp.float32) + jnp.take_along_axis(shift, jnp.maximum(word, 0), axis=1)
    # The pieces of a word share its key, and a stable sort keeps equal keys in position order, so words stay
    # contiguous and in order inside; words whose keys tie keep their original order.
    key = jnp.where(real, word_key, jnp.where(pos == 0, -jnp.inf, jnp.inf))  # BOS first; EOS, then PADs, last
    return jnp.take_along_axis(tokens, jnp.argsort(key, axis=1, stable=True), axis=1)


def draw_delete_shuffle(key: jax.Array, shape: tuple[int, int], p_shuffle: float = 0.5,
                        max_distance: float = 3.0, p_global: float = 0.0):
    """Random numbers of ``random_delete_shuffle``: ``(v, scores, shuffle, shift)`` with v f32[B] and
    scores f32[B, L] as in ``draw_subset``, shuffle bool[B] ~ Bernoulli(p_shuffle), shift f32[B, L] ~ U[0, d).

    ``p_global`` (not in the paper; 0 draws exactly the paper's numbers): each row, with this probability, is
    shuffled *globally* instead — shift ~ U[0, GLOBAL_DISTANCE), so the word index no longer matters and the kept
    words come out in a uniformly random order, like shuffled lexical constraints (docs/editor.md).
    """
    k_delete, k_coin, k_shift, k_global = jax.random.split(key, 4)
    v, scores = draw_subset(k_delete, shape)
    shuffle = jax.random.bernoulli(k_coin, p_shuffle, shape[:1])
    shift = jax.random.uniform(k_shift, shape, maxval=max_distance)
    if p_global > 0:
        spread = jax.random.bernoulli(k_global, p_global, shape[:1])
        shuffle = shuffle | spread
        shift = jnp.where(spread[:, None], shift * (GLOBAL_DISTANCE / max_distance), shift)
    return v, scores, shuffle, shift


def apply_delete_shuffle(tokens: jax.Array, word_start: jax.Array, v: jax.Array, scores: jax.Array,
                         shuffle: jax.Array, shift: jax.Array, pad_id: int = PAD_ID) -> jax.Array:
    """``apply_random_delete``, then ``apply_word_shuffle`` on the rows where ``shuffle`` (bool[B]) is set.

    word_start (bool[B, L]) is compacted with the tokens, so a piece whose word start was deleted joins the
    preceding word. Returns int32[B, L].
    """
    out, starts, _ = _delete(tokens, v, scores, pad_id, word_start)
    return jnp.where(shuffle[:, None], apply_word_shuffle(out, starts, shift, pad_id), out)


def random_delete_shuffle(key: jax.Array, tokens: jax.Array, word_start: jax.Array, pad_id: int = PAD_ID,
                          p_shuffle: float = 0.5, max_distance: float = 3.0, p_global: float = 0.0) -> jax.Array:
    """EDITOR noise: ``random_delete``, then a local word shuffle (max distance d) with probability p_shuffle.

    tokens: int32[B, L]; word_start: bool[B, L]. Returns int32[B, L].
    """
    draws = draw_delete_shuffle(key, tokens.shape, p_shuffle, max_distance, p_global)
    return apply_delete_shuffle(tokens, word_start, *draws, pad_id=pad_id)
