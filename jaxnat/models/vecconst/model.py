"""Vectorized lexical constraints (Wang et al. 2022, "Integrating Vectorized Lexical Constraints for NMT").

An AR Transformer (`ar.ARTransformer`, whose parameters it keeps under the same names, so that a trained AR
run is its first training stage) that reads constraint pairs ⟨s⁽ⁿ⁾, t⁽ⁿ⁾⟩ — a source phrase and the target
phrase it must become — as attention entries and as an output plug-in:

* **vectorizing** (§3.1, eqs. 2–4): each phrase is embedded like a sentence (word embedding + positions
  counted from the phrase's own start); the keys of pair n are its source phrase's vectors ``K_c = S⁽ⁿ⁾``, its
  values the target phrase's vectors pooled onto the source positions by multi-head attention
  ``V_c = attn(S⁽ⁿ⁾, T⁽ⁿ⁾, T⁽ⁿ⁾)``; the pairs are concatenated (`vectorize`);
* **attention** (``vecconst.attention``, eqs. 5–7 and 13–15): every encoder self-attention and every
  decoder cross-attention takes ``[adapt(K_c); H]`` as keys and ``[adapt(V_c); H]`` as values, ``adapt`` a
  two-layer ReLU network of its own per layer (one network per layer maps both K_c and V_c, as the equations
  write it); missing pairs are masked out;
* **output plug-in** (``vecconst.plug_in``, eqs. 8–11): ``P_plug(y) = max(0, cos(w_y, h_t))`` for the tokens
  y of the target phrases (0 elsewhere), mixed in by a token-dependent gate
  ``g(y, h_t) = σ(tanh([w_y W₁; h_t W₂]) W₃)``: ``P = (1 − g) P_model + g P_plug`` — exactly eq. 11, which is
  not a normalised distribution; ``vecconst.renormalise`` divides it by its sum instead (docs/vecconst.md);
* **loss** (eq. 12): each target token's label-smoothed cross-entropy under P, weighted α when the token is a
  target-constraint token and β otherwise (``vecconst.alpha``, ``vecconst.beta``: 0.8 / 0.2 for models
  decoded with beam search, 0.5 / 0.5 for VDBA; App. B).

The authors' code differs in four places, each an option (docs/vecconst.md): separate key and value adapters
taken as keys and values (``vecconst.adapters="separate"``, `SeparateAdapters`), an additive one-token plug-in
with a per-position gate (``vecconst.output="authors"``, `AuthorsGate`), α on the positions of each target
phrase's first occurrence (``vecconst.weighting="span"``, `first_spans`) and, in decoding, a constraint token
leaving the plug-in once produced (``vecconst.consume``, `consume`).

Shapes: B sentences, N pairs, P_s / P_t phrase pieces, C = N · P_s constraint entries, V vocabulary.

Packed training (`jaxnat.data.batching.PackedBatcher`: K = W / 8 segment slots a row of W tokens, segment k's
pairs in slot k − 1 of pair_src int32[B, K, N, P_s]) gives each entry and each target-phrase token its segment's
id, so that a position attends to, and the plug-in scores, its own pair's constraints only; the row keeps its
real ones only (`row_capacity`).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from jaxnat.data.phrase_pairs import encode_pairs, entry_capacity
from jaxnat.data.vocab import PAD_ID
from jaxnat.decoding.request import DecodeRequest, Supports
from jaxnat.decoding.search import forced_logp, forced_result, sampling_of
from jaxnat.models.ar.model import ARTransformer, hard_phrases, output_capacity, search
from jaxnat.models.losses import log_prob_losses, token_losses, token_sums
from jaxnat.models.packing import next_in_segment
from jaxnat.models.spec import ModelSpec, word_glue
from jaxnat.models.dropout import Dropout
from jaxnat.models.transformer import (MultiHeadAttention, TransformerConfig, attention_bias, rows_dense, token_mask,
                                      without_cross_cache)


class Adapter(nn.Module):
    """adapt(·) of eq. 6, one per attention layer: two d × d linear maps with a ReLU between, the same network
    mapping K_c and V_c (``vecconst.adapters="shared"``), whose outputs the layer's key and value projections
    then take as they take its other inputs (eq. 7)."""

    d_model: int

    @nn.compact
    def __call__(self, keys, values, train: bool = False):
        fc1, fc2 = rows_dense(self.d_model, name="fc1"), rows_dense(self.d_model, name="fc2")
        return fc2(nn.relu(fc1(keys))), fc2(nn.relu(fc1(values)))


class SeparateAdapters(nn.Module):
    """The authors' adapters (``vecconst.adapters="separate"``; their ``--plug-in-type type2`` with
    ``--plug-in-project none``): a key network and a value network of their own per layer, each
    LayerNorm(dropout(W₂ dropout(GELU(W₁ x)))), whose outputs are the layer's per-head keys and values
    themselves, not passed through its key and value projections. The hidden width is d (their 512 at d 512)."""

    cfg: TransformerConfig

    @nn.compact
    def __call__(self, keys, values, train: bool = False):
        c = self.cfg
        drop = Dropout(c.dropout)

        def network(x, name):
            h = drop(nn.gelu(rows_dense(c.d_model, name=f"{name}_fc1")(x), approximate=False), deterministic=not train)
            h = nn.LayerNorm(name=f"{name}_norm")(drop(rows_dense(c.d_model, name=f"{name}_fc2")(h),
                                                       deterministic=not train))
            return h.reshape(h.shape[:-1] + (c.num_heads, c.d_model // c.num_heads))  # [B, C, H, K]

        return network(keys, "key"), network(values, "value")


class AuthorsGate(nn.Module):
    """The gate of the authors' output plug-in (``vecconst.output="authors"``), one value per position:
    g_t = σ(w · tanh([LN(attn(h_t, E_c, E_c)); LN(W_h h_t)]) + b), E_c the scaled embeddings of the constraint
    target tokens the position sees (their ``Softmax_Plug_In_Gate``).

    h: float[B, T, D]; tokens: float[B, M, D]; visible: bool[B, T|1, M] → g float32[B, T]."""

    cfg: TransformerConfig

    @nn.compact
    def __call__(self, h, tokens, visible, train: bool = False):
        bias = jnp.where(visible[:, None], 0.0, -1e9).astype(jnp.float32)            # [B, 1, T|1, M]
        read = nn.LayerNorm(name="read_norm")(MultiHeadAttention(self.cfg, name="attention")(h, tokens, bias, train))
        state = nn.LayerNorm(name="state_norm")(rows_dense(self.cfg.d_model, name="state")(h))
        both = jnp.tanh(jnp.concatenate([read, state], axis=-1).astype(jnp.float32))
        return jax.nn.sigmoid(rows_dense(1, name="out")(both)[..., 0])


class VecConstTransformer(ARTransformer):
    """The AR Transformer with constraint pairs as attention entries (``pair_attention``) and an output plug-in
    (``pair_plug_in``); both off, it is the AR model."""

    pair_attention: bool = True
    pair_plug_in: bool = True
    pair_renormalise: bool = False
    pair_adapters: str = "shared"   # "shared": eq. 6; "separate": the authors' key and value networks
    pair_output: str = "eq11"       # "eq11": eqs. 9–11; "authors": the authors' additive one-token plug-in
    packed_entries: int = 0         # a packed row's constraint entries (`row_capacity`); 0: its width

    def setup(self):
        super().setup()
        c = self.cfg
        if self.pair_attention:
            self.pair_align = MultiHeadAttention(c, name="pair_align")  # the attn of eq. 3

            def adapter(name):  # eq. 6, or the authors' two networks
                shared = self.pair_adapters == "shared"
                return Adapter(c.d_model, name=name) if shared else SeparateAdapters(c, name=name)

            self.enc_adapters = [adapter(f"enc_adapter_{i}") for i in range(c.enc_layers)]
            self.dec_adapters = [adapter(f"dec_adapter_{j}") for j in range(c.dec_layers)]
        if self.pair_plug_in and self.pair_output == "authors":
            self.plug_gate = AuthorsGate(c, name="plug_gate")
        elif self.pair_plug_in:  # eq. 10: W1, W2 (d × d) and W3 (2d × 1), linear maps without biases
            self.gate_token = rows_dense(c.d_model, use_bias=False, name="gate_token")
            self.gate_state = rows_dense(c.d_model, use_bias=False, name="gate_state")
            self.gate_out = self.param("gate_out", nn.initializers.lecun_normal(), (2 * c.d_model, 1))

    # -- eqs. 2–4 ------------------------------------------------------------------------------------
    def vectorize(self, pair_src: jax.Array, pair_tgt: jax.Array, train: bool = False):
        """pair_src: int32[B, N, P_s], pair_tgt: int32[B, N, P_t] (PAD-padded; an empty source phrase = no pair)
        → (K_c float[B, C, D], V_c float[B, C, D], mask bool[B, C])."""
        b, n, ps = pair_src.shape
        s = self.src_embed(pair_src.reshape(b * n, ps), train)            # S⁽ⁿ⁾: positions from 0 per phrase
        tgt = pair_tgt.reshape(b * n, pair_tgt.shape[2])
        t = self.tgt_embed(tgt, train)                                     # T⁽ⁿ⁾
        v = self.pair_align(s, t, attention_bias(token_mask(tgt)), train)  # attn(S⁽ⁿ⁾, T⁽ⁿ⁾, T⁽ⁿ⁾)
        d = s.shape[-1]
        return s.reshape(b, n * ps, d), v.reshape(b, n * ps, d), token_mask(pair_src).reshape(b, n * ps)

    def vectorize_packed(self, pair_src: jax.Array, pair_tgt: jax.Array, width: int, train: bool = False):
        """A packed batch's pairs, pair_src int32[B, K, N, P_s] and pair_tgt int32[B, K, N, P_t] (segment k's in slot
        k − 1), for source rows of ``width`` tokens → (K_c float[B, C, D], V_c float[B, C, D], the entries' segment
        ids int32[B, C], 0 on padding): the row's real pairs packed first and vectorized (`row_capacity`(room,
        K · N) of them), then their real entries packed first, C = `row_capacity`(room, ·); room: ``width``, or
        ``packed_entries`` where set."""
        b, k, n, ps = pair_src.shape
        room = self.packed_entries or width
        owner = slot_segments(jnp.any(pair_src != PAD_ID, axis=-1))  # [B, K · N]: each pair's segment
        owner, srcs, tgts = pack_entries(owner, row_capacity(room, k * n), pair_src.reshape(b, k * n, ps),
                                         pair_tgt.reshape(b, k * n, pair_tgt.shape[-1]))
        keys, values, real = self.vectorize(srcs, tgts, train)
        owner = jnp.where(real, jnp.repeat(owner, ps, axis=1), 0)  # entry j is piece j mod P_s of pair j // P_s
        owner, keys, values = pack_entries(owner, row_capacity(room, owner.shape[1]), keys, values)
        return keys, values, owner

    def _prefixes(self, adapters, keys, values, train: bool):
        return [a(keys, values, train) for a in adapters]

    # -- encoder and decoder ---------------------------------------------------------------------------
    def encode_with_pairs(self, src: jax.Array, pair_src: jax.Array, pair_tgt: jax.Array, train: bool = False,
                          entries: int | None = None, segments: jax.Array | None = None):
        """src: int32[B, S] → (memory float[B, S, D], memory mask bool[B, C + S] or [B, S], the decoder's
        per-layer prefixes or None). ``entries``: keep only C = ``entries`` constraint entries, the real ones
        packed first (`pack_entries`; at least every row's count of source-phrase pieces), None = all N · P_s.

        A packed batch: ``segments`` int32[B, S], src's segment ids, and the pairs int32[B, K, N, P] of
        `vectorize_packed`; the memory mask is then segment ids int32[B, C + S], so that in the encoder and the
        decoder alike a segment's positions attend to their own pair's constraint entries only."""
        x = self.src_embed(src, train, segments=segments)
        mask = token_mask(src) if segments is None else segments
        if not self.pair_attention:
            return self.encoder(x, mask, train), mask, None
        if segments is None:
            keys, values, pair_mask = self.vectorize(pair_src, pair_tgt, train)
            if entries is not None:
                pair_mask, keys, values = pack_entries(pair_mask, entries, keys, values)
        else:
            keys, values, pair_mask = self.vectorize_packed(pair_src, pair_tgt, src.shape[1], train)
        memory = self.encoder(x, mask, train, self._prefixes(self.enc_adapters, keys, values, train), pair_mask)
        return (memory, jnp.concatenate([pair_mask, mask], axis=1),
                self._prefixes(self.dec_adapters, keys, values, train))

    # -- eqs. 8–11 -------------------------------------------------------------------------------------
    def pair_log_probs(self, h: jax.Array, pair_tgt: jax.Array, segments: jax.Array | None = None,
                       train: bool = False) -> jax.Array:
        """h: float[B, T, D] decoder outputs; pair_tgt: int32[B, N, P_t], the sentences' target phrases (PAD-padded)
        → float32[B, T, V] log P of eq. 11 (or its renormalised form, or the authors' output:
        ``pair_output``), log_softmax(h W) without the plug-in.
        A packed batch: pair_tgt int32[B, K, N, P_t] and ``segments`` int32[B, T], h's segment ids
        (`phrase_tokens`: each position's P_plug is its own pair's)."""
        logp_model = jax.nn.log_softmax(self.logits(h))
        if not self.pair_plug_in:
            return logp_model
        ids, visible = phrase_tokens(pair_tgt, segments)                         # [B, M], [B, T|1, M]
        mix = self._authors_output if self.pair_output == "authors" else self._eq11
        logp = mix(h.astype(jnp.float32), logp_model, ids, visible, train)
        if self.pair_renormalise:
            logp = logp - jax.nn.logsumexp(logp, axis=-1, keepdims=True)
        return logp

    def _eq11(self, h, logp_model, ids, visible, train):
        """log((1 − g) P_model + g P_plug), P_plug(y) = max(0, cos(w_y, h_t)) on the constraint tokens."""
        token_part, state_part = self._gate_logits(h)
        logp = jax.nn.log_sigmoid(-(state_part[..., None] + token_part)) + logp_model  # log (1 − g) P_model
        # eq. 9: P_plug is 0 but on the M = N · P_t tokens of the sentence's target phrases, so eq. 11 adds
        # g · P_plug there only (a decoding step then costs about what the AR model's does; PAD slots add 0)
        # a token a position does not see is written as PAD: another segment's phrase token may be one this
        # position sees, and a scatter's duplicate indices must carry equal values
        at = (jnp.arange(ids.shape[0])[:, None, None], jnp.arange(h.shape[1])[None, :, None],
              jnp.where(visible, ids[:, None, :], PAD_ID))
        mixed = jnp.logaddexp(logp[at], self._log_plug(h, ids, visible, token_part, state_part))
        return logp.at[at].set(mixed)  # a token in two phrases: the same value twice; PAD: its own value

    def _gate_logits(self, h):
        """h: float32[B, T, D] → eq. 10's gate logit in its two parts, (token part float32[V], state part
        float32[B, T]): tanh acts on each half of [w_y W1; h_t W2], so W3's two halves separate the token and the
        state, and the token part depends on the parameters only (XLA computes it once, outside a decoding loop)."""
        w = self.tgt_embed.table().embedding                                     # [V, D]
        d, w3 = w.shape[1], self.gate_out[:, 0]
        return jnp.tanh(self.gate_token(w)) @ w3[:d], jnp.tanh(self.gate_state(h)) @ w3[d:]

    def _log_plug(self, h, ids, visible, token_part, state_part):
        """log(g · P_plug) at the phrase tokens ids int32[B, M] → float32[B, T, M], −inf where a position does not
        see the token (visible bool[B, T|1, M]) or P_plug is 0."""
        cos = jnp.einsum("btd,bmd->btm", unit(h), unit(self.tgt_embed.table().embedding[ids]))
        log_g = jax.nn.log_sigmoid(state_part[..., None] + token_part[ids][:, None, :])
        return jnp.where(visible & (cos > 0), log_g + jnp.log(jnp.maximum(cos, 1e-30)), -jnp.inf)

    def pair_token_losses(self, h: jax.Array, labels: jax.Array, pair_tgt: jax.Array, eps: float,
                          segments: jax.Array | None = None, train: bool = False):
        """Eq. 12's per-token terms under log P (`pair_log_probs`): h float[B, T, D], labels int32[B, T] →
        (label-smoothed loss, nll), float32[B, T] each (`jaxnat.models.losses`).

        Eq. 11 as written never writes out its [B, T, V] log P: the loss reads log P at the label and its mean
        over the vocabulary, and log P = log (1 − g) + log P_model everywhere but at the M phrase tokens, so both
        are the model's own (`token_losses`) plus the gate's log (1 − g) (at the label; and its mean, one fused
        reduction) plus what the plug-in lifts at the phrase tokens a position sees, each token once. The
        renormalised and the authors' outputs take the whole log P."""
        if self.pair_plug_in and (self.pair_renormalise or self.pair_output == "authors"):
            return log_prob_losses(self.pair_log_probs(h, pair_tgt, segments, train), labels, eps)
        z = self.logits(h)
        loss, nll = token_losses(z, labels, eps)
        if not self.pair_plug_in:
            return loss, nll
        h = h.astype(jnp.float32)
        ids, visible = phrase_tokens(pair_tgt, segments)                         # [B, M], [B, T|1, M]
        token_part, state_part = self._gate_logits(h)
        gate = state_part[..., None] + token_part[ids][:, None, :]                 # [B, T, M]
        z_ids = jnp.take_along_axis(z, jnp.broadcast_to(ids[:, None, :], gate.shape), axis=-1)
        base = z_ids - jax.nn.logsumexp(z, axis=-1, keepdims=True) + jax.nn.log_sigmoid(-gate)  # log (1 − g) P_model
        lift = jnp.where(first_seen(ids, visible),
                         jax.nn.softplus(self._log_plug(h, ids, visible, token_part, state_part) - base), 0.0)
        label_extra = (jax.nn.log_sigmoid(-(state_part + token_part[labels]))
                       + jnp.sum(jnp.where(ids[:, None, :] == labels[..., None], lift, 0.0), axis=-1))
        mean_extra = (-jnp.mean(jax.nn.softplus(state_part[..., None] + token_part), axis=-1)
                      + jnp.sum(lift, axis=-1) / z.shape[-1])
        loss = loss - (1.0 - eps) * label_extra - eps * mean_extra
        nll = nll - label_extra
        return loss, nll

    def _authors_output(self, h, logp_model, ids, visible, train):
        """The authors' output (their decoder's ``model_prob``, which their loss and beam search read):
        P = clamp(P_model + ε + g_t · s_t · onehot(y*_t), ε, 1), ε = 1e-12, where y*_t is the constraint token most
        similar to h_t, s_t = max(0, cos(h_t, w_{y*_t})) and g_t the position's gate (`AuthorsGate`). Not a
        normalised distribution.

        The floor at 0: their similarity is 0 at padding slots, and a sentence nearly always has some (its phrases
        padded to the batch's longest, fewer than three pairs, the tokens its beam has consumed), so a negative
        cosine counts only in the rare sentence without one, and then by how the batch happens to be padded;
        jaxnat floors it, which keeps a sentence's output independent of its batch (and of packing)."""
        eps = 1e-12
        w = self.tgt_embed.lookup(ids)                                            # [B, M, D]
        cos = jnp.where(visible, jnp.einsum("btd,bmd->btm", unit(h), unit(w)), 0.0)
        best = jnp.argmax(cos, axis=-1)                                           # [B, T]
        sim = jnp.maximum(jnp.take_along_axis(cos, best[..., None], axis=-1)[..., 0], 0.0)
        tokens = w * self.tgt_embed.scale * (ids != PAD_ID)[..., None]
        gate = self.plug_gate(h, tokens, visible, train)                          # [B, T]
        logp = jnp.minimum(jnp.logaddexp(logp_model, jnp.log(eps)), 0.0)         # log clamp(P_model + ε)
        at = (jnp.arange(ids.shape[0])[:, None], jnp.arange(h.shape[1])[None, :], jnp.take_along_axis(ids, best, 1))
        return logp.at[at].set(jnp.log(jnp.clip(jnp.exp(logp_model[at]) + eps + gate * sim, eps, 1.0)))

    def decode_with_pairs(self, src, tgt_in, pair_src, pair_tgt, train: bool = False, src_seg=None, tgt_seg=None):
        """Teacher forcing: src int32[B, S], tgt_in int32[B, T] → the decoder's outputs h float[B, T, D]. A packed
        batch also gives src_seg int32[B, S] and tgt_seg int32[B, T], the segment ids, and its pairs
        int32[B, K, N, P]."""
        memory, memory_mask, prefixes = self.encode_with_pairs(src, pair_src, pair_tgt, train, segments=src_seg)
        mask = token_mask(tgt_in) if tgt_seg is None else tgt_seg
        return self.decoder(self.tgt_embed(tgt_in, train, segments=tgt_seg), mask, memory, memory_mask, train,
                            prefixes=prefixes)

    def forward_with_pairs(self, src, tgt_in, pair_src, pair_tgt, train: bool = False, src_seg=None, tgt_seg=None):
        """Teacher forcing (`decode_with_pairs`) → log P float32[B, T, V]."""
        h = self.decode_with_pairs(src, tgt_in, pair_src, pair_tgt, train, src_seg, tgt_seg)
        return self.pair_log_probs(h, pair_tgt, tgt_seg, train)

    def __call__(self, src, tgt_in, pair_src, pair_tgt, train: bool = False, src_seg=None, tgt_seg=None):
        return self.forward_with_pairs(src, tgt_in, pair_src, pair_tgt, train, src_seg, tgt_seg)

    def token_losses(self, src, tgt_in, labels, pair_src, pair_tgt, eps: float, train: bool = False, src_seg=None,
                     tgt_seg=None):
        """Teacher forcing (`decode_with_pairs`) → eq. 12's per-token terms of labels int32[B, T]
        (`pair_token_losses`)."""
        h = self.decode_with_pairs(src, tgt_in, pair_src, pair_tgt, train, src_seg, tgt_seg)
        return self.pair_token_losses(h, labels, pair_tgt, eps, tgt_seg, train)

    def pair_cross_attention(self, src, tgt_in, pair_src, pair_tgt, entries: int | None = None):
        """Teacher forcing → where each position looks in the source as it predicts the next token, float32[B, T, S]:
        the last decoder layer's cross-attention weights averaged over its heads (`ARTransformer.cross_attention`),
        over the source's columns only (the constraint entries' left out)."""
        memory, memory_mask, prefixes = self.encode_with_pairs(src, pair_src, pair_tgt, entries=entries)
        _, weights = self.decoder(self.tgt_embed(tgt_in, False), token_mask(tgt_in), memory, memory_mask, False,
                                  return_attention=True, prefixes=prefixes)
        return jnp.mean(weights[..., -src.shape[1]:], axis=1)

    # -- cached decoding ---------------------------------------------------------------------------------
    def init_pair_cache(self, memory: jax.Array, max_len: int, prefixes):
        return self.decoder.init_cache(memory, max_len, prefixes)

    def pair_step(self, token: jax.Array, cache, index, memory_mask: jax.Array, pair_tgt: jax.Array):
        """token: int32[B] at position ``index`` → (log P float32[B, V] of the next token, new cache); pair_tgt:
        int32[B, N, P_t], the target-phrase tokens the plug-in may propose (`consume`)."""
        x = self.tgt_embed(token[:, None], False, offset=index)
        h, cache = self.decoder.step(x, cache, index, memory_mask)
        return self.pair_log_probs(h, pair_tgt)[:, 0], cache


