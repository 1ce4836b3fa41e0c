"""EDITOR, base size, on distilled WMT14 En->De: the authors' recipe, for GPU machines.

Recipe (Xu and Carpuat 2021, §4, and the authors' public recipe; docs/editor.md): d 512, 6+6 layers, 8 heads,
dropout 0.3 (0.1 on the embeddings), tied embeddings, label smoothing 0.1, Adam with lr 5e-4, batches of about
64.8k tokens, up to 300k updates, best checkpoint by validation BLEU; the reposition head on its own layer stack;
dual-path roll-in with random_delete_shuffle noise; decoding with at most 11 iterations (the authors'
--iter-decode-max-iter 10). Distil the AR teacher first (see configs/levt/wmt14_en_de.py), then
(64k tokens a step, e.g. 8 GPUs × 8192):
python -m jaxnat.main --config configs/editor/wmt14_en_de.py --workdir runs/editor-wmt14 \
    --config.data.dir=data/wmt14-kd
"""

from jaxnat.config import default_config


def get_config():
    c = default_config()
    c.model.update(name="editor", d_model=512, ffn_dim=2048, num_heads=8, enc_layers=6, dec_layers=6, dropout=0.3,
                   embed_dropout=0.1, positions="learned", max_len=256, bert_init=True, dtype="bfloat16")
    c.data.update(source="text", src_lang="en", tgt_lang="de", train_split="train",
                  valid_split="validation", test_splits="test", vocab_size=32000, max_len=256,
                  batch_tokens=65536)
    c.train.update(steps=300000, lr=5e-4, warmup_steps=10000, weight_decay=0.01, label_smoothing=0.1,
                   log_every=100, eval_every=5000, checkpoint_every=2000,
                   valid_bleu_sentences=1000)
    c.eval.update(batch_size=128, constraints="soft,hard")
    c.editor.update(separate_reposition=True, placeholder_smoothing=0.01, max_iter=10)
    return c
