"""Vectorized lexical constraints (Wang et al. 2022): constraint pairs (source phrase, target phrase) as
attention entries of every layer and as an output plug-in, on the AR Transformer it extends (its first training
stage, train.init_from). docs/vecconst.md. Its config section is `config.vecconst`."""

from jaxnat.data.phrase_pairs import check_packable, encode_pairs
from jaxnat.data.tokenizer import phrase_encoder
from jaxnat.data.vocab import PAD_ID
from jaxnat.models.family import Family
from jaxnat.models.vecconst.model import SUPPORTS, build_spec


def defaults() -> dict:
    return dict(
        # constraint pairs as attention entries of every encoder and decoder layer (eqs. 5-7, 13-15), and the
        # output plug-in with its gate (eqs. 8-11; renormalise: divided by its sum instead of eq. 11 as written)
        attention=True, plug_in=True, renormalise=False,
        # "shared" (eq. 6: one network per layer maps the keys and the values, then the layer's projections) or
        # "separate" (the authors' code: a key and a value network, taken as keys and values)
        adapters="shared",
        # "eq11" (eqs. 9-11) or "authors" (their code: P_model plus a gated one-hot at the most similar
        # constraint token, clamped to [1e-12, 1])
        output="eq11",
        # eq. 12's weights of target-constraint tokens (α) and the others (β); the paper's 0.8 / 0.2 for a model
        # decoded with beam search, 0.5 / 0.5 for one decoded with VDBA
        alpha=0.8, beta=0.2,
        # which target tokens get α: "tokens" (every token of a target phrase, wherever it stands: eq. 12 as
        # written) or "span" (the positions of each target phrase's first occurrence: the authors' code)
        weighting="tokens",
        # decoding: the authors' rule, a constraint token leaves the plug-in once the beam has produced it
        # ("auto": with output=authors, as their code decodes)
        consume="auto",
        # decoding: attend over the constraint entries each batch needs (a few compiled shapes per source
        # bucket); false: over all data.max_pairs × data.max_pair_pieces (one shape; bench/decode_speed.py)
        pack_entries=True,
        # packed training: the constraint entries (source-phrase pieces) a row of data.max_len tokens attends to;
        # the packer fills no row past them (`pack_budget`). 0: as many as the row has tokens, the bound that
        # holds without a budget; rows of short phrases need far fewer (the demo: 16 of 40)
        packed_entries=0,
    )


def train_extras(config, tokenizer, src, tgt, pairs):
    """{'pair_src', 'pair_tgt'} int32[N, data.max_pairs, data.max_pair_pieces] of each sentence's pairs."""
    del src, tgt  # the pairs are given beside them
    d = config.data
    encode = phrase_encoder(tokenizer, d.src_lang, d.tgt_lang)  # as the translator encodes them
    pair_src, pair_tgt, counts = encode_pairs(pairs, encode, d.max_pairs, d.max_pair_pieces)
    return {"pair_src": pair_src, "pair_tgt": pair_tgt}, f"constraint pairs: {counts}"


def packable(src, tgt, extras) -> None:
    check_packable(src, tgt, extras["pair_src"], extras["pair_tgt"])


def pack_budget(config, extras):
    """Each example's source-phrase pieces, at most vecconst.packed_entries a packed row (0: no budget)."""
    if not config.vecconst.packed_entries:
        return None
    pieces = (extras["pair_src"] != PAD_ID).reshape(len(extras["pair_src"]), -1).sum(axis=1)
    return pieces, int(config.vecconst.packed_entries)


FAMILY = Family(
    "vecconst", build_spec, SUPPORTS, doc="docs/vecconst.md", defaults=defaults,
    choices={"adapters": ("shared", "separate"), "output": ("eq11", "authors"), "weighting": ("tokens", "span"),
             "consume": ("auto", "true", "false")},
    ranges={"alpha": ("[0", "1]"), "beta": ("[0", "1]"), "packed_entries": ("[0", None)},
    architecture=("attention", "plug_in", "adapters", "output"),
    moved={**{f"model.pair_{k}": k for k in ("attention", "plug_in", "renormalise", "adapters", "output")},
           **{f"train.pair_{k}": k for k in ("alpha", "beta", "weighting")}, "eval.pair_consume": "consume"},
    extends="ar", train_extras=train_extras, check_packable=packable, pack_budget=pack_budget,
    # its own beam search: the AR one's length rules, not fairseq's search rules
    reads=("eval.length_penalty", "eval.max_len_a", "eval.max_len_b", "data.pack", "eval.sampling",
           "eval.no_repeat_ngram", "eval.no_consecutive_repeat"))
