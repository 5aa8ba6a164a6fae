"""Metrics per generation seed and across seeds (BDA paper Fig. 5 / Table 6): ``metrics_by_seed`` of a cell."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from chorus.aggregate.config import RunConfig
from chorus.aggregate.experiments import evaluate_run, run_experiment
from chorus.aggregate.metrics import summarize
from chorus.aggregate.synthetic_councils import CouncilSpec, generate_council
from chorus.aggregate.trace import dump_traces


def _seeded(tmp_path):
    trs = generate_council(CouncilSpec(n_tasks=240, K=2, rounds=2, reliabilities=(0.75, 0.65, 0.6), repeats=3), seed=1)
    trs = [replace(tr, extra={"gen_seed": t % 3}) for t, tr in enumerate(trs)]   # three generation seeds
    return trs, dump_traces(trs, tmp_path / "t.jsonl")


def test_metrics_by_seed_are_each_seeds_held_out_predictions(tmp_path):
    trs, f = _seeded(tmp_path)
    cfg = RunConfig(name="s", traces=str(f), methods=["plurality", "bda_per_agent"], recalibrate=[],
                    bootstrap={"n_resamples": 100})
    cell = evaluate_run(cfg, trs)
    by = cell.record["metrics_by_seed"]
    assert sorted(by["seeds"]) == ["0", "1", "2"]
    seeds = np.array([tr.extra["gen_seed"] for tr in trs])
    for sd in range(3):
        sel = seeds == sd
        want = summarize(cell.cv.answer["bda_per_agent"][sel], cell.cv.proba["bda_per_agent"][sel], cell.pool.gold[sel])
        assert by["seeds"][str(sd)]["bda_per_agent"] == pytest.approx(want)
    acc = [by["seeds"][str(sd)]["plurality"]["accuracy"] for sd in range(3)]
    assert by["across_seeds"]["plurality"]["accuracy"] == pytest.approx({"mean": np.mean(acc), "sd": np.std(acc, ddof=1)})
    # without generation seeds there is nothing to split
    assert evaluate_run(cfg, [replace(tr, extra={}) for tr in trs], bootstrap=False).record["metrics_by_seed"] is None


def test_verify_checks_them_and_reads_results_written_before_them(tmp_path):
    from chorus.aggregate.results import verify
    trs, f = _seeded(tmp_path)
    cfg = RunConfig(name="s", traces=str(f), methods=["plurality"], recalibrate=[], bootstrap={"n_resamples": 100})
    path = run_experiment(cfg, tmp_path / "run")
    checks = verify(tmp_path / "run")
    assert all(c.ok for c in checks) and any(c.what.startswith("metrics_by_seed") for c in checks)
    res = json.loads(path.read_text())
    del res["cells"][0]["metrics_by_seed"]          # a results file from before the key
    path.write_text(json.dumps(res))
    assert all(c.ok for c in verify(tmp_path / "run"))
