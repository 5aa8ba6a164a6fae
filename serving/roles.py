"""The one place engines are built: from a role's ``ModelSpec`` (``chorus.serving.spec``) and the run's
call store. Every part asks here (``build_engine`` for one role, ``build_engines`` for several);
a scan test fails on a ``load_engine`` call anywhere else, so options, dtype and store handling
cannot drift apart between parts.

The model door is crossed once: ``plan_roles`` resolves every role (its spec, profile, backend,
dtype and size, and the plan's options for it) into a ``Role`` the plan carries (``plan.roles``);
building a planned role opens it (``chorus.serving.engine.open_engine``) without looking anything
up again. A role built without a plan is resolved when it is built, as ``load_engine`` would.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from chorus.core.config import ConfigError
from chorus.serving.backends import trait
from chorus.serving.engine import Engine, check_load, check_options, default_dtype, open_engine, resolve_backend
from chorus.serving.plan import DevicePlan, DevicePlanError, Need, engine_options, plan_devices, profile_gib
from chorus.serving.profiles import ModelError, Profile, get_profile
from chorus.serving.spec import ModelSpec, check_engines, spec_of
from chorus.serving.store import CallStore


@dataclass(frozen=True)
class Role:
    """One model role resolved once: what building its engine needs, nothing looked up again."""
    name: str
    spec: ModelSpec
    profile: Profile | None          # None: a role built without a plan looks it up when it opens
    backend: str                     # resolved ('auto' decided)
    dtype: str                       # resolved (the default dtype decided)
    size_gib: float = 0.0            # one copy of its weights in that dtype (0: held elsewhere, or unsized)
    options: dict[str, Any] = field(default_factory=dict)   # the device plan's options for its engine
    serve: str | None = None         # the plan says to serve it apart: opening it raises this instruction


def build_engine(spec: "ModelSpec | Role | str | Mapping | None", *, store: str | Path | CallStore | None = None,
                 role: str = "model", plan: "DevicePlan | None" = None, **extra: Any) -> Engine:
    """The engine for one role. ``spec``: its spec, or the ``Role`` planning resolved (``plan.roles``);
    ``store``: the run's call store, unless the spec names its own; ``plan``: the experiment's device
    plan (its vLLM share for this engine; a role it planned is not resolved again); ``extra``: options
    the caller owns. The user's own options win over both."""
    return _open(_role_of(spec, role, plan), store, extra)


def _role_of(value: "ModelSpec | Role | str | Mapping | None", name: str, plan: DevicePlan | None) -> Role:
    """The plan's resolved role when it planned this spec for ``name``; else the spec resolved now
    (backend, dtype and the plan's options; the profile when it opens)."""
    if isinstance(value, Role):
        return value
    spec = spec_of(value, name)
    planned = getattr(plan, "roles", None) or {}
    mine = planned.get(name)
    if mine is not None and (mine.spec is spec or mine.spec == spec):
        return mine
    same = next((r for r in planned.values() if r.spec == spec), None)   # planned under another role name
    if same is not None:   # (a council holds its engines by profile, plans them by seat)
        return replace(same, name=name)
    backend = resolve_backend(spec.backend)
    dtype = spec.dtype or default_dtype()
    return Role(name, spec, None, backend, dtype, **_plan_options(plan, spec.profile, backend, dtype))


def _plan_options(plan: DevicePlan | None, profile: str, backend: str, dtype: str) -> dict[str, Any]:
    if plan is None:
        return {}
    try:
        return {"options": engine_options(plan, profile, backend, dtype)}
    except DevicePlanError as err:   # the plan says serve it apart: said when it is built
        return {"serve": str(err)}


