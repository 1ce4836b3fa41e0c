"""The DA-Transformer authors' beam search, DAG-Search (thu-coai/DAG-Search, their `--decode-strategy beamsearch`):
what a model imported from their code decodes to with it, output for output.

It walks the graph's vertices in order, not the output's positions. A hypothesis is a prefix y_≤m; it holds, for
each vertex j its paths reach, the log-sum of the paths that emit it ending at j, and overall the log-sum of every
path that has emitted it so far ("its score", which grows as later steps reach it elsewhere). At vertex i:

1. the prefixes that reach i are ranked by (score + γ · log10 P_lm(y_≤m)) / m^α (m: the prefix's tokens after BOS);
   the ``per_length`` best of each length are kept, of those the ``beam`` best (at the last vertex: one and one);
2. each kept prefix extends by i's candidate pairs (`dag.candidates`: the ``top`` best (vertex j > i, token) pairs by
   log P(j | i) + β · log P(token | j), each j offering its ``top`` best tokens), best first, skipping a pair whose
   token the prefix bans (the authors' n-gram prevention, `repeats.bans`) and stopping once the pairs taken hold
   ``top_p`` of the probability; the extended prefix reaches j with its score at i plus the pair's.

The output is the best prefix at the last vertex. Each step reads and writes a few pointers per hypothesis, so it runs
on the host in NumPy (as the authors' runs in C++ beside the GPU), vectorised over the batch, through
`jax.pure_callback` from the jit'd decoder. tests/dat_reference.py transcribes the authors' C++ loop;
tests/data/dag_search/ holds their extension's outputs.

Two departures, both documented in docs/dat.md: a prefix never grows past its row's output capacity (``limit``,
eval.length_cap_*: their search has none), and a pair of score −inf is never taken (a graph offers one only past
its last vertex).
"""

from __future__ import annotations

import numpy as np
import jax
import jax.numpy as jnp

from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID
from jaxnat.decoding import ngram, repeats
from jaxnat.models.dat import dag


class _Prefixes:
    """Every prefix made so far (a trie over all rows, node 0 … B − 1 the rows' BOS), each with its parent, token,
    length (tokens after BOS), row, score (log-sum of its paths so far), LM log10 score and LM state."""

    def __init__(self, rows: int, lm, lm_state):
        self.size = rows
        cap = max(64, 4 * rows)
        self.parent = np.full(cap, -1, np.int64)
        self.token = np.zeros(cap, np.int64)
        self.token[:rows] = BOS_ID
        self.length = np.zeros(cap, np.int64)
        self.row = np.zeros(cap, np.int64)
        self.row[:rows] = np.arange(rows)
        self.score = np.full(cap, -np.inf)
        self.score[:rows] = 0.0
        self.lm_score = np.zeros(cap)
        self.lm_state = None if lm is None else np.zeros((cap, lm_state.shape[-1]), np.int32)
        if lm is not None:
            self.lm_state[:rows] = lm_state
        self.keys = np.zeros(0, np.int64)   # parent · V + token of every prefix but the BOS ones, sorted
        self.ids = np.zeros(0, np.int64)    # the prefix of each key

    def _grow(self, need: int):
        cap = len(self.parent)
        if need <= cap:
            return
        new = max(need, 2 * cap)
        for name in ("parent", "token", "length", "row", "score", "lm_score", "lm_state"):
            old = getattr(self, name)
            if old is None:
                continue
            fill = -np.inf if name == "score" else (-1 if name == "parent" else 0)
            grown = np.full((new, *old.shape[1:]), fill, old.dtype)
            grown[:cap] = old
            setattr(self, name, grown)

    def child(self, parent: np.ndarray, token: np.ndarray, vocab: int, lm) -> np.ndarray:
        """The prefix each parent + token makes, created where it is new (int64[N])."""
        key = parent * vocab + token
        pos = np.searchsorted(self.keys, key)
        found = (pos < len(self.keys)) & (self.keys[np.minimum(pos, len(self.keys) - 1)] == key) if len(
            self.keys) else np.zeros(len(key), bool)
        out = np.empty(len(key), np.int64)
        out[found] = self.ids[pos[found]]
        new_keys = np.sort(key[~found])
        new_keys = new_keys[_run_starts(new_keys)]
        ids = np.arange(self.size, self.size + len(new_keys))
        if len(new_keys):
            self._grow(self.size + len(new_keys))
            up, tok = new_keys // vocab, new_keys % vocab
            self.parent[ids], self.token[ids] = up, tok
            self.length[ids], self.row[ids] = self.length[up] + 1, self.row[up]
            if lm is not None:
                lp, state = ngram.advance(lm, self.lm_state[up], tok.astype(np.int32), xp=np)
                self.lm_score[ids] = self.lm_score[up] + lp
                self.lm_state[ids] = state
            self.size += len(new_keys)
            at = np.searchsorted(self.keys, new_keys)
            self.keys, self.ids = np.insert(self.keys, at, new_keys), np.insert(self.ids, at, ids)
        out[~found] = ids[np.searchsorted(new_keys, key[~found])]
        return out

    def history(self, ids: np.ndarray, least: int = 1) -> np.ndarray:
        """int64[N, T]: each prefix's tokens, BOS first, PAD after (T: the longest + 1, at least ``least``)."""
        length = self.length[ids]
        out = np.full((len(ids), max(int(length.max()) + 1, least)), PAD_ID, np.int64)
        at = ids.copy()
        for back in range(out.shape[1]):
            pos = length - back
            live = pos >= 0
            out[np.nonzero(live)[0], pos[live]] = self.token[at[live]]
            at = np.where(live & (self.parent[at] >= 0), self.parent[at], at)
        return out


