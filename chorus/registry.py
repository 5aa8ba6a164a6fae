"""Every registered verb (``chorus.core.verbs``), analysis and reader (``chorus.core.analyses``) of every part:
each part's CLI module registers its own when imported, and importing this module imports them all. The demo's stages and the
rehearsal's paths run the parts through it (``run_verb``), the same load and run as the commands."""
from __future__ import annotations

import chorus.aggregate.cli  # noqa: F401  (registers: aggregate run | sweep)
import chorus.interventions.cli  # noqa: F401  (influence readout | ablate | cues | knockout | ...)
import chorus.simulate.belief.cli  # noqa: F401  (belief run | sweep | multi | ...)
import chorus.simulate.council.cli  # noqa: F401  (council run)
import chorus.simulate.debate.cli  # noqa: F401  (debate run)
import chorus.simulate.roleplay.cli  # noqa: F401  (roleplay run, sft train)
import chorus.interventions.counterfactual  # noqa: F401  (reader: influence counterfactual)
import chorus.simulate.debate.bda  # noqa: F401  (reader: debate bda)
import chorus.simulate.debate.stubbornness  # noqa: F401  (reader: debate belief)
from chorus.core.analyses import ANALYSES, READERS, analyses, get_analysis
from chorus.core.verbs import REGISTRY, run_verb

__all__ = ["ANALYSES", "READERS", "REGISTRY", "analyses", "get_analysis", "run_verb"]
