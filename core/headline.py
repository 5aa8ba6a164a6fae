"""A run's headline: the comparison its paper leads with, as a few rows, declared once per part.

Each part declares one function ``headline(summary) -> list[Row]`` beside its summary code (a light module:
it imports only this one) and hands it here from the part's CLI module (``declare("debate", headline)``). The console table a run prints, the top of its
report and the demo's overview all ask ``rows(part, summary)``: one list of rows, rendered three ways.

A row is an estimate with its interval, the interval's level and the number of units behind it. A row
never hides what it cannot say: an estimate that is undefined (None, NaN) carries the reason (``why``),
an interval that is missing or undefined says so, and an interval resampled from fewer than two
clusters is marked as no interval at all (a bootstrap over one cluster returns that cluster's value
twice, ``[x, x]``, which reads as certainty).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable

UNDEFINED = "undefined"


@dataclass(frozen=True)
class Row:
    name: str
    estimate: float | None
    interval: tuple[float, float] | None = None
    level: float | None = None         # the interval's coverage (0.95); None: the row has no interval
    n: int | None = None               # units behind the estimate (questions, readouts, groups, pairs)
    clusters: int | None = None        # clusters the interval resampled, where it is a cluster bootstrap
    why: str | None = None             # why the estimate is undefined (set whenever it is)
    interval_why: str | None = None    # why a declared interval is undefined
    detail: str | None = None          # numbers read beside the estimate (calibration beside accuracy)
    resampled: str | None = None       # the unit the interval rests on ("question family", "group", "task")
    method: str | None = None          # how it was computed where not a bootstrap ("Wilson"); None: a bootstrap

    @property
    def units(self) -> int | None:
        """How many units the interval rests on: the clusters resampled, else n."""
        return self.clusters if self.clusters is not None else self.n

    @property
    def refused(self) -> str | None:
        """Why a bootstrap row prints no bounds: fewer than ``MIN_UNITS`` units resampled (issue 51)."""
        if self.method is None and self.resampled and self.units is not None and self.interval is not None:
            from chorus.core.stats import too_few_units
            return too_few_units(self.units, self.resampled)
        return None

    def basis(self) -> str:
        """What the interval rests on, as printed after it: "40 question families resampled",
        "Wilson, 120 tasks"; empty where the row does not say."""
        from chorus.core.stats import plural
        k = self.units
        if self.method:
            return f"{self.method}, {plural(self.resampled or 'unit', k)}" if k is not None else self.method
        if self.resampled and k is not None:
            return f"{plural(self.resampled, k)} resampled"
        return ""

    @property
    def defined(self) -> bool:
        return self.estimate is not None

    @property
    def single_cluster(self) -> bool:
        """The interval came from fewer than two clusters: it is no interval."""
        return self.interval is not None and self.clusters is not None and self.clusters < 2

    def interval_text(self) -> str:
        """The interval as shown: ``[lo, hi] 95%``, marked when it is no interval, empty when the row has none."""
        if self.level is None and self.interval is None and self.interval_why is None:
            return ""
        pct = f" {self.level * 100:g}%" if self.level is not None else ""
        if self.interval is None:
            return f"interval {UNDEFINED}: {self.interval_why or 'not computed'}"
        lo, hi = self.interval
        if self.refused:
            return f"no interval ({self.refused})"
        if self.single_cluster:
            return (f"[{num(lo)}, {num(hi)}] from {self.clusters} cluster: not an interval "
                    f"(a bootstrap needs at least two clusters)")
        basis = self.basis()
        return f"[{num(lo)}, {num(hi)}]{pct}" + (f" ({basis})" if basis else "")

    def text(self) -> str:
        """The row's value in one line: the estimate, its interval and n, or ``undefined: why``."""
        if not self.defined:
            return f"{UNDEFINED}: {self.why}"
        parts = [num(self.estimate), self.interval_text(), f"n={self.n}" if self.n is not None else "",
                 f"({self.detail})" if self.detail else ""]
        return " ".join(p for p in parts if p)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["interval"] = list(self.interval) if self.interval is not None else None
        d["single_cluster"] = self.single_cluster
        d["refused"] = self.refused
        d["text"] = self.text()
        return d


def num(x: float | None) -> str:
    """A number as the headline shows it: three decimals, or three significant digits when tiny."""
    if x is None:
        return UNDEFINED
    if isinstance(x, bool) or isinstance(x, int):
        return str(x)
    if x != 0 and abs(x) < 1e-3:
        return f"{x:.3g}"
    return f"{x:.3f}"


