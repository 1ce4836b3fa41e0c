"""Reserved token ids shared by every model.

Unlike fairseq, the placeholder (PLH) and mask (MASK) tokens are dedicated ids, distinct from UNK, so that a
model can never confuse "unknown word" with "position to fill".
"""

PAD_ID = 0
BOS_ID = 1
EOS_ID = 2
UNK_ID = 3
PLH_ID = 4
MASK_ID = 5
NUM_RESERVED = 6

PAD_PIECE, BOS_PIECE, EOS_PIECE, UNK_PIECE = "<pad>", "<s>", "</s>", "<unk>"
PLH_PIECE, MASK_PIECE = "<plh>", "<mask>"
