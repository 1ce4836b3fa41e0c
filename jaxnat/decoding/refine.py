"""Iterative refinement decoding for edit-based models, as one jit'd ``lax.while_loop``.

One iteration = a first edit (LevT: delete, `jaxnat.models.levt.model.levt_delete`; EDITOR: reposition,
`jaxnat.models.editor.model.editor_reposition`) → insert placeholders → fill them (docs/levt.md, docs/editor.md).
The whole batch lives at a fixed capacity ``[B, L]``; a
sentence stops when an iteration leaves it unchanged (unless ``run_all``) and the loop stops when every
sentence has stopped or after ``max_iter + 1`` iterations. Finished rows are frozen by masking, so no shape
ever changes and no value goes back to the host until the loop ends; but a head runs on half the canvas when
every row fits in it (`narrowed`: its products cost in proportion), the token head not at all when no row
has a placeholder, and the placeholder head reuses the first head's decoder output on the rows the first edit
left unchanged where both heads read the same layers (`SharedFeatures`).

Per token the loop carries a score (the log-probability its fill had; 0 for the initial tokens), whether the
token head filled it (``scored``: False for BOS, EOS and the initial tokens, constraints included) and a
hard-constraint phrase id (0 = an ordinary token). Phrase tokens are never deleted, a reposition moves a phrase
only as a whole, and no placeholder is opened between two tokens of the same phrase (Susanto et al. 2020), so
every hard constraint comes out exactly once and contiguous whatever the model predicts (LevT also keeps
their order; EDITOR may reorder whole phrases). With a ``continues`` table (bool[V]: the target pieces that
would extend the word before them — letters, digits, hyphens, apostrophes — but not punctuation), no such
piece is ever put right after a constraint, so the constraint also survives as a word: "Zaun." and "Zaun,"
can be produced, "Zauns" cannot.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxnat.argmax import argmax
from jaxnat import edit_ops
from jaxnat.data.vocab import BOS_ID, EOS_ID, MASK_ID, PAD_ID, PLH_ID
from jaxnat.decoding import words

NOT_PREDICTED = (PAD_ID, BOS_ID, EOS_ID, PLH_ID, MASK_ID)  # ids the token head may never write


def forbid_reserved(logits: jax.Array) -> jax.Array:
    """float32[..., V] → the same with PAD/BOS/EOS/PLH/MASK at -inf: a filled slot always holds a real token
    (a PAD or EOS in the middle of a row would break every fixed-shape edit op). A broadcast add of a [V]
    mask rather than a scatter into the logits, so XLA fuses it into whatever reads them next."""
    mask = jnp.zeros(logits.shape[-1], logits.dtype).at[jnp.asarray(NOT_PREDICTED)].set(-jnp.inf)
    return logits + mask


class Hypotheses(NamedTuple):
    tokens: jax.Array   # int32[B, L] right-padded [BOS … EOS] rows
    scores: jax.Array   # float32[B, L] per-token log-probability (0 for BOS/EOS and initial tokens)
    phrase: jax.Array   # int32[B, L] hard-constraint phrase id, 0 = free token
    # bool[B, L]: the tokens the token head filled (those ``scores`` holds a log-probability of); None outside the
    # loop where nobody asks (a test's hand-made hypotheses)
    scored: jax.Array | None = None

    def sides(self) -> tuple:
        """What travels with each token through an `edit_ops` edit: (scores, phrase[, scored]); an edit's output
        sides rebuild the hypotheses, `Hypotheses(out.tokens, *out.sides)`."""
        return (self.scores, self.phrase) + (() if self.scored is None else (self.scored,))


LOOP_COUNTS = ("iterations", "steps", "insertions")  # what `refine` counts itself; the first edit counts the rest


class RefineOptions(NamedTuple):
    max_iter: int = 9                  # at most max_iter + 1 iterations (fairseq's --iter-decode-max-iter)
    placeholder_penalty: float = 0.0   # γ, subtracted from the "no placeholder" class of every slot
    cap_min: int = 10                  # length cap max(cap_min, cap_ratio · source length incl. BOS/EOS)
    cap_ratio: float = 2.0
    run_all: bool = False              # run every iteration even when nothing changes
    trace: bool = False                # also return every intermediate hypothesis
    # a fill's score: its log-probability among the ids a fill may take ("jaxnat") or among every id, the
    # reserved ones included, which fairseq's LevT could also write ("fairseq", eval.search_rules)
    rules: str = "jaxnat"


class SharedFeatures(NamedTuple):
    """The first edit's head and the placeholder head reading one decoder's output (the same layers of the same
    stack): where the first edit left a row as it was, the placeholder head's input is the first head's, and so
    are its features, so the pass reuses them (in late passes almost no row changes: a decoder run saved)."""
    features: Callable     # tokens int32[B, L] → float[B, L, D]
    rows: Callable         # (tokens int32[R, L], rows int32[R], the sentences they are) → float[R, L, D]
    first: Callable        # (features float[B, L, D], tokens int32[B, L]) → the first edit's logits
    placeholder: Callable  # features float[B, L, D] → [B, L-1, 256]


class Heads(NamedTuple):
    """The model's heads with the source already encoded: each maps tokens int32[B, L] to logits."""
    first: Callable      # LevT: deletion logits [B, L, 2]; EDITOR: reposition logits [B, L, L]
    placeholder: Callable  # [B, L-1, 256]
    token: Callable      # [B, L, V] (`NOT_PREDICTED` ids are never filled in, whatever their logits)
    # the token head on some of the rows: (tokens int32[R, L], rows int32[R], the sentences they are) → [R, L, V];
    # given, a pass where few rows have placeholders fills them on those rows only (`insert_and_fill`)
    token_rows: Callable | None = None
    # given, ``first`` and ``placeholder`` are these heads on one decoder output (`SharedFeatures`); a head
    # replaced by something else (an oracle's) must drop it
    shared: SharedFeatures | None = None


