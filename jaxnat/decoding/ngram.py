"""An n-gram language model on the device, for the beam searches that add its score (shallow fusion): read from an
ARPA file (KenLM's `lmplz`, SRILM, or `--mode lm`: `jaxnat.data.kneser_ney`), queried inside a jit'd search.

**What a query computes** (the ARPA back-off rule, as KenLM and SRILM read the file): for a word w after the
context h = (h_1 … h_k), log10 P(w | h) is the file's value of the n-gram (h, w) if it has one, else the back-off
weight of h (0 where h is not in the file) plus log10 P(w | h_2 … h_k); a unigram is always found (a word the file
lacks is read as ``<unk>``). A sentence starts in the context ``<s>`` and ends with the query of ``</s>``.

**How it runs on the device.** A hypothesis carries its *state*: for j = 1 … n − 1 the slot of the n-gram made of
its last j words, or −1 where the file has no such n-gram. Extending the state by w (`advance`) looks up, for
j = 2 … n, the j-gram (last j − 1 words, w) by its key (the slot of its first j − 1 words, w): n − 1 lookups, which
give at once the longest n-gram ending in w that the file has (its log-probability) and the next state. The back-off
weights to add are those of the state's contexts longer than the n-gram found. Each order's n-grams sit in a hash
table of open addressing (at most a quarter full; linear probing, as many probes as the longest run the build made, so
every lookup is exact and of a fixed shape). The tables are built once on the host with the same lookup (`_find`,
written for NumPy and jax.numpy alike); the file is data, read line by line, never run.

    lm = read_arpa(path, pieces)            # pieces: the target vocabulary's piece texts, id order
    state = start(lm, shape)                # int32[..., n - 1]: after <s>
    logp10, state = advance(lm, state, token)   # token: int32[...] jaxnat target ids
"""

from __future__ import annotations

import functools
import gzip
import os

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxnat.data.kneser_ney import BOS_WORD, EOS_WORD, UNK_WORD
from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID
from jaxnat.errors import DataError

UNK_LOGP = -100.0  # log10 P(<unk>) where a file has no <unk> (KenLM's value)
LN10 = float(np.log(10.0))  # ln P = LN10 · log10 P
_SPACES = " \t\r\n"  # what separates an ARPA line's fields and words (KenLM's)
_MIX = (np.uint32(0x9E3779B1), np.uint32(0x85EBCA77), np.uint32(0xC2B2AE3D))


class NgramLM(struct.PyTreeNode):
    """An ARPA model's tables for jaxnat's target vocabulary (device arrays, a pytree for a jit'd search).

    word: int32[V] jaxnat target id → the model's word id; unigram_logp, unigram_backoff: float32[W] per word id;
    per order j = 2 … n (index j − 2 of the tuples): keys_ctx, keys_word int32[S_j] (−1: an empty slot), logp,
    backoff float32[S_j] (the highest order's back-offs are 0); probes: static, per order the lookups a key may
    need; order: n, static."""

    word: jax.Array
    unigram_logp: jax.Array
    unigram_backoff: jax.Array
    keys_ctx: tuple
    keys_word: tuple
    logp: tuple
    backoff: tuple
    probes: tuple = struct.field(pytree_node=False)
    order: int = struct.field(pytree_node=False)


def _hash(xp, ctx, word):
    """uint32 hash of the key (ctx, word), int32 arrays of one shape; the same bits in NumPy and jax.numpy."""
    with np.errstate(over="ignore"):  # the products wrap, as meant (NumPy warns of it on scalars)
        h = xp.asarray(ctx).astype(xp.uint32) * _MIX[0] ^ xp.asarray(word).astype(xp.uint32) * _MIX[1]
        h = h ^ (h >> np.uint32(15))
        h = h * _MIX[2]
        return h ^ (h >> np.uint32(13))


