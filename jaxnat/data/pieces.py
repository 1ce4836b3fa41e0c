"""What a SentencePiece piece says about words, and SentencePiece models read as data: shared by the vocabularies
jaxnat trains (`jaxnat.data.tokenizer`) and those an import brings (`jaxnat.data.piece_vocab`)."""

from __future__ import annotations

import unicodedata

import sentencepiece as spm

from jaxnat.data.words import attaches_freely
from jaxnat.errors import DataError

WORD_BOUNDARY = "\u2581"  # "▁", SentencePiece's word-start marker
# Characters that join two word parts into one word ("T-Shirt", "l'homme", "snake_case"): a piece starting with
# one changes the word before it, like a letter would.
JOINERS = frozenset("-\u2010\u2011'\u2019\u02bc_")


def continues_word(piece: str) -> bool:
    """True for a SentencePiece piece that, written right after a word, would make it another word: it does
    not start a word itself ("▁…") and begins with a letter, digit, combining mark or joiner. Punctuation and
    symbols (".", ",", '"', ")", "!") leave the word intact, so a hard constraint may be followed by them; so do
    a Chinese or Japanese character, a word of its own in the text written without spaces it belongs to, and a
    Hangul syllable, a Korean particle or ending (`jaxnat.data.words.attaches_freely`)."""
    if not piece or piece.startswith(WORD_BOUNDARY):
        return False
    first = piece[0]
    return (unicodedata.category(first)[0] in "LNM" or first in JOINERS) and not attaches_freely(first)


def read_sentencepiece(path: str) -> spm.SentencePieceProcessor:
    """The SentencePiece model in the file ``path`` (read as data); a one-line DataError where it is none."""
    sp = spm.SentencePieceProcessor()
    try:
        with open(path, "rb") as f:
            sp.LoadFromSerializedProto(f.read())
    except (OSError, RuntimeError) as e:
        raise DataError(f"{path}: cannot load SentencePiece model ({' '.join(str(e).split())})") from None
    return sp


def sentencepiece_bytes(path: str) -> bytes:
    """The bytes of the file ``path`` once they load as a SentencePiece model (`read_sentencepiece`'s one-line
    DataError otherwise): an import copies them into a workdir, which would otherwise take a damaged one and fail
    at its first translation."""
    read_sentencepiece(path)
    with open(path, "rb") as f:
        return f.read()
