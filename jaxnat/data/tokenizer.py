"""SentencePiece tokenization with the reserved ids of `jaxnat.data.vocab`.

Models live in `{workdir}/spm/`: `joint.model` (one vocabulary shared by both sides) or `src.model` +
`tgt.model`. `Tokenizer.train_or_load` trains them once and afterwards always loads what is on disk, so a
resumed run uses exactly the vocabulary its checkpoints were trained with (the files are the truth, whatever
the config now says).

Training is deterministic: the input is subsampled with a seeded numpy generator, SentencePiece's own
generator is seeded, and it runs on one thread (its result depends on the thread count). Normalization is
"identity" by default and every character of the training data is covered, so `decode(encode(x)) == x` for
training sentences up to whitespace (runs of spaces collapse to one; leading/trailing spaces are dropped).
Whitespace other than the space that a vocabulary can only encode as UNK (a tab or a no-break space in a text,
without byte fallback) is read as the space it stands for; with byte fallback it is kept, as byte pieces.
"""

from __future__ import annotations

import io
import logging
import os
import re
from typing import Iterable, Sequence

import numpy as np
import sentencepiece as spm

from jaxnat.data import piece_vocab, vocab
from jaxnat.data.pieces import WORD_BOUNDARY, continues_word, read_sentencepiece
from jaxnat.data.words import unspaced
from jaxnat.errors import ConfigError, DataError
from jaxnat.paths import write_whole

SIDES = ("src", "tgt")
MODEL_TYPES = ("unigram", "bpe", "char", "word")
ODD_SPACE = re.compile(r"[^\S ]")  # whitespace but the space: tab, line breaks, no-break and ideographic spaces, …


def inside_word(ids: list[int], tokenizer, side: str) -> list[int]:
    """A phrase's pieces (``ids``, from ``tokenizer.encode``) as they stand inside text written without spaces:
    without the word boundary SentencePiece puts before a text's first piece ("北京" -> "▁" "北" "京", or
    "▁北京"), which placed inside a Chinese sentence would write a space there. A merged first piece ("▁北京") is
    swapped for its piece without the boundary where the vocabulary has one, else kept (a space before the phrase,
    still the phrase: a Latin word of a joint En-Zh vocabulary, "▁Beijing", often has no other piece)."""
    first = tokenizer.id_to_piece(ids[0], side) if ids else ""
    if not first.startswith(WORD_BOUNDARY):
        return ids
    if first == WORD_BOUNDARY:
        return ids[1:] or ids  # a phrase of the boundary alone stays what it is (an error where it is hard)
    inner = tokenizer.piece_id(first[len(WORD_BOUNDARY):], side)
    return ids if inner is None else [inner, *ids[1:]]


def phrase_encoder(tokenizer, src_lang: str, tgt_lang: str):
    """``encode(texts, side)`` of phrases that stand inside a sentence (constraints, constraint pairs): the
    tokenizer's, in a language written without spaces (`unspaced`) each phrase `inside_word`. One encoding for a
    phrase wherever it goes (a hard constraint, a pair's vectors and the pieces the model may copy from them, the
    piece counts checked against data.max_pair_pieces and a packed row): alone it would carry a word boundary
    its sentence does not have."""
    langs = {"src": src_lang, "tgt": tgt_lang}

    def encode(texts, side: str) -> list[list[int]]:
        ids = tokenizer.encode(list(texts), side)
        return [inside_word(pieces, tokenizer, side) for pieces in ids] if unspaced(langs[side]) else ids

    return encode


SPM_SUBDIR = "spm"

log = logging.getLogger(__name__)


def _check_side(side: str) -> None:
    if side not in SIDES:
        raise ValueError(f"side must be 'src' or 'tgt', got {side!r}")


def _check_reserved(sp: spm.SentencePieceProcessor, where: str) -> None:
    pieces = tuple(sp.id_to_piece(i) for i in range(min(vocab.NUM_RESERVED, sp.get_piece_size())))
    ids = (sp.pad_id(), sp.bos_id(), sp.eos_id(), sp.unk_id())
    expected_ids = (vocab.PAD_ID, vocab.BOS_ID, vocab.EOS_ID, vocab.UNK_ID)
    if pieces != vocab.RESERVED_PIECES or ids != expected_ids:
        raise DataError(
            f"{where}: reserved pieces are {list(pieces)} (pad/bos/eos/unk ids {list(ids)}), expected "
            f"{list(vocab.RESERVED_PIECES)} at ids 0..{vocab.NUM_RESERVED - 1}; delete it to retrain"
        )


