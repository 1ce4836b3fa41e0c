"""Option rows for property tests whose options are static (each combination its own compiled program): every pair
of values of any two options appears together in some row (a covering array of strength 2), in a handful of rows
rather than every combination. A test draws its seed freely and its options from these rows, so that it compiles a
few programs and runs each on many seeds, and still sees each option with every value of each other one."""

from __future__ import annotations

import itertools


def pairwise(options: dict[str, list]) -> list[dict]:
    """Rows {name: value} covering every pair of values of two options, built greedily (the same rows every run):
    each row starts from the first pair not yet covered and gives each other option the value that covers the most
    pairs still missing with the values chosen so far (the first such value on ties)."""
    names = list(options)
    if len(names) < 2:  # no pairs: each value once
        return [dict(zip(names, values)) for values in itertools.product(*options.values())]
    missing = {((a, x), (b, y)) for a, b in itertools.combinations(names, 2)
               for x in range(len(options[a])) for y in range(len(options[b]))}
    rows = []
    while missing:
        (a, x), (b, y) = min(missing, key=lambda pair: (names.index(pair[0][0]), names.index(pair[1][0]), pair))
        row = {a: x, b: y}
        for name in names:
            if name not in row:
                row[name] = max(range(len(options[name])), key=lambda v: (
                    sum(((c, row[c]), (name, v)) in missing or ((name, v), (c, row[c])) in missing for c in row), -v))
        missing -= {((c, row[c]), (d, row[d])) for c, d in itertools.combinations(names, 2)}
        rows.append({name: options[name][row[name]] for name in names})
    return rows
