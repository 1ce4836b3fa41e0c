"""The autoregressive Transformer (Vaswani et al. 2017): baseline, distillation teacher and rescorer.

Training is teacher forcing with a causal decoder: the decoder reads `tgt[:, :-1]` (starting with BOS, which
it embeds as `decoder_start`'s token: fairseq's models start from EOS, Marian's from PAD) and predicts
`tgt[:, 1:]`. Decoding feeds one token at a time with cached keys/values (`init_cache`, `step`) to
the searches of `jaxnat.decoding.search` (`ar_generate`). Word alignments are read off one decoder layer's
cross-attention (`aligned_decode`), which guided alignment (Garg et al. 2019) trains towards given word links
(`alignment_loss`).
"""

from __future__ import annotations


import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from jaxnat.decoding import constrained_fairseq
from jaxnat.decoding.constrained import constrained_search
from jaxnat.decoding.completion import spell
from jaxnat.decoding.request import DecodeRequest, Supports
from jaxnat.decoding.repeats import block_repeats
from jaxnat.decoding.search import (Sampling, ar_search, barred, ensembled, force_prefix, forced_result,
                                    mean_probability, sampling_of, source_keys)
from jaxnat.errors import ConfigError
from jaxnat.models.losses import smoothed_cross_entropy
from jaxnat.models.packing import next_in_segment, segment_starts
from jaxnat.models.spec import ModelSpec, skipped_unless, word_glue
from jaxnat.models.transformer import (absent_logits, Decoder, embedders, embedding_norms, Encoder, rows_dense,
                                      source_columns, source_tokens, TransformerConfig, token_mask,
                                      without_cross_cache)

START_IDS = {"bos": BOS_ID, "eos": EOS_ID, "pad": PAD_ID}  # model.decoder_start -> the id embedded for BOS


