"""Multi-agent debate vs matched reflection (the peer-influence paper): the question set,
protocols, answer parsing and collective-outcome metrics. Stable entry points: ``parse_answer``
and ``effective_voters``. Pure modules (parse, metrics, questions, prompts) import no model code."""
from chorus.core.lazy import lazy_getattr

# a lazy package (PEP 562, as ``aggregate``): ``chorus --help`` mounts chorus.simulate.debate.cli without pandas
_EXPORTS = {"parse_answer": "parse", "effective_voters": "metrics"}
__all__ = list(_EXPORTS)


__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())
