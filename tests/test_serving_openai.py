"""The openai backend against a real `chorus serve` (vLLM's OpenAI-compatible server on loopback)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
from conftest import EMBEDDED, HAVE_VLLM, ROOT, chats

pytestmark = pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    port = _free_port()
    log = open(ROOT / ".pytest-serve.log", "w")
    p = subprocess.Popen([sys.executable, "-m", "chorus.cli", "serve", EMBEDDED, "--port", str(port),
                          "--extra=--enforce-eager"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                         start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.time() + 420
    while time.time() < deadline:
        if p.poll() is not None:
            raise RuntimeError(f"chorus serve exited with {p.returncode}; see .pytest-serve.log")
        try:
            if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(2)
    else:
        os.killpg(p.pid, signal.SIGKILL)
        raise RuntimeError("chorus serve did not become healthy in 420 s")
    yield port
    os.killpg(p.pid, signal.SIGTERM)
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
    log.close()


def test_openai_backend_matches_local_and_spreads_over_endpoints(server, hf_engine):
    from serving import load_engine

    eps = [f"http://127.0.0.1:{server}/v1", f"http://localhost:{server}/v1"]  # two names: two "replicas"
    eng = load_engine(EMBEDDED, "openai", endpoints=eps)
    got = eng.chat(chats(), temperature=0, max_tokens=24)
    ref = hf_engine.chat(chats(), temperature=0, max_tokens=24)
    assert [o.text for o in got] == [o.text for o in ref]
    opts = ["A", "B", "Neither"]
    a, b = eng.option_logprobs(chats(4), opts), hf_engine.option_logprobs(chats(4), opts)
    assert max(abs(x[o] - y[o]) for x, y in zip(a, b) for o in opts) < 1e-3
    js = eng.chat(chats(6), json_schema={"type": "object", "properties": {"p": {"type": "number"}}, "required": ["p"]},
                  temperature=1.0, max_tokens=24, seed=list(range(6)))
    assert all(o.conformed for o in js)
    assert all(n > 0 for n in eng.backend.sent.values()), eng.backend.sent


def test_unreachable_endpoint_is_a_clear_error():
    from serving import load_engine
    from serving.backends.openai import EndpointError

    with pytest.raises(EndpointError, match="not reachable"):
        load_engine(EMBEDDED, "openai", endpoints=[f"http://127.0.0.1:{_free_port()}/v1"])
