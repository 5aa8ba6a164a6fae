"""``chorus roleplay annotators RUN -m/--model PROFILE [...]``: annotator robustness. The run's
stored texts (every unique (topic, text) its classifier labelled) are labelled again, stance and
on-topic, by each other classifier model through the run's own classification path
(``classify.classify_texts``, same prompts, max_tokens and stance readout) and the run's call store
(a rerun makes no model calls). Reported against the run's own classifier:

* Cohen's kappa (``sklearn.metrics.cohen_kappa_score``, unweighted) on the stance labels 1-6 and on
  on-topic yes/no, overall and per label (one-vs-rest: "label k or not" for each rater), plus the
  quadratic-weighted stance kappa (the scale is ordinal). Stance labels are the guided-choice
  labels as the classifier answered (agreement with the statement, before reverse coding), also
  under the ``expected`` readout, whose continuous value is not a category. Texts either classifier
  left unparsed are dropped from that kappa and counted. Undefined kappas (a label neither rater, or
  only one constant rater, used) are NaN.
* The confusion matrices (rows: the run's classifier, columns: the other).
* The headline metrics (``experiment.recompute``: the run's stance errors, convergence, delta SD,
  partner-gap rho, on-topic rate, the classifier's parse rates and its fit to the human sliders,
  DeGroot's alpha) under each classifier side by side, the run's own recomputed from its labels.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

from chorus.core.config import ConfigError
from chorus.serving.profiles import ModelError, get_profile
from chorus.serving.standing import standing
from chorus.simulate.roleplay.classify import classify_texts
from chorus.simulate.roleplay.experiment import open_finished, recompute
from chorus.simulate.roleplay.prompts import load_prompts

STANCE_LABELS = (1, 2, 3, 4, 5, 6)
ON_TOPIC_LABELS = (True, False)
CELL_METRICS = ("single_error", "update_error", "convergence_error", "delta_sd", "partner_gap_spearman",
                "on_topic_rate")
HUMAN_METRICS = ("delta_sd", "partner_gap_spearman", "on_topic_rate")


class AnnotatorInputError(ConfigError):
    """Not a roleplay run, an unknown profile, or the run's own classifier (exit 2)."""


# -- the math (pure; tested by hand) ------------------------------------------------------------------
def _kappa(a: np.ndarray, b: np.ndarray, labels: list, weights: str | None = None) -> float:
    from sklearn.exceptions import UndefinedMetricWarning
    from sklearn.metrics import cohen_kappa_score
    if not len(a):
        return float("nan")
    with warnings.catch_warnings():   # undefined (one label in common): NaN, said in the docstring
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(cohen_kappa_score(a, b, labels=labels, weights=weights, replace_undefined_by=np.nan))


def kappa_table(a: Iterable, b: Iterable, labels: Iterable) -> dict[str, Any]:
    """Agreement of rater ``a`` (the run's classifier) with ``b`` on paired items; None / NaN in
    either drops the pair. Overall and one-vs-rest per-label kappa, observed agreement, and the
    confusion matrix (rows: a, columns: b, in ``labels`` order)."""
    labels = list(labels)
    idx = {k: i for i, k in enumerate(labels)}   # sklearn wants plain ints, not an object array
    x, y = list(a), list(b)
    keep = [i for i in range(len(x)) if _present(x[i]) and _present(y[i]) and x[i] in idx and y[i] in idx]
    xa, ya = np.array([idx[x[i]] for i in keep], int), np.array([idx[y[i]] for i in keep], int)
    every = list(range(len(labels)))
    per = {}
    for i, k in enumerate(labels):
        xk, yk = (xa == i).astype(int), (ya == i).astype(int)
        per[str(k)] = {"kappa": _kappa(xk, yk, [1, 0]), "n_a": int(xk.sum()), "n_b": int(yk.sum())}
    conf = [[int(((xa == i) & (ya == j)).sum()) for j in every] for i in every]
    return {"n": len(keep), "n_dropped": len(x) - len(keep),
            "agreement": float(np.mean(xa == ya)) if len(keep) else float("nan"),
            "kappa": _kappa(xa, ya, every), "per_label": per, "labels": [str(k) for k in labels], "confusion": conf}


