"""Typed experiment configs for the belief layer. Defaults are the seed's values (N = 20,
5 seeds, 20 rounds, gamma = 0.7, w = 1, complete graph); every number is configurable.

A config describes one condition; an optional ``sweep`` maps dotted field paths to lists of
values, and ``expand`` turns it into the cartesian grid of conditions, each validated before
anything runs (an invalid value fails naming the field and the value)."""
from __future__ import annotations

import copy
import itertools
import json
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from core.config import Strict, load_named, resolve_config, set_dotted, validate
from serving.spec import MaxTokens, ModelSpec, Sampling, Temperature, fold_legacy

CONFIGS_DIR = Path(__file__).resolve().parent / "configs"



class Topology(Strict):
    kind: Literal["complete", "ring", "small_world", "scale_free", "edges"] = "complete"
    k: int = Field(4, ge=2, description="ring / small-world: neighbours per agent (even)")
    p: float = Field(0.1, ge=0.0, le=1.0, description="small-world rewiring probability")
    m: int = Field(2, ge=1, description="scale-free: edges per new node")
    edges: list[tuple[int, int]] | None = Field(None, description="kind=edges: explicit edge list")
    require_connected: bool = True

    @model_validator(mode="after")
    def _edges(self) -> "Topology":
        if self.kind == "edges" and not self.edges:
            raise ValueError("topology.kind = 'edges' needs a non-empty topology.edges list")
        return self


class InitialBeliefs(Strict):
    """How the initial stances b0 are drawn (per seed). ``spread``: evenly spaced on
    [low, high] plus uniform jitter, clipped to [0.05, 0.95]; ``uniform``: i.i.d. uniform on
    [low, high]; ``values``: given per agent."""
    kind: Literal["spread", "uniform", "values"] = "spread"
    low: float = Field(0.1, ge=0.0, le=1.0)
    high: float = Field(0.9, ge=0.0, le=1.0)
    jitter: float = Field(0.02, ge=0.0, le=0.5)
    values: list[float] | None = None

    @field_validator("values")
    @classmethod
    def _unit(cls, v):
        if v is not None and any(not (0.0 <= x <= 1.0) for x in v):
            raise ValueError(f"every initial belief must lie in [0, 1], got {v}")
        return v


def _positive_kappa(v: float) -> float:
    if not (v > 0) or math.isnan(v):
        raise ValueError(f"kappa must be > 0, got {v}")
    return v


class Population(Strict):
    """Who is in the population.

    - ``degroot``: everyone pliable (``kappa``, default 0.1), b0 from ``b0``.
    - ``uniform``: everyone shares ``kappa`` (the kappa-recovery sweep), b0 from ``b0``.
    - ``fj``: stubborn camps (``stubborn_kappa``) hold the most extreme b0 (a
      ``stubborn_fraction`` of agents, half at each end), pliable agents (``pliable_kappa``)
      are between.
    - ``committed``: a ``committed_fraction`` never moves (kappa -> inf) at ``committed_b``;
      the free agents share ``kappa`` and start at ``free_b0``.
    - ``custom``: per-agent ``kappas`` (``.inf`` = committed) and ``b0.values``.
    """
    kind: Literal["degroot", "uniform", "fj", "committed", "custom"] = "uniform"
    kappa: float | None = None
    b0: InitialBeliefs = InitialBeliefs()
    stubborn_kappa: float = 16.0
    pliable_kappa: float = 1.0
    stubborn_fraction: float = Field(0.5, ge=0.0, le=1.0)
    committed_fraction: float = Field(0.1, ge=0.0, lt=1.0)
    committed_b: float = Field(1.0, ge=0.0, le=1.0)
    free_b0: float = Field(0.05, ge=0.0, le=1.0)
    kappas: list[float] | None = None

    @field_validator("kappa", "stubborn_kappa", "pliable_kappa")
    @classmethod
    def _k(cls, v):
        return v if v is None else _positive_kappa(v)

    @field_validator("kappas")
    @classmethod
    def _ks(cls, v):
        if v is not None:
            for x in v:
                if math.isnan(x) or x <= 0:
                    raise ValueError(f"every kappa must be > 0 (.inf = committed), got {v}")
        return v

    @model_validator(mode="after")
    def _defaults(self) -> "Population":
        if self.kappa is None:
            self.kappa = 0.1 if self.kind == "degroot" else 4.0
        if math.isinf(self.kappa) and self.kind != "custom":
            raise ValueError("population.kappa must be finite (use kind 'committed' or 'custom' "
                             "for committed agents)")
        if self.kind == "custom" and self.kappas is None:
            raise ValueError("population.kind = 'custom' needs population.kappas")
        return self


