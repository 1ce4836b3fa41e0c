"""The Levenshtein Transformer (Gu et al. 2019): deletion, placeholder and token heads refining a sequence, for
translation, post-editing and hard lexical constraints. docs/levt.md. Its config section is `config.levt`."""

from jaxnat.errors import ConfigError
from jaxnat.models.family import Family
from jaxnat.models.insertion import EDIT_MOVED, EDIT_RANGES, check_early_exit, edit_defaults
from jaxnat.models.levt.model import SUPPORTS, build_spec


def defaults() -> dict:
    return dict(
        edit_defaults(),
        separate_deletion=False,  # the deletion head on its own layer stack (Table 2a)
        # (roll_in_alpha, roll_in_beta: Algorithm 1's α = P(deletion sees y0), β = P(insertion sees the
        # oracle-deleted y0); 0, 0 = the reference code's)
        # the deletion head's roll-in fills are samples from the token head, not its argmax (the note to the
        # paper's eq. 6; off as in Algorithm 1 and fairseq)
        sampling_for_deletion=False,
        # (global_shuffle: as the deletion head's input, instead of the model's fills: docs/levt.md)
    )


def validate(config) -> None:
    check_early_exit(config, "levt")
    s = config.levt
    # each of these at 1 gives every row's deletion head another input than the token head's fills
    instead = [f"levt.{k}=1" for k in ("roll_in_alpha", "own_insertion_roll_in", "global_shuffle") if s[k] == 1]
    if s.sampling_for_deletion and instead:
        raise ConfigError(f"levt.sampling_for_deletion samples the token head's fills that the deletion head learns "
                          f"on, and with {' and '.join(instead)} no row learns on them: the run would train as without "
                          f"it; lower {' and '.join(k[:-2] for k in instead)} below 1, or set "
                          f"--config.levt.sampling_for_deletion=false")
    if config.data.init_lang and s.roll_in_alpha == 0 and s.roll_in_beta == 0:
        raise ConfigError("data.init_lang with levt.roll_in_alpha = levt.roll_in_beta = 0: no LevT head would ever "
                          "see the initial hypotheses, so post-editing training would be plain translation training; "
                          "set either above 0 (the paper's post-editing roll-in, docs/levt.md; --mode eval of a model "
                          "trained without them needs it too, though decoding does not read it)")


FAMILY = Family(
    "levt", build_spec, SUPPORTS, shared={"eval.beam_size": 1}, doc="docs/levt.md", defaults=defaults,
    ranges=EDIT_RANGES,
    architecture=("early_exit", "separate_deletion", "separate_placeholder"),
    moved={**EDIT_MOVED, "model.separate_deletion": "separate_deletion",
           "train.sampling_for_deletion": "sampling_for_deletion"},
    validate=validate, sweep=("max_iter", "I"), conventions=("absent_tokens",),
    reads=("eval.length_cap_min", "eval.length_cap_ratio", "eval.run_all_iterations", "eval.search_rules"))
