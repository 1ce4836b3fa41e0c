# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # jaxnat quickstart
#
# A tiny EDITOR and a tiny autoregressive Transformer trained on jaxnat's embedded synthetic corpus, data-parallel
# over 8 simulated CPU devices; translation with soft and hard lexical constraints; EDITOR's edit trace; the
# training curves. On a CPU the whole notebook takes a few minutes; the models are small, so their translations
# are rough: the point is the interface. The README's demo commands train the real thing.
#
# This file is kept as a jupytext pair (`quickstart.py` in percent format, `quickstart.ipynb`): edit either and run
# `jupytext --sync notebooks/quickstart.ipynb`.

# %% [markdown]
# ## Install
# In Colab, or any fresh environment: clone the jaxnat repository first (in Colab, `!git clone URL jaxnat`). The
# cell below finds that checkout (the directory holding `setup.cfg` and `configs/`: `JAXNAT_SOURCE`, else the one
# jaxnat is imported from, else the working directory, its parent or its `jaxnat/`) and installs it if jaxnat is
# not importable yet; the configs are read from it too.

# %%
import importlib.util
import os
import subprocess
import sys


def checkout(imported):
    if "JAXNAT_SOURCE" in os.environ:
        return os.environ["JAXNAT_SOURCE"]
    here = os.getcwd()
    for folder in ([os.path.dirname(os.path.dirname(imported))] if imported else []) + [
            here, os.path.dirname(here), os.path.join(here, "jaxnat")]:
        if os.path.isfile(os.path.join(folder, "setup.cfg")) and os.path.isdir(os.path.join(folder, "configs")):
            return folder
    raise FileNotFoundError(f"no jaxnat checkout in {here}, its parent or its jaxnat/: clone one there "
                            f"(git clone URL jaxnat) or set JAXNAT_SOURCE to it")


found = importlib.util.find_spec("jaxnat")
imported = found and found.origin  # None: not installed (a clone's folder named jaxnat is only a namespace)
SOURCE = checkout(imported)
if not imported:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "-e", SOURCE])
    sys.path.insert(0, SOURCE)  # a running kernel reads the install's .pth file only when restarted
print("jaxnat from", SOURCE)

# %% [markdown]
# ## 8 simulated devices
# XLA splits the host CPU into 8 devices when told so before JAX starts: the same `NamedSharding` data
# parallelism that runs on a GPU pod runs here (`QUICKSTART_DEVICES` sets another number).

# %%
DEVICES = int(os.environ.get("QUICKSTART_DEVICES", "8"))
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={DEVICES}"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax  # noqa: E402

print(jax.device_count(), "devices:", jax.devices()[:2], "…")

# %% [markdown]
# ## Settings
# `QUICKSTART_STEPS` and `QUICKSTART_SIZE` shrink the run (the test suite runs this notebook with a few steps).
# jaxnat's log lines (training's loss, speed and validations) show under each cell, as the command line prints them.

# %%
import tempfile  # noqa: E402

from jaxnat.main import configure_logging  # noqa: E402

configure_logging()

STEPS = int(os.environ.get("QUICKSTART_STEPS", "400"))
SIZE = int(os.environ.get("QUICKSTART_SIZE", "64"))  # d_model; FFN 4x
RUNS = tempfile.mkdtemp(prefix="jaxnat-quickstart-")
print("workdirs under", RUNS)

# %% [markdown]
# ## Train a tiny EDITOR
# The config is the EDITOR demo's (`configs/editor/demo.py`), shrunk; the same `--config.key=value` overrides as
# on the command line. `Trainer.train()` checkpoints into the workdir and writes `history.jsonl` and `curves.png`.

# %%
from jaxnat.config import build_config  # noqa: E402
from jaxnat.training.trainer import Trainer  # noqa: E402


