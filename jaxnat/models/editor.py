"""EDITOR (Xu and Carpuat, 2021): an edit-based transformer with *repositioning*.

EDITOR replaces LevT's deletion with a reposition: every output slot ``i`` of the current hypothesis
``y_1..n`` points at the input token it takes (paper eq. 1),

    π_rps(r | i, y) = softmax_r(h_i · [e_1, …, e_n]),

with ``e_j`` the raw embedding of input token ``j``. As in the authors' code, column 0 is BOS's embedding and
pointing at it deletes the slot (the paper writes a separate vector ``b``); BOS and EOS are pinned at decode
time. A token may be copied to several slots, and a token nobody points at disappears. Placeholder insertion
and token prediction are LevT's (`jaxnat.models.insertion`). One decoding iteration = reposition →
placeholders → fill (`editor_reposition`, run by `jaxnat.decoding.refine`); the reference recipe gives the
reposition head its own layer stack. docs/editor.md explains what this follows.

Training is *dual-path imitation learning* with the ed3 oracle (Levenshtein distance where substituting a
token that occurs in the input costs 1): the reposition and insertion heads are each trained on what the
other one produces from the noised reference ``y0 = random_delete_shuffle(y*)`` (`editor_loss`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from jaxnat import edit_ops
from jaxnat.data.vocab import PAD_ID
from jaxnat.decoding.refine import Hypotheses
from jaxnat.decoding.request import Supports
from jaxnat.models.insertion import (EditTransformer, early_exit, edit_model_spec, head_runner, insertion_losses,
                                     mean_loss, model_fills)
from jaxnat.models.spec import ModelSpec
from jaxnat.models.transformer import token_mask
from jaxnat.oracle import ed3_labels, random_delete_shuffle
from jaxnat.models.losses import smoothed_cross_entropy

NOT_A_TOKEN = -1e9  # the logit of pointing at padding (finite: an all-padding row must not give NaN)


class Editor(EditTransformer):
    """Encoder + bidirectional decoder with reposition, placeholder and token heads.

    exits: (reposition, placeholder, token) — how many decoder layers each head reads.
    """

    first_name = "reposition"

    def reposition_logits(self, tokens, memory, src_mask, train: bool = False) -> jax.Array:
        """tokens: int32[B, L] → float32[B, L, L]: slot i's score for taking input token j (h_i · e_j);
        column 0 (BOS) = delete; padding columns at a large negative value."""
        h = self.first_features(tokens, memory, src_mask, train).astype(jnp.float32)
        logits = jnp.einsum("bid,bjd->bij", h, self.tgt_embed.lookup(tokens))
        return jnp.where(token_mask(tokens)[:, None, :], logits, NOT_A_TOKEN)

    def __call__(self, src, tokens, train: bool = False):
        """All three heads on one hypothesis (used to initialise every parameter)."""
        memory, src_mask = self.encode(src, train), token_mask(src)
        return (self.reposition_logits(tokens, memory, src_mask, train),
                self.placeholder_logits(tokens, memory, src_mask, train),
                self.token_logits(tokens, memory, src_mask, train))


def apply_model_reposition(tokens: jax.Array, logits: jax.Array) -> jax.Array:
    """The model's argmax reposition of ``tokens`` (int32[B, L]) with no gradient: int32[B, L]."""
    index = jnp.argmax(lax.stop_gradient(logits), axis=-1).astype(jnp.int32)
    return edit_ops.reposition(tokens, index, PAD_ID).tokens


