"""Human-alignment metrics for role-play groups. Pure: numpy / scipy / pandas / rouge-score only
(the sentence-embedding model is passed in as a function), tested exactly on hand-built groups.

Input: the long labelled table (one row per message: source, setup, group_id, topic, participant,
kind in initial | tweet | chat | final, round, partner, text, stance on the coded 1-6 scale,
on_topic). Channels: public = posts (start: round-1 post, end: last post); private = initial ->
final private opinion. Spread within a group of four: SD (population, ddof = 0), mean pairwise
absolute distance, range; convergence = end - start (negative: the group converged).
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd
from scipy import optimize, stats

from chorus.core.stats import bootstrap_ci
from chorus.core.config import InputError

CHANNELS = ("public", "private")
MEASURES = ("sd", "pairwise", "range")
BINS = np.arange(1, 7)


# -- small exact pieces ---------------------------------------------------------------------------
def spread(x: Iterable[float], measure: str) -> float:
    """Within-group spread; NaN if any value is missing."""
    a = np.asarray(list(x), dtype=float)
    if len(a) == 0 or np.isnan(a).any():
        return float("nan")
    if measure == "sd":
        return float(np.std(a, ddof=0))
    if measure == "pairwise":
        return float(np.mean([abs(a[i] - a[j]) for i, j in itertools.combinations(range(len(a)), 2)])) if len(a) > 1 else 0.0
    if measure == "range":
        return float(a.max() - a.min())
    raise InputError(f"unknown spread measure {measure!r}")


def to_bin(x: np.ndarray | float) -> np.ndarray:
    """Nearest point of the 1-6 scale (halves round up, not to even)."""
    return np.clip(np.floor(np.asarray(x, dtype=float) + 0.5), 1, 6)


def endpoint_distribution(x: Iterable[float]) -> np.ndarray:
    """Share of values at each scale point 1..6 (missing values skipped)."""
    a = np.asarray(list(x), dtype=float)
    a = a[~np.isnan(a)]
    if not len(a):
        return np.full(6, np.nan)
    b = to_bin(a)
    return np.array([(b == k).mean() for k in BINS])


def transition_matrix(start: Iterable[float], end: Iterable[float], normalise: bool = True) -> np.ndarray:
    """6 x 6 start-bin -> end-bin matrix (rows: start); row-normalised (empty rows NaN) or counts."""
    s, e = np.asarray(list(start), float), np.asarray(list(end), float)
    ok = ~(np.isnan(s) | np.isnan(e))
    m = np.zeros((6, 6))
    for i, j in zip(to_bin(s[ok]).astype(int), to_bin(e[ok]).astype(int)):
        m[i - 1, j - 1] += 1
    if not normalise:
        return m
    with np.errstate(invalid="ignore", divide="ignore"):
        return m / m.sum(axis=1, keepdims=True)


def rouge_l(pred: str, ref: str) -> float:
    """ROUGE-L F-measure (rouge-score, with stemming)."""
    return float(_scorer().score(ref or "", pred or "")["rougeL"].fmeasure)


_SCORER = None


def _scorer():
    global _SCORER
    if _SCORER is None:
        from rouge_score import rouge_scorer
        _SCORER = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    return _SCORER


def n_words(text: str | None) -> int:
    return len((text or "").split())


def length_deviation(pred: str, ref: str) -> int:
    """|words(pred) - words(ref)|."""
    return abs(n_words(pred) - n_words(ref))


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, float), np.asarray(b, float)
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


# -- statistics -------------------------------------------------------------------------------------
def sign_test(diffs: Iterable[float], alternative: str = "greater") -> dict[str, Any]:
    """Exact sign test over condition cells: k of n non-zero differences positive (ties dropped)."""
    d = np.asarray(list(diffs), dtype=float)
    d = d[~np.isnan(d)]
    nz = d[d != 0]
    k, n = int((nz > 0).sum()), int(len(nz))
    p = float(stats.binomtest(k, n, 0.5, alternative=alternative).pvalue) if n else float("nan")
    return {"k": k, "n": n, "ties": int(len(d) - n), "p": p, "alternative": alternative}


def wilcoxon_paired(a: Iterable[float], b: Iterable[float]) -> dict[str, Any]:
    """Two-sided Wilcoxon signed-rank test over paired units (topics); NaN when undefined."""
    x, y = np.asarray(list(a), float), np.asarray(list(b), float)
    ok = ~(np.isnan(x) | np.isnan(y))
    x, y = x[ok], y[ok]
    n = int(len(x))
    if n == 0 or np.all(x == y):
        return {"n": n, "statistic": float("nan"), "p": float("nan")}
    r = stats.wilcoxon(x, y)
    return {"n": n, "statistic": float(r.statistic), "p": float(r.pvalue)}


def spearman(x: Iterable[float], y: Iterable[float]) -> dict[str, Any]:
    a, b = np.asarray(list(x), float), np.asarray(list(y), float)
    ok = ~(np.isnan(a) | np.isnan(b))
    a, b = a[ok], b[ok]
    if len(a) < 3 or np.all(a == a[0]) or np.all(b == b[0]):
        return {"rho": float("nan"), "p": float("nan"), "n": int(len(a))}
    r = stats.spearmanr(a, b)
    return {"rho": float(r.statistic), "p": float(r.pvalue), "n": int(len(a))}


# -- trajectories -------------------------------------------------------------------------------------
def points(n_rounds: int) -> list[str]:
    return ["initial"] + [f"tweet{r}" for r in range(1, n_rounds + 1)] + ["final"]


def channel_points(n_rounds: int) -> dict[str, tuple[str, str]]:
    return {"public": ("tweet1", f"tweet{n_rounds}"), "private": ("initial", "final")}


def wide(labelled: pd.DataFrame) -> pd.DataFrame:
    """One row per (source, setup, group_id, topic, participant): stance at each point, the first
    chat partner, and the texts of every point."""
    d = labelled[labelled["kind"].isin(["initial", "tweet", "final"])].copy()
    d["point"] = np.where(d["kind"] == "tweet", "tweet" + d["round"].astype(str), d["kind"])
    keys = ["source", "setup", "group_id", "topic", "participant"]
    R = int(d.loc[d["kind"] == "tweet", "round"].max()) if (d["kind"] == "tweet").any() else 0
    cols = points(R)
    # groupby + unstack (not pivot_table, whose dropna=False builds the cartesian product of keys)
    s = d.groupby(keys + ["point"], sort=True)["stance"].first().unstack("point").reindex(columns=cols)
    t = d.groupby(keys + ["point"], sort=True)["text"].first().unstack("point").reindex(columns=cols)
    t.columns = [f"text_{c}" for c in t.columns]
    s.columns = list(s.columns)
    w = s.join(t).reset_index()
    p1 = labelled[(labelled["kind"] == "tweet") & (labelled["round"] == 1)][keys + ["partner"]].rename(columns={"partner": "partner1"})
    return w.merge(p1.drop_duplicates(keys), on=keys, how="left")


def n_rounds_of(w: pd.DataFrame) -> int:
    return max(int(c[5:]) for c in w.columns if isinstance(c, str) and c.startswith("tweet") and c[5:].isdigit())


def individual_errors(human: pd.DataFrame, sim: pd.DataFrame, channel: str, n_rounds: int) -> pd.DataFrame:
    """Per participant: single-opinion error |s_end - h_end| and opinion-update error
    |(s_end - s_start) - (h_end - h_start)|."""
    a, b = channel_points(n_rounds)[channel]
    k = ["group_id", "topic", "participant"]
    m = human[k + [a, b]].merge(sim[k + [a, b]], on=k, suffixes=("_h", "_s"))
    m["single_error"] = (m[f"{b}_s"] - m[f"{b}_h"]).abs()
    m["update_error"] = ((m[f"{b}_s"] - m[f"{a}_s"]) - (m[f"{b}_h"] - m[f"{a}_h"])).abs()
    return m[k + ["single_error", "update_error"]]


def group_convergence(w: pd.DataFrame, channel: str, n_rounds: int) -> pd.DataFrame:
    """Per group: start, end and delta (end - start) of every spread measure."""
    a, b = channel_points(n_rounds)[channel]
    rows = []
    for (gid, topic), g in w.groupby(["group_id", "topic"], sort=True):
        row = {"group_id": gid, "topic": topic, "n": len(g)}
        for m in MEASURES:
            s0, s1 = spread(g[a], m), spread(g[b], m)
            row.update({f"{m}_start": s0, f"{m}_end": s1, f"delta_{m}": s1 - s0})
        row["mean_shift"] = float((g[b] - g[a]).mean())
        rows.append(row)
    return pd.DataFrame(rows)


def partner_gap(w: pd.DataFrame, channel: str, n_rounds: int) -> pd.DataFrame:
    """Per participant: gap = first partner's start stance - own start stance; change = end - start."""
    a, b = channel_points(n_rounds)[channel]
    start = w.set_index(["group_id", "participant"])[a]
    rows = []
    for _, r in w.iterrows():
        ps = start.get((r["group_id"], r["partner1"]), np.nan) if isinstance(r["partner1"], str) else np.nan
        rows.append({"group_id": r["group_id"], "participant": r["participant"], "gap": ps - r[a], "change": r[b] - r[a]})
    return pd.DataFrame(rows)


