"""Lexically constrained beam search: DBA (Post & Vilar 2018) in the vectorised form of VDBA (Hu et al. 2019).

Every sentence of a batch brings up to C target phrases (`phrases: int32[B, C, P]`, PAD-padded, an all-PAD row =
no phrase) that must all appear in its output. The search is `search.ar_search`'s beam search with three changes,
all inside one jit'd `lax.while_loop` at fixed shapes:

* **Tracking** (fairseq's `UnorderedConstraintState`; Hu et al.'s trie): each hypothesis follows one path of
  the trie of its unmet phrases — the set ``cand`` of unmet phrases whose first ``depth`` tokens end the
  hypothesis (with ``ordered`` only the first unmet phrase may be started: Post & Vilar's phrases in the given
  order). A token that continues a phrase in ``cand`` goes one level down; any other token falls off the path:
  the deepest phrase the path had completed (``pending``) is then met, the rest of the path's progress is lost,
  and the token may start a phrase at the root. **One token counts for one constraint**: producing "a b" with
  the phrases "a" and "a b" meets "a b" only ("a" must appear elsewhere), as in fairseq's and Sockeye's
  searches. ``met = Σ len(met phrases) + depth`` (+ a pending phrase that punctuation took the path off)
  counts the constraint tokens produced: the hypothesis's **bank**. EOS falls off the path too, so a hypothesis may
  end once every phrase is met or pending. Right after a phrase is completed, and after any punctuation written
  onto it (``trails``: "Zaun." is still open to "Zaun.n"), a piece that would glue onto its last word
  (``continues``) is not allowed unless it continues a phrase, so that the phrase is found as whole words in the
  detokenized output (what CSR counts; phrases start with a word-initial piece, so this never blocks one); the
  phrase is met once its word is closed. When the glued piece continues a longer phrase (``meli`` then ``en`` on
  the way to ``melien``), the phrase just completed was no word of its own: it stays unmet.
* **Candidates.** Per sentence: the 2K best one-token extensions over the beam, the best extension of each
  hypothesis, and, for each hypothesis, every token that continues or starts a phrase; a (hypothesis, token)
  pair offered twice counts once. EOS is never a candidate for the beam; it ends a hypothesis only when all its
  phrases are met (or when the length limit forces EOS: such an output is a fallback, ranked below every
  output that meets its constraints).
* **Banks.** The K survivors are taken round-robin across banks, highest bank first: the best candidate of
  each bank, then the second best of each, … (`round_robin_banks`), the slots of a bank short of candidates
  going to the others in the same order. This is close to Post & Vilar's equal split of the beam across banks
  but not the same allocation: Sockeye's ``get_bank_sizes`` gives each bank ⌊K / banks⌋ slots and the remainder
  to the highest banks, so with fewer beams than banks it leaves the lowest banks no slot; round-robin gives the
  K highest non-empty banks one each.

Because the best candidate of the highest bank always survives and can always take one more constraint token,
an output that meets every phrase exists after at most Σ len tokens: whenever the length limit leaves that
room (the limit is raised to Σ len where the source-based one is shorter), the constraints are guaranteed.

Shapes: B sentences, K beam, V vocabulary, C phrases of at most P pieces, M candidates per sentence, T output.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxnat.argmax import argmax, top_k
from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID
from jaxnat.decoding.search import (NEG_INF, _check_static, _normalise, _restrict, decode_length, follow_parents,
                                    ranked_result)


@struct.dataclass
class Tracker:
    """Constraint progress of hypotheses (any leading shape [...]); see the module docstring."""
    done: jnp.ndarray     # bool[..., C]: phrases met (empty phrase slots count as met)
    depth: jnp.ndarray    # int32[...]: the path's length: tokens of the phrases in progress produced so far
    cand: jnp.ndarray     # bool[..., C]: the unmet phrases the path is a prefix of (all False at the root)
    pending: jnp.ndarray  # bool[..., C]: the deepest phrase the path completed, met when it falls off (or none)
    ended: jnp.ndarray    # bool[...]: the completed phrase's word is still open: the last token completed it, or
                          # only trailing pieces (punctuation) followed


def phrase_lengths(phrases: jnp.ndarray) -> jnp.ndarray:
    """phrases: int32[..., C, P] → int32[..., C] real pieces of each phrase."""
    return jnp.sum(phrases != PAD_ID, axis=-1, dtype=jnp.int32)


def start(phrases: jnp.ndarray) -> Tracker:
    """The empty hypothesis's progress for phrases int32[B, C, P] → Tracker of shape [B]."""
    lens = phrase_lengths(phrases)
    none = jnp.zeros(lens.shape, bool)
    return Tracker(lens == 0, jnp.zeros(lens.shape[:-1], jnp.int32), none, none, jnp.zeros(lens.shape[:-1], bool))