def editor_loss(model: Editor, params, batch: dict, rng, *, word_start: jax.Array | None, label_smoothing: float,
                placeholder_smoothing: float = 0.01, dual_path: bool = True, alpha: float = 0.0, beta: float = 0.0,
                train: bool = True, keep_roll_in: bool = False):
    """Dual-path imitation learning with the ed3 oracle, computed on device (docs/editor.md).

    Roll-in starts from ``y0 = random_delete_shuffle(y*)`` (word-level shuffle; ``word_start``: bool[V], the
    pieces that begin a word, None = every piece). The paper's mixtures (its eqs. 6–7), per sentence:

    * the insertion heads see ``y0`` with probability α, else the model's reposition of ``y0``;
    * the reposition head sees ``y0`` with probability β, else the model's fills of the oracle's placeholders
      (the reference with the token head's argmax where the oracle inserts).

    ``dual_path`` (the authors' code, default): one coin per batch picks path A (insert on ``y0``, reposition
    on the fills: α = 1, β = 0) or path B (reposition on ``y0``, insert on its output: α = 0, β = 1). Each path
    costs three decoder passes; the layers a path does not need are skipped with ``lax.cond``.
    With independent α/β, the fills come from the insertion roll-in (``y0`` or its reposition), which saves a
    pass and matches eq. 6 whenever that roll-in is ``y0``.

    Loss = placeholder CE (smoothing 0.01) + token CE (smoothing ε) + reposition CE (none), each the mean over
    its own positions. Returns ``(loss · n, aux)`` like `levt_loss`; with ``keep_roll_in``, aux['roll_in'] holds
    the roll-in sequences (y0, y_ins, y_rps: int32[B, T]) and the per-sentence choices (for tests).
    """
    src, tgt = batch["src"], batch["tgt"]
    b = tgt.shape[0]
    k_noise, k_mix, k_enc, k_roll, k_plh, k_tok, k_rps = jax.random.split(rng, 7)

    apply = head_runner(model, params, train)
    memory, src_mask = apply("encode", src, key=k_enc), token_mask(src)
    starts = jnp.ones(tgt.shape, bool) if word_start is None else word_start[tgt]
    y0 = random_delete_shuffle(k_noise, tgt, starts)
    if dual_path:
        path_a = jax.random.bernoulli(k_mix, 0.5)
        ins_on_y0, rps_on_y0 = jnp.full((b,), path_a), jnp.full((b,), ~path_a)
    else:
        u = jax.random.uniform(k_mix, (2, b))
        ins_on_y0, rps_on_y0 = u[0] < alpha, u[1] < beta

    # The reposition head on y0: its training input where rps_on_y0, the insertion roll-in where not ins_on_y0.
    def reposition_on(tokens, key):
        return lambda: apply("reposition_logits", tokens, memory, src_mask, key=key)

    no_logits = lambda: jnp.zeros(tgt.shape + tgt.shape[1:], jnp.float32)  # noqa: E731
    rps_y0 = lax.cond(jnp.any(rps_on_y0) | ~jnp.all(ins_on_y0), reposition_on(y0, k_roll), no_logits)

    # Learning to insert, on y0 or on the model's reposition of it.
    y_ins = jnp.where(ins_on_y0[:, None], y0, apply_model_reposition(y0, rps_y0))
    ins = ed3_labels(y_ins, tgt)
    plh_loss, tok_loss, tok_nll, tok_logits = insertion_losses(
        apply, y_ins, tgt, ins, memory, src_mask, (k_plh, k_tok), label_smoothing=label_smoothing,
        placeholder_smoothing=placeholder_smoothing)

    # Learning to reposition, on y0 or on the model's fills.
    y_rps = jnp.where(rps_on_y0[:, None], y0, model_fills(tok_logits, tgt, ins.insert_mask))
    rps_logits = lax.cond(jnp.all(rps_on_y0), lambda: rps_y0, reposition_on(y_rps, k_rps))
    rps_sum, _, rps_count = smoothed_cross_entropy(rps_logits, ed3_labels(y_rps, tgt).reposition,
                                                   token_mask(y_rps), 0.0)
    rps_loss = mean_loss(rps_sum, rps_count)

    n = jnp.sum(token_mask(tgt), dtype=jnp.float32)
    aux = {"nll": tok_nll * n, "count": n, "placeholder_loss": plh_loss, "reposition_loss": rps_loss}
    if keep_roll_in:
        aux["roll_in"] = {"y0": y0, "y_ins": y_ins, "y_rps": y_rps, "ins_on_y0": ins_on_y0, "rps_on_y0": rps_on_y0}
    return (plh_loss + tok_loss + rps_loss) * n, aux


