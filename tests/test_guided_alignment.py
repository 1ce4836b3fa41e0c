"""Guided alignment (Garg et al. 2019; train.alignment_lambda, data.alignments_dir): word links to piece links
(`jaxnat.data.piece_links`) and the loss over a batch's links (`ar.model.alignment_loss`), each against a plain-Python
reference (hypothesis), packed and not; training on it moves the attention word alignments read onto the links; a
run trains on alignment files and reports the loss."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings, strategies as st

from jaxnat.data import piece_links
from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID
from jaxnat.models.ar.model import alignment_loss, ar_loss
from tests.test_score import _params, _spec, SRC


def test_words_are_found_in_their_text_and_pieces_belong_to_the_words_they_share_characters_with():
    text = "the dogs. ran"
    words = piece_links.word_spans(["the", "dogs", ".", "ran"], text)
    assert words == [(0, 3), (4, 8), (8, 9), (10, 13)]
    assert piece_links.word_spans(["the", "cats"], text) is None
    pieces = [(0, 0), (0, 3), (3, 6), (6, 9), (9, 13)]  # "", "the", " do", "gs.", " ran"
    assert piece_links.owners(pieces, words) == [[1], [2, 3], [3], [4]]
    assert piece_links.piece_links({(1, 0), (3, 1), (9, 0)}, [[1], [2, 3], [3], [4]], [[0], [1, 2]]) == {
        (2, 0), (3, 0), (4, 1), (4, 2)}


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sets(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=8), min_size=1, max_size=4))
def test_links_as_arrays_hold_each_link_once_with_its_target_pieces_count(links):
    array = piece_links.as_array(links)
    assert array.dtype == np.int32 and array.shape[1] == max([len(found) for found in links] + [1])
    for found, rows in zip(links, array):
        real = [tuple(r) for r in rows.tolist() if r[0] >= 0]
        assert {(i, j) for i, j, _ in real} == found and len(real) == len(found)
        assert all(n == sum(1 for _, t in found if t == j) for _, j, n in real)
        assert all(r == [-1, -1, -1] for r in rows.tolist()[len(found):])


def reference_loss(attention, links, src, tgt, src_seg, tgt_seg):
    """One link at a time: its pair's first source piece (past BOS) and its target BOS found by scanning the row; a
    link counts where both of its pieces stand in the pair (not its EOS)."""
    total = 0.0
    for b in range(src.shape[0]):
        for m in range(links.shape[1]):
            s_pos = [p for p in range(src.shape[1]) if src_seg[b, p] == m + 1 and src[b, p] != BOS_ID]
            t_pos = [p for p in range(tgt.shape[1]) if tgt_seg[b, p] == m + 1]
            if not s_pos or not t_pos:
                continue
            for i, j, n in links[b, m].tolist():
                if i < 0 or i >= len(s_pos) or j + 1 >= len(t_pos):
                    continue
                col, row = s_pos[i], t_pos[0] + j
                if src[b, col] == EOS_ID or tgt[b, row + 1] == EOS_ID:
                    continue
                total -= np.log(max(attention[b, row, col], 1e-9)) / n
    return total


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.booleans(), st.booleans())
def test_the_alignment_loss_is_the_references(seed, packed, bos):
    """Rows of one or several pairs (segments), the source with or without BOS, links to pieces past a pair's end."""
    rng = np.random.default_rng(seed)
    rows, width, m, k = 2, 12, 3, 4
    src, tgt = np.full((rows, width), PAD_ID, np.int32), np.full((rows, width), PAD_ID, np.int32)
    src_seg, tgt_seg = np.zeros((rows, width), np.int32), np.zeros((rows, width), np.int32)
    for b in range(rows):
        s_at = t_at = 0
        for seg in range(1, (rng.integers(1, m + 1) if packed else 1) + 1):
            s_len, t_len = rng.integers(1, 3), rng.integers(1, 3)
            if s_at + s_len + 1 + bos > width or t_at + t_len + 2 > width:
                break
            pieces = list(rng.integers(6, 20, s_len))
            s_row = ([BOS_ID] if bos else []) + pieces + [EOS_ID]
            src[b, s_at:s_at + len(s_row)], src_seg[b, s_at:s_at + len(s_row)] = s_row, seg
            t_row = [BOS_ID, *rng.integers(6, 20, t_len), EOS_ID]
            tgt[b, t_at:t_at + len(t_row)], tgt_seg[b, t_at:t_at + len(t_row)] = t_row, seg
            s_at, t_at = s_at + len(s_row), t_at + len(t_row)
    links = np.full((rows, m if packed else 1, k, 3), -1, np.int32)
    for index in np.ndindex(links.shape[:3]):
        if rng.random() < 0.7:
            links[index] = (rng.integers(0, 3), rng.integers(0, 3), rng.integers(1, 3))
    attention = rng.dirichlet(np.ones(width), (rows, width - 1)).astype(np.float32)
    want = reference_loss(attention, links, src, tgt, src_seg, tgt_seg)
    args = (jnp.asarray(attention), jnp.asarray(links), jnp.asarray(src), jnp.asarray(tgt))
    if packed:
        got = alignment_loss(*args, jnp.asarray(src_seg), jnp.asarray(tgt_seg))
    else:
        got = alignment_loss(args[0], args[1][:, 0], args[2], args[3])
    np.testing.assert_allclose(float(got), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("keys", [(), ("--config.model.dec_layers=2", "--config.model.alignment_layer=0",
                                       "--config.model.alignment_heads=1",
                                       "--config.model.full_context_alignment=true")])
def test_training_on_the_links_moves_the_attention_onto_them(keys):
    """A few updates of the loss with alignment_lambda large: the attention word alignments read (`ModelSpec.align`)
    puts most of each linked row's weight on its linked piece (a crossing alignment: first source piece with last
    target piece and back), where it started near uniform."""
    spec = _spec(*keys)
    params = _params(spec)
    tgt = np.asarray([[BOS_ID, 12, 13, 14, EOS_ID], [BOS_ID, 15, 16, EOS_ID, PAD_ID]], np.int32)
    links = np.asarray([[[0, 2, 1], [2, 0, 1], [1, 1, 1]], [[1, 0, 1], [0, 1, 1], [-1, -1, -1]]], np.int32)
    batch = {"src": jnp.asarray(SRC), "tgt": jnp.asarray(tgt), "links": jnp.asarray(links)}
    cells = [(0, 2, 1), (0, 0, 3), (0, 1, 2), (1, 0, 2), (1, 1, 1)]  # (row, target piece, source column)

    def linked(p):
        from jaxnat.decoding.request import DecodeRequest

        rows = np.asarray(spec.align(p, DecodeRequest(jnp.asarray(SRC)), jnp.asarray(tgt)))
        return np.mean([rows[b, j, col] for b, j, col in cells])

    before = linked(params)
    opt = optax.adam(3e-2)
    state = opt.init(params)

    @jax.jit
    def step(p, s):
        grads = jax.grad(lambda q: ar_loss(spec.module, q, batch, jax.random.PRNGKey(0), 0.0, False, 5.0)[0])(p)
        updates, s = opt.update(grads, s)
        return optax.apply_updates(p, updates), s

    for _ in range(30):
        params, state = step(params, state)
    assert before < 0.4 and linked(params) > 0.9, (before, linked(params))


@pytest.mark.slow
def test_a_run_trains_on_alignment_files_and_reports_the_loss(tmp_path):
    """The embedded corpus with word alignments of its pairs (here each source word with the target word at its
    position): the run logs the links it found, its history the alignment term, falling, and its validation's."""
    from jaxnat.config import build_config
    from jaxnat.data.sources import load_corpus
    from jaxnat.data.words import dictionary_words
    from jaxnat.training.trainer import Trainer

    config = build_config("tests/configs/tiny.py", [
        "--config.train.steps=12", "--config.train.eval_every=12", f"--config.data.alignments_dir={tmp_path}",
        "--config.train.alignment_lambda=0.5", "--config.eval.latency_sentences=0"])
    corpus = load_corpus(config.data)
    for key in ("train", "valid"):
        lines = []
        for s, t in zip(*corpus[key]):
            n = min(len(dictionary_words(s, "en")), len(dictionary_words(t, "de")))
            lines.append(" ".join(f"{i}-{i}" for i in range(n)))
        (tmp_path / f"{key}.align").write_text("\n".join(lines) + "\n")
    workdir = tmp_path / "run"
    Trainer(config, str(workdir)).train()
    history = [json.loads(line) for line in (workdir / "history.jsonl").read_text().splitlines()]
    terms = [h["alignment"] for h in history if "alignment" in h]
    assert len(terms) >= 2 and terms[-1] < terms[0]
    assert any("valid_alignment" in h for h in history)


@pytest.mark.parametrize("files, message", [
    ({}, "train.align: file not found; data.alignments_dir needs the word alignments of the train split"),
    ({"train.align": "0-0\n"}, "train.align: 1 lines, but the train split has 2 sentences"),
    ({"train.align": "0-0\n1-x\n"}, "train.align:2: not an alignment line"),
])
def test_alignment_files_that_do_not_fit_their_split_are_one_line(tmp_path, files, message):
    from types import SimpleNamespace

    from jaxnat.data.sources import load_alignments
    from jaxnat.errors import DataError

    for name, text in files.items():
        (tmp_path / name).write_text(text)
    data = SimpleNamespace(alignments_dir=str(tmp_path), train_split="train", valid_split="valid")
    corpus = {"train": (["a b", "c"], ["x y", "z"]), "valid": (["a"], ["x"])}
    with pytest.raises(DataError, match=message):
        load_alignments(data, corpus)
    (tmp_path / "train.align").write_text("0-0 1-1\n\n")
    assert load_alignments(data, corpus) == {"train": [{(0, 0), (1, 1)}, set()]}  # (valid: none there, none read)
