"""The DA-Transformer authors' beam search, DAG-Search (thu-coai/DAG-Search, their `--decode-strategy beamsearch`):
what a model imported from their code decodes to with it, output for output.

It walks the graph's vertices in order, not the output's positions. A hypothesis is a prefix y_≤m; it holds, for
each vertex j its paths reach, the log-sum of the paths that emit it ending at j, and overall the log-sum of every
path that has emitted it so far ("its score", which grows as later steps reach it elsewhere). At vertex i:

1. the prefixes that reach i are ranked by (score + γ · log10 P_lm(y_≤m)) / m^α (m: the prefix's tokens after BOS);
   the ``per_length`` best of each length are kept, of those the ``beam`` best (at the last vertex: one and one, or
   with an n-best list of N, N and N);
2. each kept prefix extends by i's candidate pairs (`dag.candidates`: the ``top`` best (vertex j > i, token) pairs by
   log P(j | i) + β · log P(token | j), each j offering its ``top`` best tokens), best first, skipping a pair whose
   token the prefix bans (the authors' n-gram prevention, `repeats.bans`) and stopping once the pairs taken hold
   ``top_p`` of the probability; the extended prefix reaches j with its score at i plus the pair's.

The output is the best prefix at the last vertex (its n-best list, jaxnat's addition, the N best there, the output
first: theirs keeps one). Each step reads and writes a few pointers per hypothesis, so it runs
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


_NONE = np.iinfo(np.int64).max  # no item yet (`_Prefixes.groups`)


class _Keys:
    """Distinct int64 keys → int64 values, looked up and added an array at a time. They are kept sorted in two runs,
    a large one and a small one that takes the insertions, merged into the large one once copying it at each insertion
    would cost more than the merge spread over the insertions it saves (the small run longer than the square root of
    the large one's length times the insertion's): one sorted array copied whole at each insertion was a third of the
    search."""

    def __init__(self):
        empty = np.zeros(0, np.int64)
        self.runs = [(empty, empty), (empty, empty)]   # (keys, values): the large run, the small one

    def find(self, keys: np.ndarray) -> np.ndarray:
        """int64[N]: each key's value, −1 where it has none."""
        out = np.full(len(keys), -1, np.int64)
        for run, values in self.runs:
            if len(run):
                at = np.minimum(np.searchsorted(run, keys), len(run) - 1)
                hit = run[at] == keys
                out[hit] = values[at[hit]]
        return out

    def add(self, keys: np.ndarray, values: np.ndarray):
        """Adds ``keys`` (sorted, distinct, none held yet) with their ``values``."""
        (large, large_values), (small, small_values) = self.runs
        small, small_values = _merged(small, small_values, keys, values)
        if len(small) ** 2 > len(large) * len(keys):
            large, large_values = _merged(large, large_values, small, small_values)
            small, small_values = small[:0], small_values[:0]
        self.runs = [(large, large_values), (small, small_values)]


def _merged(keys: np.ndarray, values: np.ndarray, more: np.ndarray, more_values: np.ndarray):
    """Two sorted runs of distinct keys, with their values, as one (np.insert's work without its overhead)."""
    place = np.searchsorted(keys, more) + np.arange(len(more))     # where each of ``more`` lands
    taken = np.zeros(len(keys) + len(more), bool)
    taken[place] = True
    out, out_values = np.empty(len(taken), keys.dtype), np.empty(len(taken), values.dtype)
    out[place], out_values[place] = more, more_values
    out[~taken], out_values[~taken] = keys, values
    return out, out_values


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
        self.first = np.full(cap, _NONE)    # the scratch of `groups`, _NONE between calls
        self.children = _Keys()             # parent · V + token → the prefix, of every prefix but the BOS ones

    def _grow(self, need: int):
        cap = len(self.parent)
        if need <= cap:
            return
        new = max(need, 4 * cap)
        for name in ("parent", "token", "length", "row", "score", "lm_score", "lm_state", "first"):
            old = getattr(self, name)
            if old is None:
                continue
            fill = {"score": -np.inf, "parent": -1, "first": _NONE}.get(name, 0)
            grown = np.full((new, *old.shape[1:]), fill, old.dtype)
            grown[:cap] = old
            setattr(self, name, grown)

    def child(self, parent: np.ndarray, token: np.ndarray, vocab: int, lm) -> np.ndarray:
        """The prefix each parent + token makes, created where it is new (int64[N])."""
        key = parent * vocab + token
        order = np.argsort(key)
        first = _run_starts(key[order])
        keys = key[order[first]]                                  # the distinct keys, sorted
        made = self.children.find(keys)
        new = made < 0
        new_keys = keys[new]
        ids = np.arange(self.size, self.size + len(new_keys))
        made[new] = ids
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
            self.children.add(new_keys, ids)
        out = np.empty(len(key), np.int64)
        out[order] = made[np.cumsum(first) - 1]
        return out

    def groups(self, ids: np.ndarray):
        """(order, starts): the items of ``ids`` (prefixes) grouped by prefix, stably, the groups in the order of
        their first item: ``order`` lists the items group by group, ``starts`` where each group begins in it."""
        first = self.first
        np.minimum.at(first, ids, np.arange(len(ids)))
        leader = first[ids]                  # each item's first item of its prefix: a small integer, quick to sort
        first[ids] = _NONE
        order = _stable_order(leader)
        return order, np.flatnonzero(_run_starts(leader[order]))

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


