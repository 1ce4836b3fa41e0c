"""`tests.covering.pairwise` against the plain definition: every pair of values of two options in some row."""

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.covering import pairwise


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=9))
def test_every_pair_of_values_appears_together(sizes):
    options = {f"o{i}": [f"v{i}.{j}" for j in range(n)] for i, n in enumerate(sizes)}
    rows = pairwise(options)
    assert all(list(row) == list(options) and all(row[k] in options[k] for k in row) for row in rows)
    for a, b in itertools.combinations(options, 2):
        assert {(row[a], row[b]) for row in rows} == set(itertools.product(options[a], options[b]))
    assert {row[name] for row in rows for name in [next(iter(options))]} == set(options["o0"])
    assert len(rows) <= len(list(itertools.product(*options.values())))  # never more than every combination
    assert pairwise(options) == rows  # the same rows every run
