"""GPU memory planning of the engine pool (chorus.serving.engine.plan_pool over chorus.serving.plan): decisions on
constructed device sizes, model sizes read from safetensors headers, and the pool's sleep / release
order (a fake vLLM backend stands in for control flow)."""
from __future__ import annotations

import json

import pytest
from conftest import EMBEDDED

import chorus.serving.engine as se
from chorus.serving.memory import parameter_count, weights_gib
from chorus.serving.plan import DevicePlanError, Need, plan_devices

PAIR = [("m", "vllm", "bfloat16"), ("m", "hf", "bfloat16")]   # one profile on vLLM and its transformers copy


def pool(monkeypatch, device: float, sizes: dict[str, float] | float, expect=PAIR) -> dict:
    """``plan_pool`` with constructed sizes (GiB per dtype, or one size) instead of safetensors headers."""
    monkeypatch.setattr(se, "needs_gib", lambda p, d: sizes[d] if isinstance(sizes, dict) else sizes)
    return se.plan_pool(expect, device)


def test_8b_beside_its_transformers_copy_on_an_h100_shares_the_device(monkeypatch):
    (p,) = pool(monkeypatch, 80.0, 15.0).values()  # Llama-3.1-8B in bf16 is 14.96 GiB
    assert p.mode == "share" and not p.vllm.sleep
    # the transformers copy needs 15 weights + 20 % + 1 GiB activations = 19 GiB; vLLM keeps the
    # rest of 0.9 * 80: (72 - 19) / 80 = 0.6625, rounded to 0.662
    assert p.hf.need_gib == 19.0 and p.vllm.gpu_memory_utilization == 0.662
    assert p.vllm.kv_gib == pytest.approx(80 * 0.662 - 15.0 - 1.5)   # 36.46 GiB of KV cache
    assert p.vllm.weights_gib / p.vllm.tp + p.vllm.kv_gib == pytest.approx(51.46)   # what waking would take back


def test_when_both_do_not_fit_vllm_sleeps_and_when_one_does_not_fit_the_error_names_sizes(monkeypatch):
    (p,) = pool(monkeypatch, 24.0, 15.0).values()
    # vLLM 15 + 1.5 + 2 = 18.5 and the copy 19 GiB: 37.5 > 21.6 usable, each alone fits
    assert p.mode == "swap" and p.vllm.sleep and p.vllm.gpu_memory_utilization == 0.9
    assert p.vllm.kv_gib == pytest.approx(21.6 - 16.5)   # 5.1 GiB; waking takes back 20.1
    assert json.loads(json.dumps(p.to_dict()))["mode"] == "swap"
    # vLLM alone: no plan in the pool (vLLM's own 0.9), the planner gives it the whole 0.9
    assert pool(monkeypatch, 24.0, 15.0, expect=PAIR[:1]) == {}
    (alone,) = plan_devices([Need("m", "m", "vllm", "bfloat16", 15.0)], 24.0).phases[0].engines
    assert alone.gpu_memory_utilization == 0.9
    with pytest.raises(DevicePlanError, match=r"m/vllm \(m on vllm, bfloat16, weights 131.0 GiB, needs >= 134.5 GiB\) "
                                              r"do not fit even alone on 1 device\(s\) of 80.0 GiB \(72.0 usable"):
        pool(monkeypatch, 80.0, 131.0)  # 70B in bf16 on one H100
    # split over two: vLLM fits (65.5 + 3.5 per device), its transformers copy (158.2 GiB) does not
    tp2 = [Need("m", "m", "vllm", "bfloat16", 131.0, tp=2)]
    assert plan_devices(tp2, 80.0, n_devices=2).phases[0].engines[0].gpu_memory_utilization == 0.9
    with pytest.raises(DevicePlanError, match=r"m \(m on hf, bfloat16, weights 131.0 GiB, needs >= 158.2 GiB\)"):
        plan_devices(tp2 + [Need("m", "m", "hf", "bfloat16", 131.0)], 80.0, n_devices=2)


