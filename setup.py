"""Build the optional compiled string kernels (xr_zstrings.text._kernels); metadata is in pyproject.toml.

The kernels need numpy's headers (numpy >= 2.0, for the StringDType C API).  When no C compiler
is available the package still installs and runs on its pure-Python/numpy fallback: the build
prints a warning (pip shows it with -v) and records the error in
xr_zstrings/text/_kernels_build_error.txt, which makes the first use warn too and
``xr_zstrings.show_versions()`` report it.  Set XR_ZSTRINGS_REQUIRE_EXT=1 to make a failed build
an error instead (CI does).
"""

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

BUILD_ERROR_FILE = "_kernels_build_error.txt"


class OptionalBuildExt(build_ext):
    def _marker(self, ext):
        return os.path.join(os.path.dirname(self.get_ext_fullpath(ext.name)), BUILD_ERROR_FILE)

    def _failed(self, e, ext=None):
        if os.environ.get("XR_ZSTRINGS_REQUIRE_EXT"):
            raise e
        msg = f"xr_zstrings.text._kernels not built ({type(e).__name__}: {e}); using the pure-Python fallback"
        print(f"WARNING: {msg}", file=sys.stderr)
        for failed in [ext] if ext is not None else self.extensions:
            marker = self._marker(failed)
            os.makedirs(os.path.dirname(marker), exist_ok=True)
            with open(marker, "w", encoding="utf-8") as f:
                f.write(f"{type(e).__name__}: {e}\n")

    def run(self):
        try:
            super().run()
        except Exception as e:  # noqa: BLE001 - no compiler: fall back to pure Python
            self._failed(e)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as e:  # noqa: BLE001 - a failed build: fall back to pure Python
            self._failed(e, ext)
            return
        marker = self._marker(ext)
        if os.path.exists(marker):  # an earlier failed build (editable install): now built
            os.remove(marker)


def _numpy_include():
    import numpy

    return numpy.get_include()


setup(
    ext_modules=[
        Extension(
            "xr_zstrings.text._kernels",
            sources=["xr_zstrings/text/_kernels.c"],
            include_dirs=[_numpy_include()],
            extra_compile_args=["-O3"] if os.name != "nt" else [],
        )
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
