"""Constrained beam search (DBA/VDBA) in plain Python, one sentence at a time, for checking
`jaxnat.decoding.constrained` against: lists and sets instead of masks and ranks, a toy model whose next-token
log-probabilities depend on the whole prefix (a rolling hash into a random table), and the same rules."""

import numpy as np

from jaxnat.data.vocab import BOS_ID, EOS_ID, MASK_ID, PAD_ID, PLH_ID

FORBIDDEN = (PAD_ID, BOS_ID, PLH_ID, MASK_ID)
HASH_MOD, TABLE_ROWS = 9973, 97


def roll(h: int, token: int) -> int:
    """The toy model's state after reading ``token`` (the jit'd model does the same in int32)."""
    return (h * 31 + token + 7) % HASH_MOD


def toy_logprobs(table: np.ndarray, prefix: list[int], seed: int) -> np.ndarray:
    """log P(next | prefix) of the toy model: the table row of the hash of (seed, prefix)."""
    h = seed
    for t in prefix:
        h = roll(h, t)
    return table[h % TABLE_ROWS]


def restricted(logp: np.ndarray, index: int, max_len: int) -> np.ndarray:
    out = logp.astype(np.float32).copy()
    out[list(FORBIDDEN)] = -np.inf
    if index >= max_len:
        out[[i for i in range(len(out)) if i != EOS_ID]] = -np.inf
    return out


# -- progress ---------------------------------------------------------------------------------------
def startable(phrases, done, ordered):
    unmet = [c for c in range(len(phrases)) if not done[c]]
    return set(unmet[:1]) if ordered else set(unmet)


def advance(phrases, state, token, ordered, glue=False, after_join=False, trail=False):
    """state = (done: tuple of bool, depth, cand: frozenset of the unmet phrases the path is a prefix of,
    pending: the deepest phrase the path completed or None, ended: the completed phrase's word is open).
    One path: a token continues the phrases in cand, or falls off — meeting the pending phrase — and may start
    one at the root. glue: the token glues onto the previous word, so a phrase whose word is open is no word of
    its own: it is dropped, not met. after_join: the previous token glues the next one onto its word (a BPE
    piece ending in "@@"), so the token starts no phrase. trail: the token is punctuation, which keeps an open
    word open: the pending phrase waits for the next token."""
    done, depth, cand, pending, ended = state
    glued_on = ended and glue
    deeper = {c for c in cand if 0 < depth < len(phrases[c]) and phrases[c][depth] == token}
    still_open = ended and trail  # on the way to a longer phrase too: "Zaun." is open to "Zaun.n"
    if deeper:
        cand, depth = deeper, depth + 1
        if glued_on:
            pending = None
    else:
        kept = pending if still_open and not glued_on else None
        if pending is not None and not glued_on and not still_open:
            done = tuple(d or c == pending for c, d in enumerate(done))
        pending = kept
        cand = {c for c in startable(phrases, done, ordered) if phrases[c][0] == token and not after_join}
        depth = 1 if cand else 0
    completed = sorted(c for c in cand if len(phrases[c]) == depth)
    if completed:
        pending = completed[0]
    return (done, depth, frozenset(cand), pending, bool(completed) or still_open)


def bank(phrases, state):
    """Constraint tokens produced: met phrases, the path's depth, and a pending phrase punctuation took the path
    off (its word still open)."""
    done, depth, _, pending, ended = state
    left = len(phrases[pending]) if ended and depth == 0 and pending is not None else 0
    return sum(len(p) for p, d in zip(phrases, done) if d and p) + depth + left


def complete(state):
    """Every phrase met, or pending (ending the hypothesis meets it)."""
    done, pending = state[0], state[3]
    return all(d or c == pending for c, d in enumerate(done))


