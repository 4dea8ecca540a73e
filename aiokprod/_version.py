"""The one place the version is written; pyproject.toml reads it (setuptools dynamic version).

A module of its own, importing nothing, so that any module can name the version (the
connection sends it in ApiVersions, KIP-511) without importing the package root.
"""

__version__ = "0.1.0"
