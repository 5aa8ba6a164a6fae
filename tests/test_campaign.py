"""The campaign numbers file (BDA paper D.7): export from stored traces, the drift guard catching an
edited number or a changed store, mixed councils refused, and the paper report laid out in order with
every section present or naming what it needs. Synthetic stores here; the real-model campaign runs
over the embedded council in tests/test_council_llm.py."""
from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from chorus.cli import app

FAST = dict(methods=["plurality", "bda_per_agent", "bda_confusion"], n_resamples=100, budgets=[10], outer_folds=3, inner_folds=3,
            label_seeds=[0, 1])
SECTIONS = ["inventory", "cells", "pooled_binary", "flips", "contagion", "table7", "label_efficiency", "truncation", "switch", "transfer",
            "shift", "drift"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from chorus.simulate.council.campaign_synthetic import write_store
    root = tmp_path_factory.mktemp("store") / "syn"
    write_store(root, n_questions=16, seeds=2, datasets=(("claims_a", 2, (0.8, 0.7, 0.65)),
                                                          ("k3_set", 3, (0.7, 0.6, 0.55))))
    return root


@pytest.fixture(scope="module")
def campaign(store, tmp_path_factory):
    from chorus.simulate.council.campaign import CampaignConfig, build_campaign
    out = tmp_path_factory.mktemp("camp") / "c"
    build_campaign(CampaignConfig(inputs=[str(store)], sections=SECTIONS, **FAST), out)
    return out


def test_export_reads_every_cell_and_counts_by_hand(campaign, store):
    from chorus.aggregate.trace import load_traces
    n = json.loads((campaign / "numbers.json").read_text())
    assert set(n["cells"]) == {f"syn/{d}/{c}" for d in ("claims_a", "k3_set") for c in ("clean", "attack-k1", "attack-k2")}
    inv = n["sections"]["inventory"]["cells"]["syn/claims_a/clean"]
    trs = load_traces(store / "traces" / "claims_a__clean.jsonl.gz")
    assert inv["n_traces"] == len(trs) == 32 and inv["n_questions"] == 16 and inv["gen_seeds"] == ["0", "1"]
    # seat A1's round-0 accuracy and the majority's, counted here by hand
    a1 = [m.answer == t.gold for t in trs for m in t.moves if m.agent == "A1" and m.round == 0]
    assert inv["round0_accuracy_by_seat"]["A1"] == pytest.approx(sum(a1) / len(a1))
    maj = []
    for t in trs:
        votes = [m.answer for m in t.moves if m.round == 0]
        top = max(votes.count(v) for v in set(votes))
        win = {v for v in votes if votes.count(v) == top}
        maj.append((t.gold in win) / len(win))
    assert inv["plurality_accuracy"] == pytest.approx(sum(maj) / len(maj))
    assert n["sections"]["inventory"]["cells"]["syn/claims_a/attack-k2"]["adversaries"] == ["A2", "A3"]
    cell = n["sections"]["cells"]["cells"]["syn/claims_a/clean"]
    assert set(cell["metrics"]) >= set(FAST["methods"]) and cell["metrics_by_seed"]["seeds"].keys() == {"0", "1"}
    assert n["sections"]["flips"]["councils"]["syn"]["by_K"][0]["K"] == 2
    assert set(n["sections"]["contagion"]["cells"]) == {f"syn/{d}/attack-k{k}" for d in ("claims_a", "k3_set") for k in (1, 2)}
    prov = json.loads((campaign / "provenance.json").read_text())
    assert prov["part"] == "campaign" and prov["versions"] and prov["finished"]


def test_verifier_passes_then_catches_an_edited_number_and_a_changed_store(campaign, store, tmp_path):
    from chorus.simulate.council.campaign import verify_campaign
    n, bad, redo = verify_campaign(campaign)
    assert not bad and n > 100 and set(redo) == {"inventory", "flips", "contagion"}
    # an edited number in a copy of the campaign
    c2 = tmp_path / "c2"
    shutil.copytree(campaign, c2, ignore=shutil.ignore_patterns(".lock"))
    d = json.loads((c2 / "numbers.json").read_text())
    d["sections"]["inventory"]["cells"]["syn/claims_a/clean"]["plurality_accuracy"] += 0.01
    d["sections"]["contagion"]["cells"]["syn/k3_set/attack-k1"]["flip_rate"] += 0.002
    (c2 / "numbers.json").write_text(json.dumps(d))
    _, bad, _ = verify_campaign(c2)
    where = {b.where for b in bad}
    assert "sections.inventory.cells.syn/claims_a/clean.plurality_accuracy" in where
    assert "sections.contagion.cells.syn/k3_set/attack-k1.flip_rate" in where
    # a number within the paper's tolerance (1.5e-3) is not drift
    d["sections"]["inventory"]["cells"]["syn/claims_a/clean"]["plurality_accuracy"] -= 0.0095
    d["sections"]["contagion"]["cells"]["syn/k3_set/attack-k1"]["flip_rate"] -= 0.002
    (c2 / "numbers.json").write_text(json.dumps(d))
    assert verify_campaign(c2)[1] == []


def test_paper_lays_out_every_section_in_order(campaign):
    from chorus.papers.bda import render_paper
    md = render_paper(campaign).read_text()
    heads = [line for line in md.splitlines() if line.startswith("## ")]
    order = ["Headline", "Table 1", "§7", "Figure 2", "Table 2", "Tables 3-8", "Figure 3", "Table 4", "Table 5", "Appendix D.7",
             "Figure 4", "Figure 5", "Table 7", "Transfer", "Figure 6", "Table 8", "Table 9", "Table 10", "Table 12",
             "Table 13", "Table 14", "Table 15", "Appendix F.10", "Appendix F.11", "Appendix G", "§8",
             "Seat reliabilities", "Appendix C.8"]
    assert [next(o for o in sorted(order, key=len, reverse=True) if h[3:].startswith(o)) for h in heads] == order
    # sections this campaign did not export name the command that makes them
    assert md.count("*Missing:*") >= 1 and "chorus paper bda RUN... --out CAMPAIGN" in md
    for f in ("fig3_label_efficiency", "fig4_reliability", "fig5_ece_cells", "fig6_flips"):
        assert (campaign / "figures" / f"{f}.png").stat().st_size > 1000
    assert "`syn/claims_a/attack-k1`" in md   # cells traceable to their stores


def test_paper_leads_with_bda_against_plurality_and_says_where_the_numbers_come_from(campaign):
    """The lead comparison (Table 2's pooled Δ accuracy vs plurality, each interval naming what it resamples)
    opens the page, under the standing the export recorded: a synthetic store says so (its provenance.json)."""
    from chorus.papers.bda import render_paper
    n = json.loads((campaign / "numbers.json").read_text())
    assert n["standing"]["kind"] == "synthetic" and n["sources"][0]["standing"]["kind"] == "synthetic"
    md = render_paper(campaign).read_text()
    lead = md.split("## Headline", 1)[1].split("\n## ", 1)[0]
    assert md.index("## Headline") < md.index("## Table 1")
    assert "Numbers from: synthetic mode" in lead
    pooled = n["sections"]["pooled_binary"]["councils"]["syn"]
    b = next(r for r in pooled["bootstrap_clustered"] if r["a"] == "bda_per_agent" and r["metric"] == "accuracy")
    assert f"{b['delta']:+.3f} [{b['ci_low']:+.3f}, {b['ci_high']:+.3f}] (95%, {b['n_units']} questions resampled)" in lead
    assert "(95%, 2 seeds x 16 questions resampled)" in lead and lead.count("| syn |") == 3   # per_agent, confusion, +iso
    # a campaign exported before the standing was recorded says so instead of guessing
    from chorus.papers.bda import Paper
    old = {k: v for k, v in n.items() if k != "standing"}
    assert "Numbers from: not recorded" in Paper(old, campaign).lead()


def test_mixed_councils_and_repeated_tasks_are_refused(store, tmp_path):
    from chorus.simulate.council.campaign_inputs import CampaignError, collect
    other = tmp_path / "syn"        # the same council name, other seats
    (other / "traces").mkdir(parents=True)
    src = store / "traces" / "claims_a__clean.jsonl.gz"
    from chorus.aggregate.trace import Trace, dump_traces, load_traces
    trs = load_traces(src)
    four = [Trace(t.task_id + "x", t.candidates, t.moves + (t.moves[0].__class__("A4", 0, "propose", t.candidates[0]),),
                  t.gold, t.question_id, dict(t.extra)) for t in trs]
    dump_traces(four, other / "traces" / "claims_b__clean.jsonl.gz")
    with pytest.raises(CampaignError, match=r"council 'syn' mixes seats"):
        collect([store, other])
    again = tmp_path / "again" / "syn"
    (again / "traces").mkdir(parents=True)
    shutil.copy(src, again / "traces" / "claims_a__clean.jsonl.gz")
    with pytest.raises(CampaignError, match=r"task 'claims_a-q0000-s0' is in .* generated twice"):
        collect([store, again])


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, store):
    r = CliRunner().invoke(app, ["paper", "bda", str(tmp_path / "nope"), "--out", str(tmp_path / "c")])
    assert r.exit_code == 2 and "not a directory" in r.output and not (tmp_path / "c").exists()
    r = CliRunner().invoke(app, ["paper", "bda", str(store), "--out", str(tmp_path / "c"), "--section", "tables"])
    assert r.exit_code == 2 and "unknown campaign section 'tables'" in r.output
    r = CliRunner().invoke(app, ["council", "campaign-verify", str(tmp_path), "--out", str(tmp_path / "v")])
    assert r.exit_code == 2 and "not a chorus run directory" in r.output and not (tmp_path / "v").exists()


