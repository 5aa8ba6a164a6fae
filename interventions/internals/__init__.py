"""Inside the model: the knockout, residual-interchange, probe, transfer and concepts verbs over
debate contexts (``config``: their typed config, ``experiment``: the runner they share, run
directories and summaries, ``demo``: the demo's stage). Each verb's mechanics and pipeline live
one level up, side by side: ``chorus.interventions.knockout`` with ``chorus.interventions.knockout_pairs``,
``chorus.interventions.patching``, ``chorus.interventions.probes``, ``chorus.interventions.state_transfer``,
``chorus.interventions.concepts`` (and ``chorus.interventions.spans``)."""
