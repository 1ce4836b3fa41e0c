"""AR Transformer (d 256, 3+3 layers) on Multi30k En->De, for one GPU: the model of configs/ar/multi30k.py with
the one-GPU recipe of configs/ar/multi30k_gpu.py (bf16 compute, 16k-token packed batches, evaluation in batches
of 128). The smaller of the two teacher sizes the Multi30k tables report (`launch/multi30k.py --gpu --teacher
ar-small` distils with it).

    python -m jaxnat.main --config configs/ar/multi30k_small_gpu.py --workdir runs/ar-small-multi30k \
        --config.data.dir=../shared/data/multi30k
"""

import os

from jaxnat.config import for_one_gpu, load_config

SIZE = ("d_model", "ffn_dim", "num_heads", "enc_layers", "dec_layers")


def get_config():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "multi30k.py")
    model = load_config(path).model
    config = for_one_gpu(load_config(path))
    config.model.update({key: model[key] for key in SIZE})
    return config
