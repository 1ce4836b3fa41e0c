"""Config loading, command-line overrides and every error path of the CLI."""

import json
import os
import shutil
import signal
import sys
import time

import pytest

from jaxnat.config import (apply_override, build_config, check_matches_workdir, default_config, leaf_keys,
                           load_config, parse_overrides, validate, workdir_config)
from jaxnat.errors import ConfigError, Stopped, Terminated
from tests import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "configs/ar/demo.py")
CONFIGS = sorted(
    os.path.join(d, f) for d, _, fs in os.walk(os.path.join(ROOT, "configs")) for f in fs if f.endswith(".py")
)


def shipped(path: str, *overrides: str):
    """A shipped config built as its command does: a config of text files takes its data directory from the
    command line (no config names a directory of one machine), one of guided alignment its alignments' too."""
    loaded = load_config(path)
    text, aligned = loaded.data.source == "text", loaded.train.alignment_lambda > 0
    return build_config(path, [*(["--config.data.dir=/data/corpus"] if text else []),
                               *(["--config.data.alignments_dir=/data/alignments"] if aligned else []), *overrides])


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: os.path.relpath(p, ROOT))
def test_shipped_configs_load_and_validate(path):
    from jaxnat.training.trainer import check_schedule_keys

    config = shipped(path)
    assert set(leaf_keys(config)) == set(leaf_keys(default_config()))
    check_schedule_keys(config)  # no learning-rate key the config's schedule does not read
    if config.data.source == "text":
        with pytest.raises(ConfigError, match="needs data.dir .*--config.data.dir=DIR"):
            build_config(path, [f"--config.data.alignments_dir={config.data.alignments_dir}"])


@pytest.mark.parametrize("name, alpha, beta", [("demo", 0.8, 0.2), ("demo_vdba", 0.5, 0.5), ("multi30k", 0.8, 0.2),
                                               ("multi30k_vdba", 0.5, 0.5), ("wmt14_en_de", 0.8, 0.2),
                                               ("wmt14_en_de_vdba", 0.5, 0.5)])
def test_vecconst_loss_weights_follow_the_decoding_mode(name, alpha, beta):
    """Wang et al. App. B: α/β = 0.8/0.2 for a model decoded with beam search, 0.5/0.5 with VDBA."""
    t = shipped(os.path.join(ROOT, "configs", "vecconst", f"{name}.py")).vecconst
    assert (t.alpha, t.beta) == (alpha, beta)


