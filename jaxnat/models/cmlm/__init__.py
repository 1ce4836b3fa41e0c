"""CMLM and CMLMC (Ghazvininejad et al. 2019; Huang et al. 2022): a conditional masked language model decoded by
mask-predict, with RevealPosition and the correction loss; soft and hard lexical constraints by placement.
docs/cmlm.md. Its config section is `config.cmlm`."""

from jaxnat.models.cmlm.length import LENGTH_CHOICES, LENGTH_MOVED, LENGTH_RANGES, length_defaults, rescorer_run
from jaxnat.models.cmlm.model import SUPPORTS, build_spec
from jaxnat.models.cmlm import positions
from jaxnat.models.family import Analysis, Family


def defaults() -> dict:
    return dict(
        length_defaults(),
        # RevealPosition (CMLMC §3.1) = masked_attn (a causal sublayer in every decoder layer) + concat_pe (token
        # and position embeddings combined by a linear map of their concatenation)
        masked_attn=False, concat_pe=False,
        # CMLMC's correction loss (§3.2): each observed token replaced with probability correction_p by the fully
        # masked pass's prediction ("bernoulli", the paper) or exactly ⌊p · #observed⌋ of them ("fixed", the
        # authors' code); token loss = L_mask + L_corr ("sum", eq. 3) or their mean ("mean", the authors' code)
        correction=False, correction_p=0.3, correction_count="bernoulli", correction_combine="sum",
        # mask-predict: T passes (eval.run_all_iterations=false stops a candidate at a pass that changes nothing)
        mask_predict_iter=10,
        # passes 1 … T−1 revise every unconstrained token ("true", the CMLMC authors' decoder: what the correction
        # loss trains for) or only the ones they re-masked ("false", Mask-Predict); "auto" = true for a model
        # trained with the correction loss
        update_all="auto",
    )


FAMILY = Family(
    "cmlm", build_spec, SUPPORTS, shared={"eval.beam_size": 1}, doc="docs/cmlm.md", defaults=defaults,
    choices={**LENGTH_CHOICES, "correction_count": ("bernoulli", "fixed"), "correction_combine": ("sum", "mean"),
             "update_all": ("auto", "true", "false")},
    ranges={**LENGTH_RANGES, "mask_predict_iter": ("(0", None), "correction_p": ("[0", "1]")},
    # a correction probability without the correction loss trained plain CMLM
    switched=dict.fromkeys(("correction_p", "correction_count", "correction_combine"), "correction"),
    architecture=("length_prediction", "length_offset", "length_with_ends", "length_bias", "masked_attn", "concat_pe"),
    moved={**LENGTH_MOVED, "model.masked_attn": "masked_attn", "model.concat_pe": "concat_pe",
           **{f"train.{k}": k for k in ("correction", "correction_p", "correction_count", "correction_combine")},
           "eval.mask_predict_iter": "mask_predict_iter", "eval.update_all": "update_all"},
    before_added={"length_with_ends": (False, None), "length_bias": (True, None)}, conventions=("absent_tokens",),
    reads=("eval.length_cap_min", "eval.length_cap_ratio", "eval.run_all_iterations", "eval.search_rules", "data.pack"),
    aux_run=rescorer_run, sweep=("mask_predict_iter", "T"),
    analysis=Analysis("Position embeddings and context use (Huang et al. 2022, Figure 1(a))",
                      positions.measure, positions.to_markdown, positions.plot,
                      options={"positions": (40, "how many leading positions' embeddings to compare")}))
