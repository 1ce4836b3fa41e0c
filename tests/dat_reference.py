"""Plain-Python references for the DA-Transformer's dynamic programs (jaxnat/models/dat/): each enumerates every
path (and, where tokens are chosen, every token string) of a tiny graph, so that it shares nothing with the
kernels but the definitions in docs/dat.md."""

from __future__ import annotations

import itertools
import math

import numpy as np

BOS, EOS, PAD = 1, 2, 0


def paths(n: int, most: int | None = None):
    """Every path 0 → n − 1 through vertices 0 … n − 1 with increasing vertices, at most ``most`` vertices long."""
    inner = range(1, n - 1)
    for k in range(0, n - 1):
        if most is not None and k + 2 > most:
            break
        for middle in itertools.combinations(inner, k):
            yield (0, *middle, n - 1) if n > 1 else (0,)


def edge_sum(links, path) -> float:
    return sum(float(links[a, b]) for a, b in zip(path, path[1:]))


def logsumexp(values) -> float:
    values = [v for v in values if v > -math.inf]
    if not values:
        return -math.inf
    m = max(values)
    return m + math.log(sum(math.exp(v - m) for v in values))


def loglik(match, links, tgt_len: int, n: int) -> float:
    """log Σ over paths of tgt_len vertices of links + match[t, a_t] (match: [T, L], links: [L, L])."""
    return logsumexp(edge_sum(links, p) + sum(float(match[t, v]) for t, v in enumerate(p))
                     for p in paths(n) if len(p) == tgt_len)


def best_alignment(match, links, tgt_len: int, n: int):
    """(best score, the set of best paths) over the paths of tgt_len vertices."""
    scored = [(edge_sum(links, p) + sum(float(match[t, v]) for t, v in enumerate(p)), p)
              for p in paths(n) if len(p) == tgt_len]
    if not scored:
        return -math.inf, set()
    best = max(s for s, _ in scored)
    return best, {p for s, p in scored if s >= best - 1e-4}


def follow(links, scores, n: int, width: int, beta: float):
    """Greedy (β = 0) or lookahead pointers from vertex 0, jumping to n − 1 at the last slot of ``width``."""
    path = [0]
    while path[-1] != n - 1:
        i = path[-1]
        if len(path) == width - 1:
            path.append(n - 1)
            break
        values = [float(links[i, j]) + beta * float(scores[j]) if j > i and j < n else -math.inf
                  for j in range(links.shape[1])]
        path.append(int(np.argmax(values)))
    return tuple(path)


