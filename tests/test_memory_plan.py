"""GPU memory planning: decisions on constructed device sizes, model sizes read from safetensors
headers, and the pool's sleep / release order (a fake vLLM backend stands in for control flow)."""
from __future__ import annotations

import pytest
from conftest import EMBEDDED

from serving.memory import MemoryPlanError, parameter_count, plan_memory, weights_gib


def test_8b_beside_its_transformers_copy_on_an_h100_shares_the_device():
    p = plan_memory(80.0, 15.0, hf_copy=True)  # Llama-3.1-8B in bf16 is 14.96 GiB
    assert p.action == "share"
    # vLLM keeps 0.9 * 80 minus the transformers copy (15 weights + 20 % + 1 GiB activations)
    assert p.gpu_memory_utilization == pytest.approx((72.0 - 19.0) / 80, abs=1e-3)
    assert p.kv_cache_gib == pytest.approx(80 * p.gpu_memory_utilization - 15.0 - 1.5, abs=1e-6)


def test_when_both_do_not_fit_vllm_sleeps_and_when_one_does_not_fit_the_error_names_sizes():
    p = plan_memory(24.0, 15.0, hf_copy=True)
    assert p.action == "sleep" and p.gpu_memory_utilization == 0.9
    assert plan_memory(24.0, 15.0, hf_copy=False).action == "vllm-only"
    with pytest.raises(MemoryPlanError, match=r"does not fit vLLM.*device 80.0 GiB, model 131.0 GiB"):
        plan_memory(80.0, 131.0, hf_copy=False)  # 70B in bf16 on one H100
    assert plan_memory(80.0, 131.0, hf_copy=False, tp=2).action == "vllm-only"  # split over two
    with pytest.raises(MemoryPlanError, match=r"transformers copy needs 158.2 GiB"):
        plan_memory(80.0, 131.0, hf_copy=True, tp=2)


def test_model_size_comes_from_safetensors_headers():
    from safetensors import safe_open

    from serving.profiles import get_profile

    path = get_profile(EMBEDDED).require()
    loaded = 0
    for f in path.glob("*.safetensors"):
        with safe_open(f, "pt") as st:
            loaded += sum(st.get_tensor(k).numel() for k in st.keys())
    assert parameter_count(path) == loaded > 100_000_000
    assert weights_gib(path, "bfloat16") == pytest.approx(loaded * 2 / 1024 ** 3)


def test_pool_sleeps_vllm_before_the_transformers_copy_and_releases_it_on_wake(monkeypatch):
    """Control flow only: a fake vLLM backend records sleep / wake; the hf copy is the real model."""
    import serving.backends.vllm as vb
    import serving.engine as se
    from serving.memory import MemoryPlan

    events = []

    class FakeVLLM:
        name = "vllm"
        asleep = False
        on_wake = None

        def __init__(self, path, **kw):
            from transformers import AutoTokenizer
            self.kw = kw
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            self.max_model_len = 2048

        def sleep(self):
            events.append("sleep")
            self.asleep = True

        def wake(self):
            if self.asleep:
                self.on_wake(self)
                events.append("wake")
                self.asleep = False

        def settings(self):
            return {"backend": "vllm", **self.kw}

        def close(self):
            events.append("vllm closed")

    monkeypatch.setattr(vb, "VLLMBackend", FakeVLLM)
    monkeypatch.setattr(se, "_have_vllm", lambda: True)
    plan = MemoryPlan("sleep", 24.0, 15.0, 1, 0.9, 5.1, 19.0, "constructed")
    monkeypatch.setattr(se, "plan_pool", lambda expect, device=None: {EMBEDDED: plan})
    with se.engine_pool(expect=[(EMBEDDED, "vllm", "float32"), (EMBEDDED, "hf", "float32")]):
        v = se.load_engine(EMBEDDED, "vllm", dtype="float32")
        assert v.backend.kw["enable_sleep_mode"] is True and v.backend.kw["gpu_memory_utilization"] == 0.9
        h = se.load_engine(EMBEDDED, "hf", dtype="float32")
        assert events == ["sleep"] and h.chat([[{"role": "user", "content": "Hi"}]], max_tokens=2)[0].text is not None
        v.backend.wake()  # the next vLLM request: the transformers copy goes first
        assert events == ["sleep", "wake"]
        assert not [k for k in se._POOL if k[2] == "hf"]
        assert se.pool_plans()[EMBEDDED]["action"] == "sleep"
    assert se.pool_plans() == {}
