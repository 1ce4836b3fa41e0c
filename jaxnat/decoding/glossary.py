"""A glossary (term base) applied to every sentence translated: where a source term of the glossary occurs in a
sentence, its target term is given to the model as a constraint, as a terminology workflow enforces a client's or a
domain's terms (the setting of WMT 2021's terminology task, Alam et al. 2021, whose sentences came with the glossary
terms they hold; of Dinu et al. 2019, "Training Neural Machine Translation to Apply Terminology Constraints").

The file (eval.glossary) holds one entry a line, the source term and its target term separated by one tab (UTF-8;
blank lines skipped). A source term may have one target term only: the constraints are conjunctive, and which of two
translations a sentence needs is no longer the glossary's to say. A term occurs in a sentence where its tokens
(`jaxnat.data.words.term_tokens` in the source language: Moses tokens, the characters of Chinese and Japanese, Hangul
syllables) stand in a row among the sentence's, with eval.glossary_ignore_case its letters' case aside; from left to
right the longest term that starts at a token is taken and the search goes on after it, so occurrences never
overlap ("New York" in "New York City", not "York" as well). Each term counts once a sentence, however often it
occurs.

`jaxnat.decoding.translate_io` records each sentence's matches as its output's "terms" ([[source term, target term],
…]) and `jaxnat.evaluate` translates each test split so in a row of its own (`<split>+glossary`); both hand the
target terms to the model (`constraints_of`): as the sentence's constraints (hard with eval.glossary_hard, the
default; joined to a line's own "constraints", under its own "hard"), and to a model that reads constraint pairs
(`Supports.pairs`: the vectorized model) as its pairs too.
"""

from __future__ import annotations

from typing import NamedTuple

from jaxnat.data.text import read_lines
from jaxnat.data.words import term_tokens
from jaxnat.errors import DataError


class Glossary(NamedTuple):
    """entries: {source term's tokens (folded with ignore_case): (source term, target term)}; longest: the most
    tokens a source term has."""

    entries: dict
    lang: str
    ignore_case: bool
    longest: int

    @classmethod
    def read(cls, path: str, lang: str, ignore_case: bool = False) -> "Glossary":
        """The glossary of ``path`` (module docstring) for sources in language ``lang``; a one-line DataError naming
        the line of a malformed entry, a source term given two targets, or a file without entries."""
        entries: dict = {}
        where: dict = {}
        for n, line in enumerate(read_lines(path, blank_ok=True), 1):
            if not line:
                continue
            fields = line.split("\t")
            if len(fields) != 2 or not all(f.strip() for f in fields):
                has = ("no tab, or nothing after it" if len(fields) == 1 else
                       f"{len(fields) - 1} tabs" if len(fields) > 2 else "an empty term")
                raise DataError(f"{path}:{n}: a glossary line is a source term, one tab and its target term; this one "
                                f"has {has}")
            source, target = (f.strip() for f in fields)
            key = cls.key(source, lang, ignore_case)
            if not key:
                raise DataError(f"{path}:{n}: the source term {source!r} has no word to match")
            if key in entries and entries[key][1] != target:
                raise DataError(f"{path}:{n}: the source term {source!r} has the target {target!r} here and "
                                f"{entries[key][1]!r} on line {where[key]}: a term takes one translation")
            entries.setdefault(key, (source, target))
            where.setdefault(key, n)
        if not entries:
            raise DataError(f"{path}: no glossary entries (lines of a source term, a tab and its target term)")
        return cls(entries, lang, ignore_case, max(map(len, entries)))

    @classmethod
    def of(cls, config) -> "Glossary | None":
        """The run's glossary (eval.glossary, in data.src_lang, eval.glossary_ignore_case), or None."""
        e = config.eval
        return cls.read(e.glossary, config.data.src_lang, e.glossary_ignore_case) if e.glossary else None

    @staticmethod
    def key(text: str, lang: str, ignore_case: bool) -> tuple:
        tokens = term_tokens(text, lang)
        return tuple(t.casefold() for t in tokens) if ignore_case else tuple(tokens)

    def match(self, text: str, lang: str | None = None) -> list[tuple[str, str]]:
        """The entries whose source terms occur in ``text`` (in language ``lang``, else the glossary's), each once,
        in the order of their first occurrence: leftmost, longest, not overlapping (module docstring)."""
        tokens = list(self.key(text, lang or self.lang, self.ignore_case))
        found: dict = {}
        i = 0
        while i < len(tokens):
            for n in range(min(self.longest, len(tokens) - i), 0, -1):
                entry = self.entries.get(tuple(tokens[i:i + n]))
                if entry is not None:
                    found.setdefault(entry[0], entry)
                    i += n
                    break
            else:
                i += 1
        return list(found.values())


def constraints_of(request: dict, supports, glossary_hard: bool) -> tuple[list | None, bool, list | None]:
    """(constraints, hard, constraint pairs) that a request (a translate line's, {"src", …}) asks for, with its
    glossary terms ("terms", [[source term, target term], …]: `Glossary.match`) added: their target terms join its
    "constraints" (under its own "hard" where it gives constraints, else ``glossary_hard``; a model that reads
    constraint pairs, `Supports.pairs`, takes them as pairs, and as constraints too where they are hard), each phrase
    once."""
    phrases, hard, pairs = request.get("constraints") or [], bool(request.get("hard")), request.get("constraint_pairs")
    terms = request.get("terms") or []
    if terms and supports.pairs:
        pairs = [*(pairs or []), *([s, t] for s, t in terms if [s, t] not in (pairs or []))]
    if terms and (not supports.pairs or (request.get("hard") if phrases else glossary_hard)):
        hard = hard if phrases else glossary_hard
        phrases = [*phrases, *(t for _, t in terms if t not in phrases)]
    return phrases or None, hard and bool(phrases), pairs or None
