"""Iterative refinement decoding for edit-based models, as one jit'd ``lax.while_loop``.

One iteration = a first edit (LevT: delete, `levt_delete`; EDITOR: reposition, `editor_reposition`) → insert
placeholders → fill them (reference-semantics §5, 6). The whole batch lives at a fixed capacity ``[B, L]``; a
sentence stops when an iteration leaves it unchanged (unless ``run_all``) and the loop stops when every
sentence has stopped or after ``max_iter + 1`` iterations. Finished rows are frozen by masking, so no shape
ever changes and no value goes back to the host until the loop ends.

Per token the loop carries a score (the log-probability its fill had; 0 for the initial tokens) and a
hard-constraint phrase id (0 = an ordinary token). Phrase tokens are never deleted, a reposition moves a phrase
only as a whole, and no placeholder is opened between two tokens of the same phrase (Susanto et al. 2020), so
every hard constraint comes out exactly once and contiguous whatever the model predicts (LevT also keeps
their order; EDITOR may reorder whole phrases).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxnat import edit_ops
from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID, PLH_ID


class Hypotheses(NamedTuple):
    tokens: jax.Array   # int32[B, L] right-padded [BOS … EOS] rows
    scores: jax.Array   # float32[B, L] per-token log-probability (0 for BOS/EOS and initial tokens)
    phrase: jax.Array   # int32[B, L] hard-constraint phrase id, 0 = free token


class RefineOptions(NamedTuple):
    max_iter: int = 9                  # at most max_iter + 1 iterations (fairseq's --iter-decode-max-iter)
    placeholder_penalty: float = 0.0   # γ, subtracted from the "no placeholder" class of every slot
    cap_min: int = 10                  # length cap max(cap_min, cap_ratio · source length incl. BOS/EOS)
    cap_ratio: float = 2.0
    run_all: bool = False              # run every iteration even when nothing changes
    trace: bool = False                # also return every intermediate hypothesis


class Heads(NamedTuple):
    """The model's heads with the source already encoded: each maps tokens int32[B, L] to logits."""
    first: Callable      # LevT: deletion logits [B, L, 2]; EDITOR: reposition logits [B, L, L]
    placeholder: Callable  # [B, L-1, 256]
    token: Callable      # [B, L, V], reserved ids already at -inf


FirstEdit = Callable  # (hyps, logits, active bool[B], word_start) -> (hyps, {name: int32[B]} counts)


def initial_hypotheses(tokens: jax.Array, phrase: jax.Array | None = None) -> Hypotheses:
    phrase = jnp.zeros_like(tokens) if phrase is None else phrase
    return Hypotheses(tokens, jnp.zeros(tokens.shape, jnp.float32), phrase)


def length_cap(src: jax.Array, capacity: int, options: RefineOptions) -> jax.Array:
    """int32[B]: max(cap_min, cap_ratio · src_len) tokens, never above the capacity (src_len counts BOS/EOS).

    Computed per sentence from its own source length, so a sentence decodes the same alone or in a batch.
    """
    src_len = edit_ops.lengths(src, PAD_ID)
    cap = jnp.maximum(options.cap_min, jnp.floor(options.cap_ratio * src_len).astype(jnp.int32))
    return jnp.minimum(cap, capacity)


def inside_phrase(phrase: jax.Array) -> jax.Array:
    """bool[B, L-1]: slot k lies between two tokens of the same hard-constraint phrase."""
    return (phrase[:, :-1] == phrase[:, 1:]) & (phrase[:, :-1] > 0)


def keep_word_boundaries(tokens: jax.Array, phrase: jax.Array, delete: jax.Array,
                         word_start: jax.Array | None) -> jax.Array:
    """bool[B, L]: ``delete`` without the deletions that would glue a sub-word piece onto a hard constraint.

    Invariant (with the fill rule of `insert_and_fill`): the token right after a phrase begins a word. It may
    only be deleted when its successor begins a word and survives, so the invariant holds after the deletion.
    """
    if word_start is None:
        return delete
    guard = jnp.pad((phrase[:, :-1] > 0) & (phrase[:, 1:] == 0), ((0, 0), (1, 0)))
    successor_ok = jnp.pad(word_start[tokens[:, 1:]] & ~delete[:, 1:], ((0, 0), (0, 1)))
    return delete & ~(guard & ~successor_ok)


