"""Build and import benchmarks/cref.c (the issue's "straightforward C loop" references) with gcc."""
from __future__ import annotations

import importlib.util
import subprocess
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

_mod: Any = None


def load() -> Any:
    global _mod
    if _mod is not None:
        return _mod
    src = Path(__file__).with_name("cref.c")
    out_dir = Path(tempfile.mkdtemp(prefix="zstrings-cref-"))
    so = out_dir / ("cref_ext" + sysconfig.get_config_var("EXT_SUFFIX"))
    cmd = ["gcc", "-O2", "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}",
           f"-I{np.get_include()}", str(src), "-o", str(so)]
    subprocess.run(cmd, check=True, capture_output=True)
    spec = importlib.util.spec_from_file_location("cref_ext", so)
    _mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(_mod)  # type: ignore[union-attr]  # a file location has a loader
    return _mod
