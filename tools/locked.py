"""Run a command while holding an exclusive lock on a file, waiting at most a bound for it.

    python tools/locked.py LOCK_FILE TIMEOUT_S COMMAND [ARG ...]

The Makefile runs every editable install of the work tree (``.venv`` and the other Pythons'
``.venv-X.Y``) through it. An editable build writes into the tree it builds: Cython generates
``aiokprod/_native/_speedups.c`` again whenever the build environment is new, setuptools
rewrites ``aiokprod.egg-info``, and the compiler reads that C file. `make test` builds the
other Pythons' venvs while other passes run beside them, so two builds at once would write and
compile the same files; with the lock they take turns. Standard library only: it runs before
any venv exists. Exit status: the command's, or 1 when the lock was not had within the bound.
"""

from __future__ import annotations

import fcntl
import subprocess
import sys
import time

_POLL_S = 0.2


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        sys.stderr.write(__doc__ or "")
        return 2
    path, timeout, *command = argv
    deadline = time.monotonic() + float(timeout)
    with open(path, "w") as lock:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    sys.stderr.write(f"locked.py: {path} still held by another build after "
                                     f"{timeout} s; not running {' '.join(command)}\n")
                    return 1
                time.sleep(_POLL_S)
        return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
