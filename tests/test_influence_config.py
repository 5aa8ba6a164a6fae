"""The influence verbs' configs compose (chorus.interventions.config): the debate a verb reads is its
``source`` block, beside the model and the verb's own spec; the flat shape (a debate config, an
older file or run record) is read into it, and a run record of that shape is compared in today's."""
from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from chorus.core.runs import RunDirConflict, _same_record
from chorus.interventions.config import DebateSource, InfluenceConfig, load
from chorus.interventions.internals.config import InternalsConfig
from chorus.interventions.internals.config import load as load_internals
from chorus.simulate.debate.config import CONFIGS_DIR as DEBATE_CONFIGS
from chorus.simulate.debate.config import DebateConfig

# internals_smoke as it was written before the source block (flat, as a debate config writes it)
FLAT_INTERNALS_SMOKE = {
    "name": "internals_smoke", "seed": 0, "agents": 3, "generation": {"temperature": 0.7, "max_tokens": 64},
    "model": {"profile": "smollm2-135m-instruct", "backend": "hf", "dtype": "float32"},
    "bench": {"build_seed": 0, "limit": 8}, "analysis": {"n_boot": 300, "n_perm": 300},
    "interventions": {"max_pairs": 8},
    "knockout": {"queries": ["after", "decision"], "sweep_queries": ["after"], "single": True, "cumulative": True,
                 "layers": "all"},
    "patch": {"contrast": "record", "layers": "all"},
    "probe": {"concept": "record", "layers": [0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 29], "n_perm": 30, "n_splits": 4},
    "concepts": {"lexicon": "concepts_v1", "layers": [3, 15, 27], "sites": ["reading", "decision"], "n_perm": 30,
                 "n_splits": 4},
    "transfer": {"sender": "same", "layers": [0, 10, 20, 29], "site": "readout", "max_pairs": 4,
                 "map": {"alphas": [10, 100, 1000, 10000], "n_splits": 4}}}


def test_a_verb_config_is_its_source_the_model_and_its_own_spec():
    fields = set(InternalsConfig.model_fields)
    assert {"source", "model", "knockout", "patch", "probe", "concepts", "transfer"} <= fields
    # what a knockout never reads is not in its config (it derived from the debate config before)
    assert not fields & {"voting", "rounds", "generation", "bench", "readout", "cues", "source_run"}
    assert not set(InfluenceConfig.model_fields) & {"voting", "knockout", "source_run"}
    assert set(DebateSource.model_fields) == {"run", "bench", "agents", "rounds", "conditions", "generation"}


def test_the_flat_shape_reads_as_the_source_block():
    # a shipped config in today's shape equals its flat spelling, field for field
    assert InternalsConfig.model_validate(FLAT_INTERNALS_SMOKE) == load_internals("internals_smoke")
    cfg = InfluenceConfig(source_run="runs/d", rounds=1, bench={"limit": 3}, voting={"enabled": True})
    assert (cfg.source.run, cfg.source.rounds, cfg.source.bench.limit) == ("runs/d", 1, 3)
    # any debate config is an influence config: its debate settings become the source
    smoke = load("smoke")
    debate = DebateConfig.model_validate(yaml.safe_load((DEBATE_CONFIGS / "smoke.yaml").read_text()))
    assert (smoke.source.rounds, smoke.source.bench, smoke.model) == (debate.rounds, debate.bench, debate.model)
    # ``source: RUN`` names the run; a flat override wins over the file's source block
    assert InfluenceConfig(source="runs/x").source.run == "runs/x"
    over = load("influence_smoke", InfluenceConfig, {"bench.limit": 3, "source_run": "runs/y"})
    assert (over.source.bench.limit, over.source.run, over.source.rounds) == (3, "runs/y", 1)
    assert load("influence_smoke", InfluenceConfig, {"source.bench.limit": 5}).source.bench.limit == 5
    # the debate's own bounds hold in the source block, naming the field
    with pytest.raises(ValidationError, match="source.agents"):
        InfluenceConfig(source={"agents": 1})
    with pytest.raises(ValidationError, match="without repeats"):
        InfluenceConfig(conditions=["debate", "debate"])


def test_a_flat_run_record_is_compared_in_todays_shape(tmp_path):
    # an internals run written before the source block: flat, with the readout verbs' blocks
    old = {**DebateConfig().model_dump(mode="json"), **FLAT_INTERNALS_SMOKE, "source_run": "runs/a",
           "readout": {"fractions": [0.0, 1.0]}, "cues": {"sets": ["original"]}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old))
    cfg = load_internals("internals_smoke", {"source.run": "runs/a"})
    _same_record(tmp_path, cfg)   # the same run: resumes
    with pytest.raises(RunDirConflict, match=r"source.run: 'runs/a' -> 'runs/b'"):
        _same_record(tmp_path, load_internals("internals_smoke", {"source.run": "runs/b"}))
    with pytest.raises(RunDirConflict, match=r"source.bench.limit: 8 -> 4"):
        _same_record(tmp_path, load_internals("internals_smoke", {"source.run": "runs/a", "source.bench.limit": 4}))
