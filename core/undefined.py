"""Why a number is undefined, said beside it: one rule for every summary a run writes.

A summary records its reasons in ``summary["undefined"]``: keys are paths of the summary's values
(dotted keys, ``[]`` for any row of a list: ``conditions.reflection.n_eff_final``,
``c2.split[].estimate``) or patterns of them (``*`` matches any text), values the reason. A part
declares its rules once (``{pattern: reason}``, each reason the condition under which that number is
undefined) and ``reasons(summary, rules)`` keeps the rules that match a value actually undefined in
this run, so a report never shows an undefined value bare and never lists reasons for values that are
defined. A record can also carry its own reason beside the value (``interval_why`` for an interval's
ends, ``why``), as ``chorus.core.stats.bootstrap_ci`` does.
"""
from __future__ import annotations

import math
from fnmatch import fnmatchcase
from typing import Any, Iterator

NO_REASON = "no reason recorded by the analysis that wrote it"
INTERVAL_KEYS = ("lo", "hi", "ci_low", "ci_high")


def is_undefined(v: Any) -> bool:
    """NaN or an infinity (None is a value not given, unless a reason says otherwise)."""
    return isinstance(v, float) and not math.isfinite(v)


def undefined_paths(obj: Any, prefix: str = "", none: bool = True) -> Iterator[str]:
    """The paths of every undefined value in ``obj`` (NaN, inf and, with ``none``, None: a summary
    written through ``json_safe`` has null where it had NaN)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "undefined" and not prefix:
                continue
            yield from undefined_paths(v, f"{prefix}.{k}" if prefix else str(k), none)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from undefined_paths(v, f"{prefix}[]", none)
    elif is_undefined(obj) or (none and obj is None):
        yield prefix


def match(path: str, why: dict[str, Any] | None) -> str | None:
    """The reason ``why`` records for ``path``: its own entry, else the first pattern that matches it."""
    if not isinstance(why, dict):
        return None
    if isinstance(why.get(path), str):
        return why[path]
    for pat, reason in why.items():
        if isinstance(reason, str) and "*" in pat and fnmatchcase(path, pat):
            return reason
    return None


def reasons(summary: dict[str, Any], rules: dict[str, str]) -> dict[str, str]:
    """The rules (``{pattern: reason}``, first match wins) that explain a value undefined in ``summary``,
    in rule order; an empty dict when every value is defined."""
    paths = list(dict.fromkeys(undefined_paths(summary)))
    used = set()
    for p in paths:
        for pat in rules:
            if fnmatchcase(p, pat):
                used.add(pat)
                break
    return {pat: r for pat, r in rules.items() if pat in used}


def why_undefined(path: str, why: dict[str, Any] | None, beside: dict[str, Any] | None = None) -> str:
    """Why the value at ``path`` is undefined: the summary's recorded reason for it (``match``), else the
    reason recorded beside it (``interval_why`` for an interval's end, ``why``), else ``NO_REASON``."""
    found = match(path, why)
    if found is not None:
        return found
    key = path.rsplit(".", 1)[-1]
    if beside:
        if key in INTERVAL_KEYS and isinstance(beside.get("interval_why"), str):
            return beside["interval_why"]
        if isinstance(beside.get("why"), str):
            return beside["why"]
    return NO_REASON
