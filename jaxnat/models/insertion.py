"""What the two edit-based models share: an encoder, a bidirectional decoder, and the insertion half of an
edit (Gu et al. 2019, reused unchanged by EDITOR):

* **placeholders** — ``π_plh(p_i | i, y)``: for every pair of adjacent tokens, how many (0 … 255) placeholders
  to open between them, read from the concatenation of the two tokens' features;
* **tokens** — ``π_tok(t_i | i, y)``: the tied output projection at every placeholder.

`EditTransformer` holds these plus a decoder stack for the model's *first* edit (LevT: deletion, EDITOR:
reposition), shared with the main decoder or separate; `insertion_losses` is their imitation-learning loss
on a roll-in sequence, and `edit_model_spec` the decoding both models share (`jaxnat.decoding.refine`).
Options: *early exit* (each head reads the output of its own number of decoder layers, and the layers above
are not computed) and separate layer stacks (LevT's Table 2a).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxnat.argmax import argmax
from jaxnat import edit_ops
from jaxnat.errors import ConfigError
from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID, PLH_ID
from jaxnat.decoding.refine import (LOOP_COUNTS, Heads, RefineOptions, SharedFeatures, forbid_reserved, length_cap,
                                    refine, start_from_request, static_length_cap)
from jaxnat.decoding.request import DecodeRequest
from jaxnat.models.coins import coin_cond
from jaxnat.models.losses import smoothed_cross_entropy
from jaxnat.models.spec import ModelSpec, word_glue
from jaxnat.models.transformer import (absent_logits, Decoder, embedders, Encoder, rows_dense, TransformerConfig,
                                      token_mask)
from jaxnat.oracle import MAX_INSERTIONS, ed2_labels

def empty_canvas(like: jax.Array) -> jax.Array:
    """int32[B, L] rows ``[BOS, EOS, PAD …]`` (the initial hypothesis of plain translation)."""
    row = jnp.zeros(like.shape[1:], like.dtype).at[0].set(BOS_ID).at[1].set(EOS_ID)
    return jnp.broadcast_to(row, like.shape)


class EditTransformer(nn.Module):
    """Encoder + bidirectional decoder with the placeholder and token heads; subclasses add their first edit.

    exits: (first edit, placeholder, token) — how many decoder layers each head reads.
    first_name: the first edit's name ("deletion", "reposition"); its own stack is ``<first_name>_decoder``.
    """

    cfg: TransformerConfig
    exits: tuple[int, int, int]
    separate_first: bool = False
    separate_placeholder: bool = False
    first_name = "first"

    def setup(self):
        c = self.cfg
        self.src_embed, self.tgt_embed = embedders(c)
        self.encoder = Encoder(c, name="encoder")
        self.decoder = Decoder(c, c.dec_layers, causal=False, name="decoder")
        self.first_decoder = (Decoder(c, self.exits[0], causal=False, name=f"{self.first_name}_decoder")
                              if self.separate_first else self.decoder)
        self.placeholder_decoder = (Decoder(c, self.exits[1], causal=False, name="placeholder_decoder")
                                    if self.separate_placeholder else self.decoder)
        self.placeholder_head = self.dense(MAX_INSERTIONS + 1, "placeholder_head")
        if not c.tie_output:
            self.output = self.dense(c.tgt_vocab_size, "output")

    def dense(self, n: int, name: str) -> nn.Dense:
        return rows_dense(n, use_bias=False, kernel_init=self.cfg.kernel_init(), name=name)

    def encode(self, src: jax.Array, train: bool = False) -> jax.Array:
        """src: int32[B, S] → memory float[B, S, D]."""
        return self.encoder(self.src_embed(src, train), token_mask(src), train)

    def source_kv(self, memory: jax.Array) -> dict:
        """memory float[B, S, D] → each decoder stack's cross-attention keys and values (`Decoder.memory_kv`), by
        its name: what the heads' ``memory`` may be in a decoding loop, projected once for all its passes."""
        stacks = {d.name: d for d in (self.decoder, self.first_decoder, self.placeholder_decoder)}
        return {name: d.memory_kv(memory) for name, d in stacks.items()}

    def features(self, decoder, layers, tokens, memory, src_mask, train):
        """tokens: int32[B, L] → float[B, L, D], the output of the first ``layers`` layers of ``decoder``. memory:
        float[B, S, D], or `source_kv`'s projections of it."""
        x = self.tgt_embed(tokens, train)
        memory = memory[decoder.name] if isinstance(memory, dict) else memory
        return decoder(x, token_mask(tokens), memory, src_mask, train, num_layers=layers)

    def first_features(self, tokens, memory, src_mask, train: bool = False) -> jax.Array:
        """tokens: int32[B, L] → float[B, L, D], what the first edit's head reads."""
        return self.features(self.first_decoder, self.exits[0], tokens, memory, src_mask, train)

    @property
    def shares_first_features(self) -> bool:
        """Whether the first edit's head and the placeholder head read the same decoder output (one stack, the
        same exit): decoding then computes it once for both where the first edit changes nothing
        (`refine.SharedFeatures`)."""
        return not (self.separate_first or self.separate_placeholder) and self.exits[0] == self.exits[1]

    def placeholder_logits(self, tokens, memory, src_mask, train: bool = False) -> jax.Array:
        """tokens: int32[B, L] → float32[B, L-1, 256]: slot k (between tokens k and k+1) reads both tokens."""
        h = self.features(self.placeholder_decoder, self.exits[1], tokens, memory, src_mask, train)
        return self.placeholder_from(h)

    def placeholder_from(self, h: jax.Array) -> jax.Array:
        """h: float[B, L, D], the placeholder head's decoder output → float32[B, L-1, 256]."""
        pairs = jnp.concatenate([h[:, :-1], h[:, 1:]], axis=-1)
        return self.placeholder_head(pairs).astype(jnp.float32)

    def token_logits(self, tokens, memory, src_mask, train: bool = False) -> jax.Array:
        """tokens: int32[B, L] (placeholders to fill) → float32[B, L, V]."""
        h = self.features(self.decoder, self.exits[2], tokens, memory, src_mask, train)
        logits = self.tgt_embed.attend(h) if self.cfg.tie_output else self.output(h).astype(jnp.float32)
        return absent_logits(self.cfg, logits)


