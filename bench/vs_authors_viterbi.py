"""jaxnat's Viterbi decodings of a DA-Transformer under the authors' convention beside the authors' own
`inference_viterbi` (their fairseq plugin, thu-coai/DA-Transformer), on a trained run's graphs: identical outputs.

    python bench/vs_authors_viterbi.py --run runs/dat-m30k --plugin ../DA-Transformer \
        --config.data.dir=../shared/data/multi30k [--sentences 1000] [--batch 32]

jaxnat decodes the first test split's sources through the run's translator (`dat.decode=path_viterbi` and
`viterbi`, `dat.viterbi_convention=authors`, the run's `dat.viterbi_beta` and λ). The run's model computes the
graphs of the same sources in batches of --batch, with each inner vertex's reserved tokens (PAD, BOS, EOS, …) at
−1e9, since jaxnat's inner vertices never emit them and theirs read every token's argmax; their `viterbi` and
`jointviterbi` decode those in a worker under .refenv/bin/python (torch, fairseq 0.12.2 and the plugin; on the CPU,
their length penalty's `.cuda` made the identity). Compared: the tokens fairseq prints (BOS, EOS and PAD dropped,
repeats removed by both). Their length cap is int(2 · n / λ) inner vertices with n their batch's graph size,
jaxnat's the same of each sentence's own graph (theirs at batch 1: `--batch 1` compares sentences alone).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from jaxnat.config import apply_override, parse_overrides, workdir_config  # noqa: E402
from jaxnat.data.sources import load_corpus  # noqa: E402
from jaxnat.data.vocab import PAD_ID  # noqa: E402
from jaxnat.errors import run_script  # noqa: E402
from jaxnat.provenance import machine  # noqa: E402
from jaxnat.restore import load_translator  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vs_dag_search import printed, source_batches  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STRATEGIES = {"viterbi": "path_viterbi", "jointviterbi": "viterbi"}  # theirs -> dat.decode
WORKER = """
import json, sys, types, numpy as np, torch
import fairseq  # the environment's (patched for Python 3.11), before the plugin's checkout, which holds its own
sys.path.append(sys.argv[3])
from fs_plugins.models.glat_decomposed_with_link import GlatDecomposedLink
torch.Tensor.cuda = lambda self, *args, **kwargs: self
arrays, meta = np.load(sys.argv[1]), json.loads(sys.argv[2])
out = {}
for strategy in ("viterbi", "jointviterbi"):
    model = types.SimpleNamespace(
        args=types.SimpleNamespace(decode_strategy=strategy, decode_upsample_scale=meta["upsample"],
                                   decode_viterbibeta=meta["beta"]),
        tgt_dict=types.SimpleNamespace(pad_index=meta["pad"]))
    out[strategy] = []
    for k in range(meta["batches"]):
        n = torch.from_numpy(arrays[f"n{k}"]).long()
        size = int(n.max())
        links = torch.from_numpy(arrays[f"links{k}"][:, :size, :size].copy())
        logp = torch.from_numpy(arrays[f"logp{k}"][:, :size].copy())
        tokens, _ = GlatDecomposedLink.inference_viterbi(model, links, logp, n)
        out[strategy] += tokens.tolist()
print(json.dumps(out))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a trained DA-Transformer workdir")
    parser.add_argument("--plugin", required=True, help="a checkout of thu-coai/DA-Transformer (its fs_plugins)")
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--refenv", default=os.path.join(ROOT, ".refenv"))
    args, overrides = parser.parse_known_args()
    if min(args.sentences, args.batch) < 1:
        sys.exit("error: --sentences and --batch must be at least 1")
    if not os.path.isdir(os.path.join(args.plugin, "fs_plugins")):
        sys.exit(f"error: {args.plugin} holds no fs_plugins (a checkout of thu-coai/DA-Transformer)")
    import jax
    import jax.numpy as jnp

    from jaxnat.models.dat.model import allowed_tokens

    config = workdir_config(args.run)
    for key, value in parse_overrides(overrides):
        apply_override(config, key, value)
    if config.model.name != "dat":
        sys.exit(f"error: {args.run} is a {config.model.name} run, not a DA-Transformer")
    corpus = load_corpus(config.data)
    split = [s for s in corpus if s not in ("train", "valid")][0]
    srcs = corpus[split][0][:args.sentences]
    ours = {}
    for decode in STRATEGIES.values():
        config.dat.decode, config.dat.viterbi_convention = decode, "authors"
        translator = load_translator(config, args.run)
        ids, _ = translator.encode(srcs)
        ours[decode] = [printed(np.asarray(r["tokens"]))
                        for r in translator.translate_ids(ids, beam_size=1, batch_size=args.batch)]
    upsample = config.dat.decode_upsample or config.dat.upsample
    decoder = translator.spec.module.clone(graph_upsample=upsample)

    @jax.jit
    def graphs(params, src):
        logits, links, n = decoder.apply(params, src)
        logp = jax.nn.log_softmax(logits)
        vertex = jnp.arange(logp.shape[1])[None]
        inner = (vertex > 0) & (vertex < (n - 1)[:, None])
        return jnp.where(inner[..., None] & ~allowed_tokens(logp.shape[-1]), -1e9, logp), links, n

    arrays = {}
    for k, src in enumerate(source_batches(ids, args.batch)):
        for name, a in zip(("logp", "links", "n"), graphs(translator.params, jnp.asarray(src))):
            arrays[f"{name}{k}"] = np.asarray(a)
    python = os.path.join(args.refenv, "bin", "python")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "graphs.npz")
        np.savez(path, **arrays)
        meta = dict(batches=len(arrays) // 3, upsample=upsample, beta=config.dat.viterbi_beta, pad=PAD_ID)
        done = subprocess.run([python, "-c", WORKER, path, json.dumps(meta), os.path.abspath(args.plugin)],
                              capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"error: their decoding failed under {python}: {done.stderr.strip().splitlines()[-1]}")
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"| their decode_strategy ({split}, {len(srcs)} sentences, batch {args.batch}, output capacity "
          f"{config.eval.length_cap_ratio} × the source) | jaxnat's | identical outputs |")
    print("|---|---|---|")
    for strategy, decode in STRATEGIES.items():
        same = sum(a == printed(b) for a, b in zip(ours[decode], theirs[strategy]))
        print(f"| {strategy} | dat.decode={decode}, dat.viterbi_convention=authors | {same}/{len(srcs)} |")
    print(machine())


if __name__ == "__main__":
    run_script(main)
