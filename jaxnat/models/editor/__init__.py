"""EDITOR (Xu & Carpuat 2021): reposition, placeholder and token heads refining a sequence, with soft lexical
constraints as the initial sequence, and hard ones. docs/editor.md. Its config section is `config.editor`."""

from jaxnat.errors import ConfigError
from jaxnat.models.editor.model import SUPPORTS, build_spec
from jaxnat.models.family import Family
from jaxnat.models.insertion import EDIT_MOVED, EDIT_RANGES, check_early_exit, edit_defaults


def defaults() -> dict:
    return dict(
        edit_defaults(),
        separate_reposition=False,  # the reposition head on its own layer stack (the authors' recipe sets it)
        # the key of the reposition head's delete column (eq. 1): "vector" = a learned vector b (the paper),
        # "bos" = BOS's embedding (the authors' code)
        reposition_deletion="vector",
        # (roll_in_alpha, roll_in_beta, used when dual_path is off: eqs. 7 and 6's α = P(insertion sees y0),
        # β = P(reposition sees y0))
        dual_path=True,  # one coin per batch between insert-then-reposition and reposition-then-insert
        # the roll-in's model repositions r~ and fills t~ are samples, not argmaxes (eqs. 6-7 write samples; off
        # as in the authors' code, whose dual-path roll-in is the default)
        roll_in_sampling=False,
        # (global_shuffle: instead of the local shuffle, docs/editor.md)
        # beyond the paper: the insertion heads' y0 rows see y0 after the ed3 oracle's reposition (the canvas
        # decoding inserts into), not y0 with its misplaced words; measured worse: docs/editor.md item 10
        insert_after_oracle_reposition=False,
        deletion_reward=0.0,  # decoding: added to the delete column of the reposition scores
        # hard constraints: "block" (a phrase moves only as a whole and is never dropped, split or copied) or
        # "paper" (the paper's and its code's rule: a constraint token may not be deleted where it stands;
        # repositioning may still move, copy or drop it)
        hard_mode="block",
    )


def validate(config) -> None:
    check_early_exit(config, "editor")
    s = config.editor
    mixtures = [f"editor.{k}={s[k]}" for k in ("roll_in_alpha", "roll_in_beta") if s[k] != 0]
    if s.dual_path and mixtures:  # the dual path's coin is per batch and reads neither
        raise ConfigError(f"{', '.join(mixtures)}: the per-sentence mixtures of the paper's eqs. 6-7 act only with "
                          f"editor.dual_path=false, and dual-path roll-in is on: set --config.editor.dual_path=false "
                          f"(alpha=1, beta=0 is the -dual-path ablation, configs/editor/ablation_no_dual_path.py), or "
                          f"set them to 0")
    if not s.dual_path and s.roll_in_alpha == 0 and s.insert_after_oracle_reposition:
        raise ConfigError("editor.insert_after_oracle_reposition changes the insertion heads' y0 rows, and with "
                          "editor.dual_path=false and editor.roll_in_alpha=0 they see none (eq. 7: always the model's "
                          "reposition): set editor.roll_in_alpha above 0, or the option to false")
    if not s.dual_path and s.own_insertion_roll_in > 0:
        raise ConfigError("editor.own_insertion_roll_in is an addition to dual-path roll-in; with "
                          "editor.dual_path=false (the paper's eqs. 6-7, Gu et al.'s roll-in at alpha=1, beta=0) "
                          "set it to 0")


FAMILY = Family(
    "editor", build_spec, SUPPORTS, shared={"eval.beam_size": 1}, doc="docs/editor.md", defaults=defaults,
    choices={"reposition_deletion": ("vector", "bos"), "hard_mode": ("block", "paper")},
    ranges={**EDIT_RANGES, "deletion_reward": (None, None)},  # nan or inf would take the delete column everywhere
    architecture=("early_exit", "separate_reposition", "separate_placeholder", "reposition_deletion"),
    moved={**EDIT_MOVED, **{f"model.{k}": k for k in ("separate_reposition", "reposition_deletion")},
           **{f"train.{k}": k for k in ("dual_path", "roll_in_sampling", "insert_after_oracle_reposition")},
           "eval.deletion_reward": "deletion_reward", "eval.hard_mode": "hard_mode"},
    validate=validate, sweep=("max_iter", "I"),
    reads=("eval.length_cap_min", "eval.length_cap_ratio", "eval.run_all_iterations", "eval.search_rules"))