def _startable(done: jnp.ndarray, ordered: bool) -> jnp.ndarray:
    """bool[C]: the phrases a hypothesis at the root may start (the first unmet one when ordered)."""
    unmet = ~done
    return unmet & (jnp.cumsum(unmet) == 1) if ordered else unmet


def advance(phrases: jnp.ndarray, t: Tracker, token: jnp.ndarray, ordered: bool, glue=False,
            after_join=False, trail=False) -> Tracker:
    """One hypothesis's progress after ``token``. phrases: int32[C, P]; t: Tracker of shape []; token: int32[];
    glue: bool[], the token glues onto the word before it (a phrase whose word is still open then is no word of
    its own, and stays unmet); after_join: bool[], the previous token glues the next one onto its word (a BPE
    piece ending in "@@"), so that ``token`` starts no phrase; trail: bool[], the token is punctuation written
    onto the word before it, which leaves that word open ("Zaun." may still become "Zaun.n"): a phrase
    completed before it stays pending until a token starts a new word."""
    lens = phrase_lengths(phrases)
    p = phrases.shape[1]
    at_depth = phrases[:, jnp.minimum(t.depth, p - 1)]
    deeper = t.cand & (lens > t.depth) & (t.depth > 0) & (at_depth == token)
    moving = jnp.any(deeper)
    glued_on = t.ended & glue  # the phrase whose word was open is not a word
    still_open = t.ended & jnp.asarray(trail, bool)  # also on the way to a longer phrase: "Zaun." may be "Zaun.n"
    # falling off the path meets the deepest phrase it completed (once its word is closed), and the token may
    # start a phrase at the root
    done = t.done | (t.pending & ~moving & ~glued_on & ~still_open)
    from_root = _startable(done, ordered) & (phrases[:, 0] == token) & ~jnp.asarray(after_join, bool)
    cand = jnp.where(moving, deeper, from_root)
    depth = jnp.where(moving, t.depth + 1, jnp.where(jnp.any(from_root), 1, 0)).astype(jnp.int32)
    at_end = cand & (lens == depth)
    first = at_end & (jnp.cumsum(at_end) == 1)  # the same phrase asked twice: the lowest-numbered first
    reached = jnp.any(first)
    pending = jnp.where(reached, first, t.pending & (moving | still_open) & ~glued_on)
    return Tracker(done, depth, cand, pending, reached | still_open)


def complete(t: Tracker) -> jnp.ndarray:
    """bool[...]: every phrase met or pending (ending the hypothesis, e.g. by EOS, meets the pending one)."""
    return jnp.all(t.done | t.pending, axis=-1)


def met(phrases: jnp.ndarray, t: Tracker) -> jnp.ndarray:
    """int32[...]: the bank — constraint tokens produced (met phrases' lengths + the depth in progress + a
    pending phrase left behind by punctuation, its word still open)."""
    lens = phrase_lengths(phrases)
    left = t.ended & (t.depth == 0)  # punctuation took the path off the phrase it completed
    return (jnp.sum(jnp.where(t.done | (t.pending & left[..., None]), lens, 0), axis=-1, dtype=jnp.int32)
            + t.depth)


def next_tokens(phrases: jnp.ndarray, t: Tracker, ordered: bool, after_join=False) -> tuple[jnp.ndarray, jnp.ndarray]:
    """The tokens that continue or start a phrase: (int32[2C] tokens, bool[2C] which are real) for one
    hypothesis (none that starts one ``after_join``). phrases: int32[C, P]."""
    p = phrases.shape[1]
    at_depth = phrases[:, jnp.minimum(t.depth, p - 1)]
    tokens = jnp.concatenate([at_depth, phrases[:, 0]])
    ok = jnp.concatenate([t.cand & (phrase_lengths(phrases) > t.depth) & (t.depth > 0),
                          _startable(t.done | t.pending, ordered) & ~jnp.asarray(after_join, bool)])
    return tokens, ok


