"""Batched translation of raw text with any registered model: tokenise, bucket into fixed shapes, run the
model's jit'd `generate`, detokenise, restore the input order.

One compiled program per (bucket shape, beam size); each runs its whole search on the device.
"""

from __future__ import annotations

import time

import jax
import numpy as np

from jaxnat.data.batching import bucket_lengths, eval_batches
from jaxnat.data.vocab import BOS_ID, EOS_ID


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

    def output_capacity(self, src_len: int) -> int:
        """Static output length (BOS and EOS included) for sources padded to src_len."""
        e = self.config.eval
        return int(min(self.spec.cfg.max_len, int(e.max_len_a * src_len + e.max_len_b) + 2))

    def _generate(self, beam_size: int, max_out: int):
        key = (beam_size, max_out)
        if key not in self._compiled:
            gen = self.spec.generate
            self._compiled[key] = jax.jit(lambda p, s: gen(p, s, beam_size=beam_size, max_out=max_out))
        return self._compiled[key]

    def translate_ids(self, src: list[np.ndarray], beam_size: int, batch_size: int) -> list[dict]:
        """[BOS … EOS] source arrays -> per sentence {'tokens': np.int32 array, 'score': float}, in input order."""
        results: list[dict | None] = [None] * len(src)
        for idx, batch in eval_batches(src, None, batch_size, self.buckets):
            fn = self._generate(beam_size, self.output_capacity(batch["src"].shape[1]))
            out = jax.device_get(fn(self.params, batch["src"]))
            for row, i in enumerate(idx):
                if i >= 0:
                    results[i] = {k: v[row] for k, v in out.items()}
        return results

    def translate(self, texts: list[str], beam_size: int, batch_size: int) -> list[dict]:
        """Texts -> [{'hyp': str, 'score': float, ...}] in input order."""
        src, _ = self.encode(texts)
        outs = self.translate_ids(src, beam_size, batch_size)
        return [
            {"hyp": self.tokenizer.decode(list(o["tokens"]), "tgt"), "score": float(o["score"])}
            for o in outs
        ]

    def speed(self, texts: list[str], beam_size: int, latency_sentences: int, batch_size: int) -> dict:
        """Latency (ms/sentence at batch 1, over the first sentences) and throughput (sentences/s at
        batch_size, over all), after a warm-up pass that compiles every shape: model loading and compilation
        are excluded."""
        src, _ = self.encode(texts)
        first = src[:latency_sentences]
        self.translate_ids(first, beam_size, 1)  # compile batch-1 shapes
        t0 = time.perf_counter()
        self.translate_ids(first, beam_size, 1)
        latency = (time.perf_counter() - t0) / max(len(first), 1) * 1000.0
        self.translate_ids(src, beam_size, batch_size)
        t0 = time.perf_counter()
        self.translate_ids(src, beam_size, batch_size)
        throughput = len(src) / (time.perf_counter() - t0)
        return {"latency_ms": latency, "sentences_per_s": throughput}
