"""DA-Transformer-base on raw WMT14 En->De: the paper's recipe (Huang et al. 2022 and the authors' script),
for GPU machines.

d 512, FFN 2048, 8 heads, 6+6 layers, λ = 8 (graphs of 8 · |x| vertices), learned positions, shared embeddings;
glancing annealed 0.5 → 0.1 over 200k updates; Adam (β 0.9, 0.999), lr 5e-4 with 10k warm-up steps from 1e-7 and
inverse-sqrt decay, weight decay 0.01, dropout 0.1, no label smoothing, gradients clipped at norm 0.1, batches of
64k tokens, 300k updates; raw data (no distillation); lookahead decoding (β = 1), or joint Viterbi
(--config.dat.decode=viterbi), or beam search (--config.dat.decode=beam --config.eval.beam_size=200, or the
authors' own: --config.dat.decode=dagsearch --config.eval.beam_size=200; the paper's 5-gram LM with
--config.eval.lm=FILE, which --mode lm --config.eval.lm_order=5 writes).

python -m jaxnat.main --config configs/dat/wmt14_en_de.py --workdir runs/dat-wmt14 --config.data.dir=data/wmt14
"""

from jaxnat.config import default_config


def get_config():
    c = default_config()
    c.model.update(name="dat", d_model=512, ffn_dim=2048, num_heads=8, enc_layers=6, dec_layers=6, dropout=0.1,
                   max_len=256, positions="learned", dtype="bfloat16", scan_layers=True)
    c.data.update(source="text", src_lang="en", tgt_lang="de", train_split="train",
                  valid_split="validation", test_splits="test", vocab_size=32000, max_len=256,
                  batch_tokens=65536)
    c.train.update(steps=300000, lr=5e-4, warmup_steps=10000, warmup_init_lr=1e-7, weight_decay=0.01,
                   clip_norm=0.1, adam_b1=0.9, adam_b2=0.999,
                   log_every=100, eval_every=5000, checkpoint_every=2000, valid_bleu_sentences=1000)
    c.eval.update(batch_size=128)
    c.dat.update(upsample=8, glance_start=0.5, glance_end=0.1, glance_steps=200000, decode="lookahead")
    return c
