"""The AR Transformer trained alike the one-pass NAT demos (configs/nat/demo.py: their corpus, model size and
1500 updates), decoded with beam 4: the baseline row of docs/results.md's table of the one-pass models on the
embedded corpus (DA-Transformer, CTC, NAT-base, Coverage-NAT, CMLMC).

python -m jaxnat.main --config configs/ar/nat_demo_baseline.py --workdir runs/ar-nat-demo
"""

from configs.nat.demo import get_config as nat_demo


def get_config():
    c = nat_demo()
    c.model.name = "ar"
    del c.nat  # the NAT's own section: an AR run reads none
    c.eval.update(beam_size=4, iteration_sweep="")
    return c
