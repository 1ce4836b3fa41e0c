"""Command line: `python -m jaxnat.main --config configs/<model>/<name>.py --workdir DIR
[--mode train|eval|translate|score|serve|distill|average|curves|import|export] [--input F] [--output F]
[--config.a.b=value ...]`.

--config.SECTION.KEY=VALUE sets one key over the config file's (--config.train.steps=500, --config.eval.beam_size=1).
Every key, its default and what it does: jaxnat/config.py's default_config (the shared sections model, data, train,
eval) and each family's own section (its Family.defaults in jaxnat/models/<family>/); a key jaxnat does not know,
or one the run would not read, is refused in one line.

train (default): trains, checkpoints, then evaluates the best checkpoint on the test splits.
eval: evaluates a trained workdir.  translate: plain or JSON lines in, JSON lines out.
score: source-translation pairs (JSON lines, or a tab between them) in, each with the model's log P(translation |
source), JSON lines out.  serve: the model behind an HTTP JSON API (POST /translate, /score) at --host:--port.
distill: the trained (AR) workdir translates the training sources into the text corpus --output DIR.
import: writes a model trained elsewhere (--from fairseq:FILE.pt, marian:DIR, marian:FILE.npz, nllb:DIR,
m2m100:DIR, mbart50:DIR, fsmt:DIR, sockeye:DIR or hf:DIR) as the new workdir, its config in <workdir>/config.json;
every other mode then takes that workdir without --config (docs/import.md).
export: writes the (AR) workdir's model for another library (--to ctranslate2:DIR [--quantization int8], marian:DIR,
nllb:DIR, m2m100:DIR, mbart50:DIR, fsmt:DIR, fairseq:DIR, or hf:DIR: the Hugging Face format it came from).
lm: estimates an n-gram language model of the run's training targets, in its pieces (eval.lm_order, Kneser-Ney),
as the ARPA file --output FILE, for eval.lm (docs/language_models.md).
average: writes the average of eval.average_checkpoints checkpoints (eval.average_of) into the workdir.
curves: draws <workdir>/curves.png from the run's history (no --config needed).
A train or eval command that ends (or a training stopped by a signal) appends its line to <workdir>/runs.jsonl
(jaxnat/provenance.py). User errors (config, data, files) print one line and exit with code 2; Ctrl-C and SIGTERM
one line and 130 or 143 (a training stops after its step in flight, with a checkpoint the same command resumes).
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import re
import sys
import time

from jaxnat.errors import ConfigError, Stopped, run_command
from jaxnat.exporters.ctranslate2 import QUANTIZATIONS
from jaxnat.host_memory import keep_freed_memory
from jaxnat.optional import check_core
from jaxnat.provenance import record

log = logging.getLogger("jaxnat")
MODES = ("train", "eval", "translate", "score", "serve", "distill", "average", "curves", "import", "export", "lm")
# the modes that read each option: another ignored it (`--input f --output o` without `--mode translate` trained)
OPTION_MODES = {"--input": ("translate", "score"), "--output": ("translate", "score", "distill", "lm"),
                "--from": ("import",),
                "--dict-dir": ("import",), "--host": ("serve",), "--port": ("serve",), "--max-body": ("serve",),
                "--to": ("export",), "--quantization": ("export",)}


class _Parser(argparse.ArgumentParser):
    """argparse's own rejections (unknown --mode, missing --workdir) read like every other jaxnat error."""

    def error(self, message):
        sys.stderr.write(f"jaxnat: error: {message}\nusage: {self.prog} --config FILE --workdir DIR "
                         f"[--mode {'|'.join(MODES)}] [--config.KEY=VALUE ...] (--help for more)\n")
        sys.exit(2)


