"""DA-Transformer (Huang, Zhou, Zhang and Huang, ICML 2022): a non-autoregressive decoder whose hidden states are
the vertices of a directed acyclic graph, every path of which is a translation.

**The graph.** The decoder reads L = λ · |x| + 2 vertices (|x| the source's words, BOS/EOS left out,
λ = ``dat.upsample``, 8; ``dat.upsample_base`` the authors' other sizes, `graph_sizes`), each input its learned
vertex position (``dat.vertex_inputs=positions``, the paper) or the authors' code's ``[BOS, UNK …, EOS]`` token
embeddings plus positions (``tokens``). From the top states V:

* each vertex's token distribution P(y | v) = softmax(V W_outᵀ) (the tied output matrix);
* the transitions ("links"): E = (V W_Q)(V W_K)ᵀ / √d, masked to the edges i → j with j > i inside the sentence's
  graph and normalised over j (``dat.links=paper``); or the authors' code's form: a mixture over the H attention
  heads of per-head softmaxes, queries and keys read from the states concatenated with learned link positions,
  the mixture weights a softmax of a gate (``dat.links=multihead``).

**The loss.** −log P(y | x), the log-sum over every path from vertex 0 (emitting BOS) to vertex L − 1
(emitting EOS) of its transitions and of y's tokens on its vertices: the forward algorithm over (target position,
vertex) in one `lax.scan` (`dag.dag_log_likelihood`), divided by the reference's length (BOS/EOS included) and
averaged over sentences, as the authors' code does; a sentence no path can emit (|y| > L) adds nothing.

**Glancing.** A first pass without gradient; the reference's best path through its graph
(`dag.best_alignment`); round(ratio · the tokens its vertices mispredict) target tokens chosen at random; their
vertices read the token's embedding (plus the vertex position) in the second pass, the one trained. The ratio
anneals linearly (``dat.glance_start`` → ``dat.glance_end`` over ``dat.glance_steps`` updates, read from the
trainer's update number: `ModelSpec.stepped`); validation measures the plain loss.

**Decoding** (and Shao et al. 2022): ``dat.decode`` = greedy (the most probable next vertex), lookahead (the
next vertex by link + β · its best token), viterbi (the joint Viterbi path under the length penalty M^β),
path_viterbi (the Viterbi path of the links alone, `dag.viterbi`), beam
(prefixes summed over paths, `dag.beam_search`) or dagsearch (the authors' beam search, `dag_search`); each vertex
on the path emits its most probable token, consecutive repeats removed (``dat.remove_repeats``). ``eval.sampling``
draws paths with their tokens instead (`dag.sample_paths`, or with ``dat.sampler=authors`` the authors' sampling,
`dag.authors_samples`). Constraints: `constrained.constrained_decode`.
"""

from __future__ import annotations

import dataclasses
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxnat.argmax import argmax
from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from jaxnat.decoding.refine import NOT_PREDICTED, RefineOptions, length_cap, static_length_cap
from jaxnat.decoding.request import DecodeRequest, Supports
from jaxnat.decoding.search import Sampling, by_score, sample_keys, sampling_of, source_keys
from jaxnat.errors import ConfigError
from jaxnat.models.dat import dag, glancing
from jaxnat.models.dat.dag_search import dag_search
from jaxnat.models.dat.constrained import MAX_PHRASES, constrained_decode
from jaxnat.models.spec import ModelSpec, skipped_unless, word_glue
from jaxnat.models.dropout import Dropout
from jaxnat.models.transformer import (Decoder, Encoder, TransformerConfig, absent_logits, einsum_f32, embedders,
                                      flat_leading, rows_dense, sinusoidal_positions, source_tokens,
                                      token_mask)


def _vertices(words, upsample: int, ends: int, base: str):
    """The authors' code's graph size for a source of ``words`` words and ``ends`` BOS/EOS (`graph_sizes`)."""
    return upsample * (words + ends) if base == "source_old" else upsample * words + ends


def max_vertices(max_len: int, upsample: int, ends: int = 2, base: str = "source") -> int:
    """The most vertices a graph can have (its position tables' rows): `graph_sizes` of a source of
    model.max_len tokens."""
    return max(_vertices(max_len - 2, upsample, ends, base), 2)