def sd_trajectory(w: pd.DataFrame, n_rounds: int) -> list[float]:
    """Mean within-group SD at each point (initial, post 1..R, final)."""
    return [float(np.nanmean([spread(g[p], "sd") for _, g in w.groupby("group_id")]) if len(w) else np.nan)
            for p in points(n_rounds)]


# -- DeGroot ------------------------------------------------------------------------------------
def degroot_rollout(x0: dict[str, float], partners: list[dict[str, str]], alpha: float) -> list[dict[str, float]]:
    """States x^0..x^R: in round r everyone moves a share alpha towards their chat partner,
    x_i^r = x_i^{r-1} + alpha (x_j^{r-1} - x_i^{r-1}) (DeGroot with weights 1 - alpha / alpha)."""
    xs = [dict(x0)]
    for pr in partners:
        prev = xs[-1]
        xs.append({i: prev[i] + alpha * (prev[pr[i]] - prev[i]) if pr.get(i) in prev else prev[i] for i in prev})
    return xs


def degroot_predictions(x0: dict[str, float], partners: list[dict[str, str]], alpha: float) -> dict[str, dict[str, float]]:
    """Predicted stance per point: post r = x^{r-1} (written before round r's chat), final = x^R."""
    xs = degroot_rollout(x0, partners, alpha)
    out = {"initial": xs[0]}
    for r in range(1, len(partners) + 1):
        out[f"tweet{r}"] = xs[r - 1]
    out["final"] = xs[-1]
    return out


