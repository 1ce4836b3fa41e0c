"""Lexically constrained decoding of a DA-Transformer: the best path through the DAG that emits every constraint
phrase, found by a dynamic program over (output position, vertex, constraint progress).

Control-DAG (Chen et al., NAACL 2024) intersects the DAG, read as a weighted automaton, with an automaton that
accepts the strings containing every constraint, and takes the best path of the product. This is that product
built on the fly on the device: the progress state of a hypothesis is

* the set of phrases already emitted (a bitmask over the C ≤ `MAX_PHRASES` phrases of a sentence, any order);
* where it stands: free (between phrases), or inside phrase c after its first p tokens (1 ≤ p < |c|);
* for the whole-word rule of subword vocabularies (`jaxnat.models.spec.word_glue`): whether a phrase's word is
  still open, the last token having completed the phrase or been a free piece that trails it (punctuation: "Zaun."
  may still become "Zaun.n"; then the next free token must not be a piece that continues a word, a trailing piece
  keeps the word open and any other closes it), or whether the last token was a free piece that joins the next
  one onto its word (BPE's "@@"; then no phrase may start next).

A free vertex emits its best token among those its state allows (any token but the reserved ones: the maximum
over the whole vocabulary, not a pruned top-k); a phrase is emitted on consecutive vertices of the path, each
token at its vertex's probability. A path's score is log P(y, a | x) (links plus emitted tokens), and, as in
joint Viterbi decoding (`dag.joint_viterbi`), the output length M is chosen by score / M^β. Hard rows end only in
the state where every phrase is done, so CPR is 100% by construction; soft rows may end anywhere, with a reward
per phrase emitted. A hard row that no path of the output's capacity can satisfy (more constraint tokens than
vertices or output slots) is decoded as a soft one and flagged (``infeasible``).

Work: O(W · L² · Q) for W output slots, L vertices and Q = 2^C · (3 + C · (P − 1)) progress states.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxnat.argmax import argmax, masked_best
from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID
from jaxnat.models.dat.dag import NEG, _at

MAX_PHRASES = 4      # the bitmask of done phrases has 2^C entries
NORMAL, FINISHED, JOINED, INSIDE = 0, 1, 2, 3  # the free states, then inside-phrase states from index 3
ANY, ANY_JOIN, CLOSE, CLOSE_JOIN, TRAIL = range(5)  # the free token classes of `_free_tables`


def _free_tables(emit: jax.Array, allowed: jax.Array, continues, joins, trails):
    """Each vertex's best free token per class: (lp float32[B, L, 5], tok int32[B, L, 5]), the classes `ANY`,
    `ANY_JOIN` (from NORMAL or JOINED: any token, not joining or joining the next), `CLOSE`, `CLOSE_JOIN` (from
    FINISHED, closing the phrase's word: no piece that continues or trails a word) and `TRAIL` (from FINISHED, a
    trailing piece that leaves the word open). A trailing piece that joins would glue the next piece, whatever
    it is, onto the open word: it is in no FINISHED class (`word_glue` never gives both tables)."""
    V = emit.shape[-1]
    cont = jnp.zeros(V, bool) if continues is None else continues
    join = jnp.zeros(V, bool) if joins is None else joins
    trail = jnp.zeros(V, bool) if trails is None else trails & ~cont
    closing = allowed & ~cont & ~trail
    # a class no table fills (None) costs no pass over the vocabulary
    joined = (lambda ok: ok & join) if joins is not None else (lambda ok: None)
    classes = [allowed & ~join, joined(allowed), closing & ~join, joined(closing),
               allowed & trail & ~join if trails is not None else None]
    lps, toks = zip(*(masked_best(emit, ok, NEG) for ok in classes))
    return jnp.stack(lps, -1), jnp.stack(toks, -1)


def _transition(moved, free_lp, free_tok, ph, phrases, lens):
    """One emission at every vertex: moved float32[B, L, NM, NI] (the best score of reaching vertex j in each
    progress state, before j emits) → (new scores, the source state's flat index, the token emitted), each
    [B, L, NM, NI]."""
    B, L, NM, NI = moved.shape
    C, P1 = phrases.shape[1], phrases.shape[2] - 1
    inner = lambda x: x.astype(jnp.int32)  # noqa: E731
    masks = jnp.arange(NM)[:, None] * NI                                     # flat index of (M, inner 0)
    normal, finished, joined = moved[..., NORMAL], moved[..., FINISHED], moved[..., JOINED]
    inside = moved[..., INSIDE:].reshape(B, L, NM, C, P1)

    # free tokens: from normal or joined (any token) or finished (a piece that closes the phrase's word)
    srcs = jnp.stack([normal, joined, finished], -1)                         # [B, L, NM, 3]
    src_inner = jnp.asarray([NORMAL, JOINED, FINISHED], jnp.int32)
    free = []
    for any_c, close_c in ((ANY, CLOSE), (ANY_JOIN, CLOSE_JOIN)):
        add = jnp.stack([free_lp[..., any_c], free_lp[..., any_c], free_lp[..., close_c]], -1)[:, :, None, :]
        vals = srcs + add
        k = argmax(vals)
        tok = jnp.where(k == 2, free_tok[..., close_c][:, :, None], free_tok[..., any_c][:, :, None])
        free.append((jnp.max(vals, -1), masks[None, None, :, 0] + src_inner[k], tok))
    # a trailing piece after a phrase keeps its word open: finished stays finished, its mask unchanged
    trail_val = finished + free_lp[..., TRAIL][:, :, None]                   # [B, L, NM]

    # a phrase starts from a free state that did not end in a joining piece
    start_v = jnp.maximum(normal, finished)
    start_src = masks[None, None, :, 0] + jnp.where(normal >= finished, NORMAL, FINISHED)
    bits = (jnp.arange(NM)[:, None] >> jnp.arange(C)[None]) & 1              # [NM, C]
    todo = (bits == 0)[None, None]                                           # [1, 1, NM, C]
    lens4 = lens[:, None, None, :]                                           # [B, 1, 1, C]
    ph4 = ph[:, :, None]                                                     # [B, L, 1, C, P]
    tok4 = jnp.broadcast_to(phrases[:, None, None], (B, L, NM, C, P1 + 1))

    start = jnp.where(todo & (lens4 >= 2), start_v[..., None] + ph4[..., 0], NEG)        # [B, L, NM, C]
    cont = inside[..., :-1] + ph4[..., 1:P1]                                              # [B, L, NM, C, P1−1]
    q = jnp.arange(P1)
    new_inside = jnp.where(q + 1 < lens4[..., None], jnp.concatenate([start[..., None], cont], -1), NEG)
    own = masks[None, None, :, :, None] + INSIDE + jnp.arange(C)[:, None] * P1 + q - 1   # (c, q − 1)'s index
    inside_src = jnp.where(q == 0, start_src[..., None, None], own)
    inside_src = jnp.broadcast_to(inside_src, new_inside.shape)
    inside_tok = tok4[..., :P1]

    # a phrase finishes: its last token, from (c, |c| − 1), or from a free state when |c| = 1
    at_last = jnp.maximum(lens4 - 2, 0)
    before = jnp.take_along_axis(inside, jnp.broadcast_to(at_last[..., None], inside.shape[:-1] + (1,)), -1)[..., 0]
    last_lp = jnp.take_along_axis(ph, jnp.maximum(lens - 1, 0)[:, None, :, None], -1)[..., 0][:, :, None]  # [B,L,1,C]
    fin_from = jnp.where(lens4 == 1, start_v[..., None], before) + last_lp
    fin_from = jnp.where(todo & (lens4 >= 1), fin_from, NEG)                              # at the source mask
    fin_src = jnp.where(lens4 == 1, start_src[..., None],
                        masks[None, None] + INSIDE + jnp.arange(C) * P1 + at_last)
    xor = jnp.arange(NM)[:, None] ^ (1 << jnp.arange(C))[None]                            # [NM', C]: M' ^ c
    gather = lambda x: jnp.take_along_axis(x, jnp.broadcast_to(xor[None, None], x.shape[:2] + xor.shape), 2)  # noqa
    fin_to = jnp.where((bits == 1)[None, None], gather(fin_from), NEG)                    # [B, L, NM', C]
    c_best = argmax(fin_to)
    pick = lambda x: jnp.take_along_axis(x, c_best[..., None], -1)[..., 0]  # noqa: E731
    fin_val, fin_src = pick(fin_to), pick(gather(jnp.broadcast_to(fin_src, fin_from.shape)))
    fin_tok = pick(jnp.broadcast_to(jnp.take_along_axis(phrases, jnp.maximum(lens - 1, 0)[..., None], -1)[..., 0]
                                    [:, None, None], fin_to.shape))

    trailed = trail_val > fin_val
    fin_val = jnp.where(trailed, trail_val, fin_val)
    fin_src = jnp.where(trailed, masks[None, None, :, 0] + FINISHED, fin_src)
    fin_tok = jnp.where(trailed, free_tok[..., TRAIL][:, :, None], fin_tok)

    new = jnp.concatenate([free[0][0][..., None], fin_val[..., None], free[1][0][..., None],
                           new_inside.reshape(B, L, NM, C * P1)], -1)
    src = jnp.concatenate([free[0][1][..., None], inner(fin_src)[..., None], free[1][1][..., None],
                           inner(inside_src).reshape(B, L, NM, C * P1)], -1)
    tok = jnp.concatenate([free[0][2][..., None], fin_tok[..., None], free[1][2][..., None],
                           inside_tok.reshape(B, L, NM, C * P1)], -1)
    return new, src, tok


BLOCKS = 8  # `_best_predecessor` takes the vertices j in this many blocks, each over the predecessors before its end


def _best_predecessor(scores: jax.Array, links_to: jax.Array) -> jax.Array:
    """max_i scores[b, i, q] + links[b, i, j] for every vertex j: float32[B, L_j, Q] from scores float32[B, L_i, Q]
    and links_to float32[B, L_j, L_i] (the links transposed). The links are −inf unless i < j (the DAG's order), so a
    block of vertices j < hi reads only the predecessors i < hi: BLOCKS blocks do (BLOCKS + 1) / (2 · BLOCKS) of the
    whole square's work, with the same maxima. The reduced axis (i) is the minor one: XLA:CPU reduced [B, L_i, L_j,
    Q] over its second axis element by element, 30 times slower than over the last (docs/benchmarks.md)."""
    L = scores.shape[1]
    by_state = scores.swapaxes(1, 2)[:, :, None, :]                           # [B, Q, 1, L_i]
    ends = sorted({round(k * L / BLOCKS) for k in range(1, BLOCKS + 1)} - {0})  # fewer blocks in a smaller graph
    parts = [jnp.max(by_state[..., :hi] + links_to[:, None, lo:hi, :hi], axis=3)
             for lo, hi in zip([0] + ends[:-1], ends)]
    return jnp.concatenate(parts, axis=2).swapaxes(1, 2)


STORED_BYTES = 1 << 30  # the most the search keeps for its read-out at once: larger batches go in chunks of rows


def _states(C: int, P: int) -> tuple[int, int]:
    """(NM, NI): the bitmasks of done phrases and the inner states of each, for C phrases of P pieces (P ≥ 2)."""
    return 1 << C, INSIDE + C * (P - 1)


def constrained_decode(links: jax.Array, emit: jax.Array, n_vertices: jax.Array, phrases: jax.Array,
                       hard: jax.Array, allowed: jax.Array, width: int, beta: float, soft_reward: float,
                       continues=None, joins=None, trails=None, rows: int = 0, log_norm=None,
                       limit: jax.Array | None = None) -> dict:
    """The best path of at most its row's ``limit`` (int32[B], at most ``width``; None: ``width``) vertices that
    emits every phrase of a hard row (any order, each as a run of consecutive vertices), or, on a soft row, the
    best under a reward of ``soft_reward`` per phrase.

    links: float32[B, L, L]; emit: float32[B, L, V] log-probabilities, or logits with log_norm float32[B, L] their
    log-normalisers (the search normalises the few entries it reads of each vertex's row: no [B, L, V]
    log-probabilities are written); phrases: int32[B, C, P] PAD-padded (C ≤ MAX_PHRASES; an all-PAD phrase is
    absent); hard: bool[B]; allowed: bool[V], the tokens a free vertex may emit; continues, joins, trails: bool[V]
    or None (`word_glue`). Returns {'tokens' int32[B, width] ([BOS … EOS], PAD after), 'path' int32[B, width] (its
    vertices, −1 after), 'phrase' bool[B, width] (a constraint's token), 'score' float32[B] (log P(y, a | x), the
    reward left out), 'infeasible' int32[B] (a hard row no path satisfies, decoded as soft)}.

    The read-out needs every output slot's scores of every (vertex, state): W · L · Q values a row (at batch 64,
    40 source pieces, λ 8 and four phrases of 8 pieces, 3.2 GB). Rows are therefore searched in chunks (one after
    another, the same results) of ``rows`` rows, by default the most (a divisor of B) whose store fits
    `STORED_BYTES`."""
    B, L, _ = links.shape
    C, P = phrases.shape[1:]
    if C > MAX_PHRASES:
        raise ValueError(f"at most {MAX_PHRASES} constraint phrases a sentence, got {C}")
    P = max(P, 2)
    phrases = jnp.pad(phrases, ((0, 0), (0, 0), (0, P - phrases.shape[2])), constant_values=PAD_ID)
    NM, NI = _states(C, P)
    if not rows:
        per_row = (width - 1) * L * NM * NI * 4
        rows = max(d for d in range(1, B + 1) if B % d == 0 and (d == 1 or d * per_row <= STORED_BYTES))
    norm = jnp.zeros(links.shape[:2], emit.dtype) if log_norm is None else log_norm
    limit = jnp.full((B,), width, jnp.int32) if limit is None else limit
    search = lambda xs: _search(*xs, allowed, width, beta, soft_reward, continues, joins, trails)  # noqa: E731
    if rows >= B:
        return search((links, emit, norm, n_vertices, phrases, hard, limit))
    chunks = lambda x: x.reshape(B // rows, rows, *x.shape[1:])  # noqa: E731
    out = jax.lax.map(search, tuple(map(chunks, (links, emit, norm, n_vertices, phrases, hard, limit))))
    return {k: v.reshape(B, *v.shape[2:]) for k, v in out.items()}


def _search(links, emit, norm, n_vertices, phrases, hard, limit, allowed, width, beta, soft_reward, continues,
            joins, trails):
    """`constrained_decode` of one chunk of rows, phrases padded to P ≥ 2, emit less norm the log-probabilities."""
    B, L, _ = links.shape
    C, P = phrases.shape[1:]
    NM, NI = _states(C, P)
    lens = jnp.sum(phrases != PAD_ID, axis=2).astype(jnp.int32)              # [B, C]
    absent = jnp.sum(jnp.where(lens == 0, 1 << jnp.arange(C), 0), axis=1)   # the mask a row starts from
    n_absent = jnp.sum(lens == 0, axis=1)
    popcount = np.asarray([bin(m).count("1") for m in range(NM)], np.float32)
    free_lp, free_tok = _free_tables(emit, allowed, continues, joins, trails)
    free_lp = free_lp - norm[..., None]
    ph = jnp.take_along_axis(emit[:, :, None, :], phrases.reshape(B, 1, C * P, 1).swapaxes(2, 3), -1)
    ph = ph.reshape(B, L, C, P) - norm[..., None, None]                        # log P(phrase token | vertex)
    last = n_vertices - 1
    eos = _at(emit[..., EOS_ID] - norm, last)
    # every row's soft ends earn the reward: a hard row reads them only when infeasible, decoded as a soft one
    reward = soft_reward * (popcount[None] - n_absent[:, None])                 # [B, NM]

    start = jnp.full((B, L, NM, NI), NEG)
    start = start.at[jnp.arange(B), 0, absent, NORMAL].set(emit[:, 0, BOS_ID] - norm[:, 0])

    links_to = links.swapaxes(1, 2)                                           # [B, L_j, L_i]

    def step(delta, _):
        flat = delta.reshape(B, L, NM * NI)
        # the best predecessor's score only: its index (the back-pointer) is found again for the one state each
        # row's read-out visits (`walk`); an argmax over every state here was 97% of a step
        moved = _best_predecessor(flat, links_to)                             # [B, L_j, Q]
        at_last = jnp.take_along_axis(moved, last[:, None, None], 1)[:, 0].reshape(B, NM, NI)
        ends = jnp.max(at_last[..., :INSIDE], -1) + eos[:, None]            # [B, NM]: EOS from a free state
        end_inner = argmax(at_last[..., :INSIDE]).astype(jnp.int32)
        soft = ends + reward
        soft_m = argmax(soft).astype(jnp.int32)
        out = (flat, (_at(soft, soft_m), soft_m * NI + _at(end_inner, soft_m), _at(reward, soft_m)),
               (ends[:, NM - 1], (NM - 1) * NI + end_inner[:, NM - 1]))
        # the transition's sources and tokens are not kept: the read-out recomputes them at the one vertex it visits
        # (storing them as they were made cost as much as the maxima)
        new, _, _ = _transition(moved.reshape(B, L, NM, NI), free_lp, free_tok, ph, phrases, lens)
        return new, out

    _, ys = jax.lax.scan(step, start, None, length=width - 1)
    before, (soft_val, soft_q, soft_reward_got), (hard_val, hard_q) = ys     # each [W − 1, B, ...]
    lengths = jnp.arange(2, width + 1, dtype=jnp.float32)[:, None]           # M = step + 1 vertices
    fits = lengths <= limit[None]                                            # the row's own capacity
    hard_val, soft_val = (jnp.where(fits, v, -jnp.inf) for v in (hard_val, soft_val))
    norm = lengths ** beta
    hard_best = argmax((hard_val / norm).T).astype(jnp.int32)
    soft_best = argmax((soft_val / norm).T).astype(jnp.int32)
    feasible = jnp.isfinite(_at(hard_val.T, hard_best))
    use_hard = hard & feasible
    s_end = jnp.where(use_hard, hard_best, soft_best)                        # scan index of the EOS step
    q_end = jnp.where(use_hard, _at(hard_q.T, s_end), _at(soft_q.T, s_end))
    score = jnp.where(use_hard, _at(hard_val.T, s_end), _at(soft_val.T, s_end) - _at(soft_reward_got.T, s_end))

    rows = jnp.arange(B)

    def walk(carry, xs):
        v, q = carry                                                         # vertex and state at slot s + 1
        s, delta = xs
        at_end = s == s_end
        v = jnp.where(at_end, last, v)
        q = jnp.where(at_end, q_end, q)
        live = s <= s_end
        # the step's transition at vertex v alone: the same sums as the forward pass's, so the same choices
        u = jnp.maximum(v, 0)
        column = links[rows, :, u]                                           # [B, L_i]: links into v
        moved_v = jnp.max(delta + column[:, :, None], axis=1)               # [B, Q]
        _, src_v, tok_v = _transition(moved_v.reshape(B, 1, NM, NI), free_lp[rows, u][:, None],
                                      free_tok[rows, u][:, None], ph[rows, u][:, None], phrases, lens)
        token = jnp.where(at_end, EOS_ID, _at(tok_v.reshape(B, NM * NI), q))
        inner = q % NI
        q_prev = jnp.where(at_end, q, _at(src_v.reshape(B, NM * NI), q))
        # FINISHED is reached by a phrase's last token, which adds the phrase to the mask, or by a trailing piece,
        # which leaves it as it was
        is_phrase = ~at_end & (((inner == FINISHED) & (q_prev // NI != q // NI)) | (inner >= INSIDE))
        # the predecessor: the vertex i maximising the step's score of (i, q_prev) + links[i, v], as the step's max
        v_prev = argmax(delta[rows, :, q_prev] + column).astype(jnp.int32)
        out = (jnp.where(live, v, -1), jnp.where(live, token, PAD_ID), live & is_phrase)
        return (jnp.where(live, v_prev, v), jnp.where(live, q_prev, q)), out

    init = (jnp.zeros(B, jnp.int32), jnp.zeros(B, jnp.int32))
    _, (path, tokens, phrase) = jax.lax.scan(walk, init, (jnp.arange(width - 1), before), reverse=True)
    path = jnp.concatenate([jnp.zeros((B, 1), jnp.int32), path.T], axis=1)
    tokens = jnp.concatenate([jnp.full((B, 1), BOS_ID, jnp.int32), tokens.T], axis=1)
    phrase = jnp.concatenate([jnp.zeros((B, 1), bool), phrase.T], axis=1)
    return {"tokens": tokens, "path": path, "phrase": phrase, "score": score,
            "infeasible": (hard & ~feasible).astype(jnp.int32)}