def graph_sizes(src: jax.Array, upsample: int, ends: int = 2, base: str = "source") -> tuple[int, jax.Array]:
    """(L, n_vertices int32[B]): the padded graph's vertices for sources padded to S, and each sentence's, as the
    authors' code sizes them from the source its encoder reads (``upsample_base``): "source", λ · its words +
    its ``ends`` (the BOS/EOS it holds: 2, or 1 for a model whose sources have no BOS, `model.source_bos`), these
    not upsampled; "source_old", λ · (words + ends). At least 2 (the vertices of BOS and EOS).
    src: int32[B, S] [BOS … EOS] rows, PAD after."""
    words = jnp.maximum(jnp.sum(token_mask(src), axis=1, dtype=jnp.int32) - 2, 0)
    return max_vertices(src.shape[1], upsample, ends, base), jnp.maximum(_vertices(words, upsample, ends, base), 2)


class DAT(nn.Module):
    """Encoder, vertex decoder, token head and link head.

    upsample: λ of training (sizes the vertex position tables); graph_upsample: λ of the graphs built (0: λ);
    link_form: "paper" | "multihead"; vertex_inputs: "positions" | "tokens"; upsample_base: "source" |
    "source_old" (`graph_sizes`); max_graph: the most vertices a graph has, its position tables' rows (a larger one
    is clipped; ``dat.max_vertices``), 0: as many as sources of model.max_len make."""

    cfg: TransformerConfig
    upsample: int = 8
    link_form: str = "paper"
    vertex_inputs: str = "positions"
    graph_upsample: int = 0
    upsample_base: str = "source"
    max_graph: int = 0

    @property
    def ends(self) -> int:
        """The BOS/EOS of a source, which the graph does not upsample: 2, or 1 for sources without BOS."""
        return 2 if self.cfg.source_bos else 1

    def setup(self):
        c = self.cfg
        self.src_embed, self.tgt_embed = embedders(c)
        self.encoder = Encoder(c, name="encoder")
        self.decoder = Decoder(c, c.dec_layers, causal=False, name="decoder")
        rows = self.max_graph or max_vertices(c.max_len, self.upsample, self.ends, self.upsample_base)
        if c.positions == "learned":
            self.vertex_table = self.param("vertex_positions", c.embed_init(), (rows, c.d_model))
        self.vertex_drop = Dropout(c.dropout if c.embed_dropout < 0 else c.embed_dropout)
        dense = lambda name, n=c.d_model: rows_dense(n, kernel_init=c.kernel_init(), dtype=c.compute_dtype,  # noqa
                                                   name=name)
        self.link_query, self.link_key = dense("link_query"), dense("link_key")
        if self.link_form == "multihead":
            self.link_table = self.param("link_positions", c.embed_init(), (rows, c.d_model))
            self.link_gate = rows_dense(c.num_heads, kernel_init=c.kernel_init(), name="link_gate")
        if not c.tie_output:
            self.output = rows_dense(c.tgt_vocab_size, use_bias=False, kernel_init=c.kernel_init(), name="output")

    def vertex_positions(self, n: int) -> jax.Array:
        c = self.cfg
        if c.positions == "learned":
            return self.vertex_table[:n]
        return sinusoidal_positions(n, c.d_model, c.position_offset, c.position_layout)

    def encode(self, src: jax.Array, train: bool = False) -> jax.Array:
        """src: int32[B, S] → memory float[B, S, D] (without ``model.source_bos`` the BOS dropped:
        `source_tokens`)."""
        src = source_tokens(self.cfg, src)[0]
        return self.encoder(self.src_embed(src, train), token_mask(src), train)

    def vertex_embed(self, n_vertices: jax.Array, length: int, glanced: jax.Array | None, train: bool):
        """The decoder's input float[B, L, D]: each vertex's position (+ the tokens [BOS, UNK …, EOS] with
        ``vertex_inputs=tokens``), a glanced vertex's reference token (glanced: int32[B, L], PAD = none)."""
        index = jnp.arange(length)[None]
        if self.vertex_inputs == "tokens":
            tokens = jnp.where(index == 0, BOS_ID, jnp.where(index == (n_vertices - 1)[:, None], EOS_ID, UNK_ID))
            tokens = jnp.where(index < n_vertices[:, None], tokens, PAD_ID)
        else:
            tokens = jnp.full((n_vertices.shape[0], length), PAD_ID, jnp.int32)
        if glanced is not None:
            tokens = jnp.where(glanced != PAD_ID, glanced, tokens)
        scale = self.tgt_embed.scale
        x = jnp.where((tokens != PAD_ID)[..., None], self.tgt_embed.lookup(tokens) * scale, 0.0)
        x = x + self.vertex_positions(length)[None]
        return self.vertex_drop(x.astype(self.cfg.compute_dtype), deterministic=not train)

    def links(self, states: jax.Array, n_vertices: jax.Array, length: int) -> jax.Array:
        """float32[B, L, L]: log P(j | i) over the edges j > i of each sentence's graph, −inf elsewhere."""
        c = self.cfg
        i, j = jnp.arange(length)[:, None], jnp.arange(length)[None, :]
        edges = (j > i)[None] & (j[None] < n_vertices[:, None, None])        # [B, L, L]
        if self.link_form == "paper":
            q, k = flat_leading(self.link_query, states), flat_leading(self.link_key, states)
            scores = einsum_f32("bid,bjd->bij", q, k) / math.sqrt(c.d_model)
            return _masked_log_softmax(scores, edges)
        # the authors' code: states ⊕ link positions, H heads, each its own softmax, mixed by a gate
        pos = jnp.broadcast_to(self.link_table[:length][None], states.shape[:2] + (c.d_model,))
        feats = jnp.concatenate([states, pos.astype(states.dtype)], axis=-1)
        heads, size = c.num_heads, c.d_model // c.num_heads
        q = flat_leading(self.link_query, feats).reshape(states.shape[:2] + (heads, size))
        k = flat_leading(self.link_key, feats).reshape(states.shape[:2] + (heads, size))
        scores = einsum_f32("bihd,bjhd->bhij", q, k) / math.sqrt(size)
        per_head = _masked_log_softmax(scores, edges[:, None])
        gates = jax.nn.log_softmax(self.link_gate(feats.astype(jnp.float32)).astype(jnp.float32), axis=-1)
        mixed = dag.safe_logsumexp(per_head + jnp.moveaxis(gates, 2, 1)[..., None], axis=1)
        return jnp.where(edges, mixed, dag.NEG)

    def graph_length(self, src_len: int) -> int:
        """L: the padded graph's vertices for sources padded to ``src_len`` (`graph_sizes`), clipped to max_graph as
        the authors' code clips to its position tables."""
        length = max_vertices(src_len, self.graph_upsample or self.upsample, self.ends, self.upsample_base)
        return min(length, self.max_graph) if self.max_graph else length

    def graph(self, src: jax.Array, memory: jax.Array, glanced: jax.Array | None = None, train: bool = False):
        """(logits float32[B, L, V], links float32[B, L, L], n_vertices int32[B]) of the sources' graphs."""
        _, n_vertices = graph_sizes(src, self.graph_upsample or self.upsample, self.ends, self.upsample_base)
        length = self.graph_length(src.shape[1])
        n_vertices = jnp.minimum(n_vertices, length)
        x = self.vertex_embed(n_vertices, length, glanced, train)
        mask = jnp.arange(length)[None] < n_vertices[:, None]
        states = self.decoder(x, mask, memory, token_mask(source_tokens(self.cfg, src)[0]), train)
        logits = self.tgt_embed.attend(states) if self.cfg.tie_output else self.output(states).astype(jnp.float32)
        return absent_logits(self.cfg, logits), self.links(states, n_vertices, length), n_vertices

    def __call__(self, src: jax.Array, glanced: jax.Array | None = None, train: bool = False):
        return self.graph(src, self.encode(src, train), glanced, train)


