"""Cross-domain transfer to a target of another K (aggregate/transfer.py; BDA paper App. E.2 / E.4)."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from chorus.aggregate.errors import TraceError
from chorus.aggregate.synthetic_councils import CouncilSpec, generate_council
from chorus.aggregate.trace import Move, Trace, dump_traces
from chorus.aggregate.transfer import cross_domain_transfer, transfer_summary

ONE_POINT = {"b": (0.58,), "kappa": (1.0,), "s": (16.0,)}   # a one-point grid: the inner CV has nothing to choose


def _sources(copies=10):
    # gold x: A1 proposes x, challenges A2's y; A2 proposes y, concedes to x.  gold y: both propose y; A1 re-proposes
    # y, A2 switches to x.  Over the sources: A1 consistent in 4 of 4 moves (r = 1), A2 in 2 of 4 (r = 1/2).
    t1 = Trace("t1", ("x", "y"), (Move("A1", 0, "propose", "x"), Move("A2", 0, "propose", "y"),
                                  Move("A1", 1, "challenge", target=1), Move("A2", 1, "concede", target=0)), gold="x")
    t2 = Trace("t2", ("x", "y"), (Move("A1", 0, "propose", "y"), Move("A2", 0, "propose", "y"),
                                  Move("A1", 1, "propose", "y"), Move("A2", 1, "propose", "x")), gold="y")
    return {"claims": [replace(t, task_id=f"{t.task_id}-{j}") for j in range(copies) for t in (t1, t2)]}


def _target():
    # K = 3, gold x: A1 proposes x and challenges A2's y; A2 proposes y twice
    return [Trace("p1", ("x", "y", "z"), (Move("A1", 0, "propose", "x"), Move("A2", 0, "propose", "y"),
                                          Move("A1", 1, "challenge", target=1), Move("A2", 1, "propose", "y")), gold="x")]


def test_one_coin_crosses_k_by_hand():
    tab = cross_domain_transfer(_sources(), _target(), ["bda_per_agent", "bda_confusion"], grids=ONE_POINT,
                                inner_folds=2, in_domain=False)
    row = tab[tab["method"] == "bda_per_agent"].iloc[0]
    assert (row["K_sources"], row["K_target"], row["n_train"]) == (2, 3, 20)
    # mu = b + kappa (r - mean r): A1 0.58 + 0.25, A2 0.58 - 0.25; alpha = mu s, beta = (1 - mu) s
    a1, b1 = 0.83 * 16, 0.17 * 16
    a2, b2 = 0.33 * 16, 0.67 * 16
    # every seat has N = 2 moves, so B(a + c, b + d) / B(a, b) = {a(a+1), ab, b(b+1)} / ((a+b)(a+b+1)) for c = 2, 1, 0;
    # times 2^-(N - e(g)) with K - 1 = 2.  A1: c = (2, 0, 1), e = (1, 0, 0); A2: c = (0, 2, 0), e = (0, 2, 0).
    f1 = np.array([a1 * (a1 + 1) / 2, b1 * (b1 + 1) / 4, a1 * b1 / 4])
    f2 = np.array([b2 * (b2 + 1) / 4, a2 * (a2 + 1), b2 * (b2 + 1) / 4])
    p = f1 * f2 / (f1 * f2).sum()
    assert row["accuracy"] == float(p.argmax() == 0)
    assert row["brier"] == pytest.approx((p[0] - 1) ** 2 + p[1] ** 2 + p[2] ** 2, abs=1e-12)
    assert row["mean_confidence"] == pytest.approx(p.max(), abs=1e-12)
    assert (row["hp_b"], row["hp_kappa"], row["hp_s"]) == (0.58, 1.0, 16.0)
    conf = tab[tab["method"] == "bda_confusion"].iloc[0]
    assert conf["skipped"] and "K=2" in conf["reason"] and "K=3" in conf["reason"] and np.isnan(conf["accuracy"])


def test_same_council_transfers_like_in_domain_and_the_confusion_only_in_domain():
    spec = CouncilSpec(n_tasks=240, K=2, rounds=2, reliabilities=(0.85, 0.6, 0.55))
    src = {"a": generate_council(spec, seed=1, prefix="a"), "b": generate_council(spec, seed=2, prefix="b")}
    tgt = generate_council(replace(spec, K=3), seed=3, prefix="p")
    tab = cross_domain_transfer(src, tgt, ["plurality", "bda_per_agent", "bda_confusion"], inner_folds=3, outer_folds=3)
    s = transfer_summary(tab).set_index("method")
    assert abs(s.at["bda_per_agent", "accuracy_transfer"] - s.at["bda_per_agent", "accuracy_in_domain"]) < 0.05
    assert s.at["bda_per_agent", "accuracy_transfer"] > s.at["plurality", "accuracy_transfer"] + 0.03
    assert np.isnan(s.at["bda_confusion", "accuracy_transfer"]) and s.at["bda_confusion", "accuracy_in_domain"] > 0.5


def test_bad_sets_are_named_and_the_cli_writes_its_table(tmp_path):
    src, tgt = _sources(), _target()
    with pytest.raises(TraceError, match="same seats"):
        cross_domain_transfer(src, [replace(tgt[0], moves=tgt[0].moves + (Move("A3", 1, "propose", "z"),))],
                              ["plurality"], in_domain=False)
    with pytest.raises(TraceError, match="must be disjoint"):
        cross_domain_transfer(src, [replace(tgt[0], task_id="t1-0")], ["plurality"], in_domain=False)
    from typer.testing import CliRunner

    from chorus.cli import app
    spec = CouncilSpec(n_tasks=60, K=2, rounds=2)
    fa = dump_traces(generate_council(spec, seed=1, prefix="a"), tmp_path / "a.jsonl")
    fp = dump_traces(generate_council(replace(spec, K=3), seed=2, prefix="p"), tmp_path / "p.jsonl")
    r = CliRunner().invoke(app, ["aggregate", "transfer", f"claims={fa}", "--target", f"pubmedqa={fp}", "--methods",
                                 "plurality,bda_per_agent,bda_confusion", "--inner-folds", "2", "--outer-folds", "2",
                                 "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    rows = json.loads((tmp_path / "out" / "summary.json").read_text())["rows"]
    assert {(x["method"], x["evaluation"], x["skipped"]) for x in rows} >= {("bda_confusion", "transfer", True),
                                                                             ("bda_confusion", "in_domain", False)}
    r = CliRunner().invoke(app, ["aggregate", "transfer", f"claims={fa}", "--target", "pubmedqa"])
    assert r.exit_code == 2 and "--target is NAME=FILE, got 'pubmedqa'" in r.output
    assert len(r.output.strip().splitlines()) == 1
