"""Constraint pairs from word-aligned parallel text (Wang et al. 2022, §4.1, following Chen et al. 2021).

A sentence pair is given as words (`jaxnat.data.words.dictionary_words`) and its word
alignment, a set of links ``(i, j)``: source word i is aligned to target word j. From it:

* `phrase_pairs` lists the *tight consistent* phrase pairs: a source span of 1–3 words and a target span of
  1–3 words such that every word of both spans is aligned, every link that touches one span lands in the
  other (the consistency of phrase-based MT), both spans are words only (no punctuation, `is_word`), neither
  is made of the corpus's most frequent words only, and the target span is the smallest one that holds the
  source span's links;
* `sample_pairs` draws the constraints of one sentence as the paper describes: their number uniformly from
  1–3, each one's target length uniformly from 1–3 (when no free pair is that long, the longest shorter
  length, else the shortest longer one), no two overlapping on either side, in a random order — supplied to
  the model unordered;
* `code_switch` makes the code-switched variant (§4.4): each pair's target phrase is replaced, with
  probability 0.5, by its source phrase, in the constraint and in the target sentence.

A phrase is written as its sentence writes it (`Written.phrase`: the sentence's characters from its first word to
its last), so that a Korean word aligned without its particle is "서울", not "서울에", and "NBA比赛" keeps its
writing; Moses's detokenizer joins the words only where a tokenizer changed a character (`word_spans`).

Everything takes a `random.Random`, so a seed gives the same constraints on every machine.

`encode_pairs` turns the pairs of many sentences into the fixed-shape piece-id arrays a model reads.

`most_common_words` gives the frequent words (the 100 most frequent of a training side, lowercased: the
language-independent stand-in for the stop-word lists of Chen et al.'s script).
"""

from __future__ import annotations

import random
from typing import Callable, NamedTuple

import numpy as np

from jaxnat.data.vocab import PAD_ID
from jaxnat.data.words import is_word
from jaxnat.errors import DataError

MAX_WORDS = 3  # phrase length on either side, and constraints per sentence


class PhrasePair(NamedTuple):
    """Word spans [start, end) of a source and a target phrase."""

    src_start: int
    src_end: int
    tgt_start: int
    tgt_end: int

    def overlaps(self, other: "PhrasePair") -> bool:
        return (self.src_start < other.src_end and other.src_start < self.src_end) or \
            (self.tgt_start < other.tgt_end and other.tgt_start < self.tgt_end)


def phrase_pairs(src: list[str], tgt: list[str], links: set[tuple[int, int]], max_words: int = MAX_WORDS,
                 common: tuple[set[str], set[str]] = (set(), set())) -> list[PhrasePair]:
    """The tight consistent phrase pairs of one aligned sentence pair (module docstring), sorted by spans.

    src, tgt: Moses words; links: {(source index, target index)}; indices outside the sentences are errors.
    common: the source and target side's most frequent words (lowercased); a pair whose source or target words
    are all common ("the" → "das") is left out, as Chen et al. leave out stop words.
    """
    for i, j in links:
        if not (0 <= i < len(src) and 0 <= j < len(tgt)):
            raise ValueError(f"alignment link {i}-{j} is outside a {len(src)}-word source / {len(tgt)}-word target")
    by_src: dict[int, set[int]] = {}
    by_tgt: dict[int, set[int]] = {}
    for i, j in links:
        by_src.setdefault(i, set()).add(j)
        by_tgt.setdefault(j, set()).add(i)
    out = []
    for start in range(len(src)):
        for end in range(start + 1, min(start + max_words, len(src)) + 1):
            words = range(start, end)
            if not all(i in by_src and is_word(src[i]) for i in words):
                continue
            targets = set().union(*(by_src[i] for i in words))
            t_start, t_end = min(targets), max(targets) + 1
            if t_end - t_start > max_words:
                continue
            if not all(j in by_tgt and is_word(tgt[j]) for j in range(t_start, t_end)):
                continue
            if any(not start <= i < end for j in range(t_start, t_end) for i in by_tgt[j]):
                continue  # a target word of the span is aligned outside the source span: not consistent
            if all(w.lower() in common[0] for w in src[start:end]) or \
                    all(w.lower() in common[1] for w in tgt[t_start:t_end]):
                continue
            out.append(PhrasePair(start, end, t_start, t_end))
    return out


def sample_pairs(pairs: list[PhrasePair], rng: random.Random, max_pairs: int = MAX_WORDS) -> list[PhrasePair]:
    """Up to ``max_pairs`` non-overlapping pairs of one sentence in a random order (module docstring)."""
    wanted = [rng.randint(1, MAX_WORDS) for _ in range(rng.randint(1, max_pairs))]
    chosen: list[PhrasePair] = []
    for length in wanted:
        free = [p for p in pairs if not any(p.overlaps(c) for c in chosen)]
        # the drawn target length, else the longest shorter one, else the shortest longer one
        for size in [*range(length, 0, -1), *range(length + 1, MAX_WORDS + 1)]:
            options = [p for p in free if p.tgt_end - p.tgt_start == size]
            if options:
                chosen.append(options[rng.randrange(len(options))])
                break
    rng.shuffle(chosen)
    return chosen


def word_spans(text: str, words: list[str]) -> list[tuple[int, int]] | None:
    """Where each of ``words`` stands in ``text``, in order ([start, end) character offsets), with nothing but
    whitespace between two of them; None where a word is not there as written (a tokenizer that changed it)."""
    spans, at = [], 0
    for word in words:
        start = text.find(word, at)
        if start < 0 or text[at:start].strip():
            return None
        spans.append((start, start + len(word)))
        at = start + len(word)
    return spans


