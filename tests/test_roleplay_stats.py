"""``chorus roleplay stats``: every statistic against hand-computed values on small constructed
tables, the compute record in provenance, and the verb over the session's tiny real roleplay run."""
from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from chorus.core.compute import measure, total_compute
from chorus.core.runs import RunDir
from chorus.simulate.roleplay import across_runs as S

runner = CliRunner()


# -- the math, by hand ----------------------------------------------------------------------------
def test_sign_test_is_the_binomial_tail():
    assert S.sign_test([1] * 8)["p"] == pytest.approx(1 / 256)                 # 8/8: 0.5^8
    r = S.sign_test([1] * 7 + [-2])
    assert (r["k"], r["n"]) == (7, 8) and r["p"] == pytest.approx((8 + 1) / 256)  # C(8,7) + C(8,8)
    assert S.sign_test([1, -1, -1])["p"] == pytest.approx(1 - 1 / 8)            # P(K >= 1 | 3)
    r = S.sign_test([0.5, 0.0, -1.0, float("nan")])                             # a tie and a NaN dropped
    assert (r["k"], r["n"], r["ties"]) == (1, 2, 1) and r["p"] == pytest.approx(3 / 4)


def test_normal_approximation_by_hand():
    r = S.normal_approx(1.0, 0.3, 0.5, 0.4)                                     # se = sqrt(.09 + .16) = .5
    assert r["se"] == pytest.approx(0.5) and r["z"] == pytest.approx(1.0)
    assert r["p"] == pytest.approx(math.erfc(1 / math.sqrt(2)))                 # 2 (1 - Phi(1))
    assert math.isnan(S.normal_approx(1.0, 0.0, 0.5, 0.0)["p"])


def test_correlation_by_hand():
    # deviations (-1.5, -.5, .5, 1.5) and (-1.5, .5, -.5, 1.5): r = 4 / 5; the ranks are the values
    r = S.correlation([1, 2, 3, 4], [1, 3, 2, 4])
    assert r["n"] == 4 and r["pearson_r"] == pytest.approx(0.8) and r["spearman_rho"] == pytest.approx(0.8)
    # with 2 degrees of freedom the two-sided t-test p is 1 - |t| / sqrt(2 + t^2) = 1 - |r|
    assert r["pearson_p"] == pytest.approx(0.2)
    assert math.isnan(S.correlation([1, 2], [2, 1])["pearson_r"])              # fewer than 3 models


def test_bootstrap_sd_is_the_sd_of_resampled_means():
    v = np.array([1.0, 2.0, 4.0, 7.0])
    got = S.bootstrap_sd(v, 200, np.random.default_rng(3))
    idx = np.random.default_rng(3).integers(0, 4, size=(200, 4))
    assert got == pytest.approx(np.std([v[i].mean() for i in idx], ddof=1))
    assert S.bootstrap_sd([2.0, 2.0, 2.0], 50, np.random.default_rng(0)) == 0.0
    assert math.isnan(S.bootstrap_sd([2.0], 50, np.random.default_rng(0)))


# -- the tables ---------------------------------------------------------------------------------
def _run(split: str, models: list[str], individual=None, groups=None, text=None, pg=None) -> S.Run:
    from chorus.simulate.roleplay.config import DataSpec, LabelledModel, RoleplayConfig
    cfg = RoleplayConfig(data=DataSpec(split=split), models=[LabelledModel(label=m, profile=m) for m in models])
    t = {k: v for k, v in {"individual": individual, "groups": groups, "text_metrics": text, "partner_gap": pg}.items()
         if v is not None}
    return S.Run(Path(f"/runs/{split}"), cfg, {"prompts": {"sha256": "x"}}, "sha", t)


def test_bars_from_tables_by_hand():
    ind = pd.DataFrame({"source": "base", "setup": "full_dynamics", "channel": "public",
                        "group_id": ["g1", "g1", "g2", "g2"], "participant": ["a", "b", "c", "d"],
                        "single_error": [1.0, 3.0, 0.0, 2.0], "update_error": [0.0, 0.0, 1.0, 1.0]})
    grp = pd.DataFrame({"source": ["human", "human", "base", "base"], "setup": ["human", "human", "full_dynamics",
                                                                                 "full_dynamics"],
                        "channel": "public", "group_id": ["g1", "g2", "g1", "g2"], "delta_sd": [-0.1, 0.2, -0.5, -0.4]})
    b = S.bars([_run("group", ["base"], individual=ind, groups=grp)]).set_index(["source", "metric"])
    assert b.loc[("base", "single_error"), "mean"] == pytest.approx((2.0 + 1.0) / 2)    # per group first
    assert b.loc[("base", "update_error"), "mean"] == pytest.approx(0.5)
    assert b.loc[("base", "convergence_error"), "mean"] == pytest.approx((0.4 + 0.6) / 2)
    assert b.loc[("human", "delta_sd"), "mean"] == pytest.approx(0.05)
    assert (b["n"] == 2).all() and (b["boot_sd"] >= 0).all()


