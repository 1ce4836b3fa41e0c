"""`--mode translate`: plain lines or JSON lines (`{"src": ...}`) in, JSON lines (`{"src", "hyp", "score"}`) out.

Each input line is either a JSON object with at least "src", or plain text (a line that does not start with
'{'). Output keeps the input order; extra input keys are echoed back.
"""

from __future__ import annotations

import json
import sys

from jaxnat.data.text import read_lines, split_lines
from jaxnat.errors import DataError


def parse_requests(lines: list[str], where: str) -> list[dict]:
    requests = []
    for n, line in enumerate(lines, 1):
        if line.lstrip().startswith("{"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{where}:{n}: invalid JSON ({e.msg})") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("src"), str):
                raise DataError(f'{where}:{n}: a JSON line needs a string "src" field')
            requests.append(obj)
        else:
            requests.append({"src": line})
    if not requests:
        raise DataError(f"{where}: no input lines")
    return requests


def translate_stream(config, workdir: str, input_path: str | None, output_path: str | None) -> None:
    from jaxnat.evaluation.evaluate import load_translator

    if input_path:
        lines, where = read_lines(input_path), input_path
    else:
        lines, where = split_lines(sys.stdin.buffer.read(), "stdin"), "stdin"
    requests = parse_requests(lines, where)
    translator = load_translator(config, workdir)
    outs = translator.translate([r["src"] for r in requests], config.eval.beam_size, config.eval.batch_size)
    sink = open(output_path, "w", encoding="utf-8") if output_path else sys.stdout
    try:
        for request, out in zip(requests, outs):
            sink.write(json.dumps({**request, **out}, ensure_ascii=False) + "\n")
    finally:
        if output_path:
            sink.close()