def test_overrides_are_typed():
    c = default_config()
    for key, value in parse_overrides(["--config.train.steps=7", "--config.train.lr", "0.5",
                                       "--config.model.pre_norm=true", "--config.data.dir=/x"]):
        apply_override(c, key, value)
    assert (c.train.steps, c.train.lr, c.model.pre_norm, c.data.dir) == (7, 0.5, True, "/x")
    assert isinstance(c.train.lr, float)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--config.train.stepz=3"], "unknown config key train.stepz; did you mean train.steps?"),
        (["--config.model.d_modle=3"], "did you mean model.d_model?"),
        (["--config.ctc.decode=beam"], "ctc.decode; decode is a key of the dat section; ctc's keys: decoder_input, "),
        (["--config.dat.glance_stat=1"], "did you mean dat.glance_start?"),
        (["--config.trian.steps=3"], "trian is not a section (the sections: "),
        (["--config.train.steps=abc"], "bad value for train.steps: 'abc' is not a int"),
        (["--config.model.pre_norm=maybe"], "is not a bool"),
        (["--config.train.steps"], "has no value"),
        (["--steps=3"], "unrecognised argument --steps=3"),
        (["--config.model.positions=rotary"], "model.positions must be one of sinusoidal, learned"),
        (["--config.model.num_heads=3"], "must be divisible by model.num_heads"),
        (["--config.train.steps=0"], "train.steps must be in (0, 2147483647], got 0"),
        (["--config.train.steps=3000000000"], "train.steps must be in (0, 2147483647], got 3000000000"),
        (["--config.model.dropout=1.5"], "model.dropout must be in [0, 1)"),
        (["--config.model.embed_dropout=-0.5"], "model.embed_dropout must be -1 (= model.dropout) or in [0, 1)"),
        (["--config.model.name=editor", "--config.eval.beam_size=1", "--config.editor.reposition_deletion=bias"],
         "editor.reposition_deletion must be one of vector, bos"),
        (["--config.model.name=levt", "--config.eval.beam_size=1", "--config.levt.global_shuffle=1.5"],
         "levt.global_shuffle must be in [0, 1], got 1.5"),
        (["--config.model.name=editor", "--config.eval.beam_size=1", "--config.editor.own_insertion_roll_in=-0.1"],
         "editor.own_insertion_roll_in must be in [0, 1], got -0.1"),
        # configs/levt/multi30k.py trains every batch on the model's own insertion: the sampled fills went unused
        (["--config.model.name=levt", "--config.eval.beam_size=1", "--config.levt.sampling_for_deletion=true",
          "--config.levt.own_insertion_roll_in=1"], "with levt.own_insertion_roll_in=1 no row learns on them"),
        (["--config.model.name=levt", "--config.eval.beam_size=1", "--config.levt.sampling_for_deletion=true",
          "--config.levt.roll_in_alpha=1"], "with levt.roll_in_alpha=1 no row learns on them"),
        (["--config.model.name=editor", "--config.eval.beam_size=1", "--config.editor.dual_path=false",
          "--config.editor.insert_after_oracle_reposition=true"], "editor.roll_in_alpha=0 they see none"),
        # the placeholder head trained towards the uniform distribution, whatever the oracle's counts
        (["--config.model.name=levt", "--config.eval.beam_size=1", "--config.levt.placeholder_smoothing=1"],
         "levt.placeholder_smoothing must be in [0, 1), got 1.0"),
        # nan or inf in the reposition's delete column took it in every slot: every output empty, no error
        (["--config.model.name=editor", "--config.eval.beam_size=1", "--config.editor.deletion_reward=nan"],
         "editor.deletion_reward must be a finite number, got nan"),
        (["--config.train.lr=-1"], "train.lr must be positive, got -1.0"),
        (["--config.eval.beam_size=0"], "eval.beam_size must be positive, got 0"),
        (["--config.train.valid_bleu_sentences=0"], "train.valid_bleu_sentences must be positive, got 0"),
        (["--config.train.microbatches=60"], "train.microbatches (60) exceeds the rows of a batch of data.max_len "
                                             "tokens (data.batch_tokens 2048 // data.max_len 40 = 51)"),
        (["--config.train.prng_impl=philox"], "train.prng_impl must be one of threefry2x32, rbg, unsafe_rbg"),
        (["--config.train.adam_b2=1"], "train.adam_b2 must be in [0, 1), got 1.0"),
        (["--config.data.bucket_growth=0.5"], "data.bucket_growth must be > 1, got 0.5"),
        # -1 wrote config.json and failed at the vocabulary ("tokenizer seed"); 2**32 there with a traceback
        (["--config.train.seed=-1"], "train.seed must be in [0, 4294967294], got -1"),
        (["--config.train.seed=4294967296"], "train.seed must be in [0, 4294967294], got 4294967296"),
        # the on-the-fly average won, and eval.params=averaged was ignored without a word
        (["--config.eval.params=averaged", "--config.eval.average_checkpoints=2"],
         "eval.params=averaged decodes the average --mode average wrote; eval.average_checkpoints=2 averages"),
        # 1 passed here and failed in the trainer after writing config.json and the vocabulary, with a traceback
        (["--config.data.bucket_growth=1"], "data.bucket_growth must be > 1, got 1.0"),
        (["--config.train.warmup_steps=-5"], "train.warmup_steps must be >= 0, got -5"),
        (["--config.train.lr_schedule=linear", "--config.train.steps=100", "--config.train.warmup_steps=100"],
         "train.warmup_steps (100) must be below train.steps (100) with train.lr_schedule=linear"),
        (["--config.train.lr_schedule=cosine", "--config.train.steps=100", "--config.train.warmup_steps=100"],
         "train.warmup_steps (100) must be below train.steps (100) with train.lr_schedule=cosine"),
        (["--config.model.name=cmlm", "--config.eval.beam_size=1", "--config.cmlm.length_prediction=cls"],
         "cmlm.length_prediction must be one of token, pooled"),
        (["--config.model.name=cmlm", "--config.eval.beam_size=1", "--config.cmlm.correction_p=1.5"],
         "cmlm.correction_p must be in [0, 1], got 1.5"),
        # more candidates than the 256 length classes passed here and ended in top_k's traceback at decoding
        (["--config.model.name=nat", "--config.eval.beam_size=1", "--config.nat.length_beam=300"],
         "nat.length_beam must be in (0, 256], got 300"),
        (["--config.model.name=cmlm", "--config.eval.beam_size=1", "--config.eval.iteration_sweep=1,x"],
         "eval.iteration_sweep is a comma list of decoding depths"),
        (["--config.eval.iteration_sweep=1,2"], "got '1,2' with model.name='ar'"),
        (["--config.model.name=ctc", "--config.eval.iteration_sweep=1"], "got '1' with model.name='ctc'"),
        (["--config.model.name=nat", "--config.eval.beam_size=1", "--config.eval.iteration_sweep=1,2"],
         "set nat.coverage=true, or eval.iteration_sweep= for NAT-base"),
        (["--config.model.name=nat", "--config.eval.beam_size=1", "--config.nat.coverage=true",
          "--config.model.dec_layers=1"], "nat.coverage needs model.dec_layers >= 2"),
        (["--config.model.name=nat", "--config.eval.beam_size=1", "--config.eval.constraints=soft"],
         "model 'nat' does not take soft constraints"),
        # keys that act only with their switch on were set with it off and did nothing: the λ = 0 control of a
        # NAT-base run, a correction probability without the correction loss
        (["--config.model.name=nat", "--config.eval.beam_size=1", "--config.nat.coverage_lambda=0",
          "--config.nat.decode_iterations=2"],
         "nat.decode_iterations=2, nat.coverage_lambda=0.0 act only with nat.coverage set, and nat.coverage is "
         "false: set --config.nat.coverage=true, or --config.nat.decode_iterations=5 "
         "--config.nat.coverage_lambda=-1.0"),
        (["--config.model.name=cmlm", "--config.eval.beam_size=1", "--config.cmlm.correction_count=fixed"],
         "cmlm.correction_count=fixed acts only with cmlm.correction set, and cmlm.correction is false: set "
         "--config.cmlm.correction=true, or --config.cmlm.correction_count=bernoulli"),
        # λ = inf passed and decoded every sentence to nothing (score null); nan decoded with the trained λ
        (["--config.model.name=nat", "--config.eval.beam_size=1", "--config.nat.coverage=true",
          "--config.nat.coverage_lambda=inf"], "nat.coverage_lambda must be a finite number, got inf"),
        (["--config.model.name=nat", "--config.eval.beam_size=1", "--config.nat.coverage=true",
          "--config.nat.coverage_lambda=nan"], "nat.coverage_lambda must be a finite number, got nan"),
        (["--config.editor.hard_mode=paper"], "editor.hard_mode is set, but model.name is 'ar'"),
        (["--config.model.name=editor", "--config.eval.beam_size=1", "--config.eval.oracle=deletion"],
         "model 'editor' does not take oracle decoding 'deletion' (asked by eval.constraints, eval.trace_sentences, "
         "eval.beam_size, eval.valid_beam_size, eval.nbest, eval.ensemble, eval.alignment, eval.lm or eval.oracle; "
         "oracle modes of 'editor': none)"),
        (["--config.model.name=cmlm", "--config.eval.beam_size=1", "--config.eval.ensemble=runs/a,runs/b"],
         "model 'cmlm' does not take ensembles (eval.ensemble) (asked by"),
        (["--config.model.name=nat", "--config.eval.beam_size=1", "--config.eval.valid_beam_size=4"],
         "model 'nat' does not take beam search (beam size 4)"),
        (["--config.eval.constraint_counts=2"], "eval.constraint_counts decodes in the modes of eval.constraints"),
        # keys that act only with another set: the best checkpoint was decoded, the pairs' shape went unread
        (["--config.eval.average_of=best"], "eval.average_of=best acts only with eval.average_checkpoints set, and "
                                            "eval.average_checkpoints is 0: set --config.eval.average_checkpoints=N, "
                                            "or --config.eval.average_of=last"),
        (["--config.eval.pairs_unproduced=true"], "eval.pairs_unproduced=true acts only with data.pairs_dir set, and "
                                                  "data.pairs_dir is '': set --config.data.pairs_dir=DIR, or "
                                                  "--config.eval.pairs_unproduced=false"),
        (["--config.data.max_pairs=1"], "data.max_pairs=1 acts only with data.pairs_dir set"),
        (["--config.data.max_pair_pieces=4"], "data.max_pair_pieces=4 acts only with data.pairs_dir set"),
        (["--config.eval.constraints=hard", "--config.eval.constraint_counts=1,-2"],
         "eval.constraint_counts is a comma list of constraint-word counts"),
        (["--config.train.lr_schedule=exponential"],
         "train.lr_schedule must be one of inverse_sqrt, linear, cosine, constant, plateau"),
        (["--config.train.plateau_factor=1"], "train.plateau_factor must be in (0, 1), got 1.0"),
        (["--config.train.plateau_patience=0"], "train.plateau_patience must be >= 1, got 0"),
        (["--config.train.stop_patience=-1"], "train.stop_patience must be >= 0, got -1"),
        (["--config.train.clip_norm=inf"], "train.clip_norm must be a finite number >= 0, got inf"),
        (["--config.eval.length_penalty=30"], "eval.length_penalty must be in [0, 10], got 30"),
        # an int without a bound of its own passed and overflowed jax's int32 in a traceback when decoding
        (["--config.eval.max_len_b=1000000000000"],
         "eval.max_len_b must be at most 2147483647 (an int32 on the device), got 1000000000000"),
        (["--config.model.name=cmlm", "--config.eval.beam_size=1", "--config.eval.length_cap_min=3000000000"],
         "eval.length_cap_min must be at most 2147483647 (an int32 on the device), got 3000000000"),
        (["--config.model.name=cmlm", "--config.eval.beam_size=1", "--config.cmlm.mask_predict_iter=3000000000"],
         "cmlm.mask_predict_iter must be at most 2147483647 (an int32 on the device), got 3000000000"),
        (["--config.eval.rescorer=runs/ar"], "unknown config key eval.rescorer; it moved to the model family's "
                                             "section: cmlm.rescorer or nat.rescorer"),
        (["--config.cmlm.rescorer=runs/ar"], "cmlm.rescorer is set, but model.name is 'ar'"),
        (["--config.model.name=cmlm", "--config.eval.beam_size=4"], "model 'cmlm' does not take beam search"),
        # sampling: its settings act only with it on, only the left-to-right models sample, and not under constraints
        (["--config.eval.top_p=0.9"], "eval.top_p=0.9 acts only with eval.sampling set, and eval.sampling is false: "
                                      "set --config.eval.sampling=true, or --config.eval.top_p=1.0"),
        (["--config.model.name=cmlm", "--config.eval.beam_size=1", "--config.eval.sampling=true"],
         "eval.sampling=true is not read by model 'cmlm' (only by: ar, ctc, dat, vecconst)"),
        (["--config.eval.sampling=true", "--config.eval.constraints=hard"],
         "eval.sampling=true samples without constraints, and eval.constraints asks for hard ones"),
        (["--config.model.name=dat", "--config.eval.sampling=true", "--config.eval.constraints=soft,hard"],
         "eval.constraints asks for soft and hard ones: leave eval.constraints without soft and hard"),
        (["--config.model.name=ctc", "--config.eval.beam_size=4", "--config.eval.sampling=true", "--config.eval.lm=x"],
         "eval.lm is fused into a beam search, and eval.sampling=true samples in its place"),
        (["--config.eval.sampling=true", "--config.eval.top_p=0"], "eval.top_p must be in (0, 1], got 0"),
        # MBR decoding chooses among a beam's outputs, of a model that keeps several
        (["--config.eval.mbr=comet"], "eval.mbr must be one of '', chrf, bleu, not 'comet'"),
        (["--config.eval.mbr=chrf", "--config.eval.beam_size=1"], "eval.mbr=chrf chooses among a sentence's outputs: "
                                                                  "it needs a model that keeps several"),
        (["--config.model.name=cmlm", "--config.eval.beam_size=1", "--config.eval.mbr=chrf"],
         "here model 'cmlm' and beam size 1"),
        # an n-best list is the finished outputs of a beam, as many as it has beams, in a model that keeps them
        (["--config.eval.nbest=5"], "eval.nbest=5 needs eval.beam_size >= 5 (beam size 4): the search keeps as many"),
        (["--config.eval.nbest=0"], "eval.nbest must be positive, got 0"),
        (["--config.model.name=cmlm", "--config.eval.beam_size=1", "--config.eval.nbest=2"],
         "model 'cmlm' does not take n-best lists (nbest 2): it keeps one output per sentence (asked by "
         "eval.constraints, eval.trace_sentences, eval.beam_size, eval.valid_beam_size, eval.nbest, eval.ensemble, "
         "eval.alignment, eval.lm or eval.oracle"),
        # EDITOR's reposition (and DA-Transformer's and CTC's best paths) place hard constraints in any order
        (["--config.model.name=editor", "--config.eval.beam_size=1", "--config.eval.constraint_order=given"],
         "eval.constraint_order=given: model 'editor' places hard constraints in any order"),
        (["--config.model.name=ctc", "--config.eval.beam_size=1", "--config.eval.constraint_order=given"],
         "eval.constraint_order=given: model 'ctc' places hard constraints in any order"),
        (["--config.eval.bleu_tokenize=flores200"], "eval.bleu_tokenize must be '' (the target language's) or one of"),
    ],
)
def test_bad_overrides(args, message):
    with pytest.raises(ConfigError, match=None) as err:
        build_config(os.path.join(ROOT, "configs/ar/demo.py"), args)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_keys_of_a_switch_off_are_named_whichever_they_are():
    """`check_switched` on its own: every key set away from its default is named (the first of the keys too,
    which no override above sets), none with the switch on or with every key at its default."""
    from jaxnat.config import check_switched, default_config

    keys = ("coverage_bos_eos", "train_iterations", "coverage_lambda")
    switched = {f"nat.{k}": ("nat.coverage", "true") for k in keys}
    config = default_config()
    check_switched(config, switched)
    config.nat.coverage_bos_eos = True
    with pytest.raises(ConfigError, match=r"^nat\.coverage_bos_eos=true acts only with nat\.coverage set, and "
                                          r"nat\.coverage is false: .* or --config\.nat\.coverage_bos_eos=false$"):
        check_switched(config, switched)
    config.nat.coverage_lambda = 0.0
    with pytest.raises(ConfigError, match=r"^nat\.coverage_bos_eos=true, nat\.coverage_lambda=0\.0 act only with .* "
                                          r"--config\.nat\.coverage_bos_eos=false "
                                          r"--config\.nat\.coverage_lambda=-1\.0$"):
        check_switched(config, switched)
    config.nat.coverage = True
    check_switched(config, switched)


