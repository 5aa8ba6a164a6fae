"""Bad input, table-driven, through the real ``chorus`` command behind its one error boundary
(``chorus.errors.run_command``, in-process): the exit code, a fragment of the one message, and
what must be unchanged on disk. Validation comes before any model loads, so nothing here loads one."""
from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import pytest

from chorus.cli import app
from chorus.core.config import InputError
from chorus.errors import run_command


def _tree(d: Path) -> dict[str, str]:
    """Every file under ``d`` with its hash: what must be unchanged."""
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file()} if d.exists() else {}


def _files(tmp: Path) -> None:
    import json
    import os
    import sqlite3

    import yaml

    from chorus.simulate.debate.prompts import PROMPTS_DIR
    (tmp / "bad_utf8.yaml").write_bytes(b"name: x\nrounds: \xff\xfe\n")
    (tmp / "empty.yaml").write_text("# nothing but a comment\n")
    (tmp / "binary.yaml").write_bytes(bytes(range(256)))
    (tmp / "list.yaml").write_text("- a\n- b\n")
    # prompts files: templates missing, a plain string, a misspelt placeholder in an otherwise whole copy
    (tmp / "p_missing.yaml").write_text('version: 1\ninstruction: "x {labels}"\n')
    (tmp / "p_str.yaml").write_text('"just a string"\n')
    shipped = yaml.safe_load((PROMPTS_DIR / "debate_v1.yaml").read_text())
    (tmp / "p_typo.yaml").write_text(yaml.safe_dump({**shipped, "round0": "{questoin}\n\n{options}\n\n{instruction}"}))
    # an SQLite file with a store's tables whose meta table lost its schema row
    with sqlite3.connect(tmp / "noschema.sqlite") as c:
        c.execute("create table calls (key text)")
        c.execute("create table meta (k text, v text)")
    # --out paths that cannot be directories: a link to itself, a link to nothing
    os.symlink(tmp / "loop", tmp / "loop")
    os.symlink(tmp / "nowhere", tmp / "dangle")
    (tmp / "chat_dict.json").write_text(json.dumps({"role": "user", "content": "hi"}))
    # --data folders: TruthfulQA without a column; an MMLU subject file that is empty
    (tmp / "data_nocol" / "truthfulqa").mkdir(parents=True)
    (tmp / "data_nocol" / "truthfulqa" / "TruthfulQA.csv").write_text("Type,Category,Question,Best Answer\n"
                                                                     "Adversarial,Misc,Why?,Because.\n")
    (tmp / "data_empty" / "mmlu" / "test").mkdir(parents=True)
    (tmp / "data_empty" / "mmlu" / "test" / "moral_scenarios_test.csv").write_text("")
    # a roleplay run whose provenance record is not a JSON object
    (tmp / "odd_run").mkdir()
    (tmp / "odd_run" / "provenance.json").write_text("[1, 2]")


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
    # issue 53: crashes (exit 1, nothing named) and checks that came too late, now one line before anything
    ("prompts_without_templates", ["debate", "run", "smoke", "--set", "prompts={tmp}/p_missing.yaml", "--out", "{tmp}/r20"],
     2, "p_missing.yaml: lacks template(s) options_letter, options_word, round0", "r20"),
    ("prompts_a_string", ["debate", "run", "smoke", "--set", "prompts={tmp}/p_str.yaml", "--out", "{tmp}/r21"], 2,
     "p_str.yaml: top level must be a mapping, got str", "r21"),
    ("prompts_misspelt_placeholder", ["debate", "run", "smoke", "--set", "prompts={tmp}/p_typo.yaml", "--out", "{tmp}/r22"],
     2, "p_typo.yaml: round0: unknown placeholder(s) {questoin} (this template takes: {instruction}, {options}, "
        "{question})", "r22"),
    ("council_prompts_without_templates", ["council", "run", "tiny", "--set", "prompts={tmp}/p_missing.yaml",
                                           "--check"], 2, "p_missing.yaml: lacks template(s) personas", None),
    ("model_option_misspelt", ["debate", "run", "smoke", "--set", "model.options={max_num_seq: 3}", "--out", "{tmp}/r23"],
     2, "model: options: unknown option(s) 'max_num_seq' for backend 'hf'", "r23"),
    ("max_tokens_beyond_the_window", ["debate", "run", "smoke", "--set", "generation.max_tokens=100000000",
                                      "--out", "{tmp}/r24"], 2,
     "generation.max_tokens = 100000000: the model of role 'model' (smollm2-135m-instruct) holds at most 8192 tokens",
     "r24"),
    ("store_without_schema_row", ["store", "stats", "{tmp}/noschema.sqlite"], 2,
     "noschema.sqlite is not a readable call store: its meta table has no schema_version row", None),
    ("out_a_symlink_loop", ["belief", "run", "fj", "--set", "mode=oracle", "--out", "{tmp}/loop"], 2,
     "{tmp}/loop is a symbolic link that loops", None),
    ("out_a_dangling_link", ["belief", "run", "fj", "--set", "mode=oracle", "--out", "{tmp}/dangle"], 2,
     "{tmp}/dangle is a symbolic link to {tmp}/nowhere, which does not exist (a dangling link)", "nowhere"),
    ("verify_nan_tolerance", ["aggregate", "verify", "{tmp}", "--tolerance", "nan"], 2,
     "--tolerance: Input should be a finite number (got nan)", None),
    ("campaign_verify_nan_tolerance", ["council", "campaign-verify", "{tmp}", "--tolerance", "nan"], 2,
     "--tolerance: Input should be a finite number (got nan)", None),
    ("sft_infinite_learning_rate", ["sft", "train", "smoke", "--set", "training.learning_rate=.inf", "--check"], 2,
     "training.learning_rate = inf: Input should be a finite number", None),
    ("sft_register_as_a_builtin", ["sft", "train", "smoke", "--set", "register_as=gemma3-270m", "--out", "{tmp}/r25"],
     2, "register_as = 'gemma3-270m' is a built-in profile name", "r25"),
    ("sft_compare_unknown", ["sft", "train", "smoke", "--set", "compare=nosuch", "--check"], 2,
     "compare = 'nosuch': config not found: nosuch", None),
    ("council_more_tasks_than_the_set", ["council", "run", "tiny", "--set", "data.0.n=5000", "--set",
                                         "data.0.balanced=false", "--out", "{tmp}/r26"], 2,
     "truthfulqa_claims: n = 5000 tasks asked for, but the set holds only 790 usable tasks", "r26"),
    ("bench_csv_missing_a_column", ["debate", "bench", "--data", "{tmp}/data_nocol", "--out", "{tmp}/b1.jsonl",
                                    *[x for sub in ("disciplinary", "strategy", "biomedical", "moral_scenarios",
                                                    "moral_disputes", "contested") for x in ("--count", f"{sub}=0")]], 2,
     "data_nocol/truthfulqa/TruthfulQA.csv: missing column(s) 'Best Incorrect Answer'", "b1.jsonl"),
    ("bench_csv_empty", ["debate", "bench", "--data", "{tmp}/data_empty", "--out", "{tmp}/b2.jsonl",
                         *[x for sub in ("misconceptions", "disciplinary", "strategy", "biomedical", "moral_disputes",
                                         "contested") for x in ("--count", f"{sub}=0")]], 2,
     "moral_scenarios: {tmp}/data_empty/mmlu/test/moral_scenarios_test.csv: the file is empty", "b2.jsonl"),
    ("bench_count_not_a_number", ["debate", "bench", "--count", "strategy=x", "--out", "{tmp}/b3.jsonl"], 2,
     "--count 'strategy=x': expected SUBDOMAIN=N", "b3.jsonl"),
    ("generate_chat_a_mapping", ["generate", "--chat", "{tmp}/chat_dict.json"], 2,
     "chat_dict.json: conversation 0 must be a non-empty list", None),
    ("campaign_budgets_not_numbers", ["paper", "bda", "{tmp}", "--out", "{tmp}/camp", "--budgets", "a,b"], 2,
     "--budgets 'a,b': expected whole numbers", "camp"),
    ("generate_traces_reliabilities_not_numbers", ["aggregate", "generate", "--out", "{tmp}/t.jsonl",
                                                   "--reliabilities", "0.7,high"], 2,
     "--reliabilities '0.7,high': expected numbers", "t.jsonl"),
    ("run_record_not_an_object", ["roleplay", "stats", "{tmp}/odd_run"], 2,
     "odd_run/provenance.json: not a JSON object (a list)", None),
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