def _masked_log_softmax(scores: jax.Array, valid: jax.Array) -> jax.Array:
    """log-softmax of ``scores`` over the last axis among ``valid`` entries; −inf elsewhere, and on rows with no
    valid entry (a graph's last vertex) −inf throughout, with finite gradients."""
    scores = jnp.where(valid, scores, dag.NEG)
    return jnp.where(valid, scores - dag.safe_logsumexp(scores, axis=-1)[..., None], dag.NEG)


# ----------------------------------------------------------------------------------------------- training

@dataclasses.dataclass(frozen=True)
class Glancing:
    """The glancing schedule and its form (`glancing`): ratio start → end over ``steps`` updates; ``count``:
    "number" (round(ratio · mistakes) positions at random) or "bernoulli"; ``fix``: the authors' forced emission."""
    start: float = 0.5
    end: float = 0.1
    steps: int = 200000
    count: str = "number"
    fix: bool = False

    @property
    def on(self) -> bool:
        return self.start > 0 or self.end > 0


def _best_path_hits(match, logits, links, n_vertices, tgt, tgt_len, real, ratio):
    """What glancing reads of a pass: (path int32[B, T], the reference's best path through the graph; aligned
    bool[B], the real rows that have one; number int32[B], the tokens to reveal at ``ratio``; right int32[B], the
    tokens the pass's argmax gets right on their vertices of that path). match: `dag.reference_match`'s."""
    path, score = dag.best_alignment(match, links, tgt_len, n_vertices)
    aligned = jnp.isfinite(score) & real
    number, right = glancing.glance_counts(path, argmax(logits), tgt, tgt_len, aligned, ratio)
    return path, aligned, number, right