def test_missing_and_broken_config_files(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        build_config(str(tmp_path / "nope.py"), [])
    (tmp_path / "config.json").mkdir()  # (what `main` hands in for a workdir's config.json, a directory there)
    with pytest.raises(ConfigError, match="config file .*config.json is a directory"):
        build_config(str(tmp_path / "config.json"), [])
    bad = tmp_path / "bad.py"
    bad.write_text("def get_config(:\n")
    with pytest.raises(ConfigError, match="failed to load: SyntaxError"):
        build_config(str(bad), [])
    raising = tmp_path / "raising.py"
    raising.write_text("def get_config():\n    return {}['model']\n")
    with pytest.raises(ConfigError, match=r"get_config\(\) in .*raising.py failed: KeyError: 'model'"):
        build_config(str(raising), [])
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    with pytest.raises(ConfigError, match="defines no get_config"):
        build_config(str(empty), [])


def test_a_target_language_whose_bleu_tokenizer_is_missing_stops_a_scoring_run_at_its_start(monkeypatch, tmp_path):
    from jaxnat.evaluate import evaluate
    from jaxnat.evaluation import metrics
    from jaxnat.training.trainer import Trainer

    def no_mecab(tokenize, real=metrics.BLEU):
        if tokenize.endswith("mecab"):
            raise RuntimeError("Japanese tokenization requires extra dependencies")
        return real(tokenize=tokenize)

    monkeypatch.setattr(metrics, "BLEU", no_mecab)
    metrics._bleu_metric.cache_clear()
    demo = os.path.join(ROOT, "configs/ar/demo.py")
    try:
        config = build_config(demo, ["--config.data.tgt_lang=ja"])  # a run that only translates needs no MeCab
        for start in (lambda: Trainer(config, str(tmp_path)), lambda: evaluate(config, str(tmp_path))):
            with pytest.raises(ConfigError, match=r"ja-mecab tokenizer .* pip install 'jaxnat\[ja\]'"):
                start()
        metrics.check_bleu_tokenize(metrics.bleu_tokenize("ja", "char"))  # another tokenizer named: no MeCab needed
    finally:
        metrics._bleu_metric.cache_clear()


def test_text_source_needs_dir_and_a_dir_needs_a_source_that_reads_it():
    c = default_config()
    c.data.source = "text"
    with pytest.raises(ConfigError, match="needs data.dir .*--config.data.dir=DIR"):
        validate(c)
    c.data.update(source="synthetic", dir="/data/multi30k")
    with pytest.raises(ConfigError, match="is not read with data.source=synthetic.*--config.data.source=text"):
        validate(c)


@pytest.mark.parametrize("key, value", [("test_splits", "test,sub/test"), ("valid_split", "../val"),
                                        ("train_split", ".."), ("src_lang", "en/x"), ("init_lang", "a\\b")])
def test_split_and_language_names_hold_no_path(key, value):
    """They become file names ({split}.{lang}, hyps/{split}.txt): a test split 'sub/test' was read from data.dir's
    subdirectory, trained for, then stopped the evaluation with a traceback (no directory hyps/sub)."""
    c = default_config()
    c.data.update(source="text", dir="/data/corpus", test_splits="test,test.cs", valid_split="val")
    validate(c)  # a dot inside a name is fine (the code-switched splits: test.cs)
    c.data[key] = value
    with pytest.raises(ConfigError, match=f"data.{key}=.*path separator") as e:
        validate(c)
    assert "\n" not in str(e.value)


def test_a_config_file_with_an_unknown_key_is_refused(tmp_path):
    """ml_collections' update adds any key: a typo in a file would train without the feature it names."""
    typo = tmp_path / "typo.py"
    typo.write_text("from jaxnat.config import default_config\n\n\ndef get_config():\n    c = default_config()\n"
                    "    c.model.update(masked_atn=True)\n    return c\n")
    with pytest.raises(ConfigError, match=r"typo.py sets unknown config key model.masked_atn; did you mean "
                                          r"cmlm.masked_attn\?"):
        build_config(str(typo), [])


@pytest.mark.parametrize("body, message", [
    ("    c.train = dict(c.train, steps=8.5)\n", r"sets train.steps to 8.5, a float; it is an int"),
    ("    c.data = dict(c.data, pack='no')\n", r"sets data.pack to 'no', a str; it is a bool"),
])
def test_a_config_file_with_a_value_of_another_type_is_refused(tmp_path, body, message):
    """A section replaced by a plain dict escapes ml_collections' type check: train.steps=8.5 trained up to the loop
    and failed there with a traceback (after writing the workdir); data.pack='no' packed (a non-empty string)."""
    path = tmp_path / "typed.py"
    path.write_text("from jaxnat.config import default_config\n\n\ndef get_config():\n    c = default_config()\n"
                    + body + "    return c\n")
    with pytest.raises(ConfigError, match=message) as err:
        build_config(str(path), [])
    assert "\n" not in str(err.value)


def test_a_json_config_with_a_value_of_another_type_is_one_line(tmp_path):
    path = tmp_path / "typed.json"
    path.write_text(json.dumps({"train": {"steps": 8.5}}))
    with pytest.raises(ConfigError, match=r"train.steps.*8.5.*int") as err:
        build_config(str(path), [])
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("text", ["[1, 2]", '{"model": "ar"}', "[" * 100_000 + "]" * 100_000])
def test_a_json_config_of_another_shape_is_one_line(tmp_path, text):
    """A config.json (a workdir's, or --config FILE.json) that is a JSON list, whose section is no object, or that
    nests past the recursion limit: one line naming the file. It was a traceback ('list' object has no attribute
    'items', RecursionError), or, for a section, the defaults read in its place: a workdir's then failed as
    'the best checkpoint(s) are unreadable'."""
    (tmp_path / "given.json").write_text(text)
    (tmp_path / "config.json").write_text(text)
    one_line = r"{}.json is (unreadable \(RecursionError\)|not a config jaxnat wrote)"
    with pytest.raises(ConfigError, match=one_line.format("given")):
        build_config(str(tmp_path / "given.json"), [])
    with pytest.raises(ConfigError, match=one_line.format("config")):
        check_matches_workdir(build_config(CONFIG, []), str(tmp_path))
    (tmp_path / "config.json").unlink()
    (tmp_path / "config.json").mkdir()  # a directory in its place: a damaged record, not a new workdir
    with pytest.raises(ConfigError, match=r"config.json is unreadable \(IsADirectoryError\)"):
        check_matches_workdir(build_config(CONFIG, []), str(tmp_path))


def _cli(*args, cwd=ROOT, stdin=None):
    return cli.run([sys.executable, "-m", "jaxnat.main", *args], cwd=cwd, input=stdin, timeout=300)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--config", CONFIG, "--config.train.lrr=1"], "unknown config key train.lrr; did you mean train.lr?"),
        (["--config", "configs/ar/nope.py"], "config file not found: configs/ar/nope.py"),
        (["--config", CONFIG, "--config.train.steps=x"], "bad value for train.steps"),
        (["--config", "configs/ar/multi30k.py", "--config.data.dir=/nonexistent/m30k"], "/nonexistent/m30k"),
    ],
)
def test_cli_errors_are_one_line_exit_2(tmp_path, args, message):
    result = _cli(*args, "--workdir", str(tmp_path / "run"))
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("jaxnat: error: ") and message in lines[-1], result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--config", CONFIG, "--mode", "predict", "--workdir", "W"], "argument --mode: invalid choice"),
        (["--config", CONFIG], "the following arguments are required: --workdir"),
        (["--config", CONFIG, "--workdir", "W", "--stray"], "unrecognised argument --stray"),
        (["--config", CONFIG, "--workdir", "FILE"], "--workdir FILE is a file, not a directory"),
        (["--config", CONFIG, "--workdir", "FILE/run"], "lies under"),
        (["--config", CONFIG, "--workdir", "W", "--mode", "eval"], "--workdir W does not exist"),
        (["--config", CONFIG, "--workdir", "FILE", "--mode", "translate"], "is a file, not a directory"),
        (["--config", CONFIG, "--workdir", ".", "--mode", "translate", "--output", "nodir/out.jsonl"],
         "--output nodir/out.jsonl cannot be written: the directory"),
        (["--config", CONFIG, "--workdir", ".", "--mode", "translate", "--output", "."],
         "--output . is a directory, not a file"),
        (["--config", CONFIG, "--workdir", ".", "--mode", "distill", "--output", "FILE"],
         "--output FILE is a file, not a directory"),
        # an option the mode does not read was ignored: `--input f --output o` without --mode translate trained
        (["--config", CONFIG, "--workdir", "W", "--input", "FILE", "--output", "o.jsonl"],
         "--input is for --mode translate or score, not --mode train"),
        (["--config", CONFIG, "--workdir", ".", "--mode", "eval", "--output", "o"],
         "--output is for --mode translate or score or distill or lm, not --mode eval"),
        (["--config", CONFIG, "--workdir", ".", "--mode", "translate", "--from", "fairseq:m.pt"],
         "--from is for --mode import, not --mode translate"),
        (["--config", CONFIG, "--workdir", ".", "--mode", "translate", "--port", "8080"],
         "--port is for --mode serve, not --mode translate"),
        (["--config", CONFIG, "--workdir", ".", "--mode", "serve", "--port", "70000"],
         "--port 70000: a port is 0 (any free one) to 65535"),
    ],
)
def test_command_line_and_paths_fail_in_one_line(tmp_path, args, message):
    """Rejected before anything is loaded: one line (argparse's may add a usage line), exit 2, nothing written."""
    (tmp_path / "FILE").write_text("not a directory\n")
    result = _cli(*args, cwd=tmp_path, stdin="")
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[0] == f"jaxnat: error: {message}" or lines[0].startswith("jaxnat: error: ") and message in lines[0]
    assert len(lines) <= 2 and (len(lines) == 1 or lines[1].startswith("usage: ")), result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["FILE"]