def levt_delete(hyps: Hypotheses, logits: jax.Array, active: jax.Array, word_start: jax.Array | None = None):
    """LevT's first edit: argmax deletion, only in sentences longer than [BOS, EOS]; phrases protected."""
    n = edit_ops.lengths(hyps.tokens, PAD_ID)
    delete = (jnp.argmax(logits, axis=-1) == 1) & (active & (n > 2))[:, None]
    delete = keep_word_boundaries(hyps.tokens, hyps.phrase, delete, word_start)
    out = edit_ops.delete_tokens(hyps.tokens, delete, PAD_ID, protect=hyps.phrase > 0,
                                 sides=(hyps.scores, hyps.phrase))
    return Hypotheses(out.tokens, *out.sides), {"deletions": out.num_deleted}


def glued_to_phrase(tokens: jax.Array, phrase: jax.Array, word_start: jax.Array) -> jax.Array:
    """bool[B, L]: free sub-word pieces that directly follow a hard-constraint phrase (through other such
    pieces), i.e. that would glue onto the constraint's last word. word_start: bool[V]."""
    pos = edit_ops.positions(tokens)
    free = phrase == 0
    anchor = ~free | word_start[tokens] | (pos == 0) | (tokens == EOS_ID) | (tokens == PAD_ID)
    run_start = lax.cummax(jnp.where(anchor, pos, 0), axis=1)
    return ~anchor & (jnp.take_along_axis(phrase, run_start, axis=1) > 0)


def editor_reposition(hyps: Hypotheses, logits: jax.Array, active: jax.Array, word_start: jax.Array | None = None,
                      deletion_reward: float = 0.0):
    """EDITOR's first edit: every slot takes the input token it scores highest (column 0, BOS, deletes; the
    deletion reward is added to it first); BOS/EOS pinned; finished rows left as they are.

    Hard constraints stay whole (`edit_ops.reposition_phrases`): each phrase moves as one block to the slot
    most likely to take its first token (argmax over slots of log π_rps(first token | slot)), which is its own
    slot unless the model wants it elsewhere; and with ``word_start`` the free sub-word pieces that would then
    follow a phrase are deleted, as LevT's boundary rule would. Counts: repositions (slots holding another
    token, deletions excluded) and deletions.
    """
    n = edit_ops.lengths(hyps.tokens, PAD_ID)[:, None]
    pos = edit_ops.positions(hyps.tokens)
    # padding columns can never be pointed at, whatever the head says (finite: an empty row must not give NaN)
    logits = jnp.where(pos[:, None, :] < n[:, :, None], logits.at[..., 0].add(deletion_reward), -1e9)
    index = jnp.where(active[:, None], jnp.argmax(logits, axis=-1).astype(jnp.int32), pos)
    interior_slot = ((pos > 0) & (pos < n - 1))[:, :, None]
    anchor = jnp.argmax(jnp.where(interior_slot, jax.nn.log_softmax(logits, axis=-1), -jnp.inf), axis=1)
    anchor = jnp.where(active[:, None], anchor.astype(jnp.int32), pos)
    out = edit_ops.reposition_phrases(hyps.tokens, index, anchor, hyps.phrase, PAD_ID,
                                      sides=(hyps.scores, hyps.phrase))
    moved = Hypotheses(out.tokens, *out.sides)
    deletions = out.num_deleted
    if word_start is not None:
        glued = glued_to_phrase(moved.tokens, moved.phrase, word_start)
        cut = edit_ops.delete_tokens(moved.tokens, glued, PAD_ID, sides=(moved.scores, moved.phrase))
        moved, deletions = Hypotheses(cut.tokens, *cut.sides), deletions + cut.num_deleted
    return moved, {"repositions": out.num_moved, "deletions": deletions}


def insert_and_fill(hyps: Hypotheses, heads: Heads, cap: jax.Array, active: jax.Array, penalty: float,
                    word_start: jax.Array | None = None):
    """Placeholders (argmax per slot after the γ penalty, none inside a phrase, row capped at ``cap``), then
    every placeholder filled with the token head's argmax. Returns (placeholder hyps, filled hyps, count).

    word_start: bool[V] (True for pieces that begin a word) or None. When given, a placeholder right after a
    hard-constraint phrase may only take a word-initial piece, so that no sub-word piece glues onto the
    constraint's last word: the constraint then survives at the word level too, not just as pieces.
    """
    logits = heads.placeholder(hyps.tokens)
    logits = logits.at[..., 0].add(-penalty)
    counts = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    counts = jnp.where(inside_phrase(hyps.phrase) | ~active[:, None], 0, counts)
    ins = edit_ops.insert_placeholders(hyps.tokens, counts, PAD_ID, PLH_ID, max_length=cap,
                                       sides=(hyps.scores, hyps.phrase))
    with_plh = Hypotheses(ins.tokens, *ins.sides)
    logits = heads.token(with_plh.tokens)
    if word_start is not None:
        after_phrase = jnp.pad(with_plh.phrase[:, :-1] > 0, ((0, 0), (1, 0))) & (with_plh.tokens == PLH_ID)
        logits = jnp.where(after_phrase[..., None] & ~word_start, -jnp.inf, logits)
    # the argmax's log-probability, max - logsumexp, without materialising a log_softmax of [B, L, V]
    best = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    best_logp = jnp.max(logits, axis=-1) - jax.nn.logsumexp(logits, axis=-1)
    is_plh = with_plh.tokens == PLH_ID
    filled = Hypotheses(jnp.where(is_plh, best, with_plh.tokens),
                        jnp.where(is_plh, best_logp, with_plh.scores), with_plh.phrase)
    return with_plh, filled, jnp.sum(ins.counts, axis=1)


