"""A thin wrapper over Orbax's `CheckpointManager`: the last N training states, and the best parameters by
validation BLEU.

Layout in the workdir:
  checkpoints/last/<step>/   {'state': train state}            (keep the last N; resume from the newest)
  checkpoints/best/<step>/   {'params': ..., 'meta': {'bleu', 'step'}}   (only the best is kept)
Orbax writes each checkpoint into a temporary directory and renames it when complete, so a run killed at any
moment (even `kill -9`) leaves only whole checkpoints behind. A checkpoint damaged afterwards (a truncated
file, a full disk, a copy gone wrong) does not end the run: restoring falls back to the newest readable one,
with a warning, and moves the damaged one to `checkpoints/unreadable/` (kept, never deleted).
"""

from __future__ import annotations

import logging
import os
import shutil

import orbax.checkpoint as ocp

log = logging.getLogger("jaxnat")


class Checkpoints:
    def __init__(self, workdir: str, keep: int):
        root = self.root = os.path.abspath(os.path.join(workdir, "checkpoints"))
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

    def restore_state(self, target):
        """The newest readable training state, restored into the structure, dtypes and shardings of `target`
        (a freshly initialised state); None if there is none."""
        args = ocp.args.Composite(state=ocp.args.StandardRestore(target))
        out = self._restore_newest(self.last, "last", args)
        return None if out is None else out["state"]

    def _restore_newest(self, manager: ocp.CheckpointManager, kind: str, args):
        """Restores the newest step of `manager` that reads back; unreadable ones are moved aside."""
        for step in sorted(manager.all_steps(), reverse=True):
            try:
                return manager.restore(step, args=args)
            except Exception as e:  # Orbax raises many kinds (ValueError, FileNotFoundError, tensorstore's)
                aside = os.path.join(self.root, "unreadable", f"{kind}-{step}")
                log.warning("the %s checkpoint of step %d is unreadable (%s); moved to %s, trying the one before",
                            kind, step, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}" if str(e)
                            else type(e).__name__, aside)
                manager.wait_until_finished()
                os.makedirs(os.path.dirname(aside), exist_ok=True)
                shutil.move(os.path.join(self.root, kind, str(step)), aside)
                manager.reload()
        return None

    # -- best parameters -------------------------------------------------------------------------------
    def best_meta(self) -> dict | None:
        out = self._restore_newest(self.best, "best", ocp.args.Composite(meta=ocp.args.JsonRestore()))
        return None if out is None else out["meta"]

    def save_best(self, step: int, params, bleu: float) -> None:
        meta = {"bleu": float(bleu), "step": int(step)}
        self.best.save(step, args=ocp.args.Composite(params=ocp.args.StandardSave(params),
                                                     meta=ocp.args.JsonSave(meta)), force=True)

    def restore_best(self, target):
        """The best parameters, or None if no validation has happened yet (or its checkpoint is unreadable)."""
        out = self._restore_newest(self.best, "best", ocp.args.Composite(params=ocp.args.StandardRestore(target)))
        return None if out is None else out["params"]

    def wait(self) -> None:
        self.last.wait_until_finished()
        self.best.wait_until_finished()

    def close(self) -> None:
        self.last.close()
        self.best.close()