def parse_args(argv):
    # the whole docstring as written: the modes and how config keys are set (its first line alone was cut short)
    parser = _Parser(prog="python -m jaxnat.main", description=__doc__, allow_abbrev=False,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="a config file, e.g. configs/ar/demo.py (every mode but curves)")
    parser.add_argument("--workdir", required=True,
                        help="run directory (train: created, resumed if it exists; other modes: a trained run)")
    parser.add_argument("--mode", choices=MODES, default="train")
    parser.add_argument("--input", help="translate, score: input file (default stdin)")
    parser.add_argument("--output",
                        help="translate, score: output file (default stdout); distill: output directory (required); "
                             "lm: the ARPA file (required)")
    parser.add_argument("--from", dest="source", metavar="FORMAT:PATH",
                        help="import: the model to import, fairseq:FILE.pt, marian:DIR (Hugging Face's or a "
                             "Marian release's), marian:FILE.npz, nllb:DIR, m2m100:DIR, mbart50:DIR (Hugging "
                             "Face's NLLB-200, M2M-100, mBART-50), sockeye:DIR (a Sockeye 3 model directory), "
                             "their ORG/NAME (from the local Hugging Face "
                             "cache: marian:Helsinki-NLP/opus-mt-en-de), or hf:DIR / hf:ORG/NAME (the format its "
                             "config.json names)")
    parser.add_argument("--dict-dir", help="import from fairseq: the directory of the model's dict.<lang>.txt and "
                                           "BPE files (default: the checkpoint's); from Sockeye: of the "
                                           "SentencePiece model(s) that cut its data (default: the model's)")
    parser.add_argument("--to", dest="target", metavar="FORMAT:DIR",
                        help="export: where to write the model, ctranslate2:DIR (CTranslate2's), marian:DIR (Hugging "
                             "Face's MarianMTModel, for a model of Marian's conventions), marian-npz:DIR (Marian's "
                             "own .npz, for a model computing Marian's function), nllb:DIR, m2m100:DIR, "
                             "mbart50:DIR, fsmt:DIR, hf:DIR (a Hugging Face import's own class) or fairseq:DIR "
                             "(fairseq's checkpoint); a new directory")
    parser.add_argument("--quantization", choices=QUANTIZATIONS,
                        help="export: the weights' type in CTranslate2 (default float32; int8: a quarter of the size, "
                             "faster at large batches, docs/benchmarks.md)")
    parser.add_argument("--host", help="serve: the address to listen on (default 127.0.0.1, this machine only; "
                                       "0.0.0.0: every interface)")
    parser.add_argument("--port", type=int, help="serve: the port to listen on (default 8080; 0: any free one)")
    parser.add_argument("--max-body", type=int, help="serve: the largest request body taken, in bytes (default 16 MiB)")
    args, rest = parser.parse_known_args(argv)
    for option, modes in OPTION_MODES.items():
        dest = {"--from": "source", "--to": "target"}.get(option, option[2:].replace("-", "_"))
        if getattr(args, dest) is not None and args.mode not in modes:
            parser.error(f"{option} is for --mode {' or '.join(modes)}, not --mode {args.mode}")
    if args.port is not None and not 0 <= args.port <= 65535:
        parser.error(f"--port {args.port}: a port is 0 (any free one) to 65535")
    if args.max_body is not None and args.max_body < 1:
        parser.error(f"--max-body {args.max_body}: at least 1 byte")
    if args.mode == "import":
        if not args.source:
            parser.error("--mode import needs --from FORMAT:PATH (fairseq:FILE.pt, marian:DIR, hf:DIR, …)")
        if args.config or rest:
            parser.error("--mode import takes no --config: the model's own settings make the workdir's config.json")
    elif args.mode == "export" and not args.target:
        parser.error("--mode export needs --to FORMAT:DIR (ctranslate2:DIR, marian:DIR, nllb:DIR, m2m100:DIR, "
                     "mbart50:DIR, fsmt:DIR, fairseq:DIR or hf:DIR)")
    if args.mode != "import" and args.config is None and args.mode != "curves":
        recorded = os.path.join(args.workdir, "config.json")
        if args.mode == "train" or not os.path.lexists(recorded):  # (a directory there: load_config says so)
            parser.error("the following arguments are required: --config (optional for a workdir with a "
                         "config.json, in every mode but train)")
        args.config = recorded
    return args, rest


def enable_compilation_cache() -> None:
    """XLA's persistent compilation cache: a resumed or repeated run skips recompiling its shapes.

    JAXNAT_COMPILATION_CACHE=DIR moves it (default ~/.cache/jaxnat/xla); =off disables it. Programs that compile
    in under JAXNAT_COMPILATION_CACHE_MIN_SECONDS (default 0.5) are not written: recompiling them costs about what
    reading them back does, except where a process compiles little else (the test suite's tiny runs set it to 0).
    """

    import jax

    from jaxnat.errors import ConfigError

    where = os.environ.get("JAXNAT_COMPILATION_CACHE", os.path.expanduser("~/.cache/jaxnat/xla"))
    least = os.environ.get("JAXNAT_COMPILATION_CACHE_MIN_SECONDS", "0.5")
    try:
        least = float(least)
    except ValueError:
        raise ConfigError(f"JAXNAT_COMPILATION_CACHE_MIN_SECONDS={least!r} is not a number of seconds") from None
    if where != "off":
        jax.config.update("jax_compilation_cache_dir", where)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", least)


