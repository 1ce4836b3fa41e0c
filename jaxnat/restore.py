"""Restoring a trained workdir for decoding: its tokenizer, its model and its best parameters, as a
`Translator`. Used by evaluation, `--mode translate`, distillation and the benchmarks."""

from __future__ import annotations

import logging
import os

import jax
import jax.numpy as jnp

from jaxnat.config import check_matches_workdir, workdir_config
from jaxnat.data.tokenizer import Tokenizer
from jaxnat.data.vocab import BOS_ID, EOS_ID
from jaxnat.decoding.translator import Translator
from jaxnat.errors import JaxnatError
from jaxnat.models import build_model
from jaxnat.training.checkpoint import Checkpoints

log = logging.getLogger("jaxnat")


def load_translator(config, workdir: str) -> Translator:
    """The best parameters of a workdir (or the newest training state if no validation ran yet)."""
    if not os.path.isdir(os.path.join(workdir, "spm")):
        raise JaxnatError(f"{workdir} holds no trained run (no spm/ directory); train first with --mode train")
    check_matches_workdir(config, workdir)
    tokenizer = Tokenizer.load(workdir)
    spec = build_model(config, tokenizer.vocab_size("src"), tokenizer.vocab_size("tgt"), tokenizer.piece_tables("tgt"))
    example = {"src": jnp.asarray([[BOS_ID, EOS_ID]], jnp.int32), "tgt": jnp.asarray([[BOS_ID, EOS_ID]], jnp.int32)}
    target = jax.jit(spec.init)(jax.random.PRNGKey(0), example)
    ckpt = Checkpoints(workdir, config.train.keep_checkpoints)
    params = ckpt.restore_best(target)
    if params is None:
        if ckpt.latest_step() is None:
            raise JaxnatError(f"{workdir} has no checkpoint yet; train first with --mode train")
        log.warning("no best checkpoint (no validation ran yet): using the newest training state")
        from jaxnat.training.optim import make_optimizer

        opt, _ = make_optimizer(config.train)
        fresh = {"step": jnp.zeros((), jnp.int32), "params": target, "opt_state": opt.init(target)}
        state = ckpt.restore_state(fresh)
        if state is None:
            raise JaxnatError(f"{workdir}: no checkpoint there is readable (see the warnings above)")
        params = state["params"]
    ckpt.close()
    return Translator(spec, params, tokenizer, config, load_rescorer(config, workdir))


def load_rescorer(config, workdir: str):
    """The parameters of the AR model of ``config.eval.rescorer`` (None when unset), after checking it is an
    AR run with this workdir's vocabulary."""
    path = config.eval.rescorer
    if not path:
        return None
    rescorer_config = workdir_config(path)
    if rescorer_config.model.name != "ar":
        raise JaxnatError(f"eval.rescorer={path} is a {rescorer_config.model.name!r} run; it must be an AR model")
    if not Tokenizer.same_models(path, workdir):
        raise JaxnatError(f"eval.rescorer={path} has another vocabulary than {workdir}; train this run with "
                          f"--config.data.spm_from={path}")
    rescorer_config.eval.rescorer = ""
    return load_translator(rescorer_config, path).params
