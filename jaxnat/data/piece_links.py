"""Links between the pieces of a sentence pair from links between its words: what guided alignment trains one
attention head to follow (`train.alignment_lambda`; Garg et al. 2019, "Jointly Learning to Align and Translate with
Transformer Models", align subwords by their words: every piece of a source word with every piece of each target
word it is linked to).

The words are those of `jaxnat.data.alignment`'s Pharaoh files (`dictionary_words`: Moses tokens, a segmenter's
words in Chinese, Japanese and Korean); a piece belongs to each word whose characters it shares (a piece "s." of
"dogs." belongs to "dogs" and to "."). A sentence whose words cannot be found in its text in order (a tokenizer that
rewrote characters) gets no links, and is counted.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Span = tuple[int, int]  # characters [start, end) of a text


def word_spans(words: Sequence[str], text: str) -> list[Span] | None:
    """Each word's span in ``text``, the words found in order; None where one is not there as written."""
    spans, at = [], 0
    for word in words:
        start = text.find(word, at)
        if start < 0:
            return None
        spans.append((start, start + len(word)))
        at = start + len(word)
    return spans


def owners(pieces: Sequence[Span], words: Sequence[Span]) -> list[list[int]]:
    """Per word, the indices of the pieces that share a character with it."""
    return [[p for p, (a, b) in enumerate(pieces) if a < end and start < b] for start, end in words]


def piece_links(word_links, src: list[list[int]], tgt: list[list[int]]) -> set[tuple[int, int]]:
    """word_links: {(source word, target word)}; src, tgt: each side's pieces per word (`owners`) → {(source piece,
    target piece)}. A link to a word beyond the lists (a sentence cut to data.max_len, or a file of other sentences)
    links nothing."""
    return {(i, j) for a, b in word_links if a < len(src) and b < len(tgt) for i in src[a] for j in tgt[b]}


def as_array(links: list[set[tuple[int, int]]]) -> np.ndarray:
    """Each sentence's piece links → int32[N, K, 3]: (source piece, target piece, the number of the sentence's links
    of that target piece, whose inverse weighs each in the loss), K the most a sentence has (at least 1), rows of -1
    after a sentence's own, ordered by target piece then source piece."""
    most = max([len(found) for found in links] + [1])
    out = np.full((len(links), most, 3), -1, np.int32)
    for n, found in enumerate(links):
        per_target: dict[int, int] = {}
        for _, j in found:
            per_target[j] = per_target.get(j, 0) + 1
        rows = sorted(found, key=lambda link: (link[1], link[0]))
        if rows:
            out[n, :len(rows)] = [(i, j, per_target[j]) for i, j in rows]
    return out


def sentence_links(tokenizer, src: Sequence[str], tgt: Sequence[str], word_links: Sequence, src_lang: str,
                   tgt_lang: str) -> tuple[np.ndarray, dict]:
    """The piece links (`as_array`) of sentence pairs ``src``/``tgt`` (texts) from their word links (Pharaoh
    links over `dictionary_words`, a set per pair), in ``tokenizer``'s pieces (`Tokenizer.piece_spans`); and counts:
    {'links': piece links, 'sentences': pairs with links, 'unfound': pairs whose words are not in their text}."""
    from jaxnat.data.words import dictionary_words

    src_spans, tgt_spans = tokenizer.piece_spans(src, "src"), tokenizer.piece_spans(tgt, "tgt")
    links, unfound = [], 0
    for s, t, found, s_pieces, t_pieces in zip(src, tgt, word_links, src_spans, tgt_spans):
        s_words, t_words = word_spans(dictionary_words(s, src_lang), s), word_spans(dictionary_words(t, tgt_lang), t)
        if s_words is None or t_words is None:
            unfound += 1
            links.append(set())
            continue
        links.append(piece_links(found, owners(s_pieces, s_words), owners(t_pieces, t_words)))
    counts = {"links": sum(map(len, links)), "sentences": sum(map(bool, links)), "unfound": unfound}
    return as_array(links), counts