# (hyps, logits, active bool[B], continues bool[V] | None, joins=bool[V] | None, trails=bool[V] | None) -> (hyps,
# {name: int32[B]}): the word-boundary tables of `insert_and_fill`, which the edit keeps too. Every output token is an
# input token moved (or copied) with its sides (`Hypotheses.sides`).
FirstEdit = Callable


def initial_hypotheses(tokens: jax.Array, phrase: jax.Array | None = None) -> Hypotheses:
    phrase = jnp.zeros_like(tokens) if phrase is None else phrase
    return Hypotheses(tokens, jnp.zeros(tokens.shape, jnp.float32), phrase, jnp.zeros(tokens.shape, bool))


def start_from_request(request, capacity: int) -> Hypotheses:
    """The starting hypotheses of a `DecodeRequest` at ``capacity`` (int32[B, capacity] rows):

    * a sentence with an initial hypothesis starts from it (post-editing);
    * else, with constraints, from ``[BOS, phrase 1 pieces, phrase 2 pieces, …, EOS]`` in the given order, each
      piece marked with its phrase's number (1, 2, …) when the sentence's constraints are hard;
    * else from ``[BOS, EOS]``.

    Empty (all-PAD) phrases are skipped. ``capacity`` must hold every sentence's start with BOS and EOS (the
    translator sees to it); it may be less than the C·P + 2 of full-length phrases.
    """
    b = request.src.shape[0]
    pos = jnp.arange(capacity, dtype=jnp.int32)[None, :]
    tokens = jnp.where(pos == 0, BOS_ID, jnp.where(pos == 1, EOS_ID, PAD_ID)) * jnp.ones((b, 1), jnp.int32)
    phrase = jnp.zeros((b, capacity), jnp.int32)
    if request.constraints is not None:
        _, c, p = request.constraints.shape
        pieces = request.constraints.reshape(b, c * p)
        hard = jnp.zeros((b,), bool) if request.hard is None else request.hard
        number = jnp.where(hard[:, None], jnp.repeat(jnp.arange(1, c + 1, dtype=jnp.int32), p)[None, :], 0)
        packed, number = edit_ops.compact(pieces, pieces != PAD_ID, PAD_ID, sides=number)
        n = edit_ops.lengths(packed, PAD_ID)[:, None]
        widen = ((0, 0), (1, max(capacity - c * p - 1, 0)))  # [BOS slot, pieces, room for EOS], then cut to fit
        body = jnp.pad(packed, widen, constant_values=PAD_ID)[:, :capacity].at[:, 0].set(BOS_ID)
        tokens = jnp.where(pos == n + 1, EOS_ID, body)
        phrase = jnp.pad(number, widen)[:, :capacity]
    if request.init is not None:
        if request.init.shape[1] > capacity:
            raise ValueError(f"initial hypotheses of {request.init.shape[1]} tokens exceed the capacity {capacity}")
        init = jnp.pad(request.init, ((0, 0), (0, capacity - request.init.shape[1])), constant_values=PAD_ID)
        given = (init[:, :1] != PAD_ID)
        tokens, phrase = jnp.where(given, init, tokens), jnp.where(given, 0, phrase)
    return initial_hypotheses(tokens, phrase)