class ARTransformer(nn.Module):
    """Takes sources as `source_tokens` gives them (``src`` below): the callers (`ar_loss`, `ar_generate`,
    `ar_score`) convert them once, so that the model's masks and lengths are those of what it reads."""

    cfg: TransformerConfig

    def setup(self):
        c = self.cfg
        self.src_embed, self.tgt_embed = embedders(c)
        self.src_norm, self.tgt_norm = embedding_norms(c)
        self.encoder = Encoder(c, name="encoder")
        self.decoder = Decoder(c, c.dec_layers, causal=True, name="decoder")
        if not c.tie_output:
            self.output = rows_dense(c.tgt_vocab_size, use_bias=False, kernel_init=c.kernel_init(), name="output")
        if c.output_bias:
            self.output_bias = self.param("output_bias", nn.initializers.zeros, (c.tgt_vocab_size,))

    def encode(self, src: jnp.ndarray, train: bool = False, segments=None) -> jnp.ndarray:
        """src: int32[B, S] -> float[B, S, D]. segments: int32[B, S] segment ids of a packed batch, or None."""
        mask = token_mask(src) if segments is None else segments
        return self.encoder(self.src_embed(src, train, segments=segments, norm=self.src_norm), mask, train)

    def embed_target(self, tgt_in: jnp.ndarray, train: bool, offset=0, segments=None) -> jnp.ndarray:
        """tgt_in: int32[B, T] decoder inputs from position ``offset`` -> float[B, T, D], the BOS that starts a
        sequence (each pair's, in a packed row) embedded as the ``decoder_start`` token. A BOS further on is
        embedded as itself: fairseq's rules (eval.search_rules) may generate one, which fairseq then reads as
        `<s>`."""
        start = START_IDS[self.cfg.decoder_start]
        if start == BOS_ID:
            ids = tgt_in
        else:
            first = (segment_starts(segments) if segments is not None
                     else (offset + jnp.arange(tgt_in.shape[1]) == 0)[None])
            ids = jnp.where((tgt_in == BOS_ID) & first, start, tgt_in)
        return self.tgt_embed(ids, train, offset=offset, segments=segments, norm=self.tgt_norm)

    def logits(self, h: jnp.ndarray) -> jnp.ndarray:
        """float[..., D] -> float32[..., V]."""
        logits = self.tgt_embed.attend(h) if self.cfg.tie_output else self.output(h).astype(jnp.float32)
        if self.cfg.output_bias:
            logits = logits + self.output_bias
        return absent_logits(self.cfg, logits)

    def __call__(self, src: jnp.ndarray, tgt_in: jnp.ndarray, train: bool = False, src_seg=None,
                 tgt_seg=None) -> jnp.ndarray:
        """Teacher forcing. src: int32[B, S]; tgt_in: int32[B, T] -> logits float32[B, T, V]. A packed batch
        also gives src_seg int32[B, S] and tgt_seg int32[B, T], the segment ids (`jaxnat.models.packing`)."""
        src_mask = token_mask(src) if src_seg is None else src_seg
        return self.decode(tgt_in, self.encode(src, train, src_seg), src_mask, train, tgt_seg)

    def decode(self, tgt_in: jnp.ndarray, memory: jnp.ndarray, src_mask: jnp.ndarray,
               train: bool = False, segments=None) -> jnp.ndarray:
        """Teacher forcing on an encoded source. tgt_in: int32[B, T]; memory: float[B, S, D]; src_mask:
        bool[B, S] (segment ids with ``segments``, tgt_in's int32[B, T]) -> logits float32[B, T, V]."""
        mask = token_mask(tgt_in) if segments is None else segments
        h = self.decoder(self.embed_target(tgt_in, train, segments=segments), mask, memory, src_mask, train)
        return self.logits(h)

    def aligned_decode(self, tgt_in: jnp.ndarray, memory: jnp.ndarray, src_mask: jnp.ndarray, train: bool = False,
                       segments=None) -> tuple[jnp.ndarray, jnp.ndarray]:
        """Teacher forcing on an encoded source (`decode`'s arguments) → (logits float32[B, T, V], where each
        position looks in the source as it predicts the next token, float32[B, T, S]): the cross-attention weights
        of decoder layer ``alignment_layer`` (the last by default), averaged over its first ``alignment_heads``
        heads (all by default), of this pass, or with ``full_context_alignment`` of a second one without the causal
        mask (fairseq's transformer_align; its alignment layer and heads by default: `jaxnat.decoding.alignment`,
        and guided alignment's loss, `alignment_loss`)."""
        c = self.cfg
        mask = token_mask(tgt_in) if segments is None else segments
        x = self.embed_target(tgt_in, train, segments=segments)
        h, weights = self.decoder(x, mask, memory, src_mask, train, return_attention=True,
                                  attention_layer=c.alignment_layer)
        if c.full_context_alignment:
            _, weights = self.decoder(x, mask, memory, src_mask, train, return_attention=True,
                                      attention_layer=c.alignment_layer, causal=False)
        return self.logits(h), jnp.mean(weights[:, :c.alignment_heads or None], axis=1)

    def cross_attention(self, tgt_in: jnp.ndarray, memory: jnp.ndarray, src_mask: jnp.ndarray) -> jnp.ndarray:
        """The attention of `aligned_decode`, float32[B, T, S] (its logits, unused, are left out of the program)."""
        return self.aligned_decode(tgt_in, memory, src_mask)[1]

    def forward_aligned(self, src: jnp.ndarray, tgt_in: jnp.ndarray, train: bool = False, src_seg=None,
                        tgt_seg=None) -> tuple[jnp.ndarray, jnp.ndarray]:
        """`__call__` with the attention word alignments read: (logits float32[B, T, V], float32[B, T, S])
        (`aligned_decode`)."""
        src_mask = token_mask(src) if src_seg is None else src_seg
        return self.aligned_decode(tgt_in, self.encode(src, train, src_seg), src_mask, train, tgt_seg)

    def init_cache(self, memory: jnp.ndarray, max_len: int):
        """memory: float[B, S, D] -> per-layer cache for `step` (self-attention slots for max_len tokens)."""
        return self.decoder.init_cache(memory, max_len)

    def step(self, token: jnp.ndarray, cache, index, src_mask: jnp.ndarray):
        """token: int32[B] at position `index` -> (log-probabilities float32[B, V], new cache)."""
        x = self.embed_target(token[:, None], False, offset=index)
        h, cache = self.decoder.step(x, cache, index, src_mask)
        return nn.log_softmax(self.logits(h[:, 0])), cache


