"""Levenshtein Transformer, base size, on distilled WMT14 En->De: the reference recipe, for GPU machines.

Recipe (the authors' public fairseq recipe; docs/levt.md): d 512, 6+6 layers, learned positions, BERT-style
N(0, 0.02) init, shared and tied embeddings, Adam (0.9, 0.98), lr 5e-4 with 10k warm-up steps, dropout 0.3,
weight decay 0.01, label smoothing 0.1 on the token head (0.01 on the placeholder head), 300k updates of about
64k tokens.

1. Train the AR teacher (configs/ar/wmt14_en_de.py), 2. distil its beam-4 output of the training sources:
python -m jaxnat.main --mode distill --config configs/ar/wmt14_en_de.py --workdir runs/ar-wmt14 \
    --config.data.tfds_data_dir=/data/tensorflow_datasets --output data/wmt14-kd
3. train the student on it (64k tokens a step, e.g. 8 GPUs × 8192):
python -m jaxnat.main --config configs/levt/wmt14_en_de.py --workdir runs/levt-wmt14 \
    --config.data.dir=data/wmt14-kd
"""

from jaxnat.config import default_config


def get_config():
    c = default_config()
    c.model.update(name="levt", d_model=512, ffn_dim=2048, num_heads=8, enc_layers=6, dec_layers=6, dropout=0.3,
                   positions="learned", max_len=256, bert_init=True, dtype="bfloat16")
    c.data.update(source="text", src_lang="en", tgt_lang="de", train_split="train",
                  valid_split="validation", test_splits="test", vocab_size=32000, max_len=256,
                  batch_tokens=65536)
    c.train.update(steps=300000, lr=5e-4, warmup_steps=10000, weight_decay=0.01, label_smoothing=0.1,
                   clip_norm=0.0, log_every=100, eval_every=5000,
                   checkpoint_every=2000, valid_bleu_sentences=1000)
    c.eval.update(batch_size=128, constraints="soft,hard")
    c.levt.update(placeholder_smoothing=0.01, max_iter=9)
    return c
