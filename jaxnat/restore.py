"""Restoring a trained workdir for decoding: its tokenizer, its model and the parameters `params_choice` names
(the best validation's, or an average of checkpoints), as a `Translator`. Used by evaluation, `--mode
translate`, distillation and the benchmarks; `--mode average` writes an average here too."""

from __future__ import annotations

import copy
import logging
import os

import jax
import jax.numpy as jnp

from jaxnat.config import check_aux, check_matches_workdir, check_member, ensemble_members
from jaxnat.data import piece_vocab
from jaxnat.data.tokenizer import Tokenizer
from jaxnat.decoding.request import Member
from jaxnat.decoding.translator import Translator
from jaxnat.errors import JaxnatError
from jaxnat.models import build_model, family_of
from jaxnat.training.checkpoint import Checkpoints
from jaxnat.training.mesh import first_local_device

log = logging.getLogger("jaxnat")


def _check_trained(workdir: str) -> None:
    if not os.path.isdir(os.path.join(workdir, "spm")) and not piece_vocab.exists(workdir):
        raise JaxnatError(f"{workdir} holds no trained run (no vocabulary: spm/ or an imported vocab/); train first "
                          f"with --mode train, or import a model with --mode import")


def _fresh_state(config, spec, optimizer: bool):
    """The training state's structure, shapes and dtypes on this process's first device, which Orbax restores
    into: abstract (`ModelSpec.abstract_params`), so nothing is initialised or allocated for it (initialising a
    model op by op costs seconds at every evaluation and translation start). Its optimizer state only where a whole
    training state is read back (`optimizer`)."""
    from jaxnat.training.optim import make_optimizer

    state = {"step": jax.ShapeDtypeStruct((), jnp.int32), "params": spec.abstract_params()}
    if optimizer:
        state["opt_state"] = jax.eval_shape(make_optimizer(config.train)[0].init, state["params"])
    one = first_local_device()  # this process's own, as an array made here
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=one), state)


def average_params(trees: list):
    """The element-wise mean of parameter trees of one structure (accumulated in float32)."""
    if not trees:
        raise ValueError("nothing to average")
    return jax.tree.map(lambda *xs: (sum(x.astype(jnp.float32) for x in xs) / len(xs)).astype(xs[0].dtype), *trees)


def non_finite(params) -> str:
    """The path of the first parameter array holding NaN or an infinity ('' when every value is finite)."""
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        if not bool(jnp.isfinite(leaf).all()):
            return jax.tree_util.keystr(path, simple=True, separator="/")
    return ""


def params_choice(config, workdir: str, ckpt: Checkpoints | None = None) -> dict:
    """Which parameters a workdir is decoded with, found without restoring them:
    {'kind': 'best', 'step', 'valid_bleu'}, {'kind': 'last', 'step'} (no validation ran yet),
    {'kind': 'average', 'of', 'steps'} (eval.average_checkpoints > 0) or {'kind': 'averaged', 'of', 'steps'}
    (eval.params=averaged: written by --mode average)."""
    _check_trained(workdir)
    if not os.path.isdir(os.path.join(workdir, "checkpoints")):
        raise JaxnatError(f"{workdir} has no checkpoint yet; train first with --mode train")
    own = ckpt is None
    ckpt = ckpt or Checkpoints(workdir, config.train.keep_checkpoints)
    e = config.eval
    try:
        if e.average_checkpoints > 0:
            n, of = e.average_checkpoints, e.average_of
            steps = (sorted(ckpt.last.all_steps(), reverse=True) if of == "last"
                     else [s for s, _ in ckpt.best_steps()])[:n]
            if len(steps) < n:  # training keeps at most train.keep_*, and writes fewer where it stops early
                raise JaxnatError(
                    f"eval.average_checkpoints={n} with eval.average_of={of}: {workdir} keeps {len(steps)} such "
                    f"checkpoint(s) (steps {sorted(steps)}; training keeps at most train."
                    f"{'keep_checkpoints' if of == 'last' else 'keep_best'}, and writes fewer where it stops early or "
                    f"validates less often): lower eval.average_checkpoints")
            return {"kind": "average", "of": of, "steps": sorted(steps), "step": max(steps)}
        if e.params == "averaged":
            steps = ckpt.averaged.all_steps()
            if not steps:
                raise JaxnatError(f"{workdir} has no averaged checkpoint; write one with --mode average "
                                  f"--config.eval.average_checkpoints=N")
            return {"kind": "averaged", "step": max(steps)}
        meta = ckpt.best_meta()
        if meta is not None:
            return {"kind": "best", "step": int(meta["step"]), "valid_bleu": float(meta["bleu"])}
        step = ckpt.latest_step()
        if step is None:
            raise JaxnatError(f"{workdir} has no checkpoint yet; train first with --mode train")
        return {"kind": "last", "step": int(step)}
    finally:
        if own:
            ckpt.close()


