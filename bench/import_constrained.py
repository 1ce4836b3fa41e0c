"""Constrained decoding of an imported fairseq model: jaxnat's two constrained beam searches (its own, under its own
rules, and its port of fairseq's, under fairseq's) beside its plain beam search and beside fairseq's `--constraints`
on the same weights, the same sentences and the same length limit.

    D=/tmp/import-constrained
    # (a) in the reference environment (tools/reference_env.sh): a fairseq `transformer` with random weights
    #     (3+3 layers, d 256, FFN 1024, 4 heads by default), subword-nmt BPE codes and dictionaries learned on
    #     Multi30k's training text, saved with fairseq's checkpoint_utils, and the inputs of both tools: --groups
    #     blocks of 64 sentences of --splits, each block of one source length, with 1-2 reference words of each
    #     sentence as its constraints (batch 64), and --batch1-sentences of them (batch 1)
    .refenv/bin/python bench/import_constrained.py make --data-dir ../shared/data/multi30k --out $D
    # (b) import it into a jaxnat workdir ($D/jaxnat)
    python bench/import_constrained.py import --out $D
    # (c) the twelve commands to time, one a line: "<b1|b64> <jaxnat|jaxnat-fs|fairseq> <plain|cons> sh -c '...'";
    #     time them in pairs (A and B in turn), each pinned to one core with one thread
    #     (OMP_NUM_THREADS=1 taskset -c 0 ...), $D/log/ emptied before each pair; then compare the outputs and
    #     read the in-process times
    python bench/import_constrained.py commands --out $D
    python bench/import_constrained.py check --out $D [--warmup 1] [--logs DIR]

Each timed command is a whole process writing its outputs under $D/out/ and appending its own in-process times to
$D/log/, beam 4 and fairseq's length limit (max_len_a 1.2, max_len_b 10) throughout, plain or with the constraints
in the given order:
* `jaxnat`: what `python -m jaxnat.main --mode translate` does (printing its load and translate seconds) under
  jaxnat's rules (`eval.search_rules=jaxnat`); constrained, its own VDBA/DBA search (`eval.constraint_order=given`,
  jaxnat/decoding/constrained.py), which guarantees the constraints;
* `jaxnat-fs`: the same under `eval.search_rules=fairseq`: fairseq's beam search, and constrained its port of
  fairseq's `LexicallyConstrainedBeamSearch` (jaxnat/decoding/constrained_fairseq.py, ordered progress);
* `fairseq`: fairseq 0.12.2's `fairseq-interactive` under .refenv/bin/python, with `--constraints ordered`
  (constraints tab-separated after the source); its log gives its translation time.
fairseq limits a batch's outputs by its padded source width, jaxnat under fairseq's rules by the batch's longest
source, under its own by each sentence's length: batches of one source length make the three the same. `check`
compares the outputs: jaxnat-fs must give fairseq's outputs, plain and constrained (it reports the share
identical; jaxnat's own rules are reported beside it, not expected to agree), and counts the constraints found, in
order, in each system's constrained outputs (as the pieces produced, and as whole words).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import random
import re
import shlex
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC, TGT = "en", "de"
BEAM = 4
MAX_LEN_A, MAX_LEN_B = 1.2, 10
MODES = ("plain", "cons")
# the decoders compared: jaxnat under its own rules (constrained: its VDBA/DBA search, jaxnat/decoding/constrained.py),
# jaxnat under fairseq's (constrained: the port of fairseq's, constrained_fairseq.py), and fairseq-interactive itself
SYSTEMS = {"jaxnat": "jaxnat", "jaxnat-fs": "fairseq", "fairseq": None}


def read_gz(path: str, n: int | None = None) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    return lines[:n] if n else lines


def pick_constraints(ref: str, rng: random.Random) -> list[str]:
    """1 or 2 words of the reference (letters only, 3+ characters, each used once), in the reference's order."""
    words = list(dict.fromkeys(w for w in ref.split() if re.fullmatch(r"[^\W\d_]{3,}", w)))
    k = min(len(words), rng.choice((1, 2)))
    return [words[i] for i in sorted(rng.sample(range(len(words)), k))]


