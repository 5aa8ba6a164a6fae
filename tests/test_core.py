"""The shared base (core): one statistics module, one JSONL reader, one run-directory name, one
progress convention, one strict config base."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from chorus.core import stats
from chorus.core.config import ConfigError, Strict, validate
from chorus.core.jsonl import iter_jsonl, open_text
from chorus.core.progress import progress
from chorus.core.runs import run_dir_path


def test_benjamini_hochberg_hand_computed():
    # p sorted: .01 .03 .04 .5 (m = 4): .01*4/1=.04, .03*4/2=.06, .04*4/3=.0533 -> .0533, .5*4/4=.5;
    # step-up minimum from the top: .04, .0533, .0533, .5
    q = stats.benjamini_hochberg([0.01, 0.04, 0.03, np.nan, 0.5])
    np.testing.assert_allclose(q[[0, 1, 2, 4]], [0.04, 0.16 / 3, 0.16 / 3, 0.5])
    assert np.isnan(q[3])
    assert np.isnan(stats.benjamini_hochberg([np.nan])).all()


def test_ece_with_soft_labels_matches_the_bin_formula():
    p = np.array([0.05, 0.12, 0.18, 0.55, 0.91, 0.97])
    y = np.array([0.0, 0.5, 0.0, 1.0, 1.0, 0.5])
    # bins of width .1: {.05}, {.12, .18}, {.55}, {.91, .97}
    want = (abs(0.05 - 0) + 2 * abs(0.15 - 0.25) + abs(0.55 - 1) + 2 * abs(0.94 - 0.75)) / 6
    assert stats.ece(p, y, 10, "width") == pytest.approx(want)
    from chorus.simulate.belief.calibration import ece as belief_ece
    assert belief_ece(p, y) == pytest.approx(want)


def test_ratio_and_mean_ci():
    rng = np.random.default_rng(0)
    num = rng.normal(2.0, 0.1, 60)
    den = rng.normal(4.0, 0.1, 60)
    fam = np.repeat(np.arange(20), 3)
    est, lo, hi = stats.ratio_ci(num, den, fam, n_boot=400, seed=1)
    assert est == pytest.approx(num.mean() / den.mean())
    assert lo < est < hi and hi - lo < 0.05
    s, _, _ = stats.ratio_ci(num, den, fam, share=True, n_boot=0)
    assert s == pytest.approx(num.mean() / (num.mean() + den.mean()))
    assert np.isnan(stats.ratio_ci(num, np.zeros(60), fam, n_boot=10)[0])  # 0 denominator: NaN, not inf
    m, lo, hi = stats.mean_ci(np.r_[num, np.nan], n_boot=400, seed=0)
    assert m == pytest.approx(num.mean()) and lo < m < hi
    # same seed, same draws: reproducible
    assert stats.ratio_ci(num, den, fam, n_boot=200, seed=3) == stats.ratio_ci(num, den, fam, n_boot=200, seed=3)


def test_jsonl_reader_names_the_line(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text('{"x": 1}\n\n// a comment\n{"x": 2}\n{bad\n')
    with pytest.raises(ValueError, match=r"a\.jsonl line 3: not valid JSON"):
        list(iter_jsonl(p))
    with pytest.raises(KeyError, match=r"a\.jsonl:5: not valid JSON .*column 2"):
        list(iter_jsonl(p, error=KeyError, where="{path}:{n}", comments=True))
    p.write_text('{"x": 1}\n\n// c\n{"x": 2}\n')
    assert list(iter_jsonl(p, comments=True)) == [(1, {"x": 1}), (4, {"x": 2})]
    g = tmp_path / "b.jsonl.gz"
    with open_text(g, "w") as fh:
        fh.write(json.dumps({"y": 3}) + "\n")
    assert list(iter_jsonl(g)) == [(1, {"y": 3})]
    (tmp_path / "again").mkdir()
    with open_text(tmp_path / "again" / "b.jsonl.gz", "w") as fh:
        fh.write(json.dumps({"y": 3}) + "\n")
    assert g.read_bytes() == (tmp_path / "again" / "b.jsonl.gz").read_bytes()  # mtime 0: same bytes


def test_run_dir_path_and_strict_configs(tmp_path):
    assert run_dir_path(tmp_path / "x", "debate", "n") == tmp_path / "x"
    d = run_dir_path(None, "debate", "smoke")
    assert d.parent.as_posix() == "runs/debate" and re.fullmatch(r"smoke-\d{8}-\d{6}", d.name)

    class C(Strict):
        a: int = 1
    with pytest.raises(ConfigError, match="bogus"):
        validate(C, {"bogus": 2})


def test_progress_convention_disabled_bar_accepts_calls():
    with progress("x", enabled=False) as update:
        update(10, 0)
        update(10, 3)


def test_every_config_base_is_the_one_strict_base():
    """Each part's config models derive from chorus.core.config.Strict (unknown keys are errors)."""
    import chorus.aggregate.config
    import chorus.stages
    import chorus.interventions.config
    import chorus.interventions.internals.config
    import chorus.simulate.belief.config
    import chorus.simulate.belief.topics
    import chorus.simulate.council.config
    import chorus.simulate.debate.config
    import chorus.simulate.roleplay.config
    for mod in (chorus.aggregate.config, chorus.simulate.belief.config, chorus.simulate.council.config,
                chorus.simulate.debate.config, chorus.simulate.roleplay.config, chorus.simulate.belief.topics,
                chorus.interventions.config, chorus.interventions.internals.config, chorus.stages):
        models = [v for v in vars(mod).values() if isinstance(v, type) and v.__module__ == mod.__name__
                  and hasattr(v, "model_config")]
        assert models, mod.__name__
        for m in models:
            assert issubclass(m, Strict), f"{mod.__name__}.{m.__name__} is not a chorus.core.config.Strict"


