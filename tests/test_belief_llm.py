"""LLM roles: batching invariance, retries and failures (with a deterministic fake engine),
calibration, and one end-to-end run through the real embedded model."""
import hashlib
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pytest

from chorus.simulate.belief import calibration as cal
from chorus.simulate.belief.config import BeliefConfig
from chorus.simulate.belief.lockstep import simulate
from chorus.simulate.belief.experiment import plan, run_experiment
from chorus.simulate.belief.channel import LLMAppraiser, LLMGenerator, LLMProbe, temperature_scale
from chorus.simulate.belief.tables import events_table, utterances_table


@dataclass
class Out:
    text: str
    prompt_tokens: int = 10
    completion_tokens: int = 5
    finish_reason: str = "stop"
    conformed: Any = None
    parsed: Any = None
    cached: bool = False


class FakeEngine:
    """Outputs depend only on (conversation, seed, temperature): batch-invariant like a real
    engine with per-request seeds. The generator echoes the stance phrase; the appraiser reads
    it back (with hash noise) and fails for about one request in ``fail_every``."""
    identity = {"profile": "fake"}

    def __init__(self, fail_every: int = 4, out_of_range: bool = False):
        self.fail_every, self.out_of_range = fail_every, out_of_range
        self.batches: list[int] = []

    @staticmethod
    def _h(*parts) -> int:
        return int(hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:12], 16)

    def chat(self, conversations, *, temperature=1.0, top_p=1.0, max_tokens=256, stop=None,
             seed=None, json_schema=None, **kw):
        seeds = seed if isinstance(seed, list) else [seed] * len(conversations)
        self.batches.append(len(conversations))
        outs = []
        for conv, sd in zip(conversations, seeds):
            h = self._h(conv, sd, temperature)
            user = conv[-1]["content"]
            if json_schema is None:
                stance = conv[-1]["content"].split("Privately, you are ")[1].split(".")[0]
                outs.append(Out(text=f"  I am {stance}, friend #{h % 97}. "))
            elif "p_plus" in json_schema["properties"]:
                if h % self.fail_every == 0:
                    outs.append(Out(text="{\"p_plus\": ", conformed=False))
                    continue
                v = 0.1 + 0.8 * ("rail" in user.split("Comment:")[1][:60]) + (h % 11) / 100
                if self.out_of_range and h % 3 == 0:
                    v = 1.7
                outs.append(Out(text=json.dumps({"p_plus": v}), conformed=True, parsed={"p_plus": v}))
            else:
                v = h % 101
                outs.append(Out(text=json.dumps({"stance": v}), conformed=True, parsed={"stance": v}))
        return outs


def _roles(eng):
    return dict(generator=LLMGenerator(eng), appraiser=LLMAppraiser(eng, max_retries=1),
                probe=LLMProbe(eng))


def test_llm_mode_batched_equals_alone_and_failures_are_counted():
    cfg = BeliefConfig(mode="llm", n_agents=4, rounds=2, seeds=[0, 1],
                       population={"kind": "uniform"}, sweep={"population.kappa": [1, 8]})
    conds, specs = plan(cfg, sweep=True)
    eng = FakeEngine()
    batched = simulate(specs, cfg.seed, **_roles(eng))[0]
    assert max(eng.batches) == len(specs) * 4  # the probe: every agent of every run, one batch
    ub, eb = utterances_table(batched), events_table(batched)
    assert ub.failed.any() and (ub.attempts[ub.failed] == 2).all()  # retried once, then failed
    assert not ub.e.isin([0.5]).any()  # never a silent default
    assert ub[ub.failed].e.isna().all() and (ub[ub.failed].listeners == 0).all()
    for sp in specs:
        alone = simulate([sp], cfg.seed, **_roles(FakeEngine()))[0]
        pd.testing.assert_frame_equal(utterances_table(alone).drop(columns=["run", "condition"]),
                                      ub[ub.run == sp.run].drop(columns=["run", "condition"]).reset_index(drop=True))
        pd.testing.assert_frame_equal(events_table(alone).drop(columns=["run", "condition"]),
                                      eb[eb.run == sp.run].drop(columns=["run", "condition"]).reset_index(drop=True))


def test_out_of_range_p_plus_is_a_failure_not_a_clip():
    cfg = BeliefConfig(mode="llm", n_agents=3, rounds=2, seeds=[0, 1, 2, 3])
    conds, specs = plan(cfg, sweep=False)
    eng = FakeEngine(fail_every=10**9, out_of_range=True)
    res = simulate(specs, cfg.seed, generator=LLMGenerator(eng),
                   appraiser=LLMAppraiser(eng, max_retries=0), probe=None)[0]
    ut = utterances_table(res)
    assert ut.failed.any()
    assert ut.error[ut.failed].str.contains("outside").all()
    assert ut.p_raw.dropna().between(0, 1).all()