def tiny(config_file, *overrides):
    return build_config(os.path.join(SOURCE, "configs", config_file), [
        f"--config.model.d_model={SIZE}", f"--config.model.ffn_dim={4 * SIZE}", "--config.model.num_heads=2",
        f"--config.train.steps={STEPS}", f"--config.train.eval_every={STEPS}",
        f"--config.train.log_every={max(STEPS // 8, 1)}",
        f"--config.train.checkpoint_every={STEPS}", "--config.train.valid_bleu_sentences=50",
        "--config.data.synthetic_train=4000", "--config.data.synthetic_valid=50", "--config.data.synthetic_test=50",
        # sentences of up to 32 pieces in one batch shape, and one decoding batch size: little to compile
        "--config.data.max_len=32", "--config.data.bucket_multiple=32", "--config.eval.batch_size=8",
        *overrides])


editor_config = tiny("editor/demo.py", "--config.model.enc_layers=1", "--config.model.dec_layers=1")
editor_dir = os.path.join(RUNS, "editor")
Trainer(editor_config, editor_dir).train()

# %% [markdown]
# ## Translate with soft and hard constraints
# Three test sentences of the embedded corpus, with 1–4 words of each reference as constraints (drawn as the
# evaluation draws them). Soft constraints are EDITOR's initial sequence (the model may move or delete them);
# hard ones are kept and only moved. `translate` takes texts and returns one dict per sentence.

# %%
from jaxnat.data.sources import load_corpus  # noqa: E402
from jaxnat.evaluation.constraints import make_constraints  # noqa: E402
from jaxnat.restore import load_translator  # noqa: E402

sources, references = (side[:3] for side in load_corpus(editor_config.data)["test"])
constraints = make_constraints(references, seed=1)
editor = load_translator(editor_config, editor_dir)
for src, ref, words in zip(sources, references, constraints):
    print(f"{src!r} -> reference {ref!r}, constraints {words}")
for mode in ("plain", "soft", "hard"):
    outs = editor.translate(sources, constraints=None if mode == "plain" else constraints,
                            hard=None if mode == "plain" else [mode == "hard"] * len(sources))
    for src, out in zip(sources, outs):
        print(f"{mode:5s} {src!r} -> {out['hyp']!r}")

# %% [markdown]
# ## The edit trace
# Every iteration's repositioning, placeholder insertion and token filling, as `trace.html` shows it.

# %%
from IPython.display import HTML, display  # noqa: E402

from jaxnat.evaluate import trace_page  # noqa: E402

display(HTML(trace_page(editor, sources, references, constraints, ["soft", "hard"])))

# %% [markdown]
# ## A second model: the autoregressive Transformer with constrained beam search
# `"hard": true` on an AR model decodes with VDBA: every constraint appears in the output.

# %%
ar_config = tiny("ar/demo.py", "--config.model.enc_layers=1", "--config.model.dec_layers=1",
                 "--config.eval.beam_size=2")
ar_dir = os.path.join(RUNS, "ar")
Trainer(ar_config, ar_dir).train()
ar = load_translator(ar_config, ar_dir)
for words, out in zip(constraints, ar.translate(sources, constraints=constraints, hard=[True] * len(sources))):
    print(f"{out['hyp']!r} (constraints {words})")

# %% [markdown]
# ## Word alignments and a glossary
# `alignment="words"` adds each output's alignment to its source, read off the model's attention: "i-j", the i-th
# source word and the j-th output word (`--config.eval.alignment=words` on the command line). A glossary, lines of a
# source term, a tab and its target term, finds its terms in each source (whole words, the longest first); their target
# terms go in as hard constraints, as `--mode translate --config.eval.glossary=FILE` gives them. The glossary here is
# the embedded corpus's own lexicon, one translation a noun.

# %%
from jaxnat.data.synthetic import NOUN_PAIRS  # noqa: E402
from jaxnat.decoding.glossary import Glossary  # noqa: E402

for src, out in zip(sources, ar.translate(sources, alignment="words")):
    words, hyp = src.split(), out["hyp"].split()
    links = (map(int, pair.split("-")) for pair in out["alignment"].split())
    print(f"{out['hyp']!r}:", ", ".join(f"{words[i]}→{hyp[j]}" for i, j in links))

glossary_file = os.path.join(RUNS, "glossary.tsv")
entries = {}
for source_term, target_term in NOUN_PAIRS:
    entries.setdefault(source_term, target_term)
with open(glossary_file, "w", encoding="utf-8") as f:
    f.writelines(f"{s}\t{t}\n" for s, t in entries.items())