def refine(heads: Heads, first_edit: FirstEdit, start: Hypotheses, cap: jax.Array, options: RefineOptions,
           count_names: tuple[str, ...], word_start: jax.Array | None = None) -> dict:
    """Runs the refinement loop from ``start``; returns per sentence ``tokens`` and ``phrase`` int32[B, L], ``score``
    float32[B] (mean token score, BOS/EOS included), ``iterations`` and the edit counts int32[B]
    (``count_names`` from the first edit, plus ``insertions``; word_start as in `insert_and_fill`), and with
    ``options.trace`` the
    ``trace`` int32[B, max_iter + 1, 3, L] of hypotheses after each step (first edit, placeholders, fill;
    iterations past the loop's last one repeat the final state)."""
    b, l = start.tokens.shape
    steps = options.max_iter + 1
    zeros = jnp.zeros((b,), jnp.int32)
    state = {
        "hyps": start, "done": jnp.zeros((b,), bool), "iteration": jnp.zeros((), jnp.int32),
        "iterations": zeros, "insertions": zeros, **{name: zeros for name in count_names},
    }
    if options.trace:
        state["trace"] = jnp.zeros((steps, 3, b, l), jnp.int32)

    def cond(s):
        return (s["iteration"] < steps) & ~jnp.all(s["done"])

    def body(s):
        active = ~s["done"]
        before = s["hyps"]
        edited, counts = first_edit(before, heads.first(before.tokens), active, word_start)
        with_plh, filled, inserted = insert_and_fill(edited, heads, cap, active, options.placeholder_penalty,
                                                     word_start)
        changed = jnp.any(filled.tokens != before.tokens, axis=1)
        new = dict(s)
        new["hyps"] = filled
        new["done"] = s["done"] | (active & ~changed & (not options.run_all))
        new["iteration"] = s["iteration"] + 1
        new["iterations"] = s["iterations"] + active
        new["insertions"] = s["insertions"] + inserted
        for name in count_names:
            new[name] = s[name] + counts[name]
        if options.trace:
            snapshot = jnp.stack([edited.tokens, with_plh.tokens, filled.tokens])
            new["trace"] = s["trace"].at[s["iteration"]].set(snapshot)
        return new

    final = lax.while_loop(cond, body, state)
    hyps = final["hyps"]
    real = hyps.tokens != PAD_ID
    out = {
        "tokens": hyps.tokens, "phrase": hyps.phrase,
        "score": jnp.sum(jnp.where(real, hyps.scores, 0.0), axis=1) / jnp.maximum(jnp.sum(real, axis=1), 1),
        "iterations": final["iterations"], "insertions": final["insertions"],
        **{name: final[name] for name in count_names},
    }
    if options.trace:
        # iterations that did not run repeat the final hypothesis, so every row of the trace is readable
        ran = jnp.arange(steps)[:, None, None, None] < final["iteration"]
        out["trace"] = jnp.moveaxis(jnp.where(ran, final["trace"], hyps.tokens[None, None]), 2, 0)
    return out


def canvas_from_pieces(rows: list[list[int]], phrase_rows: list[list[int]] | None, capacity: int):
    """Host helper: piece-id lists (without BOS/EOS) → (tokens, phrase) int32[B, capacity] numpy arrays."""
    import numpy as np

    tokens = np.full((len(rows), capacity), PAD_ID, np.int32)
    phrase = np.zeros((len(rows), capacity), np.int32)
    for r, ids in enumerate(rows):
        tokens[r, : len(ids) + 2] = [BOS_ID, *ids, EOS_ID]
        if phrase_rows is not None:
            phrase[r, 1: len(ids) + 1] = phrase_rows[r]
    return tokens, phrase