@pytest.mark.parametrize("mode", ["train", "eval", "translate"])
def test_a_workdir_refuses_another_model(tmp_path, mode):
    """The config is compared with the workdir's recorded one before anything there is written."""
    workdir = tmp_path / "run"
    (workdir / "spm").mkdir(parents=True)
    trained = build_config(CONFIG, ["--config.model.d_model=128", "--config.model.name=levt",
                                    "--config.eval.beam_size=1"])
    recorded = trained.to_json_best_effort(indent=2, sort_keys=True)
    (workdir / "config.json").write_text(recorded)
    result = _cli("--config", CONFIG, "--workdir", str(workdir), "--mode", mode, stdin="a b c\n")
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith(f"jaxnat: error: the config does not match the run in {workdir}: "
                                f"model.name='ar' (trained: 'levt'); model.d_model=256 (trained: 128)"), lines
    assert "Traceback" not in result.stderr
    assert (workdir / "config.json").read_text() == recorded
    assert sorted(p.name for p in workdir.iterdir()) == ["config.json", "spm"]


def test_workdir_check_ignores_settings_that_may_change(tmp_path):
    config = build_config(CONFIG, [])
    (tmp_path / "config.json").write_text(config.to_json_best_effort())
    check_matches_workdir(build_config(CONFIG, ["--config.train.steps=7", "--config.model.dropout=0.2",
                                                "--config.eval.beam_size=1"]), str(tmp_path))
    check_matches_workdir(config, str(tmp_path / "new"))  # nothing recorded: nothing to compare
    with pytest.raises(ConfigError, match="data.vocab_size=8 "):
        check_matches_workdir(build_config(CONFIG, ["--config.data.vocab_size=8"]), str(tmp_path))
    # every key that shapes the vocabulary: another byte_fallback is another vocabulary
    flipped = f"--config.data.byte_fallback={str(not config.data.byte_fallback).lower()}"
    with pytest.raises(ConfigError, match="data.byte_fallback="):
        check_matches_workdir(build_config(CONFIG, [flipped]), str(tmp_path))
    # a run of another model: its name differs, and not the defaults of a section it never read
    (tmp_path / "config.json").write_text(build_config(CONFIG, ["--config.model.name=ctc"]).to_json_best_effort())
    with pytest.raises(ConfigError, match=r"model.name='dat' \(trained: 'ctc'\); use the config") as err:
        check_matches_workdir(build_config(CONFIG, ["--config.model.name=dat", "--config.eval.beam_size=1",
                                                    "--config.dat.upsample=2"]), str(tmp_path))
    assert "dat." not in str(err.value)


