"""Write the built-in sample NCZarr store (xr_zstrings/data/stations.zarr) with the real netcdf-c.

Run with the test extra installed: ``python scripts/make_sample.py``. The store is committed so
that the package can show it without netCDF4; rerun this when the sample should change.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import netCDF4
import numpy as np

OUT = Path(__file__).resolve().parent.parent / "xr_zstrings" / "data" / "stations.zarr"


def main() -> None:
    shutil.rmtree(OUT, ignore_errors=True)
    ds = netCDF4.Dataset(f"file://{OUT}#mode=nczarr,file", "w")
    ds.title = "Weather stations with names (xr_zstrings sample)"
    ds.Conventions = "CF-1.8"
    ds.createDimension("station", 5)
    ds.createDimension("time", None)
    ds.createDimension("code_len", 4)
    name = ds.createVariable("station", str, ("station",))
    name.long_name = "station name"
    name[:] = np.array(["Zürich", "東京", "São Paulo", "Reykjavík", "Oslo"], dtype=object)
    code = ds.createVariable("code", "S1", ("station", "code_len"))
    code.long_name = "ICAO-like code (NC_CHAR)"
    code[:] = np.array([b"ZRH", b"HND", b"GRU", b"RKV", b"OSL"], dtype="S4").view("S1").reshape(5, 4)
    climate = ds.createVariable("climate", str, ("station",))
    climate.setncattr("_nczarr_maxstrlen", 12)
    climate[:] = np.array(["temperate", "humid", "tropical", "subpolar", "temperate"], dtype=object)
    time = ds.createVariable("time", "i4", ("time",))
    time.units = "days since 2026-01-01"
    time[:] = np.arange(4)
    temp = ds.createVariable("temperature", "f4", ("time", "station"), fill_value=-999.0, zlib=True,
                             shuffle=True, chunksizes=(2, 5))
    temp.units = "degC"
    temp[:] = np.array([[1.5, 6.0, 24.1, -2.0, -4.5], [2.0, 7.5, 25.3, -1.0, -3.0],
                        [0.5, 8.1, 23.0, -3.5, -6.0], [-999.0, 9.0, 22.2, -2.5, -5.5]], dtype="f4")
    meta = ds.createGroup("metadata")
    meta.source = "hand-made for the xr_zstrings README"
    country = meta.createVariable("country", str, ("station",))
    country[:] = np.array(["Schweiz", "日本", "Brasil", "Ísland", "Norge"], dtype=object)
    ds.close()
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
