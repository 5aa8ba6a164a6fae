"""Typed configs for ``chorus council run``. Defaults follow the seed (I = 3 seats, R = 3 rounds,
proposer temperature 0.7, MoA-family proposers at 0.7, Self-MoA with six samples); every field is
validated before any model call, naming the field and the value."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import Field, field_validator, model_validator

from core.config import Strict, load_named, resolve_config
from serving.profiles import DEFAULT_PROFILE
from serving.spec import Backend, Dtype, ModelSpec

CONFIGS_DIR = Path(__file__).resolve().parents[1] / "configs" / "council"
BASELINES = ("moa", "moa_lite", "self_moa", "argllms")
# bda_tempered (the seed's E.5 control, tau by CV) is in by default: the one-coin grid's b >= 0.52
# presumes seats better than chance; with K = 4 and weak seats the untempered one-coin arms are overconfident.
DEFAULT_AGG_METHODS = ["plurality", "verbalized", "best_member", "stacker", "gated", "ds_em",
                       "bda_shared", "bda_per_agent", "bda_tempered", "bda_confusion"]



class DataSpec(Strict):
    dataset: Literal["truthfulqa_claims", "strategyqa", "boolq", "pubmedqa", "mmlu",
                     "truthfulclaim", "strategyclaim", "medclaim"] = Field(
        description="shipped: truthfulqa_claims, strategyqa, boolq, pubmedqa, mmlu; optional (ArgLLMs, supplied "
                    "with data_dir or CHORUS_DATA): truthfulclaim, strategyclaim, medclaim")
    n: Optional[int] = Field(None, ge=2, description="tasks to draw (seeded); None = all")
    balanced: Optional[bool] = Field(None, description="equal tasks per gold class (default: PubMedQA only)")
    subjects: Optional[list[str]] = Field(None, description="MMLU subjects (default all)")
    max_context_chars: int = Field(1500, ge=100)


class SeatSpec(Strict):
    profile: str = DEFAULT_PROFILE
    persona: str = "analyst"


class ConditionSpec(Strict):
    """A council condition: ``adversaries`` names the persistent stealth seats (A1..AI)."""
    name: str
    adversaries: list[str] = Field(default_factory=list)


class Generation(Strict):
    temperature: float = Field(0.7, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_chars: int = Field(160, ge=20, description="maxLength of free-text fields")
    max_tokens: int = Field(160, ge=16, description="new-token cap of a structured reply")
    max_retries: int = Field(2, ge=0, description="re-asks of an illegal move before it becomes an abstention")


class ModelsSpec(Strict):
    """What every council role shares: the engine settings (the profiles are the seats' and the
    baselines'; ``CouncilConfig.roles`` joins them into one ``ModelSpec`` per role)."""
    backend: Backend = "hf"
    dtype: Optional[Dtype] = None
    options: dict[str, Any] = Field(default_factory=dict, description="backend options (batch_size, ...)")
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs one vLLM engine spans")
    endpoints: list[str] = Field(default_factory=list, description="backend openai: the servers' base URLs")
    store: Optional[str] = Field(None, description="call store (default RUN/calls.sqlite)")
    hold: Literal["auto", "all", "swap"] = Field(
        "auto", description="auto: the device plan decides (all engines at once when they fit, else one at a "
                            "time, a round's calls engine by engine); all / swap: force it")

    def spec(self, profile: str, **override: Any) -> ModelSpec:
        return ModelSpec(profile=profile, **{**self.model_dump(exclude={"hold"}), **override})


class BaselineSpec(Strict):
    methods: list[Literal["moa", "moa_lite", "self_moa", "argllms"]] = Field(default_factory=lambda: list(BASELINES))
    synthesizer: str = Field(DEFAULT_PROFILE, description="MoA-family synthesizer and ArgLLMs evaluator")
    self_moa_profile: Optional[str] = Field(None, description="Self-MoA's single proposer (default seat A1's)")
    self_moa_samples: int = Field(6, ge=1)
    argllms_generator: Optional[str] = Field(None, description="ArgLLMs argument generator (default seat A1's)")
    claim_base: float = Field(0.5, ge=0.0, le=1.0, description="DF-QuAD base score of the root claim")
    fair_attack: bool = True


class AggregateSpec(Strict):
    methods: list[str] = Field(default_factory=lambda: list(DEFAULT_AGG_METHODS))
    outer_folds: int = Field(5, ge=2)
    inner_folds: int = Field(5, ge=2)
    n_resamples: int = Field(2000, ge=100)
    recalibrate: Optional[list[str]] = Field(None, description="isotonic arms (aggregate's default when None; "
                                                              "its 5 recalibration folds need >= 5 tasks per class)")


class JudgeSpec(Strict):
    """The frozen judge pass (BDA paper D.3) at the end of a run: unparsed baseline answers -> one local model."""
    profile: str = Field(DEFAULT_PROFILE, description="the judge's model profile (local; never a hosted API "
                                                              "by default)")
    backend: Optional[Backend] = Field(None, description="default: models.backend")
    max_tokens: int = Field(16, ge=1, le=256)


class CouncilConfig(Strict):
    name: str = "council"
    seed: int = Field(0, ge=0)
    gen_seeds: list[int] = Field(default_factory=lambda: [0], min_length=1, description="generation seeds (repeats)")
    data: list[DataSpec] = Field(default_factory=lambda: [DataSpec(dataset="truthfulqa_claims", n=10)], min_length=1)
    data_dir: Optional[str] = Field(None, description="a data folder replacing the shipped sets (default: shipped "
                                                      "data; the ArgLLMs sets also from CHORUS_DATA)")
    seats: list[SeatSpec] = Field(default_factory=lambda: [SeatSpec(), SeatSpec(profile="gemma3-270m"),
                                                           SeatSpec(persona="skeptic")], min_length=2, max_length=12)
    rounds: int = Field(3, ge=1, le=10)
    conditions: list[ConditionSpec] = Field(default_factory=lambda: [ConditionSpec(name="clean"),
                                                                     ConditionSpec(name="attack-k1", adversaries=["A3"])])
    generation: Generation = Generation()
    models: ModelsSpec = ModelsSpec()
    baselines: BaselineSpec = BaselineSpec()
    aggregate: AggregateSpec = AggregateSpec()
    prompts: str = "council_v2"
    judge: Optional[JudgeSpec] = Field(None, description="run the frozen judge pass at the end (default: off; "
                                                         "`chorus council judge RUN` runs it later)")

    @field_validator("gen_seeds")
    @classmethod
    def _seeds(cls, v):
        if len(set(v)) != len(v):
            raise ValueError(f"gen_seeds must not repeat, got {v}")
        return v

    @model_validator(mode="after")
    def _check(self):
        agents = self.agent_names()
        names = [c.name for c in self.conditions]
        if not names or len(set(names)) != len(names):
            raise ValueError(f"conditions need distinct names, got {names}")
        for c in self.conditions:
            for a in c.adversaries:
                if a not in agents:
                    raise ValueError(f"condition {c.name!r}: adversary seat {a!r} is not one of {agents}")
            if len(set(c.adversaries)) != len(c.adversaries) or len(c.adversaries) >= len(agents):
                raise ValueError(f"condition {c.name!r}: adversaries {c.adversaries} must be distinct and fewer "
                                 f"than the {len(agents)} seats")
        ds = [d.dataset for d in self.data]
        if len(set(ds)) != len(ds):
            raise ValueError(f"data lists a dataset twice: {ds}")
        from aggregate.methods import check_method
        for m in self.aggregate.methods:
            check_method(m)
        return self

    def agent_names(self) -> list[str]:
        return [f"A{i + 1}" for i in range(len(self.seats))]

    def roles(self) -> dict[str, ModelSpec]:
        """Every model role this run uses, by name: the seats (A1..AI), the baselines' synthesizer,
        Self-MoA proposer and ArgLLMs generator (when baselines run), and the judge (when on)."""
        out = {a: self.models.spec(s.profile) for a, s in zip(self.agent_names(), self.seats)}
        b = self.baselines
        if b.methods:
            out["synthesizer"] = self.models.spec(b.synthesizer)
            out["self_moa"] = self.models.spec(b.self_moa_profile or self.seats[0].profile)
            out["argllms_generator"] = self.models.spec(b.argllms_generator or self.seats[0].profile)
        if self.judge is not None:
            out["judge"] = self.models.spec(self.judge.profile, **({"backend": self.judge.backend}
                                                                  if self.judge.backend else {}))
        return out

    def profiles(self) -> list[str]:
        """Distinct model profiles the council and its baselines load (each once; the judge loads
        after them, at the end of the run)."""
        return list(dict.fromkeys(s.profile for r, s in self.roles().items() if r != "judge"))


def resolve_config_path(config: str | Path) -> Path:
    return resolve_config(config, CONFIGS_DIR)


def load(config: str | Path, overrides: dict[str, Any] | None = None) -> CouncilConfig:
    return load_named(config, CouncilConfig, CONFIGS_DIR, overrides)
