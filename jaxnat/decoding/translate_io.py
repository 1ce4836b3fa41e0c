"""`--mode translate`: plain lines or JSON lines (`{"src": ...}`) in, JSON lines (`{"src", "hyp", "score"}`) out. With
eval.nbest = N > 1 (a model that keeps several outputs: `Supports.nbest`), each output line also has "nbest", the
sentence's N best outputs of its beam, best first, `[{"hyp", "score"}]` (fewer where the search finished fewer). With
eval.mbr, "hyp" and "score" are those of the beam's output the others agree with most, "mbr_utility" how much. With
eval.alignment (the left-to-right models), "alignment": "hyp"'s alignment to its source (`alignment`). With
eval.glossary, "terms": the glossary's entries found in the line's source, whose target terms the model was given as
constraints (`glossary`).

Each input line is either a JSON object with at least "src", or plain text (a line that does not start with '{').
Refining models (LevT) also read, per line, "init" (a target-side hypothesis to refine: post-editing) or "constraints"
(a list of target phrases, the initial hypothesis in the given order) with "hard": true to guarantee them; they add
"iterations" and their edit counts to the output. Every AR model takes "constraints" with "hard": true (constrained beam
search). Models of vectorized constraints also read "constraint_pairs", a list of [source phrase, target phrase] pairs
(alone: pairs as the model's input; with "hard" and "constraints" as well: both). A multilingual model (an imported
NLLB) reads "src_lang" and "tgt_lang", its language tokens ("eng_Latn"), in place of data.src_lang_token and
data.tgt_lang_token. The left-to-right models read "prefix", the start of the translation as typed, which "hyp"
continues (interactive translation; a last word typed in part is spelt on). A model that cannot honour what a line asks
(a kind of request it does not take, or constraints, pairs, an initial hypothesis or a prefix that do not fit it) says
so in one line naming the line, before anything is translated. A blank line (a source of whitespace that asks nothing
else) gives an empty "hyp" with a null "score", untranslated. Output keeps the input order (written as it is translated,
`CHUNK_LINES` lines at a time); extra input keys are echoed back (one near a request key, "constraint", is refused as a
typo; "hyp" and "score", which the output writes, are refused: an MT output line fed in as it is would lose its
hypothesis).
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import json
import logging
import math
import os
import sys
from typing import Callable, NamedTuple

from jaxnat.data.sources import parse_pairs
from jaxnat.data.text import read_lines, split_lines
from jaxnat.decoding import alignment
from jaxnat.decoding.glossary import constraints_of, Glossary
from jaxnat.decoding.request import check_supported
from jaxnat.errors import ConfigError, DataError, Interrupted

log = logging.getLogger("jaxnat")


def _finite(text: str) -> float:
    """json.loads's parse_float and parse_constant: a number the output could not echo as strict JSON (NaN,
    Infinity, 1e999) is refused here, not after the whole input is translated."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is not a finite number")
    return value


REQUEST_KEYS = ("src", "init", "constraints", "hard", "constraint_pairs", "src_lang", "tgt_lang", "prefix")
# what output lines write: an input key of the same name would be replaced, not echoed (an MT system's output
# line fed in as it is: its "hyp" silently gone, and not refined either); "nbest" with eval.nbest > 1, "mbr_utility"
# with eval.mbr, "alignment", "src_pieces" and "pieces" with eval.alignment, "terms" with eval.glossary
OUTPUT_KEYS = ("hyp", "score", "nbest", "mbr_utility", "alignment", "src_pieces", "pieces", "terms")


def misspelt(obj: dict, where: str, keys: tuple = REQUEST_KEYS) -> None:
    """A key that is no request key (of ``keys``) but near one ("constraint", "Hard") is refused: echoed back like the
    caller's own keys ("id"), it would silently drop what it was meant to ask (a hard constraint)."""
    for key in obj:
        near = [] if key in keys else difflib.get_close_matches(key, keys, n=1, cutoff=0.75)
        if near:
            raise DataError(f'{where}: unknown key "{key}"; did you mean "{near[0]}"? (keys unlike every request '
                            f'key are echoed back as they are)')