# ---------------------------------------------------------------- (a) make: under .refenv/bin/python


def learn_text_pipeline(data_dir: str, out: str, merges: int):
    """Moses tokens of the training text (fairseq's moses tokenizer settings), joint subword-nmt codes, then each
    side's dictionary of the BPE'd text, as fairseq-preprocess writes it (padding factor 8)."""
    from fairseq.data import Dictionary
    from sacremoses import MosesTokenizer
    from subword_nmt.apply_bpe import BPE
    from subword_nmt.learn_bpe import learn_bpe

    tok = {}
    for lang in (SRC, TGT):
        moses = MosesTokenizer(lang=lang)
        tok[lang] = [moses.tokenize(s, return_str=True, escape=True, aggressive_dash_splits=True)
                     for s in read_gz(os.path.join(data_dir, f"train.{lang}.gz"))]
    codes = os.path.join(out, "bpecodes")
    with open(codes, "w", encoding="utf-8") as f:
        learn_bpe(io.StringIO("\n".join(tok[SRC] + tok[TGT]) + "\n"), f, merges)
    with open(codes, encoding="utf-8") as f:
        bpe = BPE(f)
    for lang in (SRC, TGT):
        d = Dictionary()
        for line in tok[lang]:
            for w in bpe.process_line(line).split():
                d.add_symbol(w)
        d.finalize(padding_factor=8)
        d.save(os.path.join(out, f"dict.{lang}.txt"))
    return codes


def build_model(out: str, codes: str, args) -> str:
    """A fairseq `transformer` (post-norm, sinusoidal positions, relu, tied decoder output) of the given size, every
    parameter redrawn (tools/make_import_fixtures.py's `perturb`: peaked output distributions, so that the two
    implementations' rounding does not decide between near-tied tokens), saved as fairseq saves checkpoints."""
    import torch

    sys.path.insert(0, os.path.join(ROOT, "tools"))
    from make_import_fixtures import fairseq_model, perturb, save_fairseq

    torch.manual_seed(args.seed)
    d, f, h, n = str(args.dim), str(args.ffn), str(args.heads), str(args.layers)
    argv = [out, "--task", "translation", "-s", SRC, "-t", TGT, "--arch", "transformer",
            "--encoder-layers", n, "--decoder-layers", n, "--encoder-embed-dim", d, "--decoder-embed-dim", d,
            "--encoder-ffn-embed-dim", f, "--decoder-ffn-embed-dim", f, "--encoder-attention-heads", h,
            "--decoder-attention-heads", h, "--share-decoder-input-output-embed",
            "--bpe", "subword_nmt", "--bpe-codes", codes, "--tokenizer", "moses", "--optimizer", "adam",
            "--lr", "0.0005", "--max-tokens", "4096"]
    _, cfg, model = fairseq_model(argv)
    perturb(model, seed=args.seed)
    path = os.path.join(out, "model.pt")
    save_fairseq(cfg, model, path)
    return path


def piece_lengths(lines: list[str], lang: str, codes: str) -> list[int]:
    """Each line's length in BPE pieces, as fairseq-interactive encodes it (Moses, then subword-nmt)."""
    from sacremoses import MosesTokenizer
    from subword_nmt.apply_bpe import BPE

    moses = MosesTokenizer(lang=lang)
    with open(codes, encoding="utf-8") as f:
        bpe = BPE(f)
    return [len(bpe.process_line(moses.tokenize(s, return_str=True, escape=True, aggressive_dash_splits=True))
                .split()) for s in lines]


