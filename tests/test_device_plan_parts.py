"""Every part plans its engines with the one device planner (chorus.serving.plan) before any loads, and
records the plan (provenance ``device_plan``): the SFT trainer as a phase "train" (its need the
sft_memory estimate), debate, influence and the internals verbs through ``plan_roles``. Fast: sizes
are constructed, and where a run is entered, engine building is a double that records what it is
given and stops the run there (control flow only: no model is loaded, nothing is generated)."""
from __future__ import annotations

import json

import pytest
from conftest import EMBEDDED, hand_debate_run

from chorus.serving.plan import DevicePlanError, engine_options

LLAMA = "llama-3.1-8b-instruct"


def _recipe():
    from chorus.serving.dummy import published_config
    from chorus.simulate.roleplay.config import SftConfig, load
    from chorus.simulate.roleplay.sft_memory import settings_for
    return (published_config(LLAMA), settings_for(load("default", SftConfig, part="sft")),
            settings_for(load("lora", SftConfig, part="sft")))


# -- SFT: the trainer is a phase "train" of the planner ---------------------------------------------
def test_sft_paper_recipe_fits_80_gib_as_a_train_phase():
    from chorus.simulate.roleplay.sft_memory import plan_training
    cfg, full, lora = _recipe()
    est, plan = plan_training(cfg, full, "cuda:0 (test)", 80.0, lora=lora, profile=LLAMA)
    assert est.total_gib == pytest.approx(70.64, abs=0.01)   # bench/results/device-plans-h100.json
    (phase,) = plan.phases
    (eng,) = phase.engines
    assert (plan.mode, phase.name, phase.mode) == ("share", "train", "share")
    assert (eng.roles, eng.profile, eng.backend, eng.dtype) == (("trainer",), LLAMA, "trainer", "bfloat16")
    assert eng.need_gib == est.total_gib and eng.gpu_memory_utilization is None
    assert eng.weights_gib == pytest.approx(est.n_params * 2 / 1024 ** 3)
    assert json.loads(json.dumps(plan.to_dict()))["phases"][0]["engines"][0]["name"] == f"{LLAMA}/trainer/bfloat16"


def test_sft_without_checkpointing_is_refused_by_the_planner_naming_trainer_and_sizes():
    from dataclasses import replace

    from chorus.core.config import ConfigError
    from chorus.simulate.roleplay.sft_memory import SftMemoryError, plan_training
    cfg, full, lora = _recipe()
    with pytest.raises(DevicePlanError, match=r"phase 'train': role\(s\) trainer \(llama-3.1-8b-instruct on trainer, "
                                              r"bfloat16, weights 15.0 GiB, needs >= 132.5 GiB\) do not fit even alone "
                                              r"on 1 device\(s\) of 80.0 GiB \(72.0 usable") as err:
        plan_training(cfg, replace(full, gradient_checkpointing=False), "cuda:0 (test)", 80.0, lora=lora, profile=LLAMA)
    msg = str(err.value)
    assert "\n" not in msg and "(device cuda:0 (test))" in msg
    assert "activations 68.0" in msg      # the estimate's components, then what fits instead
    assert msg.endswith("instead with training.gradient_checkpointing=true: 70.6 GiB; the shipped LoRA config "
                        "(chorus sft train lora, simulate/roleplay/configs/sft/lora.yaml): 25.2 GiB")
    assert isinstance(err.value, SftMemoryError) and isinstance(err.value, ConfigError)   # the CLI's one-line exit


def test_sft_on_cpu_plans_mode_cpu_and_checks_host_ram():
    from chorus.simulate.roleplay.sft_memory import SftMemoryError, plan_training
    cfg, full, lora = _recipe()
    est, plan = plan_training(cfg, full, "host RAM (CPU training)", 1e6, cuda=False, lora=lora, profile=LLAMA)
    assert (plan.mode, plan.device_gib, plan.phases[0].name, plan.phases[0].engines[0].need_gib) == \
        ("cpu", None, "train", est.total_gib)
    with pytest.raises(SftMemoryError, match=r"does not fit host RAM \(CPU training\) \(64.0 GiB\).*70.6 GiB"):
        plan_training(cfg, full, "host RAM (CPU training)", 64.0, cuda=False, lora=lora, profile=LLAMA)


class _Stop(Exception):
    """Raised by a double where the run would go on to load or compute."""


