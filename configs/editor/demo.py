"""EDITOR on the embedded synthetic corpus: the README's main command. Trains, then evaluates without
constraints, with soft and with hard constraints (one table: BLEU, RIBES, CPR, latency, edits per sentence) and
writes WORKDIR/trace.html, the edit trace of a few sentences, in under 10 minutes on a 2-core CPU.

python -m jaxnat.main --config configs/editor/demo.py --workdir runs/editor-demo
"""

from jaxnat.config import default_config


def get_config():
    c = default_config()
    c.model.update(name="editor", d_model=256, ffn_dim=1024, num_heads=4, enc_layers=3, dec_layers=3, dropout=0.1,
                   max_len=96, separate_reposition=True)
    c.data.update(source="synthetic", vocab_size=1000, max_len=40, batch_tokens=2048)
    c.train.update(steps=500, lr=1.5e-3, warmup_steps=200, log_every=50, eval_every=250, checkpoint_every=250,
                   valid_bleu_sentences=200, weight_decay=0.01)
    c.eval.update(latency_sentences=50, max_iter=9, constraints="soft,hard", trace_sentences=5)
    return c
