"""Token-budget batching into a few fixed (batch, length) shapes, with a resumable deterministic order.

Every training batch has one of a handful of shapes `(B_L, L)`, one per bucket length L, so that a jitted
step compiles a few times only. The order of batches depends only on `(seed, step)`: epoch `e` uses
`np.random.default_rng([seed, e])` to permute the examples of each bucket and then the batches, so a run
resumed at step `s` sees exactly the batch it would have seen without the interruption.
"""

from __future__ import annotations

import math
import queue
import threading
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import numpy as np

from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID
from jaxnat.errors import ConfigError, DataError


def _round_up(x: float, m: int) -> int:
    return int(math.ceil(x / m) * m)


def bucket_lengths(max_len: int, min_len: int = 8, growth: float = 1.4, multiple: int = 8) -> list[int]:
    """A handful of increasing lengths: multiples of `multiple` growing about `growth`x, ending at max_len.

    E.g. bucket_lengths(256) == [8, 16, 24, 40, 56, 80, 112, 160, 224, 256].
    """
    if int(max_len) != max_len or max_len < 1:
        raise ConfigError(f"max_len must be a positive integer, got {max_len!r}")
    if int(min_len) != min_len or min_len < 1:
        raise ConfigError(f"min_len must be a positive integer, got {min_len!r}")
    if growth <= 1.0:
        raise ConfigError(f"bucket growth must be > 1, got {growth}")
    max_len, min_len = int(max_len), int(min_len)
    out: list[int] = []
    length = _round_up(min_len, multiple)
    while length < max_len:
        out.append(length)
        length = max(length + multiple, _round_up(length * growth, multiple))
    if out and max_len < out[-1] * (1 + (growth - 1) / 4):
        out.pop()  # max_len is barely longer than the previous bucket: one compilation fewer
    out.append(max_len)
    return out


