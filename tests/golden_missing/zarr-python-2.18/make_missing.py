#!/usr/bin/env python
"""Write ``missing.zarr`` (a Zarr v2 group) with zarr-python 2.18 and record what it reads back.

Zarr v2 string arrays with each kind of ``fill_value`` and a never-written chunk: zarr-python 2
leaves the unwritten elements of a ``fill_value: null`` object array as ``None`` (missing), which
zarr-python 3 no longer does (it returns ``""``). The stores pin the reading of the library that
defined Zarr v2. Usage (a side venv; see README.md):

    python -m venv .venv-zarr2 && .venv-zarr2/bin/pip install "zarr==2.18.*"
    .venv-zarr2/bin/python make_missing.py .
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numcodecs
import numpy as np
import zarr

# name -> (dtype, object codec, fill_value, the values of the one written chunk)
ARRAYS = {
    "vlen_null": (object, numcodecs.VLenUTF8(), None, ["a", "é"]),
    "vlen_empty": (object, numcodecs.VLenUTF8(), "", ["a", "é"]),
    "vlen_text": (object, numcodecs.VLenUTF8(), "N/A", ["a", "é"]),
    "vlen_bytes_null": (object, numcodecs.VLenBytes(), None, [b"a", b"\xff"]),
    "fixed_S": ("S4", None, b"NA", [b"a", b"bc"]),
    "fixed_U": ("<U4", None, "NA", ["a", "é"]),
}


def _plain(v: object) -> object:
    if isinstance(v, bytes):
        return {"bytes": v.decode("latin-1")}
    if isinstance(v, np.generic):
        return _plain(v.item())
    return v


def main(out: Path) -> None:
    store = out / "missing.zarr"
    shutil.rmtree(store, ignore_errors=True)
    root = zarr.open_group(str(store), mode="w")
    for name, (dtype, codec, fill, values) in ARRAYS.items():
        a = root.create(name, shape=(6,), chunks=(2,), dtype=dtype, object_codec=codec, fill_value=fill)
        a.attrs["_ARRAY_DIMENSIONS"] = ["x"]
        a[0:2] = np.array(values, dtype=dtype)  # chunks 1 and 2 are never written
    expected = {"zarr": zarr.__version__, "numcodecs": numcodecs.__version__, "numpy": np.__version__,
                "python": sys.version.split()[0], "arrays": {}}
    ro = zarr.open_group(str(store), mode="r")
    for name in ARRAYS:
        meta = json.loads((store / name / ".zarray").read_text())
        expected["arrays"][name] = {"dtype": meta["dtype"], "fill_value": meta["fill_value"],
                                    "values": [_plain(v) for v in ro[name][:].tolist()]}
    (out / "missing.expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
