"""Oracles (the edit paths that training imitates) and roll-in noise, all as jit-able XLA kernels."""

from jaxnat.oracle.levenshtein import (
    MAX_INSERTIONS, Ed2Labels, Ed3Labels, EditPath, edit_path, ed2_labels, ed3_labels)

__all__ = ["MAX_INSERTIONS", "Ed2Labels", "Ed3Labels", "EditPath", "edit_path", "ed2_labels", "ed3_labels"]