def _load_processor(path: str) -> spm.SentencePieceProcessor:
    sp = read_sentencepiece(path)
    _check_reserved(sp, path)
    return sp


MAX_SENTENCE_BYTES = 4192  # SentencePiece's default: longer lines are left out of the vocabulary's training


def _subsample(texts: Sequence[str], max_sentences: int, seed: int) -> list[str]:
    texts = [t for t in texts if t and t.strip()]
    if max_sentences > 0 and len(texts) > max_sentences:
        keep = np.sort(np.random.default_rng([seed, 17]).choice(len(texts), size=max_sentences, replace=False))
        texts = [texts[i] for i in keep]
    return texts


def _train_model(
    sentences: list[str],
    vocab_size: int,
    model_type: str,
    seed: int,
    character_coverage: float,
    normalization: str,
    max_sentences: int,
    where: str,
    byte_fallback: bool = False,
) -> bytes:
    if not sentences:
        raise DataError(f"{where}: no non-empty sentences to train the SentencePiece model on")
    if not any(len(t.encode("utf-8")) <= MAX_SENTENCE_BYTES for t in sentences):
        raise DataError(f"{where}: every training line is longer than {MAX_SENTENCE_BYTES} bytes, which SentencePiece "
                        f"skips (and data.max_len would drop); the files should hold one sentence per line")
    spm.set_random_generator_seed(seed)
    out = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=out,
            vocab_size=vocab_size,
            model_type=model_type,
            pad_id=vocab.PAD_ID,
            bos_id=vocab.BOS_ID,
            eos_id=vocab.EOS_ID,
            unk_id=vocab.UNK_ID,
            pad_piece=vocab.PAD_PIECE,
            bos_piece=vocab.BOS_PIECE,
            eos_piece=vocab.EOS_PIECE,
            unk_piece=vocab.UNK_PIECE,
            user_defined_symbols=[vocab.PLH_PIECE, vocab.MASK_PIECE],
            hard_vocab_limit=False,
            max_sentence_length=MAX_SENTENCE_BYTES,
            byte_fallback=byte_fallback,
            character_coverage=character_coverage,
            normalization_rule_name=normalization,
            input_sentence_size=max_sentences if max_sentences > 0 else 0,
            shuffle_input_sentence=True,
            num_threads=1,
            minloglevel=2,
        )
    except RuntimeError as e:
        if "required_chars" in str(e):  # the characters (and bytes) alone need more entries than vocab_size
            need = str(e).split(" vs ")[-1].split(".")[0]
            raise ConfigError(f"data.vocab_size={vocab_size} is too small: the corpus's characters"
                              f"{' and the 256 byte pieces' if byte_fallback else ''} need {need}; raise it"
                              f"{' or set data.byte_fallback=false' if byte_fallback else ''}") from None
        raise DataError(f"{where}: SentencePiece training failed ({' '.join(str(e).split())})") from None
    return out.getvalue()


def no_language_tokens_named(data) -> None:
    """For a model without language tokens (all but multilingual imports): data.src_lang_token or tgt_lang_token
    set is a one-line DataError, not a setting silently ignored."""
    named = [f"data.{side}_lang_token={data[f'{side}_lang_token']!r}" for side in ("src", "tgt")
             if data[f"{side}_lang_token"]]
    if named:
        raise DataError(f"{' and '.join(named)} set, but this model has no language tokens (multilingual models "
                        f"such as an imported NLLB have)")


