"""One device plan over every engine of an experiment (chorus.serving.plan): decisions on constructed sizes
(the BDA council on one H100, 70B, train-then-compare, one model beside its transformers copy as the
engine pool holds it, in closed form), and the embedded model's real folder sized from its
safetensors headers. Nothing is loaded."""
from __future__ import annotations

import json

import pytest
from conftest import EMBEDDED

from chorus.serving.memory import weights_gib
from chorus.serving.plan import DevicePlanError, Need, engine_options, needs_gib, plan_devices

GIB = 1024 ** 3
H100 = 79.1          # GiB an 80 GB card reports
USABLE = H100 * 0.9
OVERHEAD, MIN_KV = 1.5, 2.0


def bf16(params: float) -> float:
    return params * 2 / GIB


LLAMA8, QWEN9, GEMMA4, MINISTRAL8 = bf16(8.03e9), bf16(9.65e9), bf16(8.0e9), bf16(8.02e9)


def council() -> list[Need]:
    return [Need("seat_a", "llama-3.1-8b-instruct", "vllm", "bfloat16", LLAMA8),
            Need("seat_b", "qwen3.5-9b", "vllm", "bfloat16", QWEN9),
            Need("seat_c", "gemma-4-e4b-it", "vllm", "bfloat16", GEMMA4),
            Need("synthesizer", "ministral-8b-instruct", "vllm", "bfloat16", MINISTRAL8),
            Need("judge", "llama-3.1-8b-instruct", "vllm", "bfloat16", LLAMA8)]   # the judge is seat 1's model


def test_bda_council_on_one_h100_dedupes_the_judge_and_swaps_the_four_models():
    plan = plan_devices(council(), H100)
    (phase,) = plan.phases
    assert [e.roles for e in phase.engines] == [("seat_a", "judge"), ("seat_b",), ("seat_c",), ("synthesizer",)]
    weights = [LLAMA8, QWEN9, GEMMA4, MINISTRAL8]
    together = sum(w + OVERHEAD + MIN_KV for w in weights)   # 18.46 + 21.47 + 18.40 + 18.44 = 76.8 GiB
    assert together == pytest.approx(76.77, abs=0.01) and USABLE == pytest.approx(71.19)
    expected = "share" if together <= USABLE else "swap"
    assert expected == "swap" and plan.mode == phase.mode == "swap"
    # one at a time, in declared order, each with the whole 0.9 and the rest of it as KV cache
    assert phase.order == tuple(e.name for e in phase.engines)
    for e, w in zip(phase.engines, weights):
        assert e.gpu_memory_utilization == 0.9 and e.sleep and not e.resident
        assert e.kv_gib == pytest.approx(USABLE - w - OVERHEAD)   # 54.73, 51.72, 54.79, 54.75 GiB
    assert engine_options(plan, "llama-3.1-8b-instruct", "vllm", "bfloat16") == {
        "gpu_memory_utilization": 0.9, "enable_sleep_mode": True}
    assert "76.8 GiB" in plan.reason and "71.2 usable of 79.1 GiB" in plan.reason


def test_three_seats_share_and_a_resident_classifier_shrinks_what_swapped_engines_get():
    seats = council()[:3]
    share = plan_devices(seats, H100)   # 58.3 GiB together: all held at once
    assert share.mode == "share"
    base = [w + OVERHEAD for w in (LLAMA8, QWEN9, GEMMA4)]
    spare = USABLE - sum(base) - 3 * MIN_KV
    wsum = LLAMA8 + QWEN9 + GEMMA4
    for e, b, w in zip(share.phases[0].engines, base, (LLAMA8, QWEN9, GEMMA4)):   # min KV + spare by weight
        assert e.gpu_memory_utilization == round((b + MIN_KV + spare * w / wsum) / H100, 3)
        assert e.kv_gib == pytest.approx(H100 * e.gpu_memory_utilization - w - OVERHEAD)
    assert [e.gpu_memory_utilization for e in share.phases[0].engines] == [0.284, 0.333, 0.283]
    assert sum(e.gpu_memory_utilization for e in share.phases[0].engines) <= 0.9 + 1e-9

    cls = Need("classifier", EMBEDDED, "hf", "float32", 0.5)   # 0.5 * 1.2 + 1 = 1.6 GiB
    plan = plan_devices(council() + [cls], H100, resident=["classifier"])
    phase = plan.phases[0]
    assert phase.mode == "swap" and phase.order[0] == f"{EMBEDDED}/hf/float32" and phase.engines[0].resident
    assert all(e.gpu_memory_utilization == round(0.9 - 1.6 / H100, 3) for e in phase.engines[1:])


