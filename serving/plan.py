"""One device plan over every engine an experiment declares, decided from sizes before anything loads.

This is chorus's only device sizing rule. An experiment holds council seats of different models, a
synthesizer, a judge, a classifier, a trainer and the engines that compare its result; the demo's
pool holds one model on vLLM and on transformers at once (``chorus.serving.engine.engine_pool``).
``plan_devices`` takes one ``Need`` per role and decides, per phase (engines of different phases are
never held at the same time):

- ``cpu``: no CUDA device; nothing is split, everything is held at once (host memory is the limit);
- ``share``: every engine of the phase fits at once; each vLLM engine gets its own
  ``gpu_memory_utilization`` (vLLM's per-instance fraction of the whole device) so that they and the
  transformers / trainer needs held beside them stay within ``max_utilization``;
- ``swap``: each engine fits alone but not all together: they are held one at a time in ``order``
  (vLLM with sleep mode, so a swapped-out engine can sleep instead of reloading). The consumer runs
  all calls of a round for one engine before loading the next. One profile on vLLM and transformers
  in one phase: the pool puts the vLLM engine to sleep while the transformers copy is loaded;
- ``serve``: an engine does not fit one device even alone, but fits split over ``n_devices`` with
  tensor parallelism: it is to run as its own ``chorus serve`` and be used with backend openai.

An engine that fits nowhere raises one ``DevicePlanError`` line naming the roles, sizes and device.
Sizes are GiB per device: a vLLM engine with tensor parallelism ``tp`` holds weights/tp on each of
its devices; the other needs are counted on the same device (an upper bound)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping, Sequence

from chorus.core.config import bad_input
from chorus.serving import backends
from chorus.serving.backends import BackendTraits
from chorus.serving.memory import BYTES, MemoryPlanError, weights_gib
from chorus.serving.profiles import Profile, get_profile


class Trainer(BackendTraits):
    """A plan's need that is no backend: a fine-tuning run's model, its need given (``Need.need_gib``)."""
    name = "trainer"


#: the needs a plan takes: every backend of the table, and a trainer
KINDS: dict[str, type] = {"trainer": Trainer}
BACKENDS = (*backends.BACKENDS, *KINDS)


def _kind(backend: str) -> type:
    """The traits of a need's backend (the class behind the name; a trainer's own)."""
    return KINDS.get(backend) or backends.backend_class(backend)


def _is(backend: str, trait: str) -> bool:
    return backends.trait(_kind(backend), trait)
_RANK = {"cpu": 0, "share": 1, "swap": 2, "serve": 3}   # the overall mode is the worst phase's


@bad_input
class DevicePlanError(RuntimeError):
    """The engines of an experiment cannot fit the device(s): one line naming roles, sizes, device."""


@dataclass(frozen=True)
class Need:
    """One engine an experiment will hold (one role of it)."""
    role: str
    profile: str
    backend: str                    # "vllm" | "hf" | "openai" | "trainer"
    dtype: str                      # float32 | bfloat16 | float16
    weights_gib: float              # one copy of the weights in that dtype (0 for openai)
    tp: int = 1                     # tensor parallel size (vLLM)
    phase: str = "main"             # engines of different phases are never needed at the same time
    need_gib: float | None = None   # explicit total need (the trainer's sft_memory estimate); else derived

    @property
    def key(self) -> tuple[str, str, str, int]:
        """Needs with one key are one engine (several seats of one profile, a judge that is a seat)."""
        return self.profile, self.backend, self.dtype, self.tp


@dataclass(frozen=True)
class EnginePlan:
    roles: tuple[str, ...]          # every role this one engine serves
    profile: str
    backend: str
    dtype: str
    tp: int
    weights_gib: float
    need_gib: float                 # the least it must hold per device (vLLM: weights/tp + overhead + min KV)
    gpu_memory_utilization: float | None = None   # vLLM on a GPU: fraction of the whole device
    kv_gib: float | None = None     # what that utilization leaves vLLM for KV cache, per device
    sleep: bool = False             # swapped vLLM engine: start it with sleep mode
    resident: bool = False          # held through the whole phase (swap phases)
    serve: str | None = None        # mode "serve": the command that holds it instead

    @property
    def name(self) -> str:
        return f"{self.profile}/{self.backend}/{self.dtype}" + (f"/tp{self.tp}" if self.tp > 1 else "")


@dataclass(frozen=True)
class PhasePlan:
    name: str
    mode: str                       # cpu | share | swap | serve
    engines: tuple[EnginePlan, ...]  # in hold order
    order: tuple[str, ...]          # engine names in the order they are held (swap: one at a time)
    reason: str


@dataclass(frozen=True)
class DevicePlan:
    mode: str                       # the worst of the phases' modes
    device_gib: float | None
    n_devices: int
    max_utilization: float
    phases: tuple[PhasePlan, ...]   # in the order the needs declare them
    reason: str
    # role -> its chorus.serving.roles.Role, resolved once by plan_roles for building (not in to_dict)
    roles: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def phase(self, name: str) -> PhasePlan:
        return next(p for p in self.phases if p.name == name)

    def to_dict(self) -> dict:
        """JSON-able, for provenance."""
        d = asdict(replace(self, roles={}))
        del d["roles"]
        for p, pd in zip(self.phases, d["phases"]):
            for e, ed in zip(p.engines, pd["engines"]):
                ed["name"] = e.name
        return d


def needs_gib(profile: str, dtype: str) -> float:
    """One copy of ``profile``'s weights in ``dtype``, GiB, from its local folder's safetensors headers."""
    return profile_gib(get_profile(profile), dtype, profile)


def profile_gib(prof: Profile, dtype: str, profile: str) -> float:
    """``needs_gib`` of a profile already looked up (``profile``: the name it was asked by, for messages)."""
    path = prof.path
    if str(path) in ("", ".") or not path.is_dir():
        raise DevicePlanError(f"cannot size profile '{profile}': its model folder is missing ({path or 'no path set'})")
    try:
        return weights_gib(path, dtype)
    except MemoryPlanError as err:
        raise DevicePlanError(f"cannot size profile '{profile}' at {path}: {err}") from err


def plan_devices(needs: Sequence[Need], device_gib: float | None, *, n_devices: int = 1,
                 max_utilization: float = 0.9, min_kv_gib: float = 2.0, vllm_overhead_gib: float = 1.5,
                 hf_overhead_frac: float = 0.2, hf_overhead_gib: float = 1.0,
                 resident: Sequence[str] = ()) -> DevicePlan:
    """Plan every engine of ``needs`` on ``n_devices`` devices of ``device_gib`` GiB (None: no CUDA).

    vLLM needs weights/tp + ``vllm_overhead_gib`` + at least ``min_kv_gib``; transformers weights plus
    activations (``hf_overhead_frac`` of them + ``hf_overhead_gib``, for forward passes with hooks); a trainer
    its ``need_gib``. ``resident``: roles whose engine must stay loaded through a swap phase (the
    swapped engines then get ``max_utilization`` minus what those hold)."""
    if device_gib is not None and device_gib <= 0 or n_devices < 1 or not 0 < max_utilization <= 1:
        raise DevicePlanError(f"need a device size > 0, n_devices >= 1 and 0 < max_utilization <= 1 "
                              f"(got {device_gib}, {n_devices}, {max_utilization})")
    groups: dict[str, dict[tuple, list[Need]]] = {}   # phase -> engine key -> its needs, in declared order
    for n in needs:
        _check(n, n_devices if device_gib is not None else None)
        groups.setdefault(n.phase, {}).setdefault(n.key, []).append(n)
    kw = dict(min_kv=min_kv_gib, overhead=vllm_overhead_gib, frac=hf_overhead_frac, hf_gib=hf_overhead_gib)
    phases = []
    for name, engines in groups.items():
        base = [_engine(ns, **kw) for ns in engines.values()]
        if device_gib is None:
            phases.append(PhasePlan(name, "cpu", tuple(base), tuple(e.name for e in base),
                                    f"{name}: no CUDA device, all {len(base)} engines held at once"))
        else:
            phases.append(_plan_phase(name, base, device_gib, n_devices, max_utilization, set(resident), **kw))
    mode = max((p.mode for p in phases), key=_RANK.__getitem__, default="cpu" if device_gib is None else "share")
    dev = "no CUDA device" if device_gib is None else (f"{n_devices} x " if n_devices > 1 else "") + f"{device_gib:.1f} GiB"
    return DevicePlan(mode, device_gib, n_devices, max_utilization, tuple(phases),
                      f"{mode} on {dev}: " + "; ".join(p.reason for p in phases))


def engine_options(plan: DevicePlan, profile: str, backend: str, dtype: str, *, phase: str | None = None) -> dict:
    """The options a consumer passes to ``load_engine`` for this engine (merged with ``setdefault``, so
    the user's own options win). An engine in several phases gets the most cautious of its plans; one
    the plan says to serve raises the instruction instead of loading (it would not fit)."""
    found = [e for p in plan.phases if phase in (None, p.name) for e in p.engines
             if (e.profile, e.backend, e.dtype) == (profile, backend, dtype)]
    served = [e.serve for e in found if e.serve]
    if served:
        raise DevicePlanError(served[0])
    opts: dict = {}
    utils = [e.gpu_memory_utilization for e in found if e.gpu_memory_utilization is not None]
    if _is(backend, "device_share") and utils:
        opts["gpu_memory_utilization"] = min(utils)
    if _is(backend, "device_share") and any(e.sleep for e in found):
        opts["enable_sleep_mode"] = True
    return opts


def _check(n: Need, n_devices: int | None) -> None:
    if n.backend not in BACKENDS:
        raise DevicePlanError(f"role '{n.role}': backend must be one of {', '.join(BACKENDS)}, got {n.backend!r}")
    if n.dtype not in BYTES:
        raise DevicePlanError(f"role '{n.role}': dtype must be one of {sorted(BYTES)}, got {n.dtype!r}")
    if n.tp < 1 or (n.tp > 1 and not _is(n.backend, "tensor_parallel")):
        raise DevicePlanError(f"role '{n.role}': tp={n.tp} (tensor parallelism is vLLM's, >= 1)")
    if n_devices is not None and _is(n.backend, "tensor_parallel") and n.tp > n_devices:
        raise DevicePlanError(f"role '{n.role}' ({n.profile}) asks tp={n.tp} but there are {n_devices} device(s)")
    if n.backend in KINDS and n.need_gib is None:
        raise DevicePlanError(f"role '{n.role}' ({n.profile}): a trainer needs need_gib (chorus.simulate.roleplay.sft_memory)")
    if n.weights_gib < 0 or (n_devices is not None and n.weights_gib == 0 and _is(n.backend, "local_weights")
                             and n.need_gib is None):  # on CPU nothing is split: a size is for the record
        raise DevicePlanError(f"role '{n.role}' ({n.profile}, {n.backend}): weights_gib must be > 0, got {n.weights_gib}")


def _min_need(backend: str, weights: float, tp: int, *, min_kv, overhead, frac, hf_gib) -> float:
    if not _is(backend, "local_weights"):
        return 0.0                                  # openai: held elsewhere
    if _is(backend, "device_share"):                # vLLM: its share holds the weights and a KV cache
        return weights / tp + overhead + min_kv
    return weights + weights * frac + hf_gib        # transformers: weights and activations


def _engine(ns: list[Need], **kw) -> EnginePlan:
    n = ns[0]
    w = max(x.weights_gib for x in ns)
    given = [x.need_gib for x in ns if x.need_gib is not None]
    need = 0.0 if not _is(n.backend, "local_weights") else max(given) if given else _min_need(n.backend, w, n.tp, **kw)
    roles = tuple(dict.fromkeys(x.role for x in ns))
    return EnginePlan(roles, n.profile, n.backend, n.dtype, n.tp, w, need)


def _label(e: EnginePlan) -> str:
    return f"{'+'.join(e.roles)} ({e.profile} {e.backend}, {e.need_gib:.1f} GiB)"


def _plan_phase(name: str, engines: list[EnginePlan], dev: float, n_devices: int, max_util: float,
                resident: set[str], *, min_kv, overhead, frac, hf_gib) -> PhasePlan:
    usable = dev * max_util
    served: dict[str, EnginePlan] = {}
    for e in engines:    # an engine that does not fit alone: split it over the devices, or give up
        if e.need_gib <= usable:
            continue
        tp = next((t for t in (2, 4, 8, 16, 32) if t <= n_devices
                   and _min_need(e.backend, e.weights_gib, t, min_kv=min_kv, overhead=overhead, frac=0, hf_gib=0) <= usable),
                  None) if _is(e.backend, "tensor_parallel") else None
        if tp is None:
            raise DevicePlanError(
                f"phase '{name}': role(s) {'+'.join(e.roles)} ({e.profile} on {e.backend}, {e.dtype}, weights "
                f"{e.weights_gib:.1f} GiB, needs >= {e.need_gib:.1f} GiB) do not fit even alone on "
                f"{n_devices} device(s) of {dev:.1f} GiB ({usable:.1f} usable at {max_util}): use a smaller dtype "
                f"or model" + ("" if not _is(e.backend, "tensor_parallel") else ", or more devices with tensor parallelism (-tp)"))
        served[e.name] = replace(e, need_gib=0.0, serve=(
            f"run `chorus serve {e.profile} -tp {tp} --dtype {e.dtype}` and point role(s) {', '.join(e.roles)} "
            f"at it with backend openai ({e.weights_gib:.1f} GiB does not fit one {dev:.1f} GiB device)"))
    held = [e for e in engines if e.name not in served and e.need_gib > 0]
    vllm = [e for e in held if _is(e.backend, "device_share")]   # each takes its own share of the device
    others = sum(e.need_gib for e in held if not _is(e.backend, "device_share"))
    total = sum(e.need_gib for e in held)
    planned: dict[str, EnginePlan] = {}
    if total <= usable:     # share: each vLLM engine gets min KV, the rest of KV in proportion to its weights
        base = {e.name: e.weights_gib / e.tp + overhead for e in vllm}
        spare = usable - others - sum(base.values()) - min_kv * len(vllm)
        wsum = sum(e.weights_gib / e.tp for e in vllm)
        left = usable - others
        for i, e in enumerate(vllm):   # the last engine takes the remainder: the sum is exactly usable
            share = left if i == len(vllm) - 1 else base[e.name] + min_kv + spare * (e.weights_gib / e.tp) / wsum
            left -= share
            planned[e.name] = _vllm(e, share / dev, dev, overhead)
        mode, why = "share", f"{len(held)} engine(s) need {total:.1f} GiB together, within {usable:.1f} usable of {dev:.1f} GiB"
        order = [e.name for e in engines]
    else:                   # swap: one at a time, beside what must stay resident
        keep = [e for e in held if set(e.roles) & resident]
        kept = sum(e.need_gib for e in keep)
        for e in held:
            if e in keep:
                if _is(e.backend, "device_share"):
                    planned[e.name] = _vllm(e, e.need_gib / dev, dev, overhead, resident=True)
                else:
                    planned[e.name] = replace(e, resident=True)
            elif kept + e.need_gib > usable:
                raise DevicePlanError(f"phase '{name}': {_label(e)} does not fit beside the resident "
                                      f"{', '.join(map(_label, keep))} within {usable:.1f} of {dev:.1f} GiB")
            elif _is(e.backend, "device_share"):
                planned[e.name] = _vllm(e, max_util - kept / dev, dev, overhead, sleep=True)
        mode = "swap"
        why = (f"{len(held)} engine(s) need {total:.1f} GiB together, more than {usable:.1f} usable of {dev:.1f} GiB: held one at a time"
               + (f" beside resident {', '.join(e.name for e in keep)} ({kept:.1f} GiB)" if keep else ""))
        order = [e.name for e in keep] + [e.name for e in engines if e not in keep]
    if served:
        mode, why = "serve", why + "; served apart: " + ", ".join(f"{e.name}" for e in served.values())
    plans = {e.name: served.get(e.name) or planned.get(e.name) or e for e in engines}
    return PhasePlan(name, mode, tuple(plans[n] for n in order), tuple(order),
                     f"{name}: {mode}: {why} ({', '.join(map(_label, engines))})")


def _vllm(e: EnginePlan, util: float, dev: float, overhead: float, *, sleep: bool = False,
          resident: bool = False) -> EnginePlan:
    util = round(util, 3)   # what vLLM is started with; the KV cache is what that leaves
    return replace(e, gpu_memory_utilization=util, kv_gib=dev * util - e.weights_gib / e.tp - overhead,
                   sleep=sleep, resident=resident)