def _rank(score: jnp.ndarray, group: jnp.ndarray) -> jnp.ndarray:
    """int32[B, M]: how many entries of the same group rank before each entry (higher score first, then
    lower index). score: float32[B, M]; group: int32[B, M]."""
    m = score.shape[1]
    before = (score[:, None, :] > score[:, :, None]) | (
        (score[:, None, :] == score[:, :, None]) & (jnp.arange(m)[None, :] < jnp.arange(m)[:, None])[None])
    return jnp.sum(before & (group[:, None, :] == group[:, :, None]), axis=-1, dtype=jnp.int32)


def _take(x: jnp.ndarray, idx: jnp.ndarray) -> jnp.ndarray:
    """x[b, idx[b, j], ...] for x: [B, N, ...], idx: int32[B, J]."""
    return jax.vmap(lambda row, i: row[i])(x, idx)


def round_robin_banks(score: jnp.ndarray, bank: jnp.ndarray, total: jnp.ndarray, k: int) -> jnp.ndarray:
    """int32[B, k]: the candidates that survive (module docstring, "Banks"): the best of each bank, highest bank
    first, then the second best of each, …; candidates at NEG_INF never (unless fewer than k are left).
    score: float32[B, M]; bank: int32[B, M] constraint tokens produced; total: int32[B] the most there are."""
    m = score.shape[1]
    stride = jnp.max(total) + 1  # more than the number of banks
    order = _rank(score, bank) * stride + (total[:, None] - bank)
    _, pick = jax.lax.top_k(-jnp.where(score > NEG_INF, order, m * stride + 1).astype(jnp.float32), k)
    return pick


@struct.dataclass
class ConstrainedState:
    index: jnp.ndarray         # int32 scalar: position of the tokens fed at the next step
    alive_tokens: jnp.ndarray  # int32[B, K, T]
    alive_logp: jnp.ndarray    # float32[B, K]; -inf for empty/dead beams
    alive_steps: jnp.ndarray   # float32[B, K, T]: each token's log-probability, 0 after `index`
    progress: Tracker          # [B, K]: the alive hypotheses' constraint progress
    fin_tokens: jnp.ndarray    # int32[B, K, T]
    fin_steps: jnp.ndarray     # float32[B, K, T]
    fin_score: jnp.ndarray     # float32[B, K]; -inf for empty slots
    fin_met: jnp.ndarray       # bool[B, K]: the finished hypothesis meets all its phrases
    done: jnp.ndarray          # bool[B]
    cache: Any                 # the model's cache, B * K rows


