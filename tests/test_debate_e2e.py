"""Real-model end to end on the embedded model (plumbing only: SmolLM2-135M numbers are
noise). Small: 3 questions x 3 agents x 1 round, short generations, hf backend."""
import json

import numpy as np
import pandas as pd
import pytest

from chorus.interventions.config import InfluenceConfig
from chorus.simulate.debate.config import DebateConfig
from chorus.simulate.debate.prompts import load_prompts, readout_prefill, turn_messages
from chorus.simulate.debate.questions import validate_item, write_bench

ITEMS = [
    {"id": "t1", "domain": "knowledge", "subdomain": "toy", "family": "fa", "question": "What is 2 + 2?",
     "options": ["3", "4", "5"], "reference": "B"},
    {"id": "t2", "domain": "knowledge", "subdomain": "toy", "family": "fb", "question": "Is water wet?",
     "options": ["yes", "no"], "labels": ["yes", "no"], "reference": "yes"},
    {"id": "t3", "domain": "values", "subdomain": "toy", "family": "fb", "question": "Tea or coffee?",
     "options": ["Tea", "Coffee"], "reference": None},
    {"id": "t4", "domain": "knowledge", "subdomain": "toy", "family": "fc", "question": "How many legs has a cat?",
     "options": None, "reference": 4},  # numeric: its own table and rows (numeric.py)
]


@pytest.fixture(scope="module")
def debate_run(hf_engine, tmp_path_factory):
    from chorus.simulate.debate.experiment import run_debate
    d = tmp_path_factory.mktemp("debate")
    bench = d / "bench.jsonl"
    write_bench([validate_item(x) for x in ITEMS], bench)
    cfg = DebateConfig(name="e2e", rounds=1, bench={"path": str(bench)},
                       model={"profile": "smollm2-135m-instruct", "backend": "hf"},
                       generation={"max_tokens": 24, "temperature": 0.7}, analysis={"n_boot": 50, "n_perm": 50})
    run, summary = run_debate(cfg, d / "run", engine=hf_engine)
    return run, summary


def test_debate_and_reflection_end_to_end(debate_run, hf_engine):
    run, s = debate_run
    turns = run.read_table("turns")
    assert set(turns["condition"]) == {"debate", "reflection"}
    assert len(turns) == 3 * 3 * 2 * 2  # 3 scorable questions x 3 agents x rounds 0-1 x 2 conditions
    r0 = turns[turns["round"] == 0].sort_values(["qid", "agent", "condition"])
    # round 0 is shared: identical responses in both conditions
    assert (r0.groupby(["qid", "agent"])["response"].nunique() == 1).all()
    # the numeric item runs in the same batches; its turns sit apart from the label-scored table
    assert s["exclusions"]["n"] == 0 and "t4" not in set(turns["qid"])
    nt = run.read_table("numeric_turns")
    assert set(nt["qid"]) == {"t4"} and len(nt) == 3 * 2 * 2 and (nt["reference"] == 4.0).all()
    assert nt.loc[nt["round"] == 0, "shared"].all() and not nt.loc[nt["round"] == 1, "shared"].any()
    assert (nt["parsed"] == nt["value"].notna()).all()
    nm = s["numeric"]
    assert nm["n_questions"] == 1 and nm["n_replies"] == 3 + 3 * 2 and set(nm["conditions"]) == {"debate", "reflection"}
    assert len(run.read_table("numeric_by_round")) == 2 * 2
    assert 0.0 <= s["parse_rate"] <= 1.0 and "n_truncated" in s
    # unparsed answers are never an option
    assert turns.loc[~turns["parsed"], "answer"].isna().all()
    assert (run.path / "summary.json").is_file() and (run.path / "plots" / "unanimity_by_round.png").is_file()
    assert json.loads((run.path / "provenance.json").read_text())["prompts"]["sha256"]
    batches = run.read_table("batches")
    assert list(batches["batch_size"]) == [12, 24]  # one batch per round across questions and conditions
    # rerun is free (the call store) and gives the same table
    from chorus.simulate.debate.experiment import report
    s2 = report(run.path, make_plots=False)
    assert s2["n_turns"] == s["n_turns"]
    # the §C.2 outcomes (outcomes.py): tables, plots and the summary block, counts beside every estimate
    assert set(json.loads((run.path / "summary.json").read_text())["c2"]) == set(s2["c2"])
    assert s2["c2"]["final_round"] == 1 and all("n_groups" in r for r in s2["c2"]["split"])
    for name in ("outcomes_by_round", "c2_split", "c2_contested_wrong_agreement", "c2_wrong_initial_majority"):
        assert (run.path / "tables" / f"{name}.parquet").is_file() and (run.path / "plots" / f"{name}.png").is_file()


