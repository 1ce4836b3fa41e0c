"""Makes tests/data/ngram/: a Kneser-Ney model written by jaxnat (`jaxnat.data.kneser_ney`, order 3, of a seeded
random corpus) and KenLM's full scores of seeded random sentences under it, which tests/test_ngram.py requires
jaxnat's queries to reproduce. Run it in jaxnat's environment; KenLM (the `kenlm` module, which
tools/reference_env.sh installs) runs in the reference environment, as a child process:

    .venv/bin/python tools/make_ngram_fixture.py [--refenv .refenv]

Deterministic: rerun, it rewrites the same files byte for byte. It also writes the corpus, corpus.txt (a sentence a
line); lmplz.arpa beside it is KenLM's own estimate of that corpus, `lmplz -o 3 --discount_fallback < corpus.txt`
(KenLM's builder compiled by hand from its sources: no script here builds it), which tests/test_ngram.py requires
`--mode lm`'s estimate to equal.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "ngram")
KENLM = """
import json, sys, kenlm
model = kenlm.Model(sys.argv[1])
print(json.dumps([model.score(" ".join(s), bos=True, eos=True) for s in json.load(sys.stdin)]))
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--refenv", default=os.path.join(ROOT, ".refenv"))
    args = parser.parse_args(argv)
    sys.path.insert(0, ROOT)
    from jaxnat.data.kneser_ney import estimate, write_arpa

    rng = random.Random(0)
    words = [f"w{i}" for i in range(12)]
    # a skewed corpus, so that every order has counts of counts 1 … 4 (no fallback discounts)
    corpus = [[rng.choice(words[:rng.randint(2, 12)]) for _ in range(rng.randint(0, 10))] for _ in range(300)]
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "corpus.txt"), "w", encoding="utf-8") as f:
        f.writelines(" ".join(words) + "\n" for words in corpus)
    path = os.path.join(OUT, "lm.arpa")
    write_arpa(path, estimate(corpus, 3))
    pieces = ["<pad>", "<s>", "</s>", "<unk>", "<plh>", "<mask>", *words, "never_seen"]
    sentences = [[rng.choice(pieces[6:]) for _ in range(rng.randint(0, 14))] for _ in range(50)]
    scores = subprocess.run([os.path.join(args.refenv, "bin", "python"), "-c", KENLM, path], check=True,
                            input=json.dumps(sentences), capture_output=True, text=True).stdout
    with open(os.path.join(OUT, "kenlm_scores.json"), "w", encoding="utf-8") as f:
        json.dump({"pieces": pieces, "sentences": sentences, "kenlm": json.loads(scores)}, f, indent=0)
        f.write("\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