def ar_loss(model: ARTransformer, params, batch: dict, rng, label_smoothing: float, train: bool = True,
            alignment_lambda: float = 0.0):
    """Teacher-forced label-smoothed cross-entropy, and with ``alignment_lambda`` > 0 and batch['links'] guided
    alignment's loss times it (`alignment_loss`, reported as 'alignment', per target token).

    batch['src']: int32[B, S], batch['tgt']: int32[B, T] ([BOS … EOS], PAD after), or a packed batch (several
    such pairs a row, with 'src_seg' and 'tgt_seg'; a token is a target only after a token of its own pair).
    Returns (loss_sum, {'nll': nll_sum, 'count': target tokens}) so that callers normalise globally.
    """
    tgt = batch["tgt"]
    src, src_seg = source_tokens(model.cfg, batch["src"], batch.get("src_seg"))
    seg = batch.get("tgt_seg")
    kwargs = dict(train=train, src_seg=src_seg, tgt_seg=None if seg is None else seg[:, :-1], rngs={"dropout": rng})
    aligned = alignment_lambda > 0 and "links" in batch
    out = model.apply(params, src, tgt[:, :-1], method="forward_aligned" if aligned else None, **kwargs)
    logits, attention = out if aligned else (out, None)
    targets = token_mask(tgt[:, 1:]) if seg is None else next_in_segment(seg)
    loss, nll, count = smoothed_cross_entropy(logits, tgt[:, 1:], targets, label_smoothing)
    aux = {"nll": nll, "count": count}
    if aligned:
        links = alignment_loss(attention, batch["links"], src, tgt, src_seg, seg)
        loss = loss + alignment_lambda * links
        aux["alignment"] = links / jnp.maximum(count, 1.0)
    return loss, aux


def alignment_loss(attention: jnp.ndarray, links: jnp.ndarray, src: jnp.ndarray, tgt: jnp.ndarray, src_seg=None,
                   tgt_seg=None) -> jnp.ndarray:
    """Guided alignment (Garg et al. 2019; fairseq's label_smoothed_cross_entropy_with_alignment): the sum over a
    batch's links of −log A[row, col] / n, A the attention word alignments read (`aligned_decode`) at the decoder
    position predicting the link's target piece and the source position of its source piece, n the number of links
    of that target piece (each target piece's links weigh 1 together).

    attention: float32[B, T - 1, S]; links: int32[B, K, 3] (source piece, target piece, n; -1 rows after a pair's
    own: `piece_links.as_array`), or in a packed batch int32[B, M, K, 3] per segment; src: int32[B, S] as the
    encoder read it (`source_tokens`), tgt: int32[B, T]; src_seg, tgt_seg: a packed batch's segment ids (None:
    one pair a row). A piece's position: its index after its pair's first source piece (past BOS, where read) or
    its target BOS; a link to a piece its pair no longer holds (cut to data.max_len) counts nothing.
    """
    if src_seg is None:  # one pair a row: segment 1 wherever a token stands
        src_seg, tgt_seg, links = token_mask(src).astype(jnp.int32), token_mask(tgt).astype(jnp.int32), links[:, None]
    segment = jnp.arange(1, links.shape[1] + 1)[None, :, None]  # [1, M, 1]

    def first(seg, ok):  # [B, M]: each segment's first position where ``ok`` holds, and whether it has one
        at = (seg[:, None, :] == segment) & ok[:, None, :]
        return jnp.argmax(at, axis=-1), jnp.any(at, axis=-1)

    src_first, src_has = first(src_seg, src != BOS_ID)
    tgt_first, tgt_has = first(tgt_seg, tgt == BOS_ID)
    i, j, n = links[..., 0], links[..., 1], links[..., 2]  # [B, M, K]
    col, row = src_first[..., None] + i, tgt_first[..., None] + j
    b = jnp.arange(src.shape[0])[:, None, None]
    col_c, row_c = jnp.clip(col, 0, src.shape[1] - 1), jnp.clip(row + 1, 0, tgt.shape[1] - 1)
    segs = segment[..., 0][:, :, None]  # [1, M, 1]
    valid = ((i >= 0) & (src_has & tgt_has)[..., None] & (col < src.shape[1]) & (row + 1 < tgt.shape[1])
             & (src_seg[b, col_c] == segs) & (src[b, col_c] != EOS_ID)
             & (tgt_seg[b, row_c] == segs) & (tgt[b, row_c] != EOS_ID))
    picked = attention[b, jnp.clip(row, 0, attention.shape[1] - 1), col_c]
    return -jnp.sum(jnp.where(valid, jnp.log(jnp.maximum(picked, 1e-9)) / jnp.maximum(n, 1), 0.0))


