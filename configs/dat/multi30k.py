"""DA-Transformer (d 256, 3+3 layers, λ = 8) on raw Multi30k En->De, sized for a 2-core CPU.

python -m jaxnat.main --config configs/dat/multi30k.py --workdir runs/dat-multi30k \
    --config.data.dir=../shared/data/multi30k
Raw data, the paper's headline setting (DA-Transformer trains without distillation); a distilled set instead (the
other NAT configs' way, configs/ar/multi30k.py with --mode distill): --config.data.dir=runs/kd-multi30k
--config.data.spm_from=runs/ar-multi30k. Glancing anneals 0.5 → 0.1 over the whole run; lookahead decoding;
`--mode eval --config.dat.decode=viterbi` (joint Viterbi) or `--config.dat.decode=beam --config.eval.beam_size=8`
(`dagsearch` for the authors' beam search).
The evaluation adds soft and hard constraint runs on every test split (eval.constraints).
"""

from jaxnat.config import default_config


def get_config():
    c = default_config()
    c.model.update(name="dat", d_model=256, ffn_dim=1024, num_heads=4, enc_layers=3, dec_layers=3, dropout=0.3,
                   attention_dropout=0.1, activation_dropout=0.1, max_len=128, positions="learned")
    # DA-Transformer does not pack (a graph per row): 12 train shapes fitted to the data, as LevT's (docs/levt.md,
    # "Batch shapes": 9.9% padding against the default 3's 29%)
    c.data.update(source="text", src_lang="en", tgt_lang="de",
                  train_split="train", valid_split="val", test_splits="test_2016_flickr",
                  vocab_size=8000, max_len=100, batch_tokens=4096, max_buckets=12,
                  bucket_multiple=1)
    # each batch as 8 chunks of rows (one update): the graphs' activations of a whole batch (8 x its source tokens)
    # fall out of the CPU's caches; a quarter of the rows ran at 1.2-1.6x the rate and an eighth 1.09x faster still
    # (docs/benchmarks.md, "DA-Transformer")
    c.train.update(microbatches=8, steps=4000, lr=1e-3, warmup_steps=1000, weight_decay=0.01,
                   log_every=100, eval_every=500, checkpoint_every=250, valid_bleu_sentences=1014)
    c.eval.update(latency_sentences=100, iteration_sweep="4,6,8", constraints="soft,hard")
    c.dat.update(upsample=8, glance_start=0.5, glance_end=0.1, glance_steps=4000, decode="lookahead")
    return c