def test_each_copy_is_sized_in_its_own_dtype_and_cpu_plans_nothing(monkeypatch):
    # the demo's knockout copy is float32 beside a bfloat16 vLLM engine: 30 + 6 + 1 = 37 GiB
    (p,) = pool(monkeypatch, 80.0, {"bfloat16": 15.0, "float32": 30.0},
                expect=[("m", "vllm", "bfloat16"), ("m", "hf", "float32")]).values()
    assert p.mode == "share" and p.hf.need_gib == 37.0 and p.vllm.gpu_memory_utilization == 0.438   # (72 - 37) / 80
    monkeypatch.setattr(se, "needs_gib", lambda p, d: pytest.fail("sized without CUDA"))
    monkeypatch.setattr("chorus.serving.memory.device_gib", lambda: None)
    assert se.plan_pool(PAIR) == {}


def test_model_size_comes_from_safetensors_headers():
    from safetensors import safe_open

    from chorus.serving.profiles import get_profile

    path = get_profile(EMBEDDED).require()
    loaded = 0
    for f in path.glob("*.safetensors"):
        with safe_open(f, "pt") as st:
            loaded += sum(st.get_tensor(k).numel() for k in st.keys())
    assert parameter_count(path) == loaded > 100_000_000
    assert weights_gib(path, "bfloat16") == pytest.approx(loaded * 2 / 1024 ** 3)


def test_pool_sleeps_vllm_before_the_transformers_copy_and_releases_it_on_wake(monkeypatch):
    """Control flow only: a fake vLLM backend records sleep / wake; the hf copy is the real model."""
    import chorus.serving.backends.vllm as vb

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
    monkeypatch.setattr(se, "needs_gib", lambda p, d: 15.0)  # planned as an 8B on a 24 GiB card: swap
    with se.engine_pool(expect=[(EMBEDDED, "vllm", "float32"), (EMBEDDED, "hf", "float32")], device_gib=24.0):
        v = se.load_engine(EMBEDDED, "vllm", dtype="float32")
        assert v.backend.kw["enable_sleep_mode"] is True and v.backend.kw["gpu_memory_utilization"] == 0.9
        assert v.backend.engine_plan.kv_gib == pytest.approx(5.1)   # the sizes the wake check falls back on
        h = se.load_engine(EMBEDDED, "hf", dtype="float32")
        assert events == ["sleep"] and h.chat([[{"role": "user", "content": "Hi"}]], max_tokens=2)[0].text is not None
        v.backend.wake()  # the next vLLM request: the transformers copy goes first
        assert events == ["sleep", "wake"]
        assert not [k for k in se._POOL if k[2] == "hf"]
        assert se.pool_plans()[EMBEDDED]["mode"] == "swap" and se.pool_plans()[EMBEDDED]["vllm"]["sleep"]
    assert se.pool_plans() == {}


def test_shipped_open_weight_council_fits_one_80gb_card():
    """The BDA paper's open-weight council (simulate/council/configs/open_weight.yaml, App. H's counterpart
    with the three paper models chorus profiles) as bench/plan_paper.py plans it from the config's own
    roles: the three seat engines share one 80 GB card, the judge after them in its own phase."""
    import importlib.util

    from conftest import ROOT
    from chorus.simulate.council.config import load
    cfg = load("open_weight")
    assert [s.profile for s in cfg.seats] == ["llama-3.1-8b-instruct", "qwen3.5-9b", "gemma-4-e4b-it"]
    assert {s.backend for s in cfg.roles().values()} == {"vllm"}
    spec = importlib.util.spec_from_file_location("plan_paper", ROOT / "bench" / "plan_paper.py")
    pp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pp)
    plan = pp.council(79.1)
    assert plan["mode"] == "share"
    council = next(p for p in plan["phases"] if p["name"] == "council")
    assert sorted(e["profile"] for e in council["engines"]) == sorted(s.profile for s in cfg.seats)
    assert sum(e["gpu_memory_utilization"] for e in council["engines"]) <= 0.9 + 1e-9
    assert [list(e["roles"]) for p in plan["phases"] if p["name"] == "judge" for e in p["engines"]] == [["judge"]]