def ar_token_logp(model: ARTransformer, params, src: jnp.ndarray, tgt: jnp.ndarray,
                  rows_of: jnp.ndarray | None = None) -> jnp.ndarray:
    """Teacher forcing: float32[R, T - 1], the log-probability of each of tgt[:, 1:] given the tokens before it (0.0 at
    PAD). src: int32[B, S]; tgt: int32[R, T] [BOS … EOS] rows, row r a translation of source rows_of[r] (int32[R];
    None: row r of src). Each source is encoded once, however many candidates it has."""
    src, _ = source_tokens(model.cfg, src)
    memory, src_mask = model.apply(params, src, method="encode"), token_mask(src)
    if rows_of is not None:
        memory, src_mask = memory[rows_of], src_mask[rows_of]
    logp = nn.log_softmax(model.apply(params, tgt[:, :-1], memory, src_mask, method="decode"))
    picked = jnp.take_along_axis(logp, tgt[:, 1:, None], axis=-1)[..., 0]
    return jnp.where(token_mask(tgt[:, 1:]), picked, 0.0)


def ar_score(model: ARTransformer, params, src: jnp.ndarray, tgt: jnp.ndarray, rows_of: jnp.ndarray) -> jnp.ndarray:
    """The rescorer's score: mean log-probability of each row's tokens after BOS (EOS included) under teacher
    forcing (`ar_token_logp`) → float32[R]."""
    return jnp.sum(ar_token_logp(model, params, src, tgt, rows_of), axis=1) / jnp.maximum(
        jnp.sum(token_mask(tgt[:, 1:]), axis=1), 1)


def ar_attention(model: ARTransformer, params, src: jnp.ndarray, tgt: jnp.ndarray) -> jnp.ndarray:
    """Teacher forcing: float32[B, T - 1, S], the attention of each position predicting tgt[:, 1:] over src's columns
    (`ARTransformer.cross_attention`; a column the encoder did not read, BOS without ``source_bos``, 0). src:
    int32[B, S] [BOS … EOS]; tgt: int32[B, T] [BOS … EOS] rows, row b a translation of src's row b."""
    read, _ = source_tokens(model.cfg, src)
    memory = model.apply(params, read, method="encode")
    weights = model.apply(params, tgt[:, :-1], memory, token_mask(read), method="cross_attention")
    return source_columns(model.cfg, weights)


# ----------------------------------------------------------------------------------------------- decoding

SUPPORTS = Supports(beam=True, hard_constraints=True, prefix=True, nbest=True, score=True, ensemble=True, align=True)


def search(tokens_to_logprobs, cache, src: jnp.ndarray, *, phrases=None, ordered: bool = False, continues=None,
           joins=None, trails=None, beam_size: int, length_penalty, max_len_a, max_len_b, max_out: int,
           rules: str = "jaxnat", prefix=None, prefix_free=None, completion=None, nbest: int = 1,
           sampling: Sampling | None = None, no_repeat_ngram: int = 0, no_consecutive_repeat: int = 0) -> dict:
    """The AR searches behind one callback: greedy or beam search (`search.ar_search`), or with phrases
    (int32[B, C, P], an all-PAD row = none) the constrained beam search that guarantees them
    (`constrained.constrained_search`, DBA/VDBA; beam_size 1 is then a one-beam constrained search, and a row
    without phrases is searched greedily, as alone), or under fairseq's ``rules`` fairseq's
    (`constrained_fairseq.search`), which does not. prefix: int32[B, P], each
    output's first tokens, the first prefix_free (int32[B] or None: all) at log-probability 0 (`search.force_prefix`),
    or None; completion: the word each output then goes on spelling (`completion.Completion`), or None. nbest: the
    n-best lists' length (`search.ar_search`). sampling: beam_size samples a sentence in place of the search
    (`search.Sampling`; not with phrases). no_repeat_ngram: n > 0 bans every token that would repeat an n-gram of
    its row after the forced tokens, no_consecutive_repeat k > 0 every consecutive repeat of up to k tokens
    (`repeats.block_repeats`), in each of these searches."""
    src_len = token_mask(src).sum(axis=1)
    prefix_len = 0
    if prefix is not None:
        free = None if prefix_free is None else jnp.repeat(prefix_free, beam_size, axis=0)
        tokens_to_logprobs = force_prefix(tokens_to_logprobs, jnp.repeat(prefix, beam_size, axis=0), free)
        prefix_len = token_mask(prefix).sum(axis=1)
    if completion is not None:
        tokens_to_logprobs, cache = spell(tokens_to_logprobs, cache, completion, beam_size)
        prefix_len = prefix_len + completion.length
    if no_repeat_ngram or no_consecutive_repeat:
        rows_free = jnp.repeat(prefix_len, beam_size) if jnp.ndim(prefix_len) else prefix_len
        tokens_to_logprobs, cache = block_repeats(tokens_to_logprobs, cache, max_out, no_repeat_ngram,
                                                  no_consecutive_repeat, rows_free)
    # every search's length limit leaves room for the forced tokens
    kwargs = dict(beam_size=beam_size, length_penalty=length_penalty, max_len_a=max_len_a, max_len_b=max_len_b,
                  max_out=max_out, prefix_len=prefix_len, nbest=nbest)
    if sampling is not None:
        if phrases is not None:
            raise ConfigError("eval.sampling=true samples without constraints; these sentences have hard ones")
        return ar_search(tokens_to_logprobs, cache, src_len, rules=rules, sampling=sampling,
                         sample_keys=source_keys(src, sampling.seed), **kwargs)
    if phrases is None:
        return ar_search(tokens_to_logprobs, cache, src_len, rules=rules, **kwargs)
    if rules == "fairseq":  # fairseq searches its whole batch under the constraints (so does this)
        return constrained_fairseq.search(tokens_to_logprobs, cache, src_len, phrases, ordered=ordered, **kwargs)
    out = constrained_search(tokens_to_logprobs, cache, src_len, phrases, ordered=ordered, continues=continues,
                             joins=joins, trails=trails, **kwargs)
    if beam_size == 1:  # one beam keeps a finished hypothesis and searches on, which greedy search does not: a row
        # without phrases takes greedy's output, as it would alone (a wider beam without phrases is the plain beam)
        has = jnp.any(phrases != PAD_ID, axis=(1, 2))
        plain = skipped_unless(~jnp.all(has), lambda: ar_search(tokens_to_logprobs, cache, src_len, rules=rules,
                                                                 **kwargs))
        out = {k: jnp.where(has.reshape(-1, *(1,) * (v.ndim - 1)), v, plain[k]) if k in plain else v
               for k, v in out.items()}
    return out


