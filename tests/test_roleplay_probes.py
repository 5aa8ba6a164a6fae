"""The mechanism probes: the memory ablation (exact prompt text, config validation, the setups'
wiring), the on-topic rate by round by hand, the probes' grouping and missing-run naming on
constructed runs, and ``chorus roleplay probes`` over the session's run and a real ablated run."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from typer.testing import CliRunner

from conftest import roleplay_e2e_cfg
from chorus.cli import app
from chorus.core.runs import RunDir
from chorus.simulate.roleplay import mechanism_probes as PR
from chorus.simulate.roleplay.data import parse_group
from chorus.simulate.roleplay.agent_memory import ablated, build_memory
from chorus.simulate.roleplay.metrics import on_topic_by_round, on_topic_change
from chorus.simulate.roleplay.prompts import load_prompts, render

runner = CliRunner()


# -- memory ablation: exact text ------------------------------------------------------------------
def _group():
    """Four participants, two rounds (p1-p2 / p3-p4, then p1-p3 / p2-p4), two utterances a chat."""
    parts = [{"id": p, "demographics": {"age": 30 + i}, "initial": {"text": f"init {p}", "stance": 5},
              "final": {"text": f"final {p}", "stance": 4}} for i, p in enumerate(["p1", "p2", "p3", "p4"])]
    rounds = []
    for r, pairs in enumerate([[("p1", "p2"), ("p3", "p4")], [("p1", "p3"), ("p2", "p4")]], start=1):
        rounds.append({"tweets": {p: f"post {p} r{r}" for p in ["p1", "p2", "p3", "p4"]},
                       "chats": [{"a": a, "b": b, "utterances": [{"speaker": a, "text": f"{a} to {b} r{r}"},
                                                                 {"speaker": b, "text": f"{b} to {a} r{r}"}]}
                                 for a, b in pairs]})
    return parse_group({"group_id": "g", "topic": "Angels are real.", "truth_framed": False,
                        "split": {"group": "test", "topic": "test"}, "participants": parts, "rounds": rounds}, "x")


def _user(mem) -> str:
    return render(mem, load_prompts())[1]["content"]


def test_memory_renders_in_full_without_ablation():
    P = load_prompts()
    m = build_memory(_group(), "p1", ("tweet", 1, None))
    assert _user(m) == "\n\n".join([
        P["task"].format(topic="Angels are real."),
        'Your initial private opinion: "init p1" (slider: 5 of 6).',
        'Round 1 (your chat partner: Participant 2):\n'
        '  Your post: "post p1 r1"\n'
        '  Participant 2\'s post: "post p2 r1"\n'
        '  You: "p1 to p2 r1"\n'
        '  Participant 2: "p2 to p1 r1"',
        P["ask_tweet"].format(r=2)])
    assert build_memory(_group(), "p1", ("tweet", 1, None), ()) == m      # no ablation: the same memory


def test_memory_ablation_drops_the_initial_opinion_and_own_first_post():
    P = load_prompts()
    both = ["initial_opinion", "first_tweet"]
    m = build_memory(_group(), "p1", ("chat", 1, 1), both)
    assert _user(m) == "\n\n".join([
        P["task"].format(topic="Angels are real."),
        'Round 1 (your chat partner: Participant 2):\n'         # own round-1 post gone, the partner's kept
        '  Participant 2\'s post: "post p2 r1"\n'
        '  You: "p1 to p2 r1"\n'
        '  Participant 2: "p2 to p1 r1"',
        'Round 2 (your chat partner: Participant 3):\n'         # later posts stay
        '  Your post: "post p1 r2"\n'
        '  Participant 3\'s post: "post p3 r2"\n'
        '  You: "p1 to p3 r2"',
        P["ask_chat"].format(partner="Participant 3")])
    assert m.texts()[:2] == ["post p2 r1", "p1 to p2 r1"] and m.initial_stance is None
    # one component at a time; the first post of the group, before any round: only the task is left
    only = _user(build_memory(_group(), "p1", ("tweet", 1, None), ["initial_opinion"]))
    assert "init p1" not in only and "(slider:" not in only and '  Your post: "post p1 r1"' in only
    only = _user(build_memory(_group(), "p1", ("tweet", 1, None), ["first_tweet"]))
    assert 'Your initial private opinion: "init p1"' in only and "post p1 r1" not in only
    first = build_memory(_group(), "p2", ("tweet", 0, None), both)
    assert _user(first) == "\n\n".join([P["task"].format(topic="Angels are real."), P["ask_tweet"].format(r=1)])
    full = build_memory(_group(), "p1", ("final", None, None))
    assert ablated(full, both).initial_text is None and full.initial_text == "init p1"   # a copy
    with pytest.raises(ValueError, match="unknown memory component"):
        ablated(full, ["first_post"])


def test_memory_ablate_config_is_validated_and_recorded():
    from chorus.core.config import ConfigError
    from chorus.simulate.roleplay.config import RoleplayConfig, load
    assert RoleplayConfig().memory.ablate == []
    assert load("smoke", RoleplayConfig, {"memory.ablate": ["first_tweet"]}).memory.ablate == ["first_tweet"]
    with pytest.raises(ConfigError, match=r"memory\.ablate.*unknown memory component\(s\) \['opinion'\]"):
        load("smoke", RoleplayConfig, {"memory.ablate": ["opinion"]})
    r = runner.invoke(app, ["roleplay", "run", "smoke", "--set", "memory.ablate=[first_post]"])
    assert r.exit_code == 2 and "unknown memory component(s) ['first_post']; choose from initial_opinion, first_tweet" \
        in " ".join(r.output.split())


def test_simulate_passes_the_ablation_to_every_prompt():
    from chorus.simulate.roleplay.setups import simulate
    seen = []

    class Echo:   # a stand-in engine: records the prompts, answers with a fixed text
        def chat(self, convs, **kw):
            seen.extend(c[1]["content"] for c in convs)
            return [SimpleNamespace(text="ok", prompt_tokens=1, completion_tokens=1, finish_reason="stop",
                                    cached=False) for _ in convs]
    g = _group()
    simulate(Echo(), [g], "next_message", load_prompts(), source="m", seed=0, temperature=0.7, top_p=1.0,
             max_tokens=4, memory_ablate=["initial_opinion", "first_tweet"])
    assert seen and not any("init p" in u or "Your initial private opinion" in u for u in seen)
    assert not any(f'Your post: "post {p} r1"' in u for u in seen for p in ("p1", "p2", "p3", "p4"))
    seen.clear()
    simulate(Echo(), [g], "next_message", load_prompts(), source="m", seed=0, temperature=0.7, top_p=1.0, max_tokens=4)
    assert all("Your initial private opinion" in u for u in seen)


# -- on-topic rate by round, by hand ----------------------------------------------------------------
def test_on_topic_by_round_by_hand():
    rows = [("human", "human", 1, True), ("human", "human", 1, True), ("human", "human", 1, False),
            ("human", "human", 3, True), ("human", "human", 3, False), ("human", "human", 3, None),   # unparsed
            ("base", "full_dynamics", 1, True), ("base", "full_dynamics", 1, True),
            ("base", "full_dynamics", 2, False), ("base", "full_dynamics", 3, False), ("base", "full_dynamics", 3, True)]
    lab = pd.DataFrame([{"source": s, "setup": st, "kind": "tweet", "round": r, "text": "t", "on_topic": o}
                        for s, st, r, o in rows]
                       + [{"source": "human", "setup": "human", "kind": "final", "round": 4, "text": "f", "on_topic": False},
                          {"source": "degroot", "setup": "rollout", "kind": "tweet", "round": 1, "text": None,
                           "on_topic": None}])
    t = on_topic_by_round(lab).set_index(["source", "round"])
    assert t.loc[("human", 1), "on_topic_rate"] == pytest.approx(2 / 3)
    assert (t.loc[("human", 3), "n_posts"], t.loc[("human", 3), "n_labelled"]) == (3, 2)
    assert t.loc[("human", 3), "on_topic_rate"] == pytest.approx(1 / 2)
    assert "degroot" not in t.index.get_level_values("source")        # no texts, no rate
    c = on_topic_change(on_topic_by_round(lab))
    assert c["human/human"]["change"] == pytest.approx(1 / 2 - 2 / 3)
    assert (c["base/full_dynamics"]["first_round"], c["base/full_dynamics"]["last_round"]) == (1, 3)
    assert c["base/full_dynamics"]["change"] == pytest.approx(0.5 - 1.0)


# -- the probes' grouping, on constructed runs ---------------------------------------------------------
def _cfg(**upd) -> dict:
    from chorus.simulate.roleplay.config import RoleplayConfig
    d = RoleplayConfig().model_dump(mode="json")
    for k, v in upd.items():
        a, b = k.split("__")
        d[a][b] = v
    return d


def _summary(tweet: float, private: float) -> dict:
    cell = lambda m: {"delta_sd": {"mean": m, "lo": m - 0.1, "hi": m + 0.1}}   # noqa: E731
    return {"n_groups": 2, "cells": {"base/full_dynamics/public": cell(tweet), "base/full_dynamics/private": cell(private),
                                     "degroot/rollout/public": cell(0.0), "degroot/rollout/private": cell(0.0)},
            "human": {"public": cell(-0.1), "private": cell(-0.2)}}


def _ot(h1: float, h3: float, m1: float, m3: float) -> pd.DataFrame:
    return pd.DataFrame([{"source": s, "setup": st, "round": r, "n_posts": 4, "n_labelled": 4, "on_topic_rate": v}
                         for s, st, r, v in [("human", "human", 1, h1), ("human", "human", 3, h3),
                                             ("base", "full_dynamics", 1, m1), ("base", "full_dynamics", 3, m3)]])


def _prun(name: str, cfg: dict, summary: dict, ot: pd.DataFrame) -> PR.ProbeRun:
    return PR.ProbeRun(Path(f"/runs/{name}"), cfg, {"prompts": {"sha256": "x"}, "versions": {"chorus": "1"}}, "sha",
                       summary, ot)


def test_probes_group_runs_by_temperature_and_memory():
    base = _prun("base", _cfg(), _summary(-0.32, -0.40), _ot(0.9, 0.89, 0.8, 0.77))
    t0 = _prun("t0", _cfg(generation__temperature=0.0), _summary(-0.30, -0.33), _ot(0.9, 0.89, 0.7, 0.7))
    abl = _prun("abl", _cfg(memory__ablate=["initial_opinion", "first_tweet"]), _summary(-0.57, -0.59),
                _ot(0.9, 0.89, 0.6, 0.5))
    runs = [base, t0, abl]
    PR.check_probes(runs)
    t = PR.temperature_probe(runs)
    assert list(t["condition"]) == ["T=0", "default"] and list(t["run"]) == ["/runs/t0", "/runs/base"]
    assert list(t["tweet_delta_sd"]) == [-0.30, -0.32] and list(t["private_delta_sd"]) == [-0.33, -0.40]
    assert (t["source"] == "base").all()                                # DeGroot does not depend on decoding
    m = PR.memory_probe(runs)
    assert list(m["condition"]) == ["full memory", "without initial_opinion + first_tweet"]
    assert list(m["run"]) == ["/runs/base", "/runs/abl"] and m["private_delta_sd"].iloc[1] == -0.59
    o = PR.on_topic_probe(runs)
    assert list(o["source"]) == ["human", "base", "base", "base"]      # the humans once, from the baseline
    assert o["change"].iloc[0] == pytest.approx(-0.01) and o["change"].iloc[1] == pytest.approx(-0.03)
    assert o["run"].iloc[3] == "/runs/abl" and o["condition"].iloc[3] == "default, without initial_opinion + first_tweet"
    miss = PR.missing(runs)
    assert [x["probe"] for x in miss] == ["temperature"]
    assert miss[0]["command"] == "chorus roleplay run /runs/base/config.yaml --set generation.temperature=1"
    miss = PR.missing([base])
    cmds = [x["command"] for x in miss]
    assert "chorus roleplay run /runs/base/config.yaml --set generation.temperature=0" in cmds
    assert "chorus roleplay run /runs/base/config.yaml --set 'memory.ablate=[initial_opinion,first_tweet]'" in cmds
    assert len(miss) == 3                                               # T=0, T=1, ablated (full memory is there)


def test_probes_refuse_other_differences_in_one_line():
    base = _prun("base", _cfg(), _summary(-0.3, -0.4), _ot(1, 1, 1, 1))
    other = _prun("seed", {**_cfg(), "seed": 3}, _summary(-0.3, -0.4), _ot(1, 1, 1, 1))
    with pytest.raises(PR.ProbesInputError, match=r"/runs/seed differs from the baseline /runs/base in seed: 0 -> 3"):
        PR.check_probes([base, other])
    renamed = _prun("renamed", {**_cfg(), "name": "x"}, _summary(-0.3, -0.4), _ot(1, 1, 1, 1))
    with pytest.raises(PR.ProbesInputError, match="same probe cell"):
        PR.check_probes([base, renamed])


# -- the verb over the session's run and one real ablated run -----------------------------------------------
def _copy_as(src: Path, dst: Path, old: str, new: str) -> Path:
    """A copy of a run with one config line changed, sealed as its own (no model call)."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".lock"))
    cfg = (dst / "config.yaml").read_text()
    assert cfg.count(old) == 1
    (dst / "config.yaml").write_text(cfg.replace(old, new))
    RunDir(dst).seal()
    return dst