def unit(x: jax.Array) -> jax.Array:
    """x / |x| along the last axis (cosine similarities are products of these)."""
    return x / (jnp.linalg.norm(x, axis=-1, keepdims=True) + 1e-9)


def consume(pair_tgt: jax.Array, token: jax.Array) -> jax.Array:
    """The authors' decoding rule (``vecconst.consume``): pair_tgt int32[B, N, P_t] with every occurrence of
    token int32[B], the token just produced, replaced by PAD, so that the plug-in no longer proposes it (on their
    code-switched test set it keeps a constraint from being repeated)."""
    return jnp.where(pair_tgt == token[:, None, None], PAD_ID, pair_tgt)


def pack_entries(mask: jax.Array, capacity: int, *arrays: jax.Array) -> tuple[jax.Array, ...]:
    """mask: bool[B, C] (or int32[B, C] segment ids, 0 on padding), arrays: [B, C, …] → (mask [B, capacity],
    arrays [B, capacity, …]): each row's real entries first, in their order, then its padding, cut to ``capacity``
    (≥ every row's real count, else real entries are lost: the caller sizes it).

    Attention over the constraint entries does not depend on their order, so this changes no result; it lets a
    batch whose sentences have few constraint pieces attend over a few slots instead of N · P_s padded ones."""
    order = jnp.argsort(mask == 0, axis=1, stable=True)[:, :capacity]
    take = lambda x: jnp.take_along_axis(x, order.reshape(order.shape + (1,) * (x.ndim - 2)), axis=1)  # noqa: E731
    return (take(mask), *map(take, arrays))