def fit_degroot(groups: list[tuple[dict[str, float], list[dict[str, str]], dict[str, dict[str, float]]]]) -> dict[str, Any]:
    """Least-squares alpha in [0, 1] over training groups: (x0, partners per round, observed
    {point: {pid: stance}}) with x0 the initial stances. Missing observations are skipped."""
    groups = [g for g in groups if all(v == v for v in g[0].values())]
    if not groups:
        raise InputError("DeGroot: no training group with complete initial stances")

    def sse(alpha: float) -> float:
        tot = 0.0
        for x0, partners, obs in groups:
            pred = degroot_predictions(x0, partners, alpha)
            for pt, vals in obs.items():
                if pt == "initial":
                    continue
                for pid, v in vals.items():
                    if v == v:
                        tot += (pred[pt][pid] - v) ** 2
        return tot

    r = optimize.minimize_scalar(sse, bounds=(0.0, 1.0), method="bounded", options={"xatol": 1e-6})
    # a flat objective (e.g. nobody moved, or all stances equal) leaves alpha unidentified: say so
    flat = bool(np.ptp([sse(a) for a in (0.0, 0.25, 0.5, 0.75, 1.0)]) < 1e-12)
    n_obs = sum(1 for _, _, obs in groups for pt, vals in obs.items() if pt != "initial" for v in vals.values() if v == v)
    return {"alpha": float(r.x), "sse": float(r.fun), "n_groups": len(groups), "n_obs": int(n_obs),
            "identified": not flat}


