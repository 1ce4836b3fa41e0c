"""The model-neutral decode request every model's ``generate`` takes, and what a model declares it supports.

A request carries, for a batch of sentences, everything a user can ask of a translation: the source, an
optional initial hypothesis to refine (post-editing), optional target-side constraint phrases (soft, or hard =
guaranteed, per sentence) and whether to record an edit trace. Each model family turns it into its own form
(a refining model: a starting canvas; a masked language model: a partly masked canvas; constrained beam
search: its banks), and a model that cannot honour part of a request says so in one line (`check_supported`), before
anything runs.

    DecodeRequest(src: int32[B, S],
                  init: int32[B, T0] | None,        [BOS … EOS] rows; an all-PAD row = no initial hypothesis
                  constraints: int32[B, C, P] | None, target piece ids of up to C phrases, PAD-padded
                  hard: bool[B] | None,              the constraints of sentence b must appear (else soft)
                  extras: {name: pytree},            what a model family adds (`Family.request_extras`: e.g.
                                                     constraint pairs, a rescorer's parameters) and 'plan', what
                                                     the model's `ModelSpec.plan` found for this batch
                  reference: int32[B, R] | None,     [BOS … EOS] reference rows, for an oracle analysis only
                  prefix: int32[B, P] | None,        each output's first tokens after BOS, PAD-padded: a
                                                     multilingual model's target-language token, then a given
                                                     start of the translation (interactive translation)
                  prefix_free: int32[B] | None,      how many of a row's prefix tokens are forced at log-probability
                                                     0 (the language token, `search.force_prefix`); the rest keep
                                                     the model's. None: all of them
                  completion: Completion | None,     after the prefix, the word each output goes on spelling (a
                                                     prefix typed up to inside a word: `completion`)
                  max_out, beam_size, trace, oracle, nbest) static: output capacity, beam, edit trace on/off, the
                                                     decoding steps an oracle takes against the reference, the
                                                     outputs kept per sentence (an n-best list: `Supports.nbest`)

A sentence takes an initial hypothesis or constraints, not both (the translator checks it).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID
from jaxnat.decoding.completion import Completion
from jaxnat.errors import DataError


@struct.dataclass
class DecodeRequest:
    src: jax.Array
    init: jax.Array | None = None
    constraints: jax.Array | None = None
    hard: jax.Array | None = None
    extras: dict = struct.field(default_factory=dict)
    reference: jax.Array | None = None
    prefix: jax.Array | None = None
    prefix_free: jax.Array | None = None
    completion: Completion | None = None
    max_out: int = struct.field(pytree_node=False, default=0)
    beam_size: int = struct.field(pytree_node=False, default=1)
    trace: bool = struct.field(pytree_node=False, default=False)
    oracle: str = struct.field(pytree_node=False, default="")
    nbest: int = struct.field(pytree_node=False, default=1)

    def free_prefix(self):
        """int32[B]: how many of each row's first output tokens are forced at log-probability 0 (`prefix_free`), or 0
        without a prefix."""
        if self.prefix is None:
            return 0
        return jnp.sum(self.prefix != PAD_ID, axis=1) if self.prefix_free is None else self.prefix_free

    def width(self, capacity) -> int:
        """The output capacity: ``max_out`` when set, else the model's ``capacity(src_len)`` (static)."""
        return self.max_out or capacity(self.src.shape[1])