def row_capacity(length: int, slots: int) -> int:
    """How many of a packed row's constraint slots (its pairs, or its phrases' pieces on one side: ``slots``) the
    row keeps, its real ones first (`pack_entries`): at most ``length``, the row's tokens on that side, or the
    fewer entries ``vecconst.packed_entries`` gives it (the packer then fills no row past them:
    `jaxnat.models.vecconst.pack_budget`; each pair has a source piece, so the pairs fit too).

    Why that is enough: `jaxnat.data.phrase_pairs.check_packable` holds every packed training example's phrases to
    no more pieces a side than its sentence, BOS and EOS excluded (pairs drawn from the sentence, as the aligned
    and the synthetic ones are, always are), so a row of W tokens has at most W − 2 real pieces a side and as many
    pairs (each has a source piece): every real one is kept and the packed loss is exact. Why not all of them:
    K = W / 8 segments of N · P_s slots are 384 entries a row at W = 128 and 3 × 8 pairs, where the bound is
    126 (an unpacked sentence of ~15 tokens has 24), and every entry costs two adapters and the key and value
    projections in each layer."""
    return min(length, slots)


def slot_segments(real: jax.Array) -> jax.Array:
    """real: bool[B, K, …], which of a packed batch's per-segment slots (slot k − 1: segment k) hold something →
    int32[B, K · …]: k where real, 0 elsewhere, in the order of ``real.reshape(B, -1)``."""
    slot = jnp.arange(1, real.shape[1] + 1, dtype=jnp.int32).reshape((1, -1) + (1,) * (real.ndim - 2))
    return jnp.where(real, slot, 0).reshape(real.shape[0], -1)


