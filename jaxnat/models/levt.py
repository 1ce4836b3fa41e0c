"""Levenshtein Transformer (Gu, Wang and Zhao, 2019): a bidirectional decoder with three policies.

One decoding iteration edits the current hypothesis ``y`` in three parallel steps, each read off its own head
on the shared decoder (reference-semantics §4–5):

1. **delete** — ``π_del(d_i | i, y)``: a two-class classifier on every token;
2. **insert placeholders** — ``π_plh(p_i | i, y)`` and 3. **fill** — ``π_tok(t_i | i, y)``, as in
   `jaxnat.models.insertion` (shared with EDITOR).

Options from the paper: early exit and separate layer stacks for the deletion and/or placeholder heads (the
weight-sharing variants of its Table 2a). The training objective (dual-policy imitation learning with the
ed2 oracle, `levt_loss`) sits below the module; the refinement loop is `jaxnat.decoding.refine`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxnat import edit_ops
from jaxnat.data.vocab import PAD_ID
from jaxnat.models.insertion import (EditTransformer, blank_fillers, empty_canvas, head_runner, insertion_losses,
                                     mean_loss, model_fills)
from jaxnat.models.transformer import token_mask
from jaxnat.oracle import apply_random_delete, draw_subset, ed2_labels
from jaxnat.training.losses import smoothed_cross_entropy


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
              placeholder_smoothing: float = 0.01, alpha: float = 0.0, beta: float = 0.0,
              sampling_for_deletion: bool = False, train: bool = True, keep_roll_in: bool = False):
    """Dual-policy imitation learning (the paper's Algorithm 1) with the ed2 oracle, computed on device.

    The initial sequence y⁰ is ``batch['init']`` (int32[B, T], ``[BOS … EOS]`` rows: the paper's post-editing)
    when the data gives one, else ``[BOS, EOS]``. Per sentence, two coins u, v ~ U[0, 1):

    * **insertion heads**: if u < β, y⁰ minus the ed2 oracle's deletions; else ``random_delete(y*)``. The
      placeholder head learns the oracle's slot counts on it, the token head the reference tokens at the
      oracle's placeholders (its input: the reference with PLH there);
    * **deletion head**: if v < α, y⁰; else the reference with the token head's fills at those placeholders
      (no gradient through them): its argmax, as Algorithm 1 and fairseq do, or with
      ``sampling_for_deletion`` a sample from it, as the note to eq. 6 and fairseq's
      ``--sampling-for-deletion`` do.

    α = β = 0 is the reference code's roll-in (the default). A filler row (target all PAD) starts from a blank
    y⁰, so every head input is blank there and the row carries no loss (`blank_fillers`). Every random number is
    drawn with the batch as its leading axis, so a row's draws do not depend on how many rows follow it.

    Loss = placeholder CE (smoothing 0.01) + token CE (smoothing ε) + deletion CE (none), each the mean over its
    own positions. batch['src']: int32[B, S], batch['tgt']: int32[B, T]. Returns
    ``(loss · n, {'nll': token nll · n, 'count': n, ...})`` with n the target's real tokens, so that the
    trainer's ``loss_sum / count`` is the loss. With ``keep_roll_in``, aux['roll_in'] holds the head inputs
    (y0, y_ins, y_del: int32[B, T]), the per-sentence choices and aux['roll_in']['draws'], every random number
    of the roll-in (for tests).
    """
    src, tgt = batch["src"], batch["tgt"]
    # New keys go last: the first keys of a split do not depend on how many are split, so runs with the
    # earlier options keep their random numbers.
    k_noise, k_mix, k_enc, k_plh, k_tok, k_del, k_pick = jax.random.split(rng, 7)

    apply = head_runner(model, params, train)
    memory, src_mask = apply("encode", src, key=k_enc), token_mask(src)
    y0 = blank_fillers(batch["init"] if "init" in batch else empty_canvas(tgt), tgt)
    draws = {"subset": draw_subset(k_noise, tgt.shape), "coins": jax.random.uniform(k_mix, (tgt.shape[0], 2))}
    ins_on_y0, del_on_y0 = draws["coins"][:, 0] < beta, draws["coins"][:, 1] < alpha

    # Learning to insert: placeholders on a random subsequence of y* (or on what the oracle keeps of y⁰), then
    # tokens into the oracle's placeholders.
    y_ins, _ = apply_random_delete(tgt, *draws["subset"])
    if beta > 0:  # static: without it no sentence takes this branch, and the oracle scan is skipped
        kept = edit_ops.delete_tokens(y0, ed2_labels(y0, tgt).deletion, PAD_ID).tokens
        y_ins = jnp.where(ins_on_y0[:, None], kept, y_ins)
    ins = ed2_labels(y_ins, tgt)
    plh_loss, tok_loss, tok_nll, tok_logits = insertion_losses(
        apply, y_ins, tgt, ins, memory, src_mask, (k_plh, k_tok), label_smoothing=label_smoothing,
        placeholder_smoothing=placeholder_smoothing)

    # Learning to delete: y⁰, or the model's own fills with gold tokens elsewhere.
    if sampling_for_deletion:
        draws["token_noise"] = jax.random.gumbel(k_pick, tok_logits.shape)
    fills = model_fills(tok_logits, tgt, ins.insert_mask, draws.get("token_noise"))
    y_del = jnp.where(del_on_y0[:, None], y0, fills)
    dels = ed2_labels(y_del, tgt)
    del_logits = apply("deletion_logits", y_del, memory, src_mask, key=k_del)
    del_sum, _, del_count = smoothed_cross_entropy(del_logits, dels.deletion, token_mask(y_del), 0.0)
    del_loss = mean_loss(del_sum, del_count)

    n = jnp.sum(token_mask(tgt), dtype=jnp.float32)
    aux = {"nll": tok_nll * n, "count": n, "placeholder_loss": plh_loss, "token_loss": tok_loss,
           "deletion_loss": del_loss}
    if keep_roll_in:
        aux["roll_in"] = {"y0": y0, "y_ins": y_ins, "y_del": y_del, "ins_on_y0": ins_on_y0, "del_on_y0": del_on_y0,
                          "draws": draws}
    return (plh_loss + tok_loss + del_loss) * n, aux
