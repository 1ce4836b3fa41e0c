"""Decoding an OPUS-MT-sized Marian model (or an NLLB-200-600M-sized, mBART-50-sized or WMT19-sized FSMT one) side by
side with Hugging Face transformers on the same weights, or an OPUS-MT-sized Marian release side by side with Marian
itself: greedy and beam-4 search, batch-1 latency and batch-64 throughput, jaxnat's imported workdir beside
`MarianMTModel.generate` (`M2M100ForConditionalGeneration.generate`, `MBartForConditionalGeneration.generate`,
`FSMTForConditionalGeneration.generate`), or beside Marian's own decoder (pymarian, the Python binding of Marian's
C++ translator).

    D=/tmp/vs-transformers
    # (a) in the reference environment (tools/reference_env.sh): SentencePiece models learned on Multi30k's training
    #     text, a MarianMTModel of OPUS-MT's base size (d 512, 6+6 layers, 8 heads, FFN 2048, swish, one shared
    #     vocabulary of --vocab pieces: Multi30k's, then filler pieces up to OPUS-MT's 58,101) with random weights
    #     (tools/make_import_fixtures.py's `save_marian`), saved by save_pretrained; the first --sentences test
    #     sources
    .refenv/bin/python bench/vs_transformers.py make --data-dir ../shared/data/multi30k --out $D
    #     or with --family nllb: a model of NLLB-200-distilled-600M's shape (d 1024, 12+12 layers, 16 heads, FFN 4096,
    #     relu, pre-norm, 256,206 embedding rows; random weights N(0, 1/fan-in)), a BPE SentencePiece model of 8,000
    #     pieces learned on Multi30k's English and German with NllbTokenizer's files (the rows past its ids stand for
    #     NLLB's other pieces: the output layer costs what it costs there); sources eng_Latn, outputs forced deu_Latn;
    #     or with --family mbart50: one of mbart-large-50's shape (the same, but gelu, learned positions, a layer norm
    #     over the embeddings, 250,054 rows), a unigram SentencePiece model of 8,000 pieces with MBart50Tokenizer's
    #     files; sources en_XX, outputs forced de_DE;
    #     or with --family fsmt: one of facebook/wmt19-en-de's shape (d 1024, 6+6 layers, 16 heads, FFN 8192, relu,
    #     post-norm, 42,024 pieces a side, an output projection of its own), FSMTTokenizer's files from BPE learned on
    #     Multi30k's Moses tokens (`make_fsmt`);
    #     or with --family marian-npz: the same OPUS-MT-sized model as Marian writes it ($D/marian: model.npz,
    #     vocab.yml, decoder.yml, source.spm, target.spm; tools/make_import_fixtures.py's `marian_arrays`), and the
    #     sources cut by source.spm to exactly --source-pieces pieces each (those with fewer left out)
    # (b) imported into a jaxnat workdir ($D/jaxnat) with --mode import (marian-npz: `--from marian:$D/marian`)
    python bench/vs_transformers.py import --out $D
    # (c) the first pass (agreement, warm-up, compilation), then the timed pairs and the table; marian-npz: with
    #     --pymarian PYTHON, a Python with pymarian 1.12.42 (its own venv: python3 -m venv /tmp/pm &&
    #     /tmp/pm/bin/pip install pymarian==1.12.42)
    python bench/vs_transformers.py run --out $D --cores 2 --pairs 3

How `run` measures: as bench/vs_fairseq.py does. One process per library, both pinned to the same cores: jaxnat in
this process, transformers in a worker under .refenv/bin/python that loads the model once and answers one request
at a time over a pipe, so only one of the two computes at any moment (torch.set_num_threads(N); XLA's CPU client
sizes its pool from the affinity mask). Each side times the same span: the sentences' ids in, the output ids out,
batching included (transformers: the tokenizer's padded batches, made beforehand, through `generate`; jaxnat:
`Translator.translate_ids`, the sources encoded beforehand, its allocator set as its command line sets it).
Length limit: at most --max-new tokens, EOS included (`generate(max_new_tokens=M)`; jaxnat `eval.max_len_a=0`,
`eval.max_len_b=M-1`). Greedy decoding is the same function on both sides (tests/test_import.py), so the outputs
agree; Hugging Face's beam search stops by another rule than jaxnat's (docs/import.md), so beam 4's outputs may
differ, and the agreement column says by how much. A random model writes until the length limit, so both do the
same number of steps.

Beside Marian (marian-npz): the worker runs under --pymarian's Python with one `pymarian.Translator` a row and batch
(float32 matrix products, Marian's default; --cpu-threads N, Marian's N workers, each translating a batch of its own;
decoder.yml's normalize 0.6 for beam 4), given the sources' pieces as Marian's vocabulary reads them and answering
pieces: batch 1 is one `translate` call a sentence (one worker busy: Marian's latency), batch 64 one call over all
sentences with --mini-batch 64 (its workers each taking batches). Marian limits an output to max-length-factor ×
its batch's widest source (pieces and </s>); sources of one length make that every sentence's limit, and jaxnat's
`eval.max_len_a` is set to the same factor (--max-new / (--source-pieces + 1)), so both decode the same number of
steps (jaxnat one more at the limit, where it writes </s>). Marian decodes the `.npz` itself; jaxnat computes Marian's
function from it (docs/import.md), so greedy outputs agree but where float32 rounding flips a near tie.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vs_fairseq import ROOT, inputs_file, machine_line, pin, read_gz, speed  # noqa: E402

WORKLOADS = {"b1": 1, "b64": 64}
ROWS = {"greedy": 1, "beam4": 4}  # row: beam size


def learn_spm(lines: list[str], path: str, **options) -> None:
    import io

    import sentencepiece as spm

    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=proto, num_threads=2, minloglevel=2,
                                   pad_id=-1, **options)
    with open(path, "wb") as f:
        f.write(proto.getvalue())


def make(args) -> int:
    """(reference env) the SentencePiece models, the model and its tokenizer in $out/hf (marian-npz: the release in
    $out/marian), the inputs."""
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    out = os.path.abspath(args.out)
    train = {lang: read_gz(os.path.join(args.data_dir, f"train.{lang}.gz")) for lang in ("en", "de")}
    if args.family == "marian-npz":
        return make_marian_release(args, out, train)
    hf = os.path.join(out, "hf")
    os.makedirs(hf, exist_ok=True)
    if args.family == "marian":
        from make_import_fixtures import save_marian

        vocab = opus_mt_pieces(out, train, args.vocab - 1)  # and <pad>, which save_marian appends
        model, _ = save_marian(hf, out, vocab, d=512, layers=6, heads=8, ffn=2048, positions=512, seed=0)
        pieces = len(vocab)
    elif args.family == "fsmt":
        model, pieces = make_fsmt(train, hf)
    else:
        model, pieces = make_multilingual(args.family, train["en"] + train["de"], hf)
    sources = read_gz(os.path.join(args.data_dir, "test_2016_flickr.en.gz"))[:args.sentences]
    with open(os.path.join(out, "inputs.json"), "w", encoding="utf-8") as f:
        json.dump(sources, f, ensure_ascii=False)
    print(f"wrote {hf} ({sum(p.numel() for p in model.parameters()):,} parameters, {pieces:,} pieces) and "
          f"{len(sources)} sources")
    return 0


def opus_mt_pieces(out: str, train: dict, size: int) -> dict:
    """SentencePiece models of 7,000 pieces a side learned on ``train``'s English and German (source.spm,
    target.spm in ``out``) and Marian's vocabulary of their pieces, then filler pieces up to ``size`` (OPUS-MT's
    vocabulary size: the output layer's cost)."""
    from make_import_fixtures import marian_vocabulary

    for name, lang in (("source", "en"), ("target", "de")):
        learn_spm(train[lang], os.path.join(out, f"{name}.spm"), vocab_size=7000, model_type="unigram",
                  bos_id=-1, eos_id=1, unk_id=0)
    vocab = marian_vocabulary(out, ("source", "target"))
    for i in range(size - len(vocab)):
        vocab[f"▁filler{i}"] = len(vocab)
    return vocab


