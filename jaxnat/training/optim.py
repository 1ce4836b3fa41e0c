"""Adam with fairseq's inverse-square-root schedule, decoupled weight decay and gradient clipping."""

from __future__ import annotations

import jax.numpy as jnp
import optax


def inverse_sqrt_schedule(lr: float, warmup_steps: int, warmup_init_lr: float):
    """Linear warm-up from warmup_init_lr to lr over warmup_steps, then lr * sqrt(warmup_steps / step)."""
    warmup_steps = max(warmup_steps, 1)

    def schedule(step):
        step = jnp.asarray(step, jnp.float32) + 1.0  # optax counts from 0; fairseq's first update is 1
        warm = warmup_init_lr + (lr - warmup_init_lr) * step / warmup_steps
        decay = lr * jnp.sqrt(warmup_steps / step)
        return jnp.where(step < warmup_steps, warm, decay)

    return schedule


def make_optimizer(train_cfg) -> tuple[optax.GradientTransformation, callable]:
    """Returns (optimizer, learning-rate schedule) from the `train` section of a config."""
    schedule = inverse_sqrt_schedule(train_cfg.lr, train_cfg.warmup_steps, train_cfg.warmup_init_lr)
    parts = []
    if train_cfg.clip_norm > 0:
        parts.append(optax.clip_by_global_norm(train_cfg.clip_norm))
    parts.append(
        optax.adamw(schedule, b1=train_cfg.adam_b1, b2=train_cfg.adam_b2, eps=train_cfg.adam_eps,
                    weight_decay=train_cfg.weight_decay)
    )
    return optax.chain(*parts), schedule
