"""The HTML report on hand-built run directories (no model): incomplete runs, older versions,
bad directories, self-containment."""
from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from chorus.report import ReportError, render_report
from chorus.core.runs import RunDir, write_json


def _run(tmp_path, name="r", **summary):
    run = RunDir.create(tmp_path / name, part="debate", seeds={"root": 0})
    run.write_table("turns", pd.DataFrame({"qid": ["q1", "q2"], "answer": ["A", None]}))
    if summary:
        run.write_summary(summary)
    return run


def test_single_run_report_has_every_section_and_numbers_from_files(tmp_path):
    run = _run(tmp_path, headline={"parse_rate": 0.8125, "n_questions": 300},
               conditions={"debate": {"acc": 0.41}, "reflection": {"acc": 0.39}})
    html = render_report(run.path).read_text()
    for anchor in ("headline", "plots", "tables", "provenance"):
        assert f"id='{anchor}'" in html
    assert "0.8125" in html and "300" in html and "0.41" in html  # read from summary.json
    assert "turns (2 rows)" in html


def test_report_is_self_contained(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    run = _run(tmp_path, headline={"x": 1})
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    fig.savefig(run.plot_path("line"))
    plt.close(fig)
    html = render_report(run.path).read_text()
    assert "data:image/png;base64," in html
    assert not re.search(r"""(src|href)\s*=\s*['"]?(https?:|//)""", html)  # nothing fetched from a network
    assert "<script" not in html


def test_incomplete_run_still_renders_naming_what_is_missing(tmp_path):
    run = _run(tmp_path)  # no summary: interrupted
    html = render_report(run.path).read_text()
    assert "missing: summary.json" in html
    assert "turns (2 rows)" in html


def test_incomplete_demo_names_missing_stages(tmp_path):
    demo = RunDir.create(tmp_path / "demo", part="demo", stages=["serving", "debate", "council"])
    demo.write_summary({"size": "tiny", "profile": "smollm2-135m-instruct",
                        "stages": {"serving": {"status": "done", "title": "Serving", "summary": {"n": 1}},
                                   "council": {"status": "failed", "title": "Council", "error": "ValueError: boom"}}})
    _run(demo.path, "serving", headline={"readout_accuracy": 0.625})
    html = render_report(demo.path).read_text()
    assert "id='overview'" in html and "id='stage-serving'" in html and "id='stage-debate'" in html
    assert "missing: stage <b>debate</b>" in html
    assert "ValueError: boom" in html
    assert "0.625" in html


def test_older_version_is_rendered_with_a_warning(tmp_path):
    run = _run(tmp_path, headline={"x": 1})
    prov = run.provenance()
    prov["versions"]["chorus"] = "0.0.1"
    write_json(run.path / "provenance.json", prov)
    html = render_report(run.path).read_text()
    assert "made by chorus 0.0.1" in html


def test_bad_directories_are_refused(tmp_path):
    with pytest.raises(ReportError, match="no such run directory"):
        render_report(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match="not a chorus run directory"):
        render_report(tmp_path / "empty")


def test_corrupt_summary_is_reported_not_fatal(tmp_path):
    run = _run(tmp_path)
    (run.path / "summary.json").write_text("{not json")
    html = render_report(run.path).read_text()
    assert "missing: summary.json" in html
    json.loads((run.path / "provenance.json").read_text())


def test_report_cli(tmp_path):
    from typer.testing import CliRunner

    from chorus.cli import app
    run = _run(tmp_path, headline={"x": 1})
    res = CliRunner().invoke(app, ["report", str(run.path), "--out", str(tmp_path / "x.html")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "x.html").is_file()
    res = CliRunner().invoke(app, ["report", str(tmp_path / "missing")])
    assert res.exit_code != 0 and "no such run directory" in res.output


def test_demo_rerun_with_some_stages_still_shows_the_earlier_ones(tmp_path):
    demo = RunDir.create(tmp_path / "demo", part="demo", stages=["council"])  # last invocation: --stage council
    demo.write_summary({"size": "tiny", "stages": {"serving": {"status": "done", "title": "Serving", "summary": {}},
                                                   "council": {"status": "done", "title": "Council", "summary": {}}}})
    html = render_report(demo.path).read_text()
    assert "id='stage-serving'" in html and "id='stage-council'" in html


def test_demo_stage_that_fails_then_succeeds_leaves_no_stale_error(tmp_path, monkeypatch):
    """A stage that fails and succeeds on a rerun: no error.txt left behind, its own timing record
    keeps both invocations, and the overview shows the cold time (both invocations' wall)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from chorus import demo

    attempts = {"n": 0}

    def flaky(out, cfg, progress):
        attempts["n"] += 1
        if attempts["n"] == 1:
            raise RuntimeError("first try fails")
        run = RunDir.create(out, part="flaky")
        fig, ax = plt.subplots(figsize=(12, 4))  # a wide figure: shown at the page's width
        ax.plot([0, 1], [0, 1])
        fig.savefig(run.plot_path("wide"), dpi=100)
        plt.close(fig)
        run.write_summary({"value": 1.5})
        return {"value": 1.5}

    monkeypatch.setitem(demo.REGISTRY, "flaky", demo.Stage("flaky", "A flaky stage", flaky, engines=()))
    monkeypatch.setattr(demo, "STAGES", ("flaky",))
    out = tmp_path / "demo"
    demo.run_demo("tiny", out, stages=["flaky"])
    assert (out / "flaky" / "error.txt").is_file()
    html = (out / "report.html").read_text()
    assert "first try fails" in html
    demo.run_demo("tiny", out, stages=["flaky"])
    assert not (out / "flaky" / "error.txt").exists()
    own = json.loads((out / "flaky" / "demo_timing.json").read_text())
    assert [i["status"] for i in own["invocations"]] == ["failed", "done"]
    assert own["cold_wall_s"] == pytest.approx(sum(i["wall_s"] for i in own["invocations"]), abs=0.02)
    html = (out / "report.html").read_text()
    assert "first try fails" not in html and "Traceback" not in html
    assert "<figure class='wide'>" in html and "Cold time of all stages" in html
    # a third, warm invocation does not change the cold time
    demo.run_demo("tiny", out, stages=["flaky"])
    again = json.loads((out / "flaky" / "demo_timing.json").read_text())
    assert len(again["invocations"]) == 3 and again["cold_wall_s"] == own["cold_wall_s"]