def test_vecconst_stage_two_follows_the_authors_schedule():
    """Their README: 10k updates, 4k warming up from 1e-7 to 1e-4, a cosine down to 1e-7, dropout 0.1."""
    c = shipped(os.path.join(ROOT, "configs/vecconst/wmt14_en_de.py"))
    t = c.train
    assert (t.steps, t.warmup_steps, t.lr_schedule, t.lr, t.warmup_init_lr, t.min_lr, c.model.dropout) == (
        10000, 4000, "cosine", 1e-4, 1e-7, 1e-7, 0.1)


def test_editor_wmt14_config_is_the_papers_recipe():
    """§4.1: dropout 0.1 on the embeddings (0.3 elsewhere); the authors' --iter-decode-max-iter 10."""
    c = shipped(os.path.join(ROOT, "configs/editor/wmt14_en_de.py"))
    assert (c.model.dropout, c.model.embed_dropout, c.editor.max_iter) == (0.3, 0.1, 10)


def test_own_insertion_roll_in_needs_dual_path():
    with pytest.raises(ConfigError, match="own_insertion_roll_in is an addition to dual-path"):
        shipped(os.path.join(ROOT, "configs/editor/ablation_no_dual_path.py"),
                "--config.editor.own_insertion_roll_in=0.5")


@pytest.mark.parametrize("keys", [["--config.editor.roll_in_alpha=1"], ["--config.editor.roll_in_beta=0.5"]])
def test_editor_mixtures_need_the_paper_roll_in(keys):
    """Dual-path roll-in (the default) reads neither α nor β: the -dual-path ablation asked without
    editor.dual_path=false would train dual path."""
    with pytest.raises(ConfigError, match="act only with editor.dual_path=false"):
        build_config(CONFIG, ["--config.model.name=editor", "--config.eval.beam_size=1", *keys])
    build_config(CONFIG, ["--config.model.name=editor", "--config.eval.beam_size=1", "--config.editor.dual_path=false",
                          *keys])


