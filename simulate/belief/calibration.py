"""Appraiser calibration by temperature scaling (belief-layer paper App. B).

p_cal = sigmoid(logit(p) / tau); tau minimises the soft-label cross-entropy
-[y log p + (1-y) log(1-p)] on an 80% split of the topic's labelled utterances; ECE and
cross-entropy are reported before and after on the held-out 20%. One fit per (topic, model),
written to the user cache, ``$CHORUS_CACHE/fits/<topic>/<model>.json`` (``CHORUS_CACHE`` defaults
to ``~/.cache/chorus``, ``chorus.serving.profiles.cache_dir``), and reused by later runs. A run reads a
fit from the cache first, then from the read-only defaults shipped with the package
(``simulate/topics/calibration/fits/``); nothing is ever written into the package tree.
``chorus belief calibrate`` is ``calibrate_run.run_calibrate``."""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from chorus.core.config import ConfigError
from chorus.core.seeding import call_seed, rng
from chorus.core.stats import ece as core_ece
from chorus.serving.profiles import cache_dir

from .channel import APPRAISE, LLMAppraiser, temperature_scale
from .topics import TOPICS_DIR, load_topic

CAL_DIR = TOPICS_DIR / "calibration"
SHIPPED_FITS_DIR = CAL_DIR / "fits"   # read-only defaults shipped with the package
STREAM_SPLIT = 21
EPS = 1e-6


def soft_cross_entropy(p, y) -> float:
    p = np.clip(np.asarray(p, dtype=float), EPS, 1 - EPS)
    y = np.asarray(y, dtype=float)
    return float(np.mean(-(y * np.log(p) + (1 - y) * np.log1p(-p))))


def ece(p, y, bins: int = 10) -> float:
    """Expected calibration error with soft labels, sum_k n_k/n |mean p_k - mean y_k| over
    equal-width bins of p (``chorus.core.stats.ece``)."""
    return core_ece(p, y, bins, "width")


TAU_BOUNDS = (0.05, 20.0)


def fit_tau(p, y, bounds: tuple[float, float] = TAU_BOUNDS) -> float:
    """The tau minimising soft cross-entropy of temperature_scale(p, tau) against y."""
    from scipy.optimize import minimize_scalar
    p = np.asarray(p, dtype=float)
    y = np.asarray(y, dtype=float)
    res = minimize_scalar(lambda lt: soft_cross_entropy(temperature_scale(p, np.exp(lt)), y),
                          bounds=(np.log(bounds[0]), np.log(bounds[1])), method="bounded",
                          options={"xatol": 1e-6})
    return float(np.exp(res.x))


def labels_path(topic_id: str) -> Path:
    return CAL_DIR / f"{topic_id}.yaml"


def load_labels(topic_id: str) -> pd.DataFrame:
    p = labels_path(topic_id)
    if not p.is_file():
        raise ConfigError(f"topic = {topic_id!r}: no calibration set at {p}")
    data = yaml.safe_load(p.read_text())
    df = pd.DataFrame(data["items"])
    bad = df[(df.y < 0) | (df.y > 1)]
    if len(bad):
        raise ConfigError(f"{p}: labels outside [0, 1]: {bad.id.tolist()}")
    df.attrs["sha256"] = hashlib.sha256(p.read_bytes()).hexdigest()
    return df


def split(n: int, seed: int, val_fraction: float = 0.2) -> tuple[np.ndarray, np.ndarray]:
    perm = rng(seed, STREAM_SPLIT).permutation(n)
    n_val = int(round(val_fraction * n))
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])


MIN_TRAIN, MIN_VAL = 5, 2   # the fewest items each side of the split that a fit of tau accepts


def min_labelled(val_fraction: float = 0.2) -> int:
    """The fewest labelled items whose split leaves MIN_TRAIN to fit and MIN_VAL to evaluate."""
    n = MIN_TRAIN + MIN_VAL
    while True:
        n_val = int(round(val_fraction * n))   # as split() sizes it
        if n - n_val >= MIN_TRAIN and n_val >= MIN_VAL:
            return n
        n += 1


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def fits_dir() -> Path:
    """Where fits are written: ``$CHORUS_CACHE/fits`` (read when called, so the variable counts)."""
    return cache_dir() / "fits"


