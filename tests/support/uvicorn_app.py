"""examples/fastapi_app.py under a real uvicorn process, up once /healthz answers 200.

Shared by the app's own tests (``tests/integration/test_fastapi_app.py``, the development venv)
and the clean-venv example test (``tests/integration/test_examples.py``): one start-up loop that
waits for the condition (the health check answering), not for a fixed time, and one shutdown
that ends the process by PID and reaps it.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

__all__ = ["EXAMPLES", "free_port", "serve_fastapi_example"]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# Start-up (imports, the producer's first metadata) takes about a second; the bound is for a
# loaded 2-core machine, where a fresh interpreter importing FastAPI can take many times that.
UP_WITHIN = 60.0


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve_fastapi_example(python: str, *, env: Mapping[str, str], log_path: Path,
                          cwd: Path | None = None, args: Sequence[str] = (),
                          what: str = "uvicorn"
                          ) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Run ``fastapi_app:app`` with ``python -m uvicorn`` (``args`` appended); yields (base url,
    process) once ``GET /healthz`` answers 200. ``what`` heads any failure message (the
    clean-venv test names its install line there). Ended by PID and reaped on exit."""
    port = free_port()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [python, "-m", "uvicorn", "--app-dir", str(EXAMPLES), "fastapi_app:app",
             "--host", "127.0.0.1", "--port", str(port), "--no-access-log", *args],
            env=dict(env), cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + UP_WITHIN
        while True:
            if process.poll() is not None:
                raise AssertionError(f"{what}: uvicorn exited rc={process.returncode}:\n"
                                     f"{log_path.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: uvicorn did not answer /healthz within "
                                     f"{UP_WITHIN:.0f} s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.05)  # a poll interval, not a wait for the condition
        yield url, process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
