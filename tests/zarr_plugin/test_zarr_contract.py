"""The plugin's data types against zarr-python's own contract (issue 41): zarr's ``BaseTestZDType``
subclassed for :class:`NCChar` and :class:`ZarrsOptional` as zarr does for its types, the registry's
terms for JSON that is not ours, the defaults of ``create_array``, NC_CHAR's Zarr v2 fill value as each
writer writes it, and zarr-python's lazy data-type loading that its own dtype conftest trips over.

Documented differences from zarr's own types (docs/format-notes.md, "The zarr-python plugin and zarr's
contract"): ``valid_dtype`` is empty for both (``from_native_dtype`` declines every numpy dtype, so that
``S1`` stays zarr's NullTerminatedBytes and ``object`` stays ambiguous), and ZarrsOptional has no Zarr v2
form (``valid_json_v2`` empty).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any, ClassVar

import netCDF4
import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.dtype import ZDType, data_type_registry
from zarr.storage import LocalStore
from zdtype_contract import BaseTestZDType, pytest_generate_tests

import xr_zstrings.zarr_plugin as zp  # registers the plugin (zarr 3.1.x never loads data-type entry points)
from xr_zstrings.zarr_plugin.dtypes import DataTypeValidationError

__all__ = ["pytest_generate_tests"]  # zarr's class-attribute parametrisation, used by the classes below

ZARR_VERSION = tuple(int(x) for x in version("zarr").split(".")[:2])
NC_CHAR_V2 = {"name": ">S1", "object_codec_id": None}


def _optional(inner: str, cfg: dict | None = None, name: str = "zarrs.optional") -> dict:
    return {"name": name, "configuration": {"name": inner, "configuration": cfg or {}}}


class TestNCChar(BaseTestZDType):
    test_cls = zp.NCChar
    scalar_type = np.bytes_
    valid_dtype = ()  # documented difference: never inferred from numpy's S1 (zarr's NullTerminatedBytes)
    invalid_dtype = (np.dtype(np.int8), np.dtype("U1"), np.dtype(np.float64))
    valid_json_v2 = (NC_CHAR_V2,)
    invalid_json_v2 = ({"name": "|S1", "object_codec_id": None}, {"name": ">S2", "object_codec_id": None},
                       {"name": ">S1", "object_codec_id": "vlen-bytes"})
    valid_json_v3 = ("xr_zstrings.nc_char",)
    invalid_json_v3 = ("nc_char", {"name": "xr_zstrings.nc_char", "configuration": {"length_bytes": 1}})
    scalar_v2_params = ((zp.NCChar(), "x"), (zp.NCChar(), ""))
    scalar_v3_params = ((zp.NCChar(), "x"), (zp.NCChar(), "\u00e9"), (zp.NCChar(), ""))
    cast_value_params = ((zp.NCChar(), "x", np.bytes_(b"x")), (zp.NCChar(), b"", np.bytes_(b"")))
    invalid_scalar_params = ((zp.NCChar(), 1.0), (zp.NCChar(), "xy"))
    item_size_params = (zp.NCChar(),)


class TestZarrsOptional(BaseTestZDType):
    test_cls = zp.ZarrsOptional
    scalar_type = object
    valid_dtype = ()  # documented difference: numpy's object dtype names no Zarr data type
    invalid_dtype = (np.dtype(np.int8), np.dtype("S1"), np.dtype("U3"))
    valid_json_v2 = ()  # zarrs' optional is a Zarr v3 data type
    invalid_json_v2 = ({"name": "|O", "object_codec_id": "vlen-utf8"},
                       {"name": "zarrs.optional", "object_codec_id": None})
    valid_json_v3 = (_optional("string"), _optional("bytes", name="optional"))
    invalid_json_v3 = ("zarrs.optional", _optional("int32"), _optional("string", {"x": 1}), "optional")
    scalar_v3_params = ((zp.ZarrsOptional(), None), (zp.ZarrsOptional(), ["a"]),
                        (zp.ZarrsOptional(inner="bytes"), ["eA=="]))
    cast_value_params = ((zp.ZarrsOptional(), "a", "a"), (zp.ZarrsOptional(inner="bytes"), b"x", b"x"),
                         (zp.ZarrsOptional(), None, np.nan))
    invalid_scalar_params = ((zp.ZarrsOptional(), 1), (zp.ZarrsOptional(inner="bytes"), "a"))
    item_size_params = (zp.ZarrsOptional(),)

    def scalar_equals(self, scalar1: object, scalar2: object) -> bool:
        return scalar1 == scalar2 or (zp.dtypes.is_missing(scalar1) and zp.dtypes.is_missing(scalar2))

    def test_no_zarr_v2_form(self) -> None:
        """Refused in the registry's terms (zarr-python's property tests draw each data type for v2)."""
        with pytest.raises(DataTypeValidationError, match="zarr_format=3"):
            zp.ZarrsOptional().to_json(zarr_format=2)

    def test_default_fill_value_is_numpys_nan(self) -> None:
        assert zp.ZarrsOptional().default_scalar() is np.nan  # noqa: PLW0177 - the object, not its value


@dataclass(frozen=True, kw_only=True)
class _IntOptional(ZDType[np.dtypes.Int32DType, np.int32]):
    """Another plugin's data type: zarrs' optional over int32 (as a type registered after ours)."""

    dtype_cls = np.dtypes.Int32DType
    _zarr_v3_name: ClassVar[str] = "test.optional_int32"

    @classmethod
    def from_native_dtype(cls, dtype: Any) -> Any:
        raise DataTypeValidationError("never inferred")

    def to_native_dtype(self) -> Any:
        return np.dtype("int32")

    @classmethod
    def _from_json_v2(cls, data: Any) -> Any:
        raise DataTypeValidationError("v3 only")

    @classmethod
    def _from_json_v3(cls, data: Any) -> Any:
        if data == _optional("int32", name="optional"):
            return cls()
        raise DataTypeValidationError(f"not {data!r}")

    def to_json(self, zarr_format: Any) -> Any:
        return _optional("int32", name="optional")

    def _check_scalar(self, data: object) -> bool:
        return True

    def cast_scalar(self, data: object) -> Any:
        return np.int32(data)  # type: ignore[call-overload]

    def default_scalar(self) -> Any:
        return np.int32(0)

    def from_json_scalar(self, data: Any, *, zarr_format: Any) -> Any:
        return np.int32(data)

    def to_json_scalar(self, data: object, *, zarr_format: Any) -> Any:
        return int(data)  # type: ignore[call-overload]


#: the codec of zarrs' own optional string array (tests/golden_chunks)
_ZARRS_OPTIONAL_CODEC = json.loads((Path(__file__).resolve().parents[1] / "golden_chunks" / "zarrs_optional" /
                                    "optional.zarr" / "string_packbits_vlenutf8" / "zarr.json").read_text())["codecs"][0]


@pytest.mark.parametrize("data", ["zarrs.optional", _optional("int32", name="optional"),
                                  _optional("string", {"length": 3})], ids=["bare", "int32", "inner-config"])
def test_json_not_ours_is_no_zarr_data_type(data):
    """zarr's registry moves on after DataTypeValidationError only: JSON that is not ours ends in its
    "No Zarr data type found", not in our message."""
    with pytest.raises(ValueError, match="No Zarr data type found"):
        data_type_registry.match_json(data, zarr_format=3)


def test_a_data_type_registered_after_ours_is_tried():
    data_type_registry.register(_IntOptional._zarr_v3_name, _IntOptional)
    try:
        found = data_type_registry.match_json(_optional("int32", name="optional"), zarr_format=3)
    finally:
        data_type_registry.unregister(_IntOptional._zarr_v3_name)
    assert isinstance(found, _IntOptional)


def test_create_array_without_serializer_refuses_before_writing_metadata(tmp_path):
    """zarr's default serializer (``bytes``) cannot encode objects: refused at creation, nothing written."""
    with pytest.raises(ValueError, match="zarrs.optional"):
        zarr.create_array(LocalStore(tmp_path / "a.zarr"), shape=(2,), dtype=zp.ZarrsOptional())
    assert not list(tmp_path.rglob("zarr.json"))
    a = zarr.create_array(LocalStore(tmp_path / "b.zarr"), shape=(2,), dtype=zp.ZarrsOptional(),
                          serializer=zp.ZarrsOptionalCodec.from_dict(_ZARRS_OPTIONAL_CODEC), compressors=None)
    a[:] = np.array(["a", None], dtype=object)
    got = list(a[:])
    assert got[0] == "a" and zp.dtypes.is_missing(got[1])




