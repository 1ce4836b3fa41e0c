"""Coverage-NAT, base size, on distilled WMT14 En->De: the paper's recipe (Shan, Feng and Shao 2021, §IV), for
GPU machines.

d 512, FFN 2048, 8 heads, 6+6 layers (the top decoder layer is the coverage layer), K_train = K_dec = 5,
α = 0.1; Adam, lr 5e-4 with 10k warm-up steps and inverse-sqrt decay, batches of 64k tokens, 400k steps of
pre-training; then 1k steps of fine-tuning with SCA (β = 0.5) at a fixed lr of 1e-5. Sequence-level
distillation from the AR teacher; length-parallel decoding of 9 candidates rescored by the teacher.

1. The teacher and its distilled training set (configs/ar/wmt14_en_de.py; see configs/levt/wmt14_en_de.py).
2. Pre-training, on the teacher's vocabulary (so that it can rescore):
python -m jaxnat.main --config configs/nat/wmt14_en_de.py --workdir runs/covnat-wmt14 \
    --config.data.dir=data/wmt14-kd --config.data.spm_from=runs/ar-wmt14
3. Fine-tuning with sentence-level coverage agreement, from the best checkpoint of step 2:
python -m jaxnat.main --config configs/nat/wmt14_en_de.py --workdir runs/covnat-sca-wmt14 \
    --config.data.dir=data/wmt14-kd --config.train.init_from=runs/covnat-wmt14 --config.nat.sca_weight=0.5 \
    --config.train.lr_schedule=constant \
    --config.train.lr=1e-5 --config.train.warmup_steps=0 --config.train.steps=1000 --config.train.eval_every=500
4. Rescored evaluation: --mode eval --config.nat.length_beam=9 --config.nat.rescorer=runs/ar-wmt14.
NAT-base: --config.nat.coverage=false.
"""

from jaxnat.config import default_config


def get_config():
    c = default_config()
    c.model.update(name="nat", d_model=512, ffn_dim=2048, num_heads=8, enc_layers=6, dec_layers=6, dropout=0.1,
                   max_len=256, positions="learned", dtype="bfloat16")
    c.data.update(source="text", src_lang="en", tgt_lang="de", train_split="train",
                  valid_split="validation", test_splits="test", vocab_size=32000, max_len=256,
                  batch_tokens=65536)
    c.train.update(steps=400000, lr=5e-4, warmup_steps=10000, weight_decay=0.01, label_smoothing=0.1,
                   log_every=100, eval_every=5000, checkpoint_every=2000, valid_bleu_sentences=1000)
    c.eval.update(batch_size=128)
    c.nat.update(length_prediction="pooled", coverage=True, train_iterations=5, length_beam=1,
                 length_beam_mode="centred", decode_iterations=5, remove_repeats=True,
                 candidate_score="log_probability")
    return c