def dat_loss(module: DAT, params, batch: dict, rng, *, glance: Glancing, step=None, train: bool = True,
             remat: bool = True, keep: bool = False):
    """The DAG loss with glancing (in training). batch['src']: int32[B, S], batch['tgt']: int32[B, T] ([BOS … EOS]
    rows, PAD after; all-PAD filler rows count for nothing). Returns ``(loss · n, aux)``: the loss is the mean over
    sentences of −log P(y | x) / |y| (the authors' normalisation), n the target tokens (BOS/EOS included); aux has
    'nll' (−log P summed over the sentences with a path, per token, · n), 'count' = n, 'glance_ratio',
    'glance_accuracy' (the first pass's right tokens along the best path / tokens; in validation, which glances
    nothing and reads the schedule's end ratio, its one pass's) and 'unaligned' (the share of sentences no path
    emits). With ``keep`` (tests) also the first pass's arrays and the glanced positions."""
    src, tgt = batch["src"], batch["tgt"]
    k_enc, k_dec, k_glance = jax.random.split(rng, 3)
    memory = module.apply(params, src, train=train, method="encode", rngs={"dropout": k_enc})
    tgt_len = jnp.sum(token_mask(tgt), axis=1, dtype=jnp.int32)
    real = tgt_len > 0

    def graph(glanced):  # both passes draw the same dropout masks (the authors' code: one seed for both)
        return module.apply(params, src, memory, glanced, train=train, method="graph", rngs={"dropout": k_dec})

    aux, glanced = {}, None
    ratio = glancing.glance_ratio(step, glance.start, glance.end, glance.steps)
    right = jnp.zeros_like(tgt_len)
    if train and glance.on:  # static
        logits1, links1, n_vertices = jax.tree_util.tree_map(jax.lax.stop_gradient, graph(None))
        path, aligned, number, right = _best_path_hits(dag.reference_match(logits1, tgt), logits1, links1,
                                                       n_vertices, tgt, tgt_len, real, ratio)
        u = jax.random.uniform(k_glance, tgt.shape)
        chosen = (glancing.choose_glanced(path, number, u, aligned) if glance.count == "number"
                  else glancing.choose_bernoulli(path, number, tgt_len, u, aligned))
        glanced = glancing.glanced_inputs(path, chosen, tgt, logits1.shape[1])
        if keep:
            aux.update(path=path, chosen=chosen, number=number, first_logits=logits1, first_links=links1)
    logits, links, n_vertices = graph(glanced)
    match = dag.reference_match(logits, tgt)
    if glanced is not None and glance.fix:
        match = glancing.fix_alignment(match, path, chosen)
    if not train and glance.on:  # validation's glance_accuracy: its one pass's (no dropout, nothing glanced)
        right = _best_path_hits(match, logits, links, n_vertices, tgt, tgt_len, real, ratio)[3]
    ll = dag.dag_log_likelihood(match, links, tgt_len, n_vertices, remat=remat)
    valid = real & jnp.isfinite(ll)
    safe_ll = jnp.where(valid, ll, 0.0)
    sentences = jnp.maximum(jnp.sum(real, dtype=jnp.float32), 1.0)
    loss = jnp.sum(-safe_ll / jnp.maximum(tgt_len, 1)) / sentences
    n = jnp.sum(tgt_len, dtype=jnp.float32)
    counted = jnp.maximum(jnp.sum(jnp.where(valid, tgt_len, 0), dtype=jnp.float32), 1.0)
    aux.update(nll=jnp.sum(-safe_ll) / counted * n, count=n, glance_ratio=ratio,
               glance_accuracy=jnp.sum(right, dtype=jnp.float32) / jnp.maximum(n, 1.0),
               unaligned=jnp.sum(real & ~valid, dtype=jnp.float32) / sentences)
    if keep:
        aux.update(ll=ll, n_vertices=n_vertices, logits=logits)
    return loss * n, aux


# ----------------------------------------------------------------------------------------------- decoding

SUPPORTS = Supports(soft_constraints=True, hard_constraints=True, beam=True, max_phrases=MAX_PHRASES, given_order=False,
                    counts=("decoded", "repeats", "infeasible"), nbest=True, score=True, lm=True)
# the Viterbi decodings (`dag.viterbi`): joint (path and tokens), and the path's links alone
VITERBI = ("viterbi", "path_viterbi")


