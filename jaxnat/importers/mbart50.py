"""mBART-50's translation models (Tang et al. 2020, "Multilingual Translation with Extensible Multilingual
Pretraining and Finetuning"; Liu et al. 2020 for mBART) as Hugging Face's `MBartForConditionalGeneration`
directories: `config.json`, the weights (`model.safetensors`, else `pytorch_model.bin`), `sentencepiece.bpe.model`,
`tokenizer_config.json` (or config.json) naming `MBart50Tokenizer`, and `tokenizer.json` where the directory has one.
docs/import.md.

The conventions mBART-50 shares with NLLB are hf_fairseq's. mBART's own: learned positions, each stack its own table
(Hugging Face's `MBartLearnedPositionalEmbedding`: row p + 2 for position p, as fairseq's tables from
`padding_idx + 1`), a layer norm over the embedded tokens of each stack (`layernorm_embedding`), and the output bias
`final_logits_bias` (zeros in Facebook's releases, which Hugging Face keeps as a buffer: jaxnat holds it as a
parameter, so fine-tuning trains it). Its dictionary: the SentencePiece model's pieces after fairseq's four specials
(the model's ids 3.. from 4), the 52 language codes of the mBART-50 release (`LANGUAGES`, in its order), `<mask>`;
tokenizer.json, where there is one, gives the ids instead. Only mBART-50's layout is read (`MBart50Tokenizer`:
`[language] pieces </s>` on both sides); mBART-cc25's (`MBartTokenizer`: `pieces </s> [language]`, decoding started
from the target language's token) is refused.
"""

from __future__ import annotations

import os

from jaxnat.errors import DataError
from jaxnat.importers import hf_fairseq
from jaxnat.importers.imported import Imported, remap_rows
from jaxnat.importers.fairseq import row_order
from jaxnat.importers.torch_layers import norm

FILES = ("config.json", hf_fairseq.SPM)
DEFAULTS = {"scale_embedding": False, "activation_function": "gelu"}  # MBartConfig's, where config.json is silent
TOKENIZERS = ("MBart50Tokenizer", "MBart50TokenizerFast")
LANGUAGES = (  # mBART-50's language codes in the order its dictionary holds them (the 25 of mBART-cc25 first)
    "ar_AR", "cs_CZ", "de_DE", "en_XX", "es_XX", "et_EE", "fi_FI", "fr_XX", "gu_IN", "hi_IN", "it_IT", "ja_XX",
    "kk_KZ", "ko_KR", "lt_LT", "lv_LV", "my_MM", "ne_NP", "nl_XX", "ro_RO", "ru_RU", "si_LK", "tr_TR", "vi_VN",
    "zh_CN", "af_ZA", "az_AZ", "bn_IN", "fa_IR", "he_IL", "hr_HR", "id_ID", "ka_GE", "km_KH", "mk_MK", "ml_IN",
    "mn_MN", "mr_IN", "pl_PL", "ps_AF", "pt_XX", "sv_SE", "sw_KE", "ta_IN", "te_IN", "th_TH", "tl_XX", "uk_UA",
    "ur_PK", "xh_ZA", "gl_ES", "sl_SI")


def _spm_vocabulary(at: str, rows: int) -> tuple[list[str], list[str]]:
    """(tokens by the model's id, the language tokens) as MBart50Tokenizer numbers them without a tokenizer.json:
    fairseq's specials, the SentencePiece model's pieces from its id 3 (its own <unk>, <s>, </s> are 0..2), the
    language codes, `<mask>`."""
    from jaxnat.data.pieces import read_sentencepiece

    sp = read_sentencepiece(at)
    if [sp.IdToPiece(i) for i in range(3)] != ["<unk>", "<s>", "</s>"]:
        raise DataError(f"{at}: ids 0..2 are not <unk>, <s>, </s> (fairseq's SentencePiece layout)")
    tokens = ["<s>", "<pad>", "</s>", "<unk>", *(sp.IdToPiece(i) for i in range(3, sp.GetPieceSize())),
              *LANGUAGES, "<mask>"]
    return hf_fairseq.padded(tokens, rows, at), list(LANGUAGES)


def read(directory: str) -> Imported:
    port = hf_fairseq.open_port(directory, "mbart50", "mbart", FILES, DEFAULTS)
    # the tokenizer's class, which tells mBART-50's layout from mBART-cc25's: named in tokenizer_config.json, or in
    # config.json (where AutoTokenizer looks when the former does not name it)
    tokenizer = port.tok_cfg.get("tokenizer_class", port.cfg.get("tokenizer_class"))
    if tokenizer not in TOKENIZERS:
        raise DataError(f"{directory}: tokenizer_class {tokenizer!r}; jaxnat reads mBART-50's layout "
                        f"(MBart50Tokenizer: the language token first), not mBART-cc25's (MBartTokenizer)")
    shared = hf_fairseq.shared_embedding(port)
    if os.path.isfile(port.at("tokenizer.json")):
        vocabulary, languages = hf_fairseq.tokenizer_json_vocabulary(port.at("tokenizer.json"), shared.shape[0])
    else:
        vocabulary, languages = _spm_vocabulary(port.at(hf_fairseq.SPM), shared.shape[0])
    params = hf_fairseq.transformer(port, shared, vocabulary)
    state, max_len = port.state, port.cfg.get("max_position_embeddings", 1024)
    # row p + 2 is position p's (the first two are never read); one table per stack beside the shared tokens
    params["src_embed"]["positions"] = state.take("model.encoder.embed_positions.weight")[2: 2 + max_len]
    params["tgt_embed"] = {"positions": state.take("model.decoder.embed_positions.weight")[2: 2 + max_len]}
    params["src_embed_norm"] = norm(state, "model.encoder.layernorm_embedding")
    params["tgt_embed_norm"] = norm(state, "model.decoder.layernorm_embedding")
    # a file may lack the bias, a buffer Hugging Face fills with zeros where it is missing: then there is none
    bias = state.has("final_logits_bias")
    if bias:
        params["output_bias"] = remap_rows(state.take("final_logits_bias").reshape(-1), row_order(len(vocabulary)))
    overrides = {"model.positions": "learned", "model.position_offset": 0, "model.separate_positions": True,
                 "model.layernorm_embedding": True, "model.output_bias": bias}
    return hf_fairseq.imported(port, params, vocabulary, languages, overrides,
                               {"format": "mbart50", "architecture": "MBartForConditionalGeneration"})
