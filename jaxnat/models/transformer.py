"""Transformer layers shared by every jaxnat model (Vaswani et al. 2017; fairseq's conventions).

Everything here is a Flax Linen module whose parameters are a plain pytree, so training steps, sharding
rules and checkpoints deal only with dicts of arrays. The autoregressive model (`ar.py`) and the
non-autoregressive ones reuse `Embedder`, `Encoder` and `Decoder`; a decoder is causal or bidirectional by a
flag, and can hand back the hidden states of every layer (early exit in LevT/EDITOR).

Shapes: `B` batch, `S` source length, `T` target length, `D` model width, `H` heads, `K = D // H`.
Masks are boolean, True where a position holds a real token.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxnat.data.vocab import BOS_ID, MASK_ID, PAD_ID, PLH_ID, UNK_ID
from jaxnat.errors import ConfigError
from jaxnat.models.dropout import Dropout
from jaxnat.models.packing import is_segments, segment_positions, segment_starts


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Static hyper-parameters of an encoder-decoder (hashable, so it can live inside jit'd closures)."""

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 512
    ffn_dim: int = 2048
    num_heads: int = 8
    enc_layers: int = 6
    dec_layers: int = 6
    dropout: float = 0.1
    embed_dropout: float = -1.0  # on the embedded inputs (tokens + positions); -1: the same as dropout
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    pre_norm: bool = False
    positions: str = "sinusoidal"  # or "learned"
    max_len: int = 256
    share_embeddings: bool = True  # one matrix for source and target tokens (needs a joint vocabulary)
    tie_output: bool = True  # output projection = target embedding matrix, transposed
    bert_init: bool = False  # N(0, 0.02) for every weight, as in the LevT/EDITOR recipes
    scale_embeddings: bool = True  # token embeddings × √D in the input (fairseq; off: --no-scale-embedding)
    separate_positions: bool = False  # with share_embeddings: the decoder's own position table (fairseq's)
    dtype: str = "float32"  # compute dtype; parameters stay float32
    # the encoder and decoder layer stacks as one nn.scan each (one traced layer body, parameters stacked along a
    # leading layer axis: `stack_layers`): compile time that does not grow with depth
    scan_layers: bool = False
    # conventions of models trained elsewhere (jaxnat.importers; docs/import.md): each default is jaxnat's own
    ln_eps: float = 1e-6  # layer norms' epsilon (flax's 1e-6; fairseq and Marian 1e-5)
    activation: str = "relu"  # of the feed-forward sublayers: relu, gelu (erf), gelu_tanh, swish
    decoder_norm: str = ""  # the decoder's residual layout: "" as pre_norm, or "pre" / "post" (fairseq's per stack)
    decoder_final_norm: bool = True  # a pre-norm decoder's last layer norm (fairseq's --no-decoder-final-norm: off)
    layernorm_embedding: bool = False  # a layer norm over each stack's embedded inputs, before dropout (fairseq)
    position_offset: int = 0  # sinusoidal positions start at this row (fairseq: padding_idx + 1 = 2)
    position_layout: str = "fairseq"  # sinusoidal table: fairseq's frequencies, or "marian" (Hugging Face Marian's)
    output_bias: bool = False  # a bias over the output vocabulary (Marian's final_logits_bias)
    decoder_start: str = "bos"  # the token an AR decoder starts from: bos, eos (fairseq) or pad (Marian)
    source_bos: bool = True  # sources begin with BOS (fairseq's translation task and Marian: none)
    # reserved tokens the model has no output row for (an imported vocabulary): their logits are held far below
    # every other (`absent_logits`), so that the softmax is the original model's over its own rows
    absent_tokens: tuple = ()
    # reserved tokens read as <unk> (its row): fairseq's NAT models mask and place with <unk>, so that fine-tuning
    # an import trains the one row they have for the three (and its export writes it back)
    unk_inputs: tuple = ()
    # which cross-attention an AR model's word alignments read (`ARTransformer.cross_attention`): a decoder layer
    # (-1: the last), its first heads (0: all), a pass without the causal mask (full context)
    alignment_layer: int = -1
    alignment_heads: int = 0
    full_context_alignment: bool = False
    # what a left-to-right decoder's layers read of the tokens before: "self_attention", "ssru" (`SSRU`) or "aan"
    # (`AverageAttention`)
    decoder_autoreg: str = "self_attention"

    @property
    def decoder_pre_norm(self) -> bool:
        return self.pre_norm if not self.decoder_norm else self.decoder_norm == "pre"

    @property
    def compute_dtype(self):
        return jnp.dtype(self.dtype)

    def kernel_init(self):
        if self.bert_init:
            return nn.initializers.normal(0.02)
        return nn.initializers.xavier_uniform()

    def embed_init(self):
        if self.bert_init:
            return nn.initializers.normal(0.02)
        return nn.initializers.normal(self.d_model**-0.5)


def sinusoidal_positions(length: int, dim: int, offset: int = 0, layout: str = "fairseq") -> jnp.ndarray:
    """float32[length, dim], the codes of positions offset .. offset + length - 1: sines in the first half,
    cosines in the second. Frequencies 10000^(-i / (dim/2 - 1)) (fairseq's, layout "fairseq") or
    10000^(-2i / dim) (Hugging Face's Marian, "marian"), i < dim/2.

    Computed with numpy, in float32: a constant of the program that uses it. Computed in the program, XLA left the
    table inside decoding loops, its sines and cosines recomputed at every pass (7% of a mask-predict pass)."""
    half = dim // 2
    step = math.log(10000.0) / (max(half - 1, 1) if layout == "fairseq" else half)
    freq = np.exp(np.arange(half, dtype=np.float32) * np.float32(-step))
    angles = np.arange(offset, offset + length, dtype=np.float32)[:, None] * freq[None, :]
    table = np.concatenate([np.sin(angles), np.cos(angles)], axis=1)
    if dim % 2:
        table = np.pad(table, ((0, 0), (0, 1)))
    return jnp.asarray(table, jnp.float32)