def test_70b_on_one_h100_is_refused_and_on_two_is_served_or_split():
    big = Need("model", "llama-3.1-70b-instruct", "vllm", "bfloat16", bf16(70.6e9))
    assert big.weights_gib == pytest.approx(131.5, abs=0.05)
    with pytest.raises(DevicePlanError, match=r"role\(s\) model \(llama-3.1-70b-instruct on vllm, bfloat16, "
                                              r"weights 131.5 GiB, needs >= 135.0 GiB\).*of 79.1 GiB") as err:
        plan_devices([big], H100)
    assert "\n" not in str(err.value)
    # two devices, in-process tp=1: served apart with -tp 2, and the consumer is told to, not loaded
    plan = plan_devices([big], H100, n_devices=2)
    assert plan.mode == "serve"
    (e,) = plan.phases[0].engines
    assert e.serve.startswith("run `chorus serve llama-3.1-70b-instruct -tp 2") and "backend openai" in e.serve
    with pytest.raises(DevicePlanError, match="chorus serve"):
        engine_options(plan, big.profile, "vllm", "bfloat16")
    # tp=2 asked of two devices: held in-process, 65.75 GiB per device
    from dataclasses import replace

    split = plan_devices([replace(big, tp=2)], H100, n_devices=2)
    (e,) = split.phases[0].engines
    assert split.mode == "share" and e.gpu_memory_utilization == 0.9
    assert e.kv_gib == pytest.approx(USABLE - big.weights_gib / 2 - OVERHEAD)   # 3.94 GiB
    with pytest.raises(DevicePlanError, match="tp=2 but there are 1 device"):
        plan_devices([replace(big, tp=2)], H100)


def test_train_then_compare_plans_each_phase_alone():
    def needs(train_gib):
        return [Need("trainer", "llama-3.1-8b-instruct", "trainer", "bfloat16", 14.96, phase="train", need_gib=train_gib),
                Need("base", "llama-3.1-8b-instruct", "vllm", "bfloat16", 14.96, phase="compare"),
                Need("sft", "llama-3.1-8b-sft", "vllm", "bfloat16", 14.96, phase="compare")]

    plan = plan_devices(needs(70.6), H100)   # full fine-tuning with checkpointing fits 71.19 alone
    train, compare = plan.phases
    assert (train.name, train.mode, compare.name, compare.mode, plan.mode) == ("train", "share", "compare", "share", "share")
    assert train.engines[0].gpu_memory_utilization is None and train.engines[0].need_gib == 70.6
    # (71.19 - 2 * 16.46) split evenly: 19.135 GiB KV each, 0.45 of the device each
    assert [e.gpu_memory_utilization for e in compare.engines] == [0.45, 0.45]
    assert [e.kv_gib for e in compare.engines] == pytest.approx([19.135, 19.135])
    assert engine_options(plan, "llama-3.1-8b-sft", "vllm", "bfloat16") == {"gpu_memory_utilization": 0.45}
    with pytest.raises(DevicePlanError, match=r"trainer \(llama-3.1-8b-instruct on trainer.*132.5 GiB.*79.1 GiB"):
        plan_devices(needs(132.5), H100)


# one profile on vLLM beside its transformers copy (engine_pool): vLLM needs w + 1.5 + 2 GiB, the
# copy 1.2 w + 1; both within 0.9 dev: share, vLLM gets round((0.9 dev - copy) / dev, 3); else each
# alone within 0.9 dev: swap, vLLM the whole 0.9 and sleeps; else an error (None).
PAIRED = {(12.0, 0.25): ("share", 0.792), (12.0, 7.5): None, (12.0, 15.0): None, (12.0, 30.0): None,
          (16.0, 0.25): ("share", 0.819), (16.0, 7.5): ("swap", 0.9), (16.0, 15.0): None, (16.0, 30.0): None,
          (24.0, 0.25): ("share", 0.846), (24.0, 7.5): ("share", 0.483), (24.0, 15.0): ("swap", 0.9),
          (24.0, 30.0): None,
          (40.0, 0.25): ("share", 0.868), (40.0, 7.5): ("share", 0.65), (40.0, 15.0): ("swap", 0.9),
          (40.0, 30.0): None,   # vLLM fits alone (33.5 of 36 usable), the 37 GiB copy does not
          (80.0, 0.25): ("share", 0.884), (80.0, 7.5): ("share", 0.775), (80.0, 15.0): ("share", 0.662),
          (80.0, 30.0): ("share", 0.438)}


