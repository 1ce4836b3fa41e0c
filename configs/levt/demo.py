"""Levenshtein Transformer on the embedded synthetic corpus: trains, then evaluates without constraints, with
soft and with hard constraints (one table: BLEU, RIBES, CPR, latency, edits per sentence), in under 10 minutes
on a 2-core CPU.

python -m jaxnat.main --config configs/levt/demo.py --workdir runs/levt-demo

Sized like the EDITOR demo: an edit-based model needs many more updates than an AR one, so the demo trains a
small model (d 128, 2+2 layers) for many cheap steps of 1024 tokens.
"""

from jaxnat.config import default_config


def get_config():
    c = default_config()
    c.model.update(name="levt", d_model=128, ffn_dim=512, num_heads=4, enc_layers=2, dec_layers=2, dropout=0.1,
                   max_len=96)
    # bucket lengths in multiples of 8: 3 train shapes fitted to the data (data.max_buckets: 8, 16, 32), decoding
    # on 8, 16, 32, 40: less compiling, which is a good part of a 10-minute budget
    c.data.update(source="synthetic", spm_model_type="bpe", vocab_size=1500, max_len=40, batch_tokens=1024,
                  bucket_growth=2.0, bucket_multiple=8)
    # a closed alphabet, every word one piece; text outside it is refused or reported, never silently changed
    c.data.byte_fallback = False
    c.train.update(steps=2000, lr=3e-3, warmup_steps=200, log_every=100, eval_every=1000, checkpoint_every=250,
                   valid_bleu_sentences=200, weight_decay=0.01)
    c.eval.update(latency_sentences=30, constraints="soft,hard")
    c.levt.update(max_iter=9)
    return c