def _value(x: Any) -> float | None:
    """A finite number or None (NaN, inf, None and non-numbers are undefined)."""
    if x is None or isinstance(x, str):
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def row(name: str, estimate: Any, lo: Any = None, hi: Any = None, *, level: float | None = None,
        n: Any = None, clusters: Any = None, why: str | None = None, interval_why: str | None = None,
        detail: str | None = None, resampled: str | None = None, method: str | None = None) -> Row:
    """A headline row from a summary's raw values: NaN and None become undefined with ``why`` (a generic
    reason when the part gives none, so an undefined value is never shown bare); an interval whose ends
    are not both finite becomes undefined with ``interval_why``. ``level`` declares that the row has an
    interval; without it and without ``lo``/``hi`` the row has none. ``resampled``: the unit the interval
    rests on (a bootstrap's resampled unit, counted by ``clusters`` or else ``n``; refused below
    ``chorus.core.stats.MIN_UNITS``); ``method``: how it was computed where it is no bootstrap ("Wilson")."""
    est = _value(estimate)
    a, b = _value(lo), _value(hi)
    has_interval = level is not None or lo is not None or hi is not None
    interval = (a, b) if a is not None and b is not None else None
    if has_interval and interval is None and interval_why is None:
        interval_why = "its ends are not both finite (too few units to resample)"
    nn = int(n) if _value(n) is not None else None
    cl = int(clusters) if _value(clusters) is not None else None
    if est is None and why is None:
        why = "the run's summary holds no value for it (NaN or missing)"
    return Row(name, est, interval, level if has_interval else None, nn, cl, why if est is None else None,
               interval_why if interval is None else None, detail, resampled if has_interval else None,
               method if has_interval else None)


def wilson(share: Any, n: Any, level: float = 0.95) -> tuple[float, float] | None:
    """The Wilson score interval of a proportion ``share`` of ``n`` independent units (None without units):
    the interval a headline accuracy carries where the run computed none (an exact proportion has no
    bootstrap to read)."""
    p, nn = _value(share), _value(n)
    if p is None or nn is None or nn < 1:
        return None
    from statistics import NormalDist
    z = NormalDist().inv_cdf(0.5 + level / 2)
    den = 1 + z * z / nn
    mid = (p + z * z / (2 * nn)) / den
    half = z * math.sqrt(p * (1 - p) / nn + z * z / (4 * nn * nn)) / den
    return (max(0.0, mid - half), min(1.0, mid + half))


def proportion(name: str, share: Any, n: Any, *, level: float = 0.95, why: str | None = None,
               detail: str | None = None, unit: str = "unit", method: str = "Wilson") -> Row:
    """A share of ``n`` units (``unit``: their name, "task", "question") with its Wilson interval, which
    says so: "(Wilson, 120 tasks)"; ``method`` may add what it assumes ("Wilson, seeds pooled")."""
    w = wilson(share, n, level)
    return row(name, share, *(w or (None, None)), level=level, n=n, why=why, detail=detail,
               interval_why=None if w else "no units to count", resampled=unit, method=method)


# -- the declarations --------------------------------------------------------------------------------
HEADLINES: dict[str, Callable[[dict[str, Any]], list[Row]]] = {}


def declare(part: str, fn: Callable[[dict[str, Any]], list[Row]]) -> None:
    """``part``'s headline function; once per part."""
    if not callable(fn):
        raise TypeError(f"part {part!r}: a headline is a function of the summary, got {fn!r}")
    if HEADLINES.get(part, fn) is not fn:
        raise ValueError(f"part {part!r} declares two headlines: {HEADLINES[part].__qualname__} and {fn.__qualname__}")
    HEADLINES[part] = fn


def headline_function(part: str | None) -> Callable[[dict[str, Any]], list[Row]] | None:
    return HEADLINES.get(part) if part is not None else None


def rows(part: str | None, summary: dict[str, Any] | None) -> list[Row] | None:
    """The headline rows of a run of ``part`` from its summary; None when the part declares no headline
    (or the summary is absent); an empty list when this summary holds none of the part's lead numbers
    (a run of the part of another shape)."""
    fn = headline_function(part)
    if fn is None or not isinstance(summary, dict):
        return None
    return list(fn(summary))


def console_table(title: str, found: Iterable[Row], standing: str) -> Any:
    """The headline as the rich table a run prints last: one line per row, and under the rows where the
    numbers come from (``standing``: ``chorus.serving.standing``'s sentence)."""
    from rich.table import Table
    t = Table(title=title, caption=standing, caption_justify="left", show_lines=False)
    for c in ("headline", "estimate", "interval", "n"):
        t.add_column(c, overflow="fold")
    for r in found:
        if r.defined:
            t.add_row(r.name, num(r.estimate) + (f" ({r.detail})" if r.detail else ""), r.interval_text(),
                      "" if r.n is None else str(r.n))
        else:
            t.add_row(r.name, f"{UNDEFINED}: {r.why}", r.interval_text(), "" if r.n is None else str(r.n))
    return t
