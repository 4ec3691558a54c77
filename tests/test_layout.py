"""The package layout (issue 16): nothing private crosses a folder boundary.

A module may use the ``_private`` names of its own folder (``xr_zstrings/write/*.py`` share
``write``'s helpers); from any other folder it imports public names only, and it reads no
``_private`` attribute of a module or object it imported from there. The top-level modules
(``errors``, ``backend``, ``cli``, ...) count as one folder. Checked on the source with ``ast``, so a
new crossing fails here rather than waiting for review.
"""

from __future__ import annotations

import ast
import importlib.util
import tomllib
from pathlib import Path
from typing import Any

import pytest

import xr_zstrings

PACKAGE = Path(xr_zstrings.__file__).resolve().parent
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)
ROOT = Path(__file__).resolve().parent.parent  # the repository: .ci/, pyproject.toml


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _folder(parts: list[str]) -> str:
    """The folder of a module or name (dotted parts below xr_zstrings): "" for the top level."""
    return parts[0] if len(parts) > 1 and (PACKAGE / parts[0]).is_dir() else ""


def crossings(source: str, module: list[str], is_package: bool = False) -> list[str]:
    """The private names ``source`` (module ``xr_zstrings.<module>``) takes from another folder."""
    package = module if is_package else module[:-1]
    mine = _folder([*module, "x"] if is_package else module)
    found: list[str] = []
    foreign: set[str] = set()  # local names bound to a module or object of another folder
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "xr_zstrings" and _folder(parts[1:] + ["x"]) != mine:
                    if any(_private(p) for p in parts):
                        found.append(f"import {a.name}")
                    if a.asname:
                        foreign.add(a.asname)
            continue
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            target = [*package[: len(package) - node.level + 1], *(node.module or "").split(".")]
            target = [t for t in target if t]
        elif node.module and node.module.split(".")[0] == "xr_zstrings":
            target = node.module.split(".")[1:]
        else:
            continue
        for a in node.names:
            full = [*target, a.name]
            if _folder(full) == mine:
                continue
            if any(_private(p) for p in full):
                found.append(f"from {'.' * node.level}{node.module or ''} import {a.name}")
            foreign.add(a.asname or a.name)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name)
                and node.value.id in foreign):
            found.append(f"{node.value.id}.{node.attr}")
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_no_private_name_crosses_a_folder(path: Path) -> None:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    module = parts[:-1] if is_package else parts
    found = crossings(path.read_text(encoding="utf-8"), module, is_package)
    assert found == [], (f"{path.relative_to(PACKAGE.parent)} uses private names of another folder: {found}; "
                         "give them a public name in their own folder, or move them where they belong")


def test_the_check_sees_a_crossing() -> None:
    """The check itself: a private import from another folder and a private attribute of a module
    imported from there are reported; the same folder's private names and public ones are not."""
    source = ("from ..write.plan import _Array, check_names\n"
              "from ..text import fixed as strings\n"
              "from .. import errors\n"
              "from .tree import _own\n"
              "import xr_zstrings.codecs.v3 as v3\n"
              "def f(p):\n"
              "    return strings._index, strings.decode_utf32, _own, v3._helper, p._anything\n")
    assert crossings(source, ["read", "probe"]) == [
        "from ..write.plan import _Array", "strings._index", "v3._helper"]
    assert crossings("from .plan import _Array\n", ["write", "append"]) == []
    assert crossings("from .read.tree import _resolve_dims\n", ["cli"]) == ["from .read.tree import _resolve_dims"]


LONG = 80


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_long_functions_say_why(path: Path) -> None:
    """No function over ~80 lines without a reason ("Long because ...") in its docstring."""
    unexplained = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines, line {node.lineno})"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > LONG
        and "Long because" not in " ".join((ast.get_docstring(node) or "").split())
    ]
    assert unexplained == [], f"{path.name}: split these or say why they are long: {unexplained}"


