"""Decoding side by side with fairseq 0.12.2 on the same weights: batch-1 latency and batch-64 throughput of AR
greedy and beam-4 search, lexically constrained beam search, LevT (10 passes forced), CMLM mask-predict (10 passes)
and a one-pass NAT, each jaxnat row beside fairseq's on the same sentences under the same length limits.

    D=/tmp/vs-fairseq
    # (a) in the reference environment (tools/reference_env.sh): subword-nmt BPE codes and dictionaries learned on
    #     Multi30k's training text; four fairseq models with random weights, built and saved by fairseq itself at the
    #     Multi30k sizes (d 256, 3+3 layers, FFN 1024, 4 heads): a `transformer` (own dictionary per side) and a
    #     `cmlm_transformer`, `nonautoregressive_transformer` and `levenshtein_transformer` (`translation_lev`, one
    #     joined dictionary); and the sentences: --groups blocks of 64 of one source length, with 1-2 reference words
    #     each as constraints (batch 64), and --batch1-sentences of them (batch 1)
    .refenv/bin/python bench/vs_fairseq.py make --data-dir ../shared/data/multi30k --out $D
    # (b) each imported into a jaxnat workdir ($D/jaxnat/<model>) with --mode import
    python bench/vs_fairseq.py import --out $D
    # (c) agreement only: every row decoded once by both, the share of identical outputs
    python bench/vs_fairseq.py check --out $D [--cores 1] [--rows ...]
    # (d) agreement, then the timed pairs and the table
    python bench/vs_fairseq.py run --out $D --cores 1 --pairs 3
    # the DA-Transformer beside its authors' fairseq plugin (a checkout of thu-coai/DA-Transformer): make with
    #     --dat-plugin DIR too (a `glat_decomposed_link` in $D/lev/dat.pt), then the row `dat`
    python bench/vs_fairseq.py run --out $D --cores 1 --pairs 5 --rows dat --dat-plugin DIR

How `run` measures. One process per tool, both pinned to the same cores (--cores N: the last N of this process's
CPUs, set with sched_setaffinity before JAX or torch start, which every thread of both inherits): jaxnat in this
process, fairseq in a worker under .refenv/bin/python that loads its models once and answers one request at a time
over a pipe, so only one of the two computes at any moment. Threads: torch.set_num_threads(N) (and OMP/MKL_NUM_THREADS
N); XLA's CPU client sizes its Eigen pool from the affinity mask (N threads). Each (row, batch) is decoded once by
both first: that pass compiles jaxnat's programs (or reads them from jaxnat's persistent compilation cache,
JAXNAT_COMPILATION_CACHE) and warms fairseq up; its seconds are reported apart, and its outputs are the agreement
figures. Then --pairs rounds, each timing every (row, batch) as a pair, fairseq then jaxnat; the figures are the
medians over the pairs, and a ratio is the median of the pairs' own ratios. Each side times the same span: the
sentences' ids in, the output ids out, batching included (fairseq: `build_dataset_for_inference`, its collater and
`task.inference_step`, constraints packed beforehand as fairseq-interactive packs them before its timer; jaxnat:
`Translator.translate_ids`, sources and constraints encoded beforehand, its process's allocator set as jaxnat's
command line sets it, `jaxnat.host_memory`). Tokenizing and detokenizing (sacremoses and
subword-nmt on both sides) are outside both spans.

The rows (`ROWS`): AR greedy and beam 4 (max_len_a 1.2, max_len_b 10), jaxnat under fairseq's search rules
(`eval.search_rules=fairseq`: the same function, the same outputs) and beam 4 also under its own (exact stopping);
constrained beam 4 with each sentence's constraints in the given order (fairseq `--constraints ordered`), jaxnat's
port of fairseq's search and its own VDBA/DBA (`eval.constraint_order=given`); LevT 10 passes forced (fairseq
`--iter-decode-max-iter 9 --iter-decode-force-max-iter`, its N means N + 1 passes; jaxnat `levt.max_iter=9`,
`eval.run_all_iterations=true`); CMLM mask-predict, 10 passes forced, length beam 1 (fairseq's recipe's
`--iter-decode-max-iter 9`, forced so that no candidate stops early on either side; jaxnat
`cmlm.mask_predict_iter=10`, `cmlm.length_beam=1`); NAT, one pass, length beam 1 (fairseq
`--iter-decode-max-iter 0`); AR beam 4 with each output's alignment (fairseq `--print-alignment hard`, its
SequenceGeneratorWithAlignment, which reads the search's attention and extracts every beam's; jaxnat
`eval.alignment=pieces`, one teacher-forced pass over the best outputs, `Translator.alignments`), outputs and pairs
compared. The length-predicting and edit models decode under `eval.search_rules=fairseq`
(`jaxnat/decoding/mask_predict_fairseq.py`; LevT's refinement is fairseq's under either rule).

The sentences: fairseq limits a batch's outputs by its padded source width, jaxnat under fairseq's rules by the
batch's longest source, under its own by each sentence's length: blocks of one source length make them the same.
The weights are random, every parameter redrawn (the AR model's by tools/make_import_fixtures.py's `perturb`, the
others' by `redraw`), peaked enough that near ties are rare; the length-predicting and edit models also get what a
random model lacks to decode more than degenerate outputs (CMLM and NAT `trained_like`: padding rows zero, special
tokens' rows scaled down, the length head leaning towards about the source length; LevT `shape_levt`: a first pass
that writes about a sentence, then few edits). On the same weights both compute the same function, so both do the
same work.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import io
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
from typing import NamedTuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC, TGT = "en", "de"
MAX_LEN_A, MAX_LEN_B = 1.2, 10
WORKLOADS = {"b1": 1, "b64": 64}  # workload name: batch size


class Model(NamedTuple):
    arch: str
    task: str
    options: tuple[str, ...]


# the NAT models share all embeddings over one joined dictionary, as fairseq's NAT recipes do, and are pre-norm: a
# random post-norm decoder washes its positions out (every position then predicts the same token)
NAT_OPTIONS = ("--share-all-embeddings", "--encoder-normalize-before", "--decoder-normalize-before")
# fairseq's models, each saved as $out/<dir>/<name>.pt with that directory's dictionaries and BPE codes (`translation`
# models read a dictionary per side, `translation_lev` ones the joined one); LevT's heads all read the last of the 3
# decoder layers (early exits 3,3,3)
MODELS = {
    "ar": Model("transformer", "translation", ("--share-decoder-input-output-embed",)),
    # a second AR model of the same architecture and dictionaries, other weights: the ensemble rows' other member
    "ar2": Model("transformer", "translation", ("--share-decoder-input-output-embed",)),
    "cmlm": Model("cmlm_transformer", "translation_lev", NAT_OPTIONS + ("--pred-length-offset",)),
    "nat": Model("nonautoregressive_transformer", "translation_lev", NAT_OPTIONS + ("--pred-length-offset",)),
    "levt": Model("levenshtein_transformer", "translation_lev", NAT_OPTIONS + ("--early-exit", "3,3,3")),
    # the DA-Transformer authors' plugin (--dat-plugin): its recipe's graph (λ 8, sources without BOS), pre-norm, an
    # output projection of its own (shaped by `dat_trained_like`)
    "dat": Model("glat_decomposed_link_6e6d512", "translation_dat_task",
                 NAT_OPTIONS[1:] + ("--upsample-scale", "8", "--decode-upsample-scale", "8")),
}
PLUGIN_MODELS = {"dat"}  # made and decoded only with --dat-plugin


def model_dir(out: str, name: str) -> str:
    return os.path.join(out, "ar" if MODELS[name].task == "translation" else "lev")


class Row(NamedTuple):
    label: str
    model: str
    fairseq: dict  # cfg.generation settings of fairseq's generator
    jaxnat: tuple[str, ...]  # config overrides of jaxnat's workdir
    beam: int = 1
    constrained: bool = False
    members: tuple[str, ...] = ()  # the other models of an ensemble (fairseq --path a.pt:b.pt, jaxnat eval.ensemble)
    score: bool = False  # the references scored (fairseq-generate --score-reference, jaxnat --mode score)
    # each output's alignment too (fairseq-generate --print-alignment hard, jaxnat eval.alignment=pieces)
    align: bool = False


AR_FS, AR_OWN = ("eval.search_rules=fairseq",), ("eval.search_rules=jaxnat",)
ORDERED = dict(beam=4, constraints="ordered")
ROWS = {
    "greedy": Row("AR greedy", "ar", dict(beam=1), AR_FS),
    "beam4": Row("AR beam 4", "ar", dict(beam=4), AR_FS, beam=4),
    "beam4-own": Row("AR beam 4, jaxnat's rules", "ar", dict(beam=4), AR_OWN, beam=4),
    "cons": Row("constrained beam 4, fairseq's search", "ar", ORDERED, AR_FS + ("eval.constraint_order=given",),
                beam=4, constrained=True),
    "cons-own": Row("constrained beam 4, jaxnat's VDBA/DBA", "ar", ORDERED,
                    AR_OWN + ("eval.constraint_order=given",), beam=4, constrained=True),
    "levt": Row("LevT, 10 passes forced", "levt", dict(iter_decode_max_iter=9, iter_decode_force_max_iter=True),
                ("eval.search_rules=fairseq", "levt.max_iter=9", "eval.run_all_iterations=true")),
    "cmlm": Row("CMLM mask-predict, 10 passes", "cmlm",
                dict(iter_decode_max_iter=9, iter_decode_force_max_iter=True, iter_decode_with_beam=1),
                ("eval.search_rules=fairseq", "cmlm.mask_predict_iter=10", "cmlm.length_beam=1",
                 "eval.run_all_iterations=true")),
    "nat": Row("NAT, one pass", "nat", dict(iter_decode_max_iter=0, iter_decode_with_beam=1),
               ("eval.search_rules=fairseq", "nat.length_beam=1")),
    "dat": Row("DA-Transformer lookahead (the authors' plugin)", "dat", {}, ()),
    "ensemble": Row("AR beam 4, an ensemble of two", "ar", dict(beam=4), AR_FS, beam=4, members=("ar2",)),
    "score": Row("AR scoring the references", "ar", {}, AR_FS, score=True),
    "align": Row("AR beam 4 with alignments", "ar", dict(beam=4, print_alignment="hard"), AR_FS, beam=4, align=True),
}
DEFAULT_ROWS = [r for r in ROWS if ROWS[r].model not in PLUGIN_MODELS]


def read_gz(path: str) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def pick_constraints(ref: str, rng: random.Random) -> list[str]:
    """1 or 2 words of the reference (letters only, 3+ characters, each used once), in the reference's order."""
    words = list(dict.fromkeys(w for w in ref.split() if re.fullmatch(r"[^\W\d_]{3,}", w)))
    k = min(len(words), rng.choice((1, 2)))
    return [words[i] for i in sorted(rng.sample(range(len(words)), k))]


