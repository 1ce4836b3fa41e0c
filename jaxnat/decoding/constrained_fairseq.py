"""fairseq's lexically constrained beam search (`--constraints ordered|unordered`: its `LexicallyConstrainedBeamSearch`
inside `SequenceGenerator`), under `eval.search_rules=fairseq`, so that an imported fairseq model's constrained
outputs are fairseq's token for token (docs/import.md). One jit'd `lax.while_loop` at fixed shapes, as
`jaxnat.decoding.constrained`, whose own rules (the default) differ where noted.

**Progress** through one sentence's phrases, per hypothesis:

* *unordered* (Hu et al. 2019's trie): the phrases' trie (`Trie`: one node per distinct prefix), the node the
  hypothesis is at, and per node how often its tokens were produced (``generated``) and how often it completed a
  phrase (``completed``). A token moves to the node's child if that child's phrases are not all produced already;
  else the hypothesis falls off to the root, where the token may start a phrase: on the way up, each node of the
  path gives its token back (``generated`` − 1) until the first terminal node not yet completed, which is marked
  completed. The bank is Σ generated; the hypothesis is finished when every phrase is completed, the node it is
  at counting as completed if it is a terminal one not completed yet;
* *ordered* (Post and Vilar's order): the phrases concatenated, and the last position produced (−1: none). A token
  that continues the concatenation advances; at a phrase's end any token may follow; a token that breaks a phrase
  restarts from its first position if it is the first phrase's first token, else from nothing: the phrases
  completed before are lost too. The bank is the position + 1.

**A step** (per sentence): EOS is banned for unfinished hypotheses (after the first step). The candidates are the
2K best one-token extensions over the beam, the best extension of each hypothesis (after the first step) and, for
each hypothesis (only the first at the first step), every token that continues its progress or starts a phrase (a
completed one's too); each is advanced. They are sorted by ``−100 · (T − bank) + score`` (T: the number of distinct
constraint tokens; scores below −100 cross banks), repeated (hypothesis, token) pairs dropped, and dealt out in
stripes: the first of each run of equal banks, highest bank first, then the second of each run, …; the first 2K
are kept. From those, as in fairseq's unconstrained search, EOS among the first K finishes a hypothesis while the
sentence has fewer than K, the first K others stay alive, and a sentence stops once K have finished or at the
length limit. jaxnat's own rules instead keep K survivors round-robin across banks, never let EOS end an
unfinished hypothesis, keep searching until no alive hypothesis can win, raise the length limit to the phrases'
total length and keep a completed phrase a whole word.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxnat.argmax import top_k
from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID
from jaxnat.decoding.search import (NEG_INF, _check_static, _normalise, _restrict, batch_length, by_score,
                                    decode_length, fairseq_selection, follow_parents, ranked_result)
from jaxnat.edit_ops.compaction import compact

MAX_SCORE = -100.0  # fairseq's weight of a bank in the candidates' sort key


class Trie(NamedTuple):
    """One sentence's phrases as fairseq's trie: node 0 the root, node c·P + d + 1 the prefix of depth d + 1 of
    phrase c, where that prefix is not an earlier phrase's (else that node is used: ``node`` maps each (c, d))."""
    token: jnp.ndarray     # int32[N]: the node's token (root: PAD)
    parent: jnp.ndarray    # int32[N]: its parent (root: -1; unused nodes: -1)
    terminal: jnp.ndarray  # int32[N]: phrases ending at the node
    count: jnp.ndarray     # int32[N]: phrases through the node (root: all)
    path: jnp.ndarray      # int32[N, P]: the node, its parent, … up to the root's child, then -1