def early_exit(section, model_cfg, key: str = "early_exit") -> tuple[int, int, int]:
    """An edit family's section's early_exit "f,p,t" → (first edit, placeholder, token) decoder layers; "" → all
    of model_cfg's (model.* or a `TransformerConfig`) dec_layers. key: its name in error messages."""
    text = section.early_exit.strip()
    if not text:
        return (model_cfg.dec_layers,) * 3
    try:
        exits = tuple(int(v) for v in text.split(","))
    except ValueError:
        exits = ()
    if len(exits) != 3 or not all(1 <= e <= model_cfg.dec_layers for e in exits):
        raise ConfigError(f"{key} must be three layer counts 'f,p,t' between 1 and model.dec_layers "
                          f"({model_cfg.dec_layers}), got {text!r}")
    if getattr(model_cfg, "scan_layers", False) and min(exits) < model_cfg.dec_layers:
        raise ConfigError(f"model.scan_layers runs whole decoder stacks; {key}={text!r} reads fewer "
                          f"layers: turn one of them off")
    return exits


def head_runner(model: EditTransformer, params, train: bool):
    """apply(method, *args, key, **kwargs): runs one of the model's methods, with dropout drawn from ``key``."""
    def apply(method, *args, key, **kwargs):
        return model.apply(params, *args, train=train, method=method, rngs={"dropout": key}, **kwargs)

    return apply


def mean_loss(total, count):
    return total / jnp.maximum(count, 1.0)


def insertion_losses(apply, y_ins: jax.Array, tgt: jax.Array, labels, memory, src_mask, keys, *,
                     label_smoothing: float, placeholder_smoothing: float):
    """Learning to insert on the roll-in ``y_ins`` (int32[B, L]): placeholder CE against the oracle's slot
    counts, then token CE on the reference with the oracle's placeholders (``labels``: Ed2Labels or Ed3Labels
    of ``y_ins`` → ``tgt``). apply: a `head_runner`; keys: (placeholder key, token key).

    Returns (placeholder loss, token loss, token nll, token logits float32[B, T, V]), losses as means.
    """
    plh_logits = apply("placeholder_logits", y_ins, memory, src_mask, key=keys[0])
    slots = jnp.arange(y_ins.shape[1] - 1)[None, :] < jnp.sum(token_mask(y_ins), axis=1, keepdims=True) - 1
    plh_loss, _, plh_count = smoothed_cross_entropy(plh_logits, labels.insertion, slots, placeholder_smoothing)
    masked_tgt = jnp.where(labels.insert_mask, PLH_ID, tgt)
    tok_logits = apply("token_logits", masked_tgt, memory, src_mask, key=keys[1])
    tok_loss, tok_nll, tok_count = smoothed_cross_entropy(tok_logits, tgt, labels.insert_mask, label_smoothing)
    return (mean_loss(plh_loss, plh_count), mean_loss(tok_loss, tok_count), mean_loss(tok_nll, tok_count),
            tok_logits)