def constrained_search(tokens_to_logprobs, cache, src_len: jnp.ndarray, phrases: jnp.ndarray, *,
                       beam_size: int, ordered: bool = False, continues=None, joins=None, trails=None,
                       length_penalty: float = 1.0, max_len_a: float = 1.2, max_len_b: int = 10, max_out: int,
                       prefix_len=0, nbest: int = 1) -> dict:
    """Beam search in which each sentence's output contains all its phrases (module docstring).

    tokens_to_logprobs, cache, src_len, length_penalty, max_len_a, max_len_b, max_out: as `search.ar_search`.
    phrases: int32[B, C, P] target piece ids, PAD-padded. beam_size, ordered, max_out: static. continues:
    bool[V], the pieces that would glue onto the word before them (`PieceTables.continues`), never taken right
    after a phrase is completed, so that it stays a word of its own in the detokenized output (None: none); joins:
    bool[V], the pieces that glue the next one onto their word (`PieceTables.joins`: BPE's "@@"), after which no
    phrase starts, so that it does not glue onto the word before it (None: none); trails: bool[V], punctuation
    (`spec.word_glue`), which leaves a completed phrase's word open: ``continues`` stays barred after it.
    prefix_len: int32[B], the tokens the callback forces before any phrase can start (`search.force_prefix`), which
    the length limit makes room for beside the phrases.

    Returns {'tokens': int32[B, T], 'score': float32[B], 'length': int32[B], 'token_logp': float32[B, T],
             'token_scored': bool[B, T] (as ar_search: a constraint token is scored too, with the log-probability
             the model gave it where it was produced),
             'constraints_met': bool[B] (False only for a fallback output cut by the length limit)},
    and with nbest > 1 (static, at most beam_size) the nbest best outputs that meet every phrase, best first
    (`search.ranked_result`; a fallback output only as the first, where none meets them; -inf beyond those found).
    """
    _check_static(beam_size, max_out, nbest)
    batch, k = src_len.shape[0], beam_size
    lens = phrase_lengths(phrases)
    total = jnp.sum(lens, axis=1)
    max_len = decode_length(src_len, max_len_a, max_len_b, max_out - 2, at_least=total + prefix_len)
    max_len_rows = jnp.repeat(max_len, k)
    tokens = jnp.full((batch, k, max_out), PAD_ID, jnp.int32).at[:, :, 0].set(BOS_ID)
    first = start(phrases)
    per_beam = jax.tree_util.tree_map(lambda x: jnp.repeat(x[:, None], k, axis=1), first)
    steps = jnp.zeros(tokens.shape, jnp.float32)
    init = ConstrainedState(
        index=jnp.int32(0), alive_tokens=tokens,
        alive_logp=jnp.full((batch, k), NEG_INF, jnp.float32).at[:, 0].set(0.0), alive_steps=steps,
        progress=per_beam, fin_tokens=tokens, fin_steps=steps, fin_score=jnp.full((batch, k), NEG_INF, jnp.float32),
        fin_met=jnp.zeros((batch, k), bool), done=jnp.zeros(batch, bool), cache=cache)
    advance_all = jax.vmap(jax.vmap(advance, in_axes=(None, 0, 0, None, 0, 0, 0)), in_axes=(0, 0, 0, None, 0, 0, 0))
    next_all = jax.vmap(jax.vmap(next_tokens, in_axes=(None, 0, None, 0)), in_axes=(0, 0, None, 0))

    def cond(s: ConstrainedState):
        return ~jnp.all(s.done) & (s.index < max_out - 1)

    def body(s: ConstrainedState):
        i = s.index
        logp, cache = tokens_to_logprobs(s.alive_tokens[:, :, i].reshape(batch * k), s.cache, i)
        vocab = logp.shape[-1]
        logp = _restrict(logp, i, max_len_rows).reshape(batch, k, vocab)
        joined = (jnp.asarray(joins)[s.alive_tokens[:, :, i]] if joins is not None
                  else jnp.zeros((batch, k), bool))  # [B, K]: the last token glues the next onto its word
        ctok, cok = next_all(phrases, s.progress, ordered, joined)  # [B, K, 2C]: the tokens that advance a phrase
        if continues is not None:  # a completed phrase stays a whole word (unless a phrase goes on with the piece)
            offered = jnp.zeros((batch, k, vocab), bool).at[
                jnp.arange(batch)[:, None, None], jnp.arange(k)[None, :, None], ctok].max(cok)
            logp = jnp.where(s.progress.ended[:, :, None] & continues[None, None, :] & ~offered, NEG_INF, logp)
        ext = s.alive_logp[:, :, None] + logp  # [B, K, V]
        met_all = complete(s.progress)  # [B, K]

        # Finished: EOS after a complete hypothesis, or forced by the length limit (a fallback, ranked last).
        eos_score = _normalise(ext[:, :, EOS_ID], i + 1, length_penalty)
        forced = (i >= max_len)[:, None]
        eos_score = jnp.where(met_all | forced, eos_score, NEG_INF)
        pool_score = jnp.concatenate([s.fin_score, eos_score], axis=1)
        pool_met = jnp.concatenate([s.fin_met, met_all], axis=1)
        pool_tokens = jnp.concatenate([s.fin_tokens, s.alive_tokens.at[:, :, i + 1].set(EOS_ID)], axis=1)
        pool_steps = jnp.concatenate([s.fin_steps, s.alive_steps.at[:, :, i + 1].set(logp[:, :, EOS_ID])], axis=1)
        tier = jnp.where(pool_score == NEG_INF, 2, jnp.where(pool_met, 0, 1))
        order = tier * (2 * k) + _rank(pool_score, tier)
        _, pick = jax.lax.top_k(-order, k)
        fin_score, fin_met = _take(pool_score, pick), _take(pool_met, pick) & (_take(tier, pick) < 2)
        fin_tokens, fin_steps = _take(pool_tokens, pick), _take(pool_steps, pick)

        # Candidates for the beam: top 2K over the beam, the top-1 of each hypothesis, the constraint tokens.
        ext = ext.at[:, :, EOS_ID].set(NEG_INF)
        _, flat = top_k(ext, min(2 * k, k * vocab), axes=2)
        best1 = argmax(ext)  # [B, K]
        n_c = ctok.shape[-1]
        parent = jnp.concatenate([flat // vocab, jnp.broadcast_to(jnp.arange(k), (batch, k)),
                                  jnp.repeat(jnp.arange(k), n_c)[None].repeat(batch, 0)], axis=1)
        token = jnp.concatenate([flat % vocab, best1, ctok.reshape(batch, k * n_c)], axis=1).astype(jnp.int32)
        offered = jnp.concatenate([jnp.ones((batch, flat.shape[1] + k), bool), cok.reshape(batch, k * n_c)], 1)
        score = jnp.where(offered, _take(ext.reshape(batch, k * vocab), parent * vocab + token), NEG_INF)
        m = score.shape[1]
        key = parent * vocab + token
        seen = jnp.any((key[:, None, :] == key[:, :, None]) & offered[:, None, :]
                       & (jnp.arange(m)[None, :] < jnp.arange(m)[:, None])[None], axis=-1)
        score = jnp.where(seen, NEG_INF, score)
        glue = jnp.asarray(continues)[token] if continues is not None else jnp.zeros(token.shape, bool)
        trail = jnp.asarray(trails)[token] if trails is not None else jnp.zeros(token.shape, bool)
        progress = advance_all(phrases, jax.tree_util.tree_map(lambda x: _take(x, parent), s.progress), token,
                               ordered, glue, _take(joined, parent), trail)
        bank = met(phrases[:, None], progress)  # [B, M]
        pick = round_robin_banks(score, bank, total, k)
        cache, in_slot = follow_parents(cache, _take(parent, pick), ~s.done, i)
        pick = _take(pick, in_slot)
        alive_logp = _take(score, pick)
        parent, token = _take(parent, pick), _take(token, pick)
        alive_tokens = _take(s.alive_tokens, parent).at[:, :, i + 1].set(token)
        gain = _take(logp.reshape(batch, k * vocab), parent * vocab + token)
        alive_steps = _take(s.alive_steps, parent).at[:, :, i + 1].set(gain)
        progress = jax.tree_util.tree_map(lambda x: _take(x, pick), progress)

        # Stop a sentence when K outputs meet its phrases and no alive beam can beat them, or nothing is alive.
        n_lo = jnp.asarray(i + 2, jnp.float32)
        n_hi = (max_len + 1).astype(jnp.float32)[:, None]
        best_reachable = alive_logp / jnp.maximum(n_lo**length_penalty, n_hi**length_penalty)
        done = s.done | jnp.all(alive_logp == NEG_INF, axis=1) | (
            jnp.all(fin_met, axis=1) & (jnp.max(best_reachable, axis=1) <= jnp.min(fin_score, axis=1)))
        alive_logp = jnp.where(done[:, None], NEG_INF, alive_logp)
        return ConstrainedState(i + 1, alive_tokens, alive_logp, alive_steps, progress, fin_tokens, fin_steps,
                                fin_score, fin_met, done, cache)

    s = jax.lax.while_loop(cond, body, init)
    # ranked already: those that meet their phrases first; an n-best list holds no other fallback
    ranked = jnp.where(s.fin_met | (jnp.arange(k) == 0)[None, :], s.fin_score, NEG_INF)
    return {**ranked_result(s.fin_tokens, ranked, s.fin_steps, nbest), "constraints_met": s.fin_met[:, 0]}
