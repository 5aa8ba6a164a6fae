"""Kill-safe drivers: `chorus debate run` and `chorus council run` SIGKILLed at several points of a
real run (while the model loads, and halfway through the calls), then rerun with the
same arguments, end with exactly the tables of an uninterrupted run, and lose no stored call."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT

pytestmark = pytest.mark.slow


def _stored(out: Path) -> int:
    try:
        with sqlite3.connect(f"file:{out / 'calls.sqlite'}?mode=ro", uri=True, timeout=5) as db:
            return db.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
    except sqlite3.Error:
        return 0


def _start(args: list[str], out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "chorus.cli", *args, "--out", str(out), "--no-plots"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _finish(args: list[str], out: Path) -> None:
    p = _start(args, out)
    log, _ = p.communicate(timeout=900)
    assert p.returncode == 0, log[-3000:]


def _kill_at_points(args: list[str], out: Path, n_calls: int, targets: tuple[int, ...] | None = None) -> list[int]:
    """Start the run and SIGKILL it at each target: by default while it starts (its run directory
    exists, no call stored yet), then once half of the calls are stored.
    Returns the stored counts at each kill."""
    kept = []
    for target in targets or (0, n_calls // 2):
        before = _stored(out)
        p = _start(args, out)
        deadline = time.time() + 600
        while time.time() < deadline and p.poll() is None:
            started = (out / "provenance.json").exists() and (target > 0 or _stored(out) == before)
            if started and _stored(out) >= target:
                break
            time.sleep(0.1)
        assert p.poll() is None, f"the run ended before the kill at {target} calls:\n{p.communicate()[0][-3000:]}"
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        kept.append(_stored(out))
        assert kept[-1] >= before, "a kill lost stored calls"
        assert kept[-1] < n_calls, f"the kill meant for {target} calls landed after the last call"
    return kept


def _same_tables(a: Path, b: Path, names: list[str], drop: tuple[str, ...] = ("cached",)) -> None:
    for name in names:
        ta, tb = (pd.read_parquet(d / "tables" / f"{name}.parquet") for d in (a, b))
        ta, tb = (t.drop(columns=[c for c in drop if c in t.columns]) for t in (ta, tb))
        pd.testing.assert_frame_equal(ta, tb, obj=name)


def _summary(d: Path) -> dict:
    s = json.loads((d / "summary.json").read_text())
    s.pop("timing", None)  # wall times, and how many calls came from the store
    return s


def test_killed_debate_resumes_to_identical_tables(tmp_path):
    args = ["debate", "run", "smoke", "--set", "rounds=1", "--set", "bench.limit=2", "--set", "generation.max_tokens=24",
            "--set", "analysis.n_boot=50", "--set", "analysis.n_perm=50",
            "--set", "model.options={batch_size: 4}"]  # calls land in the store four at a time
    ref, out = tmp_path / "ref", tmp_path / "killed"
    _finish(args, ref)
    n = _stored(ref)
    kept = _kill_at_points(args, out, n)
    _finish(args, out)
    assert _stored(out) == n, (kept, n)  # every call made once: none lost, none repeated
    _same_tables(ref, out, ["turns", "questions", "exclusions"])
    assert _summary(ref) == _summary(out)


def test_killed_council_resumes_to_identical_tables(tmp_path):
    """Generation only (aggregation reads the traces and is pure math): one kill halfway through
    the calls; the debate test above covers kills at several points."""
    seats = ("[{profile: smollm2-135m-instruct, persona: analyst}, {profile: smollm2-135m-instruct, persona: skeptic},"
             " {profile: smollm2-135m-instruct, persona: analyst}]")
    args = ["council", "run", "tiny", "--set", "data.0.n=4", "--set", "rounds=1", "--set", "conditions=[{name: clean}]",
            "--set", f"seats={seats}", "--set", "baselines.methods=[]", "--no-aggregate",
            "--set", "generation.max_tokens=48", "--set", "models.options={batch_size: 4}"]
    ref, out = tmp_path / "ref", tmp_path / "killed"
    _finish(args, ref)
    n = _stored(ref)
    kept = _kill_at_points(args, out, n, targets=(n // 2,))
    _finish(args, out)
    assert _stored(out) == n, (kept, n)
    _same_tables(ref, out, ["turns"])
    for f in sorted((ref / "traces").glob("*.jsonl")):
        assert (out / "traces" / f.name).read_text() == f.read_text(), f.name
    assert _summary(ref) == _summary(out)