def test_readout_equals_manual_forward_pass(debate_run, hf_engine):
    import torch

    from chorus.interventions.readout import run_readouts
    from chorus.simulate.debate.experiment import load_items as _load_items
    run, _ = debate_run
    items = _load_items(run.path)
    turns = run.read_table("turns")
    P = load_prompts()
    tab = run_readouts(hf_engine, items, turns, P, fractions=[0.0, 0.5])
    assert set(tab["f"]) == {0.0, 0.5} and len(tab) == 3 * 3 * 2 * 2
    for _, row in tab[(tab["qid"] == "t1") & (tab["agent"] == 1)].iterrows():
        it = items[row["qid"]]
        prev = list(turns[(turns["condition"] == row["condition"]) & (turns["qid"] == "t1") & (turns["round"] == 0)]
                    .sort_values("agent")["response"])
        now = turns[(turns["condition"] == row["condition"]) & (turns["qid"] == "t1") & (turns["round"] == 1)
                    & (turns["agent"] == 1)]["response"].iloc[0]
        msgs = turn_messages(it, 1, 1, row["condition"], prev, P)
        ids = hf_engine.tokenizer(now, add_special_tokens=False).input_ids
        k = int(round(row["f"] * len(ids)))
        partial = hf_engine.tokenizer.decode(ids[:k], skip_special_tokens=True) if k < len(ids) else now
        p = hf_engine.render(readout_prefill(msgs, partial, P))
        manual = []
        for lab in it.labels:
            oid = hf_engine.option_token_ids(p, " " + lab)
            x = torch.tensor([p.ids + oid])
            with torch.inference_mode():
                logits = hf_engine.model(x).logits[0].float()
            lp = torch.log_softmax(logits, -1)
            manual.append(sum(lp[len(p.ids) - 1 + j, t].item() for j, t in enumerate(oid)))
        np.testing.assert_allclose(row["logprobs"], manual, atol=2e-3)
        assert row["argmax"] == it.labels[int(np.argmax(manual))]


def test_influence_ablate_and_cues_from_source_run(debate_run, hf_engine, tmp_path):
    from chorus.interventions.experiment import run_influence
    run, _ = debate_run
    cfg = InfluenceConfig(name="e2e", source_run=str(run.path), model={"backend": "hf"},
                          analysis={"n_boot": 30, "n_perm": 30}, interventions={"require_disagreement": False})
    for verb in ("ablate", "cues"):
        r, s = run_influence(cfg, verb, tmp_path / verb, engine=hf_engine)
        turns = run.read_table("turns")
        r0 = turns[(turns["round"] == 0) & (turns["condition"] == "debate")]
        expect = int((r0.groupby("qid")["parsed"].sum() >= 2).sum())  # questions with a parsed pair
        assert s["n_pairs"] == expect
        if not expect:
            continue
        m = r.read_table("margins")
        assert m["margin"].notna().all()
        if verb == "ablate":
            assert {"full", "answer_only", "reasoning_only", "filler"} <= set(s["effects"])
            # unrelated reasoning needs a pair from another family
            assert ("unrelated" in s["effects"]) == (r.read_table("effects")["family"].nunique() > 1)
            assert "reasoning_share" in s
        else:
            assert "record_status_ratio" in s and "relabel_shift" in s