def fit_path(topic_id: str, model: str, suffix: str = ".json") -> Path:
    """Where the fit of ``model`` on ``topic_id`` is written: under ``fits_dir()``."""
    return fits_dir() / topic_id / f"{_safe(model)}{suffix}"


def find_fit(topic_id: str, model: str, suffix: str = ".json") -> Path | None:
    """The fit file a run reads: the cache's, else the one shipped with the package, else None."""
    for d in (fits_dir(), SHIPPED_FITS_DIR):
        p = d / topic_id / f"{_safe(model)}{suffix}"
        if p.is_file():
            return p
    return None


def load_fit(topic_id: str, model: str) -> dict[str, Any] | None:
    p = find_fit(topic_id, model)
    return json.loads(p.read_text()) if p is not None else None


def fit_from_scores(p_raw, y, seed: int = 0, val_fraction: float = 0.2) -> dict[str, Any]:
    """Fit tau on the training split of the appraised items (failed ones, NaN, left out)."""
    p_raw = np.asarray(p_raw, dtype=float)
    y = np.asarray(y, dtype=float)
    tr, va = split(len(y), seed, val_fraction)
    ok = np.isfinite(p_raw)
    tr, va = tr[ok[tr]], va[ok[va]]
    if len(tr) < MIN_TRAIN or len(va) < MIN_VAL:
        raise RuntimeError(f"too few valid appraisals to fit tau ({ok.sum()} of {len(y)})")
    tau = fit_tau(p_raw[tr], y[tr])
    cal = temperature_scale(p_raw, tau)
    pv = np.clip(p_raw[va], EPS, 1 - EPS)
    return {
        "tau": tau,
        # an appraiser with no usable signal drives tau to the upper bound (everything -> 0.5)
        "tau_at_bound": bool(min(abs(tau - b) / b for b in TAU_BOUNDS) < 1e-3),
        "n_items": int(len(y)), "n_failed": int((~ok).sum()),
        "n_train": int(len(tr)), "n_val": int(len(va)), "split_seed": seed,
        "ece_before": ece(pv, y[va]), "ece_after": ece(cal[va], y[va]),
        "ce_before": soft_cross_entropy(pv, y[va]), "ce_after": soft_cross_entropy(cal[va], y[va]),
        "train_ce_before": soft_cross_entropy(p_raw[tr], y[tr]),
        "train_ce_after": soft_cross_entropy(cal[tr], y[tr]),
        "pearson_raw_vs_label": float(np.corrcoef(p_raw[ok], y[ok])[0, 1])
        if ok.sum() > 2 and np.std(p_raw[ok]) > 0 else None,
    }


def calibrate(engine: Any, model: str, topic_id: str = "transit_priority", seed: int = 0,
              appraiser_kwargs: dict[str, Any] | None = None, store: bool = True,
              labels: pd.DataFrame | None = None) -> tuple[dict[str, Any], pd.DataFrame]:
    """Appraise the topic's labelled set (or ``labels``: ``id``, ``text``, ``y``, e.g. a filled-in
    labelset CSV, ``labelset.read_labels_csv``) with ``engine``, fit tau, optionally store the fit."""
    topic = load_topic(topic_id)
    labels = load_labels(topic.id) if labels is None else labels
    app = LLMAppraiser(engine, **(appraiser_kwargs or {}))
    convs = [topic.appraiser_messages(t) for t in labels.text]
    p, attempts, errors = app.read(convs, lambda i, a: call_seed(seed, i, APPRAISE, a))
    fit = fit_from_scores(p, labels.y.to_numpy(), seed=seed)
    fit.update({"model": model, "topic": topic.id, "topic_sha256": topic.sha256,
                "labels_sha256": labels.attrs["sha256"],
                "labels_source": labels.attrs.get("source", str(labels_path(topic.id))),
                "engine": getattr(engine, "identity", None),
                "fitted": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")})
    scores = labels.assign(p_raw=p, attempts=attempts, error=errors,
                           p_cal=temperature_scale(p, fit["tau"]))
    tr, va = split(len(labels), seed)
    scores["split"] = np.where(np.isin(np.arange(len(labels)), va), "val", "train")
    if store:
        path = fit_path(topic.id, model)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(fit, indent=2, default=str))
        fit["stored_at"] = str(path)
    return fit, scores
