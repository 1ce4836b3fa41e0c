"""CMLM (Ghazvininejad et al. 2019, Mask-Predict) and CMLMC (Huang, Pérez and Volkovs 2022).

A conditional masked language model: an encoder, a bidirectional decoder over a target canvas in which some
tokens are MASK, and a tied token head that predicts every masked token at once. The target length is
predicted from the source, in one of two published forms (``cmlm.length_prediction``):

* ``token`` — a LENGTH vector appended to the embedded source runs through the encoder with it; its output
  feeds a 256-way classifier (Mask-Predict; CMLMC §3.3). It has no position, so it reads the same whatever
  the padding, and the decoder does not attend to it;
* ``pooled`` — the mean of the encoder's outputs over the source feeds the classifier (fairseq's CMLM).

A packed batch (several pairs a row, `jaxnat.models.packing`) predicts one length per segment: a LENGTH entry per
segment that sees only its segment, or a mean over each segment.

With ``cmlm.length_offset`` the classes are ``n_tgt − n_src + 128`` instead of ``n_tgt`` (n: real tokens,
BOS/EOS excluded), clipped to 0 … 255; with ``cmlm.length_with_ends`` (a fairseq model's) ``n_tgt + 2``.

CMLMC adds, each part its own switch (the ablation rows of the paper's Tables 1 and A.1):

* **RevealPosition** (§3.1) = ``cmlm.masked_attn`` — a causal self-attention sublayer in every decoder layer
  between the full self-attention and the cross-attention — and ``cmlm.concat_pe`` — the decoder input is
  ``Linear(2d → d)([token embedding, position embedding])`` instead of their sum;
* **the correction loss** (§3.2) = ``cmlm.correction``: decode the fully masked target, replace each
  observed (unmasked) reference token with probability p = 0.3 by that first pass's prediction, and learn to
  restore them (eq. 1); the mask loss (eq. 2) still conditions on gold tokens only; the token loss is their
  sum (eq. 3). `cmlm_loss` has the whole objective; docs/cmlm.md the choices.

Decoding is mask-predict with a length beam (`jaxnat.decoding.mask_predict`).
"""

from __future__ import annotations

import json
import os

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxnat.data.vocab import MASK_ID
from jaxnat.decoding import mask_predict, mask_predict_fairseq
from jaxnat.decoding.request import DecodeRequest, Supports
from jaxnat.decoding.refine import forbid_reserved, static_length_cap
from jaxnat.models.insertion import head_runner, mean_loss, model_choice
from jaxnat.errors import ConfigError
from jaxnat.models.ar.model import ARTransformer, ar_score
from jaxnat.models.cmlm.length import rescorer_extras
from jaxnat.models.losses import smoothed_cross_entropy
from jaxnat.models.packing import max_segments, segment_interior, segment_lengths, segment_lowest, segment_mean
from jaxnat.models.spec import ModelSpec, word_glue
from jaxnat.models.dropout import Dropout
from jaxnat.models.transformer import (absent_logits, Decoder, embedders, Encoder, rows_dense, TransformerConfig,
                                      config_from, token_mask)
from jaxnat.oracle import apply_random_mask, draw_subset, full_mask, real_mask

# The CMLMC authors' training recipe (their trainNAT.sh, beside the paper): BERT initialisation, token embeddings
# not scaled by √d (--no-scale-embedding), fairseq's separate encoder and decoder position tables; the model
# settings of every config in configs/cmlm/ (docs/cmlm.md)
AUTHORS_RECIPE = dict(bert_init=True, scale_embeddings=False, separate_positions=True)


