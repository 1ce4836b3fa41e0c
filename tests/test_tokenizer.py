"""SentencePiece tokenizer: reserved ids, round trip, determinism, reuse of the files in the workdir."""

import os
import pathlib

import numpy as np
import pytest

from jaxnat.data import vocab
from jaxnat.data.tokenizer import Tokenizer
from jaxnat.errors import ConfigError, DataError

SRC = [
    "the quick brown fox jumps over the lazy dog",
    "héllo wörld, ça va? naïve café",
    "a man rides a bike down the street",
    "emoji 🙂 and CJK 日本語のテキスト",
    "two dogs play in the snow",
    "Ελληνικά κείμενα και русский текст",
] * 5
TGT = [
    "der schnelle braune fuchs springt über den faulen hund",
    "Grüße aus Köln — „Anführungszeichen“",
    "ein mann fährt mit dem fahrrad die straße hinunter",
    "zwei hunde spielen im schnee",
    "straße, größe, süß",
    "ärger über öl",
] * 5
RESERVED = list(vocab.RESERVED_PIECES)


@pytest.fixture(scope="module")
def joint_dir(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("joint"))
    Tokenizer.train_or_load(d, SRC, TGT, vocab_size=120)
    return d


def test_reserved_ids_and_files(joint_dir):
    tok = Tokenizer.load(joint_dir)
    assert tok.joint
    assert os.path.isfile(os.path.join(joint_dir, "spm", "joint.model"))
    for side in ("src", "tgt"):
        assert [tok.id_to_piece(i, side) for i in range(vocab.NUM_RESERVED)] == RESERVED
        sp = tok.processor(side)
        assert (sp.pad_id(), sp.bos_id(), sp.eos_id(), sp.unk_id()) == (0, 1, 2, 3)
        assert vocab.NUM_RESERVED < tok.vocab_size(side) <= 120


def test_the_log_says_how_many_pieces_were_trained(tmp_path, caplog):
    """data.vocab_size=8000 on a corpus of 3 pairs gave 349 pieces, and the log said only the model's path. The
    training is announced too: on a WMT-sized corpus it ran for minutes before the first log line of the run."""
    with caplog.at_level("INFO", logger="jaxnat.data.tokenizer"):
        tok = Tokenizer.train_or_load(str(tmp_path), SRC, TGT, vocab_size=8000)
        Tokenizer.train_or_load(str(tmp_path / "separate"), SRC, TGT, vocab_size=100, joint=False)
    path = os.path.join(str(tmp_path), "spm", "joint.model")
    n = len(SRC)
    assert caplog.messages[:3] == [
        f"training SentencePiece model(s) of up to 8000 pieces on {2 * n} joint sentences",
        f"trained SentencePiece model(s) {path} ({tok.vocab_size('src')} pieces) (fewer than data.vocab_size=8000: "
        f"the corpus holds no more)",
        f"training SentencePiece model(s) of up to 100 pieces on {n} src and {n} tgt sentences"]


def test_round_trip(joint_dir):
    tok = Tokenizer.load(joint_dir)
    for side, texts in (("src", SRC), ("tgt", TGT)):
        ids = tok.encode(texts, side)
        assert all(ids_ and min(ids_) >= vocab.NUM_RESERVED for ids_ in ids)  # no UNK, no BOS/EOS
        assert [tok.decode(x, side) for x in ids] == texts
        width = max(map(len, ids)) + 3
        arr = np.zeros((len(ids), width), np.int32)
        for r, x in enumerate(ids):  # BOS x EOS garbage-after-EOS PAD...
            arr[r, : len(x) + 3] = [vocab.BOS_ID, *x, vocab.EOS_ID, ids[0][0]]
        assert tok.decode_batch(arr, side) == texts


