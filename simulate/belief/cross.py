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
``serving.Engine`` (a synthetic backend behind the same call store): generator g writes
"stance x" with x = s + r_g, appraiser a reads x back as clip(x + q_a + noise). The
decomposition must recover r and q there (tests; ``chorus belief cross --synthetic``).
"""
from __future__ import annotations

import hashlib
import json
import re
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal, Optional

import numpy as np
import pandas as pd
from pydantic import Field, model_validator

from core.config import ConfigError, Strict, load_config
from core.runs import RunDir, amends_run, run_dir_path
from core.seeding import call_seed, rng, stable_int
from serving.spec import Backend, Dtype, ModelSpec, RoleSpec

from . import analysis
from .config import AppraiserCfg, BeliefConfig, GeneratorCfg
from .roles import APPRAISE, LLMAppraiser, LLMGenerator, RunKey, Turn, temperature_scale
from .topics import list_topics, load_topic

COMMAND = "cross"
TABLES = ("utterances", "appraisals")
STREAM_SUBSAMPLE, STREAM_BOOT = 31, 32
# midpoints of the nine stance bins (topics.stance_bin): what a synthetic generator reads off a phrase
BIN_MID = np.array([0.05, 0.175, 0.30, 0.40, 0.50, 0.60, 0.70, 0.825, 0.95])


# -- config ------------------------------------------------------------------------------------
class GenerateCfg(Strict):
    """Utterances for a model with no run: ``n`` speaker beliefs evenly spaced on [s_low, s_high]
    (n = 1: s_low alone)."""
    n: int = Field(24, ge=1)
    s_low: float = Field(0.05, ge=0.0, le=1.0)
    s_high: float = Field(0.95, ge=0.0, le=1.0)
    topic: str = "transit_priority"
    generator: GeneratorCfg = GeneratorCfg()


class SyntheticCfg(Strict):
    """The model-free channel: per model a rendering bias r (generator writes s + r) and a
    reading bias q (appraiser reads x + q + N(0, noise)), clipped to [0, 1]; a fraction
    ``fail_rate`` of appraisals is malformed (exercises retries and failure counting)."""
    render_bias: dict[str, float] = Field(default_factory=lambda: {"synth-a": 0.06, "synth-b": -0.04, "synth-c": 0.0})
    read_bias: dict[str, float] = Field(default_factory=lambda: {"synth-a": -0.03, "synth-b": 0.05, "synth-c": 0.0})
    noise: float = Field(0.02, ge=0.0)
    fail_rate: float = Field(0.0, ge=0.0, lt=1.0)
    n: int = Field(200, ge=2, description="utterances per model (no run given)")
    s_low: float = Field(0.2, ge=0.0, le=1.0)
    s_high: float = Field(0.8, ge=0.0, le=1.0)


class CrossAnalysisCfg(Strict):
    bins: int = Field(10, ge=2, description="transfer-curve bins on s")
    n_boot: int = Field(1000, ge=0, description="bootstrap replicates over utterances (0: no intervals)")
    ci: float = Field(0.95, gt=0.0, lt=1.0)
    anchor: str | None = Field(None, description="a model assumed to read faithfully (q = 0); "
                               "null = sum-to-zero")


class CrossConfig(Strict):
    name: str = "cross"
    mode: Literal["llm", "synthetic"] = "llm"
    seed: int = Field(0, ge=0, description="root seed: generated utterances, subsampling, bootstrap")
    models: list[RoleSpec] = Field(default_factory=list, description="the panel: one role per model, a profile "
                                   "name or a spec whose null fields come from backend / dtype below (each "
                                   "model named by its profile); synthetic: empty = the models of "
                                   "synthetic.render_bias")
    runs: list[str] = Field(default_factory=list, description="LLM-mode belief run directories; "
                            "each one's model must be in the panel")
    backend: Backend = Field("auto", description="every panel model's backend (each model is one role: its profile)")
    dtype: Optional[Dtype] = None
    max_utterances: int | None = Field(400, ge=1, description="per generator from runs: a seeded "
                                       "subsample (the cost cap); null = all")
    generate: GenerateCfg = GenerateCfg()
    appraiser: AppraiserCfg = AppraiserCfg()
    taus: dict[str, float] = Field(default_factory=dict, description="tau per appraiser model "
                                   "(over the stored fit); appraiser.tau overrides both")
    synthetic: SyntheticCfg = SyntheticCfg()
    analysis: CrossAnalysisCfg = CrossAnalysisCfg()

    def panel(self) -> list[str]:
        """The panel's model names (their profiles), in order."""
        return [m.profile for m in self.models]

    def spec(self, name: str) -> ModelSpec:
        """The engine spec of panel model ``name``: its own fields over backend / dtype."""
        m = self.models[self.panel().index(name)]
        return m.over({"backend": self.backend, "dtype": self.dtype}, f"panel:{name}")

    @model_validator(mode="after")
    def _panel(self) -> CrossConfig:
        if self.mode == "synthetic" and not self.panel():
            self.models = [RoleSpec(profile=m) for m in self.synthetic.render_bias]
        if len(self.panel()) < 2:
            raise ValueError(f"models = {self.panel()}: cross-appraisal needs at least two models")
        if len(set(self.panel())) != len(self.panel()):
            raise ValueError(f"models = {self.panel()}: each model once")
        if self.analysis.anchor is not None and self.analysis.anchor not in self.panel():
            raise ValueError(f"analysis.anchor = {self.analysis.anchor!r} is not one of models {self.panel()}")
        bad = [k for k, v in self.taus.items() if k not in self.panel() or not v > 0]
        if bad:
            raise ValueError(f"taus: {bad} are not models of the panel {self.panel()} or not > 0")
        if self.mode == "synthetic":
            for field in ("render_bias", "read_bias"):
                miss = [m for m in self.panel() if m not in getattr(self.synthetic, field)]
                if miss:
                    raise ValueError(f"synthetic.{field} has no entry for {miss} (e.g. --set "
                                     f"synthetic.{field}.{miss[0]}=0.05)")
        for lo, hi, where in ((self.generate.s_low, self.generate.s_high, "generate"),
                              (self.synthetic.s_low, self.synthetic.s_high, "synthetic")):
            if not lo < hi:
                raise ValueError(f"{where}.s_low = {lo} must be < {where}.s_high = {hi}")
        if len(set(self.runs)) != len(self.runs):
            raise ValueError(f"runs lists a run twice: {self.runs}")
        return self


