"""Constraint test sets built from references (Post & Vilar 2018): for each reference, a few of its words
in random order, to be given to a lexically constrained decoder.

    make_constraints(refs, seed, lang=...) -> [[word, ...], ...]     one list per reference
    write_constraints(path, constraints) / read_constraints(path)   JSON lines: one list of strings a line

Words, as in Post & Vilar and EDITOR (Xu & Carpuat 2021), are tokens of the Moses-tokenized reference
(`dictionary_words`: sacremoses with the rules of the target language `lang`, no HTML escaping, no aggressive
hyphen splitting) that pass `is_word`: they start with a letter or digit and end with a letter, digit or combining
mark. So "Ein Mann, der läuft." offers "Ein", "Mann", "der", "läuft"; "T-Shirt" and "blau-weiß" stay whole words;
punctuation, Moses's split markers ("@-@") and clitics that keep their apostrophe ("'s" in English, "l'" in French)
are never chosen. Chinese, Japanese and Korean references are cut by a dictionary segmenter ("我住在北京。" offers
"我", "住", "在", "北京"; "서울에 갔다." "서울", "에", "갔", "다"): jieba's dictionary through rjieba (`pip install
'jaxnat[zh]'`), MeCab with IPADIC (`'jaxnat[ja]'`) and MeCab-ko (`'jaxnat[ko]'`); where it is not installed, they
offer single characters (Korean: Moses words, particles attached), with a warning. The decoder is given the
words as they are, and `jaxnat.evaluation.metrics.constraint_preservation` looks for them with the same tokenizer
(in Chinese and Japanese a word's characters in a row).

Command line: `python -m jaxnat.evaluation.constraints --refs FILE --output FILE [--lang en] [--seed N]
[--min-words 1] [--max-words 4]`; errors print one line and exit with code 2.
"""

from __future__ import annotations

import argparse
import json
import random
import sys

from jaxnat.data.words import dictionary_words, drawn_as, is_word
from jaxnat.errors import ConfigError, DataError, run_command
from jaxnat.paths import check_not_the_input, write_whole


def reference_words(ref: str, lang: str) -> list[str]:
    """The words of `ref` (`dictionary_words`) that pass `is_word`, in sentence order, repeats kept."""
    return [token for token in dictionary_words(ref, lang) if is_word(token)]


def sentence_constraints(ref: str, rng: random.Random, min_words: int, max_words: int, lang: str) -> list[str]:
    """k ~ U{min_words..max_words} (capped by the number of words) words of `ref` (`reference_words`) at
    distinct positions, in random order."""
    words = reference_words(ref, lang)
    k = min(rng.randint(min_words, max_words), len(words))
    # sample() returns the chosen positions in random order: that order is the shuffle of the constraints.
    return [words[p] for p in rng.sample(range(len(words)), k)]


def make_constraints(refs: list[str], seed: int, min_words: int = 1, max_words: int = 4, *,
                     lang: str = "en") -> list[list[str]]:
    """One constraint list (single-word strings) per reference; see `sentence_constraints`. `lang` is the
    language of the references (the target language), which picks Moses's tokenization rules.

    Sentence i draws from its own generator seeded by (seed, i), so its constraints do not depend on the
    other sentences: a subset or an extended corpus gives the same constraints for the sentences it shares.
    """
    if isinstance(min_words, bool) or not isinstance(min_words, int) or min_words < 0:
        raise ConfigError(f"min_words must be an integer >= 0, got {min_words!r}")
    if isinstance(max_words, bool) or not isinstance(max_words, int) or max_words < min_words:
        raise ConfigError(f"max_words must be an integer >= min_words ({min_words}), got {max_words!r}")
    # A string seed is hashed by Random (sha512), independent of PYTHONHASHSEED and process.
    return [sentence_constraints(ref, random.Random(f"{seed}:{i}"), min_words, max_words, lang)
            for i, ref in enumerate(refs)]


def write_constraints(path: str, constraints: list[list[str]]) -> None:
    """Writes one JSON list of strings per line (UTF-8, non-ASCII kept as is), whole or not at all (`write_whole`)."""
    write_whole(path, "".join(json.dumps(list(phrases), ensure_ascii=False) + "\n" for phrases in constraints))


def parse_constraint_line(line: str, where: str) -> list[str]:
    """One JSON lines row -> list of non-empty strings; DataError naming `where` (file:line) otherwise."""
    if not line.strip():
        raise DataError(f"{where}: blank line; a sentence without constraints is written []")
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise DataError(f"{where}: invalid JSON ({e.msg}); expected a list of strings such as [\"word\"]") from None
    if not isinstance(obj, list) or not all(isinstance(p, str) and p.strip() for p in obj):
        raise DataError(f"{where}: expected a JSON list of non-empty strings, got {line[:60]!r}")
    return obj


def read_constraints(path: str) -> list[list[str]]:
    """Reads a file written by `write_constraints` (plain or gzip). An empty constraint set is `[]`; a blank
    line is an error (it would silently shift the sentences after it)."""
    from jaxnat.data.text import read_lines

    lines = read_lines(path)
    return [parse_constraint_line(line, f"{path}:{n}") for n, line in enumerate(lines, 1)]


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, like jaxnat.main, instead of usage + message
        raise ConfigError(message)


def run(argv=None) -> int:
    parser = _Parser(prog="python -m jaxnat.evaluation.constraints", allow_abbrev=False,
                     description="Builds a constraint test set from a reference file (Post & Vilar 2018).")
    parser.add_argument("--refs", required=True, help="reference file, one sentence a line (plain or .gz)")
    parser.add_argument("--output", required=True, help="output: one JSON list of words a line")
    parser.add_argument("--lang", default="en",
                        help="language of the references, for Moses's tokenization rules (default en)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--min-words", type=int, default=1, help="fewest constraints per sentence (default 1)")
    parser.add_argument("--max-words", type=int, default=4, help="most constraints per sentence (default 4)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    check_not_the_input(args.output, "--output", args.refs, "--refs", "constraints")
    from jaxnat.data.text import read_lines

    refs = read_lines(args.refs)
    constraints = make_constraints(refs, args.seed, args.min_words, args.max_words, lang=args.lang)
    try:
        write_constraints(args.output, constraints)
    except OSError as e:
        raise DataError(f"{args.output}: cannot write ({e.strerror})") from None
    total = sum(len(c) for c in constraints)
    print(f"{len(refs)} sentences, {total} constraints ({total / len(refs):.2f} per sentence; "
          f"{drawn_as(args.lang)}) -> {args.output}", file=sys.stderr)
    return 0


def main(argv=None) -> int:
    return run_command(lambda: run(argv), "nothing was written (the output is written whole): the same command "
                                          "draws the same constraints")


if __name__ == "__main__":
    sys.exit(main())