def own_insertion(apply, y: jax.Array, tgt: jax.Array, memory, src_mask, keys) -> tuple[jax.Array, jax.Array]:
    """The model's own insertion on ``y`` (int32[B, T]) and what the oracle keeps of it, with no gradient:

    * ``filled``: the argmax placeholders (a row grows to at most T; `fair_share` cuts the excess) filled with
      the token head's argmax — with the model's own surplus, missing and repeated words, which the first edit
      (deletion, reposition) must learn to clean up;
    * ``kept``: ``filled`` minus the ed2 oracle's deletions for ``tgt`` (int32[B, T]) — an in-order
      subsequence of the reference holding what the model inserted correctly, so the gaps left are the ones it
      missed: the canvas the next iteration's insertion heads see after a perfect first edit.

    A roll-in beyond the papers (the sections' ``own_insertion_roll_in``, docs/editor.md): both train their insertion
    heads only on noised or oracle-deleted references with the oracle's placeholder counts, never on what the
    model's own placeholder counts produce. It takes the argmax of both heads, as decoding does, whatever
    ``editor.roll_in_sampling`` says. keys: (placeholder key, token key) for dropout.
    """
    counts = model_choice(apply("placeholder_logits", y, memory, src_mask, key=keys[0]))
    canvas = edit_ops.insert_placeholders(y, counts, PAD_ID, PLH_ID).tokens
    fills = model_choice(forbid_reserved(apply("token_logits", canvas, memory, src_mask, key=keys[1])))
    filled = edit_ops.fill_placeholders(canvas, fills.astype(canvas.dtype), PLH_ID)
    return filled, edit_ops.delete_tokens(filled, ed2_labels(filled, tgt).deletion, PAD_ID).tokens


def roll_in_own_insertion(apply, y_ins, tgt, memory, src_mask, key, probability: float, draws: dict):
    """With probability ``probability`` (one coin per batch, recorded in draws['own_insertion']):
    ``(kept, filled)`` of `own_insertion` on ``y_ins`` — the insertion heads' new input and the model's own
    insertion for the first edit's head; else ``(y_ins, None)``, and with probability 0 (static) nothing is
    drawn or computed. Callers pick with the coin: ``filled`` is ``y_ins`` when it is off."""
    if probability <= 0:
        return y_ins, None
    k_coin, k_plh, k_tok = jax.random.split(key, 3)
    draws["own_insertion"] = jax.random.bernoulli(k_coin, probability)
    filled, kept = coin_cond(probability, draws["own_insertion"],
                             lambda: own_insertion(apply, y_ins, tgt, memory, src_mask, (k_plh, k_tok)),
                             lambda: (y_ins, y_ins))
    return kept, filled


def edit_model_spec(config, section, cfg: TransformerConfig, name: str, module: EditTransformer, loss, first_head: str,
                    first_edit, pieces, supports, oracle_heads=None) -> ModelSpec:
    """The `ModelSpec` of an edit-based model: its first edit (``first_head``: the module method giving its
    logits; ``first_edit``: a `refine.FirstEdit`) and the shared insertion heads, run by `refine` from the
    request's starting hypotheses (`start_from_request`). supports.counts: "iterations", the first edit's
    counts, "insertions". oracle_heads(heads, reference, mode) -> Heads: the heads with some replaced by an
    oracle's actions against the reference, for a request's ``oracle`` mode (one of supports.oracle)."""
    e = config.eval
    options = RefineOptions(section.max_iter, section.placeholder_penalty, e.length_cap_min, e.length_cap_ratio,
                            e.run_all_iterations, rules=e.search_rules)
    continues, joins, trails = word_glue(pieces)  # hard constraints: whole words
    count_names = tuple(c for c in supports.counts if c not in LOOP_COUNTS)

    def init(rng, batch):
        return module.init(rng, batch["src"][:1], batch["tgt"][:1])

    def generate(params, request: DecodeRequest) -> dict:
        src = request.src
        memory, src_mask = module.apply(params, src, method="encode"), token_mask(src)
        projected = module.apply(params, memory, method="source_kv")  # once, for every pass

        def head(method):
            return lambda tokens: module.apply(params, tokens, projected, src_mask, method=method)

        def on_rows(method):  # the head on some sentences: (tokens int32[R, L], rows int32[R])
            def run(tokens, rows):
                some = jax.tree_util.tree_map(lambda x: x[rows], projected)
                return module.apply(params, tokens, some, src_mask[rows], method=method)
            return run

        shared = None
        if module.shares_first_features:
            shared = SharedFeatures(head("first_features"), on_rows("first_features"),
                                    lambda h, tokens: module.apply(params, h, tokens, method="first_from"),
                                    lambda h: module.apply(params, h, method="placeholder_from"))
        heads = Heads(head(first_head), head("placeholder_logits"), head("token_logits"), on_rows("token_logits"),
                      shared)
        if request.oracle:
            heads = oracle_heads(heads, request.reference, request.oracle)
        capacity = request.width(capacity_for)
        start = start_from_request(request, capacity)
        return refine(heads, first_edit, start, length_cap(src, capacity, options),
                      options._replace(trace=request.trace), count_names, continues, joins, trails)

    def capacity_for(src_len: int) -> int:
        return static_length_cap(src_len, cfg.max_len, e.length_cap_min, e.length_cap_ratio)

    # each head's cross-entropy, whose sum is the loss: the history reports them beside it (docs/levt.md, "Training")
    terms = ("placeholder_loss", "token_loss", f"{module.first_name}_loss")
    return ModelSpec(name, cfg, module, init, loss, generate, capacity_for, supports, terms=terms)


