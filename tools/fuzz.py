"""Fuzzing the kernels: the oracles, edit operations and noise functions against their plain-Python references.

    python tools/fuzz.py [--cases 100000] [--batch 1000] [--seed 0] [--show 3] [--only ed2_labels,reposition]

Each kernel family runs on --cases random cases (rounded up to whole batches of --batch rows) and every case
is compared, output by output, with the plain-Python reference its property test uses, the way that test
compares them (tests/test_oracle.py, tests/test_edit_ops.py, tests/test_noise.py):

  ed2_labels, ed3_labels       labels, slots, insert mask and distance  vs tests/reference.py ed2/ed3_labels
  delete_tokens                tokens, a float side array, keep, num_deleted  vs reference.delete
  insert_placeholders          tokens, applied counts, dropped, a bool side array  vs reference.insert_placeholders
  fair_share                   the cut counts  vs reference.fair_share
  fill_placeholders            tokens  vs reference.fill
  reposition                   tokens, a side array, keep, num_deleted  vs reference.reposition
  reposition_phrases           tokens and two side arrays (one the phrase ids)  vs reference.reposition_phrases
  carry_slots                  the merged counts  vs reference.carry_slots
  apply_random_delete          tokens, keep  vs tests/edit_reference.py random_delete
  apply_random_mask, full_mask tokens, masked  vs tests/test_noise.py ref_mask / ref_real
  apply_word_shuffle           tokens  vs edit_reference.word_shuffle
  apply_delete_shuffle         tokens  vs edit_reference.delete_shuffle
  random_delete, random_mask, random_delete_shuffle (p_global 0.5)
                               the keyed functions vs the same references fed with their draw_* numbers

Cases are drawn with numpy (seeded by --seed and the family's name, so --only reproduces a full run's cases):
every row its own vocabulary of 2–4 symbols (ties everywhere); in every batch the first rows take each length
from 0 (all padding) and 1 up to the capacity once, the others a random length, a quarter of them 0–3 or the
capacity; flags with a per-row density (a fifth of the rows all off or all on); float inputs a mix of uniform
float32 draws and ties/edges (0, 0.5, the largest float32 below 1, exact fractions k/n for the subset sizes).
Each family keeps fixed shapes (the oracles cycle through four, across the 32-bit word boundaries of their
bit vectors), so each shape compiles once.

Reported per family: cases, mismatches (must be 0), seconds in the jit'd kernel calls (compilation excluded:
the first call of each shape is timed in its own column) and in the Python reference calls (the comparison
itself in neither). The first --show failing cases of a family are printed with their inputs; the exit status
is 1 if anything mismatched. Imports the tests' helpers, so it needs the test extras (hypothesis).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import zlib
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout: jaxnat, tests

import jax  # noqa: E402

from jaxnat import edit_ops  # noqa: E402
from jaxnat.data.vocab import BOS_ID, EOS_ID, MASK_ID, PAD_ID, PLH_ID  # noqa: E402
from jaxnat.edit_ops.insertion import fair_share  # noqa: E402
from jaxnat.oracle import ed2_labels, ed3_labels  # noqa: E402
from jaxnat.oracle import noise as N  # noqa: E402
from tests import edit_reference as noise_ref  # noqa: E402
from tests.edit_reference import unpad  # noqa: E402
from tests import reference as ref  # noqa: E402
from tests.test_edit_ops import _phrase_marks  # noqa: E402
from tests.test_noise import ALMOST_ONE, ref_mask, ref_real  # noqa: E402
from tests.test_noise import L as MASK_CAPACITY  # noqa: E402
from tests.test_oracle import _row  # noqa: E402

ORACLE_SHAPES = ((12, 12), (40, 70), (70, 40), (64, 64))  # (Lx, Ly): one word, a partial third, exactly two
ORACLE_SYMBOLS = (6, 7, 8, 9)
EDIT_CAPACITY = 16
EDIT_SYMBOLS = tuple(range(1, 10))    # as tests/test_edit_ops.py: 1 and 2 look like BOS/EOS, 4 is PLH
NOISE_CAPACITY = 16
NOISE_SYMBOLS = tuple(range(1, 7))    # as tests/test_noise.py: the BOS, EOS and MASK ids appear as real tokens
FLOAT_TIES = np.array([0.0, 0.5, ALMOST_ONE], np.float32)
SHIFT_TIES = np.array([0.0, 1.0, 2.5], np.float32)


@dataclass
class Family:
    """One kernel family: ``draw(rng, rows, shape)`` → a dict of numpy inputs (arrays with a leading row axis,
    or scalars); ``kernel(inputs)`` → the jit'd outputs; ``reference(inputs, b)`` and ``actual(outputs, b)``
    → row b's expected and computed outputs, as Python values compared with ``==``."""
    name: str
    shapes: tuple
    draw: Callable[[np.random.Generator, int, Any], dict]
    kernel: Callable[[dict], Any]
    reference: Callable[[dict, int], Any]
    actual: Callable[[Any, int], Any]


