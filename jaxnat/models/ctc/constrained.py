"""Lexically constrained CTC decoding: the best path of the frames whose collapsed output contains every
constraint phrase — a Viterbi search over the product of CTC's alignment lattice and the constraints' automaton
(the automaton-intersection reading of Control-DAG, Chen et al. 2024, on CTC's lattice instead of a DAG).

One sentence's search runs over frames t with states (what the previous frame emitted × constraint progress):

* ``Z[m, g]``: a blank frame; ``m`` the bitmask of phrases done; ``g`` what the last *token* was, as
  joins + 2 · open: joins, a free token that joins the next piece onto its word (BPE's "@@": no phrase may start
  next); open, a hard phrase's word is still open after it — the token was the phrase's last piece, or a free
  ``trails`` piece (punctuation) emitted while it was open;
* ``F[m, o, x]``: a free token of class x, ``o`` = 1 when it left a phrase's word open (x a trails class or
  piece): one slot per phrase piece (the token itself: it may also be used freely) and six classes of the other
  tokens, by joins × kind (a word start or other, ``continues``, ``trails``) — a class's label at frame t is
  its most probable token there, and as every token of a class moves the states alike, the search need not
  know whether the next frame's label of the class is the same token (merged) or another;
* ``P[m, j, p]``: piece p of phrase j (j not in m), the phrase started and unbroken; at its last piece the
  phrase counts as done for whatever follows (its word open);
* ``Q[m, j, p]``: a blank inside phrase j after its piece p.

A phrase's pieces are emitted as consecutive new tokens: a piece repeated in the frames merges (P's self-loop);
the next piece follows directly when it differs, else after a blank (Q). A phrase starts only as a new token:
after a blank, after a free token that is a different token, or after another phrase's last piece when it
differs. Phrases are placed whole and non-overlapping, in any order, each once (their tokens may also appear
freely elsewhere). With a vocabulary's word tables (``continues``, ``joins``, ``trails``:
`jaxnat.models.spec.word_glue`) a hard phrase stays a word: its word stays open until the next token that starts
a word (or the end); while it is open a trails token keeps it open and no token continues a word (nor does the
first piece of a phrase starting then that is no trails piece: the phrase's pieces would glue onto the word);
the free token right before a phrase never joins onto it. Hard rows accept only the end states with every
phrase done; soft rows accept every state and gain ``bonus`` per piece of each phrase they complete. A hard row
with no accepting path (its phrases cannot be emitted in its frames) reports ``ok = False``.

Transitions are computed group by group (no state × state matrix); each keeps the flat index of its best
predecessor, and the path is read back by a reverse scan. Batched by `jax.vmap`, one `lax.scan` over frames.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jaxnat.argmax import masked_best
from jaxnat.data.vocab import PAD_ID
from jaxnat.models.ctc.lattice import NEG

KINDS = 3  # a free token's kind: 0 a word start (or other), 1 continues a word, 2 trails (punctuation)
CLASSES = 2 * KINDS  # the other tokens' classes: KINDS · joins + kind
GROUPS = 4  # Z's g: joins + 2 · open


def _best(*candidates):
    """candidates: (value, flat index) pairs of broadcastable arrays → (max value, its index); ties: the first."""
    shape = jnp.broadcast_shapes(*(jnp.shape(v) for v, _ in candidates))
    values = jnp.stack([jnp.broadcast_to(v, shape) for v, _ in candidates], axis=-1)
    index = jnp.stack([jnp.broadcast_to(i, shape) for _, i in candidates], axis=-1)
    pick = jnp.argmax(values, axis=-1)
    return (jnp.take_along_axis(values, pick[..., None], -1)[..., 0],
            jnp.take_along_axis(index, pick[..., None], -1)[..., 0])


def _max_over(values, index, axis):
    """(max of values over axis, its index) — values, index broadcast together."""
    values, index = jnp.broadcast_arrays(values, index)
    pick = jnp.argmax(values, axis=axis)
    return (jnp.take_along_axis(values, jnp.expand_dims(pick, axis), axis).squeeze(axis),
            jnp.take_along_axis(index, jnp.expand_dims(pick, axis), axis).squeeze(axis))


def constrained_path(log_probs, frames, phrases, hard, blank: int, continues=None, joins=None, trails=None,
                     bonus: float = 0.0):
    """The best constrained path of one sentence.

    log_probs: float32[T, V] (forbidden ids at NEG); frames: int32[]; phrases: int32[C, P] PAD-padded (an all-PAD
    row: no phrase); hard: bool[]; continues, joins, trails: bool[V] or None (a piece in both continues and
    trails counts as continuing); bonus: per piece of a completed phrase of a soft row. Returns (labels int32[T]
    — PAD at frames ≥ ``frames`` —, placed bool[T]: the frame emits a phrase piece, ok bool[]: an accepted path
    exists).
    """
    t_max, v = log_probs.shape
    c, p = phrases.shape
    m_count = 1 << c
    x_count = c * p + CLASSES
    lp = jnp.maximum(log_probs.astype(jnp.float32), NEG)
    rules = hard

    def table(x):
        return (x if x is not None else jnp.zeros(v, bool)) & rules

    glue_c, glue_j = table(continues), table(joins)
    glue_r = table(trails) & ~glue_c  # a piece in both would glue: it counts as continuing

    length = jnp.sum(phrases != PAD_ID, axis=1)                    # [C]
    last = jnp.maximum(length - 1, 0)
    first_tok = phrases[:, 0]
    last_tok = jnp.take_along_axis(phrases, last[:, None], axis=1)[:, 0]
    masks = jnp.arange(m_count)
    bit = ((masks[:, None] >> jnp.arange(c)[None, :]) & 1).astype(bool)   # [M, C]
    start_mask = jnp.sum(jnp.where(length == 0, 1 << jnp.arange(c), 0))
    full = m_count - 1
    # a phrase starting while a word is open: its leading trails pieces keep it open, and its first other piece
    # must not continue it (all trails: its own end leaves the word open, and its own rule then covers it)
    real = phrases != PAD_ID
    settles = real & ~glue_r[phrases]                               # [C, P]
    lead_cont = jnp.any(settles, axis=1) & glue_c[jnp.take_along_axis(
        phrases, jnp.argmax(settles, axis=1)[:, None], axis=1)[:, 0]]  # [C]

    # free-token slots: the phrase pieces (their own token), then the classes of the other tokens
    special = phrases.reshape(-1)                                   # [C·P]
    is_special = jnp.zeros(v, bool).at[special].set(True).at[PAD_ID].set(False)
    kind = jnp.where(glue_c, 1, jnp.where(glue_r, 2, 0))
    token_class = KINDS * glue_j.astype(jnp.int32) + kind          # [V]
    other = ~is_special & (jnp.arange(v) != blank)
    # each class's most probable token at every frame (one masked reduction per class: nothing [T, 6, V] is built;
    # none for a class that no word table fills)
    def members(k):
        fills = ((k < KINDS or joins is not None) and (k % KINDS != 1 or continues is not None)
                 and (k % KINDS != 2 or trails is not None))
        return other & (token_class == k) if fills else None

    class_best, class_label = (jnp.stack(x, 1) for x in zip(*(masked_best(lp, members(k), NEG)
                                                                  for k in range(CLASSES))))  # [T, 6]
    slot_valid = jnp.concatenate([special != PAD_ID, jnp.ones(CLASSES, bool)])  # [X]
    slot_token = jnp.concatenate([special, jnp.full(CLASSES, -1, special.dtype)])  # -1: a class, never a piece
    classes = jnp.arange(CLASSES)
    slot_joins = jnp.concatenate([glue_j[special], classes >= KINDS])
    slot_cont = jnp.concatenate([glue_c[special], classes % KINDS == 1])
    slot_trails = jnp.concatenate([glue_r[special], classes % KINDS == 2])
    # F[m, 1, x] holds only trails slots; Z[m, g] takes F[m, o, x] at g = joins(x) + 2 · o
    slot_open = jnp.stack([slot_valid, slot_valid & slot_trails])                # [2, X]
    slot_group = slot_joins[None, :].astype(jnp.int32) + 2 * jnp.arange(2)[:, None]  # [2, X]

    # flat indices of the state groups
    n_z, n_f, n_p = m_count * GROUPS, m_count * 2 * x_count, m_count * c * p
    iz = jnp.arange(n_z).reshape(m_count, GROUPS)
    i_f = n_z + jnp.arange(n_f).reshape(m_count, 2, x_count)
    ip = n_z + n_f + jnp.arange(n_p).reshape(m_count, c, p)
    iq = n_z + n_f + n_p + jnp.arange(n_p).reshape(m_count, c, p)
    position = jnp.arange(p)
    valid_p = ~bit[:, :, None] & (position[None, None, :] < length[None, :, None])
    valid_q = ~bit[:, :, None] & (position[None, None, :] < (length - 1)[None, :, None])
    is_last = position[None, :] == last[:, None]                                  # [C, P]
    without = masks[:, None] ^ (1 << jnp.arange(c))[None, :]                      # [M, C]: m without phrase j
    advance_ok = jnp.pad(phrases[:, 1:] != phrases[:, :-1], ((0, 0), (1, 0)))      # [C, P]: piece p ≠ piece p − 1
    reward = jnp.where(hard, 0.0, bonus * length.astype(jnp.float32))           # [C]

    def frame(state, xs):
        lp_t, cls_best = xs
        z, f, pp, q = state
        e_blank = lp_t[blank]
        e_slot = jnp.where(slot_valid, jnp.concatenate([lp_t[special], cls_best]), NEG)   # [X]
        e_piece = lp_t[phrases]                                                            # [C, P]
        # D[m, j]: phrase j (in m) completed at the previous frame: P[m without j, j, last_j]
        done = jnp.take_along_axis(pp, last[None, :, None], axis=2)[..., 0]                # [M, C]
        d_val = jnp.where(bit, done[without, jnp.arange(c)[None, :]], NEG)
        d_idx = ip[without, jnp.arange(c)[None, :], last[None, :]]

        # blank frames: each Z[g] keeps itself and takes the free tokens of its group; a phrase's end opens g = 2
        groups = jnp.arange(GROUPS)
        f_group = jnp.where(slot_group[None, None] == groups[None, :, None, None], f[:, None], NEG)
        from_f = _max_over(f_group.reshape(m_count, GROUPS, -1), i_f.reshape(m_count, 1, -1), 2)  # [M, G]
        from_d = _max_over(d_val, d_idx, 1)
        from_d = (jnp.where(groups[None, :] == 2, from_d[0][:, None], NEG), from_d[1][:, None])
        new_z, bp_z = _best((z, iz), from_f, from_d)
        new_z = new_z + e_blank

        # free tokens: after a closed word anything (closed); after an open one (a blank or a trails token in
        # it, a phrase's last piece) no token that continues a word, a trails token keeping it open, another
        # closing it — right after a phrase only a token that differs from its last piece (the same token merges
        # into it: P's loop)
        closed = _best((z[:, 0], iz[:, 0]), (z[:, 1], iz[:, 1]), _max_over(f[:, 0], i_f[:, 0], 1))    # [M]
        opened = _best((z[:, 2], iz[:, 2]), (z[:, 3], iz[:, 3]), _max_over(f[:, 1], i_f[:, 1], 1))    # [M]
        differs = slot_token[:, None] != last_tok[None, :]                                    # [X, C]
        after = _max_over(jnp.where(differs[None], d_val[:, None, :], NEG), d_idx[:, None, :], 2)  # [M, X]
        after = _best((opened[0][:, None], opened[1][:, None]), after)                         # [M, X]
        shut = ~slot_cont & ~slot_trails                                                      # [X]
        new_f0, bp_f0 = _best((closed[0][:, None], closed[1][:, None]),
                              (jnp.where(shut[None, :], after[0], NEG), after[1]))
        new_f1, bp_f1 = jnp.where(slot_trails[None, :], after[0], NEG), after[1]
        new_f, bp_f = jnp.stack([new_f0, new_f1], 1), jnp.stack([bp_f0, bp_f1], 1)           # [M, 2, X]
        new_f = jnp.where(slot_open[None], new_f + e_slot[None, None, :], NEG)

        # phrase pieces: a start (piece 0), the same piece again, the next piece directly or after a blank
        opens = jnp.arange(2)[:, None, None] == 1                                            # [2, 1, 1]
        from_free = jnp.where((~slot_joins[None, :, None] & (slot_token[:, None] != first_tok[None, :])
                               & ~(opens & lead_cont[None, None, :]))[None], f[..., None], NEG)  # [M, 2, X, C]
        from_free = _max_over(from_free.reshape(m_count, 2 * x_count, c), i_f.reshape(m_count, -1, 1), 1)  # [M, C]
        from_done = jnp.where(((last_tok[:, None] != first_tok[None, :]) & ~lead_cont[None, :])[None],
                              d_val[:, :, None], NEG)                                          # [M, C(i), C(j)]
        from_done = _max_over(from_done, d_idx[:, :, None], 1)
        start = _best((z[:, 0:1], iz[:, 0:1]), (jnp.where(lead_cont[None, :], NEG, z[:, 2:3]), iz[:, 2:3]),
                      from_free, from_done)                                                    # [M, C]
        start_val = jnp.where(position[None, None, :] == 0, start[0][:, :, None], NEG)
        start_idx = jnp.broadcast_to(start[1][:, :, None], pp.shape)
        prev_p = jnp.pad(pp, ((0, 0), (0, 0), (1, 0)), constant_values=NEG)[:, :, :-1]
        prev_q = jnp.pad(q, ((0, 0), (0, 0), (1, 0)), constant_values=NEG)[:, :, :-1]
        prev_ip = jnp.pad(ip, ((0, 0), (0, 0), (1, 0)))[:, :, :-1]
        prev_iq = jnp.pad(iq, ((0, 0), (0, 0), (1, 0)))[:, :, :-1]
        # the piece that completes a phrase earns a soft row's bonus once, not again on its repeats
        gain = jnp.where(is_last, reward[:, None], 0.0)[None]
        moved = _best((start_val, start_idx), (jnp.where(advance_ok[None], prev_p, NEG), prev_ip), (prev_q, prev_iq))
        new_p, bp_p = _best((pp, ip), (moved[0] + gain, moved[1]))
        new_p = jnp.where(valid_p, new_p + e_piece[None], NEG)

        new_q, bp_q = _best((q, iq), (pp, ip))
        new_q = jnp.where(valid_q, new_q + e_blank, NEG)
        return (new_z, new_f, new_p, new_q), jnp.concatenate(
            [bp_z.reshape(-1), bp_f.reshape(-1), bp_p.reshape(-1), bp_q.reshape(-1)]).astype(jnp.int32)

    # before frame 0: nothing emitted, the empty phrases done
    z = jnp.full((m_count, GROUPS), NEG).at[start_mask, 0].set(0.0)
    init = (z, jnp.full((m_count, 2, x_count), NEG), jnp.full((m_count, c, p), NEG), jnp.full((m_count, c, p), NEG))
    steps = jnp.arange(t_max)

    def masked_frame(state, xs):
        new, back = frame(state, xs[:2])
        active = xs[2] < frames
        keep = jax.tree_util.tree_map(lambda n, o: jnp.where(active, n, o), new, state)
        return keep, jnp.where(active, back, -1)

    (z, f, pp, q), back = lax.scan(masked_frame, init, (lp, class_best, steps))

    # accepted end states: a hard row with every phrase done; a soft row anywhere
    done_p = valid_p & is_last[None] & ((masks[:, None, None] | (1 << jnp.arange(c))[None, :, None]) == full)
    accept = jnp.concatenate([
        jnp.broadcast_to((masks == full)[:, None], (m_count, GROUPS)).reshape(-1),
        jnp.broadcast_to((masks == full)[:, None], (m_count, 2 * x_count)).reshape(-1),
        done_p.reshape(-1), jnp.zeros(n_p, bool)])
    accept = accept | ~hard
    final = jnp.concatenate([z.reshape(-1), f.reshape(-1), pp.reshape(-1), q.reshape(-1)])
    final = jnp.where(accept, final, NEG)
    state = jnp.argmax(final).astype(jnp.int32)
    ok = final[state] > NEG / 2

    kinds = jnp.concatenate([jnp.zeros(n_z, jnp.int32), jnp.ones(n_f, jnp.int32), jnp.full(n_p, 2, jnp.int32),
                             jnp.full(n_p, 3, jnp.int32)])
    slot_of = jnp.concatenate([jnp.zeros(n_z, jnp.int32), jnp.tile(jnp.arange(x_count), 2 * m_count),
                               jnp.zeros(2 * n_p, jnp.int32)])
    piece_of = jnp.concatenate([jnp.zeros(n_z + n_f, jnp.int32), jnp.tile(phrases.reshape(-1), m_count),
                                jnp.zeros(n_p, jnp.int32)])

    def read(state, xs):
        back_t, t, class_label_t = xs
        active = t < frames
        kind, slot = kinds[state], slot_of[state]
        free = jnp.where(slot < c * p, special[jnp.minimum(slot, c * p - 1)],
                         class_label_t[jnp.clip(slot - c * p, 0, CLASSES - 1)])
        label = jnp.select([kind == 1, kind == 2], [free, piece_of[state]], blank)
        previous = jnp.where(active, back_t[state], state)
        return previous, (jnp.where(active, label, PAD_ID), active & (kind == 2))

    _, (labels, placed) = lax.scan(read, state, (back, steps, class_label), reverse=True)
    return labels, placed, ok


def constrained_paths(log_probs, frames, phrases, hard, blank: int, continues=None, joins=None, trails=None,
                      bonus: float = 0.0):
    """`constrained_path` over a batch: log_probs float32[B, T, V], frames int32[B], phrases int32[B, C, P], hard
    bool[B] → (labels int32[B, T], placed bool[B, T], ok bool[B])."""
    return jax.vmap(lambda lp, n, ph, h: constrained_path(lp, n, ph, h, blank, continues, joins, trails, bonus))(
        log_probs, frames, phrases, hard)


def constraint_frames(phrases: jax.Array) -> jax.Array:
    """int32[B]: frames that surely hold every phrase of a row (int32[B, C, P]): their pieces, a blank between
    equal adjacent pieces, and two frames between phrases (a blank, or a free token a word rule may need)."""
    real = phrases != PAD_ID
    pieces = jnp.sum(real, axis=(1, 2), dtype=jnp.int32)
    repeats = jnp.sum((phrases[..., 1:] == phrases[..., :-1]) & real[..., 1:], axis=(1, 2), dtype=jnp.int32)
    count = jnp.sum(jnp.any(real, axis=2), axis=1, dtype=jnp.int32)
    return pieces + repeats + 2 * jnp.maximum(count - 1, 0)
