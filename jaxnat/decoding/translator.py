"""Batched translation of raw text with any model: tokenise, bucket into fixed shapes, build each bucket's
`DecodeRequest`, run the model's jit'd `generate`, detokenise, restore the input order.

One compiled program per request shape (bucket, constraint shape, beam, trace); each runs its whole search on
the device. Constraint shapes are rounded up, and a refining model's plain, post-editing and constrained
requests share one shape, so that a test set compiles a few programs, not one per batch or kind of start.
"""

from __future__ import annotations

import logging
import re
import time
import unicodedata
from typing import NamedTuple

import jax
import numpy as np

from jaxnat.data.batching import bucket_lengths, eval_batches
from jaxnat.data.tokenizer import no_language_tokens_named, phrase_encoder
from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID
from jaxnat.decoding import alignment as align_rule
from jaxnat.decoding import mbr as mbr_rule
from jaxnat.decoding import ngram
from jaxnat.decoding.completion import Completion, Spelling
from jaxnat.decoding.request import DecodeRequest, check_supported, pad_hypotheses, pad_phrases
from jaxnat.errors import DataError

log = logging.getLogger("jaxnat")
PROGRESS_SECONDS = 30.0  # a pass over many sentences logs its progress this often


def duration(seconds: float) -> str:
    """A time left as a log line says it: "40 s", "12 min", "3 h 05 min"."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


class Start(NamedTuple):
    """What one sentence asks beyond its source (target piece ids, no BOS/EOS): an initial hypothesis to
    refine, or constraint phrases (hard = guaranteed); for a model that reads them, constraint pairs
    (source phrase, target phrase) as text; the tokens its output starts with: ``prefix``, forced at no cost (a
    multilingual model's target-language token), then ``given``, a start of the translation that the output
    continues (interactive translation; scored as the model's own tokens), and ``partial``, the typed part of the word
    it goes on spelling (`completion`). All None: plain translation."""
    init: list[int] | None = None
    phrases: list[list[int]] | None = None
    hard: bool = False
    pairs: list[tuple[str, str]] | None = None
    prefix: list[int] | None = None
    given: list[int] | None = None
    partial: str | None = None

    def forced(self) -> list[int]:
        """Every token the output starts with: the prefix, then the given start."""
        return [*(self.prefix or ()), *(self.given or ())]

    def pieces(self) -> list[int]:
        """The starting hypothesis a refining model begins from, without BOS/EOS."""
        return self.init if self.init is not None else [t for p in self.phrases or [] for t in p]


def output_row(tokens: np.ndarray) -> np.ndarray:
    """An output row int32[T] [BOS … EOS, PAD …] → its tokens after BOS up to its end (all, without one)."""
    ends = np.flatnonzero((tokens[1:] == EOS_ID) | (tokens[1:] == PAD_ID))
    return tokens[1:1 + (ends[0] if len(ends) else len(tokens) - 1)]


def unmet(phrases: list[list[int]], given: list[int]) -> list[list[int]]:
    """The constraint phrases (piece ids) that ``given``, the start of the output, does not hold already: each phrase,
    in order, is met by its first appearance in ``given`` that overlaps none met before it, and is left out. The
    search places the others after the given start (a phrase can only begin after the forced tokens)."""
    used = [False] * len(given)
    out = []
    for phrase in phrases:
        n = len(phrase)
        at = next((i for i in range(len(given) - n + 1) if given[i:i + n] == phrase and not any(used[i:i + n])), None)
        if at is None:
            out.append(phrase)
        else:
            used[at:at + n] = [True] * n
    return out


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


LISTS = (list, tuple, np.ndarray)  # what `translate` takes as a list


def check_arguments(texts, **per_sentence) -> None:
    """A one-line DataError where `Translator.translate`'s arguments are not what it takes: ``texts`` a list of
    strings, each of ``per_sentence`` (inits, constraints, hard, …) None or a list of one entry per text, each
    sentence's initial hypothesis None or a string and its constraints None or a list of phrases. Unchecked, a string
    is read as its characters (one sentence or phrase each: garbage, silently) and a list of another length is cut
    short or fails deep in the batching."""
    if not isinstance(texts, LISTS):
        raise DataError(f"translate takes a list of texts, got {type(texts).__name__} (one sentence: [text])")
    if bad := [i for i, text in enumerate(texts) if not isinstance(text, str)]:
        raise DataError(f"texts[{bad[0]}] is {type(texts[bad[0]]).__name__}, not a string")
    for name, values in per_sentence.items():
        if values is not None and (not isinstance(values, LISTS) or len(values) != len(texts)):
            got = f"{len(values)}" if isinstance(values, LISTS) else f"a {type(values).__name__}"
            raise DataError(f"{name} takes None or a list of one entry per text ({len(texts)} texts), got {got}")
    for i, init in enumerate(per_sentence.get("inits") or []):  # a list of words would fail deep in the tokenizer
        if init is not None and not isinstance(init, str):
            raise DataError(f"inits[{i}] must be a hypothesis to refine (a string) or None, got {init!r}")
    for i, prefix in enumerate(per_sentence.get("prefixes") or []):
        if prefix is not None and not isinstance(prefix, str):
            raise DataError(f"prefixes[{i}] must be the start of a translation (a string) or None, got {prefix!r}")
    for i, phrases in enumerate(per_sentence.get("constraints") or []):
        if phrases is not None and not (isinstance(phrases, LISTS) and all(isinstance(p, str) for p in phrases)):
            raise DataError(f"constraints[{i}] must be a list of phrases (strings) or None, got {phrases!r}")


class Translator:
    def __init__(self, spec, params, tokenizer, config, aux=None, checkpoint: dict | None = None,
                 members: list | None = None):
        """aux: what the model decodes with beyond its parameters (`Family.aux_run`), or None.
        checkpoint: which checkpoint `params` come from (`restore.params_choice`), reported with the results.
        members: the other models of an ensemble (`request.Member`s: eval.ensemble, `Supports.ensemble`), which every
        request carries (extras['ensemble'])."""
        self.spec, self.params, self.tokenizer, self.config = spec, params, tokenizer, config
        self.aux, self.checkpoint, self.members = aux, checkpoint, list(members or [])
        check_supported(spec.name, spec.supports, ensemble=bool(self.members), lm=bool(config.eval.lm))
        self.lm = None  # eval.lm's tables, which every request carries (extras['lm'])
        if config.eval.lm:
            self.lm = ngram.read_arpa(config.eval.lm, [tokenizer.id_to_piece(i, "tgt")
                                                       for i in range(tokenizer.vocab_size("tgt"))])
            log.info("language model: %s, order %d", config.eval.lm, self.lm.order)
        self.max_len = config.data.max_len
        d = config.data
        self.encode_phrases = phrase_encoder(tokenizer, d.src_lang, d.tgt_lang)  # constraints and pairs' phrases
        self.buckets = bucket_lengths(self.max_len, growth=d.bucket_growth, multiple=d.bucket_multiple)
        self._generate = jax.jit(spec.generate)
        self._plan = jax.jit(spec.plan) if spec.plan is not None else None
        self._score = jax.jit(spec.score) if spec.score is not None else None
        self._align = jax.jit(spec.align) if spec.align is not None else None
        self._token_scores: bool | None = None  # whether spec.score gives per-piece scores (`check_token_scores`)
        # a model with a plan (length prediction): outputs as wide as the planned lengths need (`planned`);
        # False: as wide as the source allows (bench/decode_speed.py --full-canvas)
        self.narrow_outputs = True
        self._compiled: set = set()  # the request shapes `_generate` has run (`translate_ids`'s warm_up)
        # a batch of fewer sentences than the batch size decodes as many rows as a power of two holds them
        # (`eval_batches`' fit_rows), not the batch size: a server's requests of a sentence or a few (`serve`)
        self.fit_rows = False
        self._spelling: Spelling | None = None  # `spelling`

    def language_tokens(self, langs: list | None, side: str, n: int) -> list[list[int]]:
        """Per sentence, the ``side``'s language token of a multilingual model (NLLB's "deu_Latn"): the request's own
        (``langs[i]``), else the config's data.src_lang_token / tgt_lang_token, as a one-id list; [] each for a model
        without language tokens (a request that names a language is then an error)."""
        if not self.tokenizer.languages:
            if langs and any(lang is not None for lang in langs):
                raise DataError(f"\"{side}_lang\" names a language token; this model has none (multilingual "
                                f"models such as an imported NLLB have)")
            no_language_tokens_named(self.config.data)
            return [[]] * n
        default = self.config.data[f"{side}_lang_token"]
        return [[self.tokenizer.language_id(lang or default, side)] for lang in langs or [None] * n]

    def encode(self, texts: list[str], langs: list | None = None) -> tuple[list[np.ndarray], list[bool]]:
        """Source texts -> [BOS … EOS] id arrays (cut to data.max_len; a multilingual model's source-language token
        first, `language_tokens`) and, per text, whether it was cut."""
        out, cut = [], []
        codes = self.language_tokens(langs, "src", len(texts))
        room = self.source_room()
        for ids, code in zip(self.tokenizer.encode(texts, "src"), codes):
            cut.append(len(ids) > room)
            out.append(np.asarray([BOS_ID, *code, *ids[:room], EOS_ID], np.int32))
        return out, cut

    def source_room(self) -> int:
        """The source pieces a sentence keeps: data.max_len counts BOS, EOS and a multilingual model's language
        token (`language_tokens`: one a sentence where the tokenizer has languages)."""
        return self.max_len - 2 - bool(self.tokenizer.languages)

    def input_notes(self, texts: list[str], cut: list[bool], inits: list | None, constraints: list | None,
                    hard: list | None, pairs: list | None = None) -> list[dict]:
        """Per sentence, what the model could not take as written, for the output and a warning: the source
        cut to data.max_len ('source_truncated'), characters of the source, an initial hypothesis, soft
        constraints or constraint pairs (source and target phrase) that the vocabulary holds only as UNK
        ('unknown_characters'). (Hard constraints with such characters are refused by `starts`.)"""
        n = len(texts)
        inits, constraints, hard = inits or [None] * n, constraints or [None] * n, hard or [False] * n
        pairs = pairs or [None] * n
        notes = []
        for text, was_cut, init, phrases, is_hard, sentence_pairs in zip(texts, cut, inits, constraints, hard,
                                                                          pairs):
            chars = self.tokenizer.unrepresentable(text, "src")
            for target_text in ([init] if init is not None else []) + ([] if is_hard else list(phrases or [])):
                chars += self.tokenizer.unrepresentable(target_text, "tgt")
            for pair in sentence_pairs or []:
                chars += [c for side, phrase in zip(("src", "tgt"), pair)
                          for c in self.tokenizer.unrepresentable(phrase, side)]
            note = {"source_truncated": True} if was_cut else {}
            if chars:
                note["unknown_characters"] = "".join(dict.fromkeys(chars))
            notes.append(note)
        if any(cut):  # in pieces: a source of data.max_len - 1 pieces is cut too
            log.warning("%d of %d sources are longer than data.max_len=%d tokens with BOS and EOS (%d pieces) and were "
                        "cut (marked \"source_truncated\" in the output)", sum(cut), n, self.max_len,
                        self.source_room())
        unknown = sum("unknown_characters" in note for note in notes)
        if unknown:
            log.warning("%d of %d sentences have characters the vocabulary holds only as UNK (marked "
                        "\"unknown_characters\" in the output; %s)", unknown, n, self.tokenizer.keeps_unknown)
        return notes

    def starts(self, inits: list | None = None, constraints: list | None = None,
               hard: list | None = None, cut_long_inits: bool = False, pairs: list | None = None,
               drop_long_pairs: bool = False, tgt_langs: list | None = None,
               prefixes: list | None = None) -> list[Start]:
        """Per sentence, what it asks beyond the source, tokenised (`start`, whose errors name the sentence; each in
        the output language ``tgt_langs`` names for it, if any); checks the model can honour it."""
        n = len(next(x for x in (inits, constraints, pairs, prefixes, []) if x is not None))
        inits, constraints, hard = inits or [None] * n, constraints or [None] * n, hard or [False] * n
        pairs, tgt_langs, prefixes = pairs or [None] * n, tgt_langs or [None] * n, prefixes or [None] * n
        out = []
        for i, (*asked, lang, given) in enumerate(zip(inits, constraints, hard, pairs, tgt_langs, prefixes)):
            try:
                out.append(self.start(*asked, cut_long_inits=cut_long_inits, drop_long_pairs=drop_long_pairs,
                                      tgt_lang=lang, given=given))
            except DataError as e:
                raise DataError(f"sentence {i + 1}: {e}") from None
        check_supported(self.spec.name, self.spec.supports, init=any(s.init is not None for s in out),
                        soft=any(s.phrases and not s.hard for s in out), hard=any(s.phrases and s.hard for s in out),
                        pairs=any(s.pairs for s in out), prefix=any(s.given or s.partial for s in out))
        return out

    def start(self, init: str | None = None, phrases: list | None = None, is_hard: bool = False,
              pairs: list | None = None, cut_long_inits: bool = False, drop_long_pairs: bool = False,
              tgt_lang: str | None = None, given: str | None = None) -> Start:
        """What one sentence asks beyond its source, tokenised; a one-line DataError (naming no sentence) where it
        does not fit the model.

        init: a target-side text to refine (post-editing), or None. phrases: a list of phrases, or None; with
        is_hard they must appear in the output (else they are soft: a starting point). A sentence takes an initial
        hypothesis or constraints, not both. A start longer than the model's maximum length (BOS/EOS included) is
        an error, or with ``cut_long_inits`` an initial hypothesis is cut to fit. pairs: (source phrase, target
        phrase) pairs, or None; more than data.max_pairs, or a phrase longer than data.max_pair_pieces pieces, is
        an error, or with ``drop_long_pairs`` such pairs are left out. tgt_lang: the output's language where a
        request names it (a multilingual model's code, "zho_Hans"), else data.tgt_lang's: it decides how phrases
        are encoded (`phrase_encoder`). given: a start of the translation (target text), which the output continues, or
        None: its words are forced, but a last one of letters and digits after a space, which the output goes on
        spelling (`completion`); hard constraints it holds already are met (`unmet`).
        """
        room = self.spec.cfg.max_len - 2
        if init is not None and phrases:
            raise DataError("give either an initial hypothesis or constraints, not both")
        if init is not None:
            ids = self.tokenizer.encode([init], "tgt")[0]
            out = Start(init=ids[:room] if cut_long_inits else ids)
        elif phrases:
            limit = self.spec.supports.max_phrases
            if limit and len(phrases) > limit:
                raise DataError(f"{len(phrases)} constraint phrases; model {self.spec.name!r} takes at most {limit}")
            for phrase in phrases if is_hard else []:  # a guaranteed constraint is never changed
                if chars := self.tokenizer.unrepresentable(phrase, "tgt"):
                    raise DataError(f"the hard constraint {phrase!r} has characters the model's vocabulary cannot "
                                    f"represent ({''.join(chars)}): it could only write them as UNK")
            encode = self.encode_phrases if tgt_lang is None else phrase_encoder(
                self.tokenizer, self.config.data.src_lang, tgt_lang)
            ids = encode(phrases, "tgt")
            for phrase, pieces in zip(phrases, ids if is_hard else []):
                if not pieces:  # "▁", SentencePiece's own space mark, encodes to nothing: it could never appear
                    raise DataError(f"the hard constraint {phrase!r} is no text to the model's vocabulary (it encodes "
                                    f"to no pieces): it could never appear in the output")
            out = Start(phrases=ids, hard=bool(is_hard))
        else:
            out = Start()
        if given is not None and given.strip():
            check_supported(self.spec.name, self.spec.supports, prefix=True)
            # a last word of letters and digits after a space may be typed in part: the output goes on spelling it
            typed = re.search(r"(?:^|(?<=\s))\w+$", given)
            whole = given[:typed.start()] if typed else given
            if chars := self.tokenizer.unrepresentable(whole, "tgt"):
                raise DataError(f"the prefix {given!r} has characters the model's vocabulary cannot represent "
                                f"({''.join(chars)}): the output would start with UNK")
            partial = unicodedata.normalize("NFKC", typed.group()) if typed else ""
            if partial and self.spelling().automaton(partial) is None:
                raise DataError(f"the prefix {given!r} ends in {typed.group()!r}, which starts no word the model's "
                                f"vocabulary can spell")
            ids = self.tokenizer.encode([whole], "tgt")[0] if whole.strip() else []
            out = out._replace(given=ids or None, partial=partial or None,
                               phrases=unmet(out.phrases, ids) if out.hard else out.phrases)
            if (out.given or out.partial) and out.phrases and self.config.eval.search_rules == "fairseq":
                raise DataError("a prefix with constraints under eval.search_rules=fairseq: fairseq's constrained beam "
                                "search loses every hypothesis to a forced prefix (0.12.2 stops on an assertion); "
                                "jaxnat's rules continue it")
            room -= bool(self.tokenizer.languages)  # the forced target-language token before it
        if (count := len(out.pieces()) + len(out.given or ()) + self.typed_pieces(out.partial)) > room:
            what = " and ".join(name for name, asked in (("initial hypothesis", init is not None),
                                                         ("prefix", out.given or out.partial),
                                                         ("constraint set", out.phrases))
                                if asked)
            raise DataError(f"the {what} {'have' if ' and ' in what else 'has'} {count} target pieces, more than the "
                            f"{room} the model can hold (model.max_len {self.spec.cfg.max_len} with BOS/EOS)")
        if pairs:
            out = out._replace(pairs=[tuple(p) for p in pairs])
            if not drop_long_pairs:
                self.check_pairs(out.pairs)
        return out

    def check_pairs(self, pairs: list[tuple[str, str]]) -> None:
        """A one-line DataError (naming no sentence) when one sentence's pairs do not fit the model's pair shape."""
        d = self.config.data
        if len(pairs) > d.max_pairs:
            raise DataError(f"{len(pairs)} constraint pairs; the model takes at most data.max_pairs={d.max_pairs}")
        for side, text in ((side, text) for pair in pairs for side, text in zip(("src", "tgt"), pair)):
            pieces = len(self.encode_phrases([text], side)[0])
            if pieces > d.max_pair_pieces:
                raise DataError(f"the constraint pair phrase {text!r} has more than "
                                f"data.max_pair_pieces={d.max_pair_pieces} pieces")
            if not pieces:  # "▁", SentencePiece's space mark: the model reads a pair without a source phrase as none
                raise DataError(f"the constraint pair phrase {text!r} is no text to the model's vocabulary (it "
                                f"encodes to no pieces): a pair needs both phrases")

    def output_capacity(self, src_len: int) -> int:
        """Static output length (BOS and EOS included) for sources padded to src_len."""
        return self.spec.capacity(src_len)

    def request(self, src: np.ndarray, starts: list[Start], beam_size: int, trace: bool) -> DecodeRequest:
        """The request for one bucket: src int32[B, S]; starts: one per row (filler rows: Start()).

        A model that takes every kind of start (the refining models) gets the same request shape whatever the
        rows ask — initial hypotheses as wide as the output, constraints at least 4 phrases × 8 pieces (a
        term of a word or two), PAD where a row has none (which starts it from [BOS, EOS]) — so that plain,
        post-editing and constrained decoding of a bucket share one compiled program. Other models get only what
        the rows ask for. Constraint shapes are rounded up to multiples of 4, the phrase count of a model that
        bounds it (`Supports.max_phrases`) to a power of two.
        """
        sup = self.spec.supports
        uniform = sup.init and sup.soft_constraints and sup.hard_constraints
        # `starts` checked it fits the model
        needed = max(len(s.pieces()) + len(s.forced()) + self.typed_pieces(s.partial) for s in starts) + 2
        capacity = min(max(self.output_capacity(src.shape[1]), _round_up(needed, 8)), self.spec.cfg.max_len)
        init = constraints = hard = prefix = free = None
        if any(s.forced() for s in starts):
            prefix = pad_phrases([[s.forced()] if s.forced() else None for s in starts])[:, 0]
            prefix = np.pad(prefix, ((0, 0), (0, -prefix.shape[1] % 8)))  # (PAD: a few shapes for every prefix)
            if any(s.given for s in starts):
                free = np.asarray([len(s.prefix or ()) for s in starts], np.int32)
        completion = None
        if any(s.partial for s in starts):
            completion = Completion.of([s.partial for s in starts], [len(s.forced()) for s in starts],
                                       self.spelling())
        if uniform or any(s.init is not None for s in starts):
            init = pad_hypotheses([s.init for s in starts], capacity)
        if uniform or any(s.phrases for s in starts):
            phrases = pad_phrases([s.phrases for s in starts])
            c, p = phrases.shape[1:]
            least = 8 if uniform else 0
            # a model that bounds the phrases a sentence searches over the sets of phrases done (2^C states): C is
            # padded to a power of two, so that one or two phrases cost what they are (shapes 1, 2, 4, …)
            rounded = _round_up(c, 4) if uniform or not sup.max_phrases else min(1 << (c - 1).bit_length(),
                                                                                  sup.max_phrases)
            constraints = np.pad(phrases, ((0, 0), (0, rounded - c), (0, max(_round_up(p, 4), least) - p)))
            hard = np.asarray([s.hard for s in starts], bool)
        extras = self.spec.request_extras(self, starts) if self.spec.request_extras else {}
        if self.members:
            extras["ensemble"] = tuple(self.members)
        if self.lm is not None:
            extras["lm"] = self.lm
        return DecodeRequest(src, init, constraints, hard, extras, prefix=prefix, prefix_free=free,
                             completion=completion, max_out=capacity, beam_size=beam_size, trace=trace)

    def spelling(self) -> Spelling:
        """The target vocabulary's pieces as text (`completion.Spelling`), read at the first typed word."""
        if self._spelling is None:
            self._spelling = Spelling.of(self.tokenizer)
        return self._spelling

    def typed_pieces(self, partial: str | None) -> int:
        """The most pieces spelling a word typed in part takes (`Spelling.most_pieces`; 0 without one)."""
        return self.spelling().most_pieces(partial) if partial else 0

    def planned(self, request: DecodeRequest) -> DecodeRequest:
        """The request with the model's plan (`ModelSpec.plan`) and an output only as wide as its longest row
        needs: the narrowest bucket length that holds it, or the full capacity. The same translations as on the
        full width, at less cost (a length-predicting model's canvases are otherwise sized for the longest
        output its source allows, about twice what it predicts), for a few more compiled widths."""
        lengths, state = self._plan(self.params, request)
        width = self.bucket_width(int(np.max(jax.device_get(lengths))) + 2, request.max_out)
        return request.replace(extras={**request.extras, "plan": (lengths, state)}, max_out=width)

    def bucket_width(self, needed: int, cap: int) -> int:
        """The narrowest bucket length that holds ``needed`` positions, else ``cap``: a batch's varying widths
        take a few shapes, so a few compiled programs."""
        return min([b for b in self.buckets if b >= needed] + [cap])

    def prefixed(self, starts: list[Start] | None, n: int) -> list[Start]:
        """The ``n`` sentences' starts (None: plain) with a multilingual model's target-language token as the prefix
        of those that name none (data.tgt_lang_token's), checked the model takes them."""
        starts = starts or [Start()] * n
        if self.tokenizer.languages and not all(s.prefix for s in starts):
            code = self.language_tokens(None, "tgt", 1)[0]
            starts = [s if s.prefix else s._replace(prefix=code) for s in starts]
        check_supported(self.spec.name, self.spec.supports, prefix=any(s.forced() for s in starts))
        return starts

    def translate_ids(self, src: list[np.ndarray], beam_size: int, batch_size: int,
                      starts: list[Start] | None = None, trace: bool = False,
                      references: list[list[int]] | None = None, oracle: str = "", warm_up: bool = False,
                      label: str = "", nbest: int = 1) -> list[dict]:
        """[BOS … EOS] source arrays -> per sentence {'tokens': np.int32 array, 'score': float, and the model's
        counts (refining models: iterations and edit counts; with ``trace`` the edit trace)} in input order.
        oracle: decoding steps an oracle takes against ``references`` (target piece ids, no BOS/EOS), one of the
        model's `Supports.oracle` modes: an analysis of what the model's own decisions cost, not a translation.
        warm_up: only compile and run each request shape not run before, the sentences of the other batches left
        None (a timing's warm-up: after an evaluation's own pass at the same batch size, nothing to run).
        label: which pass this is (an evaluation's row, "test+hard"), named in its progress lines. nbest: also each
        sentence's nbest best outputs, 'nbest_tokens' and 'nbest_score' (`Supports.nbest`)."""
        check_supported(self.spec.name, self.spec.supports, trace=trace, beam_size=beam_size, oracle=oracle,
                        nbest=nbest)
        if oracle and references is None:
            raise DataError(f"oracle decoding {oracle!r} needs the references")
        starts = self.prefixed(starts, len(src))
        results: list[dict | None] = [None] * len(src)
        started = reported = time.perf_counter()
        # the time left by the pieces done, not the sentences: the batches come shortest first
        done, pieces_done, pieces = 0, 0, sum(len(s) for s in src)
        for idx, batch in eval_batches(src, None, batch_size, self.buckets, fit_rows=self.fit_rows):
            request = self.request(batch["src"], [starts[i] if i >= 0 else Start() for i in idx], beam_size, trace)
            request = request.replace(nbest=nbest)
            if oracle:
                rows = [references[i][:self.spec.cfg.max_len - 2] if i >= 0 else None for i in idx]
                width = self.bucket_width(max(len(r) for r in rows if r is not None) + 2, self.spec.cfg.max_len)
                request = request.replace(reference=pad_hypotheses(rows, width), oracle=oracle)
            if self._plan is not None and self.narrow_outputs:
                request = self.planned(request)
            leaves, structure = jax.tree_util.tree_flatten(request)
            shape = (structure, tuple((np.shape(x), getattr(x, "dtype", type(x))) for x in leaves))
            if warm_up and shape in self._compiled:
                continue
            self._compiled.add(shape)
            out = jax.device_get(self._generate(self.params, request))
            for row, i in enumerate(idx):
                if i >= 0:
                    results[i] = {k: v[row] for k, v in out.items()}
            done += sum(i >= 0 for i in idx)
            pieces_done += sum(len(src[i]) for i in idx if i >= 0)
            now = time.perf_counter()
            if now - reported >= PROGRESS_SECONDS and done < len(src):  # a long pass says how far it is
                left = (now - started) * (pieces - pieces_done) / max(pieces_done, 1)
                log.info("%stranslated %d of %d sentences in %.0f s, about %s left", f"{label}: " if label else "",
                         done, len(src), now - started, duration(left))
                reported = now
        return results

    def translate(self, texts: list[str], beam_size: int | None = None, batch_size: int | None = None,
                  inits: list | None = None, constraints: list | None = None, hard: list | None = None,
                  cut_long_inits: bool = False, pairs: list | None = None,
                  drop_long_pairs: bool = False, references: list[str] | None = None,
                  oracle: str = "", token_scores: bool = False, src_langs: list | None = None,
                  tgt_langs: list | None = None, label: str = "", nbest: int = 1, mbr: str = "",
                  alignment: str = "", prefixes: list | None = None) -> list[dict]:
        """Texts -> [{'hyp': str, 'score': float, and the model's counts}] in input order (`starts` for the
        other arguments, `translate_ids` for ``oracle`` with the target-side ``references`` and for ``label``; beam
        and batch size default to the config's eval.beam_size and eval.batch_size; src_langs, tgt_langs: per text a
        multilingual model's language tokens or None, `language_tokens`). With ``token_scores`` also the output's
        pieces without BOS/EOS (and a forced language token), 'piece_ids': [int], with 'token_logp': [float] and
        'token_scored': [bool] for each (`ModelSpec.generate`), for calibration. With ``nbest`` > 1 (a model that keeps
        several outputs, `Supports.nbest`; at most the beam size) also 'nbest': the sentence's best outputs, best first,
        [{'hyp', 'score'}], as many as the search finished up to nbest (the first is 'hyp' and 'score'). With ``mbr``
        (a utility of `mbr.UTILITIES`; a model that keeps several outputs, a beam of two at least), 'hyp' and 'score'
        are those of the output of highest expected utility among the beam's (`mbr.choose`), 'mbr_utility' that
        utility (the lists keep the model's order). With ``alignment`` (`alignment.KINDS`; a model that aligns,
        `Supports.align`) also the word alignment of 'hyp' and its source (`alignment.fields`: 'alignment', and
        'src_pieces' and 'pieces' where it counts pieces). ``prefixes``: per text a start of its translation (None or
        "": none; a last word typed in part is spelt on, `start`) that its output continues, as the model would have
        continued it (interactive translation; `Supports.prefix`): 'hyp' holds it, and 'score' counts its pieces'
        log-probabilities too."""
        check_arguments(texts, inits=inits, constraints=constraints, hard=hard, pairs=pairs, references=references,
                        src_langs=src_langs, tgt_langs=tgt_langs, prefixes=prefixes)
        self.check_alignment(alignment)
        beam_size = self.config.eval.beam_size if beam_size is None else beam_size
        batch_size = self.config.eval.batch_size if batch_size is None else batch_size
        if nbest > beam_size:  # (the search refuses it too, but after the texts are encoded)
            raise DataError(f"an n-best list of {nbest} needs a beam of at least {nbest} (beam size {beam_size}): the "
                            f"search keeps as many finished outputs as it has beams")
        if mbr and (beam_size < 2 or token_scores or mbr not in mbr_rule.UTILITIES):
            raise DataError(f"MBR decoding ({mbr!r}) needs a utility of {', '.join(mbr_rule.UTILITIES)}, a beam of "
                            f"two at least (beam size {beam_size}), and no token scores (they are the model's best "
                            f"output's)")
        src, cut = self.encode(texts, src_langs)
        starts = None
        if inits or constraints or pairs or prefixes:
            starts = self.starts(inits, constraints, hard, cut_long_inits, pairs, drop_long_pairs, tgt_langs, prefixes)
        if tgt_langs and any(lang is not None for lang in tgt_langs):
            codes = self.language_tokens(tgt_langs, "tgt", len(texts))
            starts = [s._replace(prefix=code) for s, code in zip(starts or [Start()] * len(texts), codes)]
        notes = self.input_notes(texts, cut, inits, constraints, hard, pairs)
        ref_ids = self.tokenizer.encode(list(references), "tgt") if references is not None else None
        listed = beam_size if mbr else nbest  # MBR chooses among the whole beam
        outs = self.translate_ids(src, beam_size, batch_size, starts, references=ref_ids, oracle=oracle, label=label,
                                  nbest=listed)
        if unscored := sum(not np.isfinite(o["score"]) for o in outs):  # else silently empty hypotheses
            log.warning("%d of %d sentences got no output with a finite score (null in translate's output): hard "
                        "constraints the search could not meet, or a model whose computation overflows (a diverged "
                        "run)", unscored, len(outs))
        results, chosen = [], []  # chosen: each 'hyp''s tokens
        chooser = self.mbr_chooser(len(outs), label, mbr) if mbr else None
        for o, note in zip(outs, notes):
            r = {"hyp": self.tokenizer.decode(list(o["tokens"]), "tgt"), "score": float(o["score"])}
            r.update({k: int(o[k]) for k in self.spec.supports.counts})
            chosen.append(o["tokens"])
            if listed > 1:
                kept = [k for k, score in enumerate(o["nbest_score"]) if np.isfinite(score)]
                candidates = [{"hyp": self.tokenizer.decode(list(o["nbest_tokens"][k]), "tgt"),
                               "score": float(o["nbest_score"][k])} for k in kept]
                if chooser is not None and candidates:
                    best, fields = chooser(candidates)
                    r.update(fields)
                    chosen[-1] = o["nbest_tokens"][kept[best]]
                if nbest > 1:
                    r["nbest"] = candidates[:nbest]
            if token_scores:
                tokens = np.asarray(o["tokens"])
                real = self.translation_pieces(tokens)
                r.update(piece_ids=tokens[real].tolist(), token_logp=np.asarray(o["token_logp"])[real].tolist(),
                         token_scored=np.asarray(o["token_scored"])[real].tolist())
            results.append({**r, **note})
        if alignment:
            rows = [list(map(int, output_row(tokens))) for tokens in chosen]
            lead = [int(bool(self.tokenizer.languages))] * len(rows)  # the forced target-language token
            for r, fields in zip(results, self.alignments(alignment, texts, src, rows, lead, starts, batch_size)):
                r.update(fields)
        return results

    def check_alignment(self, kind: str) -> None:
        """A one-line DataError where ``kind`` is no alignment kind, or the model gives no alignments."""
        if kind and kind not in align_rule.KINDS:
            raise DataError(f"alignment {kind!r} is none of {', '.join(align_rule.KINDS)}")
        check_supported(self.spec.name, self.spec.supports, align=bool(kind))

    def forced(self, fn, src: list[np.ndarray], rows: list[list[int]], starts: list[Start], batch_size: int):
        """Yields (sentence, its row of ``fn``'s outputs) for the sentences whose output rows fit the model: fn one of
        `ModelSpec`'s functions of given outputs (score, align) taking (params, request, tgt int32[B, T] [BOS, row,
        EOS] rows); src: [BOS … EOS] source arrays; rows: per sentence its given output's tokens (a prefix's
        included); starts: each sentence's `Start` (prefixed)."""
        todo = [i for i, row in enumerate(rows) if len(row) + 2 <= self.spec.cfg.max_len]
        for idx, batch in eval_batches([src[i] for i in todo], None, batch_size, self.buckets, fit_rows=self.fit_rows):
            kept = [todo[i] if i >= 0 else -1 for i in idx]
            request = self.request(batch["src"], [starts[i] if i >= 0 else Start() for i in kept], 1, False)
            longest = max(len(rows[i]) for i in kept if i >= 0) + 2
            tgt_rows = pad_hypotheses([rows[i] if i >= 0 else [] for i in kept], self.bucket_width(longest, longest))
            out = jax.device_get(fn(self.params, request, tgt_rows))
            for row, i in enumerate(kept):
                if i >= 0:
                    yield i, jax.tree_util.tree_map(lambda v: v[row], out)

    def alignments(self, kind: str, texts: list[str], src: list[np.ndarray], rows: list[list[int]], lead: list[int],
                   starts: list[Start] | None, batch_size: int) -> list[dict]:
        """Per sentence the fields of its alignment ``kind`` (`alignment.fields`; {'alignment': None} where its
        output does not fit the model): the source ``texts`` and their arrays as `encode` gives them; rows: each
        output's tokens after BOS, its end left out, ``lead`` of them a prefix that is no translation (a forced
        target-language token)."""
        starts = self.prefixed(starts, len(src))
        out = [{"alignment": None} for _ in src]
        first = 1 + bool(self.tokenizer.languages)  # the source's first piece, after BOS and a language token
        for i, attention in self.forced(self._align, src, rows, starts, batch_size):
            seen = attention[lead[i]:len(rows[i]) + 1, first:len(src[i])]  # the translation's and end's rows
            out[i] = align_rule.fields(kind, seen, texts[i], src[i][first:-1].tolist(), rows[i][lead[i]:],
                                       self.tokenizer)
        return out

    def score_ids(self, src: list[np.ndarray], tgt: list[list[int]], batch_size: int,
                  starts: list[Start] | None = None, token_scores: bool = False) -> list[dict]:
        """Forced decoding: [BOS … EOS] source arrays and their given translations' target piece ids (no BOS/EOS) →
        per sentence {'logp': float, log P(translation | source) under the model, 'score': float, the score the
        model's search gives that output} (`ModelSpec.score`), in input order; None for both where the translation
        and its prefix (``starts``' language token) would not fit the model's max_len. With ``token_scores`` also
        'token_logp': [float], the log-probability of each piece and of the end (a left-to-right model's)."""
        check_supported(self.spec.name, self.spec.supports, score=True)
        starts = self.prefixed(starts, len(src))
        if token_scores:
            self.check_token_scores()
        rows = [[*(s.prefix or ()), *ids] for s, ids in zip(starts, tgt)]
        results: list[dict] = [{"logp": None, "score": None, **({"token_logp": None} if token_scores else {})}
                               for _ in src]
        for i, out in self.forced(self._score, src, rows, starts, batch_size):
            results[i] = {"logp": float(out["logp"]), "score": float(out["score"])}
            if token_scores:  # the translation's pieces and its end, after the prefix
                first = len(starts[i].prefix or ())
                results[i]["token_logp"] = out["token_logp"][first:len(rows[i]) + 1].tolist()
        return results

    def check_token_scores(self) -> None:
        """A one-line DataError where the model's forced decoding has no per-piece log-probabilities (a sum over
        alignments or paths, a length's probability: `ModelSpec.score`), found by tracing it on a one-sentence
        request, once (`--mode score` asks at every chunk of its input)."""
        if self._token_scores is None:
            request = self.request(np.asarray([[BOS_ID, EOS_ID]], np.int32), [Start()], 1, False)
            self._token_scores = "token_logp" in jax.eval_shape(self.spec.score, self.params, request,
                                                                np.asarray([[BOS_ID, EOS_ID]], np.int32))
        if not self._token_scores:
            raise DataError(f"model {self.spec.name!r} scores whole translations only: its probability is no product "
                            f"of each piece's given the pieces before it (a sum over alignments, or a length's "
                            f"probability times the pieces'), as the left-to-right models' is")

    def score(self, texts: list[str], targets: list[str], batch_size: int | None = None, pairs: list | None = None,
              src_langs: list | None = None, tgt_langs: list | None = None, token_scores: bool = False,
              alignment: str = "") -> list[dict]:
        """Given translations scored (`score_ids`): texts and their translations ``targets`` → [{'logp', 'score',
        'length': the translation's target pieces and its end, and `input_notes`' notes}], in input order, with
        'target_too_long' where a translation does not fit the model (its logp and score None). pairs (a model
        that reads constraint pairs), src_langs, tgt_langs: per text, as `translate` takes them. With
        ``token_scores`` (a left-to-right model) also 'pieces': the translation's pieces and the end's, and
        'token_logp': the log-probability of each. With ``alignment`` also the translation's word alignment to its
        source, as `translate` gives it."""
        check_arguments(texts, targets=targets, pairs=pairs, src_langs=src_langs, tgt_langs=tgt_langs)
        self.check_alignment(alignment)
        if bad := [i for i, target in enumerate(targets) if not isinstance(target, str)]:
            raise DataError(f"targets[{bad[0]}] is {type(targets[bad[0]]).__name__}, not a string")
        check_supported(self.spec.name, self.spec.supports, score=True)
        batch_size = self.config.eval.batch_size if batch_size is None else batch_size
        src, cut = self.encode(texts, src_langs)
        starts = self.starts(pairs=pairs) if pairs else None
        if tgt_langs and any(lang is not None for lang in tgt_langs):
            codes = self.language_tokens(tgt_langs, "tgt", len(texts))
            starts = [s._replace(prefix=code) for s, code in zip(starts or [Start()] * len(texts), codes)]
        notes = self.input_notes(texts, cut, targets, None, None, pairs)  # a translation's characters as an init's
        tgt = self.tokenizer.encode(list(targets), "tgt")
        starts = self.prefixed(starts, len(texts))  # (a multilingual model's target-language token forced)
        scored = self.score_ids(src, tgt, batch_size, starts, token_scores)
        aligned = [{}] * len(texts)
        if alignment:
            prefixes = [list(s.prefix or ()) for s in starts]
            aligned = self.alignments(alignment, texts, src, [[*p, *ids] for p, ids in zip(prefixes, tgt)],
                                      list(map(len, prefixes)), starts, batch_size)
        results = []
        for out, ids, note, fields in zip(scored, tgt, notes, aligned):
            too_long = {"target_too_long": True} if out["logp"] is None else {}
            r = {"logp": out["logp"], "score": out["score"], "length": len(ids) + 1}
            if token_scores:
                r.update(pieces=[self.tokenizer.id_to_piece(i, "tgt") for i in [*ids, EOS_ID]],
                         token_logp=out["token_logp"])
            results.append({**r, **fields, **note, **too_long})
        if long := sum("target_too_long" in r for r in results):
            log.warning("%d of %d translations are longer than the model's max_len (%d tokens with BOS and EOS) and "
                        "were not scored (marked \"target_too_long\", with null scores)", long, len(results),
                        self.spec.cfg.max_len)
        if impossible := sum(r["logp"] is not None and not np.isfinite(r["logp"]) for r in results):
            log.warning("%d of %d translations have probability 0 under the model (null scores): it cannot produce "
                        "them, e.g. a translation longer than its canvas or graph", impossible, len(results))
        return results

    def mbr_chooser(self, sentences: int, label: str = "", utility: str = "chrf"):
        """A function of a sentence's candidates ([{'hyp', 'score'}], the model's order) → its MBR choice by
        ``utility``: its index and {'hyp', 'score', 'mbr_utility'} (`mbr.choose`), logging its progress over
        ``sentences`` as a long pass does."""
        started = reported = time.perf_counter()
        done = 0

        def choose(candidates: list[dict]) -> dict:
            nonlocal done, reported
            best, expected = mbr_rule.choose([c["hyp"] for c in candidates], utility)
            done += 1
            now = time.perf_counter()
            if now - reported >= PROGRESS_SECONDS and done < sentences:
                log.info("%sMBR chose for %d of %d sentences in %.0f s, about %s left", f"{label}: " if label else "",
                         done, sentences, now - started, duration((now - started) * (sentences / done - 1)))
                reported = now
            return best, {**candidates[best], "mbr_utility": expected}

        return choose

    def translation_pieces(self, tokens: np.ndarray) -> np.ndarray:
        """tokens: int32[T], an output row [BOS … EOS] -> bool[T], True at the translation's pieces: not BOS, EOS or
        PAD, nor a multilingual model's forced target-language token (position 1)."""
        real = (tokens != PAD_ID) & (tokens != BOS_ID) & (tokens != EOS_ID)
        if self.tokenizer.languages:
            real[1] = False
        return real

    def seconds_per_sentence(self, texts: list[str], beam_size: int, batch_size: int, constraints: list | None = None,
                             hard: list | None = None, pairs: list | None = None) -> float:
        """Seconds per sentence to translate ``texts`` at batch_size (with the given constraints and pairs, if
        any), after a warm-up that runs every shape not run before: model loading and compilation are excluded."""
        src, _ = self.encode(texts)
        starts = self.starts(None, constraints, hard, pairs=pairs, drop_long_pairs=True) if (
            constraints or pairs) else None
        self.translate_ids(src, beam_size, batch_size, starts, warm_up=True)
        t0 = time.perf_counter()
        self.translate_ids(src, beam_size, batch_size, starts)
        return (time.perf_counter() - t0) / max(len(src), 1)

    def latency(self, texts: list[str], beam_size: int, constraints: list | None = None,
                hard: list | None = None, pairs: list | None = None) -> float:
        """ms per sentence at batch 1 (`seconds_per_sentence`)."""
        return self.seconds_per_sentence(texts, beam_size, 1, constraints, hard, pairs) * 1000.0

    def speed(self, texts: list[str], beam_size: int, latency_sentences: int, batch_size: int,
              constraints: list | None = None, hard: list | None = None, pairs: list | None = None) -> dict:
        """Latency (ms/sentence at batch 1, over the first sentences) and throughput (sentences/s at
        batch_size, over all), both after a warm-up pass (compilation excluded)."""
        n = latency_sentences
        first = lambda x: x[:n] if x is not None else None  # noqa: E731
        latency = self.latency(texts[:n], beam_size, first(constraints), first(hard), first(pairs))
        per_sentence = self.seconds_per_sentence(texts, beam_size, batch_size, constraints, hard, pairs)
        return {"latency_ms": latency, "sentences_per_s": 1.0 / max(per_sentence, 1e-12)}
