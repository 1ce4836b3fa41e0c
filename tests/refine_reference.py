"""The refinement loop in plain Python, for checking `jaxnat.decoding.refine` against: the model's heads are
called on the padded batch as in the jit'd loop, and every edit is applied per sentence with the list-based
references of tests/reference.py. Also stub heads (random logits that change with the hypothesis), random
batches, and the loop-vs-reference check both edit models run."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxnat.data.vocab import BOS_ID, EOS_ID, NUM_RESERVED, PAD_ID, PLH_ID
from jaxnat.decoding.refine import Heads, SharedFeatures, initial_hypotheses, length_cap, refine
from jaxnat.decoding.refine import NOT_PREDICTED
from tests import jitted
from tests import reference as ref
from tests import words_reference as words


def pad(rows, length, value=PAD_ID):
    return np.array([list(r) + [value] * (length - len(r)) for r in rows])


def levt_first(row, marks, scores, logits, continues=None, joins=None, trails=None):
    """LevT's deletion on one sentence; logits: [L, 2]. Returns (row, marks, scores, counts). With ``joins``
    (bool[V]), the free token right before a phrase is only deleted when the token before it does not join the
    next onto its word and is not marked itself. With ``continues`` (bool[V]; ``trails``, bool[V] or None:
    punctuation), when a continuing piece that stays would stand in a phrase's open word (deleted pieces and
    punctuation between them), the pieces marked between the phrase and it stay too."""
    if len(row) <= 2:
        return row, marks, scores, {"deletions": 0}
    flags = list(logits[:len(row)].argmax(-1) == 1)
    flags = [f and not (joins is not None and 0 < k < len(row) - 1 and marks[k + 1] and not marks[k]
                        and (joins[row[k - 1]] or flags[k - 1]))
             for k, f in enumerate(flags)]
    if continues is not None:
        last = [m > 0 and (k + 1 == len(row) or marks[k + 1] != m) for k, m in enumerate(marks)]
        passes = [(f or (trails is not None and bool(trails[t]))) and not m for t, m, f in zip(row, marks, flags)]
        restore = []
        for c, t in enumerate(row):
            is_open, anchor = words.open_word(passes, last, c)
            if is_open and not flags[c] and not marks[c] and continues[t]:
                restore += range(anchor + 1, c)
        flags = [f and k not in restore for k, f in enumerate(flags)]
    keep = ref.kept_after_delete(row, flags, [m > 0 for m in marks])
    row, marks, scores = ([v for v, k in zip(seq, keep) if k] for seq in (row, marks, scores))
    return row, marks, scores, {"deletions": keep.count(False)}


def glued(row, marks, continues, joins=None, trails=None):
    """Free pieces that continue a word after a phrase (through punctuation, ``trails``, and other such
    pieces), and free pieces that join the next onto their word right before one (through other such pieces)."""
    out = [False] * len(row)
    if continues is not None:
        last = [m > 0 and (k + 1 == len(row) or marks[k + 1] != m) for k, m in enumerate(marks)]
        passes = [(continues[t] or (trails is not None and trails[t])) and not m for t, m in zip(row, marks)]
        out = [not m and bool(continues[t]) and words.open_word(passes, last, k)[0]
               for k, (t, m) in enumerate(zip(row, marks))]
    if joins is not None:
        before_phrase = False
        for k in reversed(range(len(row))):
            t, m = row[k], marks[k]
            free_join = not m and joins[t] and t not in (BOS_ID, EOS_ID)
            out[k] = out[k] or (before_phrase and free_join)
            before_phrase = bool(m) or (before_phrase and free_join)
    return out


def editor_first(row, marks, scores, logits, deletion_reward=0.0, continues=None, joins=None, trails=None):
    """EDITOR's reposition on one sentence; logits: [L, L] (slot, input token)."""
    n = len(row)
    lg = np.array(logits[:n, :n], np.float32)
    lg[:, 0] += deletion_reward
    index = list(lg.argmax(-1))
    shifted = lg - lg.max(axis=-1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    anchor = [int(logp[1:n - 1, j].argmax()) + 1 if n > 2 else 0 for j in range(n)]
    source = ref.reposition_phrases(row, index, anchor, marks)
    free_moved = sum(1 for i in range(1, n - 1) if not marks[i] and 1 <= index[i] < n - 1 and not marks[index[i]]
                     and index[i] != i)
    phrase_moved = 0
    for k in range(1, n - 1):
        if marks[k] and marks[k - 1] != marks[k]:
            length = 1
            while k + length < n - 1 and marks[k + length] == marks[k]:
                length += 1
            phrase_moved += length * (min(max(anchor[k], 1), n - 1) != k)
    deleted = sum(1 for i in range(1, n - 1) if not marks[i]) - sum(1 for p in source[1:-1] if not marks[p])
    row, marks, scores = ([seq[p] for p in source] for seq in (row, marks, scores))
    if continues is not None or joins is not None:
        cut = glued(row, marks, continues, joins, trails)
        deleted += sum(cut)
        row, marks, scores = ([v for v, c in zip(seq, cut) if not c] for seq in (row, marks, scores))
    return row, marks, scores, {"repositions": free_moved + phrase_moved, "deletions": deleted}


def python_refine(heads, tokens, phrase, caps, options, first_edit, continues=None, joins=None, trails=None):
    """Reference loop. first_edit(row, marks, scores, logits of the row, continues, joins, trails) -> (row, marks,
    scores, counts). With ``continues`` (bool[V]) a placeholder right after a phrase is filled with the best piece
    that does not continue a word (and with ``trails``, punctuation, the fills are repaired so that none glues onto
    a phrase's word through it: `words_reference.repair`), with ``joins`` one right before a phrase with the best
    that does not join the next onto its word, scored among those. Returns (rows, iterations, {count name: per
    sentence}, insertions, scores, per row each token's (log-probability of its fill, whether it was filled): (0.0,
    False) for the tokens of the start)."""
    length = tokens.shape[1]
    rows = [[int(t) for t in r if t != PAD_ID] for r in np.asarray(tokens)]
    marks = [[int(m) for m in np.asarray(phrase)[b, :len(r)]] for b, r in enumerate(rows)]
    scores = [[(0.0, False)] * len(r) for r in rows]  # moved as one value by the first edits
    n = len(rows)
    done, iters, inss, counts = [False] * n, [0] * n, [0] * n, {}
    for _ in range(options.max_iter + 1):
        if all(done):
            break
        before = [r[:] for r in rows]
        logits = np.asarray(heads.first(jnp.asarray(pad(rows, length))))
        for b in range(n):
            if done[b]:
                continue
            rows[b], marks[b], scores[b], c = first_edit(rows[b], marks[b], scores[b], logits[b], continues, joins,
                                                         trails)
            for name, v in c.items():
                counts.setdefault(name, [0] * n)[b] += v
        plh = np.array(heads.placeholder(jnp.asarray(pad(rows, length))))
        plh[..., 0] -= options.placeholder_penalty
        for b in range(n):
            if done[b]:
                continue
            want = [int(c) if not (marks[b][k] == marks[b][k + 1] > 0) else 0
                    for k, c in enumerate(plh[b].argmax(-1)[:len(rows[b]) - 1])]
            rows[b], applied, _ = ref.insert_placeholders(rows[b], want, PLH_ID, int(caps[b]))
            inss[b] += sum(applied)
            after = applied + [0]  # placeholders opened after each token (none after EOS)
            marks[b], scores[b] = ([x for v, k in zip(seq, after) for x in [v] + [fill] * k]
                                   for seq, fill in ((marks[b], 0), (scores[b], (0.0, False))))
        token_logits = np.asarray(heads.token(jnp.asarray(pad(rows, length))))
        for b in range(n):
            if done[b]:
                continue
            def fill(levels, row=rows[b], marks=marks[b], old=scores[b], logits=token_logits[b]):
                best, new_scores = [], []
                for k, (t, sc) in enumerate(zip(row, old)):
                    allowed = np.ones(logits.shape[-1], bool)
                    if continues is not None and t == PLH_ID and k > 0 and marks[k - 1]:
                        allowed &= ~np.asarray(continues)
                    if joins is not None and t == PLH_ID and k + 1 < len(row) and marks[k + 1]:
                        allowed &= ~np.asarray(joins)
                    if levels[k]:
                        allowed &= words.allowed(levels[k], continues, trails)
                    lg = np.where(allowed, logits[k].astype(np.float64), -np.inf)
                    logp = lg - np.log(np.sum(np.exp(lg - lg.max()))) - lg.max()
                    best.append(int(logp.argmax()))
                    new_scores.append((float(logp[best[-1]]), True) if t == PLH_ID else sc)
                return ref.fill(row, best, PLH_ID), new_scores

            filled, new_scores = fill([0] * len(rows[b]))
            if continues is not None and trails is not None:
                in_phrase = [m > 0 for m in marks[b]]
                last = [m > 0 and (k + 1 == len(marks[b]) or marks[b][k + 1] != m) for k, m in enumerate(marks[b])]
                filled, levels = words.repair(lambda levels: fill(levels)[0], filled,
                                              [t == PLH_ID for t in rows[b]], in_phrase, last, continues, trails)
                new_scores = fill(levels)[1]
            scores[b] = new_scores
            rows[b] = filled
            iters[b] += 1
            if rows[b] == before[b] and not options.run_all:
                done[b] = True
    return rows, iters, counts, inss, [float(np.mean([v for v, _ in s])) for s in scores], scores


def model_heads(spec, params, src, first_method):
    """A trained-or-not model's heads on an encoded source, as `refine` receives them."""
    memory = jitted.method(spec.module, "encode")(params, src)
    mask = src != PAD_ID

    def head(method):
        return lambda tokens: jitted.method(spec.module, method)(params, tokens, memory, mask)

    def token_rows(tokens, rows):  # on some rows (`Heads.token_rows`): what the jit'd loop runs in late passes
        logits = jitted.method(spec.module, "token_logits")(params, tokens, memory[rows], mask[rows])
        return logits.at[..., jnp.asarray(NOT_PREDICTED)].set(-jnp.inf)

    shared = None
    if spec.module.shares_first_features:  # the jit'd loop reuses the first head's features (`SharedFeatures`)
        def features_rows(tokens, rows):
            return jitted.method(spec.module, "first_features")(params, tokens, memory[rows], mask[rows])

        shared = SharedFeatures(head("first_features"), features_rows,
                                lambda h, t: jitted.method(spec.module, "first_from")(params, h, t),
                                lambda h: jitted.method(spec.module, "placeholder_from")(params, h))
    return Heads(head(first_method), head("placeholder_logits"),
                 lambda t: token_rows(t, jnp.arange(t.shape[0])), token_rows, shared)


def stub_heads(seed, vocab, first="deletion", plh_boost=0.0):
    """Random logits that change with the hypothesis: 'whatever the model predicts'. seed: int or int32[].
    first: "deletion" ([B, L, 2]) or "reposition" ([B, L, L])."""
    def logits(tokens, shape, salt):
        key = jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), salt), jnp.sum(tokens * 7919))
        return jax.random.normal(key, shape)

    def placeholder(t):
        out = logits(t, t.shape[:1] + (t.shape[1] - 1, 256), 1)
        return out.at[..., 1:4].add(plh_boost)

    def token(t):
        return logits(t, t.shape + (vocab,), 2).at[..., jnp.asarray(NOT_PREDICTED)].set(-jnp.inf)

    width = 2 if first == "deletion" else None
    return Heads(lambda t: logits(t, t.shape + (width or t.shape[1],), 0), placeholder, token)


