"""Batched translation of raw text with any registered model: tokenise, bucket into fixed shapes, run the
model's jit'd `generate`, detokenise, restore the input order.

One compiled program per (bucket shape, beam size); each runs its whole search on the device.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import jax
import numpy as np

from jaxnat.data.batching import bucket_lengths, eval_batches
from jaxnat.data.vocab import BOS_ID, EOS_ID
from jaxnat.decoding.refine import canvas_from_pieces
from jaxnat.errors import DataError

EDIT_COUNTS = ("iterations", "deletions", "insertions", "repositions")


class Canvas(NamedTuple):
    """An initial hypothesis: target piece ids (no BOS/EOS) and per-piece hard-constraint phrase ids."""
    ids: list[int]
    phrase: list[int] | None


class Translator:
    def __init__(self, spec, params, tokenizer, config):
        self.spec, self.params, self.tokenizer, self.config = spec, params, tokenizer, config
        self.max_len = config.data.max_len
        d = config.data
        self.buckets = bucket_lengths(self.max_len, growth=d.bucket_growth, multiple=d.bucket_multiple)
        self._compiled = {}

    def encode(self, texts: list[str]) -> tuple[list[np.ndarray], int]:
        """Source texts -> [BOS … EOS] id arrays (cut to data.max_len) and how many had to be cut."""
        out, cut = [], 0
        for ids in self.tokenizer.encode(texts, "src"):
            if len(ids) + 2 > self.max_len:
                ids, cut = ids[: self.max_len - 2], cut + 1
            out.append(np.asarray([BOS_ID, *ids, EOS_ID], np.int32))
        return out, cut

    def canvases(self, inits: list | None = None, constraints: list | None = None,
                 hard: list | None = None) -> list[Canvas | None]:
        """Per sentence, the initial hypothesis of a refining model (None = start from [BOS, EOS]).

        inits[i]: a target-side text to refine (post-editing), or None. constraints[i]: a list of phrases,
        put in the given order as the initial hypothesis (soft constraints); with hard[i] also protected
        (never deleted, no insertion inside a phrase). A sentence takes an init or constraints, not both.
        """
        n = len(inits if inits is not None else constraints or [])
        inits, constraints, hard = inits or [None] * n, constraints or [None] * n, hard or [False] * n
        if any(x is not None for x in inits + constraints) and not self.spec.refines:
            raise DataError(f"model {self.spec.name!r} does not take initial hypotheses or constraints")
        out = []
        for i, (init, phrases, is_hard) in enumerate(zip(inits, constraints, hard)):
            if init is not None and phrases:
                raise DataError(f"sentence {i + 1}: give either an initial hypothesis or constraints, not both")
            if init is not None:
                out.append(Canvas(self.tokenizer.encode([init], "tgt")[0], None))
            elif phrases:
                pieces = self.tokenizer.encode(list(phrases), "tgt")
                ids = [t for p in pieces for t in p]
                marks = [k + 1 for k, p in enumerate(pieces) for _ in p] if is_hard else None
                out.append(Canvas(ids, marks))
            else:
                out.append(None)
        return out

    def output_capacity(self, src_len: int) -> int:
        """Static output length (BOS and EOS included) for sources padded to src_len."""
        if self.spec.capacity is not None:
            return self.spec.capacity(src_len)
        e = self.config.eval
        return int(min(self.spec.cfg.max_len, int(e.max_len_a * src_len + e.max_len_b) + 2))

    def _generate(self, beam_size: int, max_out: int, with_canvas: bool, trace: bool):
        key = (beam_size, max_out, with_canvas, trace)
        if key not in self._compiled:
            gen = self.spec.generate
            if with_canvas:
                word_start = jax.numpy.asarray(self.tokenizer.word_start_table("tgt"))
                fn = lambda p, s, c, m: gen(p, s, canvas=c, phrase=m, trace=trace, word_start=word_start)  # noqa: E731
            else:
                fn = lambda p, s: gen(p, s, beam_size=beam_size, max_out=max_out)  # noqa: E731
            self._compiled[key] = jax.jit(fn)
        return self._compiled[key]

    def _canvas_batch(self, idx: np.ndarray, canvases: list, capacity: int):
        rows = [canvases[i] if i >= 0 and canvases[i] is not None else Canvas([], None) for i in idx]
        longest = max(len(c.ids) + 2 for c in rows)
        if longest > capacity:  # grow the canvas to fit (post-editing a long hypothesis), up to the model's limit
            capacity = min(-(-longest // 8) * 8, self.spec.cfg.max_len)
            if longest > capacity:
                raise DataError(f"an initial hypothesis or constraint set has {longest} tokens with BOS/EOS, "
                                f"more than the model's maximum length {self.spec.cfg.max_len}")
        return canvas_from_pieces([c.ids for c in rows], [c.phrase or [0] * len(c.ids) for c in rows], capacity)

    def translate_ids(self, src: list[np.ndarray], beam_size: int, batch_size: int,
                      canvases: list | None = None, trace: bool = False) -> list[dict]:
        """[BOS … EOS] source arrays -> per sentence {'tokens': np.int32 array, 'score': float, ...} in input
        order (refining models add iterations and edit counts, and with ``trace`` the edit trace)."""
        results: list[dict | None] = [None] * len(src)
        with_canvas = self.spec.refines and (trace or (canvases is not None and any(c is not None for c in canvases)))
        for idx, batch in eval_batches(src, None, batch_size, self.buckets):
            capacity = self.output_capacity(batch["src"].shape[1])
            if with_canvas:
                tokens, phrase = self._canvas_batch(idx, canvases or [None] * len(src), capacity)
                fn = self._generate(beam_size, tokens.shape[1], True, trace)
                out = jax.device_get(fn(self.params, batch["src"], tokens, phrase))
            else:
                out = jax.device_get(self._generate(beam_size, capacity, False, False)(self.params, batch["src"]))
            for row, i in enumerate(idx):
                if i >= 0:
                    results[i] = {k: v[row] for k, v in out.items()}
        return results

    def translate(self, texts: list[str], beam_size: int, batch_size: int, inits: list | None = None,
                  constraints: list | None = None, hard: list | None = None) -> list[dict]:
        """Texts -> [{'hyp': str, 'score': float, ...}] in input order; refining models also report
        'iterations' and their edit counts ('deletions', 'insertions', ...)."""
        src, _ = self.encode(texts)
        canvases = self.canvases(inits, constraints, hard) if (inits or constraints) else None
        outs = self.translate_ids(src, beam_size, batch_size, canvases)
        results = []
        for o in outs:
            r = {"hyp": self.tokenizer.decode(list(o["tokens"]), "tgt"), "score": float(o["score"])}
            r.update({k: int(v) for k, v in o.items() if k in EDIT_COUNTS})
            results.append(r)
        return results

    def latency(self, texts: list[str], beam_size: int, constraints: list | None = None,
                hard: list | None = None) -> float:
        """ms per sentence at batch 1 (with the given constraints, if any), after a warm-up pass that compiles
        every shape: model loading and compilation are excluded."""
        src, _ = self.encode(texts)
        canvases = self.canvases(None, constraints, hard) if constraints else None
        self.translate_ids(src, beam_size, 1, canvases)
        t0 = time.perf_counter()
        self.translate_ids(src, beam_size, 1, canvases)
        return (time.perf_counter() - t0) / max(len(src), 1) * 1000.0

    def speed(self, texts: list[str], beam_size: int, latency_sentences: int, batch_size: int) -> dict:
        """Latency (ms/sentence at batch 1, over the first sentences) and throughput (sentences/s at
        batch_size, over all), both after a warm-up pass (compilation excluded)."""
        latency = self.latency(texts[:latency_sentences], beam_size)
        src, _ = self.encode(texts)
        self.translate_ids(src, beam_size, batch_size)
        t0 = time.perf_counter()
        self.translate_ids(src, beam_size, batch_size)
        throughput = len(src) / (time.perf_counter() - t0)
        return {"latency_ms": latency, "sentences_per_s": throughput}