def _present(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and np.isnan(v))


def _categorical(labels: pd.DataFrame) -> pd.DataFrame:
    """(topic, text, stance, on_topic): the guided-choice stance label as an int and on-topic as a
    bool, None where the classifier's output did not parse."""
    col = labels["stance_choice"] if "stance_choice" in labels else labels["stance_raw"]
    return pd.DataFrame({"topic": labels["topic"], "text": labels["text"],
                         "stance": col.map(lambda v: int(v) if _present(v) and float(v).is_integer() else None),
                         "on_topic": labels["on_topic"].map(lambda v: bool(v) if _present(v) else None)})


def agreement(own: pd.DataFrame, other: pd.DataFrame) -> dict[str, Any]:
    """Stance and on-topic agreement between two label tables (``classify_texts`` format), paired
    on (topic, text); texts only one table holds are counted, not paired."""
    m = _categorical(own).merge(_categorical(other), on=["topic", "text"], how="inner", suffixes=("_a", "_b"))
    st = kappa_table(m["stance_a"], m["stance_b"], STANCE_LABELS)
    ok = m["stance_a"].map(_present) & m["stance_b"].map(_present)
    st["kappa_quadratic"] = _kappa(m.loc[ok, "stance_a"].astype(int).to_numpy(), m.loc[ok, "stance_b"].astype(int).to_numpy(),
                                   list(STANCE_LABELS), "quadratic")   # w_ij = (i - j)^2: the scale is ordinal
    ot = kappa_table(m["on_topic_a"], m["on_topic_b"], ON_TOPIC_LABELS)
    return {"n_paired_texts": int(len(m)), "n_unpaired_texts": int(len(own) + len(other) - 2 * len(m)),
            "stance": st, "on_topic": ot}


def headline(summary: dict[str, Any]) -> dict[str, float]:
    """The summary's headline numbers, flat: {"CELL/metric": value} (the mean of a CI metric, rho of
    a correlation), the human references, and the classifier's own checks."""
    def val(v: Any) -> float:
        if isinstance(v, dict):
            v = v.get("mean", v.get("rho"))
        return float(v) if isinstance(v, (int, float)) and v is not None else float("nan")
    out: dict[str, float] = {}
    for cell, res in summary.get("cells", {}).items():
        out.update({f"{cell}/{k}": val(res.get(k)) for k in CELL_METRICS if k in res})
    for ch, res in summary.get("human", {}).items():
        out.update({f"human/{ch}/{k}": val(res.get(k)) for k in HUMAN_METRICS if k in res})
    c = summary.get("classifier", {})
    out.update({f"classifier/{k}": val(c.get(k)) for k in ("stance_parse_rate", "on_topic_parse_rate")})
    out["classifier/vs_slider_mae"] = val(c.get("vs_slider", {}).get("mae"))
    out["classifier/vs_slider_spearman_rho"] = val(c.get("vs_slider", {}).get("spearman_rho"))
    if "alpha" in summary.get("degroot", {}):
        out["degroot/alpha"] = val(summary["degroot"]["alpha"])
    return out


