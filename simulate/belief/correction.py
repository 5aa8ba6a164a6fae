"""Directional channel correction (the belief-layer paper's App. C and §7 "next steps").

Temperature scaling rescales the appraiser's confidence symmetrically about 0.5: it cannot raise,
lower or bend one side of the channel's transfer curve, so a one-sided channel (the seed's Llama
and Claude curves) drives a pliable population's consensus away from its initial mean. This
module fits a monotone map of appraised evidence e onto speaker belief s from the (s, e) pairs a
run logged, stores it beside the temperature fit, and applies it in later runs: listeners then
consume g(e).

How g is fitted. What drives a pliable population off its initial mean is the consumed
evidence's bias given the speaker, E[g(e) | s] - s, so the target is a monotone g with
E[g(e) | s] = s: the corrected transfer curve on the diagonal. Candidates: the channel's transfer
curve f(s) = E[e | s] fitted monotone (isotonic regression, a logit-linear or a beta-calibration
curve) and inverted, g = f^-1 (exact for a noise-free channel); and ``moment``, a monotone
piecewise-linear g fitted directly to E[g(e) | s] = s over bins of s (non-negative least squares
on the bin means), which also holds for a noisy channel, where g = f^-1 leaves a Jensen bias.
Neither regresses s on e: E[s | e] depends on how s was distributed in the calibration run, and a
pliable population's s collapses toward its consensus, so it would not carry over; both targets
above depend on the channel P(e | s) alone. The family is chosen by K-fold cross-validation: the
held-out distance of the corrected transfer curve from the diagonal (count-weighted mean squared
bias over quantile bins of s); the per-pair squared error of g(e) against s is reported beside it
(it is not the criterion: it rewards shrinking toward the calibration run's mean).

The map g itself (its families, evaluation and file form, ``CorrectionMap``) is
``correction_map.py``, below this module and the figures (``correction_plots.py``) alike.

The synthetic channel (``ChannelAppraiser``, ``oracle.channel`` in the config) distorts the oracle
appraiser by a known curve, so the mechanism is testable without a model that can judge stance.

Files: ``$CHORUS_CACHE/fits/<topic>/<model>.correction.json`` (``stored``; read from the cache
first, then from the defaults shipped in ``simulate/topics/calibration/fits/``, never written
there), and ``RUN/correction.json`` in the run it was fitted from; a config names one with
``channel_correction: none | stored | PATH``. A corrected run logs both ``e_raw`` (the appraiser's
evidence) and ``e`` (consumed), and its summary carries the measure of success
(``channel_correction``: consensus vs initial mean, the transfer curve's diagonal check, kappa
recovery, per arm)."""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from core.config import ConfigError, load_config
from core.seeding import rng

from . import calibration
from .config import BeliefConfig, ChannelCfg, Condition
from .correction_map import EPS, FAMILIES, CorrectionMap, _logit, _ramps, _sigmoid
from .roles import Appraisals, OracleAppraiser, Turn, Utterances
from .topics import load_topic

FORMAT = 1
MIN_EVENTS = 50
FOLDS = 5
CHANNEL = 41        # role id of the synthetic channel's noise in the request-seed keys
STREAM_FOLDS = 31
CORRECTION_FILE = "correction.json"


# -- the synthetic channel ------------------------------------------------------------------------
def channel_curve(s, ch: ChannelCfg) -> np.ndarray:
    """e = f(s) of a synthetic channel (noise-free)."""
    s = np.clip(np.asarray(s, dtype=float), 0.0, 1.0)
    if ch.kind == "faithful":
        return s.copy()
    if ch.kind == "power":
        return s ** ch.exponent
    if ch.kind == "logit":
        return _sigmoid(ch.slope * _logit(s) + ch.shift)
    if ch.side == "minus":  # one_sided: bend the a- half, keep the a+ half
        return np.where(s < 0.5, 0.5 * (2.0 * s) ** ch.exponent, s)
    return np.where(s > 0.5, 1.0 - 0.5 * (2.0 * (1.0 - s)) ** ch.exponent, s)


