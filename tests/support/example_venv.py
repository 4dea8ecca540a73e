"""Clean virtual environments holding only what an example's docstring says to install.

An example that imports something only the ``test`` extra brings runs fine in the development
venv and fails for every user who follows its instructions. So each example names its install
in its docstring (``Needs `pip install 'aiokprod[fastapi,prometheus]' uvicorn```), and the
example tests run it with a Python that has exactly that and nothing else.

Cost. Building a venv (pyspark alone ~500 MB) takes seconds to a minute, so the venvs are
cached across runs under ``~/.cache/aiokprod/example-venvs`` (``$AIOKPROD_EXAMPLES_CACHE`` or
``$XDG_CACHE_HOME`` move it), keyed on ``pyproject.toml`` (the extras), the install line and
the interpreter: a change of any of them builds a new one. A cached venv holds the
dependencies only; aiokprod itself comes from a wheel of the work tree (built once per source
content, also cached) installed with ``--target`` into the test's own directory and put on
``PYTHONPATH``. So the code under test is always the work tree's, as the wheel packages it, and
two work trees sharing a venv never see each other's code. An exclusive ``flock`` serialises
building; a ``.complete`` marker written last means an interrupted build starts over.

The venv is made by the interpreter's own ``venv`` module, as a user's is, and filled by uv
(the ``test`` extra has it): the same resolution as ``pip install``, from the cache ``make``
filled for ``.venv`` when that holds everything (pyspark's wheel, which PyPI has only as
source, is built once), else from the package index.
"""

from __future__ import annotations

import ast
import fcntl
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["ROOT", "CleanPython", "example_install", "examples_cache_dir", "prepare",
           "wheel_sources"]

ROOT = Path(__file__).resolve().parents[2]
CACHE_ENV = "AIOKPROD_EXAMPLES_CACHE"
_MARKER = ".complete"
_INSTALL = re.compile(r"pip install ([^`\n]+)")
# venvs unused for this long are removed when another is built (they are only a cache)
_STALE_S = 3 * 24 * 3600


def examples_cache_dir() -> Path:
    root = os.environ.get(CACHE_ENV)
    if root:
        return Path(root).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "aiokprod" / "example-venvs"


def example_install(example: Path) -> list[str]:
    """The arguments of the one ``pip install`` its docstring names (e.g.
    ``["aiokprod[spark]"]``); AssertionError if it names none, several, or not aiokprod."""
    doc = ast.get_docstring(ast.parse(example.read_text(encoding="utf-8"))) or ""
    found = _INSTALL.findall(doc)
    assert len(found) == 1, (f"{example.name}: its docstring must name exactly one "
                             f"`pip install ...` (what a user installs to run it), found {found}")
    args = shlex.split(found[0])
    assert any(re.fullmatch(r"aiokprod(\[[a-z0-9,_-]+\])?", a) for a in args), \
        f"{example.name}: `pip install {found[0]}` does not install aiokprod"
    return args


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:16]


def _uv() -> str:
    """The uv beside the running interpreter (the development venv's), else on ``PATH``."""
    beside = Path(sys.executable).parent / "uv"
    found = str(beside) if beside.is_file() else shutil.which("uv")
    assert found is not None, ("the example tests install their venvs with uv, which the "
                               "`test` extra brings: `pip install uv`")
    return found


def _run(argv: list[str], what: str, timeout: float) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:  # run() killed and reaped it
        raise AssertionError(f"{what} did not finish within {timeout:.0f}s: {argv}") from None
    if done.returncode != 0:
        raise AssertionError(f"{what} failed (exit {done.returncode}): {argv}\n"
                             f"{(done.stdout + done.stderr)[-4000:]}")


# What a wheel of the work tree is built from: the build's own files and the package's sources,
# the native extension's included .pxi files and its .pyi among them. The same list keys the
# wheel's cache and is what the build sees, so a wheel cannot be reused for sources it was not
# built from.
_BUILD_FILES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE")
_PACKAGE_SUFFIXES = (".py", ".pyi", ".pyx", ".pxi", ".pxd", ".typed")


def wheel_sources() -> list[Path]:
    files = [ROOT / name for name in _BUILD_FILES]
    files += sorted(p for p in (ROOT / "aiokprod").rglob("*")
                    if p.is_file() and p.suffix in _PACKAGE_SUFFIXES)
    return files


