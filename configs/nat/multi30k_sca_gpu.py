"""Coverage-NAT-base on distilled Multi30k, the fine-tuning phase with sentence-level coverage agreement, for one
GPU: configs/nat/multi30k_sca.py sized as configs/nat/multi30k_gpu.py (`jaxnat.config.for_one_gpu`, its layer
stacks scanned as there: the run it starts from).

    python -m jaxnat.main --config configs/nat/multi30k_sca_gpu.py --workdir runs/covnat-sca-base-multi30k \
        --config.data.dir=runs/kd-multi30k --config.train.init_from=runs/covnat-base-multi30k
"""

import os

from jaxnat.config import for_one_gpu, load_config


def get_config():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "multi30k_sca.py")
    return for_one_gpu(load_config(path), scan_layers=True)