def make_marian_release(args, out: str, train: dict) -> int:
    """An OPUS-MT release's files of OPUS-MT's base size in $out/marian (random weights) and, in inputs.json, the
    first --sentences test sources of exactly --source-pieces pieces (cut to them)."""
    import numpy as np
    import sentencepiece as spm
    from make_import_fixtures import MARIAN_YML, marian_arrays, write_marian_release

    release = os.path.join(out, "marian")
    os.makedirs(release, exist_ok=True)
    vocab = opus_mt_pieces(release, train, args.vocab)
    cfg = dict(MARIAN_YML, **{"dim-emb": 512, "enc-depth": 6, "dec-depth": 6, "transformer-heads": 8,
                              "transformer-dim-ffn": 2048, "dim-vocabs": [len(vocab)] * 2})
    params = marian_arrays(cfg, np.random.default_rng(0))
    write_marian_release(release, cfg, params, {"vocab.yml": vocab})
    sp = spm.SentencePieceProcessor(model_file=os.path.join(release, "source.spm"))
    pieces = [p for p in sp.encode(read_gz(os.path.join(args.data_dir, "test_2016_flickr.en.gz")), out_type=str)
              if len(p) >= args.source_pieces]
    sources = [" ".join(p[:args.source_pieces]) for p in pieces[:args.sentences]]
    with open(os.path.join(out, "inputs.json"), "w", encoding="utf-8") as f:
        json.dump(sources, f, ensure_ascii=False)
    print(f"wrote {release} ({sum(a.size for a in params.values()):,} parameters, {len(vocab):,} pieces) and "
          f"{len(sources)} sources of {args.source_pieces} pieces")
    return 0


