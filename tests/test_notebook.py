"""The quickstart notebook runs, cell by cell, on a tiny setting (nbclient; any cell error fails the test), and
its two files (the jupytext pair) hold the same cells."""

import os

import nbformat
import pytest

pytestmark = pytest.mark.slow  # the quick tier (-m 'not slow') leaves this file out

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(ROOT, "notebooks", "quickstart.ipynb")


def test_the_pair_holds_the_same_cells():
    import jupytext

    text = jupytext.read(os.path.join(ROOT, "notebooks", "quickstart.py"))
    ipynb = nbformat.read(NOTEBOOK, as_version=4)
    assert [(c.cell_type, c.source) for c in text.cells] == [(c.cell_type, c.source) for c in ipynb.cells]


def test_the_notebook_runs(monkeypatch, tmp_path):
    from nbclient import NotebookClient

    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the kernel's workdirs (tempfile.mkdtemp) with pytest's, not in /tmp
    monkeypatch.setenv("QUICKSTART_STEPS", "8")
    monkeypatch.setenv("QUICKSTART_DEVICES", "2")  # a mesh all the same, at a quarter of 8 devices' compiling
    monkeypatch.setenv("QUICKSTART_SIZE", "32")
    monkeypatch.setenv("JAXNAT_SOURCE", ROOT)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": os.path.join(ROOT, "notebooks")}}).execute()
    outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "2 devices" in outputs and "constraints" in outputs
    html = [o for c in nb.cells for o in c.get("outputs", []) if "text/html" in o.get("data", {})]
    assert html and "<h1>jaxnat editor: edit trace</h1>" in html[0]["data"]["text/html"]
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images, "the training curves were not plotted"
