"""Completing the word a translator is typing: a prefix that ends inside a word ("Ein Ma") is continued by pieces
that spell a word starting with what was typed ("Mann", "Mannschaft", or "Ma" itself), however the tokenizer would
cut the typed part alone ("▁M a", or UNK where the vocabulary holds no piece "ma" that ends a word): the typed part
is not forced as pieces, it is a condition on the text of the pieces the search chooses next (Knowles and Koehn 2016
complete a partial word so; fairseq, Sockeye and CTranslate2 force whole pieces only).

Host side, `Spelling` reads a target vocabulary's pieces as text with their word structure, once: SentencePiece's
"▁" opens a word (the pieces after it, until the next "▁", continue it), subword-nmt's "@@" carries a word on into the
next piece. `Spelling.automaton` turns the typed part of a word into a small automaton: its states are how many of
the typed characters the pieces chosen so far spell (and, for SentencePiece, whether the word is opened); from each,
the pieces whose text goes on spelling it, each leading to a further state, or finishing it (a piece whose text
starts with what is left: the word may then go on or end as the model likes). `Completion.of` pads a batch's
automata into arrays.

Device side, `spell` wraps a search's callback: the state of each hypothesis rides in the search's cache (so beam
search reorders it with the hypotheses), moves with the token fed, and while the word is not spelt every other piece
(and the end of the sentence) gets -inf.

    Completion(pieces: int32[B, S, M],  per sentence and state the pieces that go on spelling its word (V: none)
               moves:  int32[B, S, M],  the state each leads to (-1: spelt, nothing restricted any more)
               state:  int32[B],        the first state: 0, or -1 for a sentence whose prefix ends a word
               start:  int32[B],        the position of the word's first piece: the forced tokens before it
               length: int32[B])        the typed characters, the most pieces spelling them takes
"""

from __future__ import annotations

import bisect
import re

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxnat.data.tokenizer import WORD_BOUNDARY
from jaxnat.data.vocab import NUM_RESERVED

NO_TEXT = re.compile(r"^<.*>$")  # byte pieces "<0xE4>", control pieces "<unk>", "<mask>": no text to spell with
JOINER = "@@"  # subword-nmt's mark of a piece whose word goes on in the next one


class Spelling:
    """A target vocabulary's pieces as text: ``texts[v]`` (None: a piece of no text: reserved, control, byte and
    language-token pieces), and its word structure: ``opens`` bool[V] (SentencePiece's "▁" pieces) or ``carries``
    bool[V] (subword-nmt's "@@" pieces; then ``opens`` is None)."""

    def __init__(self, pieces: list[str], bpe: bool, excluded=()):
        excluded = set(excluded)
        self.bpe = bpe
        self.opens = None if bpe else np.array([p.startswith(WORD_BOUNDARY) for p in pieces])
        self.carries = np.array([p.endswith(JOINER) for p in pieces]) if bpe else None
        texts = []
        for i, p in enumerate(pieces):
            text = (p[:-len(JOINER)] if p.endswith(JOINER) else p) if bpe else p.removeprefix(WORD_BOUNDARY)
            usable = i >= NUM_RESERVED and p not in excluded and not NO_TEXT.match(p) and (bpe or WORD_BOUNDARY
                                                                                             not in text)
            texts.append(text if usable else None)
        self.texts = texts
        self.size = len(pieces)
        # the pieces of text in the order of their texts: those starting with a string are one run of it
        self.order = sorted((t, i) for i, t in enumerate(texts) if t)
        self.sorted_texts = [t for t, _ in self.order]
        self.bare = [i for i, t in enumerate(texts) if t == "" and not bpe and self.opens[i]]  # "▁" alone
        self._automata: dict = {}  # `automaton`'s, by word: a server is asked the same words again

    @classmethod
    def of(cls, tokenizer) -> "Spelling":
        """The target side of a `Tokenizer` or an imported vocabulary's `PieceTokenizer`."""
        pieces = [tokenizer.id_to_piece(i, "tgt") for i in range(tokenizer.vocab_size("tgt"))]
        return cls(pieces, bpe=tokenizer.piece_tables("tgt").joins is not None,
                   excluded=getattr(tokenizer, "languages", ()))

    def _starting(self, text: str) -> np.ndarray:
        """The pieces whose text starts with ``text`` (non-empty)."""
        lo = bisect.bisect_left(self.sorted_texts, text)
        hi = bisect.bisect_left(self.sorted_texts, text + "\U0010ffff")
        return np.asarray([i for _, i in self.order[lo:hi]], np.int64)

    def _exactly(self, text: str) -> np.ndarray:
        lo = bisect.bisect_left(self.sorted_texts, text)
        hi = bisect.bisect_right(self.sorted_texts, text)
        return np.asarray([i for _, i in self.order[lo:hi]], np.int64)

    def automaton(self, word: str) -> list[tuple[np.ndarray, np.ndarray]] | None:
        """Per state (state 0 first: before the word), (pieces int64[n], the state each leads to int64[n], -1 where it
        finishes spelling ``word``), or None where no pieces spell it. A state is (characters spelt, opened):
        SentencePiece's word is opened by a "▁" piece and continued by the others; subword-nmt's goes on after a "@@"
        piece and ends after any other. A piece that leads only to states from which no pieces finish the word is
        left out, so that every piece kept can be finished (greedy search never walks into a dead end)."""
        if word not in self._automata:
            if len(self._automata) >= 4096:
                self._automata.clear()
            self._automata[word] = self._automaton(word)
        return self._automata[word]

    def _automaton(self, word: str) -> list[tuple[np.ndarray, np.ndarray]] | None:
        states, arcs = [(0, False)], []
        for k, opened in states:
            rest = word[k:]

            def eligible(ids: np.ndarray) -> np.ndarray:
                if self.bpe:
                    return ids
                return ids[self.opens[ids] != opened]  # the word's first piece opens it, the others continue it

            found = [(eligible(self._starting(rest)), None)]
            steps = [(j, eligible(self._exactly(rest[:j]))) for j in range(1, len(rest))]
            if not self.bpe and not opened:
                steps.append((0, np.asarray(self.bare, np.int64)))
            for j, ids in steps:
                if self.bpe:
                    ids = ids[self.carries[ids]]  # a piece that ends its word cannot leave characters unspelt
                if len(ids):
                    if (k + j, True) not in states:
                        states.append((k + j, True))
                    found.append((ids, states.index((k + j, True))))
            arcs.append(found)
        # the states from which some pieces finish the word
        alive = [len(found[0][0]) > 0 for found in arcs]
        while True:
            more = [a or any(alive[t] for ids, t in found[1:]) for a, found in zip(alive, arcs)]
            if more == alive:
                break
            alive = more
        if not alive[0]:
            return None
        kept = [[(ids, -1 if t is None else t) for ids, t in found if t is None or alive[t]] for found in arcs]
        return [(np.concatenate([ids for ids, _ in arcs_]), np.concatenate([np.full(len(ids), t) for ids, t in arcs_]))
                for arcs_ in kept]