MULTILINGUAL = {  # family: (model_type, the model's class, its tokenizer's, source language, target language)
    "nllb": ("m2m_100", "M2M100ForConditionalGeneration", "NllbTokenizer", "eng_Latn", "deu_Latn"),
    "mbart50": ("mbart", "MBartForConditionalGeneration", "MBart50Tokenizer", "en_XX", "de_DE")}
SHAPES = {  # family: its released model's shape (embedding rows: NLLB-200's, mBART-50's)
    "nllb": dict(vocab_size=256206, activation_function="relu", spm="bpe"),
    "mbart50": dict(vocab_size=250054, activation_function="gelu", spm="unigram")}


def make_multilingual(family_: str, lines: list[str], hf: str):
    """A model of NLLB-200-distilled-600M's (mbart-large-50's) shape with its tokenizer's files in ``hf``; returns
    (model, the tokenizer's ids)."""
    import torch
    import transformers

    _, model_class, tok_class, src, tgt = MULTILINGUAL[family_]
    shape = dict(SHAPES[family_])
    learn_spm(lines, os.path.join(hf, "sentencepiece.bpe.model"), vocab_size=8000, model_type=shape.pop("spm"),
              character_coverage=1.0, bos_id=1, eos_id=2, unk_id=0)
    extra = {"additional_special_tokens": [src, tgt]} if family_ == "nllb" else {}  # mBART-50's 52: always there
    tok = getattr(transformers, tok_class).from_pretrained(hf, src_lang=src, tgt_lang=tgt, **extra)
    tok.save_pretrained(hf)
    config = transformers.AutoConfig.for_model(
        MULTILINGUAL[family_][0], d_model=1024, encoder_layers=12, decoder_layers=12, encoder_attention_heads=16,
        decoder_attention_heads=16, encoder_ffn_dim=4096, decoder_ffn_dim=4096, max_position_embeddings=1024,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, scale_embedding=True, **shape)
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(config).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # weights N(0, 1/fan-in), so that outputs vary (the library's N(0, 0.02²) repeats a token)
        for name, p in model.named_parameters():
            if p.ndim == 2:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
    model.save_pretrained(hf, safe_serialization=True)
    return model, len(tok)


# facebook/wmt19-en-de's shape (fairseq's transformer_wmt_en_de_big with FFN 8192) and vocabulary sizes
FSMT_SHAPE = dict(d_model=1024, encoder_layers=6, decoder_layers=6, encoder_attention_heads=16,
                  decoder_attention_heads=16, encoder_ffn_dim=8192, decoder_ffn_dim=8192, max_position_embeddings=1024,
                  activation_function="relu", src_vocab_size=42024, tgt_vocab_size=42024)


