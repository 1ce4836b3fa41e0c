"""EDITOR "−dual-path" (configs/editor/ablation_no_dual_path.py) for one GPU, as configs/editor/multi30k_gpu.py
sizes its control: the papers' base model, bf16, at most three batch shapes, each layer stack one `nn.scan`.

    python -m jaxnat.main --config configs/editor/ablation_no_dual_path_gpu.py \
        --workdir runs/editor-base-multi30k-no-dual-path --config.data.dir=runs/kd-multi30k
"""

import os

from jaxnat.config import for_one_gpu, load_config


def get_config():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ablation_no_dual_path.py")
    return for_one_gpu(load_config(path), scan_layers=True)
