"""configs/vecconst/wmt14_en_de.py trained for decoding with VDBA: α / β = 0.5 / 0.5 (the paper's App. B), the
model of the "vectorized + VDBA" row on WMT14 En→De, for GPU machines.

python -m jaxnat.main --config configs/vecconst/wmt14_en_de_vdba.py --workdir runs/vecconst-vdba-wmt14 \
    --config.data.dir=data/wmt14_en_de --config.train.init_from=runs/ar-wmt14
Its `<split>+pairs_hard` row is the paper's "vectorized + VDBA"; the vanilla AR run evaluated with the pairs gives
"vanilla + VDBA".
"""

import os

from jaxnat.config import load_config


def get_config():
    c = load_config(os.path.join(os.path.dirname(os.path.abspath(__file__)), "wmt14_en_de.py"))
    c.vecconst.update(alpha=0.5, beta=0.5)
    return c
