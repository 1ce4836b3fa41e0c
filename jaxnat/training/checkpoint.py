"""A thin wrapper over Orbax's `CheckpointManager`: the last N training states, and the best parameters by
validation BLEU.

Layout in the workdir:
  checkpoints/last/<step>/   {'state': train state}            (keep the last N; resume from the newest)
  checkpoints/best/<step>/   {'params': ..., 'meta': {'bleu', 'step'}}   (only the best is kept)
Orbax writes each checkpoint into a temporary directory and renames it when complete, so a run killed at any
moment (even `kill -9`) leaves only whole checkpoints behind.
"""

from __future__ import annotations

import os

import orbax.checkpoint as ocp


class Checkpoints:
    def __init__(self, workdir: str, keep: int):
        root = os.path.abspath(os.path.join(workdir, "checkpoints"))
        self.last = ocp.CheckpointManager(
            os.path.join(root, "last"),
            options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True, cleanup_tmp_directories=True),
        )
        self.best = ocp.CheckpointManager(
            os.path.join(root, "best"),
            options=ocp.CheckpointManagerOptions(max_to_keep=1, create=True, cleanup_tmp_directories=True),
        )

    # -- training state --------------------------------------------------------------------------------
    def latest_step(self) -> int | None:
        return self.last.latest_step()

    def save_state(self, step: int, state) -> None:
        self.last.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state)))

    def restore_state(self, target, step: int | None = None):
        """Restores into the structure, dtypes and shardings of `target` (a freshly initialised state)."""
        step = self.latest_step() if step is None else step
        out = self.last.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target)))
        return out["state"]

    # -- best parameters -------------------------------------------------------------------------------
    def best_meta(self) -> dict | None:
        step = self.best.latest_step()
        if step is None:
            return None
        return self.best.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]

    def save_best(self, step: int, params, bleu: float) -> None:
        meta = {"bleu": float(bleu), "step": int(step)}
        self.best.save(step, args=ocp.args.Composite(params=ocp.args.StandardSave(params),
                                                     meta=ocp.args.JsonSave(meta)), force=True)

    def restore_best(self, target):
        """The best parameters, or None if no validation has happened yet."""
        step = self.best.latest_step()
        if step is None:
            return None
        return self.best.restore(step, args=ocp.args.Composite(params=ocp.args.StandardRestore(target)))["params"]

    def wait(self) -> None:
        self.last.wait_until_finished()
        self.best.wait_until_finished()

    def close(self) -> None:
        self.last.close()
        self.best.close()
