"""Bad input, table-driven, through the real ``chorus`` command behind its one error boundary
(``chorus.errors.run_command``, in-process): the exit code, a fragment of the one message, and
what must be unchanged on disk. Validation comes before any model loads, so nothing here loads one."""
from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import pytest

from chorus.cli import app
from chorus.errors import run_command


def _tree(d: Path) -> dict[str, str]:
    """Every file under ``d`` with its hash: what must be unchanged."""
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file()} if d.exists() else {}


def _files(tmp: Path) -> None:
    (tmp / "bad_utf8.yaml").write_bytes(b"name: x\nrounds: \xff\xfe\n")
    (tmp / "empty.yaml").write_text("# nothing but a comment\n")
    (tmp / "binary.yaml").write_bytes(bytes(range(256)))
    (tmp / "list.yaml").write_text("- a\n- b\n")


CASES = [
    # (name, argv with {tmp}, exit code, message fragment, path under tmp that must not appear)
    ("set_not_yaml", ["debate", "run", "smoke", "--set", "generation={temperature: [", "--out", "{tmp}/r1"], 2,
     "--set 'generation={temperature: [': the value is not valid YAML", "r1"),
    ("config_not_utf8", ["debate", "run", "{tmp}/bad_utf8.yaml", "--out", "{tmp}/r2"], 2,
     "bad_utf8.yaml line 2: not UTF-8 text", "r2"),
    ("config_binary", ["council", "run", "{tmp}/binary.yaml", "--out", "{tmp}/r3"], 2, "not UTF-8 text", "r3"),
    ("config_empty", ["debate", "run", "{tmp}/empty.yaml", "--out", "{tmp}/r4"], 2,
     "empty.yaml: the config file is empty", "r4"),
    ("config_not_mapping", ["debate", "run", "{tmp}/list.yaml"], 2, "top level must be a mapping", None),
    ("unknown_profile_debate", ["debate", "run", "smoke", "--set", "model.profile=nosuch", "--out", "{tmp}/r5"], 2,
     "model: unknown model profile 'nosuch'", "r5"),
    ("unknown_profile_council", ["council", "run", "tiny", "--set", "seats.0.profile=nosuch", "--out", "{tmp}/r6"], 2,
     "A1: unknown model profile 'nosuch'", "r6"),
    ("missing_model_folder", ["debate", "run", "smoke", "--set", "model.profile={tmp}/no/such/model",
                              "--out", "{tmp}/r7"], 2, "no/such/model does not exist", "r7"),
    ("folder_without_config", ["debate", "run", "smoke", "--set", "model.profile={tmp}", "--out", "{tmp}/r8"], 2,
     "has no config.json", "r8"),
    ("temperature_too_high", ["debate", "run", "smoke", "--set", "generation.temperature=5.0", "--out", "{tmp}/r9"],
     2, "less than or equal to 2", "r9"),
    ("council_roles_disagree", ["council", "run", "tiny", "--set",
                                "seats=[{profile: gemma3-270m, dtype: bfloat16}, gemma3-270m, gemma3-270m]",
                                "--set", "conditions=[{name: clean}]", "--out", "{tmp}/r10"], 2,
     "roles 'A1' and 'A2' would hold one engine of 'gemma3-270m' with different settings", "r10"),
    ("missing_source_run", ["influence", "readout", "influence_smoke", "--set", "source_run={tmp}/nope",
                            "--out", "{tmp}/r12"], 2, "no tables/turns.parquet there (no such directory)", "r12"),
    ("knockout_missing_source_run", ["influence", "knockout", "internals_smoke", "--set", "source_run={tmp}",
                                     "--out", "{tmp}/r13"], 2, "not a debate run directory?", "r13"),
    ("generate_bad_chat", ["generate", "--chat", "{tmp}/list.yaml"], 2, "list.yaml", None),
    ("generate_negative_tokens", ["generate", "hi", "--max-tokens", "-3"], 2,
     "--max-tokens -3: Input should be greater than or equal to 1", None),
    ("unread_role", ["council", "run", "tiny", "--set", "baselines.methods=[moa]", "--set",
                     "baselines.argllms_generator=gemma3-270m", "--out", "{tmp}/r11"], 2,
     "baselines.argllms_generator is set but no baseline of this run reads it", "r11"),
    ("calibrate_negative_seed", ["belief", "calibrate", "--set", "seed=-1", "--out", "{tmp}/r14"], 2,
     "invalid chorus belief calibrate: seed = -1: Input should be greater than or equal to 0", "r14"),
    ("cross_unknown_config", ["belief", "cross", "nosuch", "--synthetic", "--out", "{tmp}/r15"], 2,
     "config not found: nosuch", "r15"),
    ("labelset_per_bin_zero", ["belief", "labelset", "--out", "{tmp}/set.csv", "--per-bin", "0",
                               "--run-dir", "{tmp}/r16"], 2, "per_bin = 0: Input should be greater than", "r16"),
]