@dataclasses.dataclass(frozen=True)
class Decoding:
    """``dat``'s decoding keys: strategy, lookahead's β (also the authors' beam search's), Viterbi's length
    exponent, the beams' length exponent and candidate tokens per vertex, repeat removal, the soft constraints'
    reward per phrase, the beams' LM weight; and ``sampling`` (eval.sampling's `Sampling`), which draws paths in place
    of the strategy; the repeat prevention of every strategy but Viterbi and of sampling (`dag.follow_unrepeated`,
    `dag.beam_search`, `dag.sample_paths`, `dag_search`: eval.no_repeat_ngram, eval.no_consecutive_repeat,
    dat.top_p); the authors' beam search's prefixes kept per length and its candidates' mass (`dag_search`:
    dat.beam_per_length, dat.top_p); whose cut the samples take (``sampler``: "jaxnat", `dag.sample_paths` with
    eval.top_k/top_p/epsilon, or "authors", `dag.authors_samples` with dat.top_cand and dat.top_p); whose reading of
    the Viterbi decodings' score and length (``viterbi_convention``, `dag.viterbi`: "jaxnat" or "authors")."""
    strategy: str = "lookahead"
    lookahead_beta: float = 1.0
    viterbi_beta: float = 1.0
    beam_alpha: float = 1.1
    top_cand: int = 5
    remove_repeats: bool = True
    soft_reward: float = 1.0
    lm_weight: float = 0.1
    sampling: Sampling | None = None
    no_repeat: int = 0
    no_consecutive: int = 0
    top_p: float = 0.9
    per_length: int = 10
    sampler: str = "jaxnat"
    viterbi_convention: str = "jaxnat"

    def __post_init__(self):
        if self.prevents and self.strategy in VITERBI and self.sampling is None:  # (the config says so first)
            raise ConfigError("the n-gram prevention steps greedy, lookahead and beam decoding and sampling around "
                              "repeats, not Viterbi decoding")

    @property
    def prevents(self) -> bool:
        """Whether the decoders step around repeats as they go (`dag.follow_unrepeated`, `dag.beam_search`,
        `dag.sample_paths`)."""
        return self.no_repeat > 0 or self.no_consecutive > 0


def allowed_tokens(vocab: int) -> jax.Array:
    """bool[V]: what a vertex inside a path may emit (no PAD, BOS, EOS, PLH or MASK)."""
    return jnp.ones(vocab, bool).at[jnp.asarray(NOT_PREDICTED)].set(False)


def decode_graph(logits: jax.Array, links: jax.Array, n_vertices: jax.Array, width: int, options: Decoding,
                 beam: int = 1, constraints=None, hard=None, continues=None, joins=None, trails=None,
                 limit: jax.Array | None = None, nbest: int = 1, lm=None, keys=None) -> dict:
    """One batch's translations from its graphs: logits float32[B, L, V], links float32[B, L, L], n_vertices
    int32[B] → generate's outputs (tokens int32[B, width] [BOS … EOS] rows, score, token_logp, token_scored and
    the counts). With ``constraints`` (int32[B, C, P]) and ``hard`` (bool[B]) the rows that have phrases take the
    constrained search; a row without any decodes as it would alone, by the strategy. limit: int32[B], each row's
    own output capacity within the width (`output_limits`), or None: the width. The beam search reads every
    token's log-probability; the others each vertex's best (`dag.vertex_scores`), the constrained search each
    vertex's best per token class and its phrases' tokens. nbest > 1 (the beam searches, at most ``beam``): also the
    beam's nbest best outputs, 'nbest_tokens' int32[B, N, width] and their log P(y | x) 'nbest_score' float32[B, N]
    (the authors' search: the log-sum of the paths it found), ranked by the beam's normalised score (a row that takes
    the constrained search lists its one output). lm: an n-gram LM (`ngram.NgramLM`) the beam search fuses
    (``options.lm_weight``), or None. keys: uint32[B, beam, 2], the samples' keys with ``options.sampling``
    (`search.sample_keys`): beam samples a sentence, ranked by log P(y, a | x) / M^viterbi_beta, the best the output
    and the first nbest its list."""
    allowed = allowed_tokens(logits.shape[-1])
    B = logits.shape[0]
    plain = lambda: _decode_plain(logits, links, n_vertices, width, options, beam, allowed, limit, nbest, lm, keys)  # noqa: E731
    infeasible = jnp.zeros(B, jnp.int32)
    phrase = None
    if constraints is None:
        tokens, score, token_lp, listed = plain()
    else:
        hard = jnp.zeros(B, bool) if hard is None else hard
        norm = jax.nn.logsumexp(logits, axis=-1)                           # [B, L]
        out = constrained_decode(links, logits, n_vertices, constraints, hard, allowed, width, options.viterbi_beta,
                                 options.soft_reward, continues, joins, trails, log_norm=norm, limit=limit)
        at = jnp.maximum(out["path"], 0)
        c_token_lp = (jnp.take_along_axis(jnp.take_along_axis(logits, at[..., None], 1),
                                          out["tokens"][..., None], 2)[..., 0] - jnp.take_along_axis(norm, at, 1))
        has = jnp.any(constraints != PAD_ID, axis=(1, 2))
        tokens, score, token_lp, listed = skipped_unless(~jnp.all(has), plain)
        tokens = jnp.where(has[:, None], out["tokens"], tokens)
        token_lp = jnp.where(has[:, None], c_token_lp, token_lp)
        score = jnp.where(has, out["score"], score)
        phrase, infeasible = out["phrase"] & has[:, None], out["infeasible"]
        if listed is not None:  # a constrained row lists its one output
            listed = (jnp.where(has[:, None, None], tokens[:, None], listed[0]),
                      jnp.where(has[:, None], jnp.full_like(listed[1], -jnp.inf).at[:, 0].set(score), listed[1]))
    inner = (tokens != PAD_ID) & (tokens != BOS_ID) & (tokens != EOS_ID)
    free = inner if phrase is None else inner & ~phrase
    keep, repeats = _kept(tokens, free, options.remove_repeats)
    out = {"tokens": dag.compact(tokens, keep, PAD_ID),
           "score": score.astype(jnp.float32),
           "token_logp": dag.compact(jnp.where(free, token_lp, 0.0), keep, 0.0),
           "token_scored": dag.compact(free, keep, False),
           "decoded": jnp.sum(inner, axis=1, dtype=jnp.int32), "repeats": repeats, "infeasible": infeasible}
    if listed is not None:  # repeats removed as from the output; the first is the output (a constrained phrase kept)
        rows = listed[0]
        rows_free = ((rows != PAD_ID) & (rows != BOS_ID) & (rows != EOS_ID)).at[:, 0].set(free)
        kept, _ = _kept(rows.reshape(-1, width), rows_free.reshape(-1, width), options.remove_repeats)
        out.update(nbest_tokens=dag.compact(rows.reshape(-1, width), kept, PAD_ID).reshape(rows.shape),
                   nbest_score=listed[1].astype(jnp.float32))
    return out


