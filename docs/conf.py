"""Sphinx configuration: the user guide (Markdown, via myst-parser), the notebook as stored with its outputs
(myst-nb, never executed here: tests/test_notebooks.py executes it) and an API reference from docstrings.

Build (CI runs this from tests/test_docs.py; warnings are errors):
    python -m sphinx -W --keep-going -b html docs docs/_build
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # document the checkout, even when not installed

project = "xr_zstrings"
author = "xr_zstrings contributors"
copyright = "2026, xr_zstrings contributors"

try:
    from xr_zstrings import __version__ as release
except Exception:  # noqa: BLE001 - the build still works from a bare checkout
    release = "0.1.0"
version = release

extensions = [
    "myst_nb",  # myst-parser's Markdown plus notebooks (it loads myst_parser itself; listing both fails)
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"
exclude_patterns = ["_build", "**/.ipynb_checkpoints", "README.md"]

# Markdown: GitHub-style heading anchors so [x](format-notes.md#strings) links resolve
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]

# Notebooks (docs/airports.ipynb links to notebooks/airports.ipynb): render the stored outputs only
nb_execution_mode = "off"

# API reference: documented members in source order; type hints stay in the signature
autodoc_default_options = {"members": True, "member-order": "bysource", "show-inheritance": True}
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
autodoc_mock_imports: list[str] = []
napoleon_google_docstring = True
napoleon_numpy_docstring = True

# Cross-references to third-party docs are best effort: no network in CI, never a warning
intersphinx_mapping: dict[str, tuple[str, str | None]] = {}
nitpicky = False

suppress_warnings: list[str] = []

html_theme = "alabaster"
# wider than alabaster's 940px so the notebook's code and outputs fit (about 95 columns)
html_theme_options = {"page_width": "1180px", "body_max_width": "none"}
html_title = f"xr_zstrings {release}"
html_static_path: list[str] = []


# docs/cloud.md is written separately. Until it exists, drop it from the toctree and turn links to it
# into plain text, so the build stays warning-free without suppressing missing-reference warnings.
_CLOUD_LINK = re.compile(r"\[([^\]]+)\]\(cloud\.md(#[^)]*)?\)")


def _without_missing_cloud(app: object, docname: str, source: list[str]) -> None:
    if (HERE / "cloud.md").exists():
        return
    text = _CLOUD_LINK.sub(r"\1 (docs/cloud.md)", source[0])
    source[0] = re.sub(r"(?m)^cloud\n", "", text) if docname == "index" else text


def setup(app: object) -> dict[str, bool]:
    app.connect("source-read", _without_missing_cloud)  # type: ignore[attr-defined]
    return {"parallel_read_safe": True}
