"""What child processes this test process has, read from /proc (no psutil dependency).

The leak guard in conftest compares children before and after each test: a broker, proxy or
CLI subprocess a test forgot to stop — or stopped without reaping (a zombie) — fails the
test that leaked it instead of slowing or confusing a later one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ChildProcess", "child_processes", "pid_alive"]

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
