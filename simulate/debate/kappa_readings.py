"""The two readings of what a debater heard, fitted side by side (``chorus debate belief``; issue 51 item 4).

* **sequential**: the agent absorbs its peers' turns one at a time, round by round in seat order: N - 1
  updates per round, each of weight w (the belief layer's own rule: every utterance is one update).
* **averaged**: the agent takes a round's peers as one update, of weight w, whose evidence is the mean
  of that round's peer e (a round with no finite e is no update).

Both are the same closed form ``b = (kappa b0 + A) / (kappa + M)`` with different (A, M): the averaged
reading has fewer, later-discounted updates, so the same movement of a belief reads as a smaller kappa.
Neither is known a priori, so both are fitted on the same readings and the same family resamples.

Which one the data prefer: both readings fit the same two parameters (kappa, gamma; or kappa alone at a
given gamma) by least squares on the same credences, so their residual sums of squares compare like for
like: under Gaussian reading noise the log-likelihood ratio is (n / 2) log(RSS_avg / RSS_seq), with no
complexity penalty to differ (AIC and BIC add the same terms to both). Held-out prediction guards against
overfitting, which two parameters over hundreds of readings do not do, and "predict the next round" would
drop every round-1 reading; the bootstrap share below says how stable the preference is instead: the share
of family resamples in which the preferred reading also has the smaller residual.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from chorus.core.stats import Interval, too_few_units
from chorus.simulate.belief.trajectory import Trajectories, fit

READINGS = ("sequential", "averaged")
SUFFIX = {"sequential": "", "averaged": "_avg"}   # the table's columns: kappa_fit (sequential), kappa_fit_avg
CRITERION = ("least-squares residual of the (kappa, gamma) fit on the same readings, as a Gaussian log-likelihood "
             "ratio (n/2) log(RSS_avg / RSS_seq) (> 0 prefers sequential; equal parameter counts, so no penalty "
             "differs); prefer_share: the share of family resamples that agree")
UNIT = "question family"


def _fit(tr: Trajectories, gamma: float | None, start: float | None = None) -> dict[str, Any]:
    if gamma is not None:
        return fit(tr, gamma=gamma)
    return fit(tr) if start is None else fit(tr, gamma_starts=(start,))


def _rss(r: dict[str, Any]) -> float:
    return float(r["rmse"] ** 2 * r["n"]) if r["n"] else float("nan")


def loglik_ratio(rss_seq: float, rss_avg: float, n: int) -> float:
    """(n/2) log(RSS_avg / RSS_seq): the Gaussian log-likelihood of sequential over averaged at their
    least-squares fits (> 0: sequential fits better). +-inf where one fits exactly."""
    if not n or not (np.isfinite(rss_seq) and np.isfinite(rss_avg)):
        return float("nan")
    if rss_seq == rss_avg:
        return 0.0
    with np.errstate(divide="ignore"):
        return float(0.5 * n * (np.log(rss_avg) - np.log(rss_seq)))


def fit_readings(trs: dict[str, Trajectories], clusters: np.ndarray, *, gamma: float | None, n_boot: int, ci: float,
                 seed: int, min_units: int = 0) -> dict[str, Any]:
    """Both readings' least-squares fits (``gamma`` None: kappa and gamma jointly; else kappa at it) with
    family-bootstrap intervals from the same resamples (each replicate refitted from its reading's point
    gamma), and which reading the data prefer. Columns: kappa_fit, gamma_fit, fit_rmse, fit_n,
    kappa_fit_at_bound, kappa_fit_lo/hi, gamma_fit_lo/hi (sequential; ``_avg`` for averaged), then
    prefer, loglik_seq_vs_avg, prefer_share, fit_resampled, fit_n_units, fit_ci_refused."""
    uniq, cid = np.unique(np.asarray(clusters), return_inverse=True)
    G = len(uniq)
    out: dict[str, Any] = {}
    points = {name: _fit(tr, gamma) for name, tr in trs.items()}
    nan = float("nan")
    for name, p in points.items():
        s = SUFFIX[name]
        out.update({f"kappa_fit{s}": p["kappa"], f"gamma_fit{s}": p["gamma"], f"fit_rmse{s}": p["rmse"],
                    f"fit_n{s}": p["n"], f"kappa_fit{s}_at_bound": p["kappa_at_bound"],
                    f"kappa_fit{s}_lo": nan, f"kappa_fit{s}_hi": nan, f"gamma_fit{s}_lo": nan, f"gamma_fit{s}_hi": nan})
    n = points["sequential"]["n"]
    both = "averaged" in points   # one reading alone (a caller that built only it): its fit, no preference
    llr = loglik_ratio(_rss(points["sequential"]), _rss(points["averaged"]), n) if both else nan
    prefer = "undecided" if np.isnan(llr) else "tie" if llr == 0 else "sequential" if llr > 0 else "averaged"
    refused = too_few_units(G, UNIT, min_units) if min_units else None
    if both:
        out.update(prefer=prefer, loglik_seq_vs_avg=llr, prefer_share=nan)
    out.update(fit_resampled=UNIT, fit_n_units=G, fit_ci_refused=refused)
    if not n or n_boot == 0 or refused:
        return out
    members = [np.flatnonzero(cid == c) for c in range(G)]
    rng = np.random.default_rng(seed)
    boot: dict[str, list] = {name: [] for name in trs}
    agree = []
    for _ in range(n_boot):
        idx = np.concatenate([members[c] for c in rng.integers(0, G, G)])
        rs = {name: _fit(tr.take(idx), gamma, points[name]["gamma"]) for name, tr in trs.items()}
        for name, r in rs.items():
            boot[name].append((r["kappa"], r["gamma"]))
        d = loglik_ratio(_rss(rs["sequential"]), _rss(rs["averaged"]), rs["sequential"]["n"]) if both else nan
        if not np.isnan(d):
            agree.append((d > 0) if prefer == "sequential" else (d < 0))
    lo, hi = (1 - ci) / 2, 1 - (1 - ci) / 2
    for name, v in boot.items():
        s = SUFFIX[name]
        a = np.asarray(v, float)
        ok = np.isfinite(a).all(1)
        if ok.any():
            out.update({f"kappa_fit{s}_lo": float(np.quantile(a[ok, 0], lo)), f"kappa_fit{s}_hi": float(np.quantile(a[ok, 0], hi)),
                        f"gamma_fit{s}_lo": float(np.quantile(a[ok, 1], lo)), f"gamma_fit{s}_hi": float(np.quantile(a[ok, 1], hi))})
    if agree and prefer in READINGS:
        out["prefer_share"] = float(np.mean(agree))
    return out


def interval_fields(iv: Interval, prefix: str) -> dict[str, Any]:
    """An ``Interval``'s estimate, bounds and level as table columns: ``{prefix}``, ``{prefix}_lo``,
    ``{prefix}_hi``, ``{prefix}_resampled``, ``{prefix}_n_units``, ``{prefix}_ci_refused``."""
    k, lo, hi = iv
    return {prefix: k, f"{prefix}_lo": lo, f"{prefix}_hi": hi, **iv.fields(prefix + "_")}
