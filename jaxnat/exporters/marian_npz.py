"""An autoregressive Transformer computing Marian's own function as Marian's `.npz` (`--mode export --to
marian-npz:DIR`, docs/import.md): what `jaxnat.importers.marian_npz` reads, written back as a release directory
(the model, `vocab.yml` or `src.vocab.yml` and `trg.vocab.yml`, `decoder.yml`, `source.spm`, `target.spm`), which
Marian's decoder reads (marian-decoder, pymarian; marian-conv makes Bergamot's 8-bit models from it). A Marian
model imported and fine-tuned here goes back to Marian, its SSRU and average-attention decoders included.

Marian computes one family of layouts: those of a `.npz` import (`check`): post-norm layers, or pre-norm ones with a
norm over each stack's top, of epsilon 1e-6; its sinusoids (jaxnat's "fairseq" frequencies) from 0; sources without
BOS; the decoder started from a zero vector (`<pad>`, whose embedding row is zero); an output bias; no `<pad>`,
`<s>`, placeholder or mask token in its vocabulary (`model.absent_tokens`). Its vocabulary holds `</s>` (id 0),
`<unk>` (1), then the other pieces in jaxnat's order; the arrays take Marian's names and layouts
(`marian_npz.LAYER`, read backwards: weights [in, out], biases and layer-norm parameters [1, out]), and
`special:model.yml` the options the import reads.
"""

from __future__ import annotations

import logging
import os
import shutil

import numpy as np

from jaxnat.data.vocab import BOS_ID, EOS_ID, MASK_ID, NUM_RESERVED, PAD_ID, PLH_ID, UNK_ID
from jaxnat.errors import ConfigError
from jaxnat.importers.marian_npz import ACTIVATIONS, AUTOREG, LN_EPS

log = logging.getLogger("jaxnat")

MARIAN_ACTIVATIONS = {ours: theirs for theirs, ours in ACTIVATIONS.items()}  # jaxnat's -> Marian's

MODEL = "model.npz"


def check(cfg, config, how: dict) -> None:
    """A one-line ConfigError naming every convention of ``cfg`` (a `TransformerConfig`) that Marian does not
    compute."""
    wrong = [f"{key}={value}" for key, value, marian in (
        ("model.decoder_norm (a decoder of another layout than the encoder)", cfg.decoder_pre_norm, cfg.pre_norm),
        ("model.positions", cfg.positions, "sinusoidal"), ("model.position_layout", cfg.position_layout, "fairseq"),
        ("model.position_offset", cfg.position_offset, 0), ("model.layernorm_embedding", cfg.layernorm_embedding,
                                                            False),
        ("model.source_bos", cfg.source_bos, False), ("model.decoder_start", cfg.decoder_start, "pad"),
        ("model.output_bias", cfg.output_bias, True), ("model.scale_embeddings", cfg.scale_embeddings, True),
        ("model.separate_positions", cfg.separate_positions, False),
        ("model.share_embeddings without model.tie_output", cfg.share_embeddings and not cfg.tie_output, False))
        if value != marian]
    if cfg.pre_norm and not cfg.decoder_final_norm:
        wrong.append("model.decoder_final_norm=False (Marian's pre-norm stacks end in a norm)")
    if cfg.activation not in MARIAN_ACTIVATIONS:
        wrong.append(f"model.activation={cfg.activation}")
    if {PAD_ID, BOS_ID, PLH_ID, MASK_ID} - set(cfg.absent_tokens):
        wrong.append("model.absent_tokens without pad,bos,plh,mask (Marian's vocabularies have none of them)")
    if config.data.src_lang_token or config.data.tgt_lang_token:
        wrong.append("data.src_lang_token / tgt_lang_token (language tokens outside the text)")
    if how["segmenter"] != "spm":
        wrong.append("BPE pieces (a Marian release cuts text with SentencePiece)")
    if wrong:
        raise ConfigError(f"Marian cannot compute this model ({', '.join(wrong)}); export it with "
                          f"--to ctranslate2:DIR")


def marian_rows(size: int) -> list[int]:
    """jaxnat's id of each row of Marian's vocabulary of ``size`` jaxnat ids: `</s>`, `<unk>`, then the pieces
    after the reserved ids, in order (the inverse of the import's order)."""
    return [EOS_ID, UNK_ID, *range(NUM_RESERVED, size)]


def arrays(params: dict, cfg) -> dict:
    """Marian's arrays (but the embeddings and the output layer) of jaxnat's parameters: each layer's under Marian's
    names (`marian_npz.LAYER`, `DECODER_LAYERS`; the pre-norm names with ``cfg.pre_norm``), each stack's
    top norm (pre-norm)."""
    from jaxnat.importers.marian_npz import DECODER_LAYERS, LAYER, pre_norm_names
    from jaxnat.importers.torch_layers import stack_tensors

    tensors = stack_tensors(params, "encoder", "decoder")
    out = {}
    for stack, depth in (("encoder", cfg.enc_layers), ("decoder", cfg.dec_layers)):
        names = DECODER_LAYERS[cfg.decoder_autoreg] if stack == "decoder" else LAYER
        names = pre_norm_names(names) if cfg.pre_norm else names
        for i in range(depth):
            for marian, hf in names.items():
                key = f"{stack}.{i}.{hf}"
                if key not in tensors:  # (an encoder layer has no cross-attention)
                    continue
                value = tensors.pop(key)
                matrix = hf.endswith(".weight") and "layer_norm" not in hf
                out[f"{stack}_l{i + 1}_{marian}"] = value.T if matrix else value.reshape(1, -1)
        if cfg.pre_norm:
            out[f"{stack}_top_ln_scale"] = np.asarray(params[stack]["final_norm"]["scale"]).reshape(1, -1)
            out[f"{stack}_top_ln_bias"] = np.asarray(params[stack]["final_norm"]["bias"]).reshape(1, -1)
    assert not tensors, sorted(tensors)[:3]  # every parameter has its Marian name
    return out


