"""The autoregressive Transformer (Vaswani et al. 2017): baseline, distillation teacher and rescorer.

Training is teacher forcing with a causal decoder: the decoder reads `tgt[:, :-1]` (starting with BOS) and
predicts `tgt[:, 1:]`. Decoding feeds one token at a time with cached keys/values (`init_cache`, `step`);
the search procedures live in `jaxnat/decoding/`.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from jaxnat.models.transformer import Decoder, Embedder, Encoder, TransformerConfig, token_mask
from jaxnat.training.losses import smoothed_cross_entropy


class ARTransformer(nn.Module):
    cfg: TransformerConfig

    def setup(self):
        c = self.cfg
        self.src_embed = Embedder(c, c.src_vocab_size, name="src_embed")
        self.tgt_embed = self.src_embed if c.share_embeddings else Embedder(c, c.tgt_vocab_size, name="tgt_embed")
        self.encoder = Encoder(c, name="encoder")
        self.decoder = Decoder(c, c.dec_layers, causal=True, name="decoder")
        if not c.tie_output:
            self.output = nn.Dense(c.tgt_vocab_size, use_bias=False, kernel_init=c.kernel_init(), name="output")

    def encode(self, src: jnp.ndarray, train: bool = False) -> jnp.ndarray:
        """src: int32[B, S] -> float[B, S, D]."""
        return self.encoder(self.src_embed(src, train), token_mask(src), train)

    def logits(self, h: jnp.ndarray) -> jnp.ndarray:
        """float[..., D] -> float32[..., V]."""
        return self.tgt_embed.attend(h) if self.cfg.tie_output else self.output(h).astype(jnp.float32)

    def __call__(self, src: jnp.ndarray, tgt_in: jnp.ndarray, train: bool = False) -> jnp.ndarray:
        """Teacher forcing. src: int32[B, S]; tgt_in: int32[B, T] -> logits float32[B, T, V]."""
        memory = self.encode(src, train)
        h = self.decoder(self.tgt_embed(tgt_in, train), token_mask(tgt_in), memory, token_mask(src), train)
        return self.logits(h)

    def init_cache(self, memory: jnp.ndarray, max_len: int):
        """memory: float[B, S, D] -> per-layer cache for `step` (self-attention slots for max_len tokens)."""
        return self.decoder.init_cache(memory, max_len)

    def step(self, token: jnp.ndarray, cache, index, src_mask: jnp.ndarray):
        """token: int32[B] at position `index` -> (log-probabilities float32[B, V], new cache)."""
        x = self.tgt_embed(token[:, None], False, offset=index)
        h, cache = self.decoder.step(x, cache, index, src_mask)
        return nn.log_softmax(self.logits(h[:, 0])), cache


def ar_loss(model: ARTransformer, params, batch: dict, rng, label_smoothing: float, train: bool = True):
    """Teacher-forced label-smoothed cross-entropy.

    batch['src']: int32[B, S], batch['tgt']: int32[B, T] ([BOS … EOS], PAD after). Returns
    (loss_sum, {'nll': nll_sum, 'count': target tokens}) so that callers normalise globally.
    """
    tgt = batch["tgt"]
    logits = model.apply(params, batch["src"], tgt[:, :-1], train=train, rngs={"dropout": rng})
    loss, nll, count = smoothed_cross_entropy(logits, tgt[:, 1:], token_mask(tgt[:, 1:]), label_smoothing)
    return loss, {"nll": nll, "count": count}
