"""The training loop: data -> jit'd data-parallel train step -> validation -> checkpoints -> final evaluation.

Reproducibility contract: the batch of step t is a function of (data.seed, t) and the dropout key of step t
is `fold_in(root_key, t)`, so a run resumed from the checkpoint of step t continues exactly as the
uninterrupted run would have (bit-identical parameters on CPU).
"""

from __future__ import annotations

import functools
import logging
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm import tqdm

from jaxnat.config import (check_aux, check_known_keys, check_matches_workdir, check_member, check_vocabulary_from,
                           default_config, ensemble_members, model_keys, validate, workdir_config)
from jaxnat.data.batching import (PackedBatcher, TrainBatcher, bucket_lengths, eval_batches, example_lengths,
                                  fitted_buckets, prefetch, prepare_with_init)
from jaxnat.data.distilled import check_same_teacher, record_teacher
from jaxnat.data.piece_links import sentence_links
from jaxnat.data.sources import load_alignments, load_corpus, load_inits, load_pairs, train_origin
from jaxnat.data.text import corpus_fingerprint
from jaxnat.data.tokenizer import Tokenizer, no_language_tokens_named
from jaxnat.data.vocab import UNK_ID
from jaxnat.errors import ConfigError, JaxnatError, Stopped
from jaxnat.evaluation.metrics import bleu, check_bleu_tokenize, run_bleu_tokenize
from jaxnat.models import build_model, count_params, family_of
from jaxnat.paths import write_whole
from jaxnat.training import mesh as mesh_lib
from jaxnat.training.checkpoint import Checkpoints
from jaxnat.training.flops import Utilisation, count_correction, program_flops
from jaxnat.training.history import History, plot_curves
from jaxnat.training.optim import Plateau, lr_scale, make_optimizer, perplexity, with_lr_scale
from jaxnat.training.programs import TrainPrograms
from jaxnat.training.stop import StopRequest

log = logging.getLogger("jaxnat")


