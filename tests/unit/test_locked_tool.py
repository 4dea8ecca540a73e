"""tools/locked.py: the Makefile's editable installs take turns on one lock, within a bound."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "tools" / "locked.py"


def _run(lock: Path, timeout: str, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(TOOL), str(lock), timeout, *command],
                          capture_output=True, text=True, timeout=60, check=False)


def test_a_held_lock_is_waited_for_within_the_bound_and_the_command_not_run(
        tmp_path: Path) -> None:
    lock, marker = tmp_path / ".build.lock", tmp_path / "ran"
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        done = _run(lock, "0.5", sys.executable, "-c", f"open({str(marker)!r}, 'w')")
    assert done.returncode == 1
    assert str(lock) in done.stderr and "0.5 s" in done.stderr
    assert not marker.exists()


def test_the_command_runs_once_the_lock_is_free_and_its_exit_status_is_kept(
        tmp_path: Path) -> None:
    done = _run(tmp_path / ".build.lock", "5", sys.executable, "-c", "raise SystemExit(3)")
    assert done.returncode == 3


def test_missing_arguments_print_the_usage() -> None:
    done = subprocess.run([sys.executable, str(TOOL), "only-a-lock"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "LOCK_FILE TIMEOUT_S COMMAND" in done.stderr