@pytest.mark.parametrize("exc, code, says", [
    # an unchecked case inside chorus: a bug, never "bad input" (a bare ValueError included)
    (KeyError("x"), 1, "error: a chorus bug: KeyError: 'x' (please report it; rerun with --debug or CHORUS_DEBUG=1 "
                       "for the traceback)"),
    (ValueError("could not convert string to float: 'a'"), 1,
     "error: a chorus bug: ValueError: could not convert string to float: 'a' (please report it;"),
    (TypeError("f() got an unexpected keyword argument 'z'"), 1, "error: a chorus bug: TypeError:"),
    # a failure of the run (a lost server, a crashed model): not a bug, not the user's input
    (RuntimeError("server lost"), 1,
     "error: the run failed: RuntimeError: server lost (--debug or CHORUS_DEBUG=1 for the traceback)"),
    # bad input is a type: the message alone, exit 2
    (InputError("x.csv: missing column 'answer'"), 2,
     "error: x.csv: missing column 'answer'"),
])
def test_the_boundary_tells_bad_input_from_a_failure_and_a_bug(capsys, exc, code, says):
    """The boundary decides by type: ``InputError`` (and the other ``bad_input_types``) is bad input;
    Python's own ValueError/TypeError/KeyError... from inside chorus is a bug; anything else failed.
    The command here is a stand-in that raises (control flow only): the boundary is the real one."""
    import typer

    def boom():
        raise exc
    t = typer.Typer()
    t.command()(boom)
    assert run_command(t, []) == code
    err = capsys.readouterr().err
    assert says in " ".join(err.split()) and err.count("error:") == 1, err
    with pytest.raises(type(exc)):
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


def test_config_floats_are_finite_but_a_committed_agent_is_still_infinitely_stubborn():
    """Every config refuses NaN and infinity in its float fields (``learning_rate: .inf`` once passed
    ``gt=0`` and trained a model of NaN), except where infinity means something: a custom belief
    population's per-agent ``kappas`` (``.inf``: a committed agent). NaN is refused there too."""
    from chorus.core.config import ConfigError, validate
    from chorus.simulate.belief.population import Population
    from chorus.simulate.roleplay.config import SftConfig
    for bad in (float("inf"), float("nan"), float("-inf")):
        with pytest.raises(ConfigError, match="training.learning_rate = .*: Input should be a finite number"):
            validate(SftConfig, {"training": {"learning_rate": bad}})
    pop = validate(Population, {"kind": "custom", "kappas": [float("inf"), 1.0, 2.0]})
    assert pop.kappas[0] == float("inf")
    with pytest.raises(ConfigError, match="every kappa must be > 0"):
        validate(Population, {"kind": "custom", "kappas": [float("nan"), 1.0, 2.0]})