def _run_starts(keys: np.ndarray) -> np.ndarray:
    """bool[N]: where each run of equal sorted ``keys`` begins."""
    out = np.empty(len(keys), bool)
    out[:1] = True
    np.not_equal(keys[1:], keys[:-1], out=out[1:])
    return out


def _logsumexp_groups(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """float64[G]: the log-sum-exp of each run values[starts[g] : starts[g + 1]]."""
    if len(starts) == len(values):  # every run one value (most steps of a small beam): its own log-sum-exp
        return values.astype(np.float64)
    top = np.maximum.reduceat(values, starts)
    safe = np.where(np.isfinite(top), top, 0.0)
    sizes = np.diff(starts, append=len(values))
    with np.errstate(divide="ignore"):
        return np.log(np.add.reduceat(np.exp(values - np.repeat(safe, sizes)), starts)) + safe


def _groups(keys: np.ndarray):
    """(order, starts, unique keys): ``keys`` sorted stably and the start of each run of equal keys."""
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    starts = np.flatnonzero(_run_starts(sorted_keys))
    return order, starts, sorted_keys[starts]


def _ranked(group: np.ndarray, score: np.ndarray) -> np.ndarray:
    """int64[N]: each item's rank among the items of its group, best score first, ties to the earlier item."""
    order = np.lexsort((-score, group))
    g = group[order]
    start = _run_starts(g)
    run_start = np.maximum.accumulate(np.where(start, np.arange(len(order)), 0))
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order)) - run_start
    return rank


def search(score: np.ndarray, vertex: np.ndarray, token: np.ndarray, n_vertices: np.ndarray, limit: np.ndarray,
           width: int, vocab: int, beam: int, per_length: int, top_p: float, alpha: float, gamma: float = 0.0,
           lm=None, no_repeat: int = 0, no_consecutive: int = 0):
    """The authors' beam search (module docstring) over a batch of graphs, on the host. score, vertex, token:
    [B, L, C] each vertex's candidate pairs (`dag.candidates`); n_vertices, limit: int[B] (each row's vertices and
    output capacity, BOS and EOS counted, ≤ width); lm: an `ngram.NgramLM` of NumPy tables, or None. Returns (tokens
    int32[B, width]: [BOS, the output's tokens but any BOS, EOS or PAD, EOS] then PAD, as fairseq prints the
    authors' output; log-sum of the output prefix's paths float32[B] (−inf: no prefix reached the last vertex
    within the capacity, the output then empty); each kept token's share of it float32[B, width])."""
    B, L, C = score.shape
    n_vertices, limit = np.asarray(n_vertices, np.int64), np.asarray(limit, np.int64)
    prefixes = _Prefixes(B, lm, None if lm is None else np.asarray(ngram.start(lm, (B,), xp=np)))
    # per vertex, the (prefix, log-sum of its paths ending there) pairs the steps before sent to it
    inbox: dict[int, list] = {0: [(np.arange(B), np.zeros(B))]}
    best = np.full(B, -1, np.int64)
    ngram_n = 2 if no_repeat == 1 else no_repeat   # their C++ rule: n = 1 bans what n = 2 bans
    for i in range(L):
        arrived = inbox.pop(i, None)
        if not arrived:
            continue
        ids = np.concatenate([a for a, _ in arrived])
        at = np.concatenate([s for _, s in arrived])
        order, starts, node = _groups(ids)
        here = _logsumexp_groups(at[order], starts)                  # each prefix's paths ending at i
        arrival = np.argsort(order[starts])                          # ties: the prefix that arrived first
        node, here = node[arrival], here[arrival]
        row, length = prefixes.row[node], prefixes.length[node]
        last = i == n_vertices[row] - 1
        with np.errstate(invalid="ignore", divide="ignore"):
            ranking = np.where(length > 0, (gamma * prefixes.lm_score[node] + prefixes.score[node])
                               / np.maximum(length, 1) ** alpha, 0.0)
        if len(node) > min(per_length, beam) or last.any():         # (else every prefix is kept)
            keep = _ranked(row * (L + 1) + length, ranking) < np.where(last, 1, per_length)
            node, here, row, length, last, ranking = (a[keep] for a in (node, here, row, length, last, ranking))
            keep = _ranked(row, ranking) < np.where(last, 1, beam)
            node, here, row, length, last, ranking = (a[keep] for a in (node, here, row, length, last, ranking))
        order = np.lexsort((-ranking, row))                          # the beam, best first, as it extends
        node, here, row, length, last = (a[order] for a in (node, here, row, length, last))
        best[row[last]] = node[last]
        node, here, row, length = node[~last], here[~last], row[~last], length[~last]
        if not len(node):
            continue
        add, to, tok = score[row, i].astype(np.float64), vertex[row, i].astype(np.int64), token[row, i]
        ok = np.isfinite(add)
        if no_repeat or no_consecutive:
            # (an n-gram longer than the history fits in none: `repeats.ngram_bans` reads n ≤ T)
            ban = repeats.bans(prefixes.history(node, ngram_n), length, ngram_n, no_consecutive, xp=np)  # [N, M]
            ok &= ~repeats.banned(tok, ban, xp=np)
        taken = np.where(ok, np.exp(add.astype(np.float32)), np.float32(0.0))
        ok &= (np.cumsum(taken, axis=1, dtype=np.float32) - taken) < np.float32(top_p)   # the mass before each
        # within the row's capacity with EOS after the output (a last token other than EOS takes a slot of its own)
        ends = n_vertices[row][:, None]
        room = np.where((to == ends - 1) & (tok == EOS_ID), limit[row][:, None] - 1, limit[row][:, None] - 2)
        ok &= (length[:, None] + 1 <= room) & (to < ends)
        k, c = np.nonzero(ok)
        if not len(k):
            continue
        child = prefixes.child(node[k], tok[k, c].astype(np.int64), vocab, lm)
        reach = here[k] + add[k, c]
        order, starts, kids = _groups(child)
        prefixes.score[kids] = np.logaddexp(prefixes.score[kids], _logsumexp_groups(reach[order], starts))
        target = to[k, c]
        order, starts, targets = _groups(target)
        for t, a, b in zip(targets.tolist(), starts.tolist(), starts[1:].tolist() + [len(order)]):
            inbox.setdefault(t, []).append((child[order[a:b]], reach[order[a:b]]))
    return _outputs(prefixes, best, width)


