"""A run writes only inside its own directory, and its seal covers everything a report shows.

Table-driven through the real ``chorus`` command behind its one error boundary (as
tests/test_bad_input.py): an ``--out`` that is a file-system root, a file, a dangling link, a folder of
someone else's files, a run of another kind or a finished run holding files it did not write; a
config ``name`` that is a path; a single-file or folder output over (or into) a run's record. Each is
one line, exit 2, and leaves every file byte-identical. Then the seal: a file added to a sealed run, a
removed manifest, a failed resume, two writers of one run, and call-store rows edited after they were
stored (through the real SQLite store, and once through a real run of the embedded model)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT

from chorus.cli import app
from chorus.errors import run_command

BELIEF = ["belief", "run", "fj", "--set", "mode=oracle", "--set", "seeds=1", "--set", "n_agents=6", "--set", "rounds=4",
          "--no-plots"]
AGG_YAML = """name: tiny
seed: 1
synthetic: {n_tasks: 60, K: 2, repeats: 1}
methods: [plurality, bda_per_agent]
bootstrap: {n_resamples: 100, reference: plurality}
"""


def _tree(d: Path) -> dict[str, str]:
    """Every file under ``d`` (links not followed) with its hash: what must be unchanged. A run's
    ``.lock`` counts by being there, not by what it says (holding a run to refuse a change rewrites who
    holds it, nothing else)."""
    out = {}
    for p in sorted(d.rglob("*")):
        if p.name == ".lock":
            out[str(p.relative_to(d))] = "lock"
        elif p.is_symlink():
            out[str(p.relative_to(d))] = "link -> " + os.readlink(p)
        elif p.is_file():
            out[str(p.relative_to(d))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _cli(capsys, *argv) -> tuple[int, str, str]:
    rc = run_command(app, [str(a) for a in argv])
    cap = capsys.readouterr()
    return rc, " ".join(cap.out.split()), " ".join(cap.err.split())


@pytest.fixture(scope="module")
def sealed_src(tmp_path_factory):
    """A finished, sealed belief run (oracle: no model), copied by each test that changes it."""
    d = tmp_path_factory.mktemp("sealed") / "run"
    assert run_command(app, [*BELIEF, "--out", str(d)]) == 0
    assert (d / "manifest.json").is_file()
    return d


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    (dst / ".lock").unlink(missing_ok=True)
    return dst


def _setup(tmp: Path, sealed_src: Path, needs_syn: bool) -> None:
    from chorus.core.runs import RunDir
    mine = tmp / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes\n")
    (mine / "config.yaml").write_text("# my own config, not chorus's\nname: mine\n")
    other = tmp / "other"   # a folder whose files have chorus's names but are someone else's
    other.mkdir()
    (other / "manifest.json").write_text('{"version": 1, "files": ["a", "b"]}\n')
    (other / "config.yaml").write_text("build: release\n")
    os.symlink(tmp / "nowhere", tmp / "dangling")
    RunDir.create(tmp / "debate_run", part="debate", command="debate run").finish()
    _copy(sealed_src, tmp / "sealed")
    _copy(sealed_src, tmp / "sealed_plus")
    (tmp / "sealed_plus" / "notes.txt").write_text("added after the seal\n")
    (tmp / "agg.yaml").write_text(AGG_YAML)
    if needs_syn:
        from chorus.simulate.debate.bda import synthetic_debate
        synthetic_debate(tmp / "syn", [0.8, 0.7, 0.6], n=40, rounds=1)
        from chorus.core.runs import _OPEN, _unlock
        _OPEN.pop((tmp / "syn").resolve(), None)   # a finished run of its own, not one this process writes
        _unlock(tmp / "syn")


CASES = [
    # (name, argv with {tmp}, message fragment)
    ("out_foreign_folder", [*BELIEF, "--out", "{tmp}/mine"],
     "run directory {tmp}/mine: the folder holds files chorus did not write (config.yaml, notes.txt)"),
    ("out_foreign_names", [*BELIEF, "--out", "{tmp}/other"],
     "run directory {tmp}/other: the folder holds files chorus did not write (config.yaml, manifest.json)"),
    ("out_root", [*BELIEF, "--out", "/"], "run directory /: a file-system root"),
    ("out_is_a_file", [*BELIEF, "--out", "{tmp}/mine/notes.txt"], "notes.txt is a file, not a directory"),
    ("out_through_a_file", [*BELIEF, "--out", "{tmp}/mine/notes.txt/run"], "notes.txt is a file, not a directory"),
    ("out_dangling_link", [*BELIEF, "--out", "{tmp}/dangling"],
     "run directory {tmp}/dangling: {tmp}/dangling is a symbolic link to {tmp}/nowhere, which does not exist"),
    ("out_another_part", [*BELIEF, "--out", "{tmp}/debate_run"],
     "run directory {tmp}/debate_run holds a debate run, not a belief run"),
    ("out_sealed_run_with_a_foreign_file", [*BELIEF, "--out", "{tmp}/sealed_plus"],
     "run directory {tmp}/sealed_plus holds files its record does not list (notes.txt)"),
    ("name_up_belief", [*BELIEF, "--set", "name=../../../escape"], "name = '../../../escape': Value error, not a plain name"),
    ("name_absolute_belief", [*BELIEF, "--set", "name={tmp}/abs"], "not a plain name (it holds a path separator"),
    ("name_up_aggregate", ["aggregate", "run", "{tmp}/agg.yaml", "--set", "name=../../../escape"], "not a plain name"),
    ("name_absolute_aggregate", ["aggregate", "run", "{tmp}/agg.yaml", "--set", "name={tmp}/abs"], "not a plain name"),
    ("report_over_the_summary", ["report", "{tmp}/sealed", "--out", "{tmp}/sealed/summary.json"],
     "--out {tmp}/sealed/summary.json: summary.json is one of the record files of the run in {tmp}/sealed"),
    ("report_over_the_manifest", ["report", "{tmp}/sealed", "--out", "{tmp}/sealed/manifest.json"],
     "manifest.json is one of the record files of the run"),
    ("report_into_another_run", ["report", "{tmp}/sealed", "--out", "{tmp}/debate_run/report.html"],
     "is inside the run directory {tmp}/debate_run"),
    ("paper_into_a_run", ["paper", "belief", "{tmp}/sealed", "--out", "{tmp}/sealed/paper"],
     "--out {tmp}/sealed/paper: {tmp}/sealed/paper is inside the run directory {tmp}/sealed"),
    ("traces_over_a_table", ["aggregate", "generate", "--out", "{tmp}/sealed/tables/runs.parquet", "--n", "20"],
     "tables/runs.parquet is one of the record files of the run"),
    ("analysis_into_a_run", ["aggregate", "flips", "{tmp}/nothing.jsonl", "--out", "{tmp}/sealed"],
     "run directory {tmp}/sealed holds a belief run, not a aggregate run"),
    ("analysis_into_a_folder_of_a_run", ["aggregate", "flips", "{tmp}/nothing.jsonl", "--out", "{tmp}/sealed/tables"],
     "run directory {tmp}/sealed/tables: the folder holds files chorus did not write"),
    ("bench_over_a_record_file", ["debate", "bench", "--out", "{tmp}/sealed/summary.json"],
     "summary.json is one of the record files of the run"),
    ("bda_over_its_debate", ["debate", "bda", "{tmp}/syn", "--out", "{tmp}/syn"],
     "run directory {tmp}/syn holds a debate run, not a debate-bda run"),
]


@pytest.mark.parametrize("name, argv, says", CASES, ids=[c[0] for c in CASES])
def test_a_run_writes_only_inside_its_own_directory(tmp_path, capsys, monkeypatch, sealed_src, name, argv, says):
    _setup(tmp_path, sealed_src, needs_syn=any("{tmp}/syn" in a for a in argv))
    monkeypatch.chdir(tmp_path)   # a default run directory (runs/...) would land here, and show
    before, root = _tree(tmp_path), sorted(os.listdir("/"))
    outside = sorted(os.listdir(tmp_path.parent))
    rc, _, err = _cli(capsys, *[a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert rc == 2, err
    assert says.replace("{tmp}", str(tmp_path)) in err, err
    assert "Traceback" not in err and err.count("error:") == 1, err
    assert _tree(tmp_path) == before            # nothing written, nothing overwritten
    assert sorted(os.listdir("/")) == root and sorted(os.listdir(tmp_path.parent)) == outside


def test_names_are_plain_names():
    from chorus.core.config import ConfigError
    from chorus.core.runs import plain_name, run_dir_path
    for bad in ("", ".", "..", "a/b", "../x", "/abs", "a\\b", "x\ny", "n" * 121):
        with pytest.raises(ConfigError, match="not a plain name"):
            plain_name(bad)
        with pytest.raises(ConfigError, match="not a plain name"):
            run_dir_path(None, "belief", bad)
    assert run_dir_path(None, "belief", "smoke-1.2_x").parent == Path("runs/belief")


# -- the seal covers everything shown -----------------------------------------------------------------
def test_a_file_added_to_a_sealed_run_is_named(tmp_path, capsys, sealed_src):
    run = _copy(sealed_src, tmp_path / "run")
    pd.DataFrame({"metric": ["accuracy"], "value": [0.99]}).to_parquet(run / "tables" / "extra.parquet")
    rc, out, err = _cli(capsys, "verify", run)
    assert (rc, err) == (1, f"error: {run}: FAILED: not sealed: tables/extra.parquet")
    rc, out, err = _cli(capsys, "report", run)
    assert rc == 0 and "warning: NOT SEALED: 1 file(s) present that the run's record does not list: " \
                       "tables/extra.parquet" in err
    html = (run / "report.html").read_text()
    assert "<b>NOT SEALED</b>" in html and "extra (1 rows) <b class='failed'>(not sealed)</b>" in html
    before = _tree(run)
    rc, out, err = _cli(capsys, "belief", "report", run, "--no-plots")   # never sealed in by a recompute
    assert rc == 2 and "not sealed: tables/extra.parquet" in err
    assert _tree(run) == before
    (run / "tables" / "extra.parquet").unlink()
    assert _cli(capsys, "verify", run)[0] == 0
    rc, out, err = _cli(capsys, "report", run)
    assert rc == 0 and "warning" not in err and "Sealed: the run" in (run / "report.html").read_text()


def test_a_run_without_its_manifest_is_unverified(tmp_path, capsys, sealed_src):
    run = _copy(sealed_src, tmp_path / "run")
    (run / "manifest.json").unlink()
    s = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**s, "headline": {"edited": 0.99}}))
    before = _tree(run)
    rc, out, err = _cli(capsys, "verify", run)
    assert rc == 1 and f"error: {run}: UNVERIFIED: no manifest.json" in err
    assert _tree(run) == before
    rc, out, err = _cli(capsys, "report", run)
    assert rc == 0 and f"warning: UNVERIFIED: {run} has no manifest.json" in err
    html = (run / "report.html").read_text()
    assert "<b>UNVERIFIED</b>" in html and html.index("UNVERIFIED") < html.index("Headline numbers")
    # the aggregate part's verify, which recomputes results.json, says so too
    (tmp_path / "agg.yaml").write_text(AGG_YAML)
    agg = tmp_path / "agg"
    assert _cli(capsys, "aggregate", "run", tmp_path / "agg.yaml", "--out", agg)[0] == 0
    assert _cli(capsys, "aggregate", "verify", agg, "--quiet", "--no-bootstrap", "--out", tmp_path / "v1")[0] == 0
    (agg / "manifest.json").unlink()
    rc, out, err = _cli(capsys, "aggregate", "verify", agg, "--quiet", "--no-bootstrap", "--out", tmp_path / "v2")
    assert rc == 1 and "UNVERIFIED: no manifest.json" in err


def test_a_failed_resume_never_deletes_the_record(tmp_path, capsys, sealed_src):
    """A resume that fails before changing a sealed file puts back what its start rewrote (the run
    verifies as before); one that changed a file keeps the manifest, and verify names the change."""
    from chorus.core.config import load_config
    from chorus.core.runs import RunDir, mark_failed
    from chorus.simulate.belief.config import BeliefConfig
    run = _copy(sealed_src, tmp_path / "run")
    before = _tree(run)
    cfg = load_config(run / "config.yaml", BeliefConfig)
    RunDir.create(run, part="belief", config=cfg, command="belief run")
    assert (run / "manifest.json").is_file()
    assert run.resolve() in mark_failed("StoreError: call store is corrupt")
    after = _tree(run)
    assert "logs/attempts.log" in after and "a resume failed" in (run / "logs" / "attempts.log").read_text()
    assert _kept(after) == _kept(before)
    assert _cli(capsys, "verify", run)[0] == 0
    r = RunDir.create(run, part="belief", config=cfg, command="belief run")
    r.write_table("runs", pd.DataFrame({"x": [1]}))   # the attempt got as far as rewriting a table
    mark_failed("RuntimeError: the model crashed")
    assert (run / "manifest.json").read_bytes() == sealed_src.joinpath("manifest.json").read_bytes()
    assert json.loads((run / "provenance.json").read_text())["failed"]["error"] == "RuntimeError: the model crashed"
    rc, out, err = _cli(capsys, "verify", run)
    assert rc == 1 and "changed: provenance.json" in err and "changed: tables/runs.parquet" in err
    assert "a resume started after the seal and did not finish" in err


def _kept(tree: dict[str, str]) -> dict[str, str]:
    """A run's files but its logs and lock (neither is part of its record)."""
    return {k: v for k, v in tree.items() if not k.startswith(("logs/", ".lock"))}