def is_faithful(ch: ChannelCfg) -> bool:
    return ch.kind == "faithful" and ch.noise == 0


def channel_id(cfg: BeliefConfig) -> str:
    """Whose channel a correction belongs to: the model in LLM mode; in oracle mode 'oracle' or a
    name for the synthetic channel (e.g. 'oracle-power-p3')."""
    if cfg.mode == "llm":
        return cfg.llm.model.profile
    ch = cfg.oracle.channel
    if is_faithful(ch):
        return "oracle"
    part = {"faithful": "", "power": f"-p{ch.exponent:g}", "logit": f"-a{ch.slope:g}-b{ch.shift:g}",
            "one_sided": f"-{ch.side}-p{ch.exponent:g}"}[ch.kind]
    return f"oracle-{ch.kind}{part}" + (f"-noise{ch.noise:g}" if ch.noise > 0 else "")


class ChannelAppraiser:
    """The oracle appraiser seen through a known synthetic channel: e = f(s), with optional
    Gaussian noise on the logit scale from each request's own seed (batch-invariant)."""

    def __init__(self, channel: ChannelCfg):
        self.channel = channel

    def appraise(self, turn: Turn, utterances: Utterances) -> Appraisals:
        e = channel_curve(turn.s, self.channel)
        if self.channel.noise > 0:
            z = np.array([np.random.default_rng(turn.seed(i, CHANNEL)).standard_normal()
                          for i in range(len(e))])
            e = _sigmoid(_logit(e) + self.channel.noise * z)
        return Appraisals(p_raw=e, e=e, attempts=np.zeros(len(e), dtype=np.int32))


# -- fitting the monotone map (the map itself: correction_map.py) ----------------------------------
def s_bins(s: np.ndarray, n_bins: int) -> np.ndarray:
    """Bin index of each s: (at most) ``n_bins`` bins of equal count."""
    q = np.unique(np.quantile(s, np.linspace(0, 1, n_bins + 1)))
    return np.clip(np.digitize(s, q[1:-1]), 0, max(len(q) - 2, 0))


def diagonal_mse(s, g_e, n_bins: int) -> float:
    """Count-weighted mean squared bias of the corrected transfer curve over quantile bins of s:
    sum_b n_b (mean_b g(e) - mean_b s)^2 / n."""
    s, g_e = np.asarray(s, float), np.asarray(g_e, float)
    d = pd.DataFrame({"b": s_bins(s, n_bins), "d": g_e - s}).groupby("b").d.agg(["mean", "size"])
    return float((d["size"] * d["mean"] ** 2).sum() / d["size"].sum())


