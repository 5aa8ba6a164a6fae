"""The one place engines are built: from a role's ``ModelSpec`` (``chorus.serving.spec``) and the run's
call store. Every part asks here (``build_engine`` for one role, ``build_engines`` for several);
a scan test fails on a ``load_engine`` call anywhere else, so options, dtype and store handling
cannot drift apart between parts.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from chorus.core.config import ConfigError
from chorus.serving.engine import Engine, check_options, default_dtype, load_engine, resolve_backend
from chorus.serving.plan import DevicePlan, Need, engine_options, needs_gib, plan_devices
from chorus.serving.profiles import ModelError, get_profile
from chorus.serving.spec import ModelSpec, check_engines, spec_of
from chorus.serving.store import CallStore


def build_engine(spec: ModelSpec | str | Mapping | None, *, store: str | Path | CallStore | None = None,
                 role: str = "model", plan: "DevicePlan | None" = None, **extra: Any) -> Engine:
    """The engine for one role. ``store``: the run's call store, unless the spec names its own;
    ``plan``: the experiment's device plan (its vLLM share for this engine); ``extra``: options the
    caller owns. The user's own options win over both."""
    spec = spec_of(spec, role)
    kw = {**_plan_options(plan, spec), **extra, **spec.load_kwargs()}
    try:
        return load_engine(spec.profile, spec.backend, store=spec.store or store, **kw)
    except ModelError as err:
        raise ModelError(f"{role}: {err}") from None


def plan_roles(specs: Mapping[str, ModelSpec | str], *, device_gib: float | None | str = "detect",
               n_devices: int = 1, phase_of: Callable[[str], str] | None = None) -> DevicePlan:
    """The device plan for every role an experiment declares, before any engine loads: sizes from
    the profiles' safetensors headers (on a CUDA device; a CPU plan needs none), backends and
    dtypes resolved as ``load_engine`` will. ``phase_of(role)``: roles of different phases are
    never held together (default: one phase)."""
    if device_gib == "detect":
        from chorus.serving.memory import device_gib as detect

        device_gib = detect()
    needs = []
    by_phase: dict[str, dict[str, ModelSpec]] = {}
    for role, value in specs.items():   # roles held together on one engine must agree on its settings
        by_phase.setdefault(phase_of(role) if phase_of else "main", {})[role] = spec_of(value, role)
    for group in by_phase.values():
        check_engines(group, same=_resolved)
    for role, value in specs.items():
        spec = spec_of(value, role)
        try:   # an unknown profile or a missing folder fails here, before any run directory exists
            prof = get_profile(spec.profile)
        except ModelError as err:
            raise ModelError(f"{role}: {err}") from None
        backend = resolve_backend(spec.backend)
        check_options(backend, spec.options, f"{role}: options")   # a misspelt option, before any directory
        if backend in ("hf", "vllm"):   # weights loaded here must be on disk now
            ready, why = prof.status()
            if not ready:
                raise ModelError(f"{role}: model profile '{prof.name}' is not ready: {why}")
        dtype = spec.dtype or default_dtype()
        size = 0.0 if backend == "openai" else _size(spec.profile, dtype, required=device_gib is not None)
        needs.append(Need(role, spec.profile, backend, dtype, size, tp=spec.tensor_parallel_size,
                          phase=phase_of(role) if phase_of else "main"))
    return plan_devices(needs, device_gib, n_devices=n_devices)


def context_ceiling(spec: ModelSpec | str) -> int | None:
    """The most tokens (prompt and reply together) the role's model can ever hold, read from its
    config.json (``max_position_embeddings``, or the text model's in a multimodal config) and a
    ``max_model_len`` option; None where the folder does not say. The window an engine opens is at
    most this (a vLLM engine on a CPU may open less)."""
    import json

    spec = spec_of(spec, "model")
    try:
        cfg = json.loads((get_profile(spec.profile).path / "config.json").read_text())
    except (ModelError, OSError, ValueError):
        return None
    if not isinstance(cfg, dict):
        return None
    cfg = cfg if "max_position_embeddings" in cfg else (cfg.get("text_config") or {})
    lens = [v for v in (cfg.get("max_position_embeddings"), spec.options.get("max_model_len")) if isinstance(v, int) and v > 0]
    return min(lens) if lens else None


def check_new_tokens(specs: Mapping[str, ModelSpec | str], max_tokens: int, field: str) -> None:
    """``max_tokens`` new tokens (the config's ``field``) must leave room for a prompt in every role's
    context window: one that cannot is a config error before any model loads (else every request
    would be excluded as too long, and a run of nothing would follow)."""
    for role, value in specs.items():
        spec = spec_of(value, role)
        ceiling = context_ceiling(spec)
        if ceiling is not None and max_tokens >= ceiling:
            raise ConfigError(f"{field} = {max_tokens}: the model of role {role!r} ({spec.profile}) holds at most "
                              f"{ceiling} tokens, prompt and reply together, so no prompt would fit; lower {field}")


def _resolved(spec: ModelSpec) -> tuple:
    """What makes two roles one engine once 'auto' and the default dtype are resolved."""
    return spec.profile, resolve_backend(spec.backend), spec.dtype or default_dtype()


