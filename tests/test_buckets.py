"""Bucket lengths fitted to the training data (`fitted_buckets`, data.max_buckets): exact against a brute-force
reference, validated in the config, and what a LevT run compiles its train step for."""

import itertools
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxnat.config import build_config, default_config, validate
from jaxnat.data import batching
from jaxnat.data.vocab import PAD_ID
from jaxnat.errors import ConfigError, DataError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tokens(lengths, buckets):
    """The tokens of the examples' rows: each padded to the smallest bucket that holds it."""
    return sum(min(b for b in buckets if b >= n) for n in lengths)


def _brute_force(lengths, count, multiple, max_len):
    """The fewest row tokens over every set of at most ``count`` lengths, each a multiple of ``multiple`` or
    ``max_len`` and at most ``max_len``, the largest holding the longest example: plain enumeration."""
    top = min(-(-max(lengths) // multiple) * multiple, max_len)
    candidates = sorted({v for v in range(multiple, max_len + 1, multiple) if v < top} | {top})
    return min(_tokens(lengths, [*below, top]) for k in range(count)
               for below in itertools.combinations(candidates[:-1], k))


def test_fitted_buckets_examples():
    assert batching.fitted_buckets([5, 5, 6, 9, 20], 2) == [9, 20]
    assert batching.fitted_buckets([5, 5, 6, 9, 20], 2, multiple=4) == [8, 20]
    assert batching.fitted_buckets([5, 5, 6, 9, 20], 10) == [5, 6, 9, 20]  # every length its own bucket
    assert batching.fitted_buckets([5, 9, 20], 3, multiple=8, max_len=20) == [8, 16, 20]  # max_len caps 24
    assert batching.fitted_buckets(np.array([7, 7, 7]), 3, multiple=48, max_len=48) == [48]
    # 1000 pairs of 10 tokens and three longer ones: the 1000 keep a bucket of their own, the three share one
    assert batching.fitted_buckets([10] * 1000 + [11, 12, 40], 2) == [10, 40]
    # [1, 3] and [2, 3] both pad to 7 tokens: the tie goes to the earliest split
    assert batching.fitted_buckets([1, 2, 3], 2) == [1, 3]


@pytest.mark.parametrize("args, error, message", [
    (([3, 4], 0), ConfigError, "number of buckets must be a positive integer, got 0"),
    (([3, 4], 2, 0), ConfigError, "bucket multiple must be a positive integer, got 0"),
    (([], 2), DataError, "at least one example"),
    (([3, 0], 2), DataError, "each of length >= 1"),
    (([3, 30], 2, 1, 20), DataError, "1 examples are longer than max_len=20"),
    (([3, 21, 20], 2, 1, 20), DataError, "1 examples are longer than max_len=20"),
])
def test_fitted_buckets_errors(args, error, message):
    with pytest.raises(error) as e:
        batching.fitted_buckets(*args)
    assert message in str(e.value) and "\n" not in str(e.value)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 24), min_size=1, max_size=30), st.integers(1, 4), st.integers(1, 6),
       st.integers(0, 6))
def test_fitted_buckets_match_brute_force(lengths, count, multiple, slack):
    max_len = max(lengths) + slack
    buckets = batching.fitted_buckets(lengths, count, multiple, max_len)
    rounded = {min(-(-n // multiple) * multiple, max_len) for n in lengths}
    assert buckets == sorted(set(buckets)) and len(buckets) == min(count, len(rounded))
    assert buckets[-1] == max(rounded) and all(b % multiple == 0 or b == max_len for b in buckets)
    assert _tokens(lengths, buckets) == _brute_force(lengths, count, multiple, max_len)
    # never more tokens than the geometric buckets with as many or fewer lengths
    geometric = batching.bucket_lengths(max_len, min_len=1, multiple=multiple)
    if len([b for b in geometric if b >= min(lengths)]) <= count:
        assert _tokens(lengths, buckets) <= _tokens(lengths, geometric)


def test_train_batcher_padding_counts_an_epoch():
    rng = np.random.default_rng(0)
    src = [np.ones(n, np.int32) for n in rng.integers(2, 30, 50)]
    tgt = [np.ones(n, np.int32) for n in rng.integers(2, 30, 50)]
    batcher = batching.TrainBatcher(src, tgt, 64, [10, 20, 30], seed=0)
    # a bucket's last batch repeats pairs drawn at random: the padding is an epoch's on average
    batches = [batcher.batch(s) for s in range(400 * batcher.steps_per_epoch)]
    pads = sum(int((b[k] == PAD_ID).sum()) for b in batches for k in ("src", "tgt"))
    assert batcher.padding == pytest.approx(pads / sum(2 * b["src"].size for b in batches), rel=0.005)


@pytest.mark.parametrize("value", [-1, True])
def test_config_checks_max_buckets(value):
    c = default_config()
    c.data.max_buckets = value
    with pytest.raises(ConfigError) as e:
        validate(c)
    assert str(e.value) == (f"data.max_buckets must be an integer >= 0 (0: the geometric buckets of "
                            f"data.bucket_growth), got {value!r}")


@pytest.mark.parametrize("model", ["levt", "editor"])
def test_edit_model_run_compiles_at_most_three_train_programs(model, tmp_path):
    """LevT and EDITOR do not pack (their oracles work per row: docs/levt.md): by default (data.max_buckets=3)
    their train step compiles for at most three batch shapes (`Trainer.compile_train_steps`: one program per shape
of the batcher), where the geometric buckets would give more."""
    from jaxnat.training.trainer import Trainer

    # the default bucket growth and multiple (1.2, 4): many geometric lengths below data.max_len
    config = build_config(os.path.join(ROOT, "tests", "configs", "tiny.py"),
                          [f"--config.model.name={model}", "--config.eval.beam_size=1",
                           "--config.data.bucket_growth=1.2", "--config.data.bucket_multiple=4"])
    trainer = Trainer(config, str(tmp_path))
    batcher = trainer.make_batcher()
    src, tgt, _, _, _ = trainer.encoded_split("train")
    fitted = batching.fitted_buckets(batching.example_lengths(src, tgt), 3, multiple=4, max_len=48)
    assert sorted(length for _, length in batcher.shapes) == fitted and len(fitted) == 3
    geometric = batching.TrainBatcher(src, tgt, config.data.batch_tokens, trainer.buckets, seed=0)
    assert len(geometric.shapes) > 3