def test_a_run_older_than_a_model_key_keeps_what_it_meant(tmp_path):
    """A Coverage-NAT run trained before nat.coverage_bos_eos existed covered BOS and EOS: its config.json
    lacks the key, which then means true there (and nothing in a run without the coverage layer)."""
    nat = ["--config.model.name=nat", "--config.nat.coverage=true", "--config.eval.beam_size=1"]
    recorded = build_config(CONFIG, nat).to_dict()
    del recorded["nat"]["coverage_bos_eos"]
    (tmp_path / "config.json").write_text(json.dumps(recorded))
    assert workdir_config(str(tmp_path)).nat.coverage_bos_eos is True
    with pytest.raises(ConfigError, match=r"nat.coverage_bos_eos=False \(trained: True\)"):
        check_matches_workdir(build_config(CONFIG, nat), str(tmp_path))
    check_matches_workdir(build_config(CONFIG, [*nat, "--config.nat.coverage_bos_eos=true"]), str(tmp_path))
    recorded["nat"]["coverage"] = False
    (tmp_path / "config.json").write_text(json.dumps(recorded))
    assert workdir_config(str(tmp_path)).nat.coverage_bos_eos is False
    check_matches_workdir(build_config(CONFIG, [*nat[:1], "--config.eval.beam_size=1"]), str(tmp_path))
    # a CMLM run of before scaled its token embeddings and shared one position table: the authors' recipe of
    # today's configs/cmlm/ does neither, and is refused on it rather than decoding it wrongly
    cmlm = build_config(os.path.join(ROOT, "configs/cmlm/demo.py"), []).to_dict()
    for key in ("scale_embeddings", "separate_positions"):
        del cmlm["model"][key]
    (tmp_path / "config.json").write_text(json.dumps(cmlm))
    with pytest.raises(ConfigError, match=r"model.scale_embeddings=False \(trained: True\); "
                                          r"model.separate_positions=True \(trained: False\)"):
        check_matches_workdir(build_config(os.path.join(ROOT, "configs/cmlm/demo.py"), []), str(tmp_path))
    assert workdir_config(str(tmp_path)).model.scale_embeddings is True
    # another family's section records its defaults of the run's day: today's stand there, so that a run trained
    # before a default of a family it never read changed still loads and decodes (a DA-Transformer run of before
    # ctc.lm_bonus's default moved)
    dat = build_config(os.path.join(ROOT, "configs/dat/demo.py"), []).to_dict()
    dat["ctc"]["lm_bonus"] = dat["ctc"]["lm_bonus"] + 1.0
    (tmp_path / "config.json").write_text(json.dumps(dat))
    config = workdir_config(str(tmp_path))
    assert config.ctc.lm_bonus == default_config().ctc.lm_bonus
    validate(config)


@pytest.mark.parametrize("family", ["ar", "levt", "editor", "cmlm", "nat", "vecconst"])
def test_gpu_configs_are_the_papers_base_model(family):
    """configs/<family>/multi30k_gpu.py: d 512, 6+6 layers (Coverage-NAT's coverage layer one of six decoder layers,
    as in its paper), bf16 compute, packed batches; scanned layer stacks where they cut compile time (not for the
    AR model, whose MFU is measured from XLA's count of the unrolled step, nor for the vectorized model that
    starts from its run)."""
    c = shipped(os.path.join(ROOT, "configs", family, "multi30k_gpu.py"))
    assert (c.model.d_model, c.model.enc_layers, c.model.dec_layers, c.model.dtype) == (512, 6, 6, "bfloat16")
    assert c.data.pack
    assert c.model.scan_layers == (family in ("levt", "editor", "cmlm", "nat"))
    if family == "nat":
        assert c.nat.coverage


def test_unwritable_workdir_and_output(tmp_path, monkeypatch):
    """(Permission bits do not stop root, who runs CI: os.access stands in for them.)"""
    from jaxnat.paths import check_creatable_dir, check_writable_file

    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(ConfigError, match=f"--workdir {tmp_path}/run cannot be written: {tmp_path} is not writable"):
        check_creatable_dir(str(tmp_path / "run"), "--workdir")
    with pytest.raises(ConfigError, match=f"--output {tmp_path}/o.jsonl cannot be written: the directory"):
        check_writable_file(str(tmp_path / "o.jsonl"), "--output")
    (tmp_path / "o.jsonl").write_text("")
    with pytest.raises(ConfigError, match="the file is not writable"):
        check_writable_file(str(tmp_path / "o.jsonl"), "--output")


@pytest.mark.parametrize("mode", ["eval", "average", "curves"])
def test_a_mode_that_writes_into_the_workdir_refuses_an_unwritable_one(tmp_path, monkeypatch, mode):
    """eval (metrics.json, hyps/), average (checkpoints/averaged/) and curves (curves.png) write into the trained
    workdir: on a read-only one they ended in a traceback after their work (average also hung at its exit);
    translate only reads it."""
    from jaxnat.main import check_paths, parse_args

    monkeypatch.setattr(os, "access", lambda path, mode: not mode & os.W_OK)
    args, _ = parse_args(["--config", CONFIG, "--workdir", str(tmp_path), "--mode", mode])
    with pytest.raises(ConfigError, match=f"--workdir {tmp_path} cannot be written: {tmp_path} is not writable"):
        check_paths(args)
    check_paths(parse_args(["--config", CONFIG, "--workdir", str(tmp_path), "--mode", "translate"])[0])


def test_help_says_every_mode_and_how_config_keys_are_set(capsys):
    """--help showed the docstring's first line alone, cut mid-command; now every mode and where the keys are."""
    from jaxnat.main import MODES, parse_args

    with pytest.raises(SystemExit) as exit:
        parse_args(["--help"])
    text = capsys.readouterr().out
    assert exit.value.code == 0 and "--config.SECTION.KEY=VALUE" in text and "default_config" in text
    assert "train (default):" in text and all(f"{mode}:" in text for mode in MODES if mode != "train")


def test_translate_refuses_to_write_over_its_input(tmp_path):
    """`--input f --output f` (or a link to f) read the whole input, then replaced the user's text with its
    translations; now one line, before anything is loaded."""
    from jaxnat.main import check_paths, parse_args

    text = tmp_path / "in.txt"
    text.write_text("a b c\n")
    (tmp_path / "link.txt").symlink_to(text)
    for output in (text, tmp_path / "link.txt"):
        args, _ = parse_args(["--config", CONFIG, "--workdir", str(tmp_path), "--mode", "translate", "--input",
                              str(text), "--output", str(output)])
        with pytest.raises(ConfigError, match=f"^--output {output} is the --input file, which the translations would "
                                              f"replace; write them to another file$"):
            check_paths(args)
    assert text.read_text() == "a b c\n"
    check_paths(parse_args(["--config", CONFIG, "--workdir", str(tmp_path), "--mode", "translate", "--input",
                            str(text), "--output", str(tmp_path / "out.jsonl")])[0])


@pytest.mark.parametrize("family, expected", [
    ("nat", {"nat.coverage": True, "nat.length_prediction": "pooled", "nat.train_iterations": 5,
             "nat.decode_iterations": 5, "nat.remove_repeats": True, "nat.candidate_score": "log_probability"}),
    ("editor", {"editor.separate_reposition": True, "editor.own_insertion_roll_in": 0.5, "editor.global_shuffle": 0.5,
                "editor.max_iter": 9, "editor.dual_path": True}),
])
def test_a_workdir_of_before_the_family_sections_still_loads(tmp_path, family, expected):
    """config.json of the demo runs trained before the family sections (tests/data/): each family key moves from
    the shared sections to its family's (`Family.moved`), the other families' are dropped, and the shipped
    demo config matches the run (it is evaluated and resumed), while a changed architecture key is refused."""
    shutil.copy(os.path.join(ROOT, "tests", "data", f"{family}_demo_before_sections.config.json"),
                tmp_path / "config.json")
    config = workdir_config(str(tmp_path))
    assert {key: config[key.split(".")[0]][key.split(".")[1]] for key in expected} == expected
    assert "coverage" not in config.model and "dual_path" not in config.train
    demo = os.path.join(ROOT, "configs", family, "demo.py")
    # the NAT run is older than nat.coverage_bos_eos too: it covered BOS and EOS (`Family.before_added`)
    as_trained = ["--config.nat.coverage_bos_eos=true"] if family == "nat" else []
    check_matches_workdir(shipped(demo, *as_trained), str(tmp_path))
    architecture = {"nat": "--config.nat.length_prediction=token",
                    "editor": "--config.editor.separate_reposition=false"}
    with pytest.raises(ConfigError, match="does not match the run"):
        check_matches_workdir(shipped(demo, *as_trained, architecture[family]), str(tmp_path))


