"""The seed-clustered paired bootstrap (chorus.core.stats.paired_bootstrap(seeds=); BDA paper §7) and its place in the
run results (results.json ``bootstrap_seed_clustered``, results.md, verify)."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from chorus.aggregate.config import RunConfig
from chorus.aggregate.errors import TraceError
from chorus.aggregate.experiments import evaluate_run, generation_seeds, run_experiment
from chorus.aggregate.results_file import render_markdown
from chorus.aggregate.synthetic_councils import CouncilSpec, generate_council
from chorus.aggregate.trace import dump_traces
from chorus.core.stats import paired_bootstrap


def _arm(correct, conf=None):
    c = np.asarray(correct, float)
    conf = np.full(len(c), 0.7) if conf is None else np.asarray(conf, float)
    return {"correct": c, "confidence": conf, "brier": (c - conf) ** 2}


def _random_arms(n, seed):
    r = np.random.default_rng(seed)
    return {m: _arm(r.random(n) < p, r.uniform(0.5, 1.0, n)) for m, p in (("A", 0.8), ("B", 0.7))}


def test_one_seed_or_copied_seeds_equal_the_question_clustered_bootstrap():
    data, q = _random_arms(200, 0), np.arange(200) % 50
    clus = paired_bootstrap(data, [("A", "B")], clusters=q, n_resamples=1000, seed=4)
    one = paired_bootstrap(data, [("A", "B")], clusters=q, n_resamples=1000, seed=4, seeds=np.zeros(200))
    assert one.drop(columns=["seed_clustered", "n_seeds"]).equals(clus) and (one["n_seeds"] == 1).all()
    # three seeds whose tasks are identical copies: the seed draw cancels (every question is in every seed)
    copies = {m: {k: np.tile(v, 3) for k, v in d.items()} for m, d in data.items()}
    three = paired_bootstrap(copies, [("A", "B")], clusters=np.tile(q, 3), n_resamples=1000, seed=4,
                             seeds=np.repeat([0, 1, 2], 200))
    cols = ["delta", "ci_low", "ci_high", "p_win", "p_tie"]
    assert np.allclose(three[cols].to_numpy(), clus[cols].to_numpy(), atol=1e-12)
    assert (three["n_clusters"] == 50).all() and (three["n_seeds"] == 3).all()


def test_two_seeds_two_questions_by_hand():
    # per-task accuracy delta A - B: seed 0 (q0 +1, q1 0), seed 1 (q0 0, q1 -1); A's Brier is B's, so only accuracy moves.
    # Seed draws w = (w0, 2 - w0) and question draws v = (v0, 2 - v0), each w0, v0 in {0, 1, 2} w.p. 1/4, 1/2, 1/4;
    # delta = (w0 v0 - (2 - w0)(2 - v0)) / 4: > 0 at (2, 2), (2, 1), (1, 2): 1/16 + 1/8 + 1/8 = 5/16;
    # = 0 at (1, 1), (2, 0), (0, 2): 1/4 + 1/16 + 1/16 = 3/8; the values span [-1, 1] (1/16 each end).
    a = _arm([1, 0, 0, 0], [0.5] * 4)
    b = _arm([0, 0, 0, 1], [0.5] * 4)
    q, s = np.array([0, 1, 0, 1]), np.array([0, 0, 1, 1])
    d = paired_bootstrap({"A": a, "B": b}, [("A", "B")], metrics=["accuracy"], clusters=q, seeds=s,
                         n_resamples=40_000, seed=1).iloc[0]
    assert d["delta"] == 0.0
    assert d["p_win"] == pytest.approx(5 / 16, abs=0.01) and d["p_tie"] == pytest.approx(3 / 8, abs=0.01)
    assert d["ci_low"] == -1.0 and d["ci_high"] == 1.0
    # the question-clustered bootstrap sees no seed effect: delta = (v0 - (2 - v0)) / 4 in {-1/2, 0, 1/2}
    c = paired_bootstrap({"A": a, "B": b}, [("A", "B")], metrics=["accuracy"], clusters=q, n_resamples=40_000,
                         seed=1).iloc[0]
    assert c["ci_low"] == -0.5 and c["ci_high"] == 0.5 and c["p_tie"] == pytest.approx(1 / 2, abs=0.01)


def test_seeds_must_align_with_tasks():
    with pytest.raises(ValueError, match="seeds has 3 entries for 4 tasks"):
        paired_bootstrap({"A": _arm([1, 0, 1, 1])}, [("A", "A")], seeds=np.zeros(3), n_resamples=10)


def _seeded(n=180, seeds=3):
    trs = generate_council(CouncilSpec(n_tasks=n, K=2, rounds=2, reliabilities=(0.8, 0.65, 0.6), repeats=seeds), seed=2)
    return [replace(tr, extra={"gen_seed": t % seeds}) for t, tr in enumerate(trs)]


def test_run_results_carry_it_and_verify_recomputes_it(tmp_path):
    trs = _seeded()
    f = dump_traces(trs, tmp_path / "t.jsonl")
    cfg = RunConfig(name="s", traces=str(f), methods=["plurality", "bda_per_agent"], recalibrate=[],
                    bootstrap={"n_resamples": 200})
    rec = evaluate_run(cfg, trs).record
    rows = pd.DataFrame(rec["bootstrap_seed_clustered"])
    assert (rows["n_seeds"] == 3).all() and (rows["n_clusters"] == rec["n_questions"]).all()
    assert rows[["a", "b", "metric"]].equals(pd.DataFrame(rec["bootstrap_clustered"])[["a", "b", "metric"]])
    assert np.allclose(rows["delta"], pd.DataFrame(rec["bootstrap_clustered"])["delta"])   # same point estimate
    # one seed, or no seeds: nothing to cluster by
    assert evaluate_run(cfg, [replace(t, extra={"gen_seed": 0}) for t in trs]).record["bootstrap_seed_clustered"] is None
    assert generation_seeds([replace(t, extra={}) for t in trs]) is None
    from chorus.aggregate.results import verify
    path = run_experiment(cfg, tmp_path / "run")
    md = (tmp_path / "run" / "results.md").read_text()
    assert "## Seed-clustered paired bootstrap" in md and "the 3 generation seeds" in md
    checks = verify(tmp_path / "run")
    assert all(c.ok for c in checks) and any(c.what.startswith("bootstrap_seed_clustered") for c in checks)
    res = json.loads(path.read_text())   # a results file from before the key still verifies
    del res["cells"][0]["bootstrap_seed_clustered"]
    path.write_text(json.dumps(res))
    (tmp_path / "run" / "results.md").write_text(render_markdown(res))
    assert all(c.ok for c in verify(tmp_path / "run"))
    # a tampered interval is caught
    res["cells"][0]["bootstrap_seed_clustered"] = rows.assign(ci_low=rows["ci_low"] - 0.01).to_dict("records")
    path.write_text(json.dumps(res))
    (tmp_path / "run" / "results.md").write_text(render_markdown(res))
    bad = [c for c in verify(tmp_path / "run") if not c.ok]
    assert bad and all(c.what.startswith("bootstrap_seed_clustered") and c.what.endswith("ci_low") for c in bad)


def test_a_bad_generation_seed_is_named(tmp_path):
    trs = _seeded(60)
    trs[7] = replace(trs[7], extra={"gen_seed": [1, 2]})
    with pytest.raises(TraceError, match=r"gen_seed must be an integer or a string, got \[1, 2\]"):
        generation_seeds(trs)
    from typer.testing import CliRunner

    from chorus.cli import app
    f = dump_traces(trs, tmp_path / "t.jsonl")
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"name: bad\ntraces: {f}\nmethods: [plurality]\nrecalibrate: []\nbootstrap: {{n_resamples: 100}}\n")
    r = CliRunner().invoke(app, ["aggregate", "run", str(cfg), "--out", str(tmp_path / "run"), "--quiet"])
    assert r.exit_code == 2 and "gen_seed must be an integer or a string" in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1