def process_age_s() -> float:
    """Seconds since this process started (Linux's /proc; elsewhere since jaxnat's trainer was imported)."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22: start time, in clock ticks
        with open("/proc/uptime") as f:
            return float(f.read().split()[0]) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.time() - _IMPORTED


_IMPORTED = time.time()


class TrainingError(JaxnatError):
    """Training cannot go on (e.g. the loss stayed non-finite)."""


def due(done: int, every: int, steps: int) -> bool:
    """Whether the step count ``done`` is one of a periodic task's (a log window, a validation, a checkpoint):
    every ``every`` steps, and at the last of ``steps`` whatever the period, so that a run's end is always logged,
    validated and saved."""
    return done % every == 0 or done == steps


class NonFiniteSteps:
    """The steps whose loss or gradient was not finite (`make_train_step` skipped their updates): `count` warns of
    each and stops the run at ``limit`` in a row (train.max_bad_steps); a finite step starts the row again.
    ``skipped``: all of them, for the log."""

    def __init__(self, limit: int):
        self.limit, self.in_a_row, self.skipped = limit, 0, 0

    def count(self, finite: bool, step: int) -> None:
        """``step``: the steps done before it (its log line numbers it as the log windows and checkpoints do)."""
        if finite:
            self.in_a_row = 0
            return
        self.in_a_row, self.skipped = self.in_a_row + 1, self.skipped + 1
        log.warning("step %d: non-finite loss or gradient, update skipped (%d in a row)", step + 1, self.in_a_row)
        if self.in_a_row >= self.limit:
            raise TrainingError(f"loss was not finite for {self.in_a_row} consecutive steps (last: step {step + 1}); "
                                f"lower train.lr or check the data")


def check_pairs_left(counts: dict[str, int], split: str) -> None:
    """Logs what filtering (`prepare_with_init`) kept of the train or valid split; one line where it kept nothing:
    no batch to train on, or a validation loss over no pair, which would read 0.000 at every validation."""
    log.info("%s pairs: %s", split, counts)
    if not counts["kept"]:
        raise TrainingError(f"no {split} pair is left after filtering ({counts}): every pair is longer than "
                            f"data.max_len or has an empty side; raise data.max_len or set data.truncate=true")


def unknown_pairs(src: list[np.ndarray], tgt: list[np.ndarray]) -> str:
    """A warning where training pairs hold UNK ('' where none do). A vocabulary trained on these pairs has a piece
    for each of their characters; one made from other text (data.spm_from, train.init_from, this workdir's first
    run) or from a sample of them (over a million lines) may not, and without byte fallback the model then learns
    to write UNK, silently."""
    n = int(np.count_nonzero(_unk_rows(src) | _unk_rows(tgt)))
    if not n:
        return ""
    return (f"{n} of {len(src)} training pairs hold characters the vocabulary has no piece for (UNK), which the model "
            f"learns to write: it was made from other text (data.spm_from, train.init_from, an earlier run in this "
            f"workdir) or a sample of it; one trained with data.byte_fallback=true has none")


def _unk_rows(rows: list[np.ndarray]) -> np.ndarray:
    """bool[N], whether each row holds UNK: in one pass over the concatenated rows (a Python loop over millions of
    rows took a minute at every start); each row holds at least BOS and EOS, so no segment is empty."""
    starts = np.cumsum([0] + [len(r) for r in rows[:-1]])
    return np.add.reduceat(np.concatenate(rows) == UNK_ID, starts) > 0


def make_train_step(spec, optimizer, schedule, microbatches: int = 1):
    """Returns step(state, batch, root_key) -> (state, metrics), to be jit'd with donation.

    state: {'step': int32[], 'params': pytree, 'opt_state': pytree}. A step whose loss or gradient is not
    finite leaves params and optimizer state unchanged (metrics['finite'] = False).

    With ``microbatches`` k > 1 (train.microbatches) the batch's rows are cut into k chunks, rows i, i + k, i + 2k,
    … in chunk i (so that each device keeps its share of every chunk), and one `lax.scan` sums their gradients:
    one update, the chunks' losses weighted by their tokens (as fairseq's --update-freq, and as evaluation adds
    up batches), with a k-th of the activations alive at a time. The batch's rows must be a multiple of k.
    """

    def step(state, batch, root_key):
        rng = jax.random.fold_in(root_key, state["step"])
        stepped = {"step": state["step"]} if spec.stepped else {}  # an annealed schedule inside the loss

        def objective(params):
            loss_sum, aux = spec.loss(params, batch, rng, train=True, **stepped)
            return loss_sum / jnp.maximum(aux["count"], 1.0), aux

        if microbatches == 1:
            (loss, aux), grads = jax.value_and_grad(objective, has_aux=True)(state["params"])
        else:
            loss, aux, grads = _accumulated(spec, state["params"], batch, rng, stepped, microbatches)
        grad_norm = optax.tree.norm(grads)
        finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
        updates, opt_state = optimizer.update(grads, state["opt_state"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        choose = lambda new, old: jax.tree_util.tree_map(lambda a, b: jnp.where(finite, a, b), new, old)  # noqa: E731
        lr, scale = schedule(state["step"]), lr_scale(state["opt_state"])  # the rate this step trained with
        if scale is not None:  # train.lr_schedule=plateau: the scale the trainer sets between steps
            lr = lr * scale
        new_state = {
            "step": state["step"] + 1,
            "params": choose(params, state["params"]),
            "opt_state": choose(opt_state, state["opt_state"]),
        }
        metrics = {
            "loss": loss, "nll": aux["nll"] / jnp.maximum(aux["count"], 1.0), "tokens": aux["count"],
            "grad_norm": grad_norm, "lr": lr, "finite": finite,
            **{k: aux[k] for k in spec.terms},
        }
        return new_state, metrics

    return step


def _accumulated(spec, params, batch: dict, rng, stepped: dict, k: int):
    """(loss, aux, grads) of ``batch`` as `make_train_step`'s objective gives them, from k row chunks in a scan:
    the chunks' loss sums and gradients added, then divided by all their tokens; aux has 'nll' and 'count' summed
    and ``spec.terms`` as the chunks' token-weighted means (exact for per-token shares)."""
    rows = jax.tree_util.tree_leaves(batch)[0].shape[0]
    if rows % k:
        raise ValueError(f"a batch of {rows} rows cannot be cut into train.microbatches={k} chunks")
    chunks = jax.tree_util.tree_map(lambda x: jnp.swapaxes(x.reshape(rows // k, k, *x.shape[1:]), 0, 1), batch)

    def chunk(total, inputs):
        index, part = inputs
        (loss_sum, aux), grads = jax.value_and_grad(
            lambda p: spec.loss(p, part, jax.random.fold_in(rng, index), train=True, **stepped), has_aux=True)(params)
        sums = {"loss": loss_sum, "nll": aux["nll"], "count": aux["count"], "grads": grads,
                **{t: aux[t] * aux["count"] for t in spec.terms}}
        return jax.tree_util.tree_map(jnp.add, total, sums), None

    zero = jnp.zeros((), jnp.float32)
    zeros = {"loss": zero, "nll": zero, "count": zero, "grads": jax.tree_util.tree_map(jnp.zeros_like, params),
             **{t: zero for t in spec.terms}}
    total, _ = jax.lax.scan(chunk, zeros, (jnp.arange(k), chunks))
    n = jnp.maximum(total["count"], 1.0)
    grads = jax.tree_util.tree_map(lambda g: g / n, total["grads"])
    aux = {"nll": total["nll"], "count": total["count"], **{t: total[t] / n for t in spec.terms}}
    return total["loss"] / n, aux, grads


def make_eval_step(spec):
    def step(params, batch):
        loss_sum, aux = spec.loss(params, batch, jax.random.PRNGKey(0), train=False)
        # the terms are batch means: weighted by the batch's tokens, as the loss
        return {"loss": loss_sum, "nll": aux["nll"], "count": aux["count"],
                **{k: aux[k] * aux["count"] for k in spec.terms}}

    return step


def holds_steps(directory: str) -> bool:
    """Whether an Orbax checkpoint directory holds a step (every run makes its directories empty at its start)."""
    return os.path.isdir(directory) and any(d.isdigit() for d in os.listdir(directory))


RESUME_KEYS = ("seed", "prng_impl")  # train.*: the batch of step t and every random draw depend on them


def check_resumable(config, workdir: str) -> None:
    """A one-line `ConfigError` when ``workdir`` has training states this config cannot resume as the same run:
    their optimizer state is another's (train.lr_schedule=plateau keeps a scale there, train.clip_norm > 0 a state
    of its own: restoring would fail, move them aside as unreadable and train from the start), or they were made
    with another train.seed or train.prng_impl (the batches and random numbers from there on would be another
    run's, and config.json would credit the whole run to the new values)."""
    if not holds_steps(os.path.join(workdir, "checkpoints", "last")):
        return
    try:
        trained = workdir_config(workdir).train
    except ConfigError:  # no config.json: nothing to compare with
        return

    def structure(train_cfg):
        params = {"w": jax.ShapeDtypeStruct((1,), jnp.float32)}
        return jax.tree_util.tree_structure(jax.eval_shape(make_optimizer(train_cfg)[0].init, params))

    t = config.train
    if structure(trained) != structure(t):
        raise ConfigError(f"the checkpoints in {workdir} hold the optimizer state of train.lr_schedule="
                          f"{trained.lr_schedule}, train.clip_norm={trained.clip_norm}, which this config's "
                          f"(train.lr_schedule={t.lr_schedule}, train.clip_norm={t.clip_norm}) cannot resume: keep "
                          f"those values, or start another workdir from this run with train.init_from={workdir}")
    differ = [f"train.{k}={t[k]!r} (trained: {trained[k]!r})" for k in RESUME_KEYS if t[k] != trained[k]]
    if differ:
        raise ConfigError(f"the checkpoints in {workdir} were trained with other random numbers: {'; '.join(differ)}; "
                          f"keep the run's values to resume it, or train another --workdir")


def check_schedule_keys(config) -> None:
    """A one-line `ConfigError` for a learning-rate setting that train.lr_schedule does not read (it would train as
    if unset) or that turns it around: train.min_lr is the end of the cosine schedule (at most train.lr: it decays
    to it), train.warmup_init_lr the start of the warm-up (at most train.lr: it rises from it), plateau_factor
    and plateau_patience are the plateau schedule's. Checked when training starts, not in `validate`: a workdir
    trained with such a key (its config.json) still evaluates."""
    t, defaults = config.train, default_config().train
    if t.min_lr and t.lr_schedule != "cosine":
        raise ConfigError(f"train.min_lr={t.min_lr} is read by train.lr_schedule=cosine only; train.lr_schedule="
                          f"{t.lr_schedule} never decays to it: leave train.min_lr at 0 or use the cosine schedule")
    if t.warmup_steps and t.warmup_init_lr > t.lr:
        raise ConfigError(f"train.warmup_init_lr ({t.warmup_init_lr}) must not exceed train.lr ({t.lr}): the warm-up "
                          f"rises from it to train.lr over train.warmup_steps")
    if t.lr_schedule == "cosine" and t.min_lr > t.lr:
        raise ConfigError(f"train.min_lr ({t.min_lr}) must not exceed train.lr ({t.lr}): the cosine schedule decays "
                          f"from train.lr to train.min_lr")
    for key in ("plateau_factor", "plateau_patience"):
        if t[key] != defaults[key] and t.lr_schedule != "plateau":
            raise ConfigError(f"train.{key}={t[key]} is read by train.lr_schedule=plateau only (train.lr_schedule is "
                              f"{t.lr_schedule}); any schedule stops on validation plateaus with train.stop_patience")


def check_final_evaluation(config, workdir: str) -> None:
    """A one-line `ConfigError` when the evaluation a training command ends with could not find the parameters
    eval.params and eval.average_checkpoints name, said before the run trains instead of after it: an average of
    more checkpoints than training keeps (train.keep_checkpoints, train.keep_best) or writes (one training state
    each train.checkpoint_every steps and at the last; one best candidate a validation), or eval.params=averaged
    in a workdir without the average `--mode average` writes."""
    t, e = config.train, config.eval
    n = e.average_checkpoints
    if n > 0:
        last = e.average_of == "last"
        keep = "keep_checkpoints" if last else "keep_best"
        if t[keep] < n:
            raise ConfigError(f"eval.average_checkpoints={n} with eval.average_of={e.average_of} needs train.{keep} "
                              f">= {n} (it is {t[keep]}): training keeps no more for the evaluation to average")
        every = "checkpoint_every" if last else "eval_every"
        written = -(-t.steps // t[every])  # each every-th step, and the last
        if written < n:
            what = f"writes {written} training states" if last else f"validates {written} times"
            raise ConfigError(f"eval.average_checkpoints={n} with eval.average_of={e.average_of}: the run {what} "
                              f"(train.steps={t.steps}, train.{every}={t[every]}); lower eval.average_checkpoints "
                              f"or train.{every}")
    elif e.params == "averaged" and not holds_steps(os.path.join(workdir, "checkpoints", "averaged")):
        raise ConfigError(f"eval.params=averaged decodes the checkpoint --mode average writes after training, and "
                          f"{workdir} has none: train with eval.params=best (or eval.average_checkpoints=N to decode "
                          f"an average of N checkpoints at the end), then run --mode average")


def _with_configured_keys(method):
    """A `Trainer` method run with train.prng_impl as jax's key implementation: the keys it makes and the programs
    it traces (raw key arrays carry no implementation of their own: jax reads it from this setting)."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with jax.default_prng_impl(self.config.train.prng_impl):
            return method(self, *args, **kwargs)

    return run


def lowered_step_flops(spec, optimizer, schedule, batch: dict, key) -> float | None:
    """The FLOPs of ``spec``'s train step on ``batch`` (arrays or `jax.ShapeDtypeStruct`s), for the whole batch: XLA's
    count of the lowered program (not compiled: seconds; the count before XLA's optimisations) with every loop's
    iterations and each coin's branches at their probabilities (`count_correction`)."""
    params = spec.abstract_params()  # shapes only: nothing is computed
    state = {"step": jax.ShapeDtypeStruct((), jnp.int32), "params": params,
             "opt_state": jax.eval_shape(optimizer.init, params)}
    traced = jax.jit(make_train_step(spec, optimizer, schedule)).trace(state, batch, key)
    flops = program_flops(traced.lower())
    return flops + count_correction(traced.jaxpr.jaxpr) if flops else None


def _merge(initial, restored, fresh: list, path: str = ""):
    """``initial`` (a nested dict of parameters) with every leaf that ``restored`` has at the same path;
    appends to ``fresh`` the top-level names of the subtrees only ``initial`` has."""
    if not isinstance(initial, dict):
        return restored
    out = {}
    for k, v in initial.items():
        if k in restored:
            out[k] = _merge(v, restored[k], fresh, f"{path}/{k}")
        else:
            out[k] = v
            fresh.append(f"{path}/{k}".lstrip("/"))
    return out


def batch_plan(shapes, devices: int) -> dict:
    """What a training state records of the batches it was trained on (beside its progress): the global (rows,
    length) shapes and the device count their rows are rounded to."""
    return {"devices": devices, "batch_shapes": [list(s) for s in sorted(shapes)]}


def plan_change(progress: dict | None, plan: dict) -> str:
    """Why a run resumed from a training state whose progress records another `batch_plan` than ``plan`` goes on
    with other batches than the uninterrupted run; '' when the shapes are the same (or the state records none)."""
    if not progress or "batch_shapes" not in progress or progress["batch_shapes"] == plan["batch_shapes"]:
        return ""

    def shown(p):
        return f"{', '.join(f'{rows}x{length}' for rows, length in p['batch_shapes'])} on {p['devices']} device(s)"

    if progress["devices"] != plan["devices"]:  # data.batch_tokens' rows are rounded to a multiple of the devices
        how = f"resume on {progress['devices']} device(s) to continue it exactly"
    else:
        how = ("data.batch_tokens, data.max_len, data.pack, data.max_buckets or train.microbatches changed: resume "
               "with the trained values to continue it exactly")
    return (f"the checkpoint was trained on batches of {shown(progress)}, this run's are {shown(plan)}: from here on "
            f"it trains on other batches than the uninterrupted run ({how})")


def corpora_from(progress: dict | None, now: dict, step: int) -> tuple[list[dict], str]:
    """The corpora a training state records (beside its progress) when training goes on from ``step`` on the
    training pairs ``now`` ({"origin": where they are read, "fingerprint": `text.corpus_fingerprint`}): each
    {"step": the first step trained on it, "origin", "fingerprint"}, the one in use last; and why to warn ('' where
    the pairs are those the state trained on, wherever they are read from now, or the state records none)."""
    corpora = list((progress or {}).get("corpora") or [])
    if not corpora:  # a new run, or a state saved before corpora were recorded: known from here on
        return [{"step": step, **now}], ""
    if corpora[-1]["fingerprint"] == now["fingerprint"]:
        return corpora, ""
    last, pairs = corpora[-1], now["fingerprint"]["pairs"]
    return [*corpora, {"step": step, **now}], (
        f"the training pairs of {now['origin']} ({pairs} pairs) are not those this run trained on from step "
        f"{last['step']} to {step}, read from {last['origin']} ({last['fingerprint']['pairs']} pairs): it goes on "
        f"training on the new ones, recorded in its training states' progress (\"corpora\"); resume with the old "
        f"files to continue the run exactly")


SCHEDULE_KEYS = ("lr", "lr_schedule", "warmup_steps", "warmup_init_lr", "min_lr", "steps")  # train.*: the schedule's


def schedule_record(train_cfg, schedule, step: int) -> dict:
    """What a training state of ``step`` records of its learning-rate schedule (beside its progress): the keys it
    reads and the rate the next step trains with."""
    return {"schedule": {k: train_cfg[k] for k in SCHEDULE_KEYS}, "next_lr": float(schedule(step))}


def schedule_change(progress: dict | None, record: dict) -> str:
    """Why a run resumed from a training state whose progress records another rate for the next step than
    ``record`` (`schedule_record`) goes on with another learning rate than the uninterrupted run ('' when the
    rates are the same, or the state records none): a changed train.lr, warm-up, or train.steps, where the linear
    and cosine schedules end."""
    if not progress or "next_lr" not in progress or np.float32(progress["next_lr"]) == np.float32(record["next_lr"]):
        return ""
    trained = progress["schedule"]
    keys = "; ".join(f"train.{k}={v!r}, trained with {trained.get(k)!r}" for k, v in record["schedule"].items()
                     if trained.get(k) != v)
    return (f"the learning rate jumps at the resume: the next step trains with {record['next_lr']:.3g}, the "
            f"checkpoint's schedule with {progress['next_lr']:.3g} ({keys}; the linear and cosine schedules end at "
            f"train.steps): keep the trained values to go on with its schedule")


class Trainer:
    """Holds one run: config, workdir, data, model, optimizer, checkpoints."""

    def __init__(self, config, workdir: str):
        # again, for a config changed in Python after build_config: a misspelt key (config.train.stepz = 5) would be
        # added without a word and train without its effect, a value out of range fail deep in the first step
        check_known_keys(config, "the config")
        validate(config)
        # validation BLEU's tokenizer (MeCab for ja, ko): before training, not at its first validation
        check_bleu_tokenize(run_bleu_tokenize(config))
        self.config, self.workdir = config, workdir
        self.family = family_of(config.model.name)
        d = config.data
        self.corpus = load_corpus(d)  # first: a bad data path fails before anything is written
        self.inits = load_inits(d, self.corpus)  # {split: initial hypotheses}; {} without data.init_lang
        # {split: constraint pairs per sentence}; {} without data.pairs_dir
        self.pairs = load_pairs(d, self.corpus, trains_on=self.family.supports.pairs)
        # {split: word alignments per sentence} of guided alignment; {} without data.alignments_dir
        self.alignments = load_alignments(d, self.corpus)
        check_matches_workdir(config, workdir)  # before anything in the workdir is written
        check_resumable(config, workdir)
        if holds_steps(os.path.join(workdir, "checkpoints", "last")):
            check_same_teacher(d.dir, workdir)
        check_final_evaluation(config, workdir)
        check_schedule_keys(config)
        train_src, train_tgt = self.corpus["train"]
        if d.spm_from and not Tokenizer.exists(workdir) and not Tokenizer.exists(d.spm_from):
            # a SentencePiece file or a workdir's spm/ itself, given for the workdir, named "<it>/spm" after writing
            raise ConfigError(f"data.spm_from={d.spm_from}: no SentencePiece model in {os.path.join(d.spm_from, 'spm')}"
                              f"; data.spm_from names a trained run's workdir, the directory that holds spm/")
        if config.train.init_from:  # the same model (or the one it extends) and vocabulary as the run it starts from
            if not os.path.isdir(config.train.init_from):
                raise ConfigError(f"train.init_from={config.train.init_from}: no such directory (a trained run's "
                                  f"workdir)")
            check_matches_workdir(config, config.train.init_from, self.stage_keys(config.train.init_from),
                                  named_by="train.init_from")
            resuming = holds_steps(os.path.join(workdir, "checkpoints", "last"))  # then init_from is not read
            if d.spm_from and not resuming and not Tokenizer.same_models(d.spm_from, config.train.init_from):
                # the parameters are init_from's: their embedding rows are its pieces, not another vocabulary's
                raise ConfigError(f"data.spm_from={d.spm_from} holds another vocabulary than train.init_from="
                                  f"{config.train.init_from}, whose parameters start this run (and whose vocabulary "
                                  f"it takes): leave data.spm_from empty")
            if not resuming and not holds_steps(os.path.join(config.train.init_from, "checkpoints", "best")):
                raise TrainingError(f"train.init_from={config.train.init_from}: no best checkpoint there (no "
                                    f"validation has run yet: train that run to a train.eval_every step first)")
        if d.spm_from and not Tokenizer.exists(workdir):  # (a workdir's own vocabulary: check_matches_workdir)
            check_vocabulary_from(config, d.spm_from)

        def write_config_and_vocabulary():
            if jax.process_index() == 0:
                os.makedirs(workdir, exist_ok=True)
                if d.spm_from or config.train.init_from:
                    Tokenizer.copy_models(d.spm_from or config.train.init_from, workdir)
                record_teacher(d.dir, workdir, own_vocabulary=not Tokenizer.exists(workdir))
            tokenizer = Tokenizer.train_or_load(workdir, train_src, train_tgt, d.vocab_size, joint=d.joint_vocab,
                                                model_type=d.spm_model_type, seed=config.train.seed,
                                                byte_fallback=d.byte_fallback)
            # written after the vocabulary: one refused (data.vocab_size too small) leaves no config.json, which
            # the command with a larger data.vocab_size would have to match
            if jax.process_index() == 0:  # whole or absent (a kill mid-write left a config.json no command reads)
                write_whole(os.path.join(workdir, "config.json"), config.to_json_best_effort(indent=2, sort_keys=True))
            return tokenizer

        # process 0 writes, the others read what it wrote (the workdir is shared)
        self.tokenizer = mesh_lib.one_process_first("vocabulary", write_config_and_vocabulary)
        self.spec = build_model(config, self.tokenizer.vocab_size("src"), self.tokenizer.vocab_size("tgt"),
                               self.tokenizer.piece_tables("tgt"))
        if aux := self.family.aux_run and self.family.aux_run(config):
            check_aux(*aux, workdir)  # the run the final evaluation decodes with: refused now, not after training
        for path in ensemble_members(config):  # so are the runs it decodes with as an ensemble
            check_member(config, path, workdir)
        self.mesh = mesh_lib.make_mesh()
        self.optimizer, self.schedule = make_optimizer(config.train)
        self.ckpt = Checkpoints(workdir, config.train.keep_checkpoints, config.train.keep_best, trains=True)
        # validation's shapes (the translator's too): geometric, so its figures do not depend on data.max_buckets
        self.buckets = bucket_lengths(d.max_len, growth=d.bucket_growth, multiple=d.bucket_multiple)

    # -- data ------------------------------------------------------------------------------------------
    def encoded_split(self, split: str):
        """A `Prepared` (src, tgt, init, counts, extras): [BOS … EOS] int32 arrays filtered by data.max_len (see
        prepare_with_init).

        init is None without data.init_lang; it is tokenized with the target model, as it is a target-language
        hypothesis that the model edits into the reference. extras: the per-example arrays of the model's family
        (`Family.train_extras`), or None.
        """
        src, tgt = self.corpus[split]
        src_ids = self.tokenizer.encode(src, "src")
        tgt_ids = self.tokenizer.encode(tgt, "tgt")
        if self.tokenizer.languages:
            # a multilingual model learns its pairs as it translates them, each side led by its language's token
            # (data.src_lang_token, data.tgt_lang_token: `Translator.language_tokens`)
            code = {side: self.tokenizer.language_id(self.config.data[f"{side}_lang_token"], side)
                    for side in ("src", "tgt")}
            src_ids = [[code["src"], *ids] for ids in src_ids]
            tgt_ids = [[code["tgt"], *ids] for ids in tgt_ids]
        else:
            no_language_tokens_named(self.config.data)
        init_ids = self.tokenizer.encode(self.inits[split], "tgt") if split in self.inits else None
        extras = None
        if self.family.train_extras is not None:
            extras, summary = self.family.train_extras(self.config, self.tokenizer, src, tgt, self.pairs.get(split))
            log.info("%s %s", split, summary)
        if self.config.data.alignments_dir:  # guided alignment: each pair's piece links (none where a split has none)
            extras = {**(extras or {}), "links": self.piece_links(split, src, tgt)}
        return prepare_with_init(src_ids, tgt_ids, init_ids, self.config.data.max_len, self.config.data.truncate,
                                 extras=extras)

    def piece_links(self, split: str, src: list[str], tgt: list[str]):
        """int32[N, K, 3], the piece links of the split's pairs from its word alignments (`piece_links.as_array`; one
        empty row each for a split without them)."""
        if not hasattr(self.tokenizer, "piece_spans") or self.tokenizer.languages:
            raise ConfigError("data.alignments_dir: guided alignment maps words to pieces by a SentencePiece "
                              "vocabulary of jaxnat's own, without language tokens (this run's is an imported one)")
        if split not in self.alignments:
            return np.full((len(src), 1, 3), -1, np.int32)
        d = self.config.data
        links, counts = sentence_links(self.tokenizer, src, tgt, self.alignments[split], d.src_lang, d.tgt_lang)
        log.info("%s guided alignment: %d piece links in %d of %d pairs", split, counts["links"],
                 counts["sentences"], len(src))
        if counts["unfound"]:
            log.warning("%s: %d pairs have words the alignments name that are not in their text as written; they "
                        "are trained without links", split, counts["unfound"])
        return links

    def packs(self) -> bool:
        """Whether training packs several pairs a row (data.pack, for a model whose loss takes packed batches, not
        training from initial hypotheses): one batch shape, one compiled train program."""
        return bool(self.config.data.pack) and self.spec.packs and not self.config.data.init_lang

    def make_batcher(self) -> TrainBatcher | PackedBatcher:
        src, tgt, init, counts, extras = self.encoded_split("train")
        check_pairs_left(counts, "train")
        if unknown := unknown_pairs(src, tgt):
            log.warning("%s", unknown)
        if self.packs():
            if self.family.check_packable is not None:
                self.family.check_packable(src, tgt, extras)
            budget = self.family.pack_budget(self.config, extras) if self.family.pack_budget else None
            batcher = PackedBatcher(src, tgt, self.config.data.batch_tokens, self.config.data.max_len,
                                    self.config.train.seed, multiple_of=self.rows_multiple, extras=extras,
                                    process=(jax.process_index(), jax.process_count()), budget=budget)
            log.info("packed %d pairs into %d rows of %d tokens: %.1f%% padding", batcher.num_examples,
                     len(batcher.rows), batcher.width, 100 * batcher.padding)
            return batcher
        d = self.config.data
        # one compiled train program per bucket: data.max_buckets lengths fitted to the pairs (0: geometric)
        buckets = (fitted_buckets(example_lengths(src, tgt, init), d.max_buckets, d.bucket_multiple, d.max_len)
                   if d.max_buckets else self.buckets)
        batcher = TrainBatcher(src, tgt, d.batch_tokens, buckets, self.config.train.seed,
                               multiple_of=self.rows_multiple, init=init, extras=extras,
                               process=(jax.process_index(), jax.process_count()))
        log.info("%d pairs in buckets of %s tokens: %.1f%% padding", batcher.num_examples, batcher.buckets,
                 100 * batcher.padding)
        return batcher

    # -- state -----------------------------------------------------------------------------------------
    @_with_configured_keys
    def init_state(self, example_batch):
        rng = jax.random.PRNGKey(self.config.train.seed)
        replicated = mesh_lib.replicated(self.mesh)

        def init():
            params = self.spec.init(rng, {k: jnp.asarray(v[:1]) for k, v in example_batch.items()})
            return {"step": jnp.zeros((), jnp.int32), "params": params, "opt_state": self.optimizer.init(params)}

        return jax.jit(init, out_shardings=replicated)()

    def trace_train_step(self, state, batcher: TrainBatcher, root_key, shape: tuple[int, int]):
        """The train step traced (`jax.stages.Traced`: its jaxpr, and `.lower()`) for the (batch, length) ``shape``
        of ``batcher``: it takes the batcher's keys with their shapes (`TrainBatcher.key_shapes`)."""
        sharding = mesh_lib.batch_sharding(self.mesh)
        return self._train_step.trace(state, {k: jax.ShapeDtypeStruct(key_shape, jnp.int32, sharding=sharding)
                                              for k, key_shape in batcher.key_shapes(shape).items()}, root_key)

    @property
    def rows_multiple(self) -> int:
        """What every train batch's rows are a multiple of: the devices, each taking a share of each microbatch."""
        return jax.device_count() * self.config.train.microbatches

    @functools.cached_property
    def _train_step(self):
        return jax.jit(make_train_step(self.spec, self.optimizer, self.schedule, self.config.train.microbatches),
                       donate_argnums=(0,))

    def compile_train_steps(self, state, batcher: TrainBatcher, root_key, first: tuple[int, int]) -> TrainPrograms:
        """The train step for every shape of ``batcher``, compiling in background threads, the ``first`` shape's
        first (`TrainPrograms`). The others are traced while training runs, so on the state's shapes and shardings
        only: its arrays are donated to the first step."""
        abstract = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state)
        return TrainPrograms(functools.partial(self.trace_train_step, abstract, batcher, root_key),
                             [first, *sorted(batcher.shapes - {first})])

    def stage_keys(self, workdir: str) -> tuple[str, ...]:
        """The model keys that may differ from the run in ``workdir`` that this one starts from: none for the
        same model; the model name and this model's own architecture keys where this model extends the one
        trained there (`Family.extends`)."""
        source = workdir_config(workdir).model.name
        if source == self.config.model.name:
            return ()
        parent = self.family.extends
        if source != parent:
            raise TrainingError(f"train.init_from={workdir} trained model {source!r}; model "
                                f"{self.config.model.name!r} starts from a run of itself"
                                + (f" or of {parent!r}" if parent else ""))
        return ("model.name",) + tuple(k for k in model_keys(self.config.model.name) if k not in model_keys(parent))

    def start_from(self, state, workdir: str, example_batch):
        """``state`` with the best parameters of the run in ``workdir`` (train.init_from); optimizer and step
        stay fresh. From a run of the model this one extends, the parameters it has are taken by name and the
        others keep their initialisation."""
        source_config = workdir_config(workdir)
        if source_config.model.name == self.config.model.name:
            target = state["params"]
        else:  # the structure of the source's parameters, to restore them into
            cfg = self.spec.cfg
            source_spec = build_model(source_config, cfg.src_vocab_size, cfg.tgt_vocab_size)
            target = source_spec.init(jax.random.PRNGKey(0),
                                      {k: jnp.asarray(example_batch[k][:1]) for k in ("src", "tgt")})
        source = Checkpoints(workdir, 1)
        params = source.restore_best(target)
        source.close()
        if params is None:
            raise TrainingError(f"train.init_from={workdir}: its best checkpoint is unreadable")
        fresh = []
        params = _merge(state["params"], params, fresh)
        log.info("starting from the best parameters of %s%s", workdir,
                 f" (new here, from their initialisation: {', '.join(fresh)})" if fresh else "")
        return {**state, "params": params}

    # -- validation --------------------------------------------------------------------------------------
    def validate(self, params, valid_data, translator) -> dict:
        """valid_loss, valid_nll and the model's valid_<term> (`ModelSpec.terms`) of valid_data (the `Prepared` of
        `encoded_split`), and valid_bleu of the first train.valid_bleu_sentences valid sentences decoded as the
        model is trained to: from scratch (with their constraint pairs, for a model that reads them), or refining
        their initial hypotheses with data.init_lang, so that a post-editing run keeps the checkpoint that refines
        best."""
        totals = dict.fromkeys(("loss", "nll", "count", *self.spec.terms), 0.0)
        for _, batch in eval_batches(valid_data.src, valid_data.tgt, self.config.eval.batch_size, self.buckets,
                                     init=valid_data.init, extras=valid_data.extras):
            out = jax.device_get(self._eval_step(params, batch))
            for k in totals:
                totals[k] += float(out[k])
        n = max(totals["count"], 1.0)
        result = {f"valid_{k}": totals[k] / n for k in totals if k != "count"}
        k = self.config.train.valid_bleu_sentences
        srcs, refs = self.corpus["valid"][0][:k], self.corpus["valid"][1][:k]
        pairs = self.pairs["valid"][:k] if self.spec.supports.pairs else None
        inits = self.inits["valid"][:k] if "valid" in self.inits else None
        translator.params = mesh_lib.local_copy(params)  # the program the checkpoint's evaluation decodes with
        hyps = [o["hyp"] for o in translator.translate(srcs, self.config.eval.valid_beam_size,
                                                       self.config.eval.batch_size, pairs=pairs,
                                                       drop_long_pairs=True, inits=inits, cut_long_inits=True,
                                                       label="valid")]
        result["valid_bleu"] = bleu(hyps, refs, run_bleu_tokenize(self.config))[0]
        return result

    # -- the loop ----------------------------------------------------------------------------------------
    @_with_configured_keys
    def train(self) -> bool:
        """Trains to ``train.steps`` from the newest checkpoint (or from the start); False when the workdir's
        training was already complete (nothing compiled, nothing written)."""
        from jaxnat.decoding.translator import Translator
        from jaxnat.training.history import tensorboard_writer  # None without tensorboardX (an optional package)

        cfg = self.config
        t = cfg.train
        batcher = self.make_batcher()
        valid_data = self.encoded_split("valid")
        check_pairs_left(valid_data.counts, "valid")
        state = self.init_state(batcher.batch(0))
        log.info("model %s: %.2fM parameters; batch shapes %s", cfg.model.name,
                 count_params(state["params"]) / 1e6, sorted(batcher.shapes))
        # validations without a new best perplexity: the plateau schedule's learning-rate scale, train.stop_patience
        plateau = Plateau(t.plateau_factor, t.plateau_patience if t.lr_schedule == "plateau" else 0, t.stop_patience)
        held = sorted(self.ckpt.last.all_steps())
        restored, progress = self.ckpt.restore_state_and_progress(state)  # None: a new run, or none readable
        if restored is None and held:  # each moved aside, warned: training from step 0 would undo days without a word
            raise TrainingError(f"no training state in {self.ckpt.root}/last is readable (steps {held}, moved to "
                                f"checkpoints/unreadable/: see the warnings above); the same command again trains "
                                f"this run from step 0")
        plan = batch_plan(batcher.shapes, jax.device_count())
        if restored is not None:
            state = restored
            plateau.resume(progress)
            log.info("resumed from step %d%s", int(state["step"]),  # train.init_from only starts a run
                     f" (its own training state: train.init_from={t.init_from} is not read)" if t.init_from else "")
            resumed = schedule_record(t, self.schedule, int(state["step"]))
            for change in (plan_change(progress, plan), schedule_change(progress, resumed)):
                if change:
                    log.warning("%s", change)
        elif t.init_from:
            state = self.start_from(state, t.init_from, batcher.batch(0))
        start = int(state["step"])
        if start >= t.steps:
            log.info("training already complete: step %d of train.steps=%d", start, t.steps)
            return False
        if plateau.stopped:
            log.info("training already complete: stopped early at step %d, %d validations without a new best valid "
                     "perplexity (train.stop_patience=%d)", start, plateau.since_best, t.stop_patience)
            return False
        trained_on = {"origin": train_origin(cfg.data), "fingerprint": corpus_fingerprint(*self.corpus["train"])}
        corpora, change = corpora_from(progress, trained_on, start)  # recorded beside each training state
        if change:
            log.warning("%s", change)
        # one entry per log window and per validation, in <workdir>/history.jsonl (curves.png is drawn from it)
        self.history = History(self.workdir, start, write=jax.process_index() == 0)
        best = self.ckpt.best_meta() or {"bleu": -1.0, "step": -1}

        translator = Translator(self.spec, state["params"], self.tokenizer, cfg)
        self._eval_step = jax.jit(make_eval_step(self.spec))
        root_key = jax.random.PRNGKey(t.seed + 1)
        utilisation = Utilisation(count_params(state["params"]), cfg.model.dtype, t.peak_tflops)
        train_steps = self.compile_train_steps(state, batcher, root_key, first=batcher.shape(start))
        utilisation.count(train_steps.flops)
        writer = tensorboard_writer(os.path.join(self.workdir, "tensorboard")) if jax.process_index() == 0 else None

        bad, window = NonFiniteSteps(t.max_bad_steps), []
        pending = None  # metrics of the previous step, read one step late so the device never idles
        bar = tqdm(total=t.steps, initial=start, desc="train", dynamic_ncols=True, disable=None)
        # the window's clock: its steps' time, less the validations run inside it (not training's speed)
        tick, window_tokens, paused = time.perf_counter(), 0.0, 0.0

        def drain(metrics, step):
            nonlocal window_tokens
            m = jax.device_get(metrics)
            if step == start:  # what a user waits before anything trains: loading, vocabulary, compiling
                log.info("first train step done %.1f s after the command started", process_age_s())
            bad.count(bool(m["finite"]), step)
            window.append(m)
            window_tokens += float(m["tokens"])

        warned_left_out = False

        def check_left_out(done, summary):
            nonlocal warned_left_out
            if not self.spec.left_out:
                return
            term, advice = self.spec.left_out
            if summary[term] >= 0.999:
                raise TrainingError(f"steps {done - len(window) + 1}-{done} left every pair out of the loss ({term} "
                                    f"{summary[term]:.3f}): the model learns nothing; {advice}")
            if summary[term] >= 0.1 and not warned_left_out:
                warned_left_out = True
                log.warning("steps %d-%d left %.0f%% of the pairs out of the loss (%s); %s", done - len(window) + 1,
                            done, 100 * summary[term], term, advice)

        def log_window(done, state):
            nonlocal pending, window_tokens, tick, paused
            if pending is not None:
                drain(*pending)
            pending = None
            elapsed = time.perf_counter() - tick - paused
            summary = {k: float(np.mean([m[k] for m in window]))
                       for k in ("loss", "nll", "grad_norm", "lr", *self.spec.terms)}
            if self.spec.summary is not None:
                summary.update(self.spec.summary(state["params"]))
            summary["tokens_per_s"] = window_tokens / max(elapsed, 1e-9)
            check_left_out(done, summary)
            summary.update(utilisation.window(elapsed))  # mfu, padding
            bar.set_postfix(loss=f"{summary['loss']:.3f}", tok_s=f"{summary['tokens_per_s']:.0f}",
                            lr=f"{summary['lr']:.2e}")
            compiling = not train_steps.compiled_before(tick)  # beside the compiling: not the steady state's speed
            self.history.append({"step": done, **summary, **({"compiling": True} if compiling else {})})
            log.info("step %d: loss %.4f nll %.4f lr %.3g %.0f tok/s %s skipped %d%s", done, summary["loss"],
                     summary["nll"], summary["lr"], summary["tokens_per_s"], utilisation.describe(summary["mfu"]),
                     bad.skipped, " (train programs compiling beside it)" if compiling else "")
            if writer:
                for k, v in summary.items():
                    writer.add_scalar(f"train/{k}", v, done)
                writer.add_scalar("train/skipped_steps", bad.skipped, done)
            window.clear()
            window_tokens, tick, paused = 0.0, time.perf_counter(), 0.0

        batches = prefetch(batcher.batch, start)
        stop = StopRequest().install()
        try:
            for step, batch in zip(range(start, t.steps), batches):
                utilisation.add(batch)
                batch = mesh_lib.shard_batch(batch, self.mesh)  # global arrays: their shape picks the program
                state, metrics = train_steps[batch["tgt"].shape](state, batch, root_key)
                if pending is not None:
                    drain(*pending)
                pending = (metrics, step)
                if step == start:  # read at once: the next step may wait for its own shape's program to compile
                    drain(*pending)
                    pending = None
                    train_steps.release()
                done = step + 1
                bar.update(1)
                if due(done, t.log_every, t.steps):
                    log_window(done, state)
                if due(done, t.eval_every, t.steps):
                    validating = time.perf_counter()
                    result = self.validate(state["params"], valid_data, translator)
                    self.history.append({"step": done, **result})
                    log.info("step %d: %s", done, " ".join(f"{k} {v:.3f}" for k, v in result.items()))
                    if writer:
                        for k, v in result.items():
                            writer.add_scalar(f"valid/{k[6:]}", v, done)
                    self.ckpt.save_best(done, state["params"], result["valid_bleu"])
                    if result["valid_bleu"] > best["bleu"]:
                        best = {"bleu": result["valid_bleu"], "step": done}
                    scale = plateau.scale
                    plateau.validated(done, perplexity(result["valid_nll"]))
                    if plateau.scale != scale:  # the next step trains with it (an array: nothing recompiles)
                        state = {**state, "opt_state": with_lr_scale(state["opt_state"], plateau.scale)}
                        log.info("step %d: %d validations without a new best valid perplexity (%.3f at step %d): "
                                 "learning rate x%g from here (scale %.4g, train.plateau_patience=%d)", done,
                                 plateau.since_best, plateau.best, plateau.best_step, t.plateau_factor,
                                 plateau.scale, t.plateau_patience)
                    paused += time.perf_counter() - validating  # the window's tokens are its steps', not this
                stopping = done < t.steps and stop.reached(done)  # SIGTERM or Ctrl-C (stop.py)
                early = done < t.steps and plateau.stopped  # train.stop_patience validations without a gain
                if due(done, t.checkpoint_every, t.steps) or stopping or early:
                    self.ckpt.save_state(done, state, {**plateau.progress(), **plan,
                                                       **schedule_record(t, self.schedule, done),
                                                       "corpora": corpora})
                    if not stopping:  # an earlier stop's checkpoint has served: keep what a run never stopped keeps
                        self.ckpt.drop_off_grid(t.checkpoint_every, t.steps)
                if (stopping or early) and (pending is not None or window):
                    log_window(done, state)  # the steps since the last log window, logged as at the last step
                if stopping:
                    raise Stopped(stop.signum, done)
                if early:
                    log.info("step %d: stopping early, before train.steps=%d: %d validations without a new best "
                             "valid perplexity (%.3f at step %d; train.stop_patience=%d)", done, t.steps,
                             plateau.since_best, plateau.best, plateau.best_step, t.stop_patience)
                    break
        finally:
            stop.uninstall()
            batches.close()
            train_steps.close()
            bar.close()
            self.ckpt.wait()
            if writer:
                writer.close()
        if jax.process_index() == 0 and self.config.train.plot_curves:
            log.info("training curves: %s", plot_curves(self.workdir))
        log.info("training done; best valid BLEU %.2f at step %d", best["bleu"], best["step"])
        if stop.signum is not None:  # SIGTERM or Ctrl-C during the last step's validation or checkpoint: the command
            raise Stopped(stop.signum, done)  # ends here, not after the evaluation (the same command runs it)
        return True
