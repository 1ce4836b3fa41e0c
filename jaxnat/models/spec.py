"""`ModelSpec`: the small interface the trainer, the evaluator and the translator rely on. Each model file
builds its own (`build_spec(config, cfg, pieces)`); `jaxnat.models.build_model` picks the file by name."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax

from jaxnat.data.vocab import BOS_ID, EOS_ID, PieceTables
from jaxnat.decoding.request import Supports
from jaxnat.models.transformer import TransformerConfig


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """What the training loop and the decoders need to know about one model.

    init(rng, batch) -> params
    loss(params, batch, rng, train) -> (loss_sum: float32[], aux: {'nll': float32[], 'count': float32[], ...})
    generate(params, request: DecodeRequest) -> {'tokens': int32[B, T], 'score': float32[B], 'token_logp':
      float32[B, T], 'token_scored': bool[B, T], and one int32[B] per name in supports.counts (with request.trace
      also 'trace')}. token_scored marks the tokens the model chose (an AR model: every generated token, EOS and
      constraint tokens included; a non-autoregressive or edit model: the tokens it predicted, not BOS/EOS nor
      the tokens it was given or made to place: initial hypotheses, constraints), token_logp the log-probability
      it gave each of them when it chose it (an iterative model: at the pass that last wrote it), 0.0 elsewhere:
      what a calibration measure (inference ECE) reads
    capacity(src_len) -> the output length (BOS/EOS included) for sources padded to src_len
    supports: what generate honours (initial hypotheses, soft/hard constraints, traces, beams) and counts
    plan(params, request) -> (lengths: int32[B, k], state), or None: for a model that fixes its output lengths
      before decoding (length prediction), the lengths (BOS/EOS excluded) of every row it will decode and what
      it computed to find them; generate(params, a request with extras['plan'] and max_out=width) decodes the
      same translations on outputs of any width that holds the longest (the translator picks the narrowest)
    packs: whether loss takes packed batches (`jaxnat.data.batching.PackedBatcher`: several pairs a row, with
      'src_seg' and 'tgt_seg'), each pair's loss exactly its loss alone; training then compiles one program
    terms: names of loss's aux scalars (each a mean over the batch) that the history reports beside the loss, in
      training and (as valid_<name>) in validation: the objective's parts, e.g. a length or coverage loss
    request_extras(translator, starts) -> dict, or None: what generate reads beyond the request's own fields, for
      one batch of `Start`s (``DecodeRequest.extras``: e.g. encoded constraint pairs, or ``translator.aux``)
    stepped: loss takes ``step=`` int32[], the update's number (the trainer passes it; validation does not, and
      the loss then reads it as the end of its schedules): for annealed schedules inside the loss, such as a
      glancing ratio
    left_out: (term, advice), or (): the term that is the share of a batch's pairs its loss leaves out (a target
      its graph or canvas cannot hold), and what to change; the trainer stops a run whose log window left out
      every pair (it would learn nothing) and warns once when a tenth or more were
    score(params, request, tgt) -> {'logp': float32[B], 'score': float32[B]}, or None: forced decoding, for a model
      that defines the probability of a whole output (`Supports.score`): tgt int32[B, T] are given outputs, [BOS,
      request.prefix's tokens, y, EOS] rows (PAD after), each a translation of its row of request.src; 'logp' is
      log P(y | x) under the model as its decoders read it (the prefix forced, adding nothing), −inf where the
      model cannot produce y, 'score' the score its search would give that output; a left-to-right model adds
      'token_logp' float32[B, T − 1], each of tgt[:, 1:]'s log-probability given the tokens before it (0.0 at the
      prefix and PAD), whose sum is logp (a sum over alignments or paths, or a length's probability times the
      tokens', has no such shares)
    align(params, request, tgt) -> float32[B, T − 1, S], or None: word alignment (`Supports.align`): tgt as score
      takes it; where each position predicting tgt[:, 1:] looks in request.src's columns, the last decoder layer's
      cross-attention averaged over its heads (an ensemble's over its models: `jaxnat.decoding.alignment`)
    summary(params) -> {name: float}, or None: scalars of the parameters themselves worth following (Coverage-NAT's
      λ), in the history at each log step and in metrics.json beside the scores of the parameters decoded
    """

    name: str
    cfg: TransformerConfig
    module: Any
    init: Callable
    loss: Callable
    generate: Callable
    capacity: Callable
    supports: Supports
    plan: Callable | None = None
    packs: bool = False
    stepped: bool = False
    terms: tuple[str, ...] = ()
    left_out: tuple[str, str] | tuple = ()
    summary: Callable | None = None
    score: Callable | None = None
    align: Callable | None = None
    request_extras: Callable | None = None

    def __post_init__(self):
        # one compiled program: called outside jit (tests, notebooks), flax's initialisation would run op by op,
        # each op its own small XLA program, several times slower than compiling the whole
        object.__setattr__(self, "init", jax.jit(self.init))

    def abstract_params(self) -> dict:
        """What `init` returns, as `jax.ShapeDtypeStruct` leaves (`jax.eval_shape` on a one-pair batch: nothing is
        computed or allocated): the tree a checkpoint restores into and an import is checked against. Traced once
        per init function: the same code over the same module (and whatever else it closes over, where that is
        hashable) gives the same tree, so a model loaded again, or imported then loaded, is not traced again."""
        fn = getattr(self.init, "__wrapped__", self.init)
        try:
            key = (fn.__code__, tuple(cell.cell_contents for cell in fn.__closure__ or ()))
            hash(key)
        except (AttributeError, TypeError, ValueError):  # (a value it closes over that has no hash: traced each time)
            key = None
        if key is None or key not in _ABSTRACT_PARAMS:
            ids = jax.numpy.asarray([[BOS_ID, EOS_ID]], jax.numpy.int32)
            tree = jax.eval_shape(lambda: self.init(jax.random.PRNGKey(0), {"src": ids, "tgt": ids}))
            if key is None:
                return tree
            _ABSTRACT_PARAMS[key] = tree
        return jax.tree.map(lambda leaf: leaf, _ABSTRACT_PARAMS[key])  # (a tree of its own to each caller)


# `ModelSpec.abstract_params`' trees, by init function (its code and what it closes over): shapes and dtypes only,
# a few kB a model
_ABSTRACT_PARAMS: dict = {}


def word_glue(pieces: PieceTables) -> tuple:
    """(continues, joins, trails) of a vocabulary's `PieceTables` as the constrained decoders take them: bool[V]
    arrays, or None where no piece is one (the rules then cost nothing).

    The whole-word rule of hard constraints: a phrase's word ends at the next piece that starts a word (or at the
    end). Until then only ``trails`` pieces may follow it: punctuation, written onto the word before it without
    making it another ("Zaun.", 'Zaun",'). A ``continues`` piece anywhere in that run glues the run and the
    phrase into one word ("Zaun.n" is one Moses token, and no longer "Zaun"), so none may stand there. And the
    piece right before a phrase is no ``joins`` piece (BPE's "@@"), which would glue the phrase onto its word."""
    def table(x):
        return jax.numpy.asarray(x) if x is not None and x.any() else None
    continues = table(pieces.continues)
    trails = table(~pieces.word_start & ~pieces.continues) if continues is not None else None
    return continues, table(pieces.joins), trails


def skipped_unless(needed: jax.Array, compute: Callable):
    """``compute()`` where ``needed`` (bool[]) holds, else zeros of its shapes, and its work skipped: a constrained
    request's plain decoding, which only its rows without phrases read (none, in most batches)."""
    zeros = lambda: jax.tree.map(lambda s: jax.numpy.zeros(s.shape, s.dtype), jax.eval_shape(compute))  # noqa: E731
    return jax.lax.cond(needed, compute, zeros)
