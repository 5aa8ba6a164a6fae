"""Typed configs for ``chorus council run``. Defaults follow the seed (I = 3 seats, R = 3 rounds,
proposer temperature 0.7, MoA-family proposers at 0.7, Self-MoA with six samples); every field is
validated before any model call, naming the field and the value."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Optional

from pydantic import Field, field_validator, model_validator

from chorus.core.config import InputError, Strict, load_named, resolve_config
from chorus.core.runs import RunName
from chorus.serving.spec import Backend, Dtype, MaxTokens, ModelSpec, RoleSpec, Sampling, engine_conflict

CONFIGS_DIR = Path(__file__).resolve().parent / "configs"
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


class SeatSpec(RoleSpec):
    """One seat: its model role (a ``RoleSpec``; fields it leaves null come from ``models``) and
    its persona. ``{profile: gemma3-270m, backend: vllm, dtype: bfloat16}`` seats one model on its own
    engine settings."""
    persona: str = "analyst"


class SwapSpec(SeatSpec):
    """A seat's stand-in for one condition (a weak or near-chance model, another persona): fields left
    null come from the seat it replaces, so ``{A3: gemma3-270m}`` keeps A3's persona and engine settings."""
    profile: Optional[str] = Field(None, description="null: the replaced seat's profile")
    persona: Optional[str] = Field(None, description="null: the replaced seat's persona")


def stand_in(seat: SeatSpec, swap: SwapSpec) -> SeatSpec:
    """The seat ``swap`` puts in place of ``seat``: the swap's non-null fields over the seat's."""
    own = {k: v for k, v in swap.model_dump().items() if v is not None and v != [] and v != {}}
    return SeatSpec(**{**seat.model_dump(), **own, "options": {**seat.options, **swap.options}})


class ConditionSpec(Strict):
    """A council condition: ``adversaries`` names the persistent stealth seats (A1..AI); ``swap``
    seats another model or persona in a seat for this condition only (``{A3: {profile: gemma3-270m}}``).
    A swapped seat may also be an adversary: the stand-in then plays the stealth role."""
    name: RunName   # names the condition's trace files: a plain name, never a path
    adversaries: list[str] = Field(default_factory=list)
    swap: dict[str, SwapSpec] = Field(default_factory=dict, description="seat (A1..AI) -> its stand-in")


class Generation(Sampling):
    """The seats' sampling (chorus.serving.spec.Sampling) and the shape of a structured move."""
    max_chars: int = Field(160, ge=20, description="maxLength of free-text fields")
    max_tokens: Annotated[MaxTokens, Field(ge=16)] = 160   # a structured move needs room for its JSON
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

    def spec(self, value: RoleSpec, role: str) -> ModelSpec:
        """The role's spec: its own non-null fields over this block's (options merged key by key)."""
        return value.over(self.model_dump(exclude={"hold"}), role)


class BaselineSpec(Strict):
    methods: list[Literal["moa", "moa_lite", "self_moa", "argllms"]] = Field(default_factory=lambda: list(BASELINES))
    # model roles: a profile name, or a RoleSpec whose null fields come from ``models``
    synthesizer: RoleSpec = Field(default_factory=RoleSpec,
                                  description="MoA-family synthesizer and ArgLLMs evaluator")
    self_moa_profile: Optional[RoleSpec] = Field(None, description="Self-MoA's single proposer (default seat A1's)")
    self_moa_samples: int = Field(6, ge=1)
    argllms_generator: Optional[RoleSpec] = Field(None, description="ArgLLMs argument generator (default seat A1's)")
    claim_base: float = Field(0.5, ge=0.0, le=1.0, description="DF-QuAD base score of the root claim")
    fair_attack: bool = True


class AggregateSpec(Strict):
    methods: list[str] = Field(default_factory=lambda: list(DEFAULT_AGG_METHODS))
    outer_folds: int = Field(5, ge=2)
    inner_folds: int = Field(5, ge=2)
    n_resamples: int = Field(2000, ge=100)
    recalibrate: Optional[list[str]] = Field(None, description="isotonic arms (aggregate's default when None; "
                                                              "its 5 recalibration folds need >= 5 tasks per class)")


class JudgeSpec(RoleSpec):
    """The frozen judge pass (BDA paper D.3) at the end of a run: unparsed baseline answers -> one
    local model (a ``RoleSpec``; fields left null come from ``models``; never a hosted API
    by default)."""
    max_tokens: Annotated[MaxTokens, Field(le=256)] = 16