def test_real_debate_read_as_council_traces(debate_run, tmp_path):
    """``chorus debate bda`` on the embedded model's debate: every parsed turn of the labelled option
    questions is one STRICT-legal move the aggregators read; two labelled questions cannot fill nested
    folds, which the command says in one line (the pipeline past it: tests/test_debate_bda.py)."""
    from typer.testing import CliRunner

    from chorus.aggregate.counts import Pool
    from chorus.aggregate.flips import decision_flips
    from chorus.cli import app
    from chorus.simulate.debate.bda import debate_traces, read_run
    run, _ = debate_run
    turns, items, votes = read_run(run.path)
    traces, info = debate_traces(turns, items, votes=votes)
    d = turns[(turns["condition"] == "debate") & turns["qid"].isin(["t1", "t2"])]
    moved = sum(len(tr.moves) for tr in traces)
    assert moved == int(d["parsed"].sum()) - info["n_turns_without_round_0"]
    assert info["left_out"]["numeric"] == 0 and info["left_out"]["unlabelled"] == 1  # t4 never reaches the turns
    for tr in traces:
        assert Pool.from_traces([tr], protocol="strict", on_violation="error").report.rejected == 0
        assert tr.gold == items[tr.task_id].reference and tr.candidates == tuple(items[tr.task_id].labels)
    if traces:
        assert len(decision_flips(traces)) == len(traces)
    r = CliRunner().invoke(app, ["debate", "bda", str(run.path), "--out", str(tmp_path / "bda")])
    assert r.exit_code == 2, r.output
    assert (("no candidate group can be cross-validated" in r.output) if traces else ("has a parsed turn" in r.output)), r.output


def test_readout_summary_pairs_committed_at_read_by_question(debate_run, hf_engine, tmp_path):
    """``chorus influence readout`` on the embedded model's debate: the paired committed-at-read of
    Table 9 sits in the summary beside the pooled rate, its per-question rows in a table; with
    ``readout.controls`` each debate turn is read again with its peers' texts replaced (§4.1)."""
    from chorus.interventions.experiment import run_influence
    from chorus.interventions.readout import paired_committed_at_read, readout_jobs
    from chorus.simulate.debate.experiment import load_items
    run, _ = debate_run
    cfg = InfluenceConfig(name="e2e", source_run=str(run.path), model={"backend": "hf"},
                          readout={"fractions": [0.0], "controls": ["unrelated", "filler"]},
                          analysis={"n_boot": 30, "n_perm": 30})
    r, s = run_influence(cfg, "readout", tmp_path / "readout", engine=hf_engine)
    table = r.read_table("readouts")
    want = paired_committed_at_read(table, n_boot=30, seed=cfg.seed)
    got = s["committed_at_read"]["paired_f0"]
    assert got["n_questions"] == want["n_questions"] == len(r.read_table("committed_paired"))
    assert json.dumps({k: v for k, v in want.items() if k != "questions"}, sort_keys=True) == json.dumps(got, sort_keys=True)
    # the controls: every debate turn once more per control (two families: unrelated reasoning exists),
    # the same turn's answers, other contexts
    key = ["qid", "agent", "round", "f"]
    d = table[table["condition"] == "debate"].set_index(key).sort_index()
    for ctl in ("debate@unrelated", "debate@filler"):
        c = table[table["condition"] == ctl].set_index(key).sort_index()
        assert c.index.equals(d.index)
        assert (c["changed"] == d["changed"]).all() and c["answer"].equals(d["answer"])
    cr = s["committed_at_read"]
    if "gaps_f0" in cr:  # reflection and debate both had an answer change
        assert list(cr["gaps_f0"]) == ["debate", "debate@unrelated", "debate@filler"]
        assert (r.path / "plots" / "committed_gaps.png").is_file()
        assert set(cr["paired_f0_controls"]) == {"debate@unrelated", "debate@filler"}
    # the filler matches each replaced peer text in the model's tokens (decode / re-encode: within a token)
    tok = hf_engine.tokenizer
    meta, convs = readout_jobs(load_items(run.path), run.read_table("turns"), load_prompts(), fractions=[0.0],
                               tokenizer=tok, controls=["filler"])
    plain = {(m["qid"], m["agent"]): c for m, c in zip(meta, convs) if m["condition"] == "debate"}
    for m, c in zip(meta, convs):
        if m["condition"] == "debate@filler":
            def texts(conv):
                return [b.split('"""\n', 1)[1].rsplit('\n"""', 1)[0] for b in conv[-2]["content"].split("'s response:\n")[1:]]
            for new, old in zip(texts(c), texts(plain[(m["qid"], m["agent"])])):
                n_new, n_old = (len(tok(x, add_special_tokens=False).input_ids) for x in (new, old))
                assert abs(n_new - n_old) <= 1 and new != old
    print({k: {f: v["share"] for f, v in by.items()} for k, by in cr["by_condition"].items()},
          {k: v["delta"] for k, v in cr.get("gaps_f0", {}).items()})