def offered_tokens(phrases, state, ordered, after_join=False):
    done, depth, cand, pending = state[:4]
    tokens = [phrases[c][depth] for c in sorted(cand) if len(phrases[c]) > depth] if depth > 0 else []
    open_ = tuple(d or c == pending for c, d in enumerate(done))
    return tokens + ([] if after_join else [phrases[c][0] for c in sorted(startable(phrases, open_, ordered))])


# -- the search ---------------------------------------------------------------------------------------
def search(table, seed, phrases, **kwargs):
    """The best output of `finished`: (tokens, score, met)."""
    return finished(table, seed, phrases, **kwargs)[0]


def finished(table, seed, phrases, *, beam_size, ordered, length_penalty, max_len, max_out, continues=(), joins=(),
             trails=()):
    """phrases: list of piece-id lists (empty lists = no phrase); continues: the ids never taken right after a
    phrase is met, nor after the trails ids (punctuation) that follow it; joins: the ids after which no phrase
    starts. Returns the finished outputs when the search stops, [(tokens, score, met)], those that meet every
    phrase first, each part best first."""
    k = beam_size
    real = [p for p in phrases if p]
    max_len = min(max(max_len, sum(len(p) for p in real)), max_out - 2)
    state0 = (tuple(not p for p in phrases), 0, frozenset(), None, False)
    alive = [([BOS_ID], np.float32(0.0), state0)]  # dead beams are simply absent
    fin = []  # (tokens, score, met)
    norm = lambda s, n: np.float32(s) / np.float32(n) ** np.float32(length_penalty)  # noqa: E731
    for i in range(max_out - 1):
        ext = []
        for toks, s, st in alive:
            lp = restricted(toy_logprobs(table, toks, seed), i, max_len)
            if st[4]:  # a phrase's word is open: no glued piece, unless it starts or continues a phrase
                lp[[t for t in continues
                    if t not in offered_tokens(phrases, st, ordered, toks[-1] in joins)]] = -np.inf
            ext.append((toks, s, st, lp))
        pool = list(fin)
        for toks, s, st, lp in ext:
            met_all = complete(st)
            score = norm(s + lp[EOS_ID], i + 1)
            if (met_all or i >= max_len) and score > -np.inf:
                pool.append((toks + [EOS_ID], score, met_all))
        fin = sorted(pool, key=lambda f: (not f[2], -f[1]))[:k]

        cands = {}  # (parent, token) -> score
        flat = [(s + lp[t], j, t) for j, (_, s, _, lp) in enumerate(ext) for t in range(len(lp)) if t != EOS_ID]
        for sc, j, t in sorted(flat, key=lambda x: -x[0])[: 2 * k]:
            cands[j, t] = sc
        for j, (_, s, st, lp) in enumerate(ext):
            masked = lp.copy()
            masked[EOS_ID] = -np.inf
            t = int(np.argmax(masked))
            cands[j, t] = s + masked[t]
            for t in offered_tokens(phrases, st, ordered, ext[j][0][-1] in joins):
                cands[j, t] = s + masked[t]
        by_bank = {}
        for (j, t), sc in cands.items():
            if sc == -np.inf:
                continue
            st = advance(phrases, ext[j][2], t, ordered, glue=t in continues, after_join=ext[j][0][-1] in joins,
                         trail=t in trails)
            by_bank.setdefault(bank(phrases, st), []).append((sc, ext[j][0] + [t], st))
        ranked = {b: sorted(v, key=lambda x: -x[0]) for b, v in by_bank.items()}
        order = sorted(((r, -b) for b, v in ranked.items() for r in range(len(v))))
        alive = [(ranked[-nb][r][1], ranked[-nb][r][0], ranked[-nb][r][2]) for r, nb in order[:k]]

        reach = [s / max(np.float32(i + 2) ** length_penalty, np.float32(max_len + 1) ** length_penalty)
                 for _, s, _ in alive]
        if not alive or (len(fin) == k and all(f[2] for f in fin) and max(reach) <= min(f[1] for f in fin)):
            break
    return fin
