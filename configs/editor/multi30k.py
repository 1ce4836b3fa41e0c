"""EDITOR (d 256, 3+3 layers, its own 3-layer reposition stack) on Multi30k En->De, sized for a 2-core CPU.

Distilled targets (train the AR teacher with configs/ar/multi30k.py, distil its beam-4 output, see
configs/levt/multi30k.py), then:
    python -m jaxnat.main --config configs/editor/multi30k.py --workdir runs/editor-kd-multi30k \
        --config.data.dir=runs/kd-multi30k --config.data.spm_from=runs/ar-multi30k
The evaluation adds soft and hard constraint runs on every test split (eval.constraints).
"""

from jaxnat.config import default_config


def get_config():
    c = default_config()
    c.model.update(name="editor", d_model=256, ffn_dim=1024, num_heads=4, enc_layers=3, dec_layers=3, dropout=0.3,
                   attention_dropout=0.1, activation_dropout=0.1, max_len=256, bert_init=True)
    # EDITOR does not pack (its oracle and reposition work per row): 12 train shapes fitted to the data (11 to 57
    # tokens, any length: 9.9% padding against the default 3's 29%: docs/levt.md, "Batch shapes"); all but the first
    # compile while it trains
    c.data.update(source="text", src_lang="en", tgt_lang="de",
                  train_split="train", valid_split="val", test_splits="test_2016_flickr",
                  vocab_size=8000, max_len=100, batch_tokens=4096, max_buckets=12,
                  bucket_multiple=1)
    c.train.update(steps=8000, lr=1e-3, warmup_steps=1000, weight_decay=0.01, label_smoothing=0.1,
                   log_every=100, eval_every=500, checkpoint_every=250, valid_bleu_sentences=1014)
    c.eval.update(latency_sentences=100, constraints="soft,hard", trace_sentences=8)
    # the reposition head on its own layers (the authors' recipe); roll-in options beyond the paper
    # (docs/editor.md, "Soft constraints"): the model's own insertions, and globally shuffled starts like
    # shuffled soft constraints
    c.editor.update(separate_reposition=True, own_insertion_roll_in=0.5, global_shuffle=0.25, max_iter=9)
    return c
