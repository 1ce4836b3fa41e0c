"""Levenshtein Transformer (Gu, Wang and Zhao, 2019): a bidirectional decoder with three policies.

One decoding iteration edits the current hypothesis ``y`` in three parallel steps, each read off its own head
on the shared decoder (reference-semantics §4–5):

1. **delete** — ``π_del(d_i | i, y)``: a two-class classifier on every token;
2. **insert placeholders** — ``π_plh(p_i | i, y)``: for every pair of adjacent tokens, how many (0 … 255)
   placeholders to open between them, read from the concatenation of the two tokens' features;
3. **fill** — ``π_tok(t_i | i, y)``: the tied output projection at every placeholder.

Options from the paper: *early exit* (each head reads the output of its own number of decoder layers, and
the layers above are not computed), and separate layer stacks for the deletion and/or placeholder heads
(the weight-sharing variants of its Table 2a). The training objective (dual-policy imitation learning with
the ed2 oracle, `levt_loss`) sits below the module; the refinement loop is `jaxnat.decoding.refine`.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxnat.data.vocab import BOS_ID, EOS_ID, MASK_ID, PAD_ID, PLH_ID
from jaxnat.models.transformer import Decoder, Embedder, Encoder, TransformerConfig, token_mask
from jaxnat.oracle import MAX_INSERTIONS, ed2_labels, random_delete
from jaxnat.training.losses import smoothed_cross_entropy

NOT_PREDICTED = (PAD_ID, BOS_ID, EOS_ID, PLH_ID, MASK_ID)  # ids the token head may never write


def forbid_reserved(logits: jax.Array) -> jax.Array:
    """float32[..., V] → the same with PAD/BOS/EOS/PLH/MASK at -inf: a filled slot always holds a real token
    (a PAD or EOS in the middle of a row would break every fixed-shape edit op). A broadcast add of a [V]
    mask rather than a scatter into the logits, so XLA fuses it into whatever reads them next."""
    mask = jnp.zeros(logits.shape[-1], logits.dtype).at[jnp.asarray(NOT_PREDICTED)].set(-jnp.inf)
    return logits + mask


class LevenshteinTransformer(nn.Module):
    """Encoder + bidirectional decoder with deletion, placeholder and token heads.

    exits: (deletion, placeholder, token) — how many decoder layers each head reads.
    """

    cfg: TransformerConfig
    exits: tuple[int, int, int]
    separate_deletion: bool = False
    separate_placeholder: bool = False

    def setup(self):
        c = self.cfg
        self.src_embed = Embedder(c, c.src_vocab_size, name="src_embed")
        self.tgt_embed = self.src_embed if c.share_embeddings else Embedder(c, c.tgt_vocab_size, name="tgt_embed")
        self.encoder = Encoder(c, name="encoder")
        self.decoder = Decoder(c, c.dec_layers, causal=False, name="decoder")
        self.deletion_decoder = (Decoder(c, self.exits[0], causal=False, name="deletion_decoder")
                                 if self.separate_deletion else self.decoder)
        self.placeholder_decoder = (Decoder(c, self.exits[1], causal=False, name="placeholder_decoder")
                                    if self.separate_placeholder else self.decoder)
        dense = lambda n, name: nn.Dense(n, use_bias=False, kernel_init=c.kernel_init(), name=name)  # noqa: E731
        self.deletion_head = dense(2, "deletion_head")
        self.placeholder_head = dense(MAX_INSERTIONS + 1, "placeholder_head")
        if not c.tie_output:
            self.output = dense(c.tgt_vocab_size, "output")

    def encode(self, src: jax.Array, train: bool = False) -> jax.Array:
        """src: int32[B, S] → memory float[B, S, D]."""
        return self.encoder(self.src_embed(src, train), token_mask(src), train)

    def _features(self, decoder, layers, tokens, memory, src_mask, train):
        """tokens: int32[B, L] → float[B, L, D], the output of the first ``layers`` layers of ``decoder``."""
        x = self.tgt_embed(tokens, train)
        return decoder(x, token_mask(tokens), memory, src_mask, train, num_layers=layers)

    def deletion_logits(self, tokens, memory, src_mask, train: bool = False) -> jax.Array:
        """tokens: int32[B, L] → float32[B, L, 2] (class 1 = delete)."""
        h = self._features(self.deletion_decoder, self.exits[0], tokens, memory, src_mask, train)
        return self.deletion_head(h).astype(jnp.float32)

    def placeholder_logits(self, tokens, memory, src_mask, train: bool = False) -> jax.Array:
        """tokens: int32[B, L] → float32[B, L-1, 256]: slot k (between tokens k and k+1) reads both tokens."""
        h = self._features(self.placeholder_decoder, self.exits[1], tokens, memory, src_mask, train)
        pairs = jnp.concatenate([h[:, :-1], h[:, 1:]], axis=-1)
        return self.placeholder_head(pairs).astype(jnp.float32)

    def token_logits(self, tokens, memory, src_mask, train: bool = False) -> jax.Array:
        """tokens: int32[B, L] (placeholders to fill) → float32[B, L, V]."""
        h = self._features(self.decoder, self.exits[2], tokens, memory, src_mask, train)
        return self.tgt_embed.attend(h) if self.cfg.tie_output else self.output(h).astype(jnp.float32)

    def __call__(self, src, tokens, train: bool = False):
        """All three heads on one hypothesis (used to initialise every parameter)."""
        memory, src_mask = self.encode(src, train), token_mask(src)
        return (self.deletion_logits(tokens, memory, src_mask, train),
                self.placeholder_logits(tokens, memory, src_mask, train),
                self.token_logits(tokens, memory, src_mask, train))


def empty_canvas(like: jax.Array) -> jax.Array:
    """int32[B, L] rows ``[BOS, EOS, PAD …]`` (the initial hypothesis of plain translation)."""
    row = jnp.zeros(like.shape[1:], like.dtype).at[0].set(BOS_ID).at[1].set(EOS_ID)
    return jnp.broadcast_to(row, like.shape)


def levt_loss(model: LevenshteinTransformer, params, batch: dict, rng, *, label_smoothing: float,
              placeholder_smoothing: float = 0.01, alpha: float = 0.0, beta: float = 0.0, train: bool = True):
    """Dual-policy imitation learning with the ed2 oracle, computed on device.

    Roll-in as the reference code does it (α = β = 0): the placeholder head sees ``random_delete(y*)``, the
    token head the reference with the oracle's placeholders, the deletion head the model's own argmax fills
    (gold tokens elsewhere). With α/β > 0, the paper's Algorithm 1 mixtures: per sentence, with probability β
    the insertion heads see the initial sequence ``[BOS, EOS]`` instead, and with probability α so does the
    deletion head.

    Loss = placeholder CE (smoothing 0.01) + token CE (smoothing ε) + deletion CE (none), each the mean over its
    own positions. batch['src']: int32[B, S], batch['tgt']: int32[B, T]. Returns
    ``(loss · n, {'nll': token nll · n, 'count': n, ...})`` with n the target's real tokens, so that the
    trainer's ``loss_sum / count`` is the loss.
    """
    src, tgt = batch["src"], batch["tgt"]
    k_noise, k_mix, k_enc, k_plh, k_tok, k_del = jax.random.split(rng, 6)

    def apply(method, *args, key):
        return model.apply(params, *args, train=train, method=method, rngs={"dropout": key})

    memory, src_mask = apply(model.encode, src, key=k_enc), token_mask(src)
    start = empty_canvas(tgt)
    use_start_ins, use_start_del = (jax.random.uniform(k_mix, (2, tgt.shape[0])) < jnp.array([[beta], [alpha]]))

    # Learning to insert: placeholders on a random subsequence of y*, then tokens into the oracle's placeholders.
    y_ins = jnp.where(use_start_ins[:, None], start, random_delete(k_noise, tgt))
    ins = ed2_labels(y_ins, tgt)
    plh_logits = apply(model.placeholder_logits, y_ins, memory, src_mask, key=k_plh)
    slots = jnp.arange(tgt.shape[1] - 1)[None, :] < jnp.sum(token_mask(y_ins), axis=1, keepdims=True) - 1
    plh_loss, _, plh_count = smoothed_cross_entropy(plh_logits, ins.insertion, slots, placeholder_smoothing)
    masked_tgt = jnp.where(ins.insert_mask, PLH_ID, tgt)
    tok_logits = apply(model.token_logits, masked_tgt, memory, src_mask, key=k_tok)
    tok_loss, tok_nll, tok_count = smoothed_cross_entropy(tok_logits, tgt, ins.insert_mask, label_smoothing)

    # Learning to delete: the model's own fills (no gradient through the argmax), gold tokens elsewhere.
    fills = jnp.argmax(forbid_reserved(jax.lax.stop_gradient(tok_logits)), axis=-1).astype(tgt.dtype)
    y_del = jnp.where(use_start_del[:, None], start, jnp.where(ins.insert_mask, fills, tgt))
    dels = ed2_labels(y_del, tgt)
    del_logits = apply(model.deletion_logits, y_del, memory, src_mask, key=k_del)
    del_loss, _, del_count = smoothed_cross_entropy(del_logits, dels.deletion, token_mask(y_del), 0.0)

    mean = lambda total, count: total / jnp.maximum(count, 1.0)  # noqa: E731
    loss = mean(plh_loss, plh_count) + mean(tok_loss, tok_count) + mean(del_loss, del_count)
    n = jnp.sum(token_mask(tgt), dtype=jnp.float32)
    return loss * n, {"nll": mean(tok_nll, tok_count) * n, "count": n,
                      "placeholder_loss": mean(plh_loss, plh_count), "deletion_loss": mean(del_loss, del_count)}