def attention_bias(key_mask: jnp.ndarray, causal: bool = False, query_mask: jnp.ndarray | None = None) -> jnp.ndarray:
    """Additive float32[B, 1, Q|1, K] bias: 0 where a query may attend to a key, a large negative number elsewhere.

    key_mask: bool[B, K], True at real keys; padded queries are not masked (their outputs are ignored
    downstream). Or, for a packed batch (`jaxnat.models.packing`), int32[B, K] segment ids: then a query attends
    only to the keys of its own segment, the queries' segment ids being ``query_mask`` int32[B, Q] (default: the
    keys', for self-attention). causal adds the lower-triangular constraint (then Q == K).
    """
    if is_segments(key_mask):
        queries = key_mask if query_mask is None else query_mask
        allowed = (key_mask[:, None, None, :] > 0) & (queries[:, None, :, None] == key_mask[:, None, None, :])
    else:
        allowed = key_mask[:, None, None, :]
    if causal:
        q = key_mask.shape[1]
        allowed = allowed & jnp.tril(jnp.ones((q, q), dtype=bool))[None, None]
    return jnp.where(allowed, 0.0, -1e9).astype(jnp.float32)


def flat_leading(layer, x: jnp.ndarray, keep: int = 1) -> jnp.ndarray:
    """``layer(x)`` with x's leading axes (all but the last ``keep``) flattened into one and restored after.

    The same function, but on XLA's CPU backend a dense layer over [B, T, D] differentiates with explicit
    transposes of its activations that one over [B·T, D] does not need (docs/benchmarks.md, "Dense layers on
    rows")."""
    lead = x.shape[: x.ndim - keep]
    y = layer(x.reshape((-1,) + x.shape[x.ndim - keep:]))
    return y.reshape(lead + y.shape[1:])


def rows_dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
    """``lax.dot_general`` for a dense layer (the `dot_general` of its flax module): lhs float[N, ...] rows, rhs
    the kernel, lhs's trailing axes contracted with rhs's leading ones, no batch axes. On the CPU the product goes
    through `rows_matmul`; anything else, or on another backend, is plain ``lax.dot_general``."""
    (lhs_c, rhs_c), batch = dimension_numbers
    n = len(lhs_c)
    layer_like = (not any(batch) and tuple(lhs_c) == tuple(range(lhs.ndim - n, lhs.ndim))
                  and tuple(rhs_c) == tuple(range(n)) and preferred_element_type is None)
    if not layer_like or jax.default_backend() != "cpu":
        return jax.lax.dot_general(lhs, rhs, dimension_numbers, precision=precision,
                                   preferred_element_type=preferred_element_type)
    inner = math.prod(rhs.shape[:n])
    out = rows_matmul(lhs.reshape(-1, inner), rhs.reshape(inner, -1))
    return out.reshape(lhs.shape[:lhs.ndim - n] + rhs.shape[n:])


def rows_dense(features: int, **kwargs) -> nn.Dense:
    """``nn.Dense(features, **kwargs)`` whose product is `rows_dot_general`'s: the same layer and parameters, its
    weight gradient on the CPU a YNNPACK product (XLA's generic kernel took 2x as long for an adapter's)."""
    return nn.Dense(features, dot_general=rows_dot_general, **kwargs)


@jax.custom_vjp
def rows_matmul(x: jnp.ndarray, w: jnp.ndarray) -> jnp.ndarray:
    """x: float[N, C] @ w: float[C, F] -> float[N, F], whose weight gradient is a product XLA's CPU backend hands to
    its fast matrix kernels (YNNPACK). Autodiff writes x^T g as a product contracting both operands' first axes,
    which that backend gives to a slower generic kernel; here the narrower of x and g is transposed first and
    the product is canonical: x^T g, or (g^T x)^T when g is the narrower (its transpose of C·F values is cheap).
    Optimisation barriers keep XLA from folding those transposes back into the product (docs/benchmarks.md,
    "Where a train step's time goes")."""
    return x @ w


def _rows_matmul_fwd(x, w):
    return x @ w, (x, w)


def _rows_matmul_bwd(residuals, g):
    x, w = residuals
    barrier = jax.lax.optimization_barrier
    if x.shape[1] <= g.shape[1]:
        dw = barrier(barrier(x.T) @ g)
    else:
        dw = barrier(barrier(g.T) @ x).T
    return (g @ w.T).astype(x.dtype), dw.astype(w.dtype)


rows_matmul.defvjp(_rows_matmul_fwd, _rows_matmul_bwd)


def einsum_f32(spec: str, a: jnp.ndarray, b: jnp.ndarray) -> jnp.ndarray:
    """``jnp.einsum(spec, a, b)`` as float32, the products in the operands' dtype: under mixed precision
    (bfloat16 operands) a bfloat16 matrix multiplication whose sums are accumulated and returned in float32, not
    rounded to bfloat16, and whose backward pass multiplies in bfloat16 too (the cotangent cast down), where
    autodiff of the float32-output product would multiply in float32. Attention logits and output logits, which
    a softmax reads, come from here. float32 operands: exactly ``jnp.einsum``."""
    if a.dtype == jnp.float32 and b.dtype == jnp.float32:
        return jnp.einsum(spec, a, b)
    return _einsum_f32(spec, a, b)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _einsum_f32(spec, a, b):
    return jnp.einsum(spec, a, b, preferred_element_type=jnp.float32)


def _einsum_f32_fwd(spec, a, b):
    return _einsum_f32(spec, a, b), (a, b)


def _einsum_f32_bwd(spec, operands, g):
    a, b = operands
    _, vjp = jax.vjp(lambda a, b: jnp.einsum(spec, a, b), a, b)
    return vjp(g.astype(jnp.result_type(a, b)))