class Tokenizer:
    """Encodes text to piece ids and back, for the source and target side (possibly one shared model)."""

    languages: tuple[str, ...] = ()  # a multilingual model's language tokens (imported ones: `piece_vocab`)
    # what keeps the characters `unrepresentable` names, said where a translation meets them
    keeps_unknown = "train with data.byte_fallback=true to keep them"

    def __init__(self, src_sp: spm.SentencePieceProcessor, tgt_sp: spm.SentencePieceProcessor, joint: bool):
        self._sp = {"src": src_sp, "tgt": tgt_sp}
        self.joint = joint
        self._word_start = {side: self._build_word_start_table(sp) for side, sp in self._sp.items()}
        self._continues = {side: self._build_continues_table(sp) for side, sp in self._sp.items()}
        self._space_for = {side: {} for side in self._sp}  # per side: odd whitespace → what encode reads it as

    # ---------------------------------------------------------------- construction

    @staticmethod
    def model_paths(workdir: str) -> dict[str, str]:
        d = os.path.join(os.fspath(workdir), SPM_SUBDIR)
        return {name: os.path.join(d, f"{name}.model") for name in ("joint", "src", "tgt")}

    @classmethod
    def exists(cls, workdir: str) -> bool:
        p = cls.model_paths(workdir)
        return (os.path.isfile(p["joint"]) or (os.path.isfile(p["src"]) and os.path.isfile(p["tgt"]))
                or piece_vocab.exists(workdir))

    @staticmethod
    def _files(workdir: str) -> dict[str, str]:
        """{name: path} of the files that make a workdir's vocabulary: its SentencePiece models, or an imported
        model's `vocab/` (`jaxnat.data.piece_vocab`)."""
        if piece_vocab.exists(workdir):
            d = os.path.dirname(piece_vocab.settings_path(workdir))
            return {os.path.join(piece_vocab.SUBDIR, n): os.path.join(d, n) for n in sorted(os.listdir(d))}
        return {os.path.join(SPM_SUBDIR, f"{n}.model"): p for n, p in Tokenizer.model_paths(workdir).items()
                if os.path.isfile(p)}

    @classmethod
    def copy_models(cls, source: str, workdir: str) -> None:
        """Copies the SentencePiece models of the workdir ``source`` into ``workdir`` (unless it has its own
        already, which then stay: a resumed run keeps its vocabulary). DataError if ``source`` has none."""
        if cls.exists(workdir):
            return
        cls.load(source)  # a readable model there, or a one-line DataError
        files = cls._files(source)
        for name in sorted(files, key=lambda n: n.endswith("tokenizer.json")):  # the file that marks it: last
            os.makedirs(os.path.dirname(os.path.join(os.fspath(workdir), name)), exist_ok=True)
            with open(files[name], "rb") as f:
                write_whole(os.path.join(os.fspath(workdir), name), f.read())

    @classmethod
    def same_models(cls, a: str, b: str) -> bool:
        """Whether the workdirs ``a`` and ``b`` hold byte-identical SentencePiece models (one vocabulary)."""
        def read(workdir):
            out = {}
            for name, path in cls._files(workdir).items():
                with open(path, "rb") as f:
                    out[name] = f.read()
            return out
        return read(a) == read(b) != {}

    @classmethod
    def load(cls, workdir: str) -> "Tokenizer":
        """Loads `{workdir}/spm/joint.model`, else `src.model` + `tgt.model`, else an imported model's vocabulary
        (`piece_vocab.PieceTokenizer`, the same interface); DataError if there is none."""
        if piece_vocab.exists(workdir):
            return piece_vocab.PieceTokenizer(workdir)
        p = cls.model_paths(workdir)
        if os.path.isfile(p["joint"]):
            sp = _load_processor(p["joint"])
            return cls(sp, sp, joint=True)
        if os.path.isfile(p["src"]) and os.path.isfile(p["tgt"]):
            return cls(_load_processor(p["src"]), _load_processor(p["tgt"]), joint=False)
        raise DataError(
            f"{os.path.dirname(p['joint'])}: no SentencePiece model (joint.model, or src.model and tgt.model)"
        )

    @classmethod
    def train_or_load(
        cls,
        workdir: str,
        src_texts: Sequence[str],
        tgt_texts: Sequence[str],
        vocab_size: int,
        joint: bool = True,
        model_type: str = "unigram",
        seed: int = 0,
        character_coverage: float = 1.0,
        normalization: str = "identity",
        max_sentences: int = 1_000_000,
        byte_fallback: bool = False,
    ) -> "Tokenizer":
        """Loads the models in `{workdir}/spm/` if present, else trains them there (deterministically).

        `max_sentences` caps the training sentences per model (a seeded random subset; for a joint model
        the cap applies to src+tgt together). `vocab_size` is a soft limit: a small corpus gives fewer pieces.
        `byte_fallback`: characters outside the vocabulary become UTF-8 byte pieces instead of UNK, so every text
        is represented exactly (256 of the vocabulary's entries are the bytes).
        """
        if cls.exists(workdir):
            tok = cls.load(workdir)
            if tok.joint != joint:
                log.warning(
                    "%s: using the existing %s SentencePiece model(s) although joint=%s was requested",
                    os.path.join(workdir, SPM_SUBDIR), "joint" if tok.joint else "separate", joint,
                )
            return tok
        if model_type not in MODEL_TYPES:
            raise ConfigError(f"tokenizer model_type must be one of {', '.join(MODEL_TYPES)}, got {model_type!r}")
        if not isinstance(vocab_size, (int, np.integer)) or vocab_size <= vocab.NUM_RESERVED:
            raise ConfigError(f"vocab_size must be an integer > {vocab.NUM_RESERVED}, got {vocab_size!r}")
        if not 0.0 < character_coverage <= 1.0:
            raise ConfigError(f"character_coverage must be in (0, 1], got {character_coverage!r}")
        if seed < 0:
            raise ConfigError(f"tokenizer seed must be >= 0, got {seed}")

        p = cls.model_paths(workdir)
        os.makedirs(os.path.dirname(p["joint"]), exist_ok=True)
        common = dict(
            vocab_size=int(vocab_size), model_type=model_type, seed=int(seed),
            character_coverage=character_coverage, normalization=normalization, max_sentences=max_sentences,
            byte_fallback=byte_fallback,
        )
        if joint:
            inputs = {"joint": _subsample(list(src_texts) + list(tgt_texts), max_sentences, seed)}
        else:
            inputs = {"src": _subsample(src_texts, max_sentences, seed),
                      "tgt": _subsample(tgt_texts, max_sentences, seed + 1)}
        # one thread, no progress of its own: on a large corpus the command's longest silence before the first step
        log.info("training SentencePiece model(s) of up to %d pieces on %s sentences", vocab_size,
                 " and ".join(f"{len(s)} {name}" for name, s in inputs.items()))
        models = {name: _train_model(s, where=p[name], **common) for name, s in inputs.items()}
        processors = {}
        for name, proto in models.items():
            sp = spm.SentencePieceProcessor(model_proto=proto)
            _check_reserved(sp, p[name])
            processors[name] = sp
        # Each file is written atomically, and for separate models tgt before src, so that `exists` (which
        # needs both) never sees a half-written pair after a crash.
        for name in sorted(models, reverse=True):
            write_whole(p[name][: -len(".model")] + ".vocab", _vocab_text(processors[name]))
            write_whole(p[name], models[name])
        sizes = {p[n]: processors[n].get_piece_size() for n in models}
        fewer = min(sizes.values()) < vocab_size  # a soft limit: a small corpus has fewer pieces to give
        log.info("trained SentencePiece model(s) %s%s", ", ".join(f"{k} ({v} pieces)" for k, v in sizes.items()),
                 f" (fewer than data.vocab_size={vocab_size}: the corpus holds no more)" if fewer else "")
        return cls.load(workdir)

    # ---------------------------------------------------------------- queries

    def processor(self, side: str) -> spm.SentencePieceProcessor:
        _check_side(side)
        return self._sp[side]

    def vocab_size(self, side: str) -> int:
        """Number of ids of that side (the model's output size), reserved ids included."""
        return self.processor(side).get_piece_size()

    def id_to_piece(self, i: int, side: str) -> str:
        return self.processor(side).id_to_piece(int(i))

    def piece_id(self, piece: str, side: str) -> int | None:
        """The id of ``piece`` in the ``side`` vocabulary, None where it has no such piece."""
        i = self.processor(side).piece_to_id(piece)
        return None if i == vocab.UNK_ID and piece != vocab.UNK_PIECE else i

    # ---------------------------------------------------------------- encode / decode

    def encode(self, texts: Sequence[str], side: str) -> list[list[int]]:
        """Piece ids of each text, without BOS/EOS."""
        if isinstance(texts, str):
            raise TypeError("encode takes a list of strings; wrap a single sentence in a list")
        texts = [self._spaces(t, side) for t in texts]
        if not texts:
            return []
        return self.processor(side).encode(texts, out_type=int)

    def piece_spans(self, texts: Sequence[str], side: str) -> list[list[tuple[int, int]]]:
        """Per text, the characters [start, end) of it that each of its pieces (`encode`'s) stands for; a piece of
        none (SentencePiece's word boundary before a text's first word) (start, start)."""
        sp, out = self.processor(side), []
        for text in texts:
            text = self._spaces(text, side)  # as encoded (a whitespace made a space: one character for one)
            char_at, at = {0: 0}, 0  # SentencePiece's offsets count the text's UTF-8 bytes
            for n, char in enumerate(text, 1):
                at += len(char.encode("utf-8"))
                char_at[at] = n
            out.append([(char_at[p.begin], char_at[p.end]) for p in sp.encode_as_proto(text).pieces])
        return out

    def _spaces(self, text: str, side: str) -> str:
        """``text`` with each whitespace character that the vocabulary can only encode as UNK made a space."""
        if not ODD_SPACE.search(text):
            return text
        known, sp = self._space_for[side], self.processor(side)

        def space(m):
            c = m.group()
            if c not in known:
                known[c] = " " if vocab.UNK_ID in sp.encode(c, out_type=int) else c
            return known[c]
        return ODD_SPACE.sub(space, text)

    def unrepresentable(self, text: str, side: str) -> list[str]:
        """The characters of `text` that this vocabulary can only encode as UNK (none with byte fallback), in
        order of first appearance."""
        sp, text = self.processor(side), self._spaces(text, side)
        if vocab.UNK_ID not in sp.encode(text, out_type=int):
            return []
        return [c for c in dict.fromkeys(text) if vocab.UNK_ID in sp.encode(c, out_type=int)]

    def _clean(self, ids: Iterable[int], n: int) -> list[int]:
        out = []
        for i in ids:
            i = int(i)
            if i == vocab.EOS_ID:
                break
            if i in vocab.UNWRITTEN_IDS or i < 0 or i >= n:
                continue
            out.append(i)
        return out

    def decode(self, ids: Sequence[int] | np.ndarray, side: str) -> str:
        """Text of one id sequence: stops at the first EOS, drops PAD/BOS/PLH/MASK and out-of-range ids.

        UNK is kept and rendered by SentencePiece as " ⁇ ". Spaces at the ends are stripped, as fairseq's and
        transformers' SentencePiece decoding strip them (and jaxnat's of imported vocabularies): a model's lone "▁"
        pieces at the end (a barely trained one writes them) left the text ending in spaces.
        """
        sp = self.processor(side)
        return sp.decode(self._clean(np.asarray(ids).reshape(-1).tolist(), sp.get_piece_size())).strip()

    def decode_batch(self, ids: np.ndarray, side: str) -> list[str]:
        """Texts of the rows of an int array [B, L] (see `decode`)."""
        sp = self.processor(side)
        arr = np.asarray(ids)
        if arr.ndim != 2:
            raise ValueError(f"decode_batch expects a [batch, length] array, got shape {arr.shape}")
        n = sp.get_piece_size()
        rows = [self._clean(row, n) for row in arr.tolist()]
        if not rows:
            return []
        return [text.strip() for text in sp.decode(rows)]

    # ---------------------------------------------------------------- word structure

    @staticmethod
    def _build_word_start_table(sp: spm.SentencePieceProcessor) -> np.ndarray:
        n = sp.get_piece_size()
        table = np.zeros(n, dtype=bool)
        for i in range(n):
            if i < vocab.NUM_RESERVED or sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i):
                table[i] = True
            else:
                table[i] = sp.id_to_piece(i).startswith(WORD_BOUNDARY)
        return table

    @staticmethod
    def _build_continues_table(sp: spm.SentencePieceProcessor) -> np.ndarray:
        table = np.zeros(sp.get_piece_size(), dtype=bool)
        for i in range(vocab.NUM_RESERVED, sp.get_piece_size()):
            if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i)):
                table[i] = sp.is_byte(i) or continues_word(sp.id_to_piece(i))
        return table

    def continues_table(self, side: str) -> np.ndarray:
        """bool[vocab_size]: True for pieces that would extend the word before them (`continues_word`)."""
        _check_side(side)
        return self._continues[side]

    def piece_tables(self, side: str) -> vocab.PieceTables:
        return vocab.PieceTables(self.word_start_table(side), self.continues_table(side))

    def word_start_table(self, side: str) -> np.ndarray:
        """bool[vocab_size]: True for ids that begin a word: a "▁" piece, a reserved, control or unused one. Do not
        modify."""
        _check_side(side)
        return self._word_start[side]


def _vocab_text(sp: spm.SentencePieceProcessor) -> str:
    return "".join(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n" for i in range(sp.get_piece_size()))
