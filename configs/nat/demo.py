"""Coverage-NAT on the embedded synthetic corpus: trains (pre-training: token and length losses), then
evaluates one-pass decoding with repeated tokens removed (BLEU, RIBES, the repeated-token ratio before removal
overall and for the short and long halves, latency) and the coverage layer at K_dec = 1, 3, 5, in under 10
minutes on a 2-core CPU.

python -m jaxnat.main --config configs/nat/demo.py --workdir runs/nat-demo

NAT-base instead: --config.nat.coverage=false --config.eval.iteration_sweep= (no K_dec to sweep).
The paper's second phase, sentence-level coverage agreement at a fixed small learning rate, starts from this run
(docs/nat.md):
python -m jaxnat.main --config configs/nat/demo.py --workdir runs/nat-demo-sca --config.train.init_from=runs/nat-demo \
    --config.nat.sca_weight=0.5 --config.train.lr_schedule=constant --config.train.lr=1e-4 \
    --config.train.warmup_steps=0 --config.train.steps=200 --config.train.eval_every=200

The EDITOR demo's corpus and the CMLMC demo's model size, 1500 steps (d 128, 2+2 layers: one plain decoder
layer under the coverage layer).
"""

from jaxnat.config import default_config


def get_config():
    c = default_config()
    c.model.update(name="nat", d_model=128, ffn_dim=512, num_heads=4, enc_layers=2, dec_layers=2, dropout=0.1,
                   max_len=96, positions="learned")
    # 3 batch shapes (8, 16, 32 tokens): less compiling, which is a good part of a 10-minute budget
    c.data.update(source="synthetic", spm_model_type="bpe", vocab_size=1500, max_len=40, batch_tokens=1024,
                  bucket_growth=2.0, bucket_multiple=8, synthetic_kinds="simple,question", synthetic_lexicon=0.3,
                  synthetic_multimodal=False, synthetic_synonyms=1.0)
    c.data.byte_fallback = False  # a closed alphabet, every word one piece
    c.train.update(steps=1500, lr=3e-3, warmup_steps=200, log_every=100, eval_every=1500, checkpoint_every=250,
                   valid_bleu_sentences=200, weight_decay=0.01)
    c.eval.update(latency_sentences=30, iteration_sweep="1,3,5")
    c.nat.update(length_prediction="pooled", coverage=True, train_iterations=5, length_beam=1, decode_iterations=5,
                 remove_repeats=True, candidate_score="log_probability")
    return c
