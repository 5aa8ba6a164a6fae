"""Multi-agent debate vs matched reflection (the peer-influence paper): the question set,
protocols, answer parsing and collective-outcome metrics. Stable entry points: ``parse_answer``
and ``effective_voters``. Pure modules (parse, metrics, questions, prompts) import no model code."""
import importlib
from typing import Any

# a lazy package (PEP 562, as ``aggregate``): ``chorus --help`` mounts simulate.debate.cli without pandas
_EXPORTS = {"parse_answer": "parse", "effective_voters": "metrics"}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'simulate.debate' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"simulate.debate.{mod}"), name)
    globals()[name] = value
    return value
