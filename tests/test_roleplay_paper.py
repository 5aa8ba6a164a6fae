"""``chorus paper roleplay``: the numbers file read from the session's tiny real roleplay run (every
value its summary's), the sections without their runs naming their commands, paper.md's headings in
the paper's order, an SFT run with its comparison and an annotators output (constructed from the
real run), and a directory that is no roleplay output refused in one line (exit 2)."""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from chorus.core.runs import RunDir, json_safe, write_json
from chorus.papers import roleplay as P

runner = CliRunner()
SETUP_KEYS = {v: k for k, v in P.SETUP_NAMES.items()}


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _headings(md: str) -> list[str]:
    return [line[3:] for line in md.splitlines() if line.startswith("## ")]


def test_paper_over_the_real_run(roleplay_run, tmp_path):
    from chorus.cli import app
    path, _, _ = roleplay_run
    path = Path(path).resolve()
    s = json.loads((path / "summary.json").read_text())
    sha = _sha(path / "summary.json")
    out = tmp_path / "paper"
    r = runner.invoke(app, ["paper", "roleplay", str(path), "--out", str(out)])
    assert r.exit_code == 0, r.output
    n = json.loads((out / "numbers.json").read_text())
    assert n["schema"] == P.SCHEMA and n["runs"] == [{"run": str(path), "file": "summary.json",
                                                      "summary_sha256": sha, "part": "roleplay"}]
    sec = n["sections"]
    assert list(sec) == [s.key for s in P.SECTIONS]
    assert "smollm2-135m-instruct" in n["note"] and n["note"] in (out / "paper.md").read_text()   # plumbing, said once
    # every stance and text value is the run's own summary value, and names the run and its summary's sha256
    for key, metrics in (("stance_fidelity", P.STANCE), ("beyond_stance", P.TEXT)):
        rows = sec[key]["rows"]
        assert {x["model"] for x in rows} == {"human", "base", "degroot"}
        for x in rows:
            assert x["run"] == str(path) and x["summary_sha256"] == sha and x["split"] == "group/test"
            ref = (s["human"][x["channel"]] if x["model"] == "human"
                   else s["cells"][f"{x['model']}/{SETUP_KEYS[x['setup']]}/{x['channel']}"])
            for m in metrics:
                assert x.get(m) == json_safe(ref.get(m)), (key, x["model"], x["setup"], m)   # NaN -> null
    assert {x["setup"] for x in sec["stance_fidelity"]["rows"]} >= {"Full Dynamics Simulation", "Next Message Prediction"}
    t1 = sec["table1_splits"]["rows"][0]
    assert (t1["n_groups"], t1["n_excluded"]) == (s["n_groups"], s["mask"]["n_excluded"])
    assert sec["degroot"]["rows"][0]["alpha"] == s["degroot"]["alpha"]
    # sections without their runs: the command that makes them
    assert sec["stance_fidelity"]["also_missing"] == [{"missing": "no run of the topic split",
                                                       "command": "chorus roleplay run topic --set data.path=groups.jsonl"}]
    assert sec["sft_comparison"]["command"].startswith("chorus sft train default")
    assert sec["annotators"]["command"] == f"chorus roleplay annotators {path} -m PROFILE"
    # statistics from across_runs.analyse over the run: the bars are the run's cells
    from chorus.simulate.roleplay.across_runs import analyse
    st = analyse([path])[0]
    assert sec["statistics"]["normal_tests"] == json_safe([x | {"summary_sha256": [sha]} for x in st["normal_tests"]])
    assert any("Fig. 12" in m["missing"] for m in sec["fig12_correlations"]["also_missing"])
    assert not any("Fig. 12" in m["missing"] for m in sec["statistics"]["also_missing"])
    # probes from mechanism_probes.analyse: the baseline's on-topic rows, the missing temperature/memory runs
    pr = sec["probes"]
    assert pr["baseline"] == str(path) and all(x["run"] == str(path) for x in pr["on_topic"])
    cmds = " ".join(m["command"] for m in pr["also_missing"])
    assert "--set generation.temperature=0" in cmds and "memory.ablate=[initial_opinion,first_tweet]" in cmds
    # paper.md: the sections' headings in the paper's order, the missing lines, the figures beside it
    md = (out / "paper.md").read_text()
    assert _headings(md) == [s.title for s in P.SECTIONS]
    assert "missing: no run of the topic split; run: `chorus roleplay run topic" in md
    assert f"missing: an annotators output; run: `chorus roleplay annotators {path} -m PROFILE`" in md
    assert (out / "figures" / "run__convergence.png").is_file() and "figures/run__convergence.png" in md
    assert "missing annotators: an annotators output" in r.output
    from conftest import assert_intervals_name_levels   # issue 51 item 5: every interval names its level
    assert_intervals_name_levels(md)


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".lock"))
    return dst