def set_xla_flags(config) -> None:
    """Appends the config's XLA options to XLA_FLAGS (read when the backend starts, at the first computation)."""
    level = config.train.xla_gpu_autotune_level
    if level >= 0:
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_gpu_autotune_level={level}".strip()


def check_paths(args) -> None:
    """Every path the command will write or read as a run, checked before anything is loaded or computed."""
    from jaxnat.paths import check_creatable_dir, check_existing_dir, check_not_the_input, check_writable_file

    if args.mode == "import":
        if os.path.exists(args.workdir):
            raise ConfigError(f"--workdir {args.workdir} exists; --mode import writes a new workdir")
        check_creatable_dir(args.workdir, "--workdir")
    elif args.mode == "train":
        check_creatable_dir(args.workdir, "--workdir")
    else:
        check_existing_dir(args.workdir, "--workdir")
        if args.mode in ("eval", "average", "curves"):  # they write there (metrics.json, averaged/, curves.png)
            check_creatable_dir(args.workdir, "--workdir")
    if args.mode == "export":
        from jaxnat.exporters import parse_target

        directory = parse_target(args.target)[1]
        if os.path.lexists(directory):
            raise ConfigError(f"--to {args.target}: {directory} exists; an export writes a new directory")
        check_creatable_dir(directory, "--to")
    if args.mode == "lm":
        if not args.output:
            raise ConfigError("--mode lm needs --output FILE, the ARPA file to write")
        check_writable_file(args.output, "--output")
    if args.mode == "distill":
        if not args.output:
            raise ConfigError("--mode distill needs --output DIR, the directory to write the distilled corpus to")
        check_creatable_dir(args.output, "--output")
    elif args.mode in ("translate", "score") and args.output:
        check_writable_file(args.output, "--output")
        check_not_the_input(args.output, "--output", args.input, "--input",
                            "translations" if args.mode == "translate" else "scores")


