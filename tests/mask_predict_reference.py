"""Mask-predict and its parts in plain Python, one sentence at a time, for checking
`jaxnat.decoding.mask_predict` against; plus a stub model whose log-probabilities change with the canvas."""

import itertools

import numpy as np

from jaxnat.data.vocab import BOS_ID, EOS_ID, MASK_ID, NUM_RESERVED, PAD_ID
from tests import words_reference

LENGTH_OFFSET = 128


def candidate_lengths(length_logits, n_src, low, high, beam, centred, offset):
    """The ℓ candidate lengths of one sentence: the most probable classes (ties: lower class first) or the
    argmax ± ⌊ℓ/2⌋, as lengths, clipped to [low, high] (low wins)."""
    if centred:
        best = int(np.argmax(length_logits))
        classes = [best + k - beam // 2 for k in range(beam)]
    else:
        classes = sorted(range(len(length_logits)), key=lambda c: (-length_logits[c], c))[:beam]
    return [max(min(c + n_src - LENGTH_OFFSET if offset else c, high), low) for c in classes]


def remask_count(n, t, iterations):
    return max(n * (iterations - t) // iterations, 1)


def lowest(scores, free, count):
    """Positions of the ``count`` free positions of lowest score, ties leftmost first."""
    order = sorted((i for i in range(len(scores)) if free[i]), key=lambda i: (scores[i], i))
    return set(order[:count])


def phrase_fits(start, size, n):
    return start >= 1 and start + size - 1 <= n


def best_placement(logp, phrases, n, any_order):
    """Brute force: the largest subsets of the non-empty phrases that fit (non-overlapping, inside 1 … n, in
    the given order unless any_order), and of their placements the best summed log-probability → (score,
    {phrase: start}) ((0.0, {}) when none fits)."""
    nonempty = [k for k, p in enumerate(phrases) if p]
    for size in range(len(nonempty), 0, -1):
        found = [_best_of(logp, phrases, n, any_order, list(subset))
                 for subset in itertools.combinations(nonempty, size)]
        found = [f for f in found if f[0] is not None]
        if found:
            return max(found, key=lambda f: f[0])
    return 0.0, {}


def _best_of(logp, phrases, n, any_order, real):
    """The best placement of exactly the phrases ``real``, or (None, None)."""
    best, best_starts = None, None
    for starts in itertools.product(range(1, n + 1), repeat=len(real)):
        spans = sorted((s, s + len(phrases[k]) - 1, k) for s, k in zip(starts, real))
        if any(not phrase_fits(s, len(phrases[k]), n) for s, k in zip(starts, real)):
            continue
        if any(a[1] >= b[0] for a, b in zip(spans, spans[1:])):
            continue
        if not any_order and [k for _, _, k in spans] != real:
            continue
        total = sum(max(float(logp[s + j, t]), -1e4) for s, k in zip(starts, real) for j, t in enumerate(phrases[k]))
        if best is None or total > best:
            best, best_starts = total, dict(zip(real, starts))
    return best, best_starts


def placement_score(logp, phrases, starts):
    return sum(max(float(logp[s + j, t]), -1e4) for k, s in starts.items() for j, t in enumerate(phrases[k]))


def remove_repeats(tokens, values=None):
    """A [BOS … EOS, PAD …] row without each real token equal to the one right before it, PAD-filled to its
    width → (row, removed), and with ``values`` (one per token) the kept tokens' values, 0.0-filled, third."""
    keep = [t != PAD_ID and (i == 0 or t in (BOS_ID, EOS_ID) or t != tokens[i - 1]) for i, t in enumerate(tokens)]
    kept = [t for t, k in zip(tokens, keep) if k]
    out = kept + [PAD_ID] * (len(tokens) - len(kept)), len([t for t in tokens if t != PAD_ID]) - len(kept)
    if values is None:
        return out
    kept_values = [v for v, k in zip(values, keep) if k]
    return (*out, kept_values + [0.0] * (len(tokens) - len(kept_values)))


def _logsumexp(values):
    values = np.asarray(values, np.float64)
    top = np.max(values)
    return float(top + np.log(np.sum(np.exp(values - top)))) if np.isfinite(top) else float(top)


def _pick(lp_row, allowed=None):
    """A position's argmax token and its log-probability renormalised over the pieces ``allowed`` (bool per id;
    None: all), as the decoder's `choose` forms it from the logits it reads."""
    row = np.asarray(lp_row, np.float64) if allowed is None else np.where(allowed, lp_row, -np.inf)
    return int(np.argmax(row)), float(np.max(row)) - _logsumexp(row)


def _pass(lp, tokens, scores, masked, written, hard, continues, trails):
    """One pass: the ``masked`` positions take their argmax; with ``hard`` ((in_phrase, last) lists) the pass is
    then repaired until it glues nothing onto a phrase's word, re-choosing the ``written`` positions under the
    levels `tests.words_reference.repair` finds. Returns (tokens, scores)."""
    def choose(levels, at):
        row, new = list(tokens), list(scores)
        for i in at:
            allowed = None if levels is None else words_reference.allowed(levels[i], continues, trails)
            row[i], new[i] = _pick(lp[i], allowed)
        return row, new

    first = choose(None, masked)
    if hard is None or continues is None or trails is None:
        return first
    _, levels = words_reference.repair(lambda levels: choose(levels, written)[0], first[0],
                                       [i in written for i in range(len(tokens))], *hard, continues, trails)
    return first if not any(levels) else choose(levels, written)


def mask_predict(logprobs, length_logits, n_src, cap, iterations, beam, centred=False, offset=False,
                 stop_early=False, width=None, need=0, rescore=None, by_probability=True, dedup=False,
                 with_repeats=False, update_all=False, phrases=None, hard=False, any_order=True, continues=None,
                 joins=None, trails=None):
    """One sentence. logprobs(tokens: list of width ids) → float[width, V] log-probabilities. Returns (tokens,
    mean score, length, passes) of the best candidate: by mean token probability (or mean score, i.e.
    log-probability, without by_probability), or by rescore(tokens); with ``dedup`` every candidate's repeated
    tokens are removed before the choice (``with_repeats``: also how many it has, each token's score, 0.0 for BOS,
    EOS, PAD and placed constraint pieces, and whether the model chose it, aligned with the tokens, last); with
    ``update_all`` passes after the first also take the prediction at every position they did not mask.

    ``phrases`` (lists of ids): placed after pass 0 where its distributions score them best (`best_placement`),
    never re-masked; ``hard``: the candidate lengths make room for all of them, and no piece of ``continues``
    (bool per id) follows one nor one of ``joins`` precedes one; each pass is repaired so that nothing glues onto
    a phrase's word over the ``trails`` pieces (tests/words_reference.py)."""
    if phrases is not None and hard:
        need = sum(len(p) for p in phrases)
    results = []
    for n in candidate_lengths(length_logits, n_src, max(need, 1), cap, beam, centred, offset):
        tokens = [BOS_ID] + [MASK_ID] * n + [EOS_ID] + [PAD_ID] * (width - n - 2)
        scores = [0.0] * width
        real = [1 <= i <= n for i in range(width)]
        fixed = [False] * width
        lp = logprobs(tokens)
        tokens, scores = _pass(lp, tokens, scores, [i for i in range(width) if real[i]], None, None, None, None)
        glue, words = (lambda lp: lp), None  # the rules of a hard candidate: unglued logits, its phrases' words
        if phrases is not None:
            for k, start in best_placement(lp, phrases, n, any_order)[1].items():
                for j, t in enumerate(phrases[k]):
                    tokens[start + j], scores[start + j] = int(t), float(lp[start + j][t]) - _logsumexp(lp[start + j])
                    fixed[start + j] = True
            if hard:
                free = [i for i in range(width) if real[i] and not fixed[i]]
                after = {i for i in free if fixed[i - 1]}
                before = {i for i in free if i + 1 < width and fixed[i + 1]}
                words = (fixed, [fixed[i] and not (i + 1 < width and fixed[i + 1]) for i in range(width)])

                def glue(lp):
                    lp = np.array(lp, np.float64)
                    for i in after if continues is not None else ():
                        lp[i] = np.where(continues, -np.inf, lp[i])
                    for i in before if joins is not None else ():
                        lp[i] = np.where(joins, -np.inf, lp[i])
                    return lp

                tokens, scores = _pass(glue(lp), tokens, scores, sorted(after | before), free, words, continues,
                                       trails)
        passes = 1
        for t in range(1, iterations):
            free = [real[i] and not fixed[i] for i in range(width)]
            masked = lowest(scores, free, remask_count(n, t, iterations))
            lp = glue(logprobs([MASK_ID if i in masked else tok for i, tok in enumerate(tokens)]))
            written = [i for i in range(width) if free[i]] if update_all else sorted(masked)
            new, scores = _pass(lp, tokens, scores, written, written, words, continues, trails)
            passes += 1
            changed = new != tokens
            tokens = new
            if stop_early and not changed:
                break
        mean = sum(scores[i] for i in range(width) if real[i]) / max(n, 1)
        prob = sum(np.exp(np.float32(scores[i])) for i in range(width) if real[i]) / max(n, 1)
        scored = [real[i] and not fixed[i] for i in range(width)]
        token_scores = [scores[i] if scored[i] else 0.0 for i in range(width)]
        deduped, repeats, deduped_scores = remove_repeats(tokens, token_scores)  # counted whether or not removed
        if dedup:
            tokens, token_scores, scored = (deduped, deduped_scores,
                                            [bool(x) for x in remove_repeats(tokens, scored)[2]])
        results.append((tokens, mean, n, passes, prob, repeats, token_scores, scored))
    pick = max(results, key=lambda r: rescore(r[0]) if rescore else (r[4] if by_probability else r[1]))
    return (*pick[:4], *pick[5:]) if with_repeats else pick[:4]  # max keeps the first of equal scores


def stub_tables(seed, vocab, width):
    """A stub model for decoding tests: position i's logits are table[sentence, i] plus terms of the tokens
    beside it (``near``), so masking and re-predicting matter; reserved ids are never predicted."""
    rng = np.random.RandomState(seed)
    return (rng.normal(0, 3, (16, width, vocab)).astype(np.float32),
            rng.normal(0, 1, (vocab, vocab)).astype(np.float32))


def _reserved(vocab):
    out = np.zeros(vocab, np.float32)
    out[[PAD_ID, BOS_ID, EOS_ID, 4, MASK_ID]] = -np.inf  # as forbid_reserved (4: PLH)
    assert NUM_RESERVED == 6
    return out


def stub_numpy(table, near, every_id=False):
    """f(tokens: list of ids, sentence) → float32[width, V] log-probabilities (``every_id``: the reserved ids
    too, as a fairseq model may predict them)."""
    import jax
    import jax.numpy as jnp

    def fn(tokens, sentence):
        t = np.asarray(tokens)
        logits = table[sentence] + 0.5 * near[np.roll(t, 1)] + 0.5 * near[np.roll(t, -1)]
        logits = logits if every_id else logits + _reserved(len(near))
        return np.asarray(jax.nn.log_softmax(jnp.asarray(logits), axis=-1))

    return fn


def stub_jax(table, near, every_id=False):
    """The same for the jit'd decoder: f(tokens int32[R, L], rows_of int32[R]) → float32[R, L, V] (L at most the
    tables' width: a narrower canvas reads the same logits at its positions); table and near may be traced."""
    import jax
    import jax.numpy as jnp

    def fn(tokens, rows_of):
        logits = (table[rows_of, : tokens.shape[1]] + 0.5 * near[jnp.roll(tokens, 1, axis=1)]
                  + 0.5 * near[jnp.roll(tokens, -1, axis=1)])
        return jax.nn.log_softmax(logits if every_id else logits + _reserved(near.shape[0]), axis=-1)

    return fn


def fairseq_decode(logprobs, length_logits, n_src, capacity, iterations, beam, offset, with_ends, stop_early,
                   ends_predicted, width):
    """fairseq 0.12's IterativeRefinementGenerator with its CMLM (``ends_predicted`` False) or NAT (True)
    forward_decoder, one sentence, written as fairseq's code reads: ``logprobs(canvas)`` → [width, V], fairseq's
    <unk> (its mask) written as MASK. Returns (tokens without PAD, score, n, passes, each token's log-probability,
    whether the model predicted it: a position it writes, left unmasked; 0.0 and False for the others)."""
    best = int(np.argmax(length_logits))
    n_star = max(best + n_src - LENGTH_OFFSET if offset else best - (2 if with_ends else 0), 0)
    results = []
    for k in range(beam):
        n = min(max(n_star + k - beam // 2, 0), capacity - 2)
        tokens = [BOS_ID] + [MASK_ID] * n + [EOS_ID] + [PAD_ID] * (width - n - 2)
        scores = [0.0] * width
        predictable = [t != PAD_ID if ends_predicted else t == MASK_ID for t in tokens]
        passes = 0
        for step in range(iterations):
            before = list(tokens)
            masks = [t != PAD_ID if ends_predicted else t == MASK_ID for t in tokens]
            lp = logprobs(tokens)
            for i in range(width):
                if masks[i]:
                    guess = int(np.argmax(lp[i]))
                    tokens[i], scores[i] = (MASK_ID if guess == 3 else guess), float(np.max(lp[i]))  # 3: UNK
            passes += 1
            if step + 1 < iterations:
                p = np.float32(1 - (step + 1) / iterations)
                count = int(np.floor(np.float32(sum(t != PAD_ID for t in tokens) - 2) * p))
                for i in sorted(range(width), key=lambda i: (scores[i], i))[:max(count, 0)]:
                    tokens[i], scores[i] = MASK_ID, 0.0
            if (stop_early and tokens == before) or step + 1 == iterations:
                break
        kept = [i for i in range(width) if tokens[i] != PAD_ID]
        out = [3 if tokens[i] == MASK_ID else tokens[i] for i in kept]
        scored = [predictable[i] and tokens[i] != MASK_ID for i in kept]
        logp = [scores[i] if s else 0.0 for i, s in zip(kept, scored)]
        results.append((out, sum(scores[i] for i in kept) / max(len(kept), 1), n, passes, logp, scored))
    return max(results, key=lambda r: r[1])  # max keeps the first of equal scores