def _open(r: Role, store: str | Path | CallStore | None, extra: Mapping[str, Any]) -> Engine:
    """Open one resolved role: the plan's options, the caller's, then the user's own (which win)."""
    if r.serve:
        raise DevicePlanError(r.serve)
    kw = {**r.options, **extra, **r.spec.load_kwargs()}
    dtype, max_model_len = kw.pop("dtype", None), kw.pop("max_model_len", None)
    try:
        check_load(r.backend, dtype, kw)
        prof = r.profile if r.profile is not None else get_profile(r.spec.profile)
        return open_engine(prof, r.backend, store=r.spec.store or store, dtype=dtype or r.dtype,
                           max_model_len=max_model_len, **kw)
    except ModelError as err:
        raise ModelError(f"{r.name}: {err}") from None


def plan_roles(specs: Mapping[str, ModelSpec | str], *, device_gib: float | None | str = "detect",
               n_devices: int = 1, phase_of: Callable[[str], str] | None = None,
               new_tokens: Mapping[str, tuple[int, str]] | None = None) -> DevicePlan:
    """The device plan for every role an experiment declares, before any engine loads: sizes from
    the profiles' safetensors headers (on a CUDA device; a CPU plan needs none), backends and
    dtypes resolved as ``load_engine`` will. ``phase_of(role)``: roles of different phases are
    never held together (default: one phase). ``new_tokens``: role -> (max new tokens, the config
    field), checked as ``check_new_tokens`` does, first. Each role is resolved once, into the
    ``Role`` the plan carries (``plan.roles``) for building."""
    if device_gib == "detect":
        from chorus.serving.memory import device_gib as detect

        device_gib = detect()
    phase = {role: phase_of(role) if phase_of else "main" for role in specs}
    given = {role: spec_of(value, role) for role, value in specs.items()}
    profiles: dict[str, Profile | Exception] = {}

    def profile(name: str) -> Profile | Exception:
        if name not in profiles:
            try:
                profiles[name] = get_profile(name)
            except ModelError as err:
                profiles[name] = err
        return profiles[name]

    for role, (max_tokens, where) in (new_tokens or {}).items():
        got = profile(given[role].profile)
        _check_ceiling(role, given[role], got if isinstance(got, Profile) else None, max_tokens, where)
    backends: dict[str, str] = {}
    dtype0 = default_dtype()

    def resolved(spec: ModelSpec) -> tuple:   # what makes two roles one engine once 'auto' and the dtype are decided
        if spec.backend not in backends:
            backends[spec.backend] = resolve_backend(spec.backend)
        return spec.profile, backends[spec.backend], spec.dtype or dtype0

    by_phase: dict[str, dict[str, ModelSpec]] = {}
    for role, spec in given.items():   # roles held together on one engine must agree on its settings
        by_phase.setdefault(phase[role], {})[role] = spec
    for group in by_phase.values():
        check_engines(group, same=resolved)
    needs, roles = [], {}
    for role, spec in given.items():
        prof = profile(spec.profile)   # an unknown profile or a missing folder fails here, before any run directory exists
        if not isinstance(prof, Profile):
            raise ModelError(f"{role}: {prof}") from None
        _, backend, dtype = resolved(spec)
        check_options(backend, spec.options, f"{role}: options")   # a misspelt option, before any directory
        local = trait(backend, "local_weights")
        if local:   # weights loaded here must be on disk now
            ready, why = prof.status()
            if not ready:
                raise ModelError(f"{role}: model profile '{prof.name}' is not ready: {why}")
        size = _size(prof, spec.profile, dtype, required=device_gib is not None) if local else 0.0
        needs.append(Need(role, spec.profile, backend, dtype, size, tp=spec.tensor_parallel_size, phase=phase[role]))
        roles[role] = Role(role, spec, prof, backend, dtype, size)
    plan = plan_devices(needs, device_gib, n_devices=n_devices)
    return replace(plan, roles={k: replace(r, **_plan_options(plan, r.spec.profile, r.backend, r.dtype))
                                for k, r in roles.items()})