def configure_logging() -> None:
    """jaxnat's progress lines (INFO: training's loss, speed and validations) on stderr with their time, without
    the libraries' chatter; also for a notebook, whose kernel (or absl, at its first log line) may have set up
    logging at WARNING already (``force``)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S",
                        force=True)
    for noisy in ("absl", "orbax", "jax._src"):  # Orbax logs every save and restore at INFO
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # sacreBLEU warns at every call that a corpus with "." as its own token looks tokenized (the embedded one is)
    logging.getLogger("sacrebleu").setLevel(logging.ERROR)


def run(argv=None) -> int:
    started = time.time()
    argv = sys.argv[1:] if argv is None else argv
    args, rest = parse_args(argv)
    check_paths(args)  # first: nothing is loaded for a command that could not save its results
    check_core()
    keep_freed_memory()  # before jax's backend starts its threads
    configure_logging()
    if args.mode == "import":
        from jaxnat.importers import write_workdir

        print(write_workdir(args.source, args.workdir, args.dict_dir))
        return 0
    if args.mode == "curves":
        from jaxnat.training.history import plot_curves

        print(plot_curves(args.workdir, required=True))
        return 0
    from jaxnat.config import build_config

    enable_compilation_cache()

    config = build_config(args.config, rest)
    set_xla_flags(config)
    from jaxnat.training.mesh import agreed, check_same_command, maybe_initialize_distributed

    maybe_initialize_distributed()
    check_same_command(f"--mode {args.mode}\n{config.to_json_best_effort(sort_keys=True)}")
    if args.mode in ("eval", "distill"):
        from jaxnat.data import piece_vocab

        piece_vocab.check_has_data(config, args.workdir,
                                   "name its test data with --config.data.source=text --config.data.dir=DIR")
    if args.mode == "train":
        from jaxnat.evaluate import already_evaluated, evaluate
        from jaxnat.training.trainer import Trainer

        trainer = Trainer(config, args.workdir)
        try:
            trained = trainer.train()
        except Stopped:  # a part of the run all the same: its time counts
            record(args.workdir, "train", time.time() - started, argv, steps=trainer.ckpt.latest_step())
            raise
        if trained:
            record(args.workdir, "train", time.time() - started, argv, steps=trainer.ckpt.latest_step())
        if agreed(trained or not already_evaluated(config, args.workdir)):  # process 0 writes what it reads
            evaluated = time.time()
            evaluate(config, args.workdir)
            record(args.workdir, "eval", time.time() - evaluated, argv)
        else:
            log.info("metrics.json already holds this config's evaluation of %s (--mode eval redoes it)",
                     args.workdir)
    elif args.mode == "eval":
        from jaxnat.evaluate import evaluate

        evaluate(config, args.workdir)
        record(args.workdir, "eval", time.time() - started, argv)
    elif args.mode == "average":
        from jaxnat.restore import write_average

        print(write_average(config, args.workdir))
    elif args.mode == "export":
        from jaxnat.exporters import export

        print(export(config, args.workdir, args.target, args.quantization or "float32"))
    elif args.mode == "lm":
        from jaxnat.data.kneser_ney import write_run_lm

        print(write_run_lm(config, args.workdir, args.output))
    elif args.mode == "distill":
        from jaxnat.distill import distill

        distill(config, args.workdir, args.output, config_path=args.config, overrides=rest)
    elif args.mode == "serve":
        from jaxnat.decoding.serve import MAX_BODY, serve
        from jaxnat.restore import load_translator

        serve(lambda: load_translator(config, args.workdir), config, args.workdir, args.host or "127.0.0.1",
              8080 if args.port is None else args.port, args.max_body or MAX_BODY)
    else:
        from jaxnat.decoding.score_io import score_stream
        from jaxnat.decoding.translate_io import translate_stream
        from jaxnat.restore import load_translator

        run_stream = translate_stream if args.mode == "translate" else score_stream
        run_stream(lambda: load_translator(config, args.workdir), config, args.input, args.output)
    return 0


def main(argv=None) -> int:
    # SIGTERM as Ctrl-C outside training's steps, whose own handler stops after a checkpoint (training/stop.py,
    # `Stopped`); during a translation Ctrl-C or SIGTERM is `Interrupted`
    try:
        return run_command(lambda: run(argv), "the same command starts again (training resumes from the newest "
                           "checkpoint, distillation from the last finished chunk, an evaluation starts over)")
    except Exception as e:
        if where := _disk_full(e):
            # a checkpoint is written to a temporary directory and renamed when complete: the newest complete one
            # stays. (The checkpointer's writer threads fail with it: `DISK_FULL`, their errors left unprinted.)
            print(f"jaxnat: error: no space left on device ({where}); free space and run the same command "
                  f"again: training resumes from its newest complete checkpoint, distillation from its last finished "
                  f"chunk", file=sys.stderr)
            return DISK_FULL
        # the device ran out of memory: say what to change, not a traceback
        if type(e).__name__ not in ("JaxRuntimeError", "XlaRuntimeError") or "RESOURCE_EXHAUSTED" not in str(e):
            raise
        print(f"jaxnat: error: out of device memory ({str(e).splitlines()[0]}); lower data.batch_tokens or "
              f"data.max_len (training), eval.batch_size or eval.beam_size (decoding); the same command resumes "
              f"training from its newest checkpoint", file=sys.stderr)
        return 1


DISK_FULL = 28  # the exit status of a full disk (ENOSPC's number)


def _disk_full(error: BaseException) -> str:
    """What a full disk failed to write ('' if ``error`` is not a full disk): an OSError of ENOSPC or EDQUOT, or
    the checkpointer's ValueError that carries one (TensorStore's 'No space left on device [os_error_code=...]')."""
    for e in (error, error.__cause__, error.__context__):
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return e.filename or "writing"
        if e is not None and "No space left on device" in str(e):
            path = re.search(r'(?:local file|Failed writing:) "([^"]+)"', str(e))
            return path.group(1) if path else "writing"
    return ""


if __name__ == "__main__":
    status = main()
    if status == DISK_FULL:  # the checkpointer's threads would print their failed writes as the interpreter exits
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)
