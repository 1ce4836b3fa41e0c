"""Model FLOPs utilisation (MFU) of training: the FLOPs of each compiled train program, the device's peak, and
the figure each log window reports.

MFU = the window's model FLOPs / its seconds / the peak. A step's model FLOPs are its compiled program's FLOPs
(XLA's cost analysis, per device) times the share of the batch's token slots that hold real tokens: FLOPs
spent on padding are not the model's, so padding lowers MFU (packing raises it). Where XLA's count is not
available, the step's model FLOPs are 6 · parameters · real target tokens, per device (a forward and a backward
pass over every parameter; attention's own products left out). XLA counts a loop's body once, however many times it
runs: a scanned layer stack, a coverage layer's iterations, CTC's and DA-Transformer's forward algorithms over the
target, an oracle's sweep are all loops, so each scan's body is counted again for its other iterations; and it
counts a conditional at its costlier branch, so a branch taken on a coin (an edit model's roll-in) is counted at
its probability (`count_correction`, on the step's jaxpr: the bodies and branches lowered alone, not compiled).
The peak is ``train.peak_tflops``, or (0) a dense matmul timed on the device at the start, in the model's compute
dtype.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

import jax
import numpy as np

from jax.extend import core

from jaxnat.data.vocab import PAD_ID
from jaxnat.models.coins import coin_probability

log = logging.getLogger("jaxnat")


def measure_peak_tflops(dtype: str, seconds: float = 1.0) -> float:
    """The device's dense matmul rate in TFLOP/s: a chain of four n × n products in ``dtype`` (n = 8192 on an
    accelerator, 1024 on a CPU, two orders of magnitude slower) in one program, run for about ``seconds`` after a
    first call that compiles it; the fastest run (the machine's best, not its average under other load). At n =
    8192 a run is milliseconds even on the fastest GPU, so the call's own overhead (tens of microseconds) does
    not lower the peak, which would raise every MFU measured against it."""
    n = 1024 if jax.default_backend() == "cpu" else 8192
    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), dtype)
    b = (jax.random.normal(jax.random.PRNGKey(1), (n, n)) / np.sqrt(n)).astype(dtype)  # keeps the chain's scale
    chain = jax.jit(lambda a, b: jax.lax.fori_loop(0, 4, lambda _, x: x @ b, a))
    chain(a, b).block_until_ready()
    best, begin = float("inf"), time.perf_counter()
    while time.perf_counter() - begin < seconds:
        t0 = time.perf_counter()
        chain(a, b).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    return 4 * 2 * n**3 / best / 1e12


def program_flops(compiled) -> float | None:
    """The FLOPs XLA counts in a compiled program (per device), or None where its cost analysis has none. jax
    returns the analysis as a dict, or (older versions) as a list of one dict per program."""
    analysis = compiled.cost_analysis()
    if isinstance(analysis, (list, tuple)):
        analysis = analysis[0] if analysis else None
    flops = (analysis or {}).get("flops", 0.0)
    return float(flops) if flops > 0 else None


def _lowered_flops(closed: core.ClosedJaxpr) -> float:
    """XLA's count of ``closed`` lowered alone (not compiled), 0 where it has none."""
    return program_flops(jax.jit(core.jaxpr_as_fun(closed)).lower(
        *[jax.ShapeDtypeStruct(a.shape, a.dtype) for a in closed.in_avals])) or 0.0


def count_correction(jaxpr: core.Jaxpr) -> float:
    """What to add to XLA's count of a program traced to ``jaxpr`` for the FLOPs its steps do, on average:

    * the iterations of each scan that its loop body does not hold (XLA counts a loop's body once; an unrolled
      scan's body holds ``unroll`` of them and its remainder is lowered apart), scans within scans included, each
      body's count from its own program lowered alone. A `while` loop's trip count is not known before it runs:
      its body stays counted once (jaxnat's train steps have none; their loops are scans of a static length);
    * a coin's conditional (`jaxnat.models.coins.coin_cond`; negative): XLA counts a `cond` at its costlier
      branch; a coin's runs its true branch with the coin's probability p, so it costs p · true + (1 − p) · false
      on average. Another `cond` stays at its costlier branch (the loops in it counted as in that branch)."""
    extra = 0.0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "scan":
            body, length = eqn.params["jaxpr"], eqn.params["length"]
            extra += (length - _counted_iterations(length, eqn.params["unroll"])) * _lowered_flops(body)
            extra += length * count_correction(body.jaxpr)
        elif eqn.primitive.name == "cond":
            branches = eqn.params["branches"]  # (false, true) for a boolean predicate
            probability = coin_probability(str(eqn.source_info.name_stack))
            if probability is None or len(branches) != 2:
                extra += max(count_correction(branch.jaxpr) for branch in branches)
            else:
                own = [_lowered_flops(branch) for branch in branches]
                runs = [o + count_correction(b.jaxpr) for o, b in zip(own, branches)]
                extra += (1 - probability) * runs[0] + probability * runs[1] - max(own)
        else:  # a call (jit, remat, custom derivatives) or a while loop: its loops run as often as it does
            extra += sum(count_correction(sub) for sub in core.jaxprs_in_params(eqn.params))
    return extra


def _counted_iterations(length: int, unroll: int) -> int:
    """How many of a scan's ``length`` iterations its lowered program holds, as jax lowers it: a while loop over
    blocks of ``unroll`` iterations and the remainder after it; wholly unrolled for 0, or one block and no rest."""
    blocks, remainder = divmod(length, unroll) if unroll else (0, length)
    if unroll != 1 and blocks == 1 and not remainder:
        return length
    return (unroll if blocks else 0) + remainder


class Utilisation:
    """MFU per log window: `add` each step's batch, `window` at each log point."""

    def __init__(self, num_params: int, dtype: str, peak_tflops: float = 0.0):
        """num_params: the model's parameter count; dtype: the compute dtype the peak is measured in; peak_tflops:
        the device's peak (0: measured here, now: before anything compiles beside it). The steps' FLOPs are
        estimated as 6 · parameters · tokens until `count` gives XLA's."""
        self.num_params = num_params
        self.flops, self.source = None, "6·params·tokens"
        self.peak_source = "configured" if peak_tflops else "measured"
        self.peak = peak_tflops or measure_peak_tflops(dtype)
        self.steps: list[tuple[int, int, int, int]] = []  # (length, real tokens, token slots, target tokens)
        log.info("MFU against a peak of %.3g TFLOP/s (%s)", self.peak, self.peak_source)

    def count(self, flops: Callable[[int], float | None] | None,
              source: str = "XLA's cost analysis, each loop's iterations counted") -> None:
        """flops: batch length -> the train step's FLOPs per device (a process reads its own rows of the global
        batch, whose length is the program's), called at the first window after a step of that length, once its
        program has compiled; None, or a None it returns, where XLA's count is missing (6 · parameters · tokens
        instead); source: where they come from, for the log."""
        self.flops, self.source = flops, source if flops else "6·params·tokens"
        log.info("step FLOPs from %s", self.source)

    def add(self, batch: dict) -> None:
        """batch: a train batch (host arrays) with 'src' and 'tgt' int32[B, L]: its program's FLOPs, less the
        share of padding slots (or the estimate from its real target tokens), count in the window."""
        real = int(np.count_nonzero(batch["src"] != PAD_ID)) + int(np.count_nonzero(batch["tgt"] != PAD_ID))
        tokens = int(np.count_nonzero(batch["tgt"] != PAD_ID))
        self.steps.append((batch["tgt"].shape[1], real, batch["src"].size + batch["tgt"].size, tokens))

    def window(self, seconds: float) -> dict:
        """{'mfu': the steps added since the last call, over ``seconds``, as a fraction of the peak; 'padding': the
        share of their token slots that were padding}; starts the next window."""
        model_flops = 0.0
        for length, real, slots, tokens in self.steps:
            flops = self.flops(length) if self.flops else None
            model_flops += (flops * real / slots if flops
                            else 6.0 * self.num_params * tokens / jax.local_device_count())
        out = {"mfu": model_flops / max(seconds, 1e-9) / (self.peak * 1e12),
               "padding": 1.0 - sum(s[1] for s in self.steps) / max(sum(s[2] for s in self.steps), 1)}
        self.steps.clear()
        return out

    def describe(self, mfu: float) -> str:
        text = f"MFU {100 * mfu:.1f}% of {self.peak:.3g} TFLOP/s ({self.peak_source})"
        if mfu > 1.0:  # a peak measured while something else ran, or configured too low: the figure means nothing
            text += (", above the peak: the measured peak was low (the machine busy at the start); set "
                     "train.peak_tflops" if self.peak_source == "measured" else ", above train.peak_tflops")
        return text
