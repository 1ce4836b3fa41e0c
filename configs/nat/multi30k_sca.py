"""Coverage-NAT on distilled Multi30k, the fine-tuning phase (Shan et al. §III-D, eq. 16): the pre-trained run's
best parameters, sentence-level coverage agreement added with β = 0.5, a fixed learning rate, a short phase.

    python -m jaxnat.main --config configs/nat/multi30k_sca.py --workdir runs/covnat-sca-multi30k \
        --config.data.dir=runs/kd-multi30k --config.train.init_from=runs/covnat-multi30k
(the first phase: configs/nat/multi30k.py; its vocabulary comes with it).
"""

import os

from jaxnat.config import load_config


def get_config():
    c = load_config(os.path.join(os.path.dirname(os.path.abspath(__file__)), "multi30k.py"))
    c.train.update(init_from="runs/covnat-multi30k", lr_schedule="constant", lr=1e-5,
                   warmup_steps=0, steps=500, eval_every=250, checkpoint_every=250)
    c.nat.update(sca_weight=0.5)
    return c
