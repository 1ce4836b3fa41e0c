"""AR Transformer on the embedded synthetic corpus: the quick demo (about 10 minutes on a 2-core CPU).

python -m jaxnat.main --config configs/ar/demo.py --workdir runs/ar-demo
"""

from jaxnat.config import default_config


def get_config():
    c = default_config()
    c.model.update(d_model=256, ffn_dim=1024, num_heads=4, enc_layers=3, dec_layers=3, dropout=0.1, max_len=64)
    c.data.update(source="synthetic", vocab_size=1000, max_len=40, batch_tokens=2048)
    # a closed alphabet, every word one piece; text outside it is refused or reported, never silently changed
    c.data.byte_fallback = False
    c.train.update(steps=500, lr=1.5e-3, warmup_steps=200, log_every=50, eval_every=250, checkpoint_every=250,
                   valid_bleu_sentences=200)
    c.eval.update(beam_size=4, latency_sentences=50)
    return c
