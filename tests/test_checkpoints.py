"""Checkpoints beyond resuming: the best N kept by validation BLEU, averaging (on the fly and written by
--mode average), and the run's history with its curves.png."""

import json
import os
import sys

import jax
import numpy as np
import pytest

from jaxnat.config import build_config
from jaxnat.errors import JaxnatError
from jaxnat.restore import average_params, load_translator, params_choice, write_average
from jaxnat.training.checkpoint import Checkpoints
from jaxnat.training.history import read_history
from tests import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "tests", "configs", "tiny.py")
# validations at steps 4, 8, 12 (the best two kept), training states at 4 … 12 (the newest three kept)
RUN = ["--config.train.steps=12", "--config.train.eval_every=4", "--config.train.keep_best=2",
       "--config.train.keep_checkpoints=3", "--config.data.bucket_multiple=48"]


def _main(workdir, *args):
    cmd = [sys.executable, "-m", "jaxnat.main", "--workdir", str(workdir), *args]
    return cli.run(cmd, cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS="cpu"), timeout=600)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("ckpt") / "run"
    result = _main(workdir, "--config", TINY, *RUN, "--config.eval.latency_sentences=0")
    assert result.returncode == 0, result.stderr
    return workdir


def _config(*overrides):
    return build_config(TINY, [*RUN, *overrides])


def _state_params(workdir, step):
    import orbax.checkpoint as ocp

    path = os.path.join(str(workdir), "checkpoints", "last", str(step), "state")
    return ocp.StandardCheckpointer().restore(path)["params"]


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(tree)]


def test_average_of_one_is_the_identity_and_of_two_the_mean():
    rng = np.random.default_rng(0)
    a = {"w": rng.normal(size=(3, 4)).astype(np.float32), "b": {"c": rng.normal(size=5).astype(np.float32)}}
    b = jax.tree.map(lambda x: x * 3.0 + 1.0, a)
    for x, y in zip(_leaves(average_params([a])), _leaves(a)):
        np.testing.assert_array_equal(x, y)
    for x, y, z in zip(_leaves(average_params([a, b])), _leaves(a), _leaves(b)):
        np.testing.assert_allclose(x, (y + z) / 2, rtol=1e-6)
    with pytest.raises(ValueError):
        average_params([])


@pytest.mark.slow
def test_the_best_n_validations_are_kept(run):
    ckpt = Checkpoints(str(run), 3, 2)
    ranked = ckpt.best_steps()
    ckpt.close()
    history = [e for e in read_history(str(run)) if "valid_bleu" in e]
    assert [e["step"] for e in history] == [4, 8, 12]
    expected = sorted(((e["step"], e["valid_bleu"]) for e in history), key=lambda sb: (-sb[1], sb[0]))[:2]
    assert [s for s, _ in ranked] == [s for s, _ in expected]
    assert params_choice(_config(), str(run))["step"] == expected[0][0]


@pytest.mark.slow
def test_averaging_on_the_fly_and_written(run):
    newest = _state_params(run, 12)
    one = load_translator(_config("--config.eval.average_checkpoints=1"), str(run))
    assert one.checkpoint == {"kind": "average", "of": "last", "steps": [12], "step": 12}
    for x, y in zip(_leaves(one.params), _leaves(newest)):
        np.testing.assert_array_equal(x, y)

    config = _config("--config.eval.average_checkpoints=2")
    path = write_average(config, str(run))
    assert path.endswith(os.path.join("checkpoints", "averaged", "12"))
    averaged = load_translator(_config("--config.eval.params=averaged"), str(run))
    assert averaged.checkpoint["kind"] == "averaged" and averaged.checkpoint["steps"] == [8, 12]
    for x, y, z in zip(_leaves(averaged.params), _leaves(_state_params(run, 8)), _leaves(newest)):
        np.testing.assert_allclose(x, (y + z) / 2, rtol=1e-6, atol=1e-7)

    best = load_translator(_config("--config.eval.average_checkpoints=2", "--config.eval.average_of=best"), str(run))
    assert best.checkpoint["of"] == "best" and len(best.checkpoint["steps"]) == 2

    with pytest.raises(JaxnatError, match="keeps 3 such checkpoint"):
        params_choice(_config("--config.eval.average_checkpoints=4"), str(run))


