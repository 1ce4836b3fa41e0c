"""What Marian itself computes: its decoder run by pymarian (PyPI 1.12.42, the Python binding of Marian's C++
translator) in the Python that has it, its own environment (pymarian's wheel brings Marian's libraries):

    python3 -m venv /tmp/pm && /tmp/pm/bin/pip install pymarian==1.12.42

`decode` gives each source alone (its pieces as Marian's vocabulary reads them) to Marian's greedy and beam-4
search with n-best lists and word scores; tools/make_import_fixtures.py (the `.npz` fixtures' expected_marian.json)
and tools/check_marian_export.py (an export's) read Marian's outputs through it. Standard library only.
"""

from __future__ import annotations

import json
import subprocess

# run in pymarian's Python: greedy, then beam 4 under the length normalisation asked for
SCRIPT = """
import json, sys
from pymarian import Translator
args = json.loads(sys.argv[1])
out = {}
for beam, normalize in ((1, 0.0), (4, args["normalize"])):
    t = Translator(models=args["model"], vocabs=args["vocabs"], cpu_threads=1, beam_size=beam, n_best=True,
                   word_scores=True, normalize=normalize, mini_batch=1, maxi_batch=1, max_length_factor=2, quiet=True)
    out[beam] = [t.translate(line) for line in args["sources"]]
print(json.dumps(out))
"""


def decode(python: str, directory: str, model: str, vocabs: list[str], sources: list[str],
           normalize: float = 0.6) -> dict:
    """Marian's outputs of ``sources`` (each its pieces, space-separated) by the model file ``model`` with the
    vocabularies ``vocabs`` (paths relative to ``directory``), at most twice each source's pieces and end long
    (max-length-factor 2): {"beam1": [...], "beam4": [...]}, per source its best hypothesis {"pieces": [str],
    "word_scores": [float] (one a piece, and the end's where it has one), "score": float}."""
    args = {"model": model, "vocabs": vocabs, "sources": sources, "normalize": normalize}
    raw = json.loads(subprocess.run([python, "-c", SCRIPT, json.dumps(args)], cwd=directory, check=True,
                                    capture_output=True, text=True).stdout)
    outputs = {}
    for beam, lists in raw.items():
        hypotheses = []
        for text in lists:
            first = text.splitlines()[0].split(" ||| ")  # the best: "0 ||| pieces ||| WordScores= … ||| F0= … ||| s"
            hypotheses.append({"pieces": first[1].split(), "word_scores": [float(v) for v in first[2].split()[1:]],
                               "score": float(first[-1])})
        outputs[f"beam{beam}"] = hypotheses
    return outputs
