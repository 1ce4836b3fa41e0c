"""EDITOR-base on distilled Multi30k En->De, for one GPU.

    python -m jaxnat.main --config configs/editor/multi30k_gpu.py --workdir runs/editor-base-multi30k \
        --config.data.dir=runs/kd-multi30k
Sized for one GPU (`jaxnat.config.for_one_gpu`): the papers' base model (d 512, 6+6 layers), bf16 compute with
f32 parameters, 16k-token batches on at most three batch shapes (its oracles work per row: docs/editor.md),
each layer stack one `nn.scan` (a step runs the decoders for three heads: its program compiles in a quarter of
the time, docs/benchmarks.md); budgets and data as in multi30k.py, whose docstring says how to prepare them.
"""

import os

from jaxnat.config import for_one_gpu, load_config


def get_config():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "multi30k.py")
    return for_one_gpu(load_config(path), scan_layers=True)