def _bars(rows) -> pd.DataFrame:
    return pd.DataFrame([dict(zip(["split", "source", "setup", "channel", "metric", "mean"], r),
                              boot_sd=0.1, n=10, n_groups=10, n_boot=100, run=f"/runs/{r[0]}") for r in rows])


def test_cell_sign_tests_sft_better_in_8_cells_and_private_harder():
    rows = []
    for sp in S.SPLITS:
        for st in S.SETUPS:
            for ch in S.CHANNELS:
                hard = 1.0 if ch == "private" else 0.0
                rows += [(sp, "base", st, ch, "rouge_l", 0.2 - hard / 10), (sp, "sft", st, ch, "rouge_l", 0.3 - hard / 10),
                         (sp, "base", st, ch, "length_deviation", 9 + hard), (sp, "sft", st, ch, "length_deviation", 5 + hard)]
    t = S.cell_sign_tests(_bars(rows)).set_index(["test", "metric"])
    r = t.loc[("sft_better_than_base", "rouge_l")]
    assert (r["k"], r["n"]) == (8, 8) and r["p"] == pytest.approx(1 / 256) and len(r["cells"]) == 8
    assert t.loc[("base_better_than_sft", "length_deviation"), "k"] == 0
    r = t.loc[("private_harder/all models", "length_deviation")]       # 2 models x 2 splits x 2 setups
    assert (r["k"], r["n"]) == (8, 8)
    assert t.loc[("private_harder/sft", "rouge_l"), "k"] == 4           # lower ROUGE-L in private: harder


def test_model_level_sign_check_and_correlations():
    rows = []
    for m, single, upd, conv, gap in [("m1", 1, 1, 0.1, 1), ("m2", 2, 3, 0.3, -1), ("m3", 3, 2, 0.2, 1), ("m4", 4, 4, 0.5, 2)]:
        for ch, d in (("public", 0), ("private", gap)):
            rows += [("group", m, "full_dynamics", ch, "single_error", single + d),
                     ("group", m, "full_dynamics", ch, "update_error", upd + d),
                     ("group", m, "full_dynamics", ch, "convergence_error", conv + d)]
    rows.append(("group", "degroot", "rollout", "public", "single_error", 99.0))   # not a model point
    b = _bars(rows)
    c = S.model_sign_check(b).set_index("metric").loc["single_error"]
    assert (c["k"], c["n"]) == (3, 4) and c["p"] == pytest.approx(5 / 16)          # C(4,3) + C(4,4) over 2^4
    r = S.error_correlations(b).set_index(["channel", "x", "y"]).loc[("public", "single_error", "update_error")]
    assert r["n"] == 4 and r["pearson_r"] == pytest.approx(0.8) and r["pearson_p"] == pytest.approx(0.2)
    assert r["models"] == ["m1", "m2", "m3", "m4"]


def test_normal_tests_pair_the_right_bars():
    b = _bars([("group", "base", "full_dynamics", "private", "delta_sd", -0.5),
               ("group", "sft", "full_dynamics", "private", "delta_sd", -0.2),
               ("group", "human", "human", "private", "delta_sd", -0.1),
               ("group", "base", "next_message", "private", "delta_sd", -0.3)])
    t = S.normal_tests(b)
    pairs = set(zip(t["a"], t["b"]))
    assert ("base/full_dynamics", "sft/full_dynamics") in pairs and ("sft/full_dynamics", "human/human") in pairs
    assert ("base/full_dynamics", "base/next_message") not in pairs             # setups are not compared
    r = t[(t["a"] == "base/full_dynamics") & (t["b"] == "human/human")].iloc[0]
    assert r["z"] == pytest.approx(-0.4 / math.hypot(0.1, 0.1))


def test_missing_names_the_split_and_the_command():
    b = _bars([("group", "base", "full_dynamics", "public", "single_error", 1.0)])
    miss = S.missing([_run("group", ["base"])], b)
    text = " ".join(f"{m['missing']} {m['command']}" for m in miss)
    assert "no run of the topic split" in text and "chorus roleplay run topic" in text
    assert "only 1 role-play model" in text and "chorus sft train" in text
    assert "needs at least 3" in text


def test_runs_that_must_match_fail_naming_the_field():
    a, b = _run("group", ["base"]), _run("topic", ["base"])
    b.cfg = b.cfg.model_copy(update={"generation": b.cfg.generation.model_copy(update={"temperature": 0.1})})
    with pytest.raises(S.StatsInputError, match="runs differ in generation"):
        S.check_compatible([a, b])
    c = _run("group", ["base"])
    with pytest.raises(S.StatsInputError, match="appear twice in the group split"):
        S.check_compatible([a, c])


