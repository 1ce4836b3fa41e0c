"""Standard JSON for the files a run writes (metrics.json, history.jsonl, report.json): Python's json writes a float
that is no finite number as the tokens NaN or Infinity, which no JSON standard has and strict readers refuse
(JavaScript's JSON.parse, pandas' and Go's readers); here it is null, which jaxnat's readers take as "not a number"
(a CPR of no constraints, a loss that overflowed, a t-test of equal scores) and show as "–"."""

from __future__ import annotations

import json
import math


def strict(value):
    """``value`` with every float that is no finite number as None (tuples as lists, as JSON has them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v) for v in value]
    return value


def dumps(value, **kwargs) -> str:
    """``json.dumps`` of `strict` ``value``: standard JSON whatever floats it holds."""
    return json.dumps(strict(value), allow_nan=False, **kwargs)
