"""Full-dynamics and next-message runs end to end on the SYNTHETIC fixture with the embedded model,
the resumable store, ``roleplay recompute`` from the run's files, and the CLI's bad-input errors."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import roleplay_e2e_cfg as _cfg
from chorus.cli import app
from chorus.simulate.roleplay.config import RoleplayConfig
from chorus.simulate.roleplay.data import FIXTURE, load_groups, to_record

runner = CliRunner()


@pytest.mark.slow
def test_both_setups_end_to_end(hf_engine, roleplay_run):
    from chorus.simulate.roleplay.experiment import run_roleplay
    out, run, s = roleplay_run   # the session's run (conftest): run_roleplay(_cfg(), out, engines={"base": hf_engine})
    m = run.read_table("messages")
    # one group: 4 initial + 3 x 4 posts + 3 x 2 chats x 1 utterance + 4 finals per source/setup
    assert m.groupby(["source", "setup"]).size().to_dict() == {
        ("base", "full_dynamics"): 26, ("base", "next_message"): 26, ("human", "human"): 26}
    sim = m[(m.source == "base") & (m.kind != "initial")]
    assert sim["completion_tokens"].notna().all() and (sim["completion_tokens"] <= 8).all()
    # the initial opinions are the humans' in both setups
    init = m[m.kind == "initial"].groupby("participant")["text"].nunique()
    assert (init == 1).all()
    # full dynamics and next message see different histories, so later posts differ somewhere
    fd = m[(m.setup == "full_dynamics") & (m.kind == "tweet") & (m["round"] == 3)]["text"].tolist()
    nm = m[(m.setup == "next_message") & (m.kind == "tweet") & (m["round"] == 3)]["text"].tolist()
    assert fd != nm
    assert set(s["cells"]) == {f"{a}/{ch}" for a in ("base/full_dynamics", "base/next_message", "degroot/rollout")
                               for ch in ("public", "private")}
    c = s["classifier"]
    assert c["n_texts"] > 0 and 0 <= c["stance_parse_rate"] <= 1 and 0 <= c["on_topic_parse_rate"] <= 1
    assert s["mask"] == {"n_excluded": 1, "excluded": ["SYNTH-A6-dropout"]}
    assert 0 <= s["degroot"]["alpha"] <= 1 and s["degroot"]["n_groups"] == 1
    lab = run.read_table("labels")
    assert lab["stance_raw"].between(1, 6).all() and lab["stance_raw"].nunique() > 1   # a continuous readout
    assert s["classifier"]["stance_readout"] == "expected"
    assert s["human"]["private"]["delta_sd"]["n"] == 1
    cell = s["cells"]["base/next_message/public"]
    for k in ("single_error", "update_error", "convergence_error", "delta_sd", "rouge_l", "semantic_similarity",
              "length_deviation"):
        assert k in cell
    assert -1 <= cell["semantic_similarity"]["mean"] <= 1
    assert s["synthetic_data"] and "SYNTHETIC" in s["data_note"] and s["note"]
    for p in ("sd_trajectories", "endpoint_distributions", "convergence"):
        assert (out / "plots" / f"{p}.png").stat().st_size > 0
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["models"]["base"]["profile"] == "smollm2-135m-instruct" and prov["prompts"]["sha256"]
    assert len(s["simulation"]) == 2 and all(x["n_steps"] == 3 * 2 + 1 for x in s["simulation"])

    # resumable: the same run again computes nothing (every call is in the run's store)
    run2, s2 = run_roleplay(_cfg(), out, engines={"base": hf_engine})
    b = run2.read_table("batches")
    assert (b["from_store"] == b["size"]).all()
    assert run2.read_table("messages")["text"].tolist() == m["text"].tolist()
    assert s2["cells"]["base/full_dynamics/private"]["single_error"]["mean"] == \
        s["cells"]["base/full_dynamics/private"]["single_error"]["mean"]

    # eval from the run directory's files
    r = runner.invoke(app, ["roleplay", "recompute", str(out), "--no-plots"])
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    assert "golden-group mask: 1 excluded" in flat and "stance parse rate" in flat


def test_cli_bad_config_fails_before_any_model_call(tmp_path):
    r = runner.invoke(app, ["roleplay", "run", "smoke", "--set", "generation.max_tokens=0", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "generation.max_tokens = 0" in r.output
    r = runner.invoke(app, ["roleplay", "run", "smoke", "--set", "models=[{label: human}]"])
    assert r.exit_code == 2 and "reserved" in r.output
    assert not (tmp_path / "x").exists()


def test_cli_bad_data_names_group_field_and_value(tmp_path):
    rec = to_record(load_groups(FIXTURE)[0])
    rec["participants"][1]["final"]["stance"] = 9
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps(rec) + "\n")
    r = runner.invoke(app, ["roleplay", "run", "smoke", "--set", f"data.path={p}", "--out", str(tmp_path / "y")])
    assert r.exit_code == 2
    assert "bad.jsonl:1 (group 'SYNTH-A1'): field participants[1].final.stance = 9 is off the 1-6" in " ".join(r.output.split())
    r = runner.invoke(app, ["roleplay", "recompute", str(tmp_path)])
    assert r.exit_code == 2 and "not a roleplay run directory" in r.output


def test_shipped_configs_validate():
    from chorus.simulate.roleplay.config import SftConfig, load
    for name in ("default", "smoke", "topic"):
        assert load(name, RoleplayConfig).models
    for name in ("default", "lora", "smoke"):
        c = load(name, SftConfig, part="sft")
        assert c.training.learning_rate > 0
    d = load("default", SftConfig, part="sft").training
    assert (d.epochs, d.learning_rate, d.per_device_batch_size, d.gradient_accumulation_steps) == (3, 5e-5, 4, 4)
