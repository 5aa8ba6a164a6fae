"""Configs and topics: defaults, bad input named before any model call, shipped files load."""
import re

import numpy as np
import pytest

from chorus.core.config import ConfigError, validate
from chorus.simulate.belief.config import CONFIGS_DIR, BeliefConfig, expand, load_belief_config
from chorus.simulate.belief.experiment import plan, run_experiment
from chorus.simulate.belief.topics import list_topics, load_topic, stance_bin


def test_defaults_are_the_seeds():
    c = BeliefConfig()
    assert (c.n_agents, c.rounds, c.gamma, c.w, c.seed_list) == (20, 20, 0.7, 1.0, [0, 1, 2, 3, 4])
    assert c.topology.kind == "complete" and c.llm.generator.temperature == 0.9
    assert c.llm.appraiser.temperature == 0.0
    assert BeliefConfig(population={"kind": "degroot"}).population.kappa == 0.1


@pytest.mark.parametrize("data,field,value", [
    ({"population": {"kappa": 0}}, "population.kappa", "0"),
    ({"population": {"kappa": -2}}, "population.kappa", "-2"),
    ({"gamma": 0}, "gamma", "0"),
    ({"gamma": 1.5}, "gamma", "1.5"),
    ({"n_agents": 1}, "n_agents", "1"),
    ({"population": {"kind": "fj", "stubborn_kappa": -1}}, "population.stubborn_kappa", "-1"),
])
def test_bad_values_name_field_and_value(data, field, value):
    with pytest.raises(ConfigError) as ei:
        validate(BeliefConfig, data)
    msg = str(ei.value)
    assert field in msg and value in msg


def test_bad_sweep_value_fails_in_expand():
    cfg = BeliefConfig(sweep={"population.kappa": [1, 2, -1]})
    with pytest.raises(ConfigError, match=r"population\.kappa = -1"):
        expand(cfg)


def test_disconnected_graph_fails_before_any_model_call():
    cfg = BeliefConfig(mode="llm", n_agents=4, seeds=1, llm={"appraiser": {"tau": 1.0}},
                       topology={"kind": "edges", "edges": [[0, 1], [2, 3]]})

    class Boom:  # an engine that must never be touched
        def __getattr__(self, name):
            raise AssertionError("model called")
    with pytest.raises(ConfigError, match="disconnected"):
        run_experiment(cfg, "/nonexistent/never", engine=Boom())


def test_llm_mode_without_tau_or_fit_fails_early():
    cfg = BeliefConfig(mode="llm", llm={"model": "no-such-model"}, seeds=1)
    with pytest.raises(ConfigError, match="calibrate"):
        run_experiment(cfg, "/nonexistent/never", engine=object())


def test_unsweepable_keys():
    with pytest.raises(ConfigError, match="mode"):
        plan(BeliefConfig(sweep={"mode": ["oracle", "llm"]}), sweep=True)
    with pytest.raises(ConfigError, match="sweep"):
        plan(BeliefConfig(), sweep=True)


@pytest.mark.parametrize("path", sorted(p for p in CONFIGS_DIR.glob("*.yaml")  # multi_*: test_belief_dirichlet
                                         if not p.stem.startswith("multi_")), ids=lambda p: p.stem)
def test_shipped_configs_load_and_expand(path):
    cfg = load_belief_config(path)
    conds, specs = plan(cfg, sweep=bool(cfg.sweep))
    assert len(specs) == len(conds) * len(cfg.seed_list)


def test_stance_bins_exact_edges():
    b = np.array([0, .0999, .10, .2499, .25, .3499, .35, .45, .4501, .55, .5501, .6499, .65,
                  .7499, .75, .8999, .90, 1.0])
    assert stance_bin(b).tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8]


@pytest.mark.parametrize("name", list_topics())
def test_topics_render_without_numbers(name):
    t = load_topic(name)
    assert len(t.stance_phrases) == 9 and t.sha256
    seen = set()
    for b in np.linspace(0, 1, 101):
        text = " ".join(m["content"] for m in t.generator_messages(b))
        assert not re.search(r"\d", text), text  # the belief reaches the model only as a phrase
        assert t.stance(b) in text
        seen.add(t.stance(b))
        assert t.stance(b) in t.probe_messages(b)[0]["content"]
    assert len(seen) == 9
    assert "{" not in t.appraiser_messages("Rail now.")[1]["content"].replace('{"p_plus"', "")
    assert len(list_topics()) >= 2