def _kept(tokens: jax.Array, free: jax.Array, remove_repeats: bool) -> tuple[jax.Array, jax.Array]:
    """(bool[B, W] the tokens an output keeps: not PAD, nor with ``remove_repeats`` a free token repeating the one
    before it (`dag.drop_repeats`); int32[B] the repeats dropped)."""
    if remove_repeats:
        keep, repeats = dag.drop_repeats(tokens, free)
    else:
        keep, repeats = tokens != PAD_ID, jnp.zeros(tokens.shape[0], jnp.int32)
    return keep & (tokens != PAD_ID), repeats


def _ranked_samples(tokens, lp, shares, options, nbest):
    """A sentence's samples (tokens int32[B, K, W], log P(y, a | x) float32[B, K], token shares float32[B, K, W])
    ranked by log P(y, a | x) / M^viterbi_beta: `_decode_plain`'s outputs, the best first."""
    length = jnp.sum(tokens != PAD_ID, axis=2).astype(jnp.float32)
    _, tokens, lp, shares = by_score(lp / length ** options.viterbi_beta, tokens, lp, shares)
    return tokens[:, 0], lp[:, 0], shares[:, 0], (tokens[:, :nbest], lp[:, :nbest]) if nbest > 1 else None


def _decode_plain(logits, links, n_vertices, width, options, beam, allowed, limit, nbest=1, lm=None, keys=None):
    """(tokens int32[B, width], score float32[B], token_lp float32[B, width], and with nbest > 1 the beam's or the
    samples' n-best lists (tokens int32[B, N, width], log P(y | x) or log P(y, a | x) float32[B, N]), else None) by
    ``options.strategy``, or ``options.sampling``'s samples."""
    if options.strategy == "dagsearch" and options.sampling is None:  # the authors' candidates: every token
        limit = jnp.full(n_vertices.shape, width, jnp.int32) if limit is None else limit
        tokens, score, shares = dag_search(links, jax.nn.log_softmax(logits), n_vertices, limit, width, beam=beam,
                                           per_length=options.per_length,
                                           top=min(options.top_cand, logits.shape[-1]), top_p=options.top_p,
                                           alpha=options.beam_alpha, beta=options.lookahead_beta,
                                           gamma=options.lm_weight, lm=lm, no_repeat=options.no_repeat,
                                           no_consecutive=options.no_consecutive, nbest=nbest)
        return tokens[:, 0], score[:, 0], shares[:, 0], (tokens, score) if nbest > 1 else None
    if options.sampling is not None and options.sampler == "authors":  # their cut, every token
        tokens, lp, shares, _ = dag.authors_samples(links, jax.nn.log_softmax(logits), n_vertices, width, keys,
                                                    options.sampling.temperature,
                                                    min(options.top_cand, logits.shape[-1]), options.lookahead_beta,
                                                    options.top_p, limit, options.no_repeat, options.no_consecutive)
        return _ranked_samples(tokens, lp, shares, options, nbest)
    tok, scores, bos = dag.vertex_scores(logits, n_vertices, allowed)
    if options.strategy == "beam" or options.sampling is not None or options.prevents:  # each vertex's top_cand
        # tokens, EOS at n − 1
        emit = jax.nn.log_softmax(logits)
        top_lp, top_tok = jax.lax.top_k(jnp.where(allowed, emit, dag.NEG), min(options.top_cand, logits.shape[-1]))
        top_tok = top_tok.astype(jnp.int32)
        eos = jnp.take_along_axis(emit[..., EOS_ID], (n_vertices - 1)[:, None], 1)[:, 0]
    if options.sampling is not None:
        tokens, lp, shares, _ = dag.sample_paths(links, top_tok, top_lp, bos, eos, n_vertices, width, keys,
                                                 options.sampling, limit, options.no_repeat, options.no_consecutive,
                                                 logits.shape[-1])
        return _ranked_samples(tokens, lp, shares, options, nbest)
    if options.strategy == "beam":
        tokens, lp, shares = dag.beam_search(links, top_tok, top_lp, bos, eos, n_vertices, width,
                                             beam, options.beam_alpha, limit, nbest, lm, options.lm_weight,
                                             options.no_repeat, options.no_consecutive, logits.shape[-1])
        return tokens[:, 0], lp[:, 0], shares[:, 0], (tokens, lp) if nbest > 1 else None
    if options.prevents:  # greedy or lookahead, stepping around repeats (validate: not Viterbi)
        beta = options.lookahead_beta if options.strategy == "lookahead" else 0.0
        tokens, score, token_lp = dag.follow_unrepeated(links, top_tok, top_lp, bos, eos, n_vertices, width, beta,
                                                        options.no_repeat, options.no_consecutive, options.top_p,
                                                        limit)
        return tokens, score, token_lp, None
    if options.strategy in VITERBI:
        path, score = dag.viterbi(links, scores, bos, n_vertices, width, options.viterbi_beta, limit,
                                  joint=options.strategy == "viterbi", authors=options.viterbi_convention == "authors")
    else:
        beta = options.lookahead_beta if options.strategy == "lookahead" else 0.0
        path = dag.follow(dag.pointers(links, scores, beta), n_vertices, width, limit)
        score = dag.path_score(path, links, scores, bos)
    return dag.path_tokens(path, tok, n_vertices), score, jnp.take_along_axis(scores, jnp.maximum(path, 0), 1), None


