"""fairseq's own checkpoint, written back (`--mode export --to fairseq:DIR`; docs/import.md): what
`jaxnat.importers.fairseq` reads of a `transformer` (or `transformer_align`) and of the `translation_lev` task's
`cmlm_transformer`, `nonautoregressive_transformer` and `levenshtein_transformer`, so that a fairseq model imported
and fine-tuned (or distilled, or trained with fairseq's conventions) here goes back to fairseq's tools:
`fairseq-interactive DIR --path DIR/model.pt` with the text pipeline's options (and `--task translation_lev` and its
`--iter-decode-*` options for the others), or `TransformerModel.from_pretrained(DIR, "model.pt")`.

The layout is the import's, inverted: the layers under fairseq's names; the embeddings with their rows back in
fairseq's order (`<s> <pad> </s> <unk>`, then the dictionary's words; jaxnat's PLH and MASK rows, which fairseq's
model lacks, left out: `<unk>`'s row, which fairseq's `translation_lev` models read as their mask and placeholder,
is jaxnat's UNK, which a model with `model.unk_inputs` reads for them); learned position tables with fairseq's two
leading rows (zeros: the padding row, and one never read); the buffers fairseq's modules keep (the stacks'
`version`, the sinusoidal tables' `_float_tensor`); the heads of the `translation_lev` models (`_heads`). The
settings are an `args` namespace, as fairseq's checkpoints before its Hydra configs hold them and as every fairseq
since reads them (`convert_namespace_to_omegaconf`): the architecture's sizes and options, the `translation` (or
`translation_lev`) task's languages, and the text pipeline, whose files lie beside the checkpoint: `dict.<lang>.txt`
per side (the words in id order; their counts, which decoding never reads, 0), and `bpecodes` (subword-nmt codes
over Moses tokens) or `sentencepiece.bpe.model`, under the names `from_pretrained` looks for. The file is PyTorch's
zip format, written without PyTorch (`torch_file.save`).

A model fairseq's architecture does not compute (another epsilon, BOS on the source or none, a decoder starting
from BOS, reserved tokens it predicts, an output bias, PLH and MASK rows of their own, a length classifier with a
bias, …) or a text pipeline fairseq's options cannot express is refused in one line naming what differs.
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import shutil

import numpy as np

from jaxnat.data.vocab import MASK_ID, PLH_ID
from jaxnat.decoding.mask_predict import LENGTH_CLASSES
from jaxnat.errors import ConfigError
from jaxnat.importers.fairseq import ARCHITECTURES as IMPORTED, DAT_DECODING

log = logging.getLogger("jaxnat")


# jaxnat's families -> fairseq's architectures (the import's, inverted; dat: the DA-Transformer plugin's)
ARCHITECTURES = {family: arch for arch, family in IMPORTED.items()}
FAMILIES = tuple(ARCHITECTURES)
# the plugin registers its architecture under presets alone: the base one, whose every size the settings name
PRESETS = {"dat": "glat_decomposed_link_6e6d512"}
# the task each trains with; the translation_lev task's noise, which its training puts on the references
TASKS = {"ar": "translation", "dat": "translation_dat_task"}
NOISE = {"cmlm": "random_mask", "nat": "full_mask", "levt": "random_delete"}
# the values of a family's config section that fairseq's model of it computes (the rest: jaxnat's own heads)
FAMILY_SETTINGS = {
    "cmlm": {"length_prediction": "pooled", "length_bias": False, "masked_attn": False, "concat_pe": False},
    "nat": {"length_prediction": "pooled", "length_bias": False, "coverage": False},
    "levt": {"separate_deletion": False, "separate_placeholder": False},
    "dat": {"links": "multihead", "vertex_inputs": "tokens"},  # links from the states ⊕ learned link positions
}
CRITERIA = {"ar": "LabelSmoothedCrossEntropyCriterion", "dat": "NATDAGLoss"}  # (the checkpoint's training record)
# jaxnat's dat.decode -> the plugin's decode_strategy (Viterbi's: with dat.viterbi_convention=authors)
DAT_STRATEGIES = {ours: theirs for theirs, ours in DAT_DECODING.items() if theirs != "sample"}
DAT_VITERBI = {DAT_DECODING["viterbi"], DAT_DECODING["jointviterbi"]}


def conventions(cfg, family: str = "ar", section=None) -> list[str]:
    """What of ``cfg`` (a `TransformerConfig`) and of ``section`` (the config section of ``family``: a
    `translation_lev` model's, a DA-Transformer's) fairseq's architecture of ``family`` does not compute, each as
    "model.KEY=value" (empty: it computes this model)."""
    want = {"ln_eps": 1e-5, "output_bias": False}
    if family == "ar":  # the translation task: no BOS on the source, the decoder starts from </s>
        want.update(decoder_start="eos", source_bos=False)
    elif family == "dat":  # (its task's prepend_bos says whether sources begin with <s>)
        want.update(layernorm_embedding=False)
    else:  # translation_lev: sources begin with <s>
        want.update(source_bos=True, layernorm_embedding=False)
    if cfg.positions == "sinusoidal":
        want.update(position_offset=2, position_layout="fairseq")
    elif cfg.share_embeddings:  # one token table, but fairseq keeps a position table per stack
        want["separate_positions"] = True
    wrong = [f"model.{key}={getattr(cfg, key)}" for key, value in want.items() if getattr(cfg, key) != value]
    if cfg.share_embeddings and not cfg.tie_output:
        wrong.append("model.share_embeddings=True with model.tie_output=False")
    if not {PLH_ID, MASK_ID} <= set(cfg.absent_tokens):
        wrong.append(f"model.absent_tokens={','.join(map(str, cfg.absent_tokens)) or '(none)'} (fairseq's model has "
                     f"no PLH or MASK row: 'plh,mask')")
    if family not in ("ar", "dat") and not {PLH_ID, MASK_ID} <= set(cfg.unk_inputs):
        wrong.append(f"model.unk_inputs={','.join(map(str, cfg.unk_inputs)) or '(none)'} (fairseq's "
                     f"{ARCHITECTURES[family]} reads <unk> as its mask and placeholder: 'plh,mask')")
    if cfg.activation not in ACTIVATIONS:
        wrong.append(f"model.activation={cfg.activation}")
    if section is not None:
        settings = dict(FAMILY_SETTINGS[family])
        if "length_offset" in section:  # fairseq's classes: n + 2, or the offset from the source length
            settings["length_with_ends"] = not section.length_offset
        wrong += [f"{family}.{key}={section[key]}" for key, value in settings.items() if section[key] != value]
    return wrong


# jaxnat's model.activation -> fairseq's --activation-fn (gelu_fast: the tanh approximation)
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_fast"}


def _pipeline(files: dict, how: dict) -> tuple[dict, dict]:
    """(the args of fairseq's --bpe and --tokenizer, {name in the export: path}) of the workdir's text pipeline
    (`jaxnat.exporters._tokenizer_files`); a one-line ConfigError where fairseq's options cannot express it."""
    if how["segmenter"] == "spm":
        if files["source.spm"] != files["target.spm"] and not _same_file(files["source.spm"], files["target.spm"]):
            raise ConfigError("fairseq's --bpe sentencepiece cuts both sides with one model; this workdir has a "
                              "SentencePiece model per side")
        return ({"bpe": "sentencepiece", "sentencepiece_model": "sentencepiece.bpe.model", "tokenizer": None},
                {"sentencepiece.bpe.model": files["source.spm"]})
    extra = [key for key in ("lowercase", "normalize") if how.get(key)]
    if extra:
        raise ConfigError(f"fairseq's Moses tokenizer has no {' or '.join(extra)} step, which this workdir's text "
                          f"pipeline takes (an FSMT import: export it with --to fsmt:DIR)")
    return ({"bpe": "subword_nmt", "bpe_codes": "bpecodes", "bpe_separator": "@@", "tokenizer": "moses",
             "moses_no_dash_splits": not how["dash_splits"], "moses_no_escape": not how["escape"]},
            {"bpecodes": files["bpecodes"]})


def _same_file(a: str, b: str) -> bool:
    with open(a, "rb") as f, open(b, "rb") as g:
        return f.read() == g.read()


def _positions(table: np.ndarray) -> np.ndarray:
    """A learned position table with fairseq's two leading rows (padding_idx 1 and the row before it: zeros)."""
    return np.concatenate([np.zeros((2, table.shape[1]), np.float32), np.asarray(table, np.float32)])


def token_tables(params: dict, cfg, rows: dict, prefix: str = "") -> dict:
    """The token embeddings of each stack and the decoder's output projection (the target embedding where tied) under
    fairseq's names (after ``prefix``: Hugging Face's FSMT port keeps them under "model."), their rows in fairseq's
    order. rows: per side, jaxnat's ids in that order (`fairseq_order`)."""
    src = np.asarray(params["src_embed"]["tokens"]["embedding"], np.float32)
    tgt = src if cfg.share_embeddings else np.asarray(params["tgt_embed"]["tokens"]["embedding"], np.float32)
    output = tgt if cfg.tie_output else np.asarray(params["output"]["kernel"], np.float32).T
    return {f"{prefix}encoder.embed_tokens.weight": src[rows["src"]],
            f"{prefix}decoder.embed_tokens.weight": tgt[rows["tgt"]],
            f"{prefix}decoder.output_projection.weight": output[rows["tgt"]]}


def _heads(family: str, params: dict) -> dict:
    """The heads beyond the Transformer's under fairseq's names: of a `translation_lev` model (bias-free linears,
    kept as [out, in]) the length classifier (CMLM, NAT), LevT's deletion and placeholder classifiers (NAT's W_s,
    which Coverage-NAT's sentence-level agreement loss alone reads, is not fairseq's: left out); a DA-Transformer's
    graph heads (`_dat_heads`)."""
    if family == "levt":
        return {"decoder.embed_word_del.weight": np.asarray(params["deletion_head"]["kernel"], np.float32).T,
                "decoder.embed_mask_ins.weight": np.asarray(params["placeholder_head"]["kernel"], np.float32).T}
    if family in ("cmlm", "nat"):
        return {"decoder.embed_length.weight": np.asarray(params["length_head"]["kernel"], np.float32).T}
    if family == "dat":
        return _dat_heads(params)
    return {}


def _dat_heads(params: dict) -> dict:
    """The DA-Transformer plugin's graph heads: the link projections and gate (linears with biases), the learned
    link positions and, with learned positions, the vertices' (the decoder's own table), each a table of fairseq's
    layout (two leading rows and a last one, which no graph of the plugin's reaches: zeros); the length head of its
    upsample_base=predict, which the other bases never read (refused at import): zeros."""
    out = {}
    for ours, theirs in (("link_query", "query_linear"), ("link_key", "key_linear"), ("link_gate", "gate_linear")):
        out[f"decoder.{theirs}.weight"] = np.asarray(params[ours]["kernel"], np.float32).T
        out[f"decoder.{theirs}.bias"] = np.asarray(params[ours]["bias"], np.float32)
    for ours, theirs in (("link_positions", "link_positional"), ("vertex_positions", "embed_positions")):
        if ours in params:
            rows = np.asarray(params[ours], np.float32)
            out[f"decoder.{theirs}.weight"] = np.concatenate([_positions(rows), np.zeros_like(rows[:1])])
    d = params["link_positions"].shape[1]
    out["decoder.embed_length.weight"] = np.zeros((LENGTH_CLASSES, d), np.float32)
    return out


def state_dict(params: dict, cfg, rows: dict, family: str = "ar") -> collections.OrderedDict:
    """fairseq's `state_dict()` of the model of ``family`` (its layers unstacked): {name: float32 array}. rows: per
    side, jaxnat's ids in fairseq's row order (`fairseq_order`)."""
    from jaxnat.importers.torch_layers import stack_tensors

    out = {**stack_tensors(params, "encoder.layers", "decoder.layers"), **token_tables(params, cfg, rows)}
    for stack, side in (("encoder", "src"), ("decoder", "tgt")):
        out[f"{stack}.version"] = np.asarray([3.0], np.float32)
        if cfg.positions == "learned":
            out[f"{stack}.embed_positions.weight"] = _positions(params[f"{side}_embed"]["positions"])
        else:  # fairseq's sinusoidal tables are computed; the module keeps a one-element buffer
            out[f"{stack}.embed_positions._float_tensor"] = np.zeros(1, np.float32)
        if cfg.layernorm_embedding:
            embed_norm = params[f"{side}_embed_norm"]
            out[f"{stack}.layernorm_embedding.weight"] = np.asarray(embed_norm["scale"], np.float32)
            out[f"{stack}.layernorm_embedding.bias"] = np.asarray(embed_norm["bias"], np.float32)
        if "final_norm" in params[stack]:
            final = params[stack]["final_norm"]
            out[f"{stack}.layer_norm.weight"] = np.asarray(final["scale"], np.float32)
            out[f"{stack}.layer_norm.bias"] = np.asarray(final["bias"], np.float32)
    out.update(_heads(family, params))  # (a DA-Transformer's vertex positions: the decoder's table)
    return collections.OrderedDict(sorted(out.items()))


def arguments(cfg, src_lang: str, tgt_lang: str, pipeline: dict, family: str = "ar", section=None,
              own: dict | None = None) -> argparse.Namespace:
    """The checkpoint's `args`: fairseq's `transformer` (`transformer_align` where the model names the attention
    its word alignments read) with this model's sizes and options, the `translation` task, the text pipeline; or
    fairseq's architecture of ``family`` (section: its config section; own: settings of its own, a
    DA-Transformer's `_dat_arguments`) and its task."""
    learned = cfg.positions == "learned"
    args = dict(
        arch="transformer", task="translation", data=".", source_lang=src_lang, target_lang=tgt_lang,
        encoder_embed_dim=cfg.d_model, encoder_ffn_embed_dim=cfg.ffn_dim, encoder_layers=cfg.enc_layers,
        encoder_attention_heads=cfg.num_heads, encoder_normalize_before=cfg.pre_norm, encoder_learned_pos=learned,
        decoder_embed_dim=cfg.d_model, decoder_ffn_embed_dim=cfg.ffn_dim, decoder_layers=cfg.dec_layers,
        decoder_attention_heads=cfg.num_heads, decoder_normalize_before=cfg.decoder_pre_norm,
        decoder_learned_pos=learned, decoder_output_dim=cfg.d_model, decoder_input_dim=cfg.d_model,
        no_decoder_final_norm=cfg.decoder_pre_norm and not cfg.decoder_final_norm,
        share_all_embeddings=cfg.share_embeddings, share_decoder_input_output_embed=cfg.tie_output,
        no_scale_embedding=not cfg.scale_embeddings, layernorm_embedding=cfg.layernorm_embedding,
        activation_fn=ACTIVATIONS[cfg.activation], dropout=cfg.dropout, attention_dropout=cfg.attention_dropout,
        activation_dropout=cfg.activation_dropout, max_source_positions=cfg.max_len,
        max_target_positions=cfg.max_len, left_pad_source=True, left_pad_target=False, **pipeline)
    if (cfg.alignment_layer, cfg.alignment_heads, cfg.full_context_alignment) != (-1, 0, False):
        args.update(arch="transformer_align", full_context_alignment=cfg.full_context_alignment,
                    alignment_layer=cfg.alignment_layer % cfg.dec_layers,
                    alignment_heads=cfg.alignment_heads or cfg.num_heads)
    if family != "ar":
        args.update(arch=PRESETS.get(family, ARCHITECTURES[family]), task=TASKS.get(family, "translation_lev"))
    if family in NOISE:
        args.update(noise=NOISE[family])
    if family in ("cmlm", "nat"):
        args.update(pred_length_offset=section.length_offset, length_loss_factor=section.length_loss_weight,
                    sg_length_pred=False, src_embedding_copy=family == "nat" and section.decoder_input == "copy")
    if family == "levt":
        from jaxnat.models.insertion import early_exit

        args.update(early_exit=",".join(map(str, early_exit(section, cfg))), no_share_discriminator=False,
                    no_share_maskpredictor=False, share_discriminator_maskpredictor=False,
                    sampling_for_deletion=section.sampling_for_deletion)
    args.update(own or {})
    return argparse.Namespace(**args)


def _dat_arguments(cfg, section, eval_cfg, vertices: int) -> dict:
    """The DA-Transformer plugin's settings of this model: its graph (λ, its base, the most vertices: ``vertices``,
    its position tables' rows, which the plugin counts as its positions less one), links and task, and how it
    decodes (`_dat_decoding`)."""
    return dict(links_feature="feature:position", segment_embedding=False, max_transition_length=99999,
                max_target_positions=vertices + 1, upsample_scale=str(section.upsample),
                upsample_base=section.upsample_base, decode_upsample_scale=float(section.decode_upsample or
                                                                                 section.upsample),
                prepend_bos=cfg.source_bos, **_dat_decoding(section, eval_cfg))


def _dat_decoding(section, eval_cfg) -> dict:
    """The plugin's decode_* settings under which it decodes as ``section`` and ``eval_cfg`` say: what the import
    reads (`jaxnat.importers.fairseq._dat_heads`) written back. Where the plugin cannot (a decoding of jaxnat's own,
    written as its lookahead; a prevention rule its loops lack), a warning."""
    repeat, consecutive = eval_cfg.no_repeat_ngram, eval_cfg.no_consecutive_repeat
    out = dict(decode_strategy=DAT_STRATEGIES.get(section.decode, "lookahead"), decode_beta=section.lookahead_beta,
               decode_viterbibeta=section.viterbi_beta, decode_top_cand_n=section.top_cand,
               decode_alpha=section.beam_alpha, decode_top_p=section.top_p, decode_no_repeated_ngram=0,
               decode_no_consecutive_repeated_ngram=0)
    departs = []
    if eval_cfg.sampling and section.sampler == "authors":  # their sample: one path a sentence, repeats kept
        out.update(decode_strategy="sample", decode_temperature=eval_cfg.temperature,
                   decode_no_repeated_ngram=repeat, decode_no_consecutive_repeated_ngram=consecutive)
        if eval_cfg.beam_size != 1:
            departs.append(f"eval.beam_size={eval_cfg.beam_size} (their sample draws one path a sentence)")
    elif eval_cfg.sampling or section.decode not in DAT_STRATEGIES or (
            section.decode in DAT_VITERBI and section.viterbi_convention != "authors"):
        departs.append(f"dat.decode={section.decode}, dat.viterbi_convention={section.viterbi_convention}, "
                       f"eval.sampling={eval_cfg.sampling} (written as the plugin's lookahead)")
        out["decode_strategy"] = "lookahead"
    elif out["decode_strategy"] == "beamsearch":  # their beam search's own settings
        out.update(decode_beamsize=eval_cfg.beam_size, decode_max_beam_per_length=section.beam_per_length,
                   decode_gamma=section.lm_weight, decode_dedup=section.remove_repeats,
                   decode_no_repeated_ngram=repeat, decode_no_consecutive_repeated_ngram=consecutive)
    elif repeat or consecutive:  # greedy or lookahead stepping around repeats: their lookahead's loop, which always
        # bans the token before and reads n = 1 as nothing more (greedy's: β = 0)
        beta = section.lookahead_beta if section.decode == "lookahead" else 0.0
        out.update(decode_strategy="lookahead", decode_beta=beta, decode_no_repeated_ngram=repeat if repeat > 1 else 0,
                   decode_no_consecutive_repeated_ngram=max(consecutive, 1))
        if repeat == 1:
            departs.append("eval.no_repeat_ngram=1 (their lookahead bans the token before, not every token seen)")
        if consecutive == 0:
            departs.append("eval.no_consecutive_repeat=0 (their lookahead always bans the token before)")
    # their loops stepping around repeats (sample, lookahead with prevention) keep those they could not; their
    # other lookahead, greedy and Viterbi drop consecutive repeats; their beam search as decode_dedup says
    drops = section.remove_repeats if out["decode_strategy"] == "beamsearch" else (
        out["decode_strategy"] != "sample" and not out["decode_no_consecutive_repeated_ngram"])
    if section.remove_repeats != drops:
        departs.append(f"dat.remove_repeats={section.remove_repeats} (their {out['decode_strategy']} "
                       f"{'drops' if drops else 'keeps'} consecutive repeats there)")
    if departs:
        log.warning("the DA-Transformer plugin cannot decode as this workdir does: %s; its --decode-strategy and "
                    "--decode-* options choose another decoding", "; ".join(departs))
    return out


def write(translator, config, directory: str, files: dict, how: dict, step: int) -> None:
    """Writes the translator's model (of `FAMILIES`) into ``directory`` (made here): model.pt, dict.<lang>.txt per
    side, and the BPE file. files, how: the workdir's text pipeline (`jaxnat.exporters._tokenizer_files`); step: the
    update the parameters are of (the checkpoint's num_updates)."""
    import jax

    from jaxnat.importers import torch_file
    from jaxnat.importers.fairseq import SPECIALS, fairseq_order
    from jaxnat.models.transformer import unstack_layers

    cfg, tok = translator.spec.cfg, translator.tokenizer
    family = config.model.name
    section = config[family] if family != "ar" else None
    wrong = conventions(cfg, family, section)
    params = jax.tree.map(np.asarray, translator.params["params"])
    params = unstack_layers(params) if cfg.scan_layers else params
    for stack, norm in (("encoder", cfg.pre_norm), ("decoder", cfg.decoder_pre_norm)):
        if ("final_norm" in params[stack]) != norm:
            wrong.append(f"a {'pre' if norm else 'post'}-norm {stack} {'without' if norm else 'with'} a final norm")
    if wrong:
        instead = "; export it with --to ctranslate2:DIR" if family == "ar" else ""
        raise ConfigError(f"fairseq's {ARCHITECTURES[family] if family != 'ar' else 'Transformer'} cannot compute "
                          f"this model ({', '.join(wrong)}){instead}")
    if family in ("cmlm", "nat") and cfg.max_len < LENGTH_CLASSES - 1:
        log.warning("model.max_len=%d: jaxnat decodes at most that many tokens, fairseq's %s as many as its length "
                    "classifier predicts (up to %d): a longer prediction decodes differently there", cfg.max_len,
                    ARCHITECTURES[family], LENGTH_CLASSES - 1)
    src_lang, tgt_lang = config.data.src_lang, config.data.tgt_lang
    if not src_lang or not tgt_lang or src_lang == tgt_lang:
        raise ConfigError(f"fairseq names a model's dictionaries by its languages: set data.src_lang and "
                          f"data.tgt_lang (two different names; got {src_lang!r} and {tgt_lang!r})")
    pipeline, pipeline_files = _pipeline(files, how)
    own = _dat_arguments(cfg, section, config.eval, params["link_positions"].shape[0]) if family == "dat" else {}
    rows = {side: fairseq_order(tok.vocab_size(side) - 2) for side in ("src", "tgt")}

    os.makedirs(directory)
    for side, lang in (("src", src_lang), ("tgt", tgt_lang)):
        words = [tok.id_to_piece(i, side) for i in rows[side][len(SPECIALS):]]
        with open(os.path.join(directory, f"dict.{lang}.txt"), "w", encoding="utf-8") as f:
            f.writelines(f"{word} 0\n" for word in words)
    for name, path in pipeline_files.items():
        shutil.copyfile(path, os.path.join(directory, name))
    checkpoint = {
        "args": arguments(cfg, src_lang, tgt_lang, pipeline, family, section, own),
        "model": state_dict(params, cfg, rows, family),
        "optimizer_history": [{"criterion_name": CRITERIA.get(family, "NatLoss"),
                               "optimizer_name": "Adam",
                               "lr_scheduler_state": {"best": None}, "num_updates": int(step)}],
        "extra_state": {"train_iterator": {"epoch": 1, "iterations_in_epoch": 0}},
        "last_optimizer_state": None,
    }
    torch_file.save(checkpoint, os.path.join(directory, "model.pt"))
    with open(os.path.join(directory, "README.md"), "w", encoding="utf-8") as f:
        f.write(readme(config, family, src_lang, tgt_lang, pipeline))


def interactive_command(config, family: str, src_lang: str, tgt_lang: str, pipeline: dict) -> str:
    """The `fairseq-interactive` command, run in the export's directory, that decodes as the workdir's config does:
    the text pipeline's options (fairseq-interactive reads them from its command line, not from the checkpoint), the
    search's (its beam and length limit; a refining model's passes and length beam, fairseq's
    `--iter-decode-*`), the plugin for a DA-Transformer (a checkout of thu-coai/DA-Transformer)."""
    words = ["fairseq-interactive . --path model.pt", f"--source-lang {src_lang} --target-lang {tgt_lang}"]
    if pipeline["bpe"] == "subword_nmt":
        words.append("--tokenizer moses" + " --moses-no-dash-splits" * pipeline["moses_no_dash_splits"]
                     + " --moses-no-escape" * pipeline["moses_no_escape"] + " --bpe subword_nmt --bpe-codes bpecodes")
    else:
        words.append(f"--bpe sentencepiece --sentencepiece-model {pipeline['sentencepiece_model']}")
    e, section = config.eval, config[family] if family != "ar" else None
    if family == "ar":
        words.append(f"--beam {e.beam_size} --lenpen {e.length_penalty} --max-len-a {e.max_len_a} "
                     f"--max-len-b {e.max_len_b}")
    elif family == "dat":
        words.append("--user-dir DA-Transformer/fs_plugins --task translation_dat_task")
    else:  # fairseq's max_iter N runs N + 1 passes; its beam is the length beam (LevT: none)
        iterations = section.mask_predict_iter - 1 if family == "cmlm" else section.get("max_iter", 0)
        beam = section.get("length_beam", 1)
        words.append(f"--task translation_lev --iter-decode-max-iter {iterations} --iter-decode-with-beam {beam}")
    return " \\\n    ".join(words)


def readme(config, family: str, src_lang: str, tgt_lang: str, pipeline: dict) -> str:
    """README.md of a fairseq export: how to decode it as the workdir decodes (`interactive_command`)."""
    notes = {"dat": "`DA-Transformer/` is a checkout of thu-coai/DA-Transformer (its `fs_plugins` registers the "
                    "model).\n",
             "ar": "In Python, `TransformerModel.from_pretrained(\".\", \"model.pt\")` loads it with its text pipeline "
                   "from the checkpoint's settings.\n"}
    return (f"# {ARCHITECTURES[family]}, exported by jaxnat\n\nTranslate one sentence a line, in this directory, "
            f"with the workdir's decoding settings (fairseq-interactive prints scores in base 2):\n\n"
            f"```bash\n{interactive_command(config, family, src_lang, tgt_lang, pipeline)}\n```\n"
            + (f"\n{notes[family]}" if family in notes else ""))
