"""The vocabulary of an imported model (`--mode import`, docs/import.md): its own pieces in jaxnat's id order and
its own segmentation of text into pieces, behind the interface of `jaxnat.data.tokenizer.Tokenizer`.

A workdir's `vocab/` holds `tokenizer.json` ({"segmenter": "spm" | "bpe", "joint": bool (one vocabulary for
both sides, each side still cutting text its own way), "language_codes": bool (Marian's: a leading ">>xx<<" is one
piece), "languages": [the language tokens of a multilingual model: NLLB's "eng_Latn", …], "language_names": {the
codes a user may name them by, where they differ from the tokens: M2M-100's "de" for "__de__"}, "specials": [pieces
never written out: those language tokens, NLLB's "<mask>"], "hugging_face": {"format": "nllb" | "m2m100" | "mbart50" |
"fsmt", "files": the original tokenizer's files, kept as `hf-NAME` for an export}, per side "pieces" and "spm" file
names or the Moses language, "codes", the Moses settings: "dash_splits", "escape", and FSMT's "lowercase" and
"normalize"}), one
`<side>.pieces` file per side (one piece a line, line i = id i: jaxnat's reserved tokens at ids 0..5, then the
model's pieces in its own order) and the segmenter's files:
* "spm": a SentencePiece model per side, used only to cut text into pieces and join pieces into text (its ids are
  not the model's: Marian's `source.spm`/`target.spm` with `vocab.json`, fairseq's `--bpe sentencepiece`);
* "bpe": subword-nmt BPE codes over Moses tokens (fairseq's `--tokenizer moses --bpe subword_nmt`): "@@ " marks a
  piece continued by the next; text out is de-BPE'd and Moses-detokenized.
A piece the vocabulary lacks is UNK, as in the model's own pipeline.
"""

from __future__ import annotations

import json
import os

import numpy as np

from jaxnat.data import vocab
from jaxnat.data.pieces import WORD_BOUNDARY, continues_word, read_sentencepiece
from jaxnat.errors import ConfigError, DataError

SUBDIR = "vocab"


def settings_path(workdir: str) -> str:
    return os.path.join(os.fspath(workdir), SUBDIR, "tokenizer.json")


def exists(workdir: str) -> bool:
    return os.path.isfile(settings_path(workdir))


def check_has_data(config, workdir: str, then: str) -> None:
    """A one-line ConfigError where ``workdir`` holds an imported model and ``config`` reads the embedded synthetic
    corpus: an import records no corpus, so its config.json names jaxnat's default, which its vocabulary does not
    speak. ``then``: what the user does about it."""
    if config.data.source == "synthetic" and exists(workdir):
        raise ConfigError(f"{workdir} holds an imported model, which the embedded synthetic corpus does not speak: "
                          f"{then}")