# ------------------------------------------------------------------------------------------------ drawing

def row_lengths(rng, rows: int, cap: int) -> np.ndarray:
    """int[rows]: the first rows take every length 0 … cap once; the rest uniform, a quarter from {0–3, cap}."""
    out = rng.integers(0, cap + 1, rows)
    special = rng.random(rows) < 0.25
    out[special] = rng.choice([0, 1, 2, 3, cap], special.sum())
    every = min(rows, cap + 1)
    out[:every] = np.arange(every)
    return out


def small_vocab(rng, rows: int, width: int, symbols) -> np.ndarray:
    """int32[rows, width]: each row's tokens drawn from its own 2–4 of ``symbols``."""
    symbols = np.asarray(symbols, np.int32)
    own = symbols[np.argsort(rng.random((rows, len(symbols))), axis=1)]
    pick = (rng.random((rows, width)) * rng.integers(2, 5, rows)[:, None]).astype(np.int64)
    return np.take_along_axis(own, pick, axis=1)


def token_rows(rng, rows: int, cap: int, symbols) -> np.ndarray:
    """int32[rows, cap] right-padded rows of `row_lengths` over `small_vocab`."""
    length = row_lengths(rng, rows, cap)
    tokens = small_vocab(rng, rows, cap, symbols)
    return np.where(np.arange(cap) < length[:, None], tokens, PAD_ID).astype(np.int32)


def flags(rng, rows: int, width: int) -> np.ndarray:
    """bool[rows, width] with a uniform per-row density; a fifth of the rows all False or all True."""
    density = rng.random(rows)
    extreme = rng.random(rows) < 0.2
    density[extreme] = rng.integers(0, 2, extreme.sum())
    return rng.random((rows, width)) < density[:, None]


def counts_up_to(rng, rows: int, width: int, low: int, highs) -> np.ndarray:
    """int32[rows, width] uniform on low … hi, with one hi per row drawn from ``highs``."""
    hi = rng.choice(highs, rows)
    return (low + (rng.random((rows, width)) * (hi - low + 1)[:, None]).astype(np.int64)).astype(np.int32)


def unit_floats(rng, shape) -> np.ndarray:
    """float32 in [0, 1): uniform draws, 30% of them replaced by the ties/edges 0, 0.5 and the float below 1."""
    out = rng.random(shape, dtype=np.float32)
    tie = rng.random(shape) < 0.3
    out[tie] = rng.choice(FLOAT_TIES, tie.sum())
    return out


def subset_sizes(rng, tokens: np.ndarray) -> np.ndarray:
    """float32[rows] v of the subset noises: `unit_floats`, a third of the rows an exact fraction k/n instead
    (n the row's real-token count), where ⌊n·v⌋ sits on a rounding edge."""
    v = unit_floats(rng, tokens.shape[:1])
    n_real = np.maximum((tokens != PAD_ID).sum(1) - 2, 1)
    exact = rng.random(len(v)) < 1 / 3
    k = (rng.random(len(v)) * n_real).astype(np.int64)
    v[exact] = (k / n_real)[exact].astype(np.float32)
    return v


