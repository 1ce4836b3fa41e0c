"""fairseq (0.x) checkpoints: a `.pt` file of `checkpoint_utils.save_state`, its dictionaries (`dict.<lang>.txt`)
and its BPE beside it, as fairseq's released models ship them (docs/import.md). Architectures: `transformer` (jaxnat's
`ar`) and the `translation_lev` models `cmlm_transformer`, `nonautoregressive_transformer` and
`levenshtein_transformer` (`cmlm`, `nat`, `levt`: the same layers plus their heads, `_nat_heads`), and the
DA-Transformer authors' `glat_decomposed_link` (thu-coai/DA-Transformer's fairseq plugin: `dat`, `_dat_heads`).

Conventions bridged (fairseq -> jaxnat): the dictionary's `<s>` 0, `<pad>` 1, `</s>` 2, `<unk>` 3 become jaxnat's
BOS, PAD, EOS, UNK rows, its words follow jaxnat's six reserved ids, and the rows it pads the dictionary with
(`madeupword0000`, … up to a multiple of 8) stay words; PLH and MASK, which fairseq's AR model lacks, repeat
`<unk>`'s row and are never predicted (model.absent_tokens). The decoder starts from `</s>`, sources carry no
BOS (the `translation` task), positions start at `padding_idx + 1` = 2 (learned tables: their first two rows,
never read, are dropped), layer norms use epsilon 1e-5. The `translation_lev` models differ: their sources begin
with `<s>`, and `<unk>` is their mask and placeholder (jaxnat's MASK and PLH rows repeat it).
"""

from __future__ import annotations

import argparse
import logging
import os

import numpy as np

from jaxnat.decoding import ngram
from jaxnat.errors import DataError
from jaxnat.importers import torch_file
from jaxnat.importers.imported import Imported, remap_rows
from jaxnat.importers.torch_layers import StateDict, dense, norm, stacks

log = logging.getLogger("jaxnat")

SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")  # fairseq's Dictionary, ids 0..3
# jaxnat's PAD, BOS, EOS, UNK, PLH, MASK <- fairseq rows (PLH and MASK: <unk>'s, never predicted)
RESERVED_ROWS = [1, 0, 2, 3, 3, 3]
# fairseq's architectures (and their presets, `<name>_<preset>`) -> jaxnat's family
ARCHITECTURES = {"transformer": "ar", "cmlm_transformer": "cmlm", "nonautoregressive_transformer": "nat",
                 "levenshtein_transformer": "levt", "glat_decomposed_link": "dat"}
# fairseq's --activation-fn -> jaxnat's model.activation (gelu_fast and gelu_accurate: gelu's tanh approximation)
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_fast": "gelu_tanh", "gelu_accurate": "gelu_tanh"}
# fairseq's decoder-only language models and their presets, whose names read as presets of `transformer`
LANGUAGE_MODELS = ("transformer_lm", "transformer_ulm")
# the DA-Transformer plugin's decode_strategy -> dat.decode (beamsearch: their DAG-Search, output for output; sample:
# eval.sampling with their cut; viterbi and jointviterbi with their convention: `_dat_heads`)
DAT_DECODING = {"lookahead": "lookahead", "greedy": "greedy", "viterbi": "path_viterbi", "jointviterbi": "viterbi",
                "beamsearch": "dagsearch", "sample": "lookahead"}
NAT_UNSUPPORTED = {  # settings of fairseq's NAT models jaxnat's families have no equivalent of, with their default
    "no_share_discriminator": False, "no_share_maskpredictor": False,
    "share_discriminator_maskpredictor": False, "layernorm_embedding": False,
}
# settings of fairseq's Transformer that jaxnat's has no equivalent of, with their default. Those of training alone
# are not among them: LayerDrop (fairseq's eval runs every layer) and activation checkpointing (memory, not
# the function); quant_noise_pq is, as it adds a linear map over the embeddings
UNSUPPORTED = {
    "adaptive_softmax_cutoff": None, "adaptive_input": False, "cross_self_attention": False,
    "no_token_positional_embeddings": False, "quant_noise_pq": 0.0,
}