def trie(phrases: jnp.ndarray) -> Trie:
    """phrases: int32[C, P] PAD-padded → their `Trie` (N = C·P + 1 nodes)."""
    c, p = phrases.shape
    lens = jnp.sum(phrases != PAD_ID, axis=1)
    # same[c, c', d]: phrases c and c' share their first d + 1 tokens (both that long)
    match = jnp.cumprod(phrases[:, None, :] == phrases[None, :, :], axis=2).astype(bool)
    real = jnp.arange(p)[None, :] < lens[:, None]
    same = match & real[:, None, :] & real[None, :, :]
    first = jnp.argmax(same, axis=1)                                          # [C, D]: the earliest such phrase
    node = jnp.where(real, first * p + jnp.arange(p)[None, :] + 1, -1)        # [C, D]
    n = c * p + 1
    flat = node.reshape(-1)
    used = flat >= 0
    token = jnp.full(n, PAD_ID, jnp.int32).at[jnp.where(used, flat, n)].set(phrases.reshape(-1), mode="drop")
    parents = jnp.concatenate([jnp.zeros((c, 1), jnp.int32), node[:, :-1]], axis=1).reshape(-1)
    parent = jnp.full(n, -1, jnp.int32).at[jnp.where(used, flat, n)].set(parents, mode="drop")
    last = node[jnp.arange(c), jnp.maximum(lens - 1, 0)]
    terminal = jnp.zeros(n, jnp.int32).at[jnp.where(lens > 0, last, n)].add(1, mode="drop")
    count = jnp.zeros(n, jnp.int32).at[jnp.where(used, flat, n)].add(
        jnp.broadcast_to(lens[:, None] > 0, node.shape).reshape(-1).astype(jnp.int32), mode="drop")
    # a node's count: the phrases through it, counted once per phrase (the (c, d) entries mapped to it)
    count = count.at[0].set(jnp.sum(lens > 0))
    # path[v]: v's ancestors from v up (the node at depth d is node[c, d] of any phrase c through v)
    depth_of = jnp.zeros(n, jnp.int32).at[jnp.where(used, flat, n)].set(
        jnp.broadcast_to(jnp.arange(p)[None, :], node.shape).reshape(-1), mode="drop")
    phrase_of = jnp.zeros(n, jnp.int32).at[jnp.where(used, flat, n)].set(
        jnp.broadcast_to(jnp.arange(c)[:, None], node.shape).reshape(-1), mode="drop")
    up = depth_of[:, None] - jnp.arange(p)[None, :]                           # [N, P]: the depths from v up
    path = jnp.where((up >= 0) & (jnp.arange(n) > 0)[:, None] & (parent >= 0)[:, None],
                     node[phrase_of[:, None], jnp.maximum(up, 0)], -1)
    return Trie(token, parent, terminal, count, path)


class Progress(NamedTuple):
    """A hypothesis's progress (any leading shape): unordered, ``node`` and per node ``generated`` and
    ``completed`` ([..., N]); ordered, ``node`` is the position produced (−1: none) and the two are unused."""
    node: jnp.ndarray
    generated: jnp.ndarray
    completed: jnp.ndarray


class Phrases(NamedTuple):
    """One sentence's phrases in both of fairseq's forms, and T for the sort key."""
    trie: Trie
    sequence: jnp.ndarray   # int32[S]: the phrases concatenated (PAD after)
    endpoint: jnp.ndarray   # bool[S]: a phrase ends there
    length: jnp.ndarray     # int32[]: S's real tokens
    distinct: jnp.ndarray   # int32[]: distinct constraint tokens (fairseq's len(state.tokens))


def prepare(phrases: jnp.ndarray) -> Phrases:
    """phrases: int32[C, P] → `Phrases`."""
    c, p = phrases.shape
    flat = phrases.reshape(1, c * p)
    ends = (jnp.arange(p)[None, :] == jnp.sum(phrases != PAD_ID, axis=1)[:, None] - 1).reshape(1, c * p)
    sequence, (endpoint,) = compact(flat, flat != PAD_ID, PAD_ID, (ends,))
    real = phrases.reshape(-1) != PAD_ID
    tokens = phrases.reshape(-1)
    first = jnp.argmax((tokens[:, None] == tokens[None, :]) & real[None, :], axis=1) == jnp.arange(c * p)
    return Phrases(trie(phrases), sequence[0], endpoint[0], jnp.sum(real), jnp.sum(first & real))