HOLD = ("import sys, time; from chorus.core.runs import holding\n"
        "with holding(sys.argv[1]):\n    print('ready', flush=True); time.sleep(600)")


def test_report_commands_take_the_run_lock(tmp_path, capsys, sealed_src):
    """A part's report (which rewrites the summary, plots and manifest) and ``chorus report`` wait for
    whoever writes the run: a second one is refused naming the PID; verify says the run is in use."""
    run = _copy(sealed_src, tmp_path / "run")
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(run)], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert p.stdout.readline().strip() == "ready"
        before = _tree(run)
        rc, out, err = _cli(capsys, "belief", "report", run, "--no-plots")
        assert rc == 2 and f"is in use by PID {p.pid}" in err
        rc, out, err = _cli(capsys, "report", run)
        assert rc == 2 and f"is in use by PID {p.pid}" in err
        rc, out, err = _cli(capsys, "verify", run)
        assert rc == 1 and f"in use by PID {p.pid}" in err
        assert _tree(run) == before
    finally:
        p.kill()
        p.wait()
    assert _cli(capsys, "belief", "report", run, "--no-plots")[0] == 0
    assert _cli(capsys, "verify", run)[0] == 0


def test_a_run_inside_a_sealed_run_is_its_own(tmp_path, capsys, sealed_src):
    """A run made inside a sealed run later (``debate bda``'s RUN/bda-X) is not an unsealed file of
    the outer run; a report of the outer run, which may read it, needs it finished and intact."""
    from chorus.core.runs import RunDir
    run = _copy(sealed_src, tmp_path / "run")
    inner = RunDir.create(run / "bda-debate", part="debate-bda", command="debate bda")
    inner.write_summary({"groups": {}})
    rc, out, err = _cli(capsys, "belief", "report", run, "--no-plots")
    assert rc == 2 and "bda-debate: a run inside" in err and "has no manifest.json" in err
    inner.finish()
    rc, out, err = _cli(capsys, "verify", run)
    assert rc == 0 and "runs inside it with their own record, verified on their own: bda-debate" in out
    assert _cli(capsys, "belief", "report", run, "--no-plots")[0] == 0
    assert "bda-debate/summary.json" not in json.loads((run / "manifest.json").read_text())["files"]
    assert _cli(capsys, "verify", run / "bda-debate")[0] == 0


