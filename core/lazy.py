"""Lazy packages (PEP 562): a package lists its public names and the submodule defining each in a
module-level ``_EXPORTS`` literal (``tests/test_layering.py`` reads it to follow the imports) and
takes its ``__getattr__`` from here, so importing the package imports none of its submodules until
a name is used (``chorus --help`` mounts part CLIs without numpy or pandas)."""
from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_getattr(package: str, exports: dict[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """The package's ``__getattr__``: ``name`` from ``package.<exports[name]>``, cached in ``namespace``."""
    def __getattr__(name: str) -> Any:
        mod = exports.get(name)
        if mod is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{mod}"), name)
        namespace[name] = value
        return value
    return __getattr__
