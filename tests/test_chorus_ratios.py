"""Issue 52: the ratio harness (chorus against raw transformers, bench/chorus_ratios.py) produces every
key at tiny size on a CPU, and the bf16 batch-invariance measure (bench/batch_invariance.py) says
where a batched readout departs from the alone one."""
from __future__ import annotations

import importlib.util
import math
import sys

import pytest
from conftest import ROOT


def _bench(name: str):
    if str(ROOT / "bench") not in sys.path:
        sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_ratio_harness_produces_every_key_at_tiny_size(tiny):
    cr = _bench("chorus_ratios")
    eng = tiny("llama")
    d = cr.measure(eng, "tiny", repeats=1, min_seconds=0, new_tokens=2, words=16)
    assert list(d["ratios"]) == cr.keys() and len(cr.keys()) == len(set(cr.keys()))
    assert cr.keys()[:2] == ["chat.greedy.short.b8", "knockout.debate.b32"]  # the most informative first
    for k, v in d["ratios"].items():
        assert "error" not in v, (k, v)
        assert v["chorus_s"] > 0 and v["raw_s"] > 0 and math.isclose(v["ratio"], v["chorus_s"] / v["raw_s"], rel_tol=2e-2)
        assert isinstance(v["meets_goal"], bool) and v["passes"] >= 1
        # one pass: the interval is refused, saying why, never printed from one draw
        assert v["ratio_ci"]["resampled"] == "interleaved pass" and v["ratio_ci"]["interval"] == [None, None]
        assert "refused" in v["ratio_ci"] and v["miss_beyond_noise"] is False
        if k.startswith(("option_logprobs.", "knockout.debate.")):  # text to ids on both sides, beside the ratio
            assert math.isclose(v["ratio_vs_raw_from_text"], v["chorus_s"] / v["raw_from_text_s"], rel_tol=2e-2)
    assert d["ratios"]["knockout.debate.b32"]["goal_ratio_max"] == cr.GOAL_KO
    assert d["ratios"]["chat.greedy.short.b32"]["goal_ratio_max"] == pytest.approx(1 / cr.GOAL_SPEED, abs=1e-3)
    assert d["ratios"]["chat.greedy.short.b32"]["chorus_tokens"] == 32 * 2  # random weights: no early stop
    assert set(d["misses"]) <= set(d["ratios"])


def test_ratio_interval_resamples_whole_passes():
    cr = _bench("chorus_ratios")
    den = [0.10, 0.13, 0.11, 0.19, 0.12, 0.15, 0.10, 0.14]
    # chorus a fixed 1.25x raw pass by pass: every resample's ratio of medians is 1.25, so the interval
    # is the point (a slow pass slows both sides of it: resampling passes keeps them paired)
    iv = cr.ratio_interval([1.25 * t for t in den], den)
    assert iv["interval"] == [1.25, 1.25] and iv["resampled"] == "interleaved pass" and iv["n_units"] == 8
    # unpaired noise: the interval holds the point estimate and is seeded (the same bounds twice)
    num = [0.13, 0.12, 0.16, 0.14, 0.15, 0.11, 0.17, 0.13]
    a, b = cr.ratio_interval(num, den), cr.ratio_interval(num, den)
    est = sorted(num)[3:5]
    point = (sum(est) / 2) / (sum(sorted(den)[3:5]) / 2)
    assert a == b and a["interval"][0] <= round(point, 3) <= a["interval"][1] and a["interval"][0] < a["interval"][1]
    assert cr.ratio_interval(num[:4], den[:4])["interval"] == [None, None]  # under 5 passes: refused
    assert "4" in cr.ratio_interval(num[:4], den[:4])["refused"]


def test_ratio_harness_records_a_budget_cut_instead_of_dropping_keys(tiny):
    cr = _bench("chorus_ratios")
    d = cr.measure(tiny("llama"), "tiny", deadline=0.0)
    assert list(d["ratios"]) == cr.keys() and all(v == {"skipped": "budget"} for v in d["ratios"].values())


@pytest.mark.parametrize("family", ["llama", "gemma4", "qwen3_5"])
def test_bf16_batch_invariance_measure_on_tiny_models(tokenizer, family):
    """In bf16 on this CPU only the padded rows depart from their alone readout, only under sdpa:
    eager attention is bitwise batch-invariant (the measure behind issue 52's Gemma-4 finding)."""
    import torch

    from chorus.interventions import families as fam
    from chorus.serving.engine import engine_from_model
    bi = _bench("batch_invariance")
    eng = engine_from_model(fam.tiny_model(family, len(tokenizer)).to(torch.bfloat16), tokenizer)
    d = bi.measure(eng)
    assert d["dtype"] == "bfloat16" and d["attn_implementation"] == "sdpa"
    assert eng.backend.model.config._attn_implementation == "sdpa"  # restored
    for impl in ("sdpa", "eager"):
        r = d[impl]
        assert r["pad_tokens"][-1] == 0 and r["per_row"][-1] == 0.0  # the longest row is never padded
        assert all(math.isfinite(x) for x in r["per_row"] + r["layer_drift"]) and r["layer_drift"][0] == 0.0
    assert d["eager"]["max_abs_diff"] == 0.0 and d["eager"]["drift_per_layer"] == 0.0
    assert d["sdpa"]["max_abs_diff"] < 0.05


def test_ratios_table_reads_runs_into_one_table(tmp_path, capsys):
    """bench/ratios_table.py: each run's ratio with its interval, the median across runs against the goal,
    and the side ratios' medians; files of two models, or not ratio runs, are one clear line and exit 2."""
    rt = _bench("ratios_table")
    import json

    def run(name, ratio, ci, model="llama", share=1.0):
        d = {"model": model, "machine": {"cpu_model": "cpu X", "cores": 2, "loadavg_at_start": [0.5, 0, 0]},
             "engine": {"torch_threads": 1}, "size": "tiny",
             "ratios": {"knockout.debate.b32": {"ratio": ratio, "goal_ratio_max": 1.1, "ratio_vs_chorus_plain": ratio - 0.05,
                                                "ratio_ci": {"interval": ci}, "raw_s": 0.2, "raw_from_text_s": 0.2 * share},
                        "chat.greedy.short.b1": {"ratio": 0.98, "goal_ratio_max": 1.111, "ratio_ci": {"interval": [None, None]}}}}
        p = tmp_path / name
        p.write_text(json.dumps(d))
        return p
    files = [run("a.json", 1.08, [1.05, 1.11], share=1.05), run("b.json", 1.12, [1.10, 1.15], share=1.2),
             run("c.json", 1.13, [1.1, 1.2], share=1.1)]
    assert rt.main([str(f) for f in files]) == 0
    out = capsys.readouterr().out
    row = next(l for l in out.splitlines() if l.startswith("| `knockout.debate.b32`"))
    assert row == ("| `knockout.debate.b32` | <= 1.100 | 1.080 [1.050, 1.110] | 1.120 [1.100, 1.150] | "
                   "1.130 [1.100, 1.200] | 1.120 | **no** | - | 1.100 | 1.070 |")
    assert "| `chat.greedy.short.b1` | <= 1.111 | 0.980 | 0.980 | 0.980 | 0.980 | yes | - | - | - |" in out
    assert "cpu X, 2 cores, load 0.50 at start, torch threads 1, tiny size" in out
    assert rt.main([str(files[0]), str(run("d.json", 1.0, [1, 1], model="gemma"))]) == 2
    assert "different models" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{}")
    assert rt.main([str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "bad.json" in err and "not a ratio run" in err
