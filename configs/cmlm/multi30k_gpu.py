"""CMLMC-base on Multi30k En->De, raw or distilled, for one GPU.

    python -m jaxnat.main --config configs/cmlm/multi30k_gpu.py --workdir runs/cmlmc-base-multi30k \
        --config.data.dir=../shared/data/multi30k --config.data.spm_from=runs/ar-base-multi30k
Sized for one GPU (`jaxnat.config.for_one_gpu`): the papers' base model (d 512, 6+6 layers), bf16 compute with
f32 parameters, 16k-token batches, several pairs a row (packed), each layer stack one `nn.scan` (with the correction
loss a step runs the decoder twice: its program compiles in a third of the time, docs/benchmarks.md);
budgets and data as in multi30k.py, whose docstring says how to prepare them.
"""

import os

from jaxnat.config import for_one_gpu, load_config


def get_config():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "multi30k.py")
    return for_one_gpu(load_config(path), scan_layers=True)
