"""The n-gram language model: Kneser-Ney estimation (`jaxnat.data.kneser_ney`), the ARPA reader and the device
queries (`jaxnat.decoding.ngram`) against a plain-Python reference (tests/ngram_reference.py) and KenLM's scores,
and `--mode lm`."""

from __future__ import annotations

import functools
import gzip
import json
import math
import os
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxnat.data.kneser_ney import estimate, write_arpa
from jaxnat.decoding import ngram
from jaxnat.errors import DataError
from tests import ngram_reference as ref

RESERVED = ["<pad>", "<s>", "</s>", "<unk>", "<plh>", "<mask>"]
WORDS = [f"w{i}" for i in range(7)]
PIECES = RESERVED + WORDS + ["never_seen"]  # a piece no corpus has: read as <unk>
WIDTH = 12
FIXTURE = os.path.join(os.path.dirname(__file__), "data", "ngram")


@functools.lru_cache(maxsize=None)
def _scorer():
    return jax.jit(ngram.sentence_logp10)


def rows(sentences: list[list[str]]) -> np.ndarray:
    """[BOS … EOS] rows of piece ids, PAD after, WIDTH wide."""
    out = np.zeros((len(sentences), WIDTH), np.int32)
    for i, words in enumerate(sentences):
        ids = [1, *(PIECES.index(w) for w in words), 2]
        out[i, :len(ids)] = ids
    return out


corpora = st.lists(st.lists(st.sampled_from(WORDS[:5]), max_size=8), min_size=1, max_size=40)


@settings(max_examples=15, deadline=None, derandomize=True)
@given(corpus=corpora, order=st.integers(1, 4), seed=st.integers(0, 10**6))
def test_queries_are_the_back_off_rule_and_every_distribution_sums_to_one(tmp_path_factory, corpus, order, seed):
    """A Kneser-Ney model of a random corpus, written and read back: each sentence's log10 P on the device, and
    word by word on the host (NumPy tables, as the DA-Transformer authors' search reads them: each lookup probes
    only until it meets its key or an empty slot), is the reference's (words the model never saw read as <unk>), and
    after any context the probabilities of every word but <s> sum to 1 (the interpolated estimate that the
    back-off weights keep)."""
    path = str(tmp_path_factory.mktemp("lm") / "lm.arpa")
    write_arpa(path, estimate(corpus, order))
    grams = ref.read(path)
    lm = ngram.read_arpa(path, PIECES)
    rng = random.Random(seed)
    sentences = [[rng.choice(WORDS + ["never_seen"]) for _ in range(rng.randint(0, WIDTH - 2))] for _ in range(6)]
    got = np.asarray(_scorer()(lm, jnp.asarray(rows(sentences))))
    want = [ref.sentence(grams, s) for s in sentences]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    host, tokens = jax.tree_util.tree_map(np.asarray, lm), rows(sentences)
    state, total = ngram.start(host, (len(tokens),), xp=np), np.zeros(len(tokens))
    for t in range(1, WIDTH):
        lp, state = ngram.advance(host, state, tokens[:, t], xp=np)
        total += np.where(tokens[:, t] != 0, lp, 0.0)
    np.testing.assert_allclose(total, want, rtol=1e-5, atol=1e-4)
    vocab = [w for (w,) in (g for g in grams if g is not None and len(g) == 1) if w != "<s>"]
    for words in sentences[:3]:
        context = ("<s>", *words)
        total = math.fsum(10 ** ref.logp(grams, context, w) for w in vocab)
        assert total == pytest.approx(1.0, abs=1e-5), (context, total)


def test_kenlm_reads_the_fixture_as_jaxnat_does():
    """tests/data/ngram/: a Kneser-Ney model written by jaxnat and the full scores KenLM gave its sentences
    (tools/make_ngram_fixture.py): KenLM reads the file, and jaxnat's scores are KenLM's."""
    with open(os.path.join(FIXTURE, "kenlm_scores.json"), encoding="utf-8") as f:
        fixture = json.load(f)
    lm = ngram.read_arpa(os.path.join(FIXTURE, "lm.arpa"), fixture["pieces"])
    width = max(len(s) for s in fixture["sentences"]) + 2
    ids = np.zeros((len(fixture["sentences"]), width), np.int32)
    for i, words in enumerate(fixture["sentences"]):
        row = [1, *(fixture["pieces"].index(w) for w in words), 2]
        ids[i, :len(row)] = row
    got = np.asarray(jax.jit(ngram.sentence_logp10)(lm, jnp.asarray(ids)))
    np.testing.assert_allclose(got, fixture["kenlm"], rtol=1e-5, atol=1e-4)


