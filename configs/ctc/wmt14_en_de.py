"""CTC-NAT with glancing, base size, on distilled WMT14 En->De: Gu & Kong's recipe (2021, the authors' README), for
GPU machines.

d 512, FFN 2048, 8 heads, 6+6 layers, learned positions, shared embeddings; the canvas 3 × the source
(--src-upsample 3); Adam (0.9, 0.999), ε 1e-6, gradients clipped at norm 2.4, lr 5e-4 with 10k warm-up steps
from 1e-7 and inverse-sqrt decay, dropout 0.3,
label smoothing 0.1, weight decay 0.01, 300k updates; glancing ratio 0.5 → 0.3 over training (GLAT's
schedule). Sequence-level distillation from the AR teacher.

1. The teacher and its distilled training set (configs/ar/wmt14_en_de.py; see configs/levt/wmt14_en_de.py).
2. python -m jaxnat.main --config configs/ctc/wmt14_en_de.py --workdir runs/ctc-wmt14 \
       --config.data.dir=data/wmt14-kd --config.data.spm_from=runs/ar-wmt14
3. Prefix beam search at evaluation: --mode eval --config.eval.beam_size=20 (the authors' beam, without their LM).
"""

from jaxnat.config import default_config


def get_config():
    c = default_config()
    # model.max_len: the canvas of the longest source, 3 × 256 frames
    c.model.update(name="ctc", d_model=512, ffn_dim=2048, num_heads=8, enc_layers=6, dec_layers=6, dropout=0.3,
                   max_len=768, positions="learned", dtype="bfloat16")
    c.data.update(source="text", src_lang="en", tgt_lang="de", train_split="train",
                  valid_split="validation", test_splits="test", vocab_size=32000, max_len=256,
                  batch_tokens=65536)
    c.train.update(steps=300000, lr=5e-4, warmup_steps=10000, warmup_init_lr=1e-7, weight_decay=0.01,
                   label_smoothing=0.1, adam_b2=0.999, adam_eps=1e-6, clip_norm=2.4,
                   log_every=100, eval_every=5000, checkpoint_every=2000, valid_bleu_sentences=1000)
    c.eval.update(batch_size=128)
    c.ctc.update(upsample=3, glancing=True, glance_start=0.5, glance_end=0.3)
    return c
