"""``chorus roleplay stats``: the DEBATE appendix's statistics across several stored roleplay runs
(one per split and/or model), pure math over the runs' tables (``individual``, ``groups``,
``partner_gap``, ``text_metrics``), scipy for the tests.

Bars: one per (split, source, setup, channel, metric), the metric's mean over the run's units
with the SD of its bootstrap replicates. Units: groups (single-opinion and opinion-update error
are averaged per group first; convergence error is |delta SD_sim - delta SD_human| per group;
delta SD per group; the text metrics per group); the partner-gap Spearman rho is resampled by
whole groups. B = the runs' ``analysis.n_boot`` replicates from ``chorus.core.seeding`` streams of the
runs' seed, one stream per bar.

(a) Normal approximation on two bars (the paper's "conservative normal approximation on the
    aggregate bars"): z = (m_A - m_B) / sqrt(sd_A^2 + sd_B^2), m the bar's point estimate (the
    plotted mean, or rho), sd its bootstrap SD; two-sided p = 2 (1 - Phi(|z|)). The bars are
    treated as independent, which is conservative when they share groups and covary positively.
    Pairs: simulated arms of one split and channel (same setup, or DeGroot against each) on the
    errors and text metrics; every arm against the human bar on delta SD and partner-gap rho.
(b) Exact sign tests over condition cells (split x setup x channel; 8 with both splits and both
    setups), one-sided (``scipy.stats.binomtest``, p = P(K >= k | n, 1/2)), ties dropped: for each
    ordered pair of models "B better than A" per metric; and "private harder than public" per
    metric over (split x setup) cells of each model and pooled over the models.
(c) Model-level sign check: per split and setup, over the LLM models, private minus public of
    each stance error, one-sided (private harder).
(d) Fig. 12: Pearson and Spearman correlations over models (LLM models; DeGroot left out) of
    single-opinion, opinion-update and convergence error, per split, setup and channel, with n.

Where the runs do not hold what a statistic needs, ``missing`` says what and which command makes it.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd
from scipy import stats as sps

from chorus.core.config import ConfigError
from chorus.core.seeding import rng as make_rng, stable_int
from chorus.simulate.roleplay.metrics import sign_test
from chorus.core.compute import total_compute
from chorus.simulate.roleplay.experiment import open_finished
from chorus.core.runs import RunDir, run_dir_path, write_json

CHANNELS = ("public", "private")
SETUPS = ("full_dynamics", "next_message")
SPLITS = ("group", "topic")
STANCE_ERRORS = ("single_error", "update_error", "convergence_error")
TEXT_LOWER = ("length_deviation",)
TEXT_HIGHER = ("rouge_l", "semantic_similarity")
LOWER_BETTER = STANCE_ERRORS + TEXT_LOWER
BASELINES = ("human", "degroot")   # sources that are not role-play models
TABLES = ("individual", "groups", "partner_gap", "text_metrics")   # a run lacking one: see ``missing``


class StatsInputError(ConfigError):
    """The runs given cannot be analysed together (exit 2)."""


# -- the math (pure; tested by hand) ------------------------------------------------------------------
def normal_approx(m_a: float, sd_a: float, m_b: float, sd_b: float) -> dict[str, float]:
    """z = (m_a - m_b) / sqrt(sd_a^2 + sd_b^2) and two-sided p = 2 (1 - Phi(|z|)); NaN if the SD is 0."""
    se = float(np.hypot(sd_a, sd_b))
    diff = float(m_a - m_b)
    if not np.isfinite(se) or se == 0 or not np.isfinite(diff):
        return {"diff": diff, "se": se, "z": float("nan"), "p": float("nan")}
    z = diff / se
    return {"diff": diff, "se": se, "z": float(z), "p": float(2 * sps.norm.sf(abs(z)))}


def correlation(x: Iterable[float], y: Iterable[float]) -> dict[str, Any]:
    """Pearson and Spearman over the finite pairs, with n (NaN below 3 points or without spread)."""
    a, b = np.asarray(list(x), float), np.asarray(list(y), float)
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    out = {"n": int(len(a)), "pearson_r": float("nan"), "pearson_p": float("nan"),
           "spearman_rho": float("nan"), "spearman_p": float("nan")}
    if len(a) >= 3 and np.ptp(a) > 0 and np.ptp(b) > 0:
        r, s = sps.pearsonr(a, b), sps.spearmanr(a, b)
        out.update(pearson_r=float(r.statistic), pearson_p=float(r.pvalue),
                   spearman_rho=float(s.statistic), spearman_p=float(s.pvalue))
    return out


def bootstrap_sd(values: Iterable[float], n_boot: int, gen: np.random.Generator) -> float:
    """SD (ddof 1) of ``n_boot`` bootstrap means of ``values`` (NaN dropped; NaN under 2 values)."""
    a = np.asarray(list(values), float)
    a = a[~np.isnan(a)]
    if len(a) < 2 or n_boot < 2:
        return float("nan")
    means = a[gen.integers(0, len(a), size=(n_boot, len(a)))].mean(axis=1)
    return float(means.std(ddof=1))


def _rho(gap: np.ndarray, change: np.ndarray) -> float:
    ok = np.isfinite(gap) & np.isfinite(change)
    if ok.sum() < 3 or np.ptp(gap[ok]) == 0 or np.ptp(change[ok]) == 0:
        return float("nan")
    return float(sps.spearmanr(gap[ok], change[ok]).statistic)


def cluster_rho_sd(pg: pd.DataFrame, n_boot: int, gen: np.random.Generator) -> float:
    """SD of the partner-gap Spearman rho over ``n_boot`` resamples of whole groups."""
    parts = [(g["gap"].to_numpy(float), g["change"].to_numpy(float)) for _, g in pg.groupby("group_id", sort=True)]
    if len(parts) < 2 or n_boot < 2:
        return float("nan")
    reps = []
    for pick in gen.integers(0, len(parts), size=(n_boot, len(parts))):
        reps.append(_rho(np.concatenate([parts[i][0] for i in pick]), np.concatenate([parts[i][1] for i in pick])))
    reps = np.asarray(reps)
    reps = reps[np.isfinite(reps)]
    return float(reps.std(ddof=1)) if len(reps) >= 2 else float("nan")


# -- runs ----------------------------------------------------------------------------------------------
@dataclass
class Run:
    path: Path
    cfg: Any                       # RoleplayConfig
    prov: dict[str, Any]
    groups_sha: str
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)

    @property
    def split(self) -> str:
        return self.cfg.data.split

    @property
    def models(self) -> list[str]:
        return [m.label for m in self.cfg.models]


def _must_match(r: Run) -> dict[str, Any]:
    """The fields every run read together must share (what makes their numbers comparable)."""
    c = r.cfg
    return {"prompts (sha256)": r.prov.get("prompts", {}).get("sha256"),
            "data.path": c.data.path or "(the shipped fixture)",
            "data.part": c.data.part,
            "seed": c.seed,
            "generation": c.generation.model_dump(mode="json"),
            "memory": c.memory.model_dump(mode="json"),   # an ablated run is a probe (roleplay probes), not an arm
            "classifier (as resolved)": {**c.classifier.over_model(c.models[0]).model_dump(mode="json"),
                                         "max_tokens": c.classifier.max_tokens,
                                         "stance_readout": c.classifier.stance_readout},
            "analysis": c.analysis.model_dump(mode="json"),
            "versions.chorus": r.prov.get("versions", {}).get("chorus")}


def check_compatible(runs: list[Run]) -> None:
    """One line naming the first field in which two runs differ that must match."""
    first = runs[0]
    ref = _must_match(first)
    for r in runs[1:]:
        for k, v in _must_match(r).items():
            if v != ref[k]:
                raise StatsInputError(f"runs differ in {k}: {first.path} has {ref[k]!r}, {r.path} has {v!r}")
    seen: dict[tuple, Run] = {}
    profiles: dict[str, tuple[str, Run]] = {}
    for r in runs:
        key = (r.split, r.cfg.data.part)
        if key in seen and seen[key].groups_sha != r.groups_sha:
            raise StatsInputError(f"runs differ in their evaluated groups (groups.jsonl) of the {key[0]} split, part "
                                  f"{key[1]}: {seen[key].path} and {r.path} (data.limit or the data file differ)")
        seen.setdefault(key, r)
        for m in r.cfg.models:
            if m.label in profiles and profiles[m.label][0] != m.profile:
                raise StatsInputError(f"runs differ in models[{m.label}].profile: {profiles[m.label][1].path} has "
                                      f"{profiles[m.label][0]!r}, {r.path} has {m.profile!r}")
            profiles.setdefault(m.label, (m.profile, r))
    for a, b in itertools.combinations(runs, 2):
        both = set(a.models) & set(b.models)
        if (a.split, a.cfg.data.part) == (b.split, b.cfg.data.part) and both:
            raise StatsInputError(f"models {sorted(both)} appear twice in the {a.split} split ({a.path}, {b.path}): "
                                  f"give one run per model and split")


# -- bars -------------------------------------------------------------------------------------------------
def _per_group_values(r: Run) -> pd.DataFrame:
    """Long table (source, setup, channel, metric, group_id, value) of every per-group metric."""
    out = []
    ind = r.tables.get("individual")
    if ind is not None and len(ind):
        pg = ind.groupby(["source", "setup", "channel", "group_id"])[["single_error", "update_error"]].mean()
        out.append(pg.reset_index().melt(["source", "setup", "channel", "group_id"], var_name="metric"))
    g = r.tables.get("groups")
    if g is not None and len(g):
        out.append(g[["source", "setup", "channel", "group_id", "delta_sd"]].rename(columns={"delta_sd": "value"})
                   .assign(metric="delta_sd"))
        h = g[g["source"] == "human"].set_index(["channel", "group_id"])["delta_sd"]
        s = g[g["source"] != "human"].copy()
        s["value"] = (s["delta_sd"] - pd.Series(list(zip(s["channel"], s["group_id"]))).map(h).to_numpy()).abs()
        out.append(s[["source", "setup", "channel", "group_id", "value"]].assign(metric="convergence_error"))
    t = r.tables.get("text_metrics")
    if t is not None and len(t):
        cols = [c for c in TEXT_LOWER + TEXT_HIGHER if c in t.columns]
        pt = t.groupby(["source", "setup", "channel", "group_id"])[cols].mean()
        out.append(pt.reset_index().melt(["source", "setup", "channel", "group_id"], var_name="metric"))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(
        columns=["source", "setup", "channel", "group_id", "metric", "value"])


def bars(runs: list[Run]) -> pd.DataFrame:
    """One row per (split, source, setup, channel, metric): mean (rho), bootstrap SD, n (groups; for the
    rho participants), n_groups, run."""
    rows = []
    for r in runs:
        B, seed = r.cfg.analysis.n_boot, r.cfg.seed
        vals = _per_group_values(r)
        for (src, st, ch, m), d in vals.groupby(["source", "setup", "channel", "metric"], sort=True):
            if src == "human" and rows and any(x["split"] == r.split and x["source"] == "human" and x["channel"] == ch
                                               and x["metric"] == m for x in rows):
                continue   # the human bar of a split once, from its first run
            key = f"{r.split}/{src}/{st}/{ch}/{m}"
            v = d["value"].to_numpy(float)
            rows.append({"split": r.split, "source": src, "setup": st, "channel": ch, "metric": m,
                         "mean": float(np.nanmean(v)) if np.isfinite(v).any() else float("nan"),
                         "boot_sd": bootstrap_sd(v, B, make_rng(seed, stable_int(key))),
                         "n": int(np.isfinite(v).sum()), "n_groups": int(d.loc[np.isfinite(v), "group_id"].nunique()),
                         "n_boot": B, "run": str(r.path)})
        pg = r.tables.get("partner_gap")
        if pg is not None and len(pg):
            for (src, st, ch), d in pg.groupby(["source", "setup", "channel"], sort=True):
                if src == "human" and any(x["split"] == r.split and x["source"] == "human" and x["channel"] == ch
                                          and x["metric"] == "partner_gap_spearman" for x in rows):
                    continue
                key = f"{r.split}/{src}/{st}/{ch}/partner_gap_spearman"
                rows.append({"split": r.split, "source": src, "setup": st, "channel": ch,
                             "metric": "partner_gap_spearman",
                             "mean": _rho(d["gap"].to_numpy(float), d["change"].to_numpy(float)),
                             "boot_sd": cluster_rho_sd(d, B, make_rng(seed, stable_int(key))),
                             "n": int(d[["gap", "change"]].notna().all(axis=1).sum()),
                             "n_groups": int(d["group_id"].nunique()), "n_boot": B, "run": str(r.path)})
    return pd.DataFrame(rows, columns=["split", "source", "setup", "channel", "metric", "mean", "boot_sd", "n",
                                       "n_groups", "n_boot", "run"])


# -- (a) normal approximation ---------------------------------------------------------------------
def normal_tests(b: pd.DataFrame) -> pd.DataFrame:
    rows = []
    human_metrics = ("delta_sd", "partner_gap_spearman")
    for (split, ch, m), d in b.groupby(["split", "channel", "metric"], sort=True):
        arms = d[d["source"] != "human"].to_dict("records")
        pairs = [(x, y) for x, y in itertools.combinations(arms, 2)
                 if x["setup"] == y["setup"] or "degroot" in (x["source"], y["source"])]
        if m in human_metrics:
            pairs += [(x, h) for h in d[d["source"] == "human"].to_dict("records") for x in arms]
        for x, y in pairs:
            rows.append({"split": split, "channel": ch, "metric": m, "a": f"{x['source']}/{x['setup']}",
                         "b": f"{y['source']}/{y['setup']}", "mean_a": x["mean"], "sd_a": x["boot_sd"],
                         "mean_b": y["mean"], "sd_b": y["boot_sd"],
                         **normal_approx(x["mean"], x["boot_sd"], y["mean"], y["boot_sd"]),
                         "runs": sorted({x["run"], y["run"]})})
    return pd.DataFrame(rows)


# -- (b) sign tests over condition cells ----------------------------------------------------------
def _llm_bars(b: pd.DataFrame) -> pd.DataFrame:
    return b[~b["source"].isin(BASELINES)]


def _better(m: str, x: float, y: float) -> float:
    """Positive when y is better than x."""
    return x - y if m in LOWER_BETTER else y - x


def cell_sign_tests(b: pd.DataFrame) -> pd.DataFrame:
    """Per ordered pair (A, B) of models and metric: B better than A over split x setup x channel
    cells; per model (and pooled over models) and metric: private harder than public over split x
    setup cells."""
    rows = []
    llm = _llm_bars(b)
    metrics = [m for m in LOWER_BETTER + TEXT_HIGHER if m in set(llm["metric"])]
    idx = llm.set_index(["source", "split", "setup", "channel", "metric"])
    models = sorted(set(llm["source"]))
    for a, bb in itertools.permutations(models, 2):
        for m in metrics:
            cells, diffs, runs = [], [], set()
            for sp, st, ch in itertools.product(SPLITS, SETUPS, CHANNELS):
                ka, kb = (a, sp, st, ch, m), (bb, sp, st, ch, m)
                if ka in idx.index and kb in idx.index:
                    cells.append(f"{sp}/{st}/{ch}")
                    diffs.append(_better(m, idx.loc[ka, "mean"], idx.loc[kb, "mean"]))
                    runs |= {idx.loc[ka, "run"], idx.loc[kb, "run"]}
            if cells:
                rows.append({"test": f"{bb}_better_than_{a}", "metric": m, **sign_test(diffs), "cells": cells,
                             "runs": sorted(runs)})
    for who in models + ["all models"]:
        for m in metrics:
            cells, diffs, runs = [], [], set()
            for src in (models if who == "all models" else [who]):
                for sp, st in itertools.product(SPLITS, SETUPS):
                    kpub, kpri = (src, sp, st, "public", m), (src, sp, st, "private", m)
                    if kpub in idx.index and kpri in idx.index:
                        cells.append(f"{src}/{sp}/{st}")
                        diffs.append(_better(m, idx.loc[kpub, "mean"], idx.loc[kpri, "mean"]) * -1)
                        runs |= {idx.loc[kpub, "run"], idx.loc[kpri, "run"]}
            if cells and not (who == "all models" and len(models) < 2):
                rows.append({"test": f"private_harder/{who}", "metric": m, **sign_test(diffs), "cells": cells,
                             "runs": sorted(runs)})
    return pd.DataFrame(rows)


# -- (c) model-level sign check -----------------------------------------------------------------------
def model_sign_check(b: pd.DataFrame) -> pd.DataFrame:
    """Per split and setup, over models: private error above public error (one-sided)."""
    rows = []
    llm = _llm_bars(b)
    for (sp, st, m), d in llm[llm["metric"].isin(STANCE_ERRORS)].groupby(["split", "setup", "metric"], sort=True):
        w = d.pivot_table(index="source", columns="channel", values="mean", aggfunc="first")
        if not set(CHANNELS) <= set(w.columns):
            continue
        diffs = (w["private"] - w["public"]).dropna()
        rows.append({"split": sp, "setup": st, "metric": m, **sign_test(diffs), "models": list(diffs.index),
                     "runs": sorted(set(d["run"]))})
    return pd.DataFrame(rows)


# -- (d) Fig. 12 correlations -----------------------------------------------------------------------
def error_correlations(b: pd.DataFrame) -> pd.DataFrame:
    rows = []
    llm = _llm_bars(b)
    for (sp, st, ch), d in llm[llm["metric"].isin(STANCE_ERRORS)].groupby(["split", "setup", "channel"], sort=True):
        w = d.pivot_table(index="source", columns="metric", values="mean", aggfunc="first")
        for x, y in itertools.combinations(STANCE_ERRORS, 2):
            if x in w.columns and y in w.columns:
                rows.append({"split": sp, "setup": st, "channel": ch, "x": x, "y": y, **correlation(w[x], w[y]),
                             "models": list(w.index), "runs": sorted(set(d["run"]))})
    return pd.DataFrame(rows)


# -- what is missing --------------------------------------------------------------------------------
def _min_n(alpha: float = 0.05) -> int:
    """The fewest cells (or models) at which an all-one-way one-sided sign test reaches p < alpha."""
    return next(n for n in range(1, 64) if 0.5 ** n < alpha)


def missing(runs: list[Run], b: pd.DataFrame) -> list[dict[str, str]]:
    """What the statistics need that the runs do not hold, each with the command that makes it."""
    data = f" --set data.path={runs[0].cfg.data.path}" if runs[0].cfg.data.path else ""   # null: the fixture
    out = []
    splits = {r.split for r in runs}
    setups = {s for r in runs for s in r.cfg.setups}
    llm = sorted(set(_llm_bars(b)["source"]))
    for sp in SPLITS:
        if sp not in splits:
            cfg = "topic" if sp == "topic" else "default"
            out.append({"statistic": "sign tests over the 8 condition cells; the " + sp + "-split rows of every test",
                        "missing": f"no run of the {sp} split", "command":
                        f"chorus roleplay run {cfg}{data} --set data.split={sp} (same models)"})
    for st in SETUPS:
        if st not in setups:
            out.append({"statistic": "sign tests over the 8 condition cells", "missing": f"no {st} setup in any run",
                        "command": f"chorus roleplay run CONFIG --set setups=[full_dynamics,next_message]"})
    if len(llm) < 2:
        out.append({"statistic": "model-pair sign tests (e.g. SFT better than base); model-pair normal tests",
                    "missing": f"only {len(llm)} role-play model ({', '.join(llm) or 'none'})", "command":
                    f"chorus sft train default{data} --set compare=default (base and SFT in one run)"})
    n1 = _min_n()
    few = b[b["n_groups"] < 2]
    if len(few):
        out.append({"statistic": "normal approximation (a): the bootstrap SD of a bar",
                    "missing": f"{len(few)} of {len(b)} bars rest on fewer than 2 groups (e.g. "
                               f"{few.iloc[0]['split']}/{few.iloc[0]['source']}/{few.iloc[0]['setup']}/"
                               f"{few.iloc[0]['channel']}/{few.iloc[0]['metric']}), so z and p are NaN",
                    "command": "chorus roleplay run CONFIG without data.limit (or a larger one)"})
    lb = _llm_bars(b)
    per = {sp: sorted(set(lb[lb["split"] == sp]["source"])) for sp in splits}
    for sp, ms in sorted(per.items()):
        if len(ms) < 3:
            out.append({"statistic": f"Fig. 12 correlations over models ({sp} split)",
                        "missing": f"{len(ms)} model(s) ({', '.join(ms)}); a correlation needs at least 3",
                        "command": f"chorus roleplay run default{data} --set data.split={sp} "
                                   "--set 'models=[{label: NAME, profile: PROFILE}, ...]'"})
        if len(ms) < n1:
            out.append({"statistic": f"model-level sign check ({sp} split)",
                        "missing": f"{len(ms)} model(s); a one-sided sign test reaches p < 0.05 only from {n1} models",
                        "command": f"chorus roleplay run default{data} --set data.split={sp} "
                                   "--set 'models=[...]' (more models)"})
    return out


# -- compute -----------------------------------------------------------------------------------------
def compute_table(runs: list[Run]) -> tuple[pd.DataFrame, dict[str, Any]]:
    rows = []
    for r in runs:
        t = total_compute(r.prov)
        rows.append({"run": str(r.path), "recorded": t is not None, **({k: v for k, v in t.items() if k != "devices"}
                                                                        | {"devices": "; ".join(t["devices"])} if t else {})})
    df = pd.DataFrame(rows)
    rec = [x for x in rows if x["recorded"]]
    total = {"runs": len(runs), "runs_with_compute": len(rec),
             "wall_s": float(sum(x["wall_s"] for x in rec)), "cpu_core_s": float(sum(x["cpu_core_s"] for x in rec)),
             "gpu_hours": float(sum(x["gpu_hours"] for x in rec)),
             "not_recorded": [x["run"] for x in rows if not x["recorded"]]}
    return df, total


# -- all of it ------------------------------------------------------------------------------------------
def analyse(paths: list[str | Path]) -> tuple[dict[str, Any], dict[str, pd.DataFrame]]:
    """(stats.json content, tables) for the runs at ``paths``."""
    if not paths:
        raise StatsInputError("give at least one roleplay run directory")
    runs = [Run(f.path, f.cfg, f.prov, f.groups_sha, f.tables)
            for f in (open_finished(p, StatsInputError, optional=TABLES) for p in paths)]
    check_compatible(runs)
    b = bars(runs)
    tables = {"bars": b, "normal_tests": normal_tests(b), "sign_tests": cell_sign_tests(b),
              "model_sign_check": model_sign_check(b), "correlations": error_correlations(b)}
    ctab, ctotal = compute_table(runs)
    tables["compute"] = ctab
    out = {"runs": [{"path": str(r.path), "split": r.split, "part": r.cfg.data.part, "models": r.models,
                     "setups": r.cfg.setups, "synthetic_data": bool(r.prov.get("data", {}).get("synthetic"))}
                    for r in runs],
           "method": __doc__.split("\n\n", 2)[2].split("\nWhere")[0],
           **{k: v.to_dict("records") for k, v in tables.items() if k != "compute"},
           "missing": missing(runs, b), "compute": {"total": ctotal, "per_run": ctab.to_dict("records")}}
    return out, tables


# -- files ----------------------------------------------------------------------------------------------
def _f(v: Any) -> str:
    if isinstance(v, float):
        return "nan" if v != v else f"{v:.4g}"
    if isinstance(v, list):
        return ", ".join(map(str, v))
    return str(v)


def _md_table(df: pd.DataFrame, cols: list[str]) -> list[str]:
    if df is None or not len(df):
        return ["(none)", ""]
    cols = [c for c in cols if c in df.columns]
    return (["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            + ["| " + " | ".join(_f(r[c]) for c in cols) + " |" for r in df.to_dict("records")] + [""])


def markdown(s: dict[str, Any], tables: dict[str, pd.DataFrame]) -> str:
    c = s["compute"]["total"]
    lines = ["# Role-play statistics across runs", ""]
    lines += [f"- `{r['path']}`: {r['split']} split ({r['part']}), models {', '.join(r['models'])}, setups "
              f"{', '.join(r['setups'])}" + (" (SYNTHETIC data)" if r["synthetic_data"] else "") for r in s["runs"]]
    lines += ["", "## Method", "", s["method"], "",
              "## Compute of the runs read", "",
              f"{c['runs_with_compute']} of {c['runs']} runs recorded their compute: {_f(c['wall_s'])} wall s, "
              f"{_f(c['cpu_core_s'])} CPU core-s, {_f(c['gpu_hours'])} GPU-hours"
              + (f"; not recorded: {', '.join(c['not_recorded'])}" if c["not_recorded"] else "") + ".", ""]
    lines += ["## (a) Normal approximation on the bars", ""] + _md_table(
        tables["normal_tests"], ["split", "channel", "metric", "a", "b", "mean_a", "sd_a", "mean_b", "sd_b", "z", "p"])
    lines += ["## (b) Exact sign tests over condition cells (one-sided)", ""] + _md_table(
        tables["sign_tests"], ["test", "metric", "k", "n", "ties", "p", "cells"])
    lines += ["## (c) Model-level sign check: private error above public (one-sided)", ""] + _md_table(
        tables["model_sign_check"], ["split", "setup", "metric", "k", "n", "ties", "p", "models"])
    lines += ["## (d) Cross-model correlations of the stance errors (Fig. 12)", ""] + _md_table(
        tables["correlations"], ["split", "setup", "channel", "x", "y", "n", "pearson_r", "pearson_p", "spearman_rho",
                                 "spearman_p", "models"])
    lines += ["## Missing: what these runs cannot answer, and the command that makes it", ""]
    lines += [f"- {m['statistic']}: {m['missing']}. Run: `{m['command']}`" for m in s["missing"]] or ["(nothing)"]
    return "\n".join(lines) + "\n"


def table_for_parquet(df: pd.DataFrame) -> pd.DataFrame:
    """A statistics table as stored: list cells (runs, cells, models) as one comma-separated string."""
    return df.assign(**{c: df[c].map(_f) for c in ("runs", "cells", "models") if c in df})


def write_stats(paths: list[str | Path], out: str | Path | None = None, make_plots: bool = True
                ) -> tuple[Path, dict[str, Any]]:
    """``chorus roleplay stats`` from Python: its sealed analysis run (summary.json, stats.md, tables/*.parquet,
    plots/errors.png) at ``out``; returns (run directory, summary)."""
    from chorus.core.analyses import get_analysis
    import chorus.simulate.roleplay.analyses  # noqa: F401  (registers the analysis)
    r = get_analysis("roleplay stats").run({"runs": [str(p) for p in paths]}, out, plots=make_plots)
    return r.path, r.summary