def json_request(line: str, where: str, keys: tuple, written: tuple, mode: str, hint: str = "") -> dict:
    """One JSON line of requests: an object with a string "src", none of its keys misspelt ``keys`` (`misspelt`) nor
    one of the keys the ``mode`` writes (``written``: an input's own would be lost); one-line DataErrors at ``where``
    (its file and line number). Numbers that are no finite number are refused (the output could not echo them)."""
    try:
        obj = json.loads(line, parse_float=_finite, parse_constant=_finite)
    except json.JSONDecodeError as e:  # perhaps a plain sentence that starts with a brace
        raise DataError(f"{where}: invalid JSON ({e.msg}); a line that starts with '{{' is read as a JSON "
                        f"request: give such a sentence as {{\"src\": \"...\"}}") from None
    except ValueError as e:
        raise DataError(f"{where}: invalid JSON ({e})") from None
    except RecursionError:  # json's decoder recurses per nesting level
        raise DataError(f"{where}: invalid JSON (nested too deeply)") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("src"), str):
        raise DataError(f'{where}: a JSON line needs a string "src" field')
    misspelt(obj, where, keys)
    if clash := [key for key in written if key in obj]:
        raise DataError(f'{where}: "{clash[0]}" is a key {mode} writes, so this line\'s would be lost; rename '
                        f'it{hint}')
    for key in ("src_lang", "tgt_lang"):
        if key in obj and not (isinstance(obj[key], str) and obj[key].strip()):
            raise DataError(f'{where}: "{key}" must be a non-empty string, a language of the model (NLLB\'s '
                            f'"eng_Latn", M2M-100\'s "en", mBART-50\'s "en_XX")')
    if "constraint_pairs" in obj:
        parse_pairs(json.dumps(obj["constraint_pairs"]), f'{where}: "constraint_pairs"')
    return obj


def parse_requests(lines: list[str], where: str) -> list[dict]:
    requests = []
    for n, line in enumerate(lines, 1):
        if line.lstrip().startswith("{"):
            obj = json_request(line, f"{where}:{n}", REQUEST_KEYS, OUTPUT_KEYS, "translate",
                               ' (a hypothesis to refine goes in "init")')
            if "init" in obj and not isinstance(obj["init"], str):
                raise DataError(f'{where}:{n}: "init" must be a string (a hypothesis to refine)')
            if "prefix" in obj and not isinstance(obj["prefix"], str):
                raise DataError(f'{where}:{n}: "prefix" must be a string (the start of the translation)')
            phrases = obj.get("constraints", [])
            if not isinstance(phrases, list) or not all(isinstance(p, str) and p.strip() for p in phrases):
                raise DataError(f'{where}:{n}: "constraints" must be a list of non-empty strings')
            if not isinstance(obj.get("hard", False), bool):
                raise DataError(f'{where}:{n}: "hard" must be true or false')
            if obj.get("hard") and not phrases:  # else silently nothing: what would "init" + "hard" keep?
                raise DataError(f'{where}:{n}: "hard": true needs "constraints", the phrases it guarantees (an "init" '
                                f'is a starting point the model may edit, never guaranteed)')
            if "init" in obj and phrases:
                raise DataError(f'{where}:{n}: give either "init" or "constraints", not both')
            requests.append(obj)
        else:
            requests.append({"src": line})
    if not requests:
        raise DataError(f"{where}: no input lines")
    return requests


def with_terms(parse: Callable, glossary: Glossary) -> Callable:
    """``parse`` whose requests each hold "terms", the entries of ``glossary`` found in its source (in its own
    "src_lang" where it names one), [[source term, target term], …] (`glossary.Glossary.match`); a line that asks
    for its "init" to be refined and holds terms is refused (a sentence takes a hypothesis or constraints)."""
    def parse_with_terms(lines: list[str], where: str) -> list[dict]:
        requests = parse(lines, where)
        for n, r in enumerate(requests, 1):
            r["terms"] = [list(entry) for entry in glossary.match(r["src"], r.get("src_lang", "").strip("_") or None)]
            if r["terms"] and "init" in r:
                raise DataError(f'{where}:{n}: the glossary finds {r["terms"][0][0]!r} in this source, whose target '
                                f'term would be a constraint, and the line gives an "init" to refine: a sentence '
                                f'takes either')
        return requests

    return parse_with_terms


