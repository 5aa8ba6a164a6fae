"""Typed configs for ``chorus debate`` (``chorus.interventions.config`` extends them for ``chorus
influence``). Defaults follow the peer-influence paper (I = 3 agents, R = 3 rounds, up to 2,048
new tokens); every field is validated before any model call, and an invalid one fails naming
the field and the value."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import Field, field_validator, model_validator

from chorus.core.config import Strict, load_named, resolve_config
from chorus.core.runs import RunName
from chorus.serving.spec import MaxTokens, ModelSpec, Sampling

CONFIGS_DIR = Path(__file__).resolve().parent / "configs"



class BenchSpec(Strict):
    """Either a bench file (``path``) or a build from ``data_dir`` (default: the sets shipped with chorus)."""
    path: Optional[str] = None
    data_dir: Optional[str] = None
    build_seed: int = 0
    counts: dict[str, Optional[int]] = Field(default_factory=dict, description="subdomain -> items (builder)")
    scenario_frames: Literal["default", "stakes"] = Field(
        "default", description="frames of the constructed value scenarios (builder): default = base / personal / "
                               "public; stakes = base + low / high quantity, personal, scrutiny, reversibility")
    limit: Optional[int] = Field(None, ge=1, description="use the first N questions (the bench is shuffled)")
    subdomains: Optional[list[str]] = None
    domains: Optional[list[str]] = None

    @model_validator(mode="after")
    def _frames_need_build(self):
        # a bench file carries its own questions: a frame set there would be silently ignored
        if self.path and self.scenario_frames != "default":
            raise ValueError(f"bench.scenario_frames = {self.scenario_frames!r} applies to a built bench, "
                             f"not to bench.path = {self.path!r}")
        return self


class Generation(Sampling):
    """The agents' sampling (chorus.serving.spec.Sampling); the paper's 2,048-token cap."""
    max_tokens: MaxTokens = 2048


class Analysis(Strict):
    n_boot: int = Field(2000, ge=0)
    n_perm: int = Field(2000, ge=0)
    ci: float = Field(0.95, gt=0.0, lt=1.0)
    fdr_q: float = Field(0.05, gt=0.0, lt=1.0)


class Voting(Strict):
    """The compute-matched majority-vote arm (self-consistency, ``voting.py``): independent round-0
    samples until the arm has generated as many tokens as debate on each question. Off by default;
    it needs debate in the same run (its budget is debate's tokens)."""
    enabled: bool = False
    max_samples: int = Field(64, ge=2,
                             description="cap on samples per question (round-0 answers included); hits counted")
    per_wave: Optional[int] = Field(None, ge=1, description="most samples per question in one engine batch "
                                    "(default: estimated from the tokens still to spend; results do not depend on it)")


def check_conditions(cls, v: list[str]) -> list[str]:
    """The debate's conditions (a ``field_validator``): non-empty, no repeats."""
    if not v or len(set(v)) != len(v):
        raise ValueError(f"conditions must be a non-empty list without repeats, got {v}")
    return v


class DebateConfig(Strict):
    name: RunName = "debate"
    seed: int = Field(0, ge=0)
    bench: BenchSpec = BenchSpec()
    model: ModelSpec = ModelSpec()
    agents: int = Field(3, ge=2, le=12)
    rounds: int = Field(3, ge=1, le=50)
    conditions: list[Literal["debate", "reflection"]] = ["debate", "reflection"]
    generation: Generation = Generation()
    prompts: str = "debate_v1"
    analysis: Analysis = Analysis()
    voting: Voting = Voting()

    _conds = field_validator("conditions")(check_conditions)

    @model_validator(mode="after")
    def _voting(self):
        if self.voting.enabled and "debate" not in self.conditions:
            raise ValueError(f"voting.enabled needs 'debate' in conditions (the vote arm spends debate's tokens), "
                             f"got conditions={self.conditions}")
        if self.voting.enabled and self.voting.max_samples < self.agents:
            raise ValueError(f"voting.max_samples = {self.voting.max_samples} is below agents = {self.agents} "
                             f"(the round-0 answers are the first samples)")
        return self


def resolve_config_path(config: str | Path) -> Path:
    return resolve_config(config, CONFIGS_DIR)


def load(config: str | Path, model: type, overrides: dict[str, Any] | None = None):
    return load_named(config, model, CONFIGS_DIR, overrides)


class BeliefReadConfig(Strict):
    """``chorus debate belief``: a debate run read by the belief layer (``stubbornness.py``)."""
    name: RunName = "debate-belief"
    run: Optional[str] = Field(None, exclude=True,
                               description="the debate run directory (chorus debate belief RUN_DIR); not part of "
                                           "the run's config record: its provenance names the source run")
    reading: Literal["probe", "planted"] = Field(
        "probe", description="belief readings: the debaters' forced-choice probe (a model call), or the "
                             "latent beliefs a synthetic run planted (tables/beliefs.parquet)")
    appraiser: Literal["model", "oracle"] = Field(
        "model", description="evidence e: the belief layer's appraiser reads each turn, or e = the "
                             "speaker's reading (oracle: no call, mechanism only)")
    appraiser_model: Optional[ModelSpec] = Field(
        None, description="the appraiser's model (default: the debate's own)")
    appraiser_prompts: str = "stance_appraiser_v1"
    tau: float = Field(1.0, gt=0.0, description="appraiser temperature scaling p_cal = sigmoid(logit(p)/tau); 1 = raw")
    gamma: float = Field(0.7, gt=0.0, le=1.0, description="forgetting of the closed-form kappa inversion")
    fit_gamma: bool = Field(True, description="also fit (kappa, gamma) jointly by least squares")
    w: float = Field(1.0, gt=0.0, description="evidence weight of one heard turn")
    kappa_filter: float = Field(0.05, ge=0.0, lt=1.0, description="invert only where |mean heard e - b0| > this")
    reflection: bool = Field(True, description="require the reflection control (the drift and placebo kappa)")
    bins: int = Field(10, ge=2, description="transfer-curve bins of the channel audit")
    n_boot: int = Field(500, ge=0)
    ci: float = Field(0.95, gt=0.0, lt=1.0)
    seed: int = Field(0, ge=0)


def load_belief_read_config(config: str | Path | None, overrides: dict[str, Any] | None = None) -> BeliefReadConfig:
    """The config of ``chorus debate belief``: ``--config`` (a path, or a name of ``configs/``) where
    given, else the shipped ``configs/belief/default.yaml`` (every field at its default; its errors
    named '--set', where its values came from), with ``--set`` overrides, validated."""
    if config is None:
        return load_named("default", BeliefReadConfig, CONFIGS_DIR / "belief", overrides, default_source="--set")
    return load_named(config, BeliefReadConfig, CONFIGS_DIR, overrides)