def shifts(rng, rows: int, width: int, global_share: float = 0.0) -> np.ndarray:
    """float32[rows, width] word-shuffle shifts: U[0, 3) with ties (0, 1, 2.5); ``global_share`` of the rows
    U[0, GLOBAL_DISTANCE) instead, as a p_global row."""
    out = rng.random((rows, width), dtype=np.float32) * np.float32(3.0)
    tie = rng.random((rows, width)) < 0.3
    out[tie] = rng.choice(SHIFT_TIES, tie.sum())
    spread = rng.random(rows) < global_share
    out[spread] = rng.random((spread.sum(), width), dtype=np.float32) * np.float32(N.GLOBAL_DISTANCE)
    return out


# ------------------------------------------------------------------------------------------------ oracles

def framed_rows(rng, rows: int, cap: int) -> np.ndarray:
    """[BOS, t…, EOS] rows (length 1: [BOS]; length 0: all padding) over 2–4 of the oracle's symbols."""
    out = token_rows(rng, rows, cap, ORACLE_SYMBOLS)
    n = (out != PAD_ID).sum(1)
    out[:, 0] = np.where(n > 0, BOS_ID, PAD_ID)
    out[np.arange(rows), np.maximum(n - 1, 0)] = np.where(n >= 2, EOS_ID, out[:, 0])
    return out


def edited(rng, x_row: list[int], cap: int) -> list[int]:
    """A reference close to ``x_row``: each real token deleted (15%), substituted (15%) or followed by an
    inserted token (15%), symbols from the oracle's; cut to ``cap``."""
    real = x_row[1:-1]
    u, grow = rng.random(len(real)), rng.random(len(real)) < 0.15
    new, extra = rng.choice(ORACLE_SYMBOLS, len(real)).tolist(), rng.choice(ORACLE_SYMBOLS, len(real)).tolist()
    out = []
    for k, t in enumerate(real):
        if u[k] >= 0.15:
            out.append(new[k] if u[k] < 0.3 else t)
        if grow[k]:
            out.append(extra[k])
    return [BOS_ID, *out[:cap - 2], EOS_ID]


def draw_pairs(rng, rows: int, shape) -> dict:
    """x and y rows of capacities ``shape``; half the y rows independent, half an `edited` copy of their x."""
    lx, ly = shape
    x, y = framed_rows(rng, rows, lx), framed_rows(rng, rows, ly)
    for b in np.flatnonzero(rng.random(rows) < 0.5):
        xs = unpad(x[b])
        if len(xs) >= 2:
            y[b] = _row(edited(rng, xs, ly), ly)
    return {"x": x, "y": y}


def oracle_family(name: str, kernel, reference, first_label: str) -> Family:
    """ed2/ed3: first label (deletion / reposition), slots, insert mask, distance, padded as the tests pad."""
    def expected(inp, b):
        lx, ly = inp["x"].shape[1], inp["y"].shape[1]
        first, slots, mask, distance = reference(unpad(inp["x"][b]), unpad(inp["y"][b]))
        return _row(first, lx, 0), _row(slots, lx - 1, 0), _row(mask, ly, False), distance

    def actual(out, b):
        return (getattr(out, first_label)[b].tolist(), out.insertion[b].tolist(), out.insert_mask[b].tolist(),
                int(out.distance[b]))

    return Family(name, ORACLE_SHAPES, draw_pairs, lambda inp: kernel(inp["x"], inp["y"]), expected, actual)


def fuzz_ed2() -> Family:
    return oracle_family("ed2_labels", ed2_labels, ref.ed2_labels, "deletion")


def fuzz_ed3() -> Family:
    return oracle_family("ed3_labels", ed3_labels, ref.ed3_labels, "reposition")


# ------------------------------------------------------------------------------------------------ edit ops

def edit_rows(rng, rows: int, cap: int) -> dict:
    return {"tokens": token_rows(rng, rows, cap, EDIT_SYMBOLS)}


