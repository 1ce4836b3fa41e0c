"""Completing the word a translator is typing: a prefix that ends inside a word ("Ein Ma") is continued by pieces
that spell a word starting with what was typed ("Mann", "Mannschaft", or "Ma" itself), however the tokenizer would
cut the typed part alone ("▁M a", or UNK where the vocabulary holds no piece "ma" that ends a word): the typed part
is not forced as pieces, it is a condition on the text of the pieces the search chooses next (Knowles and Koehn 2016
complete a partial word so; fairseq, Sockeye and CTranslate2 force whole pieces only).

Host side, `Spelling` reads a target vocabulary's pieces as text with their word structure, once: SentencePiece's
"▁" opens a word (the pieces after it, until the next "▁", continue it), subword-nmt's "@@" carries a word on into the
next piece. `Spelling.automaton` turns the typed part of a word into a small automaton: its states are how many of
the typed characters the pieces chosen so far spell (and, for SentencePiece, whether the word is opened); from each,
the pieces whose text goes on spelling it, each leading to the state of the characters it adds, or finishing it (a
piece whose text starts with what is left: the word may then go on or end as the model likes). `Completion.of` lays
a batch's automata out as one table.

Device side, `spell` wraps a search's callback: the state of each hypothesis rides in the search's cache (so beam
search reorders it with the hypotheses), moves with the token fed, and while the word is not spelt every other piece
(and the end of the sentence) gets -inf. Its shapes are the batch's, S rounded up to a power of two and the
vocabulary's V, so that the words a server is asked compile a handful of programs, not one per word.

    Completion(table: int8[B, S, V],      per sentence and state what each piece does: 0 not allowed, `GOES_ON`
                                           (to the state of the characters it adds), `FINISHES` the word
               piece_length: int32[V],    the characters each piece spells
               state: int32[B],           the first state: 0, or -1 for a sentence whose prefix ends a word
               start: int32[B],           the position of the word's first piece: the forced tokens before it
               length: int32[B],          the most pieces spelling the typed word takes (`Spelling.most_pieces`)
               first) static              1 for SentencePiece (state 0: before the word), 0 for subword-nmt
"""

from __future__ import annotations

import bisect
import re

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxnat.data.pieces import WORD_BOUNDARY
from jaxnat.data.vocab import NUM_RESERVED

NO_TEXT = re.compile(r"^<.*>$")  # byte pieces "<0xE4>", control pieces "<unk>", "<mask>": no text to spell with
JOINER = "@@"  # subword-nmt's mark of a piece whose word goes on in the next one
GOES_ON, FINISHES = 1, 2  # what a piece does in an automaton's state (0: not allowed there)


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
            usable = i >= NUM_RESERVED and p not in excluded and not NO_TEXT.match(p)
            inner_space = not bpe and WORD_BOUNDARY in text  # a piece of several words: no part of one
            texts.append(text if usable and not inner_space else None)
        self.texts = texts
        self.size = len(pieces)
        # the pieces of text in the order of their texts: those starting with a string are one run of it
        self.order = sorted((t, i) for i, t in enumerate(texts) if t)
        self.sorted_texts = [t for t, _ in self.order]
        self.bare = [i for i, t in enumerate(texts) if t == "" and not bpe and self.opens[i]]  # "▁" alone
        self.lengths = np.asarray([len(t or "") for t in texts], np.int32)  # the characters each piece spells
        self.first = 0 if bpe else 1  # SentencePiece's state 0 is before its word is opened
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

    def most_pieces(self, word: str | None) -> int:
        """The most pieces spelling ``word`` takes: one a character, and SentencePiece's "▁" alone before them."""
        return len(word) + self.first if word else 0

    def next_state(self, state: int, piece: int) -> int:
        """The state after ``piece`` goes on spelling the word from ``state`` (`automaton`'s numbering)."""
        return max(state, self.first) + int(self.lengths[piece])

    def automaton(self, word: str) -> list[tuple[np.ndarray, np.ndarray]] | None:
        """Per state, (pieces int64[n], what each does there int8[n]: `GOES_ON` to `next_state`, or `FINISHES` the
        word), or None where no pieces spell ``word``. State k is k characters spelt (subword-nmt: its word goes on
        after a "@@" piece and ends after any other); SentencePiece's state 0 is before the word, which a "▁" piece
        opens and the others continue, and state 1 + k the word opened with k characters spelt. A piece that leads
        only to states from which no pieces finish the word is left out, so that every piece kept can be finished
        (greedy search never walks into a dead end); a state no piece leads to has none."""
        if word not in self._automata:
            if len(self._automata) >= 1024:
                self._automata.clear()
            self._automata[word] = self._automaton(word)
        return self._automata[word]

    def _automaton(self, word: str) -> list[tuple[np.ndarray, np.ndarray]] | None:
        n = len(word) + self.first
        arcs: list[list] = [[] for _ in range(n)]  # per state: (pieces, the state they go on to, or None: finished)
        reached = {0}
        for state in range(n):  # every move goes to a later state
            if state not in reached:
                continue
            k = max(state - self.first, 0)  # the characters spelt
            rest, opened = word[k:], self.bpe or state > 0

            def eligible(ids: np.ndarray) -> np.ndarray:  # SentencePiece: the first piece opens it, the others go on
                return ids if self.bpe else ids[self.opens[ids] != opened]

            arcs[state].append((eligible(self._starting(rest)), None))
            steps = [eligible(self._exactly(rest[:j])) for j in range(1, len(rest))]
            if not opened:
                steps.append(np.asarray(self.bare, np.int64))
            for ids in steps:
                if self.bpe:
                    ids = ids[self.carries[ids]]  # a piece that ends its word cannot leave characters unspelt
                if len(ids):
                    target = self.next_state(state, int(ids[0]))
                    reached.add(target)
                    arcs[state].append((ids, target))
        alive = [False] * n  # the states from which some pieces finish the word
        for state in reversed(range(n)):
            alive[state] = any(len(ids) and (t is None or alive[t]) for ids, t in arcs[state])
        if not alive[0]:
            return None
        out = []
        for found in arcs:
            kept = [(ids, t) for ids, t in found if t is None or alive[t]]
            out.append((np.concatenate([ids for ids, _ in kept] + [np.zeros(0, np.int64)]),
                        np.concatenate([np.full(len(ids), FINISHES if t is None else GOES_ON, np.int8)
                                        for ids, t in kept] + [np.zeros(0, np.int8)])))
        return out