def phrase_tokens(pair_tgt: jax.Array, segments: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """The target-phrase tokens of the plug-in (eq. 9) and which positions see them: (ids int32[B, M], visible
    bool[B, T|1, M]).

    pair_tgt int32[B, N, P_t] (PAD-padded) → its sentence's M = N · P_t tokens, each real one seen by every
    position. A packed batch: pair_tgt int32[B, K, N, P_t] (segment k's in slot k − 1) and ``segments``
    int32[B, T], the positions' segment ids → the row's real tokens first, M = `row_capacity`(T, K · N · P_t),
    each seen by its own segment's positions only."""
    if segments is None:
        ids = pair_tgt.reshape(pair_tgt.shape[0], -1)
        return ids, (ids != PAD_ID)[:, None, :]
    owner = slot_segments(pair_tgt != PAD_ID)
    owner, ids = pack_entries(owner, row_capacity(segments.shape[1], owner.shape[1]), pair_tgt.reshape(owner.shape))
    return ids, (owner[:, None, :] == segments[:, :, None]) & (owner > 0)[:, None, :]


def first_seen(ids: jax.Array, visible: jax.Array) -> jax.Array:
    """ids int32[B, M], visible bool[B, T|1, M] (`phrase_tokens`) → bool[B, T|1, M]: the entries a position sees
    whose token it sees at no earlier entry (a token in two phrases counts once, as in eq. 9's P_plug)."""
    m = ids.shape[1]
    earlier_same = (ids[:, :, None] == ids[:, None, :]) & (jnp.arange(m)[:, None] < jnp.arange(m)[None, :])
    return visible & ~jnp.any(visible[..., :, None] & earlier_same[:, None], axis=-2)


def first_spans(labels: jax.Array, pair_tgt: jax.Array, segments: jax.Array | None = None) -> jax.Array:
    """The positions of each target phrase's first occurrence in its sentence (the authors' α positions).

    labels: int32[B, T]; pair_tgt: int32[B, N, P_t] (PAD-padded, real pieces first) → bool[B, T]: True at
    i … i + ℓ − 1 for the smallest i where the ℓ real pieces of a phrase stand in labels, for every phrase
    (one never found marks nothing). A packed batch: pair_tgt int32[B, K, N, P_t] (segment k's in slot k − 1)
    and ``segments`` int32[B, T], the labels' segment ids: a phrase is looked for in its own segment only."""
    b, t = labels.shape
    p = pair_tgt.shape[-1]
    owner = None if segments is None else slot_segments(jnp.any(pair_tgt != PAD_ID, axis=-1))  # [B, K · N]
    phrases = pair_tgt.reshape(b, -1, p)                                                        # [B, N', P]
    length = jnp.sum(phrases != PAD_ID, axis=-1)                                                # [B, N']
    padded = jnp.pad(labels, ((0, 0), (0, p)), constant_values=PAD_ID)
    windows = jnp.stack([padded[:, j:j + t] for j in range(p)], axis=-1)                       # [B, T, P]
    fits = (phrases[:, :, None, :] == windows[:, None]) | (phrases == PAD_ID)[:, :, None, :]
    match = jnp.all(fits, axis=-1) & (length > 0)[..., None]                                    # [B, N', T]
    if owner is not None:
        match &= segments[:, None, :] == owner[..., None]
    start = jnp.argmax(match, axis=-1)                                                          # [B, N']
    found = jnp.any(match, axis=-1)
    i = jnp.arange(t)
    inside = (i >= start[..., None]) & (i < (start + length)[..., None]) & found[..., None]     # [B, N', T]
    return jnp.any(inside, axis=1)


def vecconst_loss(model: VecConstTransformer, params, batch: dict, rng, *, label_smoothing: float,
                  alpha: float = 0.8, beta: float = 0.2, span: bool = False, train: bool = True):
    """Eq. 12 with label smoothing: Σ_t w_t · CE_t over the target tokens after BOS, w_t = α for a token of the
    sentence's target phrases and β otherwise; CE under log P of eq. 11 (`pair_token_losses`). ``span``: α on the
    positions of each target phrase's first occurrence instead (`first_spans`, the authors' code).

    batch: 'src' int32[B, S], 'tgt' int32[B, T], 'pair_src' int32[B, N, P_s], 'pair_tgt' int32[B, N, P_t]; or a
    packed batch (`jaxnat.data.batching.PackedBatcher`: several pairs a row, with 'src_seg' and 'tgt_seg', and
    the pairs int32[B, K, N, P], segment k's in slot k − 1), each pair's loss exactly its loss alone as long as
    every row's phrases fit it (`row_capacity`).
    Returns (loss_sum, {'nll', 'count', 'constraint_tokens'}); the trainer divides by the token count.
    """
    tgt, labels = batch["tgt"], batch["tgt"][:, 1:]
    if "tgt_seg" in batch:
        segments = {"src_seg": batch["src_seg"], "tgt_seg": batch["tgt_seg"][:, :-1]}
        real = next_in_segment(batch["tgt_seg"])
    else:
        segments, real = {}, token_mask(labels)
    per_token = model.apply(params, batch["src"], tgt[:, :-1], labels, batch["pair_src"], batch["pair_tgt"],
                            label_smoothing, train=train, rngs={"dropout": rng}, method="token_losses", **segments)
    if span:
        constrained = first_spans(labels, batch["pair_tgt"], batch["tgt_seg"][:, 1:] if "tgt_seg" in batch else None)
    else:
        ids, visible = phrase_tokens(batch["pair_tgt"], segments.get("tgt_seg"))
        constrained = jnp.any(visible & (ids[:, None, :] == labels[..., None]), axis=-1)  # a token of its phrases
    loss, nll, count = token_sums(*per_token, real, weights=jnp.where(constrained, alpha, beta))
    return loss, {"nll": nll, "count": count, "constraint_tokens": jnp.sum(constrained & real, dtype=jnp.float32)}


def pair_decoder(module: VecConstTransformer, params, request: DecodeRequest, k: int, max_out: int,
                 consumes: bool = False):
    """The search's callback over the pairs of ``request`` (none: an all-PAD pair per sentence), each sentence's
    rows repeated ``k`` times (row b * k + j: sentence b's beam j): (tokens_to_logprobs, its cache). ``consumes``:
    each row's plug-in drops the constraint tokens it has produced (`consume`; the phrases are part of the cache, so
    they follow their beams)."""
    src = request.src
    pairs = request.extras.get("pairs")
    if pairs is None:
        none = jnp.full((src.shape[0], 1, 1), PAD_ID, jnp.int32)
        pairs = PairInputs(none, none)
    memory, memory_mask, prefixes = module.apply(params, src, pairs.src, pairs.tgt, method="encode_with_pairs",
                                                 entries=pairs.entries)
    repeat = lambda x: jnp.repeat(x, k, axis=0)  # noqa: E731
    memory, memory_mask, prefixes = repeat(memory), repeat(memory_mask), jax.tree_util.tree_map(repeat, prefixes)
    cache = module.apply(params, memory, max_out - 1, prefixes, method="init_pair_cache")

    layer_step, layers = without_cross_cache(lambda tokens, cache, index, pair_tgt: module.apply(
        params, tokens, cache, index, memory_mask, pair_tgt, method="pair_step"), cache)

    def tokens_to_logprobs(tokens, cache, index):
        layers, pair_tgt = cache
        pair_tgt = consume(pair_tgt, tokens) if consumes else pair_tgt
        logp, layers = layer_step(tokens, layers, index, pair_tgt)
        return logp, (layers, pair_tgt)

    return tokens_to_logprobs, (layers, repeat(pairs.tgt))


def vecconst_generate(module: VecConstTransformer, params, request: DecodeRequest, *, length_penalty, max_len_a,
                      max_len_b, max_out: int, ordered: bool = False, continues=None, joins=None, trails=None,
                      consumes: bool = False, sampling=None, no_repeat_ngram: int = 0,
                      no_consecutive_repeat: int = 0) -> dict:
    """Greedy, beam or, with hard constraints in ``request``, constrained beam search (`ar.search`) with the
    pairs of ``request`` (`pair_decoder`). ``sampling``: beam_size samples a sentence in place of the search;
    ``no_repeat_ngram``, ``no_consecutive_repeat``: the repeats no output holds (`ar.search`)."""
    k = request.beam_size
    tokens_to_logprobs, cache = pair_decoder(module, params, request, k, max_out, consumes)
    return search(tokens_to_logprobs, cache, request.src, phrases=hard_phrases(request), ordered=ordered,
                  continues=continues, joins=joins, trails=trails, beam_size=k, length_penalty=length_penalty,
                  max_len_a=max_len_a, max_len_b=max_len_b, max_out=max_out, prefix=request.prefix,
                  prefix_free=request.prefix_free, completion=request.completion, nbest=request.nbest,
                  sampling=sampling, no_repeat_ngram=no_repeat_ngram, no_consecutive_repeat=no_consecutive_repeat)


SUPPORTS = Supports(beam=True, hard_constraints=True, pairs=True, prefix=True, nbest=True, score=True, align=True)


@struct.dataclass
class PairInputs:
    """A decode request's constraint pairs (``DecodeRequest.extras['pairs']``): src int32[B, N, P_s] and tgt
    int32[B, N, P_t], the source phrases and the target phrases they become, PAD-padded; entries: the
    constraint entries the attention keeps (static: `jaxnat.data.phrase_pairs.entry_capacity`; None: all N · P_s)."""

    src: jax.Array
    tgt: jax.Array
    entries: int | None = struct.field(pytree_node=False, default=None)


def build_spec(config, cfg: TransformerConfig, pieces) -> ModelSpec:
    s, t, e = config.vecconst, config.train, config.eval
    continues, joins, trails = word_glue(pieces)  # hard constraints: whole words
    sampling = sampling_of(e)
    module = VecConstTransformer(cfg, s.attention, s.plug_in, s.renormalise, s.adapters, s.output, s.packed_entries)

    def init(rng, batch):  # the parameters' shapes do not depend on the pairs' (nor on packing): one empty pair
        no_pair = jnp.full((1, 1, 1), PAD_ID, jnp.int32)
        return module.init(rng, batch["src"][:1], batch["tgt"][:1, :-1], no_pair, no_pair)

    def loss(params, batch, rng, train=True):
        return vecconst_loss(module, params, batch, rng, label_smoothing=t.label_smoothing, alpha=s.alpha,
                             beta=s.beta, span=s.weighting == "span", train=train)

    capacity = output_capacity(cfg, e)

    def generate(params, request: DecodeRequest) -> dict:
        return vecconst_generate(module, params, request, length_penalty=e.length_penalty, max_len_a=e.max_len_a,
                                 max_len_b=e.max_len_b, max_out=request.width(capacity),
                                 ordered=e.constraint_order == "given", continues=continues, joins=joins,
                                 trails=trails, consumes=pair_consumes(s), sampling=sampling,
                                 no_repeat_ngram=e.no_repeat_ngram, no_consecutive_repeat=e.no_consecutive_repeat)

    def score(params, request: DecodeRequest, tgt) -> dict:  # stepped, as the search: the plug-in may consume
        tokens_to_logprobs, cache = pair_decoder(module, params, request, 1, tgt.shape[1], pair_consumes(s))
        return forced_result(forced_logp(tokens_to_logprobs, cache, tgt), tgt, request.free_prefix(), e.length_penalty)

    def align(params, request: DecodeRequest, tgt) -> jax.Array:
        pairs = request.extras["pairs"]
        return module.apply(params, request.src, tgt[:, :-1], pairs.src, pairs.tgt, pairs.entries,
                            method="pair_cross_attention")

    return ModelSpec("vecconst", cfg, module, init, loss, generate, capacity, SUPPORTS.when_sampling(sampling),
                     packs=True, request_extras=pair_extras, score=score, align=align)


def pair_extras(translator, starts) -> dict:
    """{'pairs': `PairInputs`} of every request, pairs or not (an all-PAD row is no pair): the entries each
    batch needs (vecconst.pack_entries), or all of them."""
    d = translator.config.data
    pair_src, pair_tgt, _ = encode_pairs([s.pairs or [] for s in starts], translator.encode_phrases, d.max_pairs,
                                         d.max_pair_pieces)
    entries = entry_capacity(pair_src) if translator.config.vecconst.pack_entries else None
    return {"pairs": PairInputs(pair_src, pair_tgt, entries)}


def pair_consumes(s) -> bool:
    """vecconst.consume resolved: "auto" follows the authors' rule with their output form."""
    return s.output == "authors" if s.consume == "auto" else s.consume == "true"
