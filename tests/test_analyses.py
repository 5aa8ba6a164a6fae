"""The analysis shape (``chorus.core.analyses``): every registered analysis says what it reads; one run on a
real trace file writes a sealed run directory with its sources' fingerprints, which ``chorus verify``
passes and which it fails, naming the file, once an output or a source changes; the command's options
are the config's fields; ``chorus --help`` imports nothing heavy."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from pydantic import Field
from typer.testing import CliRunner

from chorus.cli import app
from chorus.core.analyses import (ANALYSES, TRACES, AnalysisConfig, Reads, Result, TraceFiles, analyses, analysis,
                                  brief_of, get_analysis, run_dirs)
from chorus.core.cliutil import add_analyses
from chorus.core.runs import file_sha256

ROOT = Path(__file__).resolve().parents[1]
AGGREGATE = {"flips", "switch", "truncation", "lodo", "labels", "contagion", "keys", "shift", "drift", "transfer",
             "check", "c8"}
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args], terminal_width=200)


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> Path:
    """A real synthetic council trace file, as ``chorus aggregate generate`` writes it."""
    f = tmp_path_factory.mktemp("traces") / "t.jsonl"
    r = invoke("aggregate", "generate", "--out", f, "--n", "200", "--adversary", "persistent")
    assert r.exit_code == 0, r.output
    return f


def test_the_registry_lists_every_analysis_with_what_it_reads():
    import chorus.registry as reg

    found = {a.name: a for a in reg.analyses("aggregate")}
    assert AGGREGATE <= set(found)
    # one module of aggregate/analyses/ per analysis, named for its command (fields.py: their shared options)
    modules = {p.stem for p in (ROOT / "aggregate" / "analyses").glob("*.py")} - {"__init__", "fields"}
    assert modules == set(found)
    for a in found.values():
        assert a.reads and all(isinstance(r, Reads) for _, r in a.reads), a.name
        assert a.help and callable(a.brief) and callable(a.show)
    assert found["flips"].reads == [("traces", TRACES)]
    assert [(f, str(r)) for f, r in found["transfer"].reads] == [("sources", "named trace files (NAME=PATH)"),
                                                                  ("target", "named trace files (NAME=PATH)")]
    assert get_analysis("aggregate lodo") is found["lodo"]
    # every one is a command of its group, beside the hand-written generate and verify
    from chorus.aggregate.cli import app as aggregate_app
    assert AGGREGATE <= {c.name for c in aggregate_app.registered_commands}


def test_an_analysis_run_is_sealed_with_its_sources_and_verify_passes(tmp_path, traces):
    out = tmp_path / "flips"
    r = invoke("aggregate", "flips", traces, "--seed", "3", "--out", out)
    assert r.exit_code == 0, r.output
    assert "decision flips, round 0 -> full trace" in r.output and f"run directory: {out}" in r.output
    # where the numbers come from, from the sources (a bare generated trace file records no model)
    assert "numbers from: no model is recorded for these numbers" in r.output
    for f in ("config.yaml", "provenance.json", "manifest.json", "summary.json", "tables/flips.parquet",
              "plots/flip_ratios.png"):
        assert (out / f).is_file(), f
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["analysis"] == "aggregate flips" and prov["part"] == "aggregate" and prov["seeds"] == 3
    assert prov["versions"]["chorus"] and prov["finished"]
    (src,) = prov["sources"]
    assert src["path"] == str(traces) and src["fingerprint"] == file_sha256(traces) and src["reads"] == "trace files"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["seed"] == 3 and summary["sources"] == [str(traces)]
    # the brief is the headline of what the run wrote
    by_k = summary["by_K"]
    assert brief_of(out) == {"tasks": 200, "fixed": sum(x["fixed"] for x in by_k),
                             "broken": sum(x["broken"] for x in by_k),
                             "net": sum(x["fixed"] - x["broken"] for x in by_k)}
    stored = Result.load(out)
    assert len(stored.tables["flips"]) == 200 and stored.summary == summary
    r = invoke("verify", out)
    assert r.exit_code == 0 and "every source is the one it read" in r.output, r.output
    # its report leads with the brief and where the numbers come from, its settings below
    from chorus.report import render_report
    page = render_report(out).read_text()
    head = page.split("Headline numbers", 1)[1].split("Run details", 1)[0]
    assert "<th>fixed</th>" in head and "<th>net</th>" in head and "no model is recorded" in head


def test_verify_names_an_edited_output(tmp_path, traces):
    out = tmp_path / "keys"
    assert invoke("aggregate", "keys", traces, "--outer-folds", "2", "--inner-folds", "2", "--out", out).exit_code == 0
    import pandas as pd
    t = pd.read_parquet(out / "tables" / "keys.parquet")
    t.loc[0, "accuracy"] = 0.99
    t.to_parquet(out / "tables" / "keys.parquet", index=False)
    r = invoke("verify", out)
    assert r.exit_code == 1 and "changed: tables/keys.parquet" in r.output, r.output


def test_verify_names_an_edited_replaced_or_missing_source(tmp_path, traces):
    src = tmp_path / "t.jsonl"
    src.write_bytes(traces.read_bytes())
    out = tmp_path / "check"
    r = invoke("aggregate", "check", src, "--out", out)
    assert r.exit_code == 0 and '"rejected": 0' in r.output, r.output
    assert invoke("verify", out).exit_code == 0
    lines = src.read_text().splitlines()
    src.write_text("\n".join(lines[:-1]) + "\n")          # edited: one trace fewer
    r = invoke("verify", out)
    assert r.exit_code == 1 and f"source changed: {src} (traces;" in r.output, r.output
    # replaced: another (valid) trace file at the same path
    assert invoke("aggregate", "generate", "--out", src, "--n", "200", "--seed", "9").exit_code == 0
    r = invoke("verify", out)
    assert r.exit_code == 1 and f"source changed: {src}" in r.output
    src.write_bytes(traces.read_bytes())                 # restored byte for byte: the record holds again
    assert invoke("verify", out).exit_code == 0
    src.unlink()
    r = invoke("verify", out)
    assert r.exit_code == 1 and f"source missing: {src}" in r.output


def test_named_sources_are_recorded_by_name(tmp_path, traces):
    other = tmp_path / "b.jsonl"
    assert invoke("aggregate", "generate", "--out", other, "--n", "120", "--prefix", "b").exit_code == 0
    out = tmp_path / "lodo"
    r = invoke("aggregate", "lodo", f"a={traces}", f"b={other}", "--methods", "plurality,bda_per_agent",
               "--inner-folds", "2", "--outer-folds", "2", "--out", out)
    assert r.exit_code == 0, r.output
    prov = json.loads((out / "provenance.json").read_text())
    assert [(s["name"], s["path"], s["fingerprint"]) for s in prov["sources"]] == [
        ("a", str(traces), file_sha256(traces)), ("b", str(other), file_sha256(other))]
    assert json.loads((out / "summary.json").read_text())["sets"] == {"a": str(traces), "b": str(other)}


def test_a_check_that_rejects_exits_1_after_writing_its_record(tmp_path):
    from chorus.aggregate.trace import Trace, dump_traces

    moves = [{"agent": "A1", "round": 0, "force": "propose", "answer": "x"},
             {"agent": "A2", "round": 0, "force": "propose", "answer": "y"},
             {"agent": "A2", "round": 1, "force": "propose", "answer": "y"},
             {"agent": "A2", "round": 1, "force": "propose", "answer": "y"}]   # a second move in one round
    f = dump_traces([Trace.from_dict({"task_id": "t", "candidates": ["x", "y"], "gold": "x", "moves": moves})],
                    tmp_path / "bad.jsonl")
    out = tmp_path / "chk"
    r = invoke("aggregate", "check", f, "--out", out)
    assert r.exit_code == 1 and '"rejected": 1' in r.output and "FAILED: 1 of 4 moves rejected" in r.output
    assert json.loads((out / "summary.json").read_text())["by_reason"] == {"second move in a round": 1}
    assert invoke("verify", out).exit_code == 0


def test_a_directory_stands_for_its_trace_files(tmp_path, traces):
    """A council run or a trace store given where trace files are read: its traces/ files, each one a
    fingerprinted source (so ``chorus aggregate flips RUN`` and ``chorus council compliance RUN`` agree)."""
    import shutil
    store = tmp_path / "store"
    (store / "traces").mkdir(parents=True)
    shutil.copy(traces, store / "traces" / "a__clean.jsonl")
    shutil.copy(traces, store / "traces" / "notes.txt")   # not a trace file: not read
    out = tmp_path / "flips"
    r = invoke("aggregate", "flips", store, "--out", out)
    assert r.exit_code == 0, r.output
    prov = json.loads((out / "provenance.json").read_text())
    assert [s["path"] for s in prov["sources"]] == [str(store / "traces" / "a__clean.jsonl")]
    assert json.loads((out / "summary.json").read_text())["by_K"][0]["n_tasks"] == 200


def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, traces, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cases = [(["aggregate", "labels", traces, "--budgets", "10,x"], "--budgets: Input should be a valid integer"),
             (["aggregate", "flips", tmp_path / "nope.jsonl"], "trace file not found"),
             (["aggregate", "lodo", f"a={traces}", "nofile"], "each of SETS is NAME=FILE, got 'nofile'"),
             (["aggregate", "flips", traces, "--b", "1.5"], "b=1.5"),
             (["aggregate", "flips", tmp_path], "a directory with no trace files")]
    for args, msg in cases:
        r = invoke(*args)
        assert r.exit_code == 2 and msg in r.output and len(r.output.strip().splitlines()) == 1, (args, r.output)
    assert not (tmp_path / "runs").exists()
    # the default run directory: runs/GROUP/NAME-TIME under the working directory
    assert invoke("aggregate", "contagion", traces).exit_code == 2   # synthetic traces name no adversaries
    assert not (tmp_path / "runs").exists()
    assert invoke("aggregate", "check", traces).exit_code == 0
    (made,) = (tmp_path / "runs" / "aggregate").iterdir()
    assert made.name.startswith("check-") and (made / "manifest.json").is_file()
    # another config into the same run directory is refused before any work
    r = invoke("aggregate", "check", traces, "--protocol", "general", "--out", made)
    assert r.exit_code == 2 and "holds a run with another config (protocol: 'strict' -> 'general')" in r.output


def test_help_shows_the_config_fields_as_options():
    for a in analyses("aggregate"):
        r = invoke("aggregate", a.name, "--help")
        assert r.exit_code == 0, (a.name, r.output)
        positional, _ = a.reads[0]
        for name, f in a.config.model_fields.items():
            if name != positional:
                assert f"--{name.replace('_', '-')}" in r.output, (a.name, name)
        assert "--out" in r.output and ("--no-plots" in r.output) == a.plots
    r = invoke("aggregate", "drift", "--help")
    assert "Tasks per window W" in r.output and "[required]" in r.output


class _RoundsConfig(AnalysisConfig):
    runs: run_dirs("aggregate", analyses=True) = Field(description="Aggregate run directories.")
    deep: bool = Field(False, description="Also count the tables.")
    tag: str = Field("x", description="A label.")


def _show(console, result):
    console.print(f"runs read: {result.summary['n']}")


@pytest.fixture()
def scratch_app():
    """A scratch analysis over run directories, on its own typer app; unregistered afterwards."""
    @analysis("scratch", config=_RoundsConfig, show=_show, brief=lambda s: {"n": s["n"]})
    def rounds():
        """Counts the run directories it read."""
        def compute(cfg):
            return Result(summary={"n": len(cfg.runs), "deep": cfg.deep, "tag": cfg.tag})
        return compute
    sub = typer.Typer()
    add_analyses(sub, "scratch")
    yield sub
    ANALYSES.pop(("scratch", "rounds"))


def test_an_analysis_of_run_directories_records_their_manifests(tmp_path, traces, scratch_app):
    sealed = tmp_path / "sealed"
    assert invoke("aggregate", "check", traces, "--out", sealed).exit_code == 0
    r = runner.invoke(scratch_app, ["--help"], terminal_width=200)   # a one-command app: its help is the command's
    assert "--deep" in r.output and "--no-deep" in r.output and "--tag" in r.output and "RUNS" in r.output.upper()
    out = tmp_path / "rounds"
    r = runner.invoke(scratch_app, [str(sealed), "--deep", "--out", str(out)])
    assert r.exit_code == 0 and "runs read: 1" in r.output, r.output
    (src,) = json.loads((out / "provenance.json").read_text())["sources"]
    assert src["fingerprint"] == file_sha256(sealed / "manifest.json") and src["reads"] == "aggregate run directories"
    assert json.loads((out / "summary.json").read_text()) == {"n": 1, "deep": True, "tag": "x"}
    assert invoke("verify", out).exit_code == 0
    (sealed / "summary.json").write_text("{}")          # the source run's own files changed, its manifest not
    r = invoke("verify", out)
    assert r.exit_code == 1 and f"source changed: {sealed}" in r.output and "changed: summary.json" in r.output
    # a run of another part, or a folder that is no run, is refused naming it
    r = runner.invoke(scratch_app, [str(tmp_path)])
    assert r.exit_code == 2 and "not a chorus run directory" in r.output
    # from Python: the same run, a mapping for the config
    res = get_analysis("scratch rounds").run({"runs": [str(sealed)], "tag": "y"}, out=tmp_path / "py")
    assert res.path == tmp_path / "py" and res.summary == {"n": 1, "deep": False, "tag": "y"}
    assert json.loads((tmp_path / "py" / "provenance.json").read_text())["analysis"] == "scratch rounds"


def test_chorus_help_stays_lazy():
    """``chorus --help`` and an analysis's ``--help`` import no heavy library and call no factory."""
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom chorus.cli import app\n"
            "for args in (['--help'], ['aggregate', '--help'], ['aggregate', 'flips', '--help']):\n"
            "    assert CliRunner().invoke(app, args).exit_code == 0\n"
            "heavy = ('numpy', 'pandas', 'pyarrow', 'scipy', 'sklearn', 'matplotlib', 'crowdkit', 'torch',"
            " 'chorus.aggregate.flips', 'chorus.aggregate.trace')\n"
            "print(sorted(m for m in heavy if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", (r.stdout, r.stderr)


