"""Build steps that pyproject.toml cannot declare: the Cython hot path and the gRPC stubs.

Every other piece of metadata is in pyproject.toml. The stubs are generated from proto/ on every
build (never committed) into orderer/_proto/. Set EVB_DEBUG=1 at build time to compile in the
core's invariant checks.
"""

import importlib.resources
import os
import re
from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

debug = os.environ.get("EVB_DEBUG", "") not in ("", "0")
HERE = Path(__file__).resolve().parent


def generate_grpc_stubs() -> None:
    """proto/evb/v1/*.proto -> orderer/_proto/evb/v1/*_pb2{,_grpc}.py(i), imports made package-
    relative so that the stubs live inside the orderer package."""
    from grpc_tools import protoc

    proto_root = HERE / "proto"
    out_root = HERE / "orderer" / "_proto"
    include = str(importlib.resources.files("grpc_tools") / "_proto")
    protos = sorted(proto_root.rglob("*.proto"))
    for proto in protos:
        target = out_root / proto.parent.relative_to(proto_root)
        target.mkdir(parents=True, exist_ok=True)
        status = protoc.main([
            "grpc_tools.protoc", f"-I{include}", f"-I{proto_root}",
            f"--python_out={out_root}", f"--pyi_out={out_root}", f"--grpc_python_out={out_root}",
            str(proto),
        ])
        if status != 0:
            raise SystemExit(f"protoc failed on {proto}")
    for directory in [out_root, *(p for p in out_root.rglob("*") if p.is_dir())]:
        (directory / "__init__.py").touch()
    # the stubs and their types only: not the bytecode caches (__pycache__/*_pb2*.pyc) that an
    # earlier build's stubs left where Python writes them
    for generated in [*out_root.rglob("*_pb2*.py"), *out_root.rglob("*_pb2*.pyi")]:
        text = generated.read_text()
        fixed = re.sub(r"^from evb\.", "from orderer._proto.evb.", text, flags=re.M)
        if fixed != text:
            generated.write_text(fixed)


generate_grpc_stubs()

# core.pyx includes the other .pyx parts and uses merge.h: a change to any of them rebuilds it.
CORE = HERE / "orderer" / "_core"
extensions = [
    Extension(
        "orderer._core.core",
        ["orderer/_core/core.pyx"],
        include_dirs=["orderer/_core", numpy.get_include()],
        depends=sorted(
            str(path.relative_to(HERE))
            for pattern in ("*.pyx", "*.pxd", "*.h")
            for path in CORE.glob(pattern)
        ),
        define_macros=[
            ("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION"),
            *([("EVB_DEBUG", "1")] if debug else []),
        ],
        extra_compile_args=["-O3"] if not debug else ["-O0", "-g"],
    )
]

setup(
    ext_modules=cythonize(
        extensions,
        language_level=3,
        compiler_directives={
            "boundscheck": debug,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": debug,
        },
    )
)