def _restore(config, workdir: str, spec) -> tuple[object, dict]:
    """(parameters, params_choice) of a workdir."""
    ckpt = Checkpoints(workdir, config.train.keep_checkpoints)
    try:
        choice = params_choice(config, workdir, ckpt)
        # training states (with their optimizer state) are read for the newest checkpoint and averages of them
        fresh = _fresh_state(config, spec, optimizer=choice["kind"] == "last" or choice.get("of") == "last")
        params = None
        if choice["kind"] == "best":
            params = ckpt.restore_best(fresh["params"])
        elif choice["kind"] == "average":
            got = ckpt.params_of(choice["of"], len(choice["steps"]), fresh)
            if len(got) == len(choice["steps"]):
                params = average_params([p for _, p in got])
        elif choice["kind"] == "averaged":
            out = ckpt.restore_averaged(fresh["params"])
            if out is not None:
                params, meta = out
                choice.update(meta)
        else:
            log.warning("no best checkpoint (no validation ran yet): using the newest training state")
            state = ckpt.restore_state(fresh)
            params = None if state is None else state["params"]
        if params is None:
            raise JaxnatError(f"{workdir}: the {choice['kind']} checkpoint(s) are unreadable (see the warnings above)")
        if where := non_finite(params):  # they would decode to empty hypotheses with null scores, without a word
            raise JaxnatError(f"{workdir}: the {choice['kind']} parameters hold NaN or infinite values (first: "
                              f"{where}): a diverged or damaged model, whose outputs would be empty; retrain it "
                              f"(a lower train.lr) or decode other checkpoints (eval.average_checkpoints, eval.params)")
        return params, choice
    finally:
        ckpt.close()


def load_translator(config, workdir: str) -> Translator:
    """A workdir's model with the parameters `params_choice` names (by default the best validation's), and the
    parameters of the run its family decodes with beside it (`Family.aux_run`), if any."""
    _check_trained(workdir)
    check_matches_workdir(config, workdir)
    tokenizer = Tokenizer.load(workdir)
    spec = build_model(config, tokenizer.vocab_size("src"), tokenizer.vocab_size("tgt"), tokenizer.piece_tables("tgt"))
    params, choice = _restore(config, workdir, spec)
    if choice["kind"] in ("average", "averaged"):
        log.info("decoding with the average of the %s checkpoints of steps %s", choice["of"], choice["steps"])
    aux_run = family_of(config.model.name).aux_run
    run = aux_run(config) if aux_run else None
    aux = load_aux(*run, workdir) if run else None
    members = [load_member(config, path, workdir) for path in ensemble_members(config)]
    return Translator(spec, params, tokenizer, config, aux, checkpoint=choice, members=members)


def with_config(translator: Translator, config) -> Translator:
    """``translator``'s parameters, vocabulary, auxiliary run and ensemble members decoding under another ``config``
    (another decoder, search or family setting of the same model), without reading its checkpoint again."""
    spec = build_model(config, translator.spec.cfg.src_vocab_size, translator.spec.cfg.tgt_vocab_size,
                       translator.tokenizer.piece_tables("tgt"))
    return Translator(spec, translator.params, translator.tokenizer, config, translator.aux,
                      checkpoint=translator.checkpoint, members=translator.members)


def load_member(config, path: str, workdir: str) -> Member:
    """The model of ``path``, a run eval.ensemble decodes with the one in ``workdir``: a run of the same family and
    vocabulary (of any architecture: its own model config), its parameters those ``config``'s eval.params chooses
    there (one-line errors otherwise)."""
    member = check_member(config, path, workdir)
    member.eval = copy.deepcopy(config.eval)  # which parameters, decoded how (its own members: none)
    member.eval.ensemble = ""
    log.info("ensemble: decoding with %s too", path)
    translator = load_translator(member, path)
    return Member(translator.params, translator.spec.cfg)


def write_average(config, workdir: str) -> str:
    """--mode average: the mean of eval.average_checkpoints checkpoints (eval.average_of), saved as the workdir's
    averaged checkpoint (decode it with eval.params=averaged). Returns its directory."""
    if config.eval.average_checkpoints < 1:
        raise JaxnatError("--mode average needs --config.eval.average_checkpoints=N (and eval.average_of=last|best)")
    _check_trained(workdir)
    check_matches_workdir(config, workdir)
    tokenizer = Tokenizer.load(workdir)
    spec = build_model(config, tokenizer.vocab_size("src"), tokenizer.vocab_size("tgt"), tokenizer.piece_tables("tgt"))
    params, choice = _restore(config, workdir, spec)
    ckpt = Checkpoints(workdir, config.train.keep_checkpoints)
    try:
        path = ckpt.save_averaged(params, choice["of"], choice["steps"])
    finally:
        ckpt.close()
    log.info("averaged the %s checkpoints of steps %s into %s (decode it with --config.eval.params=averaged)",
             choice["of"], choice["steps"], path)
    return path


def load_aux(key: str, path: str, family: str, workdir: str):
    """The parameters of the trained run in ``path`` that the run in ``workdir`` decodes with (`check_aux`)."""
    return load_translator(check_aux(key, path, family, workdir), path).params
