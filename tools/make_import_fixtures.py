"""Makes tests/data/import/: tiny models with random weights in the real fairseq 0.12.2 and the real Hugging Face
`transformers`, written in their own file formats, and what those libraries compute with them, which
tests/test_import.py requires jaxnat's imported models to reproduce.

Run it in the reference environment (tools/reference_env.sh builds .refenv; torch, fairseq and transformers are
never jaxnat's dependencies):

    bash tools/reference_env.sh && .refenv/bin/python tools/make_import_fixtures.py --pymarian PYTHON

(PYTHON: a Python with pymarian 1.12.42, Marian itself, which the Marian `.npz` fixtures need; its own venv:
`python3 -m venv /tmp/pm && /tmp/pm/bin/pip install pymarian==1.12.42`. `--sockeye PYTHON`, a Python with Sockeye
3.1.34 and SentencePiece, writes the Sockeye fixtures: `python3 -m venv /tmp/sk && /tmp/sk/bin/pip install
sockeye==3.1.34 sentencepiece`, Sockeye pinning a torch older than fairseq's.)

It is deterministic (seeded): rerun, it rewrites the same files byte for byte, but for the `.pt` files, in which
torch writes a random serialization id or memory addresses as keys (their tensors are the same). Each fixture
directory holds the model as its library saves it and `expected.npz` + `expected.json`:
* fairseq/: `checkpoint_utils.torch_persistent_save` of a `transformer` (pre-norm encoder, post-norm decoder,
  learned positions in neither, shared embeddings: the options differ between the stacks on purpose), the same in
  torch's legacy format (model-legacy.pt), its dictionaries and subword-nmt BPE codes over Moses tokens (and the
  same merges as fastBPE codes), as fairseq's released models ship; fairseq's constrained outputs, n-best
  lists and outputs with --no-repeat-ngram-size 2; a second checkpoint of the architecture (model2.pt) and the
  two's outputs as fairseq's ensemble (--path model.pt:model2.pt); --score-reference's scores of the references,
  by the one model and the ensemble;
* fairseq-nat/: a `cmlm_transformer`, `nonautoregressive_transformer` (also one with --src-embedding-copy) and
  `levenshtein_transformer`
  (`fairseq_nat_fixtures`), and with `--dat-plugin DIR` (a checkout of thu-coai/DA-Transformer) the authors'
  DA-Transformer, `dat.pt` (`dat_fixture`);
* marian/: `MarianMTModel.save_pretrained` (safetensors) with `MarianTokenizer.save_pretrained`'s files
  (`source.spm`, `target.spm`, `vocab.json`);
* marian-npz/: a checkpoint as Marian writes it, with an OPUS-MT release's files, and what MarianMTModel computes
  once Hugging Face's converter has read it (`marian_npz_fixture`); marian-npz-separate/ the same with a
  vocabulary per side, and hf/ in it the converted model as `save_pretrained` writes it; marian-ssru/ (SSRU decoder
  layers) and marian-prenorm/ (pre-norm layers), which that converter does not take; each `.npz` fixture's
  expected_marian.json: what Marian itself computes (`marian_expected_by_marian`);
* nllb/: an NLLB-200 model's directory (`nllb_fixture`), with outputs forced to start with a language token;
  m2m100/ and mbart50/: an M2M-100 model's and an mBART-50 translation model's (`m2m100_fixture`,
  `mbart50_fixture`), the same way; fsmt/: a fairseq WMT19 model as Hugging Face ports it (`fsmt_fixture`),
  fsmt-tied/ one with its three tables tied;
* sockeye/, sockeye-postnorm/ and sockeye-ssru/: Sockeye 3 model directories as `sockeye-train` writes them, with the
  SentencePiece models that cut their data (`sockeye_fixture`), and expected_sockeye.json, what Sockeye computes.
Every parameter is drawn anew (biases and layer norms too), so that a convention missed anywhere shows.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import shutil
import sys
import tempfile

import numpy as np
import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "import")
SRC = ["a man rides a red bike .", "two dogs play in the snow .", "the woman in a blue coat reads a book .",
       "a child eats an apple in the park ."]
TGT = ["ein mann fährt ein rotes fahrrad .", "zwei hunde spielen im schnee .",
       "die frau in einem blauen mantel liest ein buch .", "ein kind isst einen apfel im park ."]
CORPUS_EN = SRC + ["a dog runs .", "the man reads .", "a red coat .", "two children play .", "a woman eats ."] * 3
CORPUS_DE = TGT + ["ein hund rennt .", "der mann liest .", "ein roter mantel .", "zwei kinder spielen .",
                   "eine frau isst ."] * 3


def perturb(model: torch.nn.Module, seed: int) -> None:
    """Every trained parameter redrawn around its role: weights N(0, 0.3²), biases N(0, 0.1²), layer norms'
    scales 1 + N(0, 0.1²); embeddings' padding rows too (nothing is special-cased in a conversion). Frozen ones
    (Marian's sinusoidal tables, which its files do not hold) stay as the model computes them."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not p.requires_grad:
                continue
            noise = torch.randn(p.shape, generator=g)
            if "layer_norm" in name or "layernorm" in name:
                p.copy_((1.0 + 0.1 * noise) if name.endswith("weight") else 0.1 * noise)
            elif name.endswith("bias"):
                p.copy_(0.1 * noise)
            else:
                p.copy_(0.3 * noise)
        for name, b in model.named_buffers():
            if name.endswith("final_logits_bias"):
                b.copy_(0.5 * torch.randn(b.shape, generator=g))


def fairseq_model(argv: list[str]):
    """(task, cfg, model): what fairseq-train builds from the command line ``argv`` (the data directory first)."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))
    task = tasks.setup_task(cfg.task)
    return task, cfg, task.build_model(cfg.model)


def save_fairseq(cfg, model, path: str, criterion: str = "CrossEntropyCriterion") -> dict:
    """``model`` saved at ``path`` as fairseq-train saves a checkpoint (`checkpoint_utils.torch_persistent_save`,
    the state of update 0); returns that state."""
    from fairseq import checkpoint_utils
    from omegaconf import OmegaConf

    state = {"args": None, "cfg": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
             "model": model.state_dict(), "extra_state": {"train_iterator": {"epoch": 1}},
             "optimizer_history": [{"criterion_name": criterion, "optimizer_name": "FairseqAdam",
                                    "lr_scheduler_state": {"best": None}, "num_updates": 0}],
             "last_optimizer_state": None}
    checkpoint_utils.torch_persistent_save(state, path)
    return state


def fairseq_fixture(out: str) -> None:
    from fairseq.models.transformer import TransformerModel
    from sacremoses import MosesTokenizer
    from subword_nmt.learn_bpe import learn_bpe
    from subword_nmt.apply_bpe import BPE

    os.makedirs(out, exist_ok=True)
    # BPE codes over Moses tokens of both languages, then the dictionaries of the BPE'd text (fairseq-preprocess's)
    moses = {lang: MosesTokenizer(lang=lang) for lang in ("en", "de")}
    tok = {lang: [moses[lang].tokenize(s, return_str=True, escape=True, aggressive_dash_splits=True) for s in corpus]
           for lang, corpus in (("en", CORPUS_EN), ("de", CORPUS_DE))}
    codes = os.path.join(out, "bpecodes")
    with open(codes, "w", encoding="utf-8") as f:
        learn_bpe(io.StringIO("\n".join(tok["en"] + tok["de"]) + "\n"), f, 40)
    with open(codes, encoding="utf-8") as f:
        bpe = BPE(f)
    from fairseq.data import Dictionary

    for lang in ("en", "de"):
        d = Dictionary()
        for line in tok[lang]:
            for w in bpe.process_line(line).split():
                d.add_symbol(w)
        d.finalize(padding_factor=1)
        d.save(os.path.join(out, f"dict.{lang}.txt"))
    argv = [out, "--task", "translation", "-s", "en", "-t", "de", "--arch", "transformer",
            "--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
            "--encoder-ffn-embed-dim", "24", "--decoder-ffn-embed-dim", "24", "--encoder-attention-heads", "2",
            "--decoder-attention-heads", "2", "--encoder-normalize-before", "--share-decoder-input-output-embed",
            "--activation-fn", "gelu", "--max-source-positions", "64", "--max-target-positions", "64",
            "--bpe", "subword_nmt", "--bpe-codes", codes, "--tokenizer", "moses", "--optimizer", "adam",
            "--lr", "0.0005", "--max-tokens", "1000"]
    _, cfg, model = fairseq_model(argv)
    perturb(model, seed=1)
    model.eval()
    state = save_fairseq(cfg, model, os.path.join(out, "model.pt"))
    # the same checkpoint in torch.save's format before torch 1.6, as fairseq's released models of 2019 are
    torch.save(state, os.path.join(out, "model-legacy.pt"), _use_new_zipfile_serialization=False)
    # a second model of the architecture, other weights: the two as fairseq's ensemble (--path model.pt:model2.pt)
    perturb(model, seed=2)
    save_fairseq(cfg, model, os.path.join(out, "model2.pt"))
    # a model of another architecture over the same dictionaries (post-norm, its own sizes and depths): fairseq's
    # ensembles need one dictionary only (--path model.pt:model3.pt)
    other = [a for a in argv if a not in ("--encoder-normalize-before", "--share-decoder-input-output-embed")]
    for key, value in (("--encoder-layers", "1"), ("--decoder-layers", "3"), ("--encoder-embed-dim", "24"),
                       ("--decoder-embed-dim", "24"), ("--encoder-ffn-embed-dim", "40"),
                       ("--decoder-ffn-embed-dim", "40"), ("--encoder-attention-heads", "3"),
                       ("--decoder-attention-heads", "3"), ("--activation-fn", "relu")):
        other[other.index(key) + 1] = value
    _, cfg3, model3 = fairseq_model(other)
    perturb(model3, seed=3)
    model3.eval()
    save_fairseq(cfg3, model3, os.path.join(out, "model3.pt"))

    hub = TransformerModel.from_pretrained(out, checkpoint_file="model.pt", data_name_or_path=out, bpe="subword_nmt",
                                           bpe_codes=codes, tokenizer="moses")
    hub.eval()
    src = [hub.encode(s) for s in SRC]
    tgt = [hub.tgt_dict.encode_line(hub.apply_bpe(hub.tokenize(t)), add_if_not_exist=False, append_eos=True).long()
           for t in TGT]
    logp = teacher_forced_fairseq(hub.models[0], src, tgt, hub.tgt_dict)
    expected = {"src_ids": pad_ids(src, 1), "tgt_ids": pad_ids(tgt, 1), "logp": logp}
    outputs = {}
    for beam in (1, 4):
        hyps = hub.generate(src, beam=beam, max_len_a=1.2, max_len_b=10)
        outputs[f"beam{beam}"] = [h[0]["tokens"].tolist() for h in hyps]
        outputs[f"beam{beam}_score"] = [float(h[0]["score"]) for h in hyps]
        outputs[f"beam{beam}_text"] = [hub.decode(h[0]["tokens"]) for h in hyps]
    # fairseq's n-best lists (--nbest 4 with --beam 4: every finished hypothesis, best first)
    outputs["beam4_nbest_text"] = [[hub.decode(h["tokens"]) for h in hs] for hs in hyps]
    outputs["beam4_nbest_score"] = [[float(h["score"]) for h in hs] for hs in hyps]
    outputs.update(no_repeat_fairseq(hub, src))
    outputs.update(constrained_fairseq(hub, src))
    outputs.update(prefixed_fairseq(hub, src))
    # fairseq-generate --score-reference (its SequenceScorer) of the references, by the model and by the ensemble
    outputs["score_reference"] = score_reference(hub.models, src, tgt, hub.tgt_dict)
    ensemble = TransformerModel.from_pretrained(out, checkpoint_file="model.pt:model2.pt", data_name_or_path=out,
                                                bpe="subword_nmt", bpe_codes=codes, tokenizer="moses")
    ensemble.eval()
    assert len(ensemble.models) == 2
    outputs["ensemble_score_reference"] = score_reference(ensemble.models, src, tgt, hub.tgt_dict)
    for beam in (1, 4):
        hyps = ensemble.generate(src, beam=beam, max_len_a=1.2, max_len_b=10)
        outputs[f"ensemble_beam{beam}"] = [h[0]["tokens"].tolist() for h in hyps]
        outputs[f"ensemble_beam{beam}_score"] = [float(h[0]["score"]) for h in hyps]
    outputs.update(fairseq_alignments(hub, ensemble, src))
    # a transformer_align model (Garg et al. 2019): --print-alignment reads its first decoder layer's first head of
    # a pass without the causal mask (its alignment settings; without --full-context-alignment fairseq's generator
    # reads the search's last layer instead)
    arch = argv.index("--arch") + 1
    _, cfg_a, model_a = fairseq_model([*argv[:arch], "transformer_align", *argv[arch + 1:], "--alignment-layer", "0",
                                       "--alignment-heads", "1", "--full-context-alignment"])
    perturb(model_a, seed=4)
    model_a.eval()
    save_fairseq(cfg_a, model_a, os.path.join(out, "model-align.pt"))
    hub_a = TransformerModel.from_pretrained(out, checkpoint_file="model-align.pt", data_name_or_path=out,
                                             bpe="subword_nmt", bpe_codes=codes, tokenizer="moses")
    hub_a.eval()
    hyps = hub_a.generate(src, beam=4, max_len_a=1.2, max_len_b=10, print_alignment="hard", constraints=None)
    outputs["align_model_tokens"] = [h[0]["tokens"].tolist() for h in hyps]
    outputs["align_model_hard"] = [[list(map(int, pair)) for pair in h[0]["alignment"]] for h in hyps]
    mixed = TransformerModel.from_pretrained(out, checkpoint_file="model.pt:model3.pt", data_name_or_path=out,
                                             bpe="subword_nmt", bpe_codes=codes, tokenizer="moses")
    mixed.eval()
    outputs["mixed_score_reference"] = score_reference(mixed.models, src, tgt, hub.tgt_dict)
    for beam in (1, 4):
        hyps = mixed.generate(src, beam=beam, max_len_a=1.2, max_len_b=10, constraints=None)
        outputs[f"mixed_beam{beam}"] = [h[0]["tokens"].tolist() for h in hyps]
        outputs[f"mixed_beam{beam}_score"] = [float(h[0]["score"]) for h in hyps]
    outputs["src_pieces"] = [hub.apply_bpe(hub.tokenize(s)) for s in SRC]
    outputs["fastbpe_pieces"] = fastbpe_fixture(out, [hub.tokenize(s) for s in SRC])
    outputs["detok"] = [hub.decode(t) for t in tgt]
    write_expected(out, expected, outputs)


# fairseq's length-predicting and edit models beside the AR one (same dictionaries and BPE): arch, its own
# options, the generator's settings (max_iter N = N + 1 passes; beam = the length beam)
NAT_MODELS = {
    "cmlm": ("cmlm_transformer", ["--pred-length-offset"], dict(max_iter=9, beam_size=3)),
    "nat": ("nonautoregressive_transformer", [], dict(max_iter=0, beam_size=3)),
    "levt": ("levenshtein_transformer", ["--early-exit", "1,2,2", "--decoder-normalize-before",
                                         "--encoder-normalize-before"], dict(max_iter=9, beam_size=1)),
    # the decoder reads the source's embeddings, uniformly copied (its sources right-padded: fairseq's copy indexes
    # each row from position 0, so that in a left-padded batch a shorter row would copy its padding)
    "nat-copy": ("nonautoregressive_transformer", ["--src-embedding-copy"], dict(max_iter=0, beam_size=3)),
}


def fairseq_nat_fixtures(out: str) -> None:
    """fairseq-nat/: cmlm.pt, nat.pt, levt.pt and nat-copy.pt (NAT with --src-embedding-copy), `translation_lev`
    models sharing all embeddings over a joined dictionary (fairseq/'s BPE codes), and expected_<name>.npz/json: the
    heads' log-probabilities on given canvases and fairseq's generator's outputs."""
    from fairseq.data import data_utils
    from fairseq.iterative_refinement_generator import IterativeRefinementGenerator
    from sacremoses import MosesTokenizer
    from subword_nmt.apply_bpe import BPE

    from fairseq.data import Dictionary

    os.makedirs(out, exist_ok=True)
    shutil.copy(os.path.join(ROOT, "fairseq", "bpecodes"), os.path.join(out, "bpecodes"))
    with open(os.path.join(out, "bpecodes"), encoding="utf-8") as f:
        bpe = BPE(f)
    moses = {lang: MosesTokenizer(lang=lang) for lang in ("en", "de")}

    def pieces(text: str, lang: str) -> str:
        return bpe.process_line(moses[lang].tokenize(text, return_str=True, escape=True, aggressive_dash_splits=True))

    joined = Dictionary()  # fairseq-preprocess --joined-dictionary, as fairseq's NAT recipes share all embeddings
    for lang, corpus in (("en", CORPUS_EN), ("de", CORPUS_DE)):
        for line in corpus:
            for w in pieces(line, lang).split():
                joined.add_symbol(w)
    joined.finalize(padding_factor=8)
    for lang in ("en", "de"):
        joined.save(os.path.join(out, f"dict.{lang}.txt"))

    for seed, (name, (arch, extra, generation)) in enumerate(NAT_MODELS.items(), start=3):
        argv = [out, "--task", "translation_lev", "-s", "en", "-t", "de", "--arch", arch,
                "--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "16",
                "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "24", "--decoder-ffn-embed-dim", "24",
                "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
                "--share-all-embeddings", "--max-source-positions", "256",
                "--max-target-positions", "256", "--bpe", "subword_nmt", "--bpe-codes",
                os.path.join(out, "bpecodes"), "--tokenizer", "moses", "--optimizer", "adam", "--lr", "0.0005",
                "--max-tokens", "1000", *extra]
        task, cfg, model = fairseq_model(argv)
        perturb(model, seed=seed)
        model.eval()
        src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
        bos = torch.tensor([src_dict.bos()])
        src = [torch.cat([bos, src_dict.encode_line(pieces(s, "en"), add_if_not_exist=False).long()]) for s in SRC]
        tgt = [torch.cat([bos, tgt_dict.encode_line(pieces(t, "de"), add_if_not_exist=False).long()]) for t in TGT]
        src_tokens = data_utils.collate_tokens(src, src_dict.pad(), left_pad=name != "nat-copy")
        src_lengths = torch.tensor([len(s) for s in src])
        tgt_tokens = data_utils.collate_tokens(tgt, tgt_dict.pad(), left_pad=False)
        trained_like(model, name, src_tokens, src_lengths, tgt_tokens)
        save_fairseq(cfg, model, os.path.join(out, f"{name}.pt"), criterion="NatLoss")

        # canvases: the references with every other real token as <unk> (fairseq's mask and placeholder)
        canvas = [torch.where((torch.arange(len(t)) % 2 == 1) & (torch.arange(len(t)) < len(t) - 1),
                              torch.tensor(tgt_dict.unk()), t) for t in tgt]
        canvas = data_utils.collate_tokens(canvas, tgt_dict.pad(), left_pad=False)
        with torch.no_grad():
            enc = model.forward_encoder([src_tokens, src_lengths])
            arrays = {"src_ids": src_tokens.numpy(), "canvas_ids": canvas.numpy(), "tgt_ids": tgt_tokens.numpy()}
            if name == "levt":
                dec = model.decoder
                ref = arrays_t(arrays["tgt_ids"])
                heads = (("deletion", dec.forward_word_del, ref), ("placeholder", dec.forward_mask_ins, ref),
                         ("token", dec.forward_word_ins, canvas))
                for head, fn, tokens in heads:
                    arrays[f"{head}_logp"] = fn(normalize=True, encoder_out=enc, prev_output_tokens=tokens)[0].numpy()
            else:
                arrays["length_logp"] = model.decoder.forward_length(normalize=True, encoder_out=enc).numpy()
                arrays["token_logp"] = model.decoder(normalize=True, encoder_out=enc, prev_output_tokens=canvas).numpy()
            generator = IterativeRefinementGenerator(tgt_dict, models=[model], **generation)
            sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}
            hyps = generator.generate([model], sample)
        outputs = {"arch": arch, "generation": generation,
                   "tokens": [h[0]["tokens"].tolist() for h in hyps],
                   "score": [float(h[0]["score"]) for h in hyps], "steps": [int(h[0]["steps"]) for h in hyps]}
        write_expected(out, arrays, outputs, f"expected_{name}")


def dat_fixture(out: str, plugin: str) -> None:
    """fairseq-nat/dat.pt: the DA-Transformer authors' `glat_decomposed_link` (their fairseq plugin, read from a
    checkout of thu-coai/DA-Transformer at ``plugin``: its `fs_plugins`), set up as their README's recipe sets it
    (`translation_dat_task`, sources without BOS, `upsample_base=source_old`, learned positions, gelu, links from the
    states ⊕ learned positions; λ = 4, an output projection of its own here, lookahead's β 0.3), over
    fairseq-nat/'s dictionary; expected_dat.npz: each vertex's
    token log-probabilities and the links, as the plugin's `forward_decoder` computes them at decoding, and
    expected_dat.json its lookahead, greedy, Viterbi, joint Viterbi and beam search outputs."""
    from fairseq.data import data_utils
    from sacremoses import MosesTokenizer
    from subword_nmt.apply_bpe import BPE

    sys.path.insert(0, plugin)
    import fs_plugins  # noqa: F401  (registers the architecture and the task)

    with open(os.path.join(out, "bpecodes"), encoding="utf-8") as f:
        bpe = BPE(f)
    moses = MosesTokenizer(lang="en")
    argv = [out, "--task", "translation_dat_task", "-s", "en", "-t", "de", "--arch", "glat_decomposed_link_6e6d512",
            "--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "16",
            "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "24", "--decoder-ffn-embed-dim", "24",
            "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
            "--max-source-positions", "128", "--max-target-positions", "1024", "--upsample-scale", "4",
            "--upsample-base", "source_old", "--encoder-learned-pos", "--decoder-learned-pos", "--activation-fn",
            "gelu", "--decode-upsample-scale", "4", "--decode-beta", "0.3", "--links-feature", "feature:position",
            "--criterion", "nat_dag_loss", "--bpe", "subword_nmt", "--bpe-codes", os.path.join(out, "bpecodes"),
            "--tokenizer", "moses", "--optimizer", "adam", "--lr", "0.0005", "--max-tokens", "1000"]
    task, cfg, model = fairseq_model(argv)
    perturb(model, seed=9)
    model.eval()
    d = task.source_dictionary
    src = [d.encode_line(bpe.process_line(moses.tokenize(s, return_str=True, escape=True,
                                                          aggressive_dash_splits=True)), add_if_not_exist=False).long()
           for s in SRC]
    src_tokens = data_utils.collate_tokens(src, d.pad(), left_pad=False)
    src_lengths = torch.tensor([len(s) for s in src])
    with torch.no_grad():
        enc = model.forward_encoder([src_tokens, src_lengths])
        canvas = model.initialize_output_tokens(enc, src_tokens)
        dat_trained_like(model, enc, canvas.output_tokens, task.target_dictionary)
        shape_dat_links(model, step=4, sharpness=2.0, features=True)
        save_fairseq(cfg, model, os.path.join(out, "dat.pt"), criterion="NATDAGLoss")
        outputs = {"arch": "glat_decomposed_link"}
        for strategy in ("lookahead", "greedy"):
            model.args.decode_strategy = strategy
            tokens = model.forward_decoder(canvas, enc).output_tokens
            outputs[strategy] = [[t for t in row if t != d.pad()] for row in tokens.tolist()]
        graph = {}

        def keep(decoder_out, logits, links):  # what forward_decoder hands its decoding strategy
            graph.update(logits=logits.log_softmax(-1), links=links)
            return decoder_out

        model.inference = keep
        model.forward_decoder(canvas, enc)
        # their Viterbi decodings on those graphs, each sentence alone (their length cap reads the batch's graph: a
        # sentence's own at batch 1, which jaxnat takes), which the plugin runs on a GPU alone (`.cuda` on the length
        # penalty: the identity here; the links copied, as their first step adds to them in place); they leave BOS
        # and EOS out of their outputs, which the others keep
        length = canvas.output_tokens.ne(d.pad()).sum(-1)
        cuda = torch.Tensor.cuda
        torch.Tensor.cuda = lambda self, *args, **kwargs: self
        try:
            for strategy in ("viterbi", "jointviterbi"):
                model.args.decode_strategy = strategy
                outputs[strategy] = []
                for b, n in enumerate(length.tolist()):
                    tokens, _ = model.inference_viterbi(graph["links"][b:b + 1, :n, :n].clone(),
                                                        graph["logits"][b:b + 1, :n], length[b:b + 1])
                    outputs[strategy].append([d.bos(), *(t for t in tokens[0].tolist() if t != d.pad()), d.eos()])
        finally:
            torch.Tensor.cuda = cuda
        # their beam search on that graph, at beam 6, 2 prefixes a length: the DAG-Search extension (built into this
        # environment, docs/import.md) called as their inference_beamsearch calls it, in this process (the plugin
        # runs it in a worker process on a CPU, which would import fairseq afresh, unpatched)
        from fs_plugins.models.glat_decomposed_with_link import call_dag_search, init_beam_search
        from make_dag_search_fixture import candidates

        args = model.args
        init_beam_search(len(SRC), 6, int(args.decode_top_cand_n), model.decoder.max_positions(),
                         len(SRC) * model.decoder.max_positions(), 1, task.target_dictionary, None)
        pairs = candidates(graph["links"].numpy(), graph["logits"].numpy(), int(args.decode_top_cand_n),
                           args.decode_beta)
        length = canvas.output_tokens.ne(d.pad()).sum(-1).int().numpy()
        tokens, _ = call_dag_search(*pairs, length, args.decode_alpha, args.decode_gamma, 6, 2, args.decode_top_p,
                                    d.pad(), d.bos(), 0, 0, 0)
        outputs["beamsearch"] = [[t for t in row if t != d.pad()] for row in tokens.tolist()]
    arrays = {"src_ids": src_tokens.numpy(), "vertex_ids": canvas.output_tokens.numpy(),
              "vertex_logp": graph["logits"].numpy(), "links": graph["links"].numpy()}
    write_expected(out, arrays, outputs, "expected_dat")


def dat_trained_like(model, enc, vertices, tgt_dict) -> None:
    """What a random DA-Transformer lacks to decode as a trained one, given through its output projection alone:
    <s> the best token of each graph's first vertex and </s> of its last (their rows fitted, a logistic fit over
    the vertices' states, to a margin of 3 over every other row there and under the best row elsewhere), <pad>
    and <unk> never the best; the other rows redrawn orthogonal to the states' mean, so that what varies between
    vertices picks their tokens (a random model gives every vertex the same one), and scaled until the median
    vertex gives its best token a probability above 1/2 (a random model's are flat, and lookahead, which weighs
    them against the last vertex's sure </s>, then jumps to it at once)."""
    states, _ = model.decoder.extract_features(vertices, {"prev_output_tokens_segid": torch.ones_like(vertices)},
                                               encoder_out=enc)
    real = vertices != tgt_dict.pad()
    n = real.sum(1)
    ends = {tgt_dict.bos(): torch.zeros_like(real), tgt_dict.eos(): torch.zeros_like(real)}
    ends[tgt_dict.bos()][:, 0] = True
    ends[tgt_dict.eos()][torch.arange(len(n)), n - 1] = True
    features = states[real]
    mean = features.mean(0)
    weight = model.decoder.output_projection.weight
    weight -= (weight @ mean / mean.dot(mean))[:, None] * mean[None, :]
    specials = [tgt_dict.bos(), tgt_dict.pad(), tgt_dict.eos(), tgt_dict.unk()]
    weight[specials] = 0.0
    inner = ~(ends[tgt_dict.bos()] | ends[tgt_dict.eos()])[real]
    for _ in range(12):  # as sure of each vertex's token as a trained model: the median best token above 1/2
        if (features[inner] @ weight.T).log_softmax(-1).max(-1).values.median() > math.log(0.5):
            break
        weight *= 2.0
    best_other = (features @ weight.T).max(-1).values
    g = torch.Generator().manual_seed(9)
    for token, where in ends.items():
        w = (torch.randn(features.shape[1], generator=g) * 0.01).requires_grad_(True)
        opt = torch.optim.Adam([w], lr=0.1)
        target = where[real]
        with torch.enable_grad():
            for _ in range(2000):
                margin = features @ w - best_other
                loss = torch.nn.functional.softplus(torch.where(target, 3 - margin, margin + 3)).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
        weight[token] = w.detach()
    weight[tgt_dict.pad()] = weight[tgt_dict.unk()] = -3 * mean / mean.norm()
    best = (features @ weight.T).argmax(-1)
    assert all((best[where[real]] == token).all() for token, where in ends.items()), "an end vertex's best token"
    assert not any((best[inner] == t).any() for t in specials), "a special token inside a graph"


def shape_dat_links(model, step: int, sharpness: float = 4.0, features: bool = False) -> None:
    """A random DA-Transformer's links made to move as a trained one's do, about ``step`` vertices a token (λ: a
    path through a graph of λ · words vertices then emits about a word's pieces each): they read the learned link
    positions, pos_i = a · (cos ω_m i, sin ω_m i) over D/2 frequencies, keys k_j = pos_j and queries
    q_i = pos_{i+step} (each frequency's pair rotated by ω_m · step), so that every head's q_i · k_j =
    a² Σ_m cos(ω_m (j − i − step)) peaks at j = i + step; a² sets the peak's margin to about ``sharpness`` nats.
    The vertex states' part of the projections, their biases and the gate are zeroed, or with ``features`` kept
    as drawn (their noise on top)."""
    import torch

    dec = model.decoder
    rows, dim = dec.link_positional.weight.shape
    half = dim // 2
    omega = torch.linspace(2 * torch.pi / 200, 2 * torch.pi / 3, half)
    angles = (torch.arange(rows, dtype=torch.float32) - 2)[:, None] * omega[None]  # row 2 + i: vertex i
    chunk = dim // model.args.decoder_attention_heads
    amplitude = (sharpness * chunk ** 0.5 / (chunk / 2 * (1 - torch.cos(omega).mean()))) ** 0.5
    dec.link_positional.weight.copy_(amplitude * torch.cat([torch.cos(angles), torch.sin(angles)], 1))
    cos, sin = torch.cos(omega * step), torch.sin(omega * step)
    rotate = torch.zeros(dim, dim)  # pos_i -> pos_{i+step}: cos(x + y), sin(x + y) of each frequency
    idx = torch.arange(half)
    rotate[idx, idx], rotate[idx, idx + half] = cos, -sin
    rotate[idx + half, idx], rotate[idx + half, idx + half] = sin, cos
    for linear, pos_part in ((dec.query_linear, rotate), (dec.key_linear, torch.eye(dim))):
        if not features:
            linear.weight.zero_()
            linear.bias.zero_()
        linear.weight[:, dim:] = pos_part
    if not features:
        dec.gate_linear.weight.zero_()
        dec.gate_linear.bias.zero_()


def trained_like(model, name: str, src_tokens, src_lengths, tgt_tokens) -> None:
    """What a random NAT model lacks to decode anything but degenerate outputs, given as a trained one has it:
    its padding row zero (fairseq's Embedding never updates it); the rows of <s>, </s> and <unk> (the mask and
    placeholder), which a trained model rarely predicts inside a sentence, at 0.05× their draw (with all
    embeddings shared, a random model predicts them everywhere); and the classifiers that size the output (the
    length head; LevT's placeholder head) leaning towards plausible classes: row c moves by
    −min(((c − centre) / width)², 16) along the mean feature it reads, u = f̄ / ‖f̄‖², so that its logits move by
    about that (a random length head asks for empty or 255-token canvases). Every other weight stays as drawn."""
    def lean(weight, features, centre: float, width: float) -> None:
        mean = features.reshape(-1, features.shape[-1]).mean(0)
        classes = torch.arange(weight.shape[0], dtype=torch.float32)
        weight -= torch.clamp(((classes - centre) / width) ** 2, max=16.0)[:, None] * (mean / mean.dot(mean))[None, :]

    with torch.no_grad():
        emb = model.decoder.embed_tokens
        emb.weight[emb.padding_idx].zero_()
        for special in (model.decoder.bos, model.decoder.eos, model.decoder.unk):
            emb.weight[special] *= 0.05
        enc = model.forward_encoder([src_tokens, src_lengths])
        if name == "levt":
            features, _ = model.decoder.extract_features(tgt_tokens, encoder_out=enc,
                                                         early_exit=model.decoder.early_exit[1])
            pairs = torch.cat([features[:, :-1], features[:, 1:]], 2)
            lean(model.decoder.embed_mask_ins.weight, pairs, centre=4.0, width=2.0)
        else:
            pad_mask = enc["encoder_padding_mask"][0]
            feats = enc["encoder_out"][0].transpose(0, 1)[~pad_mask]
            offset = model.decoder.pred_length_offset
            lean(model.decoder.embed_length.weight, feats, centre=128 + 1 if offset else 12, width=3.0)


def arrays_t(ids: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(ids)).long()


# each sentence's constraints (target words), for fairseq's --constraints
CONSTRAINTS = [["fahrrad"], ["schnee", "zwei hunde"], ["buch", "frau", "mantel"], ["park", "ein kind"]]


def constrained_fairseq(hub, src) -> dict:
    """fairseq's constrained beam search (beam 4, `--constraints ordered` and `unordered`) on the sources, with
    `CONSTRAINTS` encoded as fairseq-interactive encodes them (tokenized, BPE, no EOS)."""
    from fairseq.data import data_utils
    from fairseq.token_generation_constraints import pack_constraints

    tgt_dict = hub.tgt_dict
    phrases = [[tgt_dict.encode_line(hub.apply_bpe(hub.tokenize(c)), append_eos=False, add_if_not_exist=False)
                for c in row] for row in CONSTRAINTS]
    sample = {"id": torch.arange(len(src)),
              "net_input": {"src_tokens": data_utils.collate_tokens(src, tgt_dict.pad(), left_pad=True),
                            "src_lengths": torch.tensor([len(s) for s in src])}}
    out = {"constraints": CONSTRAINTS}
    for order in ("ordered", "unordered"):
        gen_args = hub.cfg.generation
        gen_args.beam, gen_args.max_len_a, gen_args.max_len_b, gen_args.constraints = 4, 1.2, 10, order
        generator = hub.task.build_generator(hub.models, gen_args)
        with torch.no_grad():
            hyps = hub.task.inference_step(generator, hub.models, sample, constraints=pack_constraints(phrases))
        out[f"constrained_{order}"] = [h[0]["tokens"].tolist() for h in hyps]
        out[f"constrained_{order}_score"] = [float(h[0]["score"]) for h in hyps]
        out[f"constrained_{order}_nbest"] = [[h["tokens"].tolist() for h in hs] for hs in hyps]
        out[f"constrained_{order}_nbest_score"] = [[float(h["score"]) for h in hs] for hs in hyps]
    return out


# each sentence's start of its translation (whole words of its reference, of several lengths), for --prefix-size
PREFIXES = ["ein mann", "zwei", "die frau in", "ein kind isst einen"]


def no_repeat_fairseq(hub, src) -> dict:
    """fairseq-generate --no-repeat-ngram-size 2 (greedy and beam 4 with its n-best list: no output repeats a pair
    of tokens) as its CUDA kernel computes it. On a CPU, fairseq 0.12.2's NGramRepeatBlock reads the last n − 1
    entries of the whole token buffer, which are padding, and bans nothing (fairseq issues 4709 and 5206); here it
    reads the step's tokens, the n − 1 its kernel compares, as those issues' fix does."""
    from fairseq.ngram_repeat_block import NGramRepeatBlock

    plain = NGramRepeatBlock.forward

    def forward(self, tokens, lprobs, bsz, beam_size, step):
        return plain(self, tokens[:, : step + 1], lprobs, bsz, beam_size, step)

    out = {}
    NGramRepeatBlock.forward = forward
    try:
        for beam in (1, 4):
            hyps = hub.generate(src, beam=beam, max_len_a=1.2, max_len_b=10, no_repeat_ngram_size=2)
            out[f"no_repeat2_beam{beam}_text"] = [hub.decode(h[0]["tokens"]) for h in hyps]
            out[f"no_repeat2_beam{beam}_score"] = [float(h[0]["score"]) for h in hyps]
        out["no_repeat2_beam4_nbest_text"] = [[hub.decode(h["tokens"]) for h in hs] for hs in hyps]
        out["no_repeat2_beam4_nbest_score"] = [[float(h["score"]) for h in hs] for hs in hyps]
    finally:
        NGramRepeatBlock.forward = plain
    return out


def prefixed_fairseq(hub, src) -> dict:
    """fairseq-generate's --prefix-size (SequenceGenerator's prefix_tokens): beam 1 and 4 on the sources, each output
    forced to start with its `PREFIXES` entry encoded as fairseq-interactive encodes a target text (tokenized, BPE,
    no EOS; PAD after a shorter one, which fairseq leaves unforced) and continued by the search."""
    from fairseq.data import data_utils

    tgt_dict = hub.tgt_dict
    prefix = data_utils.collate_tokens([tgt_dict.encode_line(hub.apply_bpe(hub.tokenize(p)), append_eos=False,
                                                             add_if_not_exist=False).long() for p in PREFIXES],
                                       tgt_dict.pad())
    sample = {"id": torch.arange(len(src)),
              "net_input": {"src_tokens": data_utils.collate_tokens(src, tgt_dict.pad(), left_pad=True),
                            "src_lengths": torch.tensor([len(s) for s in src])}}
    out = {"prefixes": PREFIXES}
    for beam in (1, 4):
        gen_args = hub.cfg.generation
        gen_args.beam, gen_args.max_len_a, gen_args.max_len_b, gen_args.constraints = beam, 1.2, 10, None
        generator = hub.task.build_generator(hub.models, gen_args)
        with torch.no_grad():
            hyps = hub.task.inference_step(generator, hub.models, sample, prefix_tokens=prefix)
        out[f"prefix_beam{beam}"] = [h[0]["tokens"].tolist() for h in hyps]
        out[f"prefix_beam{beam}_score"] = [float(h[0]["score"]) for h in hyps]
    return out


def fastbpe_fixture(out: str, tokenized: list[str]) -> list[str]:
    """fastbpe.codes: the same merges in fastBPE's format ("left right count"; the counts, which applying
    ignores, count down), and the real fastBPE's segmentation of ``tokenized`` (Moses-tokenized sentences)."""
    import fastBPE

    with open(os.path.join(out, "bpecodes"), encoding="utf-8") as f:
        merges = [line.rstrip("\n") for line in f if not line.startswith("#version")]
    path = os.path.join(out, "fastbpe.codes")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(f"{m} {len(merges) - i}\n" for i, m in enumerate(merges))
    return fastBPE.fastBPE(path).apply(tokenized)


def fairseq_alignments(hub, ensemble, src) -> dict:
    """fairseq-generate --print-alignment hard and soft (SequenceGeneratorWithAlignment: the last decoder layer's
    cross-attention, heads averaged, an ensemble's averaged over its models) of beam 4's best outputs: per sentence
    the hard pairs [source token, target token] and the soft rows (each target token and EOS over the source tokens
    and EOS, as fairseq prints them: 6 decimals); the ensemble's hard pairs too."""
    out = {}
    for name, model in (("", hub), ("ensemble_", ensemble)):
        for kind in ("hard", "soft") if not name else ("hard",):
            hyps = model.generate(src, beam=4, max_len_a=1.2, max_len_b=10, print_alignment=kind, constraints=None)
            out[f"{name}align_{kind}_tokens"] = [h[0]["tokens"].tolist() for h in hyps]
            out[f"{name}align_{kind}"] = [[list(map(int, pair)) for pair in h[0]["alignment"]] if kind == "hard"
                                          else [[float(p) for p in row] for row in h[0]["alignment"]] for h in hyps]
    return out


def pad_ids(rows, pad: int) -> np.ndarray:
    n = max(len(r) for r in rows)
    return np.array([list(r) + [pad] * (n - len(r)) for r in (r.tolist() if hasattr(r, "tolist") else r
                                                                  for r in rows)], np.int64)


def score_reference(models, src, tgt, tgt_dict) -> list[float]:
    """fairseq-generate --score-reference: each target's score under ``models`` (one, or an ensemble) by fairseq's
    SequenceScorer, its tokens' log-probabilities (EOS included; an ensemble's: the log of the models' mean
    probability) summed over its length."""
    from fairseq.data import data_utils
    from fairseq.sequence_scorer import SequenceScorer

    pad, eos = tgt_dict.pad(), tgt_dict.eos()
    sample = {"net_input": {"src_tokens": data_utils.collate_tokens(src, pad, eos, left_pad=True),
                            "src_lengths": torch.tensor([len(s) for s in src]),
                            "prev_output_tokens": data_utils.collate_tokens(tgt, pad, eos, left_pad=False,
                                                                            move_eos_to_beginning=True)},
              "target": data_utils.collate_tokens(tgt, pad, eos, left_pad=False)}
    with torch.no_grad():
        return [float(hypos[0]["score"]) for hypos in SequenceScorer(tgt_dict).generate(models, sample)]


def teacher_forced_fairseq(model, src, tgt, tgt_dict) -> np.ndarray:
    """log p(y_t | y_<t, x) over the dictionary: float32[B, T, V], T = the longest target (EOS included); decoder
    input: EOS, then the target (fairseq's prev_output_tokens), right-padded."""
    from fairseq.data import data_utils

    pad, eos = tgt_dict.pad(), tgt_dict.eos()
    src_tokens = data_utils.collate_tokens(src, pad, eos, left_pad=True)
    src_lengths = torch.tensor([len(s) for s in src])
    prev = data_utils.collate_tokens(tgt, pad, eos, left_pad=False, move_eos_to_beginning=True)
    with torch.no_grad():
        out = model(src_tokens, src_lengths, prev)
        return model.get_normalized_probs(out, log_probs=True).float().numpy()


def spm_pair(directory: str, normalization: str = "nmt_nfkc") -> dict:
    """Trains the source and target SentencePiece models of the Marian fixtures into ``directory`` (source.spm,
    target.spm) and returns their joint vocabulary as Marian orders it: </s> 0, <unk> 1, then the pieces."""
    import sentencepiece as spm

    for name, lines in (("source", CORPUS_EN), ("target", CORPUS_DE)):
        spm.set_random_generator_seed(0)
        proto = io.BytesIO()  # not model_prefix: the model would record the temporary directory's name
        spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=proto, vocab_size=36,
                                       hard_vocab_limit=False, model_type="unigram", character_coverage=1.0,
                                       num_threads=1, minloglevel=2, bos_id=-1, eos_id=1, unk_id=0, pad_id=-1,
                                       normalization_rule_name=normalization)
        with open(os.path.join(directory, f"{name}.spm"), "wb") as f:
            f.write(proto.getvalue())
    return marian_vocabulary(directory, ("source", "target"))


