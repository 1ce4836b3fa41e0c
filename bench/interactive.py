"""Interactive translation (a translator types, the model completes what was typed): how often a completion holds
the reference's next word, and what one costs at batch 1.

    python bench/interactive.py --data-dir ../shared/data/multi30k --split test_2016_flickr --src en --tgt de \
        [--typed 0,1,2] [--sentences 0] [--beam 1] [--latency 100] WORKDIR [WORKDIR ...]

For each sentence and each word of its reference (whitespace words), the prefix is the reference's words before it
followed by a space, and then the word's first c characters for each c of --typed (0: the next word is not begun; a
word is asked with c characters where more than c of its first letters and digits are left to guess). The model
completes the prefix (`Translator.translate(prefixes=...)`; a word typed in part is spelt on by the search,
docs/ar.md, "Completing a given start"), and the completion's next word is compared with the reference's: word
prediction accuracy, as Knowles and Koehn (2016, "Neural Interactive Translation Prediction") measure interactive
prediction. Then --latency sentences are completed one at a time (batch 1, c = 1 at their middle word), beside their
plain translations, after a warm-up that compiles every shape: the median milliseconds of each, in one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def guessable(word: str) -> int:
    """The letters and digits a word starts with: what may be typed of it in part."""
    n = 0
    while n < len(word) and word[n].isalnum():
        n += 1
    return n


def requests(src: list[str], ref: list[str], typed: int) -> list[tuple[str, str, str]]:
    """(source, prefix, the reference's next word) for every word of every reference that can be asked with ``typed``
    characters of it typed."""
    out = []
    for s, r in zip(src, ref):
        words = r.split()
        for j, word in enumerate(words):
            if typed == 0 or guessable(word) > typed:
                out.append((s, " ".join(words[:j] + [word[:typed]]) if typed else " ".join(words[:j]) + " ", word))
    return out


def next_word(hyp: str, prefix: str) -> str:
    """The completion's word after the prefix's whole words (the one begun, where the prefix ends inside it)."""
    whole = len(prefix.split()) - (0 if prefix.endswith(" ") else 1)
    words = hyp.split()
    return words[whole] if len(words) > whole else ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workdirs", nargs="+")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--split", required=True)
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--typed", default="0,1,2", help="characters of the next word typed, comma-separated")
    parser.add_argument("--sentences", type=int, default=0, help="the first N sentences only (0: all)")
    parser.add_argument("--beam", type=int, default=1)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--latency", type=int, default=100, help="sentences completed one at a time (0: none)")
    args = parser.parse_args(argv)
    typed = [int(c) for c in args.typed.split(",")]
    if min(typed) < 0 or min(args.beam, args.batch) < 1 or min(args.sentences, args.latency) < 0:
        raise SystemExit("error: --typed takes counts of 0 or more, --beam and --batch 1 or more")

    from jaxnat.config import workdir_config
    from jaxnat.data.text import read_lines
    from jaxnat.provenance import machine
    from jaxnat.restore import load_translator

    def lines(lang):
        path = os.path.join(args.data_dir, f"{args.split}.{lang}")
        return read_lines(path + ".gz" if os.path.exists(path + ".gz") else path)

    src, ref = lines(args.src), lines(args.tgt)
    n = args.sentences or len(src)
    src, ref = src[:n], ref[:n]
    print(f"{machine()}; {args.split}, {n} sentences, beam {args.beam}, batch {args.batch}")
    print("| workdir | characters typed | completions | next word right |")
    print("|---|---|---|---|")
    timings = []
    for workdir in args.workdirs:
        translator = load_translator(workdir_config(workdir), workdir)
        for c in typed:
            asked = requests(src, ref, c)
            outs = translator.translate([s for s, _, _ in asked], beam_size=args.beam, batch_size=args.batch,
                                        prefixes=[p for _, p, _ in asked])
            right = sum(next_word(o["hyp"], p) == w for o, (_, p, w) in zip(outs, asked))
            print(f"| {workdir} | {c} | {len(asked)} | {100 * right / max(len(asked), 1):.1f}% |")
        if args.latency:
            timed = [(s, r.split()) for s, r in zip(src, ref) if len(r.split()) > 2][:args.latency]
            asked = [(s, " ".join(words[:len(words) // 2] + [words[len(words) // 2][:1]])) for s, words in timed]
            for s, p in asked:  # compile every shape first
                translator.translate([s], beam_size=args.beam, batch_size=1, prefixes=[p])
                translator.translate([s], beam_size=args.beam, batch_size=1)
            completion, plain = [], []
            for s, p in asked:  # alternated, so that both see the same machine load
                start = time.perf_counter()
                translator.translate([s], beam_size=args.beam, batch_size=1, prefixes=[p])
                completion.append(time.perf_counter() - start)
                start = time.perf_counter()
                translator.translate([s], beam_size=args.beam, batch_size=1)
                plain.append(time.perf_counter() - start)
            timings.append(f"| {workdir} | {len(asked)} | {1000 * statistics.median(completion):.1f} | "
                           f"{1000 * statistics.median(plain):.1f} |")
    if timings:
        print("\n| workdir | sentences | ms a completion, one character typed (batch 1) | ms a plain translation "
              "(batch 1) |\n|---|---|---|---|")
        print("\n".join(timings))
    return 0


if __name__ == "__main__":
    from jaxnat.errors import run_script

    run_script(main)