def degroot_inputs(w_human: pd.DataFrame, partners: dict[str, list[dict[str, str]]], n_rounds: int):
    """(x0, partners, observed) per group from the human wide table."""
    out = []
    for gid, g in w_human.groupby("group_id", sort=True):
        g = g.set_index("participant")
        obs = {p: {pid: float(g.loc[pid, p]) for pid in g.index} for p in points(n_rounds) if p in g.columns}
        out.append((gid, (obs["initial"], partners[gid], obs)))
    return out


# -- evaluation ---------------------------------------------------------------------------------------
def _cell_text_metrics(human_msgs: pd.DataFrame, sim_msgs: pd.DataFrame, embed: Callable | None) -> pd.DataFrame:
    """Per slot (posts and final opinions): ROUGE-L, embedding similarity, |length deviation|."""
    k = ["group_id", "participant", "kind", "round"]
    keep = ["tweet", "final"]
    h = human_msgs[human_msgs["kind"].isin(keep)][k + ["text"]]
    s = sim_msgs[sim_msgs["kind"].isin(keep)][k + ["text", "on_topic"]]
    m = s.merge(h, on=k, suffixes=("", "_human"))
    m["channel"] = np.where(m["kind"] == "tweet", "public", "private")
    m["rouge_l"] = [rouge_l(p, r) for p, r in zip(m["text"], m["text_human"])]
    m["length_deviation"] = [length_deviation(p, r) for p, r in zip(m["text"], m["text_human"])]
    if embed is not None and len(m):
        m["semantic_similarity"] = cosine_rows(embed(list(m["text"].fillna(""))), embed(list(m["text_human"].fillna(""))))
    else:
        m["semantic_similarity"] = np.nan
    return m


def _on_topic_rate(ot: pd.Series) -> float:
    return float(ot.dropna().astype(float).mean()) if ot.notna().any() else float("nan")


def on_topic_by_round(labelled: pd.DataFrame) -> pd.DataFrame:
    """Public on-topic rate per (source, setup, round): the share of labelled posts (the stored
    classifier labels) judged on topic. Sources without texts (DeGroot) have no rows; unlabelled
    posts (unparsed classifier output) are counted, not scored."""
    cols = ["source", "setup", "round", "n_posts", "n_labelled", "on_topic_rate"]
    d = labelled[(labelled["kind"] == "tweet") & labelled["text"].notna()]
    rows = [{"source": src, "setup": st, "round": int(r), "n_posts": int(len(g)),
             "n_labelled": int(g["on_topic"].notna().sum()), "on_topic_rate": _on_topic_rate(g["on_topic"])}
            for (src, st, r), g in d.groupby(["source", "setup", "round"], sort=True)]
    return pd.DataFrame(rows, columns=cols)


