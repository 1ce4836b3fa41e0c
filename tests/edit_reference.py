"""Plain-Python references of the edit models' training losses, and the layer-reading check both models run.

A reference rebuilds, sentence by sentence with lists and loops, what each head of LevT (Algorithm 1) and
EDITOR (the authors' dual path, and eqs. 6–7) is trained on: its input, its oracle labels (tests/reference.py),
the positions it learns on, label smoothing ``(1 − ε)·nll − ε·mean_v log p`` and the mean over its own
positions. It shares nothing with the jit'd losses except the model's heads, called on the reference's own
inputs, and the random numbers the loss drew (``aux['roll_in']['draws']``): subset sizes and scores, shuffle
shifts, coins, and the Gumbel noise that turns an argmax into a sample.

Sequences are lists of ints without padding, ``[BOS, …, EOS]``; a batch row whose target is empty (all PAD)
is a filler row and has no positions at all.
"""

from __future__ import annotations

import jax
import numpy as np

from jaxnat.data.vocab import BOS_ID, EOS_ID, MASK_ID, PAD_ID, PLH_ID
from tests import jitted
from tests import reference as ref

NEVER_FILLED = (PAD_ID, BOS_ID, EOS_ID, PLH_ID, MASK_ID)  # a filled slot always holds a real token
UNLIMITED = 10**9


def unpad(row) -> list[int]:
    return [int(t) for t in row if t != PAD_ID]


def padded(rows, width: int) -> np.ndarray:
    return np.array([list(r) + [PAD_ID] * (width - len(r)) for r in rows], np.int32)


class Heads:
    """The model's heads on one encoded batch, eval mode: head(method, rows) pads ``rows`` to ``width`` (at
    least the batch's target length) and returns the logits as float64 numpy."""

    def __init__(self, module, params, src, tgt_len: int):
        self.module, self.params, self.tgt_len = module, params, tgt_len
        self.memory = jitted.method(module, "encode")(params, src)
        self.src_mask = src != PAD_ID

    def __call__(self, method: str, rows, width: int | None = None) -> np.ndarray:
        width = max(self.tgt_len, width or 0, *(len(r) for r in rows))
        out = jitted.method(self.module, method)(self.params, padded(rows, width), self.memory, self.src_mask)
        return np.asarray(out, np.float64)


# A hand-made batch with an initial sequence y⁰ per sentence (post-editing data) and a filler row last.
HAND = {
    "src": [[BOS_ID, 7, 8, EOS_ID], [BOS_ID, 9, EOS_ID], [BOS_ID, 10, 11, 12, EOS_ID], [BOS_ID, 13, EOS_ID], []],
    "tgt": [[BOS_ID, 7, 8, 9, 10, EOS_ID], [BOS_ID, 11, 12, 13, EOS_ID], [BOS_ID, 14, 15, 26, 27, EOS_ID],
            [BOS_ID, 16, 17, 18, 19, 20, EOS_ID], []],
    "init": [[BOS_ID, 7, 9, 8, 21, EOS_ID],             # a swap and a wrong word
             [BOS_ID, 11, 13, EOS_ID],                  # a subsequence of the reference
             [BOS_ID, 22, 23, 24, 25, EOS_ID],          # all wrong: with the oracle's 4 placeholders, 10 > 8 tokens
             [BOS_ID, 20, 19, 18, 17, 16, EOS_ID],      # reversed
             []],
}


def hand_batch(with_init: bool = True) -> dict:
    """`HAND` as int32 arrays: src [5, 6], tgt and init [5, 8]; without ``with_init``, no 'init' key."""
    names = ("src", "tgt", "init") if with_init else ("src", "tgt")
    return {k: jax.numpy.asarray(padded(HAND[k], 6 if k == "src" else 8)) for k in names}


# ------------------------------------------------------------------------------------------ cross-entropy

def smoothed_nll(logits, label: int, eps: float) -> tuple[float, float]:
    """One position: (smoothed loss, nll) with uniform smoothing over the classes of ``logits`` (a 1-D row)."""
    z = np.asarray(logits, np.float64)
    logp = z - z.max() - np.log(np.sum(np.exp(z - z.max())))
    nll = -logp[label]
    return (1.0 - eps) * nll - eps * float(np.mean(logp)), nll


def mean(values) -> float:
    return float(np.mean(values)) if values else 0.0


# ------------------------------------------------------------------------------------------ roll-in noise

def random_delete(seq, v, scores):
    """Keep ⌊n·v⌋ (float32 product) of the n real tokens, those of lowest score (ties: leftmost), plus BOS and
    EOS. scores: indexed by position. Returns (kept sequence, kept flag per position)."""
    real = list(range(1, len(seq) - 1))
    count = int(np.floor(np.float32(len(real)) * np.float32(v)))
    kept = set(sorted(real, key=lambda i: (scores[i], i))[:count])
    keep = [i not in real or i in kept for i in range(len(seq))]
    return [t for t, k in zip(seq, keep) if k], keep