def private_parameters(source: str) -> list[str]:
    """Public functions and methods (and dunders such as ``__init__``) taking ``_private`` parameters."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _private(node.name):
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *[p for p in (a.vararg, a.kwarg) if p]]
            found += [f"{node.name}({p.arg})" for p in params if p.arg.startswith("_") and p.arg != "_"]
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_no_private_parameters_on_public_functions(path: Path) -> None:
    """A public function's keywords are public API: an internal switch gets a public name (and a
    docstring line) or moves to a private helper (issue 28)."""
    found = private_parameters(path.read_text(encoding="utf-8"))
    assert found == [], f"{path.name}: give these parameters a public name or a private function: {found}"


def test_the_parameter_check_sees_one() -> None:
    source = ("def decode(raw, *, _ctx=None): ...\n"
              "def _helper(_ok): ...\n"
              "class A:\n    def __init__(self, _x): ...\n    def _private(self, _fine): ...\n")
    assert private_parameters(source) == ["decode(_ctx)", "__init__(_x)"]


def _imports_within(folder: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same folder it imports (at module level or in a function)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(folder.glob("*.py")):
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.level == 1:
                    found.add(node.module.split(".")[0])
                elif node.level == 2 and node.module.startswith(f"{folder.name}."):
                    found.add(node.module.split(".")[1])
        graph[path.stem] = found & {p.stem for p in folder.glob("*.py")}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    def walk(node: str, path: list[str]) -> list[str] | None:
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                return [*path[path.index(nxt):], nxt]
            found = walk(nxt, [*path, nxt])
            if found:
                return found
        return None

    return next((c for n in sorted(graph) if (c := walk(n, [n]))), None)


def test_no_import_circle_in_io() -> None:
    """io/ imports flow one way (a reader's half, ``consolidated``, below the commit protocol): a
    circle (``commit`` -> ``zstore`` -> ``commit`` was one) makes import order matter."""
    assert _cycle(_imports_within(PACKAGE / "io")) is None


def test_the_circle_check_sees_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_the_writers_never_import_the_accessor() -> None:
    """``ds.zstrings`` sits on top of the writers (the accessor calls them): registered by the
    backend and the package's public names, never imported back from write/."""
    back = {p.name for p in (PACKAGE / "write").glob("*.py")
            for node in ast.walk(ast.parse(p.read_text()))
            if isinstance(node, ast.ImportFrom) and ("accessor" in (node.module or "")
                                                     or any(a.name == "accessor" for a in node.names))}
    assert not back


def _complexity_gate() -> Any:
    """.ci/complexity.py, the lint step's complexity gate, as a module (it needs radon only to run)."""
    spec = importlib.util.spec_from_file_location("ci_complexity", ROOT / ".ci" / "complexity.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_lint_step_gates_complexity() -> None:
    """CI's lint step runs the complexity gate, with radon pinned in the lint extra it installs."""
    run = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    lint_body = run[run.index("run_lint() {") : run.index("\n}\n", run.index("run_lint() {"))]
    assert "python .ci/complexity.py || rc=1" in lint_body
    assert 'install --upgrade --upgrade-strategy eager -e ".[test,lint]"' in run  # (the py312 job, which runs it)
    lint = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]["lint"]
    assert any(r.startswith("radon==") for r in lint)
    gate = _complexity_gate()
    assert gate.LIMIT == 20 and gate.BUDGET <= 10  # (issue 38's target: at most 10 over 20)


def test_the_complexity_gate_lists_the_functions_and_the_fix() -> None:
    """Over its budget the gate fails naming each function, the command that lists them and the fix."""
    gate = _complexity_gate()
    radon_json = {  # as `radon cc -j` writes it
        "xr_zstrings/a.py": [
            {"type": "function", "name": "tangled", "lineno": 12, "complexity": 31, "rank": "E"},
            {"type": "function", "name": "fine", "lineno": 40, "complexity": 20, "rank": "C"},
        ],
        "xr_zstrings/b.py": [
            {"type": "method", "classname": "Reader", "name": "read", "lineno": 7, "complexity": 21, "rank": "D"},
        ],
    }
    found = gate.over_limit(radon_json)
    assert found == ["xr_zstrings/a.py:12 tangled (31)", "xr_zstrings/b.py:7 Reader.read (21)"]
    assert gate.verdict(found, budget=2)[0]
    ok, text = gate.verdict(found, budget=1)
    assert not ok
    assert "xr_zstrings/a.py:12 tangled (31)" in text and "xr_zstrings/b.py:7 Reader.read (21)" in text
    assert "python -m radon cc -n D -s xr_zstrings" in text and "split" in text and "by job" in text


def imported_modules(source: str) -> set[str]:
    """Every absolute module an ``import``/``from`` names anywhere in ``source`` (functions and
    ``TYPE_CHECKING`` blocks included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
    return found


def test_codecs_import_no_xarray() -> None:
    """codecs/ is chunk pipelines and codec vocabularies (issue 38): the translation of a
    Dataset's encodings lives with the writers (write/encoding.py), so no module there imports xarray."""
    found = {p.name: sorted(m for m in imported_modules(p.read_text(encoding="utf-8"))
                            if m.split(".")[0] == "xarray")
             for p in sorted((PACKAGE / "codecs").glob("*.py"))}
    assert {k: v for k, v in found.items() if v} == {}
    assert imported_modules("if TYPE_CHECKING:\n    import xarray as xr\ndef f():\n    from xarray.core import x\n"
                            "from . import y\n") == {"xarray", "xarray.core"}