def _rows(result: dict[str, Any]) -> dict[str, pd.DataFrame]:
    """The parquet tables: kappa (one row per classifier, task, label), confusion (long), headline (wide)."""
    kap, conf = [], []
    for prof, ag in result["agreement"].items():
        for task in ("stance", "on_topic"):
            t = ag[task]
            kap.append({"classifier": prof, "task": task, "label": "overall", "kappa": t["kappa"], "n": t["n"],
                        "n_dropped": t["n_dropped"], "agreement": t["agreement"]})
            if task == "stance":
                kap.append({"classifier": prof, "task": task, "label": "overall_quadratic",
                            "kappa": t["kappa_quadratic"], "n": t["n"], "n_dropped": t["n_dropped"]})
            for lab, v in t["per_label"].items():
                kap.append({"classifier": prof, "task": task, "label": lab, "kappa": v["kappa"], "n": t["n"],
                            "n_run": v["n_a"], "n_other": v["n_b"]})
            for i, la in enumerate(t["labels"]):
                for j, lb in enumerate(t["labels"]):
                    conf.append({"classifier": prof, "task": task, "run_label": la, "other_label": lb,
                                 "count": t["confusion"][i][j]})
    hl = pd.DataFrame(result["headline"])
    hl.index.name = "metric"
    return {"kappa": pd.DataFrame(kap), "confusion": pd.DataFrame(conf), "headline": hl.reset_index()}


# -- the command --------------------------------------------------------------------------------------
def _own_classifier(cfg: Any, profiles: list[str]) -> str:
    """The run's classifier profile, once ``profiles`` are known models other than it, or one
    AnnotatorInputError."""
    own = cfg.classifier.over_model(cfg.models[0]).profile
    if not profiles:
        raise AnnotatorInputError("give at least one -m/--model PROFILE (the second classifier model)")
    if len(set(profiles)) != len(profiles):
        raise AnnotatorInputError(f"-m/--model given twice: {profiles}")
    try:
        own_path = get_profile(own).path.resolve()
        for p in profiles:
            if p == own or get_profile(p).path.resolve() == own_path:
                raise AnnotatorInputError(f"-m/--model {p}: that is the run's own classifier ({own}); give another model")
    except ModelError as err:
        raise AnnotatorInputError(f"-m/--model: {err}") from None
    return own


def annotate(run_dir: str | Path, profiles: list[str], out: str | Path | None = None, *,
             engines: dict[str, Any] | None = None, make_plots: bool = True,
             progress: Callable | None = None) -> tuple[Path, dict[str, Any]]:
    """``chorus roleplay annotators`` from Python: its sealed analysis run at ``out`` (summary.json,
    annotators.md, tables/{kappa,confusion,headline,labels}.parquet, plots/annotators.png, the source
    run fingerprinted); returns (run directory, summary). ``engines``: loaded engines by profile
    (tests); others are built over the run's first model spec with the run's call store, one at a time."""
    from chorus.core.analyses import get_analysis
    import chorus.simulate.roleplay.analyses  # noqa: F401  (registers the analysis)
    r = get_analysis("roleplay annotators").run({"run": str(run_dir), "model": list(profiles)}, out,
                                                plots=make_plots, engines=engines, progress=progress)
    return r.path, r.summary