_einsum_f32.defvjp(_einsum_f32_fwd, _einsum_f32_bwd)


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention with separate q/k/v/out projections.

    `project_kv` and `attend` are exposed separately so that decoders can cache keys and values.
    """

    cfg: TransformerConfig

    def setup(self):
        c = self.cfg
        dense = lambda name: nn.DenseGeneral(  # noqa: E731
            (c.num_heads, c.d_model // c.num_heads), kernel_init=c.kernel_init(), dtype=c.compute_dtype, name=name,
            dot_general=rows_dot_general)
        self.query, self.key, self.value = dense("query"), dense("key"), dense("value")
        self.out = nn.DenseGeneral(c.d_model, axis=(-2, -1), kernel_init=c.kernel_init(), dtype=c.compute_dtype,
                                   name="out", dot_general=rows_dot_general)
        self.attn_dropout = Dropout(c.attention_dropout)

    def project_kv(self, x: jnp.ndarray, prefix=None) -> tuple[jnp.ndarray, jnp.ndarray]:
        """x: float[B, L, D] -> keys, values: float[B, L, H, K]. With ``prefix`` = (key inputs, value inputs),
        each float[B, C, D], C extra entries come first — the key inputs through the key projection, the
        value inputs through the value projection (vectorized constraints) — and the result is [B, C + L, H, K].
        A prefix already split into heads, float[B, C, H, K], is taken as keys and values as it is."""
        k, v = flat_leading(self.key, x), flat_leading(self.value, x)
        if prefix is not None:
            project = lambda layer, p: p if p.ndim == 4 else flat_leading(layer, p)  # noqa: E731
            k = jnp.concatenate([project(self.key, prefix[0]).astype(k.dtype), k], axis=1)
            v = jnp.concatenate([project(self.value, prefix[1]).astype(v.dtype), v], axis=1)
        return k, v

    def attend(self, x: jnp.ndarray, k: jnp.ndarray, v: jnp.ndarray, bias: jnp.ndarray, train: bool,
               return_weights: bool = False, heads_first: bool = False):
        """x: float[B, Q, D] queries; k, v: float[B, L, H, K] (``heads_first``: float[B, H, L, K], the layout the
        products read, as cached decoding keeps them); bias: float32[B, 1|H, Q, L] -> float[B, Q, D], and with
        ``return_weights`` also the attention weights float32[B, H, Q, L] (before dropout)."""
        kv = "bhlk" if heads_first else "blhk"
        q = flat_leading(self.query, x)
        q = q * (q.shape[-1] ** -0.5)
        logits = einsum_f32(f"bqhk,{kv}->bhql", q, k) + bias
        probs = jax.nn.softmax(logits, axis=-1)
        weights = self.attn_dropout(probs.astype(v.dtype), deterministic=not train)
        out = flat_leading(self.out, jnp.einsum(f"bhql,{kv}->bqhk", weights, v), keep=2)
        return (out, probs) if return_weights else out

    def __call__(self, x, memory, bias, train: bool, prefix=None):
        k, v = self.project_kv(memory, prefix)
        return self.attend(x, k, v, bias, train)


ACTIVATIONS = {"relu": nn.relu, "gelu": functools.partial(nn.gelu, approximate=False),
               "gelu_tanh": functools.partial(nn.gelu, approximate=True), "swish": nn.swish}


class FeedForward(nn.Module):
    cfg: TransformerConfig

    @nn.compact
    def __call__(self, x, train: bool):
        c = self.cfg
        fc1 = nn.Dense(c.ffn_dim, kernel_init=c.kernel_init(), dtype=c.compute_dtype, name="fc1",
                       dot_general=rows_dot_general)
        fc2 = nn.Dense(c.d_model, kernel_init=c.kernel_init(), dtype=c.compute_dtype, name="fc2",
                       dot_general=rows_dot_general)
        h = ACTIVATIONS[c.activation](flat_leading(fc1, x))
        return flat_leading(fc2, Dropout(c.activation_dropout)(h, deterministic=not train))


def layer_norm(cfg: TransformerConfig, name: str | None = None) -> nn.LayerNorm:
    return nn.LayerNorm(epsilon=cfg.ln_eps, dtype=cfg.compute_dtype, name=name)


class Residual(nn.Module):
    """`x + dropout(f(norm(x)))` (pre-norm) or `norm(x + dropout(f(x)))` (post-norm), around one sublayer."""

    cfg: TransformerConfig
    pre_norm: bool | None = None  # None: cfg.pre_norm (a decoder's layers pass cfg.decoder_pre_norm)

    def setup(self):
        self.norm = layer_norm(self.cfg)
        self.drop = Dropout(self.cfg.dropout)

    def __call__(self, x, sublayer, train: bool):
        if self.cfg.pre_norm if self.pre_norm is None else self.pre_norm:
            return x + self.drop(sublayer(self.norm(x)), deterministic=not train)
        return self.norm(x + self.drop(sublayer(x), deterministic=not train))


class EncoderLayer(nn.Module):
    cfg: TransformerConfig

    def setup(self):
        self.self_attn = MultiHeadAttention(self.cfg)
        self.ffn = FeedForward(self.cfg)
        self.res_attn, self.res_ffn = Residual(self.cfg), Residual(self.cfg)

    def __call__(self, x, bias, train: bool, prefix=None):
        """prefix: (key inputs, value inputs) float[B, C, D] of C extra self-attention entries (bias covers C + S)."""
        x = self.res_attn(x, lambda h: self.self_attn(h, h, bias, train, prefix), train)
        return self.res_ffn(x, lambda h: self.ffn(h, train), train)


def reset_scan(a, b):
    """The linear recurrence s_t = a_t s_{t−1} + b_t (s_{−1} = 0) at every position t of axis 1, as an associative
    scan (O(log T) steps deep, not T): a, b float32[B, T, D] (a = 0 where a sequence starts: the sum restarts)."""
    def combine(first, then):  # s = a s' + b, composed: the later (a2, b2) after the earlier (a1, b1)
        return first[0] * then[0], then[0] * first[1] + then[1]

    return jax.lax.associative_scan(combine, (a, b), axis=1)[1]


class SSRU(nn.Module):
    """The Simpler Simple Recurrent Unit (Kim et al. 2019) as Marian computes it in a decoder layer's place of
    self-attention (`transformer-decoder-autoreg: rnn`, `dec-cell: ssru`; decoder_autoreg "ssru"): per position t,

        c_t = σ(f_t) ⊙ c_{t−1} + (1 − σ(f_t)) ⊙ W x_t,   f_t = W_f x_t + b_f,   c_{−1} = 0,   output ReLU(c_t)

    (Marian's `highway` gate). One state vector a layer is all a decoding step keeps of the tokens before. Over a
    whole sequence the recurrence, linear in c, is an associative scan: O(log T) steps deep, not T."""

    cfg: TransformerConfig

    def setup(self):
        c = self.cfg
        self.W = nn.Dense(c.d_model, use_bias=False, kernel_init=c.kernel_init(), dtype=c.compute_dtype, name="W",
                          dot_general=rows_dot_general)
        self.Wf = nn.Dense(c.d_model, kernel_init=c.kernel_init(), dtype=c.compute_dtype, name="Wf",
                           dot_general=rows_dot_general)

    def gates(self, x):
        """x: float[..., D] -> (the candidate W x float32[..., D], the forget gate σ(W_f x + b_f) float32[..., D])."""
        return (flat_leading(self.W, x).astype(jnp.float32),
                jax.nn.sigmoid(flat_leading(self.Wf, x).astype(jnp.float32)))

    def __call__(self, x, starts, train: bool = False):
        """x: float[B, T, D]; starts: bool[B, T], where a sequence begins (its state starts from 0 there: position 0,
        each packed segment's first) -> float[B, T, D] (no dropout: ``train`` unread)."""
        u, f = self.gates(x)
        c = reset_scan(jnp.where(starts[..., None], 0.0, f), (1.0 - f) * u)
        return nn.relu(c).astype(x.dtype)

    def step(self, x, c, index):
        """One position: x float[B, 1, D], c float32[B, D] the state after the position before, index: the
        position (int32 scalar; unread) -> (the output float[B, 1, D], the new state)."""
        u, f = self.gates(x[:, 0])
        c = f * c + (1.0 - f) * u
        return nn.relu(c)[:, None].astype(x.dtype), c


class AverageAttention(nn.Module):
    """The average attention network (Zhang et al. 2018) as Marian computes it in a decoder layer's place of
    self-attention (`transformer-decoder-autoreg: average-attention`; decoder_autoreg "aan"): per position t of
    the sublayer's input x,

        a_t = (x_1 + … + x_t) / t,   y_t = FFN(a_t),   output σ(W_i x_t + b_i) ⊙ x_t + σ(W_f y_t + b_f) ⊙ y_t

    with a feed-forward network of the layer's own shape (Marian's `transformer-dim-aan` and `-aan-activation`
    equal to its FFN's; its default gate). A decoding step keeps the running mean alone. Post-norm layers give x
    as Marian does (the layer's input); pre-norm ones give the normalised input, where Marian averages the input
    and normalises the mean: jaxnat's own layout, which no Marian model has."""

    cfg: TransformerConfig

    def setup(self):
        c = self.cfg
        self.ffn = FeedForward(c)
        self.Wi, self.Wf = (nn.Dense(c.d_model, kernel_init=c.kernel_init(), dtype=c.compute_dtype, name=name,
                                     dot_general=rows_dot_general) for name in ("Wi", "Wf"))

    def mix(self, x, mean, train: bool):
        """x, mean: float[B, T, D] -> the gated sum float[B, T, D]."""
        y = self.ffn(mean.astype(x.dtype), train)
        return jax.nn.sigmoid(flat_leading(self.Wi, x)) * x + jax.nn.sigmoid(flat_leading(self.Wf, y)) * y

    def __call__(self, x, starts, train: bool = False):
        """x: float[B, T, D]; starts: bool[B, T], where a sequence begins (its mean starts there: position 0, each
        packed segment's first) -> float[B, T, D]."""
        keep = jnp.where(starts[..., None], 0.0, 1.0)
        sums = reset_scan(jnp.broadcast_to(keep, x.shape), x.astype(jnp.float32))
        counts = reset_scan(keep, jnp.ones(keep.shape, jnp.float32))
        return self.mix(x, sums / counts, train)

    def step(self, x, mean, index):
        """One position: x float[B, 1, D], mean float32[B, D] that of the positions before, index: this position
        (int32 scalar) -> (the output float[B, 1, D], the mean through it), as Marian updates it."""
        t = jnp.asarray(index, jnp.float32)
        mean = (mean * t + x[:, 0].astype(jnp.float32)) / (t + 1.0)
        return self.mix(x, mean[:, None], False), mean


# decoder_autoreg values whose layers keep one state vector of the tokens before, and their modules
RECURRENT = {"ssru": SSRU, "aan": AverageAttention}


class DecoderLayer(nn.Module):
    """Self-attention (causal or bidirectional) -> cross-attention -> feed-forward; with decoder_autoreg "ssru" or
    "aan" a left-to-right recurrence (`SSRU`, `AverageAttention`: `RECURRENT`) in the self-attention's place.

    ``masked_attn`` (CMLMC's RevealPosition, Huang et al. 2022 §3.1) adds a causal self-attention sublayer
    between the self-attention and the cross-attention: FULL-ATT → MASKED-ATT → ENCODER-ATT → FFN.
    """

    cfg: TransformerConfig
    masked_attn: bool = False

    def setup(self):
        if self.cfg.decoder_autoreg in RECURRENT:  # (its parameters under the kind's name: "ssru", "aan")
            self.recurrent = RECURRENT[self.cfg.decoder_autoreg](self.cfg, name=self.cfg.decoder_autoreg)
        else:
            self.self_attn = MultiHeadAttention(self.cfg)
        self.cross_attn = MultiHeadAttention(self.cfg)
        self.ffn = FeedForward(self.cfg)
        pre = self.cfg.decoder_pre_norm
        self.res_self, self.res_cross, self.res_ffn = Residual(self.cfg, pre), Residual(self.cfg, pre), Residual(
            self.cfg, pre)
        if self.masked_attn:
            self.causal_attn, self.res_causal = MultiHeadAttention(self.cfg), Residual(self.cfg, pre)

    def __call__(self, x, self_bias, memory_kv, cross_bias, train: bool, causal_bias=None,
                 return_attention: bool = False):
        """self_bias: the self-attention's bias float32[B, 1|H, T, T], or with a `RECURRENT` layer bool[B, T],
        where each sequence starts. causal_bias: float32[B, 1, T, T], the causal sublayer's bias (with
        ``masked_attn``). With ``return_attention`` (static) also the cross-attention weights float32[B, H, T, S]."""
        if self.cfg.decoder_autoreg in RECURRENT:
            x = self.res_self(x, lambda h: self.recurrent(h, self_bias, train), train)
        else:
            x = self.res_self(x, lambda h: self.self_attn(h, h, self_bias, train), train)
        if self.masked_attn:
            x = self.res_causal(x, lambda h: self.causal_attn(h, h, causal_bias, train), train)
        weights = []

        def cross(h):
            out = self.cross_attn.attend(h, *memory_kv, cross_bias, train, return_weights=return_attention)
            if return_attention:
                out, w = out
                weights.append(w)
            return out

        x = self.res_cross(x, cross, train)
        x = self.res_ffn(x, lambda h: self.ffn(h, train), train)
        return (x, weights[0]) if return_attention else x

    def cross_kv(self, memory, prefix=None):
        return self.cross_attn.project_kv(memory, prefix)

    def step(self, x, cache: dict, index, cross_bias):
        """One cached causal step. x: float[B, 1, D]; cache['k'|'v']: float[B, H, T, K], cache['ck'|'cv']:
        float[B, H, S, K] (heads first: the layout the attention products read, so that no step copies a cache
        into it; keys and values written as [B, T, H, K] were transposed whole at every step, a quarter of a beam
        search's time at batch 64); index: int32 scalar.

        Writes this position's key/value at `index` and attends to positions <= index. With a `RECURRENT` layer,
        cache['c']: float32[B, D], its state, in place of the keys and values.
        """
        def recurrent_sublayer(h):
            out, c = self.recurrent.step(h, cache["c"], index)
            cache.update(c=c)
            return out

        def self_sublayer(h):
            attn = self.self_attn
            k_new, v_new = (jnp.swapaxes(t, 1, 2) for t in attn.project_kv(h))
            k = jax.lax.dynamic_update_slice_in_dim(cache["k"], k_new.astype(cache["k"].dtype), index, axis=2)
            v = jax.lax.dynamic_update_slice_in_dim(cache["v"], v_new.astype(cache["v"].dtype), index, axis=2)
            cache.update(k=k, v=v)
            visible = jnp.arange(k.shape[2]) <= index
            bias = jnp.where(visible, 0.0, -1e9).astype(jnp.float32)[None, None, None, :]
            return attn.attend(h, k, v, bias, False, heads_first=True)

        x = self.res_self(x, recurrent_sublayer if self.cfg.decoder_autoreg in RECURRENT else self_sublayer, False)
        x = self.res_cross(x, lambda h: self.cross_attn.attend(h, cache["ck"], cache["cv"], cross_bias, False,
                                                               heads_first=True), False)
        return self.res_ffn(x, lambda h: self.ffn(h, False), False), cache


class Embedder(nn.Module):
    """Token embedding (scaled by sqrt(D) as fairseq, unless ``scale_embeddings`` is off) + positions + dropout;
    also the tied output projection.

    The dropout rate is ``embed_dropout``, or ``dropout`` when that is negative (fairseq and the papers use one
    rate for the embeddings and the sublayers). ``shared``: the source side's embedder, whose token matrix this
    one uses while its positions are its own (``separate_positions`` with shared embeddings, as fairseq keeps an
    encoder and a decoder position table)."""

    cfg: TransformerConfig
    vocab_size: int
    shared: "Embedder | None" = None

    def setup(self):
        c = self.cfg
        if self.shared is None:
            self.tokens = nn.Embed(self.vocab_size, c.d_model, embedding_init=c.embed_init(), name="tokens")
        if c.positions == "learned":
            self.pos_table = self.param("positions", c.embed_init(), (c.max_len, c.d_model))
        self.drop = Dropout(c.dropout if c.embed_dropout < 0 else c.embed_dropout)

    @property
    def scale(self) -> float:
        """What the token embeddings are multiplied by in the input: √D (fairseq, the papers) or 1."""
        return math.sqrt(self.cfg.d_model) if self.cfg.scale_embeddings else 1.0

    def table(self) -> nn.Embed:
        """The token embedding (this embedder's, or the shared one's)."""
        return self.tokens if self.shared is None else self.shared.table()

    def positions(self, length: int, offset=0) -> jnp.ndarray:
        """float32[length, D] position encodings for positions offset .. offset+length-1."""
        return jax.lax.dynamic_slice_in_dim(self.position_table(), offset, length, axis=0)

    def position_table(self) -> jnp.ndarray:
        """float32[max_len, D]: the codes of positions 0 .. max_len - 1."""
        c = self.cfg
        if c.positions == "learned":
            return self.pos_table
        return sinusoidal_positions(c.max_len, c.d_model, c.position_offset, c.position_layout)

    def __call__(self, ids: jnp.ndarray, train: bool, offset=0, segments=None, norm=None,
                 vectors: jnp.ndarray | None = None) -> jnp.ndarray:
        """ids: int32[B, L] -> float[B, L, D]. segments: int32[B, L] segment ids of a packed row (positions then
        restart with each segment) or None. norm: the stack's layer norm of its embedded inputs
        (``layernorm_embedding``, `embedding_norms`), applied before dropout, or None. vectors: float[B, L, D] read
        in place of the ids' scaled embeddings (copied source embeddings), or None. PAD, where the model lacks it
        (``absent_tokens``: a Marian .npz import), embeds as a zero vector whatever its row holds: the decoder
        starts from it where Marian starts from zeros, and fine-tuning leaves it there. ``unk_inputs`` read UNK's
        row (`lookup`)."""
        tokens = self.lookup(ids) * self.scale if vectors is None else vectors
        if PAD_ID in self.cfg.absent_tokens and vectors is None:
            tokens = jnp.where((ids == PAD_ID)[..., None], 0.0, tokens)
        x = tokens + self.position_codes(ids, offset, segments)
        x = x if norm is None else norm(x)
        return self.drop(x.astype(self.cfg.compute_dtype), deterministic=not train)

    def position_codes(self, ids: jnp.ndarray, offset=0, segments=None) -> jnp.ndarray:
        """float32[1|B, L, D]: the position encodings of ``ids`` int32[B, L] (per segment, with ``segments``)."""
        if segments is None:
            return self.positions(ids.shape[1], offset)[None]
        return self.position_table()[jnp.minimum(segment_positions(segments), self.cfg.max_len - 1)]

    def lookup(self, ids: jnp.ndarray) -> jnp.ndarray:
        """ids: int32[B, L] -> float32[B, L, D], the raw token embeddings (no scaling, positions or dropout);
        the tokens of ``unk_inputs`` (fairseq's NAT imports' PLH and MASK) read UNK's row, not their own."""
        if self.cfg.unk_inputs:
            ids = jnp.where(jnp.isin(ids, jnp.asarray(self.cfg.unk_inputs, ids.dtype)), UNK_ID, ids)
        return self.table()(ids).astype(jnp.float32)

    def attend(self, x: jnp.ndarray) -> jnp.ndarray:
        """float[..., D] -> float32[..., V] logits against the embedding matrix."""
        dtype = self.cfg.compute_dtype
        table = self.table().embedding
        if dtype == jnp.float32 and math.prod(x.shape[:-1]) == 1:
            # one row (a sentence decoded greedily): E x, a matrix-vector product over E as it is stored; x E^T had
            # XLA's CPU backend copy E transposed at every decoding step, 18 ms a step for OPUS-MT's 58k x 512
            # (docs/benchmarks.md, "Decoding side by side with transformers")
            return (table @ x.reshape(-1, 1).astype(jnp.float32)).reshape(*x.shape[:-1], table.shape[0])
        if dtype == jnp.float32:
            return rows_dot_general(x.astype(jnp.float32), table.T, (((x.ndim - 1,), (0,)), ((), ())))
        # mixed precision: the product in bfloat16, accumulated and returned in float32 (einsum_f32)
        return einsum_f32("...d,vd->...v", x.astype(dtype), table.astype(dtype))

    def expected(self, probs: jnp.ndarray) -> jnp.ndarray:
        """float32[..., V] distributions -> float32[..., D], the expected raw token embedding under each."""
        return probs.astype(jnp.float32) @ self.table().embedding


def embedders(c: TransformerConfig) -> tuple[Embedder, Embedder]:
    """(source, target) embedders of an encoder-decoder model, built in its ``setup``: one module for both with
    ``share_embeddings`` (one token matrix and one position table), the target's with only its own positions
    when ``separate_positions`` too, or two separate ones."""
    src = Embedder(c, c.src_vocab_size, name="src_embed")
    if not c.share_embeddings:
        return src, Embedder(c, c.tgt_vocab_size, name="tgt_embed")
    if c.separate_positions:
        return src, Embedder(c, c.tgt_vocab_size, shared=src, name="tgt_embed")
    return src, src


def embedding_norms(c: TransformerConfig) -> tuple:
    """(source, target) layer norms of the embedded inputs (``layernorm_embedding``: fairseq keeps one per
    stack), built in a model's ``setup``, or (None, None)."""
    if not c.layernorm_embedding:
        return None, None
    return layer_norm(c, "src_embed_norm"), layer_norm(c, "tgt_embed_norm")


def absent_logits(c: TransformerConfig, logits: jnp.ndarray) -> jnp.ndarray:
    """float32[..., V] logits with those of ``absent_tokens`` (ids the model has no row for) set 30 below the
    lowest of their row: the softmax over the other rows is unchanged (to e^-30), no search picks them, and label
    smoothing's mean over the vocabulary stays finite. Unchanged without ``absent_tokens``."""
    if not c.absent_tokens:
        return logits
    floor = jax.lax.stop_gradient(jnp.min(logits, axis=-1, keepdims=True)) - 30.0
    ids = jnp.asarray(c.absent_tokens)
    # the few columns written in place: a `where` over every logit cost 15% of a NAT pass at batch 64
    return logits.at[..., ids].set(jnp.broadcast_to(floor, logits.shape[:-1] + ids.shape).astype(logits.dtype))


def source_tokens(c: TransformerConfig, src: jnp.ndarray, segments=None):
    """(src, segments) as the encoder reads them: as they are, or without ``source_bos`` the BOS of each
    sentence dropped (rows shifted left by one, as every row starts with it; in a packed row each pair's BOS
    becomes padding, outside every segment, so that positions restart at the pair's first word)."""
    if c.source_bos:
        return src, segments
    if segments is None:
        return jnp.pad(src[:, 1:], ((0, 0), (0, 1))), None
    bos = src == BOS_ID
    return jnp.where(bos, PAD_ID, src), jnp.where(bos, 0, segments)


def source_columns(c: TransformerConfig, weights: jnp.ndarray) -> jnp.ndarray:
    """float[..., S] over the source positions the encoder read (`source_tokens`) → over the given [BOS … EOS]
    source's own S columns: without ``source_bos`` shifted right by one, BOS's column 0 (it was not read)."""
    if c.source_bos:
        return weights
    return jnp.pad(weights, [(0, 0)] * (weights.ndim - 1) + [(1, 0)])[..., :-1]


def scan_stack(body, layer: nn.Module, length: int, carry, per_layer=None):
    """``body(layer, carry, x_i) -> (carry, None)`` run over ``length`` layers as one `nn.scan` (``scan_layers``):
    one traced layer body, ``layer``'s parameters stacked along a leading layer axis [length, ...], each layer its
    own initialisation and dropout keys. per_layer: a list of ``length`` pytrees (x_i: the i-th, e.g. a layer's
    constraint prefixes; stacked here along the layer axis) or None. Returns the final carry."""
    xs = None if per_layer is None else jax.tree_util.tree_map(lambda *a: jnp.stack(a), *per_layer)
    carry, _ = nn.scan(body, variable_axes={"params": 0}, split_rngs={"params": True, "dropout": True},
                       length=length)(layer, carry, xs)
    return carry


class Encoder(nn.Module):
    cfg: TransformerConfig

    @nn.compact
    def __call__(self, x: jnp.ndarray, mask: jnp.ndarray, train: bool, prefixes=None, prefix_mask=None) -> jnp.ndarray:
        """x: float[B, S, D] embedded source; mask: bool[B, S] (or int32 segment ids: `attention_bias`) -> float[B, S,
        D]. prefixes: per layer (key inputs,
        value inputs) float[B, C, D] of C extra self-attention entries before the source's, prefix_mask: bool[B, C]
        (vectorized constraints; int32 segment ids of the entries when ``mask`` is segment ids)."""
        # queries are the source positions only (with segment ids: those of ``mask``; prefix_mask then gives the
        # prefix entries' segments, so that a packed segment sees only its own entries)
        bias = attention_bias(mask if prefixes is None else jnp.concatenate([prefix_mask, mask], axis=1),
                              query_mask=mask)
        if self.cfg.scan_layers:
            x = scan_stack(lambda layer, x, prefix: (layer(x, bias, train, prefix), None),
                           EncoderLayer(self.cfg, name="layers"), self.cfg.enc_layers, x, prefixes)
        else:
            for i in range(self.cfg.enc_layers):
                x = EncoderLayer(self.cfg, name=f"layer_{i}")(x, bias, train, None if prefixes is None else prefixes[i])
        if self.cfg.pre_norm:
            x = layer_norm(self.cfg, "final_norm")(x)
        return x


class Decoder(nn.Module):
    """A stack of decoder layers; `causal` selects AR (True) or NAT (False) self-attention."""

    cfg: TransformerConfig
    num_layers: int
    causal: bool
    masked_attn: bool = False  # a bidirectional decoder with CMLMC's causal sublayer in every layer

    def setup(self):
        if self.cfg.scan_layers:  # one layer module whose parameters carry a leading layer axis (`scan_stack`)
            self.layers = DecoderLayer(self.cfg, self.masked_attn, name="layers")
        else:
            self.layers = [DecoderLayer(self.cfg, self.masked_attn, name=f"layer_{i}") for i in range(self.num_layers)]
        if self.has_final_norm:
            self.final_norm = layer_norm(self.cfg)

    @property
    def has_final_norm(self) -> bool:
        return self.cfg.decoder_pre_norm and self.cfg.decoder_final_norm

    def output_norm(self, x):
        """The final layer norm of a pre-norm stack (nothing with post-norm, whose layers end in one, or without
        ``decoder_final_norm``)."""
        return self.final_norm(x) if self.has_final_norm else x

    def layer_modules(self) -> list:
        """The stack's layers one by one, each with its own parameters; with ``scan_layers`` a `DecoderLayer` bound
        to each slice of the stacked parameters (cached decoding runs layer by layer: its per-layer caches stay
        batch-major arrays, which the searches reorder along beams)."""
        if not self.cfg.scan_layers:
            return self.layers
        stacked = self.variables["params"]["layers"]
        return [DecoderLayer(self.cfg, self.masked_attn, parent=None).bind(
            {"params": jax.tree_util.tree_map(lambda p: p[i], stacked)}) for i in range(self.num_layers)]

    def memory_kv(self, memory) -> list:
        """memory float[B, S, D] → each layer's cross-attention keys and values, a list of (float[B, S, H, K],
        float[B, S, H, K]): what every pass of a decoding loop reads of the source, computed once before it and
        given to `__call__` as its ``memory`` (XLA leaves the projections inside the loop otherwise)."""
        return [layer.cross_kv(memory) for layer in self.layer_modules()]

    def __call__(self, x, mask, memory, memory_mask, train: bool, num_layers: int | None = None,
                 return_attention: bool = False, finish: bool = True, prefixes=None, attention_layer: int = -1,
                 causal: bool | None = None):
        """x: float[B, T, D]; mask: bool[B, T]; memory: float[B, S, D], or its keys and values (`memory_kv`);
        memory_mask: bool[B, S] (or both int32 segment ids of a packed batch: `attention_bias`).

        Returns float[B, T, D]. num_layers runs only the first layers ("early exit": the layers above are
        not computed; not with ``scan_layers``, which runs whole stacks), then the final norm (unless not
        ``finish``: a caller that stacks more layers on top applies it). With ``return_attention`` (static;
        Coverage-NAT reads it) also the last layer's cross-attention weights float32[B, H, T, S]; other callers get
        no extra output; ``attention_layer`` (static) another layer's (0-based, negative from the last: word
        alignments, `ARTransformer.cross_attention`). prefixes: per layer (key inputs, value inputs) float[B, C, D]
        of C cross-attention entries before the memory's; memory_mask then covers C + S (vectorized constraints).
        causal: the self-attention's mask for this call (None: the stack's own, ``self.causal``).
        """
        causal = self.causal if causal is None else causal
        if self.cfg.decoder_autoreg in RECURRENT:  # a recurrence reads the tokens before alone
            if not causal:
                raise ConfigError(f"model.decoder_autoreg={self.cfg.decoder_autoreg} reads the tokens before each "
                                  f"position only: a decoder that reads its whole canvas, or a pass without the "
                                  f"causal mask (model.full_context_alignment), cannot use it")
            self_bias = segment_starts(mask) if is_segments(mask) else jnp.broadcast_to(
                jnp.arange(mask.shape[1]) == 0, mask.shape)
        else:
            self_bias = attention_bias(mask, causal=causal)
        causal_bias = attention_bias(mask, causal=True) if self.masked_attn else None
        cross_bias = attention_bias(memory_mask, query_mask=mask)

        projected = isinstance(memory, list)  # `memory_kv`'s: each layer's keys and values, prefixes included

        wanted = attention_layer % (num_layers or self.num_layers)  # of the layers run (-1: the last of them)

        def run(layer, carry, own):  # one layer: (x, the wanted layer's cross-attention weights or None) -> the same
            x, weights = carry
            index, own = own
            out = layer(x, self_bias, own if projected else layer.cross_kv(memory, own), cross_bias, train,
                        causal_bias, return_attention=return_attention)
            if not return_attention:
                return (out, weights), None
            out, mine = out
            if isinstance(index, int):  # layer by layer: the wanted one's kept
                return (out, mine if index == wanted else weights), None
            return (out, jnp.where(index == wanted, mine, weights)), None  # a scan's traced layer index

        if projected:
            prefixes = memory

        if self.cfg.scan_layers:
            if num_layers not in (None, self.num_layers):
                raise ConfigError(f"model.scan_layers runs whole layer stacks; early exit after {num_layers} of "
                                  f"{self.num_layers} decoder layers needs model.scan_layers=false")
            # a scan's carry keeps one shape: the weights' [B, H, T, C + S], the wanted layer's kept
            weights = (jnp.zeros((x.shape[0], self.cfg.num_heads, x.shape[1], cross_bias.shape[-1]), jnp.float32)
                       if return_attention else None)
            x, weights = scan_stack(run, self.layers, self.num_layers, (x, weights),
                                    [(jnp.int32(i), None if prefixes is None else prefixes[i])
                                     for i in range(self.num_layers)])
        else:
            carry = (x, None)
            for i, layer in enumerate(self.layers[:num_layers]):
                carry, _ = run(layer, carry, (i, None if prefixes is None else prefixes[i]))
            x, weights = carry
        x = self.output_norm(x) if finish else x
        return (x, weights) if return_attention else x

    def init_cache(self, memory: jnp.ndarray, max_len: int, prefixes=None) -> list[dict[str, jnp.ndarray]]:
        """Per layer: empty self-attention keys/values float[B, H, max_len, K] and the cross-attention ones
        float[B, H, S, K] (with each layer's prefix entries first, as `__call__`; `step` then takes the C + S memory
        mask), heads first (`DecoderLayer.step`)."""
        c = self.cfg
        batch = memory.shape[0]
        shape = (batch, c.num_heads, max_len, c.d_model // c.num_heads)
        cache = []
        for i, layer in enumerate(self.layer_modules()):
            ck, cv = (jnp.swapaxes(t, 1, 2) for t in layer.cross_kv(memory, None if prefixes is None else prefixes[i]))
            if c.decoder_autoreg in RECURRENT:  # its state, zero before the first token
                own = dict(c=jnp.zeros((batch, c.d_model), jnp.float32))
            else:
                own = dict(k=jnp.zeros(shape, c.compute_dtype), v=jnp.zeros(shape, c.compute_dtype))
            cache.append(dict(**own, ck=ck, cv=cv))
        return cache

    def step(self, x, cache, index, memory_mask):
        """x: float[B, 1, D] embedded current token; returns (float[B, 1, D], new cache)."""
        cross_bias = jnp.where(memory_mask, 0.0, -1e9).astype(jnp.float32)[:, None, None, :]
        new_cache = []
        for layer, layer_cache in zip(self.layer_modules(), cache):
            x, layer_cache = layer.step(x, dict(layer_cache), index, cross_bias)
            new_cache.append(layer_cache)
        return self.output_norm(x), new_cache


def without_cross_cache(step, cache):
    """(tokens_to_logprobs, cache) for the searches (`jaxnat.decoding.search`) from a decoding step
    ``step(tokens, cache, index) -> (log-probabilities, cache)`` over `Decoder.init_cache`'s cache.

    Beam search reorders its cache along the surviving beams at every step. The cross-attention keys and values
    never change and are the same for every beam of a sentence (its source repeated), so they stay out of the
    searched cache: loop constants of the search, not a copy of [B·K, S, H, K] per layer and step."""
    fixed = [{"ck": layer["ck"], "cv": layer["cv"]} for layer in cache]
    own = lambda cache: [{k: v for k, v in layer.items() if k not in ("ck", "cv")} for layer in cache]  # noqa: E731

    def tokens_to_logprobs(tokens, cache, index, *extra):  # extra: further arguments of step
        logp, cache = step(tokens, [{**layer, **f} for layer, f in zip(cache, fixed)], index, *extra)
        return logp, own(cache)

    return tokens_to_logprobs, own(cache)


def stack_layers(params):
    """A parameter tree with per-layer stacks (``layer_0`` … ``layer_{n-1}`` of an encoder or decoder) → the same
    parameters as ``scan_layers`` holds them: each stack one ``layers`` subtree whose arrays carry a leading layer
    axis [n, ...]. `unstack_layers` inverts it; nothing else in the tree changes."""
    if not isinstance(params, Mapping):
        return params
    out = {k: stack_layers(v) for k, v in params.items() if not re.fullmatch(r"layer_\d+", k)}
    layers = [params[f"layer_{i}"] for i in range(len(params) - len(out))]
    if layers:
        out["layers"] = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *layers)
    return out


def unstack_layers(params):
    """The inverse of `stack_layers`: each ``layers`` subtree [n, ...] → ``layer_0`` … ``layer_{n-1}``."""
    if not isinstance(params, Mapping):
        return params
    out = {k: unstack_layers(v) for k, v in params.items() if k != "layers"}
    if "layers" in params:
        n = jax.tree_util.tree_leaves(params["layers"])[0].shape[0]
        out.update({f"layer_{i}": jax.tree_util.tree_map(lambda a: a[i], params["layers"]) for i in range(n)})
    return out


def token_mask(ids: jnp.ndarray) -> jnp.ndarray:
    """bool[B, L]: True at non-padding positions."""
    return ids != PAD_ID


# the reserved tokens a vocabulary may lack (pad: Marian's, whose decoder starts from a zero vector, `PAD`'s row)
ABSENT_CHOICES = {"pad": PAD_ID, "bos": BOS_ID, "plh": PLH_ID, "mask": MASK_ID}


# the reserved tokens a model may read as <unk> (fairseq's NAT models' mask and placeholder)
UNK_INPUT_CHOICES = {"plh": PLH_ID, "mask": MASK_ID}


def _reserved_ids(names: str, key: str, choices: dict) -> tuple[int, ...]:
    """model.``key``, a comma list of ``choices``' names -> their ids, sorted; a one-line ConfigError otherwise."""
    names = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in names if n not in choices]
    if unknown:
        raise ConfigError(f"model.{key} is a comma list of {', '.join(choices)}; got {unknown[0]!r}")
    return tuple(sorted(choices[n] for n in names))


def absent_ids(names: str) -> tuple[int, ...]:
    """model.absent_tokens (a comma list of `ABSENT_CHOICES`' names) -> their ids, sorted."""
    return _reserved_ids(names, "absent_tokens", ABSENT_CHOICES)


def unk_input_ids(names: str) -> tuple[int, ...]:
    """model.unk_inputs (a comma list of `UNK_INPUT_CHOICES`' names) -> their ids, sorted."""
    return _reserved_ids(names, "unk_inputs", UNK_INPUT_CHOICES)


def config_from(model_cfg: Any, src_vocab_size: int, tgt_vocab_size: int) -> TransformerConfig:
    """Builds the static TransformerConfig from the `model` section of a run config."""
    fields = {f.name for f in dataclasses.fields(TransformerConfig)}
    values = {k: v for k, v in dict(model_cfg).items() if k in fields}
    values["absent_tokens"] = absent_ids(values.get("absent_tokens", ""))
    values["unk_inputs"] = unk_input_ids(values.get("unk_inputs", ""))
    return TransformerConfig(src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size, **values)
