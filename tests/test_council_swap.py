"""Swap-in seats in a live council (issue 32): a condition seats another model or persona in one seat
for the same tasks. Config validation, the stand-in's engine and persona in that condition only,
who-sat-where in traces and provenance, the seat-r table (r0, r_hat) beside each arm; one real run
on the embedded models, resumed from its store."""
from __future__ import annotations

import json
import re

import pytest
import yaml
from conftest import Scripted

from chorus.core.config import ConfigError

SWAP = {"name": "swap-A3", "swap": {"A3": {"profile": "gemma3-270m", "persona": "analyst"}}}
SMOL = "smollm2-135m-instruct"


def _load(conditions, **over):
    from chorus.simulate.council.config import load
    return load("swap_tiny", {"conditions": conditions, **over})


# -- config ---------------------------------------------------------------------------------------
def test_swap_config_resolves_roles_and_names_bad_values():
    cfg = _load([{"name": "clean"}, SWAP, {"name": "short", "swap": {"A1": "gemma3-270m"}}])
    roles = cfg.roles()
    assert roles["A3@swap-A3"].profile == "gemma3-270m" and roles["A3"].profile == SMOL
    assert cfg.profiles() == [SMOL, "gemma3-270m"]   # each profile once: the stand-in's planned with the rest
    short = cfg.condition_seats(cfg.conditions[2])   # the shorthand keeps the replaced seat's persona
    assert (short[0].profile, short[0].persona) == ("gemma3-270m", "analyst")
    assert [s.profile for s in cfg.condition_seats(cfg.conditions[0])] == [SMOL] * 3
    # one line naming the field and the value
    bad = {"A9": ({"A9": {"profile": "gemma3-270m"}}, "swap seat 'A9' is not one of"),
           "nothing": ({"A1": {"persona": "analyst"}}, "swap of seat 'A1' changes nothing"),
           "engine": ({"A3": {"persona": "analyst", "backend": "vllm"}}, "roles 'A1' and 'A3@engine' would hold one"),
           "key": ({"A3": {"model": "x"}}, r"conditions\.0\.swap\.A3\.model")}
    for name, (swap, msg) in bad.items():
        with pytest.raises(ConfigError, match=msg):
            _load([{"name": name, "swap": swap}])
    with pytest.raises(ConfigError, match=r"swap seat 'A9'") as err:
        _load([{"name": "x", "swap": {"A9": "gemma3-270m"}}])
    assert "data" not in str(err.value)   # the conditions' line, not the whole config
    # a swapped seat may also be the adversary: the stand-in plays the role
    both = _load([{"name": "x", "adversaries": ["A3"], "swap": {"A3": "gemma3-270m"}}])
    assert "A3@x" in both.roles()


def test_device_plan_holds_the_stand_in():
    from chorus.simulate.council.experiment import plan_engines
    plan = plan_engines(_load([{"name": "clean"}, SWAP])).to_dict()
    roles = {e["profile"]: list(e["roles"]) for p in plan["phases"] for e in p["engines"]}
    assert roles["gemma3-270m"] == ["A3@swap-A3"]


def test_open_weight_commented_swaps_are_valid():
    """The commented swap conditions in open_weight.yaml load when uncommented (no drift)."""
    from chorus.simulate.council.config import CONFIGS_DIR, load
    text = (CONFIGS_DIR / "open_weight.yaml").read_text()
    extra = [yaml.safe_load(m)[0] for m in re.findall(r"^\s*#\s*(- \{name: swap-.*\})\s*$", text, re.M)]
    assert {c["name"] for c in extra} == {"swap-A3-weak", "swap-A3-chance"}
    base = load("open_weight")
    cfg = load("open_weight", {"conditions": [c.model_dump() for c in base.conditions] + extra})
    assert {cfg.roles()[f"A3@{c['name']}"].profile for c in extra} == {SMOL, "gemma3-270m"}


def test_unknown_swap_persona_fails_before_the_run(tmp_path):
    from chorus.simulate.council.experiment import run_council_experiment
    cfg = _load([{"name": "x", "swap": {"A3": {"persona": "nope"}}}])
    with pytest.raises(ConfigError, match=r"swap\.A3\.persona 'nope'"):
        run_council_experiment(cfg, tmp_path / "run", engines={})
    assert not (tmp_path / "run").exists()


# -- scripted seats: the stand-in's engine, persona and r --------------------------------------------
def _gold_aware(tasks, right: bool):
    """A seat that knows every gold (right) or always contradicts it: a reliable and an r = 0 model."""
    gold = {t.question: t.gold for t in tasks}

    def policy(me, kind, conv, schema):
        text = " ".join(m["content"] for m in conv)
        g = next(v for q, v in gold.items() if q in text)
        ans = g if right else ("false" if g == "true" else "true")
        if kind == "envelope":
            return {"answer": ans, "reasoning": "r", "evidence": "e", "confidence": "likely"}
        if kind == "move":
            return {"move": "propose", "target": "none", "answer": ans, "reason": "r"}
        return "an argument"
    return policy


