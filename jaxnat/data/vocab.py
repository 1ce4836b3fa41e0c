"""Reserved token ids shared by every model.

Unlike fairseq, the placeholder (PLH) and mask (MASK) tokens are dedicated ids, distinct from UNK, so that a
model can never confuse "unknown word" with "position to fill".
"""

from typing import NamedTuple

import numpy as np

PAD_ID = 0
BOS_ID = 1
EOS_ID = 2
UNK_ID = 3
PLH_ID = 4
MASK_ID = 5
NUM_RESERVED = 6

PAD_PIECE, BOS_PIECE, EOS_PIECE, UNK_PIECE = "<pad>", "<s>", "</s>", "<unk>"
PLH_PIECE, MASK_PIECE = "<plh>", "<mask>"
RESERVED_PIECES = (PAD_PIECE, BOS_PIECE, EOS_PIECE, UNK_PIECE, PLH_PIECE, MASK_PIECE)  # ids 0 … NUM_RESERVED − 1
# the ids a decoded text leaves out: every reserved one but UNK (which SentencePiece renders as " ⁇ ")
UNWRITTEN_IDS = frozenset(range(NUM_RESERVED)) - {UNK_ID}


class PieceTables(NamedTuple):
    """Facts about the target vocabulary some models need (numpy bool[V] each):

    word_start: the pieces that begin a word (EDITOR's training noise shuffles whole words);
    continues: the pieces that would extend the word before them (letters, digits, hyphens, apostrophes; not
      punctuation), never put right after a hard constraint, so that it stays a word (SentencePiece's words);
    joins: the pieces that glue the next piece onto their word (subword-nmt's pieces ending in "@@"), never put
      right before a hard constraint, for the same reason (None: none).
    """

    word_start: np.ndarray
    continues: np.ndarray
    joins: np.ndarray | None = None

    @classmethod
    def every_piece_a_word(cls, vocab_size: int) -> "PieceTables":
        """For vocabularies without word structure (tests, untokenised ids): no piece glues onto another."""
        return cls(np.ones(vocab_size, bool), np.zeros(vocab_size, bool))
