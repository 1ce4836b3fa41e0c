"""A refining model's edits, rendered as a self-contained HTML page (as in EDITOR's Figure 7): for a few
sentences and each decoding mode, the initial hypothesis (empty, the constraints or a hypothesis to post-edit),
then per iteration the hypothesis after the first edit (LevT: deletion, EDITOR: reposition), after placeholder
insertion and after filling the placeholders.

Pieces are shown as sub-word boxes: pieces of the constraints highlighted (by value, wherever they occur),
placeholders as empty boxes, pieces that a step wrote (filled placeholders) in green, and after the first edit
the pieces that moved or were copied in blue, with the deleted ones listed struck through.
"""

from __future__ import annotations

import difflib
import html
from typing import NamedTuple

import numpy as np

from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID, PLH_ID

STEP_NAMES = {"levt": ("delete", "placeholders", "tokens"), "editor": ("reposition", "placeholders", "tokens")}

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h2 { margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: .5em 0 1.5em; }
td { padding: 3px 8px; vertical-align: top; }
td.step { color: #666; white-space: nowrap; text-align: right; }
.p { display: inline-block; border: 1px solid #bbb; border-radius: 3px; padding: 0 3px; margin: 1px;
     font-family: ui-monospace, monospace; font-size: 90%; }
.c { background: #ffe08a; border-color: #d4a000; font-weight: bold; }
.plh { min-width: 1.5em; background: #eee; border-style: dashed; }
.new { background: #c8f0c8; }
.moved { background: #cfe2ff; }
.gone { text-decoration: line-through; color: #a00; border-color: #e0a0a0; }
.meta { color: #555; }
"""


class TracedSentence(NamedTuple):
    src: str
    ref: str | None
    mode: str                 # "plain", "soft", "hard", "init" (post-edited from a given hypothesis)
    constraints: list[str]
    initial: list[int]        # the initial hypothesis, BOS … EOS
    trace: np.ndarray         # int32[max_iter + 1, 3, L] (see decoding.refine.refine)
    iterations: int
    hyp: str


def _pieces(ids) -> list[int]:
    return [int(t) for t in ids if t != PAD_ID]


def _render_row(ids: list[int], piece, constraint_ids: set[int], marks: dict[int, str]) -> str:
    """ids: one hypothesis; marks: position → extra CSS class."""
    cells = []
    for k, t in enumerate(ids):
        if t in (BOS_ID, EOS_ID):
            continue
        cls = ["p"]
        if t == PLH_ID:
            cls.append("plh")
            text = "&nbsp;"
        else:
            text = html.escape(piece(t))
            if t in constraint_ids:
                cls.append("c")
        if k in marks:
            cls.append(marks[k])
        cells.append(f'<span class="{" ".join(cls)}">{text}</span>')
    return "".join(cells) or '<span class="meta">(empty)</span>'


def _first_edit_marks(before: list[int], after: list[int]) -> tuple[dict[int, str], list[int]]:
    """Pieces of ``after`` outside the longest alignment with ``before`` (moved or copied), and the pieces of
    ``before`` that went nowhere (deleted)."""
    blocks = difflib.SequenceMatcher(a=before, b=after, autojunk=False).get_matching_blocks()
    kept_a = {m.a + k for m in blocks for k in range(m.size)}
    kept_b = {m.b + k for m in blocks for k in range(m.size)}
    moved = [k for k in range(len(after)) if k not in kept_b]
    arrived = [after[k] for k in moved]
    gone = []
    for i, t in enumerate(before):
        if i not in kept_a:
            if t in arrived:
                arrived.remove(t)
            else:
                gone.append(t)
    return {k: "moved" for k in moved}, gone


def render_sentence(s: TracedSentence, piece, constraint_pieces: set[int], step_names) -> str:
    rows = [("start", _render_row(s.initial, piece, constraint_pieces, {}))]
    current = s.initial
    for it in range(s.iterations):
        edited, with_plh, filled = (_pieces(s.trace[it, k]) for k in range(3))
        marks, gone = _first_edit_marks(current, edited)
        first = _render_row(edited, piece, constraint_pieces, marks)
        if gone:
            first += " " + "".join(f'<span class="p gone">{html.escape(piece(t))}</span>' for t in gone)
        plh = _render_row(with_plh, piece, constraint_pieces, {})
        new = {k: "new" for k, t in enumerate(with_plh) if t == PLH_ID}
        tokens = _render_row(filled, piece, constraint_pieces, new)
        rows += [(f"{it + 1}: {step_names[0]}", first), (f"{it + 1}: {step_names[1]}", plh),
                 (f"{it + 1}: {step_names[2]}", tokens)]
        current = filled
    body = "".join(f'<tr><td class="step">{html.escape(name)}</td><td>{cells}</td></tr>' for name, cells in rows)
    cons = ", ".join(html.escape(c) for c in s.constraints) or "none"
    ref = f'<div class="meta">reference: {html.escape(s.ref)}</div>' if s.ref is not None else ""
    return (f'<h3>{html.escape(s.mode)} — constraints: {cons}</h3>'
            f'<div class="meta">source: {html.escape(s.src)}</div>{ref}'
            f'<table>{body}</table><div>output: <b>{html.escape(s.hyp)}</b> '
            f'<span class="meta">({s.iterations} iteration{"" if s.iterations == 1 else "s"})</span></div>')


def render_page(title: str, model_name: str, sentences: list[TracedSentence], piece, encode_pieces) -> str:
    """sentences: in display order; piece(id) → str; encode_pieces(list of phrases) → list of id lists."""
    steps = STEP_NAMES.get(model_name, ("first edit", "placeholders", "tokens"))
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
             "<p class='meta'>Each iteration: "
             f"{' → '.join(steps)}. <span class='p c'>constraint</span> <span class='p plh'>&nbsp;</span> "
             "placeholder <span class='p new'>filled</span> <span class='p moved'>moved / copied</span> "
             "<span class='p gone'>deleted</span></p>"]
    number = 0
    for n, s in enumerate(sentences):
        if n == 0 or sentences[n - 1].src != s.src:  # a new source sentence: its modes follow
            number += 1
            parts.append(f"<h2>Sentence {number}</h2>")
        constraint_pieces = {t for p in encode_pieces(s.constraints) for t in p} if s.constraints else set()
        parts.append(render_sentence(s, piece, constraint_pieces, steps))
    parts.append("</body></html>")
    return "\n".join(parts)
