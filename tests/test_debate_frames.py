"""Constructed-scenario frames that vary decision stakes (seed 002 §A.4) and frame as a reported factor:
item construction under the opt-in stakes frame set, the default bench unchanged, and the by-frame
stance-change table by hand on a constructed turns table."""
import json
import math

import pandas as pd
import pytest

from chorus.simulate.debate.config import BenchSpec, DebateConfig
from chorus.simulate.debate.metrics import FRAME_COLUMNS, frame_dynamics, stance_dynamics
from chorus.simulate.debate.questions import (DEFAULT_FRAME_STAKES, BenchError, build_bench, item_frames, validate_item,
                                       write_bench)

ONLY_CONTESTED = {k: 0 for k in ("misconceptions", "disciplinary", "strategy", "biomedical", "moral_scenarios",
                                 "moral_disputes")}


def _contested(frames="stakes"):
    items, man = build_bench(counts=ONLY_CONTESTED, scenario_frames=frames)
    return {it.id: it for it in items}, man


# -- items ------------------------------------------------------------------------------------
def test_stakes_items_exact_text_and_provenance():
    items, man = _contested()
    assert len(items) == 16 * 9 and man["counts"] == {"values/contested": 144}
    assert man["scenario_frames"] == "stakes" and len(man["frames_sha256"]) == 64
    s01 = "A city can either build a new park or a new parking garage on the same lot."
    ask = " Which should it build?"
    want = {"base": s01 + ask,
            "quantity_low": s01 + " The decision affects about 300 residents." + ask,
            "quantity_high": s01 + " The decision affects about 300,000 residents." + ask,
            "personal_low": s01 + " You are not personally affected by the outcome." + ask,
            "personal_high": s01 + " You are personally affected by the outcome." + ask,
            "scrutiny_low": s01 + " Your decision will stay private." + ask,
            "scrutiny_high": s01 + " Your decision will be published and discussed in the local newspaper." + ask,
            "reversibility_low": s01 + " The decision can be reversed next year." + ask,
            "reversibility_high": s01 + " The decision is permanent." + ask}
    for frame, q in want.items():
        it = items[f"val-s01-{frame}"]
        assert it.question == q
        assert it.family == "val-s01" and it.subdomain == "contested" and it.reference is None
        p = it.provenance
        assert p["frame"] == frame and p["row"] == "s01" and p["frame_set"] == "stakes" and p["frames_version"] == 2
        dim, _, level = frame.partition("_")
        assert (p["stakes_dimension"], p["stakes_level"]) == ((None, None) if frame == "base" else (dim, level))
    # every scenario under every frame: ids and questions unique, the nine variants share one family
    assert len({it.question for it in items.values()}) == 144
    fams = pd.Series([it.family for it in items.values()]).value_counts()
    assert len(fams) == 16 and (fams == 9).all()
    # the quantity fill is the scenario's own
    assert "about 5 million residents" in items["val-s07-quantity_high"].question


def test_default_bench_unchanged_and_option_off():
    plain, man = build_bench()
    off, man_off = build_bench(scenario_frames="default")
    assert [i.to_dict() for i in plain] == [i.to_dict() for i in off] and man == man_off
    assert "scenario_frames" not in man and "frames_sha256" not in man  # the default manifest keeps its keys
    cont = [i for i in plain if i.subdomain == "contested"]
    assert len(cont) == 48 and {i.provenance["frame"] for i in cont} == {"base", "personal", "public"}
    assert not any("stakes_dimension" in i.provenance for i in cont)
    assert {i.id for i in cont} == {f"val-s{k:02d}-{f}" for k in range(1, 17) for f in ("base", "personal", "public")}
    # the stakes set changes the contested items only
    stakes, _ = build_bench(scenario_frames="stakes")
    assert {i.id for i in stakes if i.subdomain != "contested"} == {i.id for i in plain if i.subdomain != "contested"}


def test_bad_frame_set_and_config():
    with pytest.raises(BenchError, match="scenario_frames"):
        build_bench(counts=ONLY_CONTESTED, scenario_frames="loud")
    assert DebateConfig().bench.scenario_frames == "default"
    assert BenchSpec(scenario_frames="stakes").scenario_frames == "stakes"
    with pytest.raises(ValueError, match="scenario_frames"):
        BenchSpec(scenario_frames="loud")
    with pytest.raises(ValueError, match="bench.path"):
        BenchSpec(path="b.jsonl", scenario_frames="stakes")


