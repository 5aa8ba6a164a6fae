"""core: what every part of chorus stands on, importing none of them.

    chorus.core.config    typed YAML configs (one strict base, one loader, ``--set`` overrides)
    chorus.core.runs      the run directory (config, provenance, tables, plots, summary) and its default name
    chorus.core.seeding   one root seed spawning every generator
    chorus.core.stats     bootstrap (paired, clustered, ratio), ECE, Benjamini-Hochberg
    chorus.core.jsonl     JSONL reading with line numbers in every error
    chorus.core.progress  the progress convention ``progress(total, k)`` from the engine to the CLI's bar
    chorus.core.cliutil   the CLI's error exit and ``--set`` parsing
    chorus.core.plots     one way to make a matplotlib figure
    chorus.core.paper     the paper renderers' markdown cells, tables, figure copies and numbers-then-paper write

Layers import downward only: core <- serving <- simulate / aggregate <- interventions <- chorus
(the application: CLI, demo, report). ``tests/test_layering.py`` keeps it so.
"""

__version__ = "0.1.0"