def test_the_estimate_is_kenlms(tmp_path):
    """tests/data/ngram/: `--mode lm`'s Kneser-Ney estimate of corpus.txt is KenLM's (`lmplz -o 3`, lmplz.arpa): the
    same n-grams, their log-probabilities and back-offs within the files' 7 digits (but <s>'s own log-probability,
    never used: −99 here, 0 in lmplz's)."""
    with open(os.path.join(FIXTURE, "corpus.txt"), encoding="utf-8") as f:
        corpus = [line.split(" ") if line.strip() else [] for line in f.read().splitlines()]
    write_arpa(str(tmp_path / "lm.arpa"), estimate(corpus, 3))
    ours, kenlm = ref.read(str(tmp_path / "lm.arpa")), ref.read(os.path.join(FIXTURE, "lmplz.arpa"))
    assert set(ours) == set(kenlm)
    for gram in set(ours) - {None, ("<s>",)}:
        assert ours[gram] == pytest.approx(kenlm[gram], abs=2e-6), gram
    assert ours[("<s>",)][1] == pytest.approx(kenlm[("<s>",)][1], abs=2e-6)


@pytest.mark.parametrize("text, message", [
    ("no arpa here\n", "no ARPA language model"),
    ("\\data\\\nngram 1=2\n\n\\1-grams:\n-1\t</s>\n\n\\end\\\n", "announces 2 1-grams, the file has 1"),
    ("\\data\\\nngram 1=1\n\n\\1-grams:\nx\t</s>\n\n\\end\\\n", "no number"),
    ("\\data\\\nngram 1=1\nngram 2=1\n\n\\1-grams:\n-1\t</s>\n\n\\2-grams:\n-1\t<s> </s>\n\n\\end\\\n",
     "the word '<s>' of a 2-gram has no unigram"),
    ("\\data\\\nngram 1=2\nngram 2=1\nngram 3=1\n\n\\1-grams:\n-1\t</s>\n-1\t<s>\n\n\\2-grams:\n-1\t<s> </s>\n\n"
     "\\3-grams:\n-1\t</s> <s> </s>\n\n\\end\\\n", "has no 2-gram of its first 2 words"),
    ("\\data\\\nngram 1=1\n\n\\1-grams:\n-1\t</s>\n", "ends before \\\\end"),
])
def test_a_file_that_is_no_arpa_model_is_refused_in_one_line(tmp_path, text, message):
    path = tmp_path / "lm.arpa"
    path.write_text(text)
    with pytest.raises(DataError, match=message) as e:
        ngram.read_arpa(str(path), PIECES)
    assert "\n" not in str(e.value)
    assert ngram.is_arpa(str(path)) == text.startswith("\\data\\")  # the header alone: what an import checks


def test_an_arpa_header_is_found_in_plain_and_gzipped_files_after_a_preamble(tmp_path):
    """`ngram.is_arpa` (an imported model's LM, checked before it is read) finds what `read_arpa` starts from:
    the ``\\data\\`` line, after comment lines too, in a .gz as in a plain file; no binary or unreadable file."""
    text = "written by a tool\n\n" + open(os.path.join(FIXTURE, "lm.arpa"), encoding="utf-8").read()
    (tmp_path / "lm.arpa").write_text(text)
    with gzip.open(tmp_path / "lm.arpa.gz", "wt", encoding="utf-8") as f:
        f.write(text)
    (tmp_path / "model.pt").write_bytes(bytes(range(256)))
    assert ngram.is_arpa(str(tmp_path / "lm.arpa")) and ngram.is_arpa(str(tmp_path / "lm.arpa.gz"))
    assert not ngram.is_arpa(str(tmp_path / "model.pt")) and not ngram.is_arpa(str(tmp_path / "absent.arpa"))


