"""What child processes this test process has, read from /proc (no psutil dependency).

The leak guard in conftest compares children before and after each test: a broker, proxy or
CLI subprocess a test forgot to stop — or stopped without reaping (a zombie) — fails the
test that leaked it instead of slowing or confusing a later one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ChildProcess", "child_processes", "frozen", "pid_alive", "stop_all_threads",
           "threads_stopped"]

_PROC = Path("/proc")


@dataclass(frozen=True)
class ChildProcess:
    pid: int
    # Single-letter state from /proc/PID/stat: "Z" is a zombie (exited, not reaped).
    state: str
    command: str


def _stat(pid: int) -> tuple[str, int, str] | None:
    """(state, ppid, comm) of ``pid``, or None if it vanished while we looked."""
    try:
        raw = (_PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm is in parentheses and may itself contain spaces or parentheses.
    close = raw.rfind(")")
    comm = raw[raw.find("(") + 1 : close]
    fields = raw[close + 2 :].split()
    return fields[0], int(fields[1]), comm


def child_processes(parent: int | None = None) -> dict[int, ChildProcess]:
    """Direct children of ``parent`` (default: this process), zombies included."""
    parent_pid = os.getpid() if parent is None else parent
    children: dict[int, ChildProcess] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        stat = _stat(int(entry.name))
        if stat is None:
            continue
        state, ppid, comm = stat
        if ppid == parent_pid:
            children[int(entry.name)] = ChildProcess(int(entry.name), state, comm)
    return children


def pid_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a zombie has exited but is unreaped)."""
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def threads_stopped(pid: int) -> bool:
    """Every thread of ``pid`` is stopped ("T") or gone."""
    try:
        tasks = list((_PROC / str(pid) / "task").iterdir())
    except FileNotFoundError:
        return True
    for task in tasks:
        try:
            raw = (task / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if raw[raw.rfind(")") + 2:].split()[0] not in ("T", "t", "Z", "X"):
            return False
    return True


def stop_all_threads(pid: int, timeout: float = 10.0) -> None:
    """SIGSTOP ``pid`` and return only once every one of its threads has stopped.

    ``kill`` returns before a multi-threaded process has stopped: each thread stops on its way
    back to user space. A test that acts at once and expects no answer can otherwise race a
    thread still running (a loaded CI machine lost one such race).
    """
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while not threads_stopped(pid):
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} did not stop within {timeout} s of SIGSTOP")
        time.sleep(0.001)


@contextlib.contextmanager
def frozen(pid: int, timeout: float = 10.0) -> Iterator[None]:
    """``stop_all_threads(pid)`` for the block; SIGCONT after."""
    try:
        stop_all_threads(pid, timeout)
        yield
    finally:
        os.kill(pid, signal.SIGCONT)
