"""The call store: hits make no model call, a SIGKILLed run resumes to identical results,
locked and corrupt files give clear errors."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import EMBEDDED, ROOT, chats

from chorus.serving import CallStore, StoreError
from chorus.serving.engine import Engine


def _with_store(eng: Engine, path: Path) -> Engine:
    return Engine(eng.profile, eng.backend, eng.tokenizer, dtype=eng.dtype, store=CallStore(path),
                  weights_sha256=eng.weights_sha256)


def test_store_hit_makes_no_model_call(hf_engine, tmp_path):
    eng = _with_store(hf_engine, tmp_path / "calls.sqlite")
    first = eng.chat(chats(4), temperature=0, max_tokens=12)
    lp1 = eng.option_logprobs(chats(4), ["Yes", "No"])
    assert eng.model_calls == 8 and not any(o.cached for o in first)
    again = eng.chat(chats(4), temperature=0, max_tokens=12)
    lp2 = eng.option_logprobs(chats(4), ["Yes", "No"])
    assert eng.model_calls == 8, "a store hit must not call the model"
    assert all(o.cached for o in again)
    assert [o.text for o in again] == [o.text for o in first] and lp1 == lp2
    # a different seed or parameter is a different call
    eng.chat(chats(1), temperature=0.7, max_tokens=12, seed=5)
    assert eng.model_calls == 9
    # unseeded sampling is never cached (it is not reproducible)
    eng.chat(chats(1), temperature=0.7, max_tokens=12)
    eng.chat(chats(1), temperature=0.7, max_tokens=12)
    assert eng.model_calls == 11
    assert len(eng.store) == 9


def test_duplicate_requests_in_one_batch_are_computed_once(hf_engine):
    eng = Engine(hf_engine.profile, hf_engine.backend, hf_engine.tokenizer, dtype="float32")
    outs = eng.chat(chats(2) * 3, temperature=0, max_tokens=8)
    assert eng.model_calls == 2 and outs[0].text == outs[2].text == outs[4].text


JOB = """
import json, sys
from chorus.serving import load_engine
eng = load_engine({profile!r}, "hf", store=sys.argv[1], batch_size=2)
convs = [[{{"role": "user", "content": f"Write a short line about the number {{i}}."}}] for i in range(12)]
outs = eng.chat(convs, temperature=0.8, max_tokens=16, seed=list(range(100, 112)))
json.dump([o.text for o in outs], open(sys.argv[2], "w"))
"""


def _run_job(store: Path, out: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", JOB.format(profile=EMBEDDED), str(store), str(out)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _count(store: Path) -> int:
    if not store.exists():
        return 0
    try:
        with sqlite3.connect(store, timeout=5) as db:
            return db.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def test_sigkill_mid_run_then_resume_gives_identical_results(tmp_path):
    ref_store, ref_out = tmp_path / "ref.sqlite", tmp_path / "ref.json"
    assert _run_job(ref_store, ref_out).wait(timeout=600) == 0
    store, out = tmp_path / "killed.sqlite", tmp_path / "killed.json"
    p = _run_job(store, out)
    deadline = time.time() + 600
    while _count(store) < 4 and time.time() < deadline and p.poll() is None:
        time.sleep(0.2)
    p.send_signal(signal.SIGKILL)
    p.wait()
    kept = _count(store)
    assert 4 <= kept < 12, f"kill landed at {kept} stored calls"
    assert _run_job(store, out).wait(timeout=600) == 0
    assert json.loads(out.read_text()) == json.loads(ref_out.read_text())
    assert _count(store) == 12


def test_locked_store_is_a_clear_error(tmp_path):
    path = tmp_path / "calls.sqlite"
    CallStore(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        st = CallStore(path, timeout_s=0.2)
        with pytest.raises(StoreError, match="locked"):
            st.put_many([("k", "chat", {}, {}, {"text": "x"}, "hf")])
    except StoreError as err:  # may already fail while opening
        assert "locked" in str(err)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert len(CallStore(path)) == 0


def test_corrupt_store_is_a_clear_error(tmp_path):
    path = tmp_path / "calls.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="corrupt"):
        CallStore(path)


def test_store_survives_reopen_and_reports_stats(tmp_path):
    st = CallStore(tmp_path / "c.sqlite")
    st.put_many([(f"k{i}", "chat", {"profile": "p"}, {"i": i}, {"text": str(i), "prompt_tokens": 3,
                                                                 "completion_tokens": 2, "latency_s": 0.1}, "hf")
                 for i in range(10)])
    st.close()
    st = CallStore(tmp_path / "c.sqlite")
    got = st.get_many([f"k{i}" for i in range(12)])
    assert len(got) == 10 and got["k3"]["text"] == "3"
    s = st.stats()
    assert s["calls"] == 10 and s["by_model"][0]["completion_tokens"] == 20