def test_decode_drops_special_ids(joint_dir):
    tok = Tokenizer.load(joint_dir)
    x = tok.encode(["two dogs"], "src")[0]
    noisy = [vocab.BOS_ID, vocab.PLH_ID, *x[:1], vocab.MASK_ID, vocab.PAD_ID, *x[1:], vocab.EOS_ID, *x]
    assert tok.decode(noisy, "src") == "two dogs"
    assert tok.decode([vocab.EOS_ID, *x], "src") == ""
    assert tok.decode([*x, tok.vocab_size("src"), -1], "src") == "two dogs"  # out of range, from the first
    # lone "▁" pieces at the ends (a barely trained model writes them) leave no space there, as fairseq's decoding
    space = tok.processor("src").piece_to_id("\u2581")
    assert tok.id_to_piece(space, "src") == "\u2581"
    assert tok.decode([space, *x, space, space], "src") == "two dogs"
    assert tok.decode_batch(np.asarray([[space, *x, space, space]]), "src") == ["two dogs"]


def test_word_start_table(joint_dir):
    tok = Tokenizer.load(joint_dir)
    sent = "the quick brown fox jumps over the lazy dog"
    ids = tok.encode([sent], "src")[0]
    mask = tok.word_start_table("src")[ids].tolist()
    assert len(mask) == len(ids) and mask[0]
    assert sum(mask) == len(sent.split())
    words = []
    for i, start in zip(ids, mask):
        piece = tok.id_to_piece(i, "src")
        if start:
            words.append(piece)
        else:
            words[-1] += piece
    assert [w.lstrip("\u2581") for w in words] == sent.split()
    assert tok.word_start_table("src")[:vocab.NUM_RESERVED].all()  # a reserved piece is a unit of its own


def _model_bytes(workdir) -> bytes:
    return pathlib.Path(workdir, "spm", "joint.model").read_bytes()


def test_deterministic_and_reused(tmp_path, joint_dir):
    d = str(tmp_path / "again")
    Tokenizer.train_or_load(d, SRC, TGT, vocab_size=120)
    assert _model_bytes(joint_dir) == _model_bytes(d)
    # Existing files win over the arguments (resume): nothing is retrained.
    tok = Tokenizer.train_or_load(d, ["completely different"], ["data"], vocab_size=50, model_type="bpe")
    assert _model_bytes(d) == _model_bytes(joint_dir)
    assert tok.vocab_size("src") == Tokenizer.load(joint_dir).vocab_size("src")


def test_copy_models_keeps_a_workdirs_own_vocabulary(tmp_path, joint_dir):
    """A resumed run (spm_from / init_from) keeps the vocabulary its checkpoints were trained with."""
    own, fresh = str(tmp_path / "own"), str(tmp_path / "fresh")
    Tokenizer.train_or_load(own, SRC, TGT, vocab_size=100)
    mine = _model_bytes(own)
    assert mine != _model_bytes(joint_dir) and not Tokenizer.same_models(own, joint_dir)
    Tokenizer.copy_models(joint_dir, own)
    assert _model_bytes(own) == mine
    Tokenizer.copy_models(joint_dir, fresh)
    assert _model_bytes(fresh) == _model_bytes(joint_dir) and Tokenizer.same_models(fresh, joint_dir)
    assert not Tokenizer.same_models(str(tmp_path / "none"), str(tmp_path / "nor"))  # no models: not one vocabulary


def test_subsample_is_seeded_in_order_and_leaves_out_blank_lines():
    from jaxnat.data.tokenizer import _subsample

    texts = [f"s{i}" for i in range(20)] + ["", "  \t"]
    assert _subsample(texts, 0, seed=0) == texts[:20]
    kept = _subsample(texts, 5, seed=0)
    assert len(kept) == 5 and kept == sorted(kept, key=texts.index) and _subsample(texts, 5, seed=0) == kept
    assert _subsample(texts, 5, seed=1) != kept


def test_separate_vocabularies(tmp_path):
    d = str(tmp_path)
    tok = Tokenizer.train_or_load(d, SRC, TGT, vocab_size=100, joint=False, model_type="bpe")
    assert not tok.joint
    assert sorted(os.listdir(os.path.join(d, "spm"))) == ["src.model", "src.vocab", "tgt.model", "tgt.vocab"]
    assert [tok.decode(x, "tgt") for x in tok.encode(TGT, "tgt")] == TGT
    assert [tok.id_to_piece(i, "tgt") for i in range(vocab.NUM_RESERVED)] == RESERVED
    assert not Tokenizer.load(d).joint


