"""CTC-NAT with glancing on the embedded synthetic corpus: trains (CTC loss on a canvas of 3 × the source, glancing
ratio 0.5 → 0.3), then evaluates greedy decoding without constraints, with soft and with hard constraints (one
table: BLEU, RIBES, CPR, repetition, latency), in about 10 minutes on a 2-core CPU (10 min 34 s measured alone on
an AMD EPYC: docs/ctc.md, "The demo's budget").

python -m jaxnat.main --config configs/ctc/demo.py --workdir runs/ctc-demo

Plain CTC instead: --config.ctc.glancing=false. Prefix beam search at evaluation: --config.eval.beam_size=5.

The NAT demo's corpus, model size and budget (configs/nat/demo.py: d 128, 2+2 layers, 1500 steps), so the
families compare on the same data; model.max_len 128 holds the canvas of the longest source (3 × 40 frames).
"""

from jaxnat.config import default_config


def get_config():
    c = default_config()
    c.model.update(name="ctc", d_model=128, ffn_dim=512, num_heads=4, enc_layers=2, dec_layers=2, dropout=0.1,
                   max_len=128, positions="learned")
    # the NAT demo's corpus and its 3 batch shapes (8, 16, 32 tokens)
    c.data.update(source="synthetic", spm_model_type="bpe", vocab_size=1500, max_len=40, batch_tokens=1024,
                  bucket_growth=2.0, bucket_multiple=8, synthetic_kinds="simple,question", synthetic_lexicon=0.3,
                  synthetic_multimodal=False, synthetic_synonyms=1.0)
    c.data.byte_fallback = False  # a closed alphabet, every word one piece
    c.train.update(steps=1500, lr=3e-3, warmup_steps=200, log_every=100, eval_every=1500, checkpoint_every=250,
                   valid_bleu_sentences=200, weight_decay=0.01)
    c.eval.update(latency_sentences=30, constraints="soft,hard")
    c.ctc.update(upsample=3, glancing=True, glance_start=0.5, glance_end=0.3)
    return c