def test_swap_condition_uses_the_stand_in_and_reports_seat_r(tmp_path):
    from chorus.aggregate.trace import load_traces
    from chorus.simulate.council.experiment import run_council_experiment, select_tasks

    conds = [{"name": "clean"}, SWAP, {"name": "swap-A3-attack", "adversaries": ["A3"], **{"swap": SWAP["swap"]}}]
    cfg = _load(conds, **{"data.0.n": 8, "baselines.methods": ["moa_lite", "moa"],
                          "aggregate.methods": ["plurality", "bda_per_agent"]})
    tasks = select_tasks(cfg)[0][1]
    smol, gem = Scripted(_gold_aware(tasks, True)), Scripted(_gold_aware(tasks, False))
    run, summary = run_council_experiment(cfg, tmp_path / "run", engines={SMOL: smol, "gemma3-270m": gem},
                                          make_plots=False)
    turns = run.read_table("turns")
    swapped = turns[turns["swapped"]]
    assert set(swapped["condition"]) == {"swap-A3", "swap-A3-attack"} and set(swapped["agent"]) == {"A3"}
    assert set(swapped["profile"]) == {"gemma3-270m"} and set(swapped["persona"]) == {"analyst"}
    assert set(turns[~turns["swapped"]]["profile"]) == {SMOL}
    # the stand-in's persona, not the replaced skeptic's, in every gemma prompt (MoA's second layer too)
    assert gem.seen and all("skeptical" not in conv[0]["content"] for conv in gem.seen)
    assert len(gem.seen) == 2 * 8 * 3 + 2 * 8   # 2 conditions x 8 tasks x 3 rounds, + MoA's layer
    # who sat where: the trace (only a swapped one carries it) and the provenance
    sw = load_traces(run.path / "traces" / "truthfulqa_claims__swap-A3.jsonl")
    assert all(t.extra["swapped"] == {"A3": {"profile": "gemma3-270m", "persona": "analyst"}} for t in sw)
    clean = load_traces(run.path / "traces" / "truthfulqa_claims__clean.jsonl")
    assert all("swapped" not in t.extra for t in clean)
    prov = json.loads((run.path / "provenance.json").read_text())
    assert {(s["condition"], s["agent"], s["profile"]) for s in prov["swaps"]} == \
        {("swap-A3", "A3", "gemma3-270m"), ("swap-A3-attack", "A3", "gemma3-270m")}
    assert summary["swaps"]["swap-A3"] == {"A3": "gemma3-270m/analyst"}
    # the seat-r table: A3 is always right in clean and always wrong as the stand-in
    seats = run.read_table("seats").set_index(["condition", "agent"])
    assert seats.loc[("clean", "A3"), "r0_accuracy"] == 1.0 and seats.loc[("clean", "A3"), "r_estimated"] == 1.0
    assert seats.loc[("swap-A3", "A3"), "r0_accuracy"] == 0.0 and seats.loc[("swap-A3", "A3"), "r_estimated"] == 0.0
    assert seats.loc[("swap-A3", "A1"), "r0_accuracy"] == 1.0 and bool(seats.loc[("swap-A3", "A3"), "swapped"])
    md = (run.path / "results.md").read_text()
    assert "## Swapped seats: seat reliability and each arm per condition" in md
    assert "| swap-A3 | A3 | gemma3-270m | analyst | yes |  | 0.000 | 8 | 0.000 |" in md
    assert re.search(r"\| plurality \| 1\.000 \| [\d.]+ \| 1\.000 \| [\d.]+ \| 1\.000 \|", md)  # 2 of 3 still right
    # the compliance control of an attacked swap: the unattacked condition with the same stand-in
    ctrl = summary["cells"]["truthfulqa_claims__swap-A3-attack"]["compliance_same_seats_clean"]
    assert ctrl["anti_correct_r0"] == 1.0


# -- the embedded models ----------------------------------------------------------------------------
@pytest.mark.slow
def test_real_swap_council_and_resume(tmp_path, monkeypatch):
    """gemma-3-270m sits in A3 of an all-SmolLM2 council for the swap condition only; the rerun with
    the same --out computes nothing (the call store keyed as before)."""
    monkeypatch.setenv("CHORUS_TORCH_THREADS", "1")
    from chorus.simulate.council.config import load
    from chorus.simulate.council.experiment import run_council_experiment

    cfg = load("swap_tiny", {"data.0.n": 4, "rounds": 2, "generation.max_tokens": 48, "generation.max_chars": 40,
                             "generation.max_retries": 0,   # an illegal move abstains at once: the time budget
                             "baselines.methods": [], "aggregate.methods": ["plurality", "verbalized"]})
    run, summary = run_council_experiment(cfg, tmp_path / "run", make_plots=False)
    turns = run.read_table("turns")
    a3 = turns[turns["agent"] == "A3"].groupby("condition")["profile"].agg(set).to_dict()
    assert a3 == {"clean": {SMOL}, "swap-A3-gemma": {"gemma3-270m"}}
    assert set(turns[turns["agent"] != "A3"]["profile"]) == {SMOL}
    prov = json.loads((run.path / "provenance.json").read_text())
    assert [(s["agent"], s["profile"]) for s in prov["swaps"]] == [("A3", "gemma3-270m")]
    plan = {e["profile"]: list(e["roles"]) for p in prov["device_plan"]["phases"] for e in p["engines"]}
    assert plan["gemma3-270m"] == ["A3@swap-A3-gemma"]
    seats = run.read_table("seats")
    assert len(seats) == 2 * 3 and set(seats[seats["swapped"]]["profile"]) == {"gemma3-270m"}
    assert "## Swapped seats" in (run.path / "results.md").read_text()
    assert {"plurality", "verbalized"} <= set(run.read_table("results")["arm"])
    # killed and rerun: every call comes from the store, the traces are the same
    name = "traces/truthfulqa_claims__swap-A3-gemma.jsonl"
    before = (run.path / name).read_text()
    run2, _ = run_council_experiment(cfg, tmp_path / "run", make_plots=False, aggregate=False)
    assert int(run2.read_table("batches")["computed_new_tokens"].sum()) == 0
    assert (run2.path / name).read_text() == before
