"""Levenshtein Transformer on the embedded synthetic corpus: trains and evaluates (plain, soft and hard
constraints) in minutes on a 2-core CPU.

python -m jaxnat.main --config configs/levt/demo.py --workdir runs/levt-demo
"""

from jaxnat.config import default_config


def get_config():
    c = default_config()
    c.model.update(name="levt", d_model=256, ffn_dim=1024, num_heads=4, enc_layers=3, dec_layers=3, dropout=0.1,
                   max_len=96)
    c.data.update(source="synthetic", vocab_size=1000, max_len=40, batch_tokens=2048)
    c.train.update(steps=600, lr=1.5e-3, warmup_steps=200, log_every=50, eval_every=300, checkpoint_every=200,
                   valid_bleu_sentences=200, weight_decay=0.01)
    c.eval.update(latency_sentences=50, beam_size=1, max_iter=9, constraints="soft,hard")
    return c
