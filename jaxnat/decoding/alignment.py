"""Word alignments read off a left-to-right model's attention: which source word each word of a translation was
translated from, to carry markup, formatting or terminology across, or to check where a constraint landed.

The attention is the last decoder layer's cross-attention, averaged over its heads (and over an ensemble's models),
of the translation under teacher forcing (`ModelSpec.align`): fairseq-generate's ``--print-alignment``
(`SequenceGeneratorWithAlignment`, after Garg et al. 2019, "Jointly Learning to Align and Translate with Transformer
Models"), whose outputs jaxnat reproduces on an imported fairseq model (tests/test_import.py). Each piece of the
translation is aligned to the source piece its row attends to most (the source's end left out), a "hard" alignment;
``soft`` gives the rows themselves. Three kinds (eval.alignment):

* ``words``: pairs "i-j" of the i-th whitespace-separated word of the source text and the j-th of the translation's,
  the words their pieces stand for (a piece that writes only a space aligns nothing), each pair once, by target
  word then source word: the Pharaoh format of fast_align and Moses;
* ``pieces``: pairs "i-j" of the i-th source piece and the j-th piece of the translation, one per target piece, in
  its order: fairseq's ``--print-alignment hard``;
* ``soft``: for each piece of the translation and its end, the attention over the source's pieces and its end:
  fairseq's ``--print-alignment soft`` (to 6 decimals, as fairseq prints them).

With ``pieces`` and ``soft`` the output also lists the pieces: "src_pieces" and "pieces", each side's pieces and its
end, the indices counting from the first piece.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from jaxnat.data.vocab import EOS_ID

KINDS = ("words", "pieces", "soft")


def hard(attention: np.ndarray) -> list[tuple[int, int]]:
    """attention: float[T + 1, S + 1], the rows of a translation's T pieces and its end over the source's S pieces
    and its end → [(i, j)]: each target piece j with the source piece i its row attends to most (the ends left
    out: fairseq's ``extract_hard_alignment``), in target order; none for an empty source."""
    if attention.shape[1] < 2:
        return []
    best = np.argmax(attention[:-1, :-1], axis=1)
    return [(int(i), j) for j, i in enumerate(best)]


def soft(attention: np.ndarray) -> list[list[float]]:
    """attention: float[T + 1, S + 1] → its rows as lists, each value to 6 decimals (fairseq's soft alignment)."""
    return np.round(attention.astype(np.float64), 6).tolist()


def piece_words(ids: list[int], decode: Callable[[list[int]], str]) -> list[int]:
    """Per piece of ``ids``, the index of the whitespace-separated word of ``decode(ids)``'s text that it writes into,
    or -1 for a piece that writes only spaces (or nothing): the words of the text its pieces up to it decode to,
    minus one. Decoding each prefix follows the vocabulary's own rules of joining pieces (SentencePiece's word
    boundaries, BPE's "@@" and Moses' detokenizer, which writes punctuation onto the word before it)."""
    return [len(decode(ids[:k + 1]).split()) - 1 if decode([piece]).strip() else -1 for k, piece in enumerate(ids)]


def source_words(text: str, ids: list[int], encode: Callable[[list[str]], list[list[int]]]) -> list[int] | None:
    """Per piece of ``ids`` (the pieces of ``text``, or their first ones where a long source was cut), the index of
    the whitespace-separated word of ``text`` it belongs to, where the words encoded one by one give those pieces
    (SentencePiece cuts each word alone); else None (a segmenter whose cut of a word depends on the words around it,
    as Moses' may: `piece_words` then reads the words off the pieces' own text)."""
    per_word = encode(text.split())
    flat = [piece for pieces in per_word for piece in pieces]
    if flat[:len(ids)] != list(ids):
        return None
    return [w for w, pieces in enumerate(per_word) for _ in pieces][:len(ids)]


def words(pairs: list[tuple[int, int]], src_words: list[int], tgt_words: list[int]) -> list[tuple[int, int]]:
    """Piece pairs (i, j) → word pairs (src_words[i], tgt_words[j]), each once, ordered by target word then source
    word; a pair of a piece in no word (-1) is left out."""
    found = {(src_words[i], tgt_words[j]) for i, j in pairs if src_words[i] >= 0 and tgt_words[j] >= 0}
    return sorted(found, key=lambda pair: (pair[1], pair[0]))


def pharaoh(pairs: list[tuple[int, int]]) -> str:
    """[(i, j)] → "i-j i-j …"."""
    return " ".join(f"{i}-{j}" for i, j in pairs)


def fields(kind: str, attention: np.ndarray, src_text: str, src_ids: list[int], tgt_ids: list[int], tokenizer) -> dict:
    """One sentence's output fields of alignment ``kind`` (`KINDS`). attention: float[len(tgt_ids) + 1,
    len(src_ids) + 1], the rows of the translation's pieces ``tgt_ids`` and its end over the pieces ``src_ids`` of the
    source ``src_text`` and its end (`Translator.alignments`); tokenizer: the model's (`jaxnat.data.tokenizer`)."""
    if kind == "soft":
        out = {"alignment": soft(attention)}
    elif kind == "pieces":
        out = {"alignment": pharaoh(hard(attention))}
    else:
        src_words = (source_words(src_text, src_ids, lambda texts: tokenizer.encode(texts, "src"))
                     or piece_words(src_ids, lambda ids: tokenizer.decode(ids, "src")))
        return {"alignment": pharaoh(words(hard(attention), src_words,
                                           piece_words(tgt_ids, lambda ids: tokenizer.decode(ids, "tgt"))))}
    return {**out, **{key: [tokenizer.id_to_piece(i, side) for i in [*ids, EOS_ID]]
                      for key, side, ids in (("src_pieces", "src", src_ids), ("pieces", "tgt", tgt_ids))}}


def blank(kind: str) -> dict:
    """The fields of a blank line, which is not translated."""
    return {"alignment": [] if kind == "soft" else "", **({} if kind == "words" else {"src_pieces": [], "pieces": []})}