def blank_fillers(tokens: jax.Array, tgt: jax.Array) -> jax.Array:
    """tokens: int32[B, L] with every row whose target (tgt: int32[B, T]) is all PAD — a batch's filler rows —
    set to PAD. A roll-in that starts from such a blank row stays blank (every edit of an all-PAD row is
    all-PAD, and the oracles ask for nothing there), so no head has a position to learn on in a filler row."""
    real = jnp.any(tgt != PAD_ID, axis=1, keepdims=True)
    return jnp.where(real, tokens, PAD_ID)


def model_choice(logits: jax.Array, noise: jax.Array | None = None) -> jax.Array:
    """The model's choice at every position, with no gradient: float32[..., K] → int32[...].

    noise None: the argmax. noise float32[..., K] of i.i.d. standard Gumbel draws: a sample from
    softmax(logits), since argmax(logits + g) is distributed as the softmax (the Gumbel-max trick). The noise
    is an argument rather than drawn here so that a test can hand the same draws to a reference."""
    logits = jax.lax.stop_gradient(logits).astype(jnp.float32)  # compared in float32, whatever the compute dtype
    if noise is not None:
        logits = logits + noise
    return argmax(logits)


def model_fills(tok_logits: jax.Array, tgt: jax.Array, insert_mask: jax.Array,
                noise: jax.Array | None = None) -> jax.Array:
    """The reference with the token head's choice (`model_choice`: argmax, or a sample given Gumbel ``noise``
    float32[B, T, V]) at the inserted positions, never a reserved id: int32[B, T]."""
    fills = model_choice(forbid_reserved(tok_logits), noise).astype(tgt.dtype)
    return jnp.where(insert_mask, fills, tgt)


# ----------------------------------------------------------------------------------------------- configuration

def edit_defaults() -> dict:
    """The keys an edit-based family's config section has whatever its first edit (LevT, EDITOR), with defaults.
    The roll-in keys exist in both, and each family's section says what they mean there."""
    return dict(
        # "f,p,t": the decoder layers read by the first-edit (deletion / reposition), placeholder and token heads
        early_exit="",  # "" = all
        separate_placeholder=False,  # the placeholder head on its own layer stack (LevT Table 2a)
        # roll-in mixtures, per sentence (α, β: see the family's section)
        roll_in_alpha=0.0, roll_in_beta=0.0, placeholder_smoothing=0.01,
        # beyond the papers: the share of roll-in rows that are a random subset of the reference in a uniformly
        # random order, like shuffled soft constraints
        global_shuffle=0.0,
        # beyond the papers: the share of batches whose roll-in follows the model's own insertion (insertion
        # heads on what the oracle keeps of it, the first edit on it): docs/editor.md
        own_insertion_roll_in=0.0,
        # refinement decoding: at most max_iter + 1 iterations (eval.iteration_sweep sets it: rows <split>+I<k>,
        # BLEU against the iteration cap); placeholder_penalty is subtracted from the score of
        # inserting placeholders (Gu et al.'s penalty against short outputs)
        max_iter=9, placeholder_penalty=0.0,
    )


EDIT_RANGES = {**{k: ("[0", "1]") for k in ("roll_in_alpha", "roll_in_beta", "global_shuffle",
                                            "own_insertion_roll_in")},
               # as train.label_smoothing: at 1 the loss no longer reads the oracle's counts (uniform is its optimum)
               "placeholder_smoothing": ("[0", "1)"), "max_iter": ("[0", None), "placeholder_penalty": ("[0", None)}

# the flat keys of before the config sections that every edit family took over
EDIT_MOVED = {"model.early_exit": "early_exit", "model.separate_placeholder": "separate_placeholder",
              **{f"train.{k}": k for k in ("roll_in_alpha", "roll_in_beta", "placeholder_smoothing", "global_shuffle",
                                           "own_insertion_roll_in")},
              "eval.max_iter": "max_iter", "eval.placeholder_penalty": "placeholder_penalty"}


def check_early_exit(config, section: str) -> None:
    """Validation of the section's early_exit against the model's layers."""
    early_exit(config[section], config.model, f"{section}.early_exit")
