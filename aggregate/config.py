"""Typed configs of ``chorus aggregate run`` and ``chorus aggregate sweep`` (defaults are the
seed's values; an invalid field fails before anything runs, naming the field and value)."""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from chorus.aggregate.methods import check_method
from chorus.core.config import Strict, load_yaml, resolve_config, set_dotted, validate
from chorus.core.runs import RunName
from chorus.aggregate.synthetic_councils import CouncilSpec

CONFIGS_DIR = Path(__file__).resolve().parent / "configs"

DEFAULT_METHODS = ["plurality", "verbalized", "best_member", "stacker", "gated", "ds_em",
                   "bda_shared", "bda_per_agent", "bda_confusion"]



class AdversaryConfig(Strict):
    kind: Literal["persistent", "rotating"] = "persistent"
    k: int = Field(1, ge=0)
    p_wrong: float = Field(1.0, ge=0.0, le=1.0)
    seats: list[str] | None = None
    target: Literal["random", "fixed"] = "random"


class SyntheticConfig(Strict):
    n_tasks: int = Field(1500, ge=10)
    K: int = Field(2, ge=2)
    candidates: list[str] | None = None
    reliabilities: list[float] = Field(default_factory=lambda: [0.74, 0.68, 0.68], min_length=1)
    rounds: int = Field(3, ge=1)
    p_concede: float = Field(0.3, ge=0.0, le=1.0)
    p_challenge: float = Field(0.15, ge=0.0, le=1.0)
    p_stay: float = Field(0.5, ge=0.0, le=1.0)
    repeats: int = Field(1, ge=1)
    overconfidence: float = 0.1
    adversary: AdversaryConfig | None = None

    @field_validator("reliabilities")
    @classmethod
    def _rel(cls, v: list[float]) -> list[float]:
        for x in v:
            if not 0.0 <= x <= 1.0:
                raise ValueError(f"reliability {x} outside [0, 1]")
        return v

    @model_validator(mode="after")
    def _cands(self):
        if self.candidates is not None and len(self.candidates) != self.K:
            raise ValueError(f"{len(self.candidates)} candidates for K={self.K}")
        if self.p_concede + self.p_challenge > 1:
            raise ValueError("p_concede + p_challenge must be <= 1")
        return self

    def spec(self):

        return CouncilSpec(n_tasks=self.n_tasks, K=self.K, reliabilities=tuple(self.reliabilities),
                           rounds=self.rounds, p_concede=self.p_concede, p_challenge=self.p_challenge,
                           p_stay=self.p_stay, candidates=None if self.candidates is None else tuple(self.candidates),
                           repeats=self.repeats, overconfidence=self.overconfidence)


class GridsConfig(Strict):
    """Hyperparameter grids (BDA paper §D.1 for b, kappa, s; lambda/tau/C: chorus choices)."""

    b: list[float] = Field(default_factory=lambda: [0.52, 0.55, 0.58, 0.60])
    kappa: list[float] = Field(default_factory=lambda: [0.0, 1.0, 2.0, 3.0, 4.0])
    s: list[float] = Field(default_factory=lambda: [4.0, 8.0, 16.0, 32.0])
    # the lambda / tau names are the BDA paper's
    lambda_: list[float] = Field(default_factory=lambda: [1.0, 4.0, 16.0, 64.0, 256.0], alias="lambda")
    tau: list[float] = Field(default_factory=lambda: [0.1, 0.2, 0.3, 0.5, 0.75, 1.0])
    C: list[float] = Field(default_factory=lambda: [0.01, 0.1, 1.0, 10.0, 100.0])

    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)

    @model_validator(mode="after")
    def _check(self):
        for name in ("b", "s", "lambda_", "tau", "C"):
            vals = getattr(self, name)
            if not vals or any(v <= 0 for v in vals):
                raise ValueError(f"grid {name.rstrip('_')} must hold positive numbers, got {vals}")
        if any(not 0 < b < 1 for b in self.b):
            raise ValueError(f"grid b must lie in (0, 1), got {self.b}")
        if any(t > 1 for t in self.tau):
            raise ValueError(f"grid tau must lie in (0, 1], got {self.tau}")
        if any(k < 0 for k in self.kappa):
            raise ValueError(f"grid kappa must be >= 0, got {self.kappa}")
        return self

    def as_dict(self) -> dict[str, list[float]]:
        return {"b": self.b, "kappa": self.kappa, "s": self.s, "lambda": self.lambda_,
                "tau": self.tau, "C": self.C}


class BootstrapConfig(Strict):
    n_resamples: int = Field(10_000, ge=100)
    reference: str = "plurality"
    pairs: list[tuple[str, str]] | None = None  # default: every method against the reference
    metrics: list[Literal["accuracy", "brier", "ece_ew"]] = Field(
        default_factory=lambda: ["accuracy", "brier", "ece_ew"])
    ci: float = Field(0.95, gt=0.0, lt=1.0)