def output_capacity(cfg: TransformerConfig, eval_cfg):
    """capacity(src_len): max(eval.length_cap_min, eval.length_cap_ratio · src_len) output slots (BOS/EOS
    included; the authors' Viterbi decoding also stops at twice the source), within model.max_len."""
    def capacity(src_len: int) -> int:
        return static_length_cap(src_len, cfg.max_len, eval_cfg.length_cap_min, eval_cfg.length_cap_ratio)
    return capacity


def output_limits(src: jax.Array, constraints, width: int, cfg: TransformerConfig, eval_cfg) -> jax.Array:
    """int32[B]: each sentence's own output capacity, `output_capacity` of its own source (src: int32[B, S], BOS/EOS
    included) with room for its own constraint pieces (int32[B, C, P] or None) and BOS/EOS, within ``width``. A
    request's width is its batch's (its longest source's bucket, its largest constraint set): capped by it, a
    sentence's path would depend on the sentences beside it. (The refining models' per-sentence cap, `length_cap`.)"""
    cap = min(cfg.max_len, width)
    own = length_cap(src, cap, RefineOptions(cap_min=eval_cfg.length_cap_min, cap_ratio=eval_cfg.length_cap_ratio))
    if constraints is not None:
        own = jnp.minimum(jnp.maximum(own, jnp.sum(constraints != PAD_ID, axis=(1, 2), dtype=jnp.int32) + 2), cap)
    return own


def _authors_viterbi_cap(n_vertices, upsample: int):
    """The authors' Viterbi decodings' output capacity for a graph of ``n_vertices`` (an int or int32[B]):
    int(2 · n / λ) inner vertices, and BOS/EOS."""
    return 2 * n_vertices // upsample + 2