def random_batch(seed, vocab, b=6, s=9, t=12):
    """{'src': int32[b, s], 'tgt': int32[b, t]} of random [BOS … EOS] rows of random lengths."""
    rng = np.random.default_rng(seed)
    src = [[BOS_ID, *rng.integers(NUM_RESERVED, vocab, rng.integers(1, s - 1)), EOS_ID] for _ in range(b)]
    tgt = [[BOS_ID, *rng.integers(NUM_RESERVED, vocab, rng.integers(1, t - 1)), EOS_ID] for _ in range(b)]
    return {"src": jnp.asarray(pad(src, s)), "tgt": jnp.asarray(pad(tgt, t))}


def check_fills_scored(out):
    """From a start of constraints only, every token but BOS, EOS and the constraints' is a fill: scored, with
    a finite log-probability; the others at 0.0."""
    tokens, marks = np.asarray(out["tokens"]), np.asarray(out["phrase"])
    scored, token_logp = np.asarray(out["token_scored"]), np.asarray(out["token_logp"])
    np.testing.assert_array_equal(scored, np.isin(tokens, [BOS_ID, EOS_ID, PAD_ID], invert=True) & (marks == 0))
    assert np.all(np.isfinite(token_logp)) and np.all(token_logp[scored] <= 0) and np.all(token_logp[~scored] == 0)