def test_sft_run_writes_its_train_plan_before_any_model_loads(tmp_path, monkeypatch):
    import torch

    import chorus.simulate.roleplay.sft as sft
    from chorus.simulate.roleplay.config import SftConfig, load
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)   # the CPU plan, also on a GPU machine

    def stop(*a, **kw):
        raise _Stop
    monkeypatch.setattr(sft, "_on_topic_examples", stop)   # the first step after the run directory is made
    with pytest.raises(_Stop):
        sft.train_sft(load("smoke", SftConfig, part="sft"), tmp_path / "sft")
    prov = json.loads((tmp_path / "sft" / "provenance.json").read_text())
    plan, mem = prov["device_plan"], prov["memory_estimate"]
    assert plan["mode"] == "cpu" and [p["name"] for p in plan["phases"]] == ["train"]
    (eng,) = plan["phases"][0]["engines"]
    assert (eng["roles"], eng["backend"], eng["profile"]) == (["trainer"], "trainer", EMBEDDED)
    assert eng["need_gib"] == pytest.approx(mem["total_gib"], abs=1e-3) and mem["fits"]


# -- debate, influence, internals: plan_roles before the engine loads -------------------------------
@pytest.fixture()
def built(monkeypatch):
    """``chorus.serving.build_engine`` replaced by a double that records its call and stops the run; the
    device detected as none (the CPU plan) until a test sets ``built.device``."""
    from types import SimpleNamespace

    from chorus import serving
    import chorus.serving.memory
    out = SimpleNamespace(calls=[], device=None)
    monkeypatch.setattr(serving.memory, "device_gib", lambda: out.device)

    def double(spec, **kw):
        out.calls.append({"spec": spec, **kw})
        raise _Stop
    monkeypatch.setattr(serving, "build_engine", double)
    return out


def _bench(tmp_path):
    from chorus.simulate.debate.questions import validate_item, write_bench
    path = tmp_path / "bench.jsonl"
    write_bench([validate_item({"id": "t1", "domain": "knowledge", "subdomain": "toy", "family": "fa",
                                "question": "What is 2 + 2?", "options": ["3", "4", "5"], "reference": "B"})], path)
    return str(path)


def _items():
    from chorus.simulate.debate.questions import Item
    return [Item(id="q1", domain="knowledge", subdomain="test", family="f", question="Which city is the capital "
                 "of France?", options=["Paris", "Rome"], labels=["A", "B"], reference="A")]


def _plan_of(run_path, built):
    prov = json.loads((run_path / "provenance.json").read_text())
    (call,) = built.calls
    assert call["plan"] is not None and json.loads(json.dumps(call["plan"].to_dict())) == prov["device_plan"]  # the engine gets it
    return prov["device_plan"], call


def _engines(plan):
    return [(p["name"], e["roles"], e["backend"]) for p in plan["phases"] for e in p["engines"]]


def test_debate_run_records_its_plan_before_the_engine_loads(tmp_path, built):
    from chorus.simulate.debate.config import DebateConfig
    from chorus.simulate.debate.experiment import run_debate
    cfg = DebateConfig(name="plan", rounds=1, bench={"path": _bench(tmp_path)}, model={"profile": EMBEDDED, "backend": "hf"})
    with pytest.raises(_Stop):
        run_debate(cfg, tmp_path / "run")
    plan, call = _plan_of(tmp_path / "run", built)
    assert plan["mode"] == "cpu" and _engines(plan) == [("debate", ["model"], "hf")]
    assert call["store"] == tmp_path / "run" / "calls.sqlite"


def test_debate_on_a_gpu_gets_its_vllm_share_and_a_plan_that_cannot_fit_fails_before_the_run_directory(tmp_path, built):
    from chorus.simulate.debate.config import DebateConfig
    from chorus.simulate.debate.experiment import run_debate
    cfg = DebateConfig(name="plan", rounds=1, bench={"path": _bench(tmp_path)},
                       model={"profile": EMBEDDED, "backend": "vllm", "dtype": "float32"})
    built.device = 80.0   # sizes from the embedded model's safetensors headers
    with pytest.raises(_Stop):
        run_debate(cfg, tmp_path / "run")
    plan, call = _plan_of(tmp_path / "run", built)
    assert plan["mode"] == "share" and _engines(plan) == [("debate", ["model"], "vllm")]
    assert engine_options(call["plan"], EMBEDDED, "vllm", "float32") == {"gpu_memory_utilization": 0.9}
    built.device = 1.0    # weights + vLLM overhead + the least KV cache exceed 0.9 GiB
    with pytest.raises(DevicePlanError, match=r"role\(s\) model \(smollm2-135m-instruct on vllm"):
        run_debate(cfg, tmp_path / "small")
    assert not (tmp_path / "small").exists()


@pytest.mark.parametrize("verb", ["ablate", "cues"])
def test_influence_on_a_source_run_records_its_plan(tmp_path, built, verb):
    from chorus.interventions.config import InfluenceConfig
    from chorus.interventions.experiment import run_influence
    cfg = InfluenceConfig(name="plan", source_run=str(hand_debate_run(tmp_path, _items())),
                          model={"profile": EMBEDDED, "backend": "hf"})
    with pytest.raises(_Stop):
        run_influence(cfg, verb, tmp_path / verb)
    plan, _ = _plan_of(tmp_path / verb, built)
    assert plan["mode"] == "cpu" and _engines(plan) == [(verb, ["model"], "hf")]


