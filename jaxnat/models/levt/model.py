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
from jax import lax

from jaxnat import edit_ops
from jaxnat.data.vocab import PAD_ID
from jaxnat.decoding import words
from jaxnat.decoding.refine import Heads, Hypotheses
from jaxnat.decoding.request import Supports
from jaxnat.models.insertion import (EditTransformer, blank_fillers, early_exit, edit_model_spec, empty_canvas,
                                     head_runner, insertion_losses, mean_loss, model_fills, roll_in_own_insertion)
from jaxnat.models.losses import smoothed_cross_entropy
from jaxnat.models.spec import ModelSpec
from jaxnat.models.transformer import token_mask
from jaxnat.oracle import (MAX_INSERTIONS, apply_delete_shuffle, apply_random_delete, draw_delete_shuffle, draw_subset,
                           ed2_labels)


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
        return self.first_from(self.first_features(tokens, memory, src_mask, train), tokens)

    def first_from(self, h: jax.Array, tokens: jax.Array) -> jax.Array:
        """h: float[B, L, D], `first_features` of tokens int32[B, L] → the deletion logits float32[B, L, 2]."""
        return self.deletion_head(h).astype(jnp.float32)

    def __call__(self, src, tokens, train: bool = False):
        """All three heads on one hypothesis (used to initialise every parameter)."""
        memory, src_mask = self.encode(src, train), token_mask(src)
        return (self.deletion_logits(tokens, memory, src_mask, train),
                self.placeholder_logits(tokens, memory, src_mask, train),
                self.token_logits(tokens, memory, src_mask, train))


def levt_loss(model: LevenshteinTransformer, params, batch: dict, rng, *, label_smoothing: float,
              placeholder_smoothing: float = 0.01, alpha: float = 0.0, beta: float = 0.0,
              sampling_for_deletion: bool = False, own_insertion_roll_in: float = 0.0, global_shuffle: float = 0.0,
              word_start: jax.Array | None = None, train: bool = True, keep_roll_in: bool = False):
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

    α = β = 0 is the reference code's roll-in (the default). With probability ``own_insertion_roll_in`` (one coin
    per batch, beyond the paper) the roll-in follows the model's own insertion (`own_insertion`): the insertion
    heads learn on what the oracle keeps of it, the deletion head (unless on y⁰) on the insertion itself. With
    probability ``global_shuffle`` per sentence (beyond the paper) the deletion head (unless on y⁰) sees a
    random subset of y* in a uniformly random word order instead (`draw_delete_shuffle`'s p_global;
    ``word_start``: bool[V], the pieces that begin a word, None = every piece): the starts that shuffled soft
    constraints give, whose out-of-order words the oracle deletes. A filler row (target all PAD) starts from a
    blank y⁰, so every head input is blank there and the row carries no loss (`blank_fillers`). Every random
    number is drawn with the batch as its leading axis, so a row's draws do not depend on how many rows follow
    it.

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
    k_noise, k_mix, k_enc, k_plh, k_tok, k_del, k_pick, k_own, k_shuffle = jax.random.split(rng, 9)

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
    # Shuffled subsets (one coin per row; none without global_shuffle, and then nothing is drawn)
    is_shuffled, shuffled = jnp.zeros(tgt.shape[:1], bool), y_ins
    if global_shuffle > 0:  # static
        draws["shuffle"] = draw_delete_shuffle(k_shuffle, tgt.shape, p_shuffle=0.0, p_global=global_shuffle)
        starts = jnp.ones(tgt.shape, bool) if word_start is None else word_start[tgt]
        is_shuffled, shuffled = draws["shuffle"][2], apply_delete_shuffle(tgt, starts, *draws["shuffle"])
    # The model's own insertion runs on what the row's deletion head would otherwise see first: the shuffled
    # subset where there is one (a misordered start with the model's insertions around it: what the second
    # iteration of constrained decoding deletes from), else y_ins.
    own_from = jnp.where(is_shuffled[:, None], shuffled, y_ins)
    kept, own = roll_in_own_insertion(apply, own_from, tgt, memory, src_mask, k_own, own_insertion_roll_in,
                                      draws)
    if own is not None:
        y_ins = jnp.where(draws["own_insertion"], kept, y_ins)
    ins = ed2_labels(y_ins, tgt)
    plh_loss, tok_loss, tok_nll, tok_logits = insertion_losses(
        apply, y_ins, tgt, ins, memory, src_mask, (k_plh, k_tok), label_smoothing=label_smoothing,
        placeholder_smoothing=placeholder_smoothing)

    # Learning to delete: y⁰, or the model's own fills with gold tokens elsewhere.
    if sampling_for_deletion:
        draws["token_noise"] = jax.random.gumbel(k_pick, tok_logits.shape)
    fills = model_fills(tok_logits, tgt, ins.insert_mask, draws.get("token_noise"))
    fills = jnp.where(is_shuffled[:, None], shuffled, fills)  # a filler row stays all PAD
    if own is not None:  # the model's own insertion, surplus, repeated and misplaced words included
        fills = jnp.where(draws["own_insertion"], own, fills)
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


# ----------------------------------------------------------------------------------------------- decoding