def seq_of(inp, b) -> list[int]:
    return unpad(inp["tokens"][b])


def slot_indices(rng, tokens: np.ndarray) -> np.ndarray:
    """int32 indices for reposition: per row uniform on -1 … L+1 or on -1 … n (mostly inside the row); a tenth
    of the rows the identity."""
    rows, cap = tokens.shape
    n = (tokens != PAD_ID).sum(1)
    hi = np.where(rng.random(rows) < 0.5, cap + 1, n)
    index = (-1 + rng.random((rows, cap)) * (hi + 2)[:, None]).astype(np.int32)
    index[rng.random(rows) < 0.1] = np.arange(cap)
    return index


_delete = jax.jit(lambda t, d, p, s: edit_ops.delete_tokens(t, d, PAD_ID, protect=p, sides=s))


def fuzz_delete_tokens() -> Family:
    def draw(rng, rows, cap):
        inp = edit_rows(rng, rows, cap)
        return {**inp, "delete": flags(rng, rows, cap), "protect": flags(rng, rows, cap)}

    def kernel(inp):
        return _delete(inp["tokens"], inp["delete"], inp["protect"], {"score": inp["tokens"] * np.float32(0.5)})

    def expected(inp, b):
        seq, cap = seq_of(inp, b), inp["tokens"].shape[1]
        delete, protect = inp["delete"][b].tolist(), inp["protect"][b].tolist()
        want = ref.delete(seq, delete, protect)
        return (_row(want, cap), _row([t * 0.5 for t in want], cap, 0.0), len(seq) - len(want),
                _row(ref.kept_after_delete(seq, delete, protect), cap, False))

    def actual(out, b):
        return (out.tokens[b].tolist(), out.sides["score"][b].tolist(), int(out.num_deleted[b]), out.keep[b].tolist())

    return Family("delete_tokens", (EDIT_CAPACITY,), draw, kernel, expected, actual)


_insert = jax.jit(lambda t, c, cap, s: edit_ops.insert_placeholders(t, c, PAD_ID, PLH_ID, max_length=cap, sides=s))


def fuzz_insert_placeholders() -> Family:
    def draw(rng, rows, cap):
        inp = edit_rows(rng, rows, cap)
        counts = counts_up_to(rng, rows, cap - 1, -1, [0, 1, 2, 4, cap, 3 * cap])
        return {**inp, "counts": counts, "caps": rng.integers(0, cap + 3, rows).astype(np.int32)}

    def kernel(inp):
        return _insert(inp["tokens"], inp["counts"], inp["caps"], inp["tokens"] == 3)

    def expected(inp, b):
        cap = inp["tokens"].shape[1]
        want, applied, dropped = ref.insert_placeholders(seq_of(inp, b), inp["counts"][b].tolist(), PLH_ID,
                                                         min(int(inp["caps"][b]), cap))
        return _row(want, cap), _row(applied, cap - 1, 0), dropped, _row([t == 3 for t in want], cap, False)

    def actual(out, b):
        return out.tokens[b].tolist(), out.counts[b].tolist(), int(out.dropped[b]), out.sides[b].tolist()

    return Family("insert_placeholders", (EDIT_CAPACITY,), draw, kernel, expected, actual)


_fair_share = jax.jit(fair_share)


def fuzz_fair_share() -> Family:
    """Requests as insert_placeholders passes them (>= 0); budgets 0 … K, the range insert_placeholders gives."""
    def draw(rng, rows, slots):
        requested = counts_up_to(rng, rows, slots, 0, [0, 1, 2, 4, slots, 3 * slots])
        return {"requested": requested, "budget": rng.integers(0, slots + 1, rows).astype(np.int32)}

    return Family("fair_share", (EDIT_CAPACITY - 1,), draw,
                  lambda inp: _fair_share(inp["requested"], inp["budget"]),
                  lambda inp, b: ref.fair_share(inp["requested"][b].tolist(), int(inp["budget"][b])),
                  lambda out, b: out[b].tolist())


