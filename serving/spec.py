"""What a model role is: one typed spec for the model and one for its sampling, used by every part.

An experiment names each model it uses by role (``model``; a council's seats, ``judge``,
``synthesizer``; role-play's models and ``classifier``; a transfer's ``sender``) and gives each a
``ModelSpec``. ``serving.roles`` turns specs into engines; nothing else calls ``load_engine``.
Learnt from inspect_ai's ``get_model(role=...)`` with ``model_roles``: one door to a model, the
role a name on it. (Sampling settings stay in each part's own ``generation`` block for now.)
"""
from __future__ import annotations

import warnings
from typing import Any, Literal, Optional, Sequence

from pydantic import Field, ValidationError, model_validator

from core.config import ConfigError, Strict, format_validation_error
from serving.profiles import DEFAULT_PROFILE

Backend = Literal["auto", "hf", "vllm", "openai"]
Dtype = Literal["float32", "bfloat16", "float16"]
BACKEND_CHOICES: tuple[str, ...] = Backend.__args__  # type: ignore[attr-defined]
DTYPE_CHOICES: tuple[str, ...] = Dtype.__args__  # type: ignore[attr-defined]


class ModelSpec(Strict):
    """One model role: which weights, on which backend, in which dtype, with which engine options."""
    profile: str = Field(DEFAULT_PROFILE, description="a profile name (`chorus models list`) or a local model folder")
    backend: Backend = Field("auto", description="auto: $CHORUS_BACKEND, else vllm when installed, else hf")
    dtype: Optional[Dtype] = Field(None, description="null: float32 on CPU, bfloat16 on a GPU")
    options: dict[str, Any] = Field(default_factory=dict, description="backend options passed through: hf "
                                    "(batch_size, attn_implementation, device), vllm (enforce_eager, "
                                    "gpu_memory_utilization, batch_invariant, ...)")
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs one vLLM engine spans")
    endpoints: list[str] = Field(default_factory=list, description="backend openai: the servers' base URLs")
    store: Optional[str] = Field(None, description="call store path (default: the run's calls.sqlite); share one "
                                 "to reuse calls")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        # `model: gemma3-270m` is the profile with every other field at its default
        if isinstance(data, str):
            return {"profile": data}
        if isinstance(data, dict) and isinstance(data.get("options"), dict):
            data = {**data, "options": dict(data["options"])}  # the old place of two fields: moved, warned
            for k in ("endpoints", "tensor_parallel_size"):
                if k in data["options"] and k not in data:
                    data[k] = data["options"].pop(k)
                    warnings.warn(f"options.{k} is the old place; write {k} in the model spec itself (the old "
                                  f"place goes in the next release)", FutureWarning, stacklevel=2)
        return data

    @model_validator(mode="after")
    def _consistent(self) -> "ModelSpec":
        if self.tensor_parallel_size > 1 and self.backend in ("hf", "openai"):
            raise ValueError(f"tensor_parallel_size = {self.tensor_parallel_size} is a vLLM setting; backend "
                             f"{self.backend!r} cannot use it")
        if self.endpoints and self.backend not in ("openai",):
            raise ValueError(f"endpoints {self.endpoints} need backend: openai (got {self.backend!r})")
        if "tensor_parallel_size" in self.options or "endpoints" in self.options:
            raise ValueError("tensor_parallel_size and endpoints are given twice: as fields and in options")
        return self

    def engine_key(self) -> tuple:
        """What makes two roles the same engine (the store is per run, not per engine)."""
        return (self.profile, self.backend, self.dtype, self.tensor_parallel_size, tuple(self.endpoints),
                repr(sorted(self.options.items())))

    def load_kwargs(self) -> dict[str, Any]:
        """``load_engine``'s keyword arguments for this spec (the store aside)."""
        kw: dict[str, Any] = dict(self.options)
        if self.dtype is not None:
            kw["dtype"] = self.dtype
        if self.tensor_parallel_size > 1:
            kw["tensor_parallel_size"] = self.tensor_parallel_size
        if self.endpoints:
            kw["endpoints"] = list(self.endpoints)
        return kw


def spec_of(value: "ModelSpec | str | dict | None", role: str = "model", **fallback: Any) -> ModelSpec:
    """A ModelSpec from a spec, a profile name, or a mapping; ``fallback`` fills fields left unset
    (e.g. a judge that runs on the part's backend). An invalid one is a ``ConfigError`` naming the
    role, the field and the value."""
    if isinstance(value, ModelSpec):
        data = {**{k: v for k, v in fallback.items() if k not in value.model_fields_set}}
        return value.model_copy(update=data) if data else value
    data = {} if value is None else {"profile": value} if isinstance(value, str) else dict(value)
    try:
        return ModelSpec(**{**fallback, **data})
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, f"model spec of role {role!r}")) from None


def fold_legacy(data: Any, keys: Sequence[str], into: str, where: str) -> Any:
    """Old config shapes, kept for one release: model settings written beside the role (``llm.backend``
    next to ``llm.model``) move into the role's spec, with one warning naming the new spelling."""
    if not isinstance(data, dict) or not any(k in data for k in keys):
        return data
    data = dict(data)
    spec = data.get(into)
    spec = {"profile": spec} if isinstance(spec, str) else dict(spec or {})
    moved = [k for k in keys if k in data]
    for k in moved:
        spec.setdefault(k, data.pop(k))
    data[into] = spec
    warnings.warn(f"{where}: {', '.join(f'{where}.{k}' for k in moved)} is the old shape; write "
                  f"{', '.join(f'{where}.{into}.{k}' for k in moved)} (the old keys go in the next release)",
                  FutureWarning, stacklevel=2)
    return data