def test_real_debate_read_by_the_belief_layer(debate_run, hf_engine):
    """``chorus debate belief`` on the embedded model's debate (plumbing: SmolLM2-135M numbers are noise):
    every reading is the forced choice of its conversation, every heard turn of the two-option questions is
    appraised once by the belief layer's appraiser, and the debate's report carries the table. Last in this
    file: it writes RUN/belief inside the shared run."""
    from chorus.simulate.debate.config import BeliefReadConfig
    from chorus.simulate.debate.experiment import report
    from chorus.simulate.debate.stubbornness import READ, reading_jobs, run_belief
    run, _ = debate_run
    out, s = run_belief(run.path, BeliefReadConfig(n_boot=20), engine=hf_engine)
    assert out == run.path / "belief"
    c = s["counts"]
    assert c["stance_questions"] == 2 and c["left_out"] == {"numeric": 0, "not_two_options": 1}
    readings = pd.read_parquet(out / "tables" / "readings.parquet")
    items = {q: validate_item(x) for x in ITEMS for q in [x["id"]] if q in ("t2", "t3")}
    keys, convs = reading_jobs(items, run.read_table("turns").query("qid in ['t2', 't3']"), load_prompts())
    k = next(i for i, x in enumerate(keys) if x["f"] == READ and x["condition"] == "debate")
    labs = items[keys[k]["qid"]].labels
    lp = hf_engine.option_logprobs([convs[k]], [" " + x for x in labs])[0]
    row = readings[(readings["qid"] == keys[k]["qid"]) & (readings["condition"] == "debate") & (readings["f"] == READ)
                   & (readings["agent"] == keys[k]["agent"]) & (readings["round"] == keys[k]["round"])]
    # float32 in a padded batch vs alone: equal to ~1e-6
    assert float(row["b"].iloc[0]) == pytest.approx(1 / (1 + np.exp(lp[" " + labs[1]] - lp[" " + labs[0]])), abs=1e-4)
    ev = pd.read_parquet(out / "tables" / "evidence.parquet")
    assert len(ev) == 2 * 3 and c["heard_turns"] == 6  # round 0 of two questions, three speakers
    ok = np.isfinite(ev["e"])
    assert ((ev["e"][ok] >= 0) & (ev["e"][ok] <= 1)).all() and ev["error"][~ok].map(bool).all()
    assert [r["agent"] for r in s["agents"]] == ["A1", "A2", "A3", "all"] and "kappa_placebo" in s["agents"][0]
    assert (out / "plots" / "belief.png").is_file()
    from chorus.simulate.debate.bda import DebateTraceError, run_bda
    with pytest.raises(DebateTraceError, match="cross-validated|has a parsed turn"):  # too few questions
        run_bda(run.path, make_plots=False)
    assert not (run.path / "bda-debate").exists()  # refused before any write: no unfinished run left inside
    from chorus.core.analyses import briefs_in
    report(run.path, make_plots=False)  # the debate's own numbers: the belief run is shown beside them, not in them
    assert [r["agent"] for r in briefs_in(run.path)["belief"]["agents"]] == ["A1", "A2", "A3", "all"]