def make_fsmt(train: dict, hf: str):
    """A model of facebook/wmt19-en-de's shape (FSMTForConditionalGeneration: post-norm, an embedding per side, an
    output projection of its own) with FSMTTokenizer's files in ``hf``: BPE of 10,000 merges learned on ``train``'s
    Moses tokens, each side's vocabulary filled up to wmt19-en-de's 42,024 pieces (`fsmt_tokenizer`); returns
    (model, the target's pieces)."""
    import torch
    from make_import_fixtures import fsmt_tokenizer
    from transformers import FSMTConfig, FSMTForConditionalGeneration

    fsmt_tokenizer(hf, train, 10000, size=FSMT_SHAPE["tgt_vocab_size"])
    config = FSMTConfig(langs=["en", "de"], scale_embedding=True, tie_word_embeddings=False, pad_token_id=1,
                        bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=2,
                        **FSMT_SHAPE)
    torch.manual_seed(0)
    model = FSMTForConditionalGeneration(config).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # weights N(0, 1/fan-in), as make_multilingual's
        for name, p in model.named_parameters():
            if p.ndim == 2 and "embed_positions" not in name:  # (its sinusoids are a table of their own)
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
    model.save_pretrained(hf, safe_serialization=True)
    return model, FSMT_SHAPE["tgt_vocab_size"]


def import_model(args) -> int:
    sys.path.insert(0, ROOT)
    from jaxnat.importers import write_workdir

    out = os.path.abspath(args.out)
    workdir = os.path.join(out, "jaxnat")
    if os.path.exists(workdir):  # a re-made model: imported again
        import shutil

        shutil.rmtree(workdir)
    source = f"marian:{os.path.join(out, 'marian')}" if family(out) == "marian-npz" else f"hf:{os.path.join(out, 'hf')}"
    print(write_workdir(source, workdir))
    return 0


def family(out: str) -> str:
    """"marian", "nllb", "mbart50" or "fsmt": the model `make` wrote into $out/hf; "marian-npz": the release in
    $out/marian."""
    if os.path.isdir(os.path.join(out, "marian")):
        return "marian-npz"
    if not os.path.isfile(os.path.join(out, "hf", "config.json")):
        sys.exit(f"error: {out} holds no model (hf/config.json or marian/): run `make --out {out}` first")
    with open(os.path.join(out, "hf", "config.json"), encoding="utf-8") as f:
        model_type = json.load(f)["model_type"]
    if model_type == "fsmt":
        return "fsmt"
    return next((k for k, v in MULTILINGUAL.items() if v[0] == model_type), "marian")