def authors_viterbi_limits(n_vertices: jax.Array, upsample: int, width: int) -> jax.Array:
    """int32[B]: each sentence's output capacity as the authors' Viterbi decodings cap it (`_authors_viterbi_cap`),
    within ``width``; n_vertices: int32[B]. Their n is the batch's graph size (the padded links'), a sentence's own
    at batch 1: what jaxnat takes for every sentence, in place of `output_limits`."""
    return jnp.minimum(_authors_viterbi_cap(n_vertices, upsample), width).astype(jnp.int32)


def build_spec(config, cfg: TransformerConfig, pieces) -> ModelSpec:
    s = config.dat
    if s.decode_upsample > s.upsample:  # also reached by eval.iteration_sweep, which sets it after validation
        raise ConfigError(f"dat.decode_upsample={s.decode_upsample} exceeds dat.upsample={s.upsample}, the graphs "
                          f"the vertex positions were trained for")
    module = DAT(cfg, s.upsample, s.links, s.vertex_inputs, upsample_base=s.upsample_base, max_graph=s.max_vertices)
    decoder = module.clone(graph_upsample=s.decode_upsample)
    glance = Glancing(s.glance_start, s.glance_end, s.glance_steps or config.train.steps, s.glance_count,
                      s.glance_fix_alignment)
    options = Decoding(s.decode, s.lookahead_beta, s.viterbi_beta, s.beam_alpha, s.top_cand, s.remove_repeats,
                       s.soft_reward, s.lm_weight, sampling_of(config.eval), config.eval.no_repeat_ngram,
                       config.eval.no_consecutive_repeat, s.top_p, s.beam_per_length, s.sampler, s.viterbi_convention)
    continues, joins, trails = word_glue(pieces)  # hard constraints: whole words
    capacity = output_capacity(cfg, config.eval)
    upsample = s.decode_upsample or s.upsample
    authors_viterbi = s.decode in VITERBI and s.viterbi_convention == "authors" and options.sampling is None
    if authors_viterbi:  # the output as wide as their cap of a bucket's largest graph (`authors_viterbi_limits`)
        ours = capacity

        def capacity(src_len: int) -> int:
            return min(cfg.max_len, max(ours(src_len), _authors_viterbi_cap(decoder.graph_length(src_len), upsample)))

    def init(rng, batch):
        return module.init(rng, batch["src"][:1])

    def loss(params, batch, rng, train=True, step=None):
        return dat_loss(module, params, batch, rng, glance=glance, step=step, train=train)

    def generate(params, request: DecodeRequest) -> dict:
        logits, links, n_vertices = decoder.apply(params, request.src)
        width = request.width(capacity)
        limit = output_limits(request.src, request.constraints, width, cfg, config.eval)
        if authors_viterbi:  # on the rows without constraints (the others take the constrained search)
            theirs = authors_viterbi_limits(n_vertices, upsample, width)
            limit = theirs if request.constraints is None else jnp.where(
                jnp.any(request.constraints != PAD_ID, axis=(1, 2)), limit, theirs)
        keys = None if options.sampling is None else sample_keys(source_keys(request.src, options.sampling.seed),
                                                                 request.beam_size)
        return decode_graph(logits, links, n_vertices, width, options, request.beam_size, request.constraints,
                            request.hard, continues, joins, trails, limit, request.nbest, request.extras.get("lm"),
                            keys)

    def score(params, request: DecodeRequest, tgt) -> dict:  # the decoders' graph; the beam search's log P
        logits, links, n_vertices = decoder.apply(params, request.src)
        tgt_len = jnp.sum(token_mask(tgt), axis=1, dtype=jnp.int32)
        logp = dag.dag_log_likelihood(dag.reference_match(logits, tgt), links, tgt_len, n_vertices, remat=False)
        return {"logp": logp, "score": logp}

    # eval.beam_size is the width of dat.decode=beam or dagsearch, or the samples a sentence draws with
    # eval.sampling, and of nothing else, eval.nbest the n-best lists of the two; the samples take no constraints
    # and no LM
    beams = s.decode in ("beam", "dagsearch")
    supports = SUPPORTS.when_sampling(options.sampling) if options.sampling else dataclasses.replace(
        SUPPORTS, beam=beams, nbest=beams, lm=beams)
    return ModelSpec("dat", cfg, module, init, loss, generate, capacity, supports, stepped=True, score=score,
                     terms=("glance_ratio", "glance_accuracy", "unaligned"),
                     left_out=("unaligned", "a target longer than its graph has no path: raise dat.upsample or "
                                            "dat.max_vertices, or lower data.max_len"))
