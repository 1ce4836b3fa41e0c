"""CTC-NAT with glancing, base size, on distilled Multi30k En->De, for one GPU.

    python -m jaxnat.main --config configs/ctc/multi30k_gpu.py --workdir runs/ctc-base-multi30k \
        --config.data.dir=runs/kd-multi30k --config.data.spm_from=runs/ar-base-multi30k
Sized for one GPU (`jaxnat.config.for_one_gpu`): the papers' base model (d 512, 6+6 layers), bf16 compute with
f32 parameters, 16k-token batches, each layer stack one `nn.scan`; budgets and data as in multi30k.py, whose
docstring says how to prepare them. Not packed: the CTC family trains on padded batches (docs/ctc.md, "Packing";
for_one_gpu's data.pack is ignored by a family that does not pack).
"""

import os

from jaxnat.config import for_one_gpu, load_config


def get_config():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "multi30k.py")
    return for_one_gpu(load_config(path), scan_layers=True)
