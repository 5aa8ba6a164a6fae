"""What a model role is: one typed spec for the model and one for its sampling, used by every part.

An experiment names each model it uses by role (``model``; a council's seats, ``judge``,
``synthesizer``; role-play's models and ``classifier``; a transfer's ``sender``) and gives each a
``ModelSpec``. ``chorus.serving.roles`` turns specs into engines; nothing else calls ``load_engine``.
Learnt from inspect_ai's ``get_model(role=...)`` with ``model_roles``: one door to a model, the
role a name on it.

Sampling is ``Sampling`` (temperature, top-p, max tokens), learnt from inspect_ai's one
``GenerateConfig``: each part's ``generation`` block is a ``Sampling`` with the part's own
defaults and fields (a council's ``max_chars``, role-play's ``max_utterances``); the field types
below carry each setting's bounds and meaning, written once. Seeds are not a sampling setting:
every call's seed derives from the run's ``seed`` (``core.seeds``), so a rerun draws the same.
There is no ``stop``: every part parses whole replies (structured or to the end), and a stop
string would cut them where no part could tell.
"""
from __future__ import annotations

import warnings
from typing import Annotated, Any, Literal, Optional, Sequence

from pydantic import Field, ValidationError, model_validator

from chorus.core.config import ConfigError, Strict, format_validation_error
from chorus.serving.backends import BACKENDS, BackendTraits, backend_class
from chorus.serving.profiles import DEFAULT_PROFILE

Backend = Literal[("auto", *BACKENDS)]  # type: ignore[valid-type]  # the names of serving.backends.BACKENDS
Dtype = Literal["float32", "bfloat16", "float16"]
BACKEND_CHOICES: tuple[str, ...] = Backend.__args__  # type: ignore[attr-defined]
DTYPE_CHOICES: tuple[str, ...] = Dtype.__args__  # type: ignore[attr-defined]

# the sampling settings, each documented once; parts reuse the types with their own defaults.
# 2.0 is the ceiling vLLM's OpenAI server and the OpenAI API accept; above it text is noise.
Temperature = Annotated[float, Field(ge=0.0, le=2.0, description="0 = greedy (cached, reproducible); "
                                     "above 0 sampled with the call's derived seed; at most 2")]
TopP = Annotated[float, Field(gt=0.0, le=1.0, description="nucleus sampling: the probability mass kept (1 = all)")]
MaxTokens = Annotated[int, Field(ge=1, description="cap on new tokens per call (prompt + cap must fit the "
                                 "model's context; chorus never truncates silently)")]


class Sampling(Strict):
    """How a role samples: every part's ``generation`` block is this, with its own defaults."""
    temperature: Temperature = 0.7
    top_p: TopP = 1.0
    max_tokens: MaxTokens = 256

    def chat_kwargs(self) -> dict[str, Any]:
        """``Engine.chat``'s sampling keywords."""
        return {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens}


class ModelSpec(Strict):
    """One model role: which weights, on which backend, in which dtype, with which engine options."""
    profile: str = Field(DEFAULT_PROFILE, description="a profile name (`chorus models list`), a local model "
                         "folder, or a hub id ORG/NAME[@REVISION] in the local Hugging Face cache")
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
        if (self.tensor_parallel_size or 1) > 1 and not _takes(self.backend, "tensor_parallel_size"):
            raise ValueError(f"tensor_parallel_size = {self.tensor_parallel_size} is a vLLM setting; backend "
                             f"{self.backend!r} cannot use it")
        if self.endpoints and self.backend is not None and not _takes(self.backend, "endpoints", auto=False):
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


def _takes(backend: str | None, option: str, auto: bool = True) -> bool:
    """Whether ``backend`` takes ``option`` (a field that is some backends' option); 'auto' and a
    shared setting (None) as ``auto`` says."""
    if backend in ("auto", None):
        return auto
    return option in BackendTraits.options.__func__(backend_class(backend))


class RoleSpec(ModelSpec):
    """A role inside a part whose roles share engine settings (a council's ``models`` block, a
    transfer's receiver): a field left null or empty comes from those settings, so a stored
    config.yaml reloads to the same engines."""
    backend: Optional[Backend] = Field(None, description="null: the shared setting")
    tensor_parallel_size: Optional[int] = Field(None, ge=1, description="null: the shared setting")

    def over(self, shared: "dict[str, Any]", role: str) -> ModelSpec:
        """The role's full spec: its own non-null fields over ``shared`` (options merged key by key)."""
        own = {k: v for k, v in self.model_dump(include=set(ModelSpec.model_fields)).items()
               if v is not None and v != [] and v != {}}
        opts = {**(shared.get("options") or {}), **self.options}
        return spec_of({**shared, **own, "options": opts}, role)


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


def engine_conflict(a: tuple[str, ModelSpec], b: tuple[str, ModelSpec]) -> str | None:
    """One line naming two roles that would hold one engine with different settings (None when
    they agree): the fields that differ, with both values."""
    (ra, sa), (rb, sb) = a, b
    fields = ("backend", "dtype", "tensor_parallel_size", "endpoints", "options")
    diff = [f"{f} {getattr(sa, f)!r} vs {getattr(sb, f)!r}" for f in fields if getattr(sa, f) != getattr(sb, f)]
    if not diff:
        return None
    return (f"roles {ra!r} and {rb!r} would hold one engine of {sa.profile!r} with different settings "
            f"({'; '.join(diff)}): give both the same settings")


def check_engines(specs: "dict[str, ModelSpec]", same: "Any" = None) -> None:
    """Roles whose ``same(spec)`` keys are equal share one engine, so their settings must agree;
    else one ``ConfigError`` naming both roles. ``same`` defaults to (profile, backend, dtype) as
    given; a caller that resolves 'auto' passes its own."""
    same = same or (lambda s: (s.profile, s.backend, s.dtype))
    first: dict[Any, tuple[str, ModelSpec]] = {}
    for role, spec in specs.items():
        prev = first.setdefault(same(spec), (role, spec))
        msg = engine_conflict(prev, (role, spec)) if prev[0] != role else None
        if msg:
            raise ConfigError(msg)
