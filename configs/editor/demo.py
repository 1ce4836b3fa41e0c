"""EDITOR on the embedded synthetic corpus: the README's main command. Trains, then evaluates without
constraints, with soft and with hard constraints (one table: BLEU, RIBES, CPR, latency, edits per sentence),
decodes the test split from the refinement diagnostic's other starts, and writes WORKDIR/trace.html, the edit
trace of a few sentences, in about 10 minutes on a 2-core CPU.

python -m jaxnat.main --config configs/editor/demo.py --workdir runs/editor-demo

Sized for that budget: an edit-based model needs many more updates than an AR one, so the demo trains a
small model (d 128, 2+2 layers, its own 2-layer reposition stack) for many cheap steps of 1024 tokens, on a
part of the language it can learn in 2000 of them: simple sentences and questions, drawn from 30% of the
lexicon, in a fixed word order (a free word order is what shuffled soft constraints cannot inform:
docs/editor.md item 11), where every noun has two equally valid target stems picked at random (kelo or kilu
for "dog"): a lexical choice the source does not decide and a constraint from the reference settles, as in real
MT (docs/editor.md item 13). A BPE vocabulary of 1500 makes every word one piece. Two roll-in options beyond
the paper, measured in docs/editor.md ("Soft constraints"), let the model learn from its own insertions and
from globally shuffled starts like shuffled soft constraints.
"""

from jaxnat.config import default_config


def get_config():
    c = default_config()
    c.model.update(name="editor", d_model=128, ffn_dim=512, num_heads=4, enc_layers=2, dec_layers=2, dropout=0.1,
                   max_len=96)
    # bucket lengths in multiples of 8: 3 train shapes fitted to the data (data.max_buckets: 8, 16, 24), decoding
    # on 8, 16, 32, 40: less compiling, which is a good part of a 10-minute budget
    c.data.update(source="synthetic", spm_model_type="bpe", vocab_size=1500, max_len=40, batch_tokens=1024,
                  bucket_growth=2.0, bucket_multiple=8, synthetic_kinds="simple,question", synthetic_lexicon=0.3,
                  synthetic_multimodal=False, synthetic_synonyms=1.0)
    # a closed alphabet, every word one piece; text outside it is refused or reported, never silently changed
    c.data.byte_fallback = False
    c.train.update(steps=2000, lr=3e-3, warmup_steps=200, log_every=100, eval_every=2000, checkpoint_every=250,
                   valid_bleu_sentences=200, weight_decay=0.01)
    c.eval.update(latency_sentences=30, constraints="soft,hard", trace_sentences=5)
    c.editor.update(separate_reposition=True, own_insertion_roll_in=0.5, global_shuffle=0.5, max_iter=9)
    return c
