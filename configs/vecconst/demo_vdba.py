"""The vectorized-constraints demo (configs/vecconst/demo.py) for decoding with VDBA: α / β = 0.5 / 0.5 (the
paper's App. B), the model of the "vectorized + VDBA" row.

python -m jaxnat.main --config configs/vecconst/demo_vdba.py --workdir runs/vecconst-vdba-demo
"""

import os

from jaxnat.config import load_config


def get_config():
    c = load_config(os.path.join(os.path.dirname(os.path.abspath(__file__)), "demo.py"))
    c.vecconst.update(alpha=0.5, beta=0.5)
    return c