# ---------------------------------------------------------------- (a) make: under .refenv/bin/python


def text_pipeline(data_dir: str, out: str, merges: int):
    """Moses tokens of the training text (fairseq's moses settings), joint subword-nmt codes, and a function from a
    line to its pieces; returns (codes path, pieces of the tokenized training text per language, that function)."""
    from sacremoses import MosesTokenizer
    from subword_nmt.apply_bpe import BPE
    from subword_nmt.learn_bpe import learn_bpe

    moses = {lang: MosesTokenizer(lang=lang) for lang in (SRC, TGT)}

    def tokenize(line: str, lang: str) -> str:
        return moses[lang].tokenize(line, return_str=True, escape=True, aggressive_dash_splits=True)

    tok = {lang: [tokenize(s, lang) for s in read_gz(os.path.join(data_dir, f"train.{lang}.gz"))]
           for lang in (SRC, TGT)}
    codes = os.path.join(out, "bpecodes")
    with open(codes, "w", encoding="utf-8") as f:
        learn_bpe(io.StringIO("\n".join(tok[SRC] + tok[TGT]) + "\n"), f, merges)
    with open(codes, encoding="utf-8") as f:
        bpe = BPE(f)
    pieces = {lang: [bpe.process_line(line) for line in lines] for lang, lines in tok.items()}
    return codes, pieces, lambda line, lang: bpe.process_line(tokenize(line, lang))


def write_dictionaries(pieces: dict, out: str, codes: str) -> None:
    """ar/: a dictionary per side; lev/: one over both (fairseq-preprocess --joined-dictionary); padding factor 8
    as fairseq-preprocess writes them; each directory with a copy of the codes, where the importer looks for them."""
    from fairseq.data import Dictionary

    for sub, joined in (("ar", False), ("lev", True)):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
        shutil.copy(codes, os.path.join(out, sub, "bpecodes"))
        both = Dictionary()
        for lang in (SRC, TGT):
            d = both if joined else Dictionary()
            for line in pieces[lang]:
                for w in line.split():
                    d.add_symbol(w)
            if not joined:
                d.finalize(padding_factor=8)
                d.save(os.path.join(out, sub, f"dict.{lang}.txt"))
        if joined:
            both.finalize(padding_factor=8)
            for lang in (SRC, TGT):
                both.save(os.path.join(out, sub, f"dict.{lang}.txt"))


