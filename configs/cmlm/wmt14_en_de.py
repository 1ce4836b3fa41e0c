"""CMLMC, base size, on WMT14 En->De: the paper's recipe (Huang et al. 2022, §4 and Table B.1), for GPU machines.

d 512, FFN 2048, 8 heads, 6+6 layers, learned positions, RevealPosition (causal sublayer + concatenated
positions), the correction loss with p = 0.3 summed with the mask loss; Adam, lr 7e-4 with 40k warm-up steps,
dropout 0.2, 150k updates of 4 GPUs × 8192 tokens. Decoding: 10 mask-predict passes, length beam 3, the
candidate with the highest average token probability. Raw data (the paper's point); for the distilled rows,
train on the AR teacher's output (configs/ar/wmt14_en_de.py, --mode distill) with data.source=text.

python -m jaxnat.main --config configs/cmlm/wmt14_en_de.py --workdir runs/cmlmc-wmt14 \
    --config.data.tfds_data_dir=/data/tensorflow_datasets
"""

from jaxnat.config import default_config
from jaxnat.models.cmlm.model import AUTHORS_RECIPE


def get_config():
    c = default_config()
    c.model.update(name="cmlm", d_model=512, ffn_dim=2048, num_heads=8, enc_layers=6, dec_layers=6, dropout=0.2,
                   max_len=256, positions="learned", dtype="bfloat16", **AUTHORS_RECIPE)
    c.data.update(source="tfds", tfds_name="wmt14_translate/de-en", src_lang="en", tgt_lang="de",
                  train_split="train", valid_split="validation", test_splits="test",
                  vocab_size=32000, max_len=256, batch_tokens=32768)
    c.train.update(steps=150000, lr=7e-4, warmup_steps=40000, weight_decay=0.01, label_smoothing=0.1,
                   log_every=100, eval_every=5000, checkpoint_every=2000, valid_bleu_sentences=1000)
    c.eval.update(run_all_iterations=True,
                  batch_size=128, constraints="soft,hard")
    c.cmlm.update(length_prediction="token", masked_attn=True, concat_pe=True, correction=True, correction_p=0.3,
                  correction_count="bernoulli", correction_combine="sum", mask_predict_iter=10, length_beam=3,
                  length_beam_mode="top", candidate_score="probability")
    return c