glossary = Glossary.read(glossary_file, ar_config.data.src_lang)
terms = [glossary.match(src) for src in sources]
outs = ar.translate(sources, constraints=[[t for _, t in found] or None for found in terms],
                    hard=[True] * len(sources))
for found, out in zip(terms, outs):
    print(f"{out['hyp']!r} (glossary terms {found})")

# %% [markdown]
# ## Completing what a translator types
# `prefixes` gives the start of each translation as a translator has typed it: the output goes on from there, and a
# last word typed in part is spelt on to a whole word of the vocabulary (`"prefix"` in a `--mode translate` line or
# a `--mode serve` request). Here each sentence's typed start is its plain output's first word and the first letter
# of its second.

# %%
for src, out in zip(sources, ar.translate(sources)):
    words = out["hyp"].split()
    typed = " ".join(words[:1] + [w[:1] for w in words[1:2]])
    print(f"{typed!r} → {ar.translate([src], prefixes=[typed])[0]['hyp']!r}")

# %% [markdown]
# ## Taking the model elsewhere: CTranslate2
# `export` writes the AR model as a CTranslate2 model (`--mode export --to ctranslate2:DIR` on the command line; the
# `ct2` extra), with its SentencePiece models and a README: CTranslate2 then translates the pieces as jaxnat does
# (int8 weights with `quantization="int8"`). Constrained decoding and typed prefixes stay jaxnat's.

# %%
import shutil  # noqa: E402

from jaxnat.exporters import export  # noqa: E402
from jaxnat.optional import install_hint, optional  # noqa: E402

ctranslate2 = optional("ctranslate2")
if ctranslate2 is None:
    print("no export: ctranslate2 is not installed;", install_hint("ctranslate2"))
else:
    import sentencepiece as spm

    ct2_dir = os.path.join(RUNS, "ar-ct2")
    shutil.rmtree(ct2_dir, ignore_errors=True)
    print(export(ar_config, ar_dir, f"ctranslate2:{ct2_dir}"))
    cut, join = (spm.SentencePieceProcessor(model_file=f"{ct2_dir}/{s}.spm") for s in ("source", "target"))
    engine = ctranslate2.Translator(ct2_dir, device="cpu")
    never = [["<pad>"], ["<s>"], ["<plh>"], ["<mask>"]]  # tokens jaxnat's search never emits
    for src, out in zip(sources, ar.translate(sources, beam_size=1)):
        pieces = cut.encode(src, out_type=str)
        limit = int(ar_config.eval.max_len_a * (len(pieces) + 2) + ar_config.eval.max_len_b)  # jaxnat's, BOS and EOS
        result = engine.translate_batch([pieces], beam_size=1, min_decoding_length=0, max_decoding_length=limit,
                                        suppress_sequences=never)[0]
        theirs = join.decode_pieces(result.hypotheses[0])
        print(f"CTranslate2 {theirs!r} (jaxnat's: {'the same' if theirs == out['hyp'] else repr(out['hyp'])})")

# %% [markdown]
# ## Training curves
# From each run's `history.jsonl` (the same scalars as TensorBoard's), with matplotlib (jaxnat's `plots` extra; Colab
# has it).

# %%
from jaxnat.optional import install_hint, optional  # noqa: E402
from jaxnat.training.history import read_history  # noqa: E402

plt = optional("matplotlib.pyplot")
if plt is None:
    print("no plot: matplotlib is not installed;", install_hint("matplotlib"))
else:
    fig, (loss_ax, speed_ax) = plt.subplots(1, 2, figsize=(10, 3.5))
    for name, workdir in (("EDITOR", editor_dir), ("AR", ar_dir)):
        logged = [e for e in read_history(workdir) if "loss" in e]
        loss_ax.plot([e["step"] for e in logged], [e["loss"] for e in logged], label=name)
        speed_ax.plot([e["step"] for e in logged], [e["tokens_per_s"] for e in logged], label=name)
    loss_ax.set(title="training loss", xlabel="step")
    speed_ax.set(title="tokens / s", xlabel="step")
    loss_ax.legend()
    plt.show()
