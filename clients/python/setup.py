"""Generates the cairn.v1 stubs from the repository's protos at build time,
into the built package tree (never into the source tree)."""

import pathlib

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent
PROTO = HERE.parents[1] / "proto"


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        from grpc_tools import protoc

        out = pathlib.Path(self.build_lib)
        files = sorted(str(p.relative_to(PROTO)) for p in (PROTO / "cairn").rglob("*.proto"))
        if not files:
            raise SystemExit(f"no protos under {PROTO / 'cairn'}: build from a clone of the repository")
        include = pathlib.Path(protoc.__file__).parent / "_proto"
        rc = protoc.main(
            [
                "protoc",
                f"-I{PROTO}",
                f"-I{include}",
                f"--python_out={out}",
                f"--grpc_python_out={out}",
                f"--pyi_out={out}",
                *files,
            ]
        )
        if rc != 0:
            raise SystemExit("generating the cairn.v1 stubs failed")
        for package in (out / "cairn", out / "cairn" / "v1"):
            (package / "__init__.py").touch()


# The generated `cairn` and `cairn.v1` packages land in build_lib next to
# `cairn_client`, and the wheel takes build_lib whole.
setup(cmdclass={"build_py": BuildWithStubs})