def _bucket(n: int, least: int) -> int:
    """n rounded up to a power of two, at least ``least``: a few compiled shapes for all automata."""
    return max(least, 1 << max(n - 1, 0).bit_length())


@struct.dataclass
class Completion:
    table: jax.Array
    piece_length: jax.Array
    state: jax.Array
    start: jax.Array
    length: jax.Array
    first: int = struct.field(pytree_node=False, default=1)

    @classmethod
    def of(cls, words: list[str | None], starts: list[int], spelling: Spelling) -> "Completion":
        """The table of a batch's typed words (None: a sentence without one), each with the position it starts at;
        S rounded up to a power of two."""
        automata = [spelling.automaton(w) if w else None for w in words]
        s = _bucket(max([len(a) for a in automata if a] + [1]), 4)
        table = np.zeros((len(automata), s, spelling.size), np.int8)
        for b, automaton in enumerate(automata):
            for state, (ids, does) in enumerate(automaton or []):
                table[b, state, ids] = does
        state = np.asarray([0 if a else -1 for a in automata], np.int32)
        return cls(table, spelling.lengths, state, np.asarray(starts, np.int32),
                   np.asarray([spelling.most_pieces(w) for w in words], np.int32), spelling.first)


def spell(tokens_to_logprobs, cache, completion: Completion, per: int):
    """A search callback (and its cache, which then carries each row's state) that keeps each row's pieces to those
    spelling its sentence's word (`Completion`) from the position the word starts at until it is spelt; rows are
    sentence b's hypotheses b · per … b · per + per - 1."""
    completion = jax.tree_util.tree_map(jnp.asarray, completion)

    def step(tokens, carry, index):
        inner, state = carry
        logp, inner = tokens_to_logprobs(tokens, inner, index)
        sentence = jnp.arange(state.shape[0]) // per
        start = completion.start[sentence]
        did = completion.table[sentence, jnp.maximum(state, 0), tokens]  # what the token fed did in its state
        moved = jnp.where(did == GOES_ON, jnp.maximum(state, completion.first) + completion.piece_length[tokens], -1)
        state = jnp.where((index > start) & (state >= 0), moved, state)  # (before the word: the prefix's last token)
        allowed = completion.table[sentence, jnp.maximum(state, 0)] > 0  # [N, V]
        spelling = (index >= start) & (state >= 0)
        return jnp.where(spelling[:, None] & ~allowed, -jnp.inf, logp), (inner, state)

    return step, (cache, jnp.repeat(completion.state, per))