def hf_worker(args) -> int:
    """Loads the model once, then answers JSON lines on stdin ({"row", "workload", "sentences"}) with JSON lines
    ({"seconds", "ids", "text"}) on the original stdout."""
    import torch
    import transformers

    reply = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    hf = os.path.join(args.out, "hf")
    options = dict(length_penalty=1.0, early_stopping=False)
    if family(args.out) == "marian":  # its config forces EOS at the limit and bars <pad>, as jaxnat's searches do
        model, tok = (transformers.MarianMTModel.from_pretrained(hf).eval(),
                      transformers.MarianTokenizer.from_pretrained(hf))
    elif family(args.out) == "fsmt":  # EOS at the limit, never <s> or <pad>, as in jaxnat
        model, tok = (transformers.FSMTForConditionalGeneration.from_pretrained(hf).eval(),
                      transformers.FSMTTokenizer.from_pretrained(hf))
        options.update(forced_eos_token_id=2, bad_words_ids=[[0], [1]])
    else:  # the output's language token forced first; EOS at the limit, never <s> or <pad>, as in jaxnat
        _, model_class, tok_class, src, tgt = MULTILINGUAL[family(args.out)]
        model = getattr(transformers, model_class).from_pretrained(hf).eval()
        tok = getattr(transformers, tok_class).from_pretrained(hf, src_lang=src)
        options.update(forced_bos_token_id=tok.convert_tokens_to_ids(tgt), forced_eos_token_id=2,
                       bad_words_ids=[[0], [1]])
    known = len(tok)  # the rows past the tokenizer's ids: the import's filler pieces

    def piece(i: int) -> str:  # as jaxnat names it (FSMT's `piece</w>` / `piece`: subword-nmt's `piece` / `piece@@`)
        if family(args.out) == "fsmt":
            name = tok.decoder[i]
            return name[:-4] if name.endswith("</w>") else name if name in ("<s>", "<pad>", "</s>", "<unk>") \
                else name + "@@"
        return tok.convert_ids_to_tokens(i) if i < known else f"madeupword{i - known:04d}"
    with open(os.path.join(args.out, "inputs.json"), encoding="utf-8") as f:
        sources = json.load(f)
    print(json.dumps({"ready": True}), file=reply, flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        beam, batch, n = ROWS[req["row"]], WORKLOADS[req["workload"]], req["sentences"]
        batches = [tok(sources[i:i + batch], return_tensors="pt", padding=True) for i in range(0, n, batch)]
        ids = []
        t0 = time.perf_counter()
        with torch.inference_mode():
            for b in batches:
                gen = model.generate(**b, num_beams=beam, do_sample=False, max_new_tokens=args.max_new, **options)
                ids.extend(gen.tolist())
        seconds = time.perf_counter() - t0
        outputs = [row[1:row.index(tok.eos_token_id, 1) + 1] if tok.eos_token_id in row[1:] else row[1:]
                   for row in ids]  # without the decoder's start (<pad>, </s>) and what follows EOS
        print(json.dumps({"seconds": seconds, "steps": list(map(len, outputs)),
                          "pieces": [[piece(i) for i in row] for row in outputs]},
                         ensure_ascii=False), file=reply, flush=True)
    return 0


def marian_worker(args) -> int:
    """(pymarian's Python) One Marian translator a row and batch size, loaded once; then answers JSON lines on stdin
    ({"row", "workload", "sentences"}) with JSON lines ({"seconds", "steps", "pieces"}) on the original stdout."""
    from pymarian import Translator

    reply = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    release = os.path.join(args.out, "marian")
    with open(os.path.join(release, "decoder.yml"), encoding="utf-8") as f:  # yaml: pymarian's own requirement
        import yaml

        decoder = yaml.safe_load(f)
    with open(os.path.join(args.out, "inputs.json"), encoding="utf-8") as f:
        sources = json.load(f)
    factor = args.max_new / (len(sources[0].split()) + 1)
    vocabs = [os.path.join(release, v) for v in decoder["vocabs"]]
    translators = {(r, w): Translator(
        models=os.path.join(release, decoder["models"][0]), vocabs=vocabs, cpu_threads=args.threads,
        beam_size=beam, normalize=decoder["normalize"] if beam > 1 else 0.0, mini_batch=batch, maxi_batch=100,
        max_length_factor=factor, quiet=True) for r, beam in ROWS.items() for w, batch in WORKLOADS.items()}
    print(json.dumps({"ready": True}), file=reply, flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        engine, chunk = translators[req["row"], req["workload"]], sources[:req["sentences"]]
        t0 = time.perf_counter()
        outputs = [engine.translate(s) for s in chunk] if req["workload"] == "b1" else engine.translate(chunk)
        seconds = time.perf_counter() - t0
        pieces = [o.split() for o in outputs]  # without </s>, which ends those under the limit
        steps = [len(p) + (len(p) < args.max_new) for p in pieces]
        print(json.dumps({"seconds": seconds, "steps": steps, "pieces": pieces}, ensure_ascii=False), file=reply,
              flush=True)
    return 0


class Worker:
    """The other library's worker process (`hf_worker` under .refenv/bin/python, or `marian_worker` under
    ``python``): `decode` asks it for one pass."""

    def __init__(self, out: str, threads: int, max_new: int, python: str | None = None):
        t0 = time.perf_counter()
        self.name = "marian" if python else "transformers"
        python = python or os.path.join(ROOT, ".refenv", "bin", "python")
        worker = "marian-worker" if self.name == "marian" else "hf-worker"
        self.proc = subprocess.Popen([python, os.path.abspath(__file__), worker, "--out", out, "--threads",
                                      str(threads), "--max-new", str(max_new)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if not json.loads(self.proc.stdout.readline() or "{}").get("ready"):
            sys.exit(f"error: the {self.name} worker did not start")
        self.load_seconds = time.perf_counter() - t0

    def decode(self, row: str, workload: str, n: int) -> dict:
        self.proc.stdin.write(json.dumps({"row": row, "workload": workload, "sentences": n}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


class Jaxnat:
    def __init__(self, out: str, max_new: int, sources: list[str], pieces: bool):
        """``pieces``: the sources are pieces (marian-npz's), each limited to max_new / (its pieces + 1) a piece (as
        Marian's max-length-factor); otherwise texts, limited to max_new tokens."""
        import numpy as np

        from jaxnat.config import build_config
        from jaxnat.data.vocab import BOS_ID, EOS_ID, UNK_ID
        from jaxnat.restore import load_translator

        t0 = time.perf_counter()
        workdir = os.path.join(out, "jaxnat")
        limit = ([f"--config.eval.max_len_a={max_new / (len(sources[0].split()) + 1)}", "--config.eval.max_len_b=0"]
                 if pieces else ["--config.eval.max_len_a=0", f"--config.eval.max_len_b={max_new - 1}"])
        self.translator = load_translator(build_config(os.path.join(workdir, "config.json"), limit), workdir)
        tok = self.translator.tokenizer
        self.src = [np.asarray([BOS_ID, *(tok.piece_id(p, "src") or UNK_ID for p in s.split()), EOS_ID], np.int32)
                    for s in sources] if pieces else self.translator.encode(sources)[0]
        self.load_seconds = time.perf_counter() - t0

    def decode(self, row: str, workload: str, n: int) -> dict:
        from jaxnat.data.vocab import BOS_ID, EOS_ID, PAD_ID

        t = self.translator
        t0 = time.perf_counter()
        outs = t.translate_ids(self.src[:n], ROWS[row], WORKLOADS[workload], None)
        seconds = time.perf_counter() - t0
        ids = [[int(i) for i in o["tokens"] if i not in (BOS_ID, PAD_ID)] for o in outs]
        ids = [i[:i.index(EOS_ID) + 1] if EOS_ID in i else i for i in ids]
        return {"seconds": seconds, "steps": list(map(len, ids)),
                "pieces": [[t.tokenizer.id_to_piece(j, "tgt") for j in i] for i in ids]}


def run(args) -> int:
    out = os.path.abspath(args.out)
    inputs_file(out)
    if args.pairs < 0 or args.b1 < 1 or args.max_new < 1:
        sys.exit("error: --pairs must be at least 0, --b1 and --max-new at least 1")
    npz = family(out) == "marian-npz"
    if npz != bool(args.pymarian):
        sys.exit(f"error: {out} holds " + ("a Marian release: give --pymarian PYTHON (a Python with pymarian)" if npz
                                           else "no Marian release (make --family marian-npz): leave --pymarian out"))
    load = os.getloadavg()[0]
    cpus = pin(args.cores)
    with open(os.path.join(out, "inputs.json"), encoding="utf-8") as f:
        sources = json.load(f)
    sizes = {"b1": min(args.b1, len(sources)), "b64": len(sources)}
    sys.path.insert(0, ROOT)
    from jaxnat.host_memory import keep_freed_memory

    keep_freed_memory()
    other, jx = Worker(out, len(cpus), args.max_new, args.pymarian), Jaxnat(out, args.max_new, sources, npz)
    name = other.name
    print(machine_line(cpus).replace("fairseq", name))
    print(f"loading: {name} worker {other.load_seconds:.1f} s, jaxnat {jx.load_seconds:.1f} s; sentences: "
          f"batch 1 {sizes['b1']}, batch 64 {sizes['b64']}", flush=True)
    cells = [(r, w) for r in ROWS for w in WORKLOADS]
    first, agree = {}, {}
    for r, w in cells:
        a, b = other.decode(r, w, sizes[w]), jx.decode(r, w, sizes[w])
        first[r, w] = (a["seconds"], b["seconds"])
        same = sum([p for p in x if p != "</s>"] == [p for p in y if p != "</s>"]
                   for x, y in zip(a["pieces"], b["pieces"]))
        agree[r, w] = (same, statistics.median(a["steps"]), statistics.median(b["steps"]))
        print(f"  first pass {r} b{WORKLOADS[w]}: {name} {a['seconds']:.1f} s, jaxnat {b['seconds']:.1f} s; "
              f"identical outputs {same}/{sizes[w]}", file=sys.stderr, flush=True)
    times = {cell: ([], []) for cell in cells}
    for p in range(args.pairs):
        for r, w in cells:
            times[r, w][0].append(other.decode(r, w, sizes[w])["seconds"])
            times[r, w][1].append(jx.decode(r, w, sizes[w])["seconds"])
            print(f"  pair {p + 1}/{args.pairs} {r} b{WORKLOADS[w]}: {name} {times[r, w][0][-1]:.2f} s, "
                  f"jaxnat {times[r, w][1][-1]:.2f} s", file=sys.stderr, flush=True)
    other.close()
    when = datetime.datetime.now(datetime.timezone.utc)
    print(f"\n{machine_line(cpus).replace('fairseq', name)}; {when:%Y-%m-%d %H:%M} UTC; load average "
          f"{load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; at most {args.max_new} tokens an output\n")
    print(f"Median of {args.pairs} pairs ({name}, then jaxnat); batch 1: ms a sentence over {sizes['b1']} "
          f"sentences (ratio: jaxnat/{name} latency); batch 64: sentences a second over {sizes['b64']} (ratio: "
          f"jaxnat/{name} throughput); ratio: median of the pairs' ratios (min–max)\n")
    print(f"| row | batch | identical outputs | median steps ({name} / jaxnat) | first pass, s | {name} | "
          "jaxnat | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    results = {}
    for (r, w), (a, b) in times.items():
        sa, sb = [speed(s, w, sizes[w]) for s in a], [speed(s, w, sizes[w]) for s in b]
        pair = [y / x for x, y in zip(sa, sb)]
        results[f"{r} {w}"] = {name: a, "jaxnat": b, "first": first[r, w], "identical": agree[r, w][0]}
        timed = (f"{statistics.median(sa):.1f} | {statistics.median(sb):.1f} | {statistics.median(pair):.2f} "
                 f"({min(pair):.2f}–{max(pair):.2f})") if pair else "– | – | –"
        print(f"| {r} | {WORKLOADS[w]} | {agree[r, w][0]}/{sizes[w]} | {agree[r, w][1]:g} / {agree[r, w][2]:g} | "
              f"{first[r, w][0]:.1f} / {first[r, w][1]:.1f} | {timed} |")
    path = os.path.join(out, f"results-{when:%Y%m%d-%H%M%S}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"when": f"{when:%Y-%m-%d %H:%M} UTC", "machine": machine_line(cpus), "sizes": sizes,
                   "pairs": args.pairs, "max_new": args.max_new, "results": results}, f, indent=1)
    print(f"\n(written to {path})")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("make", help="(reference env) the model, its tokenizer, the inputs")
    p.add_argument("--data-dir", required=True, help="Multi30k's directory (<split>.{en,de}.gz)")
    p.add_argument("--out", required=True)
    p.add_argument("--family", choices=("marian", "marian-npz", *MULTILINGUAL, "fsmt"), default="marian",
                   help="an OPUS-MT-sized Marian model (marian-npz: as Marian writes it), or one of "
                        "NLLB-200-distilled-600M's, mbart-large-50's or wmt19-en-de's (FSMT) size")
    p.add_argument("--vocab", type=int, default=58101, help="Marian: pieces in the shared vocabulary (OPUS-MT en-de's)")
    p.add_argument("--sentences", type=int, default=256, help="test sources decoded at batch 64")
    p.add_argument("--source-pieces", type=int, default=15, help="marian-npz: the pieces of every source")
    p = sub.add_parser("import", help="the model imported into $out/jaxnat")
    p.add_argument("--out", required=True)
    for worker in ("hf-worker", "marian-worker"):
        p = sub.add_parser(worker, help="(started by run)")
        p.add_argument("--out", required=True)
        p.add_argument("--threads", type=int, required=True)
        p.add_argument("--max-new", type=int, required=True)
    p = sub.add_parser("run", help="the first pass and the timed pairs")
    p.add_argument("--out", required=True)
    p.add_argument("--cores", type=int, default=None, help="pin both to the last N CPUs (default: all)")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--b1", type=int, default=16, help="sentences decoded one at a time")
    p.add_argument("--max-new", type=int, default=32, help="tokens an output at most, EOS included (marian-npz: "
                                                           "pieces, the factor × each source's pieces and EOS)")
    p.add_argument("--pymarian", metavar="PYTHON", help="marian-npz: a Python with pymarian 1.12.42 (Marian itself)")
    args = parser.parse_args(argv)
    return {"make": make, "import": import_model, "hf-worker": hf_worker, "marian-worker": marian_worker,
            "run": run}[args.cmd](args)


if __name__ == "__main__":
    sys.path.insert(0, ROOT)  # jaxnat.errors needs only the standard library: the reference env runs it too
    from jaxnat.errors import run_script

    run_script(main)