def start(ph: Phrases, ordered: bool) -> Progress:
    """No token produced yet: at the root (unordered), at position −1 (ordered)."""
    n = ph.trie.token.shape[0]
    return Progress(jnp.int32(-1 if ordered else 0), jnp.zeros(n, jnp.int32), jnp.zeros(n, jnp.int32))


def bank(ph: Phrases, s: Progress, ordered: bool) -> jnp.ndarray:
    return s.node + 1 if ordered else jnp.sum(s.generated)


def finished(ph: Phrases, s: Progress, ordered: bool) -> jnp.ndarray:
    if ordered:
        return s.node + 1 == ph.length
    t = ph.trie
    in_final = (t.terminal[s.node] > 0) & (s.completed[s.node] < t.terminal[s.node])
    return t.count[0] - jnp.sum(s.completed) - in_final == 0


def next_tokens(ph: Phrases, s: Progress, ordered: bool) -> tuple[jnp.ndarray, jnp.ndarray]:
    """(int32[X] tokens, bool[X] which are real): fairseq's ``next_tokens`` (repeats allowed)."""
    if ordered:
        at = jnp.clip(s.node + 1, 0, ph.sequence.shape[0] - 1)
        return (jnp.stack([ph.sequence[0], ph.sequence[at]]),
                jnp.stack([s.node > 0, s.node + 1 < ph.length]))
    t = ph.trie
    return (jnp.concatenate([t.token, t.token]),
            jnp.concatenate([t.parent == 0, (t.parent == s.node) & (s.node > 0)]))


def advance(ph: Phrases, s: Progress, token: jnp.ndarray, ordered: bool) -> Progress:
    """The progress after ``token`` (int32[]) of one hypothesis (module docstring)."""
    if ordered:
        seq, end = ph.sequence, ph.endpoint
        at = jnp.clip(s.node + 1, 0, seq.shape[0] - 1)
        here = jnp.where(s.node >= 0, end[jnp.maximum(s.node, 0)], end[jnp.maximum(ph.length - 1, 0)])
        node = jnp.where(s.node + 1 == ph.length, s.node,
                         jnp.where(seq[at] == token, s.node + 1,
                                   jnp.where(here, s.node, jnp.where(token == seq[0], 0, -1))))
        return Progress(node.astype(jnp.int32), s.generated, s.completed)
    t = ph.trie
    is_child = (t.parent == s.node) & (t.token == token) & (jnp.arange(t.token.shape[0]) > 0)
    child = jnp.argmax(is_child)
    go_down = jnp.any(is_child) & (s.generated[child] < t.count[child])
    at_root = (t.parent == 0) & (t.token == token)
    root_child = jnp.argmax(at_root)
    restart = jnp.any(at_root) & (s.generated[root_child] < t.count[root_child])
    node = jnp.where(go_down, child, jnp.where(restart, root_child, 0))
    generated = s.generated.at[node].add(jnp.where(node > 0, 1, 0))
    # falling off: the path from the old node up gives its tokens back until a terminal node not yet completed
    path = t.path[s.node]                                                      # [P], -1 padded
    live = (path >= 0) & (s.node > 0)
    safe = jnp.maximum(path, 0)
    open_end = live & (t.terminal[safe] > 0) & (s.completed[safe] < t.terminal[safe])
    stop = jnp.cumsum(open_end) > 0
    before = live & ~stop
    marked = open_end & (jnp.cumsum(open_end) == 1)
    rewind = ~go_down
    generated = generated.at[safe].add(jnp.where(rewind & before, -1, 0))
    completed = s.completed.at[safe].add(jnp.where(rewind & marked, 1, 0))
    return Progress(node.astype(jnp.int32), generated, completed)


def _take(x: jnp.ndarray, idx: jnp.ndarray) -> jnp.ndarray:
    """x[b, idx[b, j], ...] for x: [B, N, ...], idx: int32[B, J]."""
    return jax.vmap(lambda row, i: row[i])(x, idx)