def test_temperature_scaling_and_tau_fit():
    p = np.linspace(0.02, 0.98, 60)
    assert np.allclose(temperature_scale(p, 1.0), p)
    y = temperature_scale(p, 2.5)  # an overconfident appraiser: true labels are softer
    assert cal.fit_tau(p, y) == pytest.approx(2.5, rel=1e-3)
    assert cal.ece(y, y) == 0.0
    assert cal.soft_cross_entropy(temperature_scale(p, 2.5), y) < cal.soft_cross_entropy(p, y)


def test_calibration_set_is_about_100_graded_items_over_every_band():
    df = cal.load_labels("transit_priority")
    assert 95 <= len(df) <= 110 and df.id.is_unique
    assert df.y.between(0, 1).all() and df.rationale.str.len().gt(5).all()
    from chorus.simulate.belief.topics import stance_bin
    assert set(stance_bin(df.y.to_numpy())) == set(range(9))
    tr, va = cal.split(len(df), 0)
    assert len(va) == round(0.2 * len(df)) and not set(tr) & set(va)


def test_calibrate_with_fake_engine_stores_a_reusable_fit(tmp_path, monkeypatch):
    monkeypatch.setenv("CHORUS_CACHE", str(tmp_path))
    shipped = sorted(cal.SHIPPED_FITS_DIR.rglob("*"))
    fit, scores = cal.calibrate(FakeEngine(), "fake-model", "transit_priority", seed=0)
    assert fit["tau"] > 0 and fit["n_failed"] == scores.p_raw.isna().sum()
    stored = tmp_path / "fits" / "transit_priority" / "fake-model.json"
    assert stored.is_file() and fit["stored_at"] == str(stored)
    assert cal.load_fit("transit_priority", "fake-model")["tau"] == fit["tau"]
    assert cal.find_fit("transit_priority", "fake-model") == stored
    assert sorted(cal.SHIPPED_FITS_DIR.rglob("*")) == shipped  # nothing written into the package
    for k in ("ece_before", "ece_after", "ce_before", "ce_after"):
        assert np.isfinite(fit[k])


def test_fits_are_written_to_the_cache_and_read_back_before_the_shipped_default(tmp_path, monkeypatch):
    """CHORUS_CACHE holds every written fit; a run reads the cache's, else the package's shipped
    default, and records the path it read; the package's fits folder never changes."""
    from chorus.simulate.belief.experiment import resolve_taus
    monkeypatch.setenv("CHORUS_CACHE", str(tmp_path))
    before = {p: p.read_bytes() for p in cal.SHIPPED_FITS_DIR.rglob("*") if p.is_file()}
    model, topic = "smollm2-135m-instruct", "transit_priority"
    cfg = BeliefConfig(mode="llm", llm={"model": model})
    conditions, _ = plan(cfg, sweep=False)
    shipped = cal.SHIPPED_FITS_DIR / topic / f"{model}.json"
    assert cal.find_fit(topic, model) == shipped  # nothing cached yet: the shipped default
    assert resolve_taus(cfg, conditions)[topic]["source"] == str(shipped)
    fit, _ = cal.calibrate(FakeEngine(), model, topic, seed=0)
    cached = tmp_path / "fits" / topic / f"{model}.json"
    assert fit["stored_at"] == str(cached) and cached.is_file()
    assert cal.load_fit(topic, model)["tau"] == fit["tau"]  # a later load reads the cache's fit
    assert resolve_taus(cfg, conditions)[topic] == {"tau": fit["tau"], "source": str(cached)}
    assert {p: p.read_bytes() for p in cal.SHIPPED_FITS_DIR.rglob("*") if p.is_file()} == before


def test_llm_experiment_with_fake_engine_writes_a_complete_run(tmp_path):
    cfg = BeliefConfig(name="fake", mode="llm", n_agents=4, rounds=2, seeds=2,
                       llm={"appraiser": {"tau": 1.5, "max_retries": 0}})
    run, summary = run_experiment(cfg, tmp_path / "run", engine=FakeEngine(), make_plots=False)
    assert summary["headline"]["appraiser_tau"] == 1.5
    assert summary["headline"]["appraisal_failure_rate"] > 0
    assert summary["stats"]["model_calls"]["appraiser"] > summary["stats"]["utterances"] - 1
    ut = run.read_table("utterances")
    assert ut.text.notna().all() and (ut.text.str.strip() == ut.text).all()
    assert run.read_table("beliefs").probe.notna().sum() == 2 * 4 * 2




