"""The vanilla non-autoregressive Transformer and Coverage-NAT (Gu et al. 2018; Shao et al. 2020): one parallel
pass over a canvas of predicted length, with token- and sentence-level coverage. docs/nat.md. Its config section
is `config.nat`."""

from jaxnat.errors import ConfigError
from jaxnat.models.cmlm.length import LENGTH_CHOICES, LENGTH_MOVED, LENGTH_RANGES, length_defaults, rescorer_run
from jaxnat.models.family import Family
from jaxnat.models.nat.model import SUPPORTS, build_spec


def defaults() -> dict:
    return dict(
        length_defaults(),
        # what the decoder reads: [BOS, MASK × n, EOS]'s embeddings, or the source's copied uniformly onto the canvas
        # (Gu et al. 2018; fairseq's --src-embedding-copy)
        decoder_input="mask",
        # Coverage-NAT: the iterative coverage layer in place of the top decoder layer; its bias λ(1 − C) on the
        # source words, or on BOS and EOS too (coverage_bos_eos: how jaxnat covered before)
        coverage=False, coverage_bos_eos=False,
        # K_train and K_dec, the coverage layer's iterations in training and in decoding
        train_iterations=5, decode_iterations=5,
        # β, the weight of the sentence-level coverage agreement (0: off; 0.5 in the paper's fine-tuning phase);
        # the coverage C as a constant in the gradient (the paper computes it "manually")
        sca_weight=0.0, coverage_stop_gradient=False,
        # decode with λ forced to this value (a control: 0 removes the coverage bias); < 0: as trained
        coverage_lambda=-1.0,
    )


# what the coverage layer reads (nat.sca_weight, SCA, needs no coverage layer): the λ = 0 control of a NAT-base run
# would decode as without it
COVERAGE_KEYS = ("coverage_bos_eos", "train_iterations", "decode_iterations", "coverage_stop_gradient",
                 "coverage_lambda")


def validate(config) -> None:
    s = config.nat
    if s.coverage and config.model.dec_layers < 2:
        raise ConfigError(f"nat.coverage needs model.dec_layers >= 2 (the layer below the coverage layer starts its "
                          f"iterations); got {config.model.dec_layers}")
    if config.eval.iteration_sweep and not s.coverage:
        raise ConfigError("eval.iteration_sweep of a NAT sweeps the coverage iterations K_dec: set nat.coverage=true, "
                          "or eval.iteration_sweep= for NAT-base (no coverage layer to sweep)")


def output_metrics(outs: list[dict], srcs: list[str]) -> dict:
    """The ratio of repeated tokens before their removal, overall and for short and long sources."""
    from jaxnat.evaluation.metrics import repeated_token_ratios

    return repeated_token_ratios([o["repeats"] for o in outs], [o["chosen_length"] for o in outs],
                                 [len(s.split()) for s in srcs])


FAMILY = Family(
    "nat", build_spec, SUPPORTS, shared={"eval.beam_size": 1}, doc="docs/nat.md", defaults=defaults,
    choices={**LENGTH_CHOICES, "decoder_input": ("mask", "copy")}, switched=dict.fromkeys(COVERAGE_KEYS, "coverage"),
    ranges={**LENGTH_RANGES, "train_iterations": ("(0", None), "decode_iterations": ("(0", None),
            "sca_weight": ("[0", None), "coverage_lambda": (None, None)},  # finite: λ = inf gave no output
    architecture=("length_prediction", "length_offset", "length_with_ends", "length_bias", "coverage",
                  "coverage_bos_eos", "decoder_input"),
    moved={**LENGTH_MOVED, "model.coverage": "coverage", "model.coverage_bos_eos": "coverage_bos_eos",
           "train.coverage_iterations": "train_iterations", "eval.coverage_iterations": "decode_iterations",
           "train.sca_weight": "sca_weight", "train.coverage_stop_gradient": "coverage_stop_gradient",
           "eval.coverage_lambda": "coverage_lambda"},
    before_added={"coverage_bos_eos": (True, "coverage"), "length_with_ends": (False, None),
                  "length_bias": (True, None), "decoder_input": ("mask", None)},
    conventions=("absent_tokens",),
    # one mask-predict pass: eval.run_all_iterations, which mask_predict_options passes on, stops no later one
    reads=("eval.length_cap_min", "eval.length_cap_ratio", "eval.search_rules", "data.pack"),
    validate=validate, aux_run=rescorer_run, output_metrics=output_metrics,
    sweep=("decode_iterations", "K"))
