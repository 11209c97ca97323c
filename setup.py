"""Build the Cython hot path of the orderer.

Only the extension modules live here; every other piece of metadata is in pyproject.toml.
Set EVB_DEBUG=1 at build time to compile in the core's invariant checks.
"""

import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

debug = os.environ.get("EVB_DEBUG", "") not in ("", "0")

extensions = [
    Extension(
        "orderer._core.core",
        ["orderer/_core/core.pyx"],
        include_dirs=[numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=["-O3"] if not debug else ["-O0", "-g"],
    )
]

setup(
    ext_modules=cythonize(
        extensions,
        language_level=3,
        compile_time_env={"EVB_DEBUG": debug},
        compiler_directives={
            "boundscheck": debug,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": debug,
        },
    )
)
