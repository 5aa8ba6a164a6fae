"""Collective outcomes of long debates (peer-influence paper, seed 002 §C.2, Tables 13-14): curves by
round and the fate of initially split, contested and wrong-majority groups, debate vs reflection.
Pure: numpy/pandas only, computed from ``metrics.question_table`` (its fully-parsed flag, seeded-tie
plurality, unanimity and correctness columns; n_eff via ``effective_voters``).

Populations. Every group is *fully parsed* (every agent parsed in every round) and ran to the final
round R of the run; an estimate at round r reads that round's columns.

* by-round curves (rounds 0..R): ``unanimity`` over all such groups; ``wrong_agreement`` (all agents
  give the same answer and it is not the reference) and ``n_eff`` over the labelled ones;
* *initially split*: at round 0 the answers differ and one answer has strictly more votes than any
  other (a unique plurality). For I = 3 this is exactly the 2-1 split (1-1-1 has no unique
  plurality); for I != 3 it keeps e.g. 2-1-1 and 3-1 and drops plurality ties (2-2, all different),
  because "ended on the initial plurality" needs one plurality answer;
* *contested*: not unanimous at round 0 (any split, 1-1-1 included), labelled;
* *wrong initial majority*: labelled, and the round-0 plurality (ties broken by the seeded draw of
  ``metrics.question_table``) is not the reference.

Every estimate has a question-clustered (cluster = family) percentile bootstrap interval
(``chorus.core.stats.cluster_bootstrap``; the unanimity ratio a Fieller interval over the same families), the
number of groups it rests on (``n_groups``), the number of families its interval resamples (``n_clusters``,
``resampled`` = "question family": a family holds several questions) and, for shares,
how many of them had the event (``n_events``). A cell without groups is NaN with ``n_groups`` 0, never
an error. Debate-vs-reflection ratios and deltas are paired: the questions eligible in both
conditions, resampled together.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pandas as pd

from chorus.core.stats import cluster_bootstrap, mean_ci, ratio_ci
from chorus.simulate.debate.metrics import effective_voters
from chorus.core.config import InputError

BY_ROUND_METRICS = ("unanimity", "wrong_agreement", "n_eff")
COLUMNS = ["condition", "metric", "round", "estimate", "ci_low", "ci_high", "n_groups", "n_events", "resampled",
           "n_clusters"]
UNIT = "question family"   # what every interval here resamples; ``n_clusters`` counts them beside each estimate
PAIRED = {"ratio": "debate/reflection", "delta": "debate-reflection"}  # the condition label of paired rows


# -- populations ---------------------------------------------------------------------------------
def final_round(q: pd.DataFrame) -> int:
    return int(q["final_round"].max()) if len(q) else 0


def eligible(q: pd.DataFrame, condition: str, R: int | None = None) -> pd.DataFrame:
    """The condition's fully parsed groups that ran to round R (default: the run's final round)."""
    R = final_round(q) if R is None else R
    return q[(q["condition"] == condition) & q["fully_parsed"].astype(bool) & (q["final_round"] == R)]


def initially_split(q: pd.DataFrame) -> pd.Series:
    """Split at round 0 with a unique plurality (for I = 3: exactly two distinct answers, 2-1)."""
    return q["split_0"].astype(bool) & q["plurality_0"].notna()


def contested(q: pd.DataFrame) -> pd.Series:
    """Labelled and not unanimous at round 0 (on fully parsed groups: any split)."""
    return q["labelled"].astype(bool) & ~q["unanimous_0"].astype(bool)


def wrong_initial_majority(q: pd.DataFrame) -> pd.Series:
    """Labelled and the round-0 plurality (seeded ties) is not the reference."""
    if "majority_correct_0" not in q:  # no labelled question at all
        return pd.Series(False, index=q.index)
    return q["labelled"].astype(bool) & (q["majority_correct_0"] == False)  # noqa: E712 (None/NaN -> False)


def wrong_agreement(q: pd.DataFrame, r: int) -> np.ndarray:
    """1.0 where all agents agree at round r on an answer that is not the reference (labelled rows)."""
    if not len(q):
        return np.zeros(0)
    u = q[f"unanimous_{r}"].astype(bool) & q["labelled"].astype(bool) & (q[f"majority_{r}"] != q["reference"])
    return u.to_numpy(float)


def _correct(q: pd.DataFrame, r: int) -> np.ndarray:
    if not len(q):
        return np.zeros((0, 0))
    return np.array([list(c) for c in q[f"correct_agents_{r}"]], float)


def _n_eff(C: np.ndarray) -> float:
    # one group says nothing about correlation across questions
    return effective_voters(C) if C.ndim == 2 and C.shape[0] >= 2 and C.shape[1] >= 2 else float("nan")


def n_eff_stack(X: np.ndarray) -> np.ndarray:
    """``effective_voters`` of every questions x agents slice of X (rounds x questions x agents) in
    one numpy pass: the bootstrap of the curves evaluates it for every round of every resample
    (52,000 calls of ``effective_voters`` for a 12-round run at 2,000 resamples). Same definition:
    mean Pearson correlation over all agent pairs, a pair with a constant column counted as 0; NaN
    when fewer than two agents vary or with fewer than two questions, inf at rho = -1/(I-1); tests
    hold it equal to effective_voters."""
    X = np.asarray(X, float)
    T, n, A = X.shape  # A agents (I in the paper)
    if n < 2 or A < 2:
        return np.full(T, np.nan)
    sd = X.std(axis=1)                                        # T x I, exactly 0 for a constant column
    Z = X - X.mean(axis=1, keepdims=True)
    cov = np.matmul(Z.transpose(0, 2, 1), Z) / n
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.clip(cov / (sd[:, :, None] * sd[:, None, :]), -1.0, 1.0)
    iu = np.triu_indices(A, 1)
    ok = (sd[:, iu[0]] != 0) & (sd[:, iu[1]] != 0)
    varying = (sd != 0).sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.where(ok, r[:, iu[0], iu[1]], 0.0).sum(1) / len(iu[0])
        den = 1.0 + (A - 1) * rho
        out = np.where(den > 1e-12, A / den, np.inf)
    return np.where(varying >= 2, out, np.nan)


# -- rows ----------------------------------------------------------------------------------------
def _row(condition: str, metric: str, r: int, est_lo_hi: tuple[float, float, float], n_groups: int,
         n_events: int | None = None, *, families: Any = ()) -> dict[str, Any]:
    """A table row; ``families``: the family of each group the estimate rests on, counted as ``n_clusters``
    (the units its interval resamples: ``n_groups`` counts questions, several to a family)."""
    est, lo, hi = (float(x) for x in est_lo_hi)
    return {"condition": condition, "metric": metric, "round": int(r), "estimate": est, "ci_low": lo,
            "ci_high": hi, "n_groups": int(n_groups), "n_events": n_events, "resampled": UNIT,
            "n_clusters": int(pd.Series(np.asarray(families, dtype=object)).nunique())}


def _share(condition: str, metric: str, r: int, events: np.ndarray, fam: np.ndarray, **bk) -> dict[str, Any]:
    events = np.asarray(events, float)
    return _row(condition, metric, r, mean_ci(events, fam, **bk), len(events), int(events.sum()), families=fam)


def _neff_row(condition: str, metric: str, r: int, lab: pd.DataFrame, **bk) -> dict[str, Any]:
    C = _correct(lab, r)
    _, lo, hi = cluster_bootstrap(lambda i: float(n_eff_stack(C[None, i])[0]), lab["family"].to_numpy(), **bk)
    return _row(condition, metric, r, (_n_eff(C), lo, hi), len(lab), families=lab["family"].to_numpy())


def _table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=COLUMNS)
    df["n_events"] = df["n_events"].astype("Int64")  # missing for n_eff / ratios, not 0
    return df


def _paired(q: pd.DataFrame, select: Callable[[pd.DataFrame], pd.Series], R: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Debate and reflection rows (aligned on qid) of the questions eligible and selected in both."""
    d, r = eligible(q, "debate", R), eligible(q, "reflection", R)
    d, r = d[select(d)].set_index("qid"), r[select(r)].set_index("qid")
    common = d.index.intersection(r.index).sort_values()
    return d.loc[common], r.loc[common]