def test_average_and_curves_from_the_command_line(run, tmp_path):
    result = _main(run, "--mode", "average", "--config", TINY, *RUN)
    assert result.returncode == 2 and result.stderr.startswith("jaxnat: error: --mode average needs")
    assert len(result.stderr.strip().splitlines()) == 1

    assert not (run / "curves.png").exists()  # tests/configs/tiny.py: train.plot_curves=false
    result = _main(run, "--mode", "curves")  # no --config needed
    assert result.returncode == 0, result.stderr
    assert (run / "curves.png").stat().st_size > 10_000
    result = _main(tmp_path, "--mode", "curves")
    assert result.returncode == 2 and "has no history.jsonl" in result.stderr

    history = read_history(str(run))
    assert [e["step"] for e in history if "loss" in e] == list(range(4, 13, 4))
    assert all(np.isfinite(e["loss"]) and e["tokens_per_s"] > 0 for e in history if "loss" in e)
    assert json.loads((run / "history.jsonl").read_text().splitlines()[-1])["step"] == 12


def test_curves_of_an_imported_model_say_it_was_not_trained_here(tmp_path):
    """--mode curves of an import's workdir said "a run trained by this version of jaxnat writes one", as if the run
    were too old."""
    from jaxnat.data import piece_vocab
    from jaxnat.training.history import plot_curves

    with pytest.raises(JaxnatError, match=r"has no history.jsonl \(a run trained by this version"):
        plot_curves(str(tmp_path), required=True)
    os.makedirs(os.path.dirname(piece_vocab.settings_path(str(tmp_path))))
    with open(piece_vocab.settings_path(str(tmp_path)), "w") as f:
        f.write("{}")
    with pytest.raises(JaxnatError, match=r"has no history.jsonl \(it holds an imported model, not trained here\)"):
        plot_curves(str(tmp_path), required=True)


def test_a_damaged_history_ends_its_entries_in_one_line_not_a_traceback(tmp_path):
    """history.jsonl with a line that is not UTF-8 or not a JSON object, or an object without a step, stopped a
    resumed training, `--mode curves` and the report in a traceback (UnicodeDecodeError, `list indices must be
    integers`, KeyError: 'step'): such a line ends the entries as a line cut short does; a history.jsonl that is a
    directory, or holds no entry at all, is one line."""
    from jaxnat.training.history import History, plot_curves

    path = tmp_path / "history.jsonl"
    good = [{"step": 4, "loss": 5.7}, {"step": 4, "valid_bleu": 0.1}]
    for damage in (b"\xff\xfe\x00garbage\n", b"[1, 2]\n"):  # the entries end there, whatever follows
        path.write_bytes(b"".join(json.dumps(e).encode() + b"\n" for e in good) + damage + b'{"step": 8}\n')
        assert read_history(str(tmp_path)) == good
    path.write_text('{"loss": 1.0}\n' + json.dumps(good[0]) + "\n")
    assert History(str(tmp_path), resumed_step=4, write=False).entries == good[:1]
    path.write_text("[1, 2]\n")
    with pytest.raises(JaxnatError, match="history.jsonl holds no entry to draw"):
        plot_curves(str(tmp_path), required=True)
    path.unlink()
    path.mkdir()
    with pytest.raises(JaxnatError, match=r"history.jsonl: unreadable \(Is a directory\)"):
        read_history(str(tmp_path))


def _params(value: float) -> dict:
    return {"w": np.full((2, 3), value, np.float32)}