class CMLM(nn.Module):
    """Encoder (+ length classifier) and a bidirectional decoder with the tied token head.

    length_prediction: "token" | "pooled"; masked_attn, concat_pe: the two halves of RevealPosition; length_bias:
    the length classifier's bias (fairseq's has none).
    """

    cfg: TransformerConfig
    length_prediction: str = "token"
    masked_attn: bool = False
    concat_pe: bool = False
    length_bias: bool = True

    def setup(self):
        c = self.cfg
        self.src_embed, self.tgt_embed = embedders(c)
        self.encoder = Encoder(c, name="encoder")
        self.decoder = Decoder(c, self.plain_layers(), causal=False, masked_attn=self.masked_attn, name="decoder")
        self.length_head = rows_dense(mask_predict.LENGTH_CLASSES, use_bias=self.length_bias,
                                      kernel_init=c.kernel_init(), name="length_head")
        if self.length_prediction == "token":
            self.length_token = self.param("length_token", c.embed_init(), (c.d_model,))
        if self.concat_pe:
            self.combine = rows_dense(c.d_model, kernel_init=c.kernel_init(), dtype=c.compute_dtype, name="combine")
            self.combine_drop = Dropout(c.dropout if c.embed_dropout < 0 else c.embed_dropout)
        if not c.tie_output:
            self.output = rows_dense(c.tgt_vocab_size, use_bias=False, kernel_init=c.kernel_init(), name="output")

    def plain_layers(self) -> int:
        """The decoder stack's layers (a model built on this one may put a layer of its own on top)."""
        return self.cfg.dec_layers

    def encode(self, src: jax.Array, train: bool = False, segments=None) -> tuple[jax.Array, jax.Array]:
        """src: int32[B, S] → (memory float[B, S, D], length logits float32[B, 256]). segments: int32[B, S], the
        segment ids of a packed batch: then one length per segment, float32[B, K, 256] (slot k − 1: segment k)."""
        x = self.src_embed(src, train, segments=segments)
        mask = token_mask(src) if segments is None else segments
        if self.length_prediction == "token":
            if segments is None:
                entries = jnp.ones((x.shape[0], 1), bool)
            else:  # one entry per segment slot, with its segment's id (attending only to it); 0 for an empty slot
                slots = segment_lengths(segments)
                entries = jnp.where(slots > 0, jnp.arange(1, slots.shape[1] + 1, dtype=segments.dtype), 0)
            length = jnp.broadcast_to(self.length_token * self.src_embed.scale,
                                      entries.shape + (x.shape[2],))
            out = self.encoder(jnp.concatenate([x, length.astype(x.dtype)], axis=1),
                               jnp.concatenate([mask, entries.astype(mask.dtype)], axis=1), train)
            memory, feature = out[:, :src.shape[1]], out[:, src.shape[1]:]
            feature = feature[:, 0] if segments is None else feature
        elif segments is not None:
            memory = self.encoder(x, mask, train)
            feature = segment_mean(memory, segments, segments > 0)
        else:
            memory = self.encoder(x, mask, train)
            weights = mask[..., None].astype(jnp.float32)  # the mean in float32, whatever the compute dtype
            feature = jnp.sum(memory.astype(jnp.float32) * weights, axis=1) / jnp.maximum(jnp.sum(weights, axis=1), 1.0)
        return memory, self.length_head(feature).astype(jnp.float32)

    def embed_target(self, tokens: jax.Array, train: bool, segments=None) -> jax.Array:
        """tokens: int32[B, T] → float[B, T, D]: token + position embeddings, summed or (concat_pe) combined
        by a linear map of their concatenation (CMLMC §3.1, y'_i = FFN([y_i, pe_i])). segments: int32[B, T] of a
        packed batch (positions restart with each segment) or None."""
        if not self.concat_pe:
            return self.tgt_embed(tokens, train, segments=segments)
        tok = self.tgt_embed.lookup(tokens) * self.tgt_embed.scale
        pos = jnp.broadcast_to(self.tgt_embed.position_codes(tokens, segments=segments), tok.shape)
        x = self.combine(jnp.concatenate([tok, pos], axis=-1).astype(self.cfg.compute_dtype))
        return self.combine_drop(x, deterministic=not train)

    def token_logits(self, tokens: jax.Array, memory: jax.Array, src_mask: jax.Array,
                     train: bool = False, segments=None) -> jax.Array:
        """tokens: int32[B, T] (MASK where to predict) → float32[B, T, V]. A packed batch gives the canvas's
        segment ids ``segments`` int32[B, T] and the source's as ``src_mask`` (int32[B, S])."""
        mask = token_mask(tokens) if segments is None else segments
        h = self.decoder(self.embed_target(tokens, train, segments), mask, memory, src_mask, train)
        return self.project(h)

    def project(self, h: jax.Array) -> jax.Array:
        """float[B, T, D] → float32[B, T, V], the tied (or separate) token head."""
        logits = self.tgt_embed.attend(h) if self.cfg.tie_output else self.output(h).astype(jnp.float32)
        return absent_logits(self.cfg, logits)

    def __call__(self, src, tokens, train: bool = False):
        memory, length_logits = self.encode(src, train)
        return length_logits, self.token_logits(tokens, memory, token_mask(src), train)