_fill = jax.jit(partial(edit_ops.fill_placeholders, plh_id=PLH_ID))


def fuzz_fill_placeholders() -> Family:
    def draw(rng, rows, cap):
        tokens = edit_rows(rng, rows, cap)["tokens"]
        tokens[tokens == 5] = PLH_ID  # as the test: more placeholders
        return {"tokens": tokens, "values": rng.integers(0, 10, (rows, cap)).astype(np.int32)}

    def expected(inp, b):
        return _row(ref.fill(seq_of(inp, b), inp["values"][b].tolist(), PLH_ID), inp["tokens"].shape[1])

    return Family("fill_placeholders", (EDIT_CAPACITY,), draw, lambda inp: _fill(inp["tokens"], inp["values"]),
                  expected, lambda out, b: out[b].tolist())


_reposition = jax.jit(lambda t, i, s: edit_ops.reposition(t, i, PAD_ID, sides=s))


def fuzz_reposition() -> Family:
    def draw(rng, rows, cap):
        inp = edit_rows(rng, rows, cap)
        return {**inp, "index": slot_indices(rng, inp["tokens"])}

    def expected(inp, b):
        seq, cap = seq_of(inp, b), inp["tokens"].shape[1]
        want, keep = ref.reposition(seq, inp["index"][b].tolist())
        return _row(want, cap), _row([t * 10 for t in want], cap), _row(keep, cap, False), len(seq) - len(want)

    def actual(out, b):
        return out.tokens[b].tolist(), out.sides[0][b].tolist(), out.keep[b].tolist(), int(out.num_deleted[b])

    return Family("reposition", (EDIT_CAPACITY,), draw,
                  lambda inp: _reposition(inp["tokens"], inp["index"], (inp["tokens"] * 10,)), expected, actual)


_reposition_phrases = jax.jit(lambda t, i, a, p, s: edit_ops.reposition_phrases(t, i, a, p, PAD_ID, sides=s))


def fuzz_reposition_phrases() -> Family:
    """Phrases as the test makes them (`_phrase_marks`: up to 4 runs of 1–4 tokens, possibly touching); the
    phrase ids also travel as a side array and must come out as the reference's positions say."""
    def draw(rng, rows, cap):
        inp = edit_rows(rng, rows, cap)
        runs = [[(int(s), int(n)) for s, n in zip(rng.integers(1, cap + 1, k), rng.integers(1, 5, k))]
                for k in rng.integers(0, 5, rows)]
        marks = _phrase_marks([seq_of(inp, b) for b in range(rows)], runs)
        phrase = np.array([_row(m, cap, 0) for m in marks], np.int32)
        return {**inp, "index": slot_indices(rng, inp["tokens"]), "anchor": slot_indices(rng, inp["tokens"]),
                "phrase": phrase}

    def kernel(inp):
        t, p = inp["tokens"], inp["phrase"]
        return _reposition_phrases(t, inp["index"], inp["anchor"], p, (t * 10, p))

    def expected(inp, b):
        seq, cap = seq_of(inp, b), inp["tokens"].shape[1]
        marks = inp["phrase"][b].tolist()
        where = ref.reposition_phrases(seq, inp["index"][b].tolist(), inp["anchor"][b].tolist(), marks)
        return _row([seq[k] for k in where], cap), _row([seq[k] * 10 for k in where], cap), \
            _row([marks[k] for k in where], cap, 0)

    def actual(out, b):
        return out.tokens[b].tolist(), out.sides[0][b].tolist(), out.sides[1][b].tolist()

    return Family("reposition_phrases", (EDIT_CAPACITY,), draw, kernel, expected, actual)


_carry = jax.jit(edit_ops.carry_slots)


