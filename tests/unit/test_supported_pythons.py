"""Every Python we claim is one `make test` runs: the trove classifiers, the wheels cibuildwheel
builds, `requires-python`, the lint and type-check targets and the Makefile's
``SUPPORTED_PYTHONS`` name the same versions. And the helper that finds each interpreter finds
the right one, or says plainly that there is none."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# a check of the source tree, the same on every Python and encoder: `make test` runs it once
pytestmark = pytest.mark.static

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest depends on tomli before 3.11
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
FIND_PYTHON = REPO / "tools/find_python.sh"


@pytest.fixture(scope="module")
def pyproject() -> dict[str, Any]:
    with (REPO / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)


def makefile_pythons() -> list[str]:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    match = re.search(r"^SUPPORTED_PYTHONS := (.+)$", makefile, flags=re.MULTILINE)
    assert match, "SUPPORTED_PYTHONS is not set in the Makefile"
    return match.group(1).split()


def as_tuple(version: str) -> tuple[int, int]:
    major, minor = version.split(".")
    return int(major), int(minor)


def test_the_classifiers_the_wheels_and_the_makefile_name_the_same_pythons(
    pyproject: dict[str, Any],
) -> None:
    tested = makefile_pythons()
    assert tested == sorted(tested, key=as_tuple)
    classified = [c.rsplit(" :: ", 1)[1] for c in pyproject["project"]["classifiers"]
                  if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    assert classified == tested
    wheels = pyproject["tool"]["cibuildwheel"]["build"].split()
    assert wheels == [f"cp{v.replace('.', '')}-*" for v in tested]


def test_the_oldest_supported_python_is_the_floor_everywhere(pyproject: dict[str, Any]) -> None:
    oldest = makefile_pythons()[0]
    assert pyproject["project"]["requires-python"] == f">={oldest}"
    assert pyproject["tool"]["mypy"]["python_version"] == oldest
    assert pyproject["tool"]["ruff"]["target-version"] == f"py{oldest.replace('.', '')}"


def test_the_license_is_an_spdx_expression_with_its_text_shipped(
    pyproject: dict[str, Any],
) -> None:
    project = pyproject["project"]
    assert project["license"] == "Apache-2.0"
    assert not any(c.startswith("License ::") for c in project["classifiers"])
    for name in project["license-files"]:
        assert "Apache License" in (REPO / name).read_text(encoding="utf-8")


def test_the_docs_toolchain_is_pinned(pyproject: dict[str, Any]) -> None:
    """Left free, the resolver picks a different set per Python, and not every set fits."""
    pins = {re.split(r"[\[=<>~!]", r, maxsplit=1)[0].lower(): r
            for r in pyproject["project"]["optional-dependencies"]["test"]}
    for name in ("mkdocs", "mkdocs-material", "mkdocstrings", "mkdocstrings-python",
                 "mkdocs-autorefs", "griffelib", "pymdown-extensions", "markdown"):
        assert re.search(r"==\d", pins[name]), pins.get(name)


def find_python(argument: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(FIND_PYTHON), argument], capture_output=True, text=True,
                          timeout=60, check=False)


def test_find_python_finds_this_interpreters_version() -> None:
    version = "{}.{}".format(*sys.version_info[:2])
    result = find_python(version)
    assert result.returncode == 0, result.stderr
    found = result.stdout.strip()
    reported = subprocess.run(
        [found, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    assert reported == version
    assert find_python(f"python{version}").stdout == result.stdout


def test_find_python_fails_with_one_line_for_a_python_that_is_not_there() -> None:
    result = find_python("3.99")
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert "3.99" in result.stderr
