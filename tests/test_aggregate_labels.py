"""Label efficiency (aggregate/label_efficiency.py; BDA paper App. E.6)."""
from __future__ import annotations

import numpy as np
import pytest

from chorus.aggregate.errors import LabelError
from chorus.aggregate.label_efficiency import efficiency_curve, label_efficiency
from chorus.aggregate.synthetic_councils import CouncilSpec, generate_council
from chorus.aggregate.trace import dump_traces

TRACES = generate_council(CouncilSpec(n_tasks=400, K=2, rounds=2, reliabilities=(0.85, 0.6, 0.55)), seed=4)


def test_calibration_sets_are_disjoint_from_the_hold_out_and_more_labels_help():
    t = label_efficiency(TRACES, ["plurality", "bda_per_agent"], [10, 40, 160], seeds=[0, 1, 2])
    assert set(t["budget"]) == {10, 40, 160} and len(t) == 3 * 3 * 2
    assert (t["n"] == 400 - t["n_calibration"]).all()          # every other labelled task is held out
    assert t["inner_folds"].between(2, 5).all()
    assert (t["n_calibration"] == t["budget"]).all()
    c = efficiency_curve(t)
    bda = c[c["method"] == "bda_per_agent"].set_index("budget")["mean"]
    assert bda[160] >= bda[10] and bda[160] > c[(c["method"] == "plurality") & (c["budget"] == 160)]["mean"].iloc[0]
    # plurality reads no label: the same decisions whatever the budget, up to the hold-out it is scored on
    assert c[c["method"] == "plurality"]["mean"].between(0.6, 0.8).all()
    # seeded: the same table again
    again = label_efficiency(TRACES, ["plurality", "bda_per_agent"], [10, 40, 160], seeds=[0, 1, 2])
    assert np.allclose(t["accuracy"], again["accuracy"])


def test_bad_budgets_name_themselves_and_the_cli_writes_the_curve(tmp_path):
    with pytest.raises(LabelError, match="label budget 400"):
        label_efficiency(TRACES, ["plurality"], [400])
    with pytest.raises(LabelError, match="label budget 3"):
        label_efficiency(TRACES, ["bda_per_agent"], [3])
    from typer.testing import CliRunner

    from chorus.cli import app
    f = dump_traces(TRACES, tmp_path / "t.jsonl")
    r = CliRunner().invoke(app, ["aggregate", "labels", str(f), "--budgets", "10,40", "--seeds", "0,1",
                                 "--methods", "plurality,bda_per_agent", "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "out" / "tables" / "labels.parquet").is_file() and (tmp_path / "out" / "plots" / "label_efficiency.png").is_file()
    r = CliRunner().invoke(app, ["aggregate", "labels", str(f), "--budgets", "10,x"])
    assert r.exit_code == 2 and "budgets" in r.output
