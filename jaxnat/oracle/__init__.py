"""Oracles (the edit paths that training imitates) and roll-in noise, all as jit-able XLA kernels."""

from jaxnat.oracle.levenshtein import (
    MAX_INSERTIONS, Ed2Labels, Ed3Labels, EditPath, edit_path, ed2_labels, ed3_labels)
from jaxnat.oracle.noise import (
    apply_delete_shuffle, apply_random_delete, apply_random_mask, apply_word_shuffle, draw_delete_shuffle,
    draw_subset, full_mask, random_delete, random_delete_shuffle, random_mask, real_mask)

__all__ = [
    "MAX_INSERTIONS", "Ed2Labels", "Ed3Labels", "EditPath", "edit_path", "ed2_labels", "ed3_labels",
    "apply_delete_shuffle", "apply_random_delete", "apply_random_mask", "apply_word_shuffle",
    "draw_delete_shuffle", "draw_subset", "full_mask", "random_delete", "random_delete_shuffle", "random_mask",
    "real_mask",
]