@pytest.mark.parametrize("name, argv, code, says, absent", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_leaves_nothing(tmp_path, capsys, name, argv, code, says, absent):
    _files(tmp_path)
    before = _tree(tmp_path)
    rc = run_command(app, [a.replace("{tmp}", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err
    flat = " ".join(err.split())
    assert rc == code, err
    assert says.replace("{tmp}", str(tmp_path)) in flat, err
    assert "Traceback" not in err and len([ln for ln in err.splitlines() if ln.startswith("error:")]) == 1, err
    assert _tree(tmp_path) == before   # no half-made run directory, no file touched
    if absent:
        assert not (tmp_path / absent).exists()


def test_a_failure_that_is_not_bad_input_exits_1_with_one_line(capsys):
    import typer

    def boom():
        raise KeyError("x")
    t = typer.Typer()
    t.command()(boom)
    assert run_command(t, []) == 1
    err = capsys.readouterr().err
    assert "error: the run failed: KeyError: 'x' (--debug or CHORUS_DEBUG=1 for the traceback)" in " ".join(err.split())
    with pytest.raises(KeyError):
        run_command(t, ["--debug"])


def test_jsonl_errors_name_the_file_and_line(tmp_path):
    from chorus.core.jsonl import iter_jsonl
    p = tmp_path / "bench.jsonl"
    p.write_bytes(b'{"a": 1}\n{"b": "\xff"}\n')
    with pytest.raises(ValueError, match=r"bench.jsonl line 2: not UTF-8 text \(byte 8 of the line\)"):
        list(iter_jsonl(p))
    g = tmp_path / "traces.jsonl.gz"
    g.write_bytes(gzip.compress(b'{"a": 1}\n' * 200)[:40])   # cut short
    with pytest.raises(ValueError, match=r"traces.jsonl.gz line \d+: cannot be read as .gz \(Compressed file ended"):
        list(iter_jsonl(g))
    n = tmp_path / "plain.jsonl.gz"
    n.write_text('{"a": 1}\n')                                # not gzip at all
    with pytest.raises(ValueError, match="plain.jsonl.gz line 1: cannot be read as .gz"):
        list(iter_jsonl(n))


def test_a_run_directory_is_a_record(tmp_path):
    """Same config resumes; another config is refused naming the fields, and the record stays
    byte-identical; a field a newer chorus added is not a difference."""
    import yaml

    from chorus.core.runs import RunDir, RunDirConflict
    from chorus.simulate.debate.config import DebateConfig
    cfg = DebateConfig(name="x", rounds=2)
    run = RunDir.create(tmp_path / "run", part="debate", config=cfg)
    run.finish()
    before = _tree(tmp_path / "run")
    RunDir.create(tmp_path / "run", part="debate", config=cfg).finish()   # the same config: resumes
    other = cfg.model_copy(update={"rounds": 3, "agents": 4})
    with pytest.raises(RunDirConflict, match=r"holds a run with another config \(agents: 3 -> 4; rounds: 2 -> 3\)"):
        RunDir.create(tmp_path / "run", part="debate", config=other)
    after = _tree(tmp_path / "run")
    assert after["config.yaml"] == before["config.yaml"]
    RunDir.create(tmp_path / "run", part="debate", config=cfg).finish()   # the lock was given back
    stored = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    del stored["voting"]                                                  # an older record, without a newer field
    (tmp_path / "run" / "config.yaml").write_text(yaml.safe_dump(stored))
    RunDir.create(tmp_path / "run", part="debate", config=cfg).finish()


def test_store_stats_is_read_only(tmp_path, capsys):
    """``chorus store stats`` on a real store and on a foreign SQLite file: the files stay
    byte-identical, nothing appears beside them, the foreign file is named as not a store."""
    import sqlite3

    from chorus.serving.store import CallStore
    st = CallStore(tmp_path / "run" / "calls.sqlite")
    st.put_many([("k1", "chat", {"profile": "m"}, {"q": 1}, {"text": "a", "prompt_tokens": 3}, "hf")])
    st.close()
    other = tmp_path / "other" / "notes.sqlite"
    other.parent.mkdir()
    with sqlite3.connect(other) as c:
        c.execute("create table notes (t text)")
    before = _tree(tmp_path)
    assert run_command(app, ["store", "stats", str(tmp_path / "run")]) == 0
    assert "1 calls" in " ".join(capsys.readouterr().out.split())
    assert run_command(app, ["store", "stats", str(other)]) == 2
    assert "notes.sqlite is an SQLite file but not a chorus call store" in " ".join(capsys.readouterr().err.split())
    assert _tree(tmp_path) == before


def test_verify_and_report_cover_every_file_a_run_wrote(tmp_path, capsys):
    """A finished run seals its files (manifest.json). `chorus verify` passes it untouched and
    fails naming each edit; `chorus report` refuses an edited or deleted file; a part's report
    (which recomputes the summary) refuses an edited table but regenerates a deleted summary."""
    import json
    import shutil

    def run(*argv):
        rc = run_command(app, [str(a) for a in argv])
        cap = capsys.readouterr()
        return rc, " ".join((cap.out + cap.err).split())

    src = tmp_path / "fj"
    rc, out = run("belief", "run", "fj", "--set", "mode=oracle", "--set", "seeds=1", "--set", "n_agents=6",
                  "--set", "rounds=4", "--no-plots", "--out", src)
    assert rc == 0, out
    assert json.loads((src / "manifest.json").read_text())["files"]["summary.json"]
    untouched = _tree(src)
    assert run("verify", src)[0] == 0 and _tree(src) == untouched   # read-only: byte-identical
    assert run("report", src)[0] == 0
    assert run("verify", src) == (0, run("verify", src)[1])            # the HTML rendering is not part of the record

    def edited(name: str, how):
        d = tmp_path / name
        shutil.copytree(src, d)
        how(d)
        return d
    s = json.loads((src / "summary.json").read_text())
    d1 = edited("summary", lambda d: (d / "summary.json").write_text(json.dumps({**s, "headline": {"x": 0.9}})))
    assert run("verify", d1) == (1, f"error: {d1}: FAILED: changed: summary.json")
    rc, out = run("report", d1)
    assert rc == 2 and "changed: summary.json" in out
    d2 = edited("table", lambda d: (d / "tables" / "beliefs.parquet").write_bytes(b"PAR1 truncated"))
    assert run("verify", d2)[0] == 1 and "changed: tables/beliefs.parquet" in run("verify", d2)[1]
    rc, out = run("belief", "recompute", d2, "--no-plots")
    assert rc == 2 and "changed: tables/beliefs.parquet" in out
    d3 = edited("gone", lambda d: (d / "tables" / "events.parquet").unlink())
    rc, out = run("report", d3)
    assert rc == 2 and "missing: tables/events.parquet" in out
    d4 = edited("resummarize", lambda d: (d / "summary.json").unlink())   # a derived file: recomputed, sealed again
    assert run("belief", "recompute", d4, "--no-plots")[0] == 0
    assert run("verify", d4)[0] == 0
    assert json.loads((d4 / "summary.json").read_text())["headline"] == s["headline"]
    assert run("verify", tmp_path)[0] == 2                             # no record: said, not passed


def test_report_names_a_corrupt_summary_of_an_unsealed_run(tmp_path, capsys):
    """A run without a record (unfinished, or an older chorus): a corrupt summary.json is named
    as unreadable, not shown as missing."""
    (tmp_path / "config.yaml").write_text("name: x\n")
    (tmp_path / "summary.json").write_text('{"headline": {"acc": 0.4')
    assert run_command(app, ["report", str(tmp_path)]) == 2
    assert "summary.json: unreadable (JSONDecodeError" in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "report.html").exists()


def test_a_demo_rerun_may_run_other_stages_into_the_same_record(tmp_path):
    """``chorus demo --stage X`` into an earlier demo's directory is a rerun (the stage list is
    not part of the record); another size is another run."""
    from chorus.stages import DemoConfig
    from chorus.core.runs import RunDir, RunDirConflict
    RunDir.create(tmp_path / "demo", part="demo", config=DemoConfig(size="tiny")).finish()
    RunDir.create(tmp_path / "demo", part="demo", config=DemoConfig(size="tiny", stages=["council"])).finish()
    with pytest.raises(RunDirConflict, match=r"size: 'tiny' -> 'full'"):
        RunDir.create(tmp_path / "demo", part="demo", config=DemoConfig(size="full"))


def test_a_start_that_fails_after_its_directory_is_a_marked_attempt(tmp_path, capsys):
    """A model folder that passes every check but whose weights file is garbage fails at the load,
    after the run directory exists: the attempt is marked failed in provenance.json, with the error;
    a rerun that starts again clears the mark. (A folder without weights fails before: below.)"""
    import json
    import shutil

    from chorus.serving.profiles import get_profile
    src = get_profile("smollm2-135m-instruct").require()
    broken = tmp_path / "broken-model"
    broken.mkdir()
    for f in src.iterdir():
        if f.suffix != ".safetensors":
            shutil.copy(f, broken / f.name)
    out = tmp_path / "run"
    rc = run_command(app, ["debate", "run", "smoke", "--set", f"model.profile={broken}", "--set", "model.backend=hf",
                           "--out", str(out)])
    assert rc == 2 and "lacks weights (*.safetensors)" in capsys.readouterr().err and not out.exists()
    (broken / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{garbage")
    rc = run_command(app, ["debate", "run", "smoke", "--set", f"model.profile={broken}", "--set", "model.backend=hf",
                           "--out", str(out)])
    err = " ".join(capsys.readouterr().err.split())
    assert rc in (1, 2) and "Traceback" not in err and err.count("error:") == 1, err
    failed = json.loads((out / "provenance.json").read_text())["failed"]
    assert failed["error"] and failed["at"]
    from chorus.core.runs import RunDir
    from chorus.simulate.debate.config import DebateConfig, load
    cfg = load("smoke", DebateConfig, {"model.profile": str(broken), "model.backend": "hf"})
    RunDir.create(out, part="debate", config=cfg).finish()   # the same config starts again
    assert "failed" not in json.loads((out / "provenance.json").read_text())