_LOOPS = {}  # the jit'd loops of `check_loop_against_python`, one program for every seed of a configuration


def _jit_loop(spec, options, first_method, first_edit, count_names, edit_key):
    """`refine` with the model's heads, jit'd over (params, src, tokens, marks, cap, tables): compiled once per
    (spec, options, first edit, ``edit_key``: what tells closures of one first edit apart)."""
    key = (id(spec), options, first_method, count_names, edit_key)
    if key not in _LOOPS or _LOOPS[key][0] is not spec:
        def run(params, src, tokens, marks, cap, table, join_table, trail_table):
            return refine(model_heads(spec, params, src, first_method), first_edit, initial_hypotheses(tokens, marks),
                          cap, options, count_names, table, join_table, trail_table)
        _LOOPS[key] = spec, jax.jit(run)
    return _LOOPS[key][1]


def check_loop_against_python(spec, seed, options, first_method, first_edit, first_py, count_names, vocab,
                              continues=None, joins=None, trails=None, edit_key=None):
    """Decodes six canvases (empty, with one- and multi-token phrases, random) with the jit'd `refine` of an
    untrained model (its parameters and sources drawn from ``seed``) and with `python_refine`, and asserts they
    agree on tokens, counts, scores and each token's log-probability, scored only where the token head filled it
    (with the word-boundary rules of ``continues``, bool[V], when given). ``edit_key``: see `_jit_loop` (None: the
    first edit itself)."""
    batch = random_batch(seed, vocab)
    params = spec.init(jax.random.PRNGKey(seed), batch)
    src = batch["src"]
    capacity = 32  # wide enough that passes whose rows fit run on half of it (`refine.narrowed`)
    rng = np.random.default_rng(seed)
    canvas = [[BOS_ID, EOS_ID], [BOS_ID, 7, 8, 9, EOS_ID], [BOS_ID, 10, 11, 12, 13, EOS_ID],
              [BOS_ID, *rng.integers(NUM_RESERVED, vocab, 8), EOS_ID], [BOS_ID, 20, EOS_ID], [BOS_ID, 9, 9, EOS_ID]]
    phrase = [[0, 0], [0, 1, 1, 0, 0], [0, 1, 1, 2, 0, 0], [0] * 10, [0, 0, 0], [0, 1, 2, 0]]
    tokens, marks = jnp.asarray(pad(canvas, capacity)), jnp.asarray(pad(phrase, capacity, 0))
    heads = model_heads(spec, params, src, first_method)
    cap = length_cap(src, capacity, options)
    table = None if continues is None else jnp.asarray(continues)
    join_table = None if joins is None else jnp.asarray(joins)
    trail_table = None if trails is None else jnp.asarray(trails)
    loop = _jit_loop(spec, options, first_method, first_edit, count_names,
                     first_edit if edit_key is None else edit_key)
    got = loop(params, src, tokens, marks, cap, table, join_table, trail_table)
    rows, iters, counts, inss, scores, token_scores = python_refine(heads, tokens, marks, np.asarray(cap), options,
                                                                    first_py, continues, joins, trails)
    assert [[int(t) for t in r if t != PAD_ID] for r in np.asarray(got["tokens"])] == rows
    assert got["iterations"].tolist() == iters
    for name in count_names:
        assert got[name].tolist() == counts[name], name
    assert got["insertions"].tolist() == inss
    np.testing.assert_allclose(got["score"], scores, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["token_logp"], pad([[v for v, _ in s] for s in token_scores], capacity, 0.0),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got["token_scored"], pad([[f for _, f in s] for s in token_scores], capacity, False))
    real = np.asarray(got["tokens"]) != PAD_ID  # score: the mean of the token log-probabilities (BOS/EOS: 0.0)
    np.testing.assert_allclose(got["score"], np.sum(got["token_logp"], axis=1) / real.sum(axis=1), rtol=1e-5)
    assert max(iters) <= options.max_iter + 1
    if options.run_all:
        assert iters == [options.max_iter + 1] * len(iters)


def fit_briefly(spec, batch, steps=30, lr=3e-3):
    """Adam on one fixed batch (dropout off): the per-step (loss, aux) of an edit model, to see it learn."""
    params = spec.init(jax.random.PRNGKey(0), batch)
    opt = optax.adam(lr)
    state = opt.init(params)

    @jax.jit
    def step(params, state, key):
        (loss, aux), grads = jax.value_and_grad(lambda p: spec.loss(p, batch, key, False), has_aux=True)(params)
        updates, state = opt.update(grads, state)
        return optax.apply_updates(params, updates), state, loss, aux

    history = []
    for i in range(steps):
        params, state, loss, aux = step(params, state, jax.random.PRNGKey(i))
        history.append((float(loss), {k: float(v) for k, v in aux.items()}))
    return history