# -- stored call outputs are checked against the hash written with them ------------------------------
def test_an_edited_store_row_is_named_and_not_served(tmp_path, capsys):
    from chorus.serving.store import CallStore
    path = tmp_path / "calls.sqlite"
    st = CallStore(path)
    st.put_many([(k, "chat", {"profile": "m"}, {"q": k}, {"text": f"reply {k}"}, "hf") for k in ("k1", "k2")])
    with sqlite3.connect(path) as db:
        db.execute("UPDATE calls SET output=? WHERE key='k1'", (json.dumps({"text": "an edited reply"}),))
    got = st.get_many(["k1", "k2"])
    assert list(got) == ["k2"] and st.edited == ["k1"]
    err = capsys.readouterr().err
    assert err.strip() == (f"warning: call store {path}: row k1: its output does not match the hash written with it "
                           f"(edited after it was stored?); not served, the call is made again")
    assert st.check() == {"rows": 2, "unhashed": 0, "edited": ["k1"]}
    st.get_many(["k1"])
    assert capsys.readouterr().err == ""                 # named once
    st.put_many([("k1", "chat", {"profile": "m"}, {"q": "k1"}, {"text": "reply k1"}, "hf")])   # made again
    assert st.get_many(["k1"])["k1"]["text"] == "reply k1" and st.check()["edited"] == []
    st.close()


