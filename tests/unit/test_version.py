"""The version lives in one place, ``aiokprod/_version.py`` (``aiokprod.__version__`` re-exports
it): the package metadata reads it from there (pyproject ``dynamic``), and the changelog has an
entry for it."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

import aiokprod

# a check of the source tree, the same on every Python and encoder: `make test` runs it once
pytestmark = pytest.mark.static

REPO = Path(__file__).resolve().parents[2]


def test_pyproject_takes_the_version_from_the_package() -> None:
    from setuptools.config.pyprojecttoml import read_configuration

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # setuptools calls [tool.setuptools] "beta"
        raw = read_configuration(REPO / "pyproject.toml", expand=False)
        resolved = read_configuration(REPO / "pyproject.toml", expand=True)
    assert "version" not in raw["project"]
    assert "version" in raw["project"]["dynamic"]
    attr = raw["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "aiokprod._version.__version__"
    assert resolved["project"]["version"] == aiokprod.__version__


def test_the_version_is_a_literal_and_the_changelog_names_it() -> None:
    source = (REPO / "aiokprod/_version.py").read_text(encoding="utf-8")
    assert re.search(r'^__version__ = "\d+\.\d+\.\d+"$', source, flags=re.MULTILINE)
    changelog = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert re.search(rf"^## {re.escape(aiokprod.__version__)}\b", changelog, flags=re.MULTILINE)
