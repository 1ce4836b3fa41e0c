"""The quickstart notebook runs, cell by cell, on a tiny setting (nbclient; any cell error fails the test), and
its two files (the jupytext pair) hold the same cells."""

import os
import sys

import nbformat
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(ROOT, "notebooks", "quickstart.ipynb")


def test_the_pair_holds_the_same_cells():
    import jupytext

    text = jupytext.read(os.path.join(ROOT, "notebooks", "quickstart.py"))
    ipynb = nbformat.read(NOTEBOOK, as_version=4)
    assert [(c.cell_type, c.source) for c in text.cells] == [(c.cell_type, c.source) for c in ipynb.cells]


def test_the_install_cell_finds_the_checkout_from_any_working_directory(monkeypatch, tmp_path):
    """The configs are read from the checkout jaxnat is imported from, not from the working directory's parent: a
    notebook opened elsewhere (Colab's /content, beside its clone) or run as a script from the repository root."""
    monkeypatch.delenv("JAXNAT_SOURCE", raising=False)
    monkeypatch.chdir(tmp_path)
    install = next(c for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "code")
    namespace = {}
    exec(install.source, namespace)  # jaxnat is importable here: nothing is installed
    assert os.path.isfile(os.path.join(namespace["SOURCE"], "configs", "editor", "demo.py"))


def test_the_plot_cell_says_what_to_install_without_matplotlib(monkeypatch, capsys):
    """matplotlib is an extra (`plots`): an environment with `pip install -e .` alone ends the notebook with one line
    saying how to install it, not a ModuleNotFoundError."""
    for module in ("matplotlib", "matplotlib.pyplot"):
        monkeypatch.setitem(sys.modules, module, None)  # an import of it raises ModuleNotFoundError
    plot = [c for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "code"][-1]
    exec(plot.source, {})
    assert capsys.readouterr().out == ("no plot: matplotlib is not installed; pip install -e '.[plots]' in jaxnat's "
                                       "directory\n")


@pytest.mark.slow  # the quick tier (-m 'not slow') leaves it out
def test_the_notebook_runs(monkeypatch, tmp_path):
    from nbclient import NotebookClient

    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the kernel's workdirs (tempfile.mkdtemp) with pytest's, not in /tmp
    monkeypatch.setenv("QUICKSTART_STEPS", "8")
    monkeypatch.setenv("QUICKSTART_DEVICES", "2")  # a mesh all the same, at a quarter of 8 devices' compiling
    monkeypatch.setenv("QUICKSTART_SIZE", "32")
    monkeypatch.delenv("JAXNAT_SOURCE", raising=False)  # the checkout found from the imported jaxnat
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "2 devices" in outputs and "constraints" in outputs
    assert "training done; best valid BLEU" in outputs  # jaxnat's log lines show under the cells (INFO)
    assert "CTranslate2 '" in outputs and "(jaxnat's: '" not in outputs  # the exported model translates as jaxnat
    html = [o for c in nb.cells for o in c.get("outputs", []) if "text/html" in o.get("data", {})]
    assert html and "<h1>jaxnat editor: edit trace</h1>" in html[0]["data"]["text/html"]
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert images, "the training curves were not plotted"