# -- NC_CHAR's Zarr v2 fill value, written by netCDF4 (plain text) and by zarr-python (base64, 0) ----------

def _netcdf4_store(path: Path) -> Path:
    ds = netCDF4.Dataset(f"file://{path}#mode=nczarr,file", "w")
    ds.createDimension("n", 3)
    v = ds.createVariable("c", "S1", ("n",), fill_value=b"x")
    v[0] = b"a"
    ds.close()
    return path


def _zarr_python_store(path: Path, fill: Any) -> Path:
    """zarr-python's v2 ``S1`` with fill b"x" (base64 "eA==" in .zarray), or fill 0, spelled ``>S1``
    as other v2 writers spell it (zarr-python writes ``|S1``, which stays zarr's own type)."""
    g = zarr.open_group(LocalStore(path), mode="w", zarr_format=2)
    a = g.create_array("c", shape=(3,), dtype="S1", fill_value=b"x" if fill == "eA==" else b"",
                       compressors=None, dimension_names=None)
    a[:1] = np.array([b"a"])
    meta_path = path / "c" / ".zarray"
    meta = json.loads(meta_path.read_text())
    assert meta["fill_value"] == ("eA==" if fill == "eA==" else "")
    meta.update(dtype=">S1", fill_value=fill)
    meta_path.write_text(json.dumps(meta))
    (path / "c" / ".zattrs").write_text(json.dumps({"_ARRAY_DIMENSIONS": ["n"]}))
    zarr.consolidate_metadata(LocalStore(path))
    return path


