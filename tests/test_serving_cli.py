"""The chorus CLI as a user runs it."""
from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT


def chorus(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chorus.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**__import__("os").environ, "COLUMNS": "200"})


def test_models_list_shows_every_profile_with_path_and_readiness():
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
    r = chorus("generate", "hi", "--profile", "nope")
    assert r.returncode == 2 and "unknown model profile 'nope'" in r.stderr
    r = chorus("generate", "hi", "--backend", "hf", "--temperature", "-1")
    assert r.returncode == 2 and "temperature" in r.stderr


def test_serve_beyond_loopback_needs_a_key(monkeypatch):
    from typer.testing import CliRunner

    from chorus.cli import app
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    res = CliRunner().invoke(app, ["serve", "smollm2-135m-instruct", "--host", "0.0.0.0"])
    assert res.exit_code == 2 and "--api-key" in res.output and "0.0.0.0" in res.output
    res = CliRunner().invoke(app, ["serve", "--distributed-executor-backend", "slurm"])
    assert res.exit_code == 2 and "mp, ray" in res.output


def test_serve_passes_vllm_scale_out_options():
    from serving.cli import vllm_serve_args
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

    from serving.cli import vllm_serve_args
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Gemma4ForConditionalGeneration"]}))
    a = vllm_serve_args(str(tmp_path), "g", host="127.0.0.1", port=9, dtype="float32")
    assert json.loads(a[a.index("--hf-overrides") + 1]) == {"architectures": ["Gemma4ForCausalLM"]}
    own = vllm_serve_args(str(tmp_path), "g", host="127.0.0.1", port=9, dtype="float32",
                          extra=['--hf-overrides={"architectures": ["X"]}'])
    assert "--hf-overrides" not in own and own[-1].startswith("--hf-overrides=")
    assert "--hf-overrides" not in vllm_serve_args("/m", "p", host="127.0.0.1", port=9, dtype="float32")
