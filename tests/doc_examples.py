"""Docs that run: every Python and ``zstrings`` example of README.md and docs/*.md, executed in
order, per file, in a temporary directory, with the printed outputs compared where the docs show
them (``tests/test_docs.py`` runs each file; ``python tests/doc_examples.py FILE.md`` runs one by
hand and prints each step).

What runs (fenced code blocks, in the order of the page, one Python namespace per page):

* ```` ```python ```` blocks: executed as they are. Use relative paths (the page runs in an empty
  temporary directory); a later block sees the names an earlier one made.
* ```` ```bash ```` / ```` ```console ```` / ```` ```shell ```` blocks: every command must be a
  ``zstrings`` command (else mark the block ``skip``). Each runs in-process (``xr_zstrings.cli.main``)
  and must not end in a usage error (exit code 2) unless the docs show that error.
* ```` ```text ```` blocks holding ``$ zstrings ...`` lines: each command runs, and the lines under
  it up to the next ``$`` line are its expected output (stdout, then stderr). ``text`` blocks without
  a ``$ zstrings`` line are plain text and do not run.
* Expected output is compared line by line (trailing spaces ignored); a line of only ``...`` stands
  for any number of lines.

Directives, as HTML comments (invisible on GitHub and in the Sphinx build) placed before a block:

* ``<!-- docs-test: skip: REASON -->``: the next block does not run. A reason is required (why it
  cannot run here: it installs packages, needs a real cluster, ...).
* ``<!-- docs-test: setup`` ... ``-->``: hidden Python run at this point, for inputs the page uses
  but does not show how to make (``obs.zarr`` with a group, a copy of the sample store, ...).
* ``<!-- docs-test: output -->``: the next ```` ```text ```` block is what the Python block before it
  prints (its stdout), compared as above.
* ``<!-- docs-test: s3 -->``: the page uses object storage. The tests' moto server
  (tests/s3_server.py) is started, the ``AWS_*`` environment points at it, setup blocks get it as
  ``s3`` (to create buckets and upload stores), and ``{s3}`` in a ``replace`` is its endpoint.
* ``<!-- docs-test: replace "TEXT" "WITH" -->``: every later block of the page runs with TEXT
  replaced (an example's real-looking endpoint by the test server's).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: the pages whose examples run
PAGES = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]

_DIRECTIVE = re.compile(r"<!--\s*docs-test:\s*(?P<name>[\w-]+)(?P<rest>.*?)-->", re.DOTALL)
_SHELL = ("bash", "sh", "shell", "console")


class DocExampleError(AssertionError):
    """An example that fails, or a page that breaks the conventions above: names the page and line."""


@dataclass
class Step:
    """One thing to run: Python code (``python``, ``setup``) or one ``zstrings`` command."""

    kind: str  # "python", "setup" or "zstrings"
    line: int  # 1-based line of the block in the page
    code: str  # Python source, or the command line
    expected: str | None = None  # output shown in the docs (None: not compared)


@dataclass
class Page:
    path: Path
    steps: list[Step] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (line, reason)
    replacements: list[tuple[int, str, str]] = field(default_factory=list)  # (from line, old, new)
    s3: bool = False


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line}"


def parse(path: Path) -> Page:
    """The steps of one page, in order (see the module docstring for the conventions)."""
    from markdown_it import MarkdownIt

    page = Page(path)
    tokens = MarkdownIt("commonmark").parse(path.read_text(encoding="utf-8"))
    pending: str | None = None  # the directive waiting for the next block: "skip" or "output"
    last_python: Step | None = None
    for tok in tokens:
        line = (tok.map[0] + 1) if tok.map else 0
        if tok.type == "html_block":
            for m in _DIRECTIVE.finditer(tok.content):
                name, rest = m["name"], m["rest"].strip()
                if name == "skip":
                    reason = rest.lstrip(":").strip()
                    if not reason:
                        raise DocExampleError(f"{_where(path, line)}: 'docs-test: skip' needs a reason: "
                                              "<!-- docs-test: skip: why it cannot run here -->")
                    pending = f"skip:{reason}"
                elif name == "output":
                    pending = "output"
                elif name == "setup":
                    page.steps.append(Step("setup", line, rest))
                elif name == "s3":
                    page.s3 = True
                elif name == "replace":
                    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', rest)
                    if len(parts) != 2:
                        raise DocExampleError(f'{_where(path, line)}: expected <!-- docs-test: replace "TEXT" "WITH" -->')
                    page.replacements.append((line, parts[0], parts[1]))
                else:
                    raise DocExampleError(f"{_where(path, line)}: unknown directive 'docs-test: {name}' "
                                          "(skip, setup, output, s3, replace: see tests/doc_examples.py)")
            continue
        if tok.type != "fence":
            continue
        lang = tok.info.split()[0].lower() if tok.info.strip() else ""
        if pending and pending.startswith("skip:"):
            page.skipped.append((line, pending[5:]))
            pending = None
            continue
        if pending == "output":
            if lang != "text" or last_python is None:
                raise DocExampleError(f"{_where(path, line)}: 'docs-test: output' must precede a ```text block "
                                      "that follows a ```python block")
            last_python.expected = tok.content
            pending = None
            continue
        if lang == "python":
            last_python = Step("python", line, tok.content)
            page.steps.append(last_python)
        elif lang in _SHELL or (lang == "text" and re.search(r"(?m)^\$ zstrings\b", tok.content)):
            page.steps += _commands(tok.content, path, line, console=lang == "text" or "$ " in tok.content)
    return page


def _commands(text: str, path: Path, line: int, *, console: bool) -> list[Step]:
    """The ``zstrings`` commands of a shell or console block, each with the output shown under it."""
    steps: list[Step] = []
    for i, raw in enumerate(text.splitlines()):
        cmd = raw[2:] if console and raw.startswith("$ ") else (None if console else raw)
        if cmd is None:  # an output line of the command above
            if steps:
                steps[-1].expected = (steps[-1].expected or "") + raw + "\n"
            continue
        words = shlex.split(cmd, comments=True)
        if not words:
            continue
        if words[0] != "zstrings":
            raise DocExampleError(
                f"{_where(path, line + i + 1)}: {cmd.strip()!r} is not a zstrings command, so the docs tests "
                "cannot run it: mark the block with <!-- docs-test: skip: REASON --> above it")
        steps.append(Step("zstrings", line + i + 1, cmd.strip(), "" if console else None))
    return steps


def matches(expected: str, got: str) -> bool:
    """``got`` is ``expected`` line by line (trailing spaces and blank lines at the end ignored); a
    line of only ``...`` matches any number of lines."""
    def lines(s: str) -> list[str]:
        out = [x.rstrip() for x in s.splitlines()]
        while out and not out[-1]:
            out.pop()
        return out

    pattern = "".join(r"(?:[^\n]*\n)*?" if x.strip() == "..." else re.escape(x) + r"\n" for x in lines(expected))
    return re.fullmatch(pattern, "".join(x + "\n" for x in lines(got))) is not None


def s3_environment(s3: Any) -> dict[str, str]:
    """The ``AWS_*`` variables a page that uses object storage runs with: the test server's."""
    from s3_server import KEY, REGION, SECRET

    return {"AWS_ENDPOINT_URL": s3.endpoint, "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_REGION": REGION}