def word_shuffle(seq, starts, shift):
    """Words (a real piece starting one, or the first real piece, opens a word) sorted by w + shift[w]
    (float32), stable; BOS and EOS stay."""
    if len(seq) <= 2:
        return list(seq)
    words = []
    for i in range(1, len(seq) - 1):
        if i == 1 or starts[i]:
            words.append([])
        words[-1].append(seq[i])
    key = [np.float32(w) + np.float32(shift[w]) for w in range(len(words))]
    order = sorted(range(len(words)), key=lambda w: (key[w], w))
    return [seq[0]] + [t for w in order for t in words[w]] + [seq[-1]]


def delete_shuffle(seq, starts, v, scores, shuffle, shift):
    """EDITOR's noise: `random_delete`, then (if ``shuffle``) `word_shuffle` with the kept pieces' word starts."""
    out, keep = random_delete(seq, v, scores)
    if not shuffle:
        return out
    return word_shuffle(out, [s for s, k in zip(starts, keep) if k], shift)


def choose(logits, allowed, noise=None) -> int:
    """The model's choice among ``allowed`` classes: argmax of logits (+ Gumbel noise: a sample)."""
    scores = {c: logits[c] + (0.0 if noise is None else float(noise[c])) for c in allowed}
    return max(allowed, key=lambda c: (scores[c], -c))


def fill_choice(logits, noise=None) -> int:
    return choose(logits, [c for c in range(len(logits)) if c not in NEVER_FILLED], noise)


# ------------------------------------------------------------------------------------------ shared pieces

def insertion_terms(heads, y_ins, refs, labels, eps):
    """Placeholder and token CE of Gu et al.: the placeholder head on y_ins, one position per adjacent pair,
    label = the oracle's count (smoothing 0.01); the token head on the reference with PLH at the oracle's
    insertions, trained there (smoothing eps). labels[b] = (slots, insert mask). Returns
    (placeholder loss, token loss, token nll, token logits)."""
    plh = heads("placeholder_logits", y_ins)
    plh_terms = [smoothed_nll(plh[b, k], slots[k], 0.01)[0]
                 for b, (row, (slots, _)) in enumerate(zip(y_ins, labels)) for k in range(len(row) - 1)]
    masked = [[PLH_ID if m else t for t, m in zip(y, mask)] for y, (_, mask) in zip(refs, labels)]
    tok = heads("token_logits", masked)
    tok_terms = [smoothed_nll(tok[b, j], y[j], eps)
                 for b, (y, (_, mask)) in enumerate(zip(refs, labels)) for j in range(len(y)) if mask[j]]
    return mean(plh_terms), mean([a for a, _ in tok_terms]), mean([n for _, n in tok_terms]), tok


def reference_fills(refs, masks, tok_logits, noise=None):
    """The reference with the token head's choice at every inserted position."""
    return [[fill_choice(tok_logits[b, j], None if noise is None else noise[b, j]) if mask[j] else t
             for j, t in enumerate(y)] for b, (y, mask) in enumerate(zip(refs, masks))]


def own_insertion(heads, y_rows, refs, width):
    """`own_insertion`: argmax placeholders on each row (cut by fair share to ``width``) and argmax fills
    (``filled``), and what the ed2 oracle keeps of that for its reference (``kept``)."""
    plh = heads("placeholder_logits", y_rows)
    canvases = [ref.insert_placeholders(y, [choose(plh[k, i], list(range(plh.shape[-1]))) for i in range(len(y) - 1)],
                                        PLH_ID, width)[0] for k, y in enumerate(y_rows)]
    tok = heads("token_logits", canvases)
    filled = [[fill_choice(tok[k, j]) if t == PLH_ID else t for j, t in enumerate(c)] for k, c in enumerate(canvases)]
    return filled, [[t for t, d in zip(f, ref.ed2_labels(f, y)[0]) if not d] for f, y in zip(filled, refs)]


# ------------------------------------------------------------------------------------------ LevT

