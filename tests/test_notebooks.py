"""The notebooks in notebooks/ are stored with their outputs (figures included) and executed here with
nbclient on an ipykernel: they must run, render their figures inline and print what is stored.

Refresh the stored outputs after changing a notebook: ``python tests/test_notebooks.py`` (executes
every notebook in a temporary working directory and writes the outputs back).
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

# the test extra installs all of these; a missing one fails the run rather than skipping it
import airportsdata  # noqa: F401 - the airports notebook's data
import ipykernel  # noqa: F401 - the kernel the notebooks run on
import matplotlib  # noqa: F401 - the notebooks plot
import nbclient
import nbformat
import pytest

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
# a cell tagged so prints what depends on library versions (an xarray repr): its text is not compared
VARIES = "output-varies"
# what a stored output must never contain: a path of the machine that ran it
MACHINE_PATH = re.compile(r"(?<![\w.])/(tmp|home|root|work|Users|var)/")


def _client(nb: nbformat.NotebookNode, workdir: Path) -> nbclient.NotebookClient:
    # coalesce_streams: one output per stream and cell (how the kernel splits them depends on timing)
    return nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", coalesce_streams=True,
                                   resources={"metadata": {"path": str(workdir)}})


def _code_cells(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [c for c in nb.cells if c.cell_type == "code"]


def _text(cell: nbformat.NotebookNode) -> str:
    """A cell's text outputs (consecutive pieces of one stream joined)."""
    parts: list[list[str]] = []
    for o in cell.outputs:
        if o.output_type == "stream":
            if parts and parts[-1][0] == o.name:
                parts[-1][1] += o.text
            else:
                parts.append([o.name, o.text])
        elif o.output_type in ("execute_result", "display_data"):
            parts.append([o.output_type, o.data.get("text/plain", "")])
        elif o.output_type == "error":
            parts.append(["error", f"{o.ename}: {o.evalue}"])
    return "".join(f"[{kind}]{text}\n" for kind, text in parts)


def _images(nb: nbformat.NotebookNode) -> int:
    return sum("image/png" in o.get("data", {}) for c in _code_cells(nb) for o in c.outputs)


def _check_outputs(nb: nbformat.NotebookNode) -> None:
    cells = _code_cells(nb)
    assert all(c.execution_count for c in cells), "a code cell was not executed"
    assert [c.execution_count for c in cells] == list(range(1, len(cells) + 1)), "not run top to bottom"
    for c in cells:
        text = _text(c)
        assert "[error]" not in text and "[stderr]" not in text, text  # warnings are printed on purpose
        assert not MACHINE_PATH.search(text), text
    assert _images(nb) >= 2, "the figures are not in the outputs (inline backend off?)"


def test_the_airports_notebook_is_here():
    assert [p.name for p in NOTEBOOKS] == ["airports.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_with_outputs(path):
    """What a reader sees without running anything (and what the docs render): every cell's output,
    the figures, no error, no path of the machine that ran it, and a modest file size."""
    _check_outputs(nbformat.read(path, as_version=4))
    assert path.stat().st_size < 400_000


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_runs_and_prints_what_is_stored(path, tmp_path, monkeypatch):
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the notebook's %matplotlib inline decides
    stored = nbformat.read(path, as_version=4)
    nb = nbformat.read(path, as_version=4)
    client = _client(nb, tmp_path)
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)  # raises CellExecutionError naming the cell on any error
        _check_outputs(nb)
        for old, new in zip(_code_cells(stored), _code_cells(nb)):
            if VARIES not in old.metadata.get("tags", []):
                assert _text(new) == _text(old), old.source

        # its files went to a folder under the working directory, kept unless asked otherwise
        data = tmp_path / "airports-data"
        assert {"airports.zarr", "airports_v3.zarr", "airports.nc", "back.zarr"} <= {
            p.name for p in data.iterdir()}
        # a second run over the kept files works (every write replaces its target) ...
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)
        # ... and KEEP_FILES = False makes the last cell delete the folder
        last = nbformat.v4.new_code_cell(_code_cells(nb)[-1].source)
        for extra in (nbformat.v4.new_code_cell("KEEP_FILES = False"), last):
            nb.cells.append(extra)
            client.execute_cell(extra, len(nb.cells) - 1)
    assert not data.exists()
    assert "deleted airports-data" in _text(last)


def main() -> None:
    """Execute every notebook in a temporary directory and store its outputs."""
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        with tempfile.TemporaryDirectory() as tmp:
            _client(nb, Path(tmp)).execute()
        for cell in _code_cells(nb):
            cell.metadata.pop("execution", None)  # timestamps: noise in every diff
        _check_outputs(nb)
        nbformat.write(nb, path)
        print(f"{path.name}: {len(_code_cells(nb))} cells, {_images(nb)} figures, {path.stat().st_size:,} bytes")


if __name__ == "__main__":
    sys.exit(main())