def fuzz_carry_slots() -> Family:
    """keep: a prefix of length n with BOS and EOS kept, as after a deletion; counts 0 beyond the row."""
    def draw(rng, rows, cap):
        n = row_lengths(rng, rows, cap)[:, None]
        pos = np.arange(cap)
        keep = (pos < n) & ((pos == 0) | (pos == n - 1) | flags(rng, rows, cap))
        counts = counts_up_to(rng, rows, cap - 1, 0, [0, 1, 2, 5])
        counts[pos[:-1] >= n - 1] = 0
        return {"counts": counts, "keep": keep}

    return Family("carry_slots", (EDIT_CAPACITY,), draw,
                  lambda inp: _carry(inp["counts"], inp["keep"], inp["keep"].sum(1).astype(np.int32)),
                  lambda inp, b: _row(ref.carry_slots(inp["counts"][b].tolist(), inp["keep"][b].tolist()),
                                      inp["keep"].shape[1] - 1, 0),
                  lambda out, b: out[b].tolist())


# ------------------------------------------------------------------------------------------------ noise

def noise_tokens(rng, rows: int, cap: int) -> dict:
    return {"tokens": token_rows(rng, rows, cap, NOISE_SYMBOLS)}


def noise_rows(rng, rows: int, cap: int) -> dict:
    tokens = noise_tokens(rng, rows, cap)["tokens"]
    return {"tokens": tokens, "v": subset_sizes(rng, tokens), "scores": unit_floats(rng, (rows, cap))}


def shuffle_rows(rng, rows: int, cap: int, global_share: float = 0.0) -> dict:
    return {**noise_rows(rng, rows, cap), "word_start": flags(rng, rows, cap),
            "shuffle": rng.random(rows) < 0.5, "shift": shifts(rng, rows, cap, global_share)}


def delete_expected(inp, b):
    """random_delete's tokens and keep flags, padded."""
    cap = inp["tokens"].shape[1]
    kept, keep = noise_ref.random_delete(seq_of(inp, b), inp["v"][b], inp["scores"][b].tolist())
    return _row(kept, cap), _row(keep, cap, False)


def mask_expected(inp, b):
    """random_mask's tokens and masked flags (tests/test_noise.py's reference, padded to its capacity)."""
    return ref_mask(inp["tokens"][b].tolist(), inp["v"][b], inp["scores"][b].tolist())


def delete_shuffle_expected(inp, b):
    want = noise_ref.delete_shuffle(seq_of(inp, b), inp["word_start"][b].tolist(), inp["v"][b],
                                    inp["scores"][b].tolist(), bool(inp["shuffle"][b]), inp["shift"][b].tolist())
    return _row(want, inp["tokens"].shape[1])


def pair_rows(out, b):
    return out[0][b].tolist(), out[1][b].tolist()


_apply_delete = jax.jit(partial(N.apply_random_delete, pad_id=PAD_ID))
_apply_mask = jax.jit(partial(N.apply_random_mask, pad_id=PAD_ID, mask_id=MASK_ID))
_full_mask = jax.jit(partial(N.full_mask, pad_id=PAD_ID, mask_id=MASK_ID))
_apply_shuffle = jax.jit(partial(N.apply_word_shuffle, pad_id=PAD_ID))
_apply_delete_shuffle = jax.jit(partial(N.apply_delete_shuffle, pad_id=PAD_ID))


def fuzz_apply_random_delete() -> Family:
    return Family("apply_random_delete", (NOISE_CAPACITY,), noise_rows,
                  lambda inp: _apply_delete(inp["tokens"], inp["v"], inp["scores"]), delete_expected, pair_rows)


def fuzz_apply_random_mask() -> Family:
    """At the capacity tests/test_noise.py's reference is written for."""
    return Family("apply_random_mask", (MASK_CAPACITY,), noise_rows,
                  lambda inp: _apply_mask(inp["tokens"], inp["v"], inp["scores"]), mask_expected, pair_rows)


def fuzz_full_mask() -> Family:
    """The test's own check: every real token (by position) masked, nothing else."""
    def expected(inp, b):
        row = inp["tokens"][b].tolist()
        _, real = ref_real(row)
        return [MASK_ID if i in real else t for i, t in enumerate(row)], [i in real for i in range(len(row))]

    return Family("full_mask", (MASK_CAPACITY,), noise_tokens, lambda inp: _full_mask(inp["tokens"]),
                  expected, pair_rows)


