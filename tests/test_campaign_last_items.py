"""The BDA paper report's last items, from a synthetic campaign: §7's seed-clustered intervals, Tables 3-8's
bench composition and truncation rate, Table 8's per-round refit, F.11's label-permutation control and
§C.8's numerical checks (the command and the report section), each number the campaign's own."""
from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from chorus.cli import app

FAST = dict(methods=["plurality", "bda_per_agent", "bda_confusion"], n_resamples=100, outer_folds=3, inner_folds=3)
SECTIONS = ["inventory", "cells", "pooled_binary", "composition", "rounds", "permutation", "c8"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from chorus.simulate.council.campaign_synthetic import write_store
    root = tmp_path_factory.mktemp("store") / "syn"
    write_store(root, n_questions=16, seeds=2, datasets=(("claims_a", 2, (0.8, 0.7, 0.65)),))
    return root


@pytest.fixture(scope="module")
def campaign(store, tmp_path_factory):
    from chorus.simulate.council.campaign import CampaignConfig, build_campaign
    from chorus.papers.bda import render_paper
    out = tmp_path_factory.mktemp("camp") / "c"
    build_campaign(CampaignConfig(inputs=[str(store)], sections=SECTIONS, **FAST), out)
    return json.loads((out / "numbers.json").read_text()), render_paper(out).read_text(), out


def test_the_drift_guard_rederives_the_new_sections(campaign):
    from chorus.simulate.council.campaign import verify_campaign
    _, bad, redo = verify_campaign(campaign[2], full=True)
    assert not bad and set(redo) == set(SECTIONS)


def test_seed_clustered_intervals_are_in_the_cells_and_the_report(campaign):
    n, md, _ = campaign
    cell = n["sections"]["cells"]["cells"]["syn/claims_a/clean"]
    b = next(b for b in cell["bootstrap_seed_clustered"] if b["metric"] == "accuracy" and b["a"] == "bda_per_agent")
    assert b["seed_clustered"] and b["n_seeds"] == 2 and b["n_clusters"] == 16
    line = next(x for x in md.splitlines() if x.startswith("| syn/claims_a/clean | bda_per_agent - plurality"))
    assert line.startswith(f"| syn/claims_a/clean | bda_per_agent - plurality | {b['delta']:.3f} |")
    q = next(q for q in cell["bootstrap_clustered"] if q["metric"] == "accuracy" and q["a"] == "bda_per_agent")
    assert line.endswith(f"| {q['delta']:+.3f} [{q['ci_low']:+.3f}, {q['ci_high']:+.3f}] (95%, 16 questions resampled) "
                         f"| 16 questions | {b['delta']:+.3f} [{b['ci_low']:+.3f}, {b['ci_high']:+.3f}] "
                         f"(95%, 2 seeds x 16 questions resampled) | 2 seeds x 16 questions |")
    assert md.index("## §7: seed-clustered") < md.index("## Figure 2")


def test_composition_counts_and_the_truncation_rate(campaign, store, tmp_path):
    import pandas as pd

    from chorus.aggregate.trace import load_traces
    from chorus.simulate.council.campaign_inputs import Source
    from chorus.simulate.council.campaign_sections import _truncation_by_cell
    n, md, _ = campaign
    c = n["sections"]["composition"]["cells"]["syn/claims_a/attack-k2"]
    trs = load_traces(store / "traces" / "claims_a__attack-k2.jsonl.gz")
    assert (c["K"], c["n_questions"], c["n_traces"], c["gen_seeds"]) == (2, 16, 32, ["0", "1"])
    assert c["rounds"] == 1 + max(m.round for t in trs for m in t.moves)
    assert "missing" in c["truncation"] and "not recorded" in md   # a bare store keeps no generations
    # a council run's turns table: 2 of 5 generations of one cell stopped at the token limit
    (tmp_path / "run" / "tables").mkdir(parents=True)
    pd.DataFrame({"dataset": ["d"] * 5 + ["e"], "condition": ["clean"] * 6,
                  "finish_reason": ["length", "stop", "length", "stop", "stop", "stop"]}).to_parquet(
        tmp_path / "run" / "tables" / "turns.parquet")
    t = _truncation_by_cell([Source(tmp_path / "run", "cn", "council_run", (), 3, [])])
    assert t["cn/d/clean"]["truncation_rate"] == 2 / 5 and t["cn/e/clean"]["n_truncated"] == 0


def test_per_round_refit_matches_the_round0_and_full_bases(campaign, store):
    """Table 8's first and last rows are Table 14's two bases: the same leak-free refit on the same folds."""
    from chorus.aggregate.trace import load_traces
    from chorus.aggregate.truncation import truncation_table
    n, md, _ = campaign
    v = n["sections"]["rounds"]["cells"]["syn/claims_a/clean"]
    trs = load_traces(store / "traces" / "claims_a__clean.jsonl.gz")
    m, _ = truncation_table(trs, FAST["methods"], outer_folds=3, inner_folds=3, protocol="strict",
                            on_violation="skip", n_boot=100)
    last = max(r["max_round"] for r in v["metrics"])
    got = {(r["max_round"], r["method"]): r["accuracy"] for r in v["metrics"]}
    for _, r in m.iterrows():
        assert got[(0 if r["basis"] == "round0" else last, r["method"])] == r["accuracy"]
    d = next(d for d in v["deltas"] if d["method"] == "bda_per_agent" and d["max_round"] == 0 and d["metric"] == "accuracy")
    assert d["delta"] == pytest.approx(got[(last, "bda_per_agent")] - got[(0, "bda_per_agent")], abs=1e-12)
    assert "## Table 8" in md


def test_label_permutation_leaves_plurality_and_is_beside_the_cell(campaign):
    n, md, _ = campaign
    perm = n["sections"]["permutation"]["cells"]
    assert set(perm) == {"syn/claims_a/attack-k1", "syn/claims_a/attack-k2"}
    for k, v in perm.items():   # plurality reads no label identity: the relabelling cannot move it
        orig = n["sections"]["cells"]["cells"][k]["metrics"]["plurality"]["accuracy"]
        assert v["metrics"]["plurality"]["accuracy"] == pytest.approx(orig, abs=1e-12)
    assert "## Appendix F.11" in md


def test_c8_checks_hold_on_their_closed_forms(campaign):
    from scipy.special import expit
    n, md, _ = campaign
    c = n["sections"]["c8"]["councils"]["syn"]
    assert c["holds"] and all(c[k]["holds"] for k in ("symmetric", "k_minus_1", "invariance", "ceiling",
                                                       "weighted_majority"))
    for r in c["symmetric"]["rows"]:   # each seat's factor: 1/2 for the answer, 1/(2(K-1)) for a rival
        assert r["posterior"] == pytest.approx(1 / (1 + (r["K"] - 1) ** (1 - r["N"])), abs=1e-14)
    k3 = c["k_minus_1"]["K3"]
    assert k3["posterior"] == pytest.approx([0.7, 0.15, 0.15], abs=1e-14)
    assert k3["without_factor"] == pytest.approx([7 / 13, 3 / 13, 3 / 13], abs=1e-15)
    assert c["ceiling"]["ceiling"] == pytest.approx(expit(3 * 1.6 * math.log(4)), abs=1e-15)
    assert [round(r["posterior"], 3) for r in c["ceiling"]["rows"]] == [0.646, 0.810, 0.969, 0.996, 0.998]
    assert c["invariance"]["max_abs_diff"] == 0.0 and c["invariance"]["groups"][0]["n_traces"] == 32
    assert "## Appendix C.8" in md and "chorus aggregate c8 TRACES..." in md and "0.9412" in md


def test_c8_command_writes_its_record_and_refuses_bad_input(store, tmp_path):
    f = store / "traces" / "claims_a__clean.jsonl.gz"
    r = CliRunner().invoke(app, ["aggregate", "c8", str(f), "--out", str(tmp_path / "c8")])
    assert r.exit_code == 0, r.output
    s = json.loads((tmp_path / "c8" / "summary.json").read_text())
    assert s["holds"] and s["symmetric"]["max_abs_diff"] <= 1e-12
    r = CliRunner().invoke(app, ["aggregate", "c8", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "trace file not found" in r.output


def test_c8_needs_labelled_traces():
    from chorus.aggregate.c8 import confidence_invariance
    from chorus.aggregate.trace import Move, Trace
    from chorus.core.config import InputError
    with pytest.raises(InputError, match="needs labelled traces"):
        confidence_invariance([Trace("t", ("a", "b"), (Move("A1", 0, "propose", "a"),), None)])


def test_every_interval_in_the_council_paper_names_its_level(campaign):
    """Issue 51 item 5: each interval the BDA paper report prints says what it resampled and how many."""
    from conftest import assert_intervals_name_levels
    assert assert_intervals_name_levels(campaign[1]) > 0
