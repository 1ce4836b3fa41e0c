"""A glossary's terms as constraints (`jaxnat.decoding.glossary`, eval.glossary): reading the file, finding its terms
in a sentence (leftmost, longest, not overlapping) against a plain-Python reference (hypothesis), and how
`--mode translate` hands them to a model. The terms written by a trained model: tests/test_translate.py."""

import json
from types import SimpleNamespace

import pytest
from hypothesis import given, settings, strategies as st

from jaxnat.config import build_config
from jaxnat.decoding.glossary import constraints_of, Glossary
from jaxnat.decoding.request import Supports
from jaxnat.decoding.translate_io import translate_stream
from jaxnat.errors import ConfigError, DataError
from tests.test_translate import stub_config

TINY = "tests/configs/tiny.py"


def _glossary(tmp_path, text, ignore_case=False):
    (tmp_path / "terms.tsv").write_text(text, encoding="utf-8")
    return Glossary.read(str(tmp_path / "terms.tsv"), "en", ignore_case)


@pytest.mark.parametrize("text, message", [
    ("dog\tHund\ncat\n", "terms.tsv:2: a glossary line is a source term, one tab and its target term; this one has "
                         "no tab, or nothing after it"),
    ("dog\tHund\tChien\n", "this one has 2 tabs"),
    ("dog\t \n", "terms.tsv:1: a glossary line is a source term, one tab and its target term; this one has no tab"),
    ("dog\tHund\n\ndog\tRüde\n", "terms.tsv:3: the source term 'dog' has the target 'Rüde' here and 'Hund' on line 1: "
                                 "a term takes one translation"),
    ("\n\n", "terms.tsv: no glossary entries"),
])
def test_a_malformed_glossary_is_one_line_naming_where(tmp_path, text, message):
    with pytest.raises(DataError, match=None) as err:
        _glossary(tmp_path, text)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_term_is_found_as_whole_words_longest_first_each_once(tmp_path):
    g = _glossary(tmp_path, "New York\tNew York\nYork\tYork-Stadt\ncat\tKatze\ndog\tHund\nhot dog\tHotdog\n"
                            "dog\tHund\n")  # (an entry given twice, alike)
    assert g.match("A cat in New York, a cat.") == [("cat", "Katze"), ("New York", "New York")]
    assert g.match("York's hot dog and a dog") == [("York", "York-Stadt"), ("hot dog", "Hotdog"), ("dog", "Hund")]
    assert g.match("Dogs, cats and a catalogue") == []  # whole words only
    assert g.match("A Cat") == [] and _glossary(tmp_path, "cat\tKatze\n", ignore_case=True).match("A CAT") == [
        ("cat", "Katze")]


WORDS = ["a", "b", "c", "d"]


def reference_match(tokens, terms):
    """Leftmost, then longest: at each token every term is tried, the longest that stands there taken, and the
    search goes on after it; each term once, in the order found."""
    found, i = [], 0
    while i < len(tokens):
        here = [t for t in terms if tokens[i:i + len(t)] == list(t)]
        if here:
            best = max(here, key=len)
            if best not in found:
                found.append(best)
            i += len(best)
        else:
            i += 1
    return found


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from(WORDS), max_size=12),
       st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(tuple), min_size=1, max_size=5,
                unique=True))
def test_matching_is_the_reference_leftmost_longest_scan(sentence, terms):
    g = Glossary({t: (" ".join(t), f"T{k}") for k, t in enumerate(terms)}, "en", False, max(map(len, terms)))
    got = g.match(" ".join(sentence))
    assert [tuple(s.split()) for s, _ in got] == reference_match(sentence, terms)


def test_terms_join_a_lines_constraints_or_become_a_pair_models_pairs():
    hard, pairs = Supports(hard_constraints=True, soft_constraints=True), Supports(pairs=True, hard_constraints=True)
    terms = {"src": "x", "terms": [["dog", "Hund"], ["cat", "Katze"]]}
    assert constraints_of(terms, hard, True) == (["Hund", "Katze"], True, None)
    assert constraints_of(terms, hard, False) == (["Hund", "Katze"], False, None)
    # with the line's own constraints, under its own "hard", each phrase once
    assert constraints_of({**terms, "constraints": ["Katze", "rot"]}, hard, True) == (["Katze", "rot", "Hund"], False,
                                                                                    None)
    assert constraints_of({**terms, "constraints": ["rot"], "hard": True}, hard, False)[1] is True
    # a pair model: its pairs, and hard constraints too where the terms are hard
    assert constraints_of(terms, pairs, False) == (None, False, [["dog", "Hund"], ["cat", "Katze"]])
    assert constraints_of({**terms, "constraint_pairs": [["dog", "Hund"]]}, pairs, True) == (
        ["Hund", "Katze"], True, [["dog", "Hund"], ["cat", "Katze"]])
    assert constraints_of({"src": "x", "terms": []}, hard, True) == (None, False, None)


def test_translate_gives_each_lines_terms_as_its_constraints_and_writes_them(tmp_path):
    asked = []

    class Stub:
        spec = SimpleNamespace(name="m", supports=Supports(init=True, soft_constraints=True, hard_constraints=True))
        config = stub_config()

        def translate(self, texts, beam_size, batch_size, **options):
            asked.append(options)
            return [{"hyp": t, "score": -1.0} for t in texts]

        def start(self, init, phrases, is_hard, pairs, tgt_lang=None, given=None):
            asked.append((init, phrases, is_hard))

    (tmp_path / "terms.tsv").write_text("dog\tHund\nred cat\trote Katze\n")
    config = stub_config(glossary=str(tmp_path / "terms.tsv"))
    (tmp_path / "in.txt").write_text('a red cat and a dog\n\n{"src": "a dog", "constraints": ["rot"]}\nnone\n')
    translate_stream(Stub, config, str(tmp_path / "in.txt"), str(tmp_path / "out.jsonl"))
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["terms"] for r in rows] == [[["red cat", "rote Katze"], ["dog", "Hund"]], [], [["dog", "Hund"]], []]
    assert "constraints" not in rows[0] and rows[2]["constraints"] == ["rot"]  # the input echoed as it was
    assert asked[-1]["constraints"] == [["rote Katze", "Hund"], ["rot", "Hund"], None]
    assert asked[-1]["hard"] == [True, False, False]
    (tmp_path / "in.txt").write_text('{"src": "a dog", "init": "ein Hund"}\n')
    with pytest.raises(DataError, match=r"in.txt:1: the glossary finds 'dog' in this source, whose target term would "
                                        r"be a constraint, and the line gives an \"init\" to refine"):
        translate_stream(Stub, config, str(tmp_path / "in.txt"), str(tmp_path / "out.jsonl"))


def test_a_model_that_takes_no_such_constraints_refuses_a_glossary():
    with pytest.raises(ConfigError, match=r"^eval.glossary gives each sentence's terms as hard constraints, which "
                                          r"model 'nat' does not take$"):
        build_config(TINY, ["--config.model.name=nat", "--config.eval.beam_size=1", "--config.eval.glossary=g.tsv"])
    with pytest.raises(ConfigError, match=r"as soft constraints, which model 'ar' does not take; set "
                                          r"eval.glossary_hard=true$"):
        build_config(TINY, ["--config.eval.glossary=g.tsv", "--config.eval.glossary_hard=false"])
    with pytest.raises(ConfigError, match=r"^eval.glossary_ignore_case=true acts only with eval.glossary set"):
        build_config(TINY, ["--config.eval.glossary_ignore_case=true"])
