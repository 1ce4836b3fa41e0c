"""CTC-NAT with glancing (d 256, 3+3 layers) on distilled Multi30k En->De, sized for a 2-core CPU: the NAT
config's data, model size and budget (configs/nat/multi30k.py), the CTC canvas of 3 × the source.

First the AR teacher and its distilled training set (configs/ar/multi30k.py, --mode distill), then:
    python -m jaxnat.main --config configs/ctc/multi30k.py --workdir runs/ctc-multi30k \
        --config.data.dir=runs/kd-multi30k --config.data.spm_from=runs/ar-multi30k
Plain CTC: --config.ctc.glancing=false (and another workdir); prefix beam search: --config.eval.beam_size=5. The
evaluation adds soft and hard constraint runs on every test split (eval.constraints).
"""

from jaxnat.config import default_config


def get_config():
    c = default_config()
    # model.max_len: the canvas of the longest source, 3 × 100 frames
    c.model.update(name="ctc", d_model=256, ffn_dim=1024, num_heads=4, enc_layers=3, dec_layers=3, dropout=0.3,
                   attention_dropout=0.1, activation_dropout=0.1, max_len=300, positions="learned")
    # CTC does not pack (a lattice per row): 12 train shapes fitted to the data, as LevT's (docs/levt.md, "Batch
    # shapes": 9.9% padding against the default 3's 29%)
    c.data.update(source="text", src_lang="en", tgt_lang="de",
                  train_split="train", valid_split="val", test_splits="test_2016_flickr",
                  vocab_size=8000, max_len=100, batch_tokens=4096, max_buckets=12,
                  bucket_multiple=1)
    # each batch as 4 chunks of rows (one update): a whole batch's canvases (3 x its source tokens) fall out of the
    # CPU's caches; a quarter of the rows ran 1.06-1.09x faster than the whole (docs/benchmarks.md, "CTC")
    c.train.update(microbatches=4, steps=2500, lr=1e-3, warmup_steps=1000, weight_decay=0.01, label_smoothing=0.1,
                   log_every=100, eval_every=500, checkpoint_every=250, valid_bleu_sentences=1014)
    c.eval.update(latency_sentences=100, constraints="soft,hard")
    c.ctc.update(upsample=3, glancing=True, glance_start=0.5, glance_end=0.3)
    return c
