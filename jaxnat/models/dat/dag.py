"""Dynamic programs over a DA-Transformer's directed acyclic graph (DAG), as pure functions of its arrays.

A sentence's graph has ``n`` vertices 0 … n − 1 (``n_vertices``: int32[B]; the arrays are padded to L ≥ n).
Every path starts at vertex 0, which emits BOS, and ends at vertex n − 1, which emits EOS; an edge i → j goes
forwards only (j > i). The model gives, per sentence:

* ``links``: float32[B, L, L], log P(j | i), the transition distribution of each vertex over the vertices after it
  (−inf off the graph: j ≤ i, j ≥ n, and every row i ≥ n − 1);
* ``emit``: float32[B, L, V], log P(token | vertex).

A path a = (a_1 = 0, …, a_M = n − 1) with tokens y_1 … y_M has log P(y, a | x) = Σ_m log P(a_{m+1} | a_m) + Σ_m
log P(y_m | a_m). Here are the exact log-sum over every path that emits a reference (the training loss), the best
such path (glancing's alignment), and the decoders' programs: following greedy or lookahead pointers, the joint
Viterbi path of Shao et al. (2022) under a length penalty, a beam search over token prefixes that sums the
paths emitting the same prefix, and ancestral sampling of paths. Each is a `lax.scan` over positions of the
output, batched; tests/dat_reference.py enumerates every path of tiny graphs to check them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxnat.argmax import argmax
from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID
from jaxnat.decoding import ngram, repeats
from jaxnat.decoding.search import Sampling, cumulative, draw, truncate

NEG = -jnp.inf


def safe_logsumexp(x: jax.Array, axis: int) -> jax.Array:
    """log Σ exp(x) along ``axis``, −inf where every term is −inf, with a finite (zero) gradient there: a cell
    no path reaches must not turn the gradient of the cells that are reached into NaN."""
    m = jnp.max(x, axis=axis, keepdims=True)
    m = jax.lax.stop_gradient(jnp.where(jnp.isfinite(m), m, 0.0))
    s = jnp.sum(jnp.exp(x - m), axis=axis)
    return jnp.where(s > 0, jnp.log(jnp.where(s > 0, s, 1.0)) + jnp.squeeze(m, axis), NEG)


def reference_match(logits: jax.Array, tgt: jax.Array) -> jax.Array:
    """float32[B, T, L]: log P(y_t | vertex v) for the reference ``tgt`` int32[B, T] under ``logits`` float32[B, L, V]:
    the gathered logits less each vertex's log-normaliser. The [B, L, V] log-softmax is never written out: a
    normaliser's gradient is the softmax and a gather's a sparse scatter, so the backward pass too reads the logits
    once, and [B, T, L] is all the DP keeps (the whole log-softmax and its gradient cost a sixth of a Multi30k step)."""
    picked = jnp.take_along_axis(logits, tgt[:, None, :], axis=2)
    return (picked - safe_logsumexp(logits, axis=-1)[..., None]).swapaxes(1, 2)


def _first_vertex(values: jax.Array) -> jax.Array:
    """float32[B, L] with everything but vertex 0 at −inf (every path starts there)."""
    return jnp.where(jnp.arange(values.shape[1]) == 0, values, NEG)


def _at(values: jax.Array, index: jax.Array) -> jax.Array:
    """values: [B, L], index: int32[B] → values[b, index[b]]."""
    return jnp.take_along_axis(values, index[:, None], axis=1)[:, 0]


def dag_log_likelihood(match: jax.Array, links: jax.Array, tgt_len: jax.Array, n_vertices: jax.Array,
                       remat: bool = True) -> jax.Array:
    """float32[B]: log P(y | x) = log Σ over every path of tgt_len vertices from 0 to n − 1 of the path's links and
    emissions of y (the DAG loss's likelihood; −inf where no path emits y, e.g. T > n).

    match: float32[B, T, L] (`reference_match`); links: float32[B, L, L]; tgt_len: int32[B] (BOS/EOS included);
    n_vertices: int32[B]. The forward variable α[t, v] (log-sum over paths emitting y_1 … y_t and ending at v)
    is the carry of one `lax.scan` over t: α[t, j] = match[t, j] + log Σ_i exp(α[t−1, i] + links[i, j]): O(T·L²)
    work. With ``remat`` the step is recomputed in the backward pass (`jax.checkpoint`), so the gradient keeps
    T copies of α ([B, L] each), not T copies of the [B, L, L] sums.
    """
    alpha = _first_vertex(match[:, 0])
    last = n_vertices - 1

    def step(alpha, m_t):
        new = m_t + safe_logsumexp(alpha[:, :, None] + links, axis=1)
        return new, _at(new, last)

    body = jax.checkpoint(step) if remat else step
    _, ends = jax.lax.scan(body, alpha, jnp.swapaxes(match[:, 1:], 0, 1))
    ends = jnp.concatenate([_at(alpha, last)[None], ends], axis=0)            # [T, B]: paths of t + 1 vertices
    return jnp.take_along_axis(ends, jnp.maximum(tgt_len - 1, 0)[None], axis=0)[0]


def viterbi_scan(start: jax.Array, links: jax.Array, emissions: jax.Array) -> jax.Array:
    """The max-product twin of the forward DP: δ[0] = start, δ[s, j] = emissions[s − 1, j] + max_i (δ[s−1, i] +
    links[i, j]). start: float32[B, L]; emissions: float32[S, B, L]. Returns every δ, float32[S + 1, B, L].
    No back pointers: an argmax over every [B, L, L] step cost ten times the maxima (XLA:CPU's argmax is a
    scalar loop); `backtrack` recomputes the one column each step of the best path needs."""
    def step(delta, e):
        new = e + jnp.max(delta[:, :, None] + links, axis=1)
        return new, new

    _, deltas = jax.lax.scan(step, start, emissions)
    return jnp.concatenate([start[None], deltas], axis=0)


def backtrack(deltas: jax.Array, links: jax.Array, end_step: jax.Array, end_vertex: jax.Array) -> jax.Array:
    """int32[B, S + 1]: the vertices of the best path that is at ``end_vertex`` (int32[B]) after ``end_step``
    (int32[B]) steps, read back through `viterbi_scan`'s ``deltas`` float32[S + 1, B, L]: the vertex before v at
    step s + 1 is argmax_i δ[s, i] + links[i, v] (the first maximum: the same sums as the scan's, so the same path
    as stored back pointers would give); −1 after the end."""
    def step(v, xs):
        s, delta = xs                                # position s + 1, δ[s]; v starts at end_vertex
        on = s + 1 <= end_step
        column = jnp.take_along_axis(links, jnp.maximum(v, 0)[:, None, None], axis=2)[..., 0]   # [B, L]
        prev = jnp.where(on, argmax(delta + column).astype(jnp.int32), v)
        return prev, jnp.where(on, v, -1)

    steps = deltas.shape[0] - 1
    first, rest = jax.lax.scan(step, end_vertex, (jnp.arange(steps), deltas[:-1]), reverse=True)
    first = jnp.where(end_step == 0, end_vertex, first)
    return jnp.concatenate([first[:, None], rest.T], axis=1)


def best_alignment(match: jax.Array, links: jax.Array, tgt_len: jax.Array, n_vertices: jax.Array):
    """The most probable path that emits the reference: (int32[B, T] the vertex of each target position, −1 on
    padding and throughout a row without one; float32[B] its log-probability, −inf where there is none). Glancing
    reads it (no gradient)."""
    deltas = viterbi_scan(_first_vertex(match[:, 0]), links, jnp.swapaxes(match[:, 1:], 0, 1))
    end = jnp.maximum(tgt_len - 1, 0)
    score = jnp.take_along_axis(jax.vmap(_at, (0, None))(deltas, n_vertices - 1), end[None], axis=0)[0]
    path = backtrack(deltas, links, end, n_vertices - 1)
    return jnp.where(jnp.isfinite(score)[:, None], path, -1), score   # an empty row or |y| > L: no vertex


# ----------------------------------------------------------------------------------------------- decoding

def vertex_scores(logits: jax.Array, n_vertices: jax.Array, allowed: jax.Array):
    """What the decoders read of the emissions: (tok int32[B, L], each vertex's best token among ``allowed``
    (bool[V]); score float32[B, L], its log-probability, and at the last vertex n − 1 that of EOS (the token
    every path ends with); bos float32[B], log P(BOS | vertex 0)). logits: float32[B, L, V], normalised here
    (log-probabilities pass unchanged): log_softmax's own arithmetic, x − max − log Σ exp(x − max), on the few
    entries read, so that no [B, L, V] array of log-probabilities is written (at a vocabulary of 10k, most of the
    decoders' time)."""
    shift = jnp.max(logits, axis=-1)
    log_total = jnp.log(jnp.sum(jnp.exp(logits - shift[..., None]), axis=-1))

    def log_prob(values):  # values: float32[B, L], one entry of each row
        return (values - shift) - log_total

    tok = argmax(jnp.where(allowed, logits, NEG)).astype(jnp.int32)
    score = log_prob(jnp.take_along_axis(logits, tok[..., None], axis=2)[..., 0])
    last = jnp.arange(logits.shape[1])[None] == (n_vertices - 1)[:, None]
    score = jnp.where(last, log_prob(logits[..., EOS_ID]), score)
    return tok, score, log_prob(logits[..., BOS_ID])[:, 0]


def pointers(links: jax.Array, scores: jax.Array, beta: float) -> jax.Array:
    """int32[B, L]: each vertex's successor, argmax_j links[i, j] + β · scores[j] (β = 0: greedy, DA-Transformer's
    "greedy"; β > 0: its "lookahead", which weighs the next vertex's best token too)."""
    return argmax(links + beta * scores[:, None, :]).astype(jnp.int32)


def follow(nxt: jax.Array, n_vertices: jax.Array, width: int, limit: jax.Array | None = None) -> jax.Array:
    """int32[B, width]: the path from vertex 0 along the successors ``nxt`` (int32[B, L]) to n − 1, −1 after it. A
    path that would need more than its row's ``limit`` (int32[B], at most ``width``; None: ``width``) vertices jumps
    to n − 1 at its last slot (the sentence's output capacity)."""
    last = n_vertices - 1
    limit = width if limit is None else limit

    def step(v, k):
        done = (v == last) | (v < 0)
        nv = jnp.where(k == limit - 1, last, _at(nxt, jnp.maximum(v, 0)))
        nv = jnp.where(done, -1, nv)
        return nv, nv

    _, rest = jax.lax.scan(step, jnp.zeros_like(last), jnp.arange(1, width))
    return jnp.concatenate([jnp.zeros_like(last)[:, None], rest.T], axis=1)


def viterbi(links: jax.Array, scores: jax.Array, bos: jax.Array, n_vertices: jax.Array, width: int, beta: float,
            limit: jax.Array | None = None, joint: bool = True, authors: bool = False) -> tuple[jax.Array, jax.Array]:
    """Shao et al. (2022)'s Viterbi decodings: the path maximising its score / length^β over every length within its
    row's ``limit`` (int32[B], in vertices, at most ``width``; None: ``width``), each of its vertices then emitting
    its best token (``scores``, `vertex_scores`). ``joint`` (their joint Viterbi): the score is log P(y, a | x) with
    those tokens; otherwise (their Viterbi) log P(a | x), the path's links alone.
    jaxnat's reading: the length M counts the path's vertices, BOS and EOS included, and the score takes every
    vertex's term. ``authors``, output for output with the authors' code (thu-coai/DA-Transformer's
    inference_viterbi): the length counts the inner vertices (at least one: the direct path only where no other
    fits), the last vertex's EOS term is left out, and the first inner vertex's token term is in both scores (the
    path's alone too).
    One `viterbi_scan` over the width gives the best path of every length at once: δ[s] at vertex n − 1 is the best
    path of s + 1 vertices. Returns (int32[B, width] the path, −1 after it; float32[B] its log P(y, a | x))."""
    last = jnp.arange(scores.shape[1])[None] == (n_vertices - 1)[:, None]
    emit = jnp.where(last, 0.0, scores) if authors else scores
    start = _first_vertex(jnp.broadcast_to((bos if joint else jnp.zeros_like(bos))[:, None], scores.shape))
    emitting = jnp.arange(width - 1) < (width - 1 if joint else int(authors))     # the steps whose vertex emits
    deltas = viterbi_scan(start, links, jnp.where(emitting[:, None, None], emit[None], 0.0))
    ends = jax.vmap(_at, (0, None))(deltas, n_vertices - 1)                   # [width, B]: row s, s + 1 vertices
    vertices = jnp.arange(1, width + 1, dtype=jnp.float32)[:, None]
    length = vertices - 2 if authors else vertices
    # the lengths a path of the graph can have, within the row's limit (the others score −inf through the missing
    # links; bounded here too, so that links masked with a finite negative, whose sums a large β's penalty lifts
    # towards 0, cannot win)
    most = jnp.minimum(n_vertices, width if limit is None else limit)
    fits = (length >= 1) & (vertices >= 2) & (vertices <= most[None])
    ranked = jnp.where(fits, ends / jnp.maximum(length, 1.0) ** beta, -jnp.inf)
    if authors:  # a row with no inner vertex within its limit (a graph of 2, a limit of 2) takes the direct path
        ranked = ranked.at[1].set(jnp.where(jnp.any(fits, axis=0), -jnp.inf, 0.0))
    steps = argmax(ranked.T).astype(jnp.int32)
    path = backtrack(deltas, links, steps, n_vertices - 1)
    return path, path_score(path, links, scores, bos)


def path_tokens(path: jax.Array, tok: jax.Array, n_vertices: jax.Array) -> jax.Array:
    """int32[B, W]: the tokens a path emits (BOS at vertex 0, EOS at n − 1, the vertex's token elsewhere; PAD
    after the path)."""
    here = _gather_rows(tok, path)
    return jnp.where(path < 0, PAD_ID, jnp.where(path == 0, BOS_ID,
                                                 jnp.where(path == (n_vertices - 1)[:, None], EOS_ID, here)))


def _gather_rows(values: jax.Array, path: jax.Array) -> jax.Array:
    """values: [B, L], path: int32[B, W] (−1 allowed) → values[b, path[b, w]] (index 0 where −1)."""
    return jnp.take_along_axis(values, jnp.maximum(path, 0), axis=1)


def path_score(path: jax.Array, links: jax.Array, scores: jax.Array, bos: jax.Array) -> jax.Array:
    """float32[B]: log P(y, a | x) of a path (int32[B, W], −1 after it) whose vertices emit ``scores``' tokens."""
    on = path >= 0
    here = jnp.where(on[:, 1:], _gather_rows(scores, path[:, 1:]), 0.0)
    rows = jnp.take_along_axis(links, jnp.maximum(path[:, :-1], 0)[:, :, None], axis=1)  # [B, W−1, L]
    edge = jnp.take_along_axis(rows, jnp.maximum(path[:, 1:], 0)[:, :, None], axis=2)[..., 0]
    return bos + jnp.sum(here + jnp.where(on[:, 1:], edge, 0.0), axis=1)


def drop_repeats(tokens: jax.Array, free: jax.Array) -> tuple[jax.Array, jax.Array]:
    """DA-Transformer's post-processing: a free token (``free`` bool[B, W]: chosen by the model, not a constraint's)
    equal to the free token right before it is dropped, and the row closed up. tokens: int32[B, W]. Returns (the
    kept mask bool[B, W], the count dropped int32[B]). Constraint tokens are never dropped, nor is a free token
    next to one, so a phrase and the whole-word rule around it survive."""
    prev_free = jnp.pad(free[:, :-1], ((0, 0), (1, 0)))
    prev = jnp.pad(tokens[:, :-1], ((0, 0), (1, 0)), constant_values=PAD_ID)
    drop = free & prev_free & (tokens == prev)
    return ~drop, jnp.sum(drop, axis=1, dtype=jnp.int32)


def compact(values: jax.Array, keep: jax.Array, fill) -> jax.Array:
    """values: [B, W] with the entries where ``keep`` moved to the front of their row (order kept), ``fill`` after."""
    pos = jnp.where(keep, jnp.cumsum(keep, axis=1) - 1, values.shape[1])
    rows = jnp.arange(values.shape[0])[:, None]
    return jnp.full_like(values, fill).at[rows, pos].set(values, mode="drop")


def follow_unrepeated(links: jax.Array, top_tok: jax.Array, top_lp: jax.Array, bos: jax.Array, eos: jax.Array,
                      n_vertices: jax.Array, width: int, beta: float, no_repeat: int, no_consecutive: int,
                      top_p: float, limit: jax.Array | None = None):
    """Lookahead (β > 0) or greedy (β = 0) decoding that steps around repeats, as the authors' lookahead with n-gram
    prevention: at vertex i the C best (vertex j, token c) pairs by links[i, j] + β · log P(c | j) (C = top_tok's
    width; j's C best tokens, EOS alone at n − 1) are tried best first, and the path takes the first whose token is
    not banned: the token before it and those `repeats.consecutive_bans` names (k ≤ ``no_consecutive``), and with
    ``no_repeat`` n > 0 those completing a repeated n-gram (`repeats.ngram_bans`), the output so far from BOS on.
    Once the banned pairs tried hold more than ``top_p`` of exp(their scores), or all C are banned, it takes the
    best pair after all (the repeat costs less than the detour). A path still inside the graph at its row's last
    slot (``limit``, int32[B]; None: ``width``) steps to n − 1 there.

    links: float32[B, L, L]; top_tok, top_lp: int32/float32[B, L, C]; bos, eos: float32[B] (log P(BOS | 0),
    log P(EOS | n − 1)). Returns (tokens int32[B, width], [BOS … EOS] then PAD; score float32[B], log P(y, a | x);
    token_lp float32[B, width], each token's log P(token | vertex), log P(EOS) at EOS, 0 at BOS and PAD)."""
    limit = jnp.full(n_vertices.shape, width, jnp.int32) if limit is None else limit

    def one(links, top_tok, top_lp, bos, eos, n, limit):
        L, C = top_tok.shape
        last = n - 1
        pairs = jax.vmap(lambda row: step_logits(row, top_lp, eos, last, 1.0, beta))(links)       # [L, L·C]
        cand_score, cand = jax.lax.top_k(jnp.where(jnp.isnan(pairs), NEG, pairs), C)  # [L, C], best first (rows
        # from n − 1 on have no edges, and only a finished path reads them)
        cand_p = jnp.exp(cand_score)

        def step(state, k):
            v, done, history, total = state
            j, c = cand[v] // C, cand[v] % C
            toks = jnp.where(j == last, EOS_ID, top_tok[j, c])
            bans = prefix_bans(history[None], k - 1, no_repeat, no_consecutive)
            free = ~repeats.banned(toks[None], bans)[0] & jnp.isfinite(cand_score[v])
            first = argmax(free).astype(jnp.int32)
            tried = jnp.sum(jnp.where(jnp.arange(C) < first, cand_p[v], 0.0))
            pick = jnp.where(jnp.any(free) & (tried <= top_p), first, 0)
            j, c, tok = j[pick], c[pick], toks[pick]
            j, tok = jnp.where(k >= limit - 1, last, j), jnp.where(k >= limit - 1, EOS_ID, tok)  # the last slot
            lp = jnp.where(j == last, eos, top_lp[j, c])
            out = (jnp.where(done, PAD_ID, tok), jnp.where(done, 0.0, lp))
            state = (jnp.where(done, v, j), done | (j == last), history.at[k].set(jnp.where(done, PAD_ID, tok)),
                     total + jnp.where(done, 0.0, links[v, j] + lp))
            return state, out

        history = jnp.full(width, PAD_ID, jnp.int32).at[0].set(BOS_ID)
        (_, _, _, total), (toks, token_lp) = jax.lax.scan(step, (jnp.int32(0), jnp.bool_(False), history, bos),
                                                          jnp.arange(1, width))
        return (jnp.concatenate([jnp.full(1, BOS_ID, jnp.int32), toks.astype(jnp.int32)]), total,
                jnp.concatenate([jnp.zeros(1), token_lp]))

    return jax.vmap(one)(links, top_tok, top_lp, bos, eos, n_vertices, limit)


# ----------------------------------------------------------------------------------------------- beam search

def beam_search(links: jax.Array, top_tok: jax.Array, top_lp: jax.Array, bos: jax.Array, eos: jax.Array,
                n_vertices: jax.Array, width: int, beam: int, alpha: float, limit: jax.Array | None = None,
                nbest: int = 1, lm: ngram.NgramLM | None = None, gamma: float = 0.0, no_repeat: int = 0,
                no_consecutive: int = 0, vocab: int = 0):
    """Beam search over token prefixes of the DAG (DA-Transformer's beam search; its n-gram LM below): a
    hypothesis is a prefix ending at a vertex, scored by the log-sum over every path that emits it there, so the
    search looks for argmax_y log P(y | x) / M^α (M = |y| with BOS and EOS), summing paths, not the single best
    path (`viterbi`). Each step extends every hypothesis by one vertex j and one of j's top tokens; the
    hypotheses with the same prefix are merged (their path sums added) before they extend; a hypothesis that
    steps to n − 1 emits EOS and is finished. A beam as wide as the hypotheses finds the exact answer (tested).

    links: float32[B, L, L]; top_tok, top_lp: int32/float32[B, L, C], each vertex's C best tokens; bos, eos:
    float32[B] (log P(BOS | 0), log P(EOS | n − 1)); width: the output's capacity; limit: int32[B], each row's
    (at most ``width``; None: ``width``); beam: K; nbest: N ≤ K. Returns the N best finished prefixes, best first:
    (tokens int32[B, N, width]; their log P(y | x) float32[B, N], -inf where fewer finished; token_logp
    float32[B, N, width], each token's share of it: log P(y_≤m) − log P(y_<m) over the merged paths).

    With an n-gram ``lm`` (`ngram.NgramLM`) the search looks for the authors' argmax_y [log P(y | x) + γ log10
    P_lm(y)] / M^α (γ = ``gamma``, P_lm with ``</s>``): the hypotheses carry their LM state, the K · C best
    extensions by the graph's score alone are scored with the LM (C: the top tokens per vertex) and the K best of them
    by the sum go on. The outputs' log P(y | x) stay the model's.

    With ``no_repeat`` or ``no_consecutive`` > 0 (the authors' n-gram prevention, as their C++ beam search applies
    it: `repeats.bans`) no hypothesis extends by a token its prefix bans: with ``no_consecutive`` the one before it
    and those `repeats.consecutive_bans` names, with ``no_repeat`` those completing a repeated n-gram; the search is
    then over the outputs that repeat nothing so (``vocab``: the vocabulary's size, for the bans' mask)."""
    limit = jnp.full(n_vertices.shape, width, jnp.int32) if limit is None else limit
    return jax.vmap(lambda *a: _beam_one(*a, width, beam, alpha, nbest, lm, gamma, no_repeat, no_consecutive,
                                         vocab))(
        links, top_tok, top_lp, bos, eos, n_vertices, limit)


def prefix_bans(tokens: jax.Array, last, no_repeat: int, no_consecutive: int) -> jax.Array:
    """int32[N, M]: the tokens the authors' n-gram prevention bans after each prefix in their lookahead and sampling
    (tokens: int32[N, W], BOS first, positions 0 … last filled; `repeats.bans`): the last token always, the
    consecutive repeats of up to ``no_consecutive`` tokens and with ``no_repeat`` > 0 the tokens completing a repeated
    n-gram; −1 = none."""
    return repeats.bans(tokens, last, no_repeat, max(no_consecutive, 1))


def _beam_one(links, top_tok, top_lp, bos, eos, n, limit, width, beam, alpha, nbest, lm=None, gamma=0.0,
              no_repeat=0, no_consecutive=0, vocab=0):
    L, C = top_tok.shape
    last = n - 1
    toks = jnp.full((beam, width), PAD_ID, jnp.int32).at[:, 0].set(BOS_ID)
    steps_lp = jnp.zeros((beam, width), jnp.float32)
    lp = jnp.full((beam,), NEG).at[0].set(bos)
    vert = jnp.zeros((beam,), jnp.int32)
    fin = (jnp.full((beam, width), PAD_ID, jnp.int32), jnp.zeros((beam, width), jnp.float32),
           jnp.full((beam,), NEG), jnp.full((beam,), NEG))                    # tokens, token shares, log P, score
    inner = (jnp.arange(L) > 0) & (jnp.arange(L) < last)
    # the LM's state after each prefix and γ · log10 P_lm of it (nothing without an LM)
    fused = (ngram.start(lm, (beam,)), jnp.zeros((beam,), jnp.float32)) if lm is not None else ()

    def step(state, k):
        toks, steps_lp, lp, vert, fin, fused = state
        alive = lp > NEG
        same = alive[:, None] & alive[None, :] & jnp.all(toks[:, None, :] == toks[None, :, :], axis=2)
        first = ~jnp.any(same & (jnp.arange(beam)[None, :] < jnp.arange(beam)[:, None]), axis=1) & alive
        reach = lp[:, None] + links[vert]                                     # [K, L]: one step on, per hypothesis
        merged = safe_logsumexp(jnp.where(same[:, :, None], reach[None], NEG), axis=1)   # [K, L]: per prefix
        merged = jnp.where(first[:, None], merged, NEG)
        # finished: the prefix steps to n − 1 and emits EOS at slot k
        done_lp = jnp.where(k < limit, merged[:, last] + eos, NEG)             # M = k + 1 tokens fit the row
        done_toks = toks.at[:, k].set(EOS_ID)
        done_steps = steps_lp.at[:, k].set(done_lp - lp)
        done_score = done_lp / (k + 1.0) ** alpha
        if lm is not None:  # the LM's </s> ends the sentence
            end_lm = gamma * ngram.advance(lm, fused[0], jnp.full((beam,), EOS_ID, jnp.int32))[0]
            done_score = jnp.where(done_lp > NEG, (done_lp + fused[1] + end_lm) / (k + 1.0) ** alpha, NEG)
        all_toks = jnp.concatenate([fin[0], done_toks])
        all_steps = jnp.concatenate([fin[1], done_steps])
        all_lp, all_score = jnp.concatenate([fin[2], done_lp]), jnp.concatenate([fin[3], done_score])
        keep = jax.lax.top_k(all_score, beam)[1]
        fin = (all_toks[keep], all_steps[keep], all_lp[keep], all_score[keep])
        # alive: one more inner vertex and one of its top tokens, if EOS still fits after it
        cand = merged[:, :, None] + top_lp[None]                               # [K, L, C]
        cand = jnp.where(inner[None, :, None] & (k < limit - 1), cand, NEG)
        if no_repeat or no_consecutive:  # each prefix's banned tokens among every vertex's candidates
            mask = repeats.ban_mask(repeats.bans(toks, k - 1, no_repeat, no_consecutive), vocab)      # [K, V]
            cand = jnp.where(mask[:, top_tok], NEG, cand)
        cand = cand.reshape(-1)
        if lm is None:
            best, idx = jax.lax.top_k(cand, beam)
        else:  # the K · C best by the graph, then the K best with the LM's score added
            best, idx = jax.lax.top_k(cand, min(beam * C, cand.shape[0]))
            parent = idx // (L * C)
            lm_lp, lm_state = ngram.advance(lm, fused[0][parent], top_tok[(idx // C) % L, idx % C])
            with_lm = fused[1][parent] + gamma * lm_lp
            pick = jax.lax.top_k(jnp.where(best > NEG, best + with_lm, NEG), beam)[1]
            best, idx, fused = best[pick], idx[pick], (lm_state[pick], with_lm[pick])
        src, j, c = idx // (L * C), (idx // C) % L, idx % C
        tok = top_tok[j, c]
        toks = toks[src].at[:, k].set(tok)
        steps_lp = steps_lp[src].at[:, k].set(best - lp[src])
        return (toks, steps_lp, best, j.astype(jnp.int32), fin, fused), None

    (_, _, _, _, fin, _), _ = jax.lax.scan(step, (toks, steps_lp, lp, vert, fin, fused), jnp.arange(1, width))
    toks, steps_lp, lp = fin[0][:nbest], fin[1][:nbest], fin[2][:nbest]  # top_k kept them ranked, the best first
    return toks, lp, jnp.where(toks == PAD_ID, 0.0, steps_lp)


# ----------------------------------------------------------------------------------------------- sampling

def candidates(links: jax.Array, logp: jax.Array, top: int, beta: float):
    """Each vertex's ``top`` best (next vertex j, token) pairs, best first, as the authors' beam search
    (`dag_search`) and sampling (`authors_samples`) make them: each j offers its ``top`` best tokens, a pair scores
    log P(j | i) + β · log P(token | j). links: float32[B, L, L] (log P(j | i)); logp: float32[B, L, V]
    (log P(token | j)). Returns (score float32[B, L, top], vertex int32[B, L, top], token int32[B, L, top])."""
    B, L, _ = links.shape
    top_lp, top_tok = jax.lax.top_k(logp, top)                                    # [B, L, top]
    pair = links[:, :, :, None] + beta * top_lp[:, None, :, :]                    # [B, i, j, c]
    score, index = jax.lax.top_k(pair.reshape(B, L, L * top), top)
    vertex = (index // top).astype(jnp.int32)
    token = jnp.take_along_axis(top_tok.reshape(B, 1, L * top), (vertex * top + index % top).reshape(B, 1, -1),
                                axis=2).reshape(B, L, top)
    return score, vertex, token.astype(jnp.int32)


def authors_samples(links: jax.Array, logp: jax.Array, n_vertices: jax.Array, width: int, keys: jax.Array,
                    temperature: float, top: int, beta: float, top_p: float, limit: jax.Array | None = None,
                    no_repeat: int = 0, no_consecutive: int = 0):
    """The authors' sampling (their `sample` decoding), distribution for distribution: each vertex offers its
    `candidates` of the tempered transitions (log_softmax(log P(j | i) / T), their `decode_temperature`) and β · log
    P(token | j), best first; a step tries them until the probability tried passes ``top_p`` (the pair that passes
    it included), gives a pair whose token the sample's tokens ban 1e-5 in place of its probability (the token
    before it always; `repeats.bans`' rules with their loop's n = 1 banning nothing more), and draws among those
    tried in proportion. No token is barred from any vertex: the last vertex's token is drawn as any other. A
    sample still inside the graph at its row's last slot (``limit``, int32[B]; None: ``width``) ends there.

    links: float32[B, L, L]; logp: float32[B, L, V] (log P(token | j), over the whole vocabulary); keys: uint32[B,
    K, 2], one a sample. Returns (tokens int32[B, K, width]: BOS, the drawn tokens but any BOS, EOS or PAD (as
    fairseq prints their output), EOS, then PAD; score float32[B, K], the sample's log P(y, a | x) under the model's
    untempered distributions, vertex 0's token aside as theirs; token_lp float32[B, K, width], each kept token's
    log P(token | vertex); path int32[B, K, width], the vertices after 0, −1 after the last)."""
    limit = jnp.full(n_vertices.shape, width, jnp.int32) if limit is None else limit
    edge = jnp.isfinite(links)
    tempered = jnp.where(edge, jax.nn.log_softmax(jnp.where(edge, links / temperature, -1e30), axis=-1), NEG)
    score, vertex, token = candidates(tempered, logp, top, beta)
    ngram_n = 0 if no_repeat == 1 else no_repeat   # their loop compares n − 1 = 0 tokens: no n-gram is banned

    def sample(score, vertex, token, links, logp, n, limit, key):
        def step(state, k):  # slot k: the k-th token drawn
            v, done, history = state
            p = jnp.exp(score[v])
            tried = jnp.cumsum(p) - p <= top_p
            ban = prefix_bans(history[None], k - 1, ngram_n, no_consecutive)[0]
            banned = repeats.banned(token[v][None], ban[None])[0] & (k > 1)   # the first token: nothing before
            c = draw(jnp.cumsum(jnp.where(tried, jnp.where(banned, 1e-5, p), 0.0)), jax.random.fold_in(key, k))
            j, tok = vertex[v, c], token[v, c]
            out = (jnp.where(done, PAD_ID, tok), jnp.where(done, 0.0, logp[j, tok]),
                   jnp.where(done, 0.0, links[v, j] + logp[j, tok]), jnp.where(done, -1, j))
            ends = (j == n - 1) | (k >= limit - 2)
            return (jnp.where(done, v, j), done | ends, history.at[k].set(jnp.where(done, PAD_ID, tok))), out

        history = jnp.full(width, PAD_ID, jnp.int32).at[0].set(BOS_ID)
        _, (toks, token_lp, terms, path) = jax.lax.scan(step, (jnp.int32(0), jnp.bool_(False), history),
                                                        jnp.arange(1, width - 1))
        row = jnp.concatenate([jnp.full(1, BOS_ID, jnp.int32), toks.astype(jnp.int32), jnp.full(1, PAD_ID, jnp.int32)])
        keep = ((row != PAD_ID) & (row != BOS_ID) & (row != EOS_ID)).at[0].set(True)
        tokens = compact(row[None], keep[None], PAD_ID)[0]
        tokens = tokens.at[jnp.sum(keep)].set(EOS_ID)
        shares = compact(jnp.concatenate([jnp.zeros(1), token_lp, jnp.zeros(1)])[None], keep[None], 0.0)[0]
        path = jnp.concatenate([path.astype(jnp.int32), jnp.full(2, -1, jnp.int32)])
        return tokens, jnp.sum(terms), shares, path

    def one(score, vertex, token, links, logp, n, limit, keys):
        return jax.vmap(lambda key: sample(score, vertex, token, links, logp, n, limit, key))(keys)

    return jax.vmap(one)(score, vertex, token, links, logp, n_vertices, limit, keys)


def step_logits(links_row: jax.Array, top_lp: jax.Array, eos: jax.Array, last: jax.Array,
                temperature: float, beta: float = 1.0) -> jax.Array:
    """float32[L · C]: what a sampled path draws its next (vertex j, token c) from at a vertex whose transitions
    are ``links_row`` (float32[L], log P(j | i)): the transitions divided by the temperature and renormalised (the
    authors' sample decoding tempers the links alone), plus β · log P(c | j) of j's C best tokens (``top_lp``:
    float32[L, C]; β: lookahead's weight, `follow_unrepeated`); the last vertex ``last`` emits EOS alone (``eos``,
    its log-probability: entry c = 0). Entry j · C + c."""
    L, C = top_lp.shape
    tempered = jax.nn.log_softmax(jnp.where(jnp.isfinite(links_row), links_row / temperature, NEG))
    is_last = jnp.arange(L)[:, None] == last
    emitted = jnp.where(is_last, jnp.where(jnp.arange(C)[None] == 0, eos, NEG), top_lp)
    return (tempered[:, None] + jnp.where(jnp.isfinite(emitted), beta * emitted, NEG)).reshape(-1)


def sample_paths(links: jax.Array, top_tok: jax.Array, top_lp: jax.Array, bos: jax.Array, eos: jax.Array,
                 n_vertices: jax.Array, width: int, keys: jax.Array, sampling: Sampling,
                 limit: jax.Array | None = None, no_repeat: int = 0, no_consecutive: int = 0, vocab: int = 0):
    """Ancestral sampling of (path, tokens) pairs (the authors' "sample" decoding): from vertex 0, each step draws
    the next vertex j and j's token together from `step_logits`, cut by ``sampling``'s top_k, top_p and epsilon
    (`search.truncate`, on the L · C pairs; its temperature tempers the transitions) until the path reaches
    n − 1, which emits EOS; a path still inside the graph at its row's last slot (``limit``, int32[B], at most
    ``width``; None: ``width``) steps to n − 1 there. Without temperature or cuts and with C the whole vocabulary
    this draws from P(y, a | x) itself. What a path draws from depends on its vertex alone, so every vertex's cut
    distribution is made once for all the samples and steps, each draw one uniform number (`search.draw`). With
    ``no_repeat`` or ``no_consecutive`` > 0 (the authors' n-gram prevention, `prefix_bans`; ``vocab``: the
    vocabulary's size) a pair whose token the sample's tokens so far ban keeps a probability of 1e-5 of its cut
    distribution, as the authors' sampling gives it, the others theirs.

    links: float32[B, L, L]; top_tok, top_lp: int32/float32[B, L, C], each vertex's C best tokens; bos, eos:
    float32[B] (log P(BOS | 0), log P(EOS | n − 1)); keys: uint32[B, K, 2], one key per sample (K samples a
    sentence). Returns (tokens int32[B, K, width], [BOS … EOS] then PAD; score float32[B, K], the sample's
    log P(y, a | x) under the model's own (untempered, uncut) distributions; token_lp float32[B, K, width], each
    token's log P(token | vertex), 0 at BOS, EOS and PAD; path int32[B, K, width], its vertices, −1 after)."""
    limit = jnp.full(n_vertices.shape, width, jnp.int32) if limit is None else limit
    cut = Sampling(1.0, sampling.top_k, sampling.top_p, sampling.epsilon, sampling.seed)

    def one(links, top_tok, top_lp, bos, eos, n, limit, keys):  # a sentence, keys: uint32[K, 2]
        L, C = top_tok.shape
        last = n - 1
        rows = jax.vmap(lambda row: step_logits(row, top_lp, eos, last, sampling.temperature))(links)  # [L, L·C]
        # the vertices from n − 1 on have no edges: their rows (read by finished samples only) step to n − 1
        rows = jnp.where(jnp.arange(L)[:, None] < last, rows, jnp.where(jnp.arange(L * C) == last * C, 0.0, NEG))
        cdf = cumulative(truncate(rows, cut))
        pair_tok = jnp.where(jnp.arange(L)[:, None] == last, EOS_ID, top_tok).reshape(-1)   # each pair's token
        return jax.vmap(lambda key: _sample_one(links, top_tok, top_lp, bos, eos, last, limit, cdf, key, width,
                                                pair_tok, no_repeat, no_consecutive, vocab))(keys)

    return jax.vmap(one)(links, top_tok, top_lp, bos, eos, n_vertices, limit, keys)


def _sample_one(links, top_tok, top_lp, bos, eos, last, limit, cdf, key, width, pair_tok, no_repeat=0,
                no_consecutive=0, vocab=0):
    """One sampled path of a sentence (`sample_paths`), from ``cdf`` float32[L, L · C], each vertex's cut
    cumulative distribution over its (vertex, token) pairs (pair_tok: int32[L · C], their tokens)."""
    C = top_tok.shape[1]
    prevents = bool(no_repeat or no_consecutive)

    def step(state, k):
        v, done, history = state
        row = cdf[v]
        if prevents:  # the banned pairs at 1e-5 (a mask over the vocabulary: L · C candidates, many bans)
            p = jnp.diff(row, prepend=0.0)
            mask = repeats.ban_mask(prefix_bans(history[None], k - 1, no_repeat, no_consecutive), vocab)[0]
            row = jnp.cumsum(jnp.where(mask[pair_tok] & (p > 0), 1e-5, p))
        pick = jnp.where(k >= limit - 1, last * C, draw(row, jax.random.fold_in(key, k)))  # the last slot: n − 1
        j, c = pick // C, pick % C
        tok = jnp.where(j == last, EOS_ID, top_tok[j, c])
        lp = jnp.where(j == last, eos, top_lp[j, c])
        out = (jnp.where(done, PAD_ID, tok), jnp.where(done | (j == last), 0.0, lp),
               jnp.where(done, 0.0, links[v, j] + lp), jnp.where(done, -1, j))
        return (jnp.where(done, v, j), done | (j == last), history.at[k].set(jnp.where(done, PAD_ID, tok))), out

    history = jnp.full(width, PAD_ID, jnp.int32).at[0].set(BOS_ID)
    _, (toks, token_lp, terms, path) = jax.lax.scan(step, (jnp.int32(0), jnp.bool_(False), history),
                                                    jnp.arange(1, width))
    first = lambda x, value: jnp.concatenate([jnp.full(1, value, x.dtype), x])  # noqa: E731 (slot 0: BOS at 0)
    return (first(toks.astype(jnp.int32), BOS_ID), bos + jnp.sum(terms), first(token_lp, 0.0),
            first(path.astype(jnp.int32), 0))
