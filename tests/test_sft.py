"""The next-message SFT set and a few TRL steps on the embedded model: loss decreases and the
merged LoRA model loads as a serving profile."""
from __future__ import annotations

import pytest
from conftest import EMBEDDED

from chorus.simulate.roleplay.data import FIXTURE, golden_mask, load_groups, select_split
from chorus.simulate.roleplay.prompts import load_prompts
from chorus.simulate.roleplay.sft import filter_on_topic, sft_examples


def test_sft_set_is_memory_and_human_target():
    kept, _ = golden_mask(load_groups(FIXTURE))
    train = select_split(kept, "group", "train")
    ex = sft_examples(train[:1], load_prompts(), ["tweet", "chat", "final"])
    assert len(ex) == 12 + 24 + 4
    g = train[0]
    e = [x for x in ex if x["kind"] == "chat" and x["round"] == 2 and x["k"] == 1][0]
    c = g.rounds[1].chats[[c.a for c in g.rounds[1].chats].index("p1")]
    assert e["completion"] == [{"role": "assistant", "content": c.utterances[1].text}]
    assert e["participant"] == c.utterances[1].speaker
    assert c.utterances[0].text in e["prompt"][1]["content"]          # earlier utterance is context
    assert c.utterances[1].text not in e["prompt"][1]["content"]      # the target never is
    assert [x["kind"] for x in sft_examples(train[:1], load_prompts(), ["final"])] == ["final"] * 4


def test_on_topic_filter():
    mk = lambda t, lab: {"topic": "T", "completion": [{"role": "assistant", "content": t}], "label": lab}
    ex = [mk("a", True), mk("b", False), mk("c", None), mk("d", None)]
    kept, n = filter_on_topic(ex, "labels")
    assert [x["completion"][0]["content"] for x in kept] == ["a", "c", "d"] and n["off_topic"] == 1
    kept, n = filter_on_topic(ex, "classifier", {("T", "c"): False})
    assert [x["completion"][0]["content"] for x in kept] == ["a"]
    assert n == {"off_topic": 2, "unlabelled_kept": 0, "unparsed_dropped": 1}
    assert len(filter_on_topic(ex, "none")[0]) == 4


@pytest.mark.slow
def test_sft_smoke_trains_releases_the_trainer_then_compares(tmp_path, monkeypatch):
    """``chorus sft train smoke --set compare=smoke`` as train_sft runs it, the comparison cut to one
    group and one setup (the whole smoke comparison takes minutes on CPU): the loss falls, the merged
    LoRA model is a profile, the trainer is gone (and the device cache emptied) before the comparison's
    first engine loads, and the comparison holds base and SFT results. Real components; only hooks record."""
    import gc
    import json

    import yaml

    import chorus.serving.roles
    import chorus.simulate.roleplay.sft as sft
    from chorus.serving.profiles import get_profile
    from chorus.simulate.roleplay.config import RoleplayConfig, SftConfig, load
    from transformers import Trainer
    monkeypatch.setenv("CHORUS_MODELS_FILE", str(tmp_path / "models.yaml"))
    events = []
    # engines are opened there only (chorus.serving.roles opens every planned or specified role through it)
    free, open_engine = sft.free_device_memory, chorus.serving.roles.open_engine

    def recording_free(**kw):
        free(**kw)
        events.append("free")

    def recording_load(prof, *a, **kw):
        if "load" not in {e[0] for e in events if isinstance(e, tuple)}:   # the first comparison engine
            gc.collect()
            events.append(("trainers alive", sum(issubclass(type(o), Trainer) for o in gc.get_objects())))
        events.append(("load", prof.name, str(prof.path)))
        return open_engine(prof, *a, **kw)
    monkeypatch.setattr(sft, "free_device_memory", recording_free)
    monkeypatch.setattr(chorus.serving.roles, "open_engine", recording_load)
    smoke = load("smoke", RoleplayConfig, {"data.limit": 1, "data.train_limit": 1, "setups": ["next_message"],
                                           "generation.max_tokens": 4, "generation.max_utterances": 1,
                                           "analysis.n_boot": 20})
    (tmp_path / "compare.yaml").write_text(yaml.safe_dump(smoke.model_dump(mode="json")))
    # two short examples (round-1 posts), the same batch each step: the loss must fall
    cfg = load("smoke", SftConfig, {"data.limit": 2, "data.kinds": ["tweet"], "training.max_steps": 3,
                                    "training.learning_rate": 2e-3, "training.per_device_batch_size": 2,
                                    "register_as": "sft-smoke-test", "compare": str(tmp_path / "compare.yaml")},
               part="sft")
    run, s = sft.train_sft(cfg, tmp_path / "sft")
    log = run.read_table("train_log")
    assert len(log) == 3 and s["global_steps"] == 3 and s["n_examples"] == 2
    assert log["loss"].iloc[-1] < log["loss"].iloc[0]
    assert s["lora"] and (tmp_path / "sft" / "adapter" / "adapter_config.json").is_file()
    model_dir = (tmp_path / "sft" / "model").resolve()
    assert s["model_path"] == str(model_dir)
    assert get_profile("sft-smoke-test").path == model_dir      # registered under its name
    # the estimate was made (CPU: fp32, against host RAM) and recorded in summary and provenance
    mem = s["memory_estimate"]
    assert mem["device"] == "host RAM (CPU training)" and mem["fits"] and 1.0 < mem["total_gib"] < mem["device_gib"]
    assert mem["estimate"]["settings"]["dtype"] == "float32" and mem["estimate"]["settings"]["lora_r"] == 8
    assert json.loads((run.path / "provenance.json").read_text())["memory_estimate"] == mem
    plan = json.loads((run.path / "provenance.json").read_text())["device_plan"]   # the planner's, phase "train"
    assert plan["mode"] == "cpu" and [(p["name"], p["engines"][0]["roles"]) for p in plan["phases"]] == [("train", ["trainer"])]
    # released, then the comparison: no trainer left when its first engine loads
    assert s["released_before_compare"] == {"model_freed": True, "optimizer_freed": True}
    loads = [e for e in events if isinstance(e, tuple) and e[0] == "load"]
    assert events[:2] == ["free", ("trainers alive", 0)] and events[2] == loads[0] and loads[0][1] == EMBEDDED
    assert any(str(model_dir) in (name, path) for _, name, path in loads)
    from chorus.simulate.roleplay.experiment import RunDir
    cmp = RunDir(s["compare_run"])
    assert cmp.path == (tmp_path / "sft" / "compare") and cmp.provenance()["finished"]
    assert [p["name"] for p in cmp.provenance()["device_plan"]["phases"]] == ["base", "sft", "classifier"]  # its own
    m = cmp.read_table("messages")
    sizes = m.groupby(["source", "setup"]).size().to_dict()
    assert set(sizes) == {("base", "next_message"), ("sft", "next_message"), ("human", "human")}
    assert sizes[("base", "next_message")] == sizes[("sft", "next_message")] == sizes[("human", "human")]
    cells = cmp.summary()["cells"]
    assert {f"{a}/next_message/{ch}" for a in ("base", "sft") for ch in ("public", "private")} <= set(cells)
    assert cmp.provenance()["models"]["sft"]["weights_sha256"] != cmp.provenance()["models"]["base"]["weights_sha256"]
