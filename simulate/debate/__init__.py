"""Multi-agent debate vs matched reflection (the peer-influence paper): the question set,
protocols, answer parsing and collective-outcome metrics. Stable entry points: ``parse_answer``
and ``effective_voters``. Pure modules (parse, metrics, questions, prompts) import no model code."""
from simulate.debate.metrics import effective_voters
from simulate.debate.parse import parse_answer

__all__ = ["parse_answer", "effective_voters"]