def _empty(request: dict) -> bool:
    """A request with nothing to translate: a blank source, no initial hypothesis, constraints or pairs."""
    return not request["src"].strip() and not any(request.get(k) for k in ("init", "constraints", "constraint_pairs"))


def check_capabilities(requests: list[dict], translator, where: str) -> None:
    """`check_supported` and `Translator.start` of each request (in its own "tgt_lang", as it is translated): a
    one-line DataError naming the first line that asks what the model cannot do, or constraints, pairs or an initial
    hypothesis that do not fit it, before
    anything is translated (the batch's own checks name a sentence of its chunk, not the line, and come only when
    that chunk is translated)."""
    spec = translator.spec
    for n, r in enumerate(requests, 1):
        constraints, hard, pairs = constraints_of(r, spec.supports, translator.config.eval.glossary_hard)
        try:
            given = r["prefix"] if r.get("prefix", "").strip() else None
            check_supported(spec.name, spec.supports, init=r.get("init") is not None,
                            soft=bool(constraints) and not hard, hard=bool(constraints) and hard, pairs=bool(pairs),
                            prefix=bool(given))
            if r.get("init") is not None or constraints or pairs or given:
                translator.start(r.get("init"), constraints, hard, pairs, tgt_lang=r.get("tgt_lang"), given=given)
        except DataError as e:
            raise DataError(f"{where}:{n}: {e}") from None


# Lines translated and written at a time: a long input's output grows as it is translated (Ctrl-C or a crash keeps
# every line written, `| head -3` gets its lines early), while each chunk still sorts thousands of sentences by
# length into full batches (a part-empty last batch per chunk: under 1% more rows at eval.batch_size 32).
CHUNK_LINES = 4096


class Job(NamedTuple):
    """What a mode that streams lines does with them (`stream`): parse(lines, where) -> requests, one-line DataErrors
    naming the line; check(requests, translator, where) -> None, what the model cannot do, before anything runs;
    run(translator, requests, config) -> each request's output fields; mode: its --mode; noun, verb, lines: what it
    writes, does and reads ("translations", "translates", "sentences to translate")."""
    parse: Callable
    check: Callable
    run: Callable
    mode: str
    noun: str
    verb: str
    lines: str


def stream(job: Job, load_translator, config, input_path: str | None, output_path: str | None,
           chunk_lines: int = CHUNK_LINES) -> None:
    """load_translator() -> the `Translator` to use; called once the input has been read and checked, so a
    malformed input fails before the model is loaded. The output is written chunk_lines lines at a time;
    --output is replaced at its first chunk (kept as it was if nothing could be written)."""
    import jax

    if jax.process_count() > 1:  # each would run every line and write it to the same --output (or stdout)
        raise ConfigError(f"--mode {job.mode} runs in a single process; start it without the multi-process launcher")
    sink = _Sink(output_path)
    try:
        requests, where = _read_requests(job, input_path)
        translator = load_translator()
        job.check(requests, translator, where)
        for start in range(0, len(requests), chunk_lines):
            chunk = requests[start:start + chunk_lines]
            if not sink.write(chunk, job.run(translator, chunk, config)):
                return  # stdout's reader stopped reading: nothing more to do for it
            if sink.written < len(requests):
                log.info("wrote %d of %d lines to %s", sink.written, len(requests), sink.name)
    except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM reading, running or writing: what was kept, no resume
        sink.close()  # flushes what was written: the count below is what the file holds
        again = f"the same command {job.verb} the input again from its start"
        if sink.written == 0:
            kept = ", which is left as it was" if output_path and not sink.opened else ""
            raise Interrupted(f"interrupted before anything was written to {sink.name}{kept}; {again}", stop) from None
        raise Interrupted(f"interrupted: {sink.name} holds the {job.noun} of the first {sink.written} of the "
                          f"{len(requests)} lines; {again}", stop) from None
    finally:
        sink.close()


def _read_requests(job: Job, input_path: str | None) -> tuple[list[dict], str]:
    """The requests of --input, or of stdin, and where they were read."""
    where = input_path or "stdin"
    if input_path:
        return job.parse(read_lines(input_path, blank_ok=True), where), where
    if sys.stdin.isatty():  # typed at a terminal: the command would wait without a word
        log.info("reading the %s from the terminal, one a line; end with Ctrl-D", job.lines)
    return job.parse(split_lines(sys.stdin.buffer.read(), where, blank_ok=True), where), where


