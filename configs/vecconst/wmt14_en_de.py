"""Vectorized lexical constraints with Transformer-base on WMT14 En→De (the paper's base recipe), for GPU
machines; stage 2 of two, starting from the AR run of configs/ar/wmt14_en_de.py trained on the same text files.

The corpus as text files {train,newstest2013,newstest2014}.{en,de} in data/wmt14_en_de (the aligner reads text),
its constraint pairs beside it:
python -m jaxnat.data.alignment --data-dir data/wmt14_en_de --src en --tgt de --splits newstest2013,newstest2014
python -m jaxnat.main --config configs/vecconst/wmt14_en_de.py --workdir runs/vecconst-wmt14 \
    --config.data.dir=data/wmt14_en_de --config.train.init_from=runs/ar-wmt14
α / β = 0.8 / 0.2 for beam search; --config.vecconst.alpha=0.5 --config.vecconst.beta=0.5 for VDBA.
Stage 2 follows the authors' published schedule (their repository's README): 10k updates, 4k of them warming up
to 1e-4, then half a cosine down to 1e-7 (fairseq's cosine scheduler, one 6k-update period), dropout 0.1.
"""

import os

from jaxnat.config import load_config


def get_config():
    c = load_config(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ar", "wmt14_en_de.py"))
    c.model.name = "vecconst"
    c.data.update(source="text", train_split="train", valid_split="newstest2013",
                  test_splits="newstest2014", pairs_dir="data/wmt14_en_de")
    c.model.update(dropout=0.1)
    c.train.update(init_from="runs/ar-wmt14", steps=10000, lr_schedule="cosine",
                   lr=1e-4, warmup_steps=4000, warmup_init_lr=1e-7, min_lr=1e-7, eval_every=2000)
    c.eval.update(throughput_batch=128)
    c.vecconst.update(alpha=0.8, beta=0.2)
    return c