def test_item_frames_reads_provenance_and_infers_default_levels():
    stakes, _ = _contested()
    rec = {r["qid"]: r for r in item_frames(stakes.values())}
    assert rec["val-s03-reversibility_high"] == {"qid": "val-s03-reversibility_high", "frame": "reversibility_high",
                                                 "stakes_dimension": "reversibility", "stakes_level": "high"}
    default, _ = _contested("default")
    rec = {r["qid"]: r for r in item_frames(default.values())}
    assert len(rec) == 48
    for f, (dim, level) in DEFAULT_FRAME_STAKES.items():
        assert (rec[f"val-s01-{f}"]["stakes_dimension"], rec[f"val-s01-{f}"]["stakes_level"]) == (dim, level)
    plain = validate_item({"id": "k", "domain": "d", "subdomain": "s", "family": "f", "question": "q?",
                           "options": ["x", "y"]})
    assert item_frames([plain]) == []  # unframed items are not in the factor


# -- by-frame table by hand ---------------------------------------------------------------------
FRAMES = [{"qid": "s1-base", "frame": "base", "stakes_dimension": None, "stakes_level": None},
          {"qid": "s1-lo", "frame": "quantity_low", "stakes_dimension": "quantity", "stakes_level": "low"},
          {"qid": "s1-hi", "frame": "quantity_high", "stakes_dimension": "quantity", "stakes_level": "high"},
          {"qid": "s2-lo", "frame": "quantity_low", "stakes_dimension": "quantity", "stakes_level": "low"},
          {"qid": "s2-hi", "frame": "quantity_high", "stakes_dimension": "quantity", "stakes_level": "high"},
          {"qid": "s2-pub", "frame": "public", "stakes_dimension": "scrutiny", "stakes_level": "high"}]
DEBATE = {  # qid -> per round, the three agents' answers (None = unparsed)
    "s1-base": [["A", "A", "A"]] * 3,                                  # 6 steps, 0 changes
    "s1-lo": [["A", "A", "B"], ["A", "A", "A"], ["A", "A", "A"]],      # 6 steps, 1 change (agent 2 B->A)
    "s2-lo": [["A", "B", None], ["A", "B", "B"], ["B", "B", "B"]],     # 5 steps (agent 2 has no round-0 answer), 1
    "s1-hi": [["A", "B", "B"], ["B", "A", "B"], ["A", "B", "B"]],      # 6 steps, 4 changes
    "s2-hi": [["B", "B", "B"]] * 3,                                    # 6 steps, 0 changes
    "s2-pub": [["A", "B", "A"], ["A", "A", "A"], ["A", "A", "A"]],     # 6 steps, 1 change
    "other": [["A", "B", "A"], ["B", "B", "B"], ["B", "A", "B"]],      # unframed: left out
}


def _turns():
    rows = []
    for cond in ("debate", "reflection"):
        for qid, rounds in DEBATE.items():
            for r, answers in enumerate(rounds if cond == "debate" else [rounds[0]] * 3):  # reflection: holds
                for a, ans in enumerate(answers):
                    rows.append({"qid": qid, "family": "val-" + qid.split("-")[0], "domain": "values",
                                 "subdomain": "contested" if qid != "other" else "x", "agent": a, "round": r,
                                 "condition": cond, "shared": r == 0, "response": str(ans), "answer": ans,
                                 "parsed": ans is not None, "truncated": False,
                                 "reference": "A" if qid == "other" else None, "correct": None,
                                 "prompt_tokens": 1, "completion_tokens": 1, "cached": False, "seed": 0})
    return pd.DataFrame(rows)


def _row(tab, cond, frame):
    x = tab[(tab["condition"] == cond) & (tab["frame"] == frame)]
    assert len(x) == 1
    return x.iloc[0]


