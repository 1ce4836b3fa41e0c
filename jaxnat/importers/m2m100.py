"""M2M-100 (Fan et al. 2021, "Beyond English-Centric Multilingual Machine Translation") as Hugging Face's
`M2M100ForConditionalGeneration` directories with `M2M100Tokenizer`'s files: `config.json`, the weights
(`model.safetensors`, else `pytorch_model.bin`), `vocab.json` (the pieces' ids: fairseq's dictionary),
`sentencepiece.bpe.model` (used to cut text only) and `tokenizer_config.json` where there is one. docs/import.md.

The model is NLLB's architecture (nllb.transformer); what differs is the tokenizer. Its files hold no language
tokens: `M2M100Tokenizer` numbers them after vocab.json's last id, one per code of the release's list (`LANGUAGES`:
100 for `facebook/m2m100_418M` and `m2m100_1.2B`, 8 for the WMT21 models; `tokenizer_config.json`'s
`language_codes` names the list), as `__en__`, `__de__`, …; fairseq's padding words fill the rows after them. A
piece SentencePiece cuts that vocab.json lacks is `<unk>`, as in `M2M100Tokenizer`. `tokenizer_config.json`'s
`src_lang` and `tgt_lang` (codes: "en") name the default languages; a user names a language by its code ("de", as
`M2M100Tokenizer` takes it) or by its token ("__de__").
"""

from __future__ import annotations

import dataclasses

from jaxnat.errors import DataError
from jaxnat.importers import hf_fairseq, nllb
from jaxnat.importers.imported import Imported
from jaxnat.importers.hf_files import read_ids

FILES = ("config.json", "vocab.json", hf_fairseq.SPM)
LANGUAGES = {  # language_codes: the codes in the order of the release's dictionary
    "m2m100": (
        "af", "am", "ar", "ast", "az", "ba", "be", "bg", "bn", "br", "bs", "ca", "ceb", "cs", "cy", "da", "de", "el",
        "en", "es", "et", "fa", "ff", "fi", "fr", "fy", "ga", "gd", "gl", "gu", "ha", "he", "hi", "hr", "ht", "hu",
        "hy", "id", "ig", "ilo", "is", "it", "ja", "jv", "ka", "kk", "km", "kn", "ko", "lb", "lg", "ln", "lo", "lt",
        "lv", "mg", "mk", "ml", "mn", "mr", "ms", "my", "ne", "nl", "no", "ns", "oc", "or", "pa", "pl", "ps", "pt",
        "ro", "ru", "sd", "si", "sk", "sl", "so", "sq", "sr", "ss", "su", "sv", "sw", "ta", "th", "tl", "tn", "tr",
        "uk", "ur", "uz", "vi", "wo", "xh", "yi", "yo", "zh", "zu"),
    "wmt21": ("en", "ha", "is", "ja", "cs", "ru", "zh", "de"),
}


def read(directory: str) -> Imported:
    port = hf_fairseq.open_port(directory, "m2m100", "m2m_100", FILES, nllb.DEFAULTS)
    tok_cfg_at = port.at("tokenizer_config.json")
    if port.tok_cfg.get("tokenizer_class", "M2M100Tokenizer") != "M2M100Tokenizer":
        raise DataError(f"{tok_cfg_at}: tokenizer_class {port.tok_cfg['tokenizer_class']!r}, not 'M2M100Tokenizer' "
                        f"(an NLLB model: --from nllb:DIR)")
    codes = LANGUAGES.get(port.tok_cfg.get("language_codes", "m2m100"))
    if codes is None:
        raise DataError(f"{tok_cfg_at}: language_codes {port.tok_cfg['language_codes']!r}, not one of "
                        f"{', '.join(LANGUAGES)}")
    vocab_at = port.at("vocab.json")
    vocab = read_ids(vocab_at)
    if not isinstance(vocab, dict) or sorted(vocab.values()) != list(range(len(vocab))):
        raise DataError(f"{vocab_at}: not a map of pieces to the ids 0 .. {len(vocab) - 1}, each once")
    by_id = {i: piece for piece, i in vocab.items()}
    languages = [f"__{code}__" for code in codes]
    shared = hf_fairseq.shared_embedding(port)
    vocabulary = hf_fairseq.padded([by_id[i] for i in range(len(by_id))] + languages, shared.shape[0], vocab_at)
    # the default languages as codes ("en") -> as tokens ("__en__"), as hf_fairseq.imported reads them
    named = {k: f"__{port.tok_cfg[k]}__" for k in ("src_lang", "tgt_lang") if port.tok_cfg.get(k)}
    port = dataclasses.replace(port, tok_cfg={**port.tok_cfg, **named})
    result = nllb.transformer(port, shared, vocabulary, languages,
                              {"format": "m2m100", "architecture": "M2M100ForConditionalGeneration"})
    result.settings["language_names"] = dict(zip(codes, languages))  # "de" names "__de__", as in Hugging Face's API
    return result
