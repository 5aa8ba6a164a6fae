"""``chorus aggregate run | sweep | verify`` end to end on small synthetic trace sets."""
import json

import pytest
from typer.testing import CliRunner

from chorus.aggregate.cli import app

runner = CliRunner()

RUN_YAML = """
name: tiny
seed: 1
synthetic: {n_tasks: 150, K: 3, repeats: 3, adversary: {kind: persistent, k: 1, p_wrong: 0.8}}
methods: [plurality, verbalized, best_member, gated, stacker, bda_shared, bda_per_agent, bda_confusion]
recalibrate: [plurality]
grids: {C: [0.1, 10.0]}
bootstrap: {n_resamples: 300, reference: plurality}
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("agg")
    cfg = tmp / "run.yaml"
    cfg.write_text(RUN_YAML)
    out = tmp / "run"
    res = runner.invoke(app, ["run", str(cfg), "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    assert "results:" in res.output and str(out) in res.output
    return out


def test_run_writes_the_run_directory(run_dir):
    for f in ("config.yaml", "provenance.json", "results.json", "results.md", "summary.json",
              "traces/main.jsonl.gz", "tables/predictions.parquet", "tables/posteriors.parquet",
              "tables/metrics.parquet", "tables/folds.parquet", "tables/bootstrap.parquet",
              "tables/counts.parquet", "plots/reliability.png", "plots/reliability_bda_per_agent.png",
              "plots/reliability_plurality_iso.png"):
        assert (run_dir / f).is_file(), f
    res = json.loads((run_dir / "results.json").read_text())
    cell = res["cells"][0]
    assert res["kind"] == "run" and cell["n_traces"] == 150 and cell["K"] == 3
    assert set(cell["metrics"]) == {"plurality", "verbalized", "best_member", "gated", "stacker",
                                    "bda_shared", "bda_per_agent", "bda_confusion", "plurality+iso"}
    assert cell["tasks_repeat"] and cell["bootstrap_clustered"]  # 50 questions x 3 traces
    assert cell["move_inventory"]["propose"] > 450 and cell["protocol"]["rejected"] == 0
    assert cell["metrics"]["bda_per_agent"]["accuracy"] > cell["metrics"]["plurality"]["accuracy"]
    prov = json.loads((run_dir / "provenance.json").read_text())
    assert prov["part"] == "aggregate" and prov["finished"]
    md = (run_dir / "results.md").read_text()
    assert "| bda_per_agent |" in md and "p_win" in md


def test_verify_passes_then_catches_tampering(run_dir, tmp_path):
    res = runner.invoke(app, ["verify", str(run_dir), "--quiet", "--out", str(tmp_path / "v")])
    assert res.exit_code == 0, res.output
    assert "OK" in res.output
    # the check is a sealed record of its own: every comparison, and the run it read with its fingerprint
    v = json.loads((tmp_path / "v" / "summary.json").read_text())
    assert v["n_mismatches"] == 0 and v["checks"] > 0 and (tmp_path / "v" / "tables" / "checks.parquet").is_file()
    assert json.loads((tmp_path / "v" / "provenance.json").read_text())["sources"][0]["resolved"] == str(run_dir.resolve())
    # a hand-typed number in results.json
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(run_dir, bad)
    d = json.loads((bad / "results.json").read_text())
    d["cells"][0]["metrics"]["bda_per_agent"]["accuracy"] += 0.01
    (bad / "results.json").write_text(json.dumps(d))
    res = runner.invoke(app, ["verify", str(bad), "--quiet", "--no-bootstrap", "--out", str(tmp_path / "vb")])
    assert res.exit_code == 1
    assert "FAILED" in res.output and "metrics.bda_per_agent.accuracy" in res.output
    # a hand edit of the markdown table
    bad2 = tmp_path / "bad2"
    shutil.copytree(run_dir, bad2)
    (bad2 / "results.md").write_text((bad2 / "results.md").read_text().replace("| plurality |", "| plurality  |"))
    res = runner.invoke(app, ["verify", str(bad2), "--quiet", "--no-bootstrap", "--out", str(tmp_path / "vb2")])
    assert res.exit_code == 1 and "results.md" in res.output


def test_run_from_trace_file_and_controls(tmp_path):
    traces = tmp_path / "t.jsonl"
    res = runner.invoke(app, ["generate", "--out", str(traces), "--n", "120", "--adversary", "persistent"])
    assert res.exit_code == 0, res.output
    cfg = tmp_path / "run.yaml"
    cfg.write_text("name: f\ntraces: t.jsonl\nmethods: [plurality, bda_per_agent]\nrecalibrate: []\n"
                   "truncate_round: 0\npermute_labels: true\nbootstrap: {n_resamples: 200}\n")
    out = tmp_path / "r"
    res = runner.invoke(app, ["run", str(cfg), "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    cell = json.loads((out / "results.json").read_text())["cells"][0]
    assert cell["move_inventory"]["propose"] == 360 and cell["move_inventory"]["concede"] == 0
    assert runner.invoke(app, ["verify", str(out), "--quiet", "--out", str(tmp_path / "v")]).exit_code == 0
    res = runner.invoke(app, ["check", str(traces), "--out", str(tmp_path / "chk")])
    assert res.exit_code == 0 and '"rejected": 0' in res.output


def test_bad_inputs_fail_clearly(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("name: x\nsynthetic: {n_tasks: 100}\noutre_folds: 3\n")
    res = runner.invoke(app, ["run", str(cfg), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "outre_folds" in res.output
    cfg.write_text("name: x\nsynthetic: {n_tasks: 100}\nmethods: [plurality, magic]\n")
    res = runner.invoke(app, ["run", str(cfg), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "unknown method 'magic'" in res.output
    cfg.write_text("name: x\nsynthetic: {n_tasks: 100}\ntraces: a.jsonl\n")
    res = runner.invoke(app, ["run", str(cfg), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "exactly one of" in res.output
    tfile = tmp_path / "t.jsonl"
    tfile.write_text('{"task_id": "a", "candidates": ["x", "y"], "gold": "x", "moves": '
                     '[{"agent": "A1", "round": 0, "force": "propose", "answer": "x"}]}\n{oops\n')
    cfg.write_text("name: x\ntraces: t.jsonl\n")
    res = runner.invoke(app, ["run", str(cfg), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "line 2" in res.output
    tfile.write_text("".join(json.dumps({"task_id": f"t{j}", "candidates": ["x", "y"], "gold": "x",
                                         "moves": [{"agent": "A1", "round": 0, "force": "propose", "answer": "x"}]}) + "\n"
                             for j in range(6)))
    res = runner.invoke(app, ["run", str(cfg), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "too few labels" in res.output
    res = runner.invoke(app, ["verify", str(tmp_path / "nowhere"), "--out", str(tmp_path / "v")])
    assert res.exit_code == 2 and "run directory not found" in res.output and not (tmp_path / "v").exists()


def test_sweeps_end_to_end(tmp_path):
    dose = tmp_path / "dose.yaml"
    dose.write_text("name: d\nkind: dose_response\nsynthetic: {n_tasks: 150}\n"
                    "methods: [plurality, bda_per_agent, bda_confusion]\nregimes: [persistent, rotating]\n"
                    "ks: [1]\np_wrong: [0.0, 1.0]\n")
    out = tmp_path / "dose"
    res = runner.invoke(app, ["sweep", str(dose), "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    d = json.loads((out / "results.json").read_text())
    assert d["kind"] == "dose_response" and len(d["cells"]) == 4
    assert (out / "plots" / "dose_response.png").is_file()
    acc = {(c["params"]["regime"], c["params"]["p_wrong"]): c["metrics"] for c in d["cells"]}
    assert acc[("persistent", 1.0)]["bda_per_agent"]["accuracy"] > acc[("persistent", 1.0)]["plurality"]["accuracy"]
    res = runner.invoke(app, ["verify", str(out), "--all", "--quiet", "--out", str(tmp_path / "vd")])
    assert res.exit_code == 0, res.output
    sl = tmp_path / "sleeper.yaml"
    sl.write_text("name: s\nkind: sleeper\nmethods: [plurality, bda_per_agent]\nf: [0.0, 1.0]\n"
                  "n_calibration: 100\nn_deploy: 100\n")
    out = tmp_path / "sl"
    res = runner.invoke(app, ["sweep", str(sl), "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    d = json.loads((out / "results.json").read_text())
    f0, f1 = d["cells"]
    assert f0["n_evaluated"] == 100
    assert f1["metrics"]["bda_per_agent"]["accuracy"] > f0["metrics"]["bda_per_agent"]["accuracy"]
    assert runner.invoke(app, ["verify", str(out), "--quiet", "--out", str(tmp_path / "vs")]).exit_code == 0
