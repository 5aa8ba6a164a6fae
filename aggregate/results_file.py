"""The one results file of an aggregate run (``RUN/results.json``) and its markdown rendering
(``RUN/results.md``): written by ``chorus.aggregate.experiments``, read and re-rendered by
``chorus.aggregate.results.verify``. Below both, so that neither imports the other back."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Sequence

from chorus.aggregate.errors import VerifyError
from chorus.core.runs import write_json

RESULTS = "results.json"


def write_results(run_dir: Path, results: dict[str, Any]) -> Path:

    path = Path(run_dir) / RESULTS
    write_json(path, results)
    return path


def read_results(run_dir: str | Path) -> dict[str, Any]:
    p = Path(run_dir)
    if p.is_dir():
        p = p / RESULTS
    if not p.is_file():
        raise VerifyError(f"no results file at {p}")
    return json.loads(p.read_text())


# -- markdown ----------------------------------------------------------------------------------
def _f(x: Any, nd: int = 4) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        return f"{x:.{nd}f}"
    return str(x)


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(_f(v) for v in r) + " |")
    return "\n".join(lines)


METRIC_COLS = [("accuracy", "accuracy"), ("ece_ew", "ECE ew (10)"), ("ece_em", "ECE em (15)"),
               ("brier", "Brier"), ("mean_confidence", "mean conf."), ("n", "n")]


def render_markdown(results: dict[str, Any]) -> str:
    """Markdown tables generated from the results dict alone (no number typed by hand)."""
    kind = results["kind"]
    cfg = results["config"]
    out = [f"# chorus aggregate {kind}: {results['name']}", "",
           f"Generated from `results.json` ({results['schema']}); seed {cfg['seed']}, "
           f"protocol `{cfg['protocol']}`, {cfg['outer_folds']} outer / {cfg['inner_folds']} inner folds.", ""]
    if kind == "run":
        c = results["cells"][0]
        out += [f"Traces: {c['n_traces']} (K = {c['K']}, candidates {c['candidates']}, agents "
                f"{c['agents']}; {c['n_questions']} questions); rejected moves: "
                f"{c['protocol']['rejected']}; label budget: {c['params']['label_budget'] or 'all training labels'}.",
                "", "## Held-out metrics (nested cross-validation)", ""]
        out.append(_table(["method"] + [h for _, h in METRIC_COLS],
                          [[m] + [v[k] for k, _ in METRIC_COLS] for m, v in c["metrics"].items()]))
        for key, title in (("bootstrap", "Paired bootstrap"),
                           ("bootstrap_clustered", "Question-clustered paired bootstrap"),
                           ("bootstrap_seed_clustered", "Seed-clustered paired bootstrap")):
            rows = c.get(key)
            if not rows:
                continue
            n = rows[0]["n_resamples"]
            out += ["", f"## {title} ({n} resamples; delta = A - B; p_win = P(A better))", ""]
            if key == "bootstrap_seed_clustered":
                out += [f"Two-way: each resample draws the {rows[0]['n_seeds']} generation seeds and the "
                        f"{rows[0]['n_clusters']} questions with replacement; a task weighs (its seed's draws) x "
                        f"(its question's draws).", ""]
            out.append(_table(["A", "B", "metric", "delta", "CI low", "CI high", "p_win"],
                              [[r["a"], r["b"], r["metric"], r["delta"], r["ci_low"], r["ci_high"],
                                r["p_win"]] for r in rows]))
        hp_rows = [r for r in c["folds"] if any(k.startswith("hp_") for k in r)]
        if hp_rows:
            keys = sorted({k for r in hp_rows for k in r if k.startswith("hp_")})
            out += ["", "## Hyperparameters chosen per outer fold (inner CV on Brier)", ""]
            out.append(_table(["method", "fold"] + [k[3:] for k in keys],
                              [[r["method"], r["fold"]] + [r.get(k) for k in keys] for r in hp_rows]))
        # per-seat rows only (a finer reliability key's r are per pseudo-seat: in results.json, not here)
        rel = [r for r in c["folds"] if any(f"r[{a}]" in r for a in c["agents"])
               and not r["method"].endswith("+iso")]
        if rel:
            agents = c["agents"]
            out += ["", "## Fitted seat reliabilities r_i per outer fold", ""]
            out.append(_table(["method", "fold"] + agents,
                              [[r["method"], r["fold"]] + [r.get(f"r[{a}]") for a in agents] for r in rel]))
    else:
        methods = list(results["cells"][0]["metrics"]) if results["cells"] else []
        pkeys = [k for k in results["cells"][0]["params"] if k != "n_calibration"] if results["cells"] else []
        for metric, title in (("accuracy", "Accuracy"), ("ece_ew", "ECE (10 equal-width bins)"),
                              ("brier", "Brier")):
            out += ["", f"## {title}", ""]
            out.append(_table(pkeys + methods,
                              [[c["params"][k] for k in pkeys] + [c["metrics"][m][metric] for m in methods]
                               for c in results["cells"]]))
        if kind == "sleeper":
            out += ["", f"Calibration window: {cfg['n_calibration']} tasks; deployment: {cfg['n_deploy']} "
                        f"tasks under the {cfg['adversary']['kind']} k={cfg['adversary']['k']} adversary "
                        f"(p_wrong={cfg['adversary']['p_wrong']})."]
    return "\n".join(out) + "\n"
