"""The train step's programs, one per batch shape, compiled in background threads while training starts.

A run with several batch shapes (LevT, EDITOR, CTC and DA-Transformer train on fitted buckets) compiles one program
per shape. Only the shape of the run's first batch is traced, lowered and compiled before the first step, alone:
tracing the other shapes beside it would take a core from XLA's compile (with eight LevT shapes that doubled the
time to the first step). The others are traced and compiled in pool threads once the first step has run (`release`),
while training goes on (XLA compiles outside Python's GIL); started beside the first step, their tracing and
compiling took the cores from its first run. The first step waits for its own program only; a later step whose
program is still coming waits for it. A run's time to its first step is then one tracing, one compile and one step,
not all of them; the log windows until the last program is in run beside the compiling and say so.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterable

import jax
from tqdm import tqdm

from jaxnat.training.flops import count_correction, program_flops

log = logging.getLogger("jaxnat")


class TrainPrograms:
    """{batch shape: compiled train step}, compiling in the background: ``programs[shape]`` waits for its program.

    trace: shape -> the step traced for it (`jax.stages.Traced`), called in this thread for the first shape and in
    the pool's threads for the others; shapes: every batch shape, the first batch's first; workers: how many compile
    at once after the first (the machine's cores by default: one XLA compile keeps about one busy).
    """

    def __init__(self, trace: Callable, shapes: Iterable[tuple[int, int]], workers: int | None = None):
        shapes = list(shapes)
        self._begin = time.perf_counter()
        self._lock = threading.Lock()
        self._left = len(shapes)
        self.finished_at: float | None = None  # time.perf_counter() when the last program was in
        self._bar = tqdm(total=len(shapes), desc="compile", disable=None)
        self._pool = ThreadPoolExecutor(max(1, min(len(shapes), workers or os.cpu_count() or 1)),
                                        thread_name_prefix="compile")
        self._futures: dict[tuple[int, int], Future] = {}
        self._trace = trace
        self._jaxprs = {}  # {length: the step's jaxpr}, for its loops' FLOPs
        self._released = threading.Event()  # set once the first step has run: the others may compile
        self._closed = False
        self._first = shapes[0]
        first = self._pool.submit(self._compile, shapes[0], trace(shapes[0]))
        self._futures[shapes[0]] = first
        for shape in shapes[1:]:
            self._futures[shape] = self._pool.submit(self._compile, shape, after=first)
        self._flops: dict[int, float | None] = {}

    def release(self) -> None:
        """The first step has run: the other shapes' programs start compiling (a step that asks for one of them
        releases them too)."""
        self._released.set()

    def _compile(self, shape: tuple[int, int], traced=None, after: Future | None = None):
        if after is not None:  # the first program and the first step run alone: the first step waits for them
            after.exception()
            self._released.wait()
            if self._closed:
                return None
        if traced is None:
            traced = self._trace(shape)
        self._jaxprs[shape[1]] = traced.jaxpr.jaxpr
        program = traced.lower().compile()
        with self._lock:
            self._left -= 1
            self._bar.update()
            if not self._left:
                self.finished_at = time.perf_counter()
                self._bar.close()
                log.info("compiled the train step for %d batch shapes in %.1f s", len(self._futures),
                         time.perf_counter() - self._begin)
        return program

    @property
    def shapes(self) -> list[tuple[int, int]]:
        return list(self._futures)

    def compiled_before(self, t: float) -> bool:
        """Whether every program was in before time.perf_counter() ``t`` (a log window from ``t`` on ran beside
        no compiling and waited for none: its speed is the steady state's)."""
        return self.finished_at is not None and self.finished_at <= t

    def __getitem__(self, shape: tuple[int, int]):
        """The compiled step for ``shape``, once compiled (an error of its compiling is raised here)."""
        if shape != self._first:
            self.release()
        return self._futures[shape].result()

    def flops(self, length: int) -> float | None:
        """The FLOPs per device of the program for batches ``length`` long (each shape has its own length), waiting
        for its compile: XLA's count (`program_flops`) corrected for its loops and coins (`count_correction`)."""
        if length not in self._flops:
            flops = program_flops(self[next(s for s in self._futures if s[1] == length)])
            self._flops[length] = flops and flops + count_correction(self._jaxprs[length]) / jax.device_count()
        return self._flops[length]

    def close(self) -> None:
        """Drops what has not started compiling; a compile under way finishes in its thread."""
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.release()  # a thread still waiting to start returns at once
        self._bar.close()
