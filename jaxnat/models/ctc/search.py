"""Decoding the CTC frames without constraints: the greedy best path collapsed, a CTC prefix beam search, and
sampled paths.

Both read per-frame log-probabilities ``log_probs`` float32[B, T, V] (reserved ids already at NEG) of rows of
``frames`` int32[B] frames, the blank's id ``blank``, and write [BOS … EOS] rows of a fixed width W.

* greedy (`best_path`): the argmax at every frame — the most probable single path — then collapsed: repeats
  merged, blanks dropped (`collapse`). Its score is the path's log-probability.
* prefix beam search (`prefix_beam`; Graves 2012, Hannun et al. 2014): K output prefixes, each with the
  probability of every path that collapses to it so far, split by whether the path ends in a blank (p_b) or in
  the prefix's last label (p_nb). Frame t extends a prefix by a label c with p(c): from p_b + p_nb when c differs
  from its last label, from p_b only when it is the same (after a blank a repeated label is a new token), and
  keeps it with p_b' = (p_b + p_nb)·p(∅), p_nb' = p_nb·p(last). An extension equal to a kept prefix is merged into
  it (found by two rolling hashes of the prefixes, with their lengths). The K best by p_b + p_nb go on; each frame
  tries the K most probable labels (all of them when V − 1 ≤ K). The result is the best prefix's total
  probability, summed over its alignments — so a wide enough beam finds the most probable *collapsed string*,
  which the best single path need not be. One `lax.scan` over frames.
* with an n-gram LM (shallow fusion, as Gu & Kong 2021 decode with `ctcdecode`): the prefixes are ranked by
  log P(prefix) + α ln P_lm(prefix) + β |prefix| (α, β: `ctc.lm_weight`, `ctc.lm_bonus`; ln, not KenLM's log10, as
  ctcdecode converts it), each prefix carrying its LM state; the outputs by the same with the LM's ``</s>``. The
  scores reported stay the model's log P.
* with ``no_repeat`` n > 0 (eval.no_repeat_ngram) no prefix extends by a label that would complete an n-gram it
  already holds, BOS included, and with ``no_consecutive`` k > 0 (eval.no_consecutive_repeat) by one repeating its
  last m labels, m ≤ k (`repeats.bans`, the AR searches' rules): the search is over the strings that repeat none.
* sampling (`sample_paths`, eval.sampling): every frame's label drawn from its own distribution, tempered and cut
  as the autoregressive model's steps are (`search.truncate`), then collapsed. The frames are independent given
  the source, so without temperature or cuts this draws a path from P(a | x) itself, and its collapse a string
  from P(y | x). Its score is the path's log-probability, as greedy's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxnat.argmax import argmax
from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID
from jaxnat.decoding import ngram, repeats
from jaxnat.decoding.search import Sampling, cumulative, draw, truncate
from jaxnat.models.ctc.lattice import NEG


def new_tokens(labels: jax.Array, frames: jax.Array, blank: int) -> jax.Array:
    """bool[B, T]: the frames whose label starts an output token: not blank, not PAD, within the row, and not
    the previous frame's label (merged repeats)."""
    t = jnp.arange(labels.shape[1])[None, :]
    previous = jnp.pad(labels, ((0, 0), (1, 0)), constant_values=blank)[:, :-1]
    return (labels != blank) & (labels != PAD_ID) & (t < frames[:, None]) & (labels != previous)