class GeneratorCfg(Sampling):
    """The speakers' sampling (serving.spec.Sampling)."""
    temperature: Temperature = 0.9
    max_tokens: MaxTokens = 60


class AppraiserCfg(Strict):
    """A reading, greedy by default (no nucleus setting); retries sample at ``retry_temperature``."""
    temperature: Temperature = 0.0
    max_tokens: MaxTokens = 40
    max_retries: int = Field(2, ge=0, description="extra attempts after an invalid output")
    retry_temperature: Temperature = 0.7
    tau: float | None = Field(None, gt=0.0, description="temperature scaling; null = the stored "
                              "fit for this model and topic (chorus belief calibrate)")


class ProbeCfg(Strict):
    enabled: bool = True
    temperature: Temperature = 0.0
    max_tokens: MaxTokens = 16
    max_retries: int = Field(1, ge=0)
    retry_temperature: Temperature = 0.7


class LLMCfg(Strict):
    model: ModelSpec = Field(default_factory=ModelSpec, description="the agents' model role (one model plays "
                             "generator, appraiser and probe); a profile name is short for {profile: NAME}")
    generator: GeneratorCfg = GeneratorCfg()
    appraiser: AppraiserCfg = AppraiserCfg()
    probe: ProbeCfg = ProbeCfg()

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        return fold_legacy(data, ("backend", "dtype"), "model", "llm")


class AnalysisCfg(Strict):
    kappa_filter: float = Field(0.05, ge=0.0, description="drop events with |s-b| <= this")
    persist_threshold: float = Field(1e-3, ge=0.0, description="FJ persists if the final "
                                     "cross-agent variance exceeds this")
    transfer_bins: int = Field(10, ge=2)
    tipping_ratio: float = Field(3.0, gt=1.0, description="committed: 'smooth' if no slope of "
                                 "the dose-response exceeds this multiple of the median slope")
    diagonal_tolerance: float = Field(0.01, ge=0.0, description="channel correction: a transfer-curve "
                                      "bin is on the diagonal if its 95% interval of mean(e - s), "
                                      "widened by this, covers 0")
    n_boot: int = Field(1000, ge=0, description="run-clustered bootstrap resamples of the recovered kappa's "
                                                "interval (0: none)")
    ci: float = Field(0.95, gt=0.0, lt=1.0, description="level of the recovered kappa's interval")


class ChannelCfg(Strict):
    """Oracle mode's synthetic channel e = f(s) (a known distortion, for testing a channel
    correction): ``faithful`` e = s; ``power`` e = s**exponent (exponent > 1: the whole curve
    below the diagonal, toward a-); ``logit`` e = sigmoid(slope*logit(s) + shift) (slope > 1
    exaggerates both sides, shift moves the whole curve); ``one_sided`` bends only one side
    (``side: minus``: e = 0.5*(2s)**exponent below 0.5, e = s above). ``noise``: sd of Gaussian
    noise on the logit scale, one seeded draw per utterance."""
    kind: Literal["faithful", "power", "logit", "one_sided"] = "faithful"
    exponent: float = Field(3.0, gt=0.0)
    slope: float = Field(1.0, gt=0.0)
    shift: float = 0.0
    side: Literal["minus", "plus"] = "minus"
    noise: float = Field(0.0, ge=0.0)


class OracleCfg(Strict):
    channel: ChannelCfg = ChannelCfg()


