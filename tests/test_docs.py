"""The docs: the build (Sphinx + myst-parser, API reference from docstrings; any warning fails it),
and every Python and ``zstrings`` example of README.md and docs/*.md run in order, per page, in a
temporary directory, with the outputs the docs show compared (the harness and its conventions for
setup blocks and blocks that cannot run: tests/doc_examples.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import doc_examples
import myst_nb  # noqa: F401 - the test extra installs these; missing ones fail the run
import myst_parser  # noqa: F401 - as myst_nb
import netCDF4
import numpy as np
import pytest
import sphinx  # noqa: F401 - as myst_nb
import xarray as xr

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
    for name in ("to_nczarr", "to_zarr_v2", "with_netcdf_c_strings", "with_zarr_encoding", "to_zarr_v3",
                 "open_tree", "read_arrow", "ZStringsError", "StringOverflowError", "sample_path", "ZStringsBackendEntrypoint"):
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


# ---------------------------------------------------------------------------------------------
# Docs that run: every example of README.md and docs/*.md (conventions: tests/doc_examples.py)
# ---------------------------------------------------------------------------------------------


def _readme_claims(ns: dict, tmp: Path) -> None:
    """What the README's examples say, checked with the peers: netcdf-c reads the truncated store
    within its width, the DataTree comes back through netCDF-4, read_arrow gives the strings."""
    assert ns["ds"]["station"].dtype == np.dtypes.StringDType()
    with netCDF4.Dataset(f"file://{tmp / 'out.zarr'}#mode=nczarr,file", "r") as nc:
        assert all(len(s.encode()) <= 6 for s in nc["station"][:].tolist())
    back = xr.open_datatree(tmp / "back.zarr", engine="zstrings")
    assert back["metadata/country"].values.tolist() == ns["tree"]["metadata/country"].values.tolist()
    assert ns["read_arrow"]("v3.zarr", "station").to_pylist() == ns["ds"]["station"].values.tolist()


def _guide_claims(ns: dict, tmp: Path) -> None:
    assert ns["ds"]["station"].dtype == np.dtypes.StringDType()  # the dask block's: computed, still text
    assert ns["ds"]["station"].compute().dtype == np.dtypes.StringDType()
    assert set(ns["tree"].groups) == {"/", "/sub"} and "code" in ns["sub"]


#: page -> checks of its claims after it ran (its namespace, its directory)
CLAIMS = {"README.md": _readme_claims, "docs/guide.md": _guide_claims}


@pytest.mark.parametrize("name", doc_examples.PAGES)
def test_doc_examples_run_and_print_what_the_docs_show(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       request: pytest.FixtureRequest) -> None:
    page = doc_examples.parse(doc_examples.ROOT / name)
    s3 = None
    if page.s3:
        s3 = request.getfixturevalue("s3")
        for k, v in doc_examples.s3_environment(s3).items():
            monkeypatch.setenv(k, v)
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the examples' own warnings (truncation, ...) are theirs to show
        ns = doc_examples.run(page, tmp_path, s3)
    if name in CLAIMS:
        CLAIMS[name](ns, tmp_path)


def test_every_page_with_examples_runs_some() -> None:
    """Pages with Python or zstrings blocks run at least one (a page of only skipped blocks is a
    page whose examples nobody checks); every skip names its reason (parse refuses it otherwise)."""
    for name in doc_examples.PAGES:
        page = doc_examples.parse(doc_examples.ROOT / name)
        if page.skipped:
            assert page.steps, f"{name}: every example is skipped"
    assert doc_examples.parse(doc_examples.ROOT / "README.md").steps


def test_readme_is_a_newcomers_page() -> None:
    """The README stays short (issue 38): at most 250 lines, its first code block the two commands a
    newcomer runs; the benchmark tables and the CI notes live in docs/performance.md and
    docs/development.md, which it links."""
    readme = (doc_examples.ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250, f"README.md has {len(readme.splitlines())} lines (at most 250)"
    first = re.search(r"```\w*\n(.*?)```", readme, re.DOTALL)
    assert first is not None, "README.md has no code block"
    commands = [line for line in first[1].splitlines() if line and not line.startswith("#")]
    assert commands == ['python -m pip install . && zstrings',
                        'python -m pip install -e ".[test]" && python -m pytest'], commands
    for page in ("docs/performance.md", "docs/development.md"):
        assert f"]({page})" in readme and (doc_examples.ROOT / page).exists(), page


def test_readme_links_reach_a_docs_page_and_heading() -> None:
    """Every docs/ link of the README (outside the Sphinx build, which checks the docs' own links)
    names a page that exists and, with an anchor, one of its headings (GitHub's anchors)."""
    readme = (doc_examples.ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\((docs/[\w-]+\.md)(?:#([\w-]+))?\)", readme)
    assert links
    for page, anchor in links:
        text = (doc_examples.ROOT / page).read_text(encoding="utf-8")
        slugs = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                 for h in re.findall(r"^#+ (.*)$", text, re.MULTILINE)}
        assert not anchor or anchor in slugs, f"README.md links {page}#{anchor}: no such heading"


@pytest.mark.parametrize("folder", ["io", "read", "write"])
def test_package_maps_name_every_module(folder: str) -> None:
    """The module docstring of io/, read/ and write/ is the folder's map (issue 38): it names every
    module there, and the docs' layout page lists each module file."""
    import importlib

    pkg = doc_examples.ROOT / "xr_zstrings" / folder
    doc = importlib.import_module(f"xr_zstrings.{folder}").__doc__ or ""
    layout = (DOCS / "development.md").read_text(encoding="utf-8")
    for module in sorted(p.stem for p in pkg.glob("*.py") if p.stem != "__init__"):
        assert f"``{module}``" in doc, f"xr_zstrings/{folder}/__init__.py's docstring does not name {module}"
        assert f"{module}.py" in layout, f"docs/development.md's layout does not list {folder}/{module}.py"


def test_the_harness_refuses_what_it_cannot_run_and_compares_outputs(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("```bash\npython -m pip install x\n```\n")
    with pytest.raises(doc_examples.DocExampleError, match=r"p.md:2: .*not a zstrings command.*docs-test: skip"):
        doc_examples.parse(page)
    page.write_text("<!-- docs-test: skip -->\n```bash\npip install x\n```\n")
    with pytest.raises(doc_examples.DocExampleError, match="needs a reason"):
        doc_examples.parse(page)
    page.write_text("<!-- docs-test: skip: installs packages -->\n```bash\npip install x\n```\n"
                    "```python\nprint('a')\nprint('b')\n```\n<!-- docs-test: output -->\n```text\na\nc\n```\n")
    parsed = doc_examples.parse(page)
    assert parsed.skipped == [(2, "installs packages")] and [s.kind for s in parsed.steps] == ["python"]
    with pytest.raises(doc_examples.DocExampleError, match="p.md:5: the output differs"):
        doc_examples.run(parsed, tmp_path)
    assert doc_examples.matches("a\n...\nd\n", "a\nb\nc\nd\n") and doc_examples.matches("a\n...\n", "a\n")
    assert not doc_examples.matches("a\n...\nd\n", "a\nb\n")
    page.write_text("```python\nx = 1\n```\n```python\n1 / (x - 1)\n```\n")
    with pytest.raises(doc_examples.DocExampleError, match="p.md:4: this python block raised ZeroDivisionError"):
        doc_examples.run(doc_examples.parse(page), tmp_path)


def test_the_docs_name_every_zarr_v3_string_layout() -> None:
    """codecs/layouts.py is the one list of Zarr v3 string layouts (issue 28): the CLI's choices, the
    CLI page's --layout line and format-notes' line on who reads which all say the same."""
    from xr_zstrings.codecs.layouts import LAYOUT_NAMES, V3_LAYOUTS

    cli = (DOCS / "cli.md").read_text(encoding="utf-8")
    m = re.search(r"--layout ([\w.|-]+)`", cli)
    assert m is not None and tuple(m[1].split("|")) == LAYOUT_NAMES, m
    notes = (DOCS / "format-notes.md").read_text(encoding="utf-8")
    m = re.search(r'to_zarr_v3\(layout=("[^)]+)\)`\s+holding text are readable with\s+`engine="zstrings"`', notes)
    assert m is not None
    assert [s.strip().strip('"') for s in m[1].split("|")] == [r.name for r in V3_LAYOUTS if not r.zarr_python]
    out = subprocess.run([sys.executable, "-m", "xr_zstrings.cli", "convert", "-h"], capture_output=True,
                         text=True, check=True).stdout
    assert "{" + ",".join(LAYOUT_NAMES) + "}" in out.replace("\n", "").replace(" ", "")