SUPPORTS = Supports(init=True, soft_constraints=True, hard_constraints=True, trace=True,
                    counts=("iterations", "steps", "deletions", "insertions"),
                    oracle=("deletion", "deletion_placeholder"))
SURE = 1e4  # an oracle's logit margin: its action is the argmax whatever the penalty γ subtracts


def oracle_heads(heads: Heads, reference: jax.Array, mode: str) -> Heads:
    """The paper's "collaborate with the oracle" analysis (§4.2, Figure 5): the deletion head (mode "deletion"),
    or the deletion and placeholder heads ("deletion_placeholder"), replaced by the ed2 oracle's actions that
    turn the current hypothesis into the reference (int32[B, R] [BOS … EOS] rows); the token head stays the
    model's. What BLEU gains over plain decoding is what the replaced policies' mistakes cost."""
    def deletion(tokens):
        return SURE * jax.nn.one_hot(ed2_labels(tokens, reference).deletion, 2)

    def placeholder(tokens):
        return SURE * jax.nn.one_hot(ed2_labels(tokens, reference).insertion, MAX_INSERTIONS + 1)

    if mode == "deletion":
        return heads._replace(first=deletion, shared=None)
    return heads._replace(first=deletion, placeholder=placeholder, shared=None)


def keep_word_boundaries(tokens: jax.Array, phrase: jax.Array, delete: jax.Array,
                         continues: jax.Array | None, joins: jax.Array | None = None,
                         trails: jax.Array | None = None) -> jax.Array:
    """bool[B, L]: ``delete`` without the deletions that would glue a piece onto a hard constraint's word.

    Invariants (with the fill rules of `refine.insert_and_fill`): no piece that continues a word (``continues``:
    bool[V]) stands between a phrase and the next piece that starts a word, punctuation (``trails``: bool[V])
    or not between them; the token right before a phrase does not glue the next onto its word (``joins``:
    bool[V], BPE's "@@"). Deleting the piece that closed a phrase's word may leave a continuing piece in it: then
    the pieces deleted between the phrase and that piece are kept (which gives the word its closing piece back).
    The token right before a phrase may only be deleted when its predecessor does not join and survives. So the
    invariants hold after the deletion.
    """
    if joins is not None:
        guard = jnp.pad((phrase[:, 1:] > 0) & (phrase[:, :-1] == 0), ((0, 0), (0, 1)))
        predecessor_ok = jnp.pad(~joins[tokens[:, :-1]] & ~delete[:, :-1], ((0, 0), (1, 0)))
        delete = delete & ~(guard & ~predecessor_ok)
    if continues is not None:
        in_phrase = phrase > 0
        last = words.last_pieces(phrase)
        passes = delete | (trails[tokens] if trails is not None else False)  # a deleted piece ends no word
        is_open, anchor = words.open_words(passes & ~in_phrase, last)
        bad = ~delete & is_open & continues[tokens] & ~in_phrase
        # a deleted piece comes back when the nearest such piece after it stands in the word it would leave open
        length = tokens.shape[1]
        pos = jnp.arange(length)
        after = jnp.pad(lax.cummin(jnp.where(bad, pos, length), axis=1, reverse=True)[:, 1:], ((0, 0), (0, 1)),
                        constant_values=length)
        opened_at = jnp.take_along_axis(anchor, jnp.minimum(after, length - 1), axis=1)
        delete = delete & ~((after < length) & (opened_at < pos))
    return delete


def levt_delete(hyps: Hypotheses, logits: jax.Array, active: jax.Array, continues: jax.Array | None = None,
                joins: jax.Array | None = None, trails: jax.Array | None = None):
    """LevT's first edit: argmax deletion, only in sentences longer than [BOS, EOS]; phrases protected.
    logits: float32[B, L, 2]; active: bool[B] (finished rows are left as they are)."""
    n = edit_ops.lengths(hyps.tokens, PAD_ID)
    delete = (jnp.argmax(logits, axis=-1) == 1) & (active & (n > 2))[:, None]
    delete = keep_word_boundaries(hyps.tokens, hyps.phrase, delete, continues, joins, trails)
    out = edit_ops.delete_tokens(hyps.tokens, delete, PAD_ID, protect=hyps.phrase > 0,
                                 sides=hyps.sides())
    return Hypotheses(out.tokens, *out.sides), {"deletions": out.num_deleted}


def build_spec(config, cfg, pieces) -> ModelSpec:
    s, t = config.levt, config.train
    module = LevenshteinTransformer(cfg, early_exit(s, cfg), s.separate_deletion, s.separate_placeholder)
    word_start = jnp.asarray(pieces.word_start)

    def loss(params, batch, rng, train=True):
        return levt_loss(module, params, batch, rng, label_smoothing=t.label_smoothing,
                         placeholder_smoothing=s.placeholder_smoothing, alpha=s.roll_in_alpha,
                         beta=s.roll_in_beta, sampling_for_deletion=s.sampling_for_deletion,
                         own_insertion_roll_in=s.own_insertion_roll_in, global_shuffle=s.global_shuffle,
                         word_start=word_start, train=train)

    return edit_model_spec(config, s, cfg, "levt", module, loss, "deletion_logits", levt_delete, pieces, SUPPORTS,
                           oracle_heads)