def hard_phrases(request: DecodeRequest):
    """The request's hard constraint phrases int32[B, C, P] (PAD for sentences without), or None."""
    if request.constraints is None:
        return None
    return jnp.where(request.hard[:, None, None], request.constraints, PAD_ID)


def ar_decoder(model: ARTransformer, params, src: jnp.ndarray, beam_size: int, max_out: int):
    """The search's callback of one model with its KV cache: (tokens_to_logprobs, cache). The source is encoded once
    and its cross-attention keys and values repeated per beam (row b * beam_size + k), kept out of the searched
    cache (`without_cross_cache`)."""
    src, _ = source_tokens(model.cfg, src)
    src_mask = jnp.repeat(token_mask(src), beam_size, axis=0)
    memory = model.apply(params, src, method=model.encode)
    # positions 0 .. max_out - 2 are fed (the last token, at max_out - 1, is never fed back); the cross-attention
    # keys and values projected once a sentence, then repeated for its beams
    cache = model.apply(params, memory, max_out - 1, method=model.init_cache)
    cache = jax.tree_util.tree_map(lambda x: jnp.repeat(x, beam_size, axis=0), cache)
    return without_cross_cache(
        lambda tokens, cache, index: model.apply(params, tokens, cache, index, src_mask, method=model.step), cache)


