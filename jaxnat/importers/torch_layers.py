"""fairseq's Transformer layers, whose parameter names Hugging Face's BART family (Marian) keeps, as jaxnat's.

PyTorch's `Linear` holds its weight as [out, in] and computes x Wᵀ + b; flax's `Dense` holds a kernel [in, out].
jaxnat's attention projections split the model width into heads ([D, H, K] in, [H, K, D] out). Layer norms:
weight / bias -> scale / bias.
"""

from __future__ import annotations

import numpy as np

from jaxnat.errors import DataError


class StateDict:
    """A source's parameters by name; `take` hands each out once, so that `unused` lists what no mapping read."""

    def __init__(self, tensors: dict, where: str):
        self.tensors = {k: np.asarray(v) for k, v in tensors.items()}
        self.where = where
        self.taken: set[str] = set()

    def has(self, name: str) -> bool:
        return name in self.tensors

    def take(self, name: str) -> np.ndarray:
        if name not in self.tensors:
            raise DataError(f"{self.where}: no parameter {name} (not the architecture its settings name?)")
        self.taken.add(name)
        return self.tensors[name].astype(np.float32, copy=False)  # float32 files: no copy

    def unused(self, ignore=()) -> list[str]:
        return sorted(k for k in self.tensors if k not in self.taken and not any(k.endswith(i) for i in ignore))


def dense(state: StateDict, prefix: str) -> dict:
    return {"kernel": state.take(f"{prefix}.weight").T, "bias": state.take(f"{prefix}.bias")}


def norm(state: StateDict, prefix: str) -> dict:
    return {"scale": state.take(f"{prefix}.weight"), "bias": state.take(f"{prefix}.bias")}


def attention(state: StateDict, prefix: str, heads: int) -> dict:
    out = {}
    for torch_name, name in (("q_proj", "query"), ("k_proj", "key"), ("v_proj", "value")):
        w, b = state.take(f"{prefix}.{torch_name}.weight"), state.take(f"{prefix}.{torch_name}.bias")
        d = w.shape[1]
        out[name] = {"kernel": w.T.reshape(d, heads, -1), "bias": b.reshape(heads, -1)}
    w = state.take(f"{prefix}.out_proj.weight")
    out["out"] = {"kernel": w.T.reshape(heads, -1, w.shape[0]), "bias": state.take(f"{prefix}.out_proj.bias")}
    return out


def encoder_layer(state: StateDict, prefix: str, heads: int) -> dict:
    return {"self_attn": attention(state, f"{prefix}.self_attn", heads),
            "res_attn": {"norm": norm(state, f"{prefix}.self_attn_layer_norm")},
            "ffn": {"fc1": dense(state, f"{prefix}.fc1"), "fc2": dense(state, f"{prefix}.fc2")},
            "res_ffn": {"norm": norm(state, f"{prefix}.final_layer_norm")}}


def decoder_layer(state: StateDict, prefix: str, heads: int) -> dict:
    return {"self_attn": attention(state, f"{prefix}.self_attn", heads),
            "res_self": {"norm": norm(state, f"{prefix}.self_attn_layer_norm")},
            "cross_attn": attention(state, f"{prefix}.encoder_attn", heads),
            "res_cross": {"norm": norm(state, f"{prefix}.encoder_attn_layer_norm")},
            "ffn": {"fc1": dense(state, f"{prefix}.fc1"), "fc2": dense(state, f"{prefix}.fc2")},
            "res_ffn": {"norm": norm(state, f"{prefix}.final_layer_norm")}}


def stacks(state: StateDict, encoder: str, decoder: str, layers: tuple[int, int], heads: tuple[int, int]) -> dict:
    """{'encoder': {layer_i: ...}, 'decoder': {layer_i: ...}} from the layers under the prefixes ``encoder`` and
    ``decoder`` (e.g. "encoder.layers", "model.decoder.layers")."""
    return {"encoder": {f"layer_{i}": encoder_layer(state, f"{encoder}.{i}", heads[0]) for i in range(layers[0])},
            "decoder": {f"layer_{i}": decoder_layer(state, f"{decoder}.{i}", heads[1]) for i in range(layers[1])}}
