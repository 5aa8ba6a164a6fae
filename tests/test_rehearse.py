"""The rehearsal (issue 17): the embedded model through every hf path chorus offers, each
passing, timed and measured, and the report written as JSON."""
from __future__ import annotations

import json

import pytest
from conftest import EMBEDDED


def test_selection_and_bad_input():
    from chorus.rehearse import PATHS, _select
    assert _select(["hf"], None) == [n for n, (b, _) in PATHS.items() if b == "hf"]
    # a short name picks the path on every backend asked for, in phase order (hf before vllm)
    assert _select(["vllm", "hf"], ["chat", "vllm.load"]) == ["hf.chat", "vllm.load", "vllm.chat"]
    with pytest.raises(ValueError, match="unknown backend"):
        _select(["tpu"], None)
    with pytest.raises(ValueError, match="unknown path"):
        _select(["hf"], ["hf.nope"])
    with pytest.raises(ValueError, match="belong to a backend not in backends"):
        _select(["hf"], ["vllm.chat"])
    with pytest.raises(ValueError, match="no path"):
        _select(["openai"], ["knockout"])


@pytest.mark.slow
def test_embedded_model_passes_every_hf_path(tmp_path, monkeypatch):
    monkeypatch.setenv("CHORUS_TORCH_THREADS", "1")  # a shared 2-core CPU: oversubscription costs 20x
    from chorus.rehearse import PATHS, rehearse

    ticks = []
    res = rehearse(EMBEDDED, backends=["hf"], out=tmp_path, progress=lambda total, k: ticks.append((total, k)))
    hf_paths = [n for n, (b, _) in PATHS.items() if b == "hf"]
    assert [r["path"] for r in res["results"]] == hf_paths
    bad = [(r["path"], r["status"], r.get("error")) for r in res["results"] if r["status"] != "pass"]
    assert not bad, bad
    for r in res["results"]:
        assert r["backend"] == "hf"
        assert r["seconds"] > 0 and r["peak_rss_gib"] > 0, r
        assert isinstance(r["detail"], dict) and r["detail"], r
    by = {r["path"]: r["detail"] for r in res["results"]}
    assert by["hf.option_logprobs"]["batch_vs_alone_max_abs_diff"] < 1e-3
    assert by["hf.json_schema"]["conformed"] == 1.0 and by["hf.choice"]["conformed"] == 1.0
    assert by["hf.debate"]["batches"] == [6, 12]  # 2 questions x 3 agents; round 1 holds both conditions
    assert ticks[0] == (len(hf_paths), 0) and sum(k for _, k in ticks) == len(hf_paths)

    written = json.loads((tmp_path / "rehearsal.json").read_text())
    assert written["results"] == json.loads(json.dumps(res["results"]))
    assert written["config"]["model_type"] == "llama" and written["config"]["layers"] == 30
    assert written["machine"]["cores"] >= 1 and written["machine"]["ram_gib"] > 0
    assert written["versions"]["torch"] and written["counts"] == {"pass": len(hf_paths), "fail": 0, "skipped": 0}


def test_a_failing_path_does_not_stop_the_others(tmp_path, monkeypatch):
    """One path raising, one skipping: both recorded, the rest still run (no model needed)."""
    import chorus.rehearse as rh

    def boom(r):
        raise RuntimeError("x" * 600)

    def skip(r):
        raise rh.Skip("not here")

    monkeypatch.setattr(rh, "PATHS", {"hf.a": ("hf", boom), "hf.b": ("hf", skip), "hf.c": ("hf", lambda r: {"ok": 1})})
    res = rh.rehearse(EMBEDDED, backends=["hf"], out=tmp_path)
    st = [(r["path"], r["status"]) for r in res["results"]]
    assert st == [("hf.a", "fail"), ("hf.b", "skipped"), ("hf.c", "pass")]
    assert res["results"][0]["error"].startswith("RuntimeError: xxx") and len(res["results"][0]["error"]) == 500
    assert res["results"][1]["error"] == "not here"
    assert (tmp_path / "rehearsal.json").is_file()