def _bucket(n: int, least: int) -> int:
    """n rounded up to a power of two, at least ``least``: a few compiled shapes for all automata."""
    return max(least, 1 << max(n - 1, 0).bit_length())


@struct.dataclass
class Completion:
    pieces: jax.Array
    moves: jax.Array
    state: jax.Array
    start: jax.Array
    length: jax.Array

    @classmethod
    def of(cls, automata: list, starts: list[int], lengths: list[int], vocab_size: int) -> "Completion":
        """The arrays of a batch's automata (`Spelling.automaton`; None for a sentence without a typed word), each
        with the position its word starts at and its typed characters; S and M rounded up to powers of two."""
        s = _bucket(max([len(a) for a in automata if a] + [1]), 2)
        m = _bucket(max([len(p) for a in automata if a for p, _ in a] + [1]), 16)
        pieces = np.full((len(automata), s, m), vocab_size, np.int32)
        moves = np.full((len(automata), s, m), -1, np.int32)
        for b, automaton in enumerate(automata):
            for state, (ids, nxt) in enumerate(automaton or []):
                pieces[b, state, :len(ids)], moves[b, state, :len(ids)] = ids, nxt
        state = np.asarray([0 if a else -1 for a in automata], np.int32)
        return cls(pieces, moves, state, np.asarray(starts, np.int32), np.asarray(lengths, np.int32))


def spell(tokens_to_logprobs, cache, completion: Completion, per: int):
    """A search callback (and its cache, which then carries each row's state) that keeps each row's pieces to those
    spelling its sentence's word (`Completion`) from the position the word starts at until it is spelt; rows are
    sentence b's hypotheses b · per … b · per + per - 1."""
    completion = jax.tree_util.tree_map(jnp.asarray, completion)

    def step(tokens, carry, index):
        inner, state = carry
        logp, inner = tokens_to_logprobs(tokens, inner, index)
        rows = jnp.arange(state.shape[0])
        sentence = rows // per
        start = completion.start[sentence]

        def options(at):  # [N, M] each row's pieces and moves in its state (any, where the word is spelt)
            at = jnp.maximum(at, 0)
            return completion.pieces[sentence, at], completion.moves[sentence, at]

        pieces, moves = options(state)
        hit = pieces == tokens[:, None]
        moved = jnp.where(jnp.any(hit, axis=1), jnp.take_along_axis(moves, jnp.argmax(hit, axis=1)[:, None], 1)[:, 0],
                          -1)
        state = jnp.where((index > start) & (state >= 0), moved, state)  # the token fed was the word's
        allowed = jnp.zeros(logp.shape, bool).at[rows[:, None], options(state)[0]].set(True, mode="drop")
        spelling = (index >= start) & (state >= 0)
        return jnp.where(spelling[:, None] & ~allowed, -jnp.inf, logp), (inner, state)

    return step, (cache, jnp.repeat(completion.state, per))
