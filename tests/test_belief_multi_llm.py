"""LLM mode of the multi-concept engine: the one-call structured appraiser, per-concept failures
(a scripted engine double), and one tiny run through the real embedded model (plumbing only)."""
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import yaml

from chorus.simulate.belief.lockstep import plan, prepare, run_group
from chorus.simulate.belief.config import MultiBeliefConfig
from chorus.simulate.belief.experiment import run_experiment as run_multi_experiment
from chorus.simulate.belief.tables import concept_tables
from chorus.simulate.belief.topics import MULTI_TOPICS_DIR, load_multi_topic
from chorus.simulate.belief.channel import LLMGenerator, MultiLLMAppraiser, parse_ratings

TOPIC_FILE = MULTI_TOPICS_DIR / "aldenvale_council.yaml"
TOPIC = load_multi_topic(TOPIC_FILE)  # transit K = 3, levy K = 2, surplus K = 4


@dataclass
class Out:
    text: str
    parsed: Any = None
    conformed: Any = None
    prompt_tokens: int = 10
    completion_tokens: int = 5


def _full(**over):
    ans = {"transit": {"rail": 60, "roads": 30, "buses": 10}, "levy": {"raise": 20, "freeze": 80},
           "surplus": {"schools": 10, "bridge": 20, "tax_cut": 30, "reserve": 40}}
    ans.update(over)
    return {k: v for k, v in ans.items() if v is not None}


class Scripted:
    """An engine double: the generator says a fixed line; the appraiser's answers come from a
    script, one per request in order (then the full answer); it records every request."""

    def __init__(self, script):
        self.script = list(script)
        self.requests: list[dict] = []

    def chat(self, conversations, *, json_schema=None, seed=None, temperature=1.0, **kw):
        outs = []
        for conv, sd in zip(conversations, seed):
            self.requests.append({"schema": json_schema is not None, "seed": sd, "temperature": temperature,
                                  "prompt": conv[-1]["content"]})
            if json_schema is None:
                outs.append(Out(text=" I like trains. "))
                continue
            ans = self.script.pop(0) if self.script else _full()
            if isinstance(ans, str):
                outs.append(Out(text=ans, conformed=False))
            else:
                ok = set(ans) == set(TOPIC.concept_ids)
                outs.append(Out(text=json.dumps(ans), parsed=ans if ok else None, conformed=ok))
        return outs


def test_parse_ratings_reads_each_concept_on_its_own():
    p, err = parse_ratings(Out(text=json.dumps(_full()), parsed=_full(), conformed=True), TOPIC)
    assert err == [None, None, None]
    np.testing.assert_allclose(p[0, :3], [.6, .3, .1])
    np.testing.assert_allclose(p[1], [.2, .8, 0, 0])
    np.testing.assert_allclose(p[2], [.1, .2, .3, .4])
    bad = _full(levy=None, surplus={"schools": 0, "bridge": 0, "tax_cut": 0, "reserve": 0},
                transit={"rail": 50, "roads": 150, "buses": 1})
    p, err = parse_ratings(Out(text=json.dumps(bad), conformed=False), TOPIC)
    assert np.isnan(p).all()
    assert "outside" in err[0] and "no 'levy'" in err[1] and "zero" in err[2]
    p, err = parse_ratings(Out(text=json.dumps(_full(levy={"raise": 1, "hike": 2})), conformed=False), TOPIC)
    assert err[0] is None and err[2] is None and "missing ['freeze']" in err[1] and "unknown ['hike']" in err[1]
    p, err = parse_ratings(Out(text='{"transit": {"rail": 4', conformed=False), TOPIC)
    assert err == ["non-conforming output"] * 3 and np.isnan(p).all()


def test_a_missing_concept_is_a_failed_appraisal_for_that_concept_only():
    """N = 3, one round, one run; the first utterance's answer lacks 'levy' on every attempt."""
    cfg = MultiBeliefConfig(mode="llm", n_agents=3, rounds=1, seeds=1, population={"kind": "uniform", "kappa": 2})
    grp = prepare(plan(cfg), cfg.seed)[0]
    no_levy = _full(levy=None)
    eng = Scripted([no_levy, no_levy])  # the first utterance: first call and its one retry
    res = run_group(grp, LLMGenerator(eng), MultiLLMAppraiser(eng, max_retries=1))
    failed = ~np.isfinite(res.e_appraised).all(-1)            # (T, R, C)
    assert failed[:, 0].tolist() == [[False, True, False], [False, False, False], [False, False, False]]
    assert res.attempts[:, 0].tolist() == [2, 1, 1]            # one retry, for the missing concept
    assert res.errors[0][0] == [None, "no 'levy' in the answer", None]
    # nobody moved on levy at turn 0, every listener moved on the other concepts
    assert not res.listen[0, 0, :, 1].any() and res.listen[0, 0, :, [0, 2]].sum() == 4
    np.testing.assert_array_equal(res.alpha[1, 0, :, 1], res.alpha[0, 0, :, 1])
    tabs = concept_tables(res)
    ap = tabs["appraisals"]
    lv = ap[(ap.concept == "levy") & (ap.turn == 0)]
    assert lv.failed.all() and lv.e.isna().all() and (lv.listeners == 0).all()  # never a default
    assert tabs["utterances"].failed_concepts.tolist() == [1, 0, 0]
    ev = tabs["events"]
    assert not ((ev.turn == 0) & (ev.concept == "levy")).any()
    # e is the normalised rating (tau = 1); the retry went out at the retry temperature, fresh seed
    np.testing.assert_allclose(res.e[1, 0, 0, :3], [.6, .3, .1])
    app = [r for r in eng.requests if r["schema"]]
    assert len(app) == 4 and app[1]["temperature"] == 0.7 and app[1]["seed"] != app[0]["seed"]
    assert not any(ch.isdigit() for r in eng.requests if not r["schema"] for ch in r["prompt"])


