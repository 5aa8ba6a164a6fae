"""Leave-one-dataset-out transfer (aggregate/lodo.py; BDA paper App. E.2 / E.4)."""
from __future__ import annotations

import pytest

from chorus.aggregate.errors import TraceError
from chorus.aggregate.lodo import leave_one_dataset_out, transfer_gap
from chorus.aggregate.synthetic_councils import CouncilSpec, generate_council
from chorus.aggregate.trace import dump_traces

METHODS = ["plurality", "bda_per_agent"]


def _set(name, rel, seed, n=300):
    return generate_council(CouncilSpec(n_tasks=n, K=2, rounds=2, reliabilities=rel), seed=seed, prefix=name)


def test_reliabilities_transfer_between_like_sets_and_not_to_a_set_where_a_seat_turned():
    like = {"a": _set("a", (0.85, 0.6, 0.55), 1), "b": _set("b", (0.85, 0.6, 0.55), 2), "c": _set("c", (0.85, 0.6, 0.55), 3)}
    t = transfer_gap(leave_one_dataset_out(like, METHODS, inner_folds=3, outer_folds=3))
    bda = t[t["method"] == "bda_per_agent"]
    assert len(bda) == 3 and (bda["gap"].abs() < 0.05).all()       # the same council: transfer costs ~nothing
    assert (bda["transfer"] > t[t["method"] == "plurality"]["transfer"].to_numpy() + 0.05).all()
    # in set c the seat that was reliable in a and b has turned: its transferred weight now misleads
    turned = {**like, "c": _set("c", (0.15, 0.6, 0.55), 3)}
    g = transfer_gap(leave_one_dataset_out(turned, METHODS, inner_folds=3, outer_folds=3))
    c = g[(g["held_out"] == "c") & (g["method"] == "bda_per_agent")].iloc[0]
    assert c["transfer"] < 0.5 < c["in_domain"] and c["gap"] < -0.3


def test_lodo_names_bad_sets_and_the_cli_writes_its_table(tmp_path):
    a, b = _set("a", (0.7, 0.6, 0.6), 1, n=60), _set("b", (0.7, 0.6, 0.6), 2, n=60)
    with pytest.raises(TraceError, match="at least two trace sets"):
        leave_one_dataset_out({"a": a}, METHODS)
    with pytest.raises(TraceError, match="must be disjoint"):
        leave_one_dataset_out({"a": a, "b": a}, METHODS, inner_folds=2)
    four = generate_council(CouncilSpec(n_tasks=60, K=2, rounds=2, reliabilities=(0.7, 0.6, 0.6, 0.6)), seed=3, prefix="f")
    with pytest.raises(TraceError, match="same seats"):
        leave_one_dataset_out({"a": a, "f": four}, METHODS)
    from typer.testing import CliRunner

    from chorus.cli import app
    fa, fb = dump_traces(a, tmp_path / "a.jsonl"), dump_traces(b, tmp_path / "b.jsonl")
    r = CliRunner().invoke(app, ["aggregate", "lodo", f"a={fa}", f"b={fb}", "--methods", "plurality,bda_per_agent",
                                 "--inner-folds", "2", "--outer-folds", "2", "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    import pandas as pd
    tab = pd.read_parquet(tmp_path / "out" / "tables" / "lodo.parquet")
    assert set(tab["held_out"]) == {"a", "b"} and set(tab["evaluation"]) == {"transfer", "in_domain"}
    r = CliRunner().invoke(app, ["aggregate", "lodo", f"a={fa}", "nofile"])
    assert r.exit_code == 2 and "NAME=FILE" in r.output
