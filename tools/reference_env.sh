#!/usr/bin/env bash
# Builds .refenv/ (ignored by git): a separate virtual environment holding the reference implementations that make
# test fixtures and run side-by-side benchmarks: fairseq 0.12.2 (AR Transformer, CMLM, LevT, vanilla NAT,
# constrained beam search), Hugging Face transformers (MarianMTModel, OPUS-MT, and the converter of Marian's own
# checkpoints), on CPU PyTorch, and KenLM's query module. It is never a
# dependency of jaxnat itself: nothing in jaxnat, its extras or its tests may import torch, fairseq or transformers.
# The conventions that differ between fairseq and jaxnat: ../shared/docs/reference-setup.md (from the checkout).
#
#   bash tools/reference_env.sh              (Python 3.11; about 100 s on 2 cores; rerunnable, a rerun takes 30 s)
#   .refenv/bin/python script.py             (a fixture or benchmark script; fairseq's CLIs: -m fairseq_cli.generate)
#   rm -rf .refenv                           (to start over)
#
# fairseq 0.12.2 is the PyPI sdist, unpacked into .refenv/src/ without its dependencies (its pins hydra-core 1.0.7
# and omegaconf 2.0.6 fail on Python 3.11), patched below, put on the path by a .pth file; only its two Cython
# helpers are built (batch_by_size and token blocks). The sdist lacks libnat's sources: LevT's training oracle
# (fairseq.libnat) is unavailable; LevT inference does not need it. The patches, each asserted to apply once:
#   1. config dataclasses: instance defaults (`x: C = C()`) -> field(default_factory=C) (Python 3.11 rejects them),
#      and dataclass/initialize.py reads default_factory;
#   2. checkpoint_utils.load_checkpoint_to_cpu: torch.load(weights_only=False), as torch >= 2.6 defaults to True and
#      every fairseq checkpoint pickles an argparse.Namespace (under "args", or under cfg.model);
#   3. TransformerEncoderLayer: the BetterTransformer fast path, switched on by load_state_dict, stays off: it calls
#      torch._transformer_encoder_layer_fwd without the mask_type today's torch requires, so a loaded model in eval
#      mode fails on any left-padded batch ("Mask Type should be defined"); off, loaded and built models agree exactly.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
env=${REFENV:-$root/.refenv}
py=${PYTHON:-python3}
src=$env/src
fairseq_sdist_sha256=34f1b18426bf3844714534162f065ab733e049597476daa35fffb4d06a92b524
transformers_sdist_sha256=8ee4b3ae943fe33e82afff8e837f4b052058b07ca9be3cb5b729ed31295f72cc
start=$SECONDS
log=$(mktemp)
trap 'rm -f "$log"' EXIT

[[ -x $env/bin/python ]] || "$py" -m venv "$env"
pip=("$env/bin/python" -m pip install -q --disable-pip-version-check)
# torch: exactly this pin, the CPU build on this machine's disk (an unpinned torch downloads a CUDA build of GBs).
# fairseq's needs (numpy 2.4.6 passed the smoke test too; 1.26.4 is the numpy of fairseq 0.12.2's day), then Marian's
# and the tokenizers' (protobuf: NllbTokenizer converts a SentencePiece model through it), then everything those pull
# in, all pinned to the set that was tested together.
"${pip[@]}" torch==2.13.0 \
  numpy==1.26.4 hydra-core==1.3.2 omegaconf==2.3.0 bitarray==3.12.3 sacrebleu==2.6.0 regex==2026.11.19 \
  cffi==2.1.1 tqdm==4.70.1 cython==3.3.1 setuptools==84.2.1 \
  transformers==5.24.0 tokenizers==0.23.3 huggingface-hub==2.4.0 safetensors==0.8.0 sentencepiece==0.2.3 \
  sacremoses==0.2.0 subword-nmt==0.3.8 protobuf==7.36.2 \
  annotated-doc==0.0.7 annotated-types==0.8.0 antlr4-python3-runtime==4.9.3 anyio==4.16.0 click==8.5.1 \
  cloudpickle==3.1.3 colorama==0.4.6 filelock==4.3.1 fsspec==2026.9.0 h11==0.16.0 hf-xet==1.8.0 \
  httpcore2==2.16.2 httpx2==2.16.2 idna==3.20 jinja2==3.1.6 joblib==1.6.0 lxml==6.1.3 markdown-it-py==4.3.0 \
  markupsafe==3.0.4 mdurl==0.1.2 mock==5.2.0 mpmath==1.3.0 networkx==3.6.1 packaging==26.4 portalocker==4.4.2 \
  pycparser==3.12 pydantic==2.14.4 pydantic-core==2.50.5 pygments==2.21.0 pyyaml==6.0.4 rich==15.0.0 \
  shellingham==1.5.4 sympy==1.14.0 tabulate==0.10.0 truststore==0.10.5 typer==0.29.2 typing-extensions==4.16.0 \
  typing-inspection==0.4.5

# fairseq 0.12.2: the sdist (checked against PyPI's sha256), unpacked afresh and patched on every run
mkdir -p "$src"
tarball=$src/fairseq-0.12.2.tar.gz
if ! echo "$fairseq_sdist_sha256  $tarball" | sha256sum -c --status 2>/dev/null; then
  "$env/bin/python" -m pip download -q --disable-pip-version-check --no-deps --no-build-isolation \
    --no-binary fairseq -d "$src" fairseq==0.12.2
  echo "$fairseq_sdist_sha256  $tarball" | sha256sum -c --quiet