def test_real_debate_counterfactual_replays_exactly(debate_run, hf_engine):
    """``chorus influence counterfactual`` on the embedded model's debate (plumbing): agent 0's round-1
    reply regenerated with its attention to agent 1's response cut in every layer; with nothing cut the
    replay is the stored debate, token for token (the engine's own seeded sampler)."""
    from chorus.interventions.counterfactual import CounterfactualConfig, run_counterfactual
    run, _ = debate_run
    path, s = run_counterfactual(run.path, CounterfactualConfig(receiver=0, peer=1, round=1, n_boot=20),
                                 engine=hf_engine)
    assert s["n_questions"] == 3 and s["replay_equals_factual"]["all"]
    t = pd.read_parquet(path / "tables" / "turns.parquet")
    cut = t[(t["condition"] == "cut") & (t["round"] == 1) & (t["agent"] == 0)]
    assert len(cut) == 3 and cut["response"].map(len).gt(0).all()
    from chorus.core.analyses import briefs_in
    assert {k for k, b in briefs_in(run.path).items() if b["analysis"] == "influence counterfactual"} \
        == {"counterfactual-a0-p1-r1"}


def test_influence_cues_with_the_magnitude_matched_set(debate_run, hf_engine, tmp_path):
    """``chorus influence cues`` with ``cues.sets: [original, matched]`` on the embedded model's
    debate: per pair the shared controls once and four crossed cues per set, the matched ones named
    ``cue@matched``; the summary's per-set contrasts and ratio are those of the effects table, the
    original set's as the default run reports them."""
    from chorus.interventions import ablations as ab
    from chorus.interventions.experiment import run_influence
    run, _ = debate_run
    kw = dict(name="e2e", source_run=str(run.path), model={"backend": "hf"},
              analysis={"n_boot": 30, "n_perm": 30}, interventions={"require_disagreement": False})
    r, s = run_influence(InfluenceConfig(**kw, cues={"sets": ["original", "matched"]}), "cues",
                         tmp_path / "both", engine=hf_engine)
    turns = run.read_table("turns")
    r0 = turns[(turns["round"] == 0) & (turns["condition"] == "debate")]
    assert s["n_pairs"] == int((r0.groupby("qid")["parsed"].sum() >= 2).sum())
    if not s["n_pairs"]:
        pytest.skip("no round-0 pair with two parsed answers in this debate")
    matched = [ab.cue_name(c, "matched") for c in ab.CROSSED]
    m = r.read_table("margins")
    assert m["margin"].notna().all()
    for _, g in m.groupby("qid", sort=False):
        assert list(g["intervention"]) == ["no_message", "plain", *ab.CROSSED, *matched, "self_label", "moved"]
    assert set(matched) <= set(s["effects"])
    cs = s["cue_sets"]
    assert list(cs) == ["original", "matched"]
    w = r.read_table("effects")
    for name, d in cs.items():
        assert set(d) == {"record_effect", "status_effect", "record_status_ratio", "status_within_poor_record",
                          "phrase_tokens"}
        assert d["phrase_tokens"] == ab.phrase_tokens(load_prompts(), name, hf_engine.tokenizer)
        crossed = [w[ab.cue_name(c, name)] for c in ab.CROSSED]
        rec = ((crossed[0] + crossed[1]) - (crossed[2] + crossed[3])) / 2
        sta = ((crossed[0] + crossed[2]) - (crossed[1] + crossed[3])) / 2
        assert d["record_effect"]["mean"] == pytest.approx(rec.mean())
        assert d["status_effect"]["mean"] == pytest.approx(sta.mean())
        assert d["record_status_ratio"]["estimate"] == pytest.approx(rec.mean() / sta.mean(), nan_ok=True)
    assert {k: s[k] for k in ("record_effect", "status_effect", "record_status_ratio")} == \
        {k: v for k, v in cs["original"].items() if k in ("record_effect", "status_effect", "record_status_ratio")}
    assert (r.path / "plots" / "cue_sets.png").is_file() and (r.path / "plots" / "cues_effects.png").is_file()
    # the default run: no matched rows, no per-set block, the same original margins (batched float32: ~1e-6)
    r1, s1 = run_influence(InfluenceConfig(**kw), "cues", tmp_path / "default", engine=hf_engine)
    m1 = r1.read_table("margins")
    assert list(m1.groupby("qid", sort=False).head(len(ab.CUES))["intervention"][:len(ab.CUES)]) == list(ab.CUES)
    assert "cue_sets" not in s1 and not (r1.path / "plots" / "cue_sets.png").exists()
    both = m[m["intervention"].isin(ab.CUES)].reset_index(drop=True)
    assert both[["qid", "intervention"]].equals(m1[["qid", "intervention"]])
    assert both["margin"].to_numpy() == pytest.approx(m1["margin"].to_numpy(), abs=1e-4)
    print({k: v["record_status_ratio"]["estimate"] for k, v in cs.items()})


