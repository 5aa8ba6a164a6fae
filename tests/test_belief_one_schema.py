"""One belief config for any number of concepts: the topic decides two stances or concepts, the
settings only one kind of topic has are refused for the other naming the field, the defaults that
differ are recorded in the run's config, and a run record of the two-schema days still resumes."""
import pandas as pd
import pytest
from typer.testing import CliRunner

from chorus.core.config import ConfigError, validate
from chorus.core.runs import RunDirConflict, _same_record
from chorus.simulate.belief.cli import app
from chorus.simulate.belief.config import (CONFIGS_DIR, BeliefConfig, MultiBeliefConfig, load_belief_config,
                                    load_multi_config)

runner = CliRunner()


@pytest.mark.parametrize("path", sorted(CONFIGS_DIR.glob("multi_*.yaml")), ids=lambda p: p.stem)
def test_a_multi_concept_config_is_a_belief_config(path):
    one, multi = load_belief_config(path), load_multi_config(path)
    assert type(one) is BeliefConfig and one.multi and one.model_dump() == multi.model_dump()


def test_the_topic_decides_and_the_differing_defaults_are_recorded():
    two = BeliefConfig()
    assert not two.multi and two.population.b0.kind == "spread"      # auto, recorded as K = 2's draw
    assert (two.llm.generator.max_tokens, two.llm.appraiser.max_tokens, two.llm.appraiser.tau) == (60, 40, None)
    assert two.llm.probe.enabled
    many = BeliefConfig(topic="aldenvale_council")
    assert many.multi and many.population.b0.kind == "auto"
    assert (many.llm.generator.max_tokens, many.llm.appraiser.max_tokens, many.llm.appraiser.tau) == (90, 200, 1.0)
    assert not many.llm.probe.enabled
    assert many.model_dump(exclude={"name"}) == MultiBeliefConfig().model_dump(exclude={"name"})
    given = BeliefConfig(topic="aldenvale_council", llm={"generator": {"max_tokens": 12}, "appraiser": {"tau": 2.0}})
    assert (given.llm.generator.max_tokens, given.llm.appraiser.max_tokens, given.llm.appraiser.tau) == (12, 200, 2.0)
    for cfg in (two, many, given):   # what a run directory records reads back the same
        assert validate(BeliefConfig, cfg.model_dump(mode="json")).model_dump() == cfg.model_dump()


@pytest.mark.parametrize("data,needle", [
    ({"concepts": {"levy": {"gamma": 0.5}}}, r"concepts: topic 'transit_priority' is a two-stance topic"),
    ({"couplings": True}, r"couplings = true: topic 'transit_priority' is a two-stance topic"),
    ({"topic": "aldenvale_council", "oracle": {"channel": {"kind": "power"}}}, r"oracle\.channel: the synthetic channel"),
    ({"topic": "aldenvale_council", "channel_correction": "stored"}, r"channel_correction = 'stored'"),
    ({"topic": "aldenvale_council", "sweep": {"gamma": [0.5, 0.7]}}, r"sweep: a sweep grid is a two-stance topic's"),
    ({"topic": "aldenvale_council", "llm": {"probe": {"enabled": True}}}, r"llm\.probe\.enabled = true"),
    ({"population": {"kind": "custom", "kappas": [1, 2], "b0": {"kind": "values", "values": [0.5, 0.5]}}},
     r"population\.kappas has 2 entries for n_agents=20"),
])
def test_a_setting_the_topic_does_not_have_names_the_field(data, needle):
    with pytest.raises(ConfigError, match=needle):
        validate(BeliefConfig, data)


def test_a_record_of_the_two_schema_days_resumes(tmp_path):
    """A multi-concept run recorded before the one schema (no oracle, sweep, probe or committed
    fields) and a two-stance one (no concepts, couplings, b0.concentration) compare equal to
    today's config; another value is still refused by name."""
    import yaml
    for cfg in (load_belief_config("multi_fj"), load_belief_config("fj")):
        old = cfg.model_dump(mode="json")
        if cfg.multi:
            for k in ("oracle", "channel_correction", "sweep"):
                old.pop(k)
            old["llm"].pop("probe")
            for pop in (old["population"], old["concepts"]["levy"]["population"]):
                for k in ("committed_fraction", "committed_b", "free_b0"):
                    pop.pop(k)
        else:
            old.pop("concepts"), old.pop("couplings"), old["population"]["b0"].pop("concentration")
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(old, sort_keys=False))
        _same_record(tmp_path, cfg)
        with pytest.raises(RunDirConflict, match=r"gamma: 0\.7 -> 0\.5"):
            _same_record(tmp_path, cfg.model_copy(update={"gamma": 0.5}))


def test_belief_run_and_belief_multi_run_a_multi_concept_config_alike(tmp_path):
    """Through the commands, in oracle mode: the same tables, whichever verb runs it."""
    sets = ["--set", "seeds=1", "--set", "rounds=2", "--set", "n_agents=5", "--no-plots"]
    for verb in ("run", "multi"):
        r = runner.invoke(app, [verb, "multi_degroot", *sets, "--out", str(tmp_path / verb)])
        assert r.exit_code == 0, r.output
    for table in ("events", "appraisals", "beliefs"):
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "run" / "tables" / f"{table}.parquet"),
                                      pd.read_parquet(tmp_path / "multi" / "tables" / f"{table}.parquet"))


@pytest.mark.parametrize("args,code,needle", [
    (["run", "multi_fj"], 0, "config OK: multi_fj (belief run); no model was loaded or called"),
    (["sweep", "multi_fj"], 2, "'sweep' runs a two-stance topic's sweep grid; topic 'aldenvale_council' has concepts"),
    (["run", "fj", "--set", "topic=aldenvale_council"], 2, "population.b0.kind = 'spread' draws a scalar credence"),
    (["run", "fj", "--set", "topic=nosuch"], 2, "topic = 'nosuch': no such topic file"),
    (["run", "fj", "--set", "n_agents=4", "--set", "topology={kind: edges, edges: [[0, 1], [2, 3]]}"], 2, "disconnected"),
])
def test_check_validates_what_the_run_would_before_any_model_call(args, code, needle):
    r = runner.invoke(app, [*args, "--check"])
    assert r.exit_code == code and needle in " ".join(r.output.split()), r.output
