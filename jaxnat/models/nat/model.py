"""NAT-base (fairseq's vanilla non-autoregressive Transformer) and Coverage-NAT (Shan, Feng and Shao 2021).

**NAT-base** (the paper's §III-A): the encoder and its length classifier are CMLM's (`cmlm.CMLM`: a 256-way
length class from the mean-pooled encoder or a LENGTH token, weight α = ``nat.length_loss_weight``, 0.1);
the decoder reads ``[BOS, MASK × n, EOS]`` (``nat.decoder_input=mask``; no positional attention) and predicts
all n tokens in one bidirectional pass. Training: label-smoothed cross-entropy of the n tokens given the
reference length (eq. 4) + α × the length loss (eq. 15). ``nat.decoder_input=copy`` gives the decoder Gu et al.
(2018)'s uniformly copied source embeddings instead (fairseq's ``--src-embedding-copy``, `uniform_copy`).

**Coverage-NAT** (``nat.coverage``) replaces the top decoder layer by an *iterative coverage layer* run K
times with shared weights (``nat.train_iterations`` = K_train, ``nat.decode_iterations`` = K_dec,
5 and 5). Iteration 0 is the hidden states H⁰ and the inter-attention A⁰ of decoder layer L−1; iteration k:

* coverage (eq. 6): ``C^k[t, i] = min(Σ_{t' < t} A^{k−1}[t', i], 1)`` — the attention target positions before
  t paid to source token i in the previous iteration (`coverage`);
* ``Ĥ^k = SelfAttn(H^{k−1})`` (eq. 7); ``A^k = softmax(Ĥ^k E_encᵀ / √d + λ(1 − C^k))`` (eqs. 8–9), λ a
  trainable scalar initialised to 1; ``H^k = FFN(A^k E_enc)`` (eq. 10) — one decoder layer (with its
  residuals and layer norms, which the equations omit) whose cross-attention logits get the bias;
* the output is the token head on H^K. The K iterations are one ``nn.scan`` over the shared weights (any K),
  unrolled for speed on the CPU (`CoverageLayer`).

**Sentence-level coverage agreement** (SCA, ``nat.sca_weight`` = β): the source as a bag of words,
``Ē_src = Mean(ReLU(E_src W_s))`` (eq. 11), against the expected translation ``Ē_hyp = Mean_t(p_t W_e)``
(eqs. 12–13, W_e the target embedding matrix), ``L_cov = ‖Ē_src − Ē_hyp‖₂ / √d`` (eq. 14), added as
β × L_cov (eq. 16) in the fine-tuning phase (two-phase optimisation, docs/nat.md: a second run that starts
from the first with ``train.init_from``, a constant learning rate and β = 0.5).

Decoding is one mask-predict pass (`jaxnat.decoding.mask_predict` with T = 1) over ℓ candidate lengths
around the predicted one (length-parallel decoding), consecutive repeated tokens removed (the paper's
post-processing), and the candidate picked by the model's own score or by an AR rescorer (``nat.rescorer``).
docs/nat.md writes down every choice the paper leaves open.

A packed batch (several pairs a row, `jaxnat.models.packing`) computes every per-sentence quantity per segment:
the canvas, the length, the coverage (summed over the target steps of the query's own segment) and SCA's means.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxnat.decoding import mask_predict
from jaxnat.decoding.refine import forbid_reserved
from jaxnat.decoding.request import Supports
from jaxnat.models.cmlm.length import rescorer_extras
from jaxnat.models.cmlm.model import (CMLM, canvas_capacity, full_canvas, length_prediction_loss, mask_predict_generate,
                                mask_predict_options, real_counts, rescorer_module)
from jaxnat.models.insertion import head_runner, mean_loss
from jaxnat.models.losses import smoothed_cross_entropy
from jaxnat.models.packing import (broadcast_segments, is_segments, max_segments, segment_cumsum, segment_interior,
                                  segment_lengths, segment_mean, segment_positions)
from jaxnat.models.spec import ModelSpec
from jaxnat.models.transformer import DecoderLayer, TransformerConfig, attention_bias, rows_dense, token_mask
from jaxnat.oracle import real_mask


def coverage(attention: jax.Array, counted: jax.Array, segments: jax.Array | None = None) -> jax.Array:
    """Eq. 6: float32[B, T, S] ``C[t, i] = min(Σ_{t' < t, t' counted} A[t', i], 1)``.

    attention: float32[B, T, S], the previous iteration's inter-attention (mean over heads); counted: bool[B, T],
    the target steps whose attention counts: the n predicted positions (BOS, EOS and PAD are not steps).
    segments: int32[B, T], a packed batch's target segment ids: then only the steps t' of t's own segment.
    """
    a = jnp.where(counted[..., None], attention, 0.0)
    before = jnp.cumsum(a, axis=1) if segments is None else segment_cumsum(a, segments)
    return jnp.minimum(before - a, 1.0)


def source_words(src_mask: jax.Array) -> jax.Array:
    """bool[B, S]: the source words a coverage layer covers, BOS and EOS excluded. src_mask: bool[B, S] of
    [BOS … EOS, PAD …] rows, or int32[B, S] a packed batch's segment ids (every segment's BOS and EOS excluded)."""
    if jnp.issubdtype(src_mask.dtype, jnp.integer):
        return segment_interior(src_mask)
    after = jnp.pad(src_mask[:, 1:], ((0, 0), (0, 1)))      # a token follows: not the EOS
    return src_mask & after & (jnp.arange(src_mask.shape[1]) > 0)[None, :]


def uniform_copy(src_mask: jax.Array, tgt_mask: jax.Array) -> jax.Array:
    """int32[B, T]: the source position each canvas position copies (Gu et al. 2018's uniform copy, fairseq's
    ``--src-embedding-copy``): position t of a canvas of T_b tokens reads source position round(t · (S_b − 1) /
    (T_b − 1)) of its S_b (BOS and EOS included, so that they read each other; the ratio and product in float32
    and the rounding half to even, as fairseq computes them); 0 on padding. src_mask: bool[B, S] and tgt_mask:
    bool[B, T], or both int32 segment ids of a packed batch: then per segment, into the source's segment of the
    same id."""
    if not is_segments(tgt_mask):
        src_len = jnp.sum(src_mask, axis=1, dtype=jnp.int32)[:, None]
        tgt_len = jnp.sum(tgt_mask, axis=1, dtype=jnp.int32)[:, None]
        start, position = 0, jnp.arange(tgt_mask.shape[1], dtype=jnp.int32)[None]
    else:  # a packed row: segments k = 1, 2, … one after another on both sides
        k = max(max_segments(src_mask.shape[1]), max_segments(tgt_mask.shape[1]))
        src_lengths = segment_lengths(src_mask, k=k)
        src_len = broadcast_segments(src_lengths, tgt_mask)
        tgt_len = broadcast_segments(segment_lengths(tgt_mask, k=k), tgt_mask)
        start = broadcast_segments(jnp.cumsum(src_lengths, axis=1) - src_lengths, tgt_mask)
        position = segment_positions(tgt_mask)
    step = (src_len - 1).astype(jnp.float32) / jnp.maximum(tgt_len - 1, 1).astype(jnp.float32)
    index = start + jnp.round(step * position.astype(jnp.float32)).astype(jnp.int32)
    return jnp.where(tgt_mask > 0, index, 0)


class CoverageIteration(nn.Module):
    """One iteration of the coverage layer (eqs. 6–10): (H^{k−1}, A^{k−1}) → (H^k, A^k).

    stop_gradient: C^k enters as a constant (the paper computes it "manually"); forced_lambda: λ replaced by this
    value (a decoding control: 0 removes the coverage bias), None = the trained λ."""

    cfg: TransformerConfig
    train: bool = False
    stop_gradient: bool = False
    forced_lambda: float | None = None

    @nn.compact
    def __call__(self, carry, self_bias, memory, cross_bias, counted, coverable, segments=None):
        hidden, attention = carry                                            # [B, T, D], [B, T, S]
        scale = self.param("coverage_scale", nn.initializers.ones, ())      # λ of eq. 9
        if self.forced_lambda is not None:
            scale = jnp.asarray(self.forced_lambda, scale.dtype)
        covered = coverage(attention, counted, segments)
        if self.stop_gradient:
            covered = jax.lax.stop_gradient(covered)
        uncovered = jnp.where(coverable[:, None, :], 1.0 - covered, 0.0)   # [B, T, S]: only coverable tokens
        bias = cross_bias + scale * uncovered[:, None]                      # [B, 1, T, S]: all heads
        layer = DecoderLayer(self.cfg, name="layer")
        hidden, weights = layer(hidden, self_bias, layer.cross_kv(memory), bias, self.train, return_attention=True)
        return (hidden, jnp.mean(weights, axis=1)), None


class CoverageLayer(nn.Module):
    """The iterative coverage layer: K iterations of one `CoverageIteration` (shared weights) as a scan.

    bos_eos: BOS and EOS are coverable too (jaxnat before it covered words only); stop_gradient, forced_lambda:
    `CoverageIteration`'s."""

    cfg: TransformerConfig
    bos_eos: bool = False
    stop_gradient: bool = False
    forced_lambda: float | None = None

    @nn.compact
    def __call__(self, hidden, attention, tokens, memory, src_mask, iterations: int, train: bool, segments=None):
        """hidden: float[B, T, D] and attention: float32[B, H, T, S] of decoder layer L−1; tokens: int32[B, T]
        the canvas; memory: float[B, S, D]; src_mask: bool[B, S]; iterations: K (static) → H^K float[B, T, D].
        A packed batch gives the canvas's segment ids ``segments`` int32[B, T] and the source's as ``src_mask``."""
        # unrolled: XLA's CPU backend runs a rolled loop's small ops one after another, and the step then trained at
        # 0.83-0.89x the AR model's FLOP rate on two cores against 0.94x unrolled (docs/benchmarks.md)
        scan = nn.scan(CoverageIteration, variable_broadcast="params", split_rngs={"params": False, "dropout": True},
                       in_axes=(nn.broadcast,) * 6, length=iterations, unroll=iterations)
        carry = (hidden, jnp.mean(attention, axis=1))
        mask = token_mask(tokens) if segments is None else segments
        coverable = src_mask > 0 if self.bos_eos else source_words(src_mask)
        (hidden, _), _ = scan(self.cfg, train, self.stop_gradient, self.forced_lambda, name="iteration")(
            carry, attention_bias(mask), memory, attention_bias(src_mask, query_mask=mask),
            real_mask(tokens) if segments is None else segment_interior(segments), coverable, segments)
        return hidden


class NAT(CMLM):
    """CMLM's encoder, length classifier and token head; a decoder read once over a fully masked canvas (or, with
    ``decoder_input`` "copy", the source's embeddings copied onto it: `uniform_copy`), with Coverage-NAT's coverage
    layer on top when ``coverage`` (``coverage_options``: `CoverageLayer`'s bos_eos, stop_gradient,
    forced_lambda); W_s for the SCA source representation."""

    coverage: bool = False
    coverage_options: tuple = (False, False, None)
    decoder_input: str = "mask"

    def plain_layers(self) -> int:
        return self.cfg.dec_layers - 1 if self.coverage else self.cfg.dec_layers

    def setup(self):
        super().setup()
        if self.coverage:
            self.coverage_layer = CoverageLayer(self.cfg, *self.coverage_options, name="coverage")
        self.source_map = rows_dense(self.cfg.d_model, use_bias=False, kernel_init=self.cfg.kernel_init(),
                                   name="source_map")  # W_s of eq. 11

    def token_logits(self, tokens: jax.Array, memory: jax.Array, src_mask: jax.Array, train: bool = False,
                     iterations: int = 1, segments=None, src: jax.Array | None = None) -> jax.Array:
        """tokens: int32[B, T] canvases → float32[B, T, V]; iterations: K of the coverage layer (static). A packed
        batch gives the canvas's segment ids ``segments`` int32[B, T] and the source's as ``src_mask``. src:
        int32[B, S], the sources (read by ``decoder_input`` "copy" alone)."""
        mask = token_mask(tokens) if segments is None else segments
        if self.decoder_input == "copy":  # the scaled source embeddings, plus the canvas's positions
            copied = jnp.take_along_axis(self.src_embed.lookup(src) * self.src_embed.scale,
                                         uniform_copy(src_mask, mask)[..., None], axis=1)
            x = self.tgt_embed(tokens, train, segments=segments, vectors=copied)
        else:
            x = self.embed_target(tokens, train, segments)
        if not self.coverage:
            return self.project(self.decoder(x, mask, memory, src_mask, train))
        hidden, attention = self.decoder(x, mask, memory, src_mask, train, return_attention=True, finish=False)
        hidden = self.coverage_layer(hidden, attention, tokens, memory, src_mask, iterations, train, segments)
        return self.project(self.decoder.output_norm(hidden))

    def source_summary(self, src: jax.Array, segments=None) -> jax.Array:
        """Eq. 11: float32[B, D] ``Mean(ReLU(E_src W_s))`` over the real source tokens (BOS/EOS excluded); per
        segment, float32[B, K, D], with ``segments`` (int32[B, S], a packed batch's)."""
        mapped = nn.relu(self.source_map(self.src_embed.lookup(src)))
        if segments is not None:
            return segment_mean(mapped, segments, segment_interior(segments))
        words = real_mask(src)[..., None]
        return jnp.sum(jnp.where(words, mapped, 0.0), axis=1) / jnp.maximum(jnp.sum(words, axis=1), 1)

    def expected_embedding(self, logits: jax.Array) -> jax.Array:
        """Eq. 12: float32[B, T, V] logits → float32[B, T, D] ``p_t W_e``, the expected target embedding."""
        return self.tgt_embed.expected(jax.nn.softmax(logits, axis=-1))

    def __call__(self, src, tokens, train: bool = False):
        memory, length_logits = self.encode(src, train)
        logits = self.token_logits(tokens, memory, token_mask(src), train, src=src)
        return length_logits, logits, self.source_summary(src)


def coverage_agreement(src_summary: jax.Array, expected: jax.Array, counted: jax.Array,
                       segments: jax.Array | None = None) -> jax.Array:
    """Eqs. 13–14: float32[B] ``‖Ē_src − Mean_t E_hyp,t‖₂ / √d``. src_summary: float32[B, D]; expected:
    float32[B, T, D]; counted: bool[B, T], the target steps averaged. With ``segments`` (int32[B, T], a packed
    batch's target segment ids) per segment: src_summary float32[B, K, D] → float32[B, K]."""
    if segments is None:
        steps = counted[..., None]
        hyp = jnp.sum(jnp.where(steps, expected, 0.0), axis=1) / jnp.maximum(jnp.sum(steps, axis=1), 1)
    else:
        hyp = segment_mean(expected, segments, counted)
    # the small constant keeps the gradient of the norm finite where the two coincide
    return jnp.sqrt(jnp.sum((src_summary - hyp) ** 2, axis=-1) + 1e-12) / math.sqrt(src_summary.shape[-1])


def nat_loss(model: NAT, params, batch: dict, rng, *, label_smoothing: float, length_loss_weight: float = 0.1,
             length_offset: bool = False, length_with_ends: bool = False, iterations: int = 5,
             sca_weight: float = 0.0, train: bool = True):
    """L_mle + α L_length (eq. 15), + β L_coverage with ``sca_weight`` β > 0 (eq. 16).

    batch['src']: int32[B, S], batch['tgt']: int32[B, T] ([BOS … EOS] rows), or a packed batch (several pairs a
    row, with 'src_seg' and 'tgt_seg': every sentence below is then a segment). The decoder reads the reference's
    canvas ``[BOS, MASK × n, EOS]`` and predicts its n tokens: label-smoothed CE, mean over tokens (eq. 4); the
    length loss as CMLM's, mean over sentences; L_coverage (eq. 14) mean over sentences. Returns
    ``(loss · n, aux)`` with n the target's tokens (BOS/EOS included, as the other models); aux has 'nll'
    (· n), 'count', 'length_loss' and, with SCA, 'coverage_loss'.
    """
    src, tgt = batch["src"], batch["tgt"]
    src_seg, tgt_seg = batch.get("src_seg"), batch.get("tgt_seg")  # a packed batch's segment ids, or None
    k_enc, k_dec = jax.random.split(rng)
    apply = head_runner(model, params, train)
    memory, length_logits = apply("encode", src, segments=src_seg, key=k_enc)
    canvas, predicted = full_canvas(tgt, tgt_seg)
    src_mask = token_mask(src) if src_seg is None else src_seg
    logits = model.apply(params, canvas, memory, src_mask, train=train, iterations=iterations, segments=tgt_seg,
                         src=src, method="token_logits", rngs={"dropout": k_dec})
    tok_sum, nll_sum, count = smoothed_cross_entropy(logits, tgt, predicted, label_smoothing)
    length_loss = length_prediction_loss(length_logits, real_counts(src, src_seg), real_counts(tgt, tgt_seg),
                                         length_offset, length_with_ends)
    loss = mean_loss(tok_sum, count) + length_loss_weight * length_loss
    n = jnp.sum(token_mask(tgt), dtype=jnp.float32)
    aux = {"nll": mean_loss(nll_sum, count) * n, "count": n, "length_loss": length_loss}
    if sca_weight > 0:  # static
        live = jnp.any(predicted, axis=1) if tgt_seg is None else segment_lengths(tgt_seg, predicted) > 0
        src_summary = model.apply(params, src, src_seg, method="source_summary")
        expected = model.apply(params, logits, method="expected_embedding")
        agreement = coverage_agreement(src_summary, expected, predicted, tgt_seg)
        aux["coverage_loss"] = mean_loss(jnp.sum(jnp.where(live, agreement, 0.0)), jnp.sum(live, dtype=jnp.float32))
        loss = loss + sca_weight * aux["coverage_loss"]
    return loss * n, aux


SUPPORTS = Supports(counts=("chosen_length", "repeats"), score=True)


def nat_forced(module: NAT, params, src: jax.Array, tgt: jax.Array, *, length_offset: bool, length_with_ends: bool,
               iterations: int, fairseq: bool = False) -> dict:
    """`ModelSpec.score`: log P(y | x) = log P(|y| | x) + Σ_i log P(y_i | x, |y|), the length classifier's
    probability of y's length (−inf for a length without a class of its own, beyond the 256) and each token's on
    the canvas [BOS, MASK × |y|, EOS], as the one mask-predict pass reads them: jaxnat's rules over the ids a pass
    may write (the reserved ones barred, renormalised), fairseq's over every id and every position, BOS and EOS
    included (its NAT predicts them too). 'score' is the pass's candidate score, the mean of those positions'
    log-probabilities (the length not in it), which picks among the length candidates. src, tgt: int32[B, S],
    int32[B, T] [BOS … EOS] rows; iterations: the coverage layer's K."""
    memory, length_logits = module.apply(params, src, method="encode")
    n_tgt, n_src = real_counts(tgt), real_counts(src)
    cls = n_tgt - n_src + mask_predict.LENGTH_OFFSET if length_offset else n_tgt + 2 * length_with_ends
    length_lp = jnp.take_along_axis(jax.nn.log_softmax(length_logits.astype(jnp.float32)),
                                    jnp.clip(cls, 0, mask_predict.LENGTH_CLASSES - 1)[:, None], axis=1)[:, 0]
    length_lp = jnp.where((cls >= 0) & (cls < mask_predict.LENGTH_CLASSES), length_lp, -jnp.inf)
    canvas = mask_predict.canvases(n_tgt, tgt.shape[1])
    logits = module.apply(params, canvas, memory, token_mask(src), iterations=iterations, src=src,
                          method="token_logits").astype(jnp.float32)
    scored = token_mask(tgt) if fairseq else real_mask(tgt)
    lp = jax.nn.log_softmax(logits if fairseq else forbid_reserved(logits))
    tokens_lp = jnp.sum(jnp.where(scored, jnp.take_along_axis(lp, tgt[..., None], axis=2)[..., 0], 0.0), axis=1)
    return {"logp": length_lp + tokens_lp, "score": tokens_lp / jnp.maximum(jnp.sum(scored, axis=1), 1)}


def coverage_lambda(params) -> dict:
    """{'coverage_lambda': λ}, the coverage layer's trained scale (eq. 9), for the history and metrics.json."""
    return {"coverage_lambda": float(params["params"]["coverage"]["iteration"]["coverage_scale"])}


def build_spec(config, cfg: TransformerConfig, pieces) -> ModelSpec:
    del pieces  # no constraints: every piece may follow any other
    s, t = config.nat, config.train
    module = NAT(cfg, s.length_prediction, length_bias=s.length_bias, coverage=s.coverage,
                 coverage_options=(s.coverage_bos_eos, s.coverage_stop_gradient, None), decoder_input=s.decoder_input)
    # decoding may force λ (nat.coverage_lambda ≥ 0, a control: 0 removes the coverage bias)
    decoder = module.clone(coverage_options=(s.coverage_bos_eos, False,
                                             s.coverage_lambda if s.coverage_lambda >= 0 else None))
    capacity = canvas_capacity(cfg, config.eval)
    options = mask_predict_options(s, config.eval, iterations=1)
    plan, generate = mask_predict_generate(decoder, options, capacity, rescorer_module(s, cfg), SUPPORTS.counts,
                                           ends_predicted=True, reads_source=s.decoder_input == "copy",
                                           iterations=s.decode_iterations)

    def init(rng, batch):
        return module.init(rng, batch["src"][:1], batch["tgt"][:1])

    def loss(params, batch, rng, train=True):
        return nat_loss(module, params, batch, rng, label_smoothing=t.label_smoothing,
                        length_loss_weight=s.length_loss_weight, length_offset=s.length_offset,
                        length_with_ends=s.length_with_ends,
                        iterations=s.train_iterations, sca_weight=s.sca_weight, train=train)

    def score(params, request, tgt) -> dict:
        return nat_forced(decoder, params, request.src, tgt, length_offset=s.length_offset,
                          length_with_ends=s.length_with_ends, iterations=s.decode_iterations,
                          fairseq=config.eval.search_rules == "fairseq")

    terms = ("length_loss",) + (("coverage_loss",) if s.sca_weight > 0 else ())
    return ModelSpec("nat", cfg, module, init, loss, generate, capacity, SUPPORTS, plan, packs=True, terms=terms,
                     summary=coverage_lambda if s.coverage else None, request_extras=rescorer_extras, score=score)
