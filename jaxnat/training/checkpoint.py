"""A thin wrapper over Orbax's `CheckpointManager`: the last N training states, the parameters of the best
validations by BLEU, and an average of checkpoints.

Layout in the workdir:
  checkpoints/last/<step>/      {'state': train state, 'progress': {...}}  (keep the last N; resume from the newest)
  checkpoints/best/<step>/      {'params': ..., 'meta': {'bleu', 'step'}}   (the best train.keep_best are kept)
  checkpoints/averaged/<step>/  {'params': ..., 'meta': {'of', 'steps'}}    (--mode average; one is kept)
Orbax writes each checkpoint into a temporary directory and renames it when complete, so a run killed at any
moment (even `kill -9`) leaves only whole checkpoints behind. A checkpoint damaged afterwards (a truncated
file, a full disk, a copy gone wrong) does not end the run: restoring falls back to the newest readable one,
with a warning, and the training moves the damaged one to `checkpoints/unreadable/` (kept, never deleted).
The training of a workdir alone moves checkpoints aside and removes the temporary directories of a killed run's:
a command that reads the workdir (eval, translate, average, train.init_from) while a run still trains there would
move or remove what the run is writing or deleting, and end the run.
"""

from __future__ import annotations

import logging
import os
import shutil

import orbax.checkpoint as ocp

from jaxnat.training import mesh

log = logging.getLogger("jaxnat")