def test_run_roleplay_hands_the_config_ablation_to_the_setups(tmp_path, monkeypatch):
    """The wiring config -> simulate, without a model: the first setup call is caught."""
    from chorus.simulate.roleplay import setups
    from chorus.simulate.roleplay.experiment import run_roleplay
    got = {}

    class Caught(Exception):
        pass

    def catch(*a, **kw):
        got.update(kw)
        raise Caught   # stop the run here: nothing after it is under test
    monkeypatch.setattr(setups, "simulate", catch)
    cfg = roleplay_e2e_cfg().model_copy(deep=True)
    cfg.memory.ablate = ["initial_opinion", "first_tweet"]
    with pytest.raises(Caught):
        run_roleplay(cfg, tmp_path / "r", engines={"base": SimpleNamespace(store="here")}, make_plots=False)
    assert got["memory_ablate"] == ["initial_opinion", "first_tweet"]
    assert "ablate:\n  - initial_opinion\n  - first_tweet" in (tmp_path / "r" / "config.yaml").read_text()


@pytest.mark.slow
def test_probes_verb_over_the_session_run(roleplay_run, tmp_path):
    """The session's run as the baseline and two sealed copies standing in for the T=0 and the
    ablated runs (their numbers are the baseline's: the grouping and naming are under test)."""
    path, _, s_base = roleplay_run
    t0 = _copy_as(path, tmp_path / "t0", "temperature: 0.7", "temperature: 0.0")
    abl = _copy_as(path, tmp_path / "abl", "ablate: []", "ablate: [initial_opinion, first_tweet]")
    r = runner.invoke(app, ["roleplay", "probes", str(path), str(t0), str(abl), "--out", str(tmp_path / "pr")])
    assert r.exit_code == 0, r.output
    p = json.loads((tmp_path / "pr" / "summary.json").read_text())
    t = pd.DataFrame(p["temperature"]).query("setup == 'full_dynamics'")
    assert list(t["condition"]) == ["T=0", "default"] and list(t["run"]) == [str(t0), str(path)]
    fd = s_base["cells"]["base/full_dynamics/public"]["delta_sd"]["mean"]
    assert t["tweet_delta_sd"].iloc[1] == pytest.approx(fd, nan_ok=True)     # the run's own cell
    m = pd.DataFrame(p["memory"]).query("setup == 'full_dynamics'")
    assert list(m["condition"]) == ["full memory", "without initial_opinion + first_tweet"]
    assert list(m["run"]) == [str(path), str(abl)]
    o = pd.DataFrame(p["on_topic"])
    assert o.query("source == 'human'")["run"].tolist() == [str(path)]
    assert o.query("source == 'human'")["change"].iloc[0] == pytest.approx(
        s_base["on_topic_by_round"]["human/human"]["change"], nan_ok=True)
    flat = " ".join(r.output.split())
    assert "missing temperature: no run at generation.temperature=1" in flat
    assert f"chorus roleplay run {path / 'config.yaml'} --set generation.temperature=1" in flat
    for f in ("probes.md", "tables/temperature.parquet", "tables/memory.parquet", "tables/on_topic.parquet",
              "plots/probes.png"):
        assert (tmp_path / "pr" / f).stat().st_size > 0
    assert (tmp_path / "pr" / "probes.md").read_text().startswith("# Role-play mechanism probes")

    # the baseline alone: every other cell is named with its command, printed as written
    r = runner.invoke(app, ["roleplay", "probes", str(path), "--out", str(tmp_path / "alone"), "--no-plots"])
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    assert f"run: chorus roleplay run {path / 'config.yaml'} --set 'memory.ablate=[initial_opinion,first_tweet]'" in flat
    assert "--set generation.temperature=0" in flat and not (tmp_path / "alone" / "plots" / "probes.png").exists()

    # the run's on-topic table went into its tables too (only added keys)
    assert set(RunDir(path).read_table("on_topic_by_round")["round"]) == {1, 2, 3}

    # bad input: one line, exit 2
    r = runner.invoke(app, ["roleplay", "probes", str(tmp_path), "--out", str(tmp_path / "bad")])
    assert r.exit_code == 2 and "not a chorus run directory" in r.output
    seed = _copy_as(path, tmp_path / "seed", "seed: 0", "seed: 1")
    r = runner.invoke(app, ["roleplay", "probes", str(path), str(seed), "--out", str(tmp_path / "bad2")])
    assert r.exit_code == 2 and "differs from the baseline" in r.output and "in seed: 0 -> 1" in " ".join(r.output.split())
    assert not (tmp_path / "bad2").exists()