def _translate(translator, requests: list[dict], config) -> list[dict]:
    """Each request's output fields, in order."""
    # an empty source that asks nothing else is an empty line out (a paragraph break of a document), not what a
    # model makes of [BOS, EOS]; the others are translated together
    todo = [r for r in requests if not _empty(r)]
    asked = [constraints_of(r, translator.spec.supports, config.eval.glossary_hard) for r in todo]
    options = {}
    if any("init" in r for r in todo) or any(constraints for constraints, _, _ in asked):
        options = dict(inits=[r.get("init") for r in todo], constraints=[constraints for constraints, _, _ in asked],
                       hard=[hard for _, hard, _ in asked])
    if any(pairs for _, _, pairs in asked):
        options["pairs"] = [pairs for _, _, pairs in asked]
    for key in ("src_lang", "tgt_lang"):
        if any(key in r for r in todo):
            options[f"{key}s"] = [r.get(key) or None for r in todo]
    if any("prefix" in r for r in todo):
        options["prefixes"] = [r["prefix"] if r.get("prefix", "").strip() else None for r in todo]
    nbest = config.eval.nbest
    done = iter(translator.translate([r["src"] for r in todo], config.eval.beam_size, config.eval.batch_size,
                                     nbest=nbest, mbr=config.eval.mbr, alignment=config.eval.alignment, **options)
                if todo else ())
    blank = {"hyp": "", "score": None, **dict.fromkeys(translator.spec.supports.counts, 0),
             **({"nbest": []} if nbest > 1 else {}), **(alignment.blank(config.eval.alignment)
                                                        if config.eval.alignment else {})}
    return [blank if _empty(r) else next(done) for r in requests]


TRANSLATE = Job(parse_requests, check_capabilities, _translate, "translate", "translations", "translates",
                "sentences to translate")


def translate_job(config) -> Job:
    """`TRANSLATE`, with eval.glossary each line's glossary terms as its constraints (`with_terms`: the glossary is
    read here, before any input or model)."""
    if not config.eval.glossary:
        return TRANSLATE
    return TRANSLATE._replace(parse=with_terms(TRANSLATE.parse, Glossary.of(config)))


def translate_stream(load_translator, config, input_path: str | None, output_path: str | None,
                     chunk_lines: int = CHUNK_LINES) -> None:
    """`--mode translate` (`stream`)."""
    stream(translate_job(config), load_translator, config, input_path, output_path, chunk_lines)


def output_line(request: dict, out: dict) -> dict:
    """What is written of a request and its output fields: the request's keys, then the output's, strict JSON (a
    score that is no finite number, no output the search could score, is null)."""
    return {**request, **{k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in out.items()}}


class _Sink:
    """--output (replaced, opened at the first write) or stdout, taking the JSON lines of one chunk at a time."""

    def __init__(self, output_path: str | None):
        self.path, self.name = output_path, output_path or "stdout"
        self.file = None
        self.written = 0  # lines written (flushed at each chunk's end and at close)

    @property
    def opened(self) -> bool:
        return self.file is not None

    def write(self, requests: list[dict], outs: list[dict]) -> bool:
        """Writes and flushes each request with its output; False once stdout's reader has stopped reading."""
        if self.file is None:
            self.file = open(self.path, "w", encoding="utf-8") if self.path else sys.stdout
        try:
            for request, out in zip(requests, outs):
                self.file.write(json.dumps(output_line(request, out), ensure_ascii=False, allow_nan=False) + "\n")
                self.written += 1
            self.file.flush()  # here, not at the interpreter's exit: a reader that closed stdout is caught below
        except BrokenPipeError:
            if self.path:
                raise
            # stdout's reader stopped reading (`| head -3`): it has what it wanted, so stop quietly, as a Unix tool
            # does; stdout then goes nowhere, or the interpreter's own flush at exit would print the error after all
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return False
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):  # a buffered write's error names no file; the line names it
                e.filename = self.name
            raise
        return True

    def close(self) -> None:
        if self.path and self.file is not None and not self.file.closed:
            with contextlib.suppress(OSError):  # a failed write's error, raised already, is the one to tell
                self.file.close()
