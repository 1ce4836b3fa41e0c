"""Vectorized lexical constraints (Wang et al. 2022) on the embedded synthetic corpus: the quick demo (about
10 minutes on a 2-core CPU), trained in one stage from scratch on 1–3 constraint pairs a sentence drawn from the
corpus's lexicon (its nouns and multi-word terms: data.pairs_dir="synthetic"), α / β = 0.8 / 0.2 for beam search.

python -m jaxnat.main --config configs/vecconst/demo.py --workdir runs/vecconst-demo

Evaluation adds the rows test+pairs (the pairs as input, beam search) and test+pairs_hard (their target
phrases also guaranteed by constrained beam search), with CSR as `cpr`. The paper's two stages (an AR run, then
all parameters): configs/vecconst/multi30k.py with launch/multi30k_vecconst.sh.
"""

import os

from jaxnat.config import load_config


def get_config():
    c = load_config(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ar", "demo.py"))
    c.model.name = "vecconst"
    c.data.update(pairs_dir="synthetic", synthetic_lexicon=0.4)
    c.train.update(pair_alpha=0.8, pair_beta=0.2)
    c.eval.update(throughput_batch=128)
    return c
