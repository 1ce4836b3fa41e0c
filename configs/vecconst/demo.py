"""Vectorized lexical constraints (Wang et al. 2022) on the embedded synthetic corpus: the quick demo (under 10
minutes on a 2-core CPU), trained in one stage from scratch on 1–3 constraint pairs a sentence drawn from the
corpus's lexicon (its nouns and multi-word terms: data.pairs_dir="synthetic"), α / β = 0.8 / 0.2 for beam search.

python -m jaxnat.main --config configs/vecconst/demo.py --workdir runs/vecconst-demo

Evaluation adds the rows test+pairs (the pairs as input, beam search) and test+pairs_hard (their target
phrases also guaranteed by constrained beam search), with CSR as `cpr`. The paper's two stages (an AR run, then
all parameters): configs/vecconst/multi30k.py with launch/multi30k.py --tables vecconst.

Sized for the budget: the AR demo's model (d 256, 3+3 layers), 400 steps of 2048 tokens, on the part of the
corpus a model learns in them (simple sentences and questions over 30% of the lexicon, as the EDITOR demo);
phrases of at most 4 pieces (the pair slots cost attention in every layer; 8% of the drawn pairs are longer
and left out); 4 batch shapes, since compiling each search at each shape is much of the evaluation's time.
`configs/vecconst/vanilla_demo.py` is the AR model trained alike, the "vanilla" rows.
"""

import os

from jaxnat.config import load_config


def get_config():
    c = load_config(os.path.join(os.path.dirname(os.path.abspath(__file__)), "vanilla_demo.py"))
    c.model.name = "vecconst"
    # a packed row of 40 tokens holds about 4 constraint pieces: 16 entries a row, not 40, in every layer
    c.vecconst.update(alpha=0.8, beta=0.2, packed_entries=16)
    return c