def test_sweep_runs_are_embedded_verbatim_and_guarded(store, tmp_path):
    """Table 12 / Figure 7 come from chorus aggregate sweep runs (CPU-hours at paper size), embedded with their
    sha256 and regeneration command; the drift guard re-reads them."""
    from chorus.simulate.council.campaign import CampaignConfig, build_campaign, verify_campaign
    from chorus.papers.bda import render_paper
    r = CliRunner().invoke(app, ["aggregate", "sweep", "sweep_sleeper", "--set", "synthetic.n_tasks=200", "--set",
                                 "methods=[plurality,bda_per_agent]", "--out", str(tmp_path / "sleeper"), "--quiet"])
    assert r.exit_code == 0, r.output
    out = tmp_path / "c"
    build_campaign(CampaignConfig(inputs=[str(store)], sections=["inventory", "sweeps"], sweeps=[str(tmp_path / "sleeper")],
                                  **FAST), out)
    res = json.loads((tmp_path / "sleeper" / "results.json").read_text())
    emb = json.loads((out / "numbers.json").read_text())["sections"]["sweeps"]["runs"][str(tmp_path / "sleeper")]
    assert emb["kind"] == "sleeper" and [c["params"]["f"] for c in emb["cells"]] == [c["params"]["f"] for c in res["cells"]]
    assert emb["cells"][-1]["metrics"]["bda_per_agent"]["accuracy"] == res["cells"][-1]["metrics"]["bda_per_agent"]["accuracy"]
    md = render_paper(out).read_text()
    assert "## Table 12 / Figure 7" in md and "chorus aggregate sweep sleeper" in md and (out / "figures" / "fig7_sleeper.png").is_file()
    assert verify_campaign(out)[1] == []
    d = json.loads((out / "numbers.json").read_text())
    d["sections"]["sweeps"]["runs"][str(tmp_path / "sleeper")]["cells"][0]["metrics"]["plurality"]["accuracy"] += 0.1
    (out / "numbers.json").write_text(json.dumps(d))
    assert [b.where.split(".")[-1] for b in verify_campaign(out)[1]] == ["accuracy"]