class Checkpoints:
    def __init__(self, workdir: str, keep: int, keep_best: int = 1, trains: bool = False):
        """``trains``: this process trains the workdir: it removes the temporary directories of a killed run's
        training states and best parameters, and moves unreadable checkpoints aside (another command reading the
        workdir leaves both: a run may still train there, writing and deleting checkpoints)."""
        root = self.root = os.path.abspath(os.path.join(workdir, "checkpoints"))
        self.keep_best, self.trains = keep_best, trains

        def manager(kind, max_to_keep, cleanup):
            return ocp.CheckpointManager(os.path.join(root, kind), options=ocp.CheckpointManagerOptions(
                max_to_keep=max_to_keep, create=True, cleanup_tmp_directories=cleanup))

        self.last = manager("last", keep, trains)
        self.best = manager("best", None, trains)  # pruned by BLEU in save_best, not by age
        self.averaged = manager("averaged", 1, True)  # written by --mode average alone

    # -- training state --------------------------------------------------------------------------------
    def latest_step(self) -> int | None:
        return self.last.latest_step()

    def save_state(self, step: int, state, progress: dict | None = None) -> None:
        """The training state of ``step``, and beside it ``progress``: what the trainer tracks on the host that a
        resumed run needs too (JSON: validations without a gain, the learning-rate scale; `optim.Plateau`)."""
        items = {"state": ocp.args.StandardSave(state)}
        if progress is not None:
            items["progress"] = ocp.args.JsonSave(progress)
        self.last.save(step, args=ocp.args.Composite(**items))

    def drop_off_grid(self, every: int, final: int) -> None:
        """Deletes the training states saved off the every-`every`-steps grid (a stopped run's, training/stop.py)
        once a newer one exists, so that averaging the newest states finds those of an uninterrupted run."""
        steps = self.last.all_steps()
        for s in steps:
            if s % every and s != final and s < max(steps):
                self.last.delete(s)

    def restore_state(self, target):
        """The newest readable training state, restored into the structure, dtypes and shardings of `target`
        (a freshly initialised state); None if there is none."""
        args = ocp.args.Composite(state=ocp.args.StandardRestore(target))
        out = self._restore_newest(self.last, "last", args)
        return None if out is None else out["state"]

    def restore_state_and_progress(self, target) -> tuple[object, dict | None]:
        """(state, progress) of the newest readable training state (`restore_state`, and the progress saved with
        it: None for a checkpoint written without one); (None, None) if there is none."""
        for step in sorted(self.last.all_steps(), reverse=True):
            items = {"state": ocp.args.StandardRestore(target)}
            if os.path.isdir(os.path.join(self.root, "last", str(step), "progress")):
                items["progress"] = ocp.args.JsonRestore()
            out = self._restore_step(self.last, "last", step, ocp.args.Composite(**items))
            if out is not None:
                return out["state"], (out["progress"] if "progress" in items else None)
        return None, None

    def _restore_newest(self, manager: ocp.CheckpointManager, kind: str, args):
        """Restores the newest step of `manager` that reads back; unreadable ones are moved aside."""
        for step in sorted(manager.all_steps(), reverse=True):
            out = self._restore_step(manager, kind, step, args)
            if out is not None:
                return out
        return None

    def _restore_step(self, manager: ocp.CheckpointManager, kind: str, step: int, args):
        """One step of `manager`, or None, with a warning, if it is unreadable: the training moves it aside; a
        command that reads the workdir leaves it where it is, as a run may still train there (and be deleting it)."""
        try:
            return manager.restore(step, args=args)
        except Exception as e:  # Orbax raises many kinds (ValueError, FileNotFoundError, tensorstore's)
            where = os.path.join(self.root, kind, str(step))
            if not os.path.isdir(where):
                log.warning("the %s checkpoint of step %d was deleted while it was read (a run training in this "
                            "workdir keeps its newest train.keep_checkpoints and best train.keep_best)", kind, step)
                manager.reload()
                return None
            why = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}" if str(e) else type(e).__name__
            if not self.trains:
                log.warning("the %s checkpoint of step %d is unreadable (%s)", kind, step, why)
                return None
            aside = os.path.join(self.root, "unreadable", f"{kind}-{step}")
            log.warning("the %s checkpoint of step %d is unreadable (%s); moved to %s", kind, step, why, aside)
            manager.wait_until_finished()

            def move():
                os.makedirs(os.path.dirname(aside), exist_ok=True)
                shutil.move(where, aside)
            mesh.in_process_zero("unreadable checkpoint", move)  # several processes: one moves it (a shared workdir)
            manager.reload()
            return None

    # -- best parameters -------------------------------------------------------------------------------
    def best_steps(self) -> list[tuple[int, float]]:
        """(step, validation BLEU) of every kept best checkpoint, best first (ties: the earlier first, as training
        keeps the first step that reached a BLEU)."""
        self.best.wait_until_finished()
        found = []
        for step in self.best.all_steps():
            meta = self._restore_step(self.best, "best", step, ocp.args.Composite(meta=ocp.args.JsonRestore()))
            if meta is not None:
                found.append((step, float(meta["meta"]["bleu"])))
        return sorted(found, key=lambda sb: (-sb[1], sb[0]))

    def best_meta(self) -> dict | None:
        ranked = self.best_steps()
        return {"step": ranked[0][0], "bleu": ranked[0][1]} if ranked else None

    def save_best(self, step: int, params, bleu: float) -> bool:
        """Keeps the parameters of a validation if it is among the best `keep_best` so far (dropping the one it
        displaces). Returns whether it was kept."""
        ranked = self.best_steps()
        if step in dict(ranked):  # kept before a resume from an older training state (kill -9, a checkpoint grid
            return False  # off the validations'): that run's parameters of this step stay, never overwritten
        if len(ranked) >= self.keep_best and bleu <= ranked[self.keep_best - 1][1]:
            return False
        meta = {"bleu": float(bleu), "step": int(step)}
        self.best.save(step, args=ocp.args.Composite(params=ocp.args.StandardSave(params),
                                                     meta=ocp.args.JsonSave(meta)), force=True)
        for old, _ in self.best_steps()[self.keep_best:]:
            self.best.delete(old)
        return True

    def restore_best(self, target):
        """The best parameters, or None if no validation has happened yet (or its checkpoint is unreadable)."""
        for step, _ in self.best_steps():
            out = self._restore_step(self.best, "best", step,
                                     ocp.args.Composite(params=ocp.args.StandardRestore(target)))
            if out is not None:
                return out["params"]
        return None

    # -- several checkpoints, and their average ----------------------------------------------------------
    def params_of(self, kind: str, n: int, state_target) -> list[tuple[int, object]]:
        """(step, parameters) of the newest `n` training states (kind "last") or the `n` best validations
        ("best"); fewer if fewer are kept. `state_target`: a freshly initialised training state."""
        if kind == "last":
            self.last.wait_until_finished()
            steps = sorted(self.last.all_steps(), reverse=True)[:n]
            args = ocp.args.Composite(state=ocp.args.StandardRestore(state_target))
            got = [(s, self._restore_step(self.last, "last", s, args)) for s in steps]
            return [(s, out["state"]["params"]) for s, out in got if out is not None]
        args = ocp.args.Composite(params=ocp.args.StandardRestore(state_target["params"]))
        got = [(s, self._restore_step(self.best, "best", s, args)) for s, _ in self.best_steps()[:n]]
        return [(s, out["params"]) for s, out in got if out is not None]

    def save_averaged(self, params, of: str, steps: list[int]) -> str:
        step = max(steps)
        if step in self.averaged.all_steps():  # averaged again (another N, the same command twice): the new one
            self.averaged.delete(step)  # replaces it, as it replaces one of another step (Orbax refuses a step it has)
        self.averaged.save(step, args=ocp.args.Composite(
            params=ocp.args.StandardSave(params), meta=ocp.args.JsonSave({"of": of, "steps": sorted(steps)})),
            force=True)
        self.averaged.wait_until_finished()
        return os.path.join(self.root, "averaged", str(step))

    def restore_averaged(self, target):
        """(parameters, meta) written by --mode average, or None."""
        args = ocp.args.Composite(params=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore())
        out = self._restore_newest(self.averaged, "averaged", args)
        return None if out is None else (out["params"], out["meta"])

    def wait(self) -> None:
        for m in (self.last, self.best, self.averaged):
            m.wait_until_finished()

    def close(self) -> None:
        """Closes the managers, after the clean-up of temporary directories each started when it was made: Orbax's
        own close does not wait for it, and a command that fails early (no checkpoint yet) would otherwise leave
        its thread to fail at the interpreter's shutdown, with a traceback after the command's one-line error."""
        for m in (self.last, self.best, self.averaged):
            await_cleanup = getattr(m, "_maybe_await_cleanup_tmp_directory", None)
            if await_cleanup is not None:
                await_cleanup()
            m.close()