# ----------------------------------------------------------------------------------------------- training

def draw_substitution(key: jax.Array, shape: tuple[int, int]) -> jax.Array:
    """The correction loss's random numbers: f32[B, T] ~ U[0, 1), one per target position."""
    return jax.random.uniform(key, shape)


def substitution_mask(observed: jax.Array, u: jax.Array, p: float, fixed_count: bool,
                      segments: jax.Array | None = None) -> jax.Array:
    """bool[B, T]: which observed reference tokens the correction loss replaces by the first pass's prediction.

    observed: bool[B, T]; u: f32[B, T] ~ U[0, 1). Each observed token independently with probability p when not
    ``fixed_count`` (CMLMC §3.2, "with probability p we replace each token"); else exactly ⌊p · #observed⌋ per
    row, the observed tokens of lowest u (a uniformly random subset: the count the authors' code takes), or per
    segment with ``segments`` (int32[B, T], packed rows of several sentences).
    """
    if not fixed_count:
        return observed & (u < p)
    if segments is not None:
        return segment_lowest(observed, p, u, segments)
    count = jnp.floor(p * jnp.sum(observed, axis=1).astype(jnp.float32)).astype(jnp.int32)
    rank = jnp.argsort(jnp.argsort(jnp.where(observed, u, 2.0), axis=1, stable=True), axis=1)
    return observed & (rank < count[:, None])


def real_counts(tokens: jax.Array, segments: jax.Array | None = None) -> jax.Array:
    """The real tokens (BOS/EOS excluded) of each sentence: int32[B] of tokens int32[B, L], or of each segment,
    int32[B, K], with ``segments`` (int32[B, L], a packed batch's)."""
    if segments is None:
        return jnp.sum(real_mask(tokens), axis=1, dtype=jnp.int32)
    return segment_lengths(segments, segment_interior(segments))


