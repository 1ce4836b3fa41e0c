"""configs/vecconst/multi30k.py trained for decoding with VDBA: α / β = 0.5 / 0.5 (the paper's App. B), the
model of the "vectorized + VDBA" row.

python -m jaxnat.main --config configs/vecconst/multi30k_vdba.py --workdir runs/vecconst-vdba-multi30k \
    --config.data.dir=../shared/data/multi30k --config.train.init_from=runs/ar-multi30k \
    --config.data.pairs_dir=runs/align-multi30k
"""

import os

from jaxnat.config import load_config


def get_config():
    c = load_config(os.path.join(os.path.dirname(os.path.abspath(__file__)), "multi30k.py"))
    c.vecconst.update(alpha=0.5, beta=0.5)
    return c
