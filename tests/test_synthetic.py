"""Tests of the embedded synthetic corpus (jaxnat.data.synthetic)."""

import hashlib
import math
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import sacrebleu

from jaxnat.data import synthetic as S
from jaxnat.errors import ConfigError

SRC_NOUN = {}  # source word form -> (Noun, number), single-word non-term nouns
for _n in S.NOUNS:
    if not _n.term:
        SRC_NOUN[_n.src_sg] = (_n, "sg")
        if _n.src_pl:
            SRC_NOUN[_n.src_pl] = (_n, "pl")
SRC_ADJ = {a.src: a for a in S.ADJECTIVES}
TERM_GENDER = {n.tgt: n.gender for n in S.NOUNS if n.term}
TGT_PRONOUN_PERSON = {p[2]: ("3sg" if k.startswith("3sg") else k) for k, p in S.PRONOUNS.items()}
SUB_CONJ = {t for alts in S.CONJUNCTIONS.values() for t in alts} | {S.COMPLEMENTIZER[1]}
TGT_ADVERBS = {t for t, _ in S.TIME_ADVERBS.values()}


@pytest.fixture(scope="module")
def corpus():
    return S.generate_corpus(0)


@pytest.fixture(scope="module")
def train(corpus):
    src, tgt = corpus["train"]
    return list(zip(src, tgt))


@pytest.fixture(scope="module")
def annotated():
    return S.generate_annotated(5000, 11)


def _share(pairs, pred):
    return sum(1 for p in pairs if pred(*p)) / len(pairs)


# -- determinism and splits ---------------------------------------------------------------------------------------


def test_same_seed_same_pairs_different_seed_different():
    a = S.generate_pairs(300, 5)
    assert a == S.generate_pairs(300, 5)
    assert len(a) == 300 and all(isinstance(s, str) and isinstance(t, str) for s, t in a)
    b = S.generate_pairs(300, 6)
    assert sum(x != y for x, y in zip(a, b)) > 250
    assert S.generate_pairs(100, 5) == a[:100]  # prefix property
    assert S.generate_pairs(0, 5) == []


def test_identical_across_processes_and_hash_seeds():
    code = ("import hashlib; from jaxnat.data.synthetic import generate_corpus as g; "
            "c = g(3, {'train': 300, 'valid': 50, 'test': 50}); "
            "print(hashlib.sha256(repr(c).encode()).hexdigest())")
    here = hashlib.sha256(repr(S.generate_corpus(3, {"train": 300, "valid": 50, "test": 50})).encode()).hexdigest()
    for hash_seed in ("1", "987"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={"PYTHONHASHSEED": hash_seed, "PATH": ""})
        assert out.stdout.strip() == here


def test_split_sizes_and_disjointness(corpus):
    assert {k: (len(s), len(t)) for k, (s, t) in corpus.items()} == {
        "train": (40000, 40000), "valid": (500, 500), "test": (500, 500)}
    train, valid, test = (set(corpus[k][0]) for k in ("train", "valid", "test"))
    assert not train & valid and not train & test and not valid & test
    assert len(valid) == 500 and len(test) == 500  # no duplicates inside valid / test
    other = S.generate_corpus(1, {"train": 1000, "valid": 100, "test": 100})
    assert other["train"][0] != corpus["train"][0][:1000]
    assert S.generate_corpus(0, {"train": 1000, "test": 10})["train"] == S.generate_corpus(
        0, {"train": 1000, "valid": 7})["train"]


def test_sentence_kinds(corpus):
    assert S.parse_kinds("") == S.KINDS
    assert S.parse_kinds("simple, question") == {"simple": 52.0, "question": 12.0}
    assert S.parse_kinds("complex:1") == {"complex": 1.0}
    # default kinds reproduce the default corpus; a subset draws only its kinds
    assert S.generate_corpus(0, {"train": 200}, S.Variant(S.parse_kinds("")))["train"] == (
        corpus["train"][0][:200], corpus["train"][1][:200])
    questions = S.generate_corpus(0, {"train": 200, "valid": 20}, S.Variant(S.parse_kinds("question")))
    assert all(src.endswith("?") for split in questions.values() for src in split[0])
    for bad in ("poem", "simple:0", "simple:x"):
        with pytest.raises(ConfigError, match="synthetic sentence kind"):
            S.parse_kinds(bad)