@pytest.mark.slow
def test_engine_cached_goes_through_the_store(tmp_path):
    """Model work outside chat (knockout, patching) reaches the call store only through the engine."""
    from chorus.serving import load_engine

    calls = []

    def compute(idx):
        calls.append(list(idx))
        return [{"v": i * 10} for i in idx]

    store = tmp_path / "calls.sqlite"
    with load_engine("smollm2-135m-instruct", "hf", store=store) as eng:
        reqs = [{"q": 1}, {"q": 2}]
        assert eng.cached("probe-test", reqs, compute) == [{"v": 0}, {"v": 10}]
        assert eng.cached("probe-test", reqs + [{"q": 3}], compute) == [{"v": 0}, {"v": 10}, {"v": 20}]
    assert calls == [[0, 1], [2]]
    with load_engine("smollm2-135m-instruct", "hf", store=store) as eng:  # a new process: read back
        assert eng.cached("probe-test", reqs, compute) == [{"v": 0}, {"v": 10}]
    assert calls == [[0, 1], [2]]


def test_a_run_directory_has_one_writer(tmp_path):
    """A second process on a run directory in use gets a clear error naming the PID; a killed
    writer leaves no stale lock; the same process may create its run again."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from chorus.core.runs import RunDir, RunDirInUse

    run = tmp_path / "run"
    code = ("import sys, time; from chorus.core.runs import RunDir; RunDir.create(sys.argv[1], part='t'); "
            "print('ready', flush=True); time.sleep(600)")
    p = subprocess.Popen([sys.executable, "-c", code, str(run)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        with pytest.raises(RunDirInUse, match=rf"in use by PID {p.pid}"):
            RunDir.create(run, part="t")
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    r = RunDir.create(run, part="t")  # the killed writer's lock went with it
    RunDir.create(run, part="t")  # re-entrant in one process
    r.finish()
    code2 = "import sys; from chorus.core.runs import RunDir; RunDir.create(sys.argv[1], part='t').finish(); print('ok')"
    t0 = time.time()
    assert subprocess.run([sys.executable, "-c", code2, str(run)], capture_output=True, text=True,
                          timeout=120).stdout.strip() == "ok"  # finished: free for the next writer
    assert time.time() - t0 < 120


def test_two_processes_share_one_call_store(tmp_path):
    """Two drivers over one model may share a store: WAL and a busy timeout, no lost row."""
    import subprocess
    import sys

    from chorus.serving.store import CallStore

    store = tmp_path / "calls.sqlite"
    CallStore(store).close()
    code = ("import sys; from chorus.serving.store import CallStore; s = CallStore(sys.argv[1]); w = sys.argv[2]\n"
            "for b in range(40):\n"
            "    s.put_many([(f'{w}-{b}-{i}', 'chat', {'m': 1}, {'i': i}, {'text': w}, 'hf') for i in range(10)])\n"
            "s.close()")
    ps = [subprocess.Popen([sys.executable, "-c", code, str(store), w]) for w in ("a", "b")]
    assert [p.wait(timeout=300) for p in ps] == [0, 0]
    s = CallStore(store)
    got = s.get_many([f"{w}-{b}-{i}" for w in "ab" for b in range(40) for i in range(10)])
    assert len(got) == 800
    s.close()


def test_fieller_matches_the_closed_form_and_admits_an_unbounded_ratio():
    """Every row its own cluster: V is the sample covariance / n, and the bounds are the textbook
    Fieller form 1/(1-g) [R - g v12/v22 +- t/b sqrt(v11 - 2R v12 + R^2 v22 - g (v11 - v12^2/v22))]."""
    from scipy.stats import t as student_t
    num = np.array([1.0, 2.0, 4.0, 3.0, 5.0])
    den = np.array([2.0, 3.0, 5.0, 4.0, 7.0])
    n = len(num)
    a, b = num.mean(), den.mean()
    C = np.cov(num, den) / n
    v11, v12, v22 = C[0, 0], C[0, 1], C[1, 1]
    t = student_t.ppf(0.975, n - 1)
    R, g = a / b, t * t * v22 / b ** 2
    half = t / b * np.sqrt(v11 - 2 * R * v12 + R * R * v22 - g * (v11 - v12 ** 2 / v22))
    lo, hi = (R - g * v12 / v22 - half) / (1 - g), (R - g * v12 / v22 + half) / (1 - g)
    r = stats.ratio_interval(num, den)
    assert r["estimate"] == pytest.approx(R, abs=1e-15)
    assert (r["ci_low"], r["ci_high"]) == (pytest.approx(lo, abs=1e-12), pytest.approx(hi, abs=1e-12))
    assert r["unbounded"] is None and r["interval"] == "fieller" and r["n_clusters"] == n
    assert stats.ratio_ci(num, den, None)[1:] == (pytest.approx(lo, abs=1e-12), pytest.approx(hi, abs=1e-12))
    # clusters: the influence values summed per cluster; one cluster per row is the same interval
    assert stats.ratio_interval(num, den, np.arange(n))["ci_low"] == pytest.approx(lo, abs=1e-12)
    # a planted zero-crossing denominator: no interval, the reason and the denominator's interval given
    rng = np.random.default_rng(0)
    d = rng.normal(0, 1, 40)
    d -= d.mean() - 0.05                      # mean 0.05, standard error ~0.16: its interval holds 0
    z = stats.ratio_interval(rng.normal(1, 1, 40), d, np.repeat(np.arange(20), 2))
    assert z["ci_low"] is None and z["ci_high"] is None and z["unbounded"].startswith(stats.UNBOUNDED)
    assert z["denominator_ci"][0] < 0 < z["denominator_ci"][1] and z["n_clusters"] == 20
    assert np.isnan(stats.ratio_ci(rng.normal(1, 1, 40), d, None)[1])
    with pytest.raises(stats.InputError, match="interval level"):
        stats.ratio_interval(num, den, ci=95)


def test_max_t_band_holds_family_wise_coverage_where_the_unadjusted_interval_does_not():
    """Thirty layers of noisy effects, one planted: the band of the max-|t| covers every layer's truth
    at once close to the nominal 95%, so it covers the largest layer's truth; that layer's own 95%
    interval, chosen after looking, does not (winner's curse). 200 seeded replications."""
    from scipy.stats import t as student_t
    rng = np.random.default_rng(51)
    L, G, reps = 30, 30, 200
    truth = np.zeros(L)
    truth[7] = 0.3
    fam = np.repeat(np.arange(G), 2)              # two rows per cluster, resampled together
    all_cov = sel_fw = sel_own = 0
    for r in range(reps):
        X = truth + rng.normal(0, 1, (G, L))[fam] * 0.7 + rng.normal(0, 0.7, (2 * G, L))
        band = stats.max_t_band(X, None, fam, n_boot=200, seed=r)
        lo, hi, est = np.array(band["ci_low"]), np.array(band["ci_high"]), np.array(band["estimate"])
        j = int(est.argmax())
        all_cov += bool(((lo <= truth) & (truth <= hi)).all())
        sel_fw += bool(lo[j] <= truth[j] <= hi[j])
        se = np.array(band["se"])[j]   # the layer's own 95% t-interval, as if chosen in advance
        tq = student_t.ppf(0.975, G - 1)
        sel_own += bool(est[j] - tq * se <= truth[j] <= est[j] + tq * se)
    simultaneous, selected, unadjusted = all_cov / reps, sel_fw / reps, sel_own / reps
    print(f"max-|t| band: simultaneous {simultaneous:.3f}, best layer {selected:.3f}; unadjusted best layer {unadjusted:.3f}")
    assert 0.90 <= simultaneous <= 0.99 and selected >= simultaneous
    assert unadjusted < 0.80