def fuzz_apply_word_shuffle() -> Family:
    def expected(inp, b):
        want = noise_ref.word_shuffle(seq_of(inp, b), inp["word_start"][b].tolist(), inp["shift"][b].tolist())
        return _row(want, inp["tokens"].shape[1])

    return Family("apply_word_shuffle", (NOISE_CAPACITY,), shuffle_rows,
                  lambda inp: _apply_shuffle(inp["tokens"], inp["word_start"], inp["shift"]), expected,
                  lambda out, b: out[b].tolist())


def fuzz_apply_delete_shuffle() -> Family:
    def kernel(inp):
        return _apply_delete_shuffle(inp["tokens"], inp["word_start"], inp["v"], inp["scores"], inp["shuffle"],
                                     inp["shift"])

    return Family("apply_delete_shuffle", (NOISE_CAPACITY,), partial(shuffle_rows, global_share=0.25), kernel,
                  delete_shuffle_expected, lambda out, b: out[b].tolist())


# ------------------------------------------------------------------------------------------------ keyed noise

_draw_subset = jax.jit(N.draw_subset, static_argnums=1)
_draw_delete_shuffle = jax.jit(partial(N.draw_delete_shuffle, p_global=0.5), static_argnums=1)
_random_delete = jax.jit(partial(N.random_delete, pad_id=PAD_ID))
_random_mask = jax.jit(partial(N.random_mask, pad_id=PAD_ID, mask_id=MASK_ID))
_random_delete_shuffle = jax.jit(partial(N.random_delete_shuffle, pad_id=PAD_ID, p_global=0.5))


def keyed_rows(rng, rows: int, cap: int, draws=_draw_subset, names=("v", "scores"), word_start=False) -> dict:
    """Tokens, a key seed, and the numbers ``draws`` gives for that key (what the keyed function must use)."""
    tokens = noise_tokens(rng, rows, cap)["tokens"]
    seed = int(rng.integers(0, 2**31))
    numbers = draws(jax.random.key(seed), tokens.shape)
    inp = {"tokens": tokens, "seed": seed, **{k: np.asarray(a) for k, a in zip(names, numbers)}}
    return {**inp, "word_start": flags(rng, rows, cap)} if word_start else inp


def fuzz_random_delete() -> Family:
    def actual(out, b):
        return (out[b].tolist(),)

    return Family("random_delete (keyed)", (NOISE_CAPACITY,), keyed_rows,
                  lambda inp: _random_delete(jax.random.key(inp["seed"]), inp["tokens"]),
                  lambda inp, b: delete_expected(inp, b)[:1], actual)


def fuzz_random_mask() -> Family:
    return Family("random_mask (keyed)", (MASK_CAPACITY,), keyed_rows,
                  lambda inp: _random_mask(jax.random.key(inp["seed"]), inp["tokens"]), mask_expected, pair_rows)


def fuzz_random_delete_shuffle() -> Family:
    draw = partial(keyed_rows, draws=_draw_delete_shuffle, names=("v", "scores", "shuffle", "shift"),
                   word_start=True)
    return Family("random_delete_shuffle (keyed, p_global 0.5)", (NOISE_CAPACITY,), draw,
                  lambda inp: _random_delete_shuffle(jax.random.key(inp["seed"]), inp["tokens"], inp["word_start"]),
                  delete_shuffle_expected, lambda out, b: out[b].tolist())


FAMILIES = (fuzz_ed2, fuzz_ed3, fuzz_delete_tokens, fuzz_insert_placeholders, fuzz_fair_share,
            fuzz_fill_placeholders, fuzz_reposition, fuzz_reposition_phrases, fuzz_carry_slots,
            fuzz_apply_random_delete, fuzz_apply_random_mask, fuzz_full_mask, fuzz_apply_word_shuffle,
            fuzz_apply_delete_shuffle, fuzz_random_delete, fuzz_random_mask, fuzz_random_delete_shuffle)


# ------------------------------------------------------------------------------------------------ driver