class _Common(Strict):
    name: RunName = "aggregate"
    seed: int = 0
    protocol: Literal["strict", "general"] = "strict"
    on_violation: Literal["error", "skip"] = "error"
    methods: list[str] = Field(default_factory=lambda: list(DEFAULT_METHODS))
    outer_folds: int = Field(5, ge=2)
    inner_folds: int = Field(5, ge=2)
    grids: GridsConfig = Field(default_factory=GridsConfig)

    @field_validator("methods")
    @classmethod
    def _methods(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("at least one method")
        for m in v:
            check_method(m)
        if len(set(v)) != len(v):
            raise ValueError(f"duplicate methods in {v}")
        return v


class RunConfig(_Common):
    """``chorus aggregate run``: traces (a file, or a synthetic council) -> nested CV of every
    method -> metrics, bootstrap, tables, plots and one results file."""

    traces: str | None = None
    synthetic: SyntheticConfig | None = None
    # arms to add leak-free isotonic recalibration of (as "<arm>+iso"); default: plurality and
    # bda_per_agent where they are among the methods
    recalibrate: list[str] | None = None
    label_budget: int | None = Field(None, ge=4)
    truncate_round: int | None = Field(None, ge=0)
    permute_labels: bool = False
    bootstrap: BootstrapConfig = Field(default_factory=BootstrapConfig)

    @model_validator(mode="after")
    def _source(self):
        if (self.traces is None) == (self.synthetic is None):
            raise ValueError("give exactly one of 'traces' (a JSONL file) or 'synthetic'")
        for m in self.recalibrate or []:
            check_method(m)
            if m not in self.methods:
                raise ValueError(f"recalibrate names {m!r}, which is not in methods")
        names = self.all_methods()
        if self.bootstrap.reference not in names:
            raise ValueError(f"bootstrap.reference {self.bootstrap.reference!r} is not a method of this run")
        for a, b in self.bootstrap.pairs or []:
            for m in (a, b):
                if m not in names:
                    raise ValueError(f"bootstrap pair names {m!r}, not a method of this run")
        return self

    def recalibrated(self) -> list[str]:
        if self.recalibrate is None:
            return [m for m in ("plurality", "bda_per_agent") if m in self.methods]
        return list(self.recalibrate)

    def all_methods(self) -> list[str]:
        return list(self.methods) + [f"{m}+iso" for m in self.recalibrated()]

    def traces_path(self, base: Path | None) -> Path:
        p = Path(self.traces)  # type: ignore[arg-type]
        if not p.is_absolute() and not p.exists() and base is not None and (base / p).exists():
            return base / p
        return p


class SweepConfig(_Common):
    """``chorus aggregate sweep``: the dose-response grid or the sleeper axis, over a synthetic
    council or over a real trace file (``traces``: the adversary corrupts its moves,
    ``chorus.aggregate.corrupt``); give one of ``traces`` and ``synthetic`` (default: synthetic)."""

    kind: Literal["dose_response", "sleeper"] = "dose_response"
    traces: str | None = None
    synthetic: SyntheticConfig | None = None
    methods: list[str] = Field(default_factory=lambda: ["plurality", "bda_shared", "bda_per_agent",
                                                        "bda_confusion"])
    # dose-response
    regimes: list[Literal["persistent", "rotating"]] = Field(
        default_factory=lambda: ["persistent", "rotating"])
    ks: list[int] = Field(default_factory=lambda: [1, 2])
    p_wrong: list[float] = Field(default_factory=lambda: [round(0.1 * i, 1) for i in range(11)])
    # sleeper
    f: list[float] = Field(default_factory=lambda: [round(0.1 * i, 1) for i in range(11)])
    n_calibration: int = Field(500, ge=10)
    n_deploy: int = Field(1500, ge=10)
    adversary: AdversaryConfig = Field(default_factory=lambda: AdversaryConfig(kind="persistent", k=2, p_wrong=1.0))

    @model_validator(mode="after")
    def _grids(self):
        if self.traces is not None and self.synthetic is not None:
            raise ValueError("give either 'traces' (a council trace file) or 'synthetic', not both")
        if self.traces is None and self.synthetic is None:
            self.synthetic = SyntheticConfig()
        for p in self.p_wrong + self.f:
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"p_wrong / f values must lie in [0, 1], got {p}")
        # a trace file's seat count is checked when it is read (chorus.aggregate.corrupt)
        seats = None if self.synthetic is None else len(self.synthetic.reliabilities)
        for k in self.ks + ([self.adversary.k] if self.kind == "sleeper" else []):
            if k < 0 or (seats is not None and k > seats):
                raise ValueError(f"adversary k={k} exceeds the {seats} seats of the synthetic council")
        return self

    def traces_path(self, base: Path | None) -> Path:
        p = Path(self.traces)  # type: ignore[arg-type]
        if not p.is_absolute() and not p.exists() and base is not None and (base / p).exists():
            return base / p
        return p


def _load(config: str | Path, model, overrides: dict | None):
    """A config (a path, or a shipped name in ``aggregate/configs/``) with ``--set`` overrides; a
    ``traces`` override (``--traces``) replaces the config's synthetic council."""
    path = resolve_config(config, CONFIGS_DIR)
    data = load_yaml(path)
    over = dict(overrides or {})
    if over.get("traces") is not None:
        data.pop("synthetic", None)
    for k, v in over.items():
        set_dotted(data, k, v)
    return validate(model, data, source=str(path)), path


def load_run_config(config: str | Path, overrides: dict | None = None) -> "RunConfig":
    """``chorus aggregate run``'s config (a relative ``traces`` path is read from the working
    directory, else from the config's folder: ``RunConfig.traces_path``)."""
    return _load(config, RunConfig, overrides)[0]


def load_sweep_config(config: str | Path, overrides: dict | None = None) -> "SweepConfig":
    """``chorus aggregate sweep``'s config; a relative ``traces`` path is made absolute (from the
    working directory, else the config's folder), as the sweep records it."""
    cfg, path = _load(config, SweepConfig, overrides)
    if cfg.traces is not None:
        cfg = cfg.model_copy(update={"traces": str(cfg.traces_path(path.parent).resolve())})
    return cfg


def config_path(config: str | Path) -> Path:
    """The file a config name or path resolves to."""
    return resolve_config(config, CONFIGS_DIR)