def fitted_buckets(lengths: Sequence[int] | np.ndarray, count: int, multiple: int = 1,
                   max_len: int | None = None) -> list[int]:
    """At most ``count`` bucket lengths that pad examples of ``lengths`` to the fewest tokens.

    lengths: int[N], each example's longest side (what `TrainBatcher` buckets it by, `example_lengths`). Each
    bucket length is a multiple of ``multiple`` or ``max_len`` (None: no cap); the largest holds the longest
    example. Minimised: the sum over the examples of their bucket's length, i.e. the tokens of their rows (a
    bucket's partly filled last batch aside). An optimal bucket ends at a member's length rounded up (lowering
    it there keeps its members and pads less), so a dynamic programme over the n distinct rounded lengths
    c_1 < … < c_n is exact: with best_k(j) the fewest tokens for the examples up to c_j in k buckets,
    best_k(j) = min over i <= j of best_{k-1}(i - 1) + c_j · #{examples at c_i … c_j}; O(count · n²).
    One more bucket always pads less while lengths are left, so the answer has min(count, n) lengths; ties go
    to the earliest split (np.argmin's first).

    E.g. fitted_buckets([5, 5, 6, 9, 20], 2) == [9, 20]; with multiple=4: [8, 20].
    """
    if int(count) != count or count < 1:
        raise ConfigError(f"the number of buckets must be a positive integer, got {count!r}")
    if int(multiple) != multiple or multiple < 1:
        raise ConfigError(f"the bucket multiple must be a positive integer, got {multiple!r}")
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size == 0 or lengths.min() < 1:
        raise DataError("bucket lengths are fitted to at least one example, each of length >= 1")
    if max_len is not None and lengths.max() > max_len:
        raise DataError(f"{int((lengths > max_len).sum())} examples are longer than max_len={max_len}")
    rounded = -(-lengths // multiple) * multiple
    values, counts = np.unique(rounded if max_len is None else np.minimum(rounded, max_len), return_counts=True)
    n = values.size
    upto = np.concatenate([[0], np.cumsum(counts)])  # upto[j]: the examples below values[j]
    first, last = np.arange(n)[:, None], np.arange(n)[None, :]
    # row i, column j: the tokens of one bucket of length values[j] holding the examples at values[i … j]
    bucket = np.where(first <= last, values[None, :] * (upto[None, 1:] - upto[:n, None]), np.inf)
    best = bucket[0].astype(np.float64)  # float: inf marks the impossible splits; sums stay exact below 2**53
    starts = []
    for _ in range(min(int(count), n) - 1):
        total = np.concatenate([[np.inf], best[:-1]])[:, None] + bucket  # the previous buckets end at i - 1
        starts.append(np.argmin(total, axis=0))
        best = total[starts[-1], np.arange(n)]
    out, j = [int(values[-1])], n - 1
    for start in reversed(starts):
        j = int(start[j]) - 1
        out.append(int(values[j]))
    return out[::-1]


def _wrap(pieces: Sequence[int], max_len: int, truncate: bool) -> tuple[np.ndarray | None, bool]:
    """[BOS] + pieces + [EOS] as int32, or (None, False) if too long and not truncating."""
    n = len(pieces) + 2
    truncated = False
    if n > max_len:
        if not truncate:
            return None, False
        pieces = pieces[: max_len - 2]
        n = max_len
        truncated = True
    arr = np.empty(n, dtype=np.int32)
    arr[0] = BOS_ID
    arr[1:-1] = pieces
    arr[-1] = EOS_ID
    return arr, truncated


def prepare_examples(
    src_ids: Sequence[Sequence[int]],
    tgt_ids: Sequence[Sequence[int]] | None,
    max_len: int,
    truncate: bool,
    drop_empty: bool = True,
) -> tuple[list[np.ndarray], list[np.ndarray] | None, dict[str, int]]:
    """Wraps each side in [BOS ... EOS] (int32 arrays) and filters or truncates to `max_len` tokens.

    A pair is dropped if a side is empty (when `drop_empty`), or if a side is longer than `max_len` including
    BOS/EOS (when not `truncate`); with `truncate` it is cut to `max_len`, EOS kept. For evaluation use
    `truncate=True, drop_empty=False`: then output i always corresponds to input i. `tgt_ids=None` (translate
    mode) prepares the source side only and returns None for the target.

    Returns:
      (src, tgt, counts) with counts {'kept', 'too_long', 'truncated', 'empty'} (pairs).
    """
    src, tgt, _, counts, _ = prepare_with_init(src_ids, tgt_ids, None, max_len, truncate, drop_empty)
    return src, tgt, counts


class Prepared(NamedTuple):
    """Wrapped and filtered examples (`prepare_with_init`)."""

    src: list[np.ndarray]
    tgt: list[np.ndarray] | None
    init: list[np.ndarray] | None
    counts: dict[str, int]
    extras: dict[str, np.ndarray]


def prepare_with_init(
    src_ids: Sequence[Sequence[int]],
    tgt_ids: Sequence[Sequence[int]] | None,
    init_ids: Sequence[Sequence[int]] | None,
    max_len: int,
    truncate: bool,
    drop_empty: bool = True,
    extras: dict[str, np.ndarray] | None = None,
) -> "Prepared":
    """`prepare_examples` with a third, optional side: the initial hypothesis y0 (target pieces) of each pair.

    The init side is wrapped, dropped-if-too-long or truncated exactly like src and tgt, so `max_len` bounds
    all three. An empty init does not drop its pair: [BOS, EOS] is a refining model's ordinary start.
    ``extras`` (per-example side data, {key: array[N, ...]}, see `TrainBatcher`) lose the same examples.

    Returns a `Prepared` (src, tgt, init, counts, extras): init is None when `init_ids` is None, counts as in
    `prepare_examples`, extras the kept rows ({} without extras).
    """
    if int(max_len) != max_len or max_len < 3:
        raise ConfigError(f"max_len must be an integer >= 3 (BOS, a piece, EOS), got {max_len!r}")
    if tgt_ids is not None and len(src_ids) != len(tgt_ids):
        raise DataError(f"{len(src_ids)} source but {len(tgt_ids)} target sentences; they must be aligned")
    if init_ids is not None and len(src_ids) != len(init_ids):
        raise DataError(f"{len(src_ids)} source but {len(init_ids)} initial hypotheses; they must be aligned")
    extras = _check_extras(extras, len(src_ids))
    counts = {"kept": 0, "too_long": 0, "truncated": 0, "empty": 0}
    kept: list[int] = []
    out_src: list[np.ndarray] = []
    out_tgt: list[np.ndarray] = []
    out_init: list[np.ndarray] = []
    for i, s in enumerate(src_ids):
        t = tgt_ids[i] if tgt_ids is not None else None
        y0 = init_ids[i] if init_ids is not None else None
        if drop_empty and (len(s) == 0 or (t is not None and len(t) == 0)):
            counts["empty"] += 1
            continue
        s_arr, s_cut = _wrap(s, max_len, truncate)
        t_arr, t_cut = _wrap(t, max_len, truncate) if t is not None else (None, False)
        y0_arr, y0_cut = _wrap(y0, max_len, truncate) if y0 is not None else (None, False)
        if s_arr is None or (t is not None and t_arr is None) or (y0 is not None and y0_arr is None):
            counts["too_long"] += 1
            continue
        counts["truncated"] += int(s_cut or t_cut or y0_cut)
        counts["kept"] += 1
        kept.append(i)
        out_src.append(s_arr)
        if t is not None:
            out_tgt.append(t_arr)
        if y0 is not None:
            out_init.append(y0_arr)
    return Prepared(out_src, out_tgt if tgt_ids is not None else None, out_init if init_ids is not None else None,
                    counts, {k: v[np.asarray(kept, dtype=np.int64)] for k, v in extras.items()})


def _lengths(seqs: Sequence[np.ndarray] | None, n: int) -> np.ndarray:
    if seqs is None:
        return np.zeros(n, dtype=np.int64)
    return np.fromiter((len(x) for x in seqs), dtype=np.int64, count=n)


def example_lengths(src: Sequence[np.ndarray], tgt: Sequence[np.ndarray],
                    init: Sequence[np.ndarray] | None = None) -> np.ndarray:
    """int64[N]: each example's longest side (src, tgt and, given, init), the length `TrainBatcher` buckets by."""
    n = len(src)
    lengths = np.maximum(_lengths(src, n), _lengths(tgt, n))
    return lengths if init is None else np.maximum(lengths, _lengths(init, n))  # 'init' shares the tgt columns


def _fill(seqs: Sequence[np.ndarray], rows: np.ndarray, length: int) -> np.ndarray:
    out = np.full((len(rows), length), PAD_ID, dtype=np.int32)
    for r, i in enumerate(rows):
        if i >= 0:
            x = seqs[i]
            out[r, : len(x)] = x
    return out


def _gather(extra: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """extra: int32[N, ...] per-example side data → int32[len(rows), ...]; filler rows (index -1) all PAD."""
    out = extra[np.maximum(rows, 0)].astype(np.int32)
    out[rows < 0] = PAD_ID
    return out


def _check_extras(extras: dict[str, np.ndarray] | None, n: int) -> dict[str, np.ndarray]:
    for key, value in (extras or {}).items():
        if len(value) != n:
            raise DataError(f"{n} examples but {len(value)} rows of {key!r}; they must be aligned")
    return dict(extras or {})


def num_tokens(batch: dict[str, np.ndarray], side: str = "tgt") -> int:
    """Number of non-PAD tokens of one side of a batch."""
    return int(np.count_nonzero(np.asarray(batch[side]) != PAD_ID))


def _check_plan(seed: int, multiple_of: int, process: tuple[int, int]) -> None:
    """The checks of a training batcher's seed, row multiple and process split (ConfigError)."""
    if int(multiple_of) != multiple_of or multiple_of < 1:
        raise ConfigError(f"multiple_of must be a positive integer, got {multiple_of!r}")
    if int(seed) != seed or seed < 0:
        raise ConfigError(f"data seed must be a non-negative integer, got {seed!r}")
    if not (process[1] >= 1 and 0 <= process[0] < process[1] and multiple_of % process[1] == 0):
        raise ConfigError(f"process {process} (index, count) must have 0 <= index < count and count dividing "
                          f"multiple_of={multiple_of}")


class TrainBatcher:
    """Deterministic, resumable token-budget batches of fixed shapes.

    Each pair goes to the smallest bucket length L >= max(len(src), len(tgt), len(init)); a batch of that
    bucket has shape [B_L, L] with B_L = max(multiple_of, floor(batch_tokens / L) rounded down to a multiple of
    multiple_of). Per epoch every example appears once, and a bucket's last batch is completed with the first
    pairs of the bucket's order of that epoch, seen a second time (rows of padding alone, which carry no loss,
    cost the unpacked edit models 3% of their token slots): nothing is dropped and `steps_per_epoch` is the same
    every epoch. `batch(step)` depends only on (seed, step); the current epoch's plan is cached.

    `init` (optional, aligned with src/tgt): each pair's initial hypothesis y0 for training a refining model
    from data (post-editing); batches then carry it as 'init', shaped like 'tgt'.

    `extras` (optional): per-example side data of a fixed shape, {key: int32[N, ...]} (e.g. constraint pairs,
    int32[N, pairs, pieces]); batches carry each as int32[B, ...]. Their shape does not
    depend on the bucket, so they add no compilation.

    `process` = (index, count): in multi-process training every process plans the same global batches but
    reads and builds only its own contiguous block of B / count rows (`batch`); `shapes` stay the global ones.
    `multiple_of` (the global device count) makes every B a multiple of count.
    """

    def __init__(
        self,
        src: Sequence[np.ndarray],
        tgt: Sequence[np.ndarray],
        batch_tokens: int,
        buckets: Sequence[int],
        seed: int,
        multiple_of: int = 1,
        init: Sequence[np.ndarray] | None = None,
        extras: dict[str, np.ndarray] | None = None,
        process: tuple[int, int] = (0, 1),
    ):
        if len(src) != len(tgt):
            raise DataError(f"{len(src)} source but {len(tgt)} target examples; they must be aligned")
        if init is not None and len(init) != len(src):
            raise DataError(f"{len(src)} source but {len(init)} initial hypotheses; they must be aligned")
        if len(src) == 0:
            raise DataError("no training examples left after filtering; check the data and max_len")
        if int(batch_tokens) != batch_tokens or batch_tokens < 1:
            raise ConfigError(f"batch_tokens must be a positive integer, got {batch_tokens!r}")
        _check_plan(seed, multiple_of, process)
        self.process = process
        buckets = [int(b) for b in buckets]
        if not buckets or any(b < 1 for b in buckets) or sorted(set(buckets)) != buckets:
            raise ConfigError(f"buckets must be strictly increasing positive lengths, got {buckets}")
        self.src, self.tgt, self.init = src, tgt, init
        self.extras = _check_extras(extras, len(src))
        self.seed = int(seed)
        self.batch_tokens = int(batch_tokens)
        self.multiple_of = int(multiple_of)
        self.buckets = buckets

        n = len(src)
        lengths = example_lengths(src, tgt, init)
        if lengths.max() > buckets[-1]:
            raise DataError(
                f"{int((lengths > buckets[-1]).sum())} examples are longer than the largest bucket "
                f"({buckets[-1]}); filter or truncate them with prepare_examples first"
            )
        which = np.searchsorted(np.asarray(buckets), lengths, side="left")
        # Only non-empty buckets get a shape (and thus a compilation).
        self._bucket_members: list[np.ndarray] = []
        self._bucket_len: list[int] = []
        self._bucket_bs: list[int] = []
        for b, length in enumerate(buckets):
            members = np.flatnonzero(which == b)
            if members.size == 0:
                continue
            bs = max(self.multiple_of, (self.batch_tokens // length) // self.multiple_of * self.multiple_of)
            self._bucket_members.append(members)
            self._bucket_len.append(length)
            self._bucket_bs.append(bs)
        self._bucket_batches = [
            -(-m.size // bs) for m, bs in zip(self._bucket_members, self._bucket_bs)
        ]
        self.steps_per_epoch = int(sum(self._bucket_batches))
        self.num_examples = n
        real = _lengths(src, n) + _lengths(tgt, n)
        # the share of an epoch's batch tokens (src and tgt) that are padding, on average over the epochs (a bucket's
        # last batch repeats pairs of the bucket drawn at random)
        rows = [k * bs for k, bs in zip(self._bucket_batches, self._bucket_bs)]
        self.padding = 1.0 - sum(r / m.size * real[m].sum() for r, m in zip(rows, self._bucket_members)) / (
            2 * sum(r * length for r, length in zip(rows, self._bucket_len)))
        self._lock = threading.Lock()
        self._plan_epoch: int | None = None
        self._plan: list[tuple[int, np.ndarray]] = []

    @property
    def shapes(self) -> set[tuple[int, int]]:
        """The (batch, length) shapes batches can have."""
        return set(zip(self._bucket_bs, self._bucket_len))

    @property
    def keys(self) -> tuple[str, ...]:
        """The keys of every batch: ('src', 'tgt'[, 'init'], *extras)."""
        return ("src", "tgt") + (("init",) if self.init is not None else ()) + tuple(self.extras)

    def key_shapes(self, shape: tuple[int, int]) -> dict[str, tuple[int, ...]]:
        """The shape of each key of a batch of (batch, length) ``shape``: [B, L], or [B, ...] for an extra."""
        return {k: (shape[0], *self.extras[k].shape[1:]) if k in self.extras else shape for k in self.keys}

    def shape(self, step: int) -> tuple[int, int]:
        """The global (batch, length) shape of batch ``step``."""
        epoch, within = divmod(int(step), self.steps_per_epoch)
        b = self.plan(epoch)[within][0]
        return int(self._bucket_bs[b]), int(self._bucket_len[b])

    def first_batch_of_shape(self, shape: tuple[int, int]) -> dict[str, np.ndarray]:
        """The earliest step's batch of (batch, length) ``shape`` (benchmarks time one shape)."""
        if shape not in self.shapes:
            raise ValueError(f"no batch of shape {shape}; the shapes: {sorted(self.shapes)}")
        # every bucket has batches in every epoch
        return self.batch(next(step for step in range(self.steps_per_epoch) if self.shape(step) == shape))

    def _make_plan(self, epoch: int) -> list[tuple[int, np.ndarray]]:
        rng = np.random.default_rng([self.seed, epoch])
        plan: list[tuple[int, np.ndarray]] = []
        for b, members in enumerate(self._bucket_members):
            bs = self._bucket_bs[b]
            perm = members[rng.permutation(members.size)]
            # the last batch completed with the bucket's first pairs of this epoch, again: no row of padding alone
            full = perm[np.arange(self._bucket_batches[b] * bs) % perm.size]
            for rows in full.reshape(-1, bs):
                plan.append((b, rows))
        order = rng.permutation(len(plan))
        return [plan[i] for i in order]

    def plan(self, epoch: int) -> list[tuple[int, np.ndarray]]:
        """The epoch's batches as (bucket index, example indices)."""
        if int(epoch) != epoch or epoch < 0:
            raise ValueError(f"epoch must be a non-negative integer, got {epoch!r}")
        with self._lock:
            if self._plan_epoch != epoch:
                self._plan = self._make_plan(int(epoch))
                self._plan_epoch = int(epoch)
            return self._plan

    def batch_indices(self, step: int) -> np.ndarray:
        """Example indices of the rows of batch `step`."""
        epoch, within = divmod(int(step), self.steps_per_epoch)
        return self.plan(epoch)[within][1]

    def batch(self, step: int) -> dict[str, np.ndarray]:
        """{'src': int32[B, L], 'tgt': int32[B, L][, 'init': int32[B, L]]} of global step `step` (>= 0); with
        `process` = (i, n), rows i·B/n … (i+1)·B/n − 1 of it only.

        Rows are [BOS … EOS] right-padded with PAD.
        """
        if int(step) != step or step < 0:
            raise ValueError(f"step must be a non-negative integer, got {step!r}")
        epoch, within = divmod(int(step), self.steps_per_epoch)
        b, rows = self.plan(epoch)[within]
        index, count = self.process
        rows = rows.reshape(count, -1)[index]
        length = self._bucket_len[b]
        batch = {"src": _fill(self.src, rows, length), "tgt": _fill(self.tgt, rows, length)}
        if self.init is not None:
            batch["init"] = _fill(self.init, rows, length)
        batch.update({k: _gather(v, rows) for k, v in self.extras.items()})
        return batch


def pack_rows(lengths: np.ndarray, width: int, order: np.ndarray, most: int | None = None,
              budget: tuple[np.ndarray, int] | None = None) -> list[np.ndarray]:
    """Packs examples into rows of ``width`` tokens a side: best-fit decreasing on each example's longer side.

    lengths: int[N] (an example's longest side, BOS/EOS included, each <= width); order: a permutation of
    range(N) that breaks ties between equal lengths (a seeded one makes the packing a function of the seed);
    most: the most examples a row takes (default `max_segments(width)`); budget: (sizes int[N], capacity), a
    second quantity a row holds at most ``capacity`` of (a model's per-row slots: `Family.pack_budget`), each
    size <= capacity. Returns the rows, each an int64 array of example indices in the order they sit in the row.
    Every side of a row holds at most ``width`` tokens, since no side of an example is longer than its longest.

    Best fit: each example, longest first, goes to the open row with the least room that still holds it (and
    its size), so short examples fill the gaps long ones leave (padding is typically a few percent).
    """
    most = max_segments(width) if most is None else most
    sizes, capacity = budget if budget is not None else (np.zeros(len(lengths), np.int64), 0)
    by_room: list[list[int]] = [[] for _ in range(width + 1)]  # room left -> open rows with exactly that room
    rows: list[list[int]] = []
    left: list[int] = []  # each row's budget left

    def open_row(n: int, size: int):
        for r in range(n, width + 1):
            for at in range(len(by_room[r]) - 1, -1, -1):  # the newest first: without a budget, the last one
                if left[by_room[r][at]] >= size:
                    return by_room[r].pop(at), r
        return None

    for i in order[np.argsort(-lengths[order], kind="stable")]:
        n, size = int(lengths[i]), int(sizes[i])
        found = open_row(n, size)
        if found is None:
            row, room = len(rows), width
            rows.append([])
            left.append(capacity)
        else:
            row, room = found
        rows[row].append(int(i))
        left[row] -= size
        if len(rows[row]) < most:  # a full row is closed
            by_room[room - n].append(row)
    return [np.asarray(r, dtype=np.int64) for r in rows]


def max_segments(width: int) -> int:
    """The most segments (pairs) a packed row of ``width`` tokens holds: width // 8, at least 1.

    Per-segment arrays are this wide, and a model may read one entry per slot (a length-predicting model's
    LENGTH tokens in its encoder, say), so the cap keeps that cost at 1/8 of the row. Pairs average 8 or more
    tokens on their longer side in any real corpus (Multi30k: 15), so rows rarely fill their slots before their
    tokens."""
    return max(1, width // 8)


def _fill_packed(seqs: Sequence[np.ndarray], rows: Sequence[np.ndarray], width: int) -> tuple[np.ndarray, np.ndarray]:
    """(tokens int32[R, width], segment ids int32[R, width]): row r's examples back to back, segment ids 1, 2, …
    in row order, PAD and segment 0 after the last."""
    tokens = np.full((len(rows), width), PAD_ID, dtype=np.int32)
    segments = np.zeros((len(rows), width), dtype=np.int32)
    for r, members in enumerate(rows):
        at = 0
        for k, i in enumerate(members):
            x = seqs[i]
            tokens[r, at: at + len(x)] = x
            segments[r, at: at + len(x)] = k + 1
            at += len(x)
    return tokens, segments


class PackedBatcher:
    """Deterministic, resumable batches of ONE shape [B, W]: several pairs per row (sequence packing).

    W = ``width`` (data.max_len) and B = batch_tokens // W (a multiple of ``multiple_of``). The examples are
    packed into rows once (`pack_rows`, seeded; ``budget``: its second quantity); each epoch shuffles the rows
    and groups them B at a time, the last batch completed with empty rows, so `steps_per_epoch` is the same
    every epoch and the batch of a step depends only on (seed, step), as with `TrainBatcher`, whose interface
    this one shares.

    A batch: 'src', 'tgt' int32[B, W] (pair k of a row is segment k on both sides) and 'src_seg', 'tgt_seg'
    int32[B, W] (segment ids: 1, 2, … per row, 0 on padding); each extra (per-example side data int32[N, ...])
    as int32[B, max_segments(W), ...], slot k - 1 for segment k, PAD for none. A model computes every
    per-sentence quantity per segment (`jaxnat.models.packing`), so a pair's loss does not depend on the pairs
    it shares a row with.
    """

    def __init__(self, src: Sequence[np.ndarray], tgt: Sequence[np.ndarray], batch_tokens: int, width: int,
                 seed: int, multiple_of: int = 1, extras: dict[str, np.ndarray] | None = None,
                 process: tuple[int, int] = (0, 1), budget: tuple[np.ndarray, int] | None = None):
        if len(src) != len(tgt):
            raise DataError(f"{len(src)} source but {len(tgt)} target examples; they must be aligned")
        if len(src) == 0:
            raise DataError("no training examples left after filtering; check the data and max_len")
        if int(width) != width or width < 2:
            raise ConfigError(f"the packed row width must be an integer >= 2, got {width!r}")
        if int(batch_tokens) != batch_tokens or batch_tokens < width:
            raise ConfigError(f"batch_tokens ({batch_tokens!r}) must be an integer of at least one row ({width})")
        _check_plan(seed, multiple_of, process)
        self.src, self.tgt, self.init = src, tgt, None
        self.extras = _check_extras(extras, len(src))
        self.seed, self.width, self.process = int(seed), int(width), process
        self.multiple_of = int(multiple_of)
        n = len(src)
        lengths = np.maximum(_lengths(src, n), _lengths(tgt, n))
        if lengths.max() > width:
            raise DataError(f"{int((lengths > width).sum())} examples are longer than a packed row ({width} "
                            f"tokens); filter or truncate them with prepare_examples first")
        over = np.asarray(budget[0]) > budget[1] if budget is not None else np.zeros(0, bool)
        if over.any():
            raise DataError(f"{int(over.sum())} examples need more than the {budget[1]} slots a packed row has for "
                            f"them (first: example {int(np.argmax(over))})")
        order = np.random.default_rng([self.seed, 1 << 30]).permutation(n)  # a stream of its own: not epoch 0's
        self.rows = pack_rows(lengths, self.width, order, budget=budget)
        self.batch_size = max(self.multiple_of, (int(batch_tokens) // self.width) // self.multiple_of
                              * self.multiple_of)
        self.steps_per_epoch = -(-len(self.rows) // self.batch_size)
        self.num_examples = n
        real = int(_lengths(src, n).sum() + _lengths(tgt, n).sum())
        # the share of the batches' tokens (both sides, filler rows included) that are padding
        self.padding = 1.0 - real / (2 * self.steps_per_epoch * self.batch_size * self.width)
        self._lock = threading.Lock()
        self._plan_epoch: int | None = None
        self._plan: np.ndarray = np.empty(0)

    @property
    def shapes(self) -> set[tuple[int, int]]:
        """The one (batch, length) shape of every batch."""
        return {(self.batch_size, self.width)}

    @property
    def keys(self) -> tuple[str, ...]:
        return ("src", "tgt", "src_seg", "tgt_seg") + tuple(self.extras)

    def key_shapes(self, shape: tuple[int, int]) -> dict[str, tuple[int, ...]]:
        k = max_segments(self.width)
        return {key: (shape[0], k, *self.extras[key].shape[1:]) if key in self.extras else shape
                for key in self.keys}

    def shape(self, step: int) -> tuple[int, int]:
        return self.batch_size, self.width

    def first_batch_of_shape(self, shape: tuple[int, int]) -> dict[str, np.ndarray]:
        if shape not in self.shapes:
            raise ValueError(f"no batch of shape {shape}; the shape: {sorted(self.shapes)}")
        return self.batch(0)

    def plan(self, epoch: int) -> np.ndarray:
        """int64[steps_per_epoch, B]: the packed rows of each batch of the epoch, -1 for an empty row."""
        if int(epoch) != epoch or epoch < 0:
            raise ValueError(f"epoch must be a non-negative integer, got {epoch!r}")
        with self._lock:
            if self._plan_epoch != epoch:
                order = np.full(self.steps_per_epoch * self.batch_size, -1, dtype=np.int64)
                order[: len(self.rows)] = np.random.default_rng([self.seed, int(epoch)]).permutation(len(self.rows))
                self._plan, self._plan_epoch = order.reshape(self.steps_per_epoch, self.batch_size), int(epoch)
            return self._plan

    def batch_indices(self, step: int) -> np.ndarray:
        """int64[B, max_segments(W)]: the example of each segment of each row of batch ``step`` (-1: none)."""
        epoch, within = divmod(int(step), self.steps_per_epoch)
        out = np.full((self.batch_size, max_segments(self.width)), -1, dtype=np.int64)
        for r, row in enumerate(self.plan(epoch)[within]):
            if row >= 0:
                out[r, : len(self.rows[row])] = self.rows[row]
        return out

    def batch(self, step: int) -> dict[str, np.ndarray]:
        """The batch of global step ``step`` (see the class); with ``process`` = (i, n), its i-th block of rows."""
        if int(step) != step or step < 0:
            raise ValueError(f"step must be a non-negative integer, got {step!r}")
        index, count = self.process
        members = self.batch_indices(step).reshape(count, -1, max_segments(self.width))[index]
        rows = [m[m >= 0] for m in members]
        batch = {}
        batch["src"], batch["src_seg"] = _fill_packed(self.src, rows, self.width)
        batch["tgt"], batch["tgt_seg"] = _fill_packed(self.tgt, rows, self.width)
        batch.update({k: _gather(v, members.reshape(-1)).reshape(members.shape + v.shape[1:])
                      for k, v in self.extras.items()})
        return batch


class Prefetcher:
    """Iterator over fn(start_step), fn(start_step + 1), ... computed ahead in a background thread.

    At most `size` results wait in the queue. An exception raised by `fn` is re-raised by `next`. The worker
    is a daemon thread and stops soon after `close()` (also called by `with` and when garbage-collected), so
    neither an abandoned iterator nor interpreter exit hangs.
    """

    _POLL_S = 0.1

    def __init__(self, fn: Callable[[int], Any], start_step: int, size: int = 2):
        if size < 1:
            raise ValueError(f"prefetch size must be >= 1, got {size}")
        self._queue: queue.Queue = queue.Queue(maxsize=size)
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(
            target=self._work, args=(fn, int(start_step), self._queue, self._stop), daemon=True,
            name="jaxnat-prefetch",
        )
        self._thread.start()

    @staticmethod
    def _work(fn, step, q, stop) -> None:
        # A static method holding no reference to the iterator, so dropping the iterator lets it be collected.
        while not stop.is_set():
            try:
                item = (True, fn(step))
            except BaseException as e:  # handed to the consumer
                item = (False, e)
            while not stop.is_set():
                try:
                    q.put(item, timeout=Prefetcher._POLL_S)
                    break
                except queue.Full:
                    continue
            if not item[0]:
                return
            step += 1

    def __iter__(self) -> "Prefetcher":
        return self

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        while True:
            try:
                ok, value = self._queue.get(timeout=self._POLL_S)
                break
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    self._done = True
                    raise StopIteration from None
        if not ok:
            self.close()
            raise value
        return value

    def close(self) -> None:
        self._done = True
        self._stop.set()

    def __enter__(self) -> "Prefetcher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()


def prefetch(fn: Callable[[int], Any], start_step: int, size: int = 2) -> Prefetcher:
    """Iterator yielding fn(step) for step = start_step, start_step + 1, ... computed in a background thread.

    Use `it.close()` (or `with prefetch(...) as it:`) when done; see `Prefetcher`.
    """
    return Prefetcher(fn, start_step, size)


def eval_batches(
    src: Sequence[np.ndarray],
    tgt: Sequence[np.ndarray] | None,
    batch_size: int,
    buckets: Sequence[int],
    init: Sequence[np.ndarray] | None = None,
    extras: dict[str, np.ndarray] | None = None,
    fit_rows: bool = False,
) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """Batches for evaluation/translation, sorted by length, of fixed shapes [batch_size, L]: the examples in
    length order fill one batch after another (as fairseq batches), each as wide as the smallest bucket that holds
    its longest, so that only the last batch has PAD rows, in at most as many shapes as buckets. (Batches of one
    bucket each left every bucket's last batch part empty: 448 rows for 256 sentences in docs/benchmarks.md's
    "Decoding side by side with transformers".)

    Yields (indices, batch): `indices[r]` is the position in `src` of row r, or -1 for a PAD row that fills
    the last batch, so outputs can be scattered back: `out[indices[indices >= 0]] = ...`.
    `batch` has 'src' and, unless `tgt` is None, 'tgt' (and 'init' if `init` is given), all int32[batch_size,
    L], and each of `extras` as int32[batch_size, ...] (see `TrainBatcher`). Each example appears exactly once.
    With ``fit_rows`` the last batch has the fewest rows, a power of two, that hold its examples: a server's requests
    of a sentence or a few decode a row or a few, not batch_size (a few more shapes, each compiled once).
    """
    if int(batch_size) != batch_size or batch_size < 1:
        raise ConfigError(f"eval batch_size must be a positive integer, got {batch_size!r}")
    batch_size = int(batch_size)
    buckets = [int(b) for b in buckets]
    n = len(src)
    if tgt is not None and len(tgt) != n:
        raise DataError(f"{n} source but {len(tgt)} target examples; they must be aligned")
    if init is not None and len(init) != n:
        raise DataError(f"{n} source but {len(init)} initial hypotheses; they must be aligned")
    extras = _check_extras(extras, n)
    if n == 0:
        return
    lengths = _lengths(src, n)
    if tgt is not None:
        lengths = np.maximum(lengths, _lengths(tgt, n))
    if init is not None:
        lengths = np.maximum(lengths, _lengths(init, n))
    if lengths.max() > buckets[-1]:
        raise DataError(
            f"{int((lengths > buckets[-1]).sum())} evaluation examples are longer than the largest bucket "
            f"({buckets[-1]}); truncate them with prepare_examples(..., truncate=True) first"
        )
    order = np.argsort(lengths, kind="stable")
    which = np.searchsorted(np.asarray(buckets), lengths[order], side="left")
    for start in range(0, n, batch_size):
        chunk = order[start : start + batch_size]
        rows = np.full(min(batch_size, 1 << (chunk.size - 1).bit_length()) if fit_rows else batch_size, -1, np.int64)
        rows[: chunk.size] = chunk
        length = buckets[which[start + chunk.size - 1]]  # the bucket of the batch's longest (its last) example
        batch = {"src": _fill(src, rows, length)}
        if tgt is not None:
            batch["tgt"] = _fill(tgt, rows, length)
        if init is not None:
            batch["init"] = _fill(init, rows, length)
        batch.update({k: _gather(v, rows) for k, v in extras.items()})
        yield rows, batch