def length_cap(src: jax.Array, capacity: int, options: RefineOptions) -> jax.Array:
    """int32[B]: max(cap_min, cap_ratio · src_len) tokens, never above the capacity (src_len counts BOS/EOS;
    ``options``: anything with cap_min and cap_ratio, as `mask_predict.Options`).

    Computed per sentence from its own source length, so a sentence decodes the same alone or in a batch.
    """
    src_len = edit_ops.lengths(src, PAD_ID)
    cap = jnp.maximum(options.cap_min, jnp.floor(options.cap_ratio * src_len).astype(jnp.int32))
    return jnp.minimum(cap, capacity)


def static_length_cap(src_len: int, capacity: int, cap_min: int, cap_ratio: float) -> int:
    """`length_cap` of a source of src_len tokens (BOS/EOS included) as a Python int: a model's output capacity
    for sources padded to src_len (`ModelSpec.capacity`). Multiplied in float32, as the traced cap is (and
    fairseq's (src_lens * max_ratio).long()): in float64 1.4 · 45 gives 62, not 63, and a sentence whose own
    length is its batch's would get one token less than beside a longer source."""
    return int(min(capacity, max(cap_min, int(np.float32(cap_ratio) * np.float32(src_len)))))


def inside_phrase(phrase: jax.Array) -> jax.Array:
    """bool[B, L-1]: slot k lies between two tokens of the same hard-constraint phrase."""
    return (phrase[:, :-1] == phrase[:, 1:]) & (phrase[:, :-1] > 0)


def insert_and_fill(hyps: Hypotheses, heads: Heads, cap: jax.Array, active: jax.Array, penalty: float,
                    continues: jax.Array | None = None, all_ids: bool = False, joins: jax.Array | None = None,
                    trails: jax.Array | None = None, placeholder_logits: jax.Array | None = None):
    """Placeholders (argmax per slot after the γ penalty, none inside a phrase, row capped at ``cap``), then
    every placeholder filled with the token head's argmax. Returns (placeholder hyps, filled hyps, count).
    placeholder_logits: the placeholder head's on ``hyps`` when the caller has them (`shared_placeholder_logits`).

    continues: bool[V] (True for pieces that would extend the word before them) or None. When given, a
    placeholder right after a hard-constraint phrase never takes such a piece, so nothing glues onto the
    constraint's last word (punctuation may follow it): the constraint survives as a word, not just as pieces.
    trails: bool[V] (punctuation) or None: nor does a placeholder after a phrase and punctuation only
    (`words.keep_whole`: "Zaun." + "n" would glue). joins: bool[V] (pieces that glue the next one onto their
    word, BPE's "@@") or None: a placeholder right before a phrase never takes such a piece. all_ids: a fill's
    score is its log-probability among every id.
    """
    # every score in float32, whatever the model's compute dtype
    if placeholder_logits is None:
        placeholder_logits = narrowed(heads.placeholder, hyps.tokens)
    logits = placeholder_logits.astype(jnp.float32).at[..., 0].add(-penalty)
    counts = argmax(logits)
    counts = jnp.where(inside_phrase(hyps.phrase) | ~active[:, None], 0, counts)
    ins = edit_ops.insert_placeholders(hyps.tokens, counts, PAD_ID, PLH_ID, max_length=cap,
                                       sides=hyps.sides())
    with_plh = Hypotheses(ins.tokens, *ins.sides)

    def fill_at(width):
        def run():
            hyps = jax.tree.map(lambda x: x[:, :width], with_plh)
            tokens, scores = fill(hyps, heads.token(hyps.tokens), continues, all_ids, joins, trails)
            return (with_plh.tokens.at[:, :width].set(tokens), with_plh.scores.at[:, :width].set(scores))
        return run

    # the token head runs only when some row has a placeholder (at batch 1, in most late passes none has: fairseq
    # skips it too), on the narrowest canvas that holds every row, and when at most an eighth of the rows have
    # one (after the first passes, most rows are done inserting), on those rows only
    is_plh = with_plh.tokens == PLH_ID
    width, half = with_plh.tokens.shape[1], narrow_width(with_plh.tokens.shape[1])
    branches = [lambda: (with_plh.tokens, with_plh.scores), fill_at(width)]
    pick = jnp.where(jnp.any(is_plh), 1, 0)
    if half is not None:
        branches.append(fill_at(half))
        pick = jnp.where((pick == 1) & (jnp.max(edit_ops.lengths(with_plh.tokens, PAD_ID)) <= half), 2, pick)
    few = few_rows(jnp.any(is_plh, axis=1))
    if heads.token_rows is not None and few is not None:
        some, fits = few

        def fill_some():
            hyps = jax.tree.map(lambda x: x[some], with_plh)
            tokens, scores = fill(hyps, heads.token_rows(hyps.tokens, some), continues, all_ids, joins, trails)
            return with_plh.tokens.at[some].set(tokens), with_plh.scores.at[some].set(scores)

        branches.append(fill_some)
        pick = jnp.where((pick > 0) & fits, len(branches) - 1, pick)
    tokens, scores = lax.switch(pick, branches)
    filled = Hypotheses(tokens, scores, with_plh.phrase, is_plh | with_plh.scored)
    return with_plh, filled, jnp.sum(ins.counts, axis=1)


