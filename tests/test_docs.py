"""The docs build (Sphinx + myst-parser, API reference from docstrings) runs here so CI runs it;
any warning fails it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import myst_nb  # noqa: F401 - the test extra installs these; missing ones fail the run
import myst_parser  # noqa: F401
import sphinx  # noqa: F401

DOCS = Path(__file__).resolve().parent.parent / "docs"


def build(src: Path, out: Path, builder: str = "html") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", builder, str(src), str(out)],
        capture_output=True, text=True, timeout=300, check=False,
    )


def test_docs_build_without_warnings(tmp_path):
    proc = build(DOCS, tmp_path / "html")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    api = (tmp_path / "html" / "api.html").read_text()
    for name in ("to_nczarr", "prepare_for_zarr", "to_zarr_v3", "open_tree", "read_arrow",
                 "ZStringsError", "StringOverflowError", "sample_path", "ZStringsBackendEntrypoint"):
        assert name in api, name
    guide = (tmp_path / "html" / "guide.html").read_text()
    assert 'href="format-notes.html#zarr-v3-strings-one-name-two-layouts"' in guide
    assert "zstrings info" in (tmp_path / "html" / "cli.html").read_text()
    # the notebook, rendered as stored (never executed here): its printed outputs and both figures
    notebook = (tmp_path / "html" / "airports.html").read_text()
    assert "StringTruncationWarning: variable '/name': 90 value(s)" in notebook
    assert "NCZarr -&gt; airports.nc -&gt; NCZarr: identical" in notebook
    figures = re.findall(r'<img[^>]*src="(_images/[^"]+\.png)"', notebook)
    assert len(figures) == 2 and all((tmp_path / "html" / f).stat().st_size > 10_000 for f in figures)
    assert 'href="airports.html"' in guide
    assert not (DOCS / "airports-data").exists()  # nothing ran in docs/


def test_docs_build_once_cloud_page_exists(tmp_path):
    """docs/cloud.md is written separately: the build must pass with and without it."""
    src = tmp_path / "docs"
    shutil.copytree(DOCS, src, ignore=shutil.ignore_patterns("_build"))
    if not (src / "cloud.md").exists():
        (src / "cloud.md").write_text("# Cloud storage\n\nStores on S3 and friends.\n")
    proc = build(src, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert 'href="cloud.html"' in (tmp_path / "out" / "guide.html").read_text()
