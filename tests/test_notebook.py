"""examples/quickstart.ipynb runs from top to bottom in a real Jupyter kernel (nbclient), its figures inline."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
from nbclient import NotebookClient

import depthlab

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "quickstart.ipynb"


def test_quickstart_notebook_runs_and_shows_its_figures(tmp_path, monkeypatch):
    # The kernel imports the depthlab under test, draws with its own inline backend, and trains on one thread
    # beside the other test worker. A failing cell raises CellExecutionError and fails the test.
    src = str(Path(depthlab.__file__).parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("MPLBACKEND", raising=False)
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()

    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    figures = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(figures) == 3  # accuracy against depth, training curves, draw.attention(cache, …): shown, not only made
    runs = depthlab.Store(tmp_path / "quickstart-runs").runs().set_index("model.layers")
    assert (runs["status"] == "done").all() and runs.loc[1, "accuracy"] < 0.4 <= 0.99 <= runs.loc[2, "accuracy"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "accuracy on 512 examples" in text and text.count("ablated: accuracy") == 2
    assert "relu attention, bidirectional" in text and "'→', " in text  # cfg, and to_str_tokens' tokens
    assert text.count("attending to nothing: loss") == 2  # gradients through the loaded model
    sources = "".join(cell.source for cell in notebook.cells)
    assert "to_str_tokens" in sources and "draw.attention(cache" in sources and "detach=False" in sources