def is_cross_run(path: str | Path) -> bool:
    p = Path(path) / "provenance.json"
    return p.is_file() and json.loads(p.read_text()).get("command") == COMMAND


# -- the synthetic channel (a model-free serving backend) --------------------------------------
class _CharTokenizer:
    """One id per character: the engine renders prompts with its plain template, the synthetic
    backend reads them back verbatim."""
    chat_template = None
    bos_token = ""

    def __call__(self, text: str, add_special_tokens: bool = False) -> SimpleNamespace:
        return SimpleNamespace(input_ids=[ord(c) for c in text])


_NUMBER = re.compile(r"stance (-?\d+(?:\.\d+)?)")
_COMMENT = re.compile(r'Comment: "(.*?)"', re.DOTALL)


class SyntheticBackend:
    """Generator: the stance phrase in the prompt -> its bin midpoint + r, written as
    "stance x" (``render`` does the same from an exact s). Appraiser: the number in the comment
    + q + seeded Gaussian noise, clipped, as {"p_plus": ...}; a comment without one, or a draw
    under ``fail_rate``, gives malformed JSON (a failure, never a default). Probe: the phrase's
    bin midpoint x 100. Deterministic in (prompt, seed, temperature)."""
    name = "synthetic"
    max_model_len = 1 << 24

    def __init__(self, model: str, render_bias: float, read_bias: float, noise: float = 0.0,
                 fail_rate: float = 0.0):
        self.model, self.r, self.q, self.noise, self.fail_rate = model, render_bias, read_bias, noise, fail_rate
        phrases = {}
        for t in list_topics():
            for i, ph in enumerate(load_topic(t).stance_phrases):
                phrases[ph] = i
        self._phrases = sorted(phrases.items(), key=lambda kv: -len(kv[0]))  # longest match first

    def settings(self) -> dict[str, Any]:
        return {"synthetic": True, "render_bias": self.r, "read_bias": self.q, "noise": self.noise,
                "fail_rate": self.fail_rate}

    def _phrase_bin(self, text: str) -> int | None:
        return next((i for ph, i in self._phrases if ph in text), None)

    def render(self, s: float) -> str:
        return f"I put my stance {float(np.clip(s + self.r, 0.0, 1.0)):.4f} on this."

    def _gen(self, prompt: str, smp: Any) -> str:
        # the draw depends on the whole request, like a model's output (not on the seed alone)
        key = [stable_int(self.model, bits=32, algo="crc32"), stable_int(prompt, bits=32, algo="crc32")]
        g = np.random.default_rng([int(smp.seed or 0), *key, int(smp.temperature * 1000)])
        props = (smp.json_schema or {}).get("properties", {})
        if "p_plus" in props:
            m = _COMMENT.search(prompt)
            x = _NUMBER.search(m.group(1)) if m else None
            if x is None or g.random() < self.fail_rate:
                return '{"p_plus": '
            p = float(np.clip(float(x.group(1)) + self.q + self.noise * g.standard_normal(), 0.0, 1.0))
            return json.dumps({"p_plus": round(p, 6)})
        k = self._phrase_bin(prompt)
        if "stance" in props:
            return json.dumps({"stance": round(100 * float(BIN_MID[k]))}) if k is not None else "{}"
        return self.render(BIN_MID[k]) if k is not None else "I have nothing to say."

    def generate(self, prompts: list[list[int]], samplings: list[Any]):
        out = []
        for j, (ids, smp) in enumerate(zip(prompts, samplings)):
            text = self._gen("".join(map(chr, ids)), smp)
            out.append((j, {"text": text, "prompt_tokens": len(ids), "completion_tokens": len(text),
                            "finish_reason": "stop", "latency_s": 0.0}))
        yield out

    def option_logprobs(self, prompts, options):
        raise NotImplementedError("the synthetic channel has no log-probabilities")

    def close(self) -> None:
        pass