class BeliefConfig(Strict):
    name: str = "belief"
    mode: Literal["oracle", "llm"] = "oracle"
    seed: int = Field(0, ge=0, description="root seed: spawns every generator and model seed")
    seeds: int | list[int] = Field(5, description="replicates: a count (0..n-1) or a list")
    n_agents: int = Field(20, ge=2)
    rounds: int = Field(20, ge=1)
    gamma: float = Field(0.7, gt=0.0, le=1.0)
    w: float = Field(1.0, gt=0.0)
    topology: Topology = Topology()
    turn_order: Literal["shuffle", "fixed"] = "shuffle"
    population: Population = Population()
    topic: str = "transit_priority"
    llm: LLMCfg = LLMCfg()
    analysis: AnalysisCfg = AnalysisCfg()
    oracle: OracleCfg = OracleCfg()
    channel_correction: str = Field("none", min_length=1, description="'none', 'stored' (the fit of "
                                    "'chorus belief correct fit' for this topic and model/channel), or "
                                    "a path to a correction JSON or a run directory holding one")
    sweep: dict[str, list[Any]] = Field(default_factory=dict)

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v):
        if isinstance(v, int):
            if v < 1:
                raise ValueError(f"seeds must be >= 1, got {v}")
        else:
            if not v or len(set(v)) != len(v) or any(x < 0 for x in v):
                raise ValueError(f"seeds must be distinct non-negative ints, got {v}")
        return v

    @field_validator("sweep")
    @classmethod
    def _sweep(cls, v):
        for k, vals in v.items():
            if k == "sweep" or k.startswith("sweep."):
                raise ValueError("a sweep cannot sweep itself")
            if not isinstance(vals, list) or not vals:
                raise ValueError(f"sweep.{k} must be a non-empty list, got {vals!r}")
        return v

    @model_validator(mode="after")
    def _population_fits(self) -> "BeliefConfig":
        p, n = self.population, self.n_agents
        if p.kind == "custom":
            if len(p.kappas) != n:
                raise ValueError(f"population.kappas has {len(p.kappas)} entries for n_agents={n}")
            if p.b0.kind != "values":
                raise ValueError("population.kind = 'custom' needs population.b0.kind = 'values'")
        if p.b0.kind == "values" and (p.b0.values is None or len(p.b0.values) != n):
            raise ValueError(f"population.b0.values must list {n} initial beliefs")
        if p.kind == "committed" and round(p.committed_fraction * n) >= n:
            raise ValueError(f"population.committed_fraction = {p.committed_fraction} leaves no "
                             f"free agent at n_agents={n}")
        if self.topology.kind == "edges":
            bad = [e for e in self.topology.edges if not (0 <= e[0] < n and 0 <= e[1] < n)
                   or e[0] == e[1]]
            if bad:
                raise ValueError(f"topology.edges has invalid edges for n_agents={n}: {bad[:5]}")
        if self.topology.kind in ("ring", "small_world") and self.topology.k >= n:
            raise ValueError(f"topology.k = {self.topology.k} must be < n_agents = {n}")
        if self.topology.kind == "scale_free" and self.topology.m >= n:
            raise ValueError(f"topology.m = {self.topology.m} must be < n_agents = {n}")
        ch = self.oracle.channel
        if self.mode == "llm" and (ch.kind != "faithful" or ch.noise > 0):
            raise ValueError(f"oracle.channel.kind = {ch.kind!r} (noise {ch.noise}) is a synthetic "
                             f"channel for mode = 'oracle' only; the LLM mode's channel is the model")
        return self

    @property
    def seed_list(self) -> list[int]:
        return list(range(self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)


def _set_path(data: dict, dotted: str, value: Any) -> None:
    set_dotted(data, dotted, value)


def resolve_config_path(name: str | Path) -> Path:
    """A path, or the name of a shipped config in ``simulate/belief/configs/``."""
    return resolve_config(name, CONFIGS_DIR)


def load_belief_config(path: str | Path, overrides: dict[str, Any] | None = None) -> BeliefConfig:
    return load_named(path, BeliefConfig, CONFIGS_DIR, overrides)


class Condition(Strict):
    index: int
    label: str
    overrides: dict[str, Any]
    config: BeliefConfig


def expand(cfg: BeliefConfig, use_sweep: bool = True) -> list[Condition]:
    """The conditions of a config: the cartesian product of its ``sweep`` (or just the base
    point). Each is fully validated here, before any model is loaded."""
    base = cfg.model_dump(mode="python")
    base["sweep"] = {}
    axes = list(cfg.sweep.items()) if use_sweep else []
    out: list[Condition] = []
    combos = itertools.product(*[vals for _, vals in axes]) if axes else [()]
    for i, combo in enumerate(combos):
        ov = {k: v for (k, _), v in zip(axes, combo)}
        data = copy.deepcopy(base)
        for k, v in ov.items():
            _set_path(data, k, v)
        c = validate(BeliefConfig, data, source=f"{cfg.name} condition {i} ({_label(ov)})")
        out.append(Condition(index=i, label=_label(ov) or cfg.name, overrides=ov, config=c))
    return out


def _label(ov: dict[str, Any]) -> str:
    parts = []
    for k, v in ov.items():
        short = k.split(".")[-1]
        if isinstance(v, dict):  # e.g. a population: its kind and the settings that tell it apart
            rest = ", ".join(f"{a}={b}" for a, b in v.items() if a != "kind")
            v = (f"{v['kind']} ({rest})" if rest else v["kind"]) if "kind" in v else json.dumps(v, sort_keys=True)
        parts.append(f"{short}={v}")
    return ",".join(parts)