def _schema_1_store(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("""CREATE TABLE calls (key TEXT PRIMARY KEY, kind TEXT NOT NULL, model TEXT NOT NULL,
                      request TEXT NOT NULL, output TEXT NOT NULL, prompt_tokens INTEGER, completion_tokens INTEGER,
                      latency_s REAL, backend TEXT, created REAL)""")
        db.execute("CREATE TABLE meta (k TEXT PRIMARY KEY, v TEXT)")
        db.execute("INSERT INTO meta VALUES ('schema_version', '1')")
        db.execute("INSERT INTO calls VALUES ('old', 'chat', '{}', '{}', '{\"text\": \"old reply\"}', 1, 1, 0.1, 'hf', 0)")


def test_an_older_store_is_migrated_and_its_unhashed_rows_counted(tmp_path):
    """Schema 1 (no hash column): read as it is when read only; opened for writing, the column is
    added and the old rows keep no hash (served and counted, never vouched for now)."""
    from chorus.serving.store import CallStore
    path = tmp_path / "calls.sqlite"
    _schema_1_store(path)
    raw = path.read_bytes()
    ro = CallStore(path, read_only=True)
    assert ro.get_many(["old"])["old"]["text"] == "old reply" and ro.unhashed_served == 1
    assert ro.stats()["unhashed"] == 1
    ro.close()
    assert path.read_bytes() == raw
    st = CallStore(path)
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT v FROM meta").fetchone()[0] == "2"
        assert db.execute("SELECT output_sha256 FROM calls WHERE key='old'").fetchone()[0] is None
    assert st.get_many(["old"])["old"]["text"] == "old reply" and st.unhashed_served == 1
    st.put_many([("new", "chat", {}, {}, {"text": "new reply"}, "hf")])
    assert st.check() == {"rows": 2, "unhashed": 1, "edited": []} and st.stats()["unhashed"] == 1
    st.close()


# -- models.yaml: edited without losing anything, or not at all ----------------------------------------
def test_register_keeps_the_users_models_file(tmp_path, monkeypatch):
    import yaml

    from chorus.simulate.roleplay.sft import register_profile
    f = tmp_path / "models.yaml"
    monkeypatch.setenv("CHORUS_MODELS_FILE", str(f))
    text = "# my models\nmine:   # the good one\n  path: /models/mine\n  family: llama\n"
    f.write_text(text)
    res = register_profile("sft-a", tmp_path / "model")
    assert res["written"] and f.read_text().startswith(text)          # comments and entries kept, byte for byte
    assert yaml.safe_load(f.read_text())["sft-a"] == {"path": str((tmp_path / "model").resolve()), "family": "other"}
    again = f.read_bytes()
    res = register_profile("mine", tmp_path / "other-model")          # an entry of that name: left alone
    assert not res["written"] and "already has an entry 'mine'" in res["why"] and f.read_bytes() == again
    assert res["lines"] == f"mine:\n  path: {(tmp_path / 'other-model').resolve()}\n  family: other\n"
    f.write_text("{mine: /models/mine}  # a flow mapping: appending would not parse as one mapping\n")
    flow = f.read_bytes()
    res = register_profile("sft-b", tmp_path / "model")
    assert not res["written"] and f.read_bytes() == flow and res["lines"].startswith("sft-b:")
    f.unlink()
    assert register_profile("sft-c", tmp_path / "model")["written"] and "sft-c" in yaml.safe_load(f.read_text())


# -- once through a real run of the embedded model ------------------------------------------------------
@pytest.mark.slow
def test_a_real_run_checks_its_stored_calls_and_keeps_its_record(tmp_path, capsys):
    """A tiny ``debate run smoke``: a stored reply edited in its call store is named and not served on
    the resume (the turns come out as the model wrote them); a corrupt store fails the resume, and
    the finished run's record stands (verify passes)."""
    args = ["debate", "run", "smoke", "--set", "rounds=1", "--set", "bench.limit=2", "--set",
            "generation.max_tokens=16", "--set", "analysis.n_boot=20", "--set", "analysis.n_perm=20", "--no-plots"]
    run = tmp_path / "run"
    rc, out, err = _cli(capsys, *args, "--out", run)
    assert rc == 0, err
    turns = pd.read_parquet(run / "tables" / "turns.parquet").drop(columns=["cached"], errors="ignore")
    store = run / "calls.sqlite"
    with sqlite3.connect(store) as db:
        key, output = db.execute("SELECT key, output FROM calls WHERE kind='chat' ORDER BY key LIMIT 1").fetchone()
        db.execute("UPDATE calls SET output=? WHERE key=?", (json.dumps({**json.loads(output), "text": "EDITED"}), key))
    rc, out, err = _cli(capsys, *args, "--out", run)
    assert rc == 0, err
    assert f"warning: call store {store}: row {key}: its output does not match the hash written with it" in err
    again = pd.read_parquet(run / "tables" / "turns.parquet").drop(columns=["cached"], errors="ignore")
    pd.testing.assert_frame_equal(turns, again)                       # the model's own reply, not the edit
    assert not again.astype(str).apply(lambda c: c.str.contains("EDITED")).any().any()
    check = json.loads((run / "provenance.json").read_text())["model"]["store_check"]
    assert check["edited_not_served"] == [key]
    assert _cli(capsys, "verify", run)[0] == 0
    sealed = {n: (run / n).read_bytes() for n in ("manifest.json", "provenance.json", "config.yaml")}
    for f in run.glob("calls.sqlite*"):
        f.unlink()
    store.write_bytes(b"this is not a database" * 100)
    rc, out, err = _cli(capsys, *args, "--out", run)
    assert rc == 2 and "corrupt" in err
    assert {n: (run / n).read_bytes() for n in sealed} == sealed       # the record stands, as it was
    assert "a resume failed" in (run / "logs" / "attempts.log").read_text()
    assert _cli(capsys, "verify", run)[0] == 0
