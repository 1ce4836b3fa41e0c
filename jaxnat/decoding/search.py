"""Greedy search, beam search and sampling for the autoregressive Transformer, batched and jit-compatible.

Each runs one `lax.while_loop` over target positions, feeding one token per step through a
``tokens_to_logprobs(tokens, cache, index)`` callback: the model behind it (an `ARTransformer` with its KV
cache, see `jaxnat.models.ar.model.ar_generate`, or a model with constraint memories) is the caller's business, so
constrained searches reuse the same loops. Nothing syncs with the host inside the loop. Conventions
(fairseq's):

* The output rows are `[BOS, y_1 .. y_m, EOS, PAD ..]`. A hypothesis has `n = m + 1` generated tokens (EOS
  included, BOS excluded) and its score is `sum_logprob / n ** length_penalty`, where `sum_logprob` is the sum
  of the model's log-probabilities of the n generated tokens (EOS included).
* A sentence may generate at most `max_len = decode_length(...)` tokens between BOS and EOS; at that point
  EOS is forced (every other id is given -inf; EOS keeps the model's log-probability, unrenormalised).
* PAD, BOS, PLH and MASK are never generated (their log-probabilities are set to -inf); UNK may be.
* ``rules="fairseq"`` follows fairseq's SequenceGenerator where it differs, so that an imported fairseq model's
  outputs are fairseq's token for token (docs/import.md): EOS is never the first token (its min_len 1), only PAD
  (and jaxnat's PLH and MASK, which a fairseq model lacks) is banned, the length limit reads the batch's longest
  source (`batch_length`), and beam search is fairseq's (`_fairseq_beam`); so is the constrained search
  (`jaxnat.decoding.constrained_fairseq`).
* Each output token also comes with the log-probability the model gave it at the step that generated it
  (``token_logp``, for calibration): the term it added to ``sum_logprob``, so the row's ``token_logp`` sum to the
  score before the length penalty. ``token_scored`` marks those positions: every generated token, EOS included
  (BOS and PAD are not generated: 0.0 and False).
* A beam search ends with each sentence's K finished hypotheses ranked, of which ``nbest`` are returned as its
  n-best list (`ranked_result`). Sampling (`Sampling`) is the greedy loop with each token drawn, seeded per sentence,
  from the tempered and truncated distribution (`truncate`), K samples a sentence ranked like a beam's outputs.

Shapes: `B` batch, `S` source length, `K` beam size, `V` target vocabulary, `T = max_out` output capacity.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxnat.argmax import argmax, top_k
from jaxnat.data.vocab import BOS_ID, EOS_ID, MASK_ID, PAD_ID, PLH_ID
from jaxnat.errors import ConfigError

FORBIDDEN_IDS = (PAD_ID, BOS_ID, PLH_ID, MASK_ID)
RULES = ("jaxnat", "fairseq")  # eval.search_rules
NEG_INF = -jnp.inf
_COPY_CHUNK = 16  # cache rows a step copies at a time (`follow_parents`)


def decode_length(src_len, max_len_a, max_len_b, cap: int, at_least=0) -> jnp.ndarray:
    """Most tokens each sentence may generate between BOS and EOS (neither counted).

    src_len: int32[B], the source's real tokens (BOS and EOS included); at_least: int32[B] (or an int), the
    tokens a forced prefix takes (`force_prefix`), which the limit always leaves room for. Returns int32[B]:

        clip(max(floor(max_len_a * src_len + max_len_b + 1e-4), at_least), 0, cap)

    computed in float32; the 1e-4 slack absorbs float32 rounding (0.7 * 10 gives 7, not 6). A hypothesis then
    holds at most `max_len + 1` generated tokens (EOS included) and its output row `max_len + 2` tokens, so
    `ar_search` uses `cap = max_out - 2`. max_len_a and max_len_b may be traced values; cap is a Python int.
    """
    raw = jnp.asarray(max_len_a, jnp.float32) * jnp.asarray(src_len, jnp.float32) + max_len_b
    return jnp.clip(jnp.maximum(jnp.floor(raw + 1e-4), at_least), 0, cap).astype(jnp.int32)


def batch_length(src_len: jnp.ndarray) -> jnp.ndarray:
    """int32[B]: the longest source of the batch, for every sentence: fairseq's length limit reads the batch's
    padded width, so its outputs are reproduced with its batches."""
    return jnp.broadcast_to(jnp.max(src_len), src_len.shape)


def _restrict(logp: jnp.ndarray, index, max_len: jnp.ndarray, rules: str = "jaxnat") -> jnp.ndarray:
    """logp: float[N, V] for the token at position index + 1; max_len: int32[N].

    Sets the reserved ids to -inf, and every id but EOS where `index >= max_len` (EOS forced); fairseq's
    ``rules``: PAD, PLH and MASK only, and EOS at index 0. The result is float32 whatever the model's compute
    dtype: every search score is summed and compared in float32.
    """
    ids = jnp.arange(logp.shape[-1])
    forbidden = FORBIDDEN_IDS if rules == "jaxnat" else (PAD_ID, PLH_ID, MASK_ID)
    banned = jnp.isin(ids, jnp.asarray(forbidden))[None, :]
    if rules == "fairseq":
        banned = banned | ((index < 1) & (ids == EOS_ID))[None, :]
    banned = banned | ((index >= max_len)[:, None] & (ids != EOS_ID)[None, :])
    return jnp.where(banned, NEG_INF, logp.astype(jnp.float32))


def barred(tokens_to_logprobs, ids: tuple):
    """A search callback under which no hypothesis takes the tokens ``ids``: their log-probabilities -inf after the
    model's softmax, the others' unchanged (Marian's suppressed words, its `<unk>` unless --allow-unk)."""
    def step(tokens, cache, index):
        logp, cache = tokens_to_logprobs(tokens, cache, index)
        return logp.at[..., jnp.asarray(ids)].set(NEG_INF), cache

    return step


def force_prefix(tokens_to_logprobs, prefix: jnp.ndarray, free=None):
    """A search callback that starts every hypothesis with its row's ``prefix`` (int32[N, P], PAD-padded: a row's
    first tokens after BOS): at position index < P the row's distribution is the prefix token's alone (every other id
    -inf). The first ``free`` tokens of a row (int32[N]; None: all) take log-probability 0, so they add nothing to a
    hypothesis's log-probability but count among its generated tokens, as Hugging Face's forced first token (a
    multilingual model's target-language token); the others (a given start of the translation) keep the model's,
    as fairseq's --prefix-size does, so that a completed output scores as the same output given whole.
    Beam search keeps one live beam through the prefix, the other K - 1 slots at -inf, as at its first step."""
    width = prefix.shape[1]

    def forced(tokens, cache, index):
        logp, cache = tokens_to_logprobs(tokens, cache, index)
        token = prefix[:, jnp.minimum(index, width - 1)]  # [N]
        on = (index < width) & (token != PAD_ID)
        if free is None:
            kept = 0.0
        else:  # [N, 1]
            own = jnp.take_along_axis(logp, token[:, None], axis=-1).astype(jnp.float32)
            kept = jnp.where((index < free)[:, None], 0.0, own)
        pinned = jnp.where(jnp.arange(logp.shape[-1])[None, :] == token[:, None], kept, NEG_INF)
        return jnp.where(on[:, None], pinned, logp), cache

    return forced


def _normalise(logp_sum: jnp.ndarray, n, length_penalty) -> jnp.ndarray:
    """`logp_sum / n ** length_penalty` (n: generated tokens, EOS included)."""
    return logp_sum / jnp.power(jnp.asarray(n, jnp.float32), length_penalty)


def _check_static(beam_size: int, max_out: int, nbest: int = 1) -> None:
    if beam_size < 1:
        raise ConfigError(f"beam_size={beam_size} must be at least 1")
    if not 1 <= nbest <= beam_size:
        raise ConfigError(f"nbest={nbest} must be from 1 to the beam size, {beam_size}")
    if max_out < 2:
        raise ConfigError(f"max_out={max_out} must be at least 2 (room for BOS and EOS)")


def _result(tokens: jnp.ndarray, score: jnp.ndarray, token_logp: jnp.ndarray) -> dict:
    """The searches' output (`ar_search`); token_logp: float32[B, T], 0.0 wherever no token was generated."""
    generated = (tokens != PAD_ID) & (jnp.arange(tokens.shape[1]) > 0)[None, :]
    return {"tokens": tokens, "score": score, "length": (tokens != PAD_ID).sum(axis=-1).astype(jnp.int32),
            "token_logp": jnp.where(generated, token_logp, 0.0), "token_scored": generated}


def ranked_result(fin_tokens: jnp.ndarray, fin_score: jnp.ndarray, fin_steps: jnp.ndarray, nbest: int) -> dict:
    """A beam search's output from its K finished hypotheses ranked best first (fin_tokens: int32[B, K, T],
    fin_score: float32[B, K], -inf for an empty slot; fin_steps: float32[B, K, T]): `_result` of the first, and with
    nbest > 1 the first nbest as 'nbest_tokens': int32[B, N, T] and 'nbest_score': float32[B, N]."""
    out = _result(fin_tokens[:, 0], fin_score[:, 0], fin_steps[:, 0])
    if nbest > 1:
        out.update(nbest_tokens=fin_tokens[:, :nbest], nbest_score=fin_score[:, :nbest])
    return out


@struct.dataclass
class GreedyState:
    index: jnp.ndarray  # int32 scalar: position of the token fed at the next step
    tokens: jnp.ndarray  # int32[B, T]
    token_logp: jnp.ndarray  # float32[B, T]: each generated token's log-probability (0 elsewhere)
    logp_sum: jnp.ndarray  # float32[B]: sum of the generated tokens' log-probabilities
    finished: jnp.ndarray  # bool[B]: EOS generated
    cache: Any  # the model's cache, B rows


def _greedy(tokens_to_logprobs, cache, max_len, length_penalty, max_out: int, rules: str = "jaxnat",
            pick=None) -> dict:
    """Left to right, one token per row and step: the most probable allowed one, or ``pick(logp float32[N, V],
    index) -> int32[N]``'s (`_sample`)."""
    pick = pick or (lambda logp, index: argmax(logp))
    batch = max_len.shape[0]
    tokens = jnp.full((batch, max_out), PAD_ID, jnp.int32).at[:, 0].set(BOS_ID)
    init = GreedyState(jnp.int32(0), tokens, jnp.zeros(tokens.shape, jnp.float32), jnp.zeros(batch, jnp.float32),
                       jnp.zeros(batch, bool), cache)

    def cond(s: GreedyState):
        return ~jnp.all(s.finished) & (s.index < max_out - 1)

    def body(s: GreedyState):
        logp, cache = tokens_to_logprobs(s.tokens[:, s.index], s.cache, s.index)
        logp = _restrict(logp, s.index, max_len, rules)
        best = pick(logp, s.index)
        gain = jnp.take_along_axis(logp, best[:, None], axis=-1)[:, 0]
        best = jnp.where(s.finished, PAD_ID, best)
        gain = jnp.where(s.finished, 0.0, gain)
        return GreedyState(
            index=s.index + 1,
            tokens=s.tokens.at[:, s.index + 1].set(best),
            token_logp=s.token_logp.at[:, s.index + 1].set(gain),
            logp_sum=s.logp_sum + gain,
            finished=s.finished | (best == EOS_ID),
            cache=cache,
        )

    s = jax.lax.while_loop(cond, body, init)
    n = (s.tokens != PAD_ID).sum(axis=-1) - 1
    return _result(s.tokens, _normalise(s.logp_sum, n, length_penalty), s.token_logp)


@struct.dataclass
class BeamState:
    index: jnp.ndarray  # int32 scalar: position of the tokens fed at the next step
    alive_tokens: jnp.ndarray  # int32[B, K, T]: unfinished hypotheses (no EOS yet), PAD after `index`
    alive_logp: jnp.ndarray  # float32[B, K]: their summed log-probabilities; -inf for empty/dead beams
    alive_steps: jnp.ndarray  # float32[B, K, T]: their tokens' log-probabilities, 0 after `index`
    fin_tokens: jnp.ndarray  # int32[B, K, T]: best finished hypotheses, sorted by score
    fin_steps: jnp.ndarray  # float32[B, K, T]: their tokens' log-probabilities
    fin_score: jnp.ndarray  # float32[B, K]: their normalised scores, descending; -inf for empty slots
    done: jnp.ndarray  # bool[B]: no alive beam can beat the worst finished hypothesis any more
    cache: Any  # the model's cache, B * K rows (row b * K + k: slot k; `follow_parents`)


def follow_parents(cache, parent: jnp.ndarray, live: jnp.ndarray, index) -> tuple[Any, jnp.ndarray]:
    """The beams' cache after a step: the K hypotheses kept, in rank order, extend the beams in ``parent``
    (int32[B, K], the slots, 0 .. K - 1, of their parents' rows); ``live``: bool[B], the sentences still searching;
    ``index``: the step's position. Returns (the cache, in_slot int32[B, K]: the rank of the hypothesis each slot
    now holds; the caller orders its per-beam state by it).

    A hypothesis's cache rows are its parent's, but they need not move: a parent's first-ranked child takes its
    parent's slot, and only its other children copy the parent's rows into the slots their childless beams left.
    Gathering every row along the ranking, as a search usually does, reads and writes the whole cache at every
    step ([B·K, H, T, dk] a layer and a key or value, then copied back into the loop's buffer); this copies the
    rows of the parents with several children, in place: a fifth of the rows a step in the decoding benchmark
    (docs/benchmarks.md, "Beam search's cache"). The slots' order is not the ranking's, which the searches'
    top-k reads only to break exact ties. At step 0 every beam holds the same BOS prefix: nothing to copy."""
    batch, k = parent.shape
    earlier = jnp.tril(jnp.ones((k, k), bool), -1)[None]  # [1, j, j']: j' ranks before j
    first = ~jnp.any((parent[:, :, None] == parent[:, None, :]) & earlier, axis=2)  # [B, K]: its parent's first
    slots = jnp.arange(k)
    claimed = jnp.any((parent[:, :, None] == slots) & first[:, :, None], axis=1)  # [B, K slots]
    # the other children, in rank order, take the unclaimed slots in slot order
    free_rank, child_rank = jnp.cumsum(~claimed, axis=1) - 1, jnp.cumsum(~first, axis=1) - 1
    other = jnp.argmax(~claimed[:, None, :] & (free_rank[:, None, :] == child_rank[:, :, None]), axis=2)
    slot = jnp.where(first, parent, other)
    in_slot = jnp.argmax(slot[:, :, None] == slots, axis=1)

    row_offset = (jnp.arange(batch) * k)[:, None]
    follows = live[:, None] & (index > 0)
    if batch * k <= _COPY_CHUNK:  # a cache this small: one gather of every row costs less than the copy loop
        reads = jnp.where(follows, jnp.take_along_axis(parent, in_slot, 1), slots) + row_offset
        return jax.tree_util.tree_map(lambda x: x[reads.reshape(-1)], cache), in_slot
    moved = (~first & follows).reshape(-1)
    order = jnp.argsort(~moved, stable=True)  # the rows to copy first
    n_rows, n_moved = batch * k, jnp.sum(moved)
    pad = (-n_rows) % _COPY_CHUNK
    src = jnp.pad((parent + row_offset).reshape(-1)[order], (0, pad))
    dst = jnp.pad((slot + row_offset).reshape(-1)[order], (0, pad))

    def copy_chunk(c, cache):
        start = c * _COPY_CHUNK
        rows_from = jax.lax.dynamic_slice(src, (start,), (_COPY_CHUNK,))
        rows_to = jax.lax.dynamic_slice(dst, (start,), (_COPY_CHUNK,))
        rows_to = jnp.where(start + jnp.arange(_COPY_CHUNK) < n_moved, rows_to, n_rows)  # past the end: dropped
        return jax.tree_util.tree_map(lambda x: x.at[rows_to].set(x[rows_from], mode="drop"), cache)

    cache = jax.lax.fori_loop(0, (n_moved + _COPY_CHUNK - 1) // _COPY_CHUNK, copy_chunk, cache)
    return cache, in_slot


@dataclasses.dataclass(frozen=True)
class Sampling:
    """Ancestral sampling (`ar_search`): each step draws the next token from the model's distribution divided by
    ``temperature`` and cut, in this order (Hugging Face's), to its ``top_k`` most probable tokens (0: all), to the
    fewest most probable tokens whose probability reaches ``top_p`` (Holtzman et al. 2020; 1: all), and to the
    tokens of probability at least ``epsilon`` (Hewitt et al. 2022; 0: all), each cut on what the one before left,
    renormalised, and never leaving no token. ``seed`` seeds the draws: a sentence's samples depend on its source
    and the seed alone, not on the batch it is decoded in."""
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    epsilon: float = 0.0
    seed: int = 0


def sampling_of(eval_cfg) -> Sampling | None:
    """The run's `Sampling` (eval.sampling and its settings), or None: its decoders search."""
    if not eval_cfg.sampling:
        return None
    return Sampling(eval_cfg.temperature, eval_cfg.top_k, eval_cfg.top_p, eval_cfg.epsilon, eval_cfg.sample_seed)


def truncate(logp: jnp.ndarray, sampling: Sampling) -> jnp.ndarray:
    """logp: float32[N, V], a step's restricted log-probabilities (-inf for barred ids) → the logits sampled from:
    divided by the temperature, -inf outside the kept tokens (`Sampling`). A token tied with the last one kept
    is kept too."""
    x = logp / sampling.temperature
    ranked = None  # the values the nucleus is read from, descending
    if 0 < sampling.top_k < x.shape[-1]:
        # after a top-k cut the nucleus is among those k: they alone are ranked, not the whole vocabulary (their
        # probabilities still over every kept token, the k-th's ties too)
        ranked = jax.lax.top_k(x, sampling.top_k)[0]
        x = jnp.where(x >= ranked[:, -1:], x, NEG_INF)
    if sampling.top_p < 1.0:
        ranked = -jnp.sort(-x, axis=-1) if ranked is None else ranked
        p = jnp.exp(ranked - jax.nn.logsumexp(x, axis=-1, keepdims=True))
        before = jnp.cumsum(p, axis=-1) - p  # the mass of the more probable tokens
        first = jnp.arange(ranked.shape[-1]) == 0
        floor = jnp.min(jnp.where((before < sampling.top_p) | first, ranked, jnp.inf), axis=-1, keepdims=True)
        x = jnp.where(x >= floor, x, NEG_INF)
    if sampling.epsilon > 0.0:
        p = jax.nn.softmax(x, axis=-1)
        x = jnp.where((p >= sampling.epsilon) | (x >= jnp.max(x, axis=-1, keepdims=True)), x, NEG_INF)
    return x


def cumulative(x: jnp.ndarray) -> jnp.ndarray:
    """x: float32[..., V], logits after `truncate` (-inf for what is cut) → float32[..., V], their cumulative
    probabilities, what `draw` reads: made once, drawn from many times."""
    return jnp.cumsum(jax.nn.softmax(x, axis=-1), axis=-1)


def draw(cdf: jnp.ndarray, key: jnp.ndarray) -> jnp.ndarray:
    """int32: an index drawn from one row of `cumulative` (float32[V]) by inverse transform sampling, the first whose
    cumulative probability reaches a uniform number in (0, total]: never an index of no probability (its cumulative
    equals the one before it) nor past the end. One number a draw, where the Gumbel-max trick draws V."""
    u = (1.0 - jax.random.uniform(key)) * cdf[-1]
    return jnp.sum(cdf < u, dtype=jnp.int32)


def source_keys(src: jnp.ndarray, seed: int) -> jnp.ndarray:
    """src: int32[B, S], PAD-padded rows → uint32[B, 2], a PRNG key per sentence from ``seed`` and its tokens alone
    (a polynomial hash of them, which PAD after them leaves unchanged), so that a sentence samples the same in any
    batch and bucket."""
    real = src != PAD_ID
    powers = jnp.cumprod(jnp.full(src.shape[1], np.uint32(1000003)), dtype=jnp.uint32)
    h = jnp.sum(jnp.where(real, (src.astype(jnp.uint32) + np.uint32(1)) * powers[None, :], np.uint32(0)), axis=1,
                dtype=jnp.uint32)
    return jax.vmap(lambda x: jax.random.fold_in(jax.random.PRNGKey(seed), x))(h)


def sample_keys(keys: jnp.ndarray, k: int) -> jnp.ndarray:
    """keys: uint32[B, 2], a sentence's (`source_keys`) → uint32[B, K, 2], the key of each of its K samples."""
    return jax.vmap(lambda key: jax.vmap(lambda j: jax.random.fold_in(key, j))(jnp.arange(k)))(keys)


def _sample(tokens_to_logprobs, cache, max_len, k: int, length_penalty, max_out: int, rules: str,
            sampling: Sampling, keys: jnp.ndarray, nbest: int) -> dict:
    """K samples a sentence (rows b · K + j), each scored as a search's output is (the model's log-probabilities,
    not the truncated ones); ranked by score, the best first (`ranked_result`). keys: uint32[B, 2] (`source_keys`)."""
    batch = max_len.shape[0]
    row_keys = sample_keys(keys, k).reshape(batch * k, -1)

    def pick(logp, index):
        step_keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(row_keys, index)
        return jax.vmap(jax.random.categorical)(step_keys, truncate(logp, sampling)).astype(jnp.int32)

    out = _greedy(tokens_to_logprobs, cache, jnp.repeat(max_len, k), length_penalty, max_out, rules, pick)
    rows = lambda x: x.reshape((batch, k) + x.shape[1:])  # noqa: E731
    score, tokens, steps = by_score(rows(out["score"]), rows(out["tokens"]), rows(out["token_logp"]))
    return ranked_result(tokens, score, steps, nbest)


def _beam(tokens_to_logprobs, cache, max_len, beam_size: int, length_penalty, max_out: int, nbest: int = 1) -> dict:
    batch, k = max_len.shape[0], beam_size
    max_len_rows = jnp.repeat(max_len, k)
    tokens = jnp.full((batch, k, max_out), PAD_ID, jnp.int32).at[:, :, 0].set(BOS_ID)
    # Only beam 0 is live at first, so that the K identical BOS prefixes do not produce duplicates.
    alive_logp = jnp.full((batch, k), NEG_INF, jnp.float32).at[:, 0].set(0.0)
    steps = jnp.zeros(tokens.shape, jnp.float32)
    init = BeamState(
        index=jnp.int32(0),
        alive_tokens=tokens,
        alive_logp=alive_logp,
        alive_steps=steps,
        fin_tokens=tokens,
        fin_steps=steps,
        fin_score=jnp.full((batch, k), NEG_INF, jnp.float32),
        done=jnp.zeros(batch, bool),
        cache=cache,
    )

    def cond(s: BeamState):
        return ~jnp.all(s.done) & (s.index < max_out - 1)

    def body(s: BeamState):
        i = s.index
        fed = s.alive_tokens[:, :, i].reshape(batch * k)
        logp, cache = tokens_to_logprobs(fed, s.cache, i)
        vocab = logp.shape[-1]
        logp = _restrict(logp, i, max_len_rows).reshape(batch, k, vocab)
        # [B, K, V]: every one-token extension but by EOS (EOS barred in the same pass over the logits)
        cand = s.alive_logp[:, :, None] + jnp.where(jnp.arange(vocab) == EOS_ID, NEG_INF, logp)

        # Extensions by EOS compete with the finished hypotheses (n = i + 1 generated tokens).
        eos_score = _normalise(s.alive_logp + logp[:, :, EOS_ID], i + 1, length_penalty)
        eos_tokens = s.alive_tokens.at[:, :, i + 1].set(EOS_ID)
        eos_steps = s.alive_steps.at[:, :, i + 1].set(logp[:, :, EOS_ID])
        fin_score, pick = jax.lax.top_k(jnp.concatenate([s.fin_score, eos_score], axis=1), k)
        fin_tokens = jnp.take_along_axis(jnp.concatenate([s.fin_tokens, eos_tokens], axis=1), pick[:, :, None], 1)
        fin_steps = jnp.take_along_axis(jnp.concatenate([s.fin_steps, eos_steps], axis=1), pick[:, :, None], 1)

        # The K best other extensions stay alive, each in a slot its parent's cache rows are in.
        alive_logp, flat = top_k(cand, k, axes=2)
        cache, in_slot = follow_parents(cache, flat // vocab, ~s.done, i)
        alive_logp, flat = jnp.take_along_axis(alive_logp, in_slot, 1), jnp.take_along_axis(flat, in_slot, 1)
        parent, token = flat // vocab, (flat % vocab).astype(jnp.int32)
        alive_tokens = jnp.take_along_axis(s.alive_tokens, parent[:, :, None], 1).at[:, :, i + 1].set(token)
        gain = jnp.take_along_axis(logp.reshape(batch, k * vocab), flat, axis=1)
        alive_steps = jnp.take_along_axis(s.alive_steps, parent[:, :, None], 1).at[:, :, i + 1].set(gain)

        # An alive beam (i + 1 generated tokens) ends with n in [i + 2, max_len + 1] tokens and a log-prob sum
        # <= its current one (<= 0), so its best reachable score is logp / max over n of n ** length_penalty.
        n_lo = jnp.asarray(i + 2, jnp.float32)
        n_hi = (max_len + 1).astype(jnp.float32)[:, None]
        best_reachable = alive_logp / jnp.maximum(n_lo**length_penalty, n_hi**length_penalty)
        done = s.done | (jnp.max(best_reachable, axis=1) <= jnp.min(fin_score, axis=1))
        # Freeze finished sentences, so that a sentence decodes the same alone or inside a batch.
        alive_logp = jnp.where(done[:, None], NEG_INF, alive_logp)
        return BeamState(i + 1, alive_tokens, alive_logp, alive_steps, fin_tokens, fin_steps, fin_score, done, cache)

    s = jax.lax.while_loop(cond, body, init)
    return ranked_result(s.fin_tokens, s.fin_score, s.fin_steps, nbest)  # top_k keeps them ranked


def fairseq_selection(eos: jnp.ndarray, fin_count: jnp.ndarray, done: jnp.ndarray, k: int):
    """fairseq's SequenceGenerator on a step's 2K ranked candidates (eos: bool[B, 2K], those ending in EOS with a
    finite score): EOS among the first K fills the sentence's next free finished slots, in candidate order,
    while it has fewer than K (fin_count: int32[B]; not in ``done`` sentences); the first K candidates that are
    not EOS stay alive (EOS ones only where fewer than K others). Returns (put(new [B, 2K, ...], old [B, K, ...])
    → old with the finished candidates written into their slots, the new fin_count, keep int32[B, K] the alive
    candidates)."""
    rank_of = jnp.arange(eos.shape[1])[None, :]
    slot = fin_count[:, None] + jnp.cumsum(eos, axis=1) - 1
    taken = eos & (rank_of < k) & (slot < k) & ~done[:, None]
    into = taken[:, :, None] & (slot[:, :, None] == jnp.arange(k)[None, None, :])  # [B, 2K, K]
    filled, which = jnp.any(into, axis=1), jnp.argmax(into, axis=1)  # [B, K]

    def put(new, old):
        trail = (1,) * (old.ndim - 2)
        return jnp.where(filled.reshape(filled.shape + trail),
                         jnp.take_along_axis(new, which.reshape(which.shape + (1,) * (new.ndim - 2)), 1), old)

    _, keep = jax.lax.top_k(-(eos * eos.shape[1] + rank_of), k)
    return put, fin_count + jnp.sum(taken, axis=1), keep


def _fairseq_beam(tokens_to_logprobs, cache, max_len, beam_size: int, length_penalty, max_out: int,
                  nbest: int = 1) -> dict:
    """fairseq's SequenceGenerator beam search (its BeamSearch, normalised scores, no prefix or n-gram blocking):
    at each step the 2K best extensions are ranked; those of the first K that end in EOS are finished (while the
    sentence has fewer than K finished), the first K that do not stay alive; a sentence stops once K hypotheses
    have finished, and returns them ranked by score (its --nbest), the best first. Not an exact search: a better
    hypothesis that would have finished later is never found (the default rules' `_beam` keeps searching until
    none can win)."""
    batch, k = max_len.shape[0], beam_size
    max_len_rows = jnp.repeat(max_len, k)
    tokens = jnp.full((batch, k, max_out), PAD_ID, jnp.int32).at[:, :, 0].set(BOS_ID)
    steps = jnp.zeros(tokens.shape, jnp.float32)
    init = dict(index=jnp.int32(0), alive_tokens=tokens, alive_logp=jnp.full((batch, k), NEG_INF).at[:, 0].set(0.0),
                alive_steps=steps, fin_tokens=tokens, fin_steps=steps, fin_score=jnp.full((batch, k), NEG_INF),
                fin_count=jnp.zeros(batch, jnp.int32), done=jnp.zeros(batch, bool), cache=cache)

    def body(s):
        i = s["index"]
        logp, cache = tokens_to_logprobs(s["alive_tokens"][:, :, i].reshape(batch * k), s["cache"], i)
        vocab = logp.shape[-1]
        logp = _restrict(logp, i, max_len_rows, "fairseq").reshape(batch, k, vocab)
        cand_score, flat = top_k(s["alive_logp"][:, :, None] + logp, 2 * k, axes=2)
        parent, token = flat // vocab, (flat % vocab).astype(jnp.int32)
        gain = jnp.take_along_axis(logp.reshape(batch, k * vocab), flat, axis=1)
        cand_tokens = jnp.take_along_axis(s["alive_tokens"], parent[:, :, None], 1).at[:, :, i + 1].set(token)
        cand_steps = jnp.take_along_axis(s["alive_steps"], parent[:, :, None], 1).at[:, :, i + 1].set(gain)
        eos = (token == EOS_ID) & (cand_score > NEG_INF)

        pick, fin_count, keep = fairseq_selection(eos, s["fin_count"], s["done"], k)
        fin_tokens = pick(cand_tokens, s["fin_tokens"])
        fin_steps = pick(cand_steps, s["fin_steps"])
        fin_score = pick(_normalise(cand_score, i + 1, length_penalty), s["fin_score"])
        done = s["done"] | (fin_count >= k)
        cache, in_slot = follow_parents(cache, jnp.take_along_axis(parent, keep, 1), ~done, i)
        keep = jnp.take_along_axis(keep, in_slot, 1)
        alive_logp = jnp.take_along_axis(cand_score, keep, 1)
        return dict(index=i + 1, alive_tokens=jnp.take_along_axis(cand_tokens, keep[:, :, None], 1),
                    alive_logp=jnp.where(done[:, None], NEG_INF, alive_logp),
                    alive_steps=jnp.take_along_axis(cand_steps, keep[:, :, None], 1), fin_tokens=fin_tokens,
                    fin_steps=fin_steps, fin_score=fin_score, fin_count=fin_count, done=done,
                    cache=cache)

    s = jax.lax.while_loop(lambda s: ~jnp.all(s["done"]) & (s["index"] < max_out - 1), body, init)
    score, tokens, steps = by_score(s["fin_score"], s["fin_tokens"], s["fin_steps"])
    return ranked_result(tokens, score, steps, nbest)


def by_score(score: jnp.ndarray, *rows: jnp.ndarray) -> tuple[jnp.ndarray, ...]:
    """(score, *rows) with each sentence's K entries sorted by score, the best first (score: float32[B, K]; rows:
    [B, K, ...]); equal scores keep their slot order (the first finished first, as fairseq's argmax takes it)."""
    order = jnp.argsort(-score, axis=1, stable=True)
    return tuple(jnp.take_along_axis(x, order.reshape(order.shape + (1,) * (x.ndim - 2)), 1) for x in (score, *rows))


def mean_probability(logp: jnp.ndarray) -> jnp.ndarray:
    """float[M, ...] log-probabilities of M models → float32[...], the log of their mean probability: an ensemble's
    (fairseq's EnsembleModel), each model's distribution weighted alike."""
    return jax.nn.logsumexp(logp.astype(jnp.float32), axis=0) - jnp.log(float(logp.shape[0]))


def ensembled(decoders: list) -> tuple:
    """One search callback of several models' (tokens_to_logprobs, cache) pairs, their caches a tuple, the
    log-probabilities each step the log of the members' mean probability (`mean_probability`)."""
    if len(decoders) == 1:
        return decoders[0]
    steps, caches = zip(*decoders)

    def tokens_to_logprobs(tokens, cache, index):
        outs = [step(tokens, c, index) for step, c in zip(steps, cache)]
        return mean_probability(jnp.stack([logp for logp, _ in outs])), tuple(c for _, c in outs)

    return tokens_to_logprobs, tuple(caches)


def forced_logp(tokens_to_logprobs, cache, tgt: jnp.ndarray) -> jnp.ndarray:
    """Forced decoding through a search's callback: tgt int32[B, T], given [BOS … EOS] rows (PAD after) →
    float32[B, T - 1], the log-probability the callback gives each tgt[:, i + 1] after feeding tgt[:, : i + 1], one
    `lax.scan` step a position (0.0 at PAD). The same numbers as the search's, for a model whose callback carries
    state a teacher-forced pass would not (a vectorized model's consumed phrase tokens)."""
    def step(cache, xs):
        fed, nxt, index = xs
        logp, cache = tokens_to_logprobs(fed, cache, index)
        return cache, jnp.take_along_axis(logp.astype(jnp.float32), nxt[:, None], axis=1)[:, 0]

    width = tgt.shape[1] - 1
    _, picked = jax.lax.scan(step, cache, (tgt[:, :-1].T, tgt[:, 1:].T, jnp.arange(width)))
    return jnp.where(tgt[:, 1:] != PAD_ID, picked.T, 0.0)


def forced_result(token_logp: jnp.ndarray, tgt: jnp.ndarray, free, length_penalty) -> dict:
    """`ModelSpec.score`'s output for a left-to-right model: token_logp float32[B, T - 1], the model's log-probability
    of each of tgt[:, 1:] (0.0 at PAD); tgt int32[B, T] [BOS, prefix …, y …, EOS] rows; free int32[B] or 0, how many
    of each row's first tokens were forced at log-probability 0 (`force_prefix`'s free tokens, `request.free_prefix`:
    they add nothing but count among the generated tokens) → {'logp': float32[B], 'score': float32[B], the score a
    search gives the output (`_normalise`), 'token_logp': float32[B, T - 1], each token's share of logp (0.0 at the
    free prefix and PAD)}."""
    positions = jnp.arange(token_logp.shape[1])[None, :]
    token_logp = jnp.where(positions < jnp.reshape(jnp.asarray(free), (-1, 1)), 0.0, token_logp)
    logp = jnp.sum(token_logp, axis=1)
    return {"logp": logp, "score": _normalise(logp, jnp.sum(tgt[:, 1:] != PAD_ID, axis=1), length_penalty),
            "token_logp": token_logp}


def ar_search(
    tokens_to_logprobs,
    cache,
    src_len: jnp.ndarray,
    *,
    beam_size: int = 1,
    length_penalty: float = 1.0,
    max_len_a: float = 1.2,
    max_len_b: int = 10,
    max_out: int,
    rules: str = "jaxnat",
    prefix_len=0,
    nbest: int = 1,
    sampling: Sampling | None = None,
    sample_keys: jnp.ndarray | None = None,
) -> dict:
    """Greedy (beam_size=1) or beam search (beam_size > 1) for a batch of B sentences.

    tokens_to_logprobs(tokens: int32[N], cache, index: int32[]) -> (log-probabilities float32[N, V], cache):
    the next-token distribution of N = B * beam_size rows (row b * beam_size + k), given the token each row
    holds at position ``index``; ``cache`` is its decoding state for those rows (any pytree whose leaves lead
    with N: beam search reorders them as beams are re-ranked). src_len: int32[B], the sources' real tokens
    (BOS and EOS included), for the length limit. beam_size and max_out are static (Python ints);
    length_penalty, max_len_a and max_len_b may be traced. max_out: capacity of the output rows (BOS and EOS
    included); each sentence generates at most `decode_length(src_len, max_len_a, max_len_b, max_out - 2)`
    tokens before EOS (at least prefix_len, int32[B]: the tokens the callback forces first, `force_prefix`).

    Returns {'tokens': int32[B, max_out] `[BOS .. EOS]` right-padded with PAD (exactly one EOS),
             'score': float32[B] sum of log-probabilities / n ** length_penalty (n: generated tokens incl. EOS),
             'length': int32[B] non-PAD tokens of each row (BOS and EOS included, so n = length - 1),
             'token_logp': float32[B, max_out] each generated token's log-probability (the step's restricted
               log-probabilities, EOS included; their sum is the score times n ** length_penalty), 0.0 at BOS
               and PAD,
             'token_scored': bool[B, max_out] the generated positions (1 .. EOS)}.

    Greedy takes the most probable allowed token at each step and stops at EOS. Beam search keeps K alive
    hypotheses and the K best finished ones per sentence, and stops a sentence once no alive hypothesis can
    beat the worst finished one (exact bound, so with K at least the number of distinct prefixes it is exact
    search); it returns the best finished hypothesis. Note beam_size=1 is greedy, not a one-beam search.
    nbest (static, at most beam_size): with nbest > 1 also the nbest best finished hypotheses, best first
    (`ranked_result`: 'nbest_tokens' int32[B, nbest, max_out], 'nbest_score' float32[B, nbest], -inf where the
    search finished fewer).
    With ``sampling`` (static; sample_keys: uint32[B, 2], `source_keys`), beam_size samples a sentence instead
    (`Sampling`; beam_size 1: one sample), the best-scoring one the output and the n-best list the best of them.
    """
    _check_static(beam_size, max_out, nbest)
    if rules not in RULES:
        raise ConfigError(f"search rules must be one of {', '.join(RULES)}, not {rules!r}")
    max_len = decode_length(batch_length(src_len) if rules == "fairseq" else src_len, max_len_a, max_len_b,
                            max_out - 2, prefix_len)
    if sampling is not None:
        return _sample(tokens_to_logprobs, cache, max_len, beam_size, length_penalty, max_out, rules, sampling,
                       sample_keys, nbest)
    if beam_size == 1:
        return _greedy(tokens_to_logprobs, cache, max_len, length_penalty, max_out, rules)
    if rules == "fairseq":
        return _fairseq_beam(tokens_to_logprobs, cache, max_len, beam_size, length_penalty, max_out, nbest)
    return _beam(tokens_to_logprobs, cache, max_len, beam_size, length_penalty, max_out, nbest)