def order_candidates(score, parent, token, banks, valid, distinct, keep: int) -> jnp.ndarray:
    """int32[keep]: the candidates fairseq keeps, in its order (module docstring, "A step"), for one sentence:
    score float32[M], parent, token, banks int32[M], valid bool[M] (offered), distinct int32[]."""
    m = score.shape[0]
    key = (MAX_SCORE * (distinct - banks).astype(jnp.float32) + score).astype(jnp.float32)
    order = jnp.argsort(jnp.where(valid, -key, jnp.inf), stable=True)
    pair = (parent * (jnp.max(token) + 1) + token)[order]
    ok = valid[order]
    repeat = jnp.concatenate([jnp.zeros(1, bool), pair[1:] == pair[:-1]]) & ok
    kept = ok & ~repeat
    order = order[jnp.argsort(~kept, stable=True)]                              # the kept ones first, in order
    n_kept = jnp.sum(kept)
    b = banks[order]
    j = jnp.arange(m)
    new_run = jnp.concatenate([jnp.ones(1, bool), b[1:] != b[:-1]])
    run_pos = j - jax.lax.cummax(jnp.where(new_run, j, 0))
    stripe = run_pos * (n_kept + 1) + (distinct - b)
    return order[jnp.argsort(jnp.where(j < n_kept, stripe, jnp.iinfo(jnp.int32).max), stable=True)][:keep]


