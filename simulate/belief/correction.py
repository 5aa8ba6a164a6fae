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

The map g itself (its families, evaluation, file form and fit: ``CorrectionMap``, ``fit_map``) is
``correction_map.py``, the measure of success ``correction_measure.py``, both below this module and
the figures (``correction_plots.py``) alike.

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
from typing import Any, Optional, Sequence

import numpy as np
import pandas as pd
from pydantic import Field

from chorus.core.config import ConfigError, Strict, load_config, load_named
from chorus.core.runs import RunDir, amends_run, library_versions, write_json

from . import calibration
from .config import BeliefConfig, ChannelCfg, Condition
# the map and its fit, and the measure of success, live beside this module; re-exported here so
# ``chorus.simulate.belief.correction`` keeps every name it had
from .correction_map import (EPS, FAMILIES, FOLDS, MIN_EVENTS, CorrectionMap, diagonal_mse, fit_map, folds,  # noqa: F401
                             s_bins, usable_pairs)
from .correction_map import _logit, _sigmoid
from .correction_measure import applies, condition_arms, diagonal_bins, headline, measure  # noqa: F401
from .channel import Appraisals, OracleAppraiser, Turn, Utterances
from .topics import load_topic

FORMAT = 1
CHANNEL = 41        # role id of the synthetic channel's noise in the request-seed keys
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


# -- from a run directory, to a file ------------------------------------------------------------------
def run_pairs(run_dir: str | Path, topic: str | None = None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The (s, e) pairs a run logged for one topic (one row per appraised utterance; ``e`` is
    the appraiser's evidence before any correction: ``e_raw`` where the run was corrected)."""
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


@amends_run   # writes into the run: held, checked first, its record renewed after
def fit_run(run_dir: str | Path, *, model: str | None = None, topic: str | None = None,
            min_events: int = MIN_EVENTS, store: bool = True, seed: int = 0, n_folds: int = FOLDS,
            plot: bool = True) -> dict[str, Any]:
    """Fit a correction from a run's logged pairs; write ``RUN/correction.json`` (and its plot
    ``RUN/plots/correction_fit.png``), and with ``store`` the stored fit for (topic, model)."""
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


# -- chorus belief correct fit RUN_DIR: a registered verb (chorus.core.verbs) ------------------------------
class CorrectFitConfig(Strict):
    """``chorus belief correct fit RUN_DIR``: which run's (s, e) pairs are fitted, and how (the
    command's options set these fields; ``--set`` any of them). The fit is written into the run
    (``RUN/correction.json``, its plot) and, with ``store``, beside the temperature fit."""
    run: str = Field(..., description="the belief run directory whose logged (s, e) pairs are fitted")
    model: Optional[str] = Field(None, description="store under this model/channel name (default: the run's "
                                                   "model, or its synthetic oracle channel)")
    topic: Optional[str] = Field(None, description="topic (default: the run's only topic)")
    min_events: int = Field(MIN_EVENTS, ge=4, description="refuse fewer (s, e) pairs than this")
    n_folds: int = Field(FOLDS, ge=2, description="folds of the held-out choice of the family")
    seed: int = Field(0, description="seed of the K-fold split")
    store: bool = Field(True, description="store beside the temperature fit (channel_correction: stored)")


FIT_CONFIGS_DIR = Path(__file__).resolve().parent / "configs" / "correct"


def load_fit_config(config: str | Path, overrides: dict[str, Any] | None = None) -> CorrectFitConfig:
    """The config of ``chorus belief correct fit`` (the shipped ``default``, every field at its default)
    with the command's options and ``--set`` over it, validated."""
    return load_named(config, CorrectFitConfig, FIT_CONFIGS_DIR, overrides,
                      default_source="chorus belief correct fit")


def check_fit(cfg: CorrectFitConfig) -> None:
    """``chorus belief correct fit --check``: the run holds enough usable (s, e) pairs of the topic
    (no fit, nothing written; no model is involved, so there is no device plan)."""
    pairs, _ = run_pairs(cfg.run, cfg.topic)
    usable_pairs(pairs.s, pairs.e, min_events=cfg.min_events)


def fit(cfg: CorrectFitConfig, *, progress: Any = None, make_plots: bool = True):
    """``fit_run`` as the verb runs it (``run(cfg, *, progress=, make_plots=)``; no run directory of
    its own: the fit is written into ``cfg.run``). Returns ``(RunDir(cfg.run), the fit's record)``."""
    rec = fit_run(cfg.run, model=cfg.model, topic=cfg.topic, min_events=cfg.min_events, store=cfg.store,
                  seed=cfg.seed, n_folds=cfg.n_folds, plot=make_plots)
    return RunDir(cfg.run), rec


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