def test_influence_readout_generates_and_reads_with_one_planned_engine(tmp_path, built):
    from chorus.interventions.config import InfluenceConfig
    from chorus.interventions.experiment import run_influence
    cfg = InfluenceConfig(name="plan", bench={"path": _bench(tmp_path)}, rounds=1,
                          model={"profile": EMBEDDED, "backend": "hf"})
    with pytest.raises(_Stop):
        run_influence(cfg, "readout", tmp_path / "readout")
    plan, _ = _plan_of(tmp_path / "readout", built)
    assert plan["mode"] == "cpu" and _engines(plan) == [("readout", ["model"], "hf")]


@pytest.mark.parametrize("verb", ["knockout", "patch", "probe"])
def test_internals_plan_transformers_for_the_receiver(tmp_path, built, verb):
    from chorus.interventions.internals.config import load
    from chorus.interventions.internals.experiment import run_internals
    cfg = load("internals_smoke", {"source_run": str(hand_debate_run(tmp_path, _items())), "model.backend": "auto"})
    with pytest.raises(_Stop):
        run_internals(cfg, verb, tmp_path / verb)
    plan, call = _plan_of(tmp_path / verb, built)
    assert plan["mode"] == "cpu" and _engines(plan) == [(verb, ["model"], "hf")]   # the weights: always hf
    assert call["spec"].backend == "hf"
    assert json.loads(json.dumps(plan))["phases"][0]["engines"][0]["dtype"] == "float32"


def test_internals_transfer_plans_its_own_sender_beside_the_receiver(tmp_path, built):
    from chorus.interventions.internals.config import load
    from chorus.interventions.internals.experiment import held_beside, run_internals
    src = str(hand_debate_run(tmp_path, _items()))
    cfg = load("internals_smoke", {"source_run": src, "transfer.sender": "gemma3-270m"})
    assert held_beside(cfg, "knockout") == {} and held_beside(cfg.model_copy(
        update={"transfer": cfg.transfer.model_copy(update={"sender": "same"})}), "transfer") == {}
    with pytest.raises(_Stop):
        run_internals(cfg, "transfer", tmp_path / "transfer")
    plan, _ = _plan_of(tmp_path / "transfer", built)
    (phase,) = plan["phases"]   # both held at once: one phase
    assert plan["mode"] == "cpu" and phase["name"] == "transfer"
    assert {(e["profile"], tuple(e["roles"]), e["backend"]) for e in phase["engines"]} == \
        {(EMBEDDED, ("model",), "hf"), ("gemma3-270m", ("sender",), "hf")}


def test_internals_transfer_refuses_a_sender_that_fits_only_alone(tmp_path, built):
    """Receiver and sender are held together: a plan that would swap them is refused, before the run
    directory (float32: 0.50 and 1.00 GiB of weights, 1.60 + 2.20 GiB with transformers' overhead)."""
    from chorus.interventions.internals.config import load
    from chorus.interventions.internals.experiment import run_internals
    cfg = load("internals_smoke", {"source_run": str(hand_debate_run(tmp_path, _items())), "transfer.sender": "gemma3-270m"})
    built.device = 3.0   # 2.7 GiB usable: each alone fits, both do not
    with pytest.raises(DevicePlanError, match=r"held together and do not fit: transfer: swap: .*3.8 GiB together"):
        run_internals(cfg, "transfer", tmp_path / "transfer")
    assert not (tmp_path / "transfer").exists() and not built.calls
    built.device = 8.0
    with pytest.raises(_Stop):
        run_internals(cfg, "transfer", tmp_path / "transfer")
    plan, _ = _plan_of(tmp_path / "transfer", built)
    from chorus.serving.plan import needs_gib
    hf = sorted(needs_gib(p, "float32") * 1.2 + 1 for p in (EMBEDDED, "gemma3-270m"))   # weights + 20% + 1 GiB
    assert plan["mode"] == "share" and sorted(e["need_gib"] for e in plan["phases"][0]["engines"]) == pytest.approx(hf)


def test_a_passed_engine_is_not_planned(tmp_path, built):
    """A caller's own engine (tests, rehearse) is the caller's to place: no plan, nothing built."""
    from chorus.interventions.experiment import start_run
    from chorus.interventions.config import InfluenceConfig

    class Eng:
        def provenance(self):
            return {"engine": "double"}
    cfg = InfluenceConfig(name="plan", source_run=str(hand_debate_run(tmp_path, _items())))
    run, eng, _ = start_run(cfg, "ablate", tmp_path / "run", Eng())
    assert isinstance(eng, Eng) and not built.calls and "device_plan" not in run.provenance()