def _size(profile: str, dtype: str, *, required: bool) -> float:
    """Weights GiB; on CPU (``required`` False) only for the record: an unsized profile is left to
    ``load_engine``'s own message when it loads."""
    try:
        return needs_gib(profile, dtype)
    except Exception:
        if required:
            raise
        return 0.0


def _plan_options(plan: DevicePlan | None, spec: ModelSpec) -> dict[str, Any]:
    if plan is None:
        return {}
    return engine_options(plan, spec.profile, resolve_backend(spec.backend), spec.dtype or default_dtype())


def build_engines(specs: Mapping[str, ModelSpec | str], *, store: str | Path | CallStore | None = None,
                  plan: DevicePlan | None = None, **extra: Any) -> dict[str, Engine]:
    """Engines for several roles, all held at once; roles whose specs are the same engine share
    one (one load, one device share). All share one CallStore unless a spec names its own.
    ``plan``: each engine starts with the plan's options (its vLLM share); the user's win."""
    check_engines({r: spec_of(v, r) for r, v in specs.items()}, same=_resolved)
    st = store if isinstance(store, CallStore) or store is None else CallStore(store)
    built: dict[tuple, Engine] = {}
    out: dict[str, Engine] = {}
    try:
        for role, value in specs.items():
            spec = spec_of(value, role)
            key = spec.engine_key() + (spec.store,)
            if key not in built:
                built[key] = build_engine(spec, store=st, role=role, plan=plan, **extra)
            out[role] = built[key]
    except BaseException:
        close_engines(built.values())
        raise
    return out


def close_engines(engines: Iterable[Any] | SwappedEngines) -> None:
    """Close each distinct engine once (roles may share one); a swapped set closes the one it holds."""
    if isinstance(engines, SwappedEngines):
        engines.close()
        return
    seen: set[int] = set()
    for e in engines:
        if id(e) not in seen and hasattr(e, "close"):
            seen.add(id(e))
            e.close()


class SwappedEngines(Mapping):
    """Engines held one at a time (a device plan's ``swap``): ``engines[key]`` is a handle that
    loads its engine when it is used, closing the one held before (its device memory given back).
    A caller may keep several handles; only the one in use is on the device. The call store makes
    the order of calls irrelevant to results; callers order their calls engine by engine so each
    loads once per round."""

    swapped = True

    def __init__(self, specs: Mapping[str, ModelSpec], *, store: str | Path | CallStore | None = None,
                 plan: DevicePlan | None = None, **extra: Any):
        self._specs = {k: spec_of(v, k) for k, v in specs.items()}
        self._store = store if isinstance(store, CallStore) or store is None else CallStore(store)
        self._plan, self._extra = plan, extra
        self._held: tuple[str, Engine] | None = None
        self._seen: dict[str, dict] = {}   # key -> provenance of its last load
        self.loads: list[str] = []         # the load order, for provenance and tests

    def acquire(self, key: str) -> Engine:
        if self._held is not None and self._held[0] == key:
            return self._held[1]
        self.release()
        spec = self._specs[key]
        opts = _plan_options(self._plan, spec)
        # a swapped-out engine is closed, not slept: sleep mode would only cost (vLLM allows one
        # sleep-enabled engine per process, and its allocator excludes expandable segments)
        opts.pop("enable_sleep_mode", None)
        eng = build_engine(spec, store=self._store, role=key, **{**opts, **self._extra})
        self._held = (key, eng)
        self.loads.append(key)
        return eng

    def release(self) -> None:
        if self._held is not None:
            key, eng = self._held
            self._held = None
            self._seen[key] = eng.provenance()
            eng.release()

    def close(self) -> None:
        self.release()
        if self._store is not None:
            self._store.close()

    def __getitem__(self, key: str) -> "_Handle":
        if key not in self._specs:
            raise KeyError(key)
        return _Handle(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def provenance(self) -> dict[str, Any]:
        held = {self._held[0]: self._held[1].provenance()} if self._held else {}
        return {"hold": "swap", "loads": list(self.loads), "engines": {**self._seen, **held}}


class _Handle:
    """Stands for one swapped engine: every attribute use acquires it first."""

    def __init__(self, owner: SwappedEngines, key: str):
        self._owner, self._key = owner, key

    def __getattr__(self, name: str) -> Any:
        return getattr(self._owner.acquire(self._key), name)

    def close(self) -> None:  # the owner closes; a caller's close of a handle is not a swap
        pass


def hold_engines(specs: Mapping[str, ModelSpec], *, store: str | Path | CallStore | None = None,
                 hold: str = "auto", plan: DevicePlan | None = None, **extra: Any) -> Mapping[str, Any]:
    """Engines for ``specs`` as the plan says: all at once (a dict), or one at a time
    (``SwappedEngines``) when the plan swaps or ``hold='swap'``."""
    swap = hold == "swap" or (hold == "auto" and plan is not None and plan.mode == "swap")
    if swap:
        return SwappedEngines(specs, store=store, plan=plan, **extra)
    return build_engines(specs, store=store, plan=plan, **extra)