def test_too_small_a_corpus_takes_the_fallback_discounts_and_still_sums_to_one(tmp_path):
    """One sentence has no counts of counts for Kneser-Ney's discounts: lmplz's fallback (0.5, 1, 1.5)."""
    path = str(tmp_path / "lm.arpa")
    write_arpa(path, estimate([["w0", "w1"]], 3))
    grams = ref.read(path)
    vocab = ["w0", "w1", "</s>", "<unk>"]
    for context in [("<s>",), ("<s>", "w0"), ("w1", "w0"), ("w5",)]:
        assert math.fsum(10 ** ref.logp(grams, context, w) for w in vocab) == pytest.approx(1.0, abs=1e-6)
    # p(w0 | <s>) = (1 - 0.5) / 1 + γ(<s>) p(w0), γ(<s>) = 0.5: the discounted count and the back-off's share
    assert 10 ** grams[("<s>", "w0")][0] == pytest.approx(0.5 + 0.5 * 10 ** grams[("w0",)][0], rel=1e-5)


def test_a_piece_with_a_unicode_space_is_a_word_and_one_with_an_ascii_space_is_unk(tmp_path):
    """ARPA separates by ASCII spaces only (as KenLM): a piece holding U+00A0 is a word of its own; a piece an ARPA
    line cannot hold (a tab) is counted as <unk> and read back as <unk>."""
    nbsp, tab = "\u00a0x", "\t"
    path = str(tmp_path / "lm.arpa")
    write_arpa(path, estimate([[nbsp, "w0"], ["w0", tab], [nbsp]], 2))
    grams = ref.read(path)
    assert (nbsp,) in grams and (tab,) not in grams and (nbsp, "w0") in grams and ("w0", "<unk>") in grams
    pieces = PIECES + [nbsp, tab]
    lm = ngram.read_arpa(path, pieces)
    ids = np.asarray([[1, len(PIECES), 6, len(PIECES) + 1, 2]], np.int32)  # <s> nbsp w0 tab </s>
    want = ref.sentence(grams, [nbsp, "w0", "<unk>"])
    np.testing.assert_allclose(np.asarray(_scorer()(lm, jnp.asarray(ids))), [want], rtol=1e-5)


@pytest.mark.slow
def test_mode_lm_writes_a_model_of_the_runs_target_pieces(ar_run, tmp_path):
    """`--mode lm` on a trained run: an ARPA file of eval.lm_order whose words are the run's target pieces, every
    distribution summing to 1; without --output, one line and exit 2; the AR model refuses eval.lm in one line."""
    import sys

    from jaxnat.data.tokenizer import Tokenizer
    from tests import cli

    out = tmp_path / "lm.arpa"
    run = functools.partial(cli.run, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            env=dict(os.environ, JAX_PLATFORMS="cpu"))
    base = [sys.executable, "-m", "jaxnat.main", "--workdir", str(ar_run)]
    result = run([*base, "--mode", "lm", "--output", str(out), "--config.eval.lm_order=3"])
    assert result.returncode == 0, result.stderr
    assert "a 3-gram model of" in result.stdout
    grams = ref.read(str(out))
    tokenizer = Tokenizer.load(str(ar_run))
    pieces = {tokenizer.id_to_piece(i, "tgt") for i in range(tokenizer.vocab_size("tgt"))}
    words = {g[0] for g in grams if g is not None and len(g) == 1}
    assert grams[None] == 3 and words - {"<s>", "</s>", "<unk>"} <= pieces and len(words) > 10
    vocab = sorted(words - {"<s>"})
    for context in [("<s>",), ("<s>", sorted(pieces)[7]), tuple(vocab[:2])]:
        assert math.fsum(10 ** ref.logp(grams, context, w) for w in vocab) == pytest.approx(1.0, abs=1e-5)
    missing = run([*base, "--mode", "lm"])
    assert missing.returncode == 2 and missing.stderr.strip().count("\n") == 0 and "--output FILE" in missing.stderr
    refused = run([*base, "--mode", "translate", f"--config.eval.lm={out}"], input="a b\n")
    assert refused.returncode == 2 and "does not take an n-gram language model (eval.lm)" in refused.stderr