def test_paper_sft_comparison_and_annotators(roleplay_run, tmp_path, monkeypatch):
    path, _, _ = roleplay_run
    sft = tmp_path / "sft"
    sft.mkdir()
    cmp_ = _copy(Path(path), sft / "compare")   # the base-vs-SFT comparison run: base and sft cells
    s = json.loads((cmp_ / "summary.json").read_text())
    s["models"]["sft"] = str(sft / "model")
    for k in [k for k in s["cells"] if k.startswith("base/")]:
        s["cells"]["sft/" + k[5:]] = {m: ({**v, "mean": v["mean"] / 2} if isinstance(v, dict) and "mean" in v else v)
                                      for m, v in s["cells"][k].items()}
    write_json(cmp_ / "summary.json", s)
    RunDir(cmp_).seal()
    write_json(sft / "provenance.json", {"part": "sft", "command": "sft train"})
    write_json(sft / "summary.json", {"experiment": "sft", "base_profile": "smollm2-135m-instruct", "split": "group",
                                      "lora": False, "n_examples": 12, "global_steps": 3, "first_loss": 2.5,
                                      "last_loss": 1.5, "compare_run": str(cmp_)})
    ann = tmp_path / "ann"
    ann.mkdir()
    write_json(ann / "provenance.json", {"part": "roleplay-annotators", "command": "roleplay annotators"})
    ag = {"stance": {"kappa": 0.5, "kappa_quadratic": 0.7, "n": 10}, "on_topic": {"kappa": 0.25, "n": 12}}
    write_json(ann / "annotators.json", {"run": str(cmp_), "run_classifier": "own", "agreement": {"judge2": ag},
                                         "headline": {"own": {"base/full_dynamics/public/delta_sd": -0.2},
                                                      "judge2": {"base/full_dynamics/public/delta_sd": -0.3}}})
    # no probes module: name the command
    monkeypatch.setitem(sys.modules, "chorus.simulate.roleplay.mechanism_probes", None)
    out = tmp_path / "paper"
    P.build_paper([sft, ann], out)
    n = json.loads((out / "numbers.json").read_text())
    assert [r["part"] for r in n["runs"]] == ["sft", "roleplay-annotators", "roleplay"]
    assert n["runs"][2]["via"] == str(sft.resolve())
    sec = n["sections"]
    tr = sec["sft_comparison"]["training"]
    assert tr[0]["run"] == str(sft.resolve()) and tr[0]["summary_sha256"] == _sha(sft / "summary.json")
    assert (tr[0]["n_examples"], tr[0]["last_loss"]) == (12, 1.5)
    rows = sec["sft_comparison"]["rows"]
    x = next(r for r in rows if (r["setup"], r["channel"], r["metric"]) ==
             ("Full Dynamics Simulation", "private", "single_error"))
    assert x["sft"] == json_safe(s["cells"]["sft/full_dynamics/private"]["single_error"])
    assert x["base"] == json_safe(s["cells"]["base/full_dynamics/private"]["single_error"])
    assert x["sft"]["mean"] == x["base"]["mean"] / 2
    assert x["human"] is None and x["summary_sha256"] == _sha(cmp_ / "summary.json")
    assert [m["command"] for m in sec["sft_comparison"]["also_missing"]] == [
        "chorus sft train default --set data.path=groups.jsonl --set data.split=topic --set base.profile=PROFILE"]
    a = sec["annotators"]["rows"]
    assert a == [{"run": str(ann.resolve()), "file": "annotators.json", "summary_sha256": _sha(ann / "annotators.json"),
                  "annotated_run": str(cmp_), "run_classifier": "own", "classifier": "judge2", "stance_kappa": 0.5,
                  "stance_n": 10, "on_topic_kappa": 0.25, "on_topic_n": 12, "stance_kappa_quadratic": 0.7}]
    assert {h["classifier"]: h["value"] for h in sec["annotators"]["headline"]} == {"own": -0.2, "judge2": -0.3}
    assert sec["probes"] == {"title": sec["probes"]["title"], "missing": "mechanism probes",
                             "command": "chorus roleplay probes RUN..."}
    md = (out / "paper.md").read_text()
    assert "missing: mechanism probes; run: `chorus roleplay probes RUN...`" in md
    assert "| judge2 |" in md or "judge2" in md


@pytest.mark.parametrize("kind", ["belief", "file"])
def test_paper_refuses_what_is_no_roleplay_output(tmp_path, kind):
    from chorus.cli import app
    bad = tmp_path / "bad"
    if kind == "file":
        bad.write_text("x")
    else:
        bad.mkdir()
        write_json(bad / "provenance.json", {"part": "belief"})
    r = runner.invoke(app, ["paper", "roleplay", str(bad), "--out", str(tmp_path / "out")])
    assert r.exit_code == 2
    msg = ("not a roleplay, SFT, annotators, stats or probes output (provenance part 'belief')" if kind == "belief"
           else "not a run directory")
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and msg in lines[0] and str(bad.name) in lines[0]
    assert not (tmp_path / "out").exists()


def test_paper_reads_stats_and_probes_outputs_as_they_are(roleplay_run, tmp_path):
    from chorus.simulate.roleplay.mechanism_probes import write_probes
    from chorus.simulate.roleplay.across_runs import write_stats
    path, _, _ = roleplay_run
    st, _ = write_stats([path], tmp_path / "st", make_plots=False)
    pr, _ = write_probes([path], tmp_path / "pr", make_plots=False)
    P.build_paper([path, st, pr], tmp_path / "paper")
    sec = json.loads((tmp_path / "paper" / "numbers.json").read_text())["sections"]
    s, p = json.loads((st / "summary.json").read_text()), json.loads((pr / "summary.json").read_text())
    sha = _sha(Path(path) / "summary.json")
    assert sec["statistics"]["source"] == {"run": str(st.resolve()), "file": "summary.json",
                                           "summary_sha256": _sha(st / "summary.json")}
    assert sec["statistics"]["sign_tests"] == [x | {"summary_sha256": [sha]} for x in s["sign_tests"]]
    assert sec["probes"]["source"]["file"] == "summary.json" and sec["probes"]["baseline"] == p["baseline"]
    assert sec["probes"]["on_topic"] == [x | {"summary_sha256": sha} for x in p["on_topic"]]