def marian_vocabulary(directory: str, sides: tuple) -> dict:
    """</s> 0, <unk> 1, then the pieces of the SentencePiece models ``sides`` (source, target) in turn."""
    import sentencepiece as spm

    vocab = {"</s>": 0, "<unk>": 1}
    for name in sides:
        sp = spm.SentencePieceProcessor(model_file=os.path.join(directory, f"{name}.spm"))
        for i in range(sp.get_piece_size()):
            if not sp.is_control(i) and not sp.is_unknown(i):
                vocab.setdefault(sp.id_to_piece(i), len(vocab))
    return vocab


def marian_fixture(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp()
    vocab = spm_pair(work)
    model, tok = save_marian(out, work, vocab, d=16, layers=2, heads=2, ffn=24, positions=64, seed=2)
    shutil.rmtree(work)
    marian_expected(out, model, tok)


def save_marian(out: str, spm_dir: str, vocab: dict, **size):
    """A `random_marian` of ``size`` over ``vocab`` (Marian's order, <pad> appended last) and the MarianTokenizer of
    the SentencePiece models in ``spm_dir`` (where vocab.json is written), both saved into ``out`` by their
    save_pretrained; returns (model, tokenizer)."""
    from transformers import MarianTokenizer

    vocab["<pad>"] = len(vocab)
    with open(os.path.join(spm_dir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    tok = MarianTokenizer(os.path.join(spm_dir, "source.spm"), os.path.join(spm_dir, "target.spm"),
                          os.path.join(spm_dir, "vocab.json"), source_lang="en", target_lang="de")
    model = random_marian(len(vocab), vocab["<pad>"], **size)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return model, tok


def random_marian(vocab_size: int, pad: int, *, d: int, layers: int, heads: int, ffn: int, positions: int,
                  seed: int):
    """A MarianMTModel as OPUS-MT's are configured (post-norm, swish, one vocabulary, </s> 0, decoding from <pad>),
    its parameters drawn by `perturb`, in eval mode."""
    from transformers import MarianConfig, MarianMTModel

    config = MarianConfig(vocab_size=vocab_size, decoder_vocab_size=vocab_size, d_model=d, encoder_layers=layers,
                          decoder_layers=layers, encoder_attention_heads=heads, decoder_attention_heads=heads,
                          encoder_ffn_dim=ffn, decoder_ffn_dim=ffn, max_position_embeddings=positions,
                          pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad, activation_function="swish",
                          scale_embedding=True, forced_eos_token_id=0, bad_words_ids=[[pad]])
    torch.manual_seed(seed)
    model = MarianMTModel(config)
    perturb(model, seed=seed)
    return model.eval()


def marian_expected(out: str, model, tok) -> None:
    """What a MarianMTModel computes on the fixture's sentences: teacher-forced log-probabilities, greedy and beam-4
    outputs of generate(max_new_tokens=20) and greedy with no_repeat_ngram_size=2, the targets detokenized; where
    the vocabulary holds target-language tokens, the ids MarianTokenizer gives sources that start with one (or with
    one it lacks)."""
    config = model.config
    batch = tok(SRC, return_tensors="pt", padding=True)
    labels = tok(text_target=TGT, return_tensors="pt", padding=True)["input_ids"]
    start = torch.full((labels.shape[0], 1), config.decoder_start_token_id)
    decoder_in = torch.cat([start, labels[:, :-1]], dim=1)
    decoder_in = decoder_in.masked_fill(decoder_in == -100, config.pad_token_id)
    with torch.no_grad():
        logits = model(**batch, decoder_input_ids=decoder_in).logits
    logp = torch.log_softmax(logits.float(), dim=-1).numpy()
    expected = {"src_ids": batch["input_ids"].numpy(), "tgt_ids": labels.numpy(), "logp": logp}
    outputs = {}
    for beam in (1, 4):
        with torch.no_grad():
            gen = model.generate(**batch, num_beams=beam, do_sample=False, max_new_tokens=20, length_penalty=1.0,
                                 early_stopping=False)
        outputs[f"beam{beam}"] = gen.tolist()
        outputs[f"beam{beam}_text"] = tok.batch_decode(gen, skip_special_tokens=True)
    with torch.no_grad():  # no_repeat_ngram_size (NoRepeatNGramLogitsProcessor): greedy that repeats no pair of tokens
        gen = model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=20, no_repeat_ngram_size=2)
    outputs["no_repeat2_beam1_text"] = tok.batch_decode(gen, skip_special_tokens=True)
    outputs["detok"] = tok.batch_decode(labels, skip_special_tokens=True)
    if LANGUAGE_CODES[0] in tok.get_vocab():
        outputs["coded"] = [f"{LANGUAGE_CODES[0]} {SRC[0]}", f"{LANGUAGE_CODES[1]}{SRC[1]}", f">>xx<< {SRC[2]}",
                            f"a >>de<< {SRC[3]}"]
        outputs["coded_ids"] = tok(outputs["coded"])["input_ids"]
    write_expected(out, expected, outputs)


LANGUAGE_CODES = (">>deu<<", ">>fra<<")
MARIAN_YML = {  # a Marian transformer's model.yml as OPUS-MT's releases hold it (the options the converter reads)
    "type": "transformer", "dim-emb": 32, "enc-depth": 2, "dec-depth": 2, "transformer-heads": 2,
    "transformer-dim-ffn": 48, "transformer-ffn-depth": 2, "transformer-ffn-activation": "swish",
    "transformer-preprocess": "", "transformer-postprocess": "dan", "transformer-postprocess-emb": "d",
    "transformer-decoder-autoreg": "self-attention", "transformer-tied-layers": [], "transformer-aan-depth": 2,
    "transformer-aan-nogate": False, "transformer-no-projection": False,
    "transformer-train-position-embeddings": False, "transformer-guided-alignment-layer": "last",
    "tied-embeddings-all": True, "tied-embeddings-src": False, "tied-embeddings": False,
    "layer-normalization": False, "right-left": False, "skip": False, "ulr": False, "ulr-dim-emb": 0,
    "dec-cell-base-depth": 2, "dec-cell-high-depth": 1, "version": "v1.9.56 jaxnat-fixture"}


def marian_arrays(cfg: dict, rng) -> dict:
    """The arrays of the Marian transformer that ``cfg`` (model.yml's options) describes, in Marian's names and
    layouts (W [in, out], b and ln_* [1, out]), drawn from ``rng`` (float64; written as float32): weights and
    embeddings N(0, 0.3²), biases N(0, 0.1²), layer norms' scales 1 + N(0, 0.1²), the output bias N(0, 0.5²); one
    embedding (`Wemb`) with `tied-embeddings-all`, one per side otherwise (of `dim-vocabs` rows each); an output layer
    of its own (`decoder_ff_logit_out_W`, drawn last) without `tied-embeddings-all` or `tied-embeddings`."""
    d, ffn, (rows, target_rows) = cfg["dim-emb"], cfg["transformer-dim-ffn"], cfg["dim-vocabs"]
    if cfg["tied-embeddings-all"]:
        params = {"Wemb": 0.3 * rng.standard_normal((rows, d))}
    else:
        params = {"encoder_Wemb": 0.3 * rng.standard_normal((rows, d)),
                  "decoder_Wemb": 0.3 * rng.standard_normal((target_rows, d))}
    params["decoder_ff_logit_out_b"] = 0.5 * rng.standard_normal((1, target_rows))

    def block(prefix: str, names_: list) -> None:
        for n in names_:
            if n.endswith("ln_scale"):
                value = 1.0 + 0.1 * rng.standard_normal((1, d))
            elif "_W" in n and not n.endswith("ln_bias"):
                value = 0.3 * rng.standard_normal({"W1": (d, ffn), "W2": (ffn, d)}.get(n[-2:], (d, d)))
            else:
                value = 0.1 * rng.standard_normal((1, ffn if n.endswith("b1") else d))
            params[prefix + n] = value

    attention = [f"self_{w}" for w in ("Wq", "bq", "Wk", "bk", "Wv", "bv", "Wo", "bo", "Wo_ln_scale", "Wo_ln_bias")]
    ffn_names = ["ffn_W1", "ffn_b1", "ffn_W2", "ffn_b2", "ffn_ffn_ln_scale", "ffn_ffn_ln_bias"]
    for i in range(1, cfg["enc-depth"] + 1):
        block(f"encoder_l{i}_", attention + ffn_names)
    autoreg = {"rnn": ["rnn_W", "rnn_Wf", "rnn_bf", "rnn_ffn_ln_scale", "rnn_ffn_ln_bias"],
               "average-attention": [f"aan_{w}" for w in ("W1", "b1", "W2", "b2", "Wi", "bi", "Wf", "bf",
                                                          "ffn_ln_scale", "ffn_ln_bias")]
               }.get(cfg["transformer-decoder-autoreg"], attention)
    for i in range(1, cfg["dec-depth"] + 1):
        block(f"decoder_l{i}_", autoreg + [a.replace("self", "context") for a in attention] + ffn_names)
    if cfg["transformer-preprocess"] == "n":  # the norms before each sublayer (`_pre`), and each stack's top norm
        params = {(k + "_pre" if "_ln_" in k else k): v for k, v in params.items()}
        for stack in ("encoder", "decoder"):
            block(f"{stack}_top_", ["ln_scale", "ln_bias"])
    if not (cfg["tied-embeddings-all"] or cfg["tied-embeddings"]):
        params["decoder_ff_logit_out_W"] = 0.3 * rng.standard_normal((d, target_rows))
    return params


def write_marian_release(out: str, cfg: dict, params: dict, vocabs: dict) -> tuple[dict, list]:
    """An OPUS-MT release's files in ``out`` (beside its source.spm and target.spm): the model (``params``, with
    ``cfg`` under `special:model.yml`), the vocabularies (``vocabs``: file suffix -> {piece: id}; one, or
    src.vocab.yml and trg.vocab.yml) and decoder.yml (beam 4, normalize 0.6). Returns ({"model": its file name},
    decoder.yml's vocabularies)."""
    import yaml

    names = {"model": "opus.spm50-spm50.transformer-align.model1.npz.best-perplexity.npz"}
    for name, pieces in vocabs.items():
        with open(os.path.join(out, f"opus.spm50-spm50.{name}"), "w", encoding="utf-8") as f:
            yaml.safe_dump(pieces, f, allow_unicode=True, sort_keys=False)
    listed = [f"opus.spm50-spm50.{name}" for name in vocabs] * (2 if len(vocabs) == 1 else 1)
    with open(os.path.join(out, "decoder.yml"), "w", encoding="utf-8") as f:
        yaml.safe_dump({"models": [names["model"]], "vocabs": listed, "beam-size": 4,
                        "normalize": 0.6, "word-penalty": 0, "mini-batch": 16, "maxi-batch": 100,
                        "maxi-batch-sort": "src", "relative-paths": True}, f, sort_keys=False)
    text = yaml.safe_dump(cfg, sort_keys=True).encode() + b"\0"  # Marian stores the YAML with its NUL
    np.savez(os.path.join(out, names["model"]), **{k: v.astype(np.float32) for k, v in params.items()},
             **{"special:model.yml": np.frombuffer(text, np.int8)})
    return names, listed


def marian_npz_fixture(out: str, separate: bool = False, pymarian: str | None = None, ssru: bool = False,
                       prenorm: bool = False, aan: bool = False) -> None:
    """A Marian checkpoint as Marian saves it (`model.npz` with its configuration under `special:model.yml`,
    `*.vocab.yml`, `decoder.yml`, `source.spm`, `target.spm`: an OPUS-MT release's files), then converted by Hugging
    Face's own converter (transformers 4.46.3's convert_marian_to_pytorch, which tools/reference_env.sh unpacks), whose
    MarianMTModel (float32; the converter's `convert` would save it in float16) computes the expected outputs.
    ``separate``: a vocabulary and an embedding per side (the same pieces, each side's own first, in another order),
    and the converted model saved as a Hugging Face directory too (hf/). ``pymarian`` (a Python with pymarian, Marian
    itself): also what Marian computes (`marian_expected_by_marian`, expected_marian.json). ``ssru``: a decoder of SSRU
    layers (`transformer-decoder-autoreg: rnn`, `dec-cell: ssru`, as OPUS-MT's tiny and Bergamot's student models
    have), which Hugging Face's converter does not take: Marian's outputs alone, `</s>`'s output bias raised so that
    some end. ``prenorm``: pre-norm layers with a norm over each stack's top (`transformer-preprocess: n`,
    `-postprocess: da`, `-postprocess-top: n`), which that converter does not take either: Marian's outputs alone.
    ``aan``: a decoder of average-attention layers (`transformer-decoder-autoreg: average-attention`), and the
    embeddings Marian trains by default (no tied-embeddings option given): each side's vocabulary of its own pieces
    alone (of different sizes: the target's with language tokens), an embedding per side and an output layer of its
    own, `</s>`'s output bias raised; Marian's outputs alone."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "convert_marian_to_pytorch", os.path.join(os.path.dirname(sys.executable), "..", "src",
                                                  "convert_marian_to_pytorch.py"))
    converter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(converter)

    os.makedirs(out, exist_ok=True)
    vocab = spm_pair(out, normalization="identity")  # identity: small .spm files
    if aan:  # (the target's with the language tokens too: one more size)
        target = marian_vocabulary(out, ("target",))
        vocabs = {"src.vocab.yml": marian_vocabulary(out, ("source",)),
                  "trg.vocab.yml": {**target, **{code: len(target) + i for i, code in enumerate(LANGUAGE_CODES)}}}
    elif separate:
        vocabs = {"src.vocab.yml": marian_vocabulary(out, ("source", "target")),
                  "trg.vocab.yml": marian_vocabulary(out, ("target", "source"))}
    else:  # with target-language tokens, as a multilingual OPUS-MT model's vocabulary holds them
        vocabs = {"vocab.yml": {**vocab, **{code: len(vocab) + i for i, code in enumerate(LANGUAGE_CODES)}}}
    vocab = vocabs["vocab.yml"] if len(vocabs) == 1 else vocab
    cfg = dict(MARIAN_YML, **{"dim-vocabs": [len(v) for v in vocabs.values()] if aan else [len(vocab)] * 2})
    if ssru:
        cfg.update({"transformer-decoder-autoreg": "rnn", "dec-cell": "ssru"})
    if prenorm:
        cfg.update({"transformer-preprocess": "n", "transformer-postprocess": "da", "transformer-postprocess-top": "n"})
    if aan:
        cfg.update({"transformer-decoder-autoreg": "average-attention",
                    "transformer-dim-aan": cfg["transformer-dim-ffn"],
                    "transformer-aan-activation": cfg["transformer-ffn-activation"]})
    if separate or aan:  # the embeddings tied to the output layer (aan: not), not to each other
        cfg.update({"tied-embeddings-all": False, "tied-embeddings-src": False, "tied-embeddings": not aan})
    params = marian_arrays(cfg, np.random.default_rng(5 if aan else 4 if separate else 3))
    if ssru or aan:  # (that some outputs end)
        params["decoder_ff_logit_out_b"][0, vocab["</s>"]] += 1.5 if aan else 1.0
    names, listed = write_marian_release(out, cfg, params, vocabs)
    if pymarian:
        marian_expected_by_marian(out, pymarian, names["model"], listed)
    if ssru or prenorm or aan:
        return

    work = tempfile.mkdtemp()  # the converter writes vocab.json and tokenizer_config.json into the model's directory
    try:
        shutil.copytree(out, os.path.join(work, "en-de"), ignore=shutil.ignore_patterns("expected.*", "hf"))
        state = converter.OpusState(converter.Path(work) / "en-de")
        model = state.load_marian_model().eval()
        tok = state.tokenizer
    finally:
        shutil.rmtree(work)
    for file in ("vocab.json", "tokenizer_config.json"):  # not part of Marian's release
        assert not os.path.exists(os.path.join(out, file))
    if separate:
        assert tok.separate_vocabs and not model.config.share_encoder_decoder_embeddings
        model.save_pretrained(os.path.join(out, "hf"), safe_serialization=True)
        tok.save_pretrained(os.path.join(out, "hf"))
    marian_expected(out, model, tok)


def marian_expected_by_marian(out: str, python: str, model: str, vocabs: list) -> None:
    """What Marian itself (pymarian, in ``python``: tools/marian_reference.py) computes on the fixture's sources,
    cut by source.spm into pieces: its greedy and beam-4 (normalize 0.6, decoder.yml's) n-best lists, each
    hypothesis's pieces, word scores and score, into expected_marian.json."""
    import sentencepiece as spm
    from marian_reference import decode

    sp = spm.SentencePieceProcessor(model_file=os.path.join(out, "source.spm"))
    sources = [" ".join(sp.encode(s, out_type=str)) for s in SRC]
    outputs = {"pieces_in": sources, **decode(python, out, model, vocabs, sources)}
    with open(os.path.join(out, "expected_marian.json"), "w", encoding="utf-8") as f:
        json.dump({"src": SRC, **outputs}, f, indent=1, ensure_ascii=False)


def joint_spm(out: str, model_type: str) -> bytes:
    """Trains the multilingual fixtures' SentencePiece model (one for both languages, fairseq's layout: <unk> 0,
    <s> 1, </s> 2) into ``out``/sentencepiece.bpe.model; returns its bytes."""
    import sentencepiece as spm

    spm.set_random_generator_seed(0)
    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(CORPUS_EN + CORPUS_DE), model_writer=proto,
                                   vocab_size=60, hard_vocab_limit=False, model_type=model_type,
                                   character_coverage=1.0, num_threads=1, minloglevel=2, unk_id=0, bos_id=1, eos_id=2,
                                   pad_id=-1)
    with open(os.path.join(out, "sentencepiece.bpe.model"), "wb") as f:
        f.write(proto.getvalue())
    return proto.getvalue()


def save_tiny(out: str, model_class, config_class, seed: int, **options):
    """A model of the multilingual fixtures' size (d 16, 2+2 layers, 2 heads, FFN 24, 64 positions) with fairseq's
    special ids, every parameter drawn (`perturb`), saved into ``out`` by save_pretrained; ``options``: its own."""
    config = config_class(d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                          decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=24, max_position_embeddings=64,
                          pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
                          scale_embedding=True, **options)
    torch.manual_seed(seed)
    model = model_class(config)
    perturb(model, seed=seed)
    model.eval().save_pretrained(out, safe_serialization=True)
    return model


NLLB_LANGUAGES = ["eng_Latn", "deu_Latn", "fra_Latn"]  # the fixture's language tokens (NLLB-200 has 202)


def nllb_fixture(out: str) -> None:
    """An NLLB-200 model as its Hugging Face directory holds it: M2M100ForConditionalGeneration's save_pretrained, the
    SentencePiece model (BPE, one for both sides, as NLLB's `sentencepiece.bpe.model`) and NllbTokenizer's files
    (tokenizer.json, tokenizer_config.json); its embedding has two rows past the tokenizer's last id, as NLLB's has.
    Expected: as `marian_expected`, with sources in eng_Latn and outputs forced to start with deu_Latn
    (generate's forced_bos_token_id); and greedy outputs of French-tagged sources forced to fra_Latn."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration, NllbTokenizer

    os.makedirs(out, exist_ok=True)
    joint_spm(out, "bpe")
    tok = NllbTokenizer.from_pretrained(out, src_lang="eng_Latn", tgt_lang="deu_Latn",
                                        additional_special_tokens=NLLB_LANGUAGES)
    tok.save_pretrained(out)
    model = save_tiny(out, M2M100ForConditionalGeneration, M2M100Config, 4, vocab_size=len(tok) + 2,
                      activation_function="relu")
    multilingual_expected(out, model, tok, ("eng_Latn", "deu_Latn"), ("fra_Latn", "fra_Latn"))


def m2m100_fixture(out: str) -> None:
    """An M2M-100 model as its Hugging Face directory holds it: NLLB's architecture with M2M100Tokenizer's files
    (vocab.json, the SentencePiece model, tokenizer_config.json): vocab.json numbers the pieces in another order than
    the SentencePiece model and lacks a piece of the first source (which M2M100Tokenizer reads as <unk>), none of
    the targets'; the
    100 language tokens follow its last id, then 8 padding words, as in M2M-100's tables. Expected: as
    `nllb_fixture`'s, en -> de and fr -> fr."""
    import sentencepiece as spm
    from transformers import M2M100Config, M2M100ForConditionalGeneration, M2M100Tokenizer

    os.makedirs(out, exist_ok=True)
    proto = joint_spm(out, "bpe")
    sp = spm.SentencePieceProcessor(model_proto=proto)
    target = {p for t in TGT for p in sp.encode(t, out_type=str)}  # jaxnat writes <unk> out (⁇), generate does not
    missing = next(p for p in sp.encode(SRC[0], out_type=str) if p not in target)
    pieces = [p for p in reversed([sp.id_to_piece(i) for i in range(3, sp.get_piece_size())]) if p != missing]
    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({p: i for i, p in enumerate(["<s>", "<pad>", "</s>", "<unk>", *pieces])}, f, ensure_ascii=False)
    tok = M2M100Tokenizer.from_pretrained(out, src_lang="en", tgt_lang="de")
    tok.save_pretrained(out)
    model = save_tiny(out, M2M100ForConditionalGeneration, M2M100Config, 6, vocab_size=4 + len(pieces) + 100 + 8,
                      activation_function="relu")
    multilingual_expected(out, model, tok, ("en", "de"), ("fr", "fr"), token=tok.get_lang_token)


def multilingual_expected(out: str, model, tok, pair: tuple, french: tuple, token=lambda code: code) -> None:
    """As `marian_expected`, for a model whose sources start with their language's token and whose outputs are
    forced to start with the target language's (generate's forced_bos_token_id): sources in pair[0], outputs in
    pair[1]; and greedy outputs of French-tagged sources forced to French (``french``: the codes; ``token``: a code's
    token)."""
    tok.src_lang, tok.tgt_lang = pair
    batch = tok(SRC, return_tensors="pt", padding=True)
    labels = tok(text_target=TGT, return_tensors="pt", padding=True)["input_ids"]
    decoder_in = torch.cat([torch.full((labels.shape[0], 1), 2), labels[:, :-1]], dim=1)
    with torch.no_grad():
        logits = model(**batch, decoder_input_ids=decoder_in).logits
    arrays = {"src_ids": batch["input_ids"].numpy(), "tgt_ids": labels.numpy(),
              "logp": torch.log_softmax(logits.float(), dim=-1).numpy()}
    outputs = {}
    for name, beam, (src_lang, tgt_lang) in (("beam1", 1, pair), ("beam4", 4, pair), ("fra_fra_beam1", 1, french)):
        tok.src_lang = src_lang
        with torch.no_grad():
            gen = model.generate(**tok(SRC, return_tensors="pt", padding=True), num_beams=beam, do_sample=False,
                                 max_new_tokens=20, length_penalty=1.0, early_stopping=False,
                                 forced_bos_token_id=tok.convert_tokens_to_ids(token(tgt_lang)),
                                 forced_eos_token_id=2,  # as jaxnat: EOS at the limit,
                                 bad_words_ids=[[0], [1]])  # never <s> or <pad>
        outputs[name] = gen.tolist()
        # the text after the decoder's start and the language token (transformers 5's M2M100Tokenizer writes the
        # latter out, though a special token)
        outputs[f"{name}_text"] = tok.batch_decode(gen[:, 2:], skip_special_tokens=True)
    outputs["detok"] = tok.batch_decode(labels[:, 1:], skip_special_tokens=True)
    write_expected(out, arrays, outputs)


def mbart50_fixture(out: str) -> None:
    """An mBART-50 translation model as its Hugging Face directory holds it: MBartForConditionalGeneration's
    save_pretrained (learned positions, layernorm_embedding, an output bias), a unigram SentencePiece model (as
    mBART's `sentencepiece.bpe.model`) and MBart50Tokenizer's files (its 52 language codes after the pieces, then
    `<mask>`). Expected: as `nllb_fixture`'s, with en_XX sources forced to de_DE, and fr_XX sources to fr_XX."""
    from transformers import MBart50Tokenizer, MBartConfig, MBartForConditionalGeneration

    os.makedirs(out, exist_ok=True)
    joint_spm(out, "unigram")
    tok = MBart50Tokenizer.from_pretrained(out, src_lang="en_XX", tgt_lang="de_DE")
    tok.save_pretrained(out)
    model = save_tiny(out, MBartForConditionalGeneration, MBartConfig, 5, vocab_size=len(tok),
                      forced_eos_token_id=2, activation_function="gelu")
    multilingual_expected(out, model, tok, ("en_XX", "de_DE"), ("fr_XX", "fr_XX"))


def fsmt_tokenizer(out: str, corpus: dict, merges: int, tied: bool = False, size: int | None = None):
    """FSMTTokenizer's files in ``out`` for ``corpus`` ({"en": lines, "de": lines}): BPE of ``merges`` merges learned
    by subword-nmt over its Moses tokens (aggressive dash splits, escaped) as merges.txt (no version line), and
    vocab-src.json / vocab-tgt.json in its convention (fairseq-preprocess's order; a word's last piece ends in `</w>`,
    the others lose their `@@`), ``tied``: one vocabulary of both languages' pieces; ``size``: each filled up to so
    many pieces (`filler<i></w>`). Returns (the vocabularies {side: {piece: id}}, the BPE, the Moses tokenizers, the
    FSMTTokenizer)."""
    from collections import Counter

    from sacremoses import MosesTokenizer
    from subword_nmt.apply_bpe import BPE
    from subword_nmt.learn_bpe import learn_bpe
    from transformers import FSMTTokenizer

    os.makedirs(out, exist_ok=True)
    moses = {lang: MosesTokenizer(lang=lang) for lang in ("en", "de")}
    tokenized = {lang: [moses[lang].tokenize(s, return_str=True, escape=True, aggressive_dash_splits=True)
                        for s in lines] for lang, lines in corpus.items()}
    codes = io.StringIO()
    learn_bpe(io.StringIO("\n".join(tokenized["en"] + tokenized["de"]) + "\n"), codes, merges)
    bpe = BPE(io.StringIO(codes.getvalue()))
    with open(os.path.join(out, "merges.txt"), "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in codes.getvalue().splitlines() if not line.startswith("#version"))
    vocab = {}
    for side, lang in (("src", "en"), ("tgt", "de")):
        lines = tokenized["en"] + tokenized["de"] if tied else tokenized[lang]
        counts = Counter(w for line in lines for w in bpe.process_line(line).split())
        pieces = ["<s>", "<pad>", "</s>", "<unk>"] + [w[:-2] if w.endswith("@@") else w + "</w>"
                                                      for w in sorted(counts, key=lambda w: (-counts[w], w))]
        pieces += [f"filler{i}</w>" for i in range((size or 0) - len(pieces))]
        vocab[side] = {p: i for i, p in enumerate(pieces)}
        with open(os.path.join(out, f"vocab-{side}.json"), "w", encoding="utf-8") as f:
            json.dump(vocab[side], f, ensure_ascii=False)
    tok = FSMTTokenizer(langs=["en", "de"], src_vocab_file=os.path.join(out, "vocab-src.json"),
                        tgt_vocab_file=os.path.join(out, "vocab-tgt.json"), merges_file=os.path.join(out, "merges.txt"))
    tok.save_pretrained(out)
    return vocab, bpe, moses, tok


def fsmt_fixture(out: str, tied: bool = False) -> None:
    """A fairseq WMT19 model as Hugging Face ports it (`facebook/wmt19-en-de`): FSMTForConditionalGeneration's
    save_pretrained (post-norm, a vocabulary and an embedding per side, an output projection of its own) and
    FSMTTokenizer's files (`fsmt_tokenizer`, 40 merges). Expected: as `marian_expected` (the targets' ids from the
    target vocabulary: FSMTTokenizer's text_target reads the source's). ``tied``: one vocabulary of both languages'
    pieces and `tie_word_embeddings`, the encoder's, the decoder's and the output's one table (fsmt-tied/)."""
    from transformers import FSMTConfig, FSMTForConditionalGeneration

    punctuated = ['a man says " hello " .', "the dog - a red dog - runs ...", "it is 5 % ."]  # the normalised forms
    vocab, bpe, moses, tok = fsmt_tokenizer(out, {"en": CORPUS_EN + punctuated, "de": CORPUS_DE}, 40, tied)
    config = FSMTConfig(langs=["en", "de"], src_vocab_size=len(vocab["src"]), tgt_vocab_size=len(vocab["tgt"]),
                        d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                        decoder_attention_heads=2, encoder_ffn_dim=24, decoder_ffn_dim=24, max_position_embeddings=64,
                        activation_function="relu", scale_embedding=True, tie_word_embeddings=tied, pad_token_id=1,
                        bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=2)
    torch.manual_seed(7)
    model = FSMTForConditionalGeneration(config)
    perturb(model, seed=7)
    for stack in (model.model.encoder, model.model.decoder):  # the sinusoidal tables, which perturb redrew
        table = stack.embed_positions
        table.make_weight(*table.weight.shape, table.padding_idx)
    model.eval().save_pretrained(out, safe_serialization=True)

    batch = tok(SRC, return_tensors="pt", padding=True)
    rows = [[vocab["tgt"].get(w[:-2] if w.endswith("@@") else w + "</w>", 3) for w in bpe.process_line(
        moses["de"].tokenize(t, return_str=True, escape=True, aggressive_dash_splits=True)).split()] + [2]
        for t in TGT]
    labels = torch.tensor(pad_ids(rows, 1))
    decoder_in = torch.cat([torch.full((labels.shape[0], 1), 2), labels[:, :-1]], dim=1)
    with torch.no_grad():  # use_cache=False: with the cache on, FSMT's full pass leaves out its causal mask
        logits = model(**batch, decoder_input_ids=decoder_in, use_cache=False).logits
    arrays = {"src_ids": batch["input_ids"].numpy(), "tgt_ids": labels.numpy(),
              "logp": torch.log_softmax(logits.float(), dim=-1).numpy()}
    outputs = {}
    for beam in (1, 4):
        with torch.no_grad():
            gen = model.generate(**batch, num_beams=beam, do_sample=False, max_new_tokens=20, length_penalty=1.0,
                                 early_stopping=False, bad_words_ids=[[0], [1]])  # as jaxnat: never <s> or <pad>
        outputs[f"beam{beam}"] = gen.tolist()
        outputs[f"beam{beam}_text"] = tok.batch_decode(gen, skip_special_tokens=True)
    outputs["detok"] = tok.batch_decode(labels, skip_special_tokens=True)
    # sources the punctuation normalisation rewrites into the pieces above (quotes, dashes, an ellipsis, a no-break
    # space, a zero-width space, a control character)
    outputs["punctuated"] = ["a man says \u201ehello\u201c.", "the dog \u2013 a red dog \u2013 runs\u2026",
                             "it is 5\u00a0%.", "a\u200b man\x07 runs."]
    outputs["punctuated_ids"] = tok(outputs["punctuated"])["input_ids"]
    write_expected(out, arrays, outputs)


SOCKEYE_SOURCES = SRC + CORPUS_EN[4:9] + ["a red dog eats the snow .", "the children read ."]


def sockeye_fixture(out: str, post_norm: bool = False, ssru: bool = False) -> None:
    """A Sockeye 3 model directory as `sockeye-train` writes it (its files but args.yaml, which holds the training
    run's paths), trained 300 updates on the corpus cut into pieces by a SentencePiece model kept beside it, then
    every parameter moved by noise (a convention missed anywhere shows); and `sockeye_expected`. The default: Sockeye's
    defaults (pre-norm layers with a norm over each stack's top, one vocabulary and one matrix for both embeddings and
    the output layer, ReLU, sinusoids), one SentencePiece model (sentencepiece.model); ``post_norm``: post-norm layers,
    a vocabulary, embedding and SentencePiece model (source.spm, target.spm) a side, an output layer of its own, GELU,
    learned positions; ``ssru``: Sockeye's defaults with a decoder of SSRU layers (`--decoder ssru_transformer`).
    Runs under a Python with Sockeye 3.1.34 (`main`'s --sockeye)."""
    import subprocess

    import sentencepiece as spm
    from sockeye import model as sockeye_model

    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    if post_norm:
        spm_pair(out, normalization="identity")
        models = {"src": "source.spm", "tgt": "target.spm"}
    else:
        spm.set_random_generator_seed(0)
        proto = io.BytesIO()
        spm.SentencePieceTrainer.train(sentence_iterator=iter(CORPUS_EN + CORPUS_DE), model_writer=proto, vocab_size=60,
                                       hard_vocab_limit=False, model_type="unigram", character_coverage=1.0,
                                       num_threads=1, minloglevel=2, normalization_rule_name="identity")
        with open(os.path.join(out, "sentencepiece.model"), "wb") as f:
            f.write(proto.getvalue())
        models = dict.fromkeys(("src", "tgt"), "sentencepiece.model")
    sp = {side: spm.SentencePieceProcessor(model_file=os.path.join(out, m)) for side, m in models.items()}
    with tempfile.TemporaryDirectory() as work:
        for name, side, lines in (("train.src", "src", CORPUS_EN), ("train.trg", "tgt", CORPUS_DE)):
            with open(os.path.join(work, name), "w", encoding="utf-8") as f:
                f.writelines(" ".join(sp[side].encode(line, out_type=str)) + "\n" for line in lines)
        model_dir = os.path.join(work, "model")
        args = [sys.executable, "-m", "sockeye.train", "-s", f"{work}/train.src", "-t", f"{work}/train.trg",
                "-vs", f"{work}/train.src", "-vt", f"{work}/train.trg", "-o", model_dir, "--use-cpu", "--seed", "1",
                "--num-layers", "2:2", "--transformer-model-size", "16", "--transformer-attention-heads", "2",
                "--transformer-feed-forward-num-hidden", "32", "--num-embed", "16", "--max-seq-len", "100",
                "--batch-type", "sentence", "--batch-size", "8", "--max-updates", "300", "--checkpoint-interval",
                "100", "--initial-learning-rate", "0.003", "--learning-rate-scheduler-type", "none",
                "--label-smoothing", "0.0", "--decode-and-evaluate", "0", "--quiet", "--no-bucketing",
                "--max-num-checkpoint-not-improved", "-1"]
        if post_norm:
            args += ["--transformer-preprocess", "", "--transformer-postprocess", "drn", "--weight-tying-type",
                     "none", "--transformer-activation-type", "gelu", "--transformer-positional-embedding-type",
                     "learned"]
        else:
            args += ["--shared-vocab"] + (["--decoder", "ssru_transformer"] if ssru else [])
        subprocess.run(args, check=True)
        for name in ("params.best", "config", "version", "vocab.src.0.json", "vocab.trg.0.json"):
            shutil.copy(os.path.join(model_dir, name), os.path.join(out, name))
    model, _, _ = sockeye_model.load_model(out)
    torch.manual_seed(3 if post_norm else 4 if ssru else 2)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "pos_embedding" not in name or post_norm:  # (a sinusoidal table is no parameter to train)
                p.add_(torch.randn_like(p) * 0.1)
    model.save_parameters(os.path.join(out, "params.best"))
    sockeye_expected(out, sp["src"])


def sockeye_expected(out: str, sp) -> None:
    """What Sockeye computes with the model in ``out`` (expected_sockeye.json): its outputs at beam 1 and beam 5 with
    their scores, under its defaults (`sockeye.translate`'s: the length penalty α 1, β 0; its length limit), and the
    log-probability of each token of its beam-1 outputs (and their end) under teacher forcing (its model's forward)."""
    from sockeye import beam_search, inference
    from sockeye import model as sockeye_model

    pieces = [" ".join(sp.encode(s, out_type=str)) for s in SOCKEYE_SOURCES]
    model, src_vocabs, tgt_vocabs = sockeye_model.load_model(out, inference_only=True)
    result = {"src": SOCKEYE_SOURCES, "pieces_in": pieces}
    for beam in (1, 5):
        translator = inference.Translator(device=torch.device("cpu"), ensemble_mode="linear", beam_search_stop="all",
                                          scorer=beam_search.CandidateScorer(1.0, 0.0, 0.0), batch_size=len(pieces),
                                          beam_size=beam, models=[model], source_vocabs=src_vocabs,
                                          target_vocabs=tgt_vocabs, output_scores=True)
        outs = translator.translate([inference.make_input_from_plain_string(i, s) for i, s in enumerate(pieces)])
        result[f"beam{beam}"] = [{"pieces": o.tokens, "score": float(o.score)} for o in outs]
    forced, _, _ = sockeye_model.load_model(out)  # (its training-time forward, in eval mode)
    forced.eval()
    src_ids, tgt_ids = src_vocabs[0], tgt_vocabs[0]
    result["token_logp"] = []
    with torch.no_grad():
        for src, hyp in zip(pieces, result["beam1"]):
            source = [src_ids.get(p, 1) for p in src.split()] + [3]  # </s>: 3, <s>: 2, <unk>: 1
            target = [tgt_ids[p] for p in hyp["pieces"]] + [3]
            logits = forced.forward(torch.tensor(source)[None, :, None], torch.tensor([[len(source), 0]]),
                                    torch.tensor([2] + target[:-1])[None, :, None], torch.tensor([[len(target), 0]]))
            logp = torch.log_softmax(logits["logits"][0], -1)
            result["token_logp"].append([float(logp[t, w]) for t, w in enumerate(target)])
    with open(os.path.join(out, "expected_sockeye.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, ensure_ascii=False)


def write_expected(out: str, arrays: dict, outputs: dict, name: str = "expected") -> None:
    np.savez_compressed(os.path.join(out, f"{name}.npz"), **{k: np.asarray(v) for k, v in arrays.items()})
    with open(os.path.join(out, f"{name}.json"), "w", encoding="utf-8") as f:
        json.dump({"src": SRC, "tgt": TGT, **outputs}, f, indent=1, ensure_ascii=False)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=("fairseq", "fairseq-nat", "dat", "marian", "marian-npz",
                                           "marian-npz-separate", "marian-ssru", "marian-prenorm", "marian-aan",
                                           "nllb", "m2m100", "mbart50", "fsmt", "sockeye"))
    parser.add_argument("--pymarian", metavar="PYTHON",
                        help="a Python with pymarian (Marian itself), which the Marian .npz fixtures need")
    parser.add_argument("--dat-plugin", metavar="DIR",
                        help="a checkout of thu-coai/DA-Transformer (its fs_plugins/): also writes fairseq-nat/dat.pt")
    parser.add_argument("--sockeye", metavar="PYTHON",
                        help="a Python with Sockeye 3.1.34, which the Sockeye fixtures need (it writes them)")
    args = parser.parse_args(argv)
    if args.only == "sockeye" and not args.sockeye:  # (run by --sockeye's Python)
        sockeye_fixture(os.path.join(ROOT, "sockeye"))
        sockeye_fixture(os.path.join(ROOT, "sockeye-postnorm"), post_norm=True)
        sockeye_fixture(os.path.join(ROOT, "sockeye-ssru"), ssru=True)
        return 0
    if not args.pymarian and args.only in (None, "marian", "marian-npz", "marian-npz-separate", "marian-ssru",
                                           "marian-prenorm", "marian-aan"):
        parser.error("the Marian .npz fixtures need --pymarian PYTHON (Marian itself computes what they expect)")
    torch.manual_seed(0)
    np.random.seed(0)
    if args.only in (None, "fairseq"):
        fairseq_fixture(os.path.join(ROOT, "fairseq"))
    if args.only in (None, "fairseq", "fairseq-nat"):
        fairseq_nat_fixtures(os.path.join(ROOT, "fairseq-nat"))
    if args.dat_plugin and args.only in (None, "fairseq", "fairseq-nat", "dat"):
        dat_fixture(os.path.join(ROOT, "fairseq-nat"), args.dat_plugin)
    elif args.only == "dat":
        parser.error("--only dat needs --dat-plugin DIR")
    if args.only in (None, "marian"):
        marian_fixture(os.path.join(ROOT, "marian"))
    if args.only in (None, "marian", "marian-npz"):
        marian_npz_fixture(os.path.join(ROOT, "marian-npz"), pymarian=args.pymarian)
    if args.only in (None, "marian", "marian-npz-separate"):
        marian_npz_fixture(os.path.join(ROOT, "marian-npz-separate"), separate=True, pymarian=args.pymarian)
    if args.only in (None, "marian", "marian-ssru"):
        marian_npz_fixture(os.path.join(ROOT, "marian-ssru"), pymarian=args.pymarian, ssru=True)
    if args.only in (None, "marian", "marian-prenorm"):
        marian_npz_fixture(os.path.join(ROOT, "marian-prenorm"), pymarian=args.pymarian, prenorm=True)
    if args.only in (None, "marian", "marian-aan"):
        marian_npz_fixture(os.path.join(ROOT, "marian-aan"), pymarian=args.pymarian, aan=True)
    if args.only in (None, "nllb"):
        nllb_fixture(os.path.join(ROOT, "nllb"))
    if args.only in (None, "m2m100"):
        m2m100_fixture(os.path.join(ROOT, "m2m100"))
    if args.only in (None, "mbart50"):
        mbart50_fixture(os.path.join(ROOT, "mbart50"))
    if args.only in (None, "fsmt"):
        fsmt_fixture(os.path.join(ROOT, "fsmt"))
        fsmt_fixture(os.path.join(ROOT, "fsmt-tied"), tied=True)
    if args.sockeye and args.only in (None, "sockeye"):
        import subprocess

        subprocess.run([args.sockeye, os.path.abspath(__file__), "--only", "sockeye"], check=True)
    elif args.only == "sockeye":
        parser.error("--only sockeye needs --sockeye PYTHON")
    print(f"wrote {os.path.normpath(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