def _stable_order(keys: np.ndarray) -> np.ndarray:
    """int64[N]: ``keys`` (integers ≥ 0) sorted stably. Keys below 2^15 are sorted as int16, which NumPy sorts by
    radix: 14x faster than int64's merge sort at 8,000."""
    if len(keys) > 512 and keys.max() < 2 ** 15:
        keys = keys.astype(np.int16)
    return np.argsort(keys, kind="stable")


def _best_first(values: np.ndarray) -> np.ndarray:
    """int64[N]: ``values`` (floats) sorted from the largest, equal ones (and NaNs) in their order: NumPy's
    vectorised quicksort, whose order is that one where no two are equal, else its merge sort (5x slower at 8,000;
    as fast below a thousand)."""
    if len(values) < 1024:
        return np.argsort(-values, kind="stable")
    order = np.argsort(-values)
    ranked = values[order]
    if (ranked[1:] == ranked[:-1]).any() or np.isnan(ranked[-1:]).any():   # (NaNs sort last)
        order = np.argsort(-values, kind="stable")
    return order


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


def _ranks(group: np.ndarray) -> np.ndarray:
    """int64[N]: each item's rank among the earlier items of its group (the items ranked already, best first): one
    stable sort of the group ids, which are small integers, where ranking afresh would sort the scores again."""
    order = _stable_order(group)
    rank = np.empty(len(order), np.int64)
    rank[order] = _places(group[order])
    return rank


def _places(keys: np.ndarray) -> np.ndarray:
    """int64[N]: each item's place in its run of equal sorted ``keys``."""
    at = np.arange(len(keys))
    return at - np.maximum.accumulate(np.where(_run_starts(keys), at, 0))


def search(score: np.ndarray, vertex: np.ndarray, token: np.ndarray, n_vertices: np.ndarray, limit: np.ndarray,
           width: int, vocab: int, beam: int, per_length: int, top_p: float, alpha: float, gamma: float = 0.0,
           lm=None, no_repeat: int = 0, no_consecutive: int = 0, nbest: int = 1):
    """The authors' beam search (module docstring) over a batch of graphs, on the host. score, vertex, token:
    [B, L, C] each vertex's candidate pairs (`dag.candidates`); n_vertices, limit: int[B] (each row's vertices and
    output capacity, BOS and EOS counted, ≤ width); lm: an `ngram.NgramLM` of NumPy tables, or None. Returns each
    row's ``nbest`` best prefixes at its last vertex, the output first: (tokens int32[B, N, width]: [BOS, the
    output's tokens but any BOS, EOS or PAD, EOS] then PAD, as fairseq prints the authors' output; log-sum of the
    output prefix's paths float32[B, N] (−inf: no such prefix within the capacity, the output then empty); each kept
    token's share of it float32[B, N, width])."""
    B, L, C = score.shape
    n_vertices, limit = np.asarray(n_vertices, np.int64), np.asarray(limit, np.int64)
    prefixes = _Prefixes(B, lm, None if lm is None else np.asarray(ngram.start(lm, (B,), xp=np)))
    # per vertex, the (prefix, log-sum of its paths ending there) pairs the steps before sent to it
    inbox: dict[int, list] = {0: [(np.arange(B), np.zeros(B))]}
    best = np.full((B, nbest), -1, np.int64)    # each row's n-best list at its last vertex
    ngram_n = 2 if no_repeat == 1 else no_repeat   # their C++ rule: n = 1 bans what n = 2 bans
    for i in range(L):
        arrived = inbox.pop(i, None)
        if not arrived:
            continue
        ids = np.concatenate([a for a, _ in arrived])
        at = np.concatenate([s for _, s in arrived])
        order, starts = prefixes.groups(ids)                         # (in the order they arrived: ties go first)
        node, here = ids[order[starts]], _logsumexp_groups(at[order], starts)   # each prefix's paths ending at i
        row, length = prefixes.row[node], prefixes.length[node]
        last = i == n_vertices[row] - 1
        with np.errstate(invalid="ignore", divide="ignore"):
            ranking = np.where(length > 0, (gamma * prefixes.lm_score[node] + prefixes.score[node])
                               / np.maximum(length, 1) ** alpha, 0.0)
        order = _best_first(ranking)
        order = order[_stable_order(row[order])]   # each row's prefixes best first (ties: the earlier), as they extend
        node, here, row, length, last = (a[order] for a in (node, here, row, length, last))
        if len(node) > min(per_length, beam) or last.any():         # (else every prefix is kept)
            keep = _ranks(row * (L + 1) + length) < np.where(last, nbest, per_length)
            node, here, row, length, last = (a[keep] for a in (node, here, row, length, last))
            keep = _places(row) < np.where(last, nbest, beam)             # (rows in order)
            node, here, row, length, last = (a[keep] for a in (node, here, row, length, last))
        best[row[last], _places(row[last])] = node[last]
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
        order, starts = prefixes.groups(child)
        kids = child[order[starts]]
        prefixes.score[kids] = np.logaddexp(prefixes.score[kids], _logsumexp_groups(reach[order], starts))
        target = to[k, c]
        order = _stable_order(target)
        starts = np.flatnonzero(_run_starts(target[order]))
        targets = target[order[starts]]
        for t, a, b in zip(targets.tolist(), starts.tolist(), starts[1:].tolist() + [len(order)]):
            inbox.setdefault(t, []).append((child[order[a:b]], reach[order[a:b]]))
    return _outputs(prefixes, best, width)