def family_of(arch: str, path: str) -> str:
    """jaxnat's family of fairseq's architecture ``arch`` (or of one of its presets, `<name>_<preset>`); a one-line
    DataError for any other, naming what it is where that is known."""
    if any(arch == lm or arch.startswith(lm + "_") for lm in LANGUAGE_MODELS):
        raise DataError(f"{path}: {arch!r} is a fairseq language model (a decoder without an encoder), not a "
                        f"translation model")
    family = next((f for a, f in sorted(ARCHITECTURES.items(), key=lambda x: -len(x[0]))
                   if arch == a or arch.startswith(a + "_")), None)
    if family is None and arch.startswith("ls_glat_decomposed_link"):  # the plugin's LightSeq layout
        raise DataError(f"{path}: {arch!r} is the DA-Transformer plugin's LightSeq model: convert it with the "
                        f"plugin's fs_plugins/scripts/convert_ls_to_fs.py first")
    if family is None:
        raise DataError(f"{path}: fairseq architecture {arch!r} is not supported (supported: "
                        f"{', '.join(ARCHITECTURES)} and their presets)")
    return family


def _settings(obj) -> dict:
    if obj is None:
        return {}
    return dict(vars(obj)) if isinstance(obj, argparse.Namespace) else dict(obj)


def read_dictionary(path: str) -> list[str]:
    """A fairseq `dict.txt`'s tokens, in id order after the four specials ("token count [flag]" lines)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        raise DataError(f"{path}: no such dictionary; pass the directory of the model's dict.<lang>.txt files with "
                        f"--dict-dir") from None
    except OSError as e:
        raise DataError(f"{path}: unreadable dictionary ({e.strerror})") from None
    except UnicodeDecodeError as e:  # fairseq reads it as UTF-8 too
        raise DataError(f"{path}: a dictionary that is not UTF-8 ({e.reason} at byte {e.start})") from None
    tokens = []
    for n, line in enumerate(lines, 1):
        fields = line.rstrip().rsplit(" ", 2)
        if fields and fields[-1] == "#fairseq:overwrite":
            fields = fields[:-1]
        if len(fields) < 2 or not fields[-1].lstrip("-").isdigit():
            raise DataError(f"{path}:{n}: not a fairseq dictionary line ('token count'): {line[:60]!r}")
        tokens.append(" ".join(fields[:-1]))
    return tokens


def _vocabulary(tokens: list[str], rows: int, path: str) -> list[str]:
    """The model's id order: the specials, the dictionary's tokens and fairseq's padding words up to ``rows``
    (the embedding's rows; fairseq pads a dictionary to a multiple of 8)."""
    full = list(SPECIALS) + tokens
    padded = full + [f"madeupword{i:04d}" for i in range(-len(full) % 8)]
    if rows == len(full):
        return full
    if rows == len(padded):
        return padded
    raise DataError(f"{path} holds {len(tokens)} tokens ({len(full)} ids with the specials, {len(padded)} padded to a "
                    f"multiple of 8), but the model's embedding has {rows} rows: not this model's dictionary")


def jaxnat_pieces(vocabulary: list[str]) -> list[str]:
    """A fairseq dictionary's tokens in the model's id order -> the pieces by jaxnat id (its reserved ones first)."""
    from jaxnat.data.vocab import RESERVED_PIECES

    return list(RESERVED_PIECES) + vocabulary[len(SPECIALS):]


def row_order(n: int) -> list[int]:
    """The rows of a fairseq dictionary's n-row table in jaxnat's id order (`remap_rows`)."""
    return RESERVED_ROWS + list(range(len(SPECIALS), n))


def fairseq_order(n: int) -> list[int]:
    """The inverse of `row_order`: the jaxnat ids of a fairseq dictionary's n rows, in its order (an export's; the
    reserved ids it lacks, PLH and MASK, left out)."""
    from jaxnat.data.vocab import NUM_RESERVED

    return [RESERVED_ROWS.index(row) for row in range(len(SPECIALS))] + list(
        range(NUM_RESERVED, n - len(SPECIALS) + NUM_RESERVED))


def _segmenter(cfg: dict, task: dict, dict_dir: str) -> tuple[dict, dict]:
    """(tokenizer settings, files) for the model's text pipeline: fairseq's --bpe and --tokenizer."""
    from jaxnat.data.pieces import sentencepiece_bytes

    bpe, tok = _settings(cfg.get("bpe")), _settings(cfg.get("tokenizer"))
    kind = bpe.get("_name") or cfg.get("_bpe")

    def file(name: str, what: str) -> str:  # its path
        path = os.path.join(dict_dir, os.path.basename(name or ""))
        if not name or not os.path.isfile(path):
            raise DataError(f"the model's {what} ({name or 'not named in its settings'}) is not in {dict_dir}; pass "
                            f"the directory that holds it with --dict-dir")
        return path

    if kind == "sentencepiece":
        model = sentencepiece_bytes(file(bpe.get("sentencepiece_model"), "SentencePiece model (--sentencepiece-model)"))
        return ({"segmenter": "spm", "src": {"spm": "sentencepiece.model"}, "tgt": {"spm": "sentencepiece.model"}},
                {"sentencepiece.model": model})
    if kind in ("subword_nmt", "fastbpe"):
        if tok.get("_name") not in ("moses", None):
            raise DataError(f"fairseq tokenizer {tok.get('_name')!r} is not supported (moses or none)")
        with open(file(bpe.get("bpe_codes"), "BPE codes (--bpe-codes)"), "rb") as f:
            codes = f.read()
        if kind == "fastbpe":
            codes = merge_codes(codes, bpe.get("bpe_codes"), counted=True)
        settings = {"segmenter": "bpe", "codes": "bpecodes",
                    "dash_splits": not tok.get("moses_no_dash_splits", False),
                    "escape": not tok.get("moses_no_escape", False),
                    "src": {"lang": task["source_lang"]}, "tgt": {"lang": task["target_lang"]}}
        if tok.get("_name") != "moses":
            raise DataError("fairseq models with subword-nmt BPE and no Moses tokenizer are not supported")
        return settings, {"bpecodes": codes}
    raise DataError(f"fairseq --bpe {kind!r} is not supported (sentencepiece, or subword_nmt or fastbpe with "
                    f"--tokenizer moses)")


def merge_codes(codes: bytes, name: str, counted: bool) -> bytes:
    """BPE merges, one a line in priority order, as subword-nmt's codes ("#version: 0.2", then "left right"):
    fastBPE's codes (``counted``: "left right count") or Hugging Face FSMT's merges.txt ("left right"). All three
    learn and apply the same merges with the same end-of-word marker `</w>`, so subword-nmt segments as fastBPE and
    FSMTTokenizer do (checked against the real fastBPE by tools/make_import_fixtures.py, and against FSMTTokenizer
    by tests/test_import.py)."""
    what = "fastBPE codes line ('left right count')" if counted else "BPE merges line ('left right')"
    merges = []
    for n, line in enumerate(codes.decode("utf-8").splitlines(), 1):
        fields = line.split(" ")
        if len(fields) != 2 + counted or (counted and not fields[2].isdigit()):
            raise DataError(f"{name}:{n}: not a {what}: {line[:60]!r}")
        merges.append(f"{fields[0]} {fields[1]}")
    return ("#version: 0.2\n" + "\n".join(merges) + "\n").encode("utf-8")


def _nat_heads(family: str, model: dict, state: StateDict, params: dict) -> dict:
    """The heads of fairseq's `translation_lev` models into ``params``; returns their config overrides.

    CMLM and NAT: the length head, `F.linear` over the mean-pooled encoder (no bias), its classes n + 2 or, with
    --pred-length-offset, the offset from the source length. NAT: W_s of Coverage-NAT's SCA, which fairseq's
    NAT lacks, drawn fresh (seeded), so that fine-tuning with nat.sca_weight > 0 can learn it, and
    --src-embedding-copy as nat.decoder_input=copy. LevT: the
    deletion and placeholder heads (bias-free linears) and the early exits "del,ins,word"."""
    if family == "levt":
        params["deletion_head"] = {"kernel": state.take("decoder.embed_word_del.weight").T}
        params["placeholder_head"] = {"kernel": state.take("decoder.embed_mask_ins.weight").T}
        return {"levt.early_exit": str(model.get("early_exit", "6,6,6")).replace(" ", ""),
                "levt.max_iter": 9}
    length = state.take("decoder.embed_length.weight")
    params["length_head"] = {"kernel": length.T}
    section = family
    overrides = {f"{section}.length_prediction": "pooled", f"{section}.length_bias": False,
                 f"{section}.length_offset": bool(model.get("pred_length_offset", False)),
                 f"{section}.length_with_ends": not model.get("pred_length_offset", False),
                 f"{section}.length_beam": 3, f"{section}.length_beam_mode": "centred",
                 f"{section}.candidate_score": "log_probability"}
    if family == "cmlm":
        overrides["cmlm.mask_predict_iter"] = 10
    else:
        overrides["nat.decoder_input"] = "copy" if model.get("src_embedding_copy", False) else "mask"
        d = length.shape[1]
        params["source_map"] = {"kernel": (np.random.default_rng(0).standard_normal((d, d)) *
                                           np.sqrt(1.0 / d)).astype(np.float32)}
    return overrides


def _dat_heads(path: str, model: dict, task: dict, state: StateDict, params: dict) -> dict:
    """The DA-Transformer plugin's graph heads into ``params`` (the link projections and gate over the states ⊕
    learned link positions: `dat.links=multihead`, its `links_feature=feature:position`); returns the overrides:
    the graph's size (λ: decode_upsample_scale, `upsample_base`), its decoder inputs (`[BOS, UNK …, EOS]`) and
    decoding strategy, and the most vertices a graph has (the plugin's clip)."""
    def setting(key, default=None):  # the task's copy where there is one (the plugin keeps both)
        return task.get(key, model.get(key, default))

    checks = {"links_feature": (setting("links_feature", "feature:position"), "feature:position"),
              "segment_embedding": (bool(setting("segment_embedding", False)), False)}
    for key, (value, supported) in checks.items():
        if value != supported:
            raise DataError(f"{path}: DA-Transformer setting {key}={value!r} is not supported (jaxnat reads "
                            f"{key}={supported!r})")
    base = setting("upsample_base", "source")
    if base not in ("source", "source_old"):
        raise DataError(f"{path}: DA-Transformer upsample_base={base!r} is not supported (source, source_old)")
    scale = setting("decode_upsample_scale") or setting("upsample_scale")
    try:
        upsample = float(scale)
    except (TypeError, ValueError):
        raise DataError(f"{path}: no decode_upsample_scale, and upsample_scale {scale!r} is a range: the graph's "
                        f"size at decoding is not known") from None
    if upsample != int(upsample) or upsample < 1:
        raise DataError(f"{path}: decode_upsample_scale {scale} is not a whole number, which jaxnat's λ is")
    strategy = setting("decode_strategy", "lookahead")
    if strategy not in DAT_DECODING:
        raise DataError(f"{path}: DA-Transformer decode_strategy {strategy!r} has no equivalent in jaxnat "
                        f"({', '.join(DAT_DECODING)})")
    for name, key in (("link_query", "query_linear"), ("link_key", "key_linear"), ("link_gate", "gate_linear")):
        params[name] = dense(state, f"decoder.{key}")
    # the plugin clips a graph to decoder.max_positions() - 1 vertices; its table's rows from padding_idx + 1
    rows = model.get("max_target_positions", 1024) - 1
    limit = setting("max_transition_length", 99999)
    if limit != -1 and limit < rows - 1:
        raise DataError(f"{path}: max_transition_length={limit} limits the links, which jaxnat's graphs do not")
    params["link_positions"] = state.take("decoder.link_positional.weight")[2: 2 + rows]  # rows 0, 1: never read
    if model.get("decoder_learned_pos", False):  # the vertices' positions: the decoder's table (the recipe's)
        params["vertex_positions"] = state.take("decoder.embed_positions.weight")[2: 2 + rows]
    if state.has("decoder.embed_length.weight"):  # the length head of upsample_base=predict, unused by the others
        state.take("decoder.embed_length.weight")
    out = {"dat.links": "multihead", "dat.vertex_inputs": "tokens", "dat.upsample": int(upsample),
           "dat.upsample_base": base, "dat.decode": DAT_DECODING[strategy],
           "dat.lookahead_beta": float(setting("decode_beta", 1.0)),
           "dat.viterbi_beta": float(setting("decode_viterbibeta", 1.0)),
           "dat.top_cand": int(setting("decode_top_cand_n", 5)), "dat.beam_alpha": float(setting("decode_alpha", 1.1)),
           "dat.max_vertices": rows, "model.source_bos": bool(setting("prepend_bos", False))}
    if strategy == "beamsearch":  # their beam search's own settings; it drops repeats only with decode_dedup
        out.update({"eval.beam_size": int(setting("decode_beamsize", 100)),
                    "dat.beam_per_length": int(setting("decode_max_beam_per_length", 10)),
                    "dat.top_p": float(setting("decode_top_p", 0.9)),
                    "dat.lm_weight": float(setting("decode_gamma", 0.1)),
                    "dat.remove_repeats": bool(setting("decode_dedup", False))})
        lm = setting("decode_lm_path", None)
        if lm:  # the n-gram LM their search fuses (γ: decode_gamma), an ARPA file of the target's pieces
            if ngram.is_arpa(lm):
                out["eval.lm"] = os.path.abspath(lm)
            else:
                log.warning("%s: its beam search fuses the n-gram LM %s, which is no ARPA file here: decode with "
                            "--config.eval.lm=FILE (its ARPA file) to fuse it", path, lm)
    # their n-gram prevention, where their decoders apply it: beam search always; greedy and lookahead step around
    # repeats with the consecutive rule set, or the n-gram rule in lookahead: both rules in lookahead's loop (with
    # decode_beta), which always bans the token before and whose n = 1 bans nothing more; their Viterbi refuses it
    repeat = int(setting("decode_no_repeated_ngram", 0) or 0)
    consecutive = int(setting("decode_no_consecutive_repeated_ngram", 0) or 0)
    if strategy in ("viterbi", "jointviterbi"):
        if repeat or consecutive:
            raise DataError(f"{path}: decode_strategy {strategy} with decode_no_repeated_ngram={repeat} and "
                            f"decode_no_consecutive_repeated_ngram={consecutive}: the plugin's Viterbi refuses them "
                            f"too")
        out["dat.viterbi_convention"] = "authors"  # their lengths and terms (`dag.viterbi`), output for output
    if strategy in ("beamsearch", "sample"):
        out.update({"eval.no_repeat_ngram": repeat, "eval.no_consecutive_repeat": consecutive})
    if strategy == "sample":  # one sample a sentence, drawn as theirs (`dag.authors_samples`), repeats kept
        out.update({"eval.sampling": True, "dat.sampler": "authors", "dat.top_p": float(setting("decode_top_p", 0.9)),
                    "eval.temperature": float(setting("decode_temperature", 1.0)), "dat.remove_repeats": False})
    elif strategy != "beamsearch" and (consecutive or (repeat and strategy == "lookahead")):
        # (that loop keeps a repeat it could not step around: their other lookahead, greedy and Viterbi drop them)
        out.update({"dat.decode": "lookahead", "eval.no_repeat_ngram": 0 if repeat == 1 else repeat,
                    "eval.no_consecutive_repeat": max(consecutive, 1),
                    "dat.top_p": float(setting("decode_top_p", 0.9)), "dat.remove_repeats": False})
    return out


def read(path: str, dict_dir: str) -> Imported:
    ckpt = torch_file.load(path)
    if not isinstance(ckpt, dict) or "model" not in ckpt:
        raise DataError(f"{path}: not a fairseq checkpoint (no 'model' entry)")

    def dictionary(lang: str, rows: int) -> list[str]:
        at = os.path.join(dict_dir, f"dict.{lang}.txt")
        return _vocabulary(read_dictionary(at), rows, at)

    return convert(ckpt, path, dictionary, lambda cfg, task: _segmenter(cfg, task, dict_dir))


def convert(ckpt: dict, path: str, dictionary, segmenter) -> Imported:
    """A checkpoint's contents (``ckpt``: its settings and its 'model' state dict, fairseq's names) as an Imported.
    dictionary(lang, rows) → the language's tokens in the model's id order (the specials first, ``rows`` of them in
    all); segmenter(cfg, task) → (the vocabulary's settings, its files): `piece_vocab.write`'s. ``path`` names the
    source in messages."""
    cfg = _settings(ckpt.get("cfg"))
    args = _settings(ckpt.get("args"))
    model = _settings(cfg.get("model")) or args
    task = _settings(cfg.get("task")) or args
    if not cfg:  # an older checkpoint: every setting in args
        cfg = {"bpe": {"_name": args.get("bpe"), **args}, "tokenizer": {"_name": args.get("tokenizer"), **args}}
    arch = model.get("_name") or model.get("arch") or "?"
    family = family_of(arch, path)
    for key, default in {**UNSUPPORTED, **(NAT_UNSUPPORTED if family != "ar" else {})}.items():
        if model.get(key, default) not in (default, None, False, 0, 0.0):
            raise DataError(f"{path}: fairseq setting {key}={model[key]!r} is not supported")
    if model.get("src_embedding_copy", False) and family != "nat":  # (CMLM's would copy in every pass)
        raise DataError(f"{path}: fairseq setting src_embedding_copy=True is supported in "
                        f"nonautoregressive_transformer only, not in {arch}")
    activation = model.get("activation_fn", "relu")
    if activation not in ACTIVATIONS:
        raise DataError(f"{path}: fairseq setting activation_fn={activation!r} is not supported "
                        f"({', '.join(ACTIVATIONS)})")
    d, ffn = model["encoder_embed_dim"], model["encoder_ffn_embed_dim"]
    widths = [model.get(k, d) for k in ("decoder_embed_dim", "decoder_output_dim", "decoder_input_dim")]
    if widths != [d] * 3 or model.get("decoder_ffn_embed_dim", ffn) != ffn:
        raise DataError(f"{path}: encoder and decoder of different widths are not supported")
    if model["encoder_attention_heads"] != model["decoder_attention_heads"]:
        raise DataError(f"{path}: encoder and decoder with different numbers of attention heads are not supported")
    if model.get("encoder_learned_pos", False) != model.get("decoder_learned_pos", False):
        raise DataError(f"{path}: learned positions in one stack only are not supported")

    state = StateDict(ckpt["model"], path)
    src_lang, tgt_lang = task.get("source_lang"), task.get("target_lang")
    if not src_lang or not tgt_lang:
        raise DataError(f"{path}: the checkpoint names no source_lang/target_lang, which name its dictionaries")
    share_all = bool(model.get("share_all_embeddings", False))
    tie = share_all or bool(model.get("share_decoder_input_output_embed", False))
    learned = bool(model.get("encoder_learned_pos", False))
    src_rows = state.tensors["encoder.embed_tokens.weight"].shape[0] if state.has(
        "encoder.embed_tokens.weight") else 0
    tgt_rows = state.tensors["decoder.embed_tokens.weight"].shape[0] if state.has(
        "decoder.embed_tokens.weight") else src_rows
    src_vocab, tgt_vocab = dictionary(src_lang, src_rows), dictionary(tgt_lang, tgt_rows)
    if share_all and src_vocab != tgt_vocab:
        raise DataError(f"{path}: share_all_embeddings with two different dictionaries")

    max_len = min(model.get("max_source_positions", 1024), model.get("max_target_positions", 1024))
    params = stacks(state, "encoder.layers", "decoder.layers",
                    (model["encoder_layers"], model["decoder_layers"]),
                    (model["encoder_attention_heads"], model["decoder_attention_heads"]))
    pre_enc = bool(model.get("encoder_normalize_before", False))
    pre_dec = bool(model.get("decoder_normalize_before", False))
    final_dec = pre_dec and not model.get("no_decoder_final_norm", False)
    if pre_enc:
        params["encoder"]["final_norm"] = norm(state, "encoder.layer_norm")
    if final_dec:
        params["decoder"]["final_norm"] = norm(state, "decoder.layer_norm")
    src_embed = {"tokens": {"embedding": remap_rows(state.take("encoder.embed_tokens.weight"), row_order(src_rows))}}
    tgt_embed = {} if share_all else {
        "tokens": {"embedding": remap_rows(state.take("decoder.embed_tokens.weight"), row_order(tgt_rows))}}
    if share_all and state.has("decoder.embed_tokens.weight"):  # the one table, saved under both names
        if not np.array_equal(state.take("decoder.embed_tokens.weight"), state.tensors["encoder.embed_tokens.weight"]):
            raise DataError(f"{path}: share_all_embeddings, but the decoder's embeddings differ from the encoder's")
    if learned:  # rows 0..padding_idx of fairseq's tables are never read
        src_embed["positions"] = state.take("encoder.embed_positions.weight")[2: 2 + max_len]
        tgt_embed["positions"] = state.take("decoder.embed_positions.weight")[2: 2 + max_len]
    params["src_embed"] = src_embed
    if tgt_embed:
        params["tgt_embed"] = tgt_embed
    if not tie:
        params["output"] = {"kernel": remap_rows(state.take("decoder.output_projection.weight"), row_order(tgt_rows)).T}
    if model.get("layernorm_embedding", False):
        params["src_embed_norm"] = norm(state, "encoder.layernorm_embedding")
        params["tgt_embed_norm"] = norm(state, "decoder.layernorm_embedding")
    overrides = {}
    if family == "dat":
        overrides = _dat_heads(path, model, task, state, params)
    elif family != "ar":
        overrides = _nat_heads(family, model, state, params)
    # fairseq 0.12's encoder layers also keep copies of their weights for PyTorch's fused fast path (in_proj_weight,
    # fc1_weight, …), which its own eval path does not read either
    fused = tuple(f"{n}_{w}" for n in ("in_proj", "out_proj", "fc1", "fc2") for w in ("weight", "bias"))
    unused = state.unused(ignore=("_float_tensor", ".version", "output_projection.weight") + fused)
    if unused:
        raise DataError(f"{path}: parameters jaxnat's model would not use: {', '.join(unused[:3])}")

    settings, files = segmenter(cfg, task)
    settings["joint"] = src_vocab == tgt_vocab
    pieces = {"src": jaxnat_pieces(src_vocab), "tgt": jaxnat_pieces(tgt_vocab)}
    overrides = {
        "model.name": family, "model.d_model": d, "model.ffn_dim": ffn,
        "model.num_heads": model["encoder_attention_heads"], "model.enc_layers": model["encoder_layers"],
        "model.dec_layers": model["decoder_layers"], "model.pre_norm": pre_enc,
        "model.decoder_norm": "pre" if pre_dec else "post", "model.decoder_final_norm": final_dec,
        "model.positions": "learned" if learned else "sinusoidal", "model.max_len": max_len,
        "model.position_offset": 0 if learned else 2, "model.share_embeddings": share_all,
        "model.separate_positions": share_all and learned, "model.tie_output": tie,
        "model.scale_embeddings": not model.get("no_scale_embedding", False), "model.ln_eps": 1e-5,
        "model.activation": ACTIVATIONS[activation],
        "model.layernorm_embedding": bool(model.get("layernorm_embedding", False)),
        "model.absent_tokens": "plh,mask", "model.unk_inputs": "" if family == "ar" else "plh,mask",
        "model.dropout": float(model.get("dropout", 0.1)),
        "model.attention_dropout": float(model.get("attention_dropout", 0.0)),
        "model.activation_dropout": float(model.get("activation_dropout", model.get("relu_dropout", 0.0)) or 0.0),
        "data.joint_vocab": settings["joint"], "data.vocab_size": len(pieces["tgt"]),
        "data.src_lang": src_lang, "data.tgt_lang": tgt_lang, "data.max_len": min(max_len, 256), **overrides,
    }
    if family == "ar":  # the `translation` task: no BOS on the source; the decoder starts from EOS
        overrides.update({"model.decoder_start": "eos", "model.source_bos": False, "eval.beam_size": 4,
                          "eval.max_len_a": 1.2, "eval.max_len_b": 10})
        if "alignment_layer" in model:  # transformer_align (Garg et al. 2019): the layer and heads it aligns with
            overrides.update({"model.alignment_layer": int(model["alignment_layer"]),
                              "model.alignment_heads": int(model.get("alignment_heads") or 0),
                              "model.full_context_alignment": bool(model.get("full_context_alignment", False))})
    about = {"format": "fairseq", "architecture": arch, "family": family}
    return Imported(overrides, params, settings, pieces, files, about)