def write_rows(ids: jax.Array, keep: jax.Array, token_logp: jax.Array, scored: jax.Array,
               width: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The kept entries of ``ids`` int32[B, L] (``keep`` bool[B, L]) in order as [BOS … EOS] rows int32[B, W], with
    their ``token_logp`` float32[B, L] and ``scored`` bool[B, L] moved alike (0.0 / False at BOS, EOS, PAD). A row
    with more than W − 2 kept entries keeps its first W − 2."""
    b = ids.shape[0]
    slot = jnp.cumsum(keep, axis=1, dtype=jnp.int32)           # 1-based output position of each kept entry
    fits = keep & (slot <= width - 2)
    where = jnp.where(fits, slot, width)                          # out of range: dropped by the scatter
    rows = jnp.arange(b)[:, None]
    tokens = jnp.full((b, width), PAD_ID, jnp.int32).at[rows, where].set(ids.astype(jnp.int32), mode="drop")
    logp = jnp.zeros((b, width), jnp.float32).at[rows, where].set(token_logp, mode="drop")
    mark = jnp.zeros((b, width), bool).at[rows, where].set(scored, mode="drop")
    count = jnp.sum(fits, axis=1, dtype=jnp.int32)
    tokens = tokens.at[:, 0].set(BOS_ID).at[jnp.arange(b), count + 1].set(EOS_ID)
    return tokens, logp, mark


def collapse(labels: jax.Array, frames: jax.Array, log_probs_of_labels: jax.Array, width: int, blank: int,
             placed: jax.Array | None = None) -> tuple[jax.Array, jax.Array, jax.Array]:
    """A path's frame labels int32[B, T] → (tokens int32[B, W], token_logp float32[B, W], token_scored bool[B, W]):
    repeats merged, blanks dropped. Each token's log-probability is its first frame's (``log_probs_of_labels``
    float32[B, T]); tokens whose first frame is ``placed`` (bool[B, T], a hard constraint's) are not scored."""
    keep = new_tokens(labels, frames, blank)
    scored = keep if placed is None else keep & ~placed
    return write_rows(labels, keep, jnp.where(scored, log_probs_of_labels, 0.0), scored, width)


def best_path(log_probs: jax.Array, frames: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(labels int32[B, T] the argmax at each frame, float32[B, T] their log-probabilities, float32[B] the path's
    log-probability over the row's frames)."""
    labels = argmax(log_probs)
    picked = jnp.max(log_probs, axis=-1)
    inside = jnp.arange(log_probs.shape[1])[None, :] < frames[:, None]
    return labels, picked, jnp.sum(jnp.where(inside, picked, 0.0), axis=1)


def sample_paths(log_probs: jax.Array, frames: jax.Array, keys: jax.Array,
                 sampling: Sampling) -> tuple[jax.Array, jax.Array, jax.Array]:
    """K sampled paths a sentence (keys: uint32[B, K, 2], one a sample, `search.sample_keys`): (labels int32[B, K, T],
    each frame's label drawn from ``sampling``'s cut of its log-probabilities; float32[B, K, T] their
    log-probabilities under the model; float32[B, K] each path's log-probability over the row's frames). The cut and
    its cumulative distribution are made once; a sample then draws one uniform number a frame (`search.draw`: the
    Gumbel-max trick would draw a number for every label of every frame of every sample, most of the time of a
    16-sample Multi30k decoding), the samples one after another (`lax.map`)."""
    b, t, _ = log_probs.shape
    cut = truncate(log_probs.reshape(b * t, -1), sampling).reshape(log_probs.shape)
    cdf = cumulative(cut)                                                       # [B, T, V]
    inside = jnp.arange(t)[None, :] < frames[:, None]

    def one(sample_keys):  # uint32[B, 2] → the B paths of one sample
        frame_keys = jax.vmap(lambda key: jax.vmap(lambda i: jax.random.fold_in(key, i))(jnp.arange(t)))(sample_keys)
        labels = jax.vmap(jax.vmap(draw))(cdf, frame_keys)
        picked = jnp.take_along_axis(log_probs, labels[..., None], axis=2)[..., 0]
        return labels, picked, jnp.sum(jnp.where(inside, picked, 0.0), axis=1)

    labels, picked, score = jax.lax.map(one, jnp.moveaxis(keys, 1, 0))
    return jnp.moveaxis(labels, 0, 1), jnp.moveaxis(picked, 0, 1), score.T


# two multipliers of the rolling prefix hashes (NumPy scalars: a module constant must not start JAX's backend, which
# a multi-process run initialises itself after the imports)
_HASH = (np.uint32(1000003), np.uint32(2654435761))


def prefix_beam(log_probs: jax.Array, frames: jax.Array, beam: int, width: int, blank: int, nbest: int = 1,
                lm: ngram.NgramLM | None = None, lm_weight: float = 0.0, lm_bonus: float = 0.0,
                no_repeat: int = 0, no_consecutive: int = 0) -> dict:
    """CTC prefix beam search (the module's docstring) → {'tokens': int32[B, W], 'score': float32[B] the best
    prefix's log-probability summed over its alignments, 'token_logp': float32[B, W] each token's frame
    log-probability when it was appended, 'token_scored': bool[B, W]}, and with nbest > 1 (static, at most beam)
    the nbest most probable prefixes kept at the end, 'nbest_tokens': int32[B, N, W] and 'nbest_score':
    float32[B, N], best first (-inf where fewer prefixes were kept). lm: an n-gram LM fused into the ranking
    (the module's docstring), or None. no_repeat, no_consecutive: the repeats no prefix holds (the module's
    docstring; 0: off; static)."""
    b, t_max, v = log_probs.shape
    k, room = beam, width - 2
    m = min(beam, v - 1)                                       # labels tried per frame (the blank apart)
    lp = jnp.moveaxis(log_probs.astype(jnp.float32), 1, 0)    # [T, B, V]
    start = dict(tokens=jnp.zeros((b, k, room), jnp.int32), logp=jnp.zeros((b, k, room), jnp.float32),
                 length=jnp.where(jnp.arange(k) == 0, 0, -1)[None].repeat(b, 0).astype(jnp.int32),
                 last=jnp.full((b, k), -1, jnp.int32),
                 pb=jnp.where(jnp.arange(k) == 0, 0.0, NEG)[None].repeat(b, 0).astype(jnp.float32),
                 pnb=jnp.full((b, k), NEG, jnp.float32),
                 h1=jnp.zeros((b, k), jnp.uint32), h2=jnp.zeros((b, k), jnp.uint32))
    if lm is not None:  # each prefix's LM state and α ln P_lm + β |prefix|
        start.update(lm_state=ngram.start(lm, (b, k)), lm=jnp.zeros((b, k), jnp.float32))

    def frame(state, xs):
        lp_t, t = xs                                               # [B, V], []
        alive = state["length"] >= 0                               # [B, K]
        total = jnp.logaddexp(state["pb"], state["pnb"])
        p_blank = lp_t[:, blank][:, None]
        last_lp = jnp.take_along_axis(lp_t, jnp.maximum(state["last"], 0), axis=1)
        stay_pb = jnp.where(alive, total + p_blank, NEG)
        stay_pnb = jnp.where(alive & (state["length"] > 0), state["pnb"] + last_lp, NEG)
        # extensions: the m most probable labels of the frame, the blank apart
        values, labels = lax.top_k(lp_t.at[:, blank].set(-jnp.inf), m)          # [B, M]
        same = labels[:, None, :] == state["last"][:, :, None]                   # [B, K, M]
        ext = jnp.where(same, state["pb"][:, :, None], total[:, :, None]) + values[:, None, :]
        ext = jnp.where((alive & (state["length"] < room))[:, :, None], ext, NEG)
        if no_repeat or no_consecutive:  # the labels that would repeat their prefix (BOS first) extend nothing
            history = jnp.concatenate([jnp.full((b, k, 1), BOS_ID, jnp.int32), state["tokens"]], axis=2)
            bans = repeats.bans(history.reshape(b * k, room + 1), jnp.maximum(state["length"], 0).reshape(-1),
                                no_repeat, no_consecutive)
            blocked = repeats.banned(jnp.broadcast_to(labels[:, None, :], (b, k, m)).reshape(b * k, m), bans)
            ext = jnp.where(blocked.reshape(b, k, m), NEG, ext)
        h1 = state["h1"][:, :, None] * _HASH[0] + (labels[:, None, :] + 1).astype(jnp.uint32)
        h2 = (state["h2"][:, :, None] ^ (labels[:, None, :] + 1).astype(jnp.uint32)) * _HASH[1]
        # an extension equal to a kept prefix (one longer) adds to that prefix's p_nb instead
        match = ((h1[..., None] == state["h1"][:, None, None, :]) & (h2[..., None] == state["h2"][:, None, None, :])
                 & ((state["length"][:, :, None, None] + 1) == state["length"][:, None, None, :])
                 & alive[:, None, None, :])                                         # [B, K, M, K]
        into = jnp.where(match, ext[..., None], NEG)
        stay_pnb = jnp.logaddexp(stay_pnb, jax.nn.logsumexp(into.reshape(b, k * m, k), axis=1))
        ext = jnp.where(jnp.any(match, axis=-1), NEG, ext)
        # the K best of K kept prefixes and K·M extensions
        scores = jnp.concatenate([jnp.logaddexp(stay_pb, stay_pnb), ext.reshape(b, k * m)], axis=1)
        if lm is not None:  # ranked with the LM's score; the prefixes' own probabilities stay the model's
            lm_lp, lm_state = ngram.advance(lm, state["lm_state"][:, :, None], labels[:, None, :])   # [B, K, M]
            fused = state["lm"][:, :, None] + lm_weight * ngram.LN10 * lm_lp + lm_bonus
            ranked = scores + jnp.concatenate([state["lm"], fused.reshape(b, k * m)], axis=1)
            pick = lax.top_k(jnp.where(scores > NEG, ranked, NEG), k)[1]
            best = jnp.take_along_axis(scores, pick, axis=1)
        else:
            best, pick = lax.top_k(scores, k)                                       # [B, K]
        parent = jnp.where(pick < k, pick, (pick - k) // m)
        extended = pick >= k
        label = jnp.take_along_axis(labels, jnp.maximum(pick - k, 0) % m, axis=1)
        take = lambda x: jnp.take_along_axis(x, parent.reshape(parent.shape + (1,) * (x.ndim - 2)), axis=1)  # noqa: E731
        tokens, logp, length = take(state["tokens"]), take(state["logp"]), take(state["length"])
        put = jnp.arange(room)[None, None, :] == length[:, :, None]
        new = dict(
            tokens=jnp.where(extended[..., None] & put, label[..., None], tokens),
            logp=jnp.where(extended[..., None] & put, jnp.take_along_axis(lp_t, label, axis=1)[..., None], logp),
            length=jnp.where(best > NEG / 2, length + extended, -1),
            last=jnp.where(extended, label, take(state["last"])),
            pb=jnp.where(extended, NEG, take(stay_pb)),
            pnb=jnp.where(extended, best, take(stay_pnb)),
            h1=jnp.where(extended, jnp.take_along_axis(h1.reshape(b, k * m), jnp.maximum(pick - k, 0), axis=1),
                         take(state["h1"])),
            h2=jnp.where(extended, jnp.take_along_axis(h2.reshape(b, k * m), jnp.maximum(pick - k, 0), axis=1),
                         take(state["h2"])))
        if lm is not None:
            at = jnp.maximum(pick - k, 0)
            new.update(lm_state=jnp.where(extended[..., None], jnp.take_along_axis(
                           lm_state.reshape(b, k * m, -1), at[..., None], axis=1), take(state["lm_state"])),
                       lm=jnp.where(extended, jnp.take_along_axis(fused.reshape(b, k * m), at, axis=1),
                                    take(state["lm"])))
        active = (t < frames)[:, None]
        return jax.tree_util.tree_map(
            lambda n, o: jnp.where(active.reshape(active.shape + (1,) * (n.ndim - 2)), n, o), new, state), None

    state, _ = lax.scan(frame, start, (lp, jnp.arange(t_max)))
    total = jnp.where(state["length"] >= 0, jnp.logaddexp(state["pb"], state["pnb"]), NEG)
    ranked = total
    if lm is not None:  # the LM's </s> ends each output
        end = ngram.advance(lm, state["lm_state"], jnp.full((b, k), EOS_ID, jnp.int32))[0]
        ranked = jnp.where(total > NEG, total + state["lm"] + lm_weight * ngram.LN10 * end, NEG)
    n = max(nbest, 1)
    order = jnp.argsort(-ranked, axis=1, stable=True)[:, :n]    # the best first (the first of equals, as argmax)
    pick = lambda x: jnp.take_along_axis(x, order.reshape((b, n) + (1,) * (x.ndim - 2)), axis=1)  # noqa: E731
    ids, logp, length = (pick(state[key]).reshape((b * n,) + state[key].shape[2:])
                         for key in ("tokens", "logp", "length"))
    keep = jnp.arange(room)[None, :] < length[:, None]
    tokens, token_logp, scored = (x.reshape(b, n, width) for x in
                                  write_rows(ids, keep, jnp.where(keep, logp, 0.0), keep, width))
    out = {"tokens": tokens[:, 0], "score": pick(total)[:, 0], "token_logp": token_logp[:, 0],
           "token_scored": scored[:, 0]}
    if nbest > 1:
        out.update(nbest_tokens=tokens, nbest_score=jnp.where(pick(total) > NEG / 2, pick(total), -jnp.inf))
    return out