def run(page: Page, workdir: Path, s3: Any = None, *, verbose: bool = False) -> dict[str, Any]:
    """Run every step of ``page`` in ``workdir`` (the caller's working directory must be it);
    returns the page's namespace. ``s3``: the S3 server for pages that use it."""
    from xr_zstrings.cli import main

    ns: dict[str, Any] = {"__name__": "__docs__"}
    if page.s3:
        ns["s3"] = s3
    for step in page.steps:
        code = step.code
        for line, old, new in page.replacements:
            if line < step.line:
                code = code.replace(old, new.replace("{s3}", getattr(s3, "endpoint", "{s3}")))
        where = _where(page.path, step.line)
        if verbose:
            print(f"--- {where} ({step.kind})\n{code}", file=sys.__stderr__)
        out = io.StringIO()
        if step.kind == "zstrings":
            err = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                exit_code = main(shlex.split(code, comments=True)[1:])
            got = out.getvalue() + err.getvalue()
            shown_error = step.expected is not None and "zstrings: error:" in step.expected
            if exit_code == 2 and not shown_error:
                raise DocExampleError(f"{where}: `{code}` failed (exit 2):\n{got}")
        else:
            try:
                with contextlib.redirect_stdout(out):
                    exec(compile(code, where, "exec"), ns)  # noqa: S102 - our own docs
            except Exception as e:  # reported with the page and line
                tb = "".join(traceback.format_exception(e))
                raise DocExampleError(f"{where}: this {step.kind} block raised {type(e).__name__}:\n{tb}") from None
            got = out.getvalue()
        if step.expected is not None and not matches(step.expected, got):
            raise DocExampleError(f"{where}: the output differs from what the docs show.\n--- docs:\n"
                                  f"{step.expected}--- got:\n{got}")
    return ns


if __name__ == "__main__":  # python tests/doc_examples.py docs/writing.md: run one page here, verbosely
    import tempfile

    for name in sys.argv[1:] or PAGES:
        page = parse(ROOT / name)
        with tempfile.TemporaryDirectory() as tmp:
            os.chdir(tmp)
            s3 = None
            if page.s3:
                sys.path.insert(0, str(ROOT / "tests"))
                from s3_server import start_server

                s3 = start_server()
                os.environ.update(s3_environment(s3))
            run(page, Path(tmp), s3, verbose=True)
        print(f"{name}: {len(page.steps)} step(s) ran, {len(page.skipped)} block(s) skipped", file=sys.stderr)