def test_belief_models_is_an_analysis_over_belief_runs(tmp_path):
    """Tables 2 and 3 across models as a sealed analysis: summary.json, the two CSVs, sources fingerprinted;
    a run of another part is refused naming it."""
    from chorus.simulate.belief.config import BeliefConfig
    from chorus.simulate.belief.experiment import run_experiment
    ocfg = BeliefConfig(name="ok", n_agents=6, rounds=4, seeds=2, population={"kind": "uniform"},
                        sweep={"population.kappa": [0.5, 2, 8]})
    orun, _ = run_experiment(ocfg, tmp_path / "oracle", make_plots=False, sweep=True)
    out = tmp_path / "models"
    r = invoke("belief", "models", orun.path, "--out", out)
    assert r.exit_code == 0, r.output
    assert "Table 2 across models (1 runs)" in r.output and "numbers from: oracle mode" in r.output
    s = json.loads((out / "summary.json").read_text())
    assert s["table2"]["oracle"]["kappa_spearman"] == 1.0 and (out / "table2.csv").read_text().startswith("metric,oracle")
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["analysis"] == "belief models" and prov["sources"][0]["fingerprint"] != "unsealed"
    assert brief_of(out)["kappa_spearman (oracle)"] == 1.0
    assert invoke("verify", out).exit_code == 0
    r = invoke("belief", "models", tmp_path / "models", "--out", tmp_path / "m2")
    assert r.exit_code == 2 and "is a run of the analysis `belief models`; this analysis reads belief runs" in r.output


def test_every_part_registers_its_analyses_with_what_they_read():
    """The commands over stored runs of council, role-play and belief are analyses too (sealed runs), each
    declaring what it reads; their command is the registered one (or, for annotators, marked as it)."""
    import chorus.registry  # noqa: F401
    from chorus.cli import app
    from chorus.core.analyses import analyses
    found = {" ".join(a.key): [str(r) for _, r in a.reads] for a in analyses()}
    assert found["council compliance"] == ["trace files"]
    assert found["roleplay stats"] == found["roleplay probes"] == ["roleplay run directories"]
    assert found["roleplay annotators"] == ["roleplay run directories"]
    assert found["belief models"] == ["belief run directories"]
    groups = {g.name: g.typer_instance for g in app.registered_groups}
    for key in ("council compliance", "roleplay stats", "roleplay probes", "roleplay annotators", "belief models"):
        group, name = key.split()
        (cmd,) = [c for c in groups[group].registered_commands if c.name == name]
        assert getattr(cmd.callback, "analysis", None) is not None, key
