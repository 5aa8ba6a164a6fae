"""Round-0-truncated against full-trace aggregation (BDA paper Table 14): two leak-free nested CVs on
the same folds, paired per task. Plurality reads round-0 proposals only, so its delta is exactly 0;
on a synthetic council whose later rounds carry evidence (concessions to the reliable seat) BDA gains."""
from __future__ import annotations

import json

import numpy as np
import pytest

from chorus.aggregate.experiments import run_cell
from chorus.aggregate.synthetic_councils import Adversary, CouncilSpec, generate_council
from chorus.aggregate.truncation import truncation_table


@pytest.fixture(scope="module")
def attacked():
    return generate_council(CouncilSpec(n_tasks=600, K=2, rounds=3, reliabilities=(0.74, 0.68, 0.68)),
                            adversary=Adversary(kind="persistent", k=1, p_wrong=0.8), seed=0)


def test_each_basis_is_its_own_nested_cv_on_the_same_folds(attacked):
    m, d = truncation_table(attacked, ["plurality", "bda_per_agent"], n_boot=200)
    assert list(m.basis) == ["round0", "round0", "full", "full"]
    # the round-0 basis is exactly a nested CV on the truncated traces (nothing from later rounds leaks in)
    _, cv = run_cell([t.truncate(0) for t in attacked], ["bda_per_agent"], grids={}, protocol="strict",
                     on_violation="error", seed=0)
    acc = float((cv.answer["bda_per_agent"] == cv.pool.gold)[cv.fold >= 0].mean())
    assert m[(m.basis == "round0") & (m.method == "bda_per_agent")].accuracy.iloc[0] == pytest.approx(acc, abs=1e-12)
    p = d[(d.method == "plurality") & (d.metric == "accuracy")].iloc[0]
    assert p.delta == 0.0 and p.ci_low == 0.0 and p.ci_high == 0.0  # plurality never reads later rounds
    b = d[(d.method == "bda_per_agent") & (d.metric == "accuracy")].iloc[0]
    full = m[(m.basis == "full") & (m.method == "bda_per_agent")].accuracy.iloc[0]
    r0 = m[(m.basis == "round0") & (m.method == "bda_per_agent")].accuracy.iloc[0]
    assert b.delta == pytest.approx(full - r0, abs=1e-12) and b.ci_low <= b.delta <= b.ci_high


def test_cli_writes_both_tables(attacked, tmp_path):
    from typer.testing import CliRunner

    from chorus.aggregate.trace import dump_traces
    from chorus.cli import app
    f = tmp_path / "att.jsonl"
    dump_traces(attacked, f)
    res = CliRunner().invoke(app, ["aggregate", "truncation", str(f), "--methods", "plurality,stacker",
                                   "--n-boot", "100", "--out", str(tmp_path / "o")], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    j = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert {r["method"] for r in j["deltas"]} == {"plurality", "stacker"} and len(j["metrics"]) == 4
    flat = " ".join(res.output.split())   # issue 51 item 5: the delta's interval names its level
    n = j["deltas"][0]["n_units"]
    assert f"(95%, {n} questions resampled)" in flat or f"no interval (only {n} questions" in flat, flat
    res = CliRunner().invoke(app, ["aggregate", "truncation", str(f), "--methods", "nosuch"])
    assert res.exit_code == 2 and "unknown method 'nosuch'" in res.output
    assert np.isfinite([r["accuracy"] for r in j["metrics"]]).all()
