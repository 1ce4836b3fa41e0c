"""The bench/ scripts measure what they say: their programs take their inputs as arguments (not constants XLA
folds away), their rates divide by the work they timed, and bad input stops them with one line."""

import argparse
import importlib.util
import os
import re
import shutil
import statistics
import subprocess
import sys
import types

import jax
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bench(name: str):
    """bench/<name>.py as a module (its main not run)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", os.path.join(ROOT, "bench", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_oracle_edit_ops_are_timed_on_arguments_not_folded_constants():
    """bench/oracle.py's edit-operation latencies: every program reads its inputs (a closure over them made them
    constants, and XLA compiled carry slots and fill placeholders to a constant, timed at a few µs)."""
    cases = bench("oracle").edit_op_cases(batch=4, length=16)
    assert len(cases) == 5
    for name, (op, inputs) in cases.items():
        hlo = jax.jit(op).lower(*inputs).compile().as_text()
        entry = hlo[hlo.index("\nENTRY"):]
        assert len(re.findall(r"= \S+ parameter\(\d+\)", entry)) == len(inputs), name


def test_oracle_plain_python_rate_counts_the_pairs_it_labelled(monkeypatch, capsys):
    """--python-pairs beyond the batch labels the whole batch: the rate divides by the batch, not by the flag (a
    --python-pairs 2560 run reported the plain-Python reference faster than numpy)."""
    oracle = bench("oracle")
    small = oracle.make_pairs
    monkeypatch.setattr(oracle, "make_pairs", lambda batch, length, seed=0: small(4, 16, seed))  # 4 pairs a batch
    monkeypatch.setattr(oracle, "median_time", lambda fn, repeats: (fn(), 1.0)[1])  # every timed call: 1 s
    oracle.oracle_table(1, 1000)
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines() if line.startswith("| ed")]
    assert len(rows) == 4 and all(row[5] == "4" for row in rows), rows  # plain Python (pairs/s): 4 pairs in 1 s


def test_train_throughput_without_fairseq_rows_needs_no_reference_env(monkeypatch, tmp_path, capsys):
    """`--fairseq ''` (the docs' jaxnat-only commands) neither binarises fairseq's data nor asks for .refenv."""
    throughput = bench("train_throughput")
    monkeypatch.setattr(throughput, "ROOT", str(tmp_path))  # a checkout without .refenv
    (tmp_path / "work" / "spm" / "spm").mkdir(parents=True)  # the shared vocabulary's run, made before
    (tmp_path / "work" / "spm" / "spm" / "joint.model").write_bytes(b"")
    run = {"first_step_s": 20.0, "tok_s": 1000.0, "mfu": 0.5, "peak": 0.1}
    monkeypatch.setattr(throughput, "jaxnat_run", lambda *args: run)
    monkeypatch.setattr("sys.argv", ["train_throughput.py", "--data-dir", str(tmp_path / "data"), "--work",
                                     str(tmp_path / "work"), "--families", "ar", "--fairseq", "", "--repeats", "1"])
    throughput.main()
    assert "| ar | 20 | 1000 | 50.0 | 50.0% | – | – | – |" in capsys.readouterr().out
    assert not (tmp_path / "work" / "fairseq-text").exists()


def test_train_throughput_trains_the_vocabulary_an_interrupted_run_left_unmade(monkeypatch, tmp_path):
    """A run stopped during the SentencePiece training leaves <work>/spm/spm/ without a model: the next run with that
    --work trains it again (it took the folder for the model and stopped in SentencePiece's RuntimeError)."""
    throughput = bench("train_throughput")
    (tmp_path / "spm" / "spm").mkdir(parents=True)
    trained = []
    monkeypatch.setattr("jaxnat.config.build_config", lambda path, overrides: path)
    monkeypatch.setattr("jaxnat.training.trainer.Trainer", lambda config, workdir: trained.append(workdir))
    throughput.prepare(str(tmp_path / "data"), str(tmp_path), fairseq=False)
    assert trained == [str(tmp_path / "spm")]


def test_train_throughput_fairseq_writes_under_work_not_the_checkout(monkeypatch, tmp_path):
    """fairseq_cli.train makes its --save-dir even with --no-save: the default left an empty checkpoints/ in the
    checkout the script runs from."""
    throughput = bench("train_throughput")
    monkeypatch.setattr(throughput, "reference_python", lambda: "python")
    commands = []
    monkeypatch.setattr(throughput, "watch", lambda command, *rest: commands.append(command) or [])
    args = argparse.Namespace(steps=4, window=2, work=str(tmp_path))
    with pytest.raises(statistics.StatisticsError):  # no window logged by the stand-in
        throughput.fairseq_run("ar", args, "bin", str(tmp_path / "log"))
    save_dir = commands[0][commands[0].index("--save-dir") + 1]
    assert save_dir.startswith(str(tmp_path))


def test_train_throughput_refuses_counts_that_leave_no_window(monkeypatch, tmp_path):
    """--steps no more than --window leaves no window after the warm-up's: refused before any run (it trained, then
    stopped with a traceback of statistics.median); so is --steps not a multiple of --window (fairseq logs whole
    windows only, so its run never reached the last one and stopped the script after every jaxnat run)."""
    throughput = bench("train_throughput")
    monkeypatch.setattr(throughput, "prepare", lambda *args: pytest.fail("a run started"))
    for counts in (["--steps", "20", "--window", "20"], ["--repeats", "0"], ["--window", "0"],
                   ["--steps", "50", "--window", "20"]):  # fairseq never logged step 50: it failed after the rest
        monkeypatch.setattr("sys.argv", ["train_throughput.py", "--work", str(tmp_path), "--families", "ar",
                                         "--fairseq", "", *counts])
        with pytest.raises(SystemExit, match="^error: --repeats and --window must be at least 1"):
            throughput.main()


def test_decode_speed_refuses_counts_under_one(monkeypatch):
    """--sentences 0 timed no sentence and printed a latency of 0.0 ms; --sentences -38 timed all but the last 38
    and said "the first -38"; --repeats 0 ended in a traceback."""
    speed = bench("decode_speed")
    monkeypatch.setattr(speed, "load_translator", lambda *args: pytest.fail("a workdir was loaded"))
    for counts in (["--sentences", "0"], ["--sentences", "-38"], ["--repeats", "0"], ["--batch", "0"]):
        monkeypatch.setattr("sys.argv", ["decode_speed.py", "--run", "configs/ar/multi30k.py:/nowhere", *counts])
        with pytest.raises(SystemExit, match="^error: --repeats, --sentences and --batch must be at least 1"):
            speed.main()


def test_decode_speed_pairs_without_pairs_is_an_error_line(monkeypatch):
    """--pairs with no data.pairs_dir: `error: …` like the script's other refusals (it said the line bare)."""
    speed = bench("decode_speed")
    monkeypatch.setattr(speed, "load_translator", lambda *args: pytest.fail("a workdir was loaded"))
    monkeypatch.setattr("sys.argv", ["decode_speed.py", "--run", f"{ROOT}/configs/ar/demo.py:/nowhere",
                                     "--pairs"])
    with pytest.raises(SystemExit, match="^error: --pairs: no constraint pairs for test"):
        speed.main()


def test_decode_speed_times_each_variant_beside_its_run(monkeypatch, capsys):
    """--variant 'KEY=VALUE …': each run is loaded again with those settings on top of its own and timed beside it."""
    speed = bench("decode_speed")
    loaded = []

    class Timed:  # what the script reads of a Translator
        spec = types.SimpleNamespace(name="ar", supports=types.SimpleNamespace(beam=False, pairs=False,
                                                                               hard_constraints=False), plan=None)

        def __init__(self, config):
            self.config = config

        def speed(self, srcs, beam, sentences, batch, **starts):
            return {"latency_ms": 1.0 + self.config.eval.no_repeat_ngram, "sentences_per_s": 10.0}

    monkeypatch.setattr(speed, "load_translator", lambda config, workdir: loaded.append(config) or Timed(config))
    monkeypatch.setattr("sys.argv", ["decode_speed.py", "--run", f"{ROOT}/configs/ar/demo.py:/nowhere", "--repeats",
                                     "1", "--variant", "eval.no_repeat_ngram=3 eval.length_penalty=0.5"])
    speed.main()
    assert [(c.eval.no_repeat_ngram, c.eval.length_penalty) for c in loaded] == [(0, 1.0), (3, 0.5)]
    table = capsys.readouterr().out
    assert "| ar (/nowhere), decoding | 1.0 |" in table
    assert "| ar (/nowhere), with eval.no_repeat_ngram=3 eval.length_penalty=0.5, decoding | 4.0 |" in table


def test_compile_time_gives_the_data_dir_to_configs_that_read_files(monkeypatch, tmp_path):
    """A Multi30k config (data.source text) gets --data-dir, a demo (the embedded corpus) none: the probe built the
    config without data.dir, which validation refuses, so every Multi30k run stopped at "needs data.dir"."""
    compile_time = bench("compile_time")

    class Built(Exception):
        pass

    def trainer(config, workdir):
        raise Built(config.data.dir)

    monkeypatch.setattr(compile_time, "Trainer", trainer)
    args = argparse.Namespace(set=[], data_dir=str(tmp_path), pairs_dir="", config_name="multi30k")
    for name, data_dir in (("multi30k", str(tmp_path)), ("demo", "")):
        args.config_name = name
        with pytest.raises(Built, match=f"^{re.escape(data_dir)}$"):
            compile_time.Family("ar", args, False, str(tmp_path / name))


@pytest.mark.parametrize("script", ["compile_time", "constrained_cost", "decode_speed", "gpu_figures", "interactive",
                                    "mbr_speed", "oracle", "profile_step", "serve_load", "train_throughput",
                                    "vs_authors_viterbi", "vs_ctranslate2", "vs_dag_search", "vs_fairseq",
                                    "vs_transformers"])
def test_help_says_the_whole_first_paragraph(script, monkeypatch, capsys):
    """--help opens with the docstring's first paragraph, not its first line (it stopped mid-sentence: "…through
    jaxnat's command line, and")."""
    module = bench(script)
    monkeypatch.setattr("sys.argv", [f"{script}.py", "--help"])
    with pytest.raises(SystemExit, match="^0$"):
        module.main()
    shown = "".join(capsys.readouterr().out.split())  # without whitespace: argparse rewraps, at hyphens too
    assert "".join(module.__doc__.split("\n\n")[0].split()) in shown


@pytest.mark.parametrize("script, args", [
    ("compile_time", ["--families", "ar", "--config-name", "nope", "--data-dir", "."]),
    ("constrained_cost", ["--config", "configs/nope.py"]),
    ("decode_speed", ["--run", "/nowhere"]),
    ("profile_step", ["--config", "tests/configs/tiny.py", "--set", "bogus=1"]),
])
def test_a_config_mistake_is_one_line(script, args):
    """A config that does not exist, an unknown key, a directory that is no trained run: `error: …` on one line,
    exit 1, no traceback."""
    done = subprocess.run([sys.executable, f"bench/{script}.py", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"}, timeout=120)
    assert done.returncode == 1 and done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr


@pytest.mark.parametrize("script, args, error", [
    ("constrained_cost", ["--repeats", "0"], "--batch and --repeats must be at least 1"),
    ("constrained_cost", ["--batch", "0"], "--batch and --repeats must be at least 1"),
    ("constrained_cost", ["--vocab", "5"], "--vocab at least 6"),
    ("constrained_cost", ["--cases", "6x1"], "--cases '6x1': give SOURCExPHRASESxPIECES"),
    ("constrained_cost", ["--tokens-out", "."], "--tokens-out .: give a file"),  # np.savez wrote ../<dir>.npz
    ("profile_step", ["--config", "tests/configs/tiny.py", "--steps", "0"], "--steps and --top must be at least 1"),
    ("profile_step", ["--config", "tests/configs/tiny.py", "--shape", "abc"], "--shape 'abc': give SENTENCESxTOKENS"),
    ("profile_step", ["--config", "tests/configs/tiny.py", "--trace-dir", "README.md"], "not a directory"),
    ("compile_time", ["--repeats", "0"], "--repeats must be at least 1"),
    # vecconst on files, asked by name without its pairs: an empty table, exit 0
    ("compile_time", ["--families", "vecconst"], "--families vecconst with configs/vecconst/multi30k.py needs "
                                                  "--pairs-dir PAIRS"),
])
def test_bad_counts_and_paths_are_refused_first(script, args, error, monkeypatch):
    """Counts under 1 and output paths that cannot be written stop the script before any work, with one line (they
    ended in a traceback, a division by zero, or a file written where it was not asked)."""
    module = bench(script)
    monkeypatch.setattr(module, "build_config", lambda *a: pytest.fail("work started"))
    monkeypatch.setattr("sys.argv", [f"{script}.py", *args])
    with pytest.raises(SystemExit, match=f"^error: .*{re.escape(error)}"):
        module.main()


def test_interactive_asks_each_reference_word_and_reads_the_completions_next_word():
    """bench/interactive.py: each reference word is asked after the words before it, with c of its characters typed
    where more than c of its first letters and digits are left; the completion's word read is the one begun."""
    module = bench("interactive")
    assert module.requests(["s"], ["Ein Hund läuft."], 1) == [("s", "E", "Ein"), ("s", "Ein H", "Hund"),
                                                              ("s", "Ein Hund l", "läuft.")]
    assert module.requests(["s"], ["Ein Hund"], 0) == [("s", " ", "Ein"), ("s", "Ein ", "Hund")]
    assert module.requests(["s"], ["a b."], 1) == []  # nothing of them left to guess after one letter
    assert [module.next_word("Ein Hund rennt", p) for p in ("Ein H", "Ein Hund ", " ", "Ein Hund rennt ")] == [
        "Hund", "rennt", "Ein", ""]


def test_vs_ctranslate2_refuses_counts_before_any_work(monkeypatch):
    module = bench("vs_ctranslate2")
    monkeypatch.setattr(module, "pin", lambda *a: pytest.fail("work started"))
    for args in (["--pairs", "0"], ["--latency", "0"], ["--max-new", "-1"]):
        with pytest.raises(SystemExit, match="^error: --latency and --pairs take 1 or more"):
            module.main(["run", "--data-dir", ".", "--split", "x", *args])


def test_mbr_speed_refuses_counts_under_one(monkeypatch):
    module = bench("mbr_speed")
    monkeypatch.setattr(module.mbr, "chrf_matrix", lambda texts: pytest.fail("work started"))
    for args in (["--repeats", "0"], ["--sentences", "0"]):
        monkeypatch.setattr("sys.argv", ["mbr_speed.py", *args])
        with pytest.raises(SystemExit, match="^error: --sentences and --repeats must be at least 1$"):
            module.main()


def test_vs_fairseq_and_vs_transformers_runs_check_their_inputs_first(tmp_path):
    """`run` or `check` before `make` said so in a FileNotFoundError's traceback; --cores 0 left both tools unpinned
    and --cores -1 pinned them to all CPUs but the first; negative counts sliced the workloads from their ends; more
    --cores than CPUs and the dat row without its plugin are refused as `error: …` too; so are a vs_transformers
    run without a model, a Marian release without --pymarian, and --pymarian for a Hugging Face model."""
    fairseq = bench("vs_fairseq")
    transformers = bench("vs_transformers")
    for main, cmd in ((fairseq.main, "check"), (fairseq.main, "run"), (transformers.main, "run")):
        with pytest.raises(SystemExit, match="^error: .*inputs.json not found: run `make --out"):
            main([cmd, "--out", str(tmp_path)])
    (tmp_path / "inputs.json").write_text("{}")
    for main, args in ((fairseq.main, ["--cores", "0"]), (fairseq.main, ["--cores", "-1"]),
                       (fairseq.main, ["--b1", "-5"]), (fairseq.main, ["--cores", str(os.cpu_count() + 1)]),
                       (fairseq.main, ["--rows", "dat"]), (transformers.main, ["--cores", "0"]),
                       (transformers.main, ["--pairs", "-1"])):
        with pytest.raises(SystemExit, match="^error: "):
            main(["run", "--out", str(tmp_path), *args])
    for made, args, said in ((None, [], "holds no model"), ("marian", [], "give --pymarian"),
                             ("hf", ["--pymarian", sys.executable], "leave --pymarian out")):
        if made:
            (tmp_path / made).mkdir()
            (tmp_path / made / "config.json").write_text('{"model_type": "marian"}')
        with pytest.raises(SystemExit, match=f"^error: .*{said}"):
            transformers.main(["run", "--out", str(tmp_path), *args])
        if made:
            shutil.rmtree(tmp_path / made)


@pytest.mark.parametrize("raised, status", [(KeyboardInterrupt, 130), ("sigterm", 143), (None, 3)])
def test_a_script_stopped_by_ctrl_c_or_sigterm_says_so_in_one_line(raised, status, capsys):
    """The scripts' entry point (`jaxnat.errors.run_script`): Ctrl-C or SIGTERM mid-measurement ended in a
    traceback of wherever it stopped; now one line and 128 + the signal's number. Otherwise main's status."""
    import signal

    from jaxnat.errors import run_script

    def main():
        if raised == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)  # raised as `Terminated` inside run_script
        elif raised:
            raise raised
        return 3

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as stopped:
        run_script(main, "what is kept")
    assert stopped.value.code == status
    assert capsys.readouterr().err == ("interrupted; what is kept\n" if raised else "")
    assert signal.getsignal(signal.SIGTERM) is before  # the caller's handler is back
