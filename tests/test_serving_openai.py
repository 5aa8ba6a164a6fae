"""The openai backend against a real `chorus serve` (vLLM's OpenAI-compatible server on loopback)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import httpx
import pytest
from conftest import EMBEDDED, HAVE_VLLM, ROOT, chats

from chorus.serving.launch import free_port as _free_port
from chorus.serving.launch import start_server, stop_server, wait_healthy

pytestmark = pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed")

KEY = "chorus-test-key"


def _serve(port: int, log_name: str) -> subprocess.Popen:
    """A real `chorus serve` (key from --api-key, not the environment), once it answers."""
    env = {k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"}
    p = start_server(EMBEDDED, port, log=ROOT / log_name, args=["--api-key", KEY, "--extra=--enforce-eager"], env=env)
    wait_healthy(p, f"http://127.0.0.1:{port}/v1", api_key=KEY, timeout=420, log=ROOT / log_name)
    return p


@pytest.fixture(scope="module")
def server():
    """A real `chorus serve` that requires an API key; this process sends it through VLLM_API_KEY."""
    port = _free_port()
    old_key = os.environ.get("VLLM_API_KEY")
    os.environ["VLLM_API_KEY"] = KEY
    p = _serve(port, ".pytest-serve.log")
    yield port
    if old_key is None:
        os.environ.pop("VLLM_API_KEY", None)
    else:
        os.environ["VLLM_API_KEY"] = old_key
    stop_server(p)


def test_openai_backend_matches_local_and_spreads_over_endpoints(server, hf_engine):
    from chorus.serving import load_engine

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
    from chorus.serving import load_engine
    from chorus.serving.backends.openai import EndpointError

    with pytest.raises(EndpointError, match="not reachable"):
        load_engine(EMBEDDED, "openai", endpoints=[f"http://127.0.0.1:{_free_port()}/v1"])


# -- faults: a loopback proxy in front of the real server ----------------------------------------
class FaultProxy:
    """An HTTP proxy on loopback in front of the real server. It injects faults on a fixed schedule
    of completion POSTs (every n-th answered with 503, every m-th connection reset), can require an
    API key, can answer 429 beyond ``capacity`` requests in flight, can tamper with ``/tokenize``,
    and can be killed (connections refused) and started again on the same port."""

    def __init__(self, upstream_port: int, *, fail_503_every: int = 0, reset_every: int = 0, key: str | None = None,
                 die_after: int = 0, capacity: int = 0, tamper_tokenize: bool = False):
        import threading
        self.upstream = f"http://127.0.0.1:{upstream_port}"
        self.port = _free_port()
        self.fail_503_every, self.reset_every, self.key = fail_503_every, reset_every, key
        self.die_after = die_after  # after this many POSTs the "node" is lost: resets, then refuses
        self.capacity, self.tamper_tokenize = capacity, tamper_tokenize
        self.in_flight = self.peak_in_flight = 0
        self.posts = 0
        self.injected = {"503": 0, "reset": 0, "429": 0}
        self.lock = threading.Lock()
        self.httpd = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        import socket as so
        import struct
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _forward(self, method: str) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if proxy.key is not None and self.headers.get("Authorization") != f"Bearer {proxy.key}":
                    return self._send(401, b'{"error": "bad key"}')
                if method == "POST" and self.path.endswith("/tokenize") and proxy.tamper_tokenize:
                    r = httpx.post(proxy.upstream + self.path, content=body, timeout=30,
                                   headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
                    d = r.json()
                    d["tokens"] = d["tokens"][:-1]  # another tokenizer: one id fewer
                    return self._send(200, json.dumps(d).encode())
                if method == "POST" and self.path.endswith("/completions"):
                    with proxy.lock:
                        proxy.posts += 1
                        n = proxy.posts
                    dying = bool(proxy.die_after) and n >= proxy.die_after
                    if dying and n == proxy.die_after:
                        threading.Thread(target=proxy.kill, daemon=True).start()
                    if dying or (proxy.reset_every and n % proxy.reset_every == 0):
                        proxy.injected["reset"] += 1
                        self.connection.setsockopt(so.SOL_SOCKET, so.SO_LINGER, struct.pack("ii", 1, 0))
                        self.close_connection = True
                        self.connection.close()  # RST: the client sees a dropped connection
                        return
                    if proxy.fail_503_every and n % proxy.fail_503_every == 0:
                        proxy.injected["503"] += 1
                        return self._send(503, b'{"error": "overloaded"}')
                    with proxy.lock:
                        busy = bool(proxy.capacity) and proxy.in_flight >= proxy.capacity
                        if busy:
                            proxy.injected["429"] += 1
                        else:
                            proxy.in_flight += 1
                            proxy.peak_in_flight = max(proxy.peak_in_flight, proxy.in_flight)
                    if busy:
                        return self._send(429, b'{"error": "too many requests"}')
                    try:
                        r = httpx.post(proxy.upstream + self.path, content=body, timeout=300, headers={
                            "Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
                    finally:
                        with proxy.lock:
                            proxy.in_flight -= 1
                    return self._send(r.status_code, r.content)
                r = httpx.request(method, proxy.upstream + self.path, content=body or None, timeout=300,
                                  headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
                self._send(r.status_code, r.content)

            def _send(self, code: int, data: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._guarded("GET")

            def do_POST(self):
                self._guarded("POST")

            def _guarded(self, method: str) -> None:
                try:
                    self._forward(method)
                except (BrokenPipeError, ConnectionResetError, OSError):
                    pass  # the client went away (a retried request): nothing to answer

        ThreadingHTTPServer.allow_reuse_address = True
        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def kill(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


FAST_RETRY = {"backoff_s": 0.01, "backoff_max_s": 0.05, "probe_every_s": 0.2}


def test_transient_faults_are_retried_with_identical_results(server, hf_engine):
    from chorus.serving import load_engine

    proxy = FaultProxy(server, fail_503_every=3, reset_every=5)
    try:
        eng = load_engine(EMBEDDED, "openai", endpoints=[proxy.url], **FAST_RETRY, down_after=3)
        got = eng.chat(chats(), temperature=0, max_tokens=24)
        ref = hf_engine.chat(chats(), temperature=0, max_tokens=24)
        assert [o.text for o in got] == [o.text for o in ref]
        assert proxy.injected["503"] > 0 and proxy.injected["reset"] > 0
        assert eng.backend.faults["retries"] == proxy.injected["503"] + proxy.injected["reset"]
        assert eng.backend.faults["taken_out"] == 0  # 503s mean alive; 2 resets are fewer than down_after
        assert eng.provenance()["engine"]["faults"]["retries"] == eng.backend.faults["retries"]
    finally:
        proxy.kill()


def test_lost_endpoint_fails_over_and_comes_back(server, hf_engine):
    from chorus.serving import load_engine

    a, b = FaultProxy(server), FaultProxy(server)
    try:
        eng = load_engine(EMBEDDED, "openai", endpoints=[a.url, b.url], **FAST_RETRY)
        ref = [o.text for o in hf_engine.chat(chats(), temperature=0, max_tokens=24)]
        assert [o.text for o in eng.chat(chats(), temperature=0, max_tokens=24)] == ref
        b.kill()  # a node lost mid-run: its requests go to the other one
        got = eng.chat(chats(), temperature=0, max_tokens=24, seed=1)  # new keys: sent again, not cached
        assert [o.text for o in got] == ref
        assert b.url.rstrip("/") in eng.backend.settings()["down"] and eng.backend.faults["taken_out"] == 1
        b.start()  # restarted: probed and taken back
        time.sleep(0.5)
        before = eng.backend.sent[b.url]
        assert [o.text for o in eng.chat(chats(), temperature=0, max_tokens=24, seed=2)] == ref
        assert eng.backend.faults["brought_back"] == 1 and eng.backend.sent[b.url] > before
        assert not eng.backend.settings()["down"]
    finally:
        a.kill()
        b.kill()


def test_no_healthy_endpoint_stops_with_one_error_and_keeps_finished_calls(server, tmp_path):
    from chorus.serving import load_engine
    from chorus.serving.backends.openai import EndpointError

    a = FaultProxy(server)
    store = tmp_path / "calls.sqlite"
    eng = load_engine(EMBEDDED, "openai", endpoints=[a.url], store=store, **FAST_RETRY, max_attempts=3)
    first = eng.chat(chats(3), temperature=0, max_tokens=16)
    a.kill()
    with pytest.raises(EndpointError, match="gave up after 3 attempts: no healthy endpoint"):
        eng.chat(chats(), temperature=0, max_tokens=16)
    eng.close()
    direct = load_engine(EMBEDDED, "openai", endpoints=[f"http://127.0.0.1:{server}/v1"], store=store)
    again = direct.chat(chats(3), temperature=0, max_tokens=16)
    assert direct.model_calls == 0 and [o.text for o in again] == [o.text for o in first]  # stored, not lost


def test_a_keyed_server_guards_every_path_and_says_where_it_listens(server):
    """vLLM's own key check covers /v1 only; chorus's guard closes /invocations and /metrics too, and
    the line the server prints names the address it really listens on."""
    base = f"http://127.0.0.1:{server}"
    assert httpx.get(f"{base}/health", timeout=10).status_code == 200
    for path in ("/v1/models", "/metrics"):
        assert httpx.get(base + path, timeout=10).status_code == 401, path
    assert httpx.post(f"{base}/invocations", json={}, timeout=10).status_code == 401
    assert httpx.get(f"{base}/metrics", timeout=10, headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
    log = (ROOT / ".pytest-serve.log").read_text()
    assert f"at http://127.0.0.1:{server}/v1 (API key required)" in log


def test_bad_endpoints_are_clear_errors_before_any_call(server):
    from chorus.serving import load_engine
    from chorus.serving.backends.openai import EndpointError

    with pytest.raises(EndpointError, match="not an http"):
        load_engine(EMBEDDED, "openai", endpoints=["127.0.0.1:8000/v1"])
    keyed = FaultProxy(server, key="s3cret")
    try:
        with pytest.raises(EndpointError, match="rejected the API key"):
            load_engine(EMBEDDED, "openai", endpoints=[keyed.url], api_key="wrong")
        eng = load_engine(EMBEDDED, "openai", endpoints=[keyed.url], api_key="s3cret")
        assert eng.chat(chats(1), temperature=0, max_tokens=4)[0].text
    finally:
        keyed.kill()


def test_in_flight_limit_adapts_to_what_the_server_accepts(server, hf_engine):
    """A server that takes 2 requests at a time and answers 429 beyond: the endpoint's limit falls
    from 8 toward what it accepts (halved per 429, +1/limit per success) and the results are the
    same as with no limit."""
    from chorus.serving import load_engine

    proxy = FaultProxy(server, capacity=2)
    try:
        eng = load_engine(EMBEDDED, "openai", endpoints=[proxy.url], concurrency=8, **FAST_RETRY, max_attempts=20)
        got = eng.chat(chats(), temperature=0, max_tokens=24)
        ref = hf_engine.chat(chats(), temperature=0, max_tokens=24)
        assert [o.text for o in got] == [o.text for o in ref]
        s = eng.backend.settings()
        assert proxy.injected["429"] > 0 and s["faults"]["overloaded"] == proxy.injected["429"]
        assert s["in_flight_limit"][proxy.url] < 8 and not s["down"]  # 429 means alive: kept in rotation
        assert proxy.peak_in_flight <= 2
    finally:
        proxy.kill()


def test_a_server_with_another_tokenizer_is_refused_before_any_call(server):
    from chorus.serving import load_engine
    from chorus.serving.backends.openai import EndpointError

    eng = load_engine(EMBEDDED, "openai", endpoints=[f"http://127.0.0.1:{server}/v1"])
    assert set(eng.backend.settings()["tokenizer_check"].values()) == {"same"}  # real vLLM, same folder
    proxy = FaultProxy(server, tamper_tokenize=True)
    try:
        with pytest.raises(EndpointError, match=f"server {proxy.url} tokenizes differently"):
            load_engine(EMBEDDED, "openai", endpoints=[proxy.url])
        assert proxy.posts == 0  # before any call
    finally:
        proxy.kill()


def test_served_key_is_required(server):
    """`chorus serve --api-key` hands the key to vLLM: a client without it is turned away, clearly."""
    from chorus.serving import load_engine
    from chorus.serving.backends.openai import EndpointError

    url = f"http://127.0.0.1:{server}/v1"
    assert httpx.get(f"{url}/models", timeout=10).status_code == 401
    with pytest.raises(EndpointError, match="rejected the API key"):
        load_engine(EMBEDDED, "openai", endpoints=[url], api_key="not-the-key")


def test_two_real_servers_one_killed_mid_run(server, hf_engine, tmp_path):
    """Two real `chorus serve` processes as endpoints. A debate run over both, with the second
    server SIGKILLed while the run is going: the run finishes on the first with the tables of a
    one-server run and every call stored. An engine over both keeps answering after the kill.
    (Taking a server back once it answers again: test_lost_endpoint_fails_over_and_comes_back;
    restarting a real server here cost a minute of suite time.)"""
    import sqlite3
    import threading

    from chorus.serving import load_engine
    from chorus.simulate.debate.config import DebateConfig, load
    from chorus.simulate.debate.experiment import run_debate

    port2 = _free_port()
    u1, u2 = f"http://127.0.0.1:{server}/v1", f"http://127.0.0.1:{port2}/v1"
    p2 = _serve(port2, ".pytest-serve-2.log")
    try:
        eng = load_engine(EMBEDDED, "openai", endpoints=[u1, u2], **FAST_RETRY)
        ref = [o.text for o in hf_engine.chat(chats(), temperature=0, max_tokens=24)]
        assert [o.text for o in eng.chat(chats(), temperature=0, max_tokens=24)] == ref
        assert eng.backend.sent[u2] > 0

        over = {"rounds": 1, "bench.limit": 2, "generation.max_tokens": 24, "model.backend": "openai",
                "analysis.n_boot": 50, "analysis.n_perm": 50}
        one = load("smoke", DebateConfig, {**over, "model.endpoints": [u1]})
        run1, _ = run_debate(one, tmp_path / "one", make_plots=False)
        n_calls = sqlite3.connect(run1.path / "calls.sqlite").execute("select count(*) from calls").fetchone()[0]

        two = load("smoke", DebateConfig, {**over, "model.endpoints": [u1, u2], "model.options": FAST_RETRY})
        done: dict = {}
        t = threading.Thread(target=lambda: done.update(run=run_debate(two, tmp_path / "two", make_plots=False)[0]))
        t.start()
        store, killed_at = tmp_path / "two" / "calls.sqlite", None
        while t.is_alive() and killed_at is None:
            try:
                n = sqlite3.connect(store, timeout=5).execute("select count(*) from calls").fetchone()[0]
            except sqlite3.Error:
                n = 0
            if n >= n_calls // 3:
                os.killpg(p2.pid, signal.SIGKILL)  # the node is lost mid-run
                killed_at = n
            time.sleep(0.2)
        t.join()
        assert killed_at is not None and killed_at < n_calls, "the run ended before the server could be killed"
        run2 = done["run"]
        cols = ["qid", "condition", "round", "agent", "response", "answer"]
        t1, t2 = (r.read_table("turns")[cols].sort_values(cols[:4]).reset_index(drop=True) for r in (run1, run2))
        assert len(t1) > 0 and t1.equals(t2)
        assert sqlite3.connect(store).execute("select count(*) from calls").fetchone()[0] == n_calls  # none lost
        faults = json.loads((run2.path / "provenance.json").read_text())["model"]["engine"]["faults"]
        assert faults["taken_out"] == 1

        # the long-lived engine fails over to the server left
        assert [o.text for o in eng.chat(chats(), temperature=0, max_tokens=24, seed=1)] == ref
        assert u2 in eng.backend.settings()["down"]
    finally:
        stop_server(p2)
