"""CTC-based non-autoregressive translation with glancing training (Libovický & Helcl 2018; Saharia et al. 2020;
Gu & Kong 2021; Qian et al. 2021): an upsampled decoder canvas, the CTC loss, glancing on the best CTC alignment,
greedy and prefix beam decoding, sampling, and hard and soft lexical constraints as a constrained best path over CTC's
alignment lattice. docs/ctc.md. Its config section is `config.ctc`."""

from jaxnat.errors import ConfigError
from jaxnat.models.ctc.model import SUPPORTS, build_spec
from jaxnat.models.family import Family


def defaults() -> dict:
    return dict(
        # λ: decoder frames per source token (BOS and EOS count): the canvas is λ × the source, within
        # model.max_len (3: Gu & Kong's and Libovický & Helcl's; Saharia et al. use 2)
        upsample=3,
        # the canvas's inputs: copy (the encoder's outputs, copied uniformly), soft (the authors' Gaussian blend of
        # them), embedding (the source token embeddings copied, as NAT's uniform copy)
        decoder_input="copy",
        # the CTC target includes BOS and EOS (the authors' code, on fairseq's targets); default: the real tokens
        target_ends=False,
        # the CTC term's mean: token (summed over pairs / their tokens) or sentence (each pair's / its length,
        # averaged: the authors' F.ctc_loss(reduction="mean"))
        loss_mean="token",
        # glancing training on the best CTC alignment (GLAT); false: plain CTC
        glancing=True,
        # the glancing ratio at update 0 (GLAT's schedule starts at 0.5) ...
        glance_start=0.5,
        # ... falling linearly to this one (0.3), where it stays; validation reads it
        glance_end=0.3,
        # the updates over which the ratio falls (0: train.steps)
        glance_steps=0,
        # how many frames are glanced: floor (⌊ratio × mismatches⌋, GLAT) or poisson (a draw of that mean: the
        # authors' --poisson-mask)
        glance_count="floor",
        # soft constraints: the log-probability bonus per piece of each phrase the best path places
        soft_bonus=1.0,
        # prefix beam search with eval.lm (an n-gram LM of target pieces): prefixes ranked by log P + lm_weight ·
        # ln P_lm + lm_bonus · |prefix| (shallow fusion: α and β of Gu & Kong's ctcdecode; the best of those tried on
        # Multi30k's validation split, docs/language_models.md: without the bonus the LM's cost shortens outputs)
        lm_weight=0.3, lm_bonus=1.5,
    )


def validate(config) -> None:
    s = config.ctc
    if s.glance_end > s.glance_start and s.glancing:
        raise ConfigError(f"ctc.glance_end={s.glance_end} must not exceed ctc.glance_start={s.glance_start} "
                          f"(the glancing ratio anneals down)")
    if config.eval.lm and config.eval.beam_size < 2:
        raise ConfigError("eval.lm is fused into the prefix beam search: set eval.beam_size to 2 or more")
    for key in ("no_repeat_ngram", "no_consecutive_repeat"):
        if config.eval[key] and config.eval.sampling:
            raise ConfigError(f"eval.{key}={config.eval[key]} bans repeats in the prefix beam search, and "
                              f"eval.sampling=true samples in its place: leave out one of them")


FAMILY = Family(
    "ctc", build_spec, SUPPORTS, shared={"eval.beam_size": 1}, doc="docs/ctc.md", defaults=defaults,
    choices={"decoder_input": ("copy", "soft", "embedding"), "loss_mean": ("token", "sentence"),
             "glance_count": ("floor", "poisson")},
    ranges={"upsample": ("[1", None), "glance_start": ("[0", "1]"), "glance_end": ("[0", "1]"),
            "glance_steps": ("[0", None), "soft_bonus": ("[0", None), "lm_weight": ("[0", None)},
    architecture=("upsample", "decoder_input", "target_ends"), reads=("eval.sampling", "eval.no_repeat_ngram",
                                                                   "eval.no_consecutive_repeat"),
    validate=validate)
