"""Inside the model: the knockout, residual-interchange, probe, transfer and concepts verbs over
debate contexts (``config``: their typed config, ``experiment``: the runner they share, run
directories and summaries, ``demo``: the demo's stage). Each verb's mechanics and pipeline live
one level up, side by side: ``interventions.knockout`` with ``interventions.knockout_pairs``,
``interventions.patching``, ``interventions.probes``, ``interventions.transfer``,
``interventions.concepts`` (and ``interventions.spans``)."""