def test_errors(tmp_path):
    with pytest.raises(DataError):
        Tokenizer.load(str(tmp_path))
    with pytest.raises(ConfigError):
        Tokenizer.train_or_load(str(tmp_path / "a"), SRC, TGT, vocab_size=100, model_type="wordpiece")
    with pytest.raises(ConfigError, match="character_coverage must be in"):
        Tokenizer.train_or_load(str(tmp_path / "a"), SRC, TGT, vocab_size=100, character_coverage=0.0)
    with pytest.raises(DataError):
        Tokenizer.train_or_load(str(tmp_path / "b"), ["", " "], [""], vocab_size=100)
    os.makedirs(tmp_path / "c" / "spm")
    (tmp_path / "c" / "spm" / "joint.model").write_bytes(b"not a model")
    with pytest.raises(DataError) as e:
        Tokenizer.load(str(tmp_path / "c"))
    assert "joint.model" in str(e.value) and "\n" not in str(e.value)


# emoji, CJK, a combining accent, a zero-width joiner and space, a control character, a right-to-left mark
UNSEEN = ["🦜 términos", "東京都", "cafe\u0301", "a\u200db\u200bc", "tab\tbell\x07", "\u200fשלום"]


def test_byte_fallback_represents_every_text_exactly(tmp_path):
    tok = Tokenizer.train_or_load(str(tmp_path), SRC, TGT, vocab_size=400, byte_fallback=True)
    for text in UNSEEN:
        for side in ("src", "tgt"):
            ids = tok.encode([text], side)[0]
            assert vocab.UNK_ID not in ids and tok.decode(ids, side) == text
            assert tok.unrepresentable(text, side) == []
    # a byte piece spells a character of the word before it: it continues that word
    sp = tok.processor("tgt")
    byte_ids = [i for i in range(sp.get_piece_size()) if sp.is_byte(i)]
    assert len(byte_ids) == 256 and tok.continues_table("tgt")[byte_ids].all()


def test_without_byte_fallback_the_unrepresentable_characters_are_named(joint_dir, tmp_path):
    tok = Tokenizer.load(joint_dir)
    assert tok.unrepresentable("the dog 🦜 東京 dog", "tgt") == ["🦜", "東", "京"]
    assert tok.unrepresentable("the lazy dog", "src") == []
    with pytest.raises(ConfigError, match="data.vocab_size=200 is too small: the corpus's characters and the 256 "
                                          "byte pieces need"):
        Tokenizer.train_or_load(str(tmp_path), SRC, TGT, vocab_size=200, byte_fallback=True)


def test_only_overlong_lines_are_reported(tmp_path):
    """Lines SentencePiece would skip (a corpus without line breaks): named, not its internal check."""
    long_line = " ".join(["word"] * 1000)
    with pytest.raises(DataError, match="every training line is longer than 4192 bytes"):
        Tokenizer.train_or_load(str(tmp_path), [long_line], [long_line], vocab_size=100)


def test_whitespace_the_vocabulary_lacks_reads_as_a_space(joint_dir, tmp_path):
    """Without byte fallback a tab, a no-break or an ideographic space (a copied terminology entry) encodes as the
    space it stands for, not as UNK, and is not reported as unseen; with byte fallback it is kept exactly."""
    tok = Tokenizer.load(joint_dir)
    plain = tok.encode(["the lazy dog"], "tgt")[0]
    for odd in ("\t", "\u00a0", "\u3000", "\u2028", " \t "):
        assert tok.encode([f"the{odd}lazy dog"], "tgt")[0] == plain
        assert tok.unrepresentable(f"the{odd}lazy 🦜", "tgt") == ["🦜"]
    kept = Tokenizer.train_or_load(str(tmp_path), SRC, TGT, vocab_size=400, byte_fallback=True)
    assert kept.decode(kept.encode(["the\u00a0lazy\tdog"], "tgt")[0], "tgt") == "the\u00a0lazy\tdog"