class CouncilConfig(Strict):
    name: RunName = "council"
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

    @field_validator("conditions")
    @classmethod
    def _swaps(cls, v, info):
        # here, not in _check, so the error line shows the conditions, not the whole config
        if "seats" not in info.data:   # the seats failed: their own error says why
            return v
        seats = info.data["seats"]
        agents = [f"A{i + 1}" for i in range(len(seats))]
        for c in v:
            for a, swap in c.swap.items():
                if a not in agents:
                    raise ValueError(f"condition {c.name!r}: swap seat {a!r} is not one of {agents}")
                seat = seats[agents.index(a)]
                if stand_in(seat, swap).model_dump() == seat.model_dump():   # a no-op swap is a typo
                    raise ValueError(f"condition {c.name!r}: swap of seat {a!r} changes nothing (the seat is "
                                     f"already {seat.profile}/{seat.persona})")
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
        from chorus.aggregate.methods import check_method
        for m in self.aggregate.methods:
            check_method(m)
        b = self.baselines   # a role written into the config that no part of this run reads
        # (the synthesizer serves every baseline and is written in shipped configs: not checked)
        unread = {"self_moa_profile": "self_moa" not in b.methods, "argllms_generator": "argllms" not in b.methods}
        for field, idle in unread.items():
            if idle and getattr(b, field) is not None:
                raise ValueError(f"baselines.{field} is set but no baseline of this run reads it "
                                 f"(baselines.methods: {b.methods}); remove it or add the baseline that uses it")
        self.engines()   # two roles of one profile must agree on its engine
        return self

    def agent_names(self) -> list[str]:
        return [f"A{i + 1}" for i in range(len(self.seats))]

    def condition_seats(self, condition: ConditionSpec) -> list[SeatSpec]:
        """The seats of one condition: each swapped seat's stand-in (its null fields from the seat it
        replaces, options merged key by key), the others as configured."""
        return [stand_in(seat, condition.swap[a]) if a in condition.swap else seat
                for a, seat in zip(self.agent_names(), self.seats)]

    def swap_roles(self) -> dict[str, SeatSpec]:
        """The stand-in seats by role name ``<seat>@<condition>`` (planned and loaded with the others)."""
        return {f"{a}@{c.name}": seat for c in self.conditions if c.swap
                for a, seat in zip(self.agent_names(), self.condition_seats(c)) if a in c.swap}

    def roles(self) -> dict[str, ModelSpec]:
        """Every model role this run uses, by name: the seats (A1..AI), the conditions' swapped-in
        seats (``A3@swap-A3-weak``), the baselines' synthesizer, Self-MoA proposer and ArgLLMs
        generator (when baselines run), and the judge (when on)."""
        m = self.models
        out = {a: m.spec(s, a) for a, s in zip(self.agent_names(), self.seats)}
        out.update({r: m.spec(s, r) for r, s in self.swap_roles().items()})
        b = self.baselines
        if b.methods:
            out["synthesizer"] = m.spec(b.synthesizer, "synthesizer")
            out["self_moa"] = m.spec(b.self_moa_profile, "self_moa") if b.self_moa_profile else out["A1"]
            out["argllms_generator"] = m.spec(b.argllms_generator, "argllms_generator") if b.argllms_generator \
                else out["A1"]
        if self.judge is not None:
            out["judge"] = m.spec(self.judge, "judge")
        return out

    def engines(self) -> dict[str, ModelSpec]:
        """One engine per profile, as the protocol addresses seats and baselines (the judge's phase
        apart): roles that share a profile must agree on its engine, else one error naming both."""
        by_profile: dict[str, tuple[str, ModelSpec]] = {}
        for role, spec in self.roles().items():
            if role == "judge":
                continue
            first = by_profile.setdefault(spec.profile, (role, spec))
            msg = engine_conflict(first, (role, spec)) if first[0] != role else None
            if msg:
                raise InputError(msg)
        return {p: s for p, (_r, s) in by_profile.items()}

    def profiles(self) -> list[str]:
        """Distinct model profiles the council and its baselines load (each once; the judge loads
        after them, at the end of the run)."""
        return list(dict.fromkeys(s.profile for r, s in self.roles().items() if r != "judge"))


def resolve_config_path(config: str | Path) -> Path:
    return resolve_config(config, CONFIGS_DIR)


def load(config: str | Path, overrides: dict[str, Any] | None = None) -> CouncilConfig:
    return load_named(config, CouncilConfig, CONFIGS_DIR, overrides)