def settings(cfg, vocab_sizes: list[int]) -> dict:
    """`special:model.yml`: the options Marian builds the model from (the ones `marian_npz._settings` reads, its
    ACTIVATIONS and AUTOREG read backwards)."""
    tied_all = cfg.share_embeddings and cfg.tie_output
    autoreg, cell = {ours: theirs for theirs, ours in AUTOREG.items()}[cfg.decoder_autoreg]
    yml = {"type": "transformer", "dim-emb": cfg.d_model, "enc-depth": cfg.enc_layers, "dec-depth": cfg.dec_layers,
           "transformer-heads": cfg.num_heads, "transformer-dim-ffn": cfg.ffn_dim, "transformer-ffn-depth": 2,
           "transformer-decoder-ffn-depth": 0, "transformer-ffn-activation": MARIAN_ACTIVATIONS[cfg.activation],
           "transformer-preprocess": "n" if cfg.pre_norm else "",
           "transformer-postprocess": "da" if cfg.pre_norm else "dan",
           "transformer-postprocess-top": "n" if cfg.pre_norm else "", "transformer-postprocess-emb": "d",
           "transformer-decoder-autoreg": autoreg,
           "transformer-tied-layers": [], "transformer-no-projection": False,
           "transformer-train-position-embeddings": False, "transformer-dropout": cfg.dropout,
           "tied-embeddings-all": tied_all, "tied-embeddings-src": cfg.share_embeddings and not tied_all,
           "tied-embeddings": cfg.tie_output and not tied_all, "dim-vocabs": vocab_sizes,
           "layer-normalization": False, "right-left": False, "ulr": False, "transformer-rnn-projection": False,
           "version": "jaxnat export"}
    if cell:
        yml["dec-cell"] = cell
    if cfg.decoder_autoreg == "aan":
        yml.update({"transformer-dim-aan": cfg.ffn_dim, "transformer-aan-depth": 2, "transformer-aan-nogate": False,
                    "transformer-aan-activation": MARIAN_ACTIVATIONS[cfg.activation]})
    return yml


def write(translator, config, directory: str, files: dict[str, str], how: dict) -> None:
    """Writes the translator's model into ``directory`` (made here) as a Marian release. files, how: the workdir's
    tokenizer files and how they cut text (`jaxnat.exporters._tokenizer_files`)."""
    import jax
    import yaml

    from jaxnat.models.transformer import unstack_layers

    cfg, tok = translator.spec.cfg, translator.tokenizer
    check(cfg, config, how)
    if cfg.ln_eps != LN_EPS:  # (a .npz imported before the import took Marian's epsilon; about 1e-5 in a log-prob)
        log.warning("Marian computes its layer norms with epsilon %g, this model was trained with model.ln_eps=%g: "
                    "Marian's log-probabilities may depart slightly from the workdir's", LN_EPS, cfg.ln_eps)
    params = jax.tree.map(lambda a: np.asarray(a, np.float32), translator.params["params"])
    params = unstack_layers(params) if cfg.scan_layers else params
    rows = {side: marian_rows(tok.vocab_size(side)) for side in ("src", "tgt")}
    vocab = {side: {"</s>": 0, "<unk>": 1, **{tok.id_to_piece(i, side): n for n, i in enumerate(rows[side][2:], 2)}}
             for side in ("src", "tgt")}
    if any(len(v) != len(rows[side]) for side, v in vocab.items()):
        raise ConfigError("the vocabulary holds a piece twice, which Marian's vocab.yml cannot map: export it with "
                          "--to ctranslate2:DIR")
    out = arrays(params, cfg)
    src = params["src_embed"]["tokens"]["embedding"]
    if cfg.share_embeddings:
        out["Wemb"] = src[rows["src"]]
    else:
        out["encoder_Wemb"] = src[rows["src"]]
        out["decoder_Wemb"] = params["tgt_embed"]["tokens"]["embedding"][rows["tgt"]]
    if not cfg.tie_output:
        out["decoder_ff_logit_out_W"] = params["output"]["kernel"][:, rows["tgt"]]
    out["decoder_ff_logit_out_b"] = params["output_bias"][rows["tgt"]].reshape(1, -1)
    yml = settings(cfg, [len(rows["src"]), len(rows["tgt"])])
    out["special:model.yml"] = np.frombuffer(yaml.safe_dump(yml, sort_keys=True).encode() + b"\0", np.int8)

    os.makedirs(directory)
    # (row-major, each: Marian refuses an array numpy would store in column order, as a transposed view is)
    np.savez(os.path.join(directory, MODEL), **{k: np.ascontiguousarray(v) for k, v in out.items()})
    for name, path in files.items():
        shutil.copyfile(path, os.path.join(directory, name))
    names = ["vocab.yml"] * 2 if cfg.share_embeddings else ["src.vocab.yml", "trg.vocab.yml"]
    for side, name in zip(("src", "tgt"), names):
        with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
            yaml.safe_dump(vocab[side], f, allow_unicode=True, sort_keys=False)
    with open(os.path.join(directory, "decoder.yml"), "w", encoding="utf-8") as f:
        yaml.safe_dump({"models": [MODEL], "vocabs": names, "beam-size": config.eval.beam_size,
                        "normalize": config.eval.length_penalty, "word-penalty": 0,
                        "allow-unk": bool(config.eval.allow_unk), "relative-paths": True}, f,
                       sort_keys=False)