# -- compute in provenance ------------------------------------------------------------------------
def test_compute_is_recorded_in_provenance(tmp_path):
    run = RunDir.create(tmp_path / "r", part="test")
    with measure(run):
        t = time.perf_counter()
        while time.perf_counter() - t < 0.05:
            pass
    c = run.provenance()["compute"]
    assert c["wall_s"] >= 0.05 and c["cpu_core_s"] > 0 and c["peak_rss_gib"] > 0 and c["completed"]
    if "torch" not in sys.modules or not sys.modules["torch"].cuda.is_initialized():
        assert c["device"] == "cpu" and c["gpu_hours"] is None and c["n_gpus"] == 0
    with pytest.raises(ZeroDivisionError):
        with measure(run):
            1 / 0
    p = run.provenance()
    assert p["compute"]["completed"] is False and len(p["compute_earlier"]) == 1
    tot = total_compute(p)
    assert tot["attempts"] == 2 and tot["wall_s"] == pytest.approx(c["wall_s"] + p["compute"]["wall_s"])


def test_compute_on_a_gpu_records_gpu_hours_and_peak(tmp_path, monkeypatch):
    cuda = SimpleNamespace(is_initialized=lambda: True, device_count=lambda: 2, get_device_name=lambda i: "H100",
                           reset_peak_memory_stats=lambda i: None, max_memory_allocated=lambda i: (i + 1) * 2 ** 30)
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=cuda))
    run = RunDir.create(tmp_path / "r", part="test")
    with measure(run):
        time.sleep(0.02)
    c = run.provenance()["compute"]
    assert (c["device"], c["device_name"], c["n_gpus"]) == ("cuda", "H100", 2)
    assert c["gpu_hours"] == pytest.approx(c["wall_s"] * 2 / 3600, abs=1e-6)
    assert c["peak_gpu_memory_gib"] == [1.0, 2.0]


# -- the verb over the session's real tiny run ------------------------------------------------------
@pytest.mark.slow
def test_stats_verb_over_the_real_run(roleplay_run, tmp_path):
    from chorus.cli import app
    path, _, _ = roleplay_run
    s_run = RunDir(path).summary()
    r = runner.invoke(app, ["roleplay", "stats", str(path), "--out", str(tmp_path / "st")])
    assert r.exit_code == 0, r.output
    s = json.loads((tmp_path / "st" / "summary.json").read_text())
    b = pd.DataFrame(s["bars"]).set_index(["source", "setup", "channel", "metric"])
    # the bars are the run's own cells
    cell = s_run["cells"]["base/full_dynamics/private"]
    assert b.loc[("base", "full_dynamics", "private", "single_error"), "mean"] == pytest.approx(cell["single_error"]["mean"])
    assert b.loc[("human", "human", "public", "delta_sd"), "mean"] == pytest.approx(s_run["human"]["public"]["delta_sd"]["mean"])
    assert all(x["runs"] == [str(path)] for x in s["normal_tests"])
    assert {x["b"] for x in s["normal_tests"] if x["metric"] == "delta_sd"} >= {"human/human"}
    assert any(x["test"] == "private_harder/base" for x in s["sign_tests"])
    assert s["correlations"] == [] or all(x["n"] < 3 for x in s["correlations"])
    text = " ".join(f"{m['statistic']} {m['missing']} {m['command']}" for m in s["missing"])
    assert "no run of the topic split" in text and "only 1 role-play model" in text and "Fig. 12" in text
    assert "fewer than 2 groups" in text          # the session's run holds one group: no bootstrap SD
    assert s["compute"]["total"]["runs_with_compute"] == 1 and s["compute"]["total"]["wall_s"] > 0
    assert (tmp_path / "st" / "stats.md").read_text().startswith("# Role-play statistics")
    assert (tmp_path / "st" / "tables" / "bars.parquet").is_file() and (tmp_path / "st" / "plots" / "errors.png").is_file()

    # a run with another config, sealed as its own: one line naming the field, exit 2
    import shutil
    other = tmp_path / "other"
    shutil.copytree(path, other, ignore=shutil.ignore_patterns(".lock"))
    cfg = (other / "config.yaml").read_text()
    (other / "config.yaml").write_text(cfg.replace("split: group", "split: topic").replace("temperature: 0.7", "temperature: 0.2"))
    RunDir(other).seal()
    r = runner.invoke(app, ["roleplay", "stats", str(path), str(other), "--out", str(tmp_path / "st2")])
    assert r.exit_code == 2 and "runs differ in generation" in r.output
