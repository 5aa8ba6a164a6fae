"""The next-message SFT set and a few TRL steps on the embedded model: loss decreases and the
merged LoRA model loads as a serving profile."""
from __future__ import annotations

import pytest

from simulate.roleplay.data import FIXTURE, golden_mask, load_groups, select_split
from simulate.roleplay.prompts import load_prompts
from simulate.roleplay.sft import filter_on_topic, sft_examples


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
def test_sft_smoke_loss_decreases_and_model_loads_as_profile(tmp_path, monkeypatch):
    from serving import load_engine
    from serving.profiles import get_profile
    from simulate.roleplay.config import SftConfig, load
    from simulate.roleplay.sft import train_sft
    monkeypatch.setenv("CHORUS_MODELS_FILE", str(tmp_path / "models.yaml"))
    # two short examples (round-1 posts), the same batch each step: the loss must fall
    cfg = load("smoke", SftConfig, {"data.limit": 2, "data.kinds": ["tweet"], "training.max_steps": 3,
                                    "training.learning_rate": 2e-3, "training.per_device_batch_size": 2,
                                    "register_as": "sft-smoke-test"}, part="sft")
    run, s = train_sft(cfg, tmp_path / "sft")
    log = run.read_table("train_log")
    assert len(log) == 3 and s["global_steps"] == 3 and s["n_examples"] == 2
    assert log["loss"].iloc[-1] < log["loss"].iloc[0]
    assert s["lora"] and (tmp_path / "sft" / "adapter" / "adapter_config.json").is_file()
    model_dir = tmp_path / "sft" / "model"
    assert s["model_path"] == str(model_dir.resolve())
    # the merged model is a plain model folder: a profile by path and by its registered name
    assert get_profile("sft-smoke-test").path == model_dir.resolve()
    eng = load_engine(str(model_dir), "hf", dtype="float32")
    out = eng.chat([[{"role": "user", "content": "Say hi."}]], temperature=0.0, max_tokens=4)
    assert out[0].completion_tokens >= 1
    assert eng.provenance()["weights_sha256"]
    eng.close()
