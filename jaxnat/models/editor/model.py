"""EDITOR (Xu and Carpuat, 2021): an edit-based transformer with *repositioning*.

EDITOR replaces LevT's deletion with a reposition: every output slot ``i`` of the current hypothesis
``y_1..n`` points at the input token it takes (paper eq. 1),

    π_rps(r | i, y) = softmax_r(h_i · [b, e_1, …, e_n]),

with ``e_j`` the raw embedding of input token ``j`` and ``b`` a learned deletion vector: pointing at ``b``
deletes the slot. Column 0 is the delete column; it would be BOS's, but BOS is pinned to slot 0 and a slot
pointing at it is deleted anyway, so ``b`` takes its place (``reposition_deletion="vector"``, the default).
``"bos"`` keeps BOS's embedding there, as the authors' code does. BOS and EOS are pinned at decode time. A
token may be copied to several slots, and a token nobody points at disappears. Placeholder insertion and
token prediction are LevT's (`jaxnat.models.insertion`). One decoding iteration = reposition → placeholders →
fill (`editor_reposition`, run by `jaxnat.decoding.refine`); the reference recipe gives the reposition
head its own layer stack. docs/editor.md explains what this follows.

Training is *dual-path imitation learning* with the ed3 oracle (Levenshtein distance where substituting a
token that occurs in the input costs 1): the reposition and insertion heads are each trained on what the
other one produces from the noised reference ``y0 = random_delete_shuffle(y*)`` (or the data's initial
sequence), with the authors' per-batch schedule or the paper's per-sentence mixtures (`editor_loss`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from jaxnat.argmax import argmax
from jaxnat import edit_ops
from jaxnat.data.vocab import PAD_ID, PLH_ID
from jaxnat.decoding import words
from jaxnat.decoding.refine import Hypotheses, forbid_reserved
from jaxnat.decoding.request import Supports
from jaxnat.models.coins import coin_cond
from jaxnat.models.insertion import (EditTransformer, blank_fillers, early_exit, edit_model_spec, head_runner,
                                     insertion_losses, mean_loss, model_choice, model_fills, roll_in_own_insertion)
from jaxnat.models.losses import smoothed_cross_entropy
from jaxnat.models.spec import ModelSpec
from jaxnat.models.transformer import token_mask
from jaxnat.oracle import apply_delete_shuffle, draw_delete_shuffle, ed3_labels

PATH_A = 0.5  # the dual path's coin: path A's probability (the authors' code)
NOT_A_TOKEN = -1e9  # the logit of pointing at padding (finite: an all-padding row must not give NaN)


class Editor(EditTransformer):
    """Encoder + bidirectional decoder with reposition, placeholder and token heads.

    exits: (reposition, placeholder, token) — how many decoder layers each head reads.
    reposition_deletion: the delete column's key, "vector" (a learned b ∈ R^D, eq. 1) or "bos" (BOS's embedding).
    """

    reposition_deletion: str = "vector"
    first_name = "reposition"

    def setup(self):
        super().setup()
        if self.reposition_deletion == "vector":
            self.deletion_vector = self.param("deletion_vector", self.cfg.embed_init(), (self.cfg.d_model,))

    def reposition_logits(self, tokens, memory, src_mask, train: bool = False) -> jax.Array:
        """tokens: int32[B, L] → float32[B, L, L]: slot i's score for taking input token j (h_i · e_j); column
        0 = delete (h_i · b, or h_i · e_BOS with "bos"); padding columns at a large negative value."""
        return self.first_from(self.first_features(tokens, memory, src_mask, train), tokens)

    def first_from(self, h: jax.Array, tokens: jax.Array) -> jax.Array:
        """h: float[B, L, D], `first_features` of tokens int32[B, L] → the reposition logits float32[B, L, L]."""
        h = h.astype(jnp.float32)
        keys = self.tgt_embed.lookup(tokens)                                     # float32[B, L, D]
        if self.reposition_deletion == "vector":
            keys = keys.at[:, 0].set(self.deletion_vector)
        logits = jnp.einsum("bid,bjd->bij", h, keys)
        return jnp.where(token_mask(tokens)[:, None, :], logits, NOT_A_TOKEN)

    def __call__(self, src, tokens, train: bool = False):
        """All three heads on one hypothesis (used to initialise every parameter)."""
        memory, src_mask = self.encode(src, train), token_mask(src)
        return (self.reposition_logits(tokens, memory, src_mask, train),
                self.placeholder_logits(tokens, memory, src_mask, train),
                self.token_logits(tokens, memory, src_mask, train))


def apply_model_reposition(tokens: jax.Array, logits: jax.Array, noise: jax.Array | None = None) -> jax.Array:
    """The model's reposition of ``tokens`` (int32[B, L]), with no gradient: int32[B, L]. logits: float32[B, L, L];
    noise: None (argmax) or Gumbel draws of the same shape (a sample, `model_choice`)."""
    return edit_ops.reposition(tokens, model_choice(logits, noise), PAD_ID).tokens


def oracle_placeholders(y0: jax.Array, tgt: jax.Array, width: int) -> jax.Array:
    """``E(y0, p*)`` of eq. 6: y0 (int32[B, T]) with the ed3 oracle's placeholders (for y0 → tgt) inserted and
    nothing else applied — no deletion, no reposition — on a canvas int32[B, width].

    Every token of y0 stays, so a row can grow to |y0| + |y*| − 2 tokens: ``width`` = 2T holds any row; a
    narrower canvas (one capped at the model's max_len) drops the placeholders that do not fit, cutting the largest
    requests first (`edit_ops.insertion.fair_share`), so no part of the sentence is starved."""
    pad = width - y0.shape[1]
    counts = jnp.pad(ed3_labels(y0, tgt).insertion, ((0, 0), (0, pad)))
    canvas = jnp.pad(y0, ((0, 0), (0, pad)), constant_values=PAD_ID)
    return edit_ops.insert_placeholders(canvas, counts, PAD_ID, PLH_ID).tokens


def editor_loss(model: Editor, params, batch: dict, rng, *, word_start: jax.Array | None, label_smoothing: float,
                placeholder_smoothing: float = 0.01, dual_path: bool = True, alpha: float = 0.0, beta: float = 0.0,
                sampling: bool = False, global_shuffle: float = 0.0, own_insertion_roll_in: float = 0.0,
                insert_after_oracle_reposition: bool = False, train: bool = True, keep_roll_in: bool = False):
    """Dual-path imitation learning with the ed3 oracle, computed on device (docs/editor.md).

    Roll-in starts from y0: ``batch['init']`` (int32[B, T], ``[BOS … EOS]`` rows) when the data gives one, else
    ``random_delete_shuffle(y*)`` (word-level shuffle; ``word_start``: bool[V], the pieces that begin a word,
    None = every piece); ``global_shuffle``: the share of rows shuffled globally instead (`draw_delete_shuffle`'s
    p_global). Two schedules:

    * ``dual_path`` (the authors' code, default): one coin per batch picks **path A** — the insertion heads on
      y0, the reposition head on the reference with the token head's fills at the oracle's placeholders — or
      **path B** — the reposition head on y0, the insertion heads on the model's reposition of y0. A path
      costs three decoder passes; a conditional (`coin_cond`) skips the one the other path would need.
    * otherwise the paper's eqs. 6–7, per sentence: the insertion heads see y0 with probability α, else the
      model's reposition ``E(y0, r̃)`` (eq. 7); the reposition head sees y0 with probability β, else
      ``E(E(y0, p*), t̃)`` (eq. 6): y0 itself, its order and surplus tokens untouched, with the oracle's
      placeholders filled by the token head (`oracle_placeholders`, on a 2T-wide canvas capped at the model's
      max_len). α = 1, β = 0 is Gu et al.'s roll-in (only the model's insertion policy rolls in), the
      "−dual-path" ablation of the paper's Table 5. Up to five decoder passes (two of them 2T wide); α = 1
      skips the reposition of y0, β = 1 the fill pass.

    With ``insert_after_oracle_reposition`` (beyond the paper) the insertion heads' y0 rows are y0 after the ed3
    oracle's reposition for y*: decoding inserts after repositioning, so a misplaced word is gone (or moved) by the
    time the insertion heads run, while on y0 itself they would learn to insert a second copy of it where it
    belongs. y0 rows without misplaced words are unchanged.

    With probability ``own_insertion_roll_in`` (one coin per batch, beyond the paper) the roll-in follows the
    model's own insertion (`own_insertion`): the insertion heads learn on what the oracle keeps of it, and on
    path A the reposition head on the insertion itself, instead of on the oracle's placeholders filled.

    r̃ and t̃ are the argmax of the heads, or with ``sampling`` samples from them (eqs. 6–7 write samples; the
    authors' code takes the argmax). No gradient flows through them. Filler rows (target all PAD) get a blank
    y0 and carry no loss; every random number has the batch as its leading axis (or is one per batch).

    Loss = placeholder CE (smoothing 0.01) + token CE (smoothing ε) + reposition CE (none), each the mean over
    its own positions. Returns ``(loss · n, aux)`` like `levt_loss`; with ``keep_roll_in``, aux['roll_in'] holds
    the head inputs (y0, y_ins: int32[B, T], y_rps: int32[B, T] or, eq. 6, int32[B, 2T]), the per-sentence
    choices and aux['roll_in']['draws'], every random number of the roll-in (for tests).
    """
    src, tgt = batch["src"], batch["tgt"]
    b, t = tgt.shape
    # New keys go last: the first keys of a split do not depend on how many are split, so runs with the
    # earlier options keep their random numbers.
    k_noise, k_mix, k_enc, k_roll, k_plh, k_tok, k_rps, k_fill, k_pick_r, k_pick_t, k_own = jax.random.split(rng, 11)

    apply = head_runner(model, params, train)
    memory, src_mask = apply("encode", src, key=k_enc), token_mask(src)
    draws = {}
    if "init" in batch:
        y0 = batch["init"]
    else:
        draws["noise"] = draw_delete_shuffle(k_noise, tgt.shape, p_global=global_shuffle)
        starts = jnp.ones(tgt.shape, bool) if word_start is None else word_start[tgt]
        y0 = apply_delete_shuffle(tgt, starts, *draws["noise"])
    y0 = blank_fillers(y0, tgt)
    if sampling:
        draws["reposition_noise"] = jax.random.gumbel(k_pick_r, (b, t, t))

    def reposition_on(tokens, key):
        return lambda: apply("reposition_logits", tokens, memory, src_mask, key=key)

    no_logits = lambda: jnp.zeros((b, t, t), jnp.float32)  # noqa: E731
    if dual_path:
        draws["path_a"] = jax.random.bernoulli(k_mix, PATH_A)
        ins_on_y0, rps_on_y0 = jnp.full((b,), draws["path_a"]), jnp.full((b,), ~draws["path_a"])
        rps_y0 = coin_cond(PATH_A, draws["path_a"], no_logits, reposition_on(y0, k_roll))
    else:
        draws["coins"] = jax.random.uniform(k_mix, (b, 2))
        ins_on_y0, rps_on_y0 = draws["coins"][:, 0] < alpha, draws["coins"][:, 1] < beta
        rps_y0 = reposition_on(y0, k_roll)() if alpha < 1 else no_logits()

    # Learning to insert, on y0 (or the oracle's reposition of it) or on the model's reposition of it.
    y0_ins = y0
    if insert_after_oracle_reposition:  # static
        y0_ins = edit_ops.reposition(y0, ed3_labels(y0, tgt).reposition, PAD_ID).tokens
    y_ins = jnp.where(ins_on_y0[:, None], y0_ins, apply_model_reposition(y0, rps_y0, draws.get("reposition_noise")))
    y_ins, own = roll_in_own_insertion(apply, y_ins, tgt, memory, src_mask, k_own, own_insertion_roll_in, draws)
    ins = ed3_labels(y_ins, tgt)
    plh_loss, tok_loss, tok_nll, tok_logits = insertion_losses(
        apply, y_ins, tgt, ins, memory, src_mask, (k_plh, k_tok), label_smoothing=label_smoothing,
        placeholder_smoothing=placeholder_smoothing)

    # Learning to reposition, on y0 or on the model's fills.
    if dual_path:  # path A: the fills of the token head's own roll-in (the reference with placeholders)
        if sampling:
            draws["token_noise"] = jax.random.gumbel(k_pick_t, tok_logits.shape)
        fills = model_fills(tok_logits, tgt, ins.insert_mask, draws.get("token_noise"))
        if own is not None:  # the model's own insertion of y0, surplus and repeated words included
            fills = jnp.where(draws["own_insertion"], own, fills)
        y_rps = jnp.where(rps_on_y0[:, None], y0, fills)
        rps_logits = coin_cond(PATH_A, draws["path_a"], reposition_on(y_rps, k_rps), lambda: rps_y0)
    else:  # eq. 6: the fills of y0's own placeholders, one more token-head pass on a wider canvas
        width = min(2 * t, model.cfg.max_len)
        y_rps = jnp.pad(y0, ((0, 0), (0, width - t)), constant_values=PAD_ID)
        if beta < 1:  # static: with β = 1 no sentence needs the fills
            canvas = oracle_placeholders(y0, tgt, width)
            fill_logits = forbid_reserved(apply("token_logits", canvas, memory, src_mask, key=k_fill))
            if sampling:
                draws["token_noise"] = jax.random.gumbel(k_pick_t, fill_logits.shape)
            filled = edit_ops.fill_placeholders(canvas, model_choice(fill_logits, draws.get("token_noise")), PLH_ID)
            y_rps = jnp.where(rps_on_y0[:, None], y_rps, filled)
        rps_logits = reposition_on(y_rps, k_rps)()
    rps_sum, _, rps_count = smoothed_cross_entropy(rps_logits, ed3_labels(y_rps, tgt).reposition,
                                                   token_mask(y_rps), 0.0)
    rps_loss = mean_loss(rps_sum, rps_count)

    n = jnp.sum(token_mask(tgt), dtype=jnp.float32)
    aux = {"nll": tok_nll * n, "count": n, "placeholder_loss": plh_loss, "token_loss": tok_loss,
           "reposition_loss": rps_loss}
    if keep_roll_in:
        aux["roll_in"] = {"y0": y0, "y_ins": y_ins, "y_rps": y_rps, "ins_on_y0": ins_on_y0, "rps_on_y0": rps_on_y0,
                          "draws": draws}
    return (plh_loss + tok_loss + rps_loss) * n, aux


# ----------------------------------------------------------------------------------------------- decoding

SUPPORTS = Supports(init=True, soft_constraints=True, hard_constraints=True, trace=True, given_order=False,
                    counts=("iterations", "steps", "repositions", "deletions", "insertions"))


def glued_to_phrase(tokens: jax.Array, phrase: jax.Array, continues: jax.Array | None,
                    joins: jax.Array | None = None, trails: jax.Array | None = None) -> jax.Array:
    """bool[B, L]: free pieces that would glue onto a hard constraint's word — the pieces that continue a word
    (``continues``: bool[V]) between a phrase and the next piece that starts a word, trailing pieces
    (``trails``: bool[V], punctuation) or not between them ("Zaun.n" loses its "n"); those right before a phrase
    that glue the next piece onto their word (``joins``: bool[V], BPE's "@@") and the joining pieces before them."""
    pos = edit_ops.positions(tokens)
    glued = jnp.zeros(tokens.shape, bool)
    if continues is not None:
        in_phrase = phrase > 0
        last = words.last_pieces(phrase)
        # the glued pieces go too, so they do not end the phrase's word: they pass like punctuation
        passing = continues if trails is None else continues | trails
        glued = glued | (words.open_words(passing[tokens] & ~in_phrase, last)[0] & continues[tokens] & ~in_phrase)
    if joins is not None:
        last = tokens.shape[1] - 1
        anchor = (phrase > 0) | ~joins[tokens] | (pos == 0) | (tokens == PAD_ID)
        run_end = lax.cummin(jnp.where(anchor, pos, last), axis=1, reverse=True)
        glued = glued | (~anchor & (jnp.take_along_axis(phrase, run_end, axis=1) > 0))
    return glued


def editor_reposition(hyps: Hypotheses, logits: jax.Array, active: jax.Array, continues: jax.Array | None = None,
                      deletion_reward: float = 0.0, paper_hard: bool = False, joins: jax.Array | None = None,
                      trails: jax.Array | None = None):
    """EDITOR's first edit: every slot takes the input token it scores highest (column 0 deletes; the deletion reward is
    added to it first); BOS/EOS pinned; finished rows left as they are. logits: float32[B, L, L].

    Hard constraints stay whole (`edit_ops.reposition_phrases`): each phrase moves as one block to the slot most
    likely to take its first token (argmax over slots of log π_rps(first token | slot)), which is its own slot
    unless the model wants it elsewhere; and with ``continues`` (``joins``) the free pieces that would then extend a
    phrase's last word (glue a phrase onto their word) are deleted (`glued_to_phrase`). With ``paper_hard``
    (editor.hard_mode=paper: the EDITOR paper and its code) a slot holding a constraint token only may not delete
    it, and nothing else is constrained: a constraint token may be moved or copied on its own, and dropped when no
    slot takes it. Counts: repositions (slots holding another token, deletions excluded) and deletions.
    """
    n = edit_ops.lengths(hyps.tokens, PAD_ID)[:, None]
    pos = edit_ops.positions(hyps.tokens)
    # padding columns can never be pointed at, whatever the head says (finite: an empty row must not give NaN)
    logits = jnp.where(pos[:, None, :] < n[:, :, None], logits.at[..., 0].add(deletion_reward), NOT_A_TOKEN)
    if paper_hard:  # a constraint token's slot may not delete (column 0, or the EOS column, which deletes too)
        deleting = (pos[:, None, :] == 0) | (pos[:, None, :] == n[:, :, None] - 1)
        logits = jnp.where((hyps.phrase > 0)[:, :, None] & deleting, NOT_A_TOKEN, logits)
    index = jnp.where(active[:, None], argmax(logits), pos)
    if paper_hard:
        out = edit_ops.reposition(hyps.tokens, index, PAD_ID, sides=hyps.sides())
        return Hypotheses(out.tokens, *out.sides), {"repositions": out.num_moved, "deletions": out.num_deleted}
    interior_slot = ((pos > 0) & (pos < n - 1))[:, :, None]
    anchor = jnp.argmax(jnp.where(interior_slot, jax.nn.log_softmax(logits, axis=-1), -jnp.inf), axis=1)
    anchor = jnp.where(active[:, None], anchor.astype(jnp.int32), pos)
    out = edit_ops.reposition_phrases(hyps.tokens, index, anchor, hyps.phrase, PAD_ID,
                                      sides=hyps.sides())
    moved = Hypotheses(out.tokens, *out.sides)
    deletions = out.num_deleted
    if continues is not None or joins is not None:
        glued = glued_to_phrase(moved.tokens, moved.phrase, continues, joins, trails)
        cut = edit_ops.delete_tokens(moved.tokens, glued, PAD_ID, sides=moved.sides())
        moved, deletions = Hypotheses(cut.tokens, *cut.sides), deletions + cut.num_deleted
    return moved, {"repositions": out.num_moved, "deletions": deletions}


def build_spec(config, cfg, pieces) -> ModelSpec:
    s, t = config.editor, config.train
    module = Editor(cfg, early_exit(s, cfg), s.separate_reposition, s.separate_placeholder, s.reposition_deletion)
    word_start = jnp.asarray(pieces.word_start)

    def loss(params, batch, rng, train=True):
        return editor_loss(module, params, batch, rng, word_start=word_start, label_smoothing=t.label_smoothing,
                           placeholder_smoothing=s.placeholder_smoothing, dual_path=s.dual_path,
                           alpha=s.roll_in_alpha, beta=s.roll_in_beta, sampling=s.roll_in_sampling,
                           global_shuffle=s.global_shuffle, own_insertion_roll_in=s.own_insertion_roll_in,
                           insert_after_oracle_reposition=s.insert_after_oracle_reposition, train=train)

    first_edit = functools.partial(editor_reposition, deletion_reward=s.deletion_reward,
                                   paper_hard=s.hard_mode == "paper")
    return edit_model_spec(config, s, cfg, "editor", module, loss, "reposition_logits", first_edit, pieces, SUPPORTS)
