"""chorus: self-hosted LLM agents that debate, simulate opinions and deliberate.

The importable parts live beside this package: ``serving`` (engines, model profiles, call
store), ``simulate`` (belief layer, debates, councils, role-play), ``interventions``
(readouts, knockout, patching, probes) and ``aggregate`` (BDA over council traces). This
package holds what they share: the CLI, typed config loading and the run directory.
"""

__version__ = "0.1.0"