def test_a_best_checkpoint_kept_before_a_resume_is_not_saved_again(tmp_path):
    """A resumed run validates again at steps whose best checkpoint it kept before (kill -9 after the validation,
    before the training state of that step; or train.eval_every off the train.checkpoint_every grid): Orbax
    refuses a step it has (StepAlreadyExistsError), which ended every resume; the kept one stays as it is."""
    ckpt = Checkpoints(str(tmp_path), 3, 2)
    try:
        assert ckpt.save_best(100, _params(1.0), 0.0)
        assert ckpt.save_best(200, _params(2.0), 0.4)
        # resumed from step 150: step 200 again, the same BLEU (a deterministic rerun) or another one
        assert not ckpt.save_best(200, _params(3.0), 0.4)
        assert not ckpt.save_best(200, _params(3.0), 0.9)
        assert ckpt.best_steps() == [(200, 0.4), (100, 0.0)]
        np.testing.assert_array_equal(ckpt.restore_best(_params(0.0))["w"], _params(2.0)["w"])
    finally:
        ckpt.close()



def test_the_best_n_are_kept_the_newest_states_averaged_and_a_stop_dropped_off_the_grid(tmp_path):
    """Which checkpoints a run keeps and averages, against lists: the best train.keep_best by BLEU (a tie with the
    worst kept is not kept: the earlier step stays), the newest N training states and the best N validations for
    an average, and the states off the train.checkpoint_every grid (a stop's) dropped once a newer one exists.
    Mutations of each (keeping one too many, the later of a tie, the oldest states, the worst validations, the
    newest off-grid state deleted) passed every test but the slow ones, or all."""
    (tmp_path / "spm").mkdir()
    ckpt = Checkpoints(str(tmp_path), 3, 2)
    try:
        kept = [ckpt.save_best(step, _params(step), bleu) for step, bleu in [(4, 0.2), (8, 0.5), (12, 0.2), (16, 0.3)]]
        assert kept == [True, True, False, True] and ckpt.best_steps() == [(8, 0.5), (16, 0.3)]
        for step in (4, 8, 10):  # 10: a stopped run's, kept while it is the newest
            ckpt.save_state(step, {"step": np.int32(step), "params": _params(step)})
            ckpt.drop_off_grid(4, 24)
        assert ckpt.last.all_steps() == [4, 8, 10]
        ckpt.save_state(12, {"step": np.int32(12), "params": _params(12)})
        ckpt.drop_off_grid(4, 24)
        assert ckpt.last.all_steps() == [8, 12]  # 4 went with train.keep_checkpoints=3, 10 off the grid
        target = {"step": np.zeros((), np.int32), "params": _params(0.0)}
        assert [s for s, _ in ckpt.params_of("last", 1, target)] == [12]
        assert [s for s, _ in ckpt.params_of("best", 1, target)] == [8]
        ckpt.wait()
        for of, steps in (("last", [12]), ("best", [8])):
            choice = params_choice(_config("--config.eval.average_checkpoints=1", f"--config.eval.average_of={of}"),
                                   str(tmp_path), ckpt)
            assert choice["steps"] == steps
    finally:
        ckpt.close()
    ties = Checkpoints(str(tmp_path / "ties"), 3, 2)
    try:
        assert ties.save_best(4, _params(4), 0.3) and ties.save_best(8, _params(8), 0.3)
        assert ties.best_steps() == [(4, 0.3), (8, 0.3)] and ties.best_meta()["step"] == 4
    finally:
        ties.close()


def test_averaging_again_replaces_the_averaged_checkpoint(tmp_path):
    """--mode average twice with the same newest step (another N, or the same command again) replaced nothing and
    ended in Orbax's StepAlreadyExistsError traceback; the averaged checkpoint is the newest command's."""
    ckpt = Checkpoints(str(tmp_path), 3)
    try:
        ckpt.save_averaged(_params(1.0), "last", [200, 300])
        path = ckpt.save_averaged(_params(2.0), "last", [100, 200, 300])
        assert path.endswith(os.path.join("averaged", "300"))
        params, meta = ckpt.restore_averaged(_params(0.0))
        assert meta == {"of": "last", "steps": [100, 200, 300]}
        np.testing.assert_array_equal(params["w"], _params(2.0)["w"])
    finally:
        ckpt.close()