def test_lexicon_share(corpus):
    sizes = {"train": 300, "valid": 20}
    assert S.generate_corpus(0, sizes, S.Variant(lexicon=1.0))["train"] == (
        corpus["train"][0][:300], corpus["train"][1][:300])
    small = S.generate_corpus(0, sizes, S.Variant(lexicon=0.3))
    words = lambda c: {w for s in c["train"][1] for w in s.split()}  # noqa: E731
    assert len(words(small)) < 0.7 * len(words(S.generate_corpus(0, sizes)))
    nouns = {n.src_sg for n in S.NOUNS}
    kept = {w for s in small["train"][0] for w in s.split() if w in nouns}
    assert kept and kept <= {n.src_sg for c in S.NOUN_CLASSES for n in S._NOUNS_BY_CLASS[c][:math.ceil(
        0.3 * len(S._NOUNS_BY_CLASS[c]))]} | {n.src_sg for n in S.NOUNS if n.term}
    with pytest.raises(ConfigError, match=r"lexicon share must be in \(0, 1\]"):
        S.Variant(lexicon=0.0)
    for synonyms in (-0.1, 1.5):
        with pytest.raises(ConfigError, match=r"synonym share must be in \[0, 1\]"):
            S.Variant(synonyms=synonyms)


def test_without_multimodality_each_source_has_one_translation():
    one = S.generate_annotated(3000, 0, variant=S.Variant(multimodal=False))
    other = S.generate_annotated(3000, 0, choice_seed=5, variant=S.Variant(multimodal=False))
    assert one == other and not any("multimodal" in e.tags for e in one)
    assert [e.src for e in one] == [e.src for e in S.generate_annotated(3000, 0)]  # the same sources
    assert sum(a.tgt != b.tgt for a, b in zip(one, S.generate_annotated(3000, 0))) > 300


@pytest.mark.slow
def test_synonyms_are_a_free_choice_of_noun_stem():
    assert S.generate_annotated(300, 0, variant=S.Variant(synonyms=0.0)) == S.generate_annotated(300, 0)
    v = S.Variant(multimodal=False, synonyms=1.0)
    one, other = S.generate_annotated(2000, 0, variant=v), S.generate_annotated(2000, 0, choice_seed=3, variant=v)
    assert [e.src for e in one] == [e.src for e in S.generate_annotated(2000, 0)]  # the same sources
    stems = {n.tgt: S.synonym_stem(n) for n in S.NOUNS if not n.term}
    swaps = {pair for t, s in stems.items() for end in ("", "i", "en")
             for pair in ((t + end, s + end), (s + end, t + end))}
    differ = [(a, b) for a, b in zip(one, other) if a.tgt != b.tgt]
    assert len(differ) > 500
    for a, b in differ:  # only nouns differ, each word the other's synonym in the same form
        assert all(x == y or (x, y) in swaps for x, y in zip(a.tgt.split(), b.tgt.split(), strict=True))
    # no synonym is a word of the language already
    words = {w for e in S.generate_annotated(5000, 0) for w in e.tgt.split()}
    assert not set(stems.values()) & words and len(set(stems.values())) == len(stems)
    assert 0 < len(S._Generator(1, 2, synonyms=0.5).with_synonym) < len(S._Generator(1, 2, synonyms=1.0).with_synonym)


def test_lexicon_pairs_follow_the_stem_the_reference_uses():
    plain = S.generate_annotated(1000, 0)
    synonyms = S.generate_annotated(1000, 0, variant=S.Variant(synonyms=1.0))
    own = {f for n in S.NOUNS for f in (n.tgt, n.tgt_pl) if f}
    second = {t for _, t in S.NOUN_PAIRS} - own  # the synonyms' singular and plural forms
    assert second and len(second) == len({t for _, t in S.NOUN_PAIRS}) - len(own)
    used = 0
    for a, b in zip(plain, synonyms):
        pa, pb = S.lexicon_pairs(a.src, a.tgt), S.lexicon_pairs(b.src, b.tgt)
        # the same source phrases whichever stem (a noun used twice may take both stems: a pair for each)
        assert {x for x, _ in pa} == {x for x, _ in pb}
        for x, y in pb:
            assert f" {x} " in f" {b.src} " and f" {y} " in f" {b.tgt} "
        used += sum(y in second for _, y in pb)
        assert not any(y in second for _, y in pa)  # a corpus without synonyms never pairs with one
    assert used > 100


def test_a_noun_inside_a_term_pairs_as_the_term_only():
    src = "the dog sees the tennis ball at the fire station ."
    tgt = "lo kelo vide lan bumba di raketa ve stanu di foko ."  # "tennis" (raketa) and "ball" (bumba) inside too
    assert S.lexicon_pairs(src, tgt) == [("dog", "kelo"), ("tennis ball", "bumba di raketa"),
                                         ("fire station", "stanu di foko")]


