"""Word alignments of trained AR models against reference links: the alignment error rate (AER, Och and Ney 2003;
every reference link a sure one) of each workdir's attention alignments (`eval.alignment=pieces`: its references
forced through it, `Translator.score`), read over Moses words, against a split's Pharaoh links over the same words.

    python -m jaxnat.data.alignment --data-dir ../shared/data/multi30k --src en --tgt de --output DIR \
        --splits val,test_2016_flickr
    python bench/alignment_quality.py --data-dir ../shared/data/multi30k --split test_2016_flickr \
        --links DIR/test_2016_flickr.align --src en --tgt de WORKDIR [WORKDIR ...]

With eflomal's links as the reference (what the first command writes, and what guided alignment trains on) this is
agreement with eflomal, not quality against a person's alignments: the figure that shows a model learned to align
as its supervision does (docs/ar.md, "Guided alignment"). A piece's words are those it shares characters with
(`jaxnat.data.piece_links`); a sentence whose words are not in its text as written is left out, and counted.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def word_links(translator, src: str, ref: str, scored: dict, src_lang: str, tgt_lang: str) -> set | None:
    """The Moses-word links of one forced alignment (its piece pairs), or None where the words are not found."""
    from jaxnat.data.alignment import parse_links
    from jaxnat.data.piece_links import owners, word_spans
    from jaxnat.data.words import dictionary_words

    sides = []
    for text, side, lang in ((src, "src", src_lang), (ref, "tgt", tgt_lang)):
        words = word_spans(dictionary_words(text, lang), text)
        if words is None:
            return None
        per_word = owners(translator.tokenizer.piece_spans([text], side)[0], words)
        of_piece: dict[int, list[int]] = {}
        for w, pieces in enumerate(per_word):
            for p in pieces:
                of_piece.setdefault(p, []).append(w)
        sides.append(of_piece)
    pairs = parse_links(scored["alignment"])
    return {(a, b) for i, j in pairs for a in sides[0].get(i, ()) for b in sides[1].get(j, ())}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workdirs", nargs="+")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--split", required=True)
    parser.add_argument("--links", required=True, help="the split's reference links, Pharaoh over Moses words")
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--sentences", type=int, default=0, help="the first N sentences only (0: all)")
    args = parser.parse_args(argv)

    from jaxnat.config import workdir_config
    from jaxnat.data.alignment import parse_links
    from jaxnat.data.text import read_lines
    from jaxnat.restore import load_translator

    def lines(lang):
        path = os.path.join(args.data_dir, f"{args.split}.{lang}")
        return read_lines(path + ".gz" if os.path.exists(path + ".gz") else path)

    src, ref = lines(args.src), lines(args.tgt)
    gold = [parse_links(line) for line in read_lines(args.links, blank_ok=True)]
    n = args.sentences or len(src)
    src, ref, gold = src[:n], ref[:n], gold[:n]
    print("| workdir | alignment layer, heads, full context | sentences | AER | precision | recall |")
    print("|---|---|---|---|---|---|")
    for workdir in args.workdirs:
        config = workdir_config(workdir)
        translator = load_translator(config, workdir)
        scored = translator.score(src, ref, alignment="pieces")
        found = correct = wanted = used = 0
        for s, r, g, out in zip(src, ref, gold, scored):
            links = word_links(translator, s, r, out, args.src, args.tgt) if out["alignment"] is not None else None
            if links is None:
                continue
            used += 1
            found, correct, wanted = found + len(links), correct + len(links & g), wanted + len(g)
        m = config.model
        aer = 1.0 - 2.0 * correct / max(found + wanted, 1)
        print(f"| {workdir} | {m.alignment_layer}, {m.alignment_heads or 'all'}, {m.full_context_alignment} | "
              f"{used} of {n} | {100 * aer:.1f} | {100 * correct / max(found, 1):.1f} | "
              f"{100 * correct / max(wanted, 1):.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
