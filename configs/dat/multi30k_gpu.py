"""DA-Transformer-base (λ = 8) on raw Multi30k En->De, for one GPU.

    python -m jaxnat.main --config configs/dat/multi30k_gpu.py --workdir runs/dat-base-multi30k \
        --config.data.dir=../shared/data/multi30k
Sized for one GPU (`jaxnat.config.for_one_gpu`): the papers' base model (d 512, 6+6 layers), bf16 compute with
f32 parameters, each layer stack one `nn.scan`, buckets of 16, 32, 64 and 100 tokens; batches of 8k tokens a
side, not 16k: the decoder reads 8 vertices per source token, and the train step's memory at 16k tokens is in
docs/dat.md (`python -m tests.test_dat_memory --config configs/dat/multi30k_gpu.py`). Rows are not packed (the
family does not pack: docs/dat.md says why). Budgets and data as in multi30k.py, whose docstring says how to
prepare them.
"""

import os

from jaxnat.config import for_one_gpu, load_config


def get_config():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "multi30k.py")
    c = for_one_gpu(load_config(path), scan_layers=True)
    c.data.update(batch_tokens=8192)
    return c
