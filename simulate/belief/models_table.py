"""The belief-layer paper's Tables 2 and 3 across models: one table over several models' runs.

Each run directory is read as ``chorus belief recompute`` leaves it (``summary.json``, recomputed from
the run's files when missing, ``provenance.json``). Runs are grouped by model (``oracle`` for oracle
mode). Table 2, one column per model, one row per metric:

* pooled over all of a model's runs, from their tables: the channel alignment (Pearson of the
  appraised evidence e against the speaker's belief s over every utterance), the belief-probe
  correlation, the appraisal failure rate; the appraiser temperature tau from provenance (one
  value, or every distinct value joined);
* from the run that supplies it: the DeGroot landing beside its initial mean, FJ persistence and
  R^2, the committed-minority dose-response's monotone / smooth verdicts (the first run given that
  has each population), and kappa recovery (pooled Spearman, the per-seed minimum, the median
  relative error, from the run with the most kappa levels).

``sources`` names the run behind every cell. Table 3: per model, the median recovered kappa of each
prescribed kappa (at the kappa run's gamma), with its run-clustered interval. Pure reading: no model call.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from .analysis import pearson
from chorus.core.runs import RunDir
from chorus.core.config import InputError

POOLED = ("channel_pearson", "belief_probe_r", "appraisal_failure_rate")
FROM_RUN = ("degroot_initial_mean", "degroot_landing", "fj_persists", "fj_r2", "committed_monotone",
            "committed_smooth")
KAPPA = ("kappa_spearman", "kappa_spearman_by_seed_min", "kappa_spearman_every_seed_one", "kappa_median_rel_error")
ROWS = ("runs", "appraiser_tau", *POOLED, *FROM_RUN, *KAPPA)


class TableError(InputError):
    """A run that cannot be read into the table (one line naming it)."""


def _read(run_dir: Path) -> dict[str, Any]:
    if not (run_dir / "config.yaml").is_file():
        raise TableError(f"{run_dir}: not a belief run directory (no config.yaml)")
    s = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").is_file() else None
    if s is None or "headline" not in s or "kappa_recovery" not in s:
        from .experiment import report
        s = report(run_dir, make_plots=False)
    prov = json.loads((run_dir / "provenance.json").read_text()) if (run_dir / "provenance.json").is_file() else {}
    run = RunDir(run_dir)
    ut = run.read_table("utterances") if (run_dir / "tables" / "utterances.parquet").is_file() else pd.DataFrame()
    bel = run.read_table("beliefs") if (run_dir / "tables" / "beliefs.parquet").is_file() else pd.DataFrame()
    model = s.get("model") or ("oracle" if s.get("mode") == "oracle" else None)
    if isinstance(model, dict):  # a model spec: its profile (or local folder) names it
        model = model.get("profile") or model.get("path")
    if model is None:
        raise TableError(f"{run_dir}: its summary names no model (mode {s.get('mode')!r})")
    return {"path": str(run_dir), "model": str(model), "summary": s, "tau": prov.get("appraiser_tau"),
            "utterances": ut, "beliefs": bel}


def models_tables(run_dirs: Sequence[str | Path]) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, dict[str, str]]]:
    """(Table 2: metric x model, Table 3: model x prescribed kappa (long form), sources: model -> metric ->
    run) over the runs, in the order given."""
    if not run_dirs:
        raise TableError("no run directory given")
    runs = [_read(Path(p)) for p in run_dirs]
    models = list(dict.fromkeys(r["model"] for r in runs))
    cols: dict[str, dict[str, Any]] = {}
    sources: dict[str, dict[str, str]] = {}
    t3 = []
    for m in models:
        mine = [r for r in runs if r["model"] == m]
        col: dict[str, Any] = {"runs": len(mine)}
        src: dict[str, str] = {}
        taus = sorted({float(r["tau"]) for r in mine if r["tau"] is not None})
        col["appraiser_tau"] = (taus[0] if len(taus) == 1 else ", ".join(f"{t:g}" for t in taus)) if taus else None
        ut = pd.concat([r["utterances"] for r in mine if len(r["utterances"])], ignore_index=True) \
            if any(len(r["utterances"]) for r in mine) else pd.DataFrame()
        bel = pd.concat([r["beliefs"] for r in mine if len(r["beliefs"])], ignore_index=True) \
            if any(len(r["beliefs"]) for r in mine) else pd.DataFrame()
        col["channel_pearson"] = pearson(ut.s, ut.e) if len(ut) else None
        col["belief_probe_r"] = pearson(bel.b, bel.probe) if len(bel) and "probe" in bel else None
        col["appraisal_failure_rate"] = float(ut.failed.mean()) if len(ut) and "failed" in ut else None
        for k in POOLED:
            src[k] = "pooled over " + ", ".join(r["path"] for r in mine)
        for k in FROM_RUN:
            r = next((r for r in mine if r["summary"]["headline"].get(k) is not None), None)
            col[k] = r["summary"]["headline"][k] if r else None
            if r:
                src[k] = r["path"]
        kr = max(mine, key=lambda r: r["summary"]["headline"].get("kappa_levels") or 0)
        for k in KAPPA:
            col[k] = kr["summary"]["headline"].get(k)
            src[k] = kr["path"]
        g0 = kr["summary"]["headline"].get("gamma")
        for row in kr["summary"].get("kappa_recovery") or []:
            if row.get("gamma") == g0 and row.get("kappa_hat_median") is not None:
                t3.append({"model": m, "kappa": row["kappa"], "kappa_hat_median": row["kappa_hat_median"],
                           "ci_low": row.get("kappa_hat_ci_low"), "ci_high": row.get("kappa_hat_ci_high"),
                           "level": _level(row), "gamma": g0, "run": kr["path"]})
        cols[m], sources[m] = col, src
    t2 = pd.DataFrame({m: [cols[m].get(k) for k in ROWS] for m in models}, index=list(ROWS))
    t2.index.name = "metric"
    t3df = pd.DataFrame(t3, columns=["model", "kappa", "kappa_hat_median", "ci_low", "ci_high", "level", "gamma",
                                     "run"])
    if len(t3df):  # a kappa level seen in several conditions: their median, as the pooled headline does
        t3df = t3df.groupby(["model", "kappa"], sort=False, as_index=False).agg(
            kappa_hat_median=("kappa_hat_median", "median"), ci_low=("ci_low", "median"),
            ci_high=("ci_high", "median"), level=("level", "first"), gamma=("gamma", "first"), run=("run", "first"))
    return t2, t3df, sources


def _level(row: dict[str, Any]) -> str:
    """What a kappa level's interval resampled and how many units ("95%, 12 runs resampled"), or why it
    is refused (fewer than ``MIN_UNITS`` runs), or "level not recorded" for a run made before it was."""
    from chorus.core.stats import record_level
    rec = {"lo": row.get("kappa_hat_ci_low"), "hi": row.get("kappa_hat_ci_high"),
           "resampled": row.get("kappa_hat_ci_resampled"), "n_units": row.get("kappa_hat_ci_units"),
           "ci_refused": row.get("kappa_hat_ci_refused")}
    level, refused = record_level(rec, lo="lo", hi="hi", ci=row.get("kappa_hat_ci_level") or 0.95)
    return f"refused: {level}" if refused else level


def wide_table3(t3: pd.DataFrame) -> pd.DataFrame:
    """Table 3 as the paper prints it: one row per model, one column per prescribed kappa."""
    if not len(t3):
        return pd.DataFrame()
    w = t3.pivot(index="model", columns="kappa", values="kappa_hat_median")
    w.columns = [f"{c:g}" for c in w.columns]
    return w.reindex(list(dict.fromkeys(t3["model"])))


def fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "–"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (float, np.floating)):
        return f"{v:.3f}"
    return str(v)
