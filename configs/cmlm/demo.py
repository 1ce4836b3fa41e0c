"""CMLMC on the embedded synthetic corpus: trains, then evaluates mask-predict without constraints, with soft
and with hard constraints (one table: BLEU, RIBES, CPR, repetition, latency, iterations), in under 10 minutes
on a 2-core CPU.

python -m jaxnat.main --config configs/cmlm/demo.py --workdir runs/cmlm-demo

The EDITOR demo's corpus (simple sentences and questions, 30% of the lexicon, fixed word order, two target
stems for every noun: a lexical choice the source does not decide) and model size (d 128, 2+2 layers).
CMLMC = CMLM + RevealPosition (cmlm.masked_attn, cmlm.concat_pe) + the correction loss (cmlm.correction);
switch them off one by one for the paper's ablation rows (docs/cmlm.md). Decoding: 10 mask-predict passes,
length beam 3, as the paper.
"""

from jaxnat.config import default_config
from jaxnat.models.cmlm.model import AUTHORS_RECIPE


def get_config():
    c = default_config()
    c.model.update(name="cmlm", d_model=128, ffn_dim=512, num_heads=4, enc_layers=2, dec_layers=2, dropout=0.1,
                   max_len=96, positions="learned", **AUTHORS_RECIPE)
    # 3 batch shapes (8, 16, 32 tokens): less compiling, which is a good part of a 10-minute budget
    c.data.update(source="synthetic", spm_model_type="bpe", vocab_size=1500, max_len=40, batch_tokens=1024,
                  bucket_growth=2.0, bucket_multiple=8, synthetic_kinds="simple,question", synthetic_lexicon=0.3,
                  synthetic_multimodal=False, synthetic_synonyms=1.0)
    c.data.byte_fallback = False  # a closed alphabet, every word one piece
    c.train.update(steps=2000, lr=3e-3, warmup_steps=200, log_every=100, eval_every=2000, checkpoint_every=250,
                   valid_bleu_sentences=200, weight_decay=0.01)
    c.eval.update(latency_sentences=30, run_all_iterations=True,
                  constraints="soft,hard", iteration_sweep="1,2,5")
    c.cmlm.update(length_prediction="token", masked_attn=True, concat_pe=True, correction=True, correction_p=0.3,
                  mask_predict_iter=10, length_beam=3)
    return c