def levt_reference(heads, batch, draws, *, alpha, beta, eps):
    """Algorithm 1 of Gu et al. with the reference code's α = β = 0 case: y⁰ = batch['init'] or [BOS, EOS];
    insertion on y⁰ minus the oracle's deletions if u < β, else on random_delete(y*); deletion on y⁰ if v < α,
    else on the reference with the token head's fills (argmax, or a sample when the draws hold token noise).
    With the draws' "shuffle" (global_shuffle), a shuffled row's deletion head sees a random subset of y* in a
    random order. When the draws' own-insertion coin is on, the model's own insertion runs on that subset (other
    rows: on the insertion input): the insertion heads learn on what the oracle keeps of it, the deletion head
    on the insertion itself. Returns
    the per-row inputs and the three mean losses (+ the token nll)."""
    tgt = np.asarray(batch["tgt"])
    refs = [unpad(r) for r in tgt]
    live = [b for b, y in enumerate(refs) if y]
    refs = [refs[b] for b in live]
    init = [unpad(np.asarray(batch["init"])[b]) if "init" in batch else [BOS_ID, EOS_ID] for b in live]
    v, scores = (np.asarray(a) for a in draws["subset"])
    coins = np.asarray(draws["coins"])
    noise = np.asarray(draws["token_noise"])[live] if "token_noise" in draws else None

    y_ins = []
    for k, b in enumerate(live):
        if coins[b, 0] < beta:
            deletion = ref.ed2_labels(init[k], refs[k])[0]
            y_ins.append([t for t, d in zip(init[k], deletion) if not d])
        else:
            y_ins.append(random_delete(refs[k], v[b], scores[b])[0])
    heads_live = _rows_of(heads, live, len(tgt))
    shuffled = {}  # global_shuffle: row k's subset of y* in a random order
    if "shuffle" in draws:
        sv, sscores, is_shuffled, shift = (np.asarray(a) for a in draws["shuffle"])
        shuffled = {k: delete_shuffle(refs[k], [True] * len(refs[k]), sv[b], sscores[b], True, shift[b])
                    for k, b in enumerate(live) if is_shuffled[b]}
    own = draws.get("own_insertion", False)
    if own:  # on the shuffled subset where a row has one
        own_filled, y_ins_own = own_insertion(heads_live, [shuffled.get(k, y) for k, y in enumerate(y_ins)], refs,
                                              tgt.shape[1])
        y_ins = y_ins_own
    labels = [ref.ed2_labels(x, y)[1:3] for x, y in zip(y_ins, refs)]
    plh_loss, tok_loss, tok_nll, tok = insertion_terms(heads_live, y_ins, refs, labels, eps)

    fills = own_filled if own else [shuffled.get(k, f) for k, f in enumerate(
        reference_fills(refs, [m for _, m in labels], tok, noise))]
    y_del = [init[k] if coins[b, 1] < alpha else fills[k] for k, b in enumerate(live)]
    dels = heads_live("deletion_logits", y_del)
    del_terms = [smoothed_nll(dels[k, i], d, 0.0)[0]
                 for k, (x, y) in enumerate(zip(y_del, refs)) for i, d in enumerate(ref.ed2_labels(x, y)[0])]
    return {"live": live, "y_ins": y_ins, "y_del": y_del, "fills": fills, "placeholder_loss": plh_loss,
            "token_loss": tok_loss, "token_nll": tok_nll, "deletion_loss": mean(del_terms)}


# ------------------------------------------------------------------------------------------ EDITOR

