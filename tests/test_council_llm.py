"""One real council end to end on the embedded models (hf backend): heterogeneous seats
(SmolLM2 x 2 personas + gemma-3-270m, a base model), 3 rounds, one stealth seat among honest ones,
traces aggregated through aggregate/, LLM baselines with token costs; a swapped rerun is served from
the store."""
from __future__ import annotations

import json
import sqlite3

import pytest

from chorus.aggregate import STRICT
from chorus.aggregate.trace import load_traces


@pytest.mark.slow
def test_real_council_end_to_end(tmp_path, monkeypatch):
    monkeypatch.setenv("CHORUS_TORCH_THREADS", "1")
    from chorus.simulate.council.config import load
    from chorus.simulate.council.experiment import report, run_council_experiment

    # one attacked condition (honest and stealth seats together) keeps this under ~2 CPU minutes
    cfg = load("tiny", {"data.0.n": 4, "generation.max_tokens": 48, "generation.max_chars": 40,
                        "conditions": [{"name": "attack-k1", "adversaries": ["A3"]}],
                        "baselines.methods": ["moa_lite"], "aggregate.methods": ["plurality", "verbalized"]})
    run, summary = run_council_experiment(cfg, tmp_path / "run")
    for cond in ("attack-k1",):
        traces = load_traces(run.path / "traces" / f"truthfulqa_claims__{cond}.jsonl")
        assert len(traces) == 4
        for tr in traces:
            assert [m.round for m in tr.moves] == [r for r in range(3) for _ in range(3)]
            for v, m in zip(STRICT.check(tr), tr.moves):
                assert v.accepted == (m.force != "abstain"), (tr.task_id, m)
    cells = summary["cells"]
    assert "compliance" in cells["truthfulqa_claims__attack-k1"]
    assert cells["truthfulqa_claims__attack-k1"]["compliance"]["n_proposals_r0"] <= 4
    res = run.read_table("results")
    arms = set(res["arm"])
    assert {"plurality", "verbalized", "moa_lite"} <= arms
    assert (res["tokens_per_task"] > 0).all()
    # BDA records beside the council's tables, from traces handed over in memory (no nested run)
    recs = json.loads((run.path / "aggregate.json").read_text())
    assert {"plurality", "verbalized"} <= set(recs["truthfulqa_claims__attack-k1"]["metrics"])
    assert not (run.path / "aggregate").exists()
    assert set(run.read_table("aggregate_metrics")["cell"]) == {"truthfulqa_claims__attack-k1"}
    # the report is rebuilt from stored files alone, identically
    again = report(run.path, make_plots=False)
    assert json.dumps(again["results"], default=str) == json.dumps(summary["results"], default=str)
    turns = run.read_table("turns")
    assert set(turns["profile"]) == {"smollm2-135m-instruct", "gemma3-270m"}
    # engines held one at a time (a device plan's swap), each profile's turns of a round before the
    # next, over a copy of the store in a fresh directory: the swapped run asks exactly the shared
    # run's calls (nothing is computed) and writes the same traces and turns
    (tmp_path / "swap").mkdir()
    with sqlite3.connect(run.path / "calls.sqlite") as src, sqlite3.connect(tmp_path / "swap" / "calls.sqlite") as dst:
        src.backup(dst)
    cfg3 = cfg.model_copy(update={"models": cfg.models.model_copy(update={"hold": "swap"}),
                                  "baselines": cfg.baselines.model_copy(update={"methods": []})})
    run3, _ = run_council_experiment(cfg3, tmp_path / "swap", make_plots=False, aggregate=False)
    assert int(run3.read_table("batches")["computed_new_tokens"].sum()) == 0
    name = "traces/truthfulqa_claims__attack-k1.jsonl"
    assert (run3.path / name).read_text() == (run.path / name).read_text()
    cols = ["trace_id", "agent", "round", "attempt", "text", "answer", "legal"]
    key = ["trace_id", "round", "agent", "attempt"]
    t1 = turns[cols].sort_values(key).reset_index(drop=True)
    t3 = run3.read_table("turns")[cols].sort_values(key).reset_index(drop=True)
    assert t1.equals(t3)
    prov = json.loads((run3.path / "provenance.json").read_text())
    assert prov["device_plan"]["mode"] == "cpu" and prov["models"]["hold"] == "swap"
    loads = prov["models"]["loads"]  # at most one load per profile per round (a seat left with no turn loads nothing)
    assert loads[:2] == ["smollm2-135m-instruct", "gemma3-270m"] and len(loads) <= 6
    assert all(a != b for a, b in zip(loads, loads[1:]))
    # the campaign over this real run (BDA paper D.7): the numbers file from its stored traces, the drift
    # guard re-deriving it, the paper report with every section rendered or naming what it lacks
    from chorus.simulate.council.campaign import CampaignConfig, build_campaign, verify_campaign
    from chorus.papers.bda import render_paper
    camp = tmp_path / "campaign"
    build_campaign(CampaignConfig(inputs=[str(run.path)], methods=["plurality", "verbalized"], n_resamples=100,
                                  outer_folds=2, inner_folds=2, sections=["inventory", "cells", "baselines", "contagion"]),
                   camp)
    numbers = json.loads((camp / "numbers.json").read_text())
    inv = numbers["sections"]["inventory"]["cells"]["council-tiny/truthfulqa_claims/attack-k1"]
    assert inv["n_traces"] == 4 and inv["adversaries"] == ["A3"]
    assert inv["moves_by_force"] == summary["cells"]["truthfulqa_claims__attack-k1"]["moves_by_force"]
    assert "moa_lite" in numbers["sections"]["baselines"]["cells"]["council-tiny/truthfulqa_claims/attack-k1"]
    n_checked, bad, _ = verify_campaign(camp)
    assert not bad and n_checked > 20
    md = render_paper(camp).read_text()
    assert "## Table 1" in md and "## Appendix D.7" in md and "*Missing:*" in md