def test_only_the_training_removes_checkpoints_in_flight(tmp_path):
    """A command that reads a workdir (eval, translate, --mode average) while its run trains there removed the
    temporary directory of the checkpoint the run was writing (Orbax's clean-up of a killed run's leftovers), and
    the run ended in a FileNotFoundError traceback; only the training of the workdir removes them, at its start."""
    in_flight = [tmp_path / "checkpoints" / kind / "40.orbax-checkpoint-tmp" / "state" for kind in ("last", "best")]
    for path in in_flight:
        path.mkdir(parents=True)
    reader = Checkpoints(str(tmp_path), 3)
    reader.close()
    assert all(path.is_dir() for path in in_flight)
    trainer = Checkpoints(str(tmp_path), 3, trains=True)
    trainer.close()
    assert not any(path.parent.exists() for path in in_flight)


def test_a_command_that_reads_a_workdir_moves_no_checkpoint(tmp_path, caplog):
    """A command reading a workdir whose run still trains there lists its checkpoints, and the run may delete one
    (train.keep_checkpoints, train.keep_best) before or while it is read: that was taken for a damaged checkpoint,
    whose move to unreadable/ ended the command in a FileNotFoundError traceback, or ended the run, whose deletion
    failed on the moved directory. A reader leaves it out with a warning and moves nothing; the training moves a
    damaged one aside."""
    import shutil

    ckpt = Checkpoints(str(tmp_path), 3, 3)
    try:
        for step in (100, 200, 300):
            assert ckpt.save_best(step, _params(step / 100), step / 1000)
        ckpt.wait()
        best = tmp_path / "checkpoints" / "best"
        shutil.rmtree(best / "300")  # by the training, after this process listed it
        shutil.rmtree(best / "200" / "params")  # being deleted by it
        with caplog.at_level("WARNING", logger="jaxnat"):
            got = ckpt.params_of("best", 3, {"params": _params(0.0)})
        assert [s for s, _ in got] == [100]
        assert "the best checkpoint of step 300 was deleted while it was read" in caplog.text
        assert "the best checkpoint of step 200 is unreadable (" in caplog.text
        assert (best / "200").is_dir() and not (tmp_path / "checkpoints" / "unreadable").exists()
    finally:
        ckpt.close()
    trainer = Checkpoints(str(tmp_path), 3, 3, trains=True)
    try:
        assert [s for s, _ in trainer.params_of("best", 3, {"params": _params(0.0)})] == [100]
        assert (tmp_path / "checkpoints" / "unreadable" / "best-200").is_dir() and not (best / "200").exists()
    finally:
        trainer.close()


def test_an_average_of_more_checkpoints_than_a_run_wrote_names_them(tmp_path):
    """A run that stopped early (train.stop_patience) wrote 2 training states where eval.average_checkpoints asked
    for 3 with train.keep_checkpoints=3: the error blamed train.keep_checkpoints ('sets how many training keeps'),
    which was already 3. It names the steps there are and what to lower."""
    (tmp_path / "spm").mkdir()
    ckpt = Checkpoints(str(tmp_path), 3)
    for step in (4, 8):
        ckpt.save_state(step, {"step": np.int32(step)})
    ckpt.wait()
    ckpt.close()
    with pytest.raises(JaxnatError, match=r"keeps 2 such checkpoint\(s\) \(steps \[4, 8\]; training keeps at most "
                                          r"train.keep_checkpoints, and writes fewer where it stops early .+\): lower "
                                          r"eval.average_checkpoints$"):
        params_choice(_config("--config.eval.average_checkpoints=3"), str(tmp_path))
