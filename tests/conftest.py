"""Test session set-up: CPU only; one XLA compilation cache shared by the test processes and their subprocesses
(fresh per session, so tests stay hermetic but a program compiles once a session, however small: the tiny
runs' programs take well under the cache's usual half-second threshold each, and a subprocess compiles dozens);
XLA's backend optimisation off, and, with jaxlib 0.10, the CPU backend's older loop-fusion code generator
(`xla_cpu_use_fusion_emitters=false`; jaxlib 0.11's and 0.12's XLA have only the new one and abort on the flag,
so there the suite takes 14 min on 2 cores: test_mask_predict_matches_python_loop's 68 programs compile in 5.1 s on
jaxlib 0.10.2, 12.2 s on 0.11.2 and 14.7 s on 0.12.0.1); one LLVM
module a program instead of XLA's split of it for parallel code generation; and no source locations in the programs
(JAX_TRACEBACK_IN_LOCATIONS_LIMIT=0: a traceback of up to ten frames is otherwise attached to every operation, which
XLA carries through its passes). The tests' models are tiny, so their time goes into compiling, not running: without
LLVM's optimisation passes the suite uses about a third less CPU, the older emitters compile a fifth faster again,
the unsplit module a twelfth (the EDITOR and CMLMC test models' train and decoding programs), and the programs
without locations a fourteenth (test_scan_layers' loss and gradient tests, paired runs); what the programs compute
is the same. The cache compresses its programs with zstd (zstandard, in the test extra; jax falls back to zlib):
test_cmlm.py's hundreds of programs in 4.5% less time (paired runs). The command-line tests fork their
`python -m jaxnat.main` runs from a server that has imported jax already (tests/cli.py)."""

import atexit
import importlib.metadata
import os
import shutil
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# the process that makes the session's cache removes it when it exits (about 110 MB a run), however pytest ends
# (a usage error never reaches pytest's own end-of-session hooks); the xdist workers and the command-line runs
# inherit it through the environment
if "JAXNAT_COMPILATION_CACHE" not in os.environ:
    os.environ["JAXNAT_COMPILATION_CACHE"] = tempfile.mkdtemp(prefix="jaxnat-xla-cache-")
    atexit.register(shutil.rmtree, os.environ["JAXNAT_COMPILATION_CACHE"], ignore_errors=True)
os.environ.setdefault("JAXNAT_COMPILATION_CACHE_MIN_SECONDS", "0")
os.environ.setdefault("JAX_TRACEBACK_IN_LOCATIONS_LIMIT", "0")
_OLD_EMITTERS = importlib.metadata.version("jaxlib").startswith("0.10.")
_FLAGS = ("--xla_backend_optimization_level=0", "--xla_cpu_parallel_codegen_split_count=1",
          *(["--xla_cpu_use_fusion_emitters=false"] * _OLD_EMITTERS))
for flag in _FLAGS:
    if flag.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()


import pytest  # noqa: E402

from jaxnat.main import enable_compilation_cache  # noqa: E402

enable_compilation_cache()


@pytest.fixture(scope="session")
def ar_run(tmp_path_factory, worker_id):
    """A tiny trained AR workdir: the vocabulary (data.spm_from) and rescorer (cmlm.rescorer, nat.rescorer) of the
    length-predicting models' CLI tests, which only read it. Trained once for the session: the xdist workers share
    it (the first to need it trains it, under a lock the other waits on)."""
    import fcntl

    from tests.test_translate import _main

    shared = tmp_path_factory.getbasetemp()
    shared = shared.parent if worker_id != "master" else shared  # the workers' common base directory
    workdir = shared / "tiny-ar" / "run"
    with open(shared / "tiny-ar.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (workdir / "metrics.json").is_file():
            result = _main(workdir, "--config.train.steps=4", "--config.train.eval_every=4",
                           "--config.data.bucket_multiple=48", "--config.eval.latency_sentences=0",
                           "--config.eval.beam_size=1")
            assert result.returncode == 0, result.stderr
            (workdir.parent / "train.log").write_text(result.stdout + result.stderr)  # what it printed and logged
    return workdir


# The two workers finish together when the longest test files start first (setup.cfg: `--dist loadfile`, whole
# files to whichever worker is free, in collection order): a long file left for the end keeps one core busy alone
# while the other idles. Longest first, by their measured time (each file's total in a whole run's --junitxml;
# the files under 10 s follow in collection order). Files written since an order was set fall to the end: the
# run at 0a9513e, replayed through xdist's scheduling (a file handed on when a worker has two tests left), ends
# 21 s sooner in this order (both workers at 757 s) than in the one before (735 and 778 s; test_import.py last).
LONGEST_FIRST = ("test_import.py", "test_editor.py", "test_scan_layers.py", "test_cmlm.py", "test_edit_models_cli.py",
                 "test_training.py", "test_dat.py", "test_family.py", "test_levt.py", "test_nat_cli.py",
                 "test_notebook.py", "test_vecconst.py", "test_post_edit.py", "test_multiprocess.py", "test_search.py",
                 "test_mixed_precision.py", "test_cmlm_cli.py", "test_ctc.py", "test_nat.py", "test_vecconst_cli.py",
                 "test_packing_nat.py", "test_model.py", "test_score.py", "test_import_nat.py",
                 "test_packing_vecconst.py", "test_guided_alignment.py", "test_optional_deps.py", "test_translate.py",
                 "test_noise.py", "test_report.py", "test_alignment.py", "test_pipeline.py", "test_flops.py",
                 "test_checkpoints.py", "test_bench.py", "test_ensemble.py", "test_packing.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: collection order otherwise