def test_invalid_sizes_raise():
    with pytest.raises(ConfigError):
        S.generate_corpus(0, {"train": -1})
    with pytest.raises(ConfigError):
        S.generate_pairs(-3, 0)


# -- surface properties -------------------------------------------------------------------------------------------


def test_lengths_punctuation_and_vocabulary(train):
    for s, t in train:
        for side in (s, t):
            words = side.split()
            assert S.MIN_LEN <= len(words) <= S.MAX_LEN, side
            assert words[-1] in (".", "?") and side == side.lower()
        assert (s.endswith("?")) == (t.endswith("?"))
    src_vocab = Counter(w for s, _ in train for w in s.split())
    tgt_vocab = Counter(w for _, t in train for w in t.split())
    assert 300 <= len(src_vocab) <= 800 and 300 <= len(tgt_vocab) <= 800
    shared = set(src_vocab) & set(tgt_vocab)
    assert shared <= set(S.NAMES) | set(S.PUNCT), shared - set(S.NAMES) - set(S.PUNCT)


def test_lexicon_forms_are_unambiguous():
    groups = {
        "det": set(S.TGT_DETERMINERS), "noun": set(S.TGT_NOUNS), "adj": set(S.TGT_ADJECTIVES),
        "verb": set(S.TGT_VERBS), "pron": set(TGT_PRONOUN_PERSON) | {p[3] for p in S.PRONOUNS.values()},
        "func": {S.QUESTION_PARTICLE, S.NEGATION[1], *S.NAME_PARTICLE.values(), *SUB_CONJ, *TGT_ADVERBS,
                 *S.PREPOSITIONS.values()},
    }
    names = sorted(groups)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not groups[a] & groups[b], (a, b, groups[a] & groups[b])
    term_words = {w for t in S.TERMS.values() for w in t.split()}
    assert not term_words & (groups["det"] | groups["verb"] | groups["func"])


def test_copy_baseline_bleu_is_near_zero(corpus):
    src, tgt = corpus["test"]
    assert sacrebleu.corpus_bleu(src, [tgt], force=True).score < 5
    assert sacrebleu.corpus_bleu(tgt, [tgt], force=True).score > 99  # sanity: the metric itself works


# -- phenomena ----------------------------------------------------------------------------------------------------


def test_terms_translate_to_their_phrase(train):
    seen = Counter()
    for s, t in train:
        for term, phrase in S.TERMS.items():
            n_src = len(re.findall(rf"\b{term}\b", s))
            if n_src:
                seen[term] += 1
                assert len(re.findall(rf"(?<!\S){phrase}(?!\S)", t)) == n_src, (term, s, t)
    assert set(seen) == set(S.TERMS)
    assert _share(train, lambda s, t: any(re.search(rf"\b{k}\b", s) for k in S.TERMS)) > 0.12
    assert len(S.TERMS["fire station"].split()) == 3 and len(S.TERMS["ice cream"].split()) == 1
    assert len(S.TERMS["mobile phone"].split()) == 2 and len(S.TERMS) >= 10


def test_determiner_noun_adjective_agreement(train):
    checked = with_adj = 0
    for _, t in train:
        w = t.split()
        for i, tok in enumerate(w[:-1]):
            if tok not in S.TGT_DETERMINERS:
                continue
            _, g, num, _ = S.TGT_DETERMINERS[tok]
            rest = " ".join(w[i + 1:])
            term = [p for p in TERM_GENDER if rest == p or rest.startswith(p + " ")]
            if term:
                assert num == "sg" and TERM_GENDER[term[0]] == g, t
                continue
            assert w[i + 1] in S.TGT_NOUNS, t
            assert S.TGT_NOUNS[w[i + 1]] == (g, num), t
            checked += 1
            if i + 2 < len(w) and w[i + 2] in S.TGT_ADJECTIVES:
                assert S.TGT_ADJECTIVES[w[i + 2]] == (g, num), t
                with_adj += 1
    assert checked > 40000 and with_adj > 5000


def test_verb_agrees_with_pronoun_or_name_subject(train):
    checked = 0
    for _, t in train:
        w = t.split()
        if w[0] in TGT_PRONOUN_PERSON:
            person, j = TGT_PRONOUN_PERSON[w[0]], 1
        elif w[0] == S.NAME_PARTICLE["nom"]:
            person, j = "3sg", 2
        else:
            continue
        j += w[j] == S.NEGATION[1]
        if w[j] in S.TGT_VERBS:  # otherwise a present-tense copula sentence (zero copula) or a copula + adjective
            assert S.TGT_VERBS[w[j]][2] == person, t
            checked += 1
    assert checked > 5000