class Written(NamedTuple):
    """A sentence as written (``text``), its aligned words, where they stand in it (`word_spans`, or None), and
    the detokenizer that joins words where that is not known."""

    text: str
    words: list[str]
    spans: list[tuple[int, int]] | None
    detokenize: Callable[[list[str]], str]

    @classmethod
    def of(cls, text: str, words: list[str], detokenize: Callable[[list[str]], str]) -> "Written":
        return cls(text, words, word_spans(text, words), detokenize)

    def phrase(self, start: int, end: int) -> str:
        """Words [start, end) as the sentence writes them: its characters from the first word to the last."""
        if self.spans is None:
            return self.detokenize(self.words[start:end])
        return self.text[self.spans[start][0]:self.spans[end - 1][1]]


def code_switch(src: Written, tgt: Written, pairs: list[PhrasePair], rng: random.Random,
                rate: float = 0.5) -> tuple[str, list[tuple[str, str]]]:
    """The code-switched target sentence and constraint pairs: each pair, with probability ``rate``, has its target
    phrase replaced by its source phrase, in the constraint and in the target sentence (pairs do not overlap)."""
    switched = [p for p in pairs if rng.random() < rate]
    constraints = [(src.phrase(p.src_start, p.src_end), src.phrase(p.src_start, p.src_end) if p in switched
                    else tgt.phrase(p.tgt_start, p.tgt_end)) for p in pairs]
    right_to_left = sorted(switched, key=lambda p: -p.tgt_start)  # earlier spans keep their places
    if tgt.spans is None:  # the words replaced, then joined
        words = list(tgt.words)
        for p in right_to_left:
            words[p.tgt_start:p.tgt_end] = src.words[p.src_start:p.src_end]
        return tgt.detokenize(words), constraints
    text = tgt.text
    for p in right_to_left:
        start, end = tgt.spans[p.tgt_start][0], tgt.spans[p.tgt_end - 1][1]
        text = text[:start] + src.phrase(p.src_start, p.src_end) + text[end:]
    return text, constraints


def most_common_words(sentences: list[list[str]], count: int = 100) -> set[str]:
    """The ``count`` most frequent words (lowercased) of tokenized sentences; ties by first occurrence."""
    from collections import Counter

    return {w for w, _ in Counter(w.lower() for words in sentences for w in words).most_common(count)}


def encode_pairs(pairs: list[list[tuple[str, str]]], encode, max_pairs: int, max_pieces: int):
    """Per sentence its (source phrase, target phrase) pairs → (pair_src int32[S, max_pairs, max_pieces],
    pair_tgt int32[S, max_pairs, max_pieces], counts), PAD-padded (an all-PAD row is no pair).

    encode(texts, side) → piece-id lists (`Tokenizer.encode`, side "src" or "tgt"). A pair with a phrase longer
    than max_pieces, or beyond the first max_pairs of its sentence, is left out; counts says how many:
    {'pairs', 'too_long', 'too_many'}.
    """
    n = len(pairs)
    pair_src = np.full((n, max_pairs, max_pieces), PAD_ID, np.int32)
    pair_tgt = np.full((n, max_pairs, max_pieces), PAD_ID, np.int32)
    flat = [p for sentence in pairs for p in sentence]
    src_ids = iter(encode([a for a, _ in flat], "src"))
    tgt_ids = iter(encode([b for _, b in flat], "tgt"))
    counts = {"pairs": 0, "too_long": 0, "too_many": 0}
    for row, sentence in enumerate(pairs):
        kept = 0
        for a, b in ((next(src_ids), next(tgt_ids)) for _ in sentence):
            if len(a) > max_pieces or len(b) > max_pieces:
                counts["too_long"] += 1
            elif kept == max_pairs:
                counts["too_many"] += 1
            else:
                pair_src[row, kept, :len(a)], pair_tgt[row, kept, :len(b)] = a, b
                kept += 1
                counts["pairs"] += 1
    return pair_src, pair_tgt, counts


def entry_capacity(pair_src: np.ndarray, multiple: int = 8) -> int:
    """The entries a batch's constraint pairs need (pair_src: int32[B, N, P_s]): the largest row count of
    source-phrase pieces rounded up to ``multiple`` (a few compiled shapes) and at most N · P_s; 0 without
    pairs."""
    b, n, ps = pair_src.shape
    most = int((pair_src != PAD_ID).reshape(b, -1).sum(axis=1).max(initial=0))
    return min(-(-most // multiple) * multiple, n * ps)


def check_packable(src, tgt, pair_src: np.ndarray, pair_tgt: np.ndarray) -> None:
    """Raises DataError unless every example's constraint phrases hold, on each side, no more pieces than its
    sentence, BOS and EOS excluded. src, tgt: N [BOS … EOS] int32 arrays; pair_src, pair_tgt: int32[N, max_pairs,
    max_pieces] (`encode_pairs`). A packed row keeps as many constraint pieces as it has tokens
    (`jaxnat.models.vecconst.model.row_capacity`), which this makes enough; pairs drawn from their sentence pass."""
    n = len(src)
    over = ((pair_src != PAD_ID).reshape(n, -1).sum(axis=1) > np.asarray([len(x) - 2 for x in src])) | \
        ((pair_tgt != PAD_ID).reshape(n, -1).sum(axis=1) > np.asarray([len(x) - 2 for x in tgt]))
    if over.any():
        raise DataError(f"{int(over.sum())} training examples have constraint phrases with more pieces than their "
                        f"sentence (first: example {int(np.argmax(over))}); packed rows have no room for them: "
                        "fix those pairs or set data.pack=false")
