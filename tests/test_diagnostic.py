"""The refinement diagnostic: its starting sequences, and that each reaches the refinement loop as given (a
LevT whose heads are forced to keep everything returns every start unchanged, the reference included)."""

import os

import jax
import numpy as np
import pytest

from jaxnat.config import build_config
from jaxnat.data.tokenizer import Tokenizer
from jaxnat.decoding.translator import Translator
from jaxnat.evaluate import diagnostic_rows
from jaxnat.evaluation.diagnostic import STARTS, in_reference_order, starts
from jaxnat.models import build_model

REFS = ["Ein Mann, der läuft.", "Zwei Hunde spielen im Schnee.", "Eine Frau liest ein Buch."]
SRCS = ["A man who runs.", "Two dogs play in the snow.", "A woman reads a book."]


def test_in_reference_order():
    assert in_reference_order(["läuft", "Mann"], ["Ein", "Mann", "der", "läuft"]) == ["Mann", "läuft"]
    # a repeated word takes its occurrences left to right; an unknown word goes last
    assert in_reference_order(["b", "x", "a", "a"], ["a", "b", "a"]) == ["a", "b", "a", "x"]


def test_starts():
    got = starts(REFS[:1], [["läuft", "Mann"]], ["Ein Mann"], "de")
    assert list(got) == list(STARTS)
    assert got["soft"] == {"constraints": [["läuft", "Mann"]]}
    assert got["soft_in_order"] == {"constraints": [["Mann", "läuft"]]}
    assert got["every_second_word"] == {"inits": ["Ein der"]}
    assert got["own_output"] == {"inits": ["Ein Mann"]} and got["reference"] == {"inits": REFS[:1]}
    # Chinese words are written without spaces between them (and drawn as words: rjieba)
    assert starts(["我住在北京。"], [["北京"]], [""], "zh")["every_second_word"] == {"inits": ["我在"]}


@pytest.fixture(scope="module")
def keeping_translator(tmp_path_factory):
    """A LevT whose deletion and placeholder heads are zero: argmax keeps every token and opens no slot."""
    workdir = str(tmp_path_factory.mktemp("diag"))
    tok = Tokenizer.train_or_load(workdir, SRCS * 20, REFS * 20, vocab_size=90)
    config = build_config("tests/configs/tiny.py", ["--config.model.name=levt", "--config.eval.beam_size=1"])
    spec = build_model(config, tok.vocab_size("src"), tok.vocab_size("tgt"), tok.piece_tables("tgt"))
    batch = {"src": np.ones((1, 4), np.int32), "tgt": np.ones((1, 4), np.int32)}
    params = spec.init(jax.random.PRNGKey(0), batch)
    params = jax.tree_util.tree_map_with_path(
        lambda path, x: x * 0 if any(getattr(k, "key", "") in ("deletion_head", "placeholder_head") for k in path)
        else x, params)
    return Translator(spec, params, tok, config), config, workdir


@pytest.mark.slow
def test_every_start_reaches_the_loop_as_given(keeping_translator):
    translator, config, workdir = keeping_translator
    os.makedirs(os.path.join(workdir, "hyps"), exist_ok=True)
    constraints = [["läuft", "Mann"], ["Schnee"], ["Buch", "Frau", "liest"]]
    plain = ["Ein Mann", "Hunde", "Eine Frau"]
    translator._generate.clear_cache()
    translator.translate(SRCS, 1, config.eval.batch_size)
    programs = translator._generate._cache_size()  # one per source bucket
    translator.translate(SRCS, 1, config.eval.batch_size, inits=REFS)
    assert translator._generate._cache_size() == programs  # post-editing runs in the plain programs
    rows = diagnostic_rows(translator, "test", SRCS, REFS, constraints, plain, config, workdir)
    assert set(rows) == {f"test+from_{name}" for name in STARTS}
    hyps = {name: open(os.path.join(workdir, "hyps", f"test.from_{name}.txt")).read().splitlines()
            for name in STARTS}
    assert hyps["plain"] == ["", "", ""]
    assert hyps["soft"] == ["läuft Mann", "Schnee", "Buch Frau liest"]
    assert hyps["soft_in_order"] == ["Mann läuft", "Schnee", "Frau liest Buch"]
    assert hyps["every_second_word"] == ["Ein der", "Zwei spielen Schnee", "Eine liest Buch"]
    assert hyps["own_output"] == plain
    assert hyps["reference"] == REFS
    assert rows["test+from_reference"]["bleu"] == pytest.approx(100.0)
    assert rows["test+from_reference"]["mean_iterations"] == 1
    assert rows["test+from_soft"]["cpr"] == 100.0 and "cpr" not in rows["test+from_reference"]
    assert rows["test+from_every_second_word"]["mean_length"] == pytest.approx(8 / 3)


def test_a_start_longer_than_the_model_is_refused_or_cut(keeping_translator):
    from jaxnat.errors import DataError

    translator = keeping_translator[0]
    long_init = " ".join(["Schnee"] * 200)
    with pytest.raises(DataError, match="sentence 1: the initial hypothesis has .* more than the 62"):
        translator.translate(SRCS[:1], 1, 4, inits=[long_init])
    out = translator.translate(SRCS[:1], 1, 4, inits=[long_init], cut_long_inits=True)
    assert len(translator.tokenizer.encode([out[0]["hyp"]], "tgt")[0]) == 62  # kept as cut: the model keeps all