def test_adjective_follows_noun_in_target(train):
    checked = 0
    for s, t in train:
        sw = s.split()
        adjs = [i for i, x in enumerate(sw[:-1]) if x in SRC_ADJ and sw[i + 1] in SRC_NOUN]
        if len(adjs) != 1:
            continue
        adj = SRC_ADJ[sw[adjs[0]]]
        noun, num = SRC_NOUN[sw[adjs[0] + 1]]
        noun_t = noun.tgt if num == "sg" else noun.tgt_pl
        forms = {S.adj_form(stem, noun.gender, num) for stem in adj.tgt}
        tw = t.split()
        assert any(a == noun_t and b in forms for a, b in zip(tw, tw[1:])), (s, t)
        checked += 1
    assert checked > 5000


def _sub_clauses(tgt_words):
    """Target subordinate clauses: from a conjunction/complementizer to the next ',' or final punctuation."""
    out = []
    for i, x in enumerate(tgt_words):
        if x in SUB_CONJ and (i == 0 or tgt_words[i - 1] == ","):
            j = i + 1
            while tgt_words[j] not in S.PUNCT:
                j += 1
            out.append((i, tgt_words[i + 1:j]))
    return out


def test_subordinate_clauses_are_verb_final_and_trigger_v2(train):
    n_sub = n_fronted = 0
    for s, t in train:
        w = t.split()
        for i, clause in _sub_clauses(w):
            n_sub += 1
            assert clause[-1] in S.TGT_VERBS or clause[-1] in S.TGT_ADJECTIVES, t  # zero copula ends in adjective
            if i == 0:  # fronted subordinate clause: main clause verb comes right after the comma (V2)
                n_fronted += 1
                k = len(clause) + 2
                k += w[k] == S.NEGATION[1]
                # the finite verb comes first, unless the main clause has none (present tense copula)
                assert w[k] in S.TGT_VERBS or not any(x in S.TGT_VERBS for x in w[k:]), t
        if s.split()[0] in S.CONJUNCTIONS:
            assert w[0] in SUB_CONJ, (s, t)
    assert _share(train, lambda s, t: bool(_sub_clauses(t.split()))) > 0.25
    assert n_fronted > 0.2 * n_sub


def test_fronted_time_adverb_gives_verb_second(train):
    checked = 0
    for s, t in train:
        sw, tw = s.split(), t.split()
        adv = sw[0] if sw[0] in S.TIME_ADVERBS else " ".join(sw[:2]) if " ".join(sw[:2]) in S.TIME_ADVERBS else None
        if adv is None:
            continue
        assert tw[0] == S.TIME_ADVERBS[adv][0], (s, t)
        k = 1 + (tw[1] == S.NEGATION[1])
        assert tw[k] in S.TGT_VERBS, (s, t)
        checked += 1
    assert checked > 0.08 * len(train)


def test_function_words_on_one_side_only(train):
    aux = {"do", "does", "did", "will"}
    assert _share(train, lambda s, t: bool(aux & set(s.split()))) > 0.2
    for s, t in train:
        sw, tw = s.split(), t.split()
        assert (tw[0] == S.QUESTION_PARTICLE) == (sw[-1] == "?"), (s, t)
        n_names = sum(x in S.NAMES for x in sw)
        assert sum(x in S.NAME_PARTICLE.values() for x in tw) == n_names, (s, t)
    partitive = {f for f, feats in S.TGT_DETERMINERS.items() if feats[0] == "part"}
    assert _share(train, lambda s, t: bool(partitive & set(t.split()))) > 0.08
    assert _share(train, lambda s, t: s.split()[-1] == "?") > 0.08


