"""The vectorized model for decoding with VDBA (α / β = 0.5 / 0.5) on Multi30k En→De, for one GPU:
configs/vecconst/multi30k_vdba.py sized as configs/vecconst/multi30k_gpu.py (`jaxnat.config.for_one_gpu`).

    python -m jaxnat.main --config configs/vecconst/multi30k_vdba_gpu.py --workdir runs/vecconst-vdba-base-multi30k \
        --config.data.dir=DATA --config.train.init_from=runs/ar-base-multi30k \
        --config.data.pairs_dir=runs/align-multi30k
"""

import os

from jaxnat.config import for_one_gpu, load_config


def get_config():
    return for_one_gpu(load_config(os.path.join(os.path.dirname(os.path.abspath(__file__)), "multi30k_vdba.py")))