def write_inputs(data_dir: str, out: str, codes: str, args) -> None:
    """inputs/{b1,b64}.{plain,cons}.{jsonl,txt}: jaxnat's JSON lines and fairseq-interactive's lines (constraints
    tab-separated after the source). fairseq limits a batch's outputs by its padded source width, jaxnat each
    sentence by its own length: so the batch-64 workload is --groups blocks of 64 sentences, each of one length
    in pieces (the most frequent lengths of --splits, first sentences first), and the two rules agree. The batch-1
    workload: the first --batch1-sentences // --groups sentences of each block."""
    src, ref = [], []
    for split in args.splits.split(","):
        src += read_gz(os.path.join(data_dir, f"{split}.{SRC}.gz"))
        ref += read_gz(os.path.join(data_dir, f"{split}.{TGT}.gz"))
    lengths = piece_lengths(src, SRC, codes)
    common = sorted(set(lengths), key=lambda n: (-lengths.count(n), n))[:args.groups]
    blocks = [[i for i, n in enumerate(lengths) if n == length][:64] for length in sorted(common)]
    chosen = [i for b in blocks for i in b]
    first = [i for b in blocks for i in b[:args.batch1_sentences // args.groups]]
    rng = random.Random(args.seed)
    cons = {i: pick_constraints(ref[i], rng) for i in chosen}
    os.makedirs(os.path.join(out, "inputs"), exist_ok=True)
    for workload, rows in (("b1", first), ("b64", chosen)):
        for mode in MODES:
            stem = os.path.join(out, "inputs", f"{workload}.{mode}")
            with open(stem + ".jsonl", "w", encoding="utf-8") as js, open(stem + ".txt", "w", encoding="utf-8") as fs:
                for i in rows:
                    c = cons[i] if mode == "cons" else []
                    js.write(json.dumps({"src": src[i], "constraints": c, "hard": True} if c else {"src": src[i]},
                                        ensure_ascii=False) + "\n")
                    fs.write("\t".join([src[i]] + c) + "\n")
    print(f"batch-64 workload: {len(blocks)} blocks of {[len(b) for b in blocks]} sentences of "
          f"{sorted(common)} pieces; batch-1 workload: {len(first)} sentences; "
          f"{sum(map(len, cons.values()))} constraint words")


def make(args) -> int:
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    codes = learn_text_pipeline(args.data_dir, args.out, args.merges)
    path = build_model(args.out, codes, args)
    write_inputs(args.data_dir, args.out, codes, args)
    sizes = {lang: sum(1 for _ in open(os.path.join(args.out, f"dict.{lang}.txt"), encoding="utf-8"))
             for lang in (SRC, TGT)}
    print(f"wrote {path} (dictionaries {sizes}) and {args.out}/inputs in {time.time() - t0:.0f} s")
    return 0


# ---------------------------------------------------------------- (b) import


def import_model(args) -> int:
    workdir = os.path.join(args.out, "jaxnat")
    cmd = [sys.executable, "-m", "jaxnat.main", "--mode", "import", "--from",
           f"fairseq:{os.path.join(args.out, 'model.pt')}", "--workdir", workdir]
    return subprocess.call(cmd, cwd=ROOT)


# ---------------------------------------------------------------- (c) the timed commands


def jaxnat_overrides(rules: str, mode: str, batch: int) -> list[str]:
    o = [f"--config.eval.batch_size={batch}", f"--config.eval.beam_size={BEAM}", f"--config.eval.search_rules={rules}",
         f"--config.eval.max_len_a={MAX_LEN_A}", f"--config.eval.max_len_b={MAX_LEN_B}"]
    return o + (["--config.eval.constraint_order=given"] if mode == "cons" else [])


def run_jaxnat(args) -> int:
    """`python -m jaxnat.main --mode translate --workdir W --input F --output O OVERRIDES`, step by step, with the
    seconds to load the model and to translate (compilation, or reading it from XLA's cache, included) on stderr."""
    sys.path.insert(0, ROOT)
    t0 = time.perf_counter()
    from jaxnat.config import build_config
    from jaxnat.decoding.translate_io import translate_stream
    from jaxnat.main import enable_compilation_cache
    from jaxnat.restore import load_translator

    enable_compilation_cache()
    config = build_config(os.path.join(args.workdir, "config.json"), args.overrides)
    loaded = {}

    def load():
        translator = load_translator(config, args.workdir)
        loaded["t"] = time.perf_counter()
        return translator

    translate_stream(load, config, args.input, args.output)
    t1 = time.perf_counter()
    print(f"jaxnat: load {loaded['t'] - t0:.3f} s; translate {t1 - loaded['t']:.3f} s", file=sys.stderr)
    return 0


def fairseq_argv(out: str, mode: str, batch: int) -> list[str]:
    argv = [out, "--path", os.path.join(out, "model.pt"), "--source-lang", SRC, "--target-lang", TGT,
            "--bpe", "subword_nmt", "--bpe-codes", os.path.join(out, "bpecodes"), "--tokenizer", "moses",
            "--beam", str(BEAM), "--max-len-a", str(MAX_LEN_A), "--max-len-b", str(MAX_LEN_B),
            "--batch-size", str(batch), "--buffer-size", str(batch)]
    return argv + (["--constraints", "ordered"] if mode == "cons" else [])


def commands(args) -> int:
    """One line per timed command: `<workload> <system> <mode> <shell command>` (SYSTEMS, MODES); the outputs go
    to $out/out/<system>.<workload>.<mode>.{jsonl,txt}, the in-process times to $out/log/<system>.<...>.log."""
    out, refenv = os.path.abspath(args.out), os.path.join(ROOT, ".refenv", "bin", "python")
    for d in ("out", "log"):
        os.makedirs(os.path.join(out, d), exist_ok=True)
    for workload, batch in (("b1", 1), ("b64", 64)):
        for mode in MODES:
            stem = f"{workload}.{mode}"
            inp = os.path.join(out, "inputs", stem)
            for system in SYSTEMS:
                log = os.path.join(out, "log", f"{system}.{stem}.log")
                if system == "fairseq":  # its hypotheses on stdout, its log (and translation time) on stderr
                    cmd = [refenv, "-m", "fairseq_cli.interactive", *fairseq_argv(out, mode, batch),
                           "--input", inp + ".txt"]
                    redirect = f">{os.path.join(out, 'out', f'fairseq.{stem}.txt')} 2>>{log}"
                else:  # its JSON lines to --output, its load and translate seconds on stderr
                    cmd = [sys.executable, os.path.abspath(__file__), "jaxnat",
                           "--workdir", os.path.join(out, "jaxnat"), "--input", inp + ".jsonl",
                           "--output", os.path.join(out, "out", f"{system}.{stem}.jsonl"),
                           "--", *jaxnat_overrides(SYSTEMS[system], mode, batch)]
                    redirect = f"2>>{log}"
                print(workload, system, mode, shlex.join(["sh", "-c", f"exec {shlex.join(cmd)} {redirect}"]))
    return 0


# ---------------------------------------------------------------- check


def fairseq_outputs(path: str) -> tuple[list[str], list[int]]:
    """fairseq-interactive's detokenized hypotheses (D- lines) in input order, and their lengths in pieces (H-)."""
    text, pieces = {}, {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line[:2] in ("D-", "H-"):
                key, _, hyp = line.rstrip("\n").split("\t", 2)
                (text if key[0] == "D" else pieces)[int(key[2:])] = hyp
    return [text[i] for i in range(len(text))], [len(pieces[i].split()) for i in range(len(pieces))]


def found(hyp: str, phrases: list[str], whole_words: bool) -> list[int]:
    """For each phrase, in the given order, where it starts in hyp after the previous one ends (-1: not found);
    with ``whole_words`` only as whole words (no letter or digit glued on either side)."""
    at, where = 0, []
    for p in phrases:
        m = re.compile(rf"(?<!\w){re.escape(p)}(?!\w)" if whole_words else re.escape(p)).search(hyp, at)
        where.append(m.start() if m else -1)
        at = m.end() if m else at
    return where


def constraint_row(tool: str, hyps: list[str], phrases: list[list[str]]) -> str:
    total = sum(map(len, phrases))
    row = f"{tool}: constraints"
    for label, whole in (("produced", False), ("as whole words", True)):
        hits = [found(h, c, whole) for h, c in zip(hyps, phrases)]
        met = sum(x >= 0 for w in hits for x in w)
        row += f" {label} {met}/{total}, all in order in {sum(all(x >= 0 for x in w) for w in hits)}/{len(hyps)};"
    return row


def in_process(path: str, warmup: int) -> str:
    """The median of the translate seconds the runs appended to a log, the first ``warmup`` runs left out."""
    from statistics import median

    if not os.path.exists(path):
        return ""
    text = open(path, encoding="utf-8").read()
    pairs = re.findall(r"translation time: ([\d.]+)|translate ([\d.]+) s", text)
    secs = [float(x) for pair in pairs for x in pair if x][warmup:]
    return f"median {median(secs):.2f} s over {len(secs)} runs ({min(secs):.2f}-{max(secs):.2f})" if secs else ""


def outputs(out: str, system: str, stem: str) -> list[str] | None:
    """A system's detokenized outputs for a workload, in input order (None: not run yet)."""
    path = os.path.join(out, "out", f"{system}.{stem}.{'txt' if system == 'fairseq' else 'jsonl'}")
    if not os.path.exists(path):
        return None
    if system == "fairseq":
        return fairseq_outputs(path)[0]
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["hyp"] for line in f]


def check(args) -> int:
    """Per workload: the share of each jaxnat system's outputs identical to fairseq's (jaxnat-fs must be fairseq's
    token for token, plain and constrained; jaxnat's own rules need not be), the constraints found in each
    system's constrained outputs, and each system's in-process translate times."""
    from statistics import median

    out = os.path.abspath(args.out)
    for workload in ("b1", "b64"):
        for mode in MODES:
            stem = f"{workload}.{mode}"
            hyps = {s: h for s in SYSTEMS if (h := outputs(out, s, stem)) is not None}
            with open(os.path.join(out, "inputs", f"{stem}.jsonl"), encoding="utf-8") as f:
                reqs = [json.loads(line) for line in f]
            missing = ", ".join(s for s in SYSTEMS if s not in hyps) or "none"
            print(f"{stem}: {len(reqs)} sentences; not run yet: {missing}")
            if "fairseq" in hyps:
                pieces = fairseq_outputs(os.path.join(out, "out", f"fairseq.{stem}.txt"))[1]
                same = {s: sum(a == b for a, b in zip(h, hyps["fairseq"])) for s, h in hyps.items() if s != "fairseq"}
                print(f"  fairseq's outputs: median {median(pieces)} pieces, max {max(pieces)}; identical to them: "
                      + ", ".join(f"{s} {n}/{len(reqs)} ({100 * n / len(reqs):.1f}%)" for s, n in same.items()))
            if mode == "cons":
                for system, h in hyps.items():
                    print("  " + constraint_row(system, h, [r["constraints"] for r in reqs]))
            for system in SYSTEMS:
                if times := in_process(os.path.join(args.logs or os.path.join(out, "log"), f"{system}.{stem}.log"),
                                       args.warmup):
                    print(f"  {system} in-process translate time: {times}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("make", help="(reference env) the fairseq model, its BPE codes and dictionaries, the inputs")
    p.add_argument("--data-dir", required=True, help="Multi30k's directory (train/<split>.{en,de}.gz)")
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
    p.set_defaults(fn=make)
    p = sub.add_parser("import", help="python -m jaxnat.main --mode import into OUT/jaxnat")
    p.add_argument("--out", required=True)
    p.set_defaults(fn=import_model)
    p = sub.add_parser("commands", help="the timed commands, one a line: workload tool mode command")
    p.add_argument("--out", required=True)
    p.set_defaults(fn=commands)
    p = sub.add_parser("jaxnat", help="jaxnat's translate mode, its load and translate seconds on stderr")
    p.add_argument("--workdir", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("overrides", nargs="*", help="--config.a.b=value ... (after --)")
    p.set_defaults(fn=run_jaxnat)
    p = sub.add_parser("check", help="the outputs compared, the constraints counted, the in-process times")
    p.add_argument("--out", required=True)
    p.add_argument("--warmup", type=int, default=1, help="runs of each log/ file not counted (warm-up runs)")
    p.add_argument("--logs", help="read the in-process times from here (a copy of OUT/log), not OUT/log")
    p.set_defaults(fn=check)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