def _fit_moment(s: np.ndarray, e: np.ndarray) -> CorrectionMap:
    """g monotone piecewise linear (knots at quantiles of e) with mean g(e) = mean s in every
    quantile bin of s: non-negative least squares on the bin means, weighted by sqrt(count)."""
    from scipy.optimize import lsq_linear
    n = len(s)
    knots = np.unique(np.quantile(e, np.linspace(0, 1, max(2, min(12, n // 20)) + 1)))
    if len(knots) < 2:  # e constant: g can only be a constant
        knots = np.array([knots[0], knots[0] + EPS])
    X = _ramps(e, knots)
    b = s_bins(s, max(X.shape[1] + 2, min(2 * X.shape[1], n // 5)))
    df = pd.DataFrame(X).assign(b=b, s=s).groupby("b")
    A, y, w = df[list(range(X.shape[1]))].mean().to_numpy(), df.s.mean().to_numpy(), np.sqrt(df.size().to_numpy())
    lo, hi = np.r_[0.0, np.zeros(X.shape[1] - 1)], np.r_[1.0, np.full(X.shape[1] - 1, np.inf)]
    r = lsq_linear(A * w[:, None], y * w, bounds=(lo, hi))
    return CorrectionMap("moment", {"knots": knots.tolist(), "coef": r.x.tolist()})


def _fit_family(family: str, s: np.ndarray, e: np.ndarray) -> CorrectionMap:
    if family == "moment":
        return _fit_moment(s, e)
    if family == "isotonic":
        from sklearn.isotonic import IsotonicRegression
        ir = IsotonicRegression(increasing=True, y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(s, e)
        return CorrectionMap("isotonic", {"s": ir.X_thresholds_.tolist(), "e": ir.y_thresholds_.tolist()})
    from scipy.optimize import least_squares
    if family == "logit_linear":
        x = _logit(s)
        r = least_squares(lambda p: _sigmoid(p[0] * x + p[1]) - e, x0=[1.0, 0.0],
                          bounds=([1e-3, -20.0], [100.0, 20.0]))
        return CorrectionMap("logit_linear", {"a": float(r.x[0]), "b": float(r.x[1])})
    sc = np.clip(s, EPS, 1.0 - EPS)
    ls, l1s = np.log(sc), np.log1p(-sc)
    r = least_squares(lambda p: _sigmoid(p[0] * ls - p[1] * l1s + p[2]) - e, x0=[1.0, 1.0, 0.0],
                      bounds=([0.0, 0.0, -20.0], [100.0, 100.0, 20.0]))
    a, b, c = (float(v) for v in r.x)
    if a + b < 1e-9:  # flat: keep it strictly increasing so it has an inverse
        a = b = 1e-9
    return CorrectionMap("beta", {"a": a, "b": b, "c": c})


def folds(n: int, k: int, seed: int) -> np.ndarray:
    """Fold index of each pair: a seeded permutation cut into k nearly equal parts."""
    f = np.empty(n, dtype=np.int64)
    f[rng(seed, STREAM_FOLDS).permutation(n)] = np.arange(n) % k
    return f


def fit_map(s, e, *, min_events: int = MIN_EVENTS, n_folds: int = FOLDS, seed: int = 0,
            families: Sequence[str] = FAMILIES) -> dict[str, Any]:
    """Fit every family on the (s, e) pairs and score it by K-fold cross-validation: each pair's
    g(e) from the fit without its fold, then the corrected transfer curve's distance from the
    diagonal (``heldout_diagonal_mse``, the criterion), the per-pair squared error of g(e)
    against s (``heldout_mse``) and of f(s) against e (``heldout_forward_mse``). The lowest
    criterion is chosen; every family is refit on all pairs. Fewer than ``min_events`` valid
    pairs is refused with the count."""
    s = np.asarray(s, dtype=float)
    e = np.asarray(e, dtype=float)
    ok = np.isfinite(s) & np.isfinite(e)
    n = int(ok.sum())
    if n < min_events:
        raise ConfigError(f"channel correction: {n} appraised utterances with finite (s, e) "
                          f"({int((~ok).sum())} failed or missing), fewer than min_events = {min_events}; "
                          f"fit it on a longer calibration run (or lower --min-events, at your risk)")
    s, e = s[ok], e[ok]
    if np.ptp(s) == 0:
        raise ConfigError(f"channel correction: all {n} speaker beliefs s equal {s[0]:.4g}; a map "
                          f"of e onto s needs a calibration run whose speakers span the stance range")
    k = max(2, min(n_folds, n // 2))
    fold = folds(n, k, seed)
    n_bins = max(2, min(20, n // 10))
    cands: dict[str, dict[str, Any]] = {}
    for fam in families:
        g_e, f_s = np.empty(n), np.empty(n)
        for j in range(k):
            tr, va = fold != j, fold == j
            m = _fit_family(fam, s[tr], e[tr])
            g_e[va], f_s[va] = m(e[va]), m.forward(s[va])
        full = _fit_family(fam, s, e)
        cands[fam] = {"heldout_diagonal_mse": diagonal_mse(s, g_e, n_bins),
                      "heldout_mse": float(np.mean((g_e - s) ** 2)),
                      "heldout_forward_mse": float(np.mean((f_s - e) ** 2)) if full.has_forward else None,
                      "map": full.to_dict()}
    best = min(cands, key=lambda f: cands[f]["heldout_diagonal_mse"])
    # does e rise with s at all? (the isotonic transfer curve's rise over the calibration range)
    iso = _fit_family("isotonic", s, e)
    spread = float(np.ptp(iso.forward(np.linspace(s.min(), s.max(), 101))))
    return {
        "family": best, "map": cands[best]["map"], "candidates": cands, "criterion": "heldout_diagonal_mse",
        "n_events": n, "n_dropped": int((~ok).sum()), "min_events": int(min_events),
        "folds": int(k), "diagonal_bins": int(n_bins), "split_seed": int(seed),
        "s_range": [float(s.min()), float(s.max())], "e_range": [float(e.min()), float(e.max())],
        "pearson_s_e": float(np.corrcoef(s, e)[0, 1]) if np.ptp(e) > 0 else None,
        # a transfer curve that barely rises carries no stance signal: its inverse is arbitrary
        "informative": bool(spread > 0.05),
    }


# -- from a run directory, to a file ------------------------------------------------------------------
def run_pairs(run_dir: str | Path, topic: str | None = None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The (s, e) pairs a run logged for one topic (one row per appraised utterance; ``e`` is
    the appraiser's evidence before any correction: ``e_raw`` where the run was corrected)."""
    from core.runs import RunDir
    run = RunDir(run_dir)
    if not (run.path / "config.yaml").is_file() or not (run.path / "tables" / "utterances.parquet").is_file():
        raise ConfigError(f"{run.path}: not a finished belief run directory (no config.yaml or "
                          f"tables/utterances.parquet)")
    cfg = load_config(run.path / "config.yaml", BeliefConfig)
    ut, runs = run.read_table("utterances"), run.read_table("runs")
    topics = sorted(runs.topic.unique())
    if topic is None:
        if len(topics) > 1:
            raise ConfigError(f"{run.path} holds several topics {topics}: pick one with --topic")
        topic = topics[0]
    elif topic not in topics:
        raise ConfigError(f"--topic {topic!r}: {run.path} holds topics {topics}")
    ut = ut[ut.run.isin(runs.run[runs.topic == topic])]
    col = "e_raw" if "e_raw" in ut.columns else "e"
    pairs = pd.DataFrame({"s": ut.s.to_numpy(), "e": ut[col].to_numpy()})
    prov = run.provenance()
    tau = None
    if cfg.mode == "llm":
        tau = ((prov.get("appraiser_taus") or {}).get(topic) or {}).get("tau")
    info = {"source_run": str(run.path.resolve()), "source_mode": cfg.mode, "topic": topic,
            "channel": channel_id(cfg),
            "oracle_channel": cfg.oracle.channel.model_dump() if cfg.mode == "oracle" else None,
            "appraiser_tau": tau, "evidence_column": col,
            "utterances_sha256": hashlib.sha256((run.path / "tables" / "utterances.parquet").read_bytes()).hexdigest()}
    return pairs, info


CORRECTION_SUFFIX = ".correction.json"


def correction_path(topic: str, model: str) -> Path:
    """Where a stored correction is written, beside the temperature fit in the user cache:
    ``$CHORUS_CACHE/fits/<topic>/<model>.correction.json``."""
    return calibration.fit_path(topic, model, CORRECTION_SUFFIX)


def fit_run(run_dir: str | Path, *, model: str | None = None, topic: str | None = None,
            min_events: int = MIN_EVENTS, store: bool = True, seed: int = 0, n_folds: int = FOLDS,
            plot: bool = True) -> dict[str, Any]:
    """Fit a correction from a run's logged pairs; write ``RUN/correction.json`` (and its plot
    ``RUN/plots/correction_fit.png``), and with ``store`` the stored fit for (topic, model)."""
    from core.runs import library_versions, write_json
    pairs, info = run_pairs(run_dir, topic)
    fit = fit_map(pairs.s, pairs.e, min_events=min_events, n_folds=n_folds, seed=seed)
    rec = {"kind": "channel_correction", "format": FORMAT, "model": model or info["channel"], **info, **fit,
           "versions": library_versions(),
           "fitted": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    run = Path(run_dir)
    write_json(run / CORRECTION_FILE, rec)
    rec["written"] = [str(run / CORRECTION_FILE)]
    if store:
        p = correction_path(rec["topic"], rec["model"])
        p.parent.mkdir(parents=True, exist_ok=True)
        write_json(p, {k: v for k, v in rec.items() if k != "written"})
        rec["written"].append(str(p))
    if plot:
        from .correction_plots import fit as plot_fit
        (run / "plots").mkdir(exist_ok=True)
        plot_fit(pairs, rec, run / "plots" / "correction_fit.png")
    return rec


def load_correction(spec: str, topic: str, model: str) -> tuple[CorrectionMap, dict[str, Any], Path]:
    """Resolve ``channel_correction`` ('stored' or a path to a JSON file or a run directory)."""
    if spec == "stored":   # the cache's, else the package's shipped default
        p = calibration.find_fit(topic, model, CORRECTION_SUFFIX)
        if p is None:
            raise ConfigError(f"channel_correction = 'stored': no stored correction for model/channel "
                              f"{model!r} on topic {topic!r} ({correction_path(topic, model)}); fit one "
                              f"with 'chorus belief correct fit RUN_DIR' on a run of that channel")
    else:
        p = Path(spec)
        if p.is_dir():
            p = p / CORRECTION_FILE
        if not p.is_file():
            raise ConfigError(f"channel_correction = {spec!r}: no such correction file or run directory "
                              f"with {CORRECTION_FILE} (expected 'none', 'stored' or a path)")
    try:
        rec = json.loads(p.read_text())
    except json.JSONDecodeError as err:
        raise ConfigError(f"channel_correction = {spec!r}: {p} is not valid JSON ({err})") from None
    if rec.get("kind") != "channel_correction" or "map" not in rec:
        raise ConfigError(f"channel_correction = {spec!r}: {p} is not a channel correction "
                          f"(written by 'chorus belief correct fit')")
    return CorrectionMap.from_dict(rec["map"]), rec, p


@dataclass
class Applied:
    map: CorrectionMap
    record: dict[str, Any]
    path: Path

    def describe(self) -> dict[str, Any]:
        r = self.record
        return {"path": str(self.path), "family": r.get("family"), "model": r.get("model"),
                "topic": r.get("topic"), "n_events": r.get("n_events"), "source_run": r.get("source_run"),
                "appraiser_tau": r.get("appraiser_tau"), "fitted": r.get("fitted"),
                "heldout_diagonal_mse": {k: v["heldout_diagonal_mse"] for k, v in (r.get("candidates") or {}).items()},
                "sha256": hashlib.sha256(self.path.read_bytes()).hexdigest()}


def resolve_corrections(cfg: BeliefConfig, conditions: Sequence[Condition],
                        taus: dict[str, dict[str, Any]] | None = None) -> dict[tuple[str, str], Applied]:
    """Every (channel_correction, topic) the conditions use, loaded and checked against the run:
    the same channel (model or synthetic curve) and, in LLM mode, the same appraiser tau."""
    out: dict[tuple[str, str], Applied] = {}
    want = channel_id(cfg)
    for c in conditions:
        spec = c.config.channel_correction
        if spec == "none":
            continue
        topic = load_topic(c.config.topic).id
        if (spec, topic) in out:
            continue
        m, rec, path = load_correction(spec, topic, want)
        if rec.get("topic") != topic:
            raise ConfigError(f"channel_correction = {spec!r} ({path}) was fitted on topic "
                              f"{rec.get('topic')!r}, this run's topic is {topic!r}")
        if rec.get("model") != want:
            raise ConfigError(f"channel_correction = {spec!r} ({path}) belongs to model/channel "
                              f"{rec.get('model')!r}, this run's channel is {want!r}: a correction "
                              f"belongs to the model (or synthetic curve) it was measured on")
        if cfg.mode == "llm":
            tau = (taus or {}).get(topic, {}).get("tau")
            fitted = rec.get("appraiser_tau")
            if fitted is None or tau is None or not math.isclose(fitted, tau, rel_tol=1e-9):
                raise ConfigError(f"channel_correction = {spec!r} ({path}) maps evidence calibrated with "
                                  f"tau = {rec.get('appraiser_tau')}, this run's appraiser uses tau = {tau}: "
                                  f"refit the correction on a run with this tau")
        out[(spec, topic)] = Applied(m, rec, path)
    return out


def describe(corrections: dict[tuple[str, str], Applied]) -> dict[str, Any] | None:
    """What provenance records of the corrections used (None: none)."""
    if not corrections:
        return None
    return {f"{spec} @ {topic}": a.describe() for (spec, topic), a in corrections.items()}


class CorrectedAppraiser:
    """Wraps an appraiser: each run's evidence e passes through its correction map g (runs with
    channel_correction 'none' keep e); the uncorrected evidence travels as ``e_raw``."""

    def __init__(self, inner, corrections: dict[tuple[str, str], Applied]):
        self.inner, self.corrections = inner, corrections

    def appraise(self, turn: Turn, utterances: Utterances) -> Appraisals:
        app = self.inner.appraise(turn, utterances)
        raw = np.asarray(app.e, dtype=float)
        e = raw.copy()
        keys = [(rk.correction, rk.topic.id) for rk in turn.runs]
        for key in set(keys):
            if key[0] == "none":
                continue
            if key not in self.corrections:
                raise ConfigError(f"channel_correction = {key[0]!r} for topic {key[1]!r} was not "
                                  f"resolved before the run")
            idx = np.array([i for i, k in enumerate(keys) if k == key])
            e[idx] = self.corrections[key].map(raw[idx])
        return Appraisals(p_raw=app.p_raw, e=e, attempts=app.attempts, errors=app.errors, e_raw=raw)


def appraiser_for(cfg: BeliefConfig, inner, corrections: dict[tuple[str, str], Applied]):
    """The appraiser a run uses: the synthetic channel in oracle mode (if not faithful), wrapped
    by the correction when one applies; None = the engine's default (e = s)."""
    if cfg.mode == "oracle" and not is_faithful(cfg.oracle.channel):
        inner = ChannelAppraiser(cfg.oracle.channel)
    if corrections:
        inner = CorrectedAppraiser(inner or OracleAppraiser(), corrections)
    return inner


# -- the measure of success -------------------------------------------------------------------------
def diagonal_bins(s, e, bins: int, tolerance: float, level: float = 0.95) -> pd.DataFrame:
    """Transfer curve with intervals: per equal-width bin of s, the mean of e, the ``level``
    t-interval of mean(e - s), and whether that interval (widened by ``tolerance``) covers 0,
    i.e. the curve is on the diagonal there. Bins with fewer than 2 utterances are not assessed."""
    from scipy.stats import t as student_t
    s = np.asarray(s, dtype=float)
    e = np.asarray(e, dtype=float)
    ok = np.isfinite(s) & np.isfinite(e)
    s, e = s[ok], e[ok]
    edges = np.linspace(0, 1, bins + 1)
    idx = np.clip(np.digitize(s, edges) - 1, 0, bins - 1)
    df = pd.DataFrame({"bin": idx, "s": s, "e": e, "d": e - s})
    g = df.groupby("bin").agg(n=("d", "size"), s_mean=("s", "mean"), e_mean=("e", "mean"),
                              d_mean=("d", "mean"), d_sd=("d", "std")).reindex(range(bins)).reset_index()
    n = g.n.fillna(0).to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        half = np.where(n >= 2, student_t.ppf(0.5 + level / 2, np.maximum(n - 1, 1)) * g.d_sd / np.sqrt(n), np.nan)
    g["n"] = n.astype(np.int64)
    g["half_width"] = half
    g["e_lo"], g["e_hi"] = g.e_mean - half, g.e_mean + half
    g["assessed"] = n >= 2
    g["on_diagonal"] = g.assessed & (g.d_mean.abs() <= g.half_width + tolerance)
    g["s_lo"], g["s_hi"] = edges[:-1], edges[1:]
    return g


def condition_arms(tables: dict[str, pd.DataFrame], cfg: BeliefConfig) -> pd.DataFrame:
    """Per condition: its channel_correction ('arm') and a key shared by conditions that differ
    only in it (their twins)."""
    rows = []
    for c, ov in zip(tables["conditions"].condition, tables["conditions"].overrides):
        o = json.loads(ov)
        arm = o.pop("channel_correction", cfg.channel_correction)
        rows.append({"condition": int(c), "arm": str(arm), "twin": json.dumps(o, sort_keys=True, default=str)})
    return pd.DataFrame(rows)


def applies(tables: dict[str, pd.DataFrame], cfg: BeliefConfig) -> bool:
    return "e_raw" in tables["utterances"].columns or (condition_arms(tables, cfg).arm != "none").any()


def _landings(beliefs: pd.DataFrame, conditions) -> pd.Series:
    """Final mean belief of the free agents, per run of the given conditions."""
    b = beliefs[beliefs.condition.isin(list(conditions)) & ~beliefs.committed]
    return b[b["round"] == b.groupby("run")["round"].transform("max")].groupby("run").b.mean()


def _rel(a, b) -> float | None:
    return None if a is None or b is None else float(a - b)


def measure(tables: dict[str, pd.DataFrame], cfg: BeliefConfig, derived: dict[str, pd.DataFrame],
            provenance: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, pd.DataFrame]]:
    """The seed's measure of success, per arm (channel_correction value): where the pliable
    (DeGroot) consensus lands against the initial mean, the share of transfer-curve bins on the
    diagonal (raw evidence and consumed evidence), kappa recovery from s (median relative error,
    Spearman over kappa levels). ``success`` compares the uncorrected arm with the corrected ones
    where both ran (as twins of one sweep, with common random numbers)."""
    from .analysis import spearman
    arms = condition_arms(tables, cfg)
    ut = tables["utterances"].merge(arms[["condition", "arm"]], on="condition")
    raw_col = "e_raw" if "e_raw" in ut.columns else "e"
    cm = derived["condition_metrics"].merge(arms, on="condition")
    kr = derived["kappa_recovery"].merge(arms, on="condition")
    bins, tol = cfg.analysis.transfer_bins, cfg.analysis.diagonal_tolerance
    per_arm, curves = [], []
    for arm, u in ut.groupby("arm", sort=False):
        row: dict[str, Any] = {"arm": arm, "conditions": sorted(int(c) for c in arms.condition[arms.arm == arm]),
                               "utterances": int(len(u))}
        for name, col in (("raw", raw_col), ("consumed", "e")):
            d = diagonal_bins(u.s, u[col], bins, tol)
            curves.append(d.assign(arm=arm, evidence=name))
            a = d[d.assessed]
            row[f"{name}_bins_assessed"] = int(len(a))
            row[f"{name}_on_diagonal_share"] = float(a.on_diagonal.mean()) if len(a) else None
            row[f"{name}_max_abs_bin_gap"] = float(a.d_mean.abs().max()) if len(a) else None
        dg = cm[(cm.arm == arm) & (cm.population == "degroot")]
        row["degroot_initial_mean"] = float(dg.initial_mean.mean()) if len(dg) else None
        row["degroot_landing"] = float(dg.final_mean.mean()) if len(dg) else None
        row["degroot_gap"] = float((dg.final_mean - dg.initial_mean).abs().max()) if len(dg) else None
        # a noisy channel makes a pliable consensus wander (every listener hears the same e):
        # the spread of the landing over seeds tells that wander from a bias
        land = _landings(tables["beliefs"], dg.condition)
        row["degroot_landing_seed_sd"] = float(land.std(ddof=1)) if len(land) > 1 else None
        row["degroot_landing_se"] = float(land.std(ddof=1) / np.sqrt(len(land))) if len(land) > 1 else None
        k = kr[(kr.arm == arm)].dropna(subset=["kappa_hat_median"])
        lv = k.groupby("kappa").kappa_hat_median.median()
        row["kappa_levels"] = int(len(lv))
        row["kappa_spearman"] = spearman(lv.index, lv.values) if len(lv) >= 3 else None
        row["kappa_median_rel_error"] = float(k.groupby("kappa").rel_error.median().median()) if len(k) else None
        per_arm.append({kk: (None if isinstance(v, float) and math.isnan(v) else v) for kk, v in row.items()})
    consensus = []
    for _, r in cm[cm.population == "degroot"].iterrows():
        consensus.append({"condition": int(r.condition), "arm": r.arm, "label": r.label,
                          "initial_mean": float(r.initial_mean), "final_mean": float(r.final_mean),
                          "gap": float(abs(r.final_mean - r.initial_mean))})
    by_arm = {a["arm"]: a for a in per_arm}
    unc = by_arm.get("none")
    cor = [a for a in per_arm if a["arm"] != "none"]
    success = None
    if cor:
        c = cor[0]
        gap_c, gap_u = c["degroot_gap"], unc["degroot_gap"] if unc else None
        ke_c, ke_u = c["kappa_median_rel_error"], unc["kappa_median_rel_error"] if unc else None
        success = {
            "corrected_arm": c["arm"],
            "consensus_gap_uncorrected": gap_u, "consensus_gap_corrected": gap_c,
            "consensus_landing_se_corrected": c["degroot_landing_se"],
            "consensus_within_0.05": None if gap_c is None else bool(gap_c <= 0.05),
            "raw_on_diagonal_share": c["raw_on_diagonal_share"],
            "corrected_on_diagonal_share": c["consumed_on_diagonal_share"],
            "kappa_median_rel_error_uncorrected": ke_u, "kappa_median_rel_error_corrected": ke_c,
            "kappa_spearman_uncorrected": unc["kappa_spearman"] if unc else None,
            "kappa_spearman_corrected": c["kappa_spearman"],
            "kappa_not_worse": None if ke_c is None or ke_u is None else bool(ke_c <= ke_u + 1e-12),
            "kappa_error_change": _rel(ke_c, ke_u),
        }
    block = {"applied": (provenance or {}).get("channel_correction"), "evidence_column_raw": raw_col,
             "diagonal_tolerance": tol, "arms": per_arm, "consensus": consensus, "success": success}
    return block, {"transfer_correction": pd.concat(curves, ignore_index=True), "correction_arms": arms}


def headline(block: dict[str, Any]) -> dict[str, Any]:
    """A few headline numbers of a corrected run."""
    s = block.get("success") or {}
    return {"correction_consensus_gap_uncorrected": s.get("consensus_gap_uncorrected"),
            "correction_consensus_gap_corrected": s.get("consensus_gap_corrected"),
            "correction_raw_on_diagonal": s.get("raw_on_diagonal_share"),
            "correction_on_diagonal": s.get("corrected_on_diagonal_share"),
            "correction_kappa_not_worse": s.get("kappa_not_worse")}
