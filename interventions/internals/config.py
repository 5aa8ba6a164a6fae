"""Typed config for ``chorus influence knockout|patch|probe``: an influence config (source run or
bench, model, seed, pairs) plus the knockout, patching and probe settings. Validated before
any model call; the model must run on the transformers backend (internals need the weights)."""
from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional, Union

from pydantic import Field, field_validator, model_validator

from core.config import Strict
from interventions.config import InfluenceConfig

Layers = Union[Literal["all"], list[int]]


class KnockoutSpec(Strict):
    queries: list[Literal["after", "decision"]] = ["after", "decision"]
    sweep_queries: list[Literal["after", "decision"]] = Field(
        ["after"], description="query variants of the single-layer and cumulative sweeps")
    single: bool = True
    cumulative: bool = True
    layers: Layers = Field("all", description="layers of the sweeps (start layers of the cumulative sweep)")
    block: Literal["peer_block", "peer_text"] = Field(
        "peer_block", description="peer_block: the quoted response with its name line; peer_text: the text only")

    @field_validator("queries", "sweep_queries")
    @classmethod
    def _uniq(cls, v):
        if len(set(v)) != len(v):
            raise ValueError(f"repeated query variant in {v}")
        return v


class PatchSpec(Strict):
    contrast: Literal["record", "status"] = Field(
        "record", description="record: good -> poor track record (status fixed); status: professor -> ordinary")
    direction: Literal["x_into_y"] = "x_into_y"
    layers: Layers = "all"
    max_pairs: Optional[int] = Field(None, ge=1)


class ProbeSpec(Strict):
    concept: Literal["record", "status", "message"] = Field(
        "record", description="record: good vs poor track record; status: professor vs ordinary; "
                              "message: peer message present vs absent")
    layers: Layers = "all"
    n_perm: int = Field(100, ge=1)
    n_splits: int = Field(5, ge=2)
    C: float = Field(1.0, gt=0.0)


class InternalsConfig(InfluenceConfig):
    name: str = "internals"
    knockout: KnockoutSpec = KnockoutSpec()
    patch: PatchSpec = PatchSpec()
    probe: ProbeSpec = ProbeSpec()

    @model_validator(mode="after")
    def _hf_only(self):
        if self.model.backend not in ("hf", "auto"):
            raise ValueError(f"model.backend = {self.model.backend!r}: knockout, patching and probes need the "
                             "transformers weights; use backend: hf")
        return self


def load(config: str | Path, overrides: dict | None = None) -> InternalsConfig:
    """An internals config by path or shipped name (``interventions/configs``), with overrides."""
    from interventions.config import load as load_influence
    return load_influence(config, InternalsConfig, overrides)