def write(directory: str, settings: dict, pieces: dict[str, list[str]], files: dict[str, bytes]) -> None:
    """Writes a vocabulary into ``directory`` (a workdir's `vocab/`): settings, the piece lists ({side: pieces},
    reserved ones first) and the segmenter's files ({name: bytes})."""
    os.makedirs(directory, exist_ok=True)
    for name, data in files.items():
        with open(os.path.join(directory, name), "wb") as f:
            f.write(data)
    for side, items in pieces.items():
        if tuple(items[: vocab.NUM_RESERVED]) != vocab.RESERVED_PIECES or any("\n" in p for p in items):
            raise ValueError(f"{side} pieces must start with {vocab.RESERVED_PIECES} and hold no newline")
        with open(os.path.join(directory, f"{side}.pieces"), "w", encoding="utf-8") as f:
            f.write("".join(p + "\n" for p in items))
    sides = {side: {"pieces": f"{side}.pieces", **settings.get(side, {})} for side in ("src", "tgt")}
    with open(os.path.join(directory, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump({**settings, **sides}, f, indent=2, sort_keys=True)


class _Side:
    """One side's pieces and segmenter."""

    def __init__(self, directory: str, settings: dict, side: dict):
        where = lambda name: os.path.join(directory, name)  # noqa: E731
        try:
            with open(where(side["pieces"]), encoding="utf-8") as f:
                self.pieces = f.read().split("\n")[:-1]
        except OSError as e:
            raise DataError(f"{where(side['pieces'])}: unreadable piece list ({e.strerror})") from None
        self.ids = {}
        for i, p in enumerate(self.pieces):
            self.ids.setdefault(p, i)
        self.kind = settings["segmenter"]
        self.language_codes = bool(settings.get("language_codes"))
        if self.kind == "spm":
            self.sp = read_sentencepiece(where(side["spm"]))
        elif self.kind == "bpe":
            from sacremoses import MosesDetokenizer, MosesPunctNormalizer, MosesTokenizer
            from subword_nmt.apply_bpe import BPE

            try:
                with open(where(settings["codes"]), encoding="utf-8") as f:
                    self.bpe = BPE(f)
            except OSError as e:
                raise DataError(f"{where(settings['codes'])}: unreadable BPE codes ({e.strerror})") from None
            self.moses = MosesTokenizer(lang=side["lang"])
            # FSMTTokenizer's steps before Moses: lower case, then its punctuation normalisation
            self.lowercase = settings.get("lowercase", False)
            self.normalizer = None if not settings.get("normalize") else MosesPunctNormalizer(
                lang=side["lang"], pre_replace_unicode_punct=True, post_remove_control_chars=True)
            self.demoses = MosesDetokenizer(lang=side["lang"])
            self.dash_splits, self.escape = settings.get("dash_splits", True), settings.get("escape", True)
        else:
            raise DataError(f"{directory}/tokenizer.json: unknown segmenter {self.kind!r}")

    def cut(self, text: str) -> list[str]:
        if self.kind == "spm":
            code = []
            # Marian's multilingual models read a leading target-language token (">>fra<< ...") as one piece, as
            # MarianTokenizer cuts it (a code the vocabulary lacks is then UNK)
            if self.language_codes and text.startswith(">>") and (end := text.find("<<")) != -1:
                code, text = [text[:end + 2]], text[end + 2:]
            return code + self.sp.encode(text, out_type=str)
        text = text.lower() if self.lowercase else text
        text = self.normalizer.normalize(text) if self.normalizer else text
        tokens = self.moses.tokenize(text, aggressive_dash_splits=self.dash_splits, escape=self.escape,
                                     return_str=True)
        return self.bpe.process_line(tokens).split()

    def join(self, pieces: list[str]) -> str:
        if self.kind == "spm":
            # a joint vocabulary holds pieces the other side's model lacks, which decode_pieces copies with their
            # "▁"; these read as spaces, as MarianTokenizer and fairseq's sentencepiece decoding read them
            return self.sp.decode_pieces(pieces).replace("\u2581", " ").strip()
        text = (" ".join(pieces) + " ").replace("@@ ", "").rstrip()
        return self.demoses.detokenize(text.split())

    def tables(self) -> vocab.PieceTables:
        """`vocab.PieceTables`: SentencePiece's "▁" marks a word's first piece (word_start, continues); a BPE
        piece's word structure lies in the piece before it: one ending in "@@" joins the next onto its word
        (joins), and word_start counts every piece as a word."""
        n = len(self.pieces)
        if self.kind != "spm":
            real = np.arange(n) >= vocab.NUM_RESERVED
            joins = np.array([p.endswith("@@") for p in self.pieces]) & real
            return vocab.PieceTables(np.ones(n, bool), np.zeros(n, bool), joins)
        real = np.arange(n) >= vocab.NUM_RESERVED
        start = np.array([p.startswith(WORD_BOUNDARY) for p in self.pieces]) | ~real
        continues = np.array([continues_word(p) for p in self.pieces]) & real
        return vocab.PieceTables(start, continues)


class PieceTokenizer:
    """`Tokenizer`'s interface over an imported vocabulary (see the module's docstring)."""

    keeps_unknown = "the imported model's vocabulary has no piece for them"

    def __init__(self, workdir: str):
        directory = os.path.dirname(settings_path(workdir))
        try:
            with open(settings_path(workdir), encoding="utf-8") as f:
                settings = json.load(f)
        except (OSError, ValueError, RecursionError) as e:
            raise DataError(f"{settings_path(workdir)}: unreadable ({type(e).__name__})") from None
        if not (isinstance(settings, dict) and all(isinstance(settings.get(side), dict) for side in ("src", "tgt"))):
            raise DataError(f"{settings_path(workdir)}: not the settings an import writes (an object with its src "
                            f"and tgt objects)")
        self.joint = bool(settings.get("joint"))  # one vocabulary (the same ids) for both sides
        self._side = {side: _Side(directory, settings, settings[side]) for side in ("src", "tgt")}
        self._tables = {side: s.tables() for side, s in self._side.items()}
        self.languages = tuple(settings.get("languages", ()))
        self._names = dict(settings.get("language_names", {}))
        # every id of a special piece: the model's own "<mask>" too, beside jaxnat's reserved MASK of that name
        specials = set(settings.get("specials", ()))
        self._dropped = {side: vocab.UNWRITTEN_IDS | {i for i, p in enumerate(s.pieces) if p in specials}
                         for side, s in self._side.items()}

    def language_id(self, code: str, side: str) -> int:
        """The id of the language token ``code`` ("deu_Latn"; or the code it is named by: M2M-100's "de" for "__de__")
        in the ``side`` vocabulary; a one-line DataError for a code the model lacks, or none given."""
        names = tuple(self._names) or self.languages
        known = (f"one of its {len(self.languages)} language {'codes' if self._names else 'tokens'}: "
                 f"{', '.join(names[:4])}{', …' if len(names) > 4 else ''}")
        code = self._names.get(code, code)
        if not code:
            raise DataError(f"the model is multilingual: name the {'source' if side == 'src' else 'target'} language "
                            f"with --config.data.{side}_lang_token or a request's \"{side}_lang\" ({known})")
        if code not in self.languages or code not in self._side[side].ids:
            raise DataError(f"{code!r} is not a language token of the model ({known})")
        return self._side[side].ids[code]

    def vocab_size(self, side: str) -> int:
        return len(self._side[side].pieces)

    def id_to_piece(self, i: int, side: str) -> str:
        return self._side[side].pieces[int(i)]

    def piece_id(self, piece: str, side: str) -> int | None:
        return self._side[side].ids.get(piece)

    def encode(self, texts, side: str) -> list[list[int]]:
        """Piece ids of each text, without BOS/EOS (pieces the vocabulary lacks: UNK)."""
        if isinstance(texts, str):
            raise TypeError("encode takes a list of strings; wrap a single sentence in a list")
        s = self._side[side]
        return [[s.ids.get(p, vocab.UNK_ID) for p in s.cut(t)] for t in texts]

    def unrepresentable(self, text: str, side: str) -> list[str]:
        if vocab.UNK_ID not in self.encode([text], side)[0]:
            return []
        return [c for c in dict.fromkeys(text) if not c.isspace() and vocab.UNK_ID in self.encode([c], side)[0]]

    def decode(self, ids, side: str) -> str:
        """Text of one id sequence: stops at the first EOS, drops the reserved ids but UNK, the special pieces
        (language tokens) and out-of-range ids."""
        s, dropped = self._side[side], self._dropped[side]
        out = []
        for i in np.asarray(ids).reshape(-1).tolist():
            if i == vocab.EOS_ID:
                break
            if i not in dropped and 0 <= i < len(s.pieces):
                out.append(s.pieces[i])
        return s.join(out)

    def decode_batch(self, ids, side: str) -> list[str]:
        return [self.decode(row, side) for row in np.asarray(ids)]

    def piece_tables(self, side: str) -> vocab.PieceTables:
        return self._tables[side]

    def word_start_table(self, side: str) -> np.ndarray:
        return self._tables[side].word_start

    def continues_table(self, side: str) -> np.ndarray:
        return self._tables[side].continues
