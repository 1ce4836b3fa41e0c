"""The AR Transformer trained alike the one-pass NAT demos (configs/nat/demo.py: their corpus, model size and
1500 updates), decoded with beam 4: the baseline row of docs/results.md's table of the one-pass models on the
embedded corpus (DA-Transformer, CTC, NAT-base, Coverage-NAT, CMLMC).

python -m jaxnat.main --config configs/ar/nat_demo_baseline.py --workdir runs/ar-nat-demo
"""

from configs.nat.demo import get_config as nat_demo
from jaxnat.config import default_config


def get_config():
    c, nat = default_config(), nat_demo()
    for section in ("model", "data", "train", "eval"):  # not its `nat` section, which an AR run does not read
        c[section].update(nat[section])
    c.model.name = "ar"
    c.eval.update(beam_size=4, iteration_sweep="")
    return c
