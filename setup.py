"""Builds the optional native extension (aiokprod/_native/_speedups.pyx and the .pxi files it
includes); metadata is in pyproject.toml. Without Cython or a C compiler the install goes on in
pure Python, with one warning: the package behaves the same either way
(``aiokprod._native.NATIVE`` tells which)."""

from __future__ import annotations

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

_SOURCE = "aiokprod/_native/_speedups.pyx"


def _warn(text: str) -> None:
    sys.stderr.write(text + "\n")


_WARNING = ("aiokprod: the native extension was not built ({}); installing the pure-Python "
            "path, which works the same but spends more CPU per record")


class OptionalBuildExt(build_ext):
    """A failed compile leaves the pure-Python install; it warns once, it never fails it."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, a broken toolchain
            _warn(_WARNING.format(exc))

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            _warn(_WARNING.format(exc))


def _extensions() -> list[Extension]:
    try:
        from Cython.Build import cythonize
    except ImportError:
        _warn(_WARNING.format("Cython is not installed"))
        return []
    return cythonize(
        [Extension("aiokprod._native._speedups", [_SOURCE], extra_compile_args=["-O2"])],
        compiler_directives={"language_level": "3"}, quiet=True)


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
