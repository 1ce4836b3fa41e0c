"""Levenshtein Transformer (Gu, Wang and Zhao, 2019): a bidirectional decoder with three policies.

One decoding iteration edits the current hypothesis ``y`` in three parallel steps, each read off its own head
on the shared decoder (docs/levt.md):

1. **delete** — ``π_del(d_i | i, y)``: a two-class classifier on every token;
2. **insert placeholders** — ``π_plh(p_i | i, y)`` and 3. **fill** — ``π_tok(t_i | i, y)``, as in
   `jaxnat.models.insertion` (shared with EDITOR).

Options from the paper: early exit and separate layer stacks for the deletion and/or placeholder heads (the
weight-sharing variants of its Table 2a). The training objective (dual-policy imitation learning with the
ed2 oracle, `levt_loss`) sits below the module, then the deletion edit the refinement loop
(`jaxnat.decoding.refine`) runs with it. docs/levt.md explains what this follows.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxnat import edit_ops
from jaxnat.data.vocab import PAD_ID
from jaxnat.decoding.refine import Hypotheses
from jaxnat.decoding.request import Supports
from jaxnat.models.insertion import (EditTransformer, early_exit, edit_model_spec, empty_canvas, head_runner,
                                     insertion_losses, mean_loss, model_fills)
from jaxnat.models.spec import ModelSpec
from jaxnat.models.transformer import token_mask
from jaxnat.oracle import ed2_labels, random_delete
from jaxnat.models.losses import smoothed_cross_entropy


class LevenshteinTransformer(EditTransformer):
    """Encoder + bidirectional decoder with deletion, placeholder and token heads.

    exits: (deletion, placeholder, token) — how many decoder layers each head reads.
    """

    first_name = "deletion"

    def setup(self):
        super().setup()
        self.deletion_head = self.dense(2, "deletion_head")

    def deletion_logits(self, tokens, memory, src_mask, train: bool = False) -> jax.Array:
        """tokens: int32[B, L] → float32[B, L, 2] (class 1 = delete)."""
        return self.deletion_head(self.first_features(tokens, memory, src_mask, train)).astype(jnp.float32)

    def __call__(self, src, tokens, train: bool = False):
        """All three heads on one hypothesis (used to initialise every parameter)."""
        memory, src_mask = self.encode(src, train), token_mask(src)
        return (self.deletion_logits(tokens, memory, src_mask, train),
                self.placeholder_logits(tokens, memory, src_mask, train),
                self.token_logits(tokens, memory, src_mask, train))


def levt_loss(model: LevenshteinTransformer, params, batch: dict, rng, *, label_smoothing: float,
              placeholder_smoothing: float = 0.01, alpha: float = 0.0, beta: float = 0.0, train: bool = True):
    """Dual-policy imitation learning with the ed2 oracle, computed on device.

    Roll-in as the reference code does it (α = β = 0): the placeholder head sees ``random_delete(y*)``, the
    token head the reference with the oracle's placeholders, the deletion head the model's own argmax fills
    (gold tokens elsewhere). With α/β > 0, the paper's Algorithm 1 mixtures: per sentence, with probability β
    the insertion heads see the initial sequence ``[BOS, EOS]`` instead, and with probability α so does the
    deletion head.

    Loss = placeholder CE (smoothing 0.01) + token CE (smoothing ε) + deletion CE (none), each the mean over its
    own positions. batch['src']: int32[B, S], batch['tgt']: int32[B, T]. Returns
    ``(loss · n, {'nll': token nll · n, 'count': n, ...})`` with n the target's real tokens, so that the
    trainer's ``loss_sum / count`` is the loss.
    """
    src, tgt = batch["src"], batch["tgt"]
    k_noise, k_mix, k_enc, k_plh, k_tok, k_del = jax.random.split(rng, 6)

    apply = head_runner(model, params, train)
    memory, src_mask = apply("encode", src, key=k_enc), token_mask(src)
    start = empty_canvas(tgt)
    use_start_ins, use_start_del = (jax.random.uniform(k_mix, (2, tgt.shape[0])) < jnp.array([[beta], [alpha]]))

    # Learning to insert: placeholders on a random subsequence of y*, then tokens into the oracle's placeholders.
    y_ins = jnp.where(use_start_ins[:, None], start, random_delete(k_noise, tgt))
    ins = ed2_labels(y_ins, tgt)
    plh_loss, tok_loss, tok_nll, tok_logits = insertion_losses(
        apply, y_ins, tgt, ins, memory, src_mask, (k_plh, k_tok), label_smoothing=label_smoothing,
        placeholder_smoothing=placeholder_smoothing)

    # Learning to delete: the model's own fills (no gradient through the argmax), gold tokens elsewhere.
    y_del = jnp.where(use_start_del[:, None], start, model_fills(tok_logits, tgt, ins.insert_mask))
    dels = ed2_labels(y_del, tgt)
    del_logits = apply("deletion_logits", y_del, memory, src_mask, key=k_del)
    del_sum, _, del_count = smoothed_cross_entropy(del_logits, dels.deletion, token_mask(y_del), 0.0)
    del_loss = mean_loss(del_sum, del_count)

    n = jnp.sum(token_mask(tgt), dtype=jnp.float32)
    return (plh_loss + tok_loss + del_loss) * n, {"nll": tok_nll * n, "count": n, "placeholder_loss": plh_loss,
                                                  "deletion_loss": del_loss}


# ----------------------------------------------------------------------------------------------- decoding

SUPPORTS = Supports(init=True, soft_constraints=True, hard_constraints=True, trace=True,
                    counts=("iterations", "deletions", "insertions"))


def keep_word_boundaries(tokens: jax.Array, phrase: jax.Array, delete: jax.Array,
                         continues: jax.Array | None) -> jax.Array:
    """bool[B, L]: ``delete`` without the deletions that would glue a piece onto a hard constraint's last word.

    Invariant (with the fill rule of `refine.insert_and_fill`): the token right after a phrase does not
    continue a word (``continues``: bool[V]). It may only be deleted when its successor does not continue a
    word either and survives, so the invariant holds after the deletion.
    """
    if continues is None:
        return delete
    guard = jnp.pad((phrase[:, :-1] > 0) & (phrase[:, 1:] == 0), ((0, 0), (1, 0)))
    successor_ok = jnp.pad(~continues[tokens[:, 1:]] & ~delete[:, 1:], ((0, 0), (0, 1)))
    return delete & ~(guard & ~successor_ok)


def levt_delete(hyps: Hypotheses, logits: jax.Array, active: jax.Array, continues: jax.Array | None = None):
    """LevT's first edit: argmax deletion, only in sentences longer than [BOS, EOS]; phrases protected.
    logits: float32[B, L, 2]; active: bool[B] (finished rows are left as they are)."""
    n = edit_ops.lengths(hyps.tokens, PAD_ID)
    delete = (jnp.argmax(logits, axis=-1) == 1) & (active & (n > 2))[:, None]
    delete = keep_word_boundaries(hyps.tokens, hyps.phrase, delete, continues)
    out = edit_ops.delete_tokens(hyps.tokens, delete, PAD_ID, protect=hyps.phrase > 0,
                                 sides=(hyps.scores, hyps.phrase))
    return Hypotheses(out.tokens, *out.sides), {"deletions": out.num_deleted}


def build_spec(config, cfg, pieces) -> ModelSpec:
    m, t = config.model, config.train
    module = LevenshteinTransformer(cfg, early_exit(m), m.separate_deletion, m.separate_placeholder)

    def loss(params, batch, rng, train=True):
        return levt_loss(module, params, batch, rng, label_smoothing=t.label_smoothing,
                         placeholder_smoothing=t.placeholder_smoothing, alpha=t.roll_in_alpha,
                         beta=t.roll_in_beta, train=train)

    return edit_model_spec(config, cfg, "levt", module, loss, "deletion_logits", levt_delete, pieces, SUPPORTS)