def _find(xp, keys_ctx, keys_word, probes: int, ctx, word):
    """The slot of the key (ctx, word) in one order's table, −1 where it is absent (or ctx is −1)."""
    mask = keys_ctx.shape[0] - 1
    home = _hash(xp, ctx, word)
    if xp is np:  # on the host each key probes only until it is found or meets an empty slot (then it is absent)
        shape = home.shape
        # (np.broadcast_to only where a side needs it: it costs more than the probes at a few dozen keys)
        ctx, word, home = (np.ravel(a) if np.shape(a) == shape else np.broadcast_to(a, shape).ravel()
                           for a in (ctx, word, home))
        found = np.full(len(ctx), -1, np.int32)
        left = np.flatnonzero(ctx >= 0)
        for p in range(probes):
            if not len(left):
                break
            slot = ((home[left] + np.uint32(p)) & np.uint32(mask)).astype(np.int32)
            held = keys_ctx[slot]
            hit = (held == ctx[left]) & (keys_word[slot] == word[left])
            found[left[hit]] = slot[hit]
            left = left[~hit & (held >= 0)]
        return found.reshape(shape)
    found = xp.full(xp.shape(ctx), -1, xp.int32)
    for p in range(probes):  # static: the longest run of the build
        slot = ((home + np.uint32(p)) & np.uint32(mask)).astype(xp.int32)
        hit = (keys_ctx[slot] == ctx) & (keys_word[slot] == word) & (found < 0)
        found = xp.where(hit, slot, found)
    return xp.where(xp.asarray(ctx) >= 0, found, -1)


