"""The "vanilla" model of the vectorized-constraints demo: the AR Transformer of configs/ar/demo.py trained on
the demo's data (configs/vecconst/demo.py says why this part of the corpus), evaluated with the same
constraint pairs: test+pairs (plain beam search; CSR counts the pairs' target phrases found) and
test+pairs_hard (the phrases guaranteed by constrained beam search, VDBA).

python -m jaxnat.main --config configs/vecconst/vanilla_demo.py --workdir runs/vanilla-demo
"""

import os

from jaxnat.config import load_config


def get_config():
    c = load_config(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ar", "demo.py"))
    c.data.update(pairs_dir="synthetic", max_pair_pieces=4, synthetic_lexicon=0.3,
                  synthetic_kinds="simple,question", bucket_growth=2.0, bucket_multiple=8)
    c.train.update(steps=400, eval_every=400)  # one validation, at the end: a mid-run one cost 20 s of the 10 minutes
    return c
