"""Start, wait for and stop a `chorus serve` child process (tests, benchmarks, the rehearsal).

The server runs in its own session so that stopping it ends vLLM's worker processes too.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

# a source checkout's root (where ``-m chorus.cli`` is found without an install); installed, no cwd is needed
ROOT = Path(__file__).resolve().parents[1]
CWD = ROOT if (ROOT / "setup.py").is_file() else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(profile: str, port: int, *, log: str | Path, args: Sequence[str] = (),
                 env: dict[str, str] | None = None) -> subprocess.Popen:
    """``chorus serve PROFILE --port PORT ARGS...`` writing to ``log``; returns at once."""
    with open(log, "w") as fh:  # the child keeps its own handle
        return subprocess.Popen([sys.executable, "-m", "chorus.cli", "serve", str(profile), "--port", str(port),
                                 *args], cwd=CWD, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                                env=env if env is not None else dict(os.environ))


def wait_healthy(proc: subprocess.Popen, url: str, *, api_key: str | None = None, timeout: float = 600,
                 log: str | Path | None = None) -> float:
    """Seconds until ``GET URL/models`` answers 200; a clear error if the server exits or never answers."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if proc.poll() is not None:
            tail = Path(log).read_text()[-600:] if log and Path(log).exists() else ""
            raise RuntimeError(f"chorus serve exited with {proc.returncode} before answering {url}: ...{tail}")
        try:
            if httpx.get(f"{url}/models", timeout=2, headers=headers).status_code == 200:
                return time.perf_counter() - t0
        except httpx.HTTPError:
            pass
        time.sleep(1)
    stop_server(proc, signal.SIGKILL)
    raise RuntimeError(f"chorus serve did not answer {url}/models within {timeout:.0f} s")


def stop_server(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    """Signal the server's whole session; SIGKILL if it has not ended after 30 s."""
    try:
        os.killpg(proc.pid, sig)
        proc.wait(timeout=30)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