@dataclass
class Result:
    cases: int = 0
    mismatches: int = 0
    jax_s: float = 0.0
    compile_s: float = 0.0
    python_s: float = 0.0
    shapes: list = field(default_factory=list)  # the shapes run (compiled), in order


def show_failure(family: Family, inputs: dict, b: int, got, want) -> None:
    """Row b's inputs (every array's row b, every scalar), what the kernel gave and what the reference gave."""
    print(f"MISMATCH {family.name}, row {b} of a batch of {len(inputs[next(iter(inputs))])}:", flush=True)
    for key, value in inputs.items():
        print(f"    {key} = {value[b].tolist() if isinstance(value, np.ndarray) else value}")
    print(f"    kernel    = {got}\n    reference = {want}", flush=True)


def run_family(family: Family, cases: int, batch: int, seed: int, show: int) -> Result:
    rng = np.random.default_rng([seed, zlib.crc32(family.name.encode())])
    result = Result()
    for k in range(-(-cases // batch)):
        shape = family.shapes[k % len(family.shapes)]
        inputs = family.draw(rng, batch, shape)
        if shape not in result.shapes:
            t0 = time.perf_counter()
            jax.block_until_ready(family.kernel(inputs))
            result.compile_s += time.perf_counter() - t0
            result.shapes.append(shape)
        t0 = time.perf_counter()
        outputs = jax.block_until_ready(family.kernel(inputs))
        result.jax_s += time.perf_counter() - t0
        outputs = jax.tree.map(np.asarray, outputs)
        t0 = time.perf_counter()
        expected = [family.reference(inputs, b) for b in range(batch)]
        result.python_s += time.perf_counter() - t0
        for b, want in enumerate(expected):
            got = family.actual(outputs, b)
            if got != want:
                result.mismatches += 1
                if result.mismatches <= show:
                    show_failure(family, inputs, b, got, want)
        result.cases += batch
    return result


def shape_text(result: Result, batch: int) -> str:
    """'1000 × 16', or for the oracles '1000 × (12, 12), (40, 70), …' (Lx, Ly)."""
    return f"{batch} × " + ", ".join(str(s) for s in result.shapes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=100_000,
                        help="cases per kernel family, rounded up to whole batches (the oracles take their four "
                             "shapes in turn, one per batch)")
    parser.add_argument("--batch", type=int, default=1000, help="rows per jit'd call")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--show", type=int, default=3, help="failing cases printed per family")
    parser.add_argument("--only", default="", help="comma-separated family names (the table's first column)")
    args = parser.parse_args()
    families = [make() for make in FAMILIES]
    if args.only:
        wanted = set(args.only.split(","))
        families = [f for f in families if f.name.split(" ")[0] in wanted]
    print(f"jax {jax.__version__}, backend {jax.default_backend()}, {os.cpu_count()} CPUs; --cases {args.cases} "
          f"--batch {args.batch} --seed {args.seed}\n", flush=True)
    start, results = time.perf_counter(), []
    for family in families:
        results.append(run_family(family, args.cases, args.batch, args.seed, args.show))
        print(f"{family.name}: {results[-1].cases:,} cases, {results[-1].mismatches} mismatches, "
              f"{time.perf_counter() - start:.0f} s so far", file=sys.stderr, flush=True)
    print("| kernel | batch × capacity | cases | mismatches | jax (s) | compile, first calls (s) "
          "| Python reference (s) |")
    print("|---|---|---|---|---|---|---|")
    for family, r in zip(families, results):
        print(f"| {family.name} | {shape_text(r, args.batch)} | {r.cases:,} | {r.mismatches} | "
              f"{r.jax_s:.2f} | {r.compile_s:.2f} | {r.python_s:.1f} |")
    total = sum(r.mismatches for r in results)
    print(f"\n{len(results)} kernel families, {total} mismatches, {time.perf_counter() - start:.0f} s in all; "
          f"jax {jax.__version__} ({jax.default_backend()}), {os.cpu_count()} CPUs")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
