"""Typed configs of the multi-concept belief engine (``chorus belief multi``).

A config names a multi-concept topic (``simulate/topics/multi/``) and gives every concept a
population (kappa per agent, initial credences), a forgetting factor gamma and a weight w: the
top-level ``population`` / ``gamma`` / ``w`` are the defaults, ``concepts.<id>`` overrides them
for one concept. Couplings declared by the topic apply only with ``couplings: true``.

Initial credences per concept (``population.b0.kind``): ``spread`` / ``uniform`` / ``values``
are the single-concept layer's draws (K = 2 only: the scalar is the first stance's credence, the
same stream and code, so a K = 2 concept reproduces the Beta engine); ``dirichlet`` draws every
agent's b0 from a symmetric Dirichlet (any K); ``values`` also takes one K-vector per agent;
``auto`` (default) is ``spread`` for K = 2 and ``dirichlet`` for K > 2."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from core.config import ConfigError, Strict, load_named, resolve_config
from serving.spec import MaxTokens, ModelSpec, Temperature, fold_legacy

from .config import AnalysisCfg, GeneratorCfg, Topology

CONFIGS_DIR = Path(__file__).resolve().parent / "configs"


class InitialCredences(Strict):
    kind: Literal["auto", "spread", "uniform", "values", "dirichlet"] = "auto"
    low: float = Field(0.1, ge=0.0, le=1.0)
    high: float = Field(0.9, ge=0.0, le=1.0)
    jitter: float = Field(0.02, ge=0.0, le=0.5)
    concentration: float = Field(1.0, gt=0.0, description="dirichlet: symmetric concentration")
    values: list[float] | list[list[float]] | None = Field(None, description="values: per agent, a "
                                                            "K-vector on the simplex (or, K = 2, b on the first stance)")


def _kappa_ok(v: float | None) -> float | None:
    if v is not None and (math.isnan(v) or not v > 0):
        raise ValueError(f"kappa must be > 0, got {v}")
    return v


class ConceptPopulation(Strict):
    """Per concept: ``degroot`` (everyone ``kappa``, default 0.1), ``uniform`` (everyone
    ``kappa``, default 4), ``fj`` (stubborn camps at ``stubborn_kappa`` hold the most extreme
    b0: for K = 2 half at each end as in the single-concept layer, for K > 2 one camp per stance
    made of the agents with the highest credence on it; pliable agents at ``pliable_kappa``) or
    ``custom`` (per-agent ``kappas``, ``.inf`` = committed, never moves)."""
    kind: Literal["degroot", "uniform", "fj", "custom"] = "uniform"
    kappa: float | None = None
    b0: InitialCredences = InitialCredences()
    stubborn_kappa: float = 16.0
    pliable_kappa: float = 1.0
    stubborn_fraction: float = Field(0.5, ge=0.0, le=1.0)
    kappas: list[float] | None = None

    @field_validator("kappa", "stubborn_kappa", "pliable_kappa")
    @classmethod
    def _k(cls, v):
        return _kappa_ok(v)

    @field_validator("kappas")
    @classmethod
    def _ks(cls, v):
        if v is not None and any(math.isnan(x) or x <= 0 for x in v):
            raise ValueError(f"every kappa must be > 0 (.inf = committed), got {v}")
        return v

    @model_validator(mode="after")
    def _defaults(self) -> ConceptPopulation:
        if self.kappa is None:
            self.kappa = 0.1 if self.kind == "degroot" else 4.0
        if math.isinf(self.kappa):
            raise ValueError("population.kappa must be finite (use kind 'custom' with .inf kappas for "
                             "committed agents)")
        if self.kind == "custom" and self.kappas is None:
            raise ValueError("population.kind = 'custom' needs population.kappas")
        return self


class ConceptCfg(Strict):
    """Overrides for one concept (null = the top-level value)."""
    gamma: float | None = Field(None, gt=0.0, le=1.0)
    w: float | None = Field(None, gt=0.0)
    population: ConceptPopulation | None = None


class MultiAppraiserCfg(Strict):
    temperature: Temperature = 0.0
    max_tokens: MaxTokens = 200   # one JSON object rating every stance of every concept
    max_retries: int = Field(2, ge=0, description="extra calls for the concepts still failed")
    retry_temperature: Temperature = 0.7
    tau: float = Field(1.0, gt=0.0, description="temperature scaling on the simplex (1 = none; no "
                       "multi-concept calibration set exists yet)")


class MultiLLMCfg(Strict):
    model: ModelSpec = Field(default_factory=ModelSpec, description="the agents' model role; a profile name is "
                             "short for {profile: NAME}")

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        return fold_legacy(data, ("backend", "dtype"), "model", "llm")
    generator: GeneratorCfg = GeneratorCfg(max_tokens=90)
    appraiser: MultiAppraiserCfg = MultiAppraiserCfg()


class MultiBeliefConfig(Strict):
    name: str = "multi"
    mode: Literal["oracle", "llm"] = "oracle"
    seed: int = Field(0, ge=0, description="root seed: spawns every generator and model seed")
    seeds: int | list[int] = Field(5, description="replicates: a count (0..n-1) or a list")
    n_agents: int = Field(20, ge=2)
    rounds: int = Field(20, ge=1)
    topic: str = "aldenvale_council"
    couplings: bool = Field(False, description="apply the couplings the topic declares")
    gamma: float = Field(0.7, gt=0.0, le=1.0)
    w: float = Field(1.0, gt=0.0)
    population: ConceptPopulation = ConceptPopulation()
    concepts: dict[str, ConceptCfg] = Field(default_factory=dict)
    topology: Topology = Topology()
    turn_order: Literal["shuffle", "fixed"] = "shuffle"
    llm: MultiLLMCfg = MultiLLMCfg()
    analysis: AnalysisCfg = AnalysisCfg()

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v):
        if isinstance(v, int):
            if v < 1:
                raise ValueError(f"seeds must be >= 1, got {v}")
        elif not v or len(set(v)) != len(v) or any(x < 0 for x in v):
            raise ValueError(f"seeds must be distinct non-negative ints, got {v}")
        return v

    @model_validator(mode="after")
    def _fits(self) -> MultiBeliefConfig:
        n, t = self.n_agents, self.topology
        if t.kind == "edges":
            bad = [e for e in t.edges if not (0 <= e[0] < n and 0 <= e[1] < n) or e[0] == e[1]]
            if bad:
                raise ValueError(f"topology.edges has invalid edges for n_agents={n}: {bad[:5]}")
        if t.kind in ("ring", "small_world") and t.k >= n:
            raise ValueError(f"topology.k = {t.k} must be < n_agents = {n}")
        if t.kind == "scale_free" and t.m >= n:
            raise ValueError(f"topology.m = {t.m} must be < n_agents = {n}")
        return self

    @property
    def seed_list(self) -> list[int]:
        return list(range(self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)

    # -- per concept -----------------------------------------------------------------------
    def concept(self, cid: str) -> tuple[float, float, ConceptPopulation]:
        """(gamma, w, population) of concept ``cid`` after its overrides."""
        c = self.concepts.get(cid, ConceptCfg())
        return (self.gamma if c.gamma is None else c.gamma, self.w if c.w is None else c.w,
                self.population if c.population is None else c.population)


def check_against_topic(cfg: MultiBeliefConfig, topic) -> None:
    """The checks that need the topic (K per concept), each naming the field."""
    ids = topic.concept_ids
    for cid in cfg.concepts:
        if cid not in ids:
            raise ConfigError(f"concepts.{cid}: topic {topic.id!r} has no concept {cid!r} (concepts: {', '.join(ids)})")
    n = cfg.n_agents
    for ci, c in enumerate(topic.concepts):
        _, _, p = cfg.concept(c.id)
        where = f"concepts.{c.id}.population" if cfg.concepts.get(c.id, ConceptCfg()).population else "population"
        kind = p.b0.kind
        if kind in ("spread", "uniform") and c.K != 2:
            raise ConfigError(f"{where}.b0.kind = {kind!r} draws a scalar credence and needs K = 2; concept "
                              f"{c.id!r} has K = {c.K} (use 'dirichlet' or 'values')")
        if kind == "values":
            v = p.b0.values
            if v is None or len(v) != n:
                raise ConfigError(f"{where}.b0.values must list {n} initial credences for concept {c.id!r}")
            for a, x in enumerate(v):
                vec = [x, 1.0 - x] if isinstance(x, (int, float)) and c.K == 2 else x
                if not isinstance(vec, list) or len(vec) != c.K or any(not (0.0 <= y <= 1.0) for y in vec) \
                        or abs(sum(vec) - 1.0) > 1e-9:
                    raise ConfigError(f"{where}.b0.values[{a}] = {x!r}: concept {c.id!r} needs a point of "
                                      f"the simplex with K = {c.K} entries")
        if p.kind == "custom":
            if len(p.kappas) != n:
                raise ConfigError(f"{where}.kappas has {len(p.kappas)} entries for n_agents={n}")
            if kind != "values":
                raise ConfigError(f"{where}.kind = 'custom' needs {where}.b0.kind = 'values'")


def resolve_multi_config_path(name: str | Path) -> Path:
    return resolve_config(name, CONFIGS_DIR)


def load_multi_config(path: str | Path, overrides: dict[str, Any] | None = None) -> MultiBeliefConfig:
    return load_named(path, MultiBeliefConfig, CONFIGS_DIR, overrides)
