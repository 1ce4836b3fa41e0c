"""The refinement diagnostic: the same test split decoded from different starting sequences, to see what a
refining model (LevT, EDITOR) makes of partial, misordered or complete translations.

    plain               nothing: [BOS, EOS]
    soft                the soft constraints as evaluated (1–4 reference words, shuffled)
    soft_in_order       the same words in the order they have in the reference
    every_second_word   post-editing from the reference's 1st, 3rd, 5th, … word, in order
    own_output          post-editing from the model's own plain translation
    reference           post-editing from the reference itself

A model that refines well gains from every start that holds reference words and keeps the reference when
given it; `docs/editor.md` reads the figures. `starts` builds the requests, `jaxnat.evaluate` runs them.
"""

from __future__ import annotations

from jaxnat.data.words import unspaced
from jaxnat.evaluation.constraints import reference_words

STARTS = ("plain", "soft", "soft_in_order", "every_second_word", "own_output", "reference")


def in_reference_order(words: list[str], ref_words: list[str]) -> list[str]:
    """``words`` (drawn from ``ref_words`` at distinct positions, then shuffled) sorted by their position in the
    reference; a repeated word takes its occurrences left to right, a word not in the reference goes last."""
    taken = set()

    def position(word):
        for p, w in enumerate(ref_words):
            if w == word and p not in taken:
                taken.add(p)
                return p
        return len(ref_words)

    placed = [(position(w), k, w) for k, w in enumerate(words)]
    return [w for _, _, w in sorted(placed)]


def starts(refs: list[str], constraints: list[list[str]], plain_hyps: list[str], lang: str) -> dict[str, dict]:
    """For each name of STARTS, the keyword arguments of `Translator.translate` that start from it."""
    ref_words = [reference_words(r, lang) for r in refs]
    space = "" if unspaced(lang) else " "  # Chinese and Japanese words are written without spaces between them
    return {
        "plain": {},
        "soft": {"constraints": constraints},
        "soft_in_order": {"constraints": [in_reference_order(c, w) for c, w in zip(constraints, ref_words)]},
        "every_second_word": {"inits": [space.join(w[::2]) for w in ref_words]},
        "own_output": {"inits": list(plain_hyps)},
        "reference": {"inits": list(refs)},
    }