def _wheel(cache: Path) -> Path:
    """A wheel of the work tree, built once per content of its sources (9 s on a quiet
    machine, most of it compiling the native extension).

    It is built from a copy of those sources, not in the work tree: a build writes into the
    tree it runs in (Cython's generated C beside the .pyx, ``aiokprod.egg-info``), and while the
    example tests run, `make test` builds the other Pythons' venvs in the work tree. A build
    with a new build environment generates the C again, so the two could write and compile the
    same file at once. The copy is written from the bytes the key was taken from, so the wheel
    is of exactly the sources its key names, even if the tree changes meanwhile."""
    sources = [(path.relative_to(ROOT), path.read_bytes()) for path in wheel_sources()]
    key = _digest(*(str(relative).encode() + b"\0" + data for relative, data in sources))
    directory = cache / "wheels" / key
    with _locked(cache / "wheels"):
        wheels = sorted(directory.glob("aiokprod-*.whl"))
        if (directory / _MARKER).is_file() and wheels:
            return wheels[0]
        shutil.rmtree(directory, ignore_errors=True)
        copy = directory / "source"
        for relative, data in sources:
            target = copy / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        _run([_uv(), "build", "--wheel", "-q", "-o", str(directory), str(copy)],
             "building a wheel of the work tree", 600)
        shutil.rmtree(copy)
        (directory / _MARKER).write_text("")
        # other contents' wheels are of no further use: keep the directory small
        for other in (cache / "wheels").iterdir():
            if other.is_dir() and other != directory:
                shutil.rmtree(other, ignore_errors=True)
        return sorted(directory.glob("aiokprod-*.whl"))[0]


def _requirements(args: list[str], wheel: Path) -> list[str]:
    """The install line with ``aiokprod[extras]`` taken from the work tree's wheel."""
    out = []
    for arg in args:
        match = re.fullmatch(r"aiokprod(\[[a-z0-9,_-]+\])?", arg)
        out.append(f"aiokprod{match.group(1) or ''} @ {wheel.as_uri()}" if match else arg)
    return out


def _install(python: str, requirements: list[str], what: str) -> None:
    """``uv pip install`` from uv's cache alone when it holds everything (``--offline``), else
    from the index. The package index here answers without cache headers, so uv would
    download and build again (pyspark: 456 MB and a wheel build) what ``make`` just installed
    into ``.venv``; offline it takes the same files from its cache in a second."""
    argv = [_uv(), "pip", "install", "-q", "-p", python, *requirements]
    try:
        offline = subprocess.run([*argv, "--offline"], capture_output=True, check=False,
                                 stdin=subprocess.DEVNULL, timeout=300).returncode
    except subprocess.TimeoutExpired:  # run() killed and reaped it: try the index
        offline = -1
    if offline != 0:
        _run(argv, what, 900)


def _venv(cache: Path, args: list[str], wheel: Path) -> Path:
    """A venv with the dependencies ``pip install ARGS`` brings, aiokprod itself removed."""
    key = _digest((ROOT / "pyproject.toml").read_bytes(), "\0".join(args).encode(),
                  sys.version.encode(), sys.base_prefix.encode())
    venv = cache / f"venv-{key}"
    with _locked(cache):
        if not (venv / _MARKER).is_file():
            shutil.rmtree(venv, ignore_errors=True)
            started = time.monotonic()
            _run([sys.executable, "-m", "venv", str(venv)], "creating a venv", 120)
            python = str(venv / "bin" / "python")
            _install(python, _requirements(args, wheel), f"pip install {' '.join(args)}")
            _run([_uv(), "pip", "uninstall", "-q", "-p", python, "aiokprod"],
                 "removing aiokprod from the venv", 120)
            (venv / _MARKER).write_text(
                f"pip install {' '.join(args)}: {time.monotonic() - started:.1f}s\n")
            for other in cache.glob("venv-*"):
                if other != venv and time.time() - other.stat().st_mtime > _STALE_S:
                    shutil.rmtree(other, ignore_errors=True)
        os.utime(venv)  # in use: not stale
    return venv


class CleanPython:
    """A clean venv's interpreter with the work tree's aiokprod on ``PYTHONPATH``."""

    def __init__(self, venv: Path, site: Path, install: list[str]) -> None:
        self.venv = venv
        self.site = site  # where the wheel was installed (--target)
        self.install = install  # the docstring's install line, for messages

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    def env(self, **extra: str) -> dict[str, str]:
        """The environment for a child: nothing of the development venv leaks in."""
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}
        env["PATH"] = os.pathsep.join([str(self.venv / "bin"), env.get("PATH", "")])
        env["VIRTUAL_ENV"] = str(self.venv)
        env["PYTHONPATH"] = str(self.site)
        env.update(extra)
        return env


def prepare(example: Path, work_dir: Path) -> CleanPython:
    """The clean interpreter for ``example``; ``work_dir`` is the test's own directory."""
    args = example_install(example)
    cache = examples_cache_dir()
    wheel = _wheel(cache)
    venv = _venv(cache, args, wheel)
    site = work_dir / "site"
    if not site.exists():
        _run([_uv(), "pip", "install", "-q", "-p", str(venv / "bin" / "python"), "--no-deps",
              "--target", str(site), str(wheel)], "installing the work tree's wheel", 120)
    return CleanPython(venv, site, args)