def synthetic_engine(model: str, syn: SyntheticCfg, store: str | Path | None = None):
    """A ``serving.Engine`` around the synthetic backend of ``model`` (its identity hashes the
    channel's parameters, so a changed bias never reads a stale store entry)."""
    from serving import CallStore, Engine, Profile
    if model not in syn.render_bias or model not in syn.read_bias:
        raise ConfigError(f"synthetic model {model!r} needs synthetic.render_bias and synthetic.read_bias entries")
    be = SyntheticBackend(model, syn.render_bias[model], syn.read_bias[model], syn.noise, syn.fail_rate)
    h = hashlib.sha256(json.dumps(be.settings(), sort_keys=True).encode()).hexdigest()[:16]
    prof = Profile(model, "synthetic", "synthetic channel (chorus belief cross --synthetic)", chat=False)
    return Engine(prof, be, _CharTokenizer(), dtype="synthetic", store=CallStore(store) if store else None,
                  weights_sha256=h)


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
    from .calibration import find_fit, load_fit
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
def default_out(cfg: CrossConfig) -> Path:
    return run_dir_path(None, "belief", cfg.name)


def run_cross(cfg: CrossConfig, out: str | Path | None = None, *, load: Callable[[str], Any] | None = None,
              close_engines: bool = True, progress: Callable[[int, int], Any] | None = None,
              make_plots: bool = True) -> tuple[RunDir, dict[str, Any]]:
    """Collect the utterances, appraise them with every model, write the run directory and its
    report. ``load(model)``: an engine for a model (default: ``serving.build_engine`` on the
    run's call store, or the synthetic engine); used one model at a time."""
    sources, metas = [], []
    for r in cfg.runs:
        model, df, meta = run_utterances(r)
        if model not in cfg.panel():
            raise ConfigError(f"run {r}: its model {model!r} is not in the panel {cfg.panel()} (add --model {model})")
        sources.append((model, df))
        metas.append(meta)
    for t in {cfg.generate.topic} | {t for _, d in sources for t in d.topic.unique()}:
        load_topic(t)  # a bad topic fails before any model is loaded
    dplan = None
    if load is None and cfg.mode == "llm":   # the panel, one model at a time: a phase each
        from serving.roles import plan_roles   # (an unknown profile fails here, before the run directory)
        dplan = plan_roles({f"panel:{m}": cfg.spec(m) for m in cfg.panel()}, phase_of=lambda role: role)
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
                from serving import build_engine
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


# -- decomposition -----------------------------------------------------------------------------
def _effects(n: int, i: int) -> np.ndarray:
    """Effects coding of level i of n under a sum-to-zero constraint (n - 1 columns)."""
    v = np.zeros(n - 1)
    if i < n - 1:
        v[i] = 1.0
    else:
        v[:] = -1.0
    return v