# ----------------------------------------------------------------------------------------------- decoding

SUPPORTS = Supports(init=True, soft_constraints=True, hard_constraints=True, trace=True,
                    counts=("iterations", "repositions", "deletions", "insertions"))


def glued_to_phrase(tokens: jax.Array, phrase: jax.Array, continues: jax.Array) -> jax.Array:
    """bool[B, L]: free pieces that would extend a hard constraint's last word — those right after a phrase
    that continue a word (``continues``: bool[V]), and the continuing pieces after them."""
    pos = edit_ops.positions(tokens)
    anchor = (phrase > 0) | ~continues[tokens] | (pos == 0)
    run_start = lax.cummax(jnp.where(anchor, pos, 0), axis=1)
    return ~anchor & (jnp.take_along_axis(phrase, run_start, axis=1) > 0)


def editor_reposition(hyps: Hypotheses, logits: jax.Array, active: jax.Array, continues: jax.Array | None = None,
                      deletion_reward: float = 0.0):
    """EDITOR's first edit: every slot takes the input token it scores highest (column 0 deletes; the deletion
    reward is added to it first); BOS/EOS pinned; finished rows left as they are. logits: float32[B, L, L].

    Hard constraints stay whole (`edit_ops.reposition_phrases`): each phrase moves as one block to the slot
    most likely to take its first token (argmax over slots of log π_rps(first token | slot)), which is its own
    slot unless the model wants it elsewhere; and with ``continues`` the free pieces that would then extend a
    phrase's last word are deleted. Counts: repositions (slots holding another token, deletions excluded) and
    deletions.
    """
    n = edit_ops.lengths(hyps.tokens, PAD_ID)[:, None]
    pos = edit_ops.positions(hyps.tokens)
    # padding columns can never be pointed at, whatever the head says (finite: an empty row must not give NaN)
    logits = jnp.where(pos[:, None, :] < n[:, :, None], logits.at[..., 0].add(deletion_reward), NOT_A_TOKEN)
    index = jnp.where(active[:, None], jnp.argmax(logits, axis=-1).astype(jnp.int32), pos)
    interior_slot = ((pos > 0) & (pos < n - 1))[:, :, None]
    anchor = jnp.argmax(jnp.where(interior_slot, jax.nn.log_softmax(logits, axis=-1), -jnp.inf), axis=1)
    anchor = jnp.where(active[:, None], anchor.astype(jnp.int32), pos)
    out = edit_ops.reposition_phrases(hyps.tokens, index, anchor, hyps.phrase, PAD_ID,
                                      sides=(hyps.scores, hyps.phrase))
    moved = Hypotheses(out.tokens, *out.sides)
    deletions = out.num_deleted
    if continues is not None:
        glued = glued_to_phrase(moved.tokens, moved.phrase, continues)
        cut = edit_ops.delete_tokens(moved.tokens, glued, PAD_ID, sides=(moved.scores, moved.phrase))
        moved, deletions = Hypotheses(cut.tokens, *cut.sides), deletions + cut.num_deleted
    return moved, {"repositions": out.num_moved, "deletions": deletions}


def build_spec(config, cfg, pieces) -> ModelSpec:
    m, t = config.model, config.train
    module = Editor(cfg, early_exit(m), m.separate_reposition, m.separate_placeholder)
    word_start = jnp.asarray(pieces.word_start)

    def loss(params, batch, rng, train=True):
        return editor_loss(module, params, batch, rng, word_start=word_start, label_smoothing=t.label_smoothing,
                           placeholder_smoothing=t.placeholder_smoothing, dual_path=t.dual_path,
                           alpha=t.roll_in_alpha, beta=t.roll_in_beta, train=train)

    first_edit = functools.partial(editor_reposition, deletion_reward=config.eval.deletion_reward)
    return edit_model_spec(config, cfg, "editor", module, loss, "reposition_logits", first_edit, pieces, SUPPORTS)