def few_rows(needs: jax.Array) -> tuple[jax.Array, jax.Array] | None:
    """The sub-batch a head may run on instead of the whole batch, when few rows need it: needs bool[B] → (rows
    int32[R], R an eighth of B rounded up: the rows that need it first; fits bool[]: every row that needs it is
    among them), or None when an eighth of the batch is all of it."""
    few = -(-needs.shape[0] // 8)
    if few >= needs.shape[0]:
        return None
    return jnp.argsort(~needs, stable=True)[:few], jnp.sum(needs) <= few


def shared_placeholder_logits(shared: SharedFeatures, features: jax.Array, before: jax.Array,
                              after: jax.Array) -> jax.Array:
    """The placeholder head's logits on ``after`` (int32[B, L], the first edit's output) given the first head's
    ``features`` (float[B, L, D]) of ``before``: those features where no row changed, the features of the rows
    that changed computed on their own where they are at most an eighth of the batch, else a decoder run on all
    (on the narrower canvas where every row fits, `narrowed`)."""
    changed = jnp.any(after != before, axis=1)
    branches = [lambda: features, lambda: narrowed(shared.features, after)]
    pick = jnp.where(jnp.any(changed), 1, 0)
    few = few_rows(changed)
    if few is not None:
        some, fits = few
        branches.append(lambda: features.at[some].set(shared.rows(after[some], some).astype(features.dtype)))
        pick = jnp.where((pick == 1) & fits, 2, pick)
    return shared.placeholder(lax.switch(pick, branches))


def fill(hyps: Hypotheses, raw: jax.Array, continues=None, all_ids: bool = False, joins=None, trails=None) -> tuple:
    """Every placeholder of ``hyps`` takes the argmax of the token head's logits (raw: float[B, L, V]) under the
    word rules (`insert_and_fill`) and its log-probability, max − logsumexp, without materialising a log_softmax of
    [B, L, V]. Returns (tokens int32[B, L], scores float32[B, L]), the other positions as they were."""
    raw = raw.astype(jnp.float32)  # every score in float32, whatever the model's compute dtype
    logits = forbid_reserved(raw)
    is_plh = hyps.tokens == PLH_ID
    if continues is not None:
        after_phrase = jnp.pad(hyps.phrase[:, :-1] > 0, ((0, 0), (1, 0))) & is_plh
        logits = jnp.where(after_phrase[..., None] & continues, -jnp.inf, logits)
    if joins is not None:
        before_phrase = jnp.pad(hyps.phrase[:, 1:] > 0, ((0, 0), (0, 1))) & is_plh
        logits = jnp.where(before_phrase[..., None] & joins, -jnp.inf, logits)

    def choose(logits):
        best_logp = jnp.max(logits, axis=-1) - jax.nn.logsumexp(raw if all_ids else logits, axis=-1)
        return jnp.where(is_plh, argmax(logits), hyps.tokens), jnp.where(is_plh, best_logp, hyps.scores)

    in_phrase = hyps.phrase > 0
    last = words.last_pieces(hyps.phrase)
    return words.keep_whole(lambda level: choose(words.restrict(logits, level, continues, trails)),
                            choose(logits), is_plh, in_phrase, last, continues, trails)


def narrow_width(width: int) -> int | None:
    """The narrower canvas a pass may run on (half the capacity, from 16 positions), or None: sentences a
    capacity is sized for (twice the source) mostly fit in half of it, and a head's products cost in proportion."""
    return width // 2 if width >= 32 else None


def narrowed(head: Callable, tokens: jax.Array) -> jax.Array:
    """head(tokens int32[B, L]) → logits, computed on the first `narrow_width` positions when every row fits in
    them and padded back with zeros to the full canvas's shape (which no edit reads: it reads real positions and
    slots only); else on the full canvas."""
    half = narrow_width(tokens.shape[1])
    if half is None:
        return head(tokens)
    full = jax.eval_shape(head, tokens)

    def small():
        out = head(tokens[:, :half])
        return jnp.pad(out, [(0, f - n) for f, n in zip(full.shape, out.shape)])
    return lax.cond(jnp.max(edit_ops.lengths(tokens, PAD_ID)) <= half, small, lambda: head(tokens))


def refine(heads: Heads, first_edit: FirstEdit, start: Hypotheses, cap: jax.Array, options: RefineOptions,
           count_names: tuple[str, ...], continues: jax.Array | None = None, joins: jax.Array | None = None,
           trails: jax.Array | None = None) -> dict:
    """Runs the refinement loop from ``start``; returns per sentence ``tokens`` and ``phrase`` int32[B, L],
    ``token_logp`` float32[B, L] (each token's score: the log-probability of its fill at the pass that last filled
    it, 0.0 for BOS, EOS, PAD and the tokens of the start), ``token_scored`` bool[B, L] (the filled tokens),
    ``score`` float32[B] (the mean of token_logp over the real tokens, BOS/EOS included), ``iterations`` (passes
    run), ``steps`` (the papers' count: iterations − 1) and the edit counts int32[B]
    (``count_names`` from the first edit, plus ``insertions``; ``continues``, ``joins``, ``trails`` as in
    `insert_and_fill`),
    and with ``options.trace`` the ``trace`` int32[B, max_iter + 1, 3, L] of hypotheses after each step (first edit,
    placeholders, fill; iterations past the loop's last one repeat the final state)."""
    b, length = start.tokens.shape
    steps = options.max_iter + 1
    if start.scored is None:
        start = start._replace(scored=jnp.zeros(start.tokens.shape, bool))
    zeros = jnp.zeros((b,), jnp.int32)
    state = {
        "hyps": start, "done": jnp.zeros((b,), bool), "iteration": jnp.zeros((), jnp.int32),
        "iterations": zeros, "insertions": zeros, **{name: zeros for name in count_names},
    }
    if options.trace:
        state["trace"] = jnp.zeros((steps, 3, b, length), jnp.int32)

    def cond(s):
        return (s["iteration"] < steps) & ~jnp.all(s["done"])

    def body(s):
        active = ~s["done"]
        before = s["hyps"]
        if heads.shared is None:
            first_logits = narrowed(heads.first, before.tokens)
        else:
            features = narrowed(heads.shared.features, before.tokens)
            first_logits = heads.shared.first(features, before.tokens)
        edited, counts = first_edit(before, first_logits.astype(jnp.float32), active, continues, joins=joins,
                                    trails=trails)
        placeholder_logits = None if heads.shared is None else shared_placeholder_logits(
            heads.shared, features, before.tokens, edited.tokens)
        with_plh, filled, inserted = insert_and_fill(edited, heads, cap, active, options.placeholder_penalty,
                                                     continues, options.rules == "fairseq", joins, trails,
                                                     placeholder_logits)
        changed = jnp.any(filled.tokens != before.tokens, axis=1)
        new = dict(s)
        new["hyps"] = filled
        new["done"] = s["done"] | (active & ~changed & (not options.run_all))
        new["iteration"] = s["iteration"] + 1
        new["iterations"] = s["iterations"] + active
        new["insertions"] = s["insertions"] + inserted
        for name in count_names:
            new[name] = s[name] + counts[name]
        if options.trace:
            snapshot = jnp.stack([edited.tokens, with_plh.tokens, filled.tokens])
            new["trace"] = s["trace"].at[s["iteration"]].set(snapshot)
        return new

    final = lax.while_loop(cond, body, state)
    hyps = final["hyps"]
    real = hyps.tokens != PAD_ID
    token_logp = jnp.where(real, hyps.scores, 0.0)
    out = {
        "tokens": hyps.tokens, "phrase": hyps.phrase, "token_logp": token_logp, "token_scored": real & hyps.scored,
        "score": jnp.sum(token_logp, axis=1) / jnp.maximum(jnp.sum(real, axis=1), 1),
        "iterations": final["iterations"], "insertions": final["insertions"],
        # the papers' count (LevT Table 6, fairseq's generator): the 0-based index of the last pass, so the
        # final pass that changed nothing, and the first pass, are not counted
        "steps": jnp.maximum(final["iterations"] - 1, 0),
        **{name: final[name] for name in count_names},
    }
    if options.trace:
        # iterations that did not run repeat the final hypothesis, so every row of the trace is readable
        ran = jnp.arange(steps)[:, None, None, None] < final["iteration"]
        out["trace"] = jnp.moveaxis(jnp.where(ran, final["trace"], hyps.tokens[None, None]), 2, 0)
    return out