fi
rm -rf "$src/fairseq-0.12.2"
tar -xzf "$tarball" -C "$src"
rm -rf "$src/fairseq-0.12.2/fairseq.egg-info"   # so pip does not hold fairseq's own (failing) pins against the env
"$env/bin/python" - "$src/fairseq-0.12.2" <<'EOF'
import pathlib, re, sys
root = pathlib.Path(sys.argv[1])

def patch(rel, pairs):
    p = root / rel
    text = p.read_text()
    for old, new, count in pairs:
        if isinstance(old, re.Pattern):
            text, n = old.subn(new, text)
        else:
            n = text.count(old)
            text = text.replace(old, new)
        assert n == count, f"{rel}: {old!r} matched {n} times, expected {count}"
    p.write_text(text)

instance_default = re.compile(r"^(\s+\w+): (\w+) = \2\(\)$", re.M)           # x: C = C()
instance_field = re.compile(r"field\(default=(\w+)\(\)\)")                    # field(default=C())
patch("fairseq/dataclass/configs.py", [(instance_default, r"\1: \2 = field(default_factory=\2)", 11)])
patch("fairseq/models/transformer/transformer_config.py", [
    (instance_default, r"\1: \2 = field(default_factory=\2)", 2),
    (instance_field, r"field(default_factory=\1)", 1)])
patch("fairseq/dataclass/initialize.py", [
    ("import logging\n", "import logging\nfrom dataclasses import MISSING\n", 1),
    ("        v = FairseqConfig.__dataclass_fields__[k].default\n",
     "        f = FairseqConfig.__dataclass_fields__[k]\n"
     "        v = f.default if f.default_factory is MISSING else f.default_factory()\n", 1)])
patch("fairseq/checkpoint_utils.py", [
    ('torch.load(f, map_location=torch.device("cpu"))',
     'torch.load(f, map_location=torch.device("cpu"), weights_only=False)', 1)])
patch("fairseq/modules/transformer_layer.py", [
    ("        self.load_to_BT = True\n",
     "        self.load_to_BT = False  # refenv: the BetterTransformer fast path stays off\n", 1)])
EOF
# the Cython helpers (fairseq.data.data_utils_fast, token_block_utils_fast), as fairseq's setup.py builds them
(cd "$src/fairseq-0.12.2" && "$env/bin/python" - <<'EOF'
import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
exts = [Extension(f"fairseq.data.{name}", [f"fairseq/data/{name}.pyx"], include_dirs=[numpy.get_include()],
                  language="c++", extra_compile_args=["-std=c++11", "-O3"])
        for name in ("data_utils_fast", "token_block_utils_fast")]
setup(name="fairseq-cython-helpers", ext_modules=cythonize(exts, language_level=3, quiet=True),
      script_args=["-q", "build_ext", "--inplace"])
EOF
) >"$log" 2>&1 || { cat "$log" >&2; echo "error: building fairseq's Cython helpers failed" >&2; exit 1; }
# fastBPE 0.1.0 (fairseq's --bpe fastbpe): its sdist's pre-generated C++ predates Python 3.11, so Cython remakes it
rm -rf "$src/fastBPE-0.1.0"
"$env/bin/python" -m pip download -q --disable-pip-version-check --no-deps --no-build-isolation -d "$src" \
  fastBPE==0.1.0
tar -xzf "$src/fastBPE-0.1.0.tar.gz" -C "$src" && rm "$src/fastBPE-0.1.0/fastBPE/fastBPE.cpp"
"${pip[@]}" --no-build-isolation --no-deps "$src/fastBPE-0.1.0" >"$log" 2>&1 ||
  { cat "$log" >&2; echo "error: building fastBPE failed" >&2; exit 1; }
# Hugging Face's converter of Marian's own checkpoints (.npz, the OPUS-MT releases): transformers' wheels leave it out
# since 4.47, so it comes from the 4.46.3 sdist (sha256 checked), as the one file tools/make_import_fixtures.py loads
converter_sdist=$src/transformers-4.46.3.tar.gz
if ! echo "$transformers_sdist_sha256  $converter_sdist" | sha256sum -c --status 2>/dev/null; then
  "$env/bin/python" -m pip download -q --disable-pip-version-check --no-deps --no-build-isolation \
    --no-binary transformers -d "$src" transformers==4.46.3
  echo "$transformers_sdist_sha256  $converter_sdist" | sha256sum -c --quiet
fi
tar -xzf "$converter_sdist" -C "$src" --strip-components=5 \
  transformers-4.46.3/src/transformers/models/marian/convert_marian_to_pytorch.py
# KenLM's Python module (queries only: tools/make_ngram_fixture.py scores jaxnat's ARPA files with it), built from
# PyPI's sdist
"${pip[@]}" kenlm==0.3.0 >"$log" 2>&1 || { cat "$log" >&2; echo "error: building kenlm failed" >&2; exit 1; }
site=$("$env/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$src/fairseq-0.12.2" >"$site/fairseq-0.12.2-src.pth"

cd "$env" && "$env/bin/python" -W ignore - <<'EOF' 2>"$log" || { cat "$log" >&2; exit 1; }
import fairseq, fastBPE, torch, transformers, numpy
from fairseq import checkpoint_utils
from fairseq.data.data_utils_fast import batch_by_size_vec
from fairseq.iterative_refinement_generator import IterativeRefinementGenerator
from fairseq.models.nat import cmlm_transformer, levenshtein_transformer, nonautoregressive_transformer
from fairseq.models.transformer import TransformerModel
from fairseq.sequence_generator import SequenceGenerator
from transformers import MarianMTModel
print(f"fairseq {fairseq.__version__}, transformers {transformers.__version__}, torch {torch.__version__}, "
      f"numpy {numpy.__version__}")
EOF
echo "$env ready in $((SECONDS - start)) s: $env/bin/python script.py"
