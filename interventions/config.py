"""Typed config for ``chorus influence readout|ablate|cues``: a debate config plus the readout and
intervention settings. Shipped configs live in ``interventions/configs``; a name not found there
is looked up among the debate configs (any debate config is a valid influence config)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import Field, field_validator

from core.config import Strict, load_named, resolve_config
from simulate.debate.config import CONFIGS_DIR as DEBATE_CONFIGS_DIR
from simulate.debate.config import DebateConfig

CONFIGS_DIR = Path(__file__).resolve().parent / "configs"


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


CUE_SETS = ("original", "matched")   # source-cue phrase sets in the debate prompts (interventions.ablations)


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


class InfluenceConfig(DebateConfig):
    """A debate config plus the influence settings. ``source_run``: a finished ``chorus debate
    run`` directory whose turns are read (otherwise the needed rounds are generated here)."""
    name: str = "influence"
    source_run: Optional[str] = None
    readout: Readout = Readout()
    interventions: Interventions = Interventions()
    cues: Cues = Cues()


def resolve_config_path(config: str | Path) -> Path:
    """A path, a config shipped in ``interventions/configs``, or a shipped debate config."""
    return resolve_config(config, (CONFIGS_DIR, DEBATE_CONFIGS_DIR))


def load(config: str | Path, model: type = InfluenceConfig, overrides: dict[str, Any] | None = None):
    """Load an influence (or internals) config by path or shipped name, with ``--set`` overrides."""
    path = resolve_config_path(config)
    return load_named(path, model, path.parent, overrides)