def build_model(out: str, name: str, args, examples: tuple[list[str], list[str]]) -> str:
    """fairseq's model ``name`` as fairseq-train builds it with every parameter redrawn (the AR model by
    tools/make_import_fixtures.py's `perturb`, the others by `redraw`), the NAT models given what a trained one has
    to decode (CMLM and NAT `trained_like`, LevT `shape_levt`, DA-Transformer `dat_trained_like`, fed with
    ``examples``: pieces of training pairs),
    saved as fairseq saves checkpoints."""
    import torch

    sys.path.insert(0, os.path.join(ROOT, "tools"))
    from make_import_fixtures import (dat_trained_like, fairseq_model, perturb, save_fairseq, shape_dat_links,
                                      trained_like)

    m, where = MODELS[name], model_dir(out, name)
    torch.manual_seed(args.seed)
    d, f, h, n = str(args.dim), str(args.ffn), str(args.heads), str(args.layers)
    argv = [where, "--task", m.task, "-s", SRC, "-t", TGT, "--arch", m.arch,
            "--encoder-layers", n, "--decoder-layers", n, "--encoder-embed-dim", d, "--decoder-embed-dim", d,
            "--encoder-ffn-embed-dim", f, "--decoder-ffn-embed-dim", f, "--encoder-attention-heads", h,
            "--decoder-attention-heads", h, *m.options, "--bpe", "subword_nmt",
            "--bpe-codes", os.path.join(where, "bpecodes"), "--tokenizer", "moses", "--optimizer", "adam",
            "--lr", "0.0005", "--max-tokens", "4096"]
    task, cfg, model = fairseq_model(argv)
    model.eval()  # no dropout in the features the NAT models' shaping reads
    ar = m.task == "translation"
    criterion = "CrossEntropyCriterion" if ar else {"dat": "NATDAGLoss"}.get(name, "NatLoss")
    if ar:
        perturb(model, seed=args.seed + list(MODELS).index(name))  # ar2: other weights
    else:
        from fairseq.data import data_utils

        redraw(model, seed=args.seed)
        d_src, d_tgt = task.source_dictionary, task.target_dictionary
        bos = [] if name == "dat" else [torch.tensor([d_src.bos()])]  # the DA-Transformer task's sources: no BOS
        src = [torch.cat([*bos, d_src.encode_line(s, add_if_not_exist=False).long()]) for s in examples[0]]
        tgt = [torch.cat([*bos, d_tgt.encode_line(t, add_if_not_exist=False).long()]) for t in examples[1]]
        src_tokens = data_utils.collate_tokens(src, d_src.pad(), left_pad=True)
        src_lengths, tgt_tokens = torch.tensor([len(s) for s in src]), data_utils.collate_tokens(tgt, d_tgt.pad())
        if name == "levt":
            shape_levt(model, src_tokens, src_lengths, tgt_tokens)
        elif name == "dat":
            with torch.no_grad():
                enc = model.forward_encoder([src_tokens, src_lengths])
                dat_trained_like(model, enc, model.initialize_output_tokens(enc, src_tokens).output_tokens, d_tgt)
                shape_dat_links(model, step=8)
        else:
            trained_like(model, name, src_tokens, src_lengths, tgt_tokens)
    path = os.path.join(where, f"{name}.pt")
    save_fairseq(cfg, model, path, criterion=criterion)
    return path