def editor_reference(heads, batch, draws, word_start, *, dual_path, alpha, beta, eps, after_oracle=False):
    """EDITOR's roll-in. y0 = batch['init'] or random_delete_shuffle(y*). Dual path (one coin per batch):
    path A = insertion on y0, reposition on the reference with the token head's fills; path B = reposition on
    y0, insertion on the model's reposition of y0. Otherwise eqs. 6–7 per sentence: insertion on y0 if u < α
    else on E(y0, r̃); reposition on y0 if u' < β else on E(E(y0, p*), t̃), y0 with the oracle's placeholders
    (nothing else applied) filled by the token head. r̃, t̃: argmax, or samples when the draws hold noise.
    after_oracle: the insertion heads' y0 rows are y0 after the oracle's reposition for y*."""
    tgt = np.asarray(batch["tgt"])
    refs = [unpad(r) for r in tgt]
    live = [b for b, y in enumerate(refs) if y]
    refs = [refs[b] for b in live]
    heads_live = _rows_of(heads, live, len(tgt))
    if "init" in batch:
        y0 = [unpad(np.asarray(batch["init"])[b]) for b in live]
    else:
        v, scores, shuffle, shift = (np.asarray(a) for a in draws["noise"])
        y0 = [delete_shuffle(refs[k], [bool(word_start[t]) for t in refs[k]], v[b], scores[b], shuffle[b], shift[b])
              for k, b in enumerate(live)]
    if dual_path:
        path_a = bool(draws["path_a"])
        ins_on_y0, rps_on_y0 = [path_a] * len(live), [not path_a] * len(live)
    else:
        coins = np.asarray(draws["coins"])
        ins_on_y0 = [coins[b, 0] < alpha for b in live]
        rps_on_y0 = [coins[b, 1] < beta for b in live]
    r_noise = np.asarray(draws["reposition_noise"])[live] if "reposition_noise" in draws else None
    t_noise = np.asarray(draws["token_noise"])[live] if "token_noise" in draws else None

    # insertion roll-in: y0, or the model's reposition of y0 (slot i takes token argmax_j, j over the row's
    # own columns; column 0 = delete)
    rps0 = heads_live("reposition_logits", y0)
    y_ins = []
    for k, x in enumerate(y0):
        if ins_on_y0[k]:
            y_ins.append(ref.reposition(x, ref.ed3_labels(x, refs[k])[0])[0] if after_oracle else list(x))
            continue
        index = [choose(rps0[k, i], list(range(len(x))), None if r_noise is None else r_noise[k, i])
                 for i in range(len(x))]
        y_ins.append(ref.reposition(x, index)[0])
    own = draws.get("own_insertion", False)
    if own:
        own_filled, y_ins = own_insertion(heads_live, y_ins, refs, tgt.shape[1])
    labels = [ref.ed3_labels(x, y)[1:3] for x, y in zip(y_ins, refs)]
    plh_loss, tok_loss, tok_nll, tok = insertion_terms(heads_live, y_ins, refs, labels, eps)

    # reposition roll-in
    if dual_path:
        fills = own_filled if own else reference_fills(refs, [m for _, m in labels], tok, t_noise)
    else:
        canvases = [ref.insert_placeholders(x, ref.ed3_labels(x, y)[1], PLH_ID, UNLIMITED)[0]
                    for x, y in zip(y0, refs)]
        fill_logits = heads_live("token_logits", canvases)
        fills = [[fill_choice(fill_logits[k, j], None if t_noise is None else t_noise[k, j]) if t == PLH_ID else t
                  for j, t in enumerate(c)] for k, c in enumerate(canvases)]
    y_rps = [list(x) if on else f for x, on, f in zip(y0, rps_on_y0, fills)]
    rps = heads_live("reposition_logits", y_rps)
    rps_terms = [smoothed_nll(rps[k, i, :len(x)], label, 0.0)[0]
                 for k, (x, y) in enumerate(zip(y_rps, refs)) for i, label in enumerate(ref.ed3_labels(x, y)[0])]
    return {"live": live, "y0": y0, "y_ins": y_ins, "y_rps": y_rps, "ins_on_y0": ins_on_y0, "rps_on_y0": rps_on_y0,
            "placeholder_loss": plh_loss, "token_loss": tok_loss, "token_nll": tok_nll,
            "reposition_loss": mean(rps_terms)}


def _rows_of(heads, live, batch_size):
    """Heads called on the live rows only, placed back at their batch positions (filler rows all PAD), so the
    encoder memory row of each sentence lines up; the logits come back indexed by live-row number."""
    def call(method, rows, width=None):
        full = [[] for _ in range(batch_size)]
        for k, b in enumerate(live):
            full[b] = rows[k]
        return heads(method, full, width)[live]
    return call


# ------------------------------------------------------------------------------------------ layer reading

def decoder_layers(params) -> list[tuple[str, str]]:
    """(stack, layer) names of every decoder layer in the parameters, e.g. ('decoder', 'layer_0')."""
    tree = params["params"]
    return [(stack, layer) for stack in tree if stack.endswith("decoder") for layer in tree[stack]]


def layers_read(module, params, src, tokens, method: str) -> set[tuple[str, str]]:
    """The decoder layers whose parameters ``method``'s logits depend on: a layer counts as read when
    perturbing its parameters changes the logits; every other perturbation must leave them bit-identical."""
    memory = jitted.method(module, "encode")(params, src)
    mask = src != PAD_ID

    def logits(p):
        return np.asarray(jitted.method(module, method)(p, tokens, memory, mask))

    base = logits(params)
    read = set()
    for n, (stack, layer) in enumerate(decoder_layers(params)):
        def bump(path, x, n=n):
            if tuple(p.key for p in path[1:3]) == (stack, layer):  # on the host: no program a parameter shape
                return np.asarray(x) + 0.5 * np.random.default_rng(n).normal(size=x.shape).astype(x.dtype)
            return x
        out = logits(jax.tree_util.tree_map_with_path(bump, params))
        if np.array_equal(out, base):
            continue
        assert np.abs(out - base).max() > 1e-4, (method, stack, layer)  # a real change, not rounding
        read.add((stack, layer))
    return read


def is_subsequence(short, long) -> bool:
    """True if ``short`` is ``long`` with some items removed (order kept)."""
    it = iter(long)
    return all(t in it for t in short)


def with_filler_row(batch: dict) -> dict:
    """The batch with its last row's target blanked: a filler row, which must carry no loss."""
    return {**batch, "tgt": batch["tgt"].at[-1].set(PAD_ID)}
