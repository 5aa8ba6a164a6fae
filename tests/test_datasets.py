"""The evaluation sets shipped inside chorus: every loader on the shipped data, a data folder of
the user's own, the optional ArgLLMs sets, and a clean clone with nothing beside it."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import clone_working_tree

from chorus.simulate.datasets import SHIPPED, DataError, MissingSet, load, resolve_root

ROOT = Path(__file__).resolve().parents[1]


def test_every_shipped_set_has_its_source_and_licence():
    for name in ("truthfulqa", "mmlu", "pubmedqa", "strategyqa", "boolq"):
        assert (SHIPPED / name / "SOURCE.md").is_file() and (SHIPPED / name / "LICENSE").is_file(), name
        assert resolve_root(name) == SHIPPED
    assert not (SHIPPED / "argllms_claims").exists()  # non-commercial: never shipped


def test_loaders_on_shipped_data():
    tqa = load("truthfulqa")
    assert len(tqa.records) == 790 and not tqa.excluded  # the 2025 revision (SOURCE.md)
    assert all(r.gold == "A" and len(r.options) == 2 for r in tqa.records)
    claims = load("truthfulqa_claims")
    golds = [r.gold for r in claims.records]
    assert golds.count("true") == golds.count("false") == 395
    assert len({r.row for r in claims.records}) == 790  # one claim per question
    assert "Proposed answer:" in claims.records[0].question
    m = load("mmlu")
    assert len(m.records) + len(m.excluded) == 14042 and len(m.excluded) == 14
    assert m.excluded_by_reason() == {"empty or duplicated options": 14}
    assert len(m.files) == 57 and all(r.gold in "ABCD" for r in m.records)
    anat = load("mmlu", subjects=["anatomy"])
    assert {r.meta["subject"] for r in anat.records} == {"anatomy"}
    with pytest.raises(DataError, match="unknown MMLU subject"):
        load("mmlu", subjects=["astrology"])
    pm = load("pubmedqa")
    assert len(pm.records) + len(pm.excluded) == 1000
    assert all("LONG_ANSWER" not in r.question and r.gold in ("yes", "no", "maybe") for r in pm.records)
    assert set(pm.excluded_by_reason()) == {"context over 1500 chars"}
    assert len(load("pubmedqa", max_context_chars=100000).records) == 1000
    sq = load("strategyqa")
    assert len(sq.records) == 2290 and [r.gold for r in sq.records].count("yes") == 1071
    bq = load("boolq", max_context_chars=100000)
    assert len(bq.records) == 3270 and [r.gold for r in bq.records].count("yes") == 2033
    assert bq.records[0].question.split("Question: ")[1].endswith("?")


def test_data_folder_lacking_a_set_names_file_and_set(tmp_path):
    (tmp_path / "mmlu" / "test").mkdir(parents=True)
    with pytest.raises(MissingSet, match=r"'pubmedqa'.*missing pubmedqa/ori_pqal.json"):
        load("pubmedqa", tmp_path)
    with pytest.raises(MissingSet, match=r"'mmlu'.*missing mmlu/test/\*_test.csv"):
        load("mmlu", tmp_path)
    with pytest.raises(DataError, match="data directory not found"):
        load("mmlu", tmp_path / "nope")
    # a folder of one's own replaces the shipped data, with the same layout
    shutil.copytree(SHIPPED / "strategyqa", tmp_path / "strategyqa")
    assert load("strategyqa", tmp_path).root == tmp_path


def test_optional_argllms_sets(tmp_path, monkeypatch):
    monkeypatch.delenv("CHORUS_DATA", raising=False)
    with pytest.raises(MissingSet) as e:
        load("truthfulclaim")
    assert e.value.optional and "not shipped" in str(e.value) and "CHORUS_DATA" in str(e.value)
    # JSONL export under CHORUS_DATA
    d = tmp_path / "argllms_claims" / "derived"
    d.mkdir(parents=True)
    (d / "truthfulclaim_experiment.jsonl").write_text(
        "\n".join(json.dumps(r) for r in [{"claim": "A.", "valid": 1}, {"claim": "B.", "valid": 0.0}]))
    monkeypatch.setenv("CHORUS_DATA", str(tmp_path))
    got = load("truthfulclaim")
    assert [r.gold for r in got.records] == ["true", "false"]
    assert load("mmlu", subjects=["anatomy"]).root == SHIPPED  # CHORUS_DATA lacks MMLU: shipped data
    # a clone of the ArgLLMs repository: its Arrow stream (datasets.save_to_disk) is read as is
    import pyarrow as pa
    arrow_dir = tmp_path / "clone" / "Datasets" / "StrategyQA" / "Experiment"
    arrow_dir.mkdir(parents=True)
    table = pa.table({"claim": ["X is Y.", "Z is W."], "valid": [True, False]})
    with pa.OSFile(str(arrow_dir / "data-00000-of-00001.arrow"), "wb") as sink:
        with pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
    got = load("strategyclaim", tmp_path / "clone")
    assert [(r.question, r.gold) for r in got.records] == [("X is Y.", "true"), ("Z is W.", "false")]


def test_council_skips_an_unsupplied_optional_set(monkeypatch, capsys):
    from chorus.simulate.council.config import load as load_cfg
    from chorus.simulate.council.experiment import select_tasks

    monkeypatch.delenv("CHORUS_DATA", raising=False)
    cfg = load_cfg("tiny", {"data": [{"dataset": "truthfulclaim", "n": 4}, {"dataset": "strategyqa", "n": 4}]})
    skipped: list[str] = []
    data = select_tasks(cfg, skipped)
    assert [d for d, _, _ in data] == ["strategyqa"] and len(skipped) == 1
    assert "skipping truthfulclaim" in capsys.readouterr().err
    only = load_cfg("tiny", {"data": [{"dataset": "truthfulclaim", "n": 4}]})
    with pytest.raises(MissingSet, match="not shipped"):
        select_tasks(only)


def test_no_path_outside_the_repository():
    """No package, config or help text refers to a folder beside the repository."""
    bad = []
    for pkg in ("chorus", "serving", "simulate", "interventions", "aggregate", "scripts", "bench"):
        for f in (ROOT / pkg).rglob("*"):
            if f.suffix in (".py", ".yaml", ".md", ".sh", ".toml") and any(s in f.read_text(errors="ignore") for s in ("../shared", "shared/data", "shared/spec", "shared/seeds")):
                bad.append(str(f.relative_to(ROOT)))
    assert not bad, f"references to ../shared: {bad}"


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout")
def test_clean_clone_builds_bench_and_council_claims(tmp_path):
    clone = tmp_path / "clone"  # nothing beside it: no ../shared
    clone_working_tree(clone)
    script = (
        "import json\nfrom chorus import simulate\n"
        "from chorus.simulate.debate.questions import build_bench\n"
        "from chorus.simulate.council.data import load_tasks\n"
        "items, man = build_bench(seed=0)\n"
        "tasks, info = load_tasks('truthfulqa_claims', 24, balanced=True)\n"
        "m, _ = load_tasks('mmlu', 8)\n"
        "print(json.dumps({'pkg': simulate.__file__, 'n': man['n_items'], 'files': sorted(man['source_sha256']),"
        " 'council': info['gold_counts'], 'mmlu': len(m)}))\n")
    env = {k: v for k, v in os.environ.items() if k != "CHORUS_DATA"}
    env["PYTHONPATH"] = str(clone)
    res = subprocess.run([sys.executable, "-c", script], cwd=clone, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["pkg"].startswith(str(clone))  # the clone's code, not the installed checkout
    assert out["n"] > 1000 and out["council"] == {"true": 12, "false": 12} and out["mmlu"] == 8
    assert "truthfulqa/TruthfulQA.csv" in out["files"] and "pubmedqa/ori_pqal.json" in out["files"]


def test_cli_names_the_missing_set(tmp_path):
    from typer.testing import CliRunner

    from chorus.cli import app

    (tmp_path / "truthfulqa").mkdir()
    r = CliRunner().invoke(app, ["debate", "bench", "--data", str(tmp_path), "--out", str(tmp_path / "b.jsonl")])
    assert r.exit_code == 2 and "truthfulqa/TruthfulQA.csv" in r.output and "'truthfulqa'" in r.output
    r = CliRunner().invoke(app, ["council", "tasks", "tiny", "--data", str(tmp_path)])
    assert r.exit_code == 2 and "'truthfulqa'" in r.output and "missing truthfulqa/TruthfulQA.csv" in r.output
    r = CliRunner().invoke(app, ["council", "tasks", "tiny", "--limit", "2"])
    assert r.exit_code == 0 and "truthfulqa_claims" in r.output and "Proposed answer" in r.output