def _outputs(prefixes: _Prefixes, best: np.ndarray, width: int):
    B = len(best)
    tokens = np.full((B, width), PAD_ID, np.int32)
    shares = np.zeros((B, width), np.float32)
    score = np.full(B, -np.inf, np.float32)
    tokens[:, :2] = [BOS_ID, EOS_ID]
    for b in np.nonzero(best >= 0)[0]:
        path = []
        at = best[b]
        while prefixes.parent[at] >= 0:
            path.append(at)
            at = prefixes.parent[at]
        path.reverse()
        kept = [p for p in path if prefixes.token[p] not in (BOS_ID, EOS_ID, PAD_ID)]
        tokens[b, 1:len(kept) + 1] = prefixes.token[kept]
        tokens[b, len(kept) + 1] = EOS_ID
        shares[b, 1:len(kept) + 1] = prefixes.score[kept] - prefixes.score[prefixes.parent[kept]]
        score[b] = prefixes.score[best[b]]
    return tokens, score, shares


def dag_search(links: jax.Array, logp: jax.Array, n_vertices: jax.Array, limit: jax.Array, width: int, *,
               beam: int, per_length: int, top: int, top_p: float, alpha: float, beta: float = 1.0,
               gamma: float = 0.0, lm=None, no_repeat: int = 0, no_consecutive: int = 0):
    """The authors' beam search from inside a jit'd decoder: the candidate pairs on the device (`dag.candidates`),
    the search on the host (`search`). links: float32[B, L, L]; logp: float32[B, L, V] log-softmaxed over the whole
    vocabulary (theirs: no token is barred from any vertex); n_vertices, limit: int32[B]. Returns `search`'s
    (tokens int32[B, width], score float32[B], shares float32[B, width])."""
    B = links.shape[0]
    score, vertex, token = dag.candidates(links, logp, top, beta)
    shapes = (jax.ShapeDtypeStruct((B, width), jnp.int32), jax.ShapeDtypeStruct((B,), jnp.float32),
              jax.ShapeDtypeStruct((B, width), jnp.float32))

    def host(score, vertex, token, n_vertices, limit, lm):
        return search(np.asarray(score), np.asarray(vertex), np.asarray(token), np.asarray(n_vertices),
                      np.asarray(limit), width, logp.shape[-1], beam, per_length, top_p, alpha, gamma,
                      None if lm is None else jax.tree_util.tree_map(np.asarray, lm), no_repeat, no_consecutive)

    return jax.pure_callback(host, shapes, score, vertex, token, n_vertices, limit, lm)