def _conditions(q: pd.DataFrame) -> list[str]:
    return sorted(q["condition"].unique()) if len(q) else []


# -- the four C.2 outcomes -----------------------------------------------------------------------
def _vector_bootstrap(stat: Callable[[np.ndarray], np.ndarray], clusters: np.ndarray, *, n_boot: int, seed: int,
                      ci: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(estimates, lows, highs) of a vector statistic, every entry on the same resamples of
    ``chorus.core.stats.cluster_bootstrap`` (which takes scalar statistics: this records each resample's
    vector) and each entry's percentile interval over its finite values, as cluster_bootstrap does.
    One pass instead of one bootstrap per (metric, round): 39 curves of a 12-round run."""
    draws: list[np.ndarray] = []

    def record(idx: np.ndarray) -> float:
        draws.append(np.asarray(stat(idx), float))
        return 0.0
    cluster_bootstrap(record, clusters, n_boot=n_boot, seed=seed, ci=ci)
    est = draws[0]
    lo, hi = np.full(len(est), np.nan), np.full(len(est), np.nan)
    if len(draws) > 1:
        D = np.array(draws[1:])
        for k in range(len(est)):
            v = D[:, k][np.isfinite(D[:, k])]
            if len(v):
                lo[k], hi[k] = np.quantile(v, (1 - ci) / 2), np.quantile(v, 1 - (1 - ci) / 2)
    return est, lo, hi


def by_round(q: pd.DataFrame, *, n_boot: int = 2000, seed: int = 0, ci: float = 0.95) -> pd.DataFrame:
    """Tidy curves for rounds 0..R: unanimity, wrong agreement and n_eff per condition, each with
    its clustered interval (all curves of a condition on the same resamples, so bands compare)."""
    R = final_round(q)
    rows = []
    for cond in _conditions(q):
        e = eligible(q, cond, R)
        L = e["labelled"].to_numpy(bool)
        lab = e[L]
        n, nl = len(e), len(lab)
        U = np.array([e[f"unanimous_{r}"].to_numpy(float) for r in range(R + 1)]).T.reshape(n, R + 1)
        W = np.array([wrong_agreement(e, r) for r in range(R + 1)]).T.reshape(n, R + 1)
        C = np.full((R + 1, n, int(e["n_agents"].max()) if n else 0), np.nan)  # rounds x questions x agents
        for r in range(R + 1):
            if nl:
                C[r][L] = _correct(lab, r)

        def stat(idx: np.ndarray) -> np.ndarray:
            li = idx[L[idx]]
            u = U[idx].mean(0) if len(idx) else np.full(R + 1, np.nan)
            w = W[li].mean(0) if len(li) else np.full(R + 1, np.nan)
            return np.concatenate([u, w, n_eff_stack(C[:, li, :])])
        est, lo, hi = _vector_bootstrap(stat, e["family"].to_numpy(), n_boot=n_boot, seed=seed, ci=ci)
        est[2 * (R + 1):] = [_n_eff(C[r][L]) for r in range(R + 1)]  # the estimates themselves by effective_voters
        for k, metric in enumerate(BY_ROUND_METRICS):
            for r in range(R + 1):
                j = k * (R + 1) + r
                events = {"unanimity": int(U[:, r].sum()), "wrong_agreement": int(W[L, r].sum())}.get(metric)
                rows.append(_row(cond, metric, r, (est[j], lo[j], hi[j]), n if metric == "unanimity" else nl, events,
                                 families=(e if metric == "unanimity" else lab)["family"].to_numpy()))
    return _table(rows)


def split_outcomes(q: pd.DataFrame, *, n_boot: int = 2000, seed: int = 0, ci: float = 0.95) -> pd.DataFrame:
    """Initially split groups (2-1 for I = 3), at the final round R, per condition: ``unanimity``,
    ``n_eff`` (labelled ones), ``settled_on_initial_plurality`` (among the unanimous ones, the share
    whose answer is the round-0 plurality); and the paired ``unanimity_ratio`` debate / reflection."""
    bk = dict(n_boot=n_boot, seed=seed, ci=ci)
    R = final_round(q)
    rows = []
    for cond in _conditions(q):
        e = eligible(q, cond, R)
        s = e[initially_split(e)]
        rows.append(_share(cond, "unanimity", R, s[f"unanimous_{R}"].to_numpy(float) if len(s) else [],
                           s["family"].to_numpy(), **bk))
        rows.append(_neff_row(cond, "n_eff", R, s[s["labelled"].astype(bool)], **bk))
        settled = s[s[f"unanimous_{R}"].astype(bool)] if len(s) else s
        on_plurality = (settled["final_answer"] == settled["plurality_0"]).to_numpy(float)
        rows.append(_share(cond, "settled_on_initial_plurality", R, on_plurality, settled["family"].to_numpy(), **bk))
    if {"debate", "reflection"} <= set(_conditions(q)):
        d, r = _paired(q, initially_split, R)
        num, den = d[f"unanimous_{R}"].to_numpy(float), r[f"unanimous_{R}"].to_numpy(float)
        est = ratio_ci(num, den, d["family"].to_numpy(), **bk) if len(d) else (np.nan,) * 3
        rows.append(_row(PAIRED["ratio"], "unanimity_ratio", R, est, len(d), families=d["family"].to_numpy()))
    return _table(rows)


def contested_wrong_agreement(q: pd.DataFrame, *, at_round: int | None = None, n_boot: int = 2000, seed: int = 0,
                              ci: float = 0.95) -> pd.DataFrame:
    """Contested labelled groups (not unanimous at round 0): the share unanimous on a wrong answer at
    ``at_round`` (default the final round: turn 12 in ``long``), per condition, with group counts."""
    bk = dict(n_boot=n_boot, seed=seed, ci=ci)
    R = final_round(q)
    t = R if at_round is None else int(at_round)
    if not 0 <= t <= R:
        raise InputError(f"at_round must be between 0 and the run's final round {R}, got {t}")
    rows = []
    for cond in _conditions(q):
        e = eligible(q, cond, R)
        c = e[contested(e)] if len(e) else e
        rows.append(_share(cond, "wrong_agreement", t, wrong_agreement(c, t), c["family"].to_numpy(), **bk))
    return _table(rows)


def wrong_majority_outcomes(q: pd.DataFrame, *, n_boot: int = 2000, seed: int = 0, ci: float = 0.95) -> pd.DataFrame:
    """Groups whose initial plurality was wrong: the share ending (round R) unanimously wrong per
    condition, and the paired delta debate - reflection."""
    bk = dict(n_boot=n_boot, seed=seed, ci=ci)
    R = final_round(q)
    rows = []
    for cond in _conditions(q):
        e = eligible(q, cond, R)
        w = e[wrong_initial_majority(e)] if len(e) else e
        rows.append(_share(cond, "unanimous_wrong", R, wrong_agreement(w, R), w["family"].to_numpy(), **bk))
    if {"debate", "reflection"} <= set(_conditions(q)):
        d, r = _paired(q, wrong_initial_majority, R)
        a, b = wrong_agreement(d, R), wrong_agreement(r, R)
        est = cluster_bootstrap(lambda i: float(a[i].mean() - b[i].mean()) if len(i) else float("nan"),
                                d["family"].to_numpy(), **bk)
        rows.append(_row(PAIRED["delta"], "unanimous_wrong_delta", R, est, len(d), families=d["family"].to_numpy()))
    return _table(rows)


TABLES = {"outcomes_by_round": by_round, "c2_split": split_outcomes,
          "c2_contested_wrong_agreement": contested_wrong_agreement,
          "c2_wrong_initial_majority": wrong_majority_outcomes}


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: (None if v is pd.NA else v) for k, v in rec.items()} for rec in df.to_dict(orient="records")]


def c2_summary(q: pd.DataFrame, *, n_boot: int = 2000, seed: int = 0,
               ci: float = 0.95) -> tuple[dict[str, Any], dict[str, pd.DataFrame]]:
    """(the ``c2`` block of summary.json, {table name: table}) for a question table."""
    tabs = {name: f(q, n_boot=n_boot, seed=seed, ci=ci) for name, f in TABLES.items()}
    R = final_round(q)
    curves = tabs["outcomes_by_round"]
    out: dict[str, Any] = {
        "final_round": R, "n_agents": int(q["n_agents"].max()) if len(q) else 0, "ci": ci, "n_boot": n_boot,
        "final_round_curves": _records(curves[curves["round"] == R]),
        "split": _records(tabs["c2_split"]),
        "contested_wrong_agreement": _records(tabs["c2_contested_wrong_agreement"]),
        "wrong_initial_majority": _records(tabs["c2_wrong_initial_majority"]),
    }
    return out, tabs
