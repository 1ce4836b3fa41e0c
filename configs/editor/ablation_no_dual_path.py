"""EDITOR "−dual-path" (Xu and Carpuat 2021, Table 5): configs/editor/multi30k.py with Gu et al.'s roll-in
instead of dual-path roll-in, to measure what dual-path imitation learning brings.

Gu et al. roll in with the model's insertion policy only: the insertion heads always learn on the noised
reference y0 (eq. 7 with α = 1: never on the model's reposition), and the reposition head, like LevT's
deletion head, on the model's output — y0 with the oracle's placeholders filled by the token head (eq. 6 with
β = 0). Everything else (model, data, schedule, evaluation) is multi30k.py's but its two roll-in additions
beyond the paper (editor.own_insertion_roll_in, editor.global_shuffle), off here as in the paper; its control is
multi30k.py with them off too, so the two runs compare the roll-in alone. Train the AR teacher and distil first
(see configs/editor/multi30k.py), then:
    python -m jaxnat.main --config configs/editor/ablation_no_dual_path.py \
        --workdir runs/editor-kd-multi30k-no-dual-path --config.data.dir=runs/kd-multi30k
    python -m jaxnat.main --config configs/editor/multi30k.py --workdir runs/editor-kd-multi30k-paper-roll-in \
        --config.data.dir=runs/kd-multi30k --config.editor.own_insertion_roll_in=0 --config.editor.global_shuffle=0
"""

import os

from jaxnat.config import load_config


def get_config():
    c = load_config(os.path.join(os.path.dirname(os.path.abspath(__file__)), "multi30k.py"))
    c.editor.update(dual_path=False, roll_in_alpha=1.0, roll_in_beta=0.0, own_insertion_roll_in=0.0, global_shuffle=0.0)
    return c