def ar_generate(model: ARTransformer, params, src: jnp.ndarray, *, beam_size: int = 1, length_penalty=1.0,
                max_len_a=1.2, max_len_b=10, max_out: int, phrases=None, ordered: bool = False,
                continues=None, joins=None, trails=None, rules: str = "jaxnat", prefix=None, prefix_free=None,
                completion=None, nbest: int = 1, sampling: Sampling | None = None, members: tuple = (),
                no_repeat_ngram: int = 0, no_consecutive_repeat: int = 0, allow_unk: bool = True) -> dict:
    """Greedy, beam or constrained beam search (`search`) with the model's KV cache (`ar_decoder`).

    src: int32[B, S]; beam_size and max_out static; phrases: int32[B, C, P] hard constraints or None (continues,
    joins, trails: `constrained_search`'s); prefix, prefix_free, completion: each output's start (`search`), or None;
    no_repeat_ngram, no_consecutive_repeat: the repeats no output holds (`search`; 0: off);
    members: the ensemble's other models, (module, parameters) pairs (`members`, `search.ensembled`); without
    ``allow_unk`` no output holds UNK (`search.barred`). Returns
    {'tokens', 'score', 'length'} (and 'constraints_met' with phrases; with nbest > 1 the n-best lists); with
    ``sampling``, beam_size samples a sentence in place of the search.
    """
    for m in (model, *(m for m, _ in members)):
        if max_out - 1 > m.cfg.max_len:
            raise ConfigError(f"max_out={max_out} needs {max_out - 1} target positions; the model"
                              f"{' (an ensemble member)' if m is not model else ''} has max_len={m.cfg.max_len}")
    if beam_size < 1:
        raise ConfigError(f"beam_size={beam_size} must be at least 1")
    tokens_to_logprobs, cache = ensembled([ar_decoder(m, p, src, beam_size, max_out)
                                           for m, p in ((model, params), *members)])
    if not allow_unk:
        tokens_to_logprobs = barred(tokens_to_logprobs, (UNK_ID,))
    # the length limit reads the source as the model does (without BOS where model.source_bos is off: fairseq's)
    return search(tokens_to_logprobs, cache, source_tokens(model.cfg, src)[0], phrases=phrases, ordered=ordered,
                  continues=continues, joins=joins, trails=trails, beam_size=beam_size, length_penalty=length_penalty,
                  max_len_a=max_len_a, max_len_b=max_len_b, max_out=max_out, rules=rules, prefix=prefix,
                  prefix_free=prefix_free, completion=completion, nbest=nbest, sampling=sampling,
                  no_repeat_ngram=no_repeat_ngram, no_consecutive_repeat=no_consecutive_repeat)


def members(request: DecodeRequest) -> tuple:
    """An ensemble's other models in ``request`` (`Supports.ensemble`: `request.Member`s) as (module, parameters)
    pairs, each its own architecture; () without."""
    return tuple((ARTransformer(m.cfg), m.params) for m in request.extras.get("ensemble", ()))


def build_spec(config, cfg: TransformerConfig, pieces) -> ModelSpec:
    module, e = ARTransformer(cfg), config.eval
    continues, joins, trails = word_glue(pieces)  # hard constraints: whole words
    sampling = sampling_of(e)

    def init(rng, batch):
        return module.init(rng, batch["src"][:1], batch["tgt"][:1, :-1])

    def generate(params, request: DecodeRequest) -> dict:
        return ar_generate(module, params, request.src, beam_size=request.beam_size,
                           length_penalty=e.length_penalty, max_len_a=e.max_len_a, max_len_b=e.max_len_b,
                           max_out=request.width(capacity),
                           phrases=hard_phrases(request), ordered=e.constraint_order == "given", continues=continues,
                           joins=joins, trails=trails, rules=e.search_rules, prefix=request.prefix,
                           prefix_free=request.prefix_free, completion=request.completion, nbest=request.nbest,
                           sampling=sampling, members=members(request), no_repeat_ngram=e.no_repeat_ngram,
                           no_consecutive_repeat=e.no_consecutive_repeat, allow_unk=e.allow_unk)

    def loss(params, batch, rng, train=True):
        return ar_loss(module, params, batch, rng, config.train.label_smoothing, train, config.train.alignment_lambda)

    def score(params, request: DecodeRequest, tgt) -> dict:
        token_logp = mean_probability(jnp.stack([ar_token_logp(m, p, request.src, tgt)
                                                 for m, p in ((module, params), *members(request))]))
        return forced_result(token_logp, tgt, request.free_prefix(), e.length_penalty)

    def align(params, request: DecodeRequest, tgt) -> jnp.ndarray:  # an ensemble's: its models' mean (fairseq's)
        return jnp.mean(jnp.stack([ar_attention(m, p, request.src, tgt)
                                   for m, p in ((module, params), *members(request))]), axis=0)

    capacity = output_capacity(cfg, e)
    return ModelSpec("ar", cfg, module, init, loss, generate, capacity, SUPPORTS.when_sampling(sampling), packs=True,
                     score=score, align=align, terms=("alignment",) if config.train.alignment_lambda > 0 else ())


def output_capacity(cfg: TransformerConfig, eval_cfg):
    """capacity(src_len) → the output rows for sources padded to src_len: room for max_len_a · src_len +
    max_len_b tokens, BOS and EOS."""
    def capacity(src_len: int) -> int:
        return int(min(cfg.max_len, int(eval_cfg.max_len_a * src_len + eval_cfg.max_len_b) + 2))
    return capacity
