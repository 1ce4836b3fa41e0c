"""NLLB-200 (Costa-jussà et al. 2022) as Hugging Face's `M2M100ForConditionalGeneration` directories: `config.json`,
the weights (`model.safetensors`, else `pytorch_model.bin`), `tokenizer.json` (the pieces' and the language tokens'
ids), `sentencepiece.bpe.model` (used to cut text only) and `tokenizer_config.json`. docs/import.md.

The conventions NLLB shares with mBART-50 are hf_fairseq's. Those of M2M100's architecture, which NLLB shares with
M2M-100 (m2m100.py), are `transformer`'s. NLLB's own tokenizer (`NllbTokenizer`, its default layout, without
legacy_behaviour) keeps its ids and its language tokens ("eng_Latn") in tokenizer.json.
"""

from __future__ import annotations

import numpy as np

from jaxnat.errors import DataError
from jaxnat.importers import hf_fairseq
from jaxnat.importers.imported import Imported

FILES = ("config.json", "tokenizer.json", hf_fairseq.SPM)
DEFAULTS = {"scale_embedding": True, "activation_function": "relu"}  # M2M100Config's, where config.json is silent


def read(directory: str) -> Imported:
    port = hf_fairseq.open_port(directory, "nllb", "m2m_100", FILES, DEFAULTS)
    if port.tok_cfg.get("legacy_behaviour"):
        raise DataError(f"{port.at('tokenizer_config.json')}: legacy_behaviour (the language token after the "
                        f"source's </s>) is not supported")
    shared = hf_fairseq.shared_embedding(port)
    vocabulary, languages = hf_fairseq.tokenizer_json_vocabulary(port.at("tokenizer.json"), shared.shape[0])
    return transformer(port, shared, vocabulary, languages,
                       {"format": "nllb", "architecture": "M2M100ForConditionalGeneration"})


def transformer(port: hf_fairseq.Port, shared: np.ndarray, vocabulary: list[str], languages: list[str],
                about: dict) -> Imported:
    """M2M100's Transformer: sinusoidal positions from `padding_idx + 1` = 2 at fairseq's frequencies (jaxnat
    computes them; Hugging Face saves the table as no parameter), no layer norm over the embeddings, no output
    bias."""
    params = hf_fairseq.transformer(port, shared, vocabulary)
    return hf_fairseq.imported(port, params, vocabulary, languages,
                               {"model.positions": "sinusoidal", "model.position_offset": 2}, about,
                               ignore=("embed_positions.weights", "embed_positions._float_tensor"))
