"""The belief layer's one typed experiment config, for any number of concepts and stances. Defaults
are the seed's values (N = 20, 5 seeds, 20 rounds, gamma = 0.7, w = 1, complete graph); every number
is configurable.

``BeliefConfig`` names a topic, and the topic decides the rest: a two-stance topic
(``simulate/topics/``) is one concept with K = 2 (the Beta layer); a multi-concept topic
(``simulate/topics/multi/``) gives every concept a population (kappa per agent, initial credences),
a forgetting factor gamma and a weight w: the top-level ``population`` / ``gamma`` / ``w`` are every
concept's, ``concepts.<id>`` overrides them for one concept, and the couplings the topic declares
apply with ``couplings: true``. Settings that only one kind of topic has are refused for the other,
naming the field: ``concepts`` and ``couplings`` need concepts; the synthetic channel (``oracle``),
``channel_correction``, the self-report probe (``llm.probe``) and ``sweep`` are a two-stance topic's
for now. The defaults that differ are filled in at validation, so a run's config.yaml records them:
a multi-concept topic's generator writes up to 90 tokens and its appraiser, one JSON object for every
stance of every concept, up to 200 (two stances: 60 and 40); its appraiser temperature tau is 1 (no
multi-concept calibration set exists yet; two stances: null = the stored fit).

An optional ``sweep`` maps dotted field paths to lists of values, and ``expand`` turns it into the
cartesian grid of conditions, each validated before anything runs (an invalid value fails naming the
field and the value). ``MultiBeliefConfig`` is the same schema with ``chorus belief multi``'s
defaults (name ``multi``, topic ``aldenvale_council``)."""
from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from chorus.core.config import ConfigError, InputError, Strict, load_named, load_yaml, resolve_config, set_dotted, validate
from chorus.core.runs import RunName
from chorus.serving.spec import MaxTokens, ModelSpec, Sampling, Temperature, fold_legacy

from .population import Population, Topology, check_population, check_topology
from .topics import topic_kind

CONFIGS_DIR = Path(__file__).resolve().parent / "configs"


def _check_seeds(v: int | list[int]) -> int | list[int]:
    if isinstance(v, int):
        if v < 1:
            raise InputError(f"seeds must be >= 1, got {v}")
    elif not v or len(set(v)) != len(v) or any(x < 0 for x in v):
        raise InputError(f"seeds must be distinct non-negative ints, got {v}")
    return v