def design(n_gen: int, n_app: int, pairs: list[tuple[int, int]]) -> np.ndarray:
    """Effects-coded design of bias(g, a) = mu + r_g + q_a under sum r = sum q = 0: columns
    [mu, r_0..r_{G-2}, q_0..q_{A-2}]; the last generator's (appraiser's) part is minus the sum
    of the others."""
    return np.array([np.concatenate([[1.0], _effects(n_gen, g), _effects(n_app, a)]) for g, a in pairs])


def additive_fit(B: np.ndarray, anchor: int | None = None) -> dict[str, np.ndarray]:
    """Least-squares fit of the (..., M, M) pair matrix B[g, a] (NaN = unobserved pair) to
    mu + r_g + q_a. Sum-to-zero r and q, mu the grand mean (with every pair observed: r = row
    means - mu, q = column means - mu); ``anchor`` k: q_k = 0 and mu = 0 instead (r_g absolute,
    as k reads). A generator (appraiser) with no observed pair is left out of the fit and of its
    constraint (its part NaN). Leading dimensions are replicates; a replicate missing a pair the
    others have is NaN. Returns mu (...), r (..., M), q (..., M), fitted and resid (..., M, M).
    Raises ValueError when the observed pairs do not identify the parts."""
    B = np.asarray(B, dtype=float)
    M = B.shape[-1]
    lead = B.shape[:-2]
    flat = B.reshape(-1, M * M)
    seen = np.isfinite(flat).any(0)
    gens = [g for g in range(M) if seen.reshape(M, M)[g].any()]
    apps = [a for a in range(M) if seen.reshape(M, M)[:, a].any()]
    pairs = [(g, a) for g in range(M) for a in range(M) if seen[g * M + a]]
    if not pairs:
        raise ValueError("no pair has a finite value (no valid appraisal; for the slope, a single speaker belief)")
    if anchor is not None and anchor not in apps:
        raise ValueError(f"the anchor (model {anchor}) has no valid appraisal to anchor on")
    X = design(len(gens), len(apps), [(gens.index(g), apps.index(a)) for g, a in pairs])
    if np.linalg.matrix_rank(X) < X.shape[1]:
        raise ValueError(f"the observed pairs {pairs} do not identify the additive model (every generator and "
                         f"every appraiser must be linked through observed pairs)")
    with np.errstate(invalid="ignore"):
        theta = flat[:, seen] @ np.linalg.pinv(X).T  # rows with a NaN stay NaN
    G = len(gens)
    mu = theta[:, 0]
    r, q = np.full((len(flat), M), np.nan), np.full((len(flat), M), np.nan)
    rg, qa = theta[:, 1:G], theta[:, G:]
    r[:, gens] = np.concatenate([rg, -rg.sum(1, keepdims=True)], axis=1)
    q[:, apps] = np.concatenate([qa, -qa.sum(1, keepdims=True)], axis=1)
    if anchor is not None:
        r = r + (mu + q[:, anchor])[:, None]
        q = q - q[:, [anchor]]
        mu = np.where(np.isfinite(mu), 0.0, np.nan)
    fitted = mu[:, None, None] + r[:, :, None] + q[:, None, :]
    resid = flat.reshape(-1, M, M) - fitted
    return {"mu": mu.reshape(lead), "r": r.reshape(*lead, M), "q": q.reshape(*lead, M),
            "fitted": fitted.reshape(*lead, M, M), "resid": resid.reshape(*lead, M, M)}


