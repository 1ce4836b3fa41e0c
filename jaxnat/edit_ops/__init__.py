"""Fixed-shape edit operations on right-padded ``int32[B, L]`` token rows (see docs/edit_ops.md).

Every function is pure, jit- and vmap-compatible, never changes the array shape and never synchronises with
the host, so a whole refinement loop can run inside one ``lax.while_loop``.
"""

from jaxnat.edit_ops.compaction import carry_slots, compact, lengths, positions
from jaxnat.edit_ops.deletion import Deleted, boundary_mask, delete_tokens
from jaxnat.edit_ops.insertion import Inserted, fill_placeholders, insert_placeholders
from jaxnat.edit_ops.reposition import Repositioned, reposition, reposition_phrases

__all__ = [
    "Deleted", "Inserted", "Repositioned", "boundary_mask", "carry_slots", "compact", "delete_tokens",
    "fill_placeholders", "insert_placeholders", "lengths", "positions", "reposition", "reposition_phrases",
]
