"""CTC-based non-autoregressive translation with glancing training (Libovický & Helcl 2018; Saharia et al. 2020;
Gu & Kong 2021, with Qian et al. 2021's glancing).

**Model.** A Transformer encoder reads the source; the decoder reads an *upsampled canvas* of
``λ × (source length)`` frames (λ = ``ctc.upsample``, 3 by default; the source's BOS and EOS count), capped at
``model.max_len``, whose inputs are the encoder's outputs copied uniformly — frame t reads source position
``⌊t · S_b / T_b⌋`` (``ctc.decoder_input=copy``) —, or blended by the authors' Gaussian weights around each
source position's block (``soft``), or the source token embeddings copied (``embedding``, as NAT's uniform
copy), plus the decoder's position codes. The decoder is bidirectional over the frames (padding frames masked)
and attends to the encoder; the tied token head's vocabulary has the blank: the reserved id PLH (4), which no
other part of this family uses (docs/ctc.md).

**Loss.** CTC (`lattice.ctc_nll`): −log of the probability summed over every alignment of the reference's
tokens (BOS/EOS not among them unless ``ctc.target_ends``) to the frames, summed over sentences and divided by
their tokens (``ctc.loss_mean=token``), or each sentence's divided by its length and averaged
(``sentence``: the authors' code, `F.ctc_loss(reduction="mean")`). Label smoothing as the authors' code:
``(1 − ε) · CTC + ε · mean over frames of −mean_v log p_t(v)``. A pair whose target cannot fit its frames
(``n + repeats > frames``) is left out of the loss and counted (the ``unfit`` term), never an inf or nan.

**Glancing** (``ctc.glancing``): a first decoder pass without gradient; the best CTC alignment of the reference
to the frames under it (`lattice.best_alignment`); the mismatches between its argmax and that alignment's
labels over the frames (the blank included, as Gu & Kong's code counts them); N = ratio × mismatches frames
(floored, or a Poisson draw of that mean: ``ctc.glance_count``), at most all frames but one, chosen uniformly;
their inputs replaced by the embedding of their aligned label (a token or the blank); the second pass, with
gradient, gives the loss over every frame. The ratio falls linearly from ``ctc.glance_start`` to
``ctc.glance_end`` over ``ctc.glance_steps`` updates (0: train.steps), read from the trainer's step number
(`ModelSpec.stepped`); validation reads the end of the schedule (and does not glance).

**Decoding**: greedy (the best path, collapsed), CTC prefix beam search with ``eval.beam_size`` > 1
(`search.prefix_beam`), or, with constraints, the constrained best path (`constrained.constrained_paths`; hard:
every phrase whole, CPR 100% whenever the frames can hold them; soft: ``ctc.soft_bonus`` per piece of each phrase
placed). A request with constraints gets frames for them: ``max(λ·S_b, what the phrases need)`` within the canvas.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxnat.argmax import argmax
from jaxnat.data.vocab import BOS_ID, EOS_ID, MASK_ID, PAD_ID, PLH_ID
from jaxnat.decoding.request import DecodeRequest, Supports
from jaxnat.decoding.search import Sampling, by_score, sample_keys, sampling_of, source_keys
from jaxnat.models.ctc.constrained import constrained_paths, constraint_frames
from jaxnat.models.ctc.lattice import NEG, best_alignment, ctc_nll, min_frames
from jaxnat.models.ctc.search import best_path, collapse, prefix_beam, sample_paths
from jaxnat.models.dat.glancing import glance_ratio  # GLAT's linear schedule, as DA-Transformer anneals it
from jaxnat.models.insertion import mean_loss
from jaxnat.models.spec import ModelSpec, skipped_unless, word_glue
from jaxnat.models.dropout import Dropout
from jaxnat.models.transformer import (Decoder, Encoder, TransformerConfig, absent_logits, embedders, rows_dense,
                                      token_mask)
from jaxnat.oracle import real_mask

BLANK_ID = PLH_ID  # the CTC blank: a reserved id no other part of this family reads or writes
FORBIDDEN = (PAD_ID, BOS_ID, EOS_ID, MASK_ID)  # never a frame's label at decoding (BOS/EOS frame the output)
SOFT_WIDTH = 0.3  # the authors' Gaussian weights exp(−(t − c_s)² / 0.3) over source positions s


def canvas_width(upsample: int, src_len: int, max_len: int) -> int:
    """The static number of frames of sources padded to src_len: λ · src_len within model.max_len."""
    return int(min(max_len, upsample * src_len))


def frame_counts(src: jax.Array, upsample: int, width: int, least: jax.Array | None = None) -> jax.Array:
    """int32[B]: row b's frames, λ × its source tokens (BOS/EOS included), at least ``least`` (int32[B]), within
    ``width``; 0 for an all-PAD row."""
    n = jnp.sum(token_mask(src), axis=1, dtype=jnp.int32)
    frames = upsample * n if least is None else jnp.maximum(upsample * n, least)
    return jnp.where(n > 0, jnp.minimum(frames, width), 0)


def copy_positions(src_len: jax.Array, frames: jax.Array, width: int) -> jax.Array:
    """int32[B, T]: the source position frame t copies, ⌊t · S_b / T_b⌋ (t // λ when T_b = λ S_b); 0 outside."""
    t = jnp.arange(width)[None, :]
    return jnp.where(t < frames[:, None], (t * src_len[:, None]) // jnp.maximum(frames[:, None], 1), 0)


def soft_weights(src_len: jax.Array, frames: jax.Array, width: int, src_width: int) -> jax.Array:
    """float32[B, T, S]: the authors' interpolation — frame t's weights over source positions s, a softmax of
    −(t − c_s)² / 0.3 with c_s = (s + ½) · T_b / S_b the centre of s's block of frames (padding excluded)."""
    scale = frames.astype(jnp.float32) / jnp.maximum(src_len, 1).astype(jnp.float32)
    centres = (jnp.arange(src_width, dtype=jnp.float32)[None, :] + 0.5) * scale[:, None]        # [B, S]
    t = jnp.arange(width, dtype=jnp.float32)[None, :, None]
    logits = -((t - centres[:, None, :]) ** 2) / SOFT_WIDTH
    inside = jnp.arange(src_width)[None, None, :] < src_len[:, None, None]
    return jax.nn.softmax(jnp.where(inside, logits, -1e9), axis=-1)


class CTCModel(nn.Module):
    """Encoder, upsampled decoder canvas, bidirectional decoder and the tied token head (the blank included).

    decoder_input: "copy" | "soft" | "embedding" (module docstring)."""

    cfg: TransformerConfig
    decoder_input: str = "copy"

    def setup(self):
        c = self.cfg
        self.src_embed, self.tgt_embed = embedders(c)
        self.encoder = Encoder(c, name="encoder")
        self.decoder = Decoder(c, c.dec_layers, causal=False, name="decoder")
        self.drop = Dropout(c.dropout if c.embed_dropout < 0 else c.embed_dropout)
        if not c.tie_output:
            self.output = rows_dense(c.tgt_vocab_size, use_bias=False, kernel_init=c.kernel_init(), name="output")

    def encode(self, src: jax.Array, train: bool = False) -> jax.Array:
        """src: int32[B, S] → memory float[B, S, D]."""
        return self.encoder(self.src_embed(src, train), token_mask(src), train)

    def frame_inputs(self, src: jax.Array, memory: jax.Array, frames: jax.Array, width: int) -> jax.Array:
        """float32[B, T, D]: the canvas's inputs before positions (the module docstring's three choices)."""
        n = jnp.sum(token_mask(src), axis=1, dtype=jnp.int32)
        if self.decoder_input == "soft":
            weights = soft_weights(n, frames, width, src.shape[1])
            return jnp.einsum("bts,bsd->btd", weights, memory.astype(jnp.float32))
        values = memory.astype(jnp.float32) if self.decoder_input == "copy" else (
            self.src_embed.lookup(src) * self.src_embed.scale)
        positions = copy_positions(n, frames, width)
        return jnp.take_along_axis(values, positions[..., None], axis=1)

    def frame_logits(self, src: jax.Array, memory: jax.Array, frames: jax.Array, width: int, train: bool = False,
                     glanced: jax.Array | None = None) -> jax.Array:
        """float32[B, T, V] per-frame logits of canvases of ``frames`` int32[B] frames (static width T). glanced:
        int32[B, T], the label whose embedding replaces a frame's input (glancing), −1 where none."""
        x = self.frame_inputs(src, memory, frames, width)
        if glanced is not None:
            tokens = self.tgt_embed.lookup(jnp.maximum(glanced, 0)) * self.tgt_embed.scale
            x = jnp.where((glanced >= 0)[..., None], tokens, x)
        x = x + self.tgt_embed.position_codes(jnp.zeros((1, width), jnp.int32))
        x = self.drop(x.astype(self.cfg.compute_dtype), deterministic=not train)
        mask = jnp.arange(width)[None, :] < frames[:, None]
        h = self.decoder(x, mask, memory, token_mask(src), train)
        logits = self.tgt_embed.attend(h) if self.cfg.tie_output else self.output(h).astype(jnp.float32)
        return absent_logits(self.cfg, logits)

    def __call__(self, src, upsample: int = 2, train: bool = False):
        memory = self.encode(src, train)
        width = canvas_width(upsample, src.shape[1], self.cfg.max_len)
        return self.frame_logits(src, memory, frame_counts(src, upsample, width), width, train)


# ----------------------------------------------------------------------------------------------- training

def ctc_targets(tgt: jax.Array, with_ends: bool) -> tuple[jax.Array, jax.Array]:
    """(labels int32[B, T], lengths int32[B]) of [BOS … EOS] rows: the real tokens (BOS/EOS too ``with_ends``),
    left-aligned, PAD after."""
    if with_ends:
        return tgt, jnp.sum(token_mask(tgt), axis=1, dtype=jnp.int32)
    real = real_mask(tgt)
    return jnp.where(real, tgt, PAD_ID)[:, 1:], jnp.sum(real, axis=1, dtype=jnp.int32)


def glance_choice(aligned: jax.Array, predicted: jax.Array, frames: jax.Array, live: jax.Array, ratio, key,
                  poisson: bool) -> tuple[jax.Array, jax.Array, jax.Array]:
    """GLAT on the best alignment: (glanced int32[B, T] — the aligned label at the glanced frames, −1 elsewhere —,
    mismatches int32[B], count int32[B]).

    aligned, predicted: int32[B, T] the alignment's labels and the first pass's argmax; frames: int32[B]; live:
    bool[B] (rows that glance: their target fits). count = ⌊ratio × mismatches⌋ (or a Poisson draw of that mean),
    at most frames − 1 (one frame always left to predict, as the authors' clamp); the glanced frames are the
    count frames of lowest uniform draw (a uniformly random subset)."""
    k_count, k_pick = jax.random.split(key)
    inside = jnp.arange(aligned.shape[1])[None, :] < frames[:, None]
    mismatches = jnp.sum(inside & (aligned != predicted), axis=1, dtype=jnp.int32)
    mean = ratio * mismatches.astype(jnp.float32)
    count = jax.random.poisson(k_count, mean).astype(jnp.int32) if poisson else jnp.floor(mean).astype(jnp.int32)
    count = jnp.where(live, jnp.clip(count, 0, jnp.maximum(frames - 1, 0)), 0)
    draws = jnp.where(inside, jax.random.uniform(k_pick, aligned.shape), 2.0)
    rank = jnp.argsort(jnp.argsort(draws, axis=1), axis=1)
    return jnp.where(rank < count[:, None], aligned, -1), mismatches, count


def ctc_loss(model: CTCModel, params, batch: dict, rng, *, upsample: int, label_smoothing: float,
             target_ends: bool = False, loss_mean: str = "token", glancing: bool = False, ratio=0.0,
             poisson: bool = False, train: bool = True, keep_inputs: bool = False):
    """The CTC objective (module docstring), with glancing when ``glancing`` and ``train``.

    batch['src']: int32[B, S], batch['tgt']: int32[B, T] ([BOS … EOS] rows, PAD after). Returns ``(loss · n,
    aux)``, n the target's tokens (BOS/EOS included, as every family): aux 'nll' (the CTC term · n), 'count',
    'unfit' (the fraction of the batch's pairs left out: a target longer than its frames allow) and, glancing,
    'glanced' (glanced frames / frames) and 'glance_ratio' (``ratio``: the schedule's value at this update).
    ``keep_inputs`` (tests): also the glancing's inputs and draws.
    """
    src, tgt = batch["src"], batch["tgt"]
    k_enc, k_first, k_glance, k_dec = jax.random.split(rng, 4)

    def apply(method, *args, key, **kwargs):
        return model.apply(params, *args, train=train, method=method, rngs={"dropout": key}, **kwargs)

    memory = apply("encode", src, key=k_enc)
    width = canvas_width(upsample, src.shape[1], model.cfg.max_len)
    frames = frame_counts(src, upsample, width)
    labels, lengths = ctc_targets(tgt, target_ends)
    fits = frames >= min_frames(labels, lengths)
    pairs = frames > 0                                              # not a filler row
    live = pairs & fits
    labels, lengths = jnp.where(live[:, None], labels, PAD_ID), jnp.where(live, lengths, 0)
    # terms of every call, validation's too (which reads the schedule's end and glances nothing)
    aux = {"glanced": jnp.float32(0.0), "glance_ratio": jnp.asarray(ratio, jnp.float32)} if glancing else {}
    glanced = None
    if glancing and train:  # static
        first = jax.lax.stop_gradient(apply("frame_logits", src, memory, frames, width, key=k_first))
        first = first.astype(jnp.float32)
        aligned, _ = best_alignment(first, frames, labels, lengths, BLANK_ID,
                                    log_norm=jax.nn.logsumexp(first, axis=-1))
        predicted = argmax(first)
        glanced, mismatches, count = glance_choice(aligned, predicted, frames, live, ratio, k_glance, poisson)
        aux["glanced"] = mean_loss(jnp.sum(count).astype(jnp.float32), jnp.sum(jnp.where(live, frames, 0)))
        if keep_inputs:
            aux.update(aligned=aligned, predicted=predicted, glanced_labels=glanced, mismatches=mismatches,
                       glance_count=count)
    # the [B, T, V] log-softmax is never written out: the lattice reads the logits at its labels less each frame's
    # log-normaliser, and label smoothing the mean log-probability, the mean logit less the same normaliser
    logits = apply("frame_logits", src, memory, frames, width, glanced=glanced, key=k_dec).astype(jnp.float32)
    log_norm = jax.nn.logsumexp(logits, axis=-1)
    per_pair = jnp.where(live, ctc_nll(logits, jnp.maximum(frames, 1), labels, lengths, BLANK_ID, log_norm), 0.0)
    if loss_mean == "token":
        nll = mean_loss(jnp.sum(per_pair), jnp.sum(lengths).astype(jnp.float32))
    else:
        nll = mean_loss(jnp.sum(per_pair / jnp.maximum(lengths, 1)), jnp.sum(live).astype(jnp.float32))
    inside = (jnp.arange(width)[None, :] < frames[:, None]) & live[:, None]
    smooth = mean_loss(jnp.sum(jnp.where(inside, log_norm - jnp.mean(logits, axis=-1), 0.0)), jnp.sum(inside))
    loss = (1.0 - label_smoothing) * nll + label_smoothing * smooth
    n = jnp.sum(token_mask(tgt), dtype=jnp.float32)
    unfit = mean_loss(jnp.sum(pairs & ~fits).astype(jnp.float32), jnp.sum(pairs).astype(jnp.float32))
    aux.update(nll=nll * n, count=n, unfit=unfit)
    return loss * n, aux


# ----------------------------------------------------------------------------------------------- decoding

SUPPORTS = Supports(soft_constraints=True, hard_constraints=True, beam=True, max_phrases=4, given_order=False,
                    counts=("unsatisfied",), nbest=True, score=True, lm=True)


def forbid(log_probs: jax.Array) -> jax.Array:
    """float32[..., V] with the ids no frame may take (PAD, BOS, EOS, MASK) at NEG."""
    return log_probs.at[..., jnp.asarray(FORBIDDEN)].set(NEG)


def frame_log_probs(module: CTCModel, params, src: jax.Array, upsample: int, canvas: int, least=None):
    """What the decoders read: (log_probs float32[B, canvas, V], each frame's log-probabilities with the forbidden
    ids at NEG, unrenormalised; frames int32[B], each row's frames, at least ``least`` (int32[B]) where given)."""
    memory = module.apply(params, src, method="encode")
    frames = frame_counts(src, upsample, canvas, least)
    logits = module.apply(params, src, memory, frames, canvas, method="frame_logits")
    return forbid(jax.nn.log_softmax(logits.astype(jnp.float32))), frames


def forced(module: CTCModel, params, request: DecodeRequest, tgt: jax.Array, upsample: int) -> dict:
    """`ModelSpec.score`: log P(y | x), the sum over every alignment of the plain decoders' frames that collapses to y
    (BOS/EOS not emitted; −inf where y does not fit them), which prefix beam search scores its outputs by."""
    src = request.src
    log_probs, frames = frame_log_probs(module, params, src, upsample,
                                        canvas_width(upsample, src.shape[1], module.cfg.max_len))
    labels, lengths = ctc_targets(tgt, with_ends=False)
    fits = frames >= min_frames(labels, lengths)
    logp = jnp.where(fits, -ctc_nll(log_probs, jnp.maximum(frames, 1), labels, lengths, BLANK_ID), -jnp.inf)
    return {"logp": logp, "score": logp}


def decode(module: CTCModel, params, request: DecodeRequest, upsample: int, width: int, continues=None, joins=None,
           trails=None, soft_bonus: float = 1.0, lm_weight: float = 0.0, lm_bonus: float = 0.0,
           sampling: Sampling | None = None, no_repeat: int = 0, no_consecutive: int = 0) -> dict:
    """`ModelSpec.generate` of the family: greedy, prefix beam search (with the request's n-gram LM, if any, and
    without the repeats ``no_repeat`` and ``no_consecutive`` ban, a beam of 1 too: `search.prefix_beam`) or the
    constrained best path (module docstring), on outputs of ``width`` (BOS/EOS included); with ``sampling``, the
    request's beam_size sampled paths a sentence in place of the plain decoders (`search.sample_paths`), ranked by
    their log-probability."""
    src = request.src
    b = src.shape[0]
    canvas = canvas_width(upsample, src.shape[1], module.cfg.max_len)
    least = None
    if request.constraints is not None:  # frames for the phrases, as far as the output and the model allow
        canvas = int(min(module.cfg.max_len, max(canvas, width - 2)))
        least = constraint_frames(request.constraints)
    log_probs, frames = frame_log_probs(module, params, src, upsample, canvas, least)

    def plain():  # {tokens, score, token_logp, token_scored (and the n-best lists)} as the request's beam decodes them
        if sampling is not None:
            return sampled(log_probs, frames, sample_keys(source_keys(src, sampling.seed), request.beam_size),
                           sampling, width, request.nbest)
        if request.beam_size > 1 or no_repeat or no_consecutive:  # (greedy's frames cannot see their string)
            return prefix_beam(log_probs, frames, request.beam_size, width, BLANK_ID, request.nbest,
                               request.extras.get("lm"), lm_weight, lm_bonus, no_repeat, no_consecutive)
        labels, picked, best = best_path(log_probs, frames)
        tokens, token_logp, scored = collapse(labels, frames, picked, width, BLANK_ID)
        return {"tokens": tokens, "score": best, "token_logp": token_logp, "token_scored": scored}

    if request.constraints is None:
        return {**plain(), "unsatisfied": jnp.zeros(b, jnp.int32)}
    hard = request.hard if request.hard is not None else jnp.zeros(b, bool)
    path, placed, ok = constrained_paths(log_probs, frames, request.constraints, hard, BLANK_ID, continues,
                                         joins, trails, soft_bonus)
    # a row without phrases decodes as it would alone, and so does one whose phrases cannot be met (it says so)
    use = ok & jnp.any(request.constraints != PAD_ID, axis=(1, 2))
    c_picked = jnp.take_along_axis(log_probs, jnp.maximum(path, 0)[..., None], axis=2)[..., 0]
    inside = jnp.arange(canvas)[None, :] < frames[:, None]
    c_score = jnp.sum(jnp.where(inside, c_picked, 0.0), axis=1)
    c_tokens, c_logp, c_scored = collapse(path, frames, c_picked, width, BLANK_ID, placed)
    out = skipped_unless(~jnp.all(use), plain)
    constrained = {"tokens": c_tokens, "score": c_score, "token_logp": c_logp, "token_scored": c_scored}
    if request.nbest > 1:  # a row decoded by its constrained best path lists that one output
        constrained.update(nbest_tokens=out["nbest_tokens"].at[:, 0].set(c_tokens),
                           nbest_score=jnp.full_like(out["nbest_score"], -jnp.inf).at[:, 0].set(c_score))
    out = {k: jnp.where(use.reshape((b,) + (1,) * (v.ndim - 1)), constrained[k], v) for k, v in out.items()}
    return {**out, "unsatisfied": (hard & ~ok).astype(jnp.int32)}


def sampled(log_probs: jax.Array, frames: jax.Array, keys: jax.Array, sampling: Sampling, width: int,
            nbest: int) -> dict:
    """K sampled paths a sentence (keys: uint32[B, K, 2]) collapsed and ranked by their log-probability, the best
    the output and the first ``nbest`` its list (generate's outputs)."""
    b, k = keys.shape[:2]
    labels, picked, score = sample_paths(log_probs, frames, keys, sampling)
    score, labels, picked = by_score(score, labels, picked)
    rows = lambda x: x.reshape((b * k,) + x.shape[2:])  # noqa: E731
    tokens, token_logp, scored = (x.reshape((b, k) + x.shape[1:]) for x in
                                  collapse(rows(labels), jnp.repeat(frames, k), rows(picked), width, BLANK_ID))
    out = {"tokens": tokens[:, 0], "score": score[:, 0], "token_logp": token_logp[:, 0], "token_scored": scored[:, 0]}
    if nbest > 1:
        out.update(nbest_tokens=tokens[:, :nbest], nbest_score=score[:, :nbest])
    return out


def build_spec(config, cfg: TransformerConfig, pieces) -> ModelSpec:
    s, t = config.ctc, config.train
    module = CTCModel(cfg, s.decoder_input)
    sampling = sampling_of(config.eval)
    continues, joins, trails = word_glue(pieces)  # hard constraints: whole words

    def capacity(src_len: int) -> int:
        return int(min(cfg.max_len, s.upsample * src_len + 2))

    def init(rng, batch):
        return module.init(rng, batch["src"][:1], s.upsample)

    steps = s.glance_steps or t.steps

    def loss(params, batch, rng, train=True, step=None):
        ratio = glance_ratio(step, s.glance_start, s.glance_end, steps)
        return ctc_loss(module, params, batch, rng, upsample=s.upsample, label_smoothing=t.label_smoothing,
                        target_ends=s.target_ends, loss_mean=s.loss_mean, glancing=s.glancing, ratio=ratio,
                        poisson=s.glance_count == "poisson", train=train)

    def generate(params, request: DecodeRequest) -> dict:
        return decode(module, params, request, s.upsample, request.width(capacity), continues, joins, trails,
                      s.soft_bonus, s.lm_weight, s.lm_bonus, sampling, config.eval.no_repeat_ngram,
                      config.eval.no_consecutive_repeat)

    def score(params, request: DecodeRequest, tgt) -> dict:
        return forced(module, params, request, tgt, s.upsample)

    terms = ("unfit",) + (("glanced", "glance_ratio") if s.glancing else ())
    return ModelSpec("ctc", cfg, module, init, loss, generate, capacity, SUPPORTS.when_sampling(sampling), stepped=True,
                     terms=terms,
                     score=score,
                     left_out=("unfit", "a target (with a blank between repeats) longer than its canvas has no "
                                        "alignment: raise ctc.upsample"))