@pytest.mark.parametrize("dev, w", sorted(PAIRED))
def test_same_profile_on_vllm_and_hf_in_closed_form(dev, w):
    needs = [Need("model", "m", "vllm", "bfloat16", w), Need("model", "m", "hf", "bfloat16", w)]
    vllm_min, copy = w + OVERHEAD + MIN_KV, w + 0.2 * w + 1.0
    if PAIRED[dev, w] is None:
        assert vllm_min > 0.9 * dev or copy > 0.9 * dev
        with pytest.raises(DevicePlanError, match=rf"do not fit even alone on 1 device\(s\) of {dev:.1f} GiB"):
            plan_devices(needs, dev)
        return
    mode, util = PAIRED[dev, w]
    assert mode == ("share" if vllm_min + copy <= 0.9 * dev else "swap")
    assert util == (round((0.9 * dev - copy) / dev, 3) if mode == "share" else 0.9)
    phase = plan_devices(needs, dev).phases[0]
    vllm, hf = phase.engines
    assert phase.mode == mode and hf.backend == "hf" and hf.need_gib == pytest.approx(copy)
    assert (vllm.gpu_memory_utilization, vllm.sleep) == (util, mode == "swap")
    assert vllm.kv_gib == pytest.approx(dev * util - w - OVERHEAD) and vllm.kv_gib >= MIN_KV
    opts = engine_options(plan_devices(needs, dev), "m", "vllm", "bfloat16")
    assert opts == {"gpu_memory_utilization": util, **({"enable_sleep_mode": True} if mode == "swap" else {})}


def test_cpu_holds_everything_at_once():
    plan = plan_devices(council() + [Need("big", "llama-3.1-70b-instruct", "vllm", "bfloat16", 131.5)], None)
    assert plan.mode == "cpu" and plan.device_gib is None and all(p.mode == "cpu" for p in plan.phases)
    assert len(plan.phases[0].engines) == 5 and all(e.gpu_memory_utilization is None for e in plan.phases[0].engines)
    assert engine_options(plan, "qwen3.5-9b", "vllm", "bfloat16") == {}


def test_openai_engines_hold_nothing():
    remote = Need("seat_b", "llama-3.1-70b-instruct", "openai", "bfloat16", 0.0)
    plan = plan_devices([Need("seat_a", "llama-3.1-8b-instruct", "vllm", "bfloat16", LLAMA8), remote], H100)
    local, far = plan.phases[0].engines
    assert plan.mode == "share" and far.need_gib == 0 and far.gpu_memory_utilization is None
    assert local.gpu_memory_utilization == 0.9   # the whole device is the local engine's
    assert engine_options(plan, remote.profile, "openai", "bfloat16") == {}


def test_to_dict_is_json_and_user_options_win():
    plan = plan_devices(council(), H100)
    d = json.loads(json.dumps(plan.to_dict()))
    assert d["mode"] == "swap" and d["phases"][0]["engines"][0]["roles"] == ["seat_a", "judge"]
    assert d["phases"][0]["engines"][0]["name"] == "llama-3.1-8b-instruct/vllm/bfloat16"
    kw = {"gpu_memory_utilization": 0.5}
    for k, v in engine_options(plan, "qwen3.5-9b", "vllm", "bfloat16").items():
        kw.setdefault(k, v)
    assert kw == {"gpu_memory_utilization": 0.5, "enable_sleep_mode": True}


def test_needs_gib_reads_the_embedded_folder_and_names_a_missing_one(monkeypatch, tmp_path):
    from chorus.serving.profiles import get_profile

    prof = get_profile(EMBEDDED)
    path = prof.require()
    assert needs_gib(EMBEDDED, "bfloat16") == weights_gib(path, "bfloat16") > 0.2
    monkeypatch.setenv(prof.env_var, str(tmp_path / "gone"))
    with pytest.raises(DevicePlanError, match=rf"{EMBEDDED}.*gone"):
        needs_gib(EMBEDDED, "bfloat16")


def test_bad_needs_are_one_clear_error():
    with pytest.raises(DevicePlanError, match="need_gib"):
        plan_devices([Need("trainer", "m", "trainer", "bfloat16", 15.0)], H100)
    with pytest.raises(DevicePlanError, match="backend must be"):
        plan_devices([Need("x", "m", "tgi", "bfloat16", 15.0)], H100)
