"""The chorus CLI as a user runs it."""
from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
from conftest import HAVE_VLLM, ROOT

from chorus.serving.launch import free_port


def chorus(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chorus.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**__import__("os").environ, "COLUMNS": "200"})


def test_models_list_shows_every_profile_with_path_and_readiness(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))   # an empty cache: llama is not ready
    monkeypatch.delenv("CHORUS_MODEL_LLAMA_3_1_8B_INSTRUCT", raising=False)
    r = chorus("models", "list")
    assert r.returncode == 0, r.stderr
    for name in ("smollm2-135m-instruct", "gemma3-270m", "llama-3.1-8b-instruct", "qwen3.5-9b", "gemma-4-e4b-it"):
        assert name in r.stdout
    assert "yes" in r.stdout and "CHORUS_MODEL_LLAMA_3_1_8B_INSTRUCT" in r.stdout


def test_generate_store_and_stats(tmp_path):
    store = tmp_path / "calls.sqlite"
    args = ["generate", "Say hello in French.", "--backend", "hf", "--max-tokens", "12", "--store", str(store), "--json"]
    r = chorus(*args)
    assert r.returncode == 0, r.stderr
    first = json.loads(r.stdout.strip().splitlines()[-1])
    assert first["text"] and first["cached"] is False
    r2 = chorus(*args)
    second = json.loads(r2.stdout.strip().splitlines()[-1])
    assert second["cached"] is True and second["text"] == first["text"]
    s = chorus("store", "stats", str(store))
    assert s.returncode == 0 and "1 calls" in s.stdout


def test_generate_bad_input_exits_nonzero_with_a_message():
    r = chorus("generate", "hi", "-m", "nope")
    assert r.returncode == 2 and "unknown model profile 'nope'" in r.stderr
    r = chorus("generate", "hi", "--backend", "hf", "--temperature", "-1")
    assert r.returncode == 2 and "temperature" in r.stderr


def test_serve_bad_executor_backend_is_one_line():
    from typer.testing import CliRunner

    from chorus.cli import app
    res = CliRunner().invoke(app, ["serve", "--distributed-executor-backend", "slurm"])
    assert res.exit_code == 2 and "mp, ray" in res.output


def _listen(extra: list[str], env_key: str | None = None, *, host: str = "127.0.0.1", port: int = 0):
    """The decision on the line `chorus serve` builds (chorus's --host first, the user's --extra after)."""
    from chorus.serving.cli import vllm_serve_args
    from chorus.serving.listen import decide, parse_serve_args
    return decide(parse_serve_args(vllm_serve_args("/m", "p", host=host, port=port or free_port(), dtype="float32",
                                                   extra=extra)), env_key)


@pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed: its own parser decides where the server listens")
@pytest.mark.parametrize("extra, named", [
    (["--host=0.0.0.0"], "--host 0.0.0.0"),                    # vLLM keeps the last --host
    (["--host", "192.168.1.7"], "--host 192.168.1.7"),
    (["--hos=0.0.0.0"], "--host 0.0.0.0"),                     # an abbreviation vLLM's argparse accepts
    (["--host="], "every interface"),                           # empty: vLLM binds all interfaces
    (["--host=myhost"], "--host myhost"),                       # a name may resolve anywhere
    (["--data-parallel-address", "10.1.2.3"], "--data-parallel-address 10.1.2.3"),
    (['--allowed-origins=["*"]'], "--allowed-origins"),
    (["--config", "CONFIG"], "--data-parallel-address 10.9.8.7"),   # vLLM's own YAML config (below argv)
])
def test_no_pass_through_option_opens_the_server_without_a_key(extra, named, tmp_path):
    from chorus.serving.listen import ListenError
    if "CONFIG" in extra:
        (tmp_path / "serve.yaml").write_text("data-parallel-address: 10.9.8.7\n")
        extra = ["--config", str(tmp_path / "serve.yaml")]
    with pytest.raises(ListenError, match="--api-key") as err:
        _listen(extra)
    assert named in str(err.value) and "\n" not in str(err.value)
    assert _listen(extra, "k").keyed                            # $VLLM_API_KEY allows it
    assert _listen([*extra, "--api-key=k2"]).keys == ("k2",)    # so does vLLM's own --api-key


@pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed: its own parser decides where the server listens")
def test_loopback_and_unix_sockets_need_no_key_and_bad_ports_are_one_line():
    from chorus.serving.listen import ListenError
    port = free_port()
    for extra in ([], ["--host=127.0.0.2"], ["--host=localhost"], ["--host=::1"]):
        w = _listen(extra, port=port)
        assert not w.keyed and str(port) in w.url
    assert _listen(["--uds=/tmp/chorus-test.sock", "--host=0.0.0.0"]).url == "unix:/tmp/chorus-test.sock"
    assert _listen(["--port=9123"]).url == "http://127.0.0.1:9123/v1"   # the address printed is the real one
    with pytest.raises(ListenError, match="--port must be 1-65535, got 99999"):
        _listen(["--port=99999"])
    from chorus.serving.listen import check_free
    check_free("127.0.0.1", port)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(ListenError, match=f"port {taken.getsockname()[1]} on 127.0.0.1 is already in use"):
            check_free("127.0.0.1", taken.getsockname()[1])
    with pytest.raises(ListenError, match="--host 192.0.2.1 is not an address of this machine"):
        check_free("192.0.2.1", port)


@pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed: its own parser decides where the server listens")
def test_serve_refuses_before_loading_the_model():
    """As a user runs it: the refusal is one line and exit 2, and no model is loaded."""
    r = chorus("serve", "smollm2-135m-instruct", "--extra=--host=0.0.0.0", timeout=180)
    err = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.returncode == 2 and len(err) == 1 and "--host 0.0.0.0" in err[0] and "--api-key" in err[0], r.stderr
    assert "Traceback" not in r.stderr and "serving " not in r.stdout
    r = chorus("serve", "smollm2-135m-instruct", "--port", "99999", timeout=180)
    assert r.returncode == 2 and "--port must be 1-65535, got 99999" in r.stderr and "Traceback" not in r.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        r = chorus("serve", "smollm2-135m-instruct", "--port", str(taken.getsockname()[1]), timeout=180)
    assert r.returncode == 2 and "is already in use" in r.stderr and "Traceback" not in r.stderr


def test_key_guard_closes_every_path_but_health(monkeypatch):
    """vLLM's key guards /v1, /v2 and /inference only; the guard chorus adds closes the rest."""
    import asyncio

    from chorus.serving.listen import KEYS_ENV, KeyGuard

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})

    def status(guard, path, auth=None):
        sent = []

        async def send(msg):
            sent.append(msg)
        headers = [(b"authorization", auth.encode())] if auth else []
        asyncio.run(guard({"type": "http", "method": "POST", "path": path, "headers": headers}, None, send))
        return sent[0]["status"]

    monkeypatch.setenv(KEYS_ENV, "k1\nk2")
    g = KeyGuard(app)
    assert [status(g, p) for p in ("/invocations", "/metrics", "/v1/models", "/health")] == [401, 401, 401, 200]
    assert status(g, "/invocations", "Bearer k2") == 200 and status(g, "/invocations", "Bearer nope") == 401
    monkeypatch.delenv(KEYS_ENV)
    assert status(KeyGuard(app), "/invocations") == 200   # no key in force: nothing to guard


def test_serve_passes_vllm_scale_out_options():
    from chorus.serving.cli import vllm_serve_args
    a = vllm_serve_args("/m", "p", host="0.0.0.0", port=9, dtype="bfloat16", tensor_parallel_size=4,
                        pipeline_parallel_size=2, data_parallel_size=2, distributed_executor_backend="ray", gpu=True)
    pairs = dict(zip(a[1::2], a[2::2]))
    assert (pairs["--tensor-parallel-size"], pairs["--pipeline-parallel-size"], pairs["--data-parallel-size"],
            pairs["--distributed-executor-backend"]) == ("4", "2", "2", "ray")
    assert "--no-enable-chunked-prefill" not in a  # GPU: vLLM's defaults
    cpu = vllm_serve_args("/m", "p", host="127.0.0.1", port=9, dtype="float32")
    assert "--no-enable-chunked-prefill" in cpu and "--api-key" not in cpu


def test_serve_loads_the_text_model_of_a_multimodal_checkpoint(tmp_path):
    """`chorus serve` on Gemma-4 used to stop in vLLM's model inspection (found by the rehearsal):
    it now passes the same text-only override as the vllm backend, unless the user gives one."""
    import json

    from chorus.serving.cli import vllm_serve_args
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Gemma4ForConditionalGeneration"]}))
    a = vllm_serve_args(str(tmp_path), "g", host="127.0.0.1", port=9, dtype="float32")
    assert json.loads(a[a.index("--hf-overrides") + 1]) == {"architectures": ["Gemma4ForCausalLM"]}
    own = vllm_serve_args(str(tmp_path), "g", host="127.0.0.1", port=9, dtype="float32",
                          extra=['--hf-overrides={"architectures": ["X"]}'])
    assert "--hf-overrides" not in own and own[-1].startswith("--hf-overrides=")
    assert "--hf-overrides" not in vllm_serve_args("/m", "p", host="127.0.0.1", port=9, dtype="float32")


def test_version_and_the_global_flags_in_help():
    r = chorus("--version")
    from chorus import __version__
    assert r.returncode == 0 and r.stdout.strip() == f"chorus {__version__}"
    h = chorus("--help")
    assert h.returncode == 0 and all(f in h.stdout for f in ("--version", "--verbose", "--debug"))
    assert chorus("-v", "--version").returncode == 0   # -v is taken before typer sees the line