def context_ceiling(spec: ModelSpec | str) -> int | None:
    """The most tokens (prompt and reply together) the role's model can ever hold, read from its
    config.json (``max_position_embeddings``, or the text model's in a multimodal config) and a
    ``max_model_len`` option; None where the folder does not say. The window an engine opens is at
    most this (a vLLM engine on a CPU may open less)."""
    spec = spec_of(spec, "model")
    try:
        prof = get_profile(spec.profile)
    except ModelError:
        return None
    return _ceiling(spec, prof)


def _ceiling(spec: ModelSpec, prof: Profile | None) -> int | None:
    import json

    if prof is None:
        return None
    try:
        cfg = json.loads((prof.path / "config.json").read_text())
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
        try:
            prof = get_profile(spec.profile)
        except ModelError:
            prof = None
        _check_ceiling(role, spec, prof, max_tokens, field)


def _check_ceiling(role: str, spec: ModelSpec, prof: Profile | None, max_tokens: int, field: str) -> None:
    ceiling = _ceiling(spec, prof)
    if ceiling is not None and max_tokens >= ceiling:
        raise ConfigError(f"{field} = {max_tokens}: the model of role {role!r} ({spec.profile}) holds at most "
                          f"{ceiling} tokens, prompt and reply together, so no prompt would fit; lower {field}")


def _size(prof: Profile, profile: str, dtype: str, *, required: bool) -> float:
    """Weights GiB; on CPU (``required`` False) only for the record: an unsized profile is left to
    ``load_engine``'s own message when it loads."""
    try:
        return profile_gib(prof, dtype, profile)
    except Exception:
        if required:
            raise
        return 0.0


def build_engines(specs: Mapping[str, ModelSpec | str], *, store: str | Path | CallStore | None = None,
                  plan: DevicePlan | None = None, **extra: Any) -> dict[str, Engine]:
    """Engines for several roles, all held at once; roles whose specs are the same engine share
    one (one load, one device share). All share one CallStore unless a spec names its own.
    ``plan``: each engine starts with the plan's options (its vLLM share); the user's win."""
    roles = _roles_of(specs, plan)
    st = store if isinstance(store, CallStore) or store is None else CallStore(store)
    built: dict[tuple, Engine] = {}
    out: dict[str, Engine] = {}
    try:
        for name, r in roles.items():
            key = r.spec.engine_key() + (r.spec.store,)
            if key not in built:
                built[key] = _open(r, st, extra)
            out[name] = built[key]
    except BaseException:
        close_engines(built.values())
        raise
    return out


def _roles_of(specs: Mapping[str, Any], plan: DevicePlan | None) -> dict[str, Role]:
    """Each role resolved (the plan's, where it planned the spec); roles that would hold one engine
    must agree on its settings (a ``ConfigError`` naming both)."""
    roles = {name: _role_of(value, name, plan) for name, value in specs.items()}
    keys = {id(r.spec): (r.spec.profile, r.backend, r.dtype) for r in roles.values()}
    check_engines({name: r.spec for name, r in roles.items()}, same=lambda s: keys[id(s)])
    return roles


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
        self._roles = _roles_of(specs, plan)
        self._store = store if isinstance(store, CallStore) or store is None else CallStore(store)
        self._plan, self._extra = plan, extra
        self._held: tuple[str, Engine] | None = None
        self._seen: dict[str, dict] = {}   # key -> provenance of its last load
        self.loads: list[str] = []         # the load order, for provenance and tests

    def acquire(self, key: str) -> Engine:
        if self._held is not None and self._held[0] == key:
            return self._held[1]
        self.release()
        r = self._roles[key]
        # a swapped-out engine is closed, not slept: sleep mode would only cost (vLLM allows one
        # sleep-enabled engine per process, and its allocator excludes expandable segments)
        opts = {k: v for k, v in r.options.items() if k != "enable_sleep_mode"}
        eng = _open(replace(r, options=opts), self._store, self._extra)
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
        if key not in self._roles:
            raise KeyError(key)
        return _Handle(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._roles)

    def __len__(self) -> int:
        return len(self._roles)

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
