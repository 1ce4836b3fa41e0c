"""Plain-Python references for the vectorised kernels (edit ops, oracles): lists and loops, written for
obviousness, not speed. The property tests assert that the XLA kernels agree with these on random inputs;
``bench/oracle.py`` uses them as the slowest baseline.

Sequences are lists of ints without padding; BOS is the first token and EOS the last.
"""

from __future__ import annotations

MAX_INSERTIONS = 255


# ----------------------------------------------------------------------------------------------- edit ops

def delete(seq, delete_flags, protect=None):
    """Drop flagged tokens; the first and last token and protected tokens stay."""
    out = []
    for k, tok in enumerate(seq):
        protected = k == 0 or k == len(seq) - 1 or (protect is not None and protect[k])
        if not delete_flags[k] or protected:
            out.append(tok)
    return out


def kept_after_delete(seq, delete_flags, protect=None):
    return [not delete_flags[k] or k == 0 or k == len(seq) - 1 or bool(protect and protect[k])
            for k in range(len(seq))]


def fair_share(requested, budget):
    """Take one placeholder at a time from the largest request (the rightmost of equals) until the total fits."""
    applied = list(requested)
    while sum(applied) > budget:
        top = max(applied)
        k = max(i for i, a in enumerate(applied) if a == top)
        applied[k] -= 1
    return applied


def insert_placeholders(seq, counts, plh, cap):
    """Insert counts[k] placeholders after seq[k] (k < len-1), cut by `fair_share` to fit the row in ``cap``."""
    requested = [max(c, 0) for c in counts[:max(len(seq) - 1, 0)]]
    applied = fair_share(requested, max(cap - len(seq), 0))
    out = []
    for k, tok in enumerate(seq):
        out.append(tok)
        if k < len(seq) - 1:
            out.extend([plh] * applied[k])
    return out, applied, sum(requested) - sum(applied)


def fill(seq, values, plh):
    return [values[k] if tok == plh else tok for k, tok in enumerate(seq)]


def reposition(seq, index):
    """Slot i takes seq[index[i]]; index 0 deletes; BOS/EOS stay; interior slots may only take interior tokens."""
    n = len(seq)
    out, keep = [], []
    for i in range(n):
        if i == 0 or i == n - 1:
            out.append(seq[i])
            keep.append(True)
        elif 1 <= index[i] < n - 1:
            out.append(seq[index[i]])
            keep.append(True)
        else:
            keep.append(False)
    return out, keep


def reposition_phrases(seq, index, anchor, phrase):
    """Reposition keeping hard-constraint phrases whole (see edit_ops.reposition_phrases), written as blocks:
    free slots take free interior tokens; each phrase goes, whole, just before what its anchor slot emits.
    Returns the input position of every output token."""
    n = len(seq)
    if n <= 2:
        return list(range(n))
    starts = [k for k in range(1, n - 1) if phrase[k] and (k == 1 or phrase[k - 1] != phrase[k])]
    blocks = {}
    for k in starts:
        end = k
        while end + 1 < n - 1 and phrase[end + 1] == phrase[k]:
            end += 1
        blocks[k] = list(range(k, end + 1))
    out = [0]
    for slot in range(1, n):
        for start in starts:  # phrases anchored here, in input order
            if min(max(anchor[start], 1), n - 1) == slot:
                out.extend(blocks[start])
        if slot == n - 1:
            break
        j = index[slot]
        if not phrase[slot] and 1 <= j < n - 1 and not phrase[j]:
            out.append(j)
    return out + [n - 1]


def carry_slots(counts, keep):
    """Counts of slots closed by deleted tokens move to the next surviving token's slot."""
    survivors = [k for k, kept in enumerate(keep) if kept]
    merged = []
    for a, b in zip(survivors, survivors[1:]):
        merged.append(sum(counts[a:b]))  # slots closed by tokens a+1 … b
    return merged


# ----------------------------------------------------------------------------------------------- oracles

def dp_table(x, y, reposition_costs_one):
    """d[i][j] as docs/levt.md (ed2) and docs/editor.md (ed3, ``reposition_costs_one``) define it."""
    in_x = set(x)
    d = [[0] * (len(y) + 1) for _ in range(len(x) + 1)]
    for i in range(len(x) + 1):
        d[i][0] = i
    for j in range(len(y) + 1):
        d[0][j] = j
    for i in range(1, len(x) + 1):
        for j in range(1, len(y) + 1):
            if x[i - 1] == y[j - 1]:
                cost = 0
            elif reposition_costs_one and y[j - 1] in in_x:
                cost = 1
            else:
                cost = 2
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
    return d


def backtrace(x, y, ed3):
    """The edit path, in forward order: ('ins', j) / ('del', i) / ('sub', i, j) / ('keep', i, j)."""
    d = dp_table(x, y, ed3)
    i, j, ops = len(x), len(y), []
    while i > 0 or j > 0:
        if j > 0 and d[i][j - 1] < d[i][j]:
            ops.append(("ins", j - 1))
            j -= 1
        elif i > 0 and d[i - 1][j] < d[i][j]:
            ops.append(("del", i - 1))
            i -= 1
        elif ed3 and d[i - 1][j - 1] < d[i][j]:
            ops.append(("sub", i - 1, j - 1))
            i, j = i - 1, j - 1
        else:
            assert x[i - 1] == y[j - 1], "keep must be a match"
            ops.append(("keep", i - 1, j - 1))
            i, j = i - 1, j - 1
    return ops[::-1], d[len(x)][len(y)]


def _slots_and_mask(x, y, ops):
    slots = [0] * max(len(x) - 1, 0)
    insert_mask = [False] * len(y)
    pending = 0
    for op in ops:
        if op[0] == "ins":
            pending += 1
            insert_mask[op[1]] = True
        else:
            if op[1] >= 1:  # inserts right before x_i fill the slot between x_{i-1} and x_i
                slots[op[1] - 1] = min(pending, MAX_INSERTIONS)
            pending = 0
    return slots, insert_mask


def ed2_labels(x, y):
    """→ (deletion, slots, insert_mask, distance) for one pair."""
    ops, distance = backtrace(x, y, ed3=False)
    deletion = [0] * len(x)
    for op in ops:
        if op[0] == "del":
            deletion[op[1]] = 1
    slots, insert_mask = _slots_and_mask(x, y, ops)
    return deletion, slots, insert_mask, distance


def ed3_labels(x, y):
    """→ (reposition, slots, insert_mask, distance) for one pair."""
    ops, distance = backtrace(x, y, ed3=True)
    reposition = [0] * len(x)
    for op in ops:
        if op[0] == "keep":
            reposition[op[1]] = op[1]
        elif op[0] == "sub":
            reposition[op[1]] = x.index(y[op[2]])
    slots, insert_mask = _slots_and_mask(x, y, ops)
    return reposition, slots, insert_mask, distance