def redraw(model, seed: int) -> None:
    """Every parameter of a NAT model drawn anew: linear layers at their usual scale, N(0, 1/fan_in), the token
    embeddings N(0, 0.3²) (peaked output distributions, so that rounding does not decide an argmax), layer norms'
    scales 1 + N(0, 0.1²), biases N(0, 0.1²). With `perturb`'s N(0, 0.3²) everywhere a random NAT decoder loses its
    positions: every position predicts the same token with nearly the same score, and the two tools' rounding then
    decides which positions mask-predict masks again (and LevT empties its canvas at every pass)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if "layer_norm" in name:
                p.copy_((1.0 + 0.1 * noise) if name.endswith("weight") else 0.1 * noise)
            elif name.endswith("bias"):
                p.copy_(0.1 * noise)
            elif "embed_tokens" in name or p.dim() != 2:
                p.copy_(0.3 * noise)
            else:
                p.copy_(noise / p.shape[1] ** 0.5)


# LevT's shaping (`shape_levt`): the first pass's placeholders, their spread, the margins of later insertions and of
# deletions (in units of the random heads' logit spread, about 1), chosen by decoding the inputs with fairseq
# (`levt_passes`): first canvases of about 13 tokens, then edits in 16%, 2%, 1%, 1% of the sentences at passes 2-5
# (at 3.0 a few rows grew far past the length cap; at 5.0 nothing changed after pass 2)
LEVT_FIRST, LEVT_FIRST_SPREAD, LEVT_INSERT_MARGIN, LEVT_DELETE_MARGIN = 13, 3.0, 4.5, 4.5


def shape_levt(model, src_tokens, src_lengths, tgt_tokens) -> None:
    """A random LevT made to edit as a trained one does, so that its canvases are as wide (about the source length)
    and its heads as busy: the first pass writes about a sentence into [BOS, EOS], later passes delete and insert
    seldom. The placeholder head becomes s0(c)·(a·g) + s1(c)·(b·g) + its random rows: g a slot's feature pair, a and
    b the dual basis of the mean pairs of the first canvas [BOS, EOS] (ḡ0) and of the references' slots (ḡ1) (a·ḡ0 =
    b·ḡ1 = 1, a·ḡ1 = b·ḡ0 = 0), s0 a bowl around LEVT_FIRST classes, s1 one around class 0; the deletion head
    deletes where its random rows beat a margin along the mean token feature. As `trained_like`: the padding row
    zero, the rows of <s>, </s> and <unk> at 0.05× (a random model predicts them everywhere)."""
    import torch

    dec = model.decoder
    with torch.no_grad():
        emb = dec.embed_tokens
        emb.weight[emb.padding_idx].zero_()
        for special in (dec.bos, dec.eos, dec.unk):
            emb.weight[special] *= 0.05
        enc = model.forward_encoder([src_tokens, src_lengths])

        def features(tokens, exit_, layers):
            return dec.extract_features(tokens, encoder_out=enc, early_exit=exit_, layers=layers)[0]

        start = torch.tensor([[dec.bos, dec.eos]]).expand(src_tokens.size(0), 2)
        f0 = features(start, dec.early_exit[1], dec.layers_msk)
        f1 = features(tgt_tokens, dec.early_exit[1], dec.layers_msk)
        slots = (tgt_tokens[:, :-1] != dec.padding_idx) & (tgt_tokens[:, 1:] != dec.padding_idx)
        means = torch.stack([torch.cat([f0[:, 0], f0[:, 1]], 1).mean(0),
                             torch.cat([f1[:, :-1], f1[:, 1:]], 2)[slots].mean(0)])
        a, b = torch.linalg.solve(means @ means.T, means)
        c = torch.arange(dec.embed_mask_ins.weight.shape[0], dtype=torch.float32)
        s0 = -torch.clamp(((c - LEVT_FIRST) / LEVT_FIRST_SPREAD) ** 2, max=16.0) * LEVT_INSERT_MARGIN
        s1 = -torch.clamp(c ** 2, max=16.0) * LEVT_INSERT_MARGIN
        dec.embed_mask_ins.weight += s0[:, None] * a[None] + s1[:, None] * b[None]
        tokens = features(tgt_tokens, dec.early_exit[0], dec.layers_del)[tgt_tokens != dec.padding_idx].mean(0)
        dec.embed_word_del.weight[1] -= LEVT_DELETE_MARGIN * tokens / tokens.dot(tokens)


def write_inputs(data_dir: str, out: str, encode, args) -> None:
    """inputs.json: {"b64": [{"src", "ref", "constraints"}, ...], "b1": [...]}. The batch-64 workload: --groups
    blocks of 64 sentences, each of one length in pieces (the most frequent lengths of --splits, first sentences
    first); the batch-1 workload: the first --batch1-sentences // --groups of each block."""
    src, ref = [], []
    for split in args.splits.split(","):
        src += read_gz(os.path.join(data_dir, f"{split}.{SRC}.gz"))
        ref += read_gz(os.path.join(data_dir, f"{split}.{TGT}.gz"))
    lengths = [len(encode(s, SRC).split()) for s in src]
    common = sorted(set(lengths), key=lambda n: (-lengths.count(n), n))[:args.groups]
    blocks = [[i for i, n in enumerate(lengths) if n == length][:64] for length in sorted(common)]
    rng = random.Random(args.seed)
    rows = {i: {"src": src[i], "ref": ref[i], "constraints": pick_constraints(ref[i], rng)} for b in blocks for i in b}
    inputs = {"b64": [rows[i] for b in blocks for i in b],
              "b1": [rows[i] for b in blocks for i in b[:args.batch1_sentences // args.groups]]}
    with open(os.path.join(out, "inputs.json"), "w", encoding="utf-8") as f:
        json.dump(inputs, f, ensure_ascii=False, indent=0)
    print(f"batch-64 workload: {len(blocks)} blocks of {[len(b) for b in blocks]} sentences of {sorted(common)} "
          f"pieces; batch-1 workload: {len(inputs['b1'])} sentences")


def make(args) -> int:
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    codes, pieces, encode = text_pipeline(args.data_dir, args.out, args.merges)
    write_dictionaries(pieces, args.out, codes)
    write_inputs(args.data_dir, args.out, encode, args)
    examples = (pieces[SRC][:64], pieces[TGT][:64])
    if args.dat_plugin:
        load_plugin(args.dat_plugin)
    for name in MODELS:
        if name not in PLUGIN_MODELS or args.dat_plugin:
            print(f"wrote {build_model(args.out, name, args, examples)}")
    levt_passes(args.out)
    print(f"made {args.out} in {time.time() - t0:.0f} s")
    return 0


def levt_passes(out: str) -> None:
    """How the shaped LevT edits the batch-64 sentences, pass by pass, in fairseq (its generator's forward_decoder
    with the generator's length cap): the canvases' median and largest length, and the share of sentences that the
    pass changed."""
    import torch
    from fairseq import checkpoint_utils
    from fairseq.hub_utils import GeneratorHubInterface

    where = model_dir(out, "levt")
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task([os.path.join(where, "levt.pt")],
                                                                      arg_overrides={"data": where})
    model, hub = models[0].eval(), GeneratorHubInterface(cfg, task, models)
    with open(os.path.join(out, "inputs.json"), encoding="utf-8") as f:
        tokens = [hub.encode(s["src"]) for s in json.load(f)["b64"]]
    data = task.build_dataset_for_inference(tokens, [len(t) for t in tokens])
    net = data.collater([data[i] for i in range(len(tokens))])["net_input"]
    with torch.no_grad():
        enc = model.forward_encoder([net["src_tokens"], net["src_lengths"]])
        state = model.initialize_output_tokens(enc, net["src_tokens"])
        for step in range(10):
            before = state.output_tokens
            state = model.forward_decoder(state._replace(step=step, max_step=10), enc, max_ratio=2)
            width = max(before.size(1), state.output_tokens.size(1))
            a, b = (torch.nn.functional.pad(x, (0, width - x.size(1)), value=model.pad) for x in (before,
                                                                                               state.output_tokens))
            lengths = state.output_tokens.ne(model.pad).sum(1) - 2
            print(f"LevT pass {step + 1}: length median {lengths.median().item()}, max {lengths.max().item()}; "
                  f"{(a != b).any(1).float().mean().item():.0%} of the sentences changed")


# ---------------------------------------------------------------- (b) import


def load_plugin(directory: str) -> None:
    """Registers the DA-Transformer plugin's model and task with fairseq (a checkout of thu-coai/DA-Transformer)."""
    sys.path.insert(0, os.path.abspath(directory))
    import fs_plugins  # noqa: F401


def import_models(args) -> int:
    for name in MODELS:
        workdir = os.path.join(args.out, "jaxnat", name)
        if name in PLUGIN_MODELS and not os.path.exists(os.path.join(model_dir(args.out, name), name + ".pt")):
            continue  # made without --dat-plugin
        if os.path.exists(workdir):
            print(f"{workdir} exists: kept")
            continue
        cmd = [sys.executable, "-m", "jaxnat.main", "--mode", "import", "--from",
               f"fairseq:{os.path.join(model_dir(args.out, name), name + '.pt')}", "--workdir", workdir]
        if subprocess.call(cmd, cwd=ROOT):
            return 1
    return 0


# ---------------------------------------------------------------- the fairseq worker: under .refenv/bin/python


def fairseq_worker(args) -> int:
    """Loads every fairseq model once, encodes the workloads, then answers JSON lines on stdin
    ({"row", "workload", "sentences"}) with JSON lines ({"seconds", "hyps", "text"}) on the original stdout
    (fairseq's own prints go to stderr)."""
    import torch
    from fairseq import checkpoint_utils
    from fairseq.hub_utils import GeneratorHubInterface
    from fairseq.token_generation_constraints import pack_constraints

    reply = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    if args.dat_plugin:
        load_plugin(args.dat_plugin)
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    with open(os.path.join(args.out, "inputs.json"), encoding="utf-8") as f:
        inputs = json.load(f)
    hubs = {}  # (model, members): the hub of the model, or of the ensemble (fairseq's --path a.pt:b.pt)
    for names in {(ROWS[r].model, *ROWS[r].members) for r in args.rows}:
        where = model_dir(args.out, names[0])
        models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
            [os.path.join(where, f"{name}.pt") for name in names], arg_overrides={"data": where})
        for m in models:
            m.eval()
        hubs[names] = GeneratorHubInterface(cfg, task, models)
    generators = {}
    for r in args.rows:
        row, hub = ROWS[r], hubs[ROWS[r].model, *ROWS[r].members]
        if row.score:  # fairseq-generate --score-reference's generator
            from fairseq.sequence_scorer import SequenceScorer

            generators[r] = SequenceScorer(hub.tgt_dict)
            continue
        gen = hub.cfg.generation
        gen.max_len_a, gen.max_len_b, gen.beam, gen.constraints = MAX_LEN_A, MAX_LEN_B, 1, None
        gen.iter_decode_max_iter, gen.iter_decode_force_max_iter, gen.iter_decode_with_beam = 10, False, 1
        gen.iter_decode_eos_penalty, gen.print_alignment = 0.0, None
        for key, value in row.fairseq.items():
            setattr(gen, key, value)
        generators[r] = hub.task.build_generator(hub.models, gen)

    def encode_target(hub, phrase: str):  # as fairseq-interactive encodes a constraint: no EOS
        return hub.tgt_dict.encode_line(hub.apply_bpe(hub.tokenize(phrase)), append_eos=False, add_if_not_exist=False)

    def encode_reference(hub, ref: str):  # as fairseq-preprocess encodes a target: with EOS
        return hub.tgt_dict.encode_line(hub.apply_bpe(hub.tokenize(ref)), add_if_not_exist=False).long()

    encoded = {}  # (model, workload, constrained) -> per sentence (source ids, constraint ids or None)
    print(json.dumps({"ready": True}), file=reply, flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        row, workload, n = ROWS[req["row"]], req["workload"], req["sentences"]
        hub, generator, batch = hubs[row.model, *row.members], generators[req["row"]], WORKLOADS[workload]
        if row.score:
            key = (row.model, workload, "references")
            if key not in encoded:
                encoded[key] = [(hub.encode(s["src"]), encode_reference(hub, s["ref"])) for s in inputs[workload]]
            seconds, scores = score_references(hub, generator, encoded[key][:n], batch)
            print(json.dumps({"seconds": seconds, "hyps": scores, "text": scores}), file=reply, flush=True)
            continue
        key = (row.model, workload, row.constrained)
        if key not in encoded:
            encoded[key] = [(hub.encode(s["src"]), [encode_target(hub, c) for c in s["constraints"]]
                             if row.constrained else None) for s in inputs[workload]]
        sentences = encoded[key][:n]
        # each batch as fairseq-interactive makes it: the sources' ids and its packed constraints
        batches = [(sentences[i:i + batch], pack_constraints([c for _, c in sentences[i:i + batch]])
                    if row.constrained else None) for i in range(0, n, batch)]
        out = [None] * n
        t0 = time.perf_counter()
        for start, (rows, constraints) in zip(range(0, n, batch), batches):
            tokens = [s for s, _ in rows]
            data = hub.task.build_dataset_for_inference(tokens, [len(t) for t in tokens], constraints=constraints)
            sample = data.collater([data[i] for i in range(len(tokens))])
            hyps = hub.task.inference_step(generator, hub.models, sample, constraints=sample.get("constraints"))
            for i, h in zip(sample["id"].tolist(), hyps):  # the collater sorts by length
                out[start + i] = h[0]["tokens"], h[0]["alignment"]
        seconds = time.perf_counter() - t0
        out, alignments = zip(*out)
        print(json.dumps({"seconds": seconds, "hyps": [hub.string(t) + (f" ||| {pharaoh(a)}" if row.align else "")
                                                       for t, a in zip(out, alignments)],
                          "text": [hub.decode(t) for t in out]}, ensure_ascii=False), file=reply, flush=True)
    return 0


def pharaoh(pairs) -> str:
    """fairseq's pairs as `jaxnat.decoding.alignment.pharaoh` writes them (this side runs in the reference
    environment, without jaxnat)."""
    return " ".join(f"{i}-{j}" for i, j in pairs)


def score_references(hub, scorer, pairs: list, batch: int) -> tuple[float, list[float]]:
    """fairseq-generate --score-reference on (source ids, reference ids) pairs, ``batch`` at a time: (seconds, each
    reference's score, its log-probability over its tokens). Each batch collated as fairseq's LanguagePairDataset
    collates one (sources left-padded, the decoder's input the target after EOS)."""
    import torch
    from fairseq.data import data_utils

    pad, eos = hub.tgt_dict.pad(), hub.tgt_dict.eos()
    scores = []
    t0 = time.perf_counter()
    for start in range(0, len(pairs), batch):
        src, tgt = zip(*pairs[start:start + batch])
        sample = {"net_input": {"src_tokens": data_utils.collate_tokens(src, pad, eos, left_pad=True),
                                "src_lengths": torch.tensor([len(x) for x in src]),
                                "prev_output_tokens": data_utils.collate_tokens(tgt, pad, eos,
                                                                                move_eos_to_beginning=True)},
                  "target": data_utils.collate_tokens(tgt, pad, eos)}
        with torch.no_grad():
            scores += [float(hypos[0]["score"]) for hypos in scorer.generate(hub.models, sample)]
    return time.perf_counter() - t0, scores


# ---------------------------------------------------------------- (c, d) check and run: jaxnat's venv


def pin(cores: int | None) -> list[int]:
    """Restricts this process (and the worker and every thread either starts) to the last ``cores`` CPUs it may
    use, before JAX or torch start their thread pools; sets the thread counts the worker's libraries read."""
    cpus = sorted(os.sched_getaffinity(0))
    if cores is not None and cores < 1:
        sys.exit(f"error: --cores {cores}: give at least 1")
    if cores:
        if cores > len(cpus):
            sys.exit(f"error: --cores {cores}: only {len(cpus)} CPUs available")
        cpus = cpus[-cores:]
        os.sched_setaffinity(0, cpus)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(len(cpus))
    return cpus


class Fairseq:
    """The fairseq worker: a .refenv/bin/python process holding the models; `decode` asks it for one pass."""

    def __init__(self, out: str, rows: list[str], threads: int, plugin: str | None):
        python = os.path.join(ROOT, ".refenv", "bin", "python")
        self.log = open(os.path.join(out, "fairseq-worker.log"), "w")
        cmd = [python, os.path.abspath(__file__), "worker", "--out", out, "--threads", str(threads), "--rows", *rows,
               *(["--dat-plugin", os.path.abspath(plugin)] if plugin else [])]
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     encoding="utf-8", cwd=ROOT)
        self._read()
        self.load_seconds = time.perf_counter() - t0

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            self.log.flush()
            tail = open(self.log.name).read()[-3000:]
            sys.exit(f"the fairseq worker stopped; the end of {self.log.name}:\n{tail}")
        return json.loads(line)

    def decode(self, row: str, workload: str, sentences: int) -> dict:
        self.proc.stdin.write(json.dumps({"row": row, "workload": workload, "sentences": sentences}) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


class Jaxnat:
    """The jaxnat side: a `Translator` per row (its workdir and overrides), the workloads encoded ahead."""

    def __init__(self, out: str, rows: list[str], inputs: dict):
        from jaxnat.config import build_config
        from jaxnat.restore import load_translator

        t0 = time.perf_counter()
        self.translators, self.encoded = {}, {}
        for r in rows:
            row = ROWS[r]
            workdir = os.path.join(out, "jaxnat", row.model)
            members = ",".join(os.path.join(out, "jaxnat", m) for m in row.members)
            overrides = [f"--config.{o}" for o in (f"eval.max_len_a={MAX_LEN_A}", f"eval.max_len_b={MAX_LEN_B}",
                                                   *row.jaxnat, *([f"eval.ensemble={members}"] if members else []))]
            t = load_translator(build_config(os.path.join(workdir, "config.json"), overrides), workdir)
            self.translators[r] = t
            for workload, sentences in inputs.items():
                src, _ = t.encode([s["src"] for s in sentences])
                starts = t.starts(None, [s["constraints"] for s in sentences], [True] * len(sentences)) \
                    if row.constrained else None
                if row.score:  # the references' pieces in place of the starts
                    starts = t.tokenizer.encode([s["ref"] for s in sentences], "tgt")
                self.encoded[r, workload] = src, starts
        self.load_seconds = time.perf_counter() - t0

    def decode(self, row: str, workload: str, sentences: int) -> dict:
        from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID
        from jaxnat.decoding.translator import output_row

        t, (src, starts) = self.translators[row], self.encoded[row, workload]
        if ROWS[row].score:
            t0 = time.perf_counter()
            scores = [o["score"] for o in t.score_ids(src[:sentences], starts[:sentences], WORKLOADS[workload])]
            return {"seconds": time.perf_counter() - t0, "hyps": scores, "text": scores}
        t0 = time.perf_counter()
        outs = t.translate_ids(src[:sentences], ROWS[row].beam, WORKLOADS[workload],
                               starts[:sentences] if starts else None)
        aligned = [{}] * sentences
        if ROWS[row].align:  # the outputs' attention run and read (`Translator.alignments`)
            rows = [[int(i) for i in output_row(o["tokens"])] for o in outs]
            aligned = t.alignments("pieces", [""] * sentences, src[:sentences], rows, [0] * sentences, None,
                                   WORKLOADS[workload])
        seconds = time.perf_counter() - t0
        hyps, text = [], []
        for o, a in zip(outs, aligned):
            ids = [int(i) for i in o["tokens"]]
            ids = ids[:ids.index(EOS_ID)] if EOS_ID in ids else ids
            # fairseq's dictionary writes <unk> for its unknown id (its NAT models' mask too)
            hyps.append(" ".join("<unk>" if i == UNK_ID else t.tokenizer.id_to_piece(i, "tgt")
                                 for i in ids if i not in (PAD_ID, BOS_ID)) + (f" ||| {a['alignment']}" if a else ""))
            text.append(t.tokenizer.decode(ids, "tgt"))
        return {"seconds": seconds, "hyps": hyps, "text": text}


def found(hyp: str, phrases: list[str], whole_words: bool) -> list[int]:
    """For each phrase, in the given order, where it starts in hyp after the previous one ends (-1: not found);
    with ``whole_words`` only as whole words (no letter or digit glued on either side)."""
    at, where = 0, []
    for p in phrases:
        m = re.compile(rf"(?<!\w){re.escape(p)}(?!\w)" if whole_words else re.escape(p)).search(hyp, at)
        where.append(m.start() if m else -1)
        at = m.end() if m else at
    return where


def constraints_met(texts: list[str], phrases: list[list[str]]) -> str:
    """How many constraints appear, in the given order, as pieces produced and as whole words."""
    total, parts = sum(map(len, phrases)), []
    for label, whole in (("produced", False), ("as whole words", True)):
        hits = [found(h, c, whole) for h, c in zip(texts, phrases)]
        parts.append(f"{label} {sum(x >= 0 for w in hits for x in w)}/{total}")
    return ", ".join(parts)


def machine_line(cpus: list[int]) -> str:
    from jaxnat import provenance

    return (f"{provenance.machine()}; both pinned to CPU {','.join(map(str, cpus))} of {os.cpu_count()}, "
            f"{len(cpus)} thread(s) each")


def run(args) -> int:
    """Agreement pass (each row and batch decoded once by both: warm-up and compilation), then --pairs timed rounds,
    fairseq then jaxnat for each (row, batch); prints the agreement, the timings and the required lines, and writes
    them to $out/results-<UTC time>.json."""
    out = os.path.abspath(args.out)
    inputs_file(out)
    if args.pairs < 0 or any(n is not None and n < 1 for n in (args.b1, args.b64_blocks)):
        sys.exit("error: --pairs must be at least 0, --b1 and --b64-blocks at least 1")
    rows = args.rows
    if any(ROWS[r].model in PLUGIN_MODELS for r in rows) and not args.dat_plugin:
        sys.exit("error: the dat row decodes with the DA-Transformer authors' plugin: --dat-plugin DIR")
    args.load = os.getloadavg()  # other users' load on the machine, reported with the table
    cpus = pin(args.cores)
    with open(os.path.join(out, "inputs.json"), encoding="utf-8") as f:
        inputs = json.load(f)
    sizes = {"b1": min(args.b1 or len(inputs["b1"]), len(inputs["b1"])),
             "b64": min(64 * args.b64_blocks if args.b64_blocks else len(inputs["b64"]), len(inputs["b64"]))}
    inputs = {w: inputs[w][:n] for w, n in sizes.items()}
    sys.path.insert(0, ROOT)
    from jaxnat.host_memory import keep_freed_memory

    keep_freed_memory()  # the allocator's settings of every CPU run of `python -m jaxnat.main`, translate included
    if not args.no_cache:
        from jaxnat.main import enable_compilation_cache

        enable_compilation_cache()
    fairseq = Fairseq(out, rows, len(cpus), args.dat_plugin)
    jaxnat = Jaxnat(out, rows, inputs)
    print(machine_line(cpus))
    print(f"loading: fairseq worker {fairseq.load_seconds:.1f} s, jaxnat {jaxnat.load_seconds:.1f} s; "
          f"sentences: batch 1 {sizes['b1']}, batch 64 {sizes['b64']}", flush=True)
    cells = [(r, w) for r in rows for w in WORKLOADS]
    first, agree = {}, {}
    for r, w in cells:  # the agreement pass: warm-up and compilation
        fs, jx = fairseq.decode(r, w, sizes[w]), jaxnat.decode(r, w, sizes[w])
        first[r, w] = {"fairseq": fs["seconds"], "jaxnat": jx["seconds"]}
        same = sum(map(agrees(r), fs["hyps"], jx["hyps"]))
        if ROWS[r].score:
            gap = max(abs(a - b) for a, b in zip(fs["hyps"], jx["hyps"]))
            print(f"  {ROWS[r].label}, batch {WORKLOADS[w]}: scores from {min(fs['hyps']):.2f} to "
                  f"{max(fs['hyps']):.2f}, largest difference {gap:.2g}", file=sys.stderr)
        if ROWS[r].align:  # of the outputs that differ, those whose tokens agree (their alignments do not)
            tokens = sum(a != b and a.split(" ||| ")[0] == b.split(" ||| ")[0] for a, b in zip(fs["hyps"], jx["hyps"]))
            print(f"  {ROWS[r].label}, batch {WORKLOADS[w]}: {tokens} of the {sizes[w] - same} outputs that differ "
                  f"differ in their alignments only", file=sys.stderr)
        agree[r, w] = {"identical": same, "of": sizes[w], "fairseq": fs, "jaxnat": jx}
        print(f"  first pass {ROWS[r].label}, batch {WORKLOADS[w]}: fairseq {fs['seconds']:.1f} s, jaxnat "
              f"{jx['seconds']:.1f} s; identical outputs {same}/{sizes[w]}", file=sys.stderr, flush=True)
    times = {cell: {"fairseq": [], "jaxnat": []} for cell in cells}
    for p in range(args.pairs):
        for r, w in cells:
            for side, tool in (("fairseq", fairseq), ("jaxnat", jaxnat)):
                res = tool.decode(r, w, sizes[w])
                times[r, w][side].append(res["seconds"])
                if res["hyps"] != agree[r, w][side]["hyps"]:
                    print(f"  warning: {side}'s outputs of {r} {w} changed between passes", file=sys.stderr)
            print(f"  pair {p + 1}/{args.pairs} {ROWS[r].label}, batch {WORKLOADS[w]}: fairseq "
                  f"{times[r, w]['fairseq'][-1]:.2f} s, jaxnat {times[r, w]['jaxnat'][-1]:.2f} s",
                  file=sys.stderr, flush=True)
    fairseq.close()
    report(args, out, cpus, sizes, rows, first, agree, times, inputs)
    return 0


def agrees(row: str):
    """Whether two outputs of ``row`` agree: the same text; a score within 0.1%. The random model's reference tokens
    have log-probabilities of about -20 (logits up to 50), where float32's rounding moves a score by up to 3e-4 of its
    size: jaxnat's own scores of the batch-64 workload's first 64 sentences at batch 1 and at batch 64 differ by up
    to 0.006 (on scores of -16 to -24)."""
    if ROWS[row].score:
        return lambda a, b: abs(a - b) <= 1e-3 * max(1.0, abs(a))
    return lambda a, b: a == b


def inputs_file(out: str) -> str:
    """OUT/inputs.json, which `make` writes (a one-line error without it)."""
    path = os.path.join(out, "inputs.json")
    if not os.path.isfile(path):
        sys.exit(f"error: {path} not found: run `make --out {out}` (and `import`) first")
    return path


def speed(seconds: float, workload: str, n: int) -> float:
    """Batch 1: ms a sentence; batch 64: sentences a second."""
    return 1000.0 * seconds / n if workload == "b1" else n / seconds


def report(args, out, cpus, sizes, rows, first, agree, times, inputs) -> None:
    when = datetime.datetime.now(datetime.timezone.utc)
    print(f"\n{machine_line(cpus)}; {when:%Y-%m-%d %H:%M} UTC; load average {args.load[0]:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end")
    print("\nAgreement (first pass): outputs identical to fairseq's, piece for piece (scores: within 0.1%)\n")
    print("| row | batch 1 | batch 64 | median output length, pieces (batch 64) | constraints found in order "
          "(fairseq / jaxnat, batch 64) |")
    print("|---|---|---|---|---|")
    for r in rows:
        cells = [f"{agree[r, w]['identical']}/{agree[r, w]['of']}" for w in WORKLOADS]
        cells.append("– (scores)" if ROWS[r].score else " / ".join(
            f"{statistics.median(len(h.split(' ||| ')[0].split()) for h in agree[r, 'b64'][side]['hyps']):g}"
            for side in ("fairseq", "jaxnat")))
        met = "–"
        if ROWS[r].constrained:
            phrases = [s["constraints"] for s in inputs["b64"]]
            met = " / ".join(constraints_met(agree[r, "b64"][side]["text"], phrases) for side in ("fairseq", "jaxnat"))
        print(f"| {ROWS[r].label} | {' | '.join(cells)} | {met} |")
    print("\nFirst pass (fairseq's warm-up; jaxnat's compilation or compilation-cache reads), seconds: " + "; ".join(
        f"{ROWS[r].label} b{WORKLOADS[w]} {c['fairseq']:.1f} / {c['jaxnat']:.1f}" for (r, w), c in first.items()))
    if args.pairs:
        medians, ratios = {}, {}
        print(f"\nMedian of {args.pairs} pairs (fairseq, then jaxnat); batch 1: ms a sentence over {sizes['b1']} "
              f"sentences (ratio jaxnat/fairseq latency); batch 64: sentences a second over {sizes['b64']} "
              f"(ratio jaxnat/fairseq throughput); ratio: median of the pairs' ratios (min–max)\n")
        print("| row | batch | fairseq | jaxnat | ratio |")
        print("|---|---|---|---|---|")
        for (r, w), t in times.items():
            f_, j_ = ([speed(s, w, sizes[w]) for s in t[side]] for side in ("fairseq", "jaxnat"))
            pair = [b / a for a, b in zip(f_, j_)]
            medians[r, w] = (statistics.median(f_), statistics.median(j_))
            ratios[r, w] = (statistics.median(pair), min(pair), max(pair))
            print(f"| {ROWS[r].label} | {WORKLOADS[w]} | {medians[r, w][0]:.1f} | {medians[r, w][1]:.1f} | "
                  f"{ratios[r, w][0]:.2f} ({ratios[r, w][1]:.2f}–{ratios[r, w][2]:.2f}) |")
        print()
        required(rows, times, sizes, ratios)
    results = {"when": f"{when:%Y-%m-%d %H:%M} UTC", "machine": machine_line(cpus), "sizes": sizes,
               "load": [args.load[0], os.getloadavg()[0]],
               "pairs": args.pairs, "first": {f"{r} {w}": c for (r, w), c in first.items()},
               "identical": {f"{r} {w}": [a["identical"], a["of"]] for (r, w), a in agree.items()},
               "seconds": {f"{r} {w}": t for (r, w), t in times.items()}}
    path = os.path.join(out, f"results-{when:%Y%m%d-%H%M%S}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
    print(f"\n(written to {path})")


def required(rows, times, sizes, ratios) -> None:
    """The issue's required lines: every row at least fairseq's throughput (at batch 1: its latency at most
    fairseq's); LevT's and mask-predict's batch-1 latency at most half of fairseq's; beam 4's batch-64 throughput at
    least 0.3× greedy's in the same run (each pair's beam 4 over the same pair's greedy)."""
    def holds(ok: bool) -> str:
        return "holds" if ok else "DOES NOT HOLD"

    slow = [f"{ROWS[r].label} b{WORKLOADS[w]} ({ratios[r, w][0]:.2f})" for r, w in ratios
            if (ratios[r, w][0] > 1.0 if w == "b1" else ratios[r, w][0] < 1.0)]
    print(f"- every row at least fairseq's throughput: {holds(not slow)}" + (f"; short: {', '.join(slow)}" if slow
                                                                               else ""))
    for r in ("levt", "cmlm"):
        if (r, "b1") in ratios:
            print(f"- {ROWS[r].label}, batch-1 latency at most half of fairseq's: {holds(ratios[r, 'b1'][0] <= 0.5)} "
                  f"({ratios[r, 'b1'][0]:.2f}×)")
    if "greedy" in rows:
        for beam in ("beam4", "beam4-own"):
            if beam in rows:
                for side in ("jaxnat", "fairseq"):
                    share = statistics.median(g / b for g, b in zip(times["greedy", "b64"][side],
                                                                     times[beam, "b64"][side]))
                    mark = f": {holds(share >= 0.3)}" if side == "jaxnat" else " (for reference)"
                    print(f"- {side}'s {ROWS[beam].label} / greedy throughput at batch 64: {share:.2f}×{mark}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("make", help="(reference env) the fairseq models, BPE codes, dictionaries, the inputs")
    p.add_argument("--data-dir", required=True, help="Multi30k's directory (<split>.{en,de}.gz)")
    p.add_argument("--out", required=True)
    p.add_argument("--splits", default="test_2016_flickr,val", help="where the sentences come from, in order")
    p.add_argument("--groups", type=int, default=4, help="the batch-64 workload: this many batches of 64")
    p.add_argument("--batch1-sentences", type=int, default=64, help="the batch-1 workload (from every block)")
    p.add_argument("--merges", type=int, default=10000)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--ffn", type=int, default=1024)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dat-plugin", metavar="DIR", help="a checkout of thu-coai/DA-Transformer: also a DA-Transformer")
    p.set_defaults(fn=make)
    p = sub.add_parser("import", help="python -m jaxnat.main --mode import of each model into OUT/jaxnat/<model>")
    p.add_argument("--out", required=True)
    p.set_defaults(fn=import_models)
    for name, pairs, fn in (("check", 0, run), ("run", 3, run)):
        p = sub.add_parser(name, help="agreement" + (", then the timed pairs and the table" if pairs else " only"))
        p.add_argument("--out", required=True)
        p.add_argument("--rows", nargs="+", choices=list(ROWS), default=DEFAULT_ROWS)
        p.add_argument("--dat-plugin", metavar="DIR", help="the DA-Transformer authors' plugin, for the dat row")
        p.add_argument("--cores", type=int, help="pin both tools to the last N CPUs (default: all, unpinned)")
        p.add_argument("--pairs", type=int, default=pairs, help="timed rounds (fairseq, then jaxnat, per row)")
        p.add_argument("--b1", type=int, help="the first N sentences of the batch-1 workload (default: all)")
        p.add_argument("--b64-blocks", type=int, help="the first N blocks of 64 of the batch-64 workload")
        p.add_argument("--no-cache", action="store_true", help="without jaxnat's persistent compilation cache")
        p.set_defaults(fn=fn)
    p = sub.add_parser("worker", help="(reference env; started by check/run) the fairseq side")
    p.add_argument("--out", required=True)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--rows", nargs="+", required=True)
    p.add_argument("--dat-plugin", metavar="DIR")
    p.set_defaults(fn=fairseq_worker)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.path.insert(0, ROOT)  # jaxnat.errors needs only the standard library: the reference env runs it too
    from jaxnat.errors import run_script

    run_script(main)