def pair_stats(s: np.ndarray, E: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bias mean(e - s) and OLS slope of e on s per appraiser column, over the valid rows.
    ``s``: (..., n), ``E``: (..., n, M) with NaN for failed appraisals; returns (..., M) each."""
    ok = np.isfinite(E)
    S = np.broadcast_to(s[..., None], E.shape)
    cnt = ok.sum(-2)
    with np.errstate(invalid="ignore", divide="ignore"):
        bias = np.where(ok, E - S, 0.0).sum(-2) / cnt
        sbar = np.where(ok, S, 0.0).sum(-2) / cnt
        ebar = np.where(ok, E, 0.0).sum(-2) / cnt
        ds = np.where(ok, S - sbar[..., None, :], 0.0)
        de = np.where(ok, E - ebar[..., None, :], 0.0)
        var = (ds * ds).sum(-2)
        slope = np.where((cnt >= 2) & (var > 0), (ds * de).sum(-2) / var, np.nan)
    return np.where(cnt > 0, bias, np.nan), slope


def crossed(app: pd.DataFrame, models: list[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per generator: s (n,) and the appraisals E (n, M) in panel order (NaN = failed)."""
    out = {}
    for g in models:
        d = app[app.generator == g]
        if d.empty:
            continue
        E = d.pivot(index="uid", columns="appraiser", values="e").reindex(columns=models)
        s = d.drop_duplicates("uid").set_index("uid").s.reindex(E.index)
        out[g] = (s.to_numpy(float), E.to_numpy(float))
    return out


def bootstrap_pairs(mats: dict[str, tuple[np.ndarray, np.ndarray]], models: list[str], n_boot: int,
                    seed: int, chunk: int = 250) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pair bias and slope matrices (M, M) and their bootstrap replicates (n_boot, M, M):
    each generator's utterances are resampled with all their appraisals."""
    M = len(models)
    bias, slope = np.full((M, M), np.nan), np.full((M, M), np.nan)
    bb, bs = np.full((n_boot, M, M), np.nan), np.full((n_boot, M, M), np.nan)
    g_rng = rng(seed, STREAM_BOOT)
    for gi, g in enumerate(models):
        if g not in mats:
            continue
        s, E = mats[g]
        bias[gi], slope[gi] = pair_stats(s, E)
        idx = g_rng.integers(0, len(s), (n_boot, len(s)))
        for c0 in range(0, n_boot, chunk):  # bounded memory: chunk x n x M
            i = idx[c0:c0 + chunk]
            bb[c0:c0 + chunk, gi], bs[c0:c0 + chunk, gi] = pair_stats(s[i], E[i])
    return bias, slope, bb, bs


def _interval(x: np.ndarray, ci: float) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval over the replicates (axis 0), each element over its finite values."""
    x = np.asarray(x, dtype=float)
    if x.shape[0] == 0:
        nan = np.full(x.shape[1:], np.nan)
        return nan, nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN element: NaN, said so by the value
        lo, hi = np.nanquantile(x, [(1 - ci) / 2, 1 - (1 - ci) / 2], axis=0)
    return lo, hi


def decompose(app: pd.DataFrame, models: list[str], n_boot: int = 1000, seed: int = 0, ci: float = 0.95,
              anchor: str | None = None) -> dict[str, Any]:
    """Pair statistics and the additive decomposition of bias and slope, with bootstrap
    intervals. Returns {"pairs": DataFrame, "parts": DataFrame, "fit": {...}}."""
    M = len(models)
    k = models.index(anchor) if anchor is not None else None
    mats = crossed(app, models)
    bias, slope, bb, bs = bootstrap_pairs(mats, models, n_boot, seed)
    rows, parts, fit_info = [], [], {}
    fits = {}
    for qname, point, boot in (("bias", bias, bb), ("slope", slope, bs)):
        try:
            f = additive_fit(point, k)
            fb = additive_fit(boot, k) if n_boot else None
            why = None
        except ValueError as err:  # e.g. an appraiser that failed every appraisal: said, not fitted
            nan = {"mu": np.nan, "r": np.full(M, np.nan), "q": np.full(M, np.nan),
                   "fitted": np.full((M, M), np.nan), "resid": np.full((M, M), np.nan)}
            f, fb, why = nan, None, str(err)
        fits[qname] = (f, fb)
        used = np.isfinite(fb["mu"]) if fb is not None else np.zeros(0, bool)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            fit_info[qname] = {"identified": why is None, "why_not": why,
                               "replicates_used": int(used.sum()), "replicates": n_boot,
                               "residual_rms": float(np.sqrt(np.nanmean(f["resid"] ** 2))),
                               "residual_max_abs": float(np.nanmax(np.abs(f["resid"]))),
                               "pair_sd": float(np.nanstd(point))}
        mu_lo, mu_hi = _interval(fb["mu"], ci) if fb is not None else (np.nan, np.nan)
        parts.append({"quantity": qname, "model": "*", "part": "shared", "estimate": float(f["mu"]),
                      "lo": float(mu_lo), "hi": float(mu_hi)})
        for part, key in (("render", "r"), ("read", "q")):
            lo, hi = _interval(fb[key], ci) if fb is not None else (np.full(M, np.nan),) * 2
            for i, m in enumerate(models):
                parts.append({"quantity": qname, "model": m, "part": part, "estimate": float(f[key][i]),
                              "lo": float(lo[i]), "hi": float(hi[i])})
    b_lo, b_hi = _interval(bb, ci) if n_boot else (np.full((M, M), np.nan),) * 2
    s_lo, s_hi = _interval(bs, ci) if n_boot else (np.full((M, M), np.nan),) * 2
    for gi, g in enumerate(models):
        for ai, a in enumerate(models):
            d = app[(app.generator == g) & (app.appraiser == a)]
            rows.append({"generator": g, "appraiser": a, "self": g == a, "n": len(d),
                         "n_failed": int(d.failed.sum()),
                         "failure_rate": float(d.failed.mean()) if len(d) else np.nan,
                         "bias": bias[gi, ai], "bias_lo": b_lo[gi, ai], "bias_hi": b_hi[gi, ai],
                         "slope": slope[gi, ai], "slope_lo": s_lo[gi, ai], "slope_hi": s_hi[gi, ai],
                         "pearson": analysis.pearson(d.s, d.e),
                         "mae": float(np.nanmean(np.abs(d.e - d.s))) if d.e.notna().any() else np.nan,
                         "bias_fitted": fits["bias"][0]["fitted"][gi, ai],
                         "bias_interaction": fits["bias"][0]["resid"][gi, ai],
                         "slope_fitted": fits["slope"][0]["fitted"][gi, ai]})
    return {"pairs": pd.DataFrame(rows), "parts": pd.DataFrame(parts), "fit": fit_info}


def transfer_curves(app: pd.DataFrame, models: list[str], bins: int, z: float = 1.96) -> pd.DataFrame:
    """The binned transfer curve (analysis.transfer_curve) of every pair, with a normal-theory
    interval on each bin's mean e."""
    out = []
    for g in models:
        for a in models:
            d = app[(app.generator == g) & (app.appraiser == a)]
            tc = analysis.transfer_curve(d, bins)
            half = z * tc.e_std / np.sqrt(tc.n)
            out.append(tc.assign(generator=g, appraiser=a, e_lo=tc.e_mean - half, e_hi=tc.e_mean + half))
    cols = ["generator", "appraiser", "bin", "s_lo", "s_hi", "s_mean", "e_mean", "e_std", "e_lo", "e_hi", "n"]
    return pd.concat(out, ignore_index=True)[cols]


# -- report ------------------------------------------------------------------------------------
CONSTRAINTS = {
    None: "sum-to-zero: sum_g r_g = sum_a q_a = 0; mu = the panel's shared bias (mean over pairs), "
          "not attributable to rendering or reading",
    "anchor": "anchored: q_{anchor} = 0 (the anchor model assumed to read faithfully), mu = 0; r_g is "
              "g's bias as the anchor reads it",
}


@amends_run
def report(path: str | Path, make_plots: bool = True, tables: dict[str, pd.DataFrame] | None = None) -> dict:
    """Summary, derived tables and plots of a cross-appraisal run, from its files alone."""
    run = RunDir(path)
    if not is_cross_run(run.path):
        raise ConfigError(f"{run.path}: not a cross-appraisal run (provenance command != {COMMAND!r})")
    cfg = load_config(run.path / "config.yaml", CrossConfig)
    tabs = tables or {name: run.read_table(name) for name in TABLES}
    ut, app = tabs["utterances"], tabs["appraisals"]
    prov = run.provenance()
    an = cfg.analysis
    dec = decompose(app, cfg.panel(), an.n_boot, cfg.seed, an.ci, an.anchor)
    tc = transfer_curves(app, cfg.panel(), an.bins)
    pairs, parts = dec["pairs"], dec["parts"]
    run.write_table("pairs", pairs)
    run.write_table("parts", parts)
    run.write_table("transfer", tc)
    stats = prov.get("stats") or {}
    # the self pair against the run it came from (same utterances, same request seeds)
    selfcheck = {}
    for m in cfg.panel():
        u = ut[(ut.generator == m) & (ut.run >= 0) & ut.text.notna()]
        if len(u):
            a = app[(app.generator == m) & (app.appraiser == m)].set_index("uid").e.reindex(u.uid).to_numpy()
            o = u.orig_e.to_numpy(float)
            both = np.isfinite(a) & np.isfinite(o)
            selfcheck[m] = {"utterances": len(u), "failed_mismatch": int((np.isfinite(a) != np.isfinite(o)).sum()),
                            "max_abs_diff_e": float(np.abs(a - o)[both].max()) if both.any() else None}
    bias_parts = parts[parts.quantity == "bias"]
    shared = bias_parts[bias_parts.part == "shared"].iloc[0]
    headline = {
        "models": len(cfg.panel()), "utterances": len(ut), "appraisals": len(app),
        "appraisal_failure_rate": float(app.failed.mean()) if len(app) else None,
        "appraiser_calls": stats.get("appraiser_calls_total"),
        "computed_by_engines": stats.get("computed_total"),
        "shared_bias": float(shared.estimate),
        "bias_interaction_rms": dec["fit"]["bias"]["residual_rms"],
        "pair_bias_sd": dec["fit"]["bias"]["pair_sd"],
    }
    for _, p in bias_parts[bias_parts.part != "shared"].iterrows():
        headline[f"{p.part}_bias[{p.model}]"] = float(p.estimate)
    summary = {
        "experiment": cfg.name, "command": COMMAND, "mode": cfg.mode, "models": cfg.panel(),
        "constraint": CONSTRAINTS["anchor" if an.anchor else None], "anchor": an.anchor,
        "identified": "pair biases, mu, and differences r_g - r_h and q_a - q_b; not the split of the "
                      "shared bias between rendering and reading (unless an anchor is assumed)",
        "interval": f"{an.ci:.0%} percentile bootstrap over utterances ({an.n_boot} replicates, seed "
                    f"{cfg.seed}), each generator's utterances resampled with all their appraisals",
        "headline": {k: analysis._nan_to_none(v) for k, v in headline.items()},
        "parts": analysis.records(parts), "pairs": analysis.records(pairs),
        "fit": dec["fit"], "self_vs_run": selfcheck,
        "cost": {k: stats.get(k) for k in ("utterances", "appraisers", "first_pass_calls", "retries",
                                            "appraiser_calls_total", "appraiser_calls", "generator_calls",
                                            "computed_total", "loads", "wall_s")},
        "appraiser_taus": stats.get("appraiser_taus"),
        "plots": [],
    }
    if make_plots:
        for name, fn in PLOTS.items():
            p = fn(app, tc, pairs, parts, cfg, run.plot_path(name))
            if p is not None:
                summary["plots"].append(str(Path(p).relative_to(run.path)))
    run.write_summary(summary)
    return summary


def summary_rows(summary: dict) -> list[tuple[str, str, str]]:
    """(model, rendering part, reading part) of the bias, formatted with intervals."""
    def fmt(p):
        if p is None or p.get("estimate") is None:
            return "-"
        lo, hi = p.get("lo"), p.get("hi")
        ci = f" [{lo:+.3f}, {hi:+.3f}]" if lo is not None and hi is not None else ""
        return f"{p['estimate']:+.3f}{ci}"
    parts = [p for p in summary.get("parts", []) if p["quantity"] == "bias"]
    out = []
    for m in summary.get("models", []):
        r = next((p for p in parts if p["model"] == m and p["part"] == "render"), None)
        q = next((p for p in parts if p["model"] == m and p["part"] == "read"), None)
        out.append((m, fmt(r), fmt(q)))
    sh = next((p for p in parts if p["part"] == "shared"), None)
    out.append(("shared (mu)", fmt(sh), ""))
    return out


# -- plots -------------------------------------------------------------------------------------
def plot_transfer_grid(app, tc, pairs, parts, cfg, path: Path) -> Path:
    """Rows generator, columns appraiser: each pair's utterances, binned means with intervals,
    the diagonal; the title gives the pair's bias and Pearson."""
    from core.plots import subplots
    M = len(cfg.panel())
    fig, axes = subplots(M, M, figsize=(2.9 * M + 0.6, 2.7 * M + 0.4), squeeze=False, sharex=True, sharey=True)
    pi = pairs.set_index(["generator", "appraiser"])
    for gi, g in enumerate(cfg.panel()):
        for ai, a in enumerate(cfg.panel()):
            ax = axes[gi, ai]
            d = app[(app.generator == g) & (app.appraiser == a) & np.isfinite(app.e)]
            if len(d) > 1500:
                d = d.sample(1500, random_state=0)
            ax.scatter(d.s, d.e, s=4, alpha=0.25, color="grey")
            c = tc[(tc.generator == g) & (tc.appraiser == a) & (tc.n.fillna(0) > 0)]
            yerr = np.vstack([c.e_mean - c.e_lo, c.e_hi - c.e_mean])
            ax.errorbar(c.s_mean, c.e_mean, yerr=np.nan_to_num(yerr), marker="o", ms=3,
                        color="tab:red" if g == a else "tab:blue", lw=1)
            ax.plot([0, 1], [0, 1], ls="--", color="black", lw=0.7)
            p = pi.loc[(g, a)]
            ax.set_title(f"bias {p.bias:+.3f}, r={p.pearson:.2f}" if np.isfinite(p.bias) else "no valid appraisal",
                         fontsize=8)
            ax.set_xlim(0, 1)
            ax.set_ylim(-0.02, 1.02)
            if gi == M - 1:
                ax.set_xlabel(f"s  (appraiser {a})", fontsize=8)
            if ai == 0:
                ax.set_ylabel(f"generator {g}\ne", fontsize=8)
    fig.suptitle("cross-appraisal transfer curves (rows: generator, columns: appraiser; red: self)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def plot_parts(app, tc, pairs, parts, cfg, path: Path) -> Path:
    """Per model, two bars: the rendering and the reading part (intervals), for the bias (top)
    and the slope (bottom); the shared part mu in each row's title."""
    from core.plots import subplots
    M = len(cfg.panel())
    fig, axes = subplots(2, M, figsize=(2.4 * M + 0.8, 5.4), squeeze=False, sharey="row")
    for row, qn in enumerate(("bias", "slope")):
        d = parts[parts.quantity == qn]
        sh = d[d.part == "shared"].iloc[0]
        for mi, m in enumerate(cfg.panel()):
            ax = axes[row, mi]
            dm = d[d.model == m].set_index("part").reindex(["render", "read"])
            est = dm.estimate.to_numpy()
            yerr = np.vstack([est - dm.lo.to_numpy(), dm.hi.to_numpy() - est])
            ax.bar([0, 1], est, color=["tab:orange", "tab:purple"], width=0.6,
                   yerr=None if np.isnan(yerr).all() else np.nan_to_num(yerr), capsize=4)
            ax.axhline(0, color="black", lw=0.7)
            ax.set_xticks([0, 1], ["rendering", "reading"], fontsize=8)
            ax.set_title(m if row == 0 else "", fontsize=9)
        ci = f" [{sh.lo:+.3f}, {sh.hi:+.3f}]" if np.isfinite(sh.lo) else ""
        axes[row, 0].set_ylabel(f"{qn} part" + (" (e - s)" if qn == "bias" else " (de/ds)") +
                                f"\nshared mu = {sh.estimate:+.3f}{ci}", fontsize=8)
    what = f"anchor {cfg.analysis.anchor} reads faithfully" if cfg.analysis.anchor else "sum-to-zero over the panel"
    fig.suptitle(f"channel bias = mu + rendering(generator) + reading(appraiser); {what}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def plot_pair_bias(app, tc, pairs, parts, cfg, path: Path) -> Path:
    """The pair-bias matrix, each cell annotated with its value and the additive fit's residual."""
    from core.plots import subplots
    M = len(cfg.panel())
    B = pairs.pivot(index="generator", columns="appraiser", values="bias").reindex(index=cfg.panel(),
                                                                                 columns=cfg.panel())
    R = pairs.pivot(index="generator", columns="appraiser", values="bias_interaction").reindex(
        index=cfg.panel(), columns=cfg.panel())
    fig, ax = subplots(figsize=(1.3 * M + 2.4, 1.1 * M + 1.6))
    lim = max(float(np.nanmax(np.abs(B.to_numpy()))) if np.isfinite(B.to_numpy()).any() else 0.0, 1e-3)
    im = ax.imshow(B.to_numpy(), cmap="RdBu", vmin=-lim, vmax=lim)
    for i in range(M):
        for j in range(M):
            v, r = B.iat[i, j], R.iat[i, j]
            if np.isfinite(v):
                ax.text(j, i, f"{v:+.3f}\n(res {r:+.3f})", ha="center", va="center", fontsize=7)
    ax.set_xticks(range(M), cfg.panel(), fontsize=8, rotation=30)
    ax.set_yticks(range(M), cfg.panel(), fontsize=8)
    ax.set_xlabel("appraiser (reading)")
    ax.set_ylabel("generator (rendering)")
    fig.colorbar(im, ax=ax, label="bias mean(e - s)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


PLOTS: dict[str, Callable] = {"cross_transfer_grid": plot_transfer_grid, "cross_parts": plot_parts,
                              "cross_pair_bias": plot_pair_bias}
