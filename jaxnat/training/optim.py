"""Adam with a warmed-up learning-rate schedule (fairseq's inverse square root, linear or cosine decay, a
constant rate, or a constant rate lowered on validation plateaus), decoupled weight decay and gradient clipping;
and the host-side rule that lowers the rate on a plateau and stops a run that no longer improves (`Plateau`)."""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax


def warmed_up_schedule(lr: float, warmup_steps: int, warmup_init_lr: float, decay: str = "inverse_sqrt",
                       total_steps: int = 0, min_lr: float = 0.0):
    """Linear warm-up from warmup_init_lr to lr over warmup_steps, then either lr * sqrt(warmup_steps / step)
    (decay "inverse_sqrt"), a straight line from lr to 0 at total_steps (decay "linear"), half a cosine from lr
    down to min_lr at total_steps (decay "cosine": fairseq's cosine scheduler with one period that ends with the
    training, as the vectorized-constraints authors' stage 2) or lr throughout (decay "constant": a fine-tuning
    phase at a fixed small rate, and decay "plateau", whose scale on validation plateaus is the optimizer's:
    `scale_by_plateau`)."""
    warmup_steps = max(warmup_steps, 1)
    if decay not in ("inverse_sqrt", "linear", "cosine", "constant", "plateau"):
        raise ValueError(f"unknown learning-rate decay {decay!r}")

    def schedule(step):
        step = jnp.asarray(step, jnp.float32) + 1.0  # optax counts from 0; fairseq's first update is 1
        warm = warmup_init_lr + (lr - warmup_init_lr) * step / warmup_steps
        if decay == "inverse_sqrt":
            after = lr * jnp.sqrt(warmup_steps / step)
        elif decay in ("constant", "plateau"):
            after = jnp.asarray(lr, jnp.float32)
        elif decay == "cosine":  # step = warmup_steps is the peak
            done = jnp.clip((step - warmup_steps) / max(total_steps - warmup_steps, 1), 0.0, 1.0)
            after = min_lr + 0.5 * (lr - min_lr) * (1.0 + jnp.cos(math.pi * done))
        else:
            span = max(total_steps - warmup_steps, 1)
            after = lr * jnp.clip((total_steps - step) / span, 0.0, 1.0)
        return jnp.where(step < warmup_steps, warm, after)

    return schedule


class PlateauScaleState(NamedTuple):
    """`scale_by_plateau`'s state: the factor on the learning rate, float32[] (1 until a validation plateau)."""

    lr_scale: jax.Array


def scale_by_plateau() -> optax.GradientTransformation:
    """Multiplies the updates by the scale in its state: after Adam's updates (which already carry -lr and the
    decoupled weight decay) this is the learning rate times the scale. The trainer sets the scale between steps
    (`with_lr_scale`); an array in the optimizer state, so a new scale reaches the compiled step without
    compiling it again, and is checkpointed and resumed with the rest of the state."""

    def init(params):
        del params
        return PlateauScaleState(jnp.ones((), jnp.float32))

    def update(updates, state, params=None):
        del params
        return jax.tree.map(lambda u: u * state.lr_scale.astype(u.dtype), updates), state

    return optax.GradientTransformation(init, update)


def _is_scale(node) -> bool:
    return isinstance(node, PlateauScaleState)


def lr_scale(opt_state):
    """The learning-rate scale of an optimizer state (`scale_by_plateau`'s), or None where it has none."""
    found = [n.lr_scale for n in jax.tree_util.tree_leaves(opt_state, is_leaf=_is_scale) if _is_scale(n)]
    return found[0] if found else None


def with_lr_scale(opt_state, scale: float):
    """``opt_state`` with its learning-rate scale set to ``scale``: an array of the old one's shape, dtype and
    sharding (on every process), so the compiled train step takes it as it is."""

    def put(node):
        if not _is_scale(node):
            return node
        old = node.lr_scale
        value = np.asarray(scale, old.dtype)
        return PlateauScaleState(jax.make_array_from_callback(old.shape, old.sharding, lambda _: value))

    return jax.tree_util.tree_map(put, opt_state, is_leaf=_is_scale)


def perplexity(nll: float) -> float:
    """exp(nll); inf where that overflows (nan stays nan)."""
    try:
        return math.exp(nll)
    except OverflowError:
        return math.inf


@dataclasses.dataclass
class Plateau:
    """Validation perplexities -> a learning-rate scale and an early stop (Xu & Carpuat 2021, §4.1: the rate
    ×0.7 after 4 validations without a gain, a stop after 20).

    A validation gains when its perplexity is below the best so far (strictly; nan never gains). ``patience`` > 0:
    the scale is multiplied by ``factor`` at every ``patience``-th validation in a row without a gain (0: the scale
    stays 1, the schedules other than plateau). ``stop_patience`` > 0: the run stops at the ``stop_patience``-th
    validation in a row without a gain (0: never). The fields after the settings are the run's progress, saved in
    each checkpoint's metadata (`progress`, `resume`), so a resumed run goes on as the uninterrupted one."""

    factor: float = 0.7
    patience: int = 0
    stop_patience: int = 0
    best: float = math.inf  # the best perplexity so far
    best_step: int = -1
    since_best: int = 0  # validations since the best one
    scale: float = 1.0

    def validated(self, step: int, ppl: float) -> bool:
        """Records the perplexity of the validation of ``step`` (the scale may change); returns whether the run
        stops here."""
        if ppl < self.best:
            self.best, self.best_step, self.since_best = ppl, step, 0
            return False
        self.since_best += 1
        if self.patience and self.since_best % self.patience == 0:
            self.scale *= self.factor
        return self.stopped

    @property
    def stopped(self) -> bool:
        return bool(self.stop_patience) and self.since_best >= self.stop_patience

    def progress(self) -> dict:
        """The progress as JSON (the checkpoint's metadata; no best yet: null)."""
        return {"best_ppl": self.best if math.isfinite(self.best) else None, "best_step": self.best_step,
                "since_best": self.since_best, "lr_scale": self.scale}

    def resume(self, progress: dict | None) -> None:
        """Takes up the progress of `progress()`; None (a checkpoint of before it was saved): the start's."""
        if progress:
            best = progress["best_ppl"]
            self.best = math.inf if best is None else float(best)
            self.best_step, self.since_best = int(progress["best_step"]), int(progress["since_best"])
            self.scale = float(progress["lr_scale"])


def make_optimizer(train_cfg) -> tuple[optax.GradientTransformation, callable]:
    """Returns (optimizer, learning-rate schedule) from the `train` section of a config. With
    ``lr_schedule="plateau"`` the optimizer ends with `scale_by_plateau` (the schedule is then the rate before the
    scale: `lr_scale` of the optimizer state has it)."""
    schedule = warmed_up_schedule(train_cfg.lr, train_cfg.warmup_steps, train_cfg.warmup_init_lr,
                                  train_cfg.lr_schedule, train_cfg.steps, train_cfg.min_lr)
    parts = []
    if train_cfg.clip_norm > 0:
        parts.append(optax.clip_by_global_norm(train_cfg.clip_norm))
    parts.append(
        optax.adamw(schedule, b1=train_cfg.adam_b1, b2=train_cfg.adam_b2, eps=train_cfg.adam_eps,
                    weight_decay=train_cfg.weight_decay)
    )
    if train_cfg.lr_schedule == "plateau":
        parts.append(scale_by_plateau())
    return optax.chain(*parts), schedule
