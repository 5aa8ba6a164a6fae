"""The analyses of ``chorus roleplay`` over stored role-play runs: one module each, named as the module
it wraps (stats: ``across_runs.py``, probes: ``mechanism_probes.py``, annotators), an ``@analysis`` of
``chorus.core.analyses``. Importing this package imports every module in it,
so a new module here is a new command (``add_analyses`` mounts it)."""
from __future__ import annotations

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