def compute_annotations(run_dir: str | Path, profiles: list[str], *, engines: dict[str, Any] | None = None,
                        progress: Callable | None = None) -> tuple[dict[str, Any], dict[str, pd.DataFrame], str]:
    """Re-classify RUN's texts with each profile: (the summary, its tables, the run's own classifier)."""
    # the run needs its classifier labels, not a summary: they are what is re-classified
    f = open_finished(Path(run_dir), AnnotatorInputError, needs="tables/labels.parquet",
                      refusal="not a roleplay run with classifier labels (tables/labels.parquet)",
                      bare="not a run directory (no provenance.json)")
    run, cfg = f.run, f.cfg
    own = _own_classifier(cfg, list(profiles))
    P = load_prompts(cfg.prompts)
    own_labels = run.read_table("labels")
    pairs = list(zip(own_labels["topic"], own_labels["text"]))
    labels = {own: own_labels}
    engine_info: dict[str, Any] = {}
    for p in profiles:
        spec = cfg.classifier.model_copy(update={"profile": p})
        eng = (engines or {}).get(p)
        mine = eng is None
        if mine:
            from chorus.serving import build_engine  # looked up per call: tests replace it
            eng = build_engine(spec.over_model(cfg.models[0]), store=run.store_path, role=f"classifier {p}")
        try:
            labels[p] = classify_texts(eng, pairs, P, max_tokens=cfg.classifier.max_tokens,
                                       readout=cfg.classifier.stance_readout, progress=progress)
            engine_info[p] = {**(eng.provenance() if hasattr(eng, "provenance") else {}),
                              "model_calls": getattr(eng, "model_calls", None)}
        finally:
            if mine:
                eng.close()
    summaries = {p: recompute(run, lab, classifier_profile=p, embed=False)[0] for p, lab in labels.items()}
    result = {"run": str(run.path), "run_classifier": own, "classifiers": list(profiles),
              "models": {m.label: m.profile for m in cfg.models},
              "stance_readout": cfg.classifier.stance_readout, "max_tokens": cfg.classifier.max_tokens,
              "prompts": cfg.prompts, "synthetic_data": bool(run.provenance().get("data", {}).get("synthetic")),
              "method": __doc__.split("\n\n", 1)[1].strip(),
              "agreement": {p: agreement(own_labels, labels[p]) for p in profiles},
              "headline": {p: headline(s) for p, s in summaries.items()},
              "engines": engine_info,
              "note": standing([m.profile for m in cfg.models] + [own, *profiles]).caveat}
    tables = _rows(result)
    tables["labels"] = pd.concat([lab.assign(classifier=p) for p, lab in labels.items()], ignore_index=True)
    return result, tables, own


# -- files ----------------------------------------------------------------------------------------------
def _f(v: Any) -> str:
    if isinstance(v, float):
        return "nan" if v != v else f"{v:.3f}"
    return str(v)


def markdown(r: dict[str, Any], tables: dict[str, pd.DataFrame]) -> str:
    lines = ["# Role-play annotator robustness", "",
             f"- run: `{r['run']}` (models {', '.join(f'{k}={v}' for k, v in r['models'].items())})"
             + (" (SYNTHETIC data)" if r["synthetic_data"] else ""),
             f"- the run's classifier: `{r['run_classifier']}`; re-classified with: "
             + ", ".join(f"`{p}`" for p in r["classifiers"]),
             f"- stance readout `{r['stance_readout']}`, prompts `{r['prompts']}`"]
    if r.get("note"):
        lines.append(f"- {r['note']}")
    lines += ["", "## Method", "", r["method"], "", "## Cohen's kappa against the run's classifier", ""]
    k = tables["kappa"]
    cols = [c for c in ("classifier", "task", "label", "kappa", "n", "n_dropped", "agreement", "n_run", "n_other")
            if c in k]
    lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join("" if pd.isna(row[c]) and c not in ("kappa", "agreement") else _f(row[c])
                                for c in cols) + " |" for _, row in k.iterrows()]
    lines += ["", "## Confusion matrices (rows: the run's classifier, columns: the other)", ""]
    for p, ag in r["agreement"].items():
        for task in ("stance", "on_topic"):
            t = ag[task]
            lines += [f"`{p}`, {task} (n = {t['n']}, dropped {t['n_dropped']}):", "",
                      "| run \\ other | " + " | ".join(t["labels"]) + " |", "|" + "---|" * (len(t["labels"]) + 1)]
            lines += [f"| {la} | " + " | ".join(map(str, row)) + " |" for la, row in zip(t["labels"], t["confusion"])]
            lines.append("")
    lines += ["## Headline metrics under each classifier", ""]
    h = tables["headline"]
    hc = list(h.columns)
    lines += ["| " + " | ".join(hc) + " |", "|" + "---|" * len(hc)]
    lines += ["| " + " | ".join(_f(row[c]) for c in hc) + " |" for _, row in h.iterrows()]
    return "\n".join(lines) + "\n"
