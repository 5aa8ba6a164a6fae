"""Typed config of a cross-appraisal run (``chorus belief cross``; the pipeline and report are in
``cross.py``): the panel of models, the belief runs whose utterances they contribute, the
generated set for a model without a run, the appraiser settings, the synthetic channel's known
biases (``mode: synthetic``) and the analysis (bins, bootstrap, anchor). ``is_cross_run`` tells
a cross-appraisal run directory from its provenance."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, Optional

from pydantic import Field, model_validator

from chorus.core.config import Strict
from chorus.core.runs import RunName
from chorus.serving.spec import Backend, Dtype, ModelSpec, RoleSpec

from .config import AppraiserCfg, GeneratorCfg, load_command_config

TABLES = ("utterances", "appraisals")   # what a cross-appraisal run writes
COMMAND = "cross"


class GenerateCfg(Strict):
    """Utterances for a model with no run: ``n`` speaker beliefs evenly spaced on [s_low, s_high]
    (n = 1: s_low alone)."""
    n: int = Field(24, ge=1)
    s_low: float = Field(0.05, ge=0.0, le=1.0)
    s_high: float = Field(0.95, ge=0.0, le=1.0)
    topic: str = "transit_priority"
    generator: GeneratorCfg = GeneratorCfg()


class SyntheticCfg(Strict):
    """The model-free channel: per model a rendering bias r (generator writes s + r) and a
    reading bias q (appraiser reads x + q + N(0, noise)), clipped to [0, 1]; a fraction
    ``fail_rate`` of appraisals is malformed (exercises retries and failure counting)."""
    render_bias: dict[str, float] = Field(default_factory=lambda: {"synth-a": 0.06, "synth-b": -0.04, "synth-c": 0.0})
    read_bias: dict[str, float] = Field(default_factory=lambda: {"synth-a": -0.03, "synth-b": 0.05, "synth-c": 0.0})
    noise: float = Field(0.02, ge=0.0)
    fail_rate: float = Field(0.0, ge=0.0, lt=1.0)
    n: int = Field(200, ge=2, description="utterances per model (no run given)")
    s_low: float = Field(0.2, ge=0.0, le=1.0)
    s_high: float = Field(0.8, ge=0.0, le=1.0)


class CrossAnalysisCfg(Strict):
    bins: int = Field(10, ge=2, description="transfer-curve bins on s")
    n_boot: int = Field(1000, ge=0, description="bootstrap replicates over utterances (0: no intervals)")
    ci: float = Field(0.95, gt=0.0, lt=1.0)
    anchor: str | None = Field(None, description="a model assumed to read faithfully (q = 0); "
                               "null = sum-to-zero")


class CrossConfig(Strict):
    name: RunName = "cross"
    mode: Literal["llm", "synthetic"] = "llm"
    seed: int = Field(0, ge=0, description="root seed: generated utterances, subsampling, bootstrap")
    models: list[RoleSpec] = Field(default_factory=list, description="the panel: one role per model, a profile "
                                   "name or a spec whose null fields come from backend / dtype below (each "
                                   "model named by its profile); synthetic: empty = the models of "
                                   "synthetic.render_bias")
    runs: list[str] = Field(default_factory=list, description="LLM-mode belief run directories; "
                            "each one's model must be in the panel")
    backend: Backend = Field("auto", description="every panel model's backend (each model is one role: its profile)")
    dtype: Optional[Dtype] = None
    max_utterances: int | None = Field(400, ge=1, description="per generator from runs: a seeded "
                                       "subsample (the cost cap); null = all")
    generate: GenerateCfg = GenerateCfg()
    appraiser: AppraiserCfg = AppraiserCfg()
    taus: dict[str, float] = Field(default_factory=dict, description="tau per appraiser model "
                                   "(over the stored fit); appraiser.tau overrides both")
    synthetic: SyntheticCfg = SyntheticCfg()
    analysis: CrossAnalysisCfg = CrossAnalysisCfg()

    def panel(self) -> list[str]:
        """The panel's model names (their profiles), in order."""
        return [m.profile for m in self.models]

    def spec(self, name: str) -> ModelSpec:
        """The engine spec of panel model ``name``: its own fields over backend / dtype."""
        m = self.models[self.panel().index(name)]
        return m.over({"backend": self.backend, "dtype": self.dtype}, f"panel:{name}")

    @model_validator(mode="after")
    def _panel(self) -> CrossConfig:
        if self.mode == "synthetic" and not self.panel():
            self.models = [RoleSpec(profile=m) for m in self.synthetic.render_bias]
        if len(self.panel()) < 2:
            raise ValueError(f"models = {self.panel()}: cross-appraisal needs at least two models")
        if len(set(self.panel())) != len(self.panel()):
            raise ValueError(f"models = {self.panel()}: each model once")
        if self.analysis.anchor is not None and self.analysis.anchor not in self.panel():
            raise ValueError(f"analysis.anchor = {self.analysis.anchor!r} is not one of models {self.panel()}")
        bad = [k for k, v in self.taus.items() if k not in self.panel() or not v > 0]
        if bad:
            raise ValueError(f"taus: {bad} are not models of the panel {self.panel()} or not > 0")
        if self.mode == "synthetic":
            for field in ("render_bias", "read_bias"):
                miss = [m for m in self.panel() if m not in getattr(self.synthetic, field)]
                if miss:
                    raise ValueError(f"synthetic.{field} has no entry for {miss} (e.g. --set "
                                     f"synthetic.{field}.{miss[0]}=0.05)")
        for lo, hi, where in ((self.generate.s_low, self.generate.s_high, "generate"),
                              (self.synthetic.s_low, self.synthetic.s_high, "synthetic")):
            if not lo < hi:
                raise ValueError(f"{where}.s_low = {lo} must be < {where}.s_high = {hi}")
        if len(set(self.runs)) != len(self.runs):
            raise ValueError(f"runs lists a run twice: {self.runs}")
        return self


def load_cross_config(config: str | Path, overrides: dict | None = None) -> CrossConfig:
    """``chorus belief cross [CONFIG]``: a path or a shipped name in ``configs/cross/`` (``default``)."""
    return load_command_config(config, CrossConfig, COMMAND, overrides)


def is_cross_run(path: str | Path) -> bool:
    """Whether ``path`` is a cross-appraisal run directory (its provenance command is ``cross``)."""
    p = Path(path) / "provenance.json"
    return p.is_file() and json.loads(p.read_text()).get("command") == COMMAND
