"""`--mode score`: given translations scored by the model (forced decoding, fairseq-generate's --score-reference,
Marian's scorer), for filtering a corpus, reranking another system's outputs or estimating their quality.

Each input line is a JSON object with "src" and "tgt" strings (and, as translate reads them, "src_lang" and
"tgt_lang" for a multilingual model, "constraint_pairs" for a model that reads pairs; other keys are echoed), or
plain text, the source and its translation separated by one tab (`paste src.txt hyp.txt`). Each output line is the
input with "logp", log P(tgt | src) under the model (natural log, the translation's end included; its
target-language token, forced, adds nothing), "score", the score the model's search gives that output (the AR
models: logp / length ** eval.length_penalty, translate's "score" of it; NAT: its pass's mean token log-probability;
DA-Transformer and CTC: logp), and "length", the translation's pieces and its end; with eval.token_scores=true (a
left-to-right model) also "pieces", those pieces and the end's, and "token_logp", the log-probability of each
(fairseq's positional scores); with eval.alignment (the left-to-right models) also "alignment", the translation's
alignment to its source (`alignment`). A translation the model cannot produce (longer than a canvas or graph allows) has
null scores, and one longer than the model's max_len is marked "target_too_long" with null scores; a warning counts
each. Only models that define the probability of a whole output score (`Supports.score`); another says so in one
line before anything is scored.
"""

from __future__ import annotations

from jaxnat.decoding.request import check_supported
from jaxnat.decoding.translate_io import CHUNK_LINES, Job, json_request, stream
from jaxnat.errors import DataError

REQUEST_KEYS = ("src", "tgt", "src_lang", "tgt_lang", "constraint_pairs")
OUTPUT_KEYS = ("logp", "score", "length", "pieces", "token_logp", "alignment", "src_pieces")


def parse_scored(lines: list[str], where: str) -> list[dict]:
    """The lines to score: [{"src", "tgt", …}] (module docstring); a one-line DataError naming a line that is neither
    form."""
    requests = []
    for n, line in enumerate(lines, 1):
        if line.lstrip().startswith("{"):
            obj = json_request(line, f"{where}:{n}", REQUEST_KEYS, OUTPUT_KEYS, "score")
            if not isinstance(obj.get("tgt"), str):
                raise DataError(f'{where}:{n}: a JSON line to score needs a string "tgt" field, the translation of '
                                f'its "src"')
        else:
            fields = line.split("\t")
            if len(fields) != 2:
                raise DataError(f"{where}:{n}: a plain line to score is a source and its translation separated by one "
                                f"tab; this one has {len(fields) - 1} tabs")
            obj = {"src": fields[0], "tgt": fields[1]}
        requests.append(obj)
    if not requests:
        raise DataError(f"{where}: no input lines")
    return requests


def check_scored(requests: list[dict], translator, where: str) -> None:
    """A one-line DataError where the model does not score, or a line asks what it cannot take (constraint pairs of a
    model without them, pairs that do not fit it), before anything is scored."""
    spec = translator.spec
    check_supported(spec.name, spec.supports, score=True)
    if translator.config.eval.token_scores:
        translator.check_token_scores()
    for n, r in enumerate(requests, 1):
        try:
            check_supported(spec.name, spec.supports, pairs=bool(r.get("constraint_pairs")))
            if r.get("constraint_pairs"):
                translator.start(pairs=r["constraint_pairs"])
        except DataError as e:
            raise DataError(f"{where}:{n}: {e}") from None


def _score(translator, requests: list[dict], config) -> list[dict]:
    options = {}
    for key in ("constraint_pairs", "src_lang", "tgt_lang"):
        if any(key in r for r in requests):
            options["pairs" if key == "constraint_pairs" else f"{key}s"] = [r.get(key) or None for r in requests]
    # (a translation the model cannot produce scores -inf: the output writes null, as translate's non-finite scores)
    return translator.score([r["src"] for r in requests], [r["tgt"] for r in requests], config.eval.batch_size,
                            token_scores=config.eval.token_scores, alignment=config.eval.alignment, **options)


SCORE = Job(parse_scored, check_scored, _score, "score", "scores", "scores", "source-translation pairs to score")


def score_stream(load_translator, config, input_path: str | None, output_path: str | None,
                 chunk_lines: int = CHUNK_LINES) -> None:
    """`--mode score` (`translate_io.stream`)."""
    stream(SCORE, load_translator, config, input_path, output_path, chunk_lines)