def _outputs(prefixes: _Prefixes, best: np.ndarray, width: int):
    """`search`'s outputs of the prefixes ``best`` int64[B, N] (−1: none)."""
    tokens = np.full((*best.shape, width), PAD_ID, np.int32)
    shares = np.zeros((*best.shape, width), np.float32)
    score = np.full(best.shape, -np.inf, np.float32)
    tokens[..., :2] = [BOS_ID, EOS_ID]
    for b, k in zip(*np.nonzero(best >= 0)):
        path = []
        at = best[b, k]
        while prefixes.parent[at] >= 0:
            path.append(at)
            at = prefixes.parent[at]
        path.reverse()
        kept = [p for p in path if prefixes.token[p] not in (BOS_ID, EOS_ID, PAD_ID)]
        tokens[b, k, 1:len(kept) + 1] = prefixes.token[kept]
        tokens[b, k, len(kept) + 1] = EOS_ID
        shares[b, k, 1:len(kept) + 1] = prefixes.score[kept] - prefixes.score[prefixes.parent[kept]]
        score[b, k] = prefixes.score[best[b, k]]
    return tokens, score, shares


def dag_search(links: jax.Array, logp: jax.Array, n_vertices: jax.Array, limit: jax.Array, width: int, *,
               beam: int, per_length: int, top: int, top_p: float, alpha: float, beta: float = 1.0,
               gamma: float = 0.0, lm=None, no_repeat: int = 0, no_consecutive: int = 0, nbest: int = 1):
    """The authors' beam search from inside a jit'd decoder: the candidate pairs on the device (`dag.candidates`),
    the search on the host (`search`). links: float32[B, L, L]; logp: float32[B, L, V] log-softmaxed over the whole
    vocabulary (theirs: no token is barred from any vertex); n_vertices, limit: int32[B]. Returns `search`'s
    n-best lists (tokens int32[B, N, width], score float32[B, N], shares float32[B, N, width]), the output first."""
    B = links.shape[0]
    score, vertex, token = dag.candidates(links, logp, top, beta)
    shapes = (jax.ShapeDtypeStruct((B, nbest, width), jnp.int32), jax.ShapeDtypeStruct((B, nbest), jnp.float32),
              jax.ShapeDtypeStruct((B, nbest, width), jnp.float32))

    def host(score, vertex, token, n_vertices, limit, lm):
        return search(np.asarray(score), np.asarray(vertex), np.asarray(token), np.asarray(n_vertices),
                      np.asarray(limit), width, logp.shape[-1], beam, per_length, top_p, alpha, gamma,
                      None if lm is None else jax.tree_util.tree_map(np.asarray, lm), no_repeat, no_consecutive,
                      nbest)

    return jax.pure_callback(host, shapes, score, vertex, token, n_vertices, limit, lm)
