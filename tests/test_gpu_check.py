"""The GPU check script runs on a CPU at tiny size, so it works the first time a GPU is there."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import HAVE_VLLM, ROOT

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed")]


def test_gpu_check_runs_at_tiny_size_on_cpu(tmp_path):
    out = tmp_path / "gpu-check.json"
    p = subprocess.run([sys.executable, "bench/gpu_check.py", "--tiny", "--budget-s", "900", "--out", str(out),
                        "--only", "rehearse-llama", "--only", "serving", "--only", "knockout", "--only", "debate-600"],
                       cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    rep = json.loads(out.read_text())
    assert rep["tiny"] is True and "machine" in rep
    for name in ("rehearse-llama", "serving", "knockout", "debate-600"):
        step = rep["steps"][name]
        assert step["status"] == "pass", (name, step.get("log_tail"))
        assert "result" in step, name
    for name in ("rehearse-llama",):  # Gemma-4 and Qwen3.5 folders: tests/test_dummy.py
        res = rep["steps"][name]["result"]
        assert res["counts"]["fail"] == 0, [r for r in res["results"] if r["status"] == "fail"]
        assert {r["path"] for r in res["results"]} >= {"hf.load", "hf.knockout", "vllm.load", "vllm.option_logprobs"}