def test_a_retry_fills_only_the_concepts_still_failed():
    cfg = MultiBeliefConfig(mode="llm", n_agents=2, rounds=1, seeds=1)
    grp = prepare(plan(cfg), cfg.seed)[0]
    other = {"transit": {"rail": 0, "roads": 0, "buses": 100}, "levy": {"raise": 100, "freeze": 0},
             "surplus": {"schools": 100, "bridge": 0, "tax_cut": 0, "reserve": 0}}
    eng = Scripted([_full(transit=None), other])
    res = run_group(grp, LLMGenerator(eng), MultiLLMAppraiser(eng, max_retries=2))
    np.testing.assert_allclose(res.e[0, 0, 0, :3], [0, 0, 1])   # transit from the retry
    np.testing.assert_allclose(res.e[0, 0, 1, :2], [.2, .8])    # levy kept from the first answer
    assert res.attempts[0, 0] == 2


def test_an_llm_run_where_every_appraisal_fails_still_writes_a_complete_run(tmp_path):
    cfg = MultiBeliefConfig(name="fails", mode="llm", n_agents=3, rounds=2, seeds=2, llm={"appraiser": {"max_retries": 0}})
    eng = Scripted(["not json"] * 100)
    run, summary = run_multi_experiment(cfg, tmp_path / "run", engine=eng, make_plots=False)
    h = summary["headline"]
    assert h["appraisal_failure_rate"] == 1.0 and h["kappa_exact_max_rel_error"] is None
    assert summary["stats"]["appraisal_failures"] == 2 * 2 * 3 * 3 and summary["event_rows"] == 0
    assert summary["stats"]["model_calls"] == {"generator": 12, "appraiser": 12, "computed_by_engine": None,
                                               "generated_tokens": 12 * 5}
    assert all(c["appraisal_failures"] == 12 for c in summary["concepts"])
    assert run.read_table("appraisals").error.eq("non-conforming output").all()




@pytest.mark.slow
def test_real_model_multi_concept_plumbing(tmp_path, hf_engine):
    """N = 2, 1 round, 2 runs in lockstep through SmolLM2-135M on a two-concept topic (K = 3 and
    K = 2, short stance ids so the JSON answer is ~35 tokens): 4 generator calls and 4 appraiser
    calls, one per utterance for both concepts. Plumbing only: the model cannot judge stance
    (greedy, it often rates everything 0, a counted failure), so no number here is a finding."""
    src = yaml.safe_load(TOPIC_FILE.read_text())
    src["concepts"] = [src["concepts"][0], src["concepts"][1]]  # transit (K = 3), levy (K = 2)
    src["couplings"] = []
    topic = tmp_path / "two.yaml"
    topic.write_text(yaml.safe_dump(src))
    cfg = MultiBeliefConfig(name="real-multi", mode="llm", topic=str(topic), n_agents=2, rounds=1, seeds=2,
                            population={"kind": "uniform", "kappa": 2},
                            llm={"model": {"backend": "hf"}, "generator": {"max_tokens": 12},
                                 "appraiser": {"max_retries": 0, "max_tokens": 48}})
    run, summary = run_multi_experiment(cfg, tmp_path / "run", engine=hf_engine, make_plots=False)
    assert summary["stats"]["model_calls"]["generator"] == 4 and summary["stats"]["model_calls"]["appraiser"] == 4
    ap = run.read_table("appraisals")
    assert len(ap) == 4 * (3 + 2)
    ok = ap[~ap.failed]
    if len(ok):  # every successful appraisal is a point of its concept's simplex
        assert ok.groupby(["run", "turn", "concept"], observed=True).e.sum().sub(1).abs().max() < 1e-9
    assert ap[ap.failed].e.isna().all() and ap[ap.failed].error.notna().all()
    ev = run.read_table("events")
    moved = ap[ap.k == 0].groupby("concept", observed=True).listeners.sum()
    assert (ev[ev.k == 0].groupby("concept", observed=True).size().reindex(moved.index, fill_value=0) == moved).all()
    assert run.read_table("utterances").text.notna().all()