def test_a_key_of_another_family_is_refused():
    """A family section is read by its model only: a value set there for another model would do nothing."""
    with pytest.raises(ConfigError, match="nat.coverage is set, but model.name is 'cmlm'"):
        shipped(os.path.join(ROOT, "configs/cmlm/demo.py"), "--config.nat.coverage=true")
    with pytest.raises(ConfigError, match="unknown config key train.correction; it moved to the model family's "
                                          "section: cmlm.correction"):
        shipped(os.path.join(ROOT, "configs/cmlm/demo.py"), "--config.train.correction=true")


@pytest.mark.parametrize("family, key", [("levt", "max_iter"), ("editor", "max_iter"), ("cmlm", "mask_predict_iter"),
                                         ("nat", "decode_iterations")])
def test_the_families_that_sweep_a_decoding_depth(family, key):
    """eval.iteration_sweep sets the depth its family names (`Family.sweep`): the edit models' iteration cap
    (LevT Fig. 4, BLEU against the cap), mask-predict's passes, Coverage-NAT's K_dec."""
    from jaxnat.models import family_of

    extra = ["--config.nat.coverage=true", "--config.model.dec_layers=2"] if family == "nat" else []
    config = shipped(CONFIG, f"--config.model.name={family}", "--config.eval.beam_size=1",
                     "--config.eval.iteration_sweep=1,4", *extra)
    assert family_of(family).sweep[0] == key and key in config[family]


def test_out_of_device_memory_is_one_line(monkeypatch, capsys):
    """An allocation the device cannot make ends the command with one line saying what to lower, not a traceback."""
    import jax

    from jaxnat import main as main_module

    def exhausted(argv):
        raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 30977184224 bytes.\nmore")

    monkeypatch.setattr(main_module, "run", exhausted)
    assert main_module.main([]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("jaxnat: error: out of device memory (RESOURCE_EXHAUSTED")
    assert "data.batch_tokens" in err and "eval.beam_size" in err
    assert "\n" not in err


def test_sigterm_stops_a_command_as_ctrl_c_does(monkeypatch, capsys):
    """SIGTERM outside training's steps (an evaluation, a translation, an import, training's start-up) ended the
    command at once without a line: a translation's last line cut, an import's staging directory left. Now it is
    raised as Ctrl-C's KeyboardInterrupt is, so the same clean-up and line follow, exit 143; the caller's handler
    is back afterwards."""
    from jaxnat import errors
    from jaxnat import main as main_module

    def terminated(argv):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)  # the handler raises before this returns

    outer = signal.signal(signal.SIGTERM, lambda signum, frame: None)  # without main's handler: ignored, not fatal
    try:
        monkeypatch.setattr(main_module, "run", terminated)
        assert main_module.main([]) == 128 + signal.SIGTERM
        assert capsys.readouterr().err.startswith("jaxnat: interrupted; the same command starts again (training "
                                                  "resumes from the newest checkpoint")
        assert signal.getsignal(signal.SIGTERM) is not errors._terminated
    finally:
        signal.signal(signal.SIGTERM, outer)


@pytest.mark.parametrize("raised, status, line", [
    (None, 3, ""), (ConfigError("bad key"), 2, "jaxnat: error: bad key"),
    (OSError("no such file"), 2, "jaxnat: error: no such file"),  # caught where the command says
    (Stopped(signal.SIGTERM, 5), 143,
     "jaxnat: stopped by SIGTERM after step 5 (checkpoint written); the same command resumes from it"),
    (KeyboardInterrupt(), 130, "jaxnat: interrupted; what is left"),
    (Terminated(), 143, "jaxnat: interrupted; what is left")])
def test_a_command_ends_in_one_line_and_its_status(raised, status, line, capsys):
    """`run_command`, every command's entry point: the body's status, or one line and 2 for the user's error,
    128 + the signal's number for a stop; a bench script's (`run_script`) the same lines without "jaxnat: ", its
    error exiting 1; what a command does not catch stays a traceback."""
    from jaxnat.errors import JaxnatError, run_command, run_script

    def body():
        if raised is not None:
            raise raised
        return 3

    assert run_command(body, "what is left", (JaxnatError, OSError)) == status
    assert capsys.readouterr().err == (line and line + "\n")
    if isinstance(raised, OSError):  # a script catches only the user's errors
        with pytest.raises(OSError):
            run_script(body, "what is left")
        return
    with pytest.raises(SystemExit) as script:
        run_script(body, "what is left")
    assert script.value.code == (1 if status == 2 else status)
    assert capsys.readouterr().err == (line and line.removeprefix("jaxnat: ") + "\n")