def follow_unrepeated(links, emit, allowed, n: int, width: int, beta: float, top: int, no_repeat: int,
                      no_consecutive: int, top_p: float):
    """The authors' lookahead with n-gram prevention (their inference_lookahead_repeatprevent) on one graph, with
    jaxnat's capacity (the last slot of ``width`` steps to n − 1): at vertex i the ``top`` best (j, token) pairs by
    links[i, j] + β · log P(token | j) among j's ``top`` best allowed tokens (n − 1: EOS), in order; the first whose
    token is neither the last one, nor one repeating the last k tokens (k ≤ no_consecutive), nor one completing an
    n-gram the output holds (n = no_repeat > 0) is taken, unless the banned ones before it sum past ``top_p`` in
    probability, or all are banned: then the first. Returns (tokens [BOS … EOS], log P(y, a | x), each token's
    log P(token | vertex), 0 at BOS)."""
    def tops(j):
        if j == n - 1:
            return [EOS]
        return [int(t) for t in np.argsort(-np.where(allowed, emit[j], -np.inf), kind="stable") if allowed[t]][:top]

    res, lps, i, score = [BOS], [0.0], 0, float(emit[0, BOS])
    while i != n - 1:
        cands = sorted(((float(links[i, j]) + beta * float(emit[j, t]), j, t) for j in range(i + 1, n)
                        for t in tops(j)), key=lambda c: -c[0])[:top]        # stable: by vertex, then token rank
        bans = {res[-1]}
        for k in range(2, min(no_consecutive, (len(res) + 1) // 2) + 1):
            if all(res[-m] == res[-k - m] for m in range(1, k)):
                bans.add(res[-k])
        grams = {tuple(res[p:p + no_repeat]) for p in range(len(res) - no_repeat + 1)} if no_repeat else set()
        key = tuple(res[len(res) - no_repeat + 1:]) if no_repeat else ()
        pick, mass = 0, 0.0
        for rank, (value, j, t) in enumerate(cands):
            if t not in bans and key + (t,) not in grams:
                pick = rank
                break
            mass += math.exp(value)
            if mass > top_p:
                break
        _, j, t = cands[pick]
        if len(res) == width - 1:
            j, t = n - 1, EOS
        score += float(links[i, j]) + float(emit[j, t])
        res.append(t)
        lps.append(float(emit[j, t]))
        i = j
    return res, score, lps


def unrepeated(tokens, no_repeat: int, no_consecutive: int, beam: bool = False) -> bool:
    """Whether the inner tokens ``tokens`` (BOS before them) pass the authors' n-gram prevention: no token equal to
    the one before it (in their beam search only with no_consecutive > 0), none making the last k tokens repeat the k
    before them (k ≤ no_consecutive), none completing an n-gram already there (n = no_repeat > 0)."""
    res = [BOS, *tokens]
    for t in range(1, len(res)):
        if res[t] == res[t - 1] and (no_consecutive or not beam):
            return False
        if any(res[t - k + 1:t + 1] == res[t - 2 * k + 1:t - k + 1] for k in range(2, no_consecutive + 1)
               if t - 2 * k + 1 >= 0):
            return False
        if no_repeat and t >= no_repeat - 1 and any(res[t - no_repeat + 1:t + 1] == res[p:p + no_repeat]
                                                    for p in range(t - no_repeat + 1)):
            return False
    return True


def viterbi(links, scores, bos: float, n: int, width: int, beta: float, joint: bool = True, authors: bool = False):
    """(best normalised score, {best path: its log P(y, a | x)}) over paths of ≤ width vertices, a vertex emitting
    its score (the last one EOS's, in ``scores``), vertex 0 BOS (``bos``). Ranked by joint: log P(y, a | x), else the
    links alone; over the length M, the path's vertices; with ``authors`` (their code) the inner vertices, at least
    one (or the direct path, where no other fits), BOS's term but not EOS's, and the first inner vertex's token also
    when not joint."""
    scored = []
    for p in paths(n, width):
        raw = bos + edge_sum(links, p) + sum(float(scores[v]) for v in p[1:])
        if authors:
            inner = p[1:-1]
            if not inner:
                continue
            tokens = [float(scores[v]) for v in (inner if joint else inner[:1])]
            ranked, length = (bos if joint else 0.0) + edge_sum(links, p) + sum(tokens), len(inner)
        else:
            ranked, length = raw if joint else edge_sum(links, p), len(p)
        scored.append((ranked / length ** beta, raw, p))
    if not scored:  # the authors' convention, no inner vertex within the width: the direct path
        scored = [(0.0, bos + float(links[0, n - 1]) + float(scores[n - 1]), (0, n - 1))]
    best = max(s for s, _, _ in scored)
    return best, {p: raw for s, raw, p in scored if s >= best - 1e-4}


def beam_best(links, emit, allowed, n: int, width: int, alpha: float, top: int, bonus=None, keep=None):
    """argmax_y log P(y | x) / |y|^α, P(y | x) summed over every path and token choice (each inner vertex one of
    its ``top`` best allowed tokens) that emits y, y with BOS and EOS and at most ``width`` tokens. Returns
    (best normalised score, {y: log P(y | x)} of the best ones). bonus: y → what is added to log P(y | x) before
    the normalisation (an LM's weighted score), or None; keep: y → whether y is searched (`beam_ranked`)."""
    ranked = beam_ranked(links, emit, allowed, n, width, alpha, top, bonus, keep)
    best = ranked[0][0]
    return best, {y: total for normed, y, total in ranked if normed >= best - 1e-4}


def beam_ranked(links, emit, allowed, n: int, width: int, alpha: float, top: int, bonus=None, keep=None):
    """Every output y of `beam_best`'s kind as ((log P(y | x) + bonus(y)) / |y|^α, y, log P(y | x)), the best
    first; with ``keep`` (y → bool) only those it keeps."""
    bonus = bonus or (lambda y: 0.0)
    cands = {}
    for v in range(1, n - 1):
        order = [int(t) for t in np.argsort(-np.where(allowed, emit[v], -np.inf), kind="stable") if allowed[t]]
        cands[v] = order[:top]
    totals: dict = {}
    for p in paths(n, width):
        base = float(emit[0, BOS]) + edge_sum(links, p) + float(emit[n - 1, EOS])
        for toks in itertools.product(*(cands[v] for v in p[1:-1])):
            score = base + sum(float(emit[v, t]) for v, t in zip(p[1:-1], toks))
            totals.setdefault(toks, []).append(score)
    return sorted((((logsumexp(s) + bonus(y)) / (len(y) + 2) ** alpha, y, logsumexp(s)) for y, s in totals.items()
                   if keep is None or keep(y)), key=lambda r: -r[0])


def placeable(tokens, phrases, continues=None, joins=None, trails=None) -> int:
    """The most of ``phrases`` that can sit in ``tokens`` (an output's inner tokens) as disjoint runs, each a
    whole word: the free tokens (in no run) after a run, up to the first that is neither a ``trails`` piece nor
    a ``continues`` one (or the end, or another run), include no ``continues`` piece and no trailing piece that
    ``joins`` (which would glue the next piece onto the open word); the free token right before a run is no
    ``joins`` piece. Every choice of runs is tried."""
    n = len(tokens)
    options = [[None] + [s for s in range(n - len(ph) + 1) if list(tokens[s:s + len(ph)]) == list(ph)]
               for ph in phrases]

    def word_closes(after, used):
        """The run ending before ``after`` stays a word of its own, read over the free tokens from ``after``."""
        for i in range(after, n):
            t = tokens[i]
            if i in used:
                return True
            if continues is not None and continues[t]:
                return False
            if trails is None or not trails[t]:
                return True  # a word starts (or a piece neither trailing nor continuing)
            if joins is not None and joins[t]:
                return False
        return True

    best = 0
    for choice in itertools.product(*options):
        spans = [set(range(s, s + len(ph))) for s, ph in zip(choice, phrases) if s is not None]
        used = set().union(*spans) if spans else set()
        if sum(len(span) for span in spans) != len(used):
            continue  # overlapping runs
        ok = True
        for s, ph in zip(choice, phrases):
            if s is None:
                continue
            before = s - 1
            if not word_closes(s + len(ph), used):
                ok = False
            if joins is not None and before >= 0 and before not in used and joins[tokens[before]]:
                ok = False
        if ok:
            best = max(best, len(spans))
    return best


def constrained_best(links, emit, allowed, n: int, width: int, beta: float, phrases, hard: bool, reward: float,
                     continues=None, joins=None, trails=None):
    """Control-DAG's semantics by enumeration: every path of ≤ width vertices and every string of allowed tokens
    on its inner vertices; a hard request keeps the strings holding every phrase (disjoint runs, whole words),
    a soft one adds ``reward`` per phrase held; the best by (score [+ reward]) / M^β. Returns (best normalised
    value, {(path, tokens): raw score} of the best), or (−inf, {}) when nothing qualifies."""
    vocab = [t for t in range(emit.shape[1]) if allowed[t]]
    best, found = -math.inf, {}
    for p in paths(n, width):
        base = float(emit[0, BOS]) + edge_sum(links, p) + float(emit[n - 1, EOS])
        for toks in itertools.product(vocab, repeat=len(p) - 2):
            k = placeable(toks, phrases, continues, joins, trails)
            if hard and k < len(phrases):
                continue
            raw = base + sum(float(emit[v, t]) for v, t in zip(p[1:-1], toks))
            value = (raw + (0.0 if hard else reward * k)) / len(p) ** beta
            if value > best + 1e-4:
                best, found = value, {(p, toks): raw}
            elif value >= best - 1e-4:
                found[(p, toks)] = raw
    return best, found


def sample_candidates(links, emit, allowed, n: int, top: int, temperature: float, i: int, forced: bool) -> dict:
    """{(j, token): log-probability}: what a sampled path at vertex i draws its next vertex j and j's token from,
    before any cut: the transitions of i divided by the temperature and renormalised, plus log P(token | j) of j's
    ``top`` best allowed tokens, n − 1 emitting EOS alone; with ``forced`` (the output's last slot) only n − 1."""
    tempered = {j: float(links[i, j]) / temperature for j in range(i + 1, n)}
    norm = logsumexp(tempered.values())
    out = {}
    for j, value in tempered.items():
        if j == n - 1:
            out[(j, EOS)] = value - norm + float(emit[j, EOS])
        elif not forced:
            order = [int(t) for t in np.argsort(-np.where(allowed, emit[j], -np.inf), kind="stable") if allowed[t]]
            for t in order[:top]:
                out[(j, t)] = value - norm + float(emit[j, t])
    return out


def sample_distribution(links, emit, allowed, n: int, limit: int, top: int, temperature: float, cut,
                        banned=None) -> dict:
    """{(path, tokens): probability} of every (path, inner tokens) a sampled path can take: at each vertex the
    candidates of `sample_candidates` cut by ``cut`` (candidates' log-probabilities → the bool mask kept), the kept
    ones renormalised; a path at slot limit − 1 is forced to n − 1. banned: (tokens so far, token) → whether the
    authors' n-gram prevention bans it (its probability then 1e-5 of the cut distribution's), or None."""
    out: dict = {}

    def walk(path, tokens, prob):
        if path[-1] == n - 1:
            out[(tuple(path), tuple(tokens))] = out.get((tuple(path), tuple(tokens)), 0.0) + prob
            return
        cands = sample_candidates(links, emit, allowed, n, top, temperature, path[-1], len(path) == limit - 1)
        keys = list(cands)
        kept = cut(np.array([cands[k] for k in keys]))
        weights = np.where(kept, np.exp(np.array([cands[k] for k in keys], np.float64)), 0.0)
        weights = weights / weights.sum()
        if banned is not None:
            weights = np.where((weights > 0) & np.array([banned(tokens, t) for j, t in keys]), 1e-5, weights)
        for (j, t), w in zip(keys, weights / weights.sum()):
            if w > 0:
                walk(path + [j], tokens + ([t] if j != n - 1 else []), prob * w)

    walk([0], [], 1.0)
    return out


def authors_candidates(links, logp, n: int, top: int, beta: float):
    """Each vertex's ``top`` (score, next vertex, token) pairs as the authors' beam search makes them (their
    inference_beamsearch): the ``top`` best tokens of every vertex j, then the ``top`` best pairs by
    links[i, j] + β · log P(token | j), ties to the lower (j, rank)."""
    out = []
    for i in range(n):
        pairs = []
        for j in range(n):
            ranked = sorted(range(logp.shape[1]), key=lambda t: (-float(logp[j, t]), t))[:top]
            pairs += [(float(links[i, j]) + beta * float(logp[j, t]), j * top + r, j, t) for r, t in enumerate(ranked)]
        pairs.sort(key=lambda p: (-p[0], p[1]))
        out.append([(s, j, t) for s, _, j, t in pairs[:top]])
    return out


def cxx_bans(words, no_repeat: int, no_consecutive: int) -> list:
    """What the authors' C++ beam search (DAG-Search's expand_beam) bans after a prefix (words: BOS first): their
    walk back over the prefix, transcribed."""
    banned = []
    if not (no_repeat or no_consecutive):
        return banned
    last = len(words) - 1
    if no_consecutive > 0:
        banned.append(words[last])
    for p in range(last - 1, -1, -1):            # prevEnd, the earlier occurrence; dist = last - p
        if words[p] == words[last]:
            match, a, b = 1, last - 1, p - 1
            while a >= 0 and b >= 0 and words[a] == words[b]:
                match, a, b = match + 1, a - 1, b - 1
            if no_consecutive >= last - p and match + 1 >= last - p:
                banned.append(words[p + 1])
            if 0 < no_repeat <= match + 1:
                banned.append(words[p + 1])
    return banned


def dag_search(cands, n: int, beam: int, per_length: int, top_p: float, alpha: float, gamma: float = 0.0,
               lm_step=None, lm_start=None, no_repeat: int = 0, no_consecutive: int = 0, limit: int | None = None,
               nbest: int = 1):
    """The authors' beam search (DAG-Search's dag_search, one thread), transcribed: ``cands`` per vertex its
    (score, vertex, token) pairs (`authors_candidates`); lm_step(state, token) -> (log10 P, state). Returns the
    ``nbest`` best prefixes at the last vertex (theirs: the one best), each (its words, BOS first; the log-sum of
    its paths), best first: [] where none reaches it. ``limit``: jaxnat's output capacity (their search has none)."""
    class Node:
        def __init__(self, parent, word, dag, lm, state):
            self.parent, self.word, self.dag, self.lm, self.state = parent, word, dag, lm, state
            self.length = 0 if parent is None else parent.length + 1
            self.at = {}

        def words(self):
            return ([] if self.parent is None else self.parent.words()) + [self.word]

    root = Node(None, BOS, 0.0, 0.0, lm_start)
    root.at[0] = 0.0
    arrivals, children = {0: [root]}, {}

    def ranking(node):
        return 0.0 if node.length == 0 else (gamma * node.lm + node.dag) / node.length ** alpha

    for i in range(n):
        last = i == n - 1
        by_length = {}
        for node in arrivals.get(i, []):
            by_length.setdefault(node.length, []).append(node)
        kept = []
        for group in by_length.values():
            kept += sorted(group, key=lambda nd: -ranking(nd))[:nbest if last else per_length]
        arrival = {id(nd): k for k, nd in enumerate(arrivals.get(i, []))}
        kept = sorted(kept, key=lambda nd: (-ranking(nd), arrival[id(nd)]))[:nbest if last else beam]
        if last:
            return [(nd.words(), nd.dag) for nd in kept]
        for node in kept:
            banned = cxx_bans(node.words(), no_repeat, no_consecutive)
            total = np.float32(0.0)
            for score, j, token in cands[i]:
                if not total < np.float32(top_p):
                    break
                if token in banned or score == -math.inf:
                    continue
                total = np.float32(total + np.exp(np.float32(score)))
                if limit is not None and node.length + 1 > limit - (1 if j == n - 1 and token == EOS else 2):
                    continue
                child = children.get((id(node), token))
                if child is None:
                    lp, state = lm_step(node.state, token) if lm_step else (0.0, None)
                    child = children[(id(node), token)] = Node(node, token, -math.inf, node.lm + lp, state)
                reach = node.at[i] + score
                child.dag = float(np.logaddexp(child.dag, reach))
                if j in child.at:
                    child.at[j] = float(np.logaddexp(child.at[j], reach))
                else:
                    child.at[j] = reach
                    arrivals.setdefault(j, []).append(child)
    return []


def authors_sample_distribution(cands, n: int, top_p: float, no_repeat: int = 0, no_consecutive: int = 0,
                                limit: int | None = None) -> dict:
    """{(path after vertex 0, tokens drawn): probability} of the authors' `sample` decoding (their
    inference_sample's loop, transcribed, each draw enumerated): ``cands`` per vertex its (score, vertex, token)
    pairs (`authors_candidates` of the tempered transitions). ``limit``: jaxnat's output capacity (a sample ends
    once it has drawn limit − 2 tokens; theirs has none)."""
    out: dict = {}

    def walk(j, path, res, banned_ngram, prob):
        if j == n - 1 or (limit is not None and len(res) >= limit - 2):
            out[(tuple(path), tuple(res))] = out.get((tuple(path), tuple(res)), 0.0) + prob
            return
        temp = {res[-1]} if res else set()
        for k in range(2, min(no_consecutive, (len(res) + 1) // 2) + 1):
            if all(res[-m] == res[-k - m] for m in range(1, k)):
                temp.add(res[-k])
        weights, real = [], 0.0
        for score, _, cand in cands[j]:
            real += math.exp(score)
            banned = cand in temp or (tuple(res[-no_repeat + 1:]) + (cand,)) in banned_ngram
            weights.append(1e-5 if banned else math.exp(score))
            if real > top_p:
                break
        total = sum(weights)
        for (_, nxt, cand), w in zip(cands[j], weights):
            grown = res + [cand]
            ngrams = banned_ngram | ({tuple(grown[-no_repeat:])} if no_repeat and len(grown) >= no_repeat else set())
            walk(nxt, path + [nxt], grown, ngrams, prob * w / total)

    walk(0, [], [], frozenset(), 1.0)
    return out
