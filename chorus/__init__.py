"""chorus: self-hosted LLM agents that debate, simulate opinions and deliberate.

This package is the application on top of the parts: the ``chorus`` CLI (``cli``), the demo
(``demo`` running the stages of ``stages``) and the HTML report (``report``). The parts live
beside it: ``core`` (the shared base), ``serving`` (engines, model profiles, call store),
``simulate`` (belief layer, debates, councils, role-play), ``aggregate`` (BDA over council
traces) and ``interventions`` (readouts, ablations, knockout, patching, probes).
"""

from core import __version__  # one version, kept in the base

__all__ = ["__version__"]
