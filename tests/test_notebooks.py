"""Execute every notebook in notebooks/ so it never rots (nbclient + ipykernel, a few seconds each)."""

from __future__ import annotations

from pathlib import Path

# the test extra installs all four; a missing one fails the run rather than skipping it
import ipykernel  # noqa: F401 - the kernel the notebooks run on
import matplotlib  # noqa: F401 - the notebooks plot
import nbclient
import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


def test_there_is_a_notebook():
    assert any(p.name == "stations.ipynb" for p in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, tmp_path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError naming the cell on any error
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "round trip through stations.nc is identical" in text
    assert "Warning" not in text  # e.g. missing glyphs or deprecations show up as stderr text