class PopulationRun(Strict):
    """What every belief config starts with, in this order: a population of ``n_agents`` talking
    for ``rounds`` rounds, replicated over ``seeds`` under one root ``seed``."""
    name: RunName = "belief"
    mode: Literal["oracle", "llm"] = "oracle"
    seed: int = Field(0, ge=0, description="root seed: spawns every generator and model seed")
    seeds: int | list[int] = Field(5, description="replicates: a count (0..n-1) or a list")
    n_agents: int = Field(20, ge=2)
    rounds: int = Field(20, ge=1)

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v):
        return _check_seeds(v)

    @property
    def seed_list(self) -> list[int]:
        return list(range(self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)


class GeneratorCfg(Sampling):
    """The speakers' sampling (chorus.serving.spec.Sampling)."""
    temperature: Temperature = 0.9
    max_tokens: MaxTokens = 60


class AppraiserCfg(Strict):
    """A reading, greedy by default (no nucleus setting); retries sample at ``retry_temperature``."""
    temperature: Temperature = 0.0
    max_tokens: MaxTokens = 40
    max_retries: int = Field(2, ge=0, description="extra attempts after an invalid output")
    retry_temperature: Temperature = 0.7
    tau: float | None = Field(None, gt=0.0, description="temperature scaling; null = the stored "
                              "fit for this model and topic (chorus belief calibrate); a multi-concept "
                              "topic has none yet: 1")


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


class ConceptCfg(Strict):
    """Overrides for one concept of a multi-concept topic (null = the top-level value)."""
    gamma: float | None = Field(None, gt=0.0, le=1.0)
    w: float | None = Field(None, gt=0.0)
    population: Population | None = None


# a multi-concept topic's defaults where they differ from a two-stance topic's
MULTI_GENERATOR_TOKENS, MULTI_APPRAISER_TOKENS, MULTI_TAU = 90, 200, 1.0


class BeliefConfig(PopulationRun):
    name: RunName = "belief"
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
    couplings: bool = Field(False, description="apply the couplings a multi-concept topic declares")
    concepts: dict[str, ConceptCfg] = Field(default_factory=dict, description="a multi-concept topic: "
                                            "gamma / w / population of one concept (by id)")

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
    def _fits(self) -> "BeliefConfig":
        check_topology(self.topology, self.n_agents)
        ch = self.oracle.channel
        if self.mode == "llm" and (ch.kind != "faithful" or ch.noise > 0):
            raise ValueError(f"oracle.channel.kind = {ch.kind!r} (noise {ch.noise}) is a synthetic "
                             f"channel for mode = 'oracle' only; the LLM mode's channel is the model")
        kind = topic_kind(self.topic)
        if kind == "multi":
            self._multi_topic()
        elif kind == "beta":
            self._two_stances()
        return self

    def _two_stances(self) -> None:
        """A two-stance topic: one concept, K = 2; ``auto`` initial credences are recorded as ``spread``."""
        if self.concepts:
            raise InputError(f"concepts: topic {self.topic!r} is a two-stance topic (one concept); set gamma, "
                             f"w and population at the top level")
        if self.couplings:
            raise InputError(f"couplings = true: topic {self.topic!r} is a two-stance topic and declares no couplings")
        p = self.population
        if p.b0.kind == "auto":
            self.population = p.model_copy(update={"b0": p.b0.model_copy(update={"kind": "spread"})})
        check_population("population", self.population, 2, self.n_agents)

    def _multi_topic(self) -> None:
        """A multi-concept topic: refuse what only a two-stance topic has, fill in its own defaults
        (the per-concept checks need the topic's K: ``check_against_topic``)."""
        why = f"a two-stance topic's; topic {self.topic!r} has concepts"
        if self.oracle.channel != ChannelCfg():
            raise InputError(f"oracle.channel: the synthetic channel is {why}")
        if self.channel_correction != "none":
            raise InputError(f"channel_correction = {self.channel_correction!r}: a channel correction is {why}")
        if self.sweep:
            raise InputError(f"sweep: a sweep grid is {why} (run one config per condition)")
        llm, upd = self.llm, {}
        if "max_tokens" not in llm.generator.model_fields_set:
            upd["generator"] = llm.generator.model_copy(update={"max_tokens": MULTI_GENERATOR_TOKENS})
        app = {} if "max_tokens" in llm.appraiser.model_fields_set else {"max_tokens": MULTI_APPRAISER_TOKENS}
        if llm.appraiser.tau is None:
            app["tau"] = MULTI_TAU
        if app:
            upd["appraiser"] = llm.appraiser.model_copy(update=app)
        if llm.probe.enabled:
            if "enabled" in llm.probe.model_fields_set:
                raise InputError(f"llm.probe.enabled = true: the self-report probe is {why}")
            upd["probe"] = llm.probe.model_copy(update={"enabled": False})
        if upd:
            self.llm = llm.model_copy(update=upd)

    @property
    def multi(self) -> bool:
        """Whether the topic has concepts (``simulate/topics/multi/``), not two stances."""
        return topic_kind(self.topic) == "multi"

    def concept(self, cid: str) -> tuple[float, float, Population]:
        """(gamma, w, population) of concept ``cid`` after its overrides."""
        c = self.concepts.get(cid, ConceptCfg())
        return (self.gamma if c.gamma is None else c.gamma, self.w if c.w is None else c.w,
                self.population if c.population is None else c.population)

    @classmethod
    def fold_legacy(cls, data: dict[str, Any]) -> dict[str, Any]:
        """A run record written before the one schema (a two-stance record without ``concepts``, a
        multi-concept one without ``oracle`` or ``llm.probe``) in today's shape, so that run resumes;
        a record this schema cannot read is compared as it is."""
        try:
            return cls.model_validate(data).model_dump(mode="json")
        except ValidationError:
            return data


class MultiBeliefConfig(BeliefConfig):
    """The one schema with ``chorus belief multi``'s defaults: a multi-concept topic."""
    name: RunName = "multi"
    topic: str = "aldenvale_council"


def _set_path(data: dict, dotted: str, value: Any) -> None:
    set_dotted(data, dotted, value)


def resolve_config_path(name: str | Path) -> Path:
    """A path, or the name of a shipped config in ``simulate/belief/configs/``."""
    return resolve_config(name, CONFIGS_DIR)


def load_belief_config(path: str | Path, overrides: dict[str, Any] | None = None) -> BeliefConfig:
    return load_named(path, BeliefConfig, CONFIGS_DIR, overrides)


DEFAULT_COMMAND_CONFIG = "default"   # the CONFIG of calibrate / labelset / cross when it is left out


def load_command_config(config: str | Path, model: type[Any], command: str,
                        overrides: dict[str, Any] | None = None) -> Any:
    """The config of ``chorus belief COMMAND`` (cross, labelset, calibrate: CONFIG may be left out): a
    path or a shipped name in ``configs/COMMAND/`` (``default``: every field at its default), with
    ``--set`` overrides, validated as ``model`` (an error in the shipped default names the command,
    one in a file its path). A ``model: NAME`` shorthand becomes ``{profile: NAME}`` first, so
    ``--backend`` (``model.backend``) applies over it."""
    d = CONFIGS_DIR / command
    path = resolve_config(config, d)
    data = load_yaml(path)
    if isinstance(data.get("model"), str):
        data["model"] = {"profile": data["model"]}
    for k, v in (overrides or {}).items():
        set_dotted(data, k, v)
    shipped_default = path.resolve() == (d / f"{DEFAULT_COMMAND_CONFIG}.yaml").resolve()
    return validate(model, data, source=f"chorus belief {command}" if shipped_default else str(path))


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


# -- multi-concept topics ----------------------------------------------------------------------
def check_against_topic(cfg: BeliefConfig, topic) -> None:
    """The checks that need a multi-concept topic (K per concept), each naming the field."""
    ids = topic.concept_ids
    for cid in cfg.concepts:
        if cid not in ids:
            raise ConfigError(f"concepts.{cid}: topic {topic.id!r} has no concept {cid!r} (concepts: {', '.join(ids)})")
    for c in topic.concepts:
        _, _, p = cfg.concept(c.id)
        where = f"concepts.{c.id}.population" if cfg.concepts.get(c.id, ConceptCfg()).population else "population"
        check_population(where, p, c.K, cfg.n_agents, c.id)


def resolve_multi_config_path(name: str | Path) -> Path:
    return resolve_config_path(name)


def load_multi_config(path: str | Path, overrides: dict[str, Any] | None = None) -> MultiBeliefConfig:
    return load_named(path, MultiBeliefConfig, CONFIGS_DIR, overrides)