def test_influence_paper_from_real_runs(debate_run, hf_engine, tmp_path):
    """``chorus paper influence`` over the embedded model's debate and its readout and cue runs: each
    section's rows are the runs' summary numbers, named by run; sections without runs name a command."""
    from typer.testing import CliRunner

    from chorus.cli import app
    from chorus.core.runs import json_safe
    from chorus.interventions.experiment import run_influence
    run, s_debate = debate_run
    cfg = InfluenceConfig(name="e2e", source_run=str(run.path), model={"backend": "hf"},
                          readout={"fractions": [0.0]}, analysis={"n_boot": 20, "n_perm": 20},
                          interventions={"require_disagreement": False})
    ro, s_ro = run_influence(cfg, "readout", tmp_path / "readout", engine=hf_engine, make_plots=False)
    cu, s_cu = run_influence(cfg, "cues", tmp_path / "cues", engine=hf_engine)
    res = CliRunner().invoke(app, ["paper", "influence", str(run.path), str(ro.path), str(cu.path),
                                   "--out", str(tmp_path / "paper")])
    assert res.exit_code == 0, res.output
    nb = json.loads((tmp_path / "paper" / "numbers.json").read_text())
    sec = nb["sections"]
    assert list(sec)[:3] == ["fig1_committed", "s41_gaps", "table9_paired"]       # the paper's order
    assert {r["kind"] for r in nb["runs"]} == {"debate", "readout", "cues"}
    for k in ("s44_knockout", "fig8_transfer", "table14_long"):
        assert "chorus " in sec[k]["missing"]                                     # what makes the missing runs
    assert "missing" in sec["s42_ablations"] and "influence ablate" in sec["s42_ablations"]["missing"]
    by = s_ro.get("committed_at_read", {}).get("by_condition", {})
    rows = sec["fig1_committed"].get("rows", [])
    assert [[r["condition"], r["share"]] for r in rows] == json_safe([(c, v["share"]) for c, d in by.items()
                                                                      for v in d.values()])   # NaN is null in JSON
    assert all(r["run"] == ro.path.name and r["model"] == s_ro["model"] for r in rows)
    if "record_status_ratio" in s_cu:
        got = {r["quantity"]: r["value"] for r in sec["fig2_cues"]["rows"]}
        assert got["record_status_ratio"] == json_safe(s_cu["record_status_ratio"]["estimate"])
    out = [r for r in sec["s5_outcomes"].get("rows", [])]
    assert len(out) == len(s_debate.get("paired", {}).get("deltas", [])) + ("n_eff_delta" in s_debate.get("paired", {}))
    assert sec["numeric"]["rows"][0]["questions"] == 1                             # the numeric item's own rows
    md = (tmp_path / "paper" / "paper.md").read_text()
    assert md.index("Figure 1") < md.index("Table 9") < md.index("Figure 2") < md.index("Table 14")
    assert "*Missing:*" in md and ro.path.name in md
    assert nb["note"] and "smollm2-135m-instruct" in nb["note"] and nb["note"] in md   # plumbing, said once
    bad = CliRunner().invoke(app, ["paper", "influence", str(tmp_path), "--out", str(tmp_path / "p2")])
    assert bad.exit_code == 2 and "not a run directory" in bad.output
