"""AR Transformer (d 256, 3+3 layers) on Multi30k En->De, sized for a 2-core CPU (about 2 hours).

python -m jaxnat.main --config configs/ar/multi30k.py --workdir runs/ar-multi30k \
    --config.data.dir=../shared/data/multi30k
Other directions: --config.data.tgt_lang=fr. The data directory holds {train,val,test_2016_flickr}.{en,de,fr}.gz.
"""

from jaxnat.config import default_config


def get_config():
    c = default_config()
    c.model.update(d_model=256, ffn_dim=1024, num_heads=4, enc_layers=3, dec_layers=3, dropout=0.3,
                   attention_dropout=0.1, activation_dropout=0.1, max_len=128)
    c.data.update(source="text", src_lang="en", tgt_lang="de",
                  train_split="train", valid_split="val", test_splits="test_2016_flickr",
                  vocab_size=8000, max_len=100, batch_tokens=4096)
    c.train.update(steps=4000, lr=1e-3, warmup_steps=1000, weight_decay=0.0001, label_smoothing=0.1,
                   log_every=100, eval_every=500, checkpoint_every=250, valid_bleu_sentences=1014)
    c.eval.update(beam_size=4, length_penalty=1.0, latency_sentences=100)
    return c
