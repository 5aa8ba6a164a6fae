"""Generation works with every socket blocked: nothing reaches for a model hub."""
from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT

BLOCK = """
import socket
def _no(*a, **k):
    raise OSError("network blocked by test")
socket.socket.connect = _no
socket.socket.connect_ex = _no
socket.create_connection = _no
socket.getaddrinfo = _no
from chorus.serving import load_engine
eng = load_engine("smollm2-135m-instruct", "hf")
out = eng.chat([[{"role": "user", "content": "Say hello."}]], temperature=0, max_tokens=8)
lp = eng.option_logprobs([[{"role": "user", "content": "A or B?"}]], ["A", "B"])
assert out[0].text and set(lp[0]) == {"A", "B"}
print("OFFLINE-OK", out[0].text)
"""


def test_generation_with_sockets_blocked():
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run([sys.executable, "-c", BLOCK], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "OFFLINE-OK" in r.stdout
