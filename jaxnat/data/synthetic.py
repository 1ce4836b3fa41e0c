"""The embedded default corpus: a deterministic, seeded synthetic language pair.

Source ``syn`` is a small English-like language; target ``vel`` ("Velish") is an invented language with its own
lexicon. Only proper names and the punctuation marks ``. , ?`` are shared between the two sides, so copying the
source scores a BLEU near 0. The grammar is documented in ``docs/synthetic_corpus.md``; in short, the target has

* its own word order: adjectives after the noun, verb-second after a fronted adverb or subordinate clause,
  verb-final subordinate clauses;
* agreement: determiners and adjectives agree with the noun in gender (m/f) and number, verbs are conjugated for
  tense and person/number, determiners and pronouns carry an accusative case ending ``-n``;
* function words on one side only: English auxiliaries (do/does/did/will, progressive and present copula be)
  vanish; Velish adds a question particle, a person-name particle, a partitive article and an article on games;
* multi-word terms (`TERMS`) that translate to one-, two- or three-word target phrases;
* context-dependent lexical choice (take / make / play depend on the object, eat depends on the subject);
* a moderate amount of multimodality: a few binary choices (placement of a sentence-final time adverb, two
  synonym pairs) are drawn at random, from a stream separate from the one that draws the content.

Everything is plain Python (``random.Random`` with integer seeds, lists and dicts in fixed order), so the
output is identical across runs, processes and ``PYTHONHASHSEED`` values.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass, replace
from typing import Iterator

from jaxnat.errors import ConfigError

SRC_LANG = "syn"  # synthetic English-like source
TGT_LANG = "vel"  # "Velish", the invented target language

MIN_LEN = 3  # tokens per side, punctuation included
MAX_LEN = 30

DEFAULT_SIZES = {"train": 40000, "valid": 500, "test": 500}

# Sentence kinds and their default weights (see `parse_kinds` for choosing others).
KINDS = {"simple": 52, "question": 12, "complex": 23, "complement": 13}

PUNCT = (".", ",", "?")

# ----------------------------------------------------------------------------------------------------------------
# Lexicon
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Noun:
    src_sg: str  # source singular (for terms: the multi-word term)
    src_pl: str | None  # source plural; None for mass nouns, games and terms (singular only)
    tgt: str  # target singular (for terms: the whole target phrase)
    gender: str  # "m" or "f"; lexical, not visible from the target singular form
    cls: str  # semantic class, see NOUN_CLASSES
    term: bool = False
    prep: str = "in"  # places only: the source locative preposition ("in the park", "at the market")

    @property
    def tgt_pl(self) -> str | None:
        if self.src_pl is None:
            return None
        return self.tgt + ("i" if self.gender == "m" else "en")


NOUN_CLASSES = ("person", "animal", "vehicle", "text", "food", "drink", "instrument", "game", "object", "place")

_N = Noun
NOUNS: tuple[Noun, ...] = (
    # person
    _N("man", "men", "doran", "m", "person"),
    _N("woman", "women", "meli", "f", "person"),
    _N("child", "children", "kibu", "m", "person"),
    _N("boy", "boys", "tarko", "m", "person"),
    _N("girl", "girls", "nila", "f", "person"),
    _N("teacher", "teachers", "ludmer", "m", "person"),
    _N("doctor", "doctors", "sanir", "f", "person"),
    _N("farmer", "farmers", "agrel", "m", "person"),
    _N("friend", "friends", "kamre", "f", "person"),
    _N("neighbor", "neighbors", "vesin", "f", "person"),
    # animal
    _N("dog", "dogs", "kelo", "m", "animal"),
    _N("cat", "cats", "mirka", "f", "animal"),
    _N("horse", "horses", "zaldi", "m", "animal"),
    _N("bird", "birds", "piru", "f", "animal"),
    _N("cow", "cows", "bovra", "f", "animal"),
    _N("mouse", "mice", "sorin", "m", "animal"),
    _N("rabbit", "rabbits", "kunel", "m", "animal"),
    # vehicle
    _N("bus", "buses", "autar", "m", "vehicle"),
    _N("train", "trains", "vagun", "m", "vehicle"),
    _N("car", "cars", "mobel", "f", "vehicle"),
    _N("boat", "boats", "barka", "f", "vehicle"),
    _N("bike", "bikes", "rodel", "m", "vehicle"),
    # text
    _N("book", "books", "libre", "m", "text"),
    _N("letter", "letters", "pisma", "f", "text"),
    _N("newspaper", "newspapers", "gazet", "f", "text"),
    _N("story", "stories", "rakon", "m", "text"),
    # food
    _N("apple", "apples", "jabel", "m", "food"),
    _N("cake", "cakes", "torta", "f", "food"),
    _N("sandwich", "sandwiches", "panin", "m", "food"),
    _N("egg", "eggs", "ovu", "m", "food"),
    _N("banana", "bananas", "musa", "f", "food"),
    _N("pie", "pies", "kolac", "m", "food"),
    # drink (mass)
    _N("water", None, "vadi", "f", "drink"),
    _N("milk", None, "mleko", "m", "drink"),
    _N("coffee", None, "kafu", "m", "drink"),
    _N("tea", None, "chaju", "m", "drink"),
    _N("juice", None, "suko", "m", "drink"),
    # instrument
    _N("piano", "pianos", "klavir", "m", "instrument"),
    _N("guitar", "guitars", "gitra", "f", "instrument"),
    _N("violin", "violins", "skripa", "f", "instrument"),
    _N("drum", "drums", "bubni", "m", "instrument"),
    # game (bare in the source, with a definite article in the target)
    _N("football", None, "balon", "m", "game"),
    _N("chess", None, "shahu", "m", "game"),
    _N("tennis", None, "raketa", "f", "game"),
    # object
    _N("box", "boxes", "kuti", "f", "object"),
    _N("chair", "chairs", "sedel", "m", "object"),
    _N("table", "tables", "tavla", "f", "object"),
    _N("key", "keys", "kluc", "m", "object"),
    _N("bag", "bags", "torba", "f", "object"),
    _N("ball", "balls", "bumba", "f", "object"),
    _N("cup", "cups", "tasa", "f", "object"),
    _N("window", "windows", "okna", "f", "object"),
    _N("door", "doors", "vrata", "f", "object"),
    _N("lamp", "lamps", "svet", "m", "object"),
    _N("picture", "pictures", "slika", "f", "object"),
    _N("phone", "phones", "fonel", "m", "object"),
    # place
    _N("park", "parks", "sadir", "m", "place", prep="in"),
    _N("city", "cities", "grado", "m", "place", prep="in"),
    _N("school", "schools", "skola", "f", "place", prep="at"),
    _N("house", "houses", "domu", "m", "place", prep="in"),
    _N("garden", "gardens", "baste", "f", "place", prep="in"),
    _N("market", "markets", "pijac", "m", "place", prep="at"),
    _N("library", "libraries", "knizen", "f", "place", prep="in"),
    _N("river", "rivers", "reka", "f", "place", prep="at"),
    _N("beach", "beaches", "plaza", "f", "place", prep="at"),
    # multi-word terms (singular only, never with an adjective); their target phrase is invariant
    _N("fire station", None, "stanu di foko", "m", "place", term=True, prep="at"),
    _N("train station", None, "vagunzal", "m", "place", term=True, prep="at"),
    _N("bus stop", None, "autarpel", "m", "place", term=True, prep="at"),
    _N("city hall", None, "domu di grado", "m", "place", term=True, prep="at"),
    _N("post office", None, "postel", "f", "place", term=True, prep="at"),
    _N("swimming pool", None, "plivaren", "m", "place", term=True, prep="in"),
    _N("coffee shop", None, "kafuna", "f", "place", term=True, prep="in"),
    _N("ice cream", None, "ledosla", "f", "food", term=True),
    _N("birthday cake", None, "torta di rodin", "f", "food", term=True),
    _N("washing machine", None, "masina di pranu", "f", "object", term=True),
    _N("mobile phone", None, "fonel mobri", "m", "object", term=True),
    _N("tennis ball", None, "bumba di raketa", "f", "object", term=True),
    _N("police officer", None, "gardo di polis", "m", "person", term=True),
)

TERMS: dict[str, str] = {n.src_sg: n.tgt for n in NOUNS if n.term}

_NOUNS_BY_CLASS: dict[str, list[Noun]] = {c: [n for n in NOUNS if n.cls == c and not n.term] for c in NOUN_CLASSES}
_TERMS_BY_CLASS: dict[str, list[Noun]] = {c: [n for n in NOUNS if n.cls == c and n.term] for c in NOUN_CLASSES}

# Person names: the only content words shared by both sides. Target: particle "ta" (accusative "tan") + name.
NAMES: dict[str, str] = {
    "anna": "f", "maria": "f", "lisa": "f", "sara": "f", "tom": "m", "peter": "m", "paul": "m", "david": "m",
}
_NAME_LIST = list(NAMES)
NAME_PARTICLE = {"nom": "ta", "acc": "tan"}


@dataclass(frozen=True)
class Adjective:
    src: str
    tgt: tuple[str, ...]  # target stems; two stems = synonyms, picked at random per occurrence (multimodality)
    classes: tuple[str, ...]  # noun classes it can modify


_ALL_COUNT = ("person", "animal", "vehicle", "text", "food", "instrument", "object", "place")
ADJECTIVES: tuple[Adjective, ...] = (
    Adjective("big", ("grond",), _ALL_COUNT),
    Adjective("small", ("pik",), _ALL_COUNT),
    Adjective("old", ("vet",), ("person", "animal", "vehicle", "text", "instrument", "object", "place")),
    Adjective("new", ("nuv",), ("vehicle", "text", "instrument", "object", "place")),
    Adjective("red", ("rub",), ("vehicle", "object", "food")),
    Adjective("green", ("verd",), ("vehicle", "object", "food")),
    Adjective("black", ("nigr",), ("animal", "vehicle", "object", "instrument")),
    Adjective("white", ("blank",), ("animal", "vehicle", "object")),
    Adjective("happy", ("fel",), ("person", "animal")),
    Adjective("tired", ("lass",), ("person", "animal")),
    Adjective("hungry", ("fam",), ("person", "animal")),
    Adjective("young", ("jun",), ("person", "animal")),
    Adjective("beautiful", ("bel", "kalis"), _ALL_COUNT),
    Adjective("hot", ("kald",), ("drink", "food")),
    Adjective("cold", ("frid",), ("drink", "food")),
    Adjective("sweet", ("dulk",), ("food", "drink")),
    Adjective("heavy", ("grev",), ("object", "text", "instrument")),
)
_ADJ_BY_CLASS: dict[str, list[Adjective]] = {c: [a for a in ADJECTIVES if c in a.classes] for c in NOUN_CLASSES}

# Agreement suffixes of determiners and adjectives, by (gender, number); determiners add "n" in the accusative.
AGR_SUFFIX = {("m", "sg"): "o", ("f", "sg"): "a", ("m", "pl"): "oi", ("f", "pl"): "ai"}
ACC_SUFFIX = "n"

# Target determiner stems. "part" (partitive) stands for an English bare plural or bare mass noun; "game" nouns
# take the definite article although English has none.
DET_STEMS = {
    "def": "l", "indef": "un", "dem": "est", "part": "dv",
    "my": "mej", "your": "tej", "his": "lej", "her": "sej", "our": "nos", "their": "jor",
}
_POSSESSIVES = ("my", "your", "his", "her", "our", "their")

# Pronouns: person code -> (src nom, src acc, tgt nom, tgt acc, gender or None)
PRONOUNS = {
    "1sg": ("i", "me", "mi", "mim", None),
    "2sg": ("you", "you", "tu", "tum", None),
    "3sg_m": ("he", "him", "lu", "lum", "m"),
    "3sg_f": ("she", "her", "sie", "siem", "f"),
    "1pl": ("we", "us", "nu", "num", None),
    "3pl": ("they", "them", "zi", "zim", None),
}
_PRONOUN_KEYS = list(PRONOUNS)

TENSE_SUFFIX = {"pres": "", "past": "it", "fut": "ov"}  # source progressive maps to "pres"
PERSON_SUFFIX = {"1sg": "u", "2sg": "i", "3sg": "e", "1pl": "om", "3pl": "an"}


@dataclass(frozen=True)
class Verb:
    forms: tuple[str, str, str, str]  # source base, 3sg present, past, -ing
    tgt: dict  # target stem: {"*": stem}, or keyed by object class (ctx="obj") / subject class (ctx="subj")
    kind: str  # "tr" transitive, "intr" intransitive, "motion" (needs "to PLACE"), "comp" ("that"-clause)
    obj: tuple[str, ...] = ()  # object noun classes (transitive)
    subj: tuple[str, ...] = ("person",)  # subject classes
    stative: bool = False  # no progressive
    weight: float = 1.0
    ctx: str | None = None  # "obj" / "subj": context-dependent lexical choice

    def stem(self, subj_cls: str, obj_cls: str | None) -> str:
        if self.ctx == "obj":
            return self.tgt[obj_cls]
        if self.ctx == "subj":
            return self.tgt[subj_cls]
        return self.tgt["*"]


_V = Verb
VERBS: tuple[Verb, ...] = (
    _V(("read", "reads", "read", "reading"), {"*": "lek"}, "tr", ("text",)),
    _V(("write", "writes", "wrote", "writing"), {"*": "skrev"}, "tr", ("text",)),
    _V(("eat", "eats", "ate", "eating"), {"person": "mang", "animal": "fres"}, "tr", ("food",),
       subj=("person", "animal"), weight=2.5, ctx="subj"),
    _V(("drink", "drinks", "drank", "drinking"), {"*": "pij"}, "tr", ("drink",), subj=("person", "animal")),
    _V(("buy", "buys", "bought", "buying"), {"*": "kup"}, "tr", ("food", "text", "object", "vehicle", "drink")),
    _V(("see", "sees", "saw", "seeing"), {"*": "vid"}, "tr",
       ("person", "animal", "vehicle", "object", "place"), subj=("person", "animal"), stative=True),
    _V(("find", "finds", "found", "finding"), {"*": "najd"}, "tr", ("object", "animal", "text", "person")),
    _V(("take", "takes", "took", "taking"), {"vehicle": "vozh", "object": "berr", "text": "berr", "food": "berr"},
       "tr", ("vehicle", "object", "text", "food"), weight=3.0, ctx="obj"),
    _V(("make", "makes", "made", "making"), {"food": "kuh", "object": "del"}, "tr", ("food", "object"),
       weight=2.0, ctx="obj"),
    _V(("play", "plays", "played", "playing"), {"instrument": "zvon", "game": "igr"}, "tr",
       ("instrument", "game"), weight=2.0, ctx="obj"),
    _V(("open", "opens", "opened", "opening"), {"*": "otkr"}, "tr", ("object", "text")),
    _V(("like", "likes", "liked", "liking"), {"*": "lub"}, "tr",
       ("person", "animal", "food", "drink", "vehicle", "text", "game", "place"), subj=("person", "animal"),
       stative=True),
    _V(("wash", "washes", "washed", "washing"), {"*": "moj"}, "tr", ("vehicle", "animal", "object")),
    _V(("help", "helps", "helped", "helping"), {"*": "pomag"}, "tr", ("person", "animal")),
    _V(("call", "calls", "called", "calling"), {"*": "zov"}, "tr", ("person", "animal")),
    _V(("visit", "visits", "visited", "visiting"), {"*": "poset"}, "tr", ("place", "person")),
    _V(("sleep", "sleeps", "slept", "sleeping"), {"*": "spav"}, "intr", subj=("person", "animal")),
    _V(("sing", "sings", "sang", "singing"), {"*": "pev"}, "intr", subj=("person", "animal")),
    _V(("work", "works", "worked", "working"), {"*": "rabot"}, "intr"),
    _V(("wait", "waits", "waited", "waiting"), {"*": "chak"}, "intr", subj=("person", "animal")),
    _V(("run", "runs", "ran", "running"), {"*": "beg"}, "intr", subj=("person", "animal")),
    _V(("go", "goes", "went", "going"), {"*": "id"}, "motion", subj=("person", "animal"), weight=1.5),
    _V(("come", "comes", "came", "coming"), {"*": "prid"}, "motion", subj=("person", "animal")),
    _V(("say", "says", "said", "saying"), {"*": "kaz"}, "comp"),
    _V(("think", "thinks", "thought", "thinking"), {"*": "mysl"}, "comp", stative=True),
    _V(("know", "knows", "knew", "knowing"), {"*": "zna"}, "comp", stative=True),
)
_CLAUSE_VERBS = [v for v in VERBS if v.kind != "comp"]
_COMP_VERBS = [v for v in VERBS if v.kind == "comp"]
COPULA_STEM = "est"  # present-tense copula is dropped in the target

# Verbs whose target depends on context, source base -> (context, {class: target stem}).
CONTEXT_VERBS = {v.forms[0]: (v.ctx, dict(v.tgt)) for v in VERBS if v.ctx}

# Time adverbs: source (one or two words) -> (target, tenses it combines with); main clauses only.
TIME_ADVERBS = {
    "yesterday": ("jeri", ("past",)),
    "tomorrow": ("morun", ("fut",)),
    "today": ("hodi", ("pres", "prog", "past", "fut")),
    "now": ("adi", ("pres", "prog")),
    "every day": ("sakdi", ("pres", "past")),
    "last week": ("lasve", ("past",)),
}
_ADVERB_LIST = list(TIME_ADVERBS)

# Subordinating conjunctions: source -> target alternatives (two = synonyms chosen at random).
CONJUNCTIONS = {
    "because": ("zar", "poke"),
    "when": ("kom",),
    "while": ("dum",),
    "although": ("obe",),
    "if": ("se",),
}
_CONJ_LIST = list(CONJUNCTIONS)
COMPLEMENTIZER = ("that", "ke")
QUESTION_PARTICLE = "ka"
NEGATION = ("not", "ne")
PREPOSITIONS = {"in": "ve", "at": "ve", "to": "ad", "with": "kon"}  # "to" governs the accusative


def _agr(gender: str, number: str) -> str:
    return AGR_SUFFIX[(gender, number)]


def det_form(kind: str, gender: str, number: str, case: str) -> str:
    """Target determiner of `kind` (a key of DET_STEMS) agreeing in gender, number and case."""
    return DET_STEMS[kind] + _agr(gender, number) + (ACC_SUFFIX if case == "acc" else "")


def adj_form(stem: str, gender: str, number: str) -> str:
    return stem + _agr(gender, number)


def verb_form(stem: str, tense: str, person: str) -> str:
    """Target finite verb: stem + tense suffix + person/number suffix ("prog" is conjugated as "pres")."""
    return stem + TENSE_SUFFIX["pres" if tense == "prog" else tense] + PERSON_SUFFIX[person]


def _person_code(person: str) -> str:
    return "3sg" if person.startswith("3sg") else person


# Full target paradigms, exposed for tests and analysis: form -> features.
TGT_DETERMINERS: dict[str, tuple[str, str, str, str]] = {}  # form -> (kind, gender, number, case)
for _kind in DET_STEMS:
    for (_g, _num) in AGR_SUFFIX:
        if _kind == "indef" and _num == "pl":
            continue
        for _case in ("nom", "acc"):
            TGT_DETERMINERS[det_form(_kind, _g, _num, _case)] = (_kind, _g, _num, _case)
TGT_NOUNS: dict[str, tuple[str, str]] = {}  # single-word non-term noun form -> (gender, number)
for _n in NOUNS:
    if not _n.term:
        TGT_NOUNS[_n.tgt] = (_n.gender, "sg")
        if _n.tgt_pl:
            TGT_NOUNS[_n.tgt_pl] = (_n.gender, "pl")
_VOWEL_SHIFT = str.maketrans("aeiou", "eioua")


def synonym_stem(noun: Noun) -> str:
    """The second, equally valid target stem of a noun in a corpus with synonyms (`Variant.synonyms`): its
    vowels shifted (a→e→i→o→u→a), e.g. kelo → kilu, mirka → morke. No other target word has that form."""
    return noun.tgt.translate(_VOWEL_SHIFT)


# (source form, target form) of every noun and term: the translations the lexicon fixes, with each noun's
# synonym stem (a corpus with synonyms uses either; one without never shows the second): `lexicon_pairs`
NOUN_PAIRS: tuple[tuple[str, str], ...] = tuple(
    pair for _n in NOUNS for _v in ((_n,) if _n.term else (_n, replace(_n, tgt=synonym_stem(_n))))
    for pair in ((_v.src_sg, _v.tgt), (_v.src_pl, _v.tgt_pl)) if pair[0])


def lexicon_pairs(src: str, tgt: str) -> list[tuple[str, str]]:
    """The constraint pairs a sentence pair of this corpus holds: each noun or term of the source whose fixed
    translation (or, for a noun, its synonym) is in the target (a noun inside a term counts as the term only), in
    source order."""
    s, t = f" {src} ", f" {tgt} "
    found = [(s.index(f" {a} "), a, b) for a, b in NOUN_PAIRS if f" {a} " in s and f" {b} " in t]
    terms = [a for _, a, _ in found if " " in a]
    return [(a, b) for _, a, b in sorted(found) if " " in a or not any(f" {a} " in f" {term} " for term in terms)]


TGT_ADJECTIVES: dict[str, tuple[str, str]] = {}  # form -> (gender, number)
for _a in ADJECTIVES:
    for _stem in _a.tgt:
        for (_g, _num) in AGR_SUFFIX:
            TGT_ADJECTIVES[adj_form(_stem, _g, _num)] = (_g, _num)
TGT_VERBS: dict[str, tuple[str, str, str]] = {}  # form -> (stem, tense, person)
for _stem in sorted({s for v in VERBS for s in v.tgt.values()} | {COPULA_STEM}):
    for _t in TENSE_SUFFIX:
        if _stem == COPULA_STEM and _t == "pres":
            continue
        for _p in PERSON_SUFFIX:
            TGT_VERBS[verb_form(_stem, _t, _p)] = (_stem, _t, _p)

_ACC_WORDS = frozenset([w for w, f in TGT_DETERMINERS.items() if f[3] == "acc"]
                       + [p[3] for p in PRONOUNS.values()] + [NAME_PARTICLE["acc"]])

# ----------------------------------------------------------------------------------------------------------------
# Generator
# ----------------------------------------------------------------------------------------------------------------

# Tags recorded per example (see `generate_annotated`); the doc reports their shares.
TAGS = (
    "adj_after_noun",  # attributive adjective (placed after the noun in the target)
    "pred_adj",  # predicative adjective (copula sentence)
    "v2",  # target verb-second inversion after a fronted adverb or subordinate clause
    "verb_final",  # target verb-final subordinate clause
    "plural",  # a plural noun phrase
    "acc_case",  # an accusative determiner, pronoun or name particle in the target
    "src_only_fw",  # an English auxiliary that has no target word (do/does/did/will/am/is/are)
    "tgt_only_fw",  # a target word with no source word (question/name particle, partitive, game article)
    "term",  # a multi-word term from TERMS
    "context_lex",  # a verb whose translation depends on its object or subject
    "multimodal",  # a random binary choice was made in the target
    "question",
    "negation",
)


@dataclass(frozen=True)
class Example:
    src: str
    tgt: str
    tags: frozenset


@dataclass
class _NP:
    src: list
    tgt_nom: list
    tgt_acc: list
    person: str  # "1sg", "2sg", "3sg_m", "3sg_f", "1pl", "3pl"
    cls: str
    gender: str | None
    noun: Noun | None = None
    src_acc: list | None = None  # pronouns only

    def tgt(self, case: str) -> list:
        return self.tgt_acc if case == "acc" else self.tgt_nom


@dataclass
class _Clause:
    subj: _NP
    tense: str  # pres / prog / past / fut
    neg: bool
    verb: Verb | None  # None: copula clause
    obj: _NP | None = None
    pp_src: list | None = None
    pp_tgt: list | None = None
    pred_src: str | None = None  # copula: source adjective
    pred_tgt: str | None = None  # copula: target adjective (agreeing with the subject)


def _derive_seed(seed: int, label: str) -> int:
    digest = hashlib.sha256(f"jaxnat.synthetic:{int(seed)}:{label}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _indef_article(next_word: str) -> str:
    return "an" if next_word[0] in "aeiou" else "a"


class _Generator:
    """Draws content from `rng`; the multimodal choices alone come from `choice_rng`."""

    def __init__(self, seed: int, choice_seed: int, kinds: dict[str, float] | None = None, lexicon: float = 1.0,
                 multimodal: bool = True, synonyms: float = 0.0):
        self.rng = random.Random(seed)
        self.choice_rng = random.Random(choice_seed)
        self.multimodal = multimodal
        self.kinds = dict(KINDS if kinds is None else kinds)
        self.tags: set = set()
        # The lexicon drawn from: the first share of every list (at least one entry where the list has one),
        # so that every class and verb kind stays; lexicon = 1 is the whole lexicon, in the same order.
        keep = lambda entries: entries[:max(1, math.ceil(lexicon * len(entries)))] if entries else []  # noqa: E731
        self.nouns = {c: keep(v) for c, v in _NOUNS_BY_CLASS.items()}
        self.terms = {c: keep(v) for c, v in _TERMS_BY_CLASS.items()}
        self.adjectives = {c: keep(v) for c, v in _ADJ_BY_CLASS.items()}
        self.names = keep(_NAME_LIST)
        self.clause_verbs = [v for kind in ("tr", "intr", "motion") for v in keep([v for v in _CLAUSE_VERBS
                                                                                   if v.kind == kind])]
        self.clause_verbs.sort(key=_CLAUSE_VERBS.index)  # the lexicon's order: lexicon = 1 draws as before
        # nouns with a second stem: the first share of each class's (kept) nouns, terms excluded
        self.with_synonym = {n for v in self.nouns.values() for n in v[:math.ceil(synonyms * len(v))]}
        self.clause_verb_weights = [v.weight for v in self.clause_verbs]

    # -- noun phrases -------------------------------------------------------------------------------------------

    def _free_choice(self, alternatives: int) -> int:
        """Which of several equally valid target alternatives is written: drawn from `choice_rng`, or without
        multimodality always the first."""
        if not self.multimodal:
            return 0
        self.tags.add("multimodal")
        return self.choice_rng.randrange(alternatives)

    def _adjective_stem(self, adj: Adjective) -> str:
        return adj.tgt[0] if len(adj.tgt) == 1 else adj.tgt[self._free_choice(len(adj.tgt))]

    def noun_np(self, cls: str, term_p: float = 0.18, adj_p: float = 0.25, plural_p: float = 0.3) -> _NP:
        r = self.rng
        if self.terms[cls] and r.random() < term_p:
            noun = r.choice(self.terms[cls])
        else:
            noun = r.choice(self.nouns[cls])
        if noun.term:
            self.tags.add("term")
        plural = noun.src_pl is not None and r.random() < plural_p
        number = "pl" if plural else "sg"
        if noun.cls == "game":
            det = "game"
        elif noun.term:
            det = r.choices(["def", "indef", "dem", "poss"], [50, 25, 10, 15])[0]
        elif noun.src_pl is None:  # mass noun
            det = r.choices(["def", "part", "dem", "poss"], [40, 40, 10, 10])[0]
        elif plural:
            det = r.choices(["def", "part", "dem", "poss"], [40, 25, 10, 25])[0]
        else:
            det = r.choices(["def", "indef", "dem", "poss"], [45, 25, 10, 20])[0]
        if det == "poss":
            det = r.choice(_POSSESSIVES)
        adj = None
        if not noun.term and self.adjectives[cls] and r.random() < adj_p:
            adj = r.choice(self.adjectives[cls])
            self.tags.add("adj_after_noun")
        if plural:
            self.tags.add("plural")

        src_noun = noun.src_pl if plural else noun.src_sg
        src_words = ([adj.src] if adj else []) + src_noun.split()
        if det == "def":
            src = ["the"] + src_words
        elif det == "indef":
            src = [_indef_article(src_words[0])] + src_words
        elif det == "dem":
            src = ["these" if plural else "this"] + src_words
        elif det in ("part", "game"):
            src = src_words
        else:
            src = [det] + src_words

        kind = {"game": "def"}.get(det, det)
        if det in ("part", "game"):
            self.tags.add("tgt_only_fw")
        if noun in self.with_synonym and self.choice_rng.random() < 0.5:  # a free choice, whatever `multimodal` says
            noun = replace(noun, tgt=synonym_stem(noun))
        tgt_noun = (noun.tgt_pl if plural else noun.tgt).split()
        tgt_adj = [adj_form(self._adjective_stem(adj), noun.gender, number)] if adj else []
        tgt_nom = [det_form(kind, noun.gender, number, "nom")] + tgt_noun + tgt_adj
        tgt_acc = [det_form(kind, noun.gender, number, "acc")] + tgt_noun + tgt_adj
        person = "3pl" if plural else ("3sg_f" if noun.gender == "f" else "3sg_m")
        return _NP(src, tgt_nom, tgt_acc, person, cls, noun.gender, noun=noun)

    def name_np(self) -> _NP:
        name = self.rng.choice(self.names)
        g = NAMES[name]
        self.tags.add("tgt_only_fw")
        return _NP([name], [NAME_PARTICLE["nom"], name], [NAME_PARTICLE["acc"], name], "3sg_" + g, "person", g)

    def pronoun_np(self, keys: list | None = None) -> _NP:
        key = self.rng.choice(keys or _PRONOUN_KEYS)
        s_nom, s_acc, t_nom, t_acc, g = PRONOUNS[key]
        return _NP([s_nom], [t_nom], [t_acc], key, "person", g, src_acc=[s_acc])

    def subject(self, classes: tuple, pron_p: float = 0.35, name_p: float = 0.15) -> _NP:
        cls = self.rng.choice(classes)
        if cls == "person":
            x = self.rng.random()
            if x < pron_p:
                return self.pronoun_np()
            if x < pron_p + name_p:
                return self.name_np()
        return self.noun_np(cls, plural_p=0.3)

    def obj(self, cls: str) -> _NP:
        if cls == "person":
            x = self.rng.random()
            if x < 0.2:
                np = self.pronoun_np()
                np.src = np.src_acc
                return np
            if x < 0.35:
                return self.name_np()
        return self.noun_np(cls)

    # -- clauses ------------------------------------------------------------------------------------------------

    def _tense(self, stative: bool) -> str:
        while True:
            t = self.rng.choices(["pres", "prog", "past", "fut"], [30, 15, 35, 20])[0]
            if not (stative and t == "prog"):
                return t

    def _place_pp(self, direction: bool) -> tuple[list, list]:
        np = self.noun_np("place", term_p=0.3, adj_p=0.1, plural_p=0.1)
        if direction:
            return ["to"] + np.src, [PREPOSITIONS["to"]] + np.tgt("acc")
        prep = np.noun.prep  # lexical: "in the park", "at the market"
        return [prep] + np.src, [PREPOSITIONS[prep]] + np.tgt("nom")

    def _with_pp(self) -> tuple[list, list]:
        np = self.name_np() if self.rng.random() < 0.3 else self.noun_np(
            self.rng.choice(["person", "person", "animal"]), adj_p=0.15)
        return ["with"] + np.src, [PREPOSITIONS["with"]] + np.tgt("nom")

    def clause(self, neg_p: float = 0.15, copula_p: float = 0.0, pp_scale: float = 1.0) -> _Clause:
        r = self.rng
        neg = r.random() < neg_p
        if neg:
            self.tags.add("negation")
        if r.random() < copula_p:
            subj = self._copula_subject()
            adj = r.choice(self.adjectives[subj.cls])
            g = subj.gender
            num = "pl" if subj.person == "3pl" else "sg"
            self.tags.add("pred_adj")
            return _Clause(subj, self._tense(False), neg, None, pred_src=adj.src,
                           pred_tgt=adj_form(self._adjective_stem(adj), g, num))
        verb = r.choices(self.clause_verbs, self.clause_verb_weights)[0]
        subj = self.subject(verb.subj)
        tense = self._tense(verb.stative)
        # English "read" has one form for present and past: "they read" is kept unambiguous (past only).
        while verb.forms[0] == verb.forms[2] and tense == "pres" and not subj.person.startswith("3sg"):
            tense = self._tense(verb.stative)
        c = _Clause(subj, tense, neg, verb)
        if verb.kind == "tr":
            c.obj = self.obj(r.choice(verb.obj))
        if verb.ctx:
            self.tags.add("context_lex")
        if verb.kind == "motion":
            c.pp_src, c.pp_tgt = self._place_pp(direction=True)
        elif r.random() < (0.5 if verb.kind == "intr" else 0.2) * pp_scale:
            if r.random() < 0.75:
                c.pp_src, c.pp_tgt = self._place_pp(direction=False)
            else:
                c.pp_src, c.pp_tgt = self._with_pp()
        return c

    def _copula_subject(self) -> _NP:
        x = self.rng.random()
        if x < 0.15:
            return self.pronoun_np(["3sg_m", "3sg_f"])
        if x < 0.3:
            return self.name_np()
        cls = self.rng.choice(["person", "animal", "animal", "vehicle", "text", "food", "drink", "object", "place"])
        return self.noun_np(cls, term_p=0.1, adj_p=0.0)  # terms take predicative adjectives too

    # -- source realisation -------------------------------------------------------------------------------------

    @staticmethod
    def _be(person: str, tense: str) -> str:
        if tense in ("past",):
            return "was" if person in ("1sg", "3sg_m", "3sg_f") else "were"
        return {"1sg": "am", "3sg_m": "is", "3sg_f": "is"}.get(person, "are")

    def _src_verb_group(self, c: _Clause) -> list:
        """Declarative finite verb group (without the subject)."""
        p, t = c.subj.person, c.tense
        third_sg = p.startswith("3sg")
        if c.verb is None:  # copula
            if t == "fut":
                self.tags.add("src_only_fw")
                return ["will"] + (["not"] if c.neg else []) + ["be"]
            if t in ("pres", "prog"):
                self.tags.add("src_only_fw")
            return [self._be(p, "past" if t == "past" else "pres")] + (["not"] if c.neg else [])
        base, s3, past, ing = c.verb.forms
        if t == "prog":
            self.tags.add("src_only_fw")
            return [self._be(p, "pres")] + (["not"] if c.neg else []) + [ing]
        if t == "fut":
            self.tags.add("src_only_fw")
            return ["will"] + (["not"] if c.neg else []) + [base]
        if c.neg:
            self.tags.add("src_only_fw")
            aux = "did" if t == "past" else ("does" if third_sg else "do")
            return [aux, "not", base]
        return [past] if t == "past" else [s3 if third_sg else base]

    def _src_rest(self, c: _Clause) -> list:
        if c.verb is None:
            return [c.pred_src]
        return (c.obj.src if c.obj else []) + (c.pp_src or [])

    def src_decl(self, c: _Clause) -> list:
        return c.subj.src + self._src_verb_group(c) + self._src_rest(c)

    def src_question(self, c: _Clause) -> list:
        p, t = c.subj.person, c.tense
        if not (c.verb is None and t == "past"):  # "was/were" become the target past copula
            self.tags.add("src_only_fw")
        if c.verb is None:
            if t == "fut":
                return ["will"] + c.subj.src + ["be", c.pred_src]
            return [self._be(p, "past" if t == "past" else "pres")] + c.subj.src + [c.pred_src]
        base, _, _, ing = c.verb.forms
        if t == "prog":
            return [self._be(p, "pres")] + c.subj.src + [ing] + self._src_rest(c)
        aux = {"past": "did", "fut": "will"}.get(t) or ("does" if p.startswith("3sg") else "do")
        return [aux] + c.subj.src + [base] + self._src_rest(c)

    # -- target realisation -------------------------------------------------------------------------------------

    def _tgt_verb(self, c: _Clause) -> list:
        person = _person_code(c.subj.person)
        if c.verb is None:
            return [] if c.tense in ("pres", "prog") else [verb_form(COPULA_STEM, c.tense, person)]
        obj_cls = c.obj.cls if c.obj else None
        return [verb_form(c.verb.stem(c.subj.cls, obj_cls), c.tense, person)]

    def tgt(self, c: _Clause, order: str) -> list:
        """order: "svo" (main clause), "v2" (verb before subject), "sub" (verb-final subordinate clause)."""
        neg = [NEGATION[1]] if c.neg else []
        verb = self._tgt_verb(c)
        subj = c.subj.tgt("nom")
        if c.verb is None:  # copula: negation precedes the adjective; present-tense copula is dropped
            pred = neg + [c.pred_tgt]
            if order == "sub":
                return subj + pred + verb
            if order == "v2" and verb:
                return verb + subj + pred
            return subj + verb + pred
        rest = (c.obj.tgt("acc") if c.obj else []) + (c.pp_tgt or [])
        if order == "sub":
            return subj + rest + neg + verb
        if order == "v2":
            return neg + verb + subj + rest
        return subj + neg + verb + rest

    # -- sentences ----------------------------------------------------------------------------------------------

    def _simple(self) -> tuple[list, list]:
        r = self.rng
        c = self.clause(copula_p=0.2)
        if c.verb is None or r.random() >= 0.5:
            return self.src_decl(c) + ["."], self.tgt(c, "svo") + ["."]
        adv = r.choice([a for a in _ADVERB_LIST if c.tense in TIME_ADVERBS[a][1]])
        adv_src, adv_tgt = adv.split(), [TIME_ADVERBS[adv][0]]
        if r.random() < 0.5:  # fronted in the source: always V2 in the target
            self.tags.add("v2")
            return adv_src + self.src_decl(c) + ["."], adv_tgt + self.tgt(c, "v2") + ["."]
        src = self.src_decl(c) + adv_src + ["."]  # final in the source: final or fronted (+V2) in the target
        if not self.multimodal or self._final_adverb():
            return src, self.tgt(c, "svo") + adv_tgt + ["."]
        self.tags.add("v2")
        return src, adv_tgt + self.tgt(c, "v2") + ["."]

    def _final_adverb(self) -> bool:
        # random() < 0.5, not _free_choice(2): the default corpus's draws stay what they were
        self.tags.add("multimodal")
        return self.choice_rng.random() < 0.5

    def _question(self) -> tuple[list, list]:
        c = self.clause(neg_p=0.0, copula_p=0.25, pp_scale=0.7)
        self.tags.add("question")
        self.tags.add("tgt_only_fw")
        return self.src_question(c) + ["?"], [QUESTION_PARTICLE] + self.tgt(c, "svo") + ["?"]

    def _conj(self, conj: str) -> str:
        alts = CONJUNCTIONS[conj]
        return alts[0] if len(alts) == 1 else alts[self._free_choice(len(alts))]

    def _complex(self) -> tuple[list, list]:
        r = self.rng
        conj = r.choice(_CONJ_LIST)
        main = self.clause(copula_p=0.15, pp_scale=0.5)
        sub = self.clause(copula_p=0.25, pp_scale=0.5)
        if conj == "if":  # "if" + present, main clause future ("if they read" would be ambiguous: "when")
            if sub.verb is not None and sub.verb.forms[0] == sub.verb.forms[2] and not sub.subj.person.startswith(
                    "3sg"):
                conj = "when"
            else:
                main.tense, sub.tense = "fut", "pres"
        self.tags.add("verb_final")
        conj_tgt = self._conj(conj)
        if r.random() < 0.6:
            src = self.src_decl(main) + [",", conj] + self.src_decl(sub) + ["."]
            tgt = self.tgt(main, "svo") + [",", conj_tgt] + self.tgt(sub, "sub") + ["."]
        else:
            self.tags.add("v2")
            src = [conj] + self.src_decl(sub) + [","] + self.src_decl(main) + ["."]
            tgt = [conj_tgt] + self.tgt(sub, "sub") + [","] + self.tgt(main, "v2") + ["."]
        return src, tgt

    def _complement(self) -> tuple[list, list]:
        r = self.rng
        verb = r.choice(_COMP_VERBS)
        subj = self.subject(("person",), pron_p=0.45)
        main = _Clause(subj, self._tense(verb.stative), r.random() < 0.1, verb)
        if main.neg:
            self.tags.add("negation")
        sub = self.clause(copula_p=0.3, pp_scale=0.6)
        self.tags.add("verb_final")
        src = self.src_decl(main) + [COMPLEMENTIZER[0]] + self.src_decl(sub) + ["."]
        tgt = self.tgt(main, "svo") + [",", COMPLEMENTIZER[1]] + self.tgt(sub, "sub") + ["."]
        return src, tgt

    def example(self) -> Example:
        while True:
            self.tags = set()
            kind = self.rng.choices(list(self.kinds), list(self.kinds.values()))[0]
            src, tgt = getattr(self, "_" + kind)()
            if MIN_LEN <= len(src) <= MAX_LEN and MIN_LEN <= len(tgt) <= MAX_LEN:
                if any(w in _ACC_WORDS for w in tgt):
                    self.tags.add("acc_case")
                return Example(" ".join(src), " ".join(tgt), frozenset(self.tags))


# ----------------------------------------------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------------------------------------------


def parse_kinds(spec: str) -> dict[str, float]:
    """The sentence kinds to draw, from a config string: "" = every kind at its default weight (`KINDS`);
    "simple,question" = those kinds at their default weights; "simple:3,question:1" = those weights."""
    if not spec.strip():
        return dict(KINDS)
    kinds: dict[str, float] = {}
    for item in spec.split(","):
        name, _, weight = item.strip().partition(":")
        if name not in KINDS:
            raise ConfigError(f"synthetic sentence kind {name!r} is not one of {', '.join(KINDS)}")
        try:
            kinds[name] = float(weight) if weight else float(KINDS[name])
        except ValueError:
            raise ConfigError(f"synthetic sentence kind {name!r}: weight {weight!r} is not a number") from None
        if not kinds[name] > 0:
            raise ConfigError(f"synthetic sentence kind {name!r}: weight must be > 0, got {weight}")
    return kinds


@dataclass
class Variant:
    """Which part of the language a corpus draws from; the default is all of it (the default corpus).

    kinds: sentence kind -> weight (`KINDS`; see `parse_kinds`). lexicon: the share of each word list drawn
    from (the first entries, at least one per list), in (0, 1]. multimodal: False writes the first of several
    equally valid target alternatives every time (no free choices). synonyms: the share of each class's nouns
    (the first ones; terms excluded) that have a second, equally valid target stem (`synonym_stem`), picked at
    random per occurrence even without `multimodal`: a free lexical choice the source does not decide, like a
    terminology or style preference, which a constraint from the reference can settle."""
    kinds: dict[str, float] | None = None
    lexicon: float = 1.0
    multimodal: bool = True
    synonyms: float = 0.0

    def __post_init__(self):
        if not 0.0 < self.lexicon <= 1.0:
            raise ConfigError(f"synthetic lexicon share must be in (0, 1], got {self.lexicon}")
        if not 0.0 <= self.synonyms <= 1.0:
            raise ConfigError(f"synthetic synonym share must be in [0, 1], got {self.synonyms}")


def iter_annotated(seed: int, choice_seed: int | None = None, variant: Variant | None = None) -> Iterator[Example]:
    """Endless stream of annotated examples. `choice_seed` (default: derived from `seed`) drives only the
    multimodal choices: changing it keeps every source sentence and changes only the free target choices."""
    v = variant or Variant()
    choice = _derive_seed(seed if choice_seed is None else choice_seed, "choice")
    gen = _Generator(_derive_seed(seed, "content"), choice, v.kinds, v.lexicon, v.multimodal, v.synonyms)
    while True:
        yield gen.example()


def generate_annotated(n: int, seed: int, choice_seed: int | None = None, variant: Variant | None = None
                       ) -> list[Example]:
    """The first `n` examples of `iter_annotated(seed, choice_seed, variant)` (sources, targets and tags)."""
    if n < 0:
        raise ConfigError(f"synthetic corpus size must be >= 0, got {n}")
    stream = iter_annotated(seed, choice_seed, variant)
    return [next(stream) for _ in range(n)]


def generate_pairs(n: int, seed: int, variant: Variant | None = None) -> list[tuple[str, str]]:
    """n (source, target) sentence pairs, deterministic in seed (a prefix of the pairs for any larger n)."""
    return [(e.src, e.tgt) for e in generate_annotated(n, seed, variant=variant)]


def generate_corpus(seed: int = 0, sizes: dict[str, int] | None = None, variant: Variant | None = None
                    ) -> dict[str, tuple[list[str], list[str]]]:
    """Splits -> (sources, targets). Default sizes {'train': 40000, 'valid': 500, 'test': 500}; `variant`: the
    part of the language drawn from (default: all of it).

    Each split draws from its own seed derived from (seed, split name). 'train' is generated first and may
    repeat sentences; every other split (in the order of `sizes`) keeps only sources that occur neither in
    'train', nor in an earlier split, nor earlier in itself.
    """
    sizes = dict(DEFAULT_SIZES if sizes is None else sizes)
    for name, n in sizes.items():
        if not isinstance(n, int) or n < 0:
            raise ConfigError(f"synthetic corpus split {name!r} must have a size >= 0, got {n!r}")
    order = (["train"] if "train" in sizes else []) + [k for k in sizes if k != "train"]
    seen: set = set()
    out: dict[str, tuple[list[str], list[str]]] = {}
    for name in order:
        n = sizes[name]
        split_seed = _derive_seed(seed, "split:" + name)
        if name == "train":
            pairs = generate_pairs(n, split_seed, variant)
        else:
            pairs = []
            stream = iter_annotated(split_seed, variant=variant)
            budget = 1000 * n + 1000
            while len(pairs) < n:
                budget -= 1
                if budget < 0:
                    raise ConfigError(f"synthetic corpus: could not find {n} new sentences for split {name!r}")
                e = next(stream)
                if e.src not in seen:
                    seen.add(e.src)
                    pairs.append((e.src, e.tgt))
        seen.update(s for s, _ in pairs)
        out[name] = ([s for s, _ in pairs], [t for _, t in pairs])
    return {k: out[k] for k in sizes}