def _table(ctx: np.ndarray, word: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Open addressing for the keys (ctx, word), int32[N] each and distinct: (keys_ctx, keys_word int32[S] with −1
    where empty, the slot of each key int32[N], the most probes a lookup needs). S: a power of two ≥ 4N, so that the
    runs stay short. Placed in rounds: each round every unplaced key tries its next slot, and of the keys that try
    one empty slot the first takes it."""
    size = 1 << max(1, (4 * len(ctx) - 1).bit_length())
    keys_ctx, keys_word = np.full(size, -1, np.int32), np.full(size, -1, np.int32)
    slot_of = np.full(len(ctx), -1, np.int64)
    home = _hash(np, ctx, word).astype(np.int64)
    left, probe = np.arange(len(ctx)), 0
    while len(left):
        slot = (home[left] + probe) & (size - 1)
        empty = keys_ctx[slot] < 0
        cand, cand_slot = left[empty], slot[empty]
        _, first = np.unique(cand_slot, return_index=True)
        won, won_slot = cand[first], cand_slot[first]
        keys_ctx[won_slot], keys_word[won_slot], slot_of[won] = ctx[won], word[won], won_slot
        left = left[slot_of[left] < 0]
        probe += 1
    return keys_ctx, keys_word, slot_of.astype(np.int32), max(probe, 1)


def _lines(path: str):
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            yield from enumerate(f, 1)
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"cannot read the language model {path}: {e}") from None


def _words(text: str) -> list[str]:
    return [w for w in text.split(" ") if w]


def is_arpa(path: str, lines: int = 1000) -> bool:
    """Whether ``path`` (plain or .gz) holds the ``\\data\\`` line `parse_arpa` starts from within its first ``lines``
    lines: a cheap check of a file named as an LM, which may be gigabytes (`parse_arpa` reads the rest when a decoder
    loads it)."""
    try:
        for no, line in _lines(path):
            if line.strip(_SPACES) == "\\data\\":
                return True
            if no >= lines:
                break
    except DataError:
        return False
    return False


def parse_arpa(path: str) -> tuple[list[str], list[tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """An ARPA file → (its words in the order of its unigrams, per order j = 1 … n (ids int32[N_j, j], log10 P
    float32[N_j], log10 back-off float32[N_j], 0 where the line has none)). One-line DataErrors for what is no ARPA
    file: a missing header or section, a count that does not match, a word of an n-gram that is no unigram."""
    counts: list[int] = []
    orders: list[tuple[list, list, list]] = []
    index: dict[str, int] = {}
    words: list[str] = []
    section = None  # None: before \data\; 0: in \data\; j: in \j-grams:
    for no, line in _lines(path):
        line = line.strip(_SPACES)  # ASCII only: a piece may hold other spaces (U+00A0)
        if not line:
            continue
        if section is None:
            if line == "\\data\\":
                section = 0
            continue
        if line == "\\end\\":
            break
        if line.startswith("\\") and line.endswith("-grams:"):
            j = line[1:-len("-grams:")]
            if not j.isdigit() or int(j) != len(orders) + 1 or int(j) > len(counts):
                raise DataError(f"{path}:{no}: section {line} out of order (the header announces {len(counts)} orders)")
            section = int(j)
            orders.append(([], [], []))
            continue
        if section == 0:
            key, _, value = line.partition("=")
            if not key.startswith("ngram ") or not value.strip().isdigit():
                raise DataError(f"{path}:{no}: expected 'ngram N=COUNT' in \\data\\, got {line[:60]!r}")
            counts.append(int(value))
            continue
        fields = line.split("\t") if "\t" in line else _words(line)
        j = section
        if "\t" in line:
            gram = _words(fields[1]) if len(fields) > 1 else []
            rest = fields[2:]
        else:
            gram, rest = fields[1:1 + j], fields[1 + j:]
        if len(gram) != j or len(rest) > 1:
            raise DataError(f"{path}:{no}: a {j}-gram line needs a log-probability, {j} words and at most a back-off")
        try:
            logp, backoff = float(fields[0]), float(rest[0]) if rest else 0.0
        except ValueError:
            raise DataError(f"{path}:{no}: no number where a log-probability or back-off belongs: {line[:60]!r}") \
                from None
        if j == 1:
            index.setdefault(gram[0], len(words))
            if len(index) > len(words):
                words.append(gram[0])
        ids = [index.get(w, -1) for w in gram]
        if -1 in ids:
            raise DataError(f"{path}:{no}: the word {gram[ids.index(-1)]!r} of a {j}-gram has no unigram")
        orders[-1][0].append(ids)
        orders[-1][1].append(logp)
        orders[-1][2].append(backoff)
    else:
        raise DataError(f"{path}: no ARPA language model (no \\data\\ section and \\end\\)" if section is None
                        else f"{path}: ends before \\end\\")
    if len(orders) != len(counts) or not counts:
        raise DataError(f"{path}: the header announces {len(counts)} orders, the file has {len(orders)}")
    for j, (grams, count) in enumerate(zip(orders, counts), 1):
        if len(grams[0]) != count:
            raise DataError(f"{path}: the header announces {count} {j}-grams, the file has {len(grams[0])}")
    return words, [(np.asarray(g, np.int32).reshape(-1, j), np.asarray(p, np.float32), np.asarray(b, np.float32))
                   for j, (g, p, b) in enumerate(orders, 1)]


def build(words: list[str], orders: list, pieces: list[str]) -> NgramLM:
    """`parse_arpa`'s model → its device tables for a target vocabulary of ``pieces`` (piece texts in id order):
    each piece is the word of its text (BOS ``<s>``, EOS ``</s>``; a piece the model lacks ``<unk>``)."""
    index = {w: i for i, w in enumerate(words)}
    uni_logp, uni_backoff = orders[0][1].copy(), orders[0][2].copy()
    if UNK_WORD not in index:  # KenLM's reading of a file without <unk>
        index[UNK_WORD] = len(words)
        uni_logp, uni_backoff = np.append(uni_logp, UNK_LOGP), np.append(uni_backoff, 0.0)
    named = {BOS_ID: BOS_WORD, EOS_ID: EOS_WORD}
    word = np.asarray([index.get(named.get(i, p), index[UNK_WORD]) for i, p in enumerate(pieces)], np.int32)
    tables = []  # per order j >= 2: (keys_ctx, keys_word, probes, logp, backoff)
    for j, (ids, lp, bo) in enumerate(orders[1:], 2):
        ctx = _slots(ids[:, :-1], tables)  # a j-gram's key: the slot of its first j - 1 words, and its last word
        if np.any(ctx < 0):
            bad = ids[int(np.argmax(ctx < 0))]
            raise DataError(f"the language model's {j}-gram {' '.join(words[w] for w in bad)!r} has no "
                            f"{j - 1}-gram of its first {j - 1} words (not a complete ARPA model)")
        keys_ctx, keys_word, slot, probes = _table(ctx, ids[:, -1].copy())
        table_lp, table_bo = np.zeros(len(keys_ctx), np.float32), np.zeros(len(keys_ctx), np.float32)
        table_lp[slot], table_bo[slot] = lp, bo
        tables.append((keys_ctx, keys_word, probes, table_lp, table_bo))
    device = [tuple(jnp.asarray(t[i]) for t in tables) for i in (0, 1, 3, 4)]
    return NgramLM(jnp.asarray(word), jnp.asarray(uni_logp), jnp.asarray(uni_backoff), *device,
                   tuple(t[2] for t in tables), len(orders))


def _slots(grams: np.ndarray, tables: list) -> np.ndarray:
    """int32[N]: the slot of each m-gram of ``grams`` int32[N, m] in the m-gram table (a unigram's: its word id),
    −1 where absent; tables: the orders 2 … m built so far."""
    slot = grams[:, 0].astype(np.int32)
    for k in range(1, grams.shape[1]):
        keys_ctx, keys_word, probes = tables[k - 1][:3]
        slot = _find(np, keys_ctx, keys_word, probes, slot, grams[:, k])
    return slot


def read_arpa(path: str, pieces: list[str]) -> NgramLM:
    """The ARPA file at ``path`` (plain or .gz) as device tables for the target vocabulary ``pieces``; read once
    while the file is unchanged (an evaluation's translators of each sweep value share it)."""
    try:
        stat = os.stat(path)
    except OSError as e:
        raise DataError(f"cannot read the language model {path}: {e.strerror}") from None
    return _read(os.path.realpath(path), stat.st_mtime_ns, stat.st_size, tuple(pieces))


@functools.lru_cache(maxsize=2)
def _read(path: str, mtime_ns: int, size: int, pieces: tuple) -> NgramLM:
    words, orders = parse_arpa(path)
    return build(words, orders, list(pieces))


def start(lm: NgramLM, shape: tuple, xp=jnp) -> jax.Array:
    """int32[*shape, n − 1]: the state after ``<s>`` (``xp``: jax.numpy, or NumPy for a search on the host)."""
    state = xp.full((*shape, lm.order - 1), -1, xp.int32)
    first = xp.arange(lm.order - 1) == 0
    return xp.where(first, xp.asarray(lm.word[BOS_ID], xp.int32), state) if lm.order > 1 else state


def advance(lm: NgramLM, state: jax.Array, token: jax.Array, xp=jnp) -> tuple[jax.Array, jax.Array]:
    """(log10 P(token | the state's words) float32[...], the state after it int32[..., n − 1]). state:
    int32[..., n − 1]; token: int32[...] jaxnat target ids (the two broadcast); ``xp``: jax.numpy, or NumPy
    (the tables then NumPy arrays)."""
    shape = np.broadcast_shapes(state.shape[:-1], xp.shape(token))
    state = xp.broadcast_to(state, (*shape, state.shape[-1]))
    w = xp.broadcast_to(lm.word[token], shape)
    found = [w]  # per order j = 1 … n: the slot of the j-gram (last j - 1 words, w), −1 where absent
    for j in range(2, lm.order + 1):
        k = j - 2
        found.append(_find(xp, lm.keys_ctx[k], lm.keys_word[k], lm.probes[k], state[..., j - 2], w))
    logp = lm.unigram_logp[w]
    for j in range(2, lm.order + 1):  # the longest found wins
        logp = xp.where(found[j - 1] >= 0, lm.logp[j - 2][xp.maximum(found[j - 1], 0)], logp)
    # the back-offs of the contexts (last j words) from the longest one down to the found n-gram's own
    longest = 1
    for j in range(2, lm.order + 1):
        longest = xp.where(found[j - 1] >= 0, j, longest)
    for j in range(1, lm.order):
        ctx = state[..., j - 1]
        weight = lm.unigram_backoff[xp.maximum(ctx, 0)] if j == 1 else lm.backoff[j - 2][xp.maximum(ctx, 0)]
        logp = logp + xp.where((ctx >= 0) & (j >= longest), weight, 0.0)
    new = xp.stack(found[:lm.order - 1], axis=-1) if lm.order > 1 else state
    return logp, new


def sentence_logp10(lm: NgramLM, tokens: jax.Array) -> jax.Array:
    """float32[B]: log10 P of [BOS … EOS] rows int32[B, T] (PAD after EOS), ``</s>`` included: KenLM's full score."""
    def step(state, token):
        logp, new = advance(lm, state, token)
        live = token != PAD_ID
        return jnp.where(live[:, None], new, state), jnp.where(live, logp, 0.0)

    _, logps = jax.lax.scan(step, start(lm, tokens.shape[:1]), tokens[:, 1:].T)
    return jnp.sum(logps, axis=0)