def test_a_full_disk_is_one_line_and_other_os_errors_are_not_hidden(monkeypatch, capsys):
    """No space left (a checkpoint, the history, the distilled corpus; the checkpointer's own error carries it in its
    message) ends the command with one line saying that the same command resumes, exit 28; any other OSError
    stays a traceback (a bug to report)."""
    import errno

    from jaxnat import main as main_module

    tensorstore = ValueError('RESOURCE_EXHAUSTED: Error writing local file "/runs/x/checkpoints/best/250.orbax-'
                             'checkpoint-tmp/_sharding": Failed to write 61707 bytes to file 17: No space left on '
                             "device [os_error_code='28']")
    for error, path in ((OSError(errno.ENOSPC, "No space left on device", "/runs/x/history.jsonl"),
                         "/runs/x/history.jsonl"), (tensorstore, "/runs/x/checkpoints/best/250.orbax-checkpoint-tmp/"
                                                                 "_sharding")):
        monkeypatch.setattr(main_module, "run", lambda argv: (_ for _ in ()).throw(error))
        assert main_module.main([]) == main_module.DISK_FULL == 28
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"jaxnat: error: no space left on device ({path}); free space and run the same")
        assert "\n" not in err
    monkeypatch.setattr(main_module, "run", lambda argv: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error")))
    with pytest.raises(OSError, match="I/O error"):
        main_module.main([])


def test_a_family_without_beam_search_defaults_to_one_beam():
    """`Family.shared`: a config of such a family need not set eval.beam_size; one that sets it (the file or the
    command line) keeps its value, and a value beam search cannot take is still refused."""
    config = build_config("configs/cmlm/demo.py", [])
    assert config.eval.beam_size == 1
    assert build_config("configs/ar/demo.py", ["--config.model.name=cmlm"]).eval.beam_size == 1
    with pytest.raises(ConfigError, match="beam"):
        build_config("configs/cmlm/demo.py", ["--config.eval.beam_size=4"])


TINY = os.path.join(ROOT, "tests", "configs", "tiny.py")


@pytest.mark.parametrize("family, key, value, message", [
    ("cmlm", "eval.length_penalty", "0.5", r"eval.length_penalty=0.5 is not read by model 'cmlm' \(only by: ar, "
                                           r"vecconst\): the run would be as without it; leave it at its default, "
                                           r"--config.eval.length_penalty=1.0$"),
    ("dat", "eval.max_len_a", "3", "eval.max_len_a=3.0 is not read by model 'dat'"),
    ("vecconst", "eval.search_rules", "fairseq", r"eval.search_rules=fairseq is not read by model 'vecconst' \(only "
                                                 r"by: ar, cmlm, editor, levt, nat\)"),
    ("nat", "eval.run_all_iterations", "true", "eval.run_all_iterations=true is not read by model 'nat'"),
    ("ctc", "eval.length_cap_min", "50", r"eval.length_cap_min=50 is not read by model 'ctc' \(only by: cmlm, dat, "),
    ("ar", "eval.length_cap_ratio", "3", "eval.length_cap_ratio=3.0 is not read by model 'ar'"),
    ("editor", "data.pack", "false", "data.pack=false is not read by model 'editor'"),
    ("ar", "data.max_buckets", "12", "data.max_buckets=12 shapes the batches of training that does not pack, and "
                                     "model 'ar' packs with data.pack=true: set --config.data.pack=false, or leave "
                                     "data.max_buckets at 3"),
])
def test_a_shared_key_the_family_does_not_read_is_refused(family, key, value, message):
    """`Family.reads`: a key of `READ_BY_SOME` set for a family that never reads it (a left-to-right search's length
    rules for a model that predicts its length, fairseq's rules for one that has none) would do nothing."""
    base = [f"--config.model.name={family}", "--config.eval.beam_size=1", "--config.data.pairs_dir=synthetic"]
    with pytest.raises(ConfigError, match=message):
        build_config(TINY, [*base, f"--config.{key}={value}"])
    build_config(TINY, [*base, f"--config.{key}={default_config()[key.split('.')[0]][key.split('.')[1]]}"])


@pytest.mark.parametrize("family, overrides", [
    ("ar", ["eval.length_penalty=0.6", "eval.max_len_a=2", "eval.search_rules=fairseq", "data.pack=false",
            "data.max_buckets=12"]),
    ("cmlm", ["eval.length_cap_min=20", "eval.run_all_iterations=true", "eval.search_rules=fairseq"]),
    ("levt", ["eval.length_cap_ratio=3", "eval.run_all_iterations=true", "data.max_buckets=12"]),
    ("dat", ["eval.length_cap_min=20", "data.max_buckets=12"]),
])
def test_a_shared_key_the_family_reads_is_taken(family, overrides):
    config = build_config(TINY, [f"--config.model.name={family}", "--config.eval.beam_size=1",
                                 *(f"--config.{o}" for o in overrides)])
    assert config.eval.length_cap_min in (10, 20)


def test_read_checks_compare_with_the_familys_default_and_name_known_keys():
    """A family's own default of a shared key (`Family.shared`) is its default there: a run's recorded config
    holds it; a key of Family.reads outside READ_BY_SOME is a one-line error naming the family."""
    import dataclasses

    from jaxnat.config import check_read
    from jaxnat.models import family_of

    ctc = dataclasses.replace(family_of("ctc"), shared={"eval.length_cap_min": 20})
    config = build_config(TINY, ["--config.model.name=ctc", "--config.eval.beam_size=1"])
    config.eval.length_cap_min = 20  # as family_defaults sets it
    check_read(config, ctc)
    config.eval.length_cap_min = 10
    with pytest.raises(ConfigError, match="--config.eval.length_cap_min=20$"):
        check_read(config, ctc)
    with pytest.raises(ConfigError, match="model family 'ctc': its reads names eval.beam_size, not a key of "
                                          "jaxnat.config.READ_BY_SOME"):
        check_read(config, dataclasses.replace(ctc, reads=("eval.beam_size",)))


def _vocabulary_run(path, **data) -> str:
    """A workdir whose config.json records the vocabulary keys ``data`` (none: no config.json) and whose spm/ holds a
    (placeholder) model: what data.spm_from names."""
    os.makedirs(os.path.join(path, "spm"))
    open(os.path.join(path, "spm", "joint.model"), "wb").close()
    if data:
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump({"model": {"name": "ar"}, "data": data}, f)
    return str(path)


def test_the_vocabulary_keys_of_a_run_taking_another_runs_vocabulary_are_that_runs(tmp_path):
    """data.spm_from takes a trained run's vocabulary: a vocabulary key set otherwise than that run built it with
    (its config.json; the default without one) would do nothing, and this run's config.json would record it."""
    from jaxnat.config import check_vocabulary_from

    config = build_config(TINY, [])  # data.vocab_size=200, byte_fallback=false
    same = _vocabulary_run(tmp_path / "a", vocab_size=200, joint_vocab=True, spm_model_type="unigram",
                           byte_fallback=False)
    check_vocabulary_from(config, same)
    config.data.update(vocab_size=120, spm_model_type="bpe")
    with pytest.raises(ConfigError, match=f"^data.vocab_size=120, data.spm_model_type='bpe': data.spm_from={same} "
                                          f"takes the vocabulary of that run, which builds none here, so they do "
                                          r"nothing; set the values it was built with \(--config.data.vocab_size=200 "
                                          r"--config.data.spm_model_type=unigram\), or leave data.spm_from empty"):
        check_vocabulary_from(config, same)
    older = _vocabulary_run(tmp_path / "b", vocab_size=120, spm_model_type="bpe")
    check_vocabulary_from(config, older)  # a run older than data.byte_fallback: not compared
    bare = _vocabulary_run(tmp_path / "c")  # no config.json: the defaults
    with pytest.raises(ConfigError, match="data.vocab_size=120, data.spm_model_type='bpe', data.byte_fallback=False: "):
        check_vocabulary_from(config, bare)


def test_training_refuses_vocabulary_keys_that_data_spm_from_makes_inert(tmp_path):
    """... before the run writes anything (its config.json would record the vocabulary keys it was given)."""
    from jaxnat.training.trainer import Trainer

    other = _vocabulary_run(tmp_path / "ar", vocab_size=8000)
    config = build_config(TINY, [f"--config.data.spm_from={other}"])
    with pytest.raises(ConfigError, match=f"^data.vocab_size=200: data.spm_from={other} takes the vocabulary"):
        Trainer(config, str(tmp_path / "run"))
    assert not os.path.exists(tmp_path / "run")


def test_a_file_is_written_whole_or_left_as_it_was(tmp_path, monkeypatch):
    from jaxnat.paths import write_whole

    path = str(tmp_path / "out.jsonl")
    write_whole(path, "old\n")
    write_whole(path, b"new\n")  # bytes as they are, text as UTF-8
    assert open(path).read() == "new\n"

    def cut(fd):  # Ctrl-C (or a full disk) after part of the write
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", cut)
    with pytest.raises(KeyboardInterrupt):
        write_whole(path, "newer, cut short\n")
    assert open(path).read() == "new\n" and os.listdir(tmp_path) == ["out.jsonl"]  # no temporary file left
