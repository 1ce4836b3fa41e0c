"""Adam with a warmed-up learning-rate schedule (fairseq's inverse square root, linear or cosine decay, or a
constant rate), decoupled weight decay and gradient clipping."""

from __future__ import annotations

import math

import jax.numpy as jnp
import optax


def warmed_up_schedule(lr: float, warmup_steps: int, warmup_init_lr: float, decay: str = "inverse_sqrt",
                       total_steps: int = 0, min_lr: float = 0.0):
    """Linear warm-up from warmup_init_lr to lr over warmup_steps, then either lr * sqrt(warmup_steps / step)
    (decay "inverse_sqrt"), a straight line from lr to 0 at total_steps (decay "linear"), half a cosine from lr
    down to min_lr at total_steps (decay "cosine": fairseq's cosine scheduler with one period that ends with the
    training, as the vectorized-constraints authors' stage 2) or lr throughout (decay "constant": a fine-tuning
    phase at a fixed small rate)."""
    warmup_steps = max(warmup_steps, 1)
    if decay not in ("inverse_sqrt", "linear", "cosine", "constant"):
        raise ValueError(f"unknown learning-rate decay {decay!r}")

    def schedule(step):
        step = jnp.asarray(step, jnp.float32) + 1.0  # optax counts from 0; fairseq's first update is 1
        warm = warmup_init_lr + (lr - warmup_init_lr) * step / warmup_steps
        if decay == "inverse_sqrt":
            after = lr * jnp.sqrt(warmup_steps / step)
        elif decay == "constant":
            after = jnp.asarray(lr, jnp.float32)
        elif decay == "cosine":  # step = warmup_steps is the peak
            done = jnp.clip((step - warmup_steps) / max(total_steps - warmup_steps, 1), 0.0, 1.0)
            after = min_lr + 0.5 * (lr - min_lr) * (1.0 + jnp.cos(math.pi * done))
        else:
            span = max(total_steps - warmup_steps, 1)
            after = lr * jnp.clip((total_steps - step) / span, 0.0, 1.0)
        return jnp.where(step < warmup_steps, warm, after)

    return schedule


def make_optimizer(train_cfg) -> tuple[optax.GradientTransformation, callable]:
    """Returns (optimizer, learning-rate schedule) from the `train` section of a config."""
    schedule = warmed_up_schedule(train_cfg.lr, train_cfg.warmup_steps, train_cfg.warmup_init_lr,
                                  train_cfg.lr_schedule, train_cfg.steps, train_cfg.min_lr)
    parts = []
    if train_cfg.clip_norm > 0:
        parts.append(optax.clip_by_global_norm(train_cfg.clip_norm))
    parts.append(
        optax.adamw(schedule, b1=train_cfg.adam_b1, b2=train_cfg.adam_b2, eps=train_cfg.adam_eps,
                    weight_decay=train_cfg.weight_decay)
    )
    return optax.chain(*parts), schedule