def search(tokens_to_logprobs, cache, src_len: jnp.ndarray, phrases: jnp.ndarray, *, beam_size: int,
           ordered: bool = False, length_penalty: float = 1.0, max_len_a: float = 1.2, max_len_b: int = 10,
           max_out: int, prefix_len=0, nbest: int = 1) -> dict:
    """fairseq's constrained beam search for B sentences (module docstring). Arguments and result as
    `constrained.constrained_search` (no ``continues``: fairseq has no such rule; the length limit leaves room for
    the forced prefix, as `search.ar_search`'s, not for the phrases); 'constraints_met' says whether the chosen
    output finished its phrases. An n-best list is fairseq's: its finished outputs by score, whether or not they
    finished their phrases."""
    _check_static(beam_size, max_out, nbest)
    batch, k = src_len.shape[0], beam_size
    max_len = decode_length(batch_length(src_len), max_len_a, max_len_b, max_out - 2, prefix_len)
    max_len_rows = jnp.repeat(max_len, k)
    ph = jax.vmap(prepare)(phrases)
    first = jax.vmap(start, in_axes=(0, None))(ph, ordered)
    tokens = jnp.full((batch, k, max_out), PAD_ID, jnp.int32).at[:, :, 0].set(BOS_ID)
    steps = jnp.zeros(tokens.shape, jnp.float32)
    init = dict(index=jnp.int32(0), alive_tokens=tokens, alive_logp=jnp.full((batch, k), NEG_INF).at[:, 0].set(0.0),
                alive_steps=steps, progress=jax.tree_util.tree_map(lambda x: jnp.repeat(x[:, None], k, 1), first),
                fin_tokens=tokens, fin_steps=steps, fin_score=jnp.full((batch, k), NEG_INF),
                fin_met=jnp.zeros((batch, k), bool), fin_count=jnp.zeros(batch, jnp.int32),
                done=jnp.zeros(batch, bool), cache=cache)
    per_beam = dict(in_axes=(None, 0, None))
    finished_all = jax.vmap(jax.vmap(finished, **per_beam), in_axes=(0, 0, None))
    next_all = jax.vmap(jax.vmap(next_tokens, **per_beam), in_axes=(0, 0, None))
    advance_all = jax.vmap(jax.vmap(advance, in_axes=(None, 0, 0, None)), in_axes=(0, 0, 0, None))
    bank_all = jax.vmap(jax.vmap(bank, **per_beam), in_axes=(0, 0, None))

    def body(s):
        i = s["index"]
        logp, cache = tokens_to_logprobs(s["alive_tokens"][:, :, i].reshape(batch * k), s["cache"], i)
        vocab = logp.shape[-1]
        logp = _restrict(logp, i, max_len_rows, "fairseq").reshape(batch, k, vocab)
        unfinished = ~finished_all(ph, s["progress"], ordered) & (i > 0)
        logp = logp.at[:, :, EOS_ID].set(jnp.where(unfinished, NEG_INF, logp[:, :, EOS_ID]))
        ext = s["alive_logp"][:, :, None] + logp                                       # [B, K, V]
        first_step = i == 0
        top_score, flat = top_k(ext, 2 * k, axes=2)
        best1 = jnp.argmax(ext, axis=-1)                                                 # [B, K]
        ctok, cok = next_all(ph, s["progress"], ordered)                                # [B, K, X]
        cok = cok & (~first_step | (jnp.arange(k) == 0)[None, :, None])
        x = ctok.shape[-1]
        parent = jnp.concatenate([flat // vocab, jnp.broadcast_to(jnp.arange(k), (batch, k)),
                                  jnp.broadcast_to(jnp.repeat(jnp.arange(k), x), (batch, k * x))], axis=1)
        token = jnp.concatenate([flat % vocab, best1, ctok.reshape(batch, k * x)], axis=1).astype(jnp.int32)
        valid = jnp.concatenate([jnp.ones((batch, 2 * k), bool), jnp.broadcast_to(~first_step, (batch, k)),
                                 cok.reshape(batch, k * x)], axis=1)
        score = _take(ext.reshape(batch, k * vocab), parent * vocab + token)
        progress = advance_all(ph, jax.tree_util.tree_map(lambda v: _take(v, parent), s["progress"]), token,
                               ordered)
        banks = bank_all(ph, progress, ordered)
        pick = jax.vmap(order_candidates, in_axes=(0, 0, 0, 0, 0, 0, None))(
            score, parent, token, banks, valid, ph.distinct, 2 * k)                    # [B, 2K]
        cand_score, parent, token = _take(score, pick), _take(parent, pick), _take(token, pick)
        progress = jax.tree_util.tree_map(lambda v: _take(v, pick), progress)
        cand_tokens = _take(s["alive_tokens"], parent).at[:, :, i + 1].set(token)
        gain = _take(logp.reshape(batch, k * vocab), parent * vocab + token)
        cand_steps = _take(s["alive_steps"], parent).at[:, :, i + 1].set(gain)
        eos = (token == EOS_ID) & (cand_score > NEG_INF)

        put, fin_count, keep = fairseq_selection(eos, s["fin_count"], s["done"], k)
        fin_tokens, fin_steps = put(cand_tokens, s["fin_tokens"]), put(cand_steps, s["fin_steps"])
        fin_score = put(_normalise(cand_score, i + 1, length_penalty), s["fin_score"])
        fin_met = put(finished_all(ph, progress, ordered), s["fin_met"])
        done = s["done"] | (fin_count >= k) | (i >= max_len)
        cache, in_slot = follow_parents(cache, _take(parent, keep), ~done, i)
        keep = _take(keep, in_slot)
        return dict(index=i + 1, alive_tokens=_take(cand_tokens, keep),
                    alive_logp=jnp.where(done[:, None], NEG_INF, _take(cand_score, keep)),
                    alive_steps=_take(cand_steps, keep),
                    progress=jax.tree_util.tree_map(lambda v: _take(v, keep), progress),
                    fin_tokens=fin_tokens, fin_steps=fin_steps, fin_score=fin_score, fin_met=fin_met,
                    fin_count=fin_count, done=done, cache=cache)

    s = jax.lax.while_loop(lambda s: ~jnp.all(s["done"]) & (s["index"] < max_out - 1), body, init)
    score, tokens, steps, met = by_score(s["fin_score"], s["fin_tokens"], s["fin_steps"], s["fin_met"])
    return {**ranked_result(tokens, score, steps, nbest), "constraints_met": met[:, 0]}
