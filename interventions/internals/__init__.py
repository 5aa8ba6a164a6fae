"""Inside the model: the knockout, residual-interchange and probe experiments over debate contexts
(``config``: their typed config, ``experiment``: run directories and summaries, ``demo``: the
demo's stage). The mechanisms they use live one level up: ``interventions.knockout``,
``interventions.patching``, ``interventions.probes``, ``interventions.spans``."""
