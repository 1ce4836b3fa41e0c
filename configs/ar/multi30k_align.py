"""The AR Transformer of configs/ar/multi30k.py, trained to align as it translates (guided alignment, Garg et al.
2019): its penultimate decoder layer's first head learns eflomal's word alignments of the training data, read with
the whole translation in view (full context), so that `--config.eval.alignment=words` gives trained alignments.

    python -m jaxnat.data.alignment --data-dir ../shared/data/multi30k --src en --tgt de --output runs/multi30k-align
    python -m jaxnat.main --config configs/ar/multi30k_align.py --workdir runs/ar-multi30k-align \
        --config.data.dir=../shared/data/multi30k --config.data.alignments_dir=runs/multi30k-align
    python -m jaxnat.main --workdir runs/ar-multi30k-align --mode translate --config.eval.alignment=words < input.txt

The first command (the `align` extra: eflomal) writes train.align and val.align, Pharaoh links over Moses words.
"""

import os

from jaxnat.config import load_config


def get_config():
    config = load_config(os.path.join(os.path.dirname(os.path.abspath(__file__)), "multi30k.py"))
    config.model.update(alignment_layer=-2, alignment_heads=1, full_context_alignment=True)
    config.train.alignment_lambda = 0.05  # the paper's weight
    return config
