"""Build the optional compiled string kernels (xr_zstrings._kernels); metadata is in pyproject.toml.

The kernels need numpy's headers (numpy >= 2.0, for the StringDType C API).  When no C compiler
is available the package still installs and runs on its pure-Python/numpy fallback: set
XR_ZSTRINGS_REQUIRE_EXT=1 to make a failed build an error instead.
"""

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    def run(self):
        try:
            super().run()
        except Exception as e:  # no compiler: fall back to pure Python
            if os.environ.get("XR_ZSTRINGS_REQUIRE_EXT"):
                raise
            print(f"WARNING: xr_zstrings._kernels not built ({e}); using the pure-Python fallback")

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as e:
            if os.environ.get("XR_ZSTRINGS_REQUIRE_EXT"):
                raise
            print(f"WARNING: xr_zstrings._kernels not built ({e}); using the pure-Python fallback")


def _numpy_include():
    import numpy

    return numpy.get_include()


setup(
    ext_modules=[
        Extension(
            "xr_zstrings._kernels",
            sources=["xr_zstrings/_kernels.c"],
            include_dirs=[_numpy_include()],
            extra_compile_args=["-O3"] if os.name != "nt" else [],
        )
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