WRITERS = {"netCDF4": (_netcdf4_store, b"x"), "zarr-python-base64": (lambda p: _zarr_python_store(p, "eA=="), b"x"),
           "zarr-python-0": (lambda p: _zarr_python_store(p, 0), b"")}


@pytest.mark.parametrize("writer", list(WRITERS))
@pytest.mark.parametrize("reader", ["zstrings", "zarr", "zarr-python"])
def test_nc_char_v2_fill_as_each_writer_writes_it(tmp_path, writer, reader):
    make, fill = WRITERS[writer]
    store = make(tmp_path / "s.zarr")
    if reader == "zarr-python":
        a = zarr.open_array(LocalStore(store), path="c", mode="r")
        values, found = a[:], a.fill_value
    else:
        kw = {"string_dtype": "bytes"} if reader == "zstrings" else {}
        ds = xr.open_dataset(store, engine=reader, mask_and_scale=False, concat_characters=False, **kw)
        values, found = ds["c"].values, ds["c"].attrs.get("_FillValue", ds["c"].encoding.get("_FillValue"))
    assert list(values) == [b"a", fill, fill]
    assert bytes(found).rstrip(b"\0") == fill  # NUL as b"" (numpy's S1) or b"\0" (a netCDF attribute)


# -- zarr-python's lazy data-type loading (upstream; docs/format-notes.md) -----------------------------

_LOOP = """
import numpy as np
from zarr.core.dtype import data_type_registry
for cls in data_type_registry.contents.values():  # as zarr's tests/test_dtype/conftest.py
    data_type_registry.match_dtype(np.dtype("int8"))  # loads the entry points: adds to contents
print("ok")
"""


@pytest.mark.skipif(ZARR_VERSION < (3, 4), reason="zarr < 3.4.1 never loads data-type entry points")
def test_any_data_type_entry_point_breaks_a_loop_over_the_registry(tmp_path):
    """Pins zarr-python's behaviour, not ours: loading ``zarr.data_type`` entry points adds to
    ``data_type_registry.contents`` while a caller iterates it. A package with nothing but one such
    entry point (no xr_zstrings) is enough; zarr's own tests/package_with_entrypoint has one."""
    (tmp_path / "xz_dummy.py").write_text(textwrap.dedent("""
        from zarr.core.dtype.npy.bool import Bool
        class Dummy(Bool):
            _zarr_v3_name = "xz_dummy"
    """))
    dist = tmp_path / "xz_dummy-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: xz_dummy\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[zarr.data_type]\nxz_dummy = xz_dummy:Dummy\n")
    code = "import sys; sys.path.insert(0, sys.argv[1])\n" + _LOOP
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=False)
    assert "dictionary changed size during iteration" in out.stderr
    preload = "import sys; sys.path.insert(0, sys.argv[1])\nfrom zarr.core.dtype import data_type_registry\n" \
              "data_type_registry._lazy_load()  # the fix zarr_suite.py applies to zarr's conftest\n" + _LOOP
    out = subprocess.run([sys.executable, "-c", preload, str(tmp_path)], capture_output=True, text=True, check=False)
    assert out.stdout.strip() == "ok", out.stderr
