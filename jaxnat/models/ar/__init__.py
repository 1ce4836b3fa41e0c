"""The autoregressive Transformer (Vaswani et al. 2017): the baseline, the distillation teacher, the rescorer of
the length-predicting models, and the model of lexically constrained beam search (DBA / VDBA). docs/ar.md.

Its settings are the shared ones (`model.*`, `train.*`, and the beam search's `eval.beam_size`,
`eval.length_penalty`, `eval.max_len_a`, `eval.max_len_b`, `eval.constraint_order`): no section of its own."""

from jaxnat.models.ar.model import SUPPORTS, build_spec
from jaxnat.models.family import Family

FAMILY = Family("ar", build_spec, SUPPORTS, doc="docs/ar.md",
                conventions=("layernorm_embedding", "output_bias", "decoder_start", "source_bos", "absent_tokens",
                             "alignment_layer", "alignment_heads", "full_context_alignment"),
                reads=("eval.length_penalty", "eval.max_len_a", "eval.max_len_b", "eval.search_rules", "eval.allow_unk",
                       "data.pack", "eval.sampling", "eval.no_repeat_ngram", "eval.no_consecutive_repeat",
                       "train.alignment_lambda", "data.alignments_dir"))
