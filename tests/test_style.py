"""One style for the code base, as CI runs it: `ruff check` with the settings of pyproject.toml (lines of at most
120 columns, pycodestyle's errors and warnings, and pyflakes' checks: unused imports and variables, undefined
names) finds nothing, in the package, the tests, the configs, the benchmarks and the notebook."""

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_ruff_check_is_clean():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", str(REPO_ROOT)], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