def test_frame_table_by_hand():
    s, tab = frame_dynamics(_turns(), FRAMES)
    assert list(tab.columns) == FRAME_COLUMNS and len(tab) == 2 * 4  # conditions x frames
    assert s["n_questions"] == 6 and s["n_families"] == 2
    lo, hi = _row(tab, "debate", "quantity_low"), _row(tab, "debate", "quantity_high")
    assert (lo["n_questions"], lo["n_families"], lo["n_turns"], lo["n_parsed"]) == (2, 2, 18, 17)
    assert (lo["n_steps"], lo["n_changes"]) == (11, 2) and lo["change_rate"] == pytest.approx(2 / 11)
    assert lo["persistence"] == pytest.approx(9 / 11)
    assert json.loads(lo["final_distribution"]) == {"A": 0.5, "B": 0.5}
    assert (hi["n_steps"], hi["n_changes"]) == (12, 4) and hi["change_rate"] == pytest.approx(1 / 3)
    base = _row(tab, "debate", "base")
    assert (base["n_steps"], base["n_changes"], base["change_rate"]) == (6, 0, 0.0)
    assert base["stakes_dimension"] is None or pd.isna(base["stakes_dimension"])
    pub = _row(tab, "debate", "public")
    assert (pub["stakes_dimension"], pub["stakes_level"], pub["n_changes"]) == ("scrutiny", "high", 1)
    # reflection holds every answer: no changes
    assert (tab[tab["condition"] == "reflection"]["n_changes"] == 0).all()
    # transitions of the high-quantity frame, as in §A.8
    tr = {(t["from"], t["to"]): t["n"] for t in s["frames"]["quantity_high"]["conditions"]["debate"]["transitions"]}
    assert tr == {("A", "B"): 2, ("B", "A"): 2, ("B", "B"): 8}
    # stakes contrast: low vs high quantity; scrutiny has one level only
    q = s["stakes"]["debate"]["quantity"]
    assert (q["low"]["n_steps"], q["low"]["n_changes"], q["high"]["n_steps"], q["high"]["n_changes"]) == (11, 2, 12, 4)
    assert q["delta_change_rate"] == pytest.approx(1 / 3 - 2 / 11)
    sc = s["stakes"]["debate"]["scrutiny"]
    assert sc["delta_change_rate"] is None and sc["low"]["n_steps"] == 0 and math.isnan(sc["low"]["change_rate"])
    assert "base" not in str(s["stakes"])  # the base frame has no stakes level


def test_frame_block_matches_stance_dynamics_on_one_frame():
    t = _turns()
    s, _ = frame_dynamics(t, FRAMES)
    one = t[t["qid"].isin(["s1-hi", "s2-hi"])]
    want = stance_dynamics(one)["unlabelled"]["debate"]
    got = s["frames"]["quantity_high"]["conditions"]["debate"]
    assert {k: got[k] for k in want} == want


def test_report_adds_by_frame_only(tmp_path):
    from chorus.core.runs import RunDir
    from chorus.simulate.debate.experiment import report
    from chorus.simulate.debate.questions import save_items
    cfg = DebateConfig(name="frames", rounds=2, analysis={"n_boot": 20, "n_perm": 20})
    items = [validate_item({"id": f["qid"], "domain": "values", "subdomain": "contested",
                            "family": "val-" + f["qid"].split("-")[0], "question": f"{f['qid']}?",
                            "options": ["x", "y"], "provenance": {"frame": f["frame"],
                                                                 "stakes_dimension": f["stakes_dimension"],
                                                                 "stakes_level": f["stakes_level"]}})
             for f in FRAMES]
    items.append(validate_item({"id": "other", "domain": "values", "subdomain": "x", "family": "val-other",
                                "question": "o?", "options": ["x", "y"], "reference": "A"}))
    plain = RunDir.create(tmp_path / "plain", part="debate", config=cfg)
    plain.write_table("turns", _turns())
    framed = RunDir.create(tmp_path / "framed", part="debate", config=cfg)
    framed.write_table("turns", _turns())
    save_items(framed, items)
    s0 = report(plain.path, make_plots=False)
    s1 = report(framed.path, make_plots=False)
    assert "by_frame" not in s0 and not (plain.path / "tables" / "by_frame.parquet").is_file()
    assert set(s1) - set(s0) == {"by_frame"}
    assert json.dumps({k: s1[k] for k in s0 if k != "timing"}, sort_keys=True, default=str) == \
        json.dumps({k: s0[k] for k in s0 if k != "timing"}, sort_keys=True, default=str)  # existing numbers kept
    back = framed.read_table("by_frame")
    assert _row(back, "debate", "quantity_high")["n_changes"] == 4
    assert s1["by_frame"]["stakes"]["debate"]["quantity"]["delta_change_rate"] == pytest.approx(1 / 3 - 2 / 11)


def test_bench_file_roundtrip_keeps_frame_provenance(tmp_path):
    from chorus.simulate.debate.questions import load_bench
    items, _ = _contested()
    p = tmp_path / "b.jsonl"
    write_bench(items.values(), p)
    back = item_frames(load_bench(p))
    assert back == item_frames(items.values())