def full_canvas(tokens: jax.Array, segments: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """`full_mask`: (int32[B, L] the canvas, bool[B, L] the masked positions), every real token MASK; with
    ``segments`` (int32[B, L], a packed batch's) every segment's, its BOS and EOS kept."""
    if segments is None:
        return full_mask(tokens)
    real = segment_interior(segments)
    return jnp.where(real, MASK_ID, tokens), real


def length_prediction_loss(length_logits: jax.Array, n_src: jax.Array, n_tgt: jax.Array, offset: bool,
                           with_ends: bool = False) -> jax.Array:
    """float32[]: cross-entropy of the target's length class (`mask_predict.length_classes`), mean over the
    sentences with a target (not a batch's filler rows or empty segment slots). length_logits: float32[..., 256];
    n_src, n_tgt: int32[...] the sentences' real tokens (`real_counts`: [B], or [B, K] per segment)."""
    live = n_tgt > 0
    classes = mask_predict.length_classes(n_tgt, n_src, offset, with_ends)
    nll = -jnp.sum(jax.nn.log_softmax(length_logits) * jax.nn.one_hot(classes, mask_predict.LENGTH_CLASSES), axis=-1)
    return mean_loss(jnp.sum(jnp.where(live, nll, 0.0)), jnp.sum(live, dtype=jnp.float32))


def cmlm_loss(model: CMLM, params, batch: dict, rng, *, label_smoothing: float, length_loss_weight: float = 0.1,
              length_offset: bool = False, length_with_ends: bool = False, correction: bool = False,
              correction_p: float = 0.3,
              correction_fixed_count: bool = False, correction_mean: bool = False, train: bool = True,
              keep_inputs: bool = False, draws: dict | None = None):
    """The CMLM objective, with CMLMC's correction loss when ``correction``.

    batch['src']: int32[B, S], batch['tgt']: int32[B, T] ([BOS … EOS] rows, PAD after), or a packed batch (several
    pairs a row, with 'src_seg' and 'tgt_seg': every sentence below is then a segment). Per sentence,
    m ~ U{1 … n} real target tokens are masked (`random_mask`); the rest are observed.

    * L_mask (eq. 2): label-smoothed CE of the masked tokens given the observed gold ones, mean over masked
      tokens;
    * L_corr (eq. 1, with ``correction``): the decoder's argmax on the fully masked target (no gradient)
      replaces each observed token with probability ``correction_p`` (or exactly ⌊p · #observed⌋ of them with
      ``correction_fixed_count``); label-smoothed CE of the reference at the replaced positions, the masked ones
      still MASK, mean over replaced tokens;
    * token loss = L_mask + L_corr (eq. 3), or their mean with ``correction_mean`` (the authors' code);
    * length loss: CE of the length class (`mask_predict.length_classes`), mean over sentences, times
      ``length_loss_weight``.

    Returns ``(loss · n, aux)`` with n the target's real tokens (BOS/EOS included, as the other models), so the
    trainer's ``loss_sum / count`` is the loss; aux has 'nll' (L_mask's nll · n), 'count' and each term. With
    ``keep_inputs`` (for tests), also the decoder inputs ('masked_in'; with correction 'corr_in' and the first
    pass's 'predicted') and every random number ('draws'). ``draws`` (for tests) gives those numbers instead of
    drawing them from ``rng``: {'mask': (v, scores) as `draw_subset`'s, 'substitution': as `draw_substitution`'s}.
    """
    src, tgt = batch["src"], batch["tgt"]
    src_seg, tgt_seg = batch.get("src_seg"), batch.get("tgt_seg")  # a packed batch's segment ids, or None
    k_mask, k_enc, k_dec, k_full, k_sub, k_corr = jax.random.split(rng, 6)
    apply = head_runner(model, params, train)
    memory, length_logits = apply("encode", src, segments=src_seg, key=k_enc)
    src_mask = token_mask(src) if src_seg is None else src_seg

    real = real_mask(tgt) if tgt_seg is None else segment_interior(tgt_seg)
    length_loss = length_prediction_loss(length_logits, real_counts(src, src_seg), real_counts(tgt, tgt_seg),
                                         length_offset, length_with_ends)

    if draws is None:
        draws = {"mask": draw_subset(k_mask, tgt.shape, None if tgt_seg is None else max_segments(tgt.shape[1]))}
        if correction:  # static
            draws["substitution"] = draw_substitution(k_sub, tgt.shape)
    if tgt_seg is None:
        masked_in, masked = apply_random_mask(tgt, *draws["mask"])
    else:  # ⌊n·v⌋ + 1 of each segment's n real tokens, with the v of its slot
        masked = segment_lowest(real, *draws["mask"], tgt_seg, offset=1)
        masked_in = jnp.where(masked, MASK_ID, tgt)
    logits = apply("token_logits", masked_in, memory, src_mask, segments=tgt_seg, key=k_dec)
    mask_sum, mask_nll, mask_count = smoothed_cross_entropy(logits, tgt, masked, label_smoothing)
    mask_loss = mean_loss(mask_sum, mask_count)
    token_loss, aux = mask_loss, {"mask_loss": mask_loss}

    if correction:  # static
        first_pass = apply("token_logits", full_canvas(tgt, tgt_seg)[0], memory, src_mask, segments=tgt_seg,
                           key=k_full)
        predicted = model_choice(forbid_reserved(first_pass)).astype(tgt.dtype)
        replaced = substitution_mask(real & ~masked, draws["substitution"], correction_p, correction_fixed_count,
                                     tgt_seg)
        corr_in = jnp.where(replaced, predicted, masked_in)
        corr_logits = apply("token_logits", corr_in, memory, src_mask, segments=tgt_seg, key=k_corr)
        corr_sum, _, corr_count = smoothed_cross_entropy(corr_logits, tgt, replaced, label_smoothing)
        corr_loss = mean_loss(corr_sum, corr_count)
        token_loss = (mask_loss + corr_loss) / 2 if correction_mean else mask_loss + corr_loss
        aux.update(correction_loss=corr_loss, replaced=jnp.sum(replaced, dtype=jnp.float32))
        if keep_inputs:
            aux["corr_in"], aux["predicted"] = corr_in, predicted

    n = jnp.sum(token_mask(tgt), dtype=jnp.float32)
    aux.update(nll=mean_loss(mask_nll, mask_count) * n, count=n, length_loss=length_loss)
    if keep_inputs:
        aux.update(masked_in=masked_in, draws=draws)
    return (token_loss + length_loss_weight * length_loss) * n, aux


# ----------------------------------------------------------------------------------------------- decoding

SUPPORTS = Supports(soft_constraints=True, hard_constraints=True, max_phrases=8, counts=("iterations", "chosen_length"))


def rescorer_module(section, cfg: TransformerConfig):
    """The AR model of the section's rescorer (its architecture from its workdir's config.json; this run's
    vocabulary), or None. `jaxnat.restore.load_aux` checks the rest (an AR run, the same vocabulary)."""
    path = section.rescorer
    if not path:
        return None
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            recorded = json.load(f)["model"]
    except (OSError, ValueError, KeyError) as e:
        raise ConfigError(f"rescorer={path}: no readable config.json of a trained run "
                          f"({type(e).__name__})") from None
    return ARTransformer(config_from(recorded, cfg.src_vocab_size, cfg.tgt_vocab_size))


def mask_predict_options(s, e, iterations: int, update_all: bool = False) -> mask_predict.Options:
    """The decoding options of a length-predicting model from its config section ``s`` (`length_defaults`) and
    ``e`` = config.eval (``iterations`` passes)."""
    return mask_predict.Options(
        iterations=iterations, length_beam=s.length_beam, centred=s.length_beam_mode == "centred",
        length_offset=s.length_offset, length_with_ends=s.length_with_ends, any_order=e.constraint_order == "any",
        stop_early=not e.run_all_iterations,
        by_probability=s.candidate_score == "probability", cap_min=e.length_cap_min, cap_ratio=e.length_cap_ratio,
        dedup=s.remove_repeats, update_all=update_all, rules=e.search_rules)


def updates_all(s) -> bool:
    """cmlm.update_all resolved: "auto" revises every token in a model trained with the correction loss."""
    return bool(s.correction) if s.update_all == "auto" else s.update_all == "true"


def canvas_capacity(cfg: TransformerConfig, eval_cfg):
    """capacity(src_len) → the canvas width for sources padded to src_len (BOS/EOS included); under fairseq's
    rules, which cap no length, the model's longest."""
    def capacity(src_len: int) -> int:
        if eval_cfg.search_rules == "fairseq":
            return cfg.max_len
        return static_length_cap(src_len, cfg.max_len, eval_cfg.length_cap_min, eval_cfg.length_cap_ratio)
    return capacity


def mask_predict_generate(module: CMLM, options: mask_predict.Options, capacity, rescorer, counts: tuple[str, ...],
                          continues=None, ends_predicted: bool = False, joins=None, trails=None,
                          reads_source: bool = False, **logits_kwargs):
    """(plan, generate) of a length-predicting model (`ModelSpec`): plan encodes the source and picks the
    candidate lengths (`mask_predict.candidates`); generate runs `mask_predict.decode` with the model's token
    head (``logits_kwargs``: static extra arguments of its ``token_logits``; ``reads_source``: it takes the
    sources too, as ``src``) on canvases as wide as the request's
    output, from the request's plan or its own; it reports the per-sentence ``counts`` the model declares.
    Under fairseq's rules (``options.rules``) a request without constraints is decoded as fairseq does
    (`mask_predict_fairseq`; ``ends_predicted``: its model predicts BOS and EOS too, as fairseq's NAT)."""
    def fairseq_rules(request: DecodeRequest) -> bool:
        return options.rules == "fairseq" and request.constraints is None

    def plan(params, request: DecodeRequest):
        """→ (int32[B, ℓ] candidate lengths, (memory float[B, S, D], the source mask bool[B, S]))."""
        src = request.src
        memory, length_logits = module.apply(params, src, method="encode")
        if fairseq_rules(request):
            lengths = mask_predict_fairseq.candidates(length_logits, src, request.width(capacity), options)
        else:
            lengths = mask_predict.candidates(length_logits, src, request.constraints, request.hard,
                                              request.width(capacity), options)
        return lengths, (memory, token_mask(src))

    def generate(params, request: DecodeRequest) -> dict:
        src = request.src
        lengths, (memory, src_mask) = request.extras["plan"] if "plan" in request.extras else plan(params, request)

        def token_logits(tokens, rows_of):
            """tokens: int32[R, L] canvases of the sentences ``rows_of`` (int32[R]) → float32[R, L, V]."""
            sources = {"src": src[rows_of]} if reads_source else {}
            return module.apply(params, tokens, memory[rows_of], src_mask[rows_of], method="token_logits",
                                **sources, **logits_kwargs)

        def rescore(tokens, rows_of):
            """The AR rescorer's log-probabilities of the length candidates (the section's rescorer)."""
            return ar_score(rescorer, request.extras["rescorer"], src, tokens, rows_of)

        if fairseq_rules(request):  # fairseq's argmax runs over every id
            out = mask_predict_fairseq.decode(token_logits, lengths, request.width(capacity), options, ends_predicted)
        else:
            rescoring = rescorer is not None and "rescorer" in request.extras
            out = mask_predict.decode(lambda tokens, rows_of: forbid_reserved(token_logits(tokens, rows_of)), lengths,
                                      src, request.constraints, request.hard, request.width(capacity), options,
                                      continues, rescore if rescoring else None, joins, trails)
        out["chosen_length"] = out.pop("length")
        return {k: v for k, v in out.items() if k in ("tokens", "score", "token_logp", "token_scored", *counts)}

    return plan, generate


def build_spec(config, cfg: TransformerConfig, pieces) -> ModelSpec:
    s, t = config.cmlm, config.train
    module = CMLM(cfg, s.length_prediction, s.masked_attn, s.concat_pe, s.length_bias)
    continues, joins, trails = word_glue(pieces)  # hard constraints: whole words
    capacity = canvas_capacity(cfg, config.eval)
    options = mask_predict_options(s, config.eval, s.mask_predict_iter, updates_all(s))
    plan, generate = mask_predict_generate(module, options, capacity, rescorer_module(s, cfg), SUPPORTS.counts,
                                           continues, joins=joins, trails=trails)

    def init(rng, batch):
        return module.init(rng, batch["src"][:1], batch["tgt"][:1])

    def loss(params, batch, rng, train=True):
        return cmlm_loss(module, params, batch, rng, label_smoothing=t.label_smoothing,
                         length_loss_weight=s.length_loss_weight, length_offset=s.length_offset,
                         length_with_ends=s.length_with_ends, correction=s.correction, correction_p=s.correction_p,
                         correction_fixed_count=s.correction_count == "fixed",
                         correction_mean=s.correction_combine == "mean", train=train)

    terms = ("mask_loss", "length_loss") + (("correction_loss",) if s.correction else ())
    return ModelSpec("cmlm", cfg, module, init, loss, generate, capacity, SUPPORTS, plan, packs=True, terms=terms,
                     request_extras=rescorer_extras)
