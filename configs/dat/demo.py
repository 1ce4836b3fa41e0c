"""DA-Transformer on the embedded synthetic corpus (the corpus and model size of every NAT demo: d 128, 2+2 layers):
trains with the DAG loss and glancing (ratio 0.5 → 0.1 over the run), then evaluates lookahead decoding (BLEU,
RIBES, the repeated-token ratio before removal, latency), soft and hard constraints (CPR), and decoding on graphs
of λ = 1 and 2, in under 10 minutes on a 2-core CPU.

python -m jaxnat.main --config configs/dat/demo.py --workdir runs/dat-demo

λ = 2 instead of the paper's 8 (the decoder reads λ · |x| vertices, and its self-attention and the DAG loss grow
with their square: on this CPU a step at λ = 4 took 1.7 times as long as at λ = 2), and the NAT demos' 1500
steps (docs/dat.md, "How to run").
Other decoders: --mode eval --config.dat.decode=viterbi (or greedy; beam: --config.dat.decode=beam
--config.eval.beam_size=8).
"""

from jaxnat.config import default_config


def get_config():
    c = default_config()
    c.model.update(name="dat", d_model=128, ffn_dim=512, num_heads=4, enc_layers=2, dec_layers=2, dropout=0.1,
                   max_len=96, positions="learned")
    # the NAT demos' corpus and batch shapes (8, 16, 32 tokens)
    c.data.update(source="synthetic", spm_model_type="bpe", vocab_size=1500, max_len=40, batch_tokens=1024,
                  bucket_growth=2.0, bucket_multiple=8, synthetic_kinds="simple,question", synthetic_lexicon=0.3,
                  synthetic_multimodal=False, synthetic_synonyms=1.0)
    c.data.byte_fallback = False  # a closed alphabet, every word one piece
    c.train.update(steps=1500, lr=3e-3, warmup_steps=200, log_every=100, eval_every=1500, checkpoint_every=250,
                   valid_bleu_sentences=200, weight_decay=0.01)
    c.eval.update(latency_sentences=30, iteration_sweep="1,2", constraints="soft,hard")
    c.dat.update(upsample=2, glance_start=0.5, glance_end=0.1, glance_steps=1500, decode="lookahead")
    return c
