"""Vectorized lexical constraints on Multi30k En→De, stage 2 (Wang et al. 2022, §4.1): all parameters trained,
starting from the AR run of stage 1 (configs/ar/multi30k.py, whose parameters keep their names here; the new
ones — pair attention, adapters, plug-in gate — start from their initialisation), on 1–3 constraint pairs a
sentence from eflomal alignments (python -m jaxnat.data.alignment), α / β = 0.8 / 0.2 for beam search.

python -m jaxnat.data.alignment --data-dir ../shared/data/multi30k --src en --tgt de \
    --splits val,test_2016_flickr --output runs/align-multi30k --code-switch
python -m jaxnat.main --config configs/vecconst/multi30k.py --workdir runs/vecconst-multi30k \
    --config.data.dir=../shared/data/multi30k --config.train.init_from=runs/ar-multi30k \
    --config.data.pairs_dir=runs/align-multi30k
The whole pipeline (both stages, every variant): python launch/multi30k.py --tables vecconst.
"""

import os

from jaxnat.config import load_config


def get_config():
    c = load_config(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ar", "multi30k.py"))
    c.model.name = "vecconst"
    c.data.update(pairs_dir="runs/align-multi30k")
    # the second stage on the authors' schedule (their README: 10k updates, 4k warming up to 1e-4, then a cosine
    # down to 1e-7; dropout 0.1), shortened to this config's 1000 updates with the same proportions
    c.model.update(dropout=0.1)
    c.train.update(init_from="runs/ar-multi30k", steps=1000, lr_schedule="cosine",
                   lr=1e-4, warmup_steps=400, warmup_init_lr=1e-7, min_lr=1e-7, eval_every=250, checkpoint_every=100)
    c.eval.update(throughput_batch=128)
    c.vecconst.update(alpha=0.8, beta=0.2)
    return c
