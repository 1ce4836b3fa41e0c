"""CMLMC (d 256, 3+3 layers) on Multi30k En->De, raw or distilled, sized for a 2-core CPU; the paper's point
is that CMLMC on raw data comes close to the AR model without distillation.

Raw data, on the AR run's vocabulary (so that it can also rescore the length candidates, cmlm.rescorer):
    python -m jaxnat.main --config configs/cmlm/multi30k.py --workdir runs/cmlmc-multi30k \
        --config.data.dir=../shared/data/multi30k --config.data.spm_from=runs/ar-multi30k
Distilled data (configs/levt/multi30k.py says how to make it): --config.data.dir=runs/kd-multi30k.
The ablation rows of the paper (docs/cmlm.md): CMLM = --config.cmlm.masked_attn=false
--config.cmlm.concat_pe=false --config.cmlm.correction=false; +RevealPosition, +Corr: one of them back on.
"""

from jaxnat.config import default_config
from jaxnat.models.cmlm.model import AUTHORS_RECIPE


def get_config():
    c = default_config()
    c.model.update(name="cmlm", d_model=256, ffn_dim=1024, num_heads=4, enc_layers=3, dec_layers=3, dropout=0.3,
                   attention_dropout=0.1, activation_dropout=0.1, max_len=128, positions="learned",
                   **AUTHORS_RECIPE)
    c.data.update(source="text", src_lang="en", tgt_lang="de",
                  train_split="train", valid_split="val", test_splits="test_2016_flickr",
                  vocab_size=8000, max_len=100, batch_tokens=4096)
    c.train.update(steps=4000, lr=1e-3, warmup_steps=1000, weight_decay=0.01, label_smoothing=0.1,
                   log_every=100, eval_every=500, checkpoint_every=250, valid_bleu_sentences=1014)
    c.eval.update(run_all_iterations=True,
                  latency_sentences=100, constraints="soft,hard", iteration_sweep="1,2,5,7,10")
    c.cmlm.update(length_prediction="token", masked_attn=True, concat_pe=True, correction=True, correction_p=0.3,
                  mask_predict_iter=10, length_beam=3)
    return c