def on_topic_change(by_round: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per "SOURCE/SETUP" cell: the on-topic rate in the first and the last round and last - first
    (the topic-drift probe: round 1 vs round 3 in the paper's three-round groups)."""
    out = {}
    for (src, st), g in by_round.groupby(["source", "setup"], sort=True):
        g = g.set_index("round")
        first, last = int(g.index.min()), int(g.index.max())
        a, b = float(g.loc[first, "on_topic_rate"]), float(g.loc[last, "on_topic_rate"])
        out[f"{src}/{st}"] = {"first_round": first, "last_round": last, "rate_first": a, "rate_last": b,
                              "change": b - a, "n_labelled_first": int(g.loc[first, "n_labelled"]),
                              "n_labelled_last": int(g.loc[last, "n_labelled"])}
    return out


def _convergence(w: pd.DataFrame, ch: str, R: int, boot: dict) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """Per-group convergence and partner gaps of one channel, with their CI summary."""
    g = group_convergence(w, ch, R)
    res = {f"delta_{m}": bootstrap_ci(g[f"delta_{m}"], **boot, resampled="group") for m in MEASURES}
    res["mean_shift"] = bootstrap_ci(g["mean_shift"], **boot, resampled="group")
    pg = partner_gap(w, ch, R)
    res["partner_gap_spearman"] = spearman(pg["gap"], pg["change"])
    return g, pg, res


def _add_distributions(summary: dict[str, Any], transitions: list[dict[str, Any]], w: pd.DataFrame, label: str,
                       R: int) -> None:
    """Endpoint distributions and SD trajectory of one cell into ``summary``; its transition
    matrices, one row per (from, to), onto ``transitions``."""
    for ch, (a, b) in channel_points(R).items():
        summary["endpoint_distribution"][f"{label}/{ch}"] = endpoint_distribution(w[b]).tolist()
        tm = transition_matrix(w[a], w[b])
        for i in range(6):
            for j in range(6):
                transitions.append({"cell": label, "channel": ch, "from": i + 1, "to": j + 1, "p": tm[i, j]})
    summary["sd_trajectory"][label] = sd_trajectory(w, R)


def _human_channel(hw: pd.DataFrame, hmsg: pd.DataFrame, ch: str, R: int, boot: dict
                   ) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """The human reference of one channel: convergence plus the on-topic rate of its messages."""
    g, pg, res = _convergence(hw, ch, R, boot)
    kind = "tweet" if ch == "public" else "final"
    res["on_topic_rate"] = _on_topic_rate(hmsg[hmsg["kind"] == kind]["on_topic"])
    return g, pg, res


def _error_metrics(hw: pd.DataFrame, sw: pd.DataFrame, g: pd.DataFrame, ch: str, R: int, boot: dict
                   ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Per-participant errors (averaged per group first: participants are nested in groups) and
    the per-group convergence error against the human groups."""
    ind = individual_errors(hw, sw, ch, R)
    per_group = ind.groupby("group_id")[["single_error", "update_error"]].mean()
    hg = group_convergence(hw, ch, R).set_index("group_id")
    conv_err = (g.set_index("group_id")["delta_sd"] - hg["delta_sd"]).abs().dropna()
    return ind, {"single_error": bootstrap_ci(per_group["single_error"], **boot, resampled="group"),
                 "update_error": bootstrap_ci(per_group["update_error"], **boot, resampled="group"),
                 "convergence_error": bootstrap_ci(conv_err, **boot, resampled="group")}


def _text_summary(txt: pd.DataFrame, ch: str, boot: dict) -> dict[str, Any]:
    """Text similarity to the human messages of one channel, per group then bootstrapped."""
    tc = txt[txt["channel"] == ch]
    per_g = tc.groupby("group_id")[["rouge_l", "semantic_similarity", "length_deviation"]].mean()
    res = {mname: bootstrap_ci(per_g[mname], **boot, resampled="group") for mname in ("rouge_l", "semantic_similarity", "length_deviation")}
    ot = tc["on_topic"]
    res["on_topic_rate"] = _on_topic_rate(ot)
    res["n_on_topic_unlabelled"] = int(ot.isna().sum())
    return res


def _topic_wilcoxon(g: pd.DataFrame, per_topic_h: pd.Series) -> dict[str, Any]:
    """Wilcoxon over topics: human vs simulated mean delta SD per topic."""
    st_topic = g.groupby("topic")["delta_sd"].mean()
    common = sorted(set(st_topic.index) & set(per_topic_h.index))
    return wilcoxon_paired(per_topic_h.loc[common], st_topic.loc[common])


def _sim_channel(hw: pd.DataFrame, sw: pd.DataFrame, txt: pd.DataFrame, ch: str, R: int, boot: dict,
                 per_topic_h: pd.Series) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """(individual errors, groups, partner gaps, summary) of one simulated cell's channel."""
    g, pg, res = _convergence(sw, ch, R, boot)
    ind, errors = _error_metrics(hw, sw, g, ch, R, boot)
    res.update(errors)
    if len(txt):
        res.update(_text_summary(txt, ch, boot))
    res["wilcoxon_topics_delta_sd"] = _topic_wilcoxon(g, per_topic_h)
    return ind, g, pg, res


_LOWER_BETTER = ("single_error", "update_error", "convergence_error", "length_deviation")
_HIGHER_BETTER = ("rouge_l", "semantic_similarity")


def _sign_tests(cells: dict[str, dict[str, Any]], sims: list[tuple[str, str]]) -> dict[str, dict[str, Any]]:
    """Sign tests between simulated sources over condition cells (setup x channel): does B beat A?"""
    out = {}
    srcs = sorted({s for s, _ in sims if s != "degroot"})
    for a, b in itertools.permutations(srcs, 2):
        tests = {}
        for mname in _LOWER_BETTER + _HIGHER_BETTER:
            diffs = []
            for (s, st) in sims:
                if s != a:
                    continue
                for ch in CHANNELS:
                    ca, cb = cells.get(f"{a}/{st}/{ch}", {}), cells.get(f"{b}/{st}/{ch}", {})
                    if mname in ca and mname in cb:
                        d = ca[mname]["mean"] - cb[mname]["mean"]
                        diffs.append(d if mname in _LOWER_BETTER else -d)
            if diffs:
                tests[mname] = sign_test(diffs)
        if tests:
            out[f"{b}_better_than_{a}"] = tests
    return out


def evaluate(labelled: pd.DataFrame, *, embed: Callable | None = None, n_boot: int = 2000, ci: float = 0.95,
             seed: int = 0) -> tuple[dict[str, Any], dict[str, pd.DataFrame]]:
    """Every metric for every simulated (source, setup) against source == "human".

    Returns (summary, tables). ``summary["cells"]["SOURCE/SETUP/CHANNEL"]`` holds the metric means
    with bootstrap CIs over groups (errors: participants nested in groups are averaged per group
    first); ``summary["human"]`` the human references; ``summary["tests"]`` Wilcoxon tests over
    topics (human vs simulated delta SD) and, between simulated sources, exact sign tests over
    condition cells (setup x channel)."""
    W = wide(labelled)
    R = n_rounds_of(W)
    hw = W[W["source"] == "human"]
    if hw.empty:
        raise InputError("evaluate: no human rows (source == 'human')")
    hmsg = labelled[labelled["source"] == "human"]
    boot = dict(n_boot=n_boot, ci=ci, seed=seed)
    summary: dict[str, Any] = {"n_rounds": R, "points": points(R), "cells": {}, "human": {}, "sd_trajectory": {},
                               "endpoint_distribution": {}, "tests": {},
                               "ci_level": ci}   # the level every interval here covers (groups resampled)
    t_ind, t_grp, t_txt, t_tr, t_pg = [], [], [], [], []

    for ch in CHANNELS:
        g, pg, res = _human_channel(hw, hmsg, ch, R, boot)
        summary["human"][ch] = res
        t_grp.append(g.assign(source="human", setup="human", channel=ch))
        t_pg.append(pg.assign(source="human", setup="human", channel=ch))
    _add_distributions(summary, t_tr, hw, "human/human", R)

    sims = [(s, st) for s, st in W[["source", "setup"]].drop_duplicates().itertuples(index=False) if s != "human"]
    per_topic_h = {ch: group_convergence(hw, ch, R).groupby("topic")["delta_sd"].mean() for ch in CHANNELS}
    for src, st in sims:
        sw = W[(W["source"] == src) & (W["setup"] == st)]
        smsg = labelled[(labelled["source"] == src) & (labelled["setup"] == st)]
        label = f"{src}/{st}"
        _add_distributions(summary, t_tr, sw, label, R)
        txt = _cell_text_metrics(hmsg, smsg, embed) if smsg["text"].notna().any() else pd.DataFrame()
        if len(txt):
            t_txt.append(txt.assign(source=src, setup=st))
        for ch in CHANNELS:
            ind, g, pg, res = _sim_channel(hw, sw, txt, ch, R, boot, per_topic_h[ch])
            summary["cells"][f"{label}/{ch}"] = res
            t_ind.append(ind.assign(source=src, setup=st, channel=ch))
            t_grp.append(g.assign(source=src, setup=st, channel=ch))
            t_pg.append(pg.assign(source=src, setup=st, channel=ch))

    summary["tests"] = _sign_tests(summary["cells"], sims)
    tables = {"individual": pd.concat(t_ind, ignore_index=True) if t_ind else pd.DataFrame(),
              "groups": pd.concat(t_grp, ignore_index=True), "partner_gap": pd.concat(t_pg, ignore_index=True),
              "text_metrics": pd.concat(t_txt, ignore_index=True) if t_txt else pd.DataFrame(),
              "transitions": pd.DataFrame(t_tr), "wide": W}
    return summary, tables
