"""What the length-predicting families (CMLM, NAT) share in their configuration and decoding: the length
prediction and its candidates, repeated-token removal, and the AR rescorer of their length candidates."""

from __future__ import annotations

from jaxnat.decoding.mask_predict import LENGTH_CLASSES


def length_defaults() -> dict:
    """The keys of a length-predicting family's config section that CMLM and NAT mean alike."""
    return dict(
        # the target length from a LENGTH token appended to the source ("token", Mask-Predict and CMLMC) or from
        # the mean-pooled encoder ("pooled", fairseq); with length_offset, as an offset from the source length
        length_prediction="token", length_offset=False,
        # the classes count BOS and EOS (n + 2, without length_offset): a fairseq model's (docs/import.md)
        length_with_ends=False,
        length_bias=True,  # the classifier's bias (fairseq's has none: false)
        length_loss_weight=0.1,  # the length loss's weight
        # ℓ candidate lengths: "top" (the ℓ most probable) or "centred" (fairseq's argmax ± ⌊ℓ/2⌋); the candidate
        # kept: highest average token probability ("probability", CMLMC §3.3) or mean log-probability
        # ("log_probability", the Mask-Predict code)
        length_beam=3, length_beam_mode="top", candidate_score="probability",
        # a trained AR workdir with the same vocabulary (train with data.spm_from=it): of the length candidates,
        # the one this AR model scores best (mean token log-probability) is kept instead of the model's own best
        rescorer="",
        # remove each output token equal to the one before it (the NAT papers' post-processing)
        remove_repeats=False,
    )


LENGTH_CHOICES = {"length_prediction": ("token", "pooled"), "length_beam_mode": ("top", "centred"),
                  "candidate_score": ("probability", "log_probability")}
# no more candidates than the classifier has classes ("top" takes the ℓ best of them)
LENGTH_RANGES = {"length_beam": ("(0", f"{LENGTH_CLASSES}]"), "length_loss_weight": ("[0", None)}
LENGTH_MOVED = {"model.length_prediction": "length_prediction", "model.length_offset": "length_offset",
                "train.length_loss_weight": "length_loss_weight", "eval.length_beam": "length_beam",
                "eval.length_beam_mode": "length_beam_mode", "eval.candidate_score": "candidate_score",
                "eval.rescorer": "rescorer", "eval.remove_repeats": "remove_repeats"}


def rescorer_run(config):
    """(key, workdir, family) of the AR model that rescores the length candidates, or None (`Family.aux_run`)."""
    key = f"{config.model.name}.rescorer"
    path = config[config.model.name].rescorer
    return (key, path, "ar") if path else None


def rescorer_extras(translator, starts) -> dict:
    """{'rescorer': the AR parameters} of every request where a rescorer is loaded (`ModelSpec.request_extras`)."""
    del starts
    return {} if translator.aux is None else {"rescorer": translator.aux}