@dataclasses.dataclass(frozen=True)
class Supports:
    """What a model's ``generate`` can honour, and the per-sentence counts it reports beside tokens and score.

    counts: e.g. ("iterations", "deletions", "insertions"); every name is an int32[B] in generate's output.
    """

    init: bool = False
    soft_constraints: bool = False
    hard_constraints: bool = False
    trace: bool = False
    beam: bool = False
    pairs: bool = False      # generate reads constraint pairs (`Start.pairs`, in the family's request extras)
    max_phrases: int = 0     # the most constraint phrases a sentence may have (0: no limit)
    counts: tuple[str, ...] = ()
    # decoding where an oracle takes some steps' actions against the reference (`DecodeRequest.oracle`): the
    # modes generate honours, e.g. Gu et al. 2019's "collaborate with the oracle" analysis
    oracle: tuple[str, ...] = ()
    prefix: bool = False     # DecodeRequest.prefix: outputs that start with given tokens
    # hard constraints can be kept in the given order (eval.constraint_order=given); False: a model that places
    # them in any order it finds best (a reposition head, a best path over the sets of phrases done)
    given_order: bool = True
    # n-best lists: with DecodeRequest.nbest = N > 1, generate adds 'nbest_tokens': int32[B, N, T] and 'nbest_score':
    # float32[B, N], each sentence's N best outputs of its beam, best first (-inf: no such output), N <= beam_size
    nbest: bool = False
    # scoring given translations (forced decoding): the model defines log P(y | x) of a whole output, and
    # `ModelSpec.score` computes it
    score: bool = False
    # ensembles (eval.ensemble): generate and score read the other models in the request's extras['ensemble'] (a
    # tuple of `Member`s: models of the family over the same vocabulary, of any architecture) and decode with the
    # mean of the members' probabilities
    ensemble: bool = False
    # word alignments (eval.alignment) from the attention of a given output under teacher forcing (`ModelSpec.align`)
    align: bool = False
    # an n-gram language model fused into the beam search (eval.lm): generate reads it in the request's
    # extras['lm'] (`ngram.NgramLM`)
    lm: bool = False
    # why the model does not take what it lacks here, added to the refusal (a setting that takes it away)
    note: str = ""

    def when_sampling(self, sampling) -> Supports:
        """What the model takes when it samples (``sampling``: eval.sampling's `search.Sampling`; None: it searches,
        and takes all it does): no constraints, the constrained searches being searches (a model's pairs stay: they
        are its inputs), and no LM, which is fused into a beam search."""
        if sampling is None:
            return self
        return dataclasses.replace(self, soft_constraints=False, hard_constraints=False, lm=False,
                                   note="eval.sampling=true samples without constraints")


@struct.dataclass
class Member:
    """One other model of an ensemble (`Supports.ensemble`, DecodeRequest.extras['ensemble']): its parameters and its
    model config (static: the family builds the member's module from it, `ModelSpec.cfg`'s kind)."""

    params: object
    cfg: object = struct.field(pytree_node=False)


def check_supported(model_name: str, supports: Supports, *, init: bool = False, soft: bool = False,
                    hard: bool = False, trace: bool = False, beam_size: int = 1, pairs: bool = False,
                    oracle: str = "", prefix: bool = False, nbest: int = 1, score: bool = False,
                    ensemble: bool = False, align: bool = False, lm: bool = False) -> None:
    """Raises a one-line DataError naming the first thing the model cannot do."""
    asked = [(init, supports.init, "initial hypotheses (post-editing)"),
             (soft, supports.soft_constraints, "soft constraints"),
             (hard, supports.hard_constraints, "hard constraints"),
             (trace, supports.trace, "edit traces"),
             (pairs, supports.pairs, "constraint pairs"),
             (beam_size > 1, supports.beam, f"beam search (beam size {beam_size})"),
             (bool(oracle), oracle in supports.oracle, f"oracle decoding {oracle!r}"),
             (prefix, supports.prefix, "target prefixes (a given start of the translation, or a multilingual "
                                       "model's target-language token)"),
             (nbest > 1, supports.nbest, f"n-best lists (nbest {nbest}): it keeps one output per sentence"),
             (score, supports.score,
              "forced decoding (scoring given translations): it defines no probability of a whole output"),
             (ensemble, supports.ensemble, "ensembles (eval.ensemble)"),
             (align, supports.align, "word alignments (eval.alignment), which are read off a left-to-right "
                                     "model's attention"),
             (lm, supports.lm, "an n-gram language model (eval.lm)")]
    for wanted, can, what in asked:
        if wanted and not can:
            raise DataError(f"model {model_name!r} does not take {what}" + (f" ({supports.note})" if supports.note
                                                                             else ""))


def pad_hypotheses(rows: list[list[int]], width: int) -> np.ndarray:
    """Target piece-id lists (no BOS/EOS; None = no hypothesis) → int32[B, width] [BOS … EOS] rows, all-PAD for
    None. width must fit the longest row plus BOS and EOS."""
    out = np.full((len(rows), width), PAD_ID, np.int32)
    for r, ids in enumerate(rows):
        if ids is not None:
            out[r, : len(ids) + 2] = [BOS_ID, *ids, EOS_ID]
    return out


def pad_phrases(sentences: list[list[list[int]] | None]) -> np.ndarray:
    """Per sentence a list of phrases (each a list of piece ids; None = no constraints) → int32[B, C, P],
    PAD-padded, C and P the largest phrase count and length (at least 1)."""
    c = max([len(s) for s in sentences if s] + [1])
    p = max([len(ph) for s in sentences if s for ph in s] + [1])
    out = np.full((len(sentences), c, p), PAD_ID, np.int32)
    for b, phrases in enumerate(sentences):
        for k, ids in enumerate(phrases or []):
            out[b, k, : len(ids)] = ids
    return out
