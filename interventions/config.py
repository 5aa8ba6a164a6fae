"""Typed configs of ``chorus influence``: every verb's config is the debate it reads (the ``source``
block: a finished ``chorus debate run`` directory, or the debate settings to generate the turns
here), the reading model, and the verb's own spec (readout / ablation / cue settings here; knockout,
patching, probes, concepts and transfer in ``chorus.interventions.internals.config``). Shipped configs live
in ``interventions/configs``; a name not found there is looked up among the debate configs (any debate
config is a valid influence config: its top-level debate settings are read as the source block)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import Field, field_validator, model_validator

from chorus.core.config import Strict, load_named, resolve_config
from chorus.core.runs import RunName
from chorus.serving.spec import ModelSpec
from chorus.simulate.debate.config import CONFIGS_DIR as DEBATE_CONFIGS_DIR
from chorus.simulate.debate.config import Analysis, BenchSpec, DebateConfig, Generation, check_conditions

CONFIGS_DIR = Path(__file__).resolve().parent / "configs"

_DEBATE = DebateConfig.model_fields


class DebateSource(Strict):
    """The debate a verb reads: ``run``, a finished ``chorus debate run`` directory whose turns (and
    questions) are read; without one, the turns the verb needs are generated here with these debate
    settings (both conditions; ``rounds``: the rounds a readout reads, round 0 for the others)."""
    run: Optional[str] = Field(None, description="a finished `chorus debate run` directory")
    bench: BenchSpec = BenchSpec()
    # the debate's own fields (their bounds and defaults kept in one place)
    agents: int = _DEBATE["agents"]
    rounds: int = _DEBATE["rounds"]
    conditions: list[Literal["debate", "reflection"]] = _DEBATE["conditions"]
    generation: Generation = Generation()

    _conditions = field_validator("conditions")(check_conditions)

    @model_validator(mode="before")
    @classmethod
    def _path(cls, data: Any) -> Any:
        return {"run": data} if isinstance(data, (str, Path)) else data   # ``source: RUN_DIR`` names the run


# the debate settings a flat config writes at top level (a debate config, or a file from before the
# source block) and their place under ``source``; ``voting`` (the debate's vote arm) never applied to
# an influence verb and is dropped
FLAT_SOURCE = {"source_run": "run", "bench": "bench", "agents": "agents", "rounds": "rounds",
               "conditions": "conditions", "generation": "generation"}


def fold_flat_source(data: Any, unused: tuple[str, ...] = ("voting",)) -> Any:
    """A flat config's debate settings moved under ``source`` (a mapping given both ways is merged,
    the flat value winning: ``--set bench.limit=3`` still overrides a file's ``source.bench``);
    ``unused``: top-level blocks a flat record may carry that the verb never read, dropped."""
    if not isinstance(data, dict) or not any(k in data for k in (*FLAT_SOURCE, *unused)):
        return data
    data = dict(data)
    src = data.get("source")
    src = {"run": src} if isinstance(src, (str, Path)) else ({} if src is None else src)
    if not isinstance(src, dict):
        return data   # neither a mapping nor a path: validation names it
    src = dict(src)
    for flat, key in FLAT_SOURCE.items():
        if flat in data:
            v = data.pop(flat)
            src[key] = _merged(src[key], v) if key in src else v
    for k in unused:
        data.pop(k, None)
    data["source"] = src
    return data


def _merged(nested: Any, flat: Any) -> Any:
    if isinstance(nested, dict) and isinstance(flat, dict):
        return {**nested, **{k: _merged(nested[k], v) if k in nested else v for k, v in flat.items()}}
    return flat


class Readout(Strict):
    fractions: list[float] = [0.0, 0.25, 0.5, 0.75, 1.0]
    rounds: Optional[list[int]] = Field(None, description="receiver rounds to read (default: all >= 1)")
    controls: list[Literal["unrelated", "filler"]] = Field(
        [], description="also read each debate turn with its peer messages replaced by unrelated reasoning "
                        "and/or length-matched neutral filler (conditions debate@unrelated, debate@filler)")

    @field_validator("fractions")
    @classmethod
    def _fr(cls, v):
        if not v or any(not (0.0 <= f <= 1.0) for f in v):
            raise ValueError(f"every fraction must lie in [0, 1], got {v}")
        return sorted(set(v))

    @field_validator("controls")
    @classmethod
    def _ctl(cls, v):
        return list(dict.fromkeys(v))  # a control named twice is read once


class Interventions(Strict):
    max_pairs: Optional[int] = Field(None, ge=1, description="receiver-peer pairs to test (default all)")
    require_disagreement: bool = True


CUE_SETS = ("original", "matched")   # source-cue phrase sets in the debate prompts (chorus.interventions.ablations)


class Cues(Strict):
    sets: list[str] = Field(["original"], description="source-cue phrase sets to cross (record x status): "
                                                      "original (the paper's wording), matched (magnitude-matched)")

    @field_validator("sets")
    @classmethod
    def _sets(cls, v):
        bad = [s for s in v if s not in CUE_SETS]
        if bad:
            raise ValueError(f"unknown cue set {bad[0]!r} (known: {', '.join(CUE_SETS)})")
        if not v:
            raise ValueError(f"name at least one cue set ({', '.join(CUE_SETS)})")
        return list(dict.fromkeys(v))   # a set named twice is read once


class SourcedConfig(Strict):
    """What every influence verb's config holds: its name and seed, the debate it reads (``source``),
    the reading model (transformers for the internals verbs), the debate prompts its contexts are
    built with, the statistics' settings and the pair selection."""
    name: RunName = "influence"
    seed: int = Field(0, ge=0)
    source: DebateSource = DebateSource()
    model: ModelSpec = ModelSpec()
    prompts: str = _DEBATE["prompts"]
    analysis: Analysis = Analysis()
    interventions: Interventions = Interventions()

    @model_validator(mode="before")
    @classmethod
    def _flat(cls, data: Any) -> Any:
        return cls.fold_legacy(data)

    @classmethod
    def fold_legacy(cls, data: Any) -> Any:
        """The flat shape (a debate config, an older file or run record) in today's shape; also what
        ``chorus.core.runs`` compares a stored run record in."""
        return fold_flat_source(data)


class InfluenceConfig(SourcedConfig):
    """``chorus influence readout | ablate | cues``: the source, the model and the readout, ablation and
    cue settings."""
    name: RunName = "influence"
    readout: Readout = Readout()
    cues: Cues = Cues()


def resolve_config_path(config: str | Path) -> Path:
    """A path, a config shipped in ``interventions/configs``, or a shipped debate config."""
    return resolve_config(config, (CONFIGS_DIR, DEBATE_CONFIGS_DIR))


def load(config: str | Path, model: type = InfluenceConfig, overrides: dict[str, Any] | None = None):
    """Load an influence (or internals) config by path or shipped name, with ``--set`` overrides."""
    path = resolve_config_path(config)
    return load_named(path, model, path.parent, overrides)
