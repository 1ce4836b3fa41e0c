"""Transformer-base (Vaswani et al. 2017) on WMT14 En->De, for GPU machines.

Prepare the TFDS dataset once on a machine with TensorFlow and network access (see jaxnat/data/tfds_builder.py),
then:
python -m jaxnat.main --config configs/ar/wmt14_en_de.py --workdir runs/ar-wmt14 \
    --config.data.tfds_data_dir=/data/tensorflow_datasets
"""

from jaxnat.config import default_config


def get_config():
    c = default_config()
    c.model.update(d_model=512, ffn_dim=2048, num_heads=8, enc_layers=6, dec_layers=6, dropout=0.1, max_len=256,
                   dtype="bfloat16")  # bf16 compute, f32 parameters (docs/benchmarks.md, "Mixed precision")
    c.data.update(source="tfds", tfds_name="wmt14_translate/de-en", src_lang="en", tgt_lang="de",
                  train_split="train", valid_split="validation", test_splits="test",
                  vocab_size=32000, max_len=256, batch_tokens=32768)
    c.train.update(steps=300000, lr=7e-4, warmup_steps=4000, label_smoothing=0.1, clip_norm=0.0,
                   log_every=100, eval_every=5000, checkpoint_every=2000, valid_bleu_sentences=1000)
    c.eval.update(beam_size=4, length_penalty=0.6, batch_size=128)
    return c
