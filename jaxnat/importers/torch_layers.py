"""fairseq's Transformer layers, whose parameter names Hugging Face's BART family (Marian) keeps, as jaxnat's, and
back (`stack_tensors`, for `--mode export`).

PyTorch's `Linear` holds its weight as [out, in] and computes x Wᵀ + b; flax's `Dense` holds a kernel [in, out].
jaxnat's attention projections split the model width into heads ([D, H, K] in, [H, K, D] out). Layer norms:
weight / bias -> scale / bias.
"""

from __future__ import annotations

import numpy as np

from jaxnat.errors import DataError

# model.activation -> transformers' activation_function, and back (their "silu" is jaxnat's swish too)
HF_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_new", "swish": "swish"}
FROM_HF_ACTIVATIONS = {**{hf: ours for ours, hf in HF_ACTIVATIONS.items()}, "silu": "swish"}


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
    """One decoder layer; one whose self-attention is Marian's SSRU (`ssru.W`, `ssru.Wf`: model.decoder_autoreg=ssru)
    or average attention (`aan.fc1`, `aan.fc2`, `aan.Wi`, `aan.Wf`: model.decoder_autoreg=aan) where the source holds
    those in its place."""
    if state.has(f"{prefix}.ssru.W.weight"):
        own = {"ssru": {"W": {"kernel": state.take(f"{prefix}.ssru.W.weight").T},
                        "Wf": dense(state, f"{prefix}.ssru.Wf")}}
    elif state.has(f"{prefix}.aan.Wi.weight"):
        own = {"aan": {"ffn": {"fc1": dense(state, f"{prefix}.aan.fc1"), "fc2": dense(state, f"{prefix}.aan.fc2")},
                       **{gate: dense(state, f"{prefix}.aan.{gate}") for gate in ("Wi", "Wf")}}}
    else:
        own = {"self_attn": attention(state, f"{prefix}.self_attn", heads)}
    return {**own, "res_self": {"norm": norm(state, f"{prefix}.self_attn_layer_norm")},
            "cross_attn": attention(state, f"{prefix}.encoder_attn", heads),
            "res_cross": {"norm": norm(state, f"{prefix}.encoder_attn_layer_norm")},
            "ffn": {"fc1": dense(state, f"{prefix}.fc1"), "fc2": dense(state, f"{prefix}.fc2")},
            "res_ffn": {"norm": norm(state, f"{prefix}.final_layer_norm")}}


def stacks(state: StateDict, encoder: str, decoder: str, layers: tuple[int, int], heads: tuple[int, int]) -> dict:
    """{'encoder': {layer_i: ...}, 'decoder': {layer_i: ...}} from the layers under the prefixes ``encoder`` and
    ``decoder`` (e.g. "encoder.layers", "model.decoder.layers")."""
    return {"encoder": {f"layer_{i}": encoder_layer(state, f"{encoder}.{i}", heads[0]) for i in range(layers[0])},
            "decoder": {f"layer_{i}": decoder_layer(state, f"{decoder}.{i}", heads[1]) for i in range(layers[1])}}


def _tensors(tree: dict, prefix: str, out: dict) -> None:
    """The inverse of `dense`, `norm` and `attention` over one layer's subtree, into ``out`` by name."""
    for name, value in tree.items():
        if "kernel" in value and np.ndim(value["kernel"]) == 3:  # an attention projection, [D, H, K] or [H, K, D]
            kernel = np.asarray(value["kernel"])
            torch = {"query": "q_proj", "key": "k_proj", "value": "v_proj", "out": "out_proj"}[name]
            d = kernel.shape[-1] if name == "out" else kernel.shape[0]
            out[f"{prefix}.{torch}.weight"] = (kernel.reshape(-1, d) if name == "out" else kernel.reshape(d, -1)).T
            out[f"{prefix}.{torch}.bias"] = np.asarray(value["bias"]).reshape(-1)
        elif "kernel" in value:
            out[f"{prefix}.{name}.weight"] = np.asarray(value["kernel"]).T
            if "bias" in value:  # (an SSRU's W has none)
                out[f"{prefix}.{name}.bias"] = value["bias"]
        else:
            out[f"{prefix}.weight"], out[f"{prefix}.bias"] = value["scale"], value["bias"]


# jaxnat's sublayer -> fairseq's name, per layer (the norms: the residual blocks around each sublayer)
ENCODER_NAMES = {"self_attn": "self_attn", "res_attn": "self_attn_layer_norm", "res_ffn": "final_layer_norm"}
DECODER_NAMES = {"self_attn": "self_attn", "res_self": "self_attn_layer_norm", "cross_attn": "encoder_attn",
                 "res_cross": "encoder_attn_layer_norm", "res_ffn": "final_layer_norm"}


def stack_tensors(params: dict, encoder: str, decoder: str) -> dict:
    """The inverse of `stacks`: jaxnat's {'encoder': {layer_i}, 'decoder': {layer_i}} as {fairseq's name: array}
    under the prefixes ``encoder`` and ``decoder``."""
    out = {}
    for stack, prefix, names in (("encoder", encoder, ENCODER_NAMES), ("decoder", decoder, DECODER_NAMES)):
        for layer, tree in params[stack].items():
            if not layer.startswith("layer_"):
                continue
            at = f"{prefix}.{layer[len('layer_'):]}"
            for sub, value in tree.items():
                if sub == "ffn":
                    _tensors(value, at, out)
                elif sub in ("ssru", "aan"):  # a recurrent layer in the self-attention's place (`decoder_layer`)
                    _tensors({**value.get("ffn", {}), **{k: v for k, v in value.items() if k != "ffn"}},
                             f"{at}.{sub}", out)
                elif sub.startswith("res_"):
                    _tensors({"norm": value["norm"]}, f"{at}.{names[sub]}", out)
                else:
                    _tensors(value, f"{at}.{names[sub]}", out)
    return {k: np.asarray(v, np.float32) for k, v in out.items()}
