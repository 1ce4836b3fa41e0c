"""Coverage-NAT (d 256, 3+3 layers: two plain decoder layers under the coverage layer) on distilled Multi30k
En->De, sized for a 2-core CPU: the pre-training phase (token and length losses, K_train = 5).

First the AR teacher and its distilled training set (configs/ar/multi30k.py, --mode distill), then:
    python -m jaxnat.main --config configs/nat/multi30k.py --workdir runs/covnat-multi30k \
        --config.data.dir=runs/kd-multi30k --config.data.spm_from=runs/ar-multi30k
NAT-base: --config.nat.coverage=false --config.eval.iteration_sweep= (no K_dec to sweep; another workdir).
The fine-tuning phase with sentence-level coverage agreement is configs/nat/multi30k_sca.py. On the teacher's
vocabulary (data.spm_from), the teacher rescores length-parallel candidates:
--config.nat.length_beam=9 --config.nat.rescorer=runs/ar-multi30k.
"""

from jaxnat.config import default_config


def get_config():
    c = default_config()
    c.model.update(name="nat", d_model=256, ffn_dim=1024, num_heads=4, enc_layers=3, dec_layers=3, dropout=0.3,
                   attention_dropout=0.1, activation_dropout=0.1, max_len=128, positions="learned")
    c.data.update(source="text", src_lang="en", tgt_lang="de",
                  train_split="train", valid_split="val", test_splits="test_2016_flickr",
                  vocab_size=8000, max_len=100, batch_tokens=4096)
    c.train.update(steps=2500, lr=1e-3, warmup_steps=1000, weight_decay=0.01, label_smoothing=0.1,
                   log_every=100, eval_every=500, checkpoint_every=250, valid_bleu_sentences=1014)
    c.eval.update(latency_sentences=100, iteration_sweep="1,2,3,4,5,6,7")
    c.nat.update(length_prediction="pooled", coverage=True, train_iterations=5, length_beam=1,
                 length_beam_mode="centred", decode_iterations=5, remove_repeats=True,
                 candidate_score="log_probability")
    return c
