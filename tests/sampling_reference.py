"""Plain-Python reference of sampling's truncation (`jaxnat.decoding.search.truncate`), which the autoregressive
model's samples (tests/test_search.py) and DA-Transformer's sampled paths (tests/test_dat.py) are checked against."""

import numpy as np


def python_truncate(logp, temperature, top_k, top_p, epsilon):
    """bool[V]: the tokens a step may sample (`Sampling`), in plain Python: the tempered distribution cut to its top_k,
    then to the fewest most probable reaching top_p, then to those of probability >= epsilon, each on the one before
    renormalised, ties at a cut kept, and the most probable never cut."""
    x = np.asarray(logp, np.float64) / temperature
    keep = np.isfinite(x)

    def probs():
        e = np.where(keep, np.exp(x - x[keep].max()), 0.0)
        return e / e.sum()
    if 0 < top_k < len(x):
        keep &= x >= sorted(x[keep], reverse=True)[min(top_k, keep.sum()) - 1]
    if top_p < 1.0:
        p, mass, floor = probs(), 0.0, None
        for t in sorted(np.flatnonzero(keep), key=lambda t: -x[t]):
            if floor is not None and mass >= top_p:
                break
            floor, mass = x[t], mass + p[t]
        keep &= x >= floor
    if epsilon > 0.0:
        keep &= (probs() >= epsilon) | (x == x[keep].max())
    return keep
