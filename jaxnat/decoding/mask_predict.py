"""Mask-predict decoding (Ghazvininejad et al. 2019) with a length beam, as one jit'd program.

For each sentence, ℓ candidate lengths n are read off the length classifier (``Options.length_beam``): the
ℓ most probable (Mask-Predict), or the argmax and its neighbours ``n* + k − ⌊ℓ/2⌋`` (fairseq's centred beam).
Each candidate is a canvas ``[BOS, MASK × n, EOS, PAD …]`` of fixed width L; the B·ℓ canvases decode together
(`candidates` picks the lengths first, so that the caller can make L as narrow as the longest one allows):

* pass 0 predicts every position (argmax token, its log-probability as the token's score);
* pass t = 1 … T−1 re-masks the ``⌊n · (T − t) / T⌋`` (at least one) lowest-scoring tokens — integer
  arithmetic, so 10 · 0.7 is 7, not 6 — and predicts them again; the other tokens keep their tokens and scores
  (Mask-Predict §3.2), or, with ``update_all`` (the CMLMC authors' decoder, what its correction loss trains
  for), every token not fixed by a constraint takes the pass's prediction and score as well.
  With ``stop_early`` a candidate stops at the first pass that changes none of its tokens (fairseq's adaptive
  decoding); otherwise all T passes run, as in the papers.

The candidate with the highest average token probability (BOS/EOS excluded; CMLMC §3.3) is the translation —
or, with ``by_probability`` off, the highest mean log-probability (the Mask-Predict code's rule) — or, with a
rescorer, the one an AR model scores best (its mean log-probability under teacher forcing). Each candidate's
tokens equal to the one before them are counted (``repeats``); with ``dedup`` (the NAT papers' post-processing)
they are also removed, before the candidate is picked. Passes 1 … T−1 run in one ``lax.while_loop``; nothing
returns to the host until the end.

**Lexical constraints** (no published mask-predict system has them; docs/cmlm.md): after pass 0, the phrases
are placed where pass 0's distributions score them best — as many as fit, non-overlapping, with the highest
summed log-probability, in any order (``any_order``) or in the given one, found exactly by a dynamic program
over (position, set of phrases placed) (`place_phrases`). Placed tokens are never re-masked: a mask-predict
model cannot delete a word, and re-masking a word it did not choose gives it back its own choice (docs/cmlm.md).
Hard constraints: candidate lengths are raised to their total length, so every phrase is placed and appears
whole in every output whatever the model predicts, and (with a ``continues`` table) no piece that would extend
a word follows one, nor (with a ``joins`` table: BPE's "@@") one that would glue the next piece onto its word
precedes one, so it also stays a word (punctuation may follow it, but then no piece that extends a word:
`jaxnat.decoding.words`). Soft constraints: the predicted lengths stay, the phrases that
fit are placed, and a word may glue onto one.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxnat.argmax import argmax
from jaxnat.data.vocab import BOS_ID, EOS_ID, MASK_ID, PAD_ID
from jaxnat.decoding import words
from jaxnat.decoding.refine import length_cap
from jaxnat.edit_ops.compaction import compact

LENGTH_CLASSES = 256
LENGTH_OFFSET = 128  # with a length_offset section key (cmlm, nat), class = n_tgt − n_src + 128
NEG = -1e9           # a log-probability no placement reaches (finite, so that sums stay ordered)


class Options(NamedTuple):
    iterations: int = 10        # T, decoder passes per candidate
    length_beam: int = 3        # ℓ candidate lengths per sentence
    centred: bool = False       # fairseq's n* + k − ⌊ℓ/2⌋ instead of the ℓ most probable lengths
    length_offset: bool = False  # length classes are n_tgt − n_src + 128
    length_with_ends: bool = False  # length classes count BOS and EOS: n_tgt + 2 (fairseq's, without the offset)
    any_order: bool = True      # constraint phrases may be placed in any order
    stop_early: bool = False    # a candidate stops at a pass that changes nothing
    by_probability: bool = True  # pick the candidate of highest mean token probability (CMLMC §3.3), else of
                                 # highest mean log-probability (Mask-Predict's code)
    cap_min: int = 10           # n ≤ max(cap_min, cap_ratio · source length incl. BOS/EOS) − 2
    cap_ratio: float = 2.0
    dedup: bool = False         # remove each token equal to the one before it from the finished candidates
                                # (the NAT papers' post-processing), before one is picked
    update_all: bool = False    # passes 1 … T−1 also revise the tokens they did not re-mask (the CMLMC code)
    rules: str = "jaxnat"       # eval.search_rules: "fairseq" decodes unconstrained requests as fairseq does
                                # (`jaxnat.decoding.mask_predict_fairseq`)


def length_classes(n_tgt: jax.Array, n_src: jax.Array, offset: bool, with_ends: bool = False) -> jax.Array:
    """int32[B]: the length class of n_tgt real target tokens (n_src real source tokens), clipped to 0 … 255:
    n_tgt − n_src + 128 with ``offset``, else n_tgt, or n_tgt + 2 ``with_ends`` (BOS and EOS counted, fairseq)."""
    cls = n_tgt - n_src + LENGTH_OFFSET if offset else n_tgt + (2 if with_ends else 0)
    return jnp.clip(cls, 0, LENGTH_CLASSES - 1).astype(jnp.int32)


def candidate_lengths(length_logits: jax.Array, n_src: jax.Array, low: jax.Array, high: jax.Array,
                      options: Options) -> jax.Array:
    """int32[B, ℓ] candidate target lengths (real tokens), each clipped to [low, high] (int32[B]; low wins).

    length_logits: float32[B, 256]; n_src: int32[B] real source tokens. Ties between classes: lower class first.
    """
    beam = options.length_beam
    if options.centred:
        classes = jnp.argmax(length_logits, axis=-1)[:, None] + jnp.arange(beam)[None, :] - beam // 2
    else:
        classes = lax.top_k(length_logits, beam)[1]
    n = classes + n_src[:, None] - LENGTH_OFFSET if options.length_offset else classes - 2 * options.length_with_ends
    return jnp.maximum(jnp.minimum(n, high[:, None]), low[:, None]).astype(jnp.int32)


def remask_count(n: jax.Array, t, iterations: int) -> jax.Array:
    """int32[R]: tokens re-masked before pass t (1 ≤ t < T) of a candidate with n real tokens: ⌊n(T−t)/T⌋, ≥ 1."""
    return jnp.maximum((n * (iterations - t)) // iterations, 1)


def lowest(scores: jax.Array, free: jax.Array, count: jax.Array) -> jax.Array:
    """bool[R, L]: the ``count`` (int32[R]) free positions of lowest score (ties: leftmost first); all free ones
    when there are fewer. scores: float32[R, L]; free: bool[R, L]."""
    order = jnp.argsort(jnp.where(free, scores, jnp.inf), axis=1, stable=True)
    rank = jnp.argsort(order, axis=1)
    return free & (rank < count[:, None])


# ---------------------------------------------------------------------------------------- constraints

def phrase_scores(logits: jax.Array, phrases: jax.Array, n: jax.Array, lse: jax.Array | None = None) -> jax.Array:
    """float32[R, C, L]: the summed log-probability of phrase c with its first piece at position i, NEG where
    it does not fit in positions 1 … n. logits: float32[R, L, V], log-probabilities, or logits with their
    per-position logsumexp ``lse`` float32[R, L] (log-probabilities are then only formed for the phrase pieces);
    phrases: int32[R, C, P] PAD-padded; n: int32[R]."""
    r, length, _ = logits.shape
    _, c, p = phrases.shape
    picked = jnp.take_along_axis(logits, jnp.broadcast_to(phrases.reshape(r, 1, c * p), (r, length, c * p)), axis=2)
    if lse is not None:
        picked = picked - lse[:, :, None]
    picked = jnp.maximum(picked, -1e4)  # a reserved id at -inf must not turn a sum into nan
    picked = jnp.pad(picked.reshape(r, length, c, p), ((0, 0), (0, p), (0, 0), (0, 0)))
    real = phrases != PAD_ID
    total = sum(jnp.where(real[:, None, :, j], picked[:, j:j + length, :, j], 0.0) for j in range(p))  # [R, L, C]
    size = jnp.sum(real, axis=2)                                                                      # [R, C]
    pos = jnp.arange(length)[None, None, :]
    fits = (pos >= 1) & (pos + size[:, :, None] - 1 <= n[:, None, None])
    return jnp.where(fits, jnp.moveaxis(total, 1, 2), NEG)


def place_phrases(logits: jax.Array, phrases: jax.Array, n: jax.Array, any_order: bool,
                  lse: jax.Array | None = None) -> jax.Array:
    """int32[R, C]: the first position of each phrase in the best placement (−1 for an empty or unplaced
    phrase). logits, lse: as `phrase_scores`.

    The placement holds as many phrases as fit in positions 1 … n without overlapping (in the given order
    unless ``any_order``) — all of them when their total length is at most n — and among those maximises the
    summed log-probability of their pieces. Exact: f[i, S] = best score with the phrases of the set S placed
    inside positions 1 … i, f[i, S] = max(f[i−1, S], max_{c ∈ S} f[i − |c|, S∖c] + score(c, i − |c| + 1)), a
    ``lax.scan`` over positions with a [R, 2^C] state, then a backtrace from the best S. Needs C ≤ 8 phrases.
    """
    r, length, _ = logits.shape
    _, c, p = phrases.shape
    if c > 8:
        raise ValueError(f"mask-predict places at most 8 constraint phrases per sentence, got {c}")
    k = 1 << c
    scores = phrase_scores(logits, phrases, n, lse)                      # [R, C, L]
    size = jnp.sum(phrases != PAD_ID, axis=2).astype(jnp.int32)          # [R, C]
    bit = 1 << jnp.arange(c)
    empty_set = jnp.sum(jnp.where(size == 0, bit, 0), axis=1)           # [R] empty phrases count as placed
    sets = jnp.arange(k)
    has = (sets[None, :, None] & bit[None, None, :]) > 0                 # [1, K, C]: c ∈ S
    allowed = has & (size[:, None, :] > 0)                               # [R, K, C]
    if not any_order:  # phrases are added left to right: c only right of phrases that come before it
        after = (jnp.arange(c)[None, :] > jnp.arange(c)[:, None])[None] & (size > 0)[:, None, :]      # [R, C, C]
        later = jnp.sum(jnp.where(after, bit[None, None, :], 0), axis=2)                                # [R, C]
        allowed = allowed & ((sets[None, :, None] & later[:, None, :]) == 0)
    without = sets[:, None] ^ bit[None, :]                               # [K, C]: S ∖ c

    f0 = jnp.where(sets[None, :] == empty_set[:, None], 0.0, NEG)        # [R, K]
    history = jnp.broadcast_to(f0[:, None, :], (r, p + 1, k))            # history[:, j] = f[i − 1 − j]

    def step(history, i):
        back = jnp.take_along_axis(history, jnp.clip(size - 1, 0, p)[:, :, None], axis=1)      # [R, C, K]
        start = i - size + 1                                                                      # [R, C]
        gain = jnp.take_along_axis(scores, jnp.clip(start, 0, length - 1)[:, :, None], axis=2)[..., 0]
        gain = jnp.where(start >= 1, gain, NEG)
        prev = jnp.take_along_axis(back, jnp.broadcast_to(without.T[None], (r, c, k)), axis=2)   # [R, C, K]
        cand = jnp.where(jnp.moveaxis(allowed, 1, 2), prev + gain[:, :, None], 2 * NEG)          # [R, C, K]
        best_c = jnp.argmax(cand, axis=1)
        best = jnp.max(cand, axis=1)
        stay = history[:, 0]
        take = best > stay
        f = jnp.where(take, best, stay)
        history = jnp.concatenate([f[:, None], history[:, :-1]], axis=1)
        return history, jnp.where(take, best_c, -1).astype(jnp.int8)

    history, choice = lax.scan(step, history, jnp.arange(1, length))     # choice: [L−1, R, K] for i = 1 … L−1
    # the most phrases that fit, then the best score
    final = history[:, 0]                                               # f[L−1, S]: [R, K]
    placed_count = jnp.where(final > NEG / 2, jnp.sum(has[0] & (size[:, None, :] > 0), axis=2), -1)  # [R, K]
    most = placed_count == jnp.max(placed_count, axis=1, keepdims=True)
    goal = jnp.argmax(jnp.where(most, final, 2 * NEG), axis=1)

    def back_step(_, state):
        i, s, starts = state
        live = (i >= 1) & (s != empty_set)
        pick = choice[jnp.clip(i - 1, 0, length - 2), jnp.arange(r), s].astype(jnp.int32)
        placed = live & (pick >= 0)
        cc = jnp.maximum(pick, 0)
        sz = jnp.take_along_axis(size, cc[:, None], axis=1)[:, 0]
        starts = jnp.where(placed[:, None] & (jnp.arange(c)[None, :] == cc[:, None]), (i - sz + 1)[:, None], starts)
        s = jnp.where(placed, s ^ (1 << cc), s)
        i = jnp.where(placed, i - sz, jnp.where(live, i - 1, i))
        return i, s, starts

    init = (jnp.full((r,), length - 1), goal, jnp.full((r, c), -1))
    _, _, starts = lax.fori_loop(0, length - 1, back_step, init)
    return starts.astype(jnp.int32)


def write_phrases(tokens: jax.Array, phrases: jax.Array, starts: jax.Array) -> tuple[jax.Array, jax.Array]:
    """tokens: int32[R, L] with each phrase (int32[R, C, P]) written from its start (int32[R, C], −1 = not
    placed) → (tokens, placed bool[R, L])."""
    r, length = tokens.shape
    _, c, p = phrases.shape
    pos = starts[:, :, None] + jnp.arange(p)[None, None, :]
    ok = (starts[:, :, None] >= 0) & (phrases != PAD_ID)
    pos = jnp.where(ok, pos, length).reshape(r, c * p)  # out of range: dropped
    rows = jnp.broadcast_to(jnp.arange(r)[:, None], pos.shape)
    tokens = tokens.at[rows, pos].set(phrases.reshape(r, c * p), mode="drop")
    placed = jnp.zeros((r, length), bool).at[rows, pos].set(True, mode="drop")
    return tokens, placed


# ---------------------------------------------------------------------------------------- the loop

def canvases(n: jax.Array, width: int) -> jax.Array:
    """int32[R, width] rows [BOS, MASK × n, EOS, PAD …] for n: int32[R]."""
    pos = jnp.arange(width)[None, :]
    n = n[:, None]
    return jnp.where(pos == 0, BOS_ID, jnp.where(pos <= n, MASK_ID, jnp.where(pos == n + 1, EOS_ID, PAD_ID)))


def repeats_of(tokens: jax.Array) -> jax.Array:
    """bool[R, L]: the tokens of [BOS … EOS, PAD …] rows (int32[R, L]) equal to the one right before them (never
    BOS, EOS or PAD)."""
    prev = jnp.pad(tokens[:, :-1], ((0, 0), (1, 0)), constant_values=PAD_ID)
    return (tokens == prev) & (tokens != BOS_ID) & (tokens != EOS_ID) & (tokens != PAD_ID)


def remove_repeats(tokens: jax.Array) -> tuple[jax.Array, jax.Array]:
    """tokens: int32[R, L] [BOS … EOS, PAD …] rows → (the rows without every token equal to the one right
    before it, compacted; int32[R] how many were removed). BOS, EOS and PAD are never removed."""
    repeat = repeats_of(tokens)
    out, _ = compact(tokens, ~repeat, PAD_ID)
    return out, jnp.sum(repeat, axis=1, dtype=jnp.int32)


def unglued(logits: jax.Array, after: jax.Array | None, continues: jax.Array | None, before: jax.Array | None = None,
            joins: jax.Array | None = None) -> jax.Array:
    """logits: float32[R, L, V] with the pieces that would continue a word (continues: bool[V]) at -inf where
    ``after`` (bool[R, L]: right after a hard constraint), and those that would glue the next piece onto their
    word (joins: bool[V], BPE's "@@") where ``before`` (right before one) — so the constraint stays a whole word."""
    if after is not None and continues is not None:
        logits = jnp.where(after[..., None] & continues, -jnp.inf, logits)
    if before is not None and joins is not None:
        logits = jnp.where(before[..., None] & joins, -jnp.inf, logits)
    return logits


def choose(logits: jax.Array, tokens, scores, masked):
    """The masked positions take the argmax token of logits (float32[R, L, V]) and its log-probability, max −
    logsumexp: no log-softmax of [R, L, V] is formed. Returns (tokens, scores, the logsumexp float32[R, L])."""
    lse = jax.nn.logsumexp(logits, axis=-1)
    best = argmax(logits).astype(tokens.dtype)
    best_logp = jnp.max(logits, axis=-1) - lse
    return jnp.where(masked, best, tokens), jnp.where(masked, best_logp, scores), lse


def whole_words(logits, tokens, scores, masked, written, in_phrase, last, continues, trails):
    """`choose` at the ``masked`` positions, repaired so that nothing glues onto a hard phrase's word
    (`words.keep_whole`; any position of ``written`` ⊇ masked may be chosen again under a tighter rule: re-choosing
    one with the same logits and no rule gives its token back). Returns (tokens, scores)."""
    def again(level):
        return choose(words.restrict(logits, level, continues, trails), tokens, scores, written)[:2]
    return words.keep_whole(again, choose(logits, tokens, scores, masked)[:2], written, in_phrase, last,
                            continues, trails)


def candidates(length_logits: jax.Array, src: jax.Array, constraints: jax.Array | None, hard: jax.Array | None,
               capacity: int, options: Options) -> jax.Array:
    """int32[B, ℓ]: the lengths (real tokens) of each sentence's candidates, at most what a canvas of
    ``capacity`` holds within the source's `refine.length_cap`, at least 1 and, with hard constraints, their
    total length. length_logits: float32[B, 256]; src: int32[B, S]; constraints: int32[B, C, P] or None;
    hard: bool[B] or None."""
    n_src = jnp.sum(src != PAD_ID, axis=1) - 2
    cap = length_cap(src, capacity, options) - 2
    need = jnp.zeros(src.shape[:1], jnp.int32)  # hard constraints always fit: the length beam makes room for them
    if constraints is not None and hard is not None:
        need = jnp.where(hard, jnp.sum(constraints != PAD_ID, axis=(1, 2)), 0)
    return candidate_lengths(length_logits.astype(jnp.float32), n_src, jnp.maximum(need, 1), cap, options)


def decode(token_logits: Callable, lengths: jax.Array, src: jax.Array, constraints: jax.Array | None,
           hard: jax.Array | None, capacity: int, options: Options, continues: jax.Array | None = None,
           rescore: Callable | None = None, joins: jax.Array | None = None, trails: jax.Array | None = None) -> dict:
    """Mask-predict over a batch. token_logits(tokens int32[R, L], rows_of int32[R]) → float32[R, L, V] logits
    (or log-probabilities) with the reserved ids at -inf (rows_of: each canvas's sentence). lengths: int32[B, ℓ]
    the candidates' lengths (`candidates`, perhaps for a wider canvas: any ``capacity`` that holds n + 2
    decodes the same translations, a narrower one at less cost); src: int32[B, S]; constraints: int32[B, C, P]
    or None; hard: bool[B] or None; continues: bool[V], the pieces that would extend the word before them, never
    put right after a hard constraint (None: every piece is a word); rescore(tokens int32[R, L], rows_of) →
    float32[R]: another model's score of each finished candidate, which then picks the translation (an AR
    rescorer), or None; joins: bool[V], the pieces that glue the next one onto their word (BPE's "@@"), never put
    right before a hard constraint (None: none); trails: bool[V], punctuation, after which a constraint's word is
    still open to ``continues`` pieces (`jaxnat.decoding.words`; None: none).

    Returns per sentence ``tokens`` int32[B, capacity], ``score`` float32[B] (mean token log-probability),
    ``length`` int32[B] (real tokens, before ``dedup``), ``iterations`` int32[B] (passes run) and ``repeats``
    int32[B] (tokens equal to the one before them: those ``dedup`` removes), of the best candidate, and aligned
    with its tokens ``token_scored`` bool[B, capacity], the tokens the model chose (every real token but the
    constraint tokens placed for it), and ``token_logp`` float32[B, capacity], the log-probability each of those
    had when the pass that last wrote it chose it (0.0 elsewhere: BOS, EOS, PAD, placed constraint tokens).
    """
    b, beam, steps = src.shape[0], options.length_beam, options.iterations

    def logits_of(tokens, rows_of):  # every score in float32, whatever the model's compute dtype
        return token_logits(tokens, rows_of).astype(jnp.float32)

    n = lengths.reshape(b * beam)
    rows_of = jnp.repeat(jnp.arange(b), beam)
    tokens = canvases(n, capacity)
    real = (tokens != BOS_ID) & (tokens != EOS_ID) & (tokens != PAD_ID)
    logits = logits_of(tokens, rows_of)
    tokens, scores, lse = choose(logits, tokens, jnp.zeros(tokens.shape, jnp.float32), real)

    fixed, after, before = jnp.zeros(tokens.shape, bool), None, None
    in_phrase = last = None  # the hard phrases' pieces, their last pieces
    if constraints is not None:
        phrases = constraints[rows_of]
        starts = place_phrases(logits, phrases, n, options.any_order, lse)
        tokens, fixed = write_phrases(tokens, phrases, starts)
        scores = jnp.where(fixed, jnp.take_along_axis(logits, tokens[..., None], axis=2)[..., 0] - lse, scores)
        if hard is not None:
            free = ~fixed & real & hard[rows_of][:, None]
            after = jnp.pad(fixed[:, :-1], ((0, 0), (1, 0))) & free
            before = jnp.pad(fixed[:, 1:], ((0, 0), (0, 1))) & free
            in_phrase = fixed & hard[rows_of][:, None]
            last = in_phrase & ~jnp.pad(in_phrase[:, 1:], ((0, 0), (0, 1)))
            # pass 0 chose the words beside a constraint before knowing it would be there: choose again
            logits = unglued(logits, after, continues, before, joins)
            tokens, scores = whole_words(logits, tokens, scores, after | before, free, in_phrase, last,
                                         continues, trails)

    state = {"tokens": tokens, "scores": scores, "t": jnp.ones((), jnp.int32),
             "done": jnp.zeros((b * beam,), bool), "iterations": jnp.ones((b * beam,), jnp.int32)}

    def cond(s):
        return (s["t"] < steps) & ~jnp.all(s["done"])

    def body(s):
        active = ~s["done"]
        free = real & ~fixed & active[:, None]
        masked = lowest(s["scores"], free, remask_count(n, s["t"], steps))
        logits = unglued(logits_of(jnp.where(masked, MASK_ID, s["tokens"]), rows_of), after, continues, before, joins)
        written = free if options.update_all else masked
        if in_phrase is None:
            tokens, scores, _ = choose(logits, s["tokens"], s["scores"], written)
        else:
            tokens, scores = whole_words(logits, s["tokens"], s["scores"], written, written, in_phrase, last,
                                         continues, trails)
        changed = jnp.any(tokens != s["tokens"], axis=1)
        done = s["done"] | (active & ~changed) if options.stop_early else s["done"]
        return {"tokens": tokens, "scores": scores, "t": s["t"] + 1, "done": done,
                "iterations": s["iterations"] + active}

    final = lax.while_loop(cond, body, state)
    def mean(values):
        return jnp.sum(jnp.where(real, values, 0.0), axis=1) / jnp.maximum(n, 1)

    tokens, scored = final["tokens"], real & ~fixed
    token_logp = jnp.where(scored, final["scores"], 0.0)
    repeat = repeats_of(tokens)  # counted whether or not they are removed
    if options.dedup:  # each kept token keeps its log-probability
        tokens, (token_logp, scored) = compact(tokens, ~repeat, PAD_ID, (token_logp, scored))
    repeats = jnp.sum(repeat, axis=1, dtype=jnp.int32)
    pick_by = mean(jnp.exp(final["scores"])) if options.by_probability else mean(final["scores"])
    if rescore is not None:
        pick_by = rescore(tokens, rows_of).astype(jnp.float32)
    best = jnp.argmax(pick_by.reshape(b, beam), axis=1)
    pick = jnp.arange(b) * beam + best
    return {"tokens": tokens[pick], "score": mean(final["scores"])[pick], "length": n[pick],
            "iterations": final["iterations"][pick], "repeats": repeats[pick], "token_logp": token_logp[pick],
            "token_scored": scored[pick]}