def test_context_dependent_lexical_choice(train):
    take = {"take", "takes", "took", "taking"}
    stems_by_cls = dict(S.CONTEXT_VERBS["take"][1])
    counts = Counter()
    for s, t in train:
        sw = s.split()
        idx = [i for i, x in enumerate(sw) if x in take]
        if len(idx) != 1:
            continue
        nouns = [SRC_NOUN[x][0] for x in sw[idx[0] + 1:idx[0] + 4] if x in SRC_NOUN]
        if not nouns or any(f"{k} " in s for k in S.TERMS):  # skip terms in the object slot
            continue
        stem = stems_by_cls[nouns[0].cls]
        other = {v for v in stems_by_cls.values() if v != stem}
        stems = [S.TGT_VERBS[x][0] for x in t.split() if x in S.TGT_VERBS]
        assert stem in stems and not other & set(stems), (s, t)
        counts[stem] += 1
    assert counts["vozh"] > 300 and counts["berr"] > 300
    # eat: depends on the subject class (person -> mang, animal -> fres)
    eat_re = re.compile(r"^(?:the|a|an|this|these|my|your|his|her|our|their) (?:\w+ )?(\w+) (?:eats|eat|ate) ")
    subj_counts = Counter()
    for s, t in train:
        m = eat_re.match(s)
        if m and m.group(1) in SRC_NOUN and " , " not in s:
            cls = SRC_NOUN[m.group(1)][0].cls
            stem = S.CONTEXT_VERBS["eat"][1][cls]
            assert any(S.TGT_VERBS.get(x, ("",))[0] == stem for x in t.split()), (s, t)
            subj_counts[cls] += 1
    assert subj_counts["person"] > 50 and subj_counts["animal"] > 50


def test_multimodality_is_moderate(annotated):
    alt = S.generate_annotated(len(annotated), 11, choice_seed=12345)
    assert [e.src for e in alt] == [e.src for e in annotated]  # the choice stream never changes the content
    differ = sum(a.tgt != b.tgt for a, b in zip(annotated, alt)) / len(alt)
    assert 0.05 < differ < 0.2
    assert all("multimodal" in a.tags for a, b in zip(annotated, alt) if a.tgt != b.tgt)
    share = sum("multimodal" in e.tags for e in annotated) / len(annotated)
    assert 0.15 < share < 0.35
    # the final-adverb placement is drawn from the choice stream: a new choice seed flips about half of them
    final_adv = [(a, b) for a, b in zip(annotated, alt)
                 if any(a.src.endswith(f" {adv} .") for adv in S.TIME_ADVERBS)]
    flipped = sum(a.tgt.split()[0] != b.tgt.split()[0] for a, b in final_adv) / len(final_adv)
    assert len(final_adv) > 300 and 0.35 < flipped < 0.65
    # both synonyms of each synonym pair are used
    tgt_words = Counter(w for e in annotated for w in e.tgt.split())
    for alts in [c for c in S.CONJUNCTIONS.values() if len(c) > 1]:
        assert all(tgt_words[a] > 20 for a in alts), alts
    for adj in [a for a in S.ADJECTIVES if len(a.tgt) > 1]:
        assert all(sum(tgt_words[S.adj_form(stem, g, n)] for g in "mf" for n in ("sg", "pl")) > 20
                   for stem in adj.tgt), adj
    ceiling = sacrebleu.corpus_bleu([e.tgt for e in alt], [[e.tgt for e in annotated]], force=True).score
    assert ceiling > 85


def test_phenomenon_shares(annotated):
    share = {t: sum(t in e.tags for e in annotated) / len(annotated) for t in S.TAGS}
    minimum = {"adj_after_noun": 0.2, "pred_adj": 0.15, "v2": 0.15, "verb_final": 0.25, "plural": 0.2,
               "acc_case": 0.5, "src_only_fw": 0.4, "tgt_only_fw": 0.25, "term": 0.12, "context_lex": 0.2,
               "multimodal": 0.15, "question": 0.08, "negation": 0.1}
    assert set(minimum) == set(S.TAGS)
    low = {t: round(share[t], 3) for t in S.TAGS if share[t] < minimum[t]}
    assert not low, low
    assert all(share[t] < 0.95 for t in S.TAGS)


# -- pinned output ------------------------------------------------------------------------------------------------

DOC = Path(__file__).resolve().parents[1] / "docs" / "synthetic_corpus.md"


def test_first_pairs_are_pinned(corpus):
    """The corpus is a fixed artifact: a grammar change must be deliberate (update this test and the doc)."""
    src, tgt = corpus["train"]
    assert list(zip(src[:3], tgt[:3])) == [
        ("anna is beautiful .", "ta anna kalisa ."),
        ("does he make the cake ?", "ka lu kuhe lan torta ?"),
        ("anna does not buy a beautiful key every day .", "ta anna ne kupe unon kluc belo sakdi ."),
    ]
    assert S.verb_form("lek", "past", "3pl") == "lekitan" and S.det_form("def", "f", "pl", "acc") == "lain"


def test_doc_examples_occur_in_default_train_split(train):
    rows = re.findall(r"^\| ([a-z ,]+ [.?]) \| ([a-z ,]+ [.?]) \|$", DOC.read_text(), flags=re.M)
    assert len(rows) >= 20
    pairs = set(train)
    missing = [r for r in rows if r not in pairs]
    assert not missing, missing
