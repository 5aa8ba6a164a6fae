"""Cross-appraisal: separating rendering from reading in the language channel.

The channel audit of one model (transfer curve of e against s) measures its generator and its
appraiser jointly. Here the utterances each model generated are appraised by every model's
appraiser (every pair, each model with itself included), giving one transfer curve per
(generator g, appraiser a) pair, and each pair's channel bias

    bias(g, a) = mean over g's utterances of (e - s)        (optionally also the slope of e on s)

is decomposed additively, ``bias(g, a) = mu + r_g + q_a``, by least squares over the pairs:
r_g is g's rendering part, q_a is a's reading part.

Identifiability (stated, not hidden): the pairs identify every difference r_g - r_h and
q_a - q_b, and mu, but not how the panel's shared bias splits between rendering and reading (a
constant moved from every r to every q fits the same). Default constraint: sum-to-zero,
sum r = sum q = 0, so r_g and q_a are relative to the panel average and mu (the mean over all
pairs) is the shared part that no panel of these models can attribute. ``analysis.anchor: A``
instead assumes A reads faithfully (q_A = 0): then r_g is absolute (g's bias as A reads it) and
mu = 0. The additive form itself is an assumption: the pair residuals are the interaction
(one degree of freedom with two models), reported beside the fit.

Intervals: percentile bootstrap over utterances (seeded), resampling each generator's
utterances with all their appraisals together (the crossed design is kept).

Utterances come from existing LLM-mode belief runs (their utterances table, model and root seed
from the run's config), so nothing is regenerated; a model without a run gets a small generated
set (``generate``: n speaker beliefs evenly spaced, the existing generator role). Appraisals go
through the serving engine's call store (``RUN/calls.sqlite``) with the request seeds the
original run used, so a rerun is free, a killed run resumes, and the self pair reproduces the
run's own appraisals when the appraiser settings match. Engines are used one model at a time
(load, appraise everything, close).

``mode: synthetic`` is a model-free channel with known biases, served through a real
``chorus.serving.Engine`` (the synthetic backend, ``chorus.serving.backends.synthetic``, behind the same call
store): generator g writes "stance x" with x = s + r_g, appraiser a reads x back as
clip(x + q_a + noise). The decomposition must recover r and q there (tests;
``chorus belief cross --synthetic``).

Where each part lives: this module holds the pipeline (utterances, appraisal, ``run_cross``);
the config and ``is_cross_run`` are in ``cross_config.py``, the decomposition math (no model
code, no I/O) in ``cross_analysis.py``, the report from a run directory alone (``report``,
``summary_rows``) in ``cross_report.py``, the three figures in ``cross_plots.py``, the model-free backend in
``serving/backends/synthetic.py`` (``synthetic_engine`` here feeds it the shipped topics'
phrases). Their public names are re-exported here.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from chorus.core.config import ConfigError, load_config
from chorus.core.runs import RunDir, run_dir_path
from chorus.core.seeding import call_seed, rng, stable_int
from chorus.serving.backends import synthetic as synthetic_backend
from chorus.serving.backends.synthetic import SyntheticBackend

from .config import AppraiserCfg, BeliefConfig, GeneratorCfg
# the config, the decomposition and the plots live beside this module; re-exported here so
# ``chorus.simulate.belief.cross`` keeps every name it had
from .cross_analysis import (STREAM_BOOT, additive_fit, bootstrap_pairs, crossed, decompose, design,  # noqa: F401
                             pair_stats, transfer_curves)
from .cross_config import (COMMAND, TABLES, CrossAnalysisCfg, CrossConfig, GenerateCfg, SyntheticCfg,  # noqa: F401
                           is_cross_run)
from .cross_plots import PLOTS, plot_pair_bias, plot_parts, plot_transfer_grid  # noqa: F401
from .cross_report import CONSTRAINTS, report, summary_rows  # noqa: F401
from .channel import APPRAISE, LLMAppraiser, LLMGenerator, RunKey, Turn, temperature_scale
from .topics import list_topics, load_topic
from .calibration import find_fit, load_fit
from chorus.serving.roles import plan_roles

STREAM_SUBSAMPLE = 31
# midpoints of the nine stance bins (topics.stance_bin): what a synthetic generator reads off a phrase
BIN_MID = np.array([0.05, 0.175, 0.30, 0.40, 0.50, 0.60, 0.70, 0.825, 0.95])


# -- the synthetic channel (chorus.serving.backends.synthetic, fed the shipped topics' phrases) ------------
def stance_phrases() -> dict[str, float]:
    """Every shipped topic's stance phrase -> its bin midpoint (BIN_MID): what the synthetic
    backend reads off a generator prompt."""
    phrases = {}
    for t in list_topics():
        for i, ph in enumerate(load_topic(t).stance_phrases):
            phrases[ph] = BIN_MID[i]
    return phrases


def synthetic_engine(model: str, syn: SyntheticCfg, store: str | Path | None = None):
    """A ``chorus.serving.Engine`` around the synthetic backend of ``model``
    (``chorus.serving.backends.synthetic``) with ``syn``'s biases and the shipped topics' phrases (its
    identity hashes the channel's parameters, so a changed bias never reads a stale store entry)."""
    if model not in syn.render_bias or model not in syn.read_bias:
        raise ConfigError(f"synthetic model {model!r} needs synthetic.render_bias and synthetic.read_bias entries")
    return synthetic_backend.synthetic_engine(
        model, syn.render_bias[model], syn.read_bias[model], noise=syn.noise, fail_rate=syn.fail_rate,
        phrases=stance_phrases(), store=store, description="synthetic channel (chorus belief cross --synthetic)")


# -- utterances --------------------------------------------------------------------------------
UTT_COLS = ["generator", "uid", "source", "run", "root_seed", "seed", "round", "turn", "topic", "s",
            "text", "orig_p_raw", "orig_e"]


def run_utterances(path: str | Path) -> tuple[str, pd.DataFrame, dict[str, Any]]:
    """(model, utterances, meta) of an LLM-mode belief run, read from its files."""
    run = RunDir(path)
    if not (run.path / "config.yaml").is_file() or not (run.path / "tables" / "utterances.parquet").is_file():
        raise ConfigError(f"run {run.path}: not a belief run directory with an utterances table "
                          f"(config.yaml, tables/utterances.parquet)")
    cfg = load_config(run.path / "config.yaml", BeliefConfig)
    if cfg.mode != "llm":
        raise ConfigError(f"run {run.path}: mode = {cfg.mode!r} has no utterances to appraise (an LLM-mode "
                          f"run is needed)")
    ut = run.read_table("utterances")
    if "text" not in ut.columns:
        raise ConfigError(f"run {run.path}: its utterances table has no text column")
    topics = run.read_table("runs").set_index("run").topic
    orig_e = ut["e_raw"] if "e_raw" in ut.columns else ut["e"]  # before any directional correction
    df = pd.DataFrame({
        "source": f"run:{run.path}", "run": ut.run.astype(int), "root_seed": int(cfg.seed),
        "seed": ut.seed.astype(int), "round": ut["round"].astype(int), "turn": ut.turn.astype(int),
        "topic": ut.run.map(topics).astype(str), "s": ut.s.astype(float),
        "text": ut.text.astype(object).where(ut.text.notna(), None), "orig_p_raw": ut.p_raw.astype(float),
        "orig_e": orig_e.astype(float)})
    prov = run.provenance()
    meta = {"path": str(run.path), "model": cfg.llm.model.profile, "root_seed": cfg.seed, "utterances": len(df),
            "appraiser": cfg.llm.appraiser.model_dump(), "appraiser_taus": prov.get("appraiser_taus")}
    return cfg.llm.model.profile, df, meta


def subsample(df: pd.DataFrame, n: int | None, seed: int, model: str) -> pd.DataFrame:
    """At most ``n`` rows, drawn without replacement from a stream keyed by the model's name
    (adding a model to the panel does not change another's sample); original order kept."""
    if n is None or len(df) <= n:
        return df
    pick = rng(seed, STREAM_SUBSAMPLE, stable_int(model, bits=32, algo="crc32")).choice(len(df), n, replace=False)
    return df.iloc[np.sort(pick)]


def grid_utterances(model: str, n: int, lo: float, hi: float, topic: str, root_seed: int,
                    source: str) -> pd.DataFrame:
    """The rows of a generated set (text filled in by the generator): s evenly spaced."""
    return pd.DataFrame({"source": source, "run": -1, "root_seed": root_seed, "seed": np.arange(n),
                         "round": 0, "turn": 0, "topic": load_topic(topic).id,
                         "s": np.linspace(lo, hi, n), "text": None, "orig_p_raw": np.nan, "orig_e": np.nan})


def generate_texts(engine: Any, rows: pd.DataFrame, gen: GeneratorCfg) -> tuple[list[str | None], int]:
    """Texts for generated rows through the existing generator role (request seeds
    call_seed(root, uid, 0, 0, GEN, 0): a rerun reads them from the store)."""
    g = LLMGenerator(engine, gen.temperature, gen.top_p, gen.max_tokens)
    texts = pd.Series(None, index=rows.index, dtype=object)
    for (topic, root), d in rows.groupby(["topic", "root_seed"], sort=False):
        tp = load_topic(topic)
        turn = Turn(int(root), 0, 0, [RunKey(seed=int(sd), topic=tp) for sd in d.seed],
                    np.zeros(len(d), dtype=int), d.s.to_numpy())
        texts[d.index] = g.generate(turn).texts
    return texts.tolist(), g.requests


# -- appraisal ---------------------------------------------------------------------------------
def resolve_tau(cfg: CrossConfig, model: str, topic: str) -> dict[str, Any]:
    """The appraiser temperature of ``model`` on ``topic``: appraiser.tau > taus[model] > the
    stored fit > 1.0 (uncalibrated), with where it came from."""
    if cfg.appraiser.tau is not None:
        return {"tau": float(cfg.appraiser.tau), "source": "config appraiser.tau"}
    if model in cfg.taus:
        return {"tau": float(cfg.taus[model]), "source": "config taus"}
    tid = load_topic(topic).id
    fit = load_fit(tid, model)
    if fit is not None:
        return {"tau": float(fit["tau"]), "source": str(find_fit(tid, model))}
    return {"tau": 1.0, "source": "uncalibrated (no stored fit)"}


def appraise(engine: Any, ut: pd.DataFrame, cfg: AppraiserCfg, taus: dict[str, float],
             chunk: int = 512, progress: Callable[[int], Any] | None = None) -> tuple[pd.DataFrame, int]:
    """Every utterance of ``ut`` read by one appraiser (``taus``: topic -> tau). Request seeds are
    the original run's, call_seed(root, seed, round, turn, APPRAISE, attempt). Returns (p_raw, e,
    failed, attempts, error, tau per row; requests made, retries included)."""
    app = LLMAppraiser(engine, cfg.temperature, cfg.max_tokens, cfg.max_retries, cfg.retry_temperature)
    n = len(ut)
    p = np.full(n, np.nan)
    att = np.zeros(n, dtype=np.int32)
    err: list[str | None] = [None] * n
    text, topic = ut.text.to_numpy(object), ut.topic.to_numpy(object)
    keys = ut[["root_seed", "seed", "round", "turn"]].to_numpy(np.int64)
    ok = np.flatnonzero([t is not None for t in text])
    for i in np.flatnonzero([t is None for t in text]):
        err[i] = "no utterance"
    for c0 in range(0, len(ok), chunk):
        idx = ok[c0:c0 + chunk]
        convs = [load_topic(topic[i]).appraiser_messages(text[i]) for i in idx]
        kk = keys[idx].tolist()
        pi, ai, ei = app.read(convs, lambda j, a, kk=kk: call_seed(kk[j][0], *kk[j][1:], APPRAISE, a))
        p[idx], att[idx] = pi, ai
        for j, i in enumerate(idx):
            err[i] = ei[j]
        if progress:
            progress(len(idx))
    tau = np.array([taus[t] for t in topic], dtype=float)
    e = np.where(np.isfinite(p), temperature_scale(p, tau), np.nan)
    return pd.DataFrame({"p_raw": p, "e": e, "failed": ~np.isfinite(e), "attempts": att,
                         "error": pd.Series(err, dtype="string"), "tau": tau}), app.requests


# -- the run -----------------------------------------------------------------------------------
def read_sources(cfg: CrossConfig) -> tuple[list[tuple[str, pd.DataFrame]], list[dict[str, Any]]]:
    """The runs' utterances (model, frame) and their records, each run's model checked against the
    panel, and every topic loaded: bad input fails here, before any model is loaded."""
    sources, metas = [], []
    for r in cfg.runs:
        model, df, meta = run_utterances(r)
        if model not in cfg.panel():
            raise ConfigError(f"run {r}: its model {model!r} is not in the panel {cfg.panel()} (add --model {model})")
        sources.append((model, df))
        metas.append(meta)
    for t in {cfg.generate.topic} | {t for _, d in sources for t in d.topic.unique()}:
        load_topic(t)  # a bad topic fails before any model is loaded
    return sources, metas


def _panel_plan(cfg: CrossConfig):
    """The device plan of an LLM-mode panel: one model at a time, a phase each."""
    return plan_roles({f"panel:{m}": cfg.spec(m) for m in cfg.panel()}, phase_of=lambda role: role)


def plan_engines(cfg: CrossConfig):
    """``chorus belief cross --check``: the runs and topics read and checked (no model call), then the
    device plan of an LLM-mode panel; None in synthetic mode, which loads no model."""
    read_sources(cfg)
    return _panel_plan(cfg) if cfg.mode == "llm" else None


def default_out(cfg: CrossConfig) -> Path:
    return run_dir_path(None, "belief", cfg.name)


def run_cross(cfg: CrossConfig, out: str | Path | None = None, *, load: Callable[[str], Any] | None = None,
              close_engines: bool = True, progress: Callable[[int, int], Any] | None = None,
              make_plots: bool = True) -> tuple[RunDir, dict[str, Any]]:
    """Collect the utterances, appraise them with every model, write the run directory and its
    report. ``load(model)``: an engine for a model (default: ``chorus.serving.build_engine`` on the
    run's call store, or the synthetic engine); used one model at a time."""
    sources, metas = read_sources(cfg)
    dplan = None
    if load is None and cfg.mode == "llm":   # (an unknown profile fails here, before the run directory)
        dplan = _panel_plan(cfg)
    out = Path(out) if out is not None else default_out(cfg)
    run = RunDir.create(out, part="belief", config=cfg, seeds={"root": cfg.seed}, command=COMMAND,
                        mode=cfg.mode, models=cfg.panel(), sources=metas,
                        determinism={"appraisal_seeds": "call_seed(root, seed, round, turn, APPRAISE, attempt) "
                                     "of the utterance's run", "subsample": "rng(seed, 31, crc32(model))",
                                     "bootstrap": "rng(seed, 32)"})
    if load is None:
        if cfg.mode == "synthetic":
            load = lambda m: synthetic_engine(m, cfg.synthetic, run.store_path)
        else:
            run.update_provenance(device_plan=dplan.to_dict())

            def load(m):
                from chorus.serving import build_engine  # at call time: the seam tests patch
                return build_engine(cfg.spec(m), store=run.store_path, role=f"panel:{m}", plan=dplan)

    # utterances: the runs' (subsampled), else generated
    frames = []
    for m in cfg.panel():
        got = [d for mm, d in sources if mm == m]
        if got:
            d = subsample(pd.concat(got, ignore_index=True), cfg.max_utterances, cfg.seed, m)
        elif cfg.mode == "synthetic":
            sy = cfg.synthetic
            d = grid_utterances(m, sy.n, sy.s_low, sy.s_high, cfg.generate.topic, cfg.seed, "synthetic")
        else:
            g = cfg.generate
            d = grid_utterances(m, g.n, g.s_low, g.s_high, g.topic, cfg.seed, "generated")
        frames.append(d.assign(generator=m).reset_index(drop=True))
    to_gen = [i for i, d in enumerate(frames) if (d.source == "generated").any()]
    n_app = sum(len(d) for d in frames) * len(cfg.panel())
    if progress:
        progress(n_app + sum(len(frames[i]) for i in to_gen), 0)

    stats: dict[str, Any] = {"loads": 0, "generator_calls": 0, "appraiser_calls": {}, "computed": {},
                             "wall_s": {}}
    held: dict[str, Any] = {}

    def acquire(m: str) -> Any:
        for k in [k for k in held if k != m]:
            release(k)
        if m not in held:
            held[m] = load(m)
            stats["loads"] += 1
        return held[m]

    def release(m: str) -> None:
        eng = held.pop(m)
        stats["computed"][m] = stats["computed"].get(m, 0) + int(getattr(eng, "model_calls", 0) or 0)
        engines = run.provenance().get("engines") or {}
        prov = eng.provenance() if callable(getattr(eng, "provenance", None)) else getattr(eng, "identity", None)
        engines[m] = prov
        run.update_provenance(engines=engines)
        if close_engines and hasattr(eng, "close"):
            eng.close()

    try:
        for i in to_gen:  # generation first: every appraiser needs every utterance
            m = cfg.panel()[i]
            t0 = time.perf_counter()
            texts, req = generate_texts(acquire(m), frames[i], cfg.generate.generator)
            frames[i] = frames[i].assign(text=texts)
            stats["generator_calls"] += req
            stats["wall_s"][f"generate:{m}"] = time.perf_counter() - t0
            if progress:
                progress(n_app, len(texts))
        if cfg.mode == "synthetic":  # exact s + r_g: the rendering is a known function
            for i, d in enumerate(frames):
                if (d.source == "synthetic").any():
                    be = SyntheticBackend(cfg.panel()[i], cfg.synthetic.render_bias[cfg.panel()[i]], 0.0)
                    frames[i] = d.assign(text=[be.render(s) if src == "synthetic" else t
                                               for s, t, src in zip(d.s, d.text, d.source)])
        ut = pd.concat(frames, ignore_index=True)
        ut["uid"] = ut.groupby("generator").cumcount().astype(np.int32)
        ut = ut[UTT_COLS]
        ut["text"] = pd.Series(ut.text.tolist(), dtype="string")
        run.write_table("utterances", ut)
        # a failed generation has nothing to read: counted (generation_failures), not appraised
        work = ut[ut.text.notna()].assign(text=lambda d: d.text.astype(object)).reset_index(drop=True)

        order = ([cfg.panel()[to_gen[-1]]] if to_gen else []) + [m for m in cfg.panel()
                                                                if not to_gen or m != cfg.panel()[to_gen[-1]]]
        taus, parts = {}, []
        for a in order:  # the engine still held from generation is the first appraiser
            taus[a] = {t: resolve_tau(cfg, a, t) for t in work.topic.unique()}
            t0 = time.perf_counter()
            res, req = appraise(acquire(a), work, cfg.appraiser, {t: v["tau"] for t, v in taus[a].items()},
                                progress=(lambda k: progress(n_app, k)) if progress else None)
            stats["appraiser_calls"][a] = req
            stats["wall_s"][f"appraise:{a}"] = time.perf_counter() - t0
            parts.append(pd.concat([work[["generator", "uid", "s"]], res.assign(appraiser=a)], axis=1))
            release(a)
    finally:
        for m in list(held):
            release(m)
    app = pd.concat(parts, ignore_index=True)
    app = app[["generator", "appraiser", "uid", "s", "p_raw", "e", "failed", "attempts", "error", "tau"]]
    app["generator"] = pd.Categorical(app.generator, categories=cfg.panel())
    app["appraiser"] = pd.Categorical(app.appraiser, categories=cfg.panel())
    app = app.sort_values(["generator", "appraiser", "uid"]).reset_index(drop=True)
    app["generator"], app["appraiser"] = app.generator.astype(str), app.appraiser.astype(str)
    run.write_table("appraisals", app)
    n_utt = int(ut.text.notna().sum())
    calls = int(sum(stats["appraiser_calls"].values()))
    stats.update({
        "utterances": len(ut), "generation_failures": int(ut.text.isna().sum()),
        "appraisers": len(cfg.panel()), "first_pass_calls": n_utt * len(cfg.panel()),
        "appraiser_calls_total": calls, "retries": calls - n_utt * len(cfg.panel()),
        "computed_total": int(sum(stats["computed"].values())), "appraiser_taus": taus})
    run.update_provenance(stats=stats, store=str(run.store_path))
    summary = report(run.path, make_plots=make_plots, tables={"utterances": ut, "appraisals": app})
    run.finish()
    return run, summary
