"""Corpus-level translation metrics, computed the way MT papers report them.

Pure Python (no JAX). Every function takes *detokenized* strings, one per sentence, with exactly one
reference per hypothesis. Scales:

* ``bleu``, ``tokenized_bleu``, ``chrf``, ``ter``, ``constraint_preservation`` and ``repetition_rate``
  return values in 0-100 (TER can exceed 100).
* ``ribes`` returns a value in [0, 1] (it is NOT multiplied by 100), as the official RIBES script and NLTK
  print it; ``corpus_metrics`` multiplies it by 100 so that every number in a results table is in 0-100.

Two scores, as the papers report them. ``bleu`` is the headline: sacreBLEU on detokenized text, with its
signature (comparable across papers that give one), tokenized as sacreBLEU does for the target language
(`bleu_tokenize`: 13a, Chinese characters for Chinese, MeCab's words for Japanese and Korean). ``tokenized_bleu``
and ``ribes`` are the scores of the papers' own tables (multi-bleu.perl, fairseq's scorer): on the words of the
target language (`jaxnat.data.words.word_tokens`: Moses tokens, sacremoses, no HTML escaping; in Chinese and
Japanese each character of their scripts), no smoothing, optionally case-insensitive. The repetition rate counts
the tokens of the headline BLEU (``tokenize``: 13a's punctuation split off, case kept).

The constraint metric (``constraint_preservation``, CPR; terminology papers call it term usage) uses the words
constraints are chosen from (``jaxnat.evaluation.constraints``): ``word_tokens(text, lang)`` with the target
language ``lang`` (where constraints are drawn from a segmenter's words, Chinese and Japanese, a word is matched
as its characters in a row). The rule: a constraint is found in a hypothesis when the words (tokens) of
the constraint occur in the words of the detokenized hypothesis as a contiguous run, same case -- for a
single word, when the word is a whole token. So ``"Mann"`` is found in ``"Ein Mann, der läuft."`` (tokens ``Ein
Mann , der läuft .``) but not in ``"Die Mannschaft"``, ``"T-Shirt"`` is found in ``"ein rotes T-Shirt."`` but
``"Shirt"`` is not (Moses keeps hyphenated words whole), and ``"New York"`` is found in ``"New York, 1999"`` but
not in ``"new York"`` or ``"York New"``; in Chinese ``"北京"`` is found in ``"我住在北京。"`` (each character a
token), in Korean ``"서울"`` in ``"서울에 갔다"`` (a particle attached: Korean is matched on syllables). A final
period Moses keeps on a word it takes for an abbreviation (``"Zaun. der"``) is split off first (`constraint_words`).

Input errors (an empty hypothesis list, lists of different lengths, a string where a list of strings is
expected, an empty constraint) raise ``jaxnat.errors.DataError``. Empty hypothesis *strings* are fine: they
just score 0 wherever a sentence contributes.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections import Counter
from collections.abc import Sequence

from sacrebleu.metrics import BLEU, CHRF, TER

from jaxnat.errors import ConfigError, DataError
from jaxnat.data.words import primary_language, term_tokens, unspaced, word_tokens

__all__ = [
    "bleu",
    "bleu_tokenize",
    "chrf",
    "constraint_preservation",
    "corpus_metrics",
    "format_table",
    "repeated_token_ratios",
    "repetition_rate",
    "ribes",
    "ter",
    "tokenize",
    "tokenized_bleu",
    "tokenized_words",
]

# sacreBLEU's tokenizer of a target language when none is named, as its own `BLEU(trg_lang=...)` picks it
BLEU_TOKENIZE_BY_LANG = {"zh": "zh", "ja": "ja-mecab", "ko": "ko-mecab"}
# the tokenizers eval.bleu_tokenize may name: sacreBLEU's that need no download (its flores ones fetch a model)
BLEU_TOKENIZERS = ("13a", "intl", "char", "zh", "ja-mecab", "ko-mecab", "none")
# the package extra that brings a tokenizer's analyser (MeCab and its dictionary)
_EXTRA = {"ja-mecab": "ja", "ko-mecab": "ko"}

RIBES_VARIANTS = ("official", "nltk")


# ----------------------------------------------------------------------------------------------------------
# Input checks and tokenization
# ----------------------------------------------------------------------------------------------------------


def bleu_tokenize(lang: str = "", name: str = "") -> str:
    """The sacreBLEU tokenizer of BLEU in target language ``lang``: ``name`` where given (eval.bleu_tokenize), else
    sacreBLEU's own choice for the language (`BLEU_TOKENIZE_BY_LANG`, by `primary_language`), else 13a. Languages
    written without spaces would otherwise be scored as if a clause were one word."""
    if name:
        return name
    return BLEU_TOKENIZE_BY_LANG.get(primary_language(lang), "13a")


def check_bleu_tokenize_name(name: str) -> None:
    """A one-line ConfigError where ``name`` is neither '' (the target language's) nor one of `BLEU_TOKENIZERS`."""
    if name and name not in BLEU_TOKENIZERS:
        raise ConfigError(f"eval.bleu_tokenize must be '' (the target language's) or one of "
                          f"{', '.join(BLEU_TOKENIZERS)}, not {name!r}")


def run_bleu_tokenize(config) -> str:
    """`bleu_tokenize` of a run: its config's data.tgt_lang and eval.bleu_tokenize."""
    return bleu_tokenize(config.data.tgt_lang, config.eval.bleu_tokenize)


@functools.lru_cache(maxsize=None)
def _bleu_metric(name: str) -> BLEU:
    # one per tokenizer: MeCab's analyser takes a tenth of a second to load (a BLEU keeps no state between scores
    # when it is given no references up front)
    check_bleu_tokenize_name(name)
    try:
        return BLEU(tokenize=name)
    except RuntimeError:  # sacreBLEU's message when MeCab or its dictionary is missing: several lines
        raise ConfigError(f"BLEU with sacreBLEU's {name} tokenizer needs MeCab and its "
                          f"dictionary: pip install 'jaxnat[{_EXTRA[name]}]', or name another tokenizer with "
                          f"eval.bleu_tokenize") from None


def check_bleu_tokenize(name: str) -> None:
    """A one-line ConfigError, before anything is decoded, where BLEU could not tokenize with ``name``: a run that
    scores (training's validation, an evaluation, a report) checks it at its start; one that only translates
    needs no tokenizer of BLEU's."""
    _bleu_metric(name)


def tokenize(text: str, name: str = "13a") -> list[str]:
    """Words of a detokenized sentence: sacreBLEU's tokenization ``name`` (`bleu_tokenize`), then a whitespace split.

    13a splits punctuation off words (``"Hello, world!"`` -> ``["Hello", ",", "world", "!"]``), keeps
    case, and unescapes ``&quot; &amp; &lt; &gt;``; zh splits Chinese characters apart too.
    """
    return _bleu_metric(name).tokenizer(text).split()


def _string_list(values, what: str) -> list[str]:
    """``values`` as a non-empty list of strings, or a one-line ``DataError``."""
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise DataError(f"{what} must be a list of strings (one per sentence), got {type(values).__name__}")
    if len(values) == 0:
        raise DataError(f"no {what} to score: the list is empty")
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise DataError(f"{what}[{i}] is a {type(value).__name__}, not a string")
    return list(values)


def _parallel(hyps, refs) -> tuple[list[str], list[str]]:
    hyps = _string_list(hyps, "hypotheses")
    refs = _string_list(refs, "references")
    if len(hyps) != len(refs):
        raise DataError(
            f"{len(hyps)} hypotheses but {len(refs)} references: give exactly one reference per hypothesis"
        )
    return hyps, refs


def _constraint_lists(constraints, n_hyps: int) -> list[list[str]]:
    """``constraints`` as one list of non-empty strings per hypothesis, or a one-line ``DataError``."""
    if isinstance(constraints, str) or not isinstance(constraints, Sequence):
        raise DataError(
            "constraints must be a list with one list of strings per hypothesis, "
            f"got {type(constraints).__name__}"
        )
    if len(constraints) != n_hyps:
        raise DataError(
            f"{n_hyps} hypotheses but {len(constraints)} constraint lists: "
            "give one (possibly empty) list per hypothesis"
        )
    out = []
    for i, sentence_constraints in enumerate(constraints):
        if isinstance(sentence_constraints, str) or not isinstance(sentence_constraints, Sequence):
            raise DataError(
                f"constraints[{i}] must be a list of strings, got {type(sentence_constraints).__name__}"
            )
        for j, constraint in enumerate(sentence_constraints):
            if not isinstance(constraint, str):
                raise DataError(f"constraints[{i}][{j}] is a {type(constraint).__name__}, not a string")
            if not constraint.strip():
                raise DataError(f"constraints[{i}][{j}] is empty: remove empty constraints from the data")
        out.append(list(sentence_constraints))
    return out


# ----------------------------------------------------------------------------------------------------------
# sacreBLEU metrics
# ----------------------------------------------------------------------------------------------------------


def bleu(hyps: list[str], refs: list[str], tokenize: str = "13a") -> tuple[float, str]:
    """sacreBLEU corpus BLEU (0-100) on detokenized text, and its signature string.

    Exactly ``sacrebleu.corpus_bleu(hyps, [refs], tokenize=tokenize)``: the ``13a`` tokenizer unless another is
    named (`bleu_tokenize` picks the target language's), case-sensitive, ``exp`` smoothing, one reference. The
    signature looks like ``nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0``.
    """
    hyps, refs = _parallel(hyps, refs)
    metric = _bleu_metric(tokenize)
    score = metric.corpus_score(hyps, [refs]).score
    return float(score), str(metric.get_signature())


@functools.lru_cache(maxsize=1 << 16)
def _words(text: str, lang: str, lowercase: bool) -> tuple[str, ...]:
    # an evaluation scores a split's references once per row (plain, constraints, pairs, sweeps, ...): tokenized once
    return tuple(t.lower() for t in word_tokens(text, lang)) if lowercase else tuple(word_tokens(text, lang))


def tokenized_words(texts: list[str], lang: str, lowercase: bool = False) -> list[list[str]]:
    """Each text's words in language ``lang`` (``word_tokens``: Moses tokens, characters in Chinese and Japanese),
    lowercased with ``lowercase``: the tokens of the papers' tokenized scores."""
    return [list(_words(x, lang, lowercase)) for x in texts]


def tokenized_bleu(hyps: list[str], refs: list[str], *, lang: str = "en", lowercase: bool = False) -> float:
    """Tokenized BLEU (0-100) as the papers' tables give it: Moses' ``multi-bleu.perl`` (``-lc``: ``lowercase``)
    on text tokenized by Moses' ``tokenizer.perl -l LANG`` (fairseq's scorer counts the same n-grams).

    Exact definition: every hypothesis and reference is Moses-tokenized in the target language ``lang``
    (``tokenized_words``: sacremoses, no HTML escaping, hyphenated words whole; Chinese and Japanese characters
    one token each) and re-joined with single spaces;
    then corpus BLEU over whitespace tokens: clipped 1-4-gram precisions, their geometric mean, the brevity
    penalty exp(1 - r/c) when the c hypothesis tokens are fewer than the r reference tokens, and NO smoothing:
    the score is 0 when some n-gram order has no match in the whole corpus. (sacreBLEU with ``tokenize='none'``
    computes it.) Not comparable with ``bleu``, whose 13a tokenization and smoothing differ.
    """
    hyps, refs = _parallel(hyps, refs)
    metric = BLEU(tokenize="none", smooth_method="none", force=True)
    tok_hyps = [" ".join(words) for words in tokenized_words(hyps, lang, lowercase)]
    tok_refs = [" ".join(words) for words in tokenized_words(refs, lang, lowercase)]
    return float(metric.corpus_score(tok_hyps, [tok_refs]).score)


def chrf(hyps: list[str], refs: list[str]) -> float:
    """sacreBLEU corpus chrF (0-100) with its defaults (chrF2: character 6-grams, beta=2, no word n-grams)."""
    hyps, refs = _parallel(hyps, refs)
    return float(CHRF().corpus_score(hyps, [refs]).score)


def ter(hyps: list[str], refs: list[str], lang: str = "") -> float:
    """sacreBLEU corpus TER (0-100, lower is better, may exceed 100), case-sensitive as the papers report it (Gu et
    al. 2019, Table 3; sacreBLEU's own default ignores case). In a target language ``lang`` written without spaces
    (`unspaced`), with sacreBLEU's normalisation and Asian-script support, which count its characters as words (a
    clause would otherwise be one word)."""
    hyps, refs = _parallel(hyps, refs)
    asian = unspaced(lang)
    return float(TER(case_sensitive=True, normalized=asian, asian_support=asian).corpus_score(hyps, [refs]).score)


# ----------------------------------------------------------------------------------------------------------
# RIBES
# ----------------------------------------------------------------------------------------------------------


class _NgramIndex:
    """Count and first start of every n-gram of a token list; the table of one length is built on demand."""

    def __init__(self, tokens: list[str]):
        self._tokens = tokens
        self._tables: dict[int, dict[tuple[str, ...], list[int]]] = {}

    def lookup(self, ngram: tuple[str, ...]) -> tuple[int, int]:
        """``(count, first_start)`` of ``ngram`` (overlapping occurrences count); ``(0, -1)`` if absent."""
        n = len(ngram)
        table = self._tables.get(n)
        if table is None:
            table = {}
            tokens = self._tokens
            for start in range(len(tokens) - n + 1):
                key = tuple(tokens[start : start + n])
                entry = table.get(key)
                if entry is None:
                    table[key] = [1, start]
                else:
                    entry[0] += 1
            self._tables[n] = table
        entry = table.get(ngram)
        return (0, -1) if entry is None else (entry[0], entry[1])


def _ribes_alignment(ref: list[str], hyp: list[str], variant: str) -> list[int]:
    """For each alignable hypothesis word, in hypothesis order, the reference position it aligns to.

    A hypothesis word that occurs exactly once in both sentences aligns to its reference occurrence. A
    word absent from the reference is skipped. Otherwise context n-grams are tried with growing window
    ``w = 1, 2, ...``: the left context ``hyp[i-w : i+1]`` and the right context ``hyp[i : i+w+1]``; the
    first that occurs exactly once in both sentences fixes the position. ``variant='official'`` tries left
    before right and lets the left window reach the sentence start (RIBES.py 1.03.1); ``variant='nltk'``
    tries right before left and stops the windows below ``max(i, len(hyp) - i + 1)``, so that for words in
    the second half of the hypothesis the left context covering the whole prefix is never tried (NLTK).
    """
    ref_counts = Counter(ref)
    hyp_counts = Counter(hyp)
    first_in_ref: dict[str, int] = {}
    for j, word in enumerate(ref):
        first_in_ref.setdefault(word, j)
    ref_index = _NgramIndex(ref)
    hyp_index = _NgramIndex(hyp)
    hyp_len = len(hyp)
    sides = ("left", "right") if variant == "official" else ("right", "left")

    order: list[int] = []
    for i, word in enumerate(hyp):
        if word not in ref_counts:
            continue
        if ref_counts[word] == 1 and hyp_counts[word] == 1:
            order.append(first_in_ref[word])
            continue
        right_max = hyp_len - 1 - i
        left_max = i if variant == "official" else min(i, max(i - 1, hyp_len - i))
        # Once a context n-gram is absent from the reference, every longer context on that side contains
        # it and is absent too, so that side can never match again: stop trying it (saves time only).
        left_alive = right_alive = True
        for window in range(1, max(left_max, right_max) + 1):
            position = None
            for side in sides:
                if side == "left":
                    if not left_alive or window > left_max:
                        continue
                    ngram = tuple(hyp[i - window : i + 1])
                else:
                    if not right_alive or window > right_max:
                        continue
                    ngram = tuple(hyp[i : i + window + 1])
                ref_count, ref_start = ref_index.lookup(ngram)
                if ref_count == 0:
                    if side == "left":
                        left_alive = False
                    else:
                        right_alive = False
                    continue
                if ref_count == 1 and hyp_index.lookup(ngram)[0] == 1:
                    position = ref_start + window if side == "left" else ref_start
                    break
            if position is not None:
                order.append(position)
                break
            if (not left_alive or window >= left_max) and (not right_alive or window >= right_max):
                break
    return order


def _ascending_pairs(order: list[int], size: int) -> int:
    """Number of pairs ``a < b`` with ``order[a] < order[b]`` (values in ``[0, size)``), in O(n log size)."""
    tree = [0] * (size + 1)  # Fenwick tree of counts of values seen so far
    ascending = 0
    for value in order:
        k = value  # count of seen values <= value - 1, i.e. strictly smaller
        while k > 0:
            ascending += tree[k]
            k -= k & -k
        k = value + 1
        while k <= size:
            tree[k] += 1
            k += k & -k
    return ascending


def _sentence_ribes(ref: list[str], hyp: list[str], alpha: float, beta: float, variant: str) -> float:
    if not hyp or not ref:
        return 0.0
    order = _ribes_alignment(ref, hyp, variant)
    n = len(order)
    if n >= 2:
        nkt = _ascending_pairs(order, len(ref)) / (n * (n - 1) / 2)
    elif n == 1 and len(ref) == 1 and variant == "official":
        nkt = 1.0  # RIBES.py: a one-word reference matched by one hypothesis word is perfectly ordered
    else:
        return 0.0  # fewer than two aligned words: no rank correlation
    precision = n / len(hyp)
    brevity_penalty = min(1.0, math.exp(1.0 - len(ref) / len(hyp)))
    return nkt * precision**alpha * brevity_penalty**beta


def ribes(
    hyps: list[str], refs: list[str], alpha: float = 0.25, beta: float = 0.10, *, variant: str = "official",
    lang: str = "en", lowercase: bool = False,
) -> float:
    """Corpus RIBES (Isozaki et al., 2010) in [0, 1] -- NOT multiplied by 100 (``corpus_metrics`` does that).

    Our own implementation. Sentences are split into the tokens of ``tokenized_bleu`` (``tokenized_words`` of
    ``lang``, lowercased with ``lowercase``). Per sentence: ``NKT * P**alpha * BP**beta`` where

    * the word alignment maps each hypothesis word to a reference position: a word occurring exactly once in
      both sentences is matched directly; a repeated word is disambiguated by the shortest left/right
      context n-gram that occurs exactly once in both (see ``_ribes_alignment``); unmatched words are
      dropped;
    * NKT (normalized Kendall's tau) = fraction of pairs of aligned words whose reference positions are in
      increasing order; with fewer than two aligned words the sentence scores 0 (except, in the official
      variant, a one-word reference matched by one hypothesis word: NKT = 1);
    * P = aligned words / hypothesis words (unigram precision);
    * BP = min(1, exp(1 - len(ref) / len(hyp))) (brevity penalty).

    An empty hypothesis or reference scores 0. The corpus score is the plain mean over sentences.

    ``variant='official'`` (default) follows the official RIBES.py 1.03.1 alignment; ``variant='nltk'``
    reproduces ``nltk.translate.ribes_score.corpus_ribes`` with one reference per sentence (recent NLTK,
    checked with 3.10; releases <= 3.8 computed Kendall's tau from runs of consecutive positions only).
    They differ only in (1) which context is tried first for a repeated word (official: left, NLTK: right;
    on the paper's own (H0, R0) example only NLTK reproduces the printed alignment, RIBES.py gives NKT
    17/55 instead of 21/55), (2) NLTK never trying the left context that spans the whole prefix for words
    in the second half of the hypothesis and (3) the one-word-reference case above (NLTK scores it 0).
    RIBES.py lowercases unless run with ``-c``; here case is kept unless ``lowercase``, as in the tokenized BLEU.
    """
    hyps, refs = _parallel(hyps, refs)
    if variant not in RIBES_VARIANTS:
        raise ValueError(f"unknown RIBES variant {variant!r}; expected one of {RIBES_VARIANTS}")
    pairs = zip(tokenized_words(hyps, lang, lowercase), tokenized_words(refs, lang, lowercase))
    scores = [_sentence_ribes(r, h, alpha, beta, variant) for h, r in pairs]
    return math.fsum(scores) / len(scores)


# ----------------------------------------------------------------------------------------------------------
# Constraint and repetition metrics
# ----------------------------------------------------------------------------------------------------------


def constraint_words(text: str, lang: str) -> list[str]:
    """The words CPR compares (`term_tokens`: Korean on syllables), with a final period split off a word Moses kept
    it on.
    Moses reads "Zaun." before a lowercase word as an abbreviation and keeps the period ("Zaun. der" →
    ``Zaun. der``, but "Zaun." at the end → ``Zaun .``); the decoders write it as punctuation after the word,
    and the papers, which decode Moses-tokenized text, score ``Zaun .`` either way."""
    out = []
    for token in term_tokens(text, lang):
        if len(token) > 1 and token.endswith(".") and not token.endswith(".."):
            out += [token[:-1], "."]
        else:
            out.append(token)
    return out


def _contains_sequence(tokens: list[str], pattern: list[str]) -> bool:
    n = len(pattern)
    return any(tokens[start : start + n] == pattern for start in range(len(tokens) - n + 1))


def constraint_preservation(hyps: list[str], constraints: list[list[str]], *, lang: str = "en",
                            by_words: bool = False) -> float:
    """Constraint preservation rate (CPR), in percent.

    ``constraints[i]`` lists the word-level constraints (sub-word marks already removed) of hypothesis
    ``i``, ``lang`` is the target language. A constraint is preserved when its words (`constraint_words`) occur
    in the words of the hypothesis as a contiguous run, same case (module docstring). Micro-average:
    preserved constraints / all constraints over the corpus (``by_words``: each constraint weighted by its
    number of words, the share of constraint words preserved, as the vectorized-constraints authors'
    scorer counts); each listed constraint is checked once (a constraint listed twice is preserved twice by one
    occurrence). Returns ``nan`` when there are no constraints at all. An empty constraint string raises
    ``DataError``.
    """
    hyps = _string_list(hyps, "hypotheses")
    constraints = _constraint_lists(constraints, len(hyps))
    total = preserved = 0
    for i, (hyp, sentence_constraints) in enumerate(zip(hyps, constraints)):
        if not sentence_constraints:
            continue
        tokens = constraint_words(hyp, lang)
        for j, constraint in enumerate(sentence_constraints):
            pattern = constraint_words(constraint, lang)
            if not pattern:  # Moses drops control characters; an empty pattern would be found everywhere
                raise DataError(f"constraints[{i}][{j}] = {constraint!r} has no word: remove it from the data")
            weight = len(pattern) if by_words else 1
            total += weight
            preserved += weight * _contains_sequence(tokens, pattern)
    return float("nan") if total == 0 else 100.0 * preserved / total


def contains_phrase(hyp: str, phrase: str, *, lang: str = "en") -> bool:
    """Whether ``hyp`` contains ``phrase`` by CPR's rule (contiguous whole words, same case)."""
    pattern = constraint_words(phrase, lang)
    return bool(pattern) and _contains_sequence(constraint_words(hyp, lang), pattern)


def repetition_rate(token_lists: list[list[str]]) -> float:
    """Share of output tokens equal to the token right before them in the same sentence, in percent.

    ``sum_s #{t : s[t] == s[t-1], t >= 1} / sum_s len(s) * 100`` -- so ``a a a b`` has 2 repeats in 4
    tokens (50%). Tokens can be any comparable values (strings or ids). Returns 0.0 when there are no
    tokens at all (every sentence empty).
    """
    if isinstance(token_lists, str) or not isinstance(token_lists, Sequence):
        raise DataError(f"token_lists must be a list of token lists, got {type(token_lists).__name__}")
    if len(token_lists) == 0:
        raise DataError("no hypotheses to score: the list of token lists is empty")
    repeats = total = 0
    for i, tokens in enumerate(token_lists):
        if isinstance(tokens, str) or not isinstance(tokens, Sequence):
            raise DataError(f"token_lists[{i}] must be a list of tokens, got {type(tokens).__name__}")
        total += len(tokens)
        repeats += sum(1 for a, b in zip(tokens, tokens[1:]) if a == b)
    return 0.0 if total == 0 else 100.0 * repeats / total


def repeated_token_ratios(repeats: Sequence[int], lengths: Sequence[int], src_lengths: Sequence[int]) -> dict:
    """The NAT post-processing's repeated-token ratio, in percent: output pieces removed as repeats of the one
    before them / pieces before the removal, over all sentences (``repeated``) and over the shorter and the
    longer half of them by source length (``repeated_short``, ``repeated_long``; Coverage-NAT's Table IV).

    repeats, lengths: per sentence, pieces removed and pieces decoded; src_lengths: per sentence, source words.
    The short half is the first ⌈N/2⌉ sentences in order of source length (ties: input order).
    """
    if not (len(repeats) == len(lengths) == len(src_lengths)) or not repeats:
        raise DataError(f"repeated_token_ratios needs equally long non-empty lists, got {len(repeats)}, "
                        f"{len(lengths)} and {len(src_lengths)}")
    order = sorted(range(len(repeats)), key=lambda i: src_lengths[i])
    half = (len(order) + 1) // 2

    def ratio(rows):
        total = sum(lengths[i] for i in rows)
        return 100.0 * sum(repeats[i] for i in rows) / total if total else 0.0

    return {"repeated": ratio(order), "repeated_short": ratio(order[:half]), "repeated_long": ratio(order[half:])}


# ----------------------------------------------------------------------------------------------------------
# All metrics and a table
# ----------------------------------------------------------------------------------------------------------


def corpus_metrics(
    hyps: list[str], refs: list[str], constraints: list[list[str]] | None = None, *, lang: str = "en",
    lowercase: bool = False, bleu_tokenizer: str = "",
) -> dict[str, float | str]:
    """Every metric of this module for one system output, ``lang`` the target language.

    Keys: ``bleu`` (sacreBLEU with ``bleu_tokenize(lang, bleu_tokenizer)``), ``bleu_signature`` (str), ``tok_bleu``
    (``tokenized_bleu``, case-sensitive; with ``lowercase`` also ``tok_bleu_lc``, case-insensitive), ``chrf``,
    ``ter``, ``ribes`` (on the tokens of ``tok_bleu``, lowercased with ``lowercase``), ``repetition``
    (``repetition_rate`` of the BLEU tokens of each hypothesis) and, when ``constraints`` is given, ``cpr`` and
    ``cpr_words`` (CPR weighted by the constraints' words; `word_tokens` of ``lang``).
    All numbers are in 0-100: here RIBES is ``100 * ribes(...)``, unlike the [0, 1] value ``ribes`` returns.
    ``cpr`` and ``cpr_words`` are ``nan`` when ``constraints`` holds no constraint.
    """
    hyps, refs = _parallel(hyps, refs)
    name = bleu_tokenize(lang, bleu_tokenizer)
    bleu_score, signature = bleu(hyps, refs, name)
    out: dict[str, float | str] = {
        "bleu": bleu_score,
        "bleu_signature": signature,
        "tok_bleu": tokenized_bleu(hyps, refs, lang=lang),
        "chrf": chrf(hyps, refs),
        "ter": ter(hyps, refs, lang),
        "ribes": 100.0 * ribes(hyps, refs, lang=lang, lowercase=lowercase),
        "repetition": repetition_rate([tokenize(h, name) for h in hyps]),
    }
    if lowercase:
        out["tok_bleu_lc"] = tokenized_bleu(hyps, refs, lang=lang, lowercase=True)
    if constraints is not None:
        out["cpr"] = constraint_preservation(hyps, constraints, lang=lang)
        out["cpr_words"] = constraint_preservation(hyps, constraints, lang=lang, by_words=True)
    return out


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def format_table(rows: dict[str, dict[str, float]], columns: list[str] | None = None) -> str:
    """A plain-text table: one line per row (split or system), one column per metric.

    ``columns`` defaults to every key that holds a number in some row, in order of first appearance, so
    non-numeric values such as ``bleu_signature`` are skipped. Numbers are printed with 2 decimals; a
    missing, non-numeric or non-finite cell (the CPR of no constraints: null in metrics.json) prints
    ``-``. Columns are separated by two spaces, numbers right-aligned.
    """
    if columns is None:
        columns = []
        for metrics in rows.values():
            for key, value in metrics.items():
                if key not in columns and _is_number(value):
                    columns.append(key)
    header = ["", *columns]
    body = []
    for name, metrics in rows.items():
        cells = [str(name)]
        for column in columns:
            value = metrics.get(column)
            cells.append(f"{float(value):.2f}" if _is_number(value) and math.isfinite(value) else "-")
        body.append(cells)
    widths = [max(len(line[k]) for line in [header, *body]) for k in range(len(header))]

    def render(cells: list[str]) -> str:
        parts = [cells[0].ljust(widths[0])] + [cell.rjust(w) for cell, w in zip(cells[1:], widths[1:])]
        return "  ".join(parts).rstrip()

    lines = [render(header), "  ".join("-" * w for w in widths)]
    lines += [render(cells) for cells in body]
    return "\n".join(lines)