@pytest.mark.slow
def test_real_model_end_to_end(tmp_path, hf_engine):
    """N = 3, 2 rounds, 2 runs in lockstep through SmolLM2-135M (hf backend, the shared
    session engine). Plumbing only: the model cannot judge stance, so no number here is a
    finding."""
    cfg = BeliefConfig(name="real", mode="llm", n_agents=3, rounds=2, seeds=2,
                       population={"kind": "uniform", "kappa": 2},
                       llm={"model": {"backend": "hf"}, "appraiser": {"tau": 1.0, "max_retries": 1},
                            "generator": {"max_tokens": 12}, "probe": {"max_tokens": 10}})
    run, summary = run_experiment(cfg, tmp_path / "run", engine=hf_engine, make_plots=False)
    ut = run.read_table("utterances")
    assert len(ut) == 2 * 2 * 3
    ok = ut[~ut.failed]
    assert ok.p_raw.between(0, 1).all() and ok.text.str.len().gt(0).all()
    ev = run.read_table("events")
    assert len(ev) == ok.listeners.sum()
    k = np.abs(ev.e - ev.b_before) > 0.05
    from chorus.simulate.belief import kappa_hat
    kh = kappa_hat(ev.b_before, ev.b_after, ev.e, ev.b0, ev.m, 0.7, 1.0)
    assert np.allclose(kh[k], 2.0, rtol=1e-6)
    assert summary["stats"]["model_calls"]["generator"] == 12
    # Tables 2 and 3 across models (chorus belief models): this run beside an oracle kappa sweep
    from chorus.simulate.belief.analysis import pearson
    from chorus.simulate.belief.models_table import TableError, models_tables, wide_table3
    ocfg = BeliefConfig(name="ok", n_agents=6, rounds=4, seeds=2, population={"kind": "uniform"},
                        sweep={"population.kappa": [0.5, 2, 8]})
    orun, _ = run_experiment(ocfg, tmp_path / "oracle", make_plots=False, sweep=True)
    t2, t3, src = models_tables([run.path, orun.path])
    assert list(t2.columns) == ["smollm2-135m-instruct", "oracle"]
    np.testing.assert_equal(t2.at["channel_pearson", "smollm2-135m-instruct"], pearson(ut.s, ut.e))  # pooled (NaN-safe)
    assert t2.at["kappa_spearman", "oracle"] == 1.0 and t2.at["kappa_spearman_every_seed_one", "oracle"]
    assert src["oracle"]["kappa_spearman"] == str(orun.path)
    w = wide_table3(t3)
    assert list(w.loc["oracle"]) == [0.5, 2.0, 8.0]
    with pytest.raises(TableError, match="not a belief run directory"):
        models_tables([tmp_path])
    # the paper report over both runs (chorus paper belief): one numbers file, the paper's order,
    # every section present or naming the run that makes it
    from chorus.papers.belief import PaperError, build_paper
    md = build_paper([run.path, orun.path], tmp_path / "paper").read_text()
    numbers = json.loads((tmp_path / "paper" / "numbers.json").read_text())
    t2 = {r["metric"]: r for r in numbers["sections"]["table2_models"]["table"]}
    assert t2["kappa_spearman"]["oracle"] == 1.0 and "smollm2-135m-instruct" in t2["runs"]
    heads = [h for h in md.splitlines() if h.startswith("## ")]
    assert [h.split(":")[0] for h in heads] == ["## Figure 2", "## §5.1 / Figure 5", "## Table 1", "## Figure 3 / Appendix A",
                                                "## Table 2", "## Table 3", "## Appendix B", "## Appendix C", "## Appendix C"]
    assert "chorus belief calibrate --model PROFILE" in md and "chorus belief sweep kappa_recovery" in md
    # where the numbers come from, said once at the top and per run: the embedded model's run and an oracle run
    assert numbers["standing"]["kind"] == "mixed" and numbers["standing"]["kinds"] == ["embedded", "oracle"]
    assert [r["standing"]["kind"] for r in numbers["runs"]] == ["embedded", "oracle"]
    assert "Numbers from: mixed sources: run: " in md and "oracle: oracle mode" in md and "plumbing" in md
    with pytest.raises(PaperError, match="not a run directory"):
        build_paper([tmp_path / "nope"], tmp_path / "p2")
