"""The ``chorus belief`` commands (oracle mode) and the run directory they write."""
import json

import pytest
from typer.testing import CliRunner

from chorus.simulate.belief.cli import app

runner = CliRunner()


def test_run_then_report(tmp_path):
    out = tmp_path / "fj"
    r = runner.invoke(app, ["run", "fj", "--set", "mode=oracle", "--set", "seeds=2",
                            "--set", "n_agents=10", "--set", "rounds=8", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert str(out) in r.output
    for f in ("config.yaml", "provenance.json", "summary.json", "tables/events.parquet",
              "tables/beliefs.parquet", "tables/utterances.parquet", "plots/trajectories.png",
              "plots/transfer.png"):
        assert (out / f).is_file(), f
    s = json.loads((out / "summary.json").read_text())
    assert s["headline"]["fj_persists"] is True and s["headline"]["fj_r2"] > 0.9
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["finished"] and prov["topics_sha256"]["transit_priority"]
    (out / "summary.json").unlink()
    r = runner.invoke(app, ["recompute", str(out), "--no-plots"])
    assert r.exit_code == 0, r.output
    assert json.loads((out / "summary.json").read_text())["headline"] == s["headline"]


def test_sweep_writes_sweep_plots(tmp_path):
    out = tmp_path / "k"
    r = runner.invoke(app, ["sweep", "kappa_recovery", "--set", "mode=oracle", "--set", "seeds=1",
                            "--set", "n_agents=6", "--set", "rounds=4", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert (out / "plots" / "kappa_recovery.png").is_file()
    assert json.loads((out / "summary.json").read_text())["headline"]["kappa_spearman"] == pytest.approx(1.0)


@pytest.mark.parametrize("args,needle", [
    (["run", "fj", "--set", "gamma=1.5"], "gamma = 1.5"),
    (["run", "fj", "--set", "population.pliable_kappa=0"], "population.pliable_kappa = 0"),
    (["run", "fj", "--set", "n_agents=1"], "n_agents = 1"),
    (["run", "no_such_config"], "not found"),
    (["sweep", "fj"], "sweep"),
])
def test_bad_input_is_a_clear_error(tmp_path, args, needle):
    r = runner.invoke(app, args + ["--out", str(tmp_path / "x")])
    assert r.exit_code == 2
    assert needle in r.output
    assert not (tmp_path / "x").exists()


def test_topics_lists_single_and_multi_concept_topics():
    r = runner.invoke(app, ["topics"])
    assert r.exit_code == 0, r.output
    assert "transit_priority:" in r.output
    assert "aldenvale_council [multi" in r.output and "transit (K=3)" in r.output
