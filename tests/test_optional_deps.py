"""Optional dependencies (`jaxnat.optional`, setup.cfg's extras): a training run — training, validation, checkpoints,
evaluation — imports none of TFDS, eflomal, TensorBoard or matplotlib, and goes on without the TensorBoard logs and
curves.png when they are missing; a feature asked for without its package stops with one line naming the extra.
(sacremoses stays a core dependency: the evaluation's constraint test sets and metrics count Moses words.)"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from jaxnat.errors import ConfigError
from jaxnat.optional import CORE, PACKAGES, MissingDependency, optional, require

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# every module of an extra, and what they would pull in
BLOCKED = ("tensorflow_datasets", "tensorflow", "array_record", "eflomal", "tensorboardX", "tensorboard", "matplotlib",
           "ctranslate2")

# runs a command of jaxnat.main with the optional modules made unimportable (None in sys.modules: an import
# raises ModuleNotFoundError), and fails if any of them was imported anyway
RUNNER = textwrap.dedent("""
    import runpy, sys
    blocked = {blocked!r}
    for name in blocked:
        sys.modules[name] = None
    sys.argv = ["jaxnat.main", *sys.argv[1:]]
    try:
        runpy.run_module("jaxnat.main", run_name="__main__")
    finally:
        loaded = sorted(n for n in sys.modules if n.split(".")[0] in blocked and sys.modules[n] is not None)
        assert not loaded, loaded
""")


def _blocked_main(*args):
    code = RUNNER.format(blocked=BLOCKED)
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS="cpu"),
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_training_run_needs_none_of_the_optional_packages(tmp_path):
    """The AR demo, shrunk to seconds (the tiny test config's sizes), trains, validates, checkpoints and evaluates
    with every optional module unimportable; its log says what it left out."""
    workdir = tmp_path / "run"
    result = _blocked_main(
        "--config", "configs/ar/demo.py", "--workdir", str(workdir),
        "--config.model.d_model=32", "--config.model.ffn_dim=64", "--config.model.num_heads=2",
        "--config.model.enc_layers=1", "--config.model.dec_layers=1",
        "--config.data.synthetic_train=1500", "--config.data.synthetic_valid=40", "--config.data.synthetic_test=40",
        "--config.data.vocab_size=200", "--config.data.batch_tokens=512", "--config.data.bucket_multiple=48",
        "--config.train.steps=4", "--config.train.log_every=2", "--config.train.eval_every=4",
        "--config.train.checkpoint_every=4", "--config.train.valid_bleu_sentences=8",
        "--config.eval.beam_size=1", "--config.eval.latency_sentences=0", "--config.eval.batch_size=16")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "bleu" in json.loads((workdir / "metrics.json").read_text())["test"]
    assert (workdir / "history.jsonl").is_file() and (workdir / "checkpoints").is_dir()
    assert not (workdir / "tensorboard").exists() and not (workdir / "curves.png").exists()
    log = result.stderr
    assert "no TensorBoard logs: tensorboardX is not installed (pip install -e '.[tensorboard]'" in log
    assert "training curves: not drawn, matplotlib is not installed (pip install -e '.[plots]'" in log

    curves = _blocked_main("--mode", "curves", "--workdir", str(workdir))  # asked for: one line naming the extra
    lines = [line for line in curves.stderr.splitlines() if line.strip()]
    assert curves.returncode == 2 and "Traceback" not in curves.stderr, curves.stderr[-3000:]
    assert lines[-1] == ("jaxnat: error: drawing curves.png needs matplotlib, which is not installed: "
                         "pip install -e '.[plots]' in jaxnat's directory")
    export = _blocked_main("--mode", "export", "--workdir", str(workdir), "--to", f"ctranslate2:{tmp_path / 'ct2'}")
    assert export.returncode == 2 and "Traceback" not in export.stderr, export.stderr[-3000:]
    assert export.stderr.strip().splitlines()[-1] == (
        "jaxnat: error: --mode export --to ctranslate2:DIR needs ctranslate2, which is not installed: "
        "pip install -e '.[ct2]' in jaxnat's directory")
    assert not (tmp_path / "ct2").exists()


def test_tfds_source_without_tensorflow_datasets_is_one_line(tmp_path):
    result = _blocked_main("--config", "configs/ar/wmt14_en_de.py", "--workdir", str(tmp_path / "run"))
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert lines[-1] == ("jaxnat: error: a TFDS dataset (data.source=tfds) needs tensorflow-datasets, which is not "
                         "installed: pip install -e '.[tfds]' in jaxnat's directory")
    assert not (tmp_path / "run").exists()


def test_alignment_without_eflomal_is_one_line(tmp_path):
    for split in ("train", "test"):
        (tmp_path / f"{split}.en").write_text("a house .\n", encoding="utf-8")
        (tmp_path / f"{split}.de").write_text("ein Haus .\n", encoding="utf-8")
    code = ("import sys; sys.modules['eflomal'] = None; from jaxnat.data.alignment import main; "
            "sys.exit(main(sys.argv[1:]))")
    result = subprocess.run([sys.executable, "-c", code, "--data-dir", str(tmp_path), "--src", "en", "--tgt", "de",
                             "--splits", "test"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "word alignment (jaxnat.data.alignment) needs eflomal, which is not installed" in lines[-1]
    assert "pip install -e '.[align]'" in lines[-1]


def test_require_and_optional(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert optional("matplotlib") is None
    with pytest.raises(MissingDependency) as e:
        require("matplotlib", "a plot")
    assert isinstance(e.value, ConfigError) and "\n" not in str(e.value)
    assert str(e.value) == ("a plot needs matplotlib, which is not installed: pip install -e '.[plots]' in jaxnat's "
                            "directory")
    assert optional("json") is not None


def test_a_missing_core_dependency_stops_a_command_at_once(monkeypatch, tmp_path, capsys):
    """An image with jax preinstalled and jaxnat on PYTHONPATH may lack a core dependency (the GPU image lacks
    sacremoses and ml-collections): one line before anything is loaded, not a traceback at the evaluation."""
    from jaxnat.main import main

    monkeypatch.setitem(sys.modules, "sacremoses", None)
    monkeypatch.setitem(sys.modules, "ml_collections", None)
    code = main(["--config", "configs/ar/demo.py", "--workdir", str(tmp_path / "run")])
    assert code == 2 and capsys.readouterr().err == (
        "jaxnat: error: jaxnat needs sacremoses, ml-collections, which are not installed: pip install -e . in "
        "jaxnat's directory (or pip install sacremoses ml-collections)\n")
    assert not (tmp_path / "run").exists()


def test_every_extra_is_in_setup_cfg_and_the_test_extra_installs_them():
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    extras = {name: {line.split(">")[0].split("=")[0].split("<")[0].strip().lower()
                     for line in value.strip().splitlines()}
              for name, value in cfg["options.extras_require"].items()}
    core = {line.split(">")[0].split("=")[0].split("<")[0].strip().lower()
            for line in cfg["options"]["install_requires"].strip().splitlines()}
    assert set(CORE.values()) == core
    for module, (package, extra) in PACKAGES.items():
        assert package.lower() in extras[extra], (module, extra)
        assert package.lower() in extras["test"], package
        assert package.lower() not in core, package
