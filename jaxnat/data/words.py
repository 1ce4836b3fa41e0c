"""Words, as constraints and the constraint metrics count them: Moses tokens (sacremoses, the target language's
rules, no HTML escaping, hyphenated words kept whole) that begin and end like a word (`is_word`). Used by the
constraint test sets (`jaxnat.evaluation.constraints`), CPR/CSR (`jaxnat.evaluation.metrics`) and
the constraint pairs drawn from word alignments (`jaxnat.data.alignment`)."""

from __future__ import annotations

import functools
import unicodedata


@functools.lru_cache(maxsize=None)
def _moses_tokenizer(lang: str):
    # Building one loads the language's non-breaking prefix list: once per language, not once per sentence.
    # sacremoses is imported here, when Moses words are first needed (constraints): training does without it
    from sacremoses import MosesTokenizer

    return MosesTokenizer(lang=lang)


def moses_tokenize(text: str, lang: str) -> list[str]:
    """Moses tokens of one detokenized sentence, with the rules of language `lang` (ISO code such as "de";
    a language Moses has no rules for gets its language-independent ones).

    Punctuation is split off words ("Mann," -> "Mann" ","), apostrophes are split by the language's rule
    ("Peter's" -> "Peter" "'s" in English, "l'homme" -> "l'" "homme" in French), hyphenated words stay
    whole ("T-Shirt"; no `-a`), and nothing is HTML-escaped, so quotes and "&" stay as written.
    """
    return _moses_tokenizer(lang).tokenize(text, aggressive_dash_splits=False, escape=False)


def is_word(token: str) -> bool:
    """True for a token that may be a constraint: its first character is a letter or digit and its last a
    letter, digit or combining mark (so that words of scripts written with vowel signs, such as Hindi, count).
    False for punctuation (".", "„", "--"), Moses's markers ("@-@") and apostrophe clitics ("'s", "l'")."""
    return bool(token) and unicodedata.category(token[0])[0] in "LN" and unicodedata.category(token[-1])[0] in "LNM"
