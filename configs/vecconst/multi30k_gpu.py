"""Vectorized lexical constraints (stage 2) on Multi30k En->De, for one GPU, from the AR-base run.

    python -m jaxnat.main --config configs/vecconst/multi30k_gpu.py --workdir runs/vecconst-base-multi30k \
        --config.data.dir=../shared/data/multi30k --config.train.init_from=runs/ar-base-multi30k \
        --config.data.pairs_dir=runs/align-multi30k
Sized for one GPU (`jaxnat.config.for_one_gpu`): the papers' base model (d 512, 6+6 layers), bf16 compute with
f32 parameters, 16k-token batches, several pairs a row (packed); budgets and data as in multi30k.py, whose
docstring says how to prepare them.
"""

import os

from jaxnat.config import for_one_gpu, load_config


def get_config():
    return for_one_gpu(load_config(os.path.join(os.path.dirname(os.path.abspath(__file__)), "multi30k.py")))
