"""A debate run read by the belief layer (``chorus debate belief RUN``): how stubborn each debating agent
(each model) is, measured with the belief layer's own update from its own debates.

The reading (``MAPPING``, written into the summary):

* questions with a stance axis: the two-option items (labels[0] is a+, labels[1] a-); numeric and
  many-option items are left out and counted;
* beliefs are forced-choice readings (``forced_choice.py``: the "answer now" prefill, P(a+) from the two
  label log-probs): the agent's stance b0 is its reading right after its round-0 answer (f = 1), a
  speaker's belief s is its reading right after the turn it spoke, and its belief after hearing round
  r - 1 is its reading at round r before it writes anything (f = 0). A synthetic run may plant the
  latent beliefs instead (``reading: planted``);
* evidence: the belief layer's appraiser (``chorus.simulate.belief.channel.LLMAppraiser``, the topic built from the
  question with ``prompts/stance_appraiser_v1.yaml``) reads each debate turn once into e, and every peer
  consumes the same e (the belief layer's rule); ``appraiser: oracle`` puts e = s. An empty turn or a
  failed appraisal is NaN evidence and updates nobody; an unparsed turn is still an utterance (its
  text is read) and is counted;
* an agent at round r has heard its peers' turns of rounds 0..r-1, round by round in seat order, one
  update each (w, gamma); its own turns are not evidence (the belief layer's speakers do not listen to
  themselves). The closed form ``bayes.credence_after`` then gives kappa per reading at a given gamma
  (``trajectory.kappa_closed_form``, exact for an agent that follows the update) and (kappa, gamma)
  jointly by least squares (``trajectory.fit``), per agent and pooled, with question-clustered
  (family) bootstrap intervals;
* the averaged reading (``kappa_readings.py``): the same inversion and fit with each round's peers taken as
  one update of their mean e; both readings side by side, on the same family resamples, with the one the
  least-squares residual prefers (a Gaussian log-likelihood ratio; equal parameter counts);
* every interval names its level: question families resampled, and how many (``core.stats.Interval``);
* the reflection control is the baseline of self-change: its readings move with no peer read, and the
  same inversion at round 1 against the round-0 peer turns it never saw (round 0 is shared) is the
  placebo kappa that the debate's round-1 kappa is read against.

The channel audit is the belief layer's: e against s (transfer curve, Pearson), and the readings against
the stated answers.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from chorus.core.analyses import reader, reader_provenance
from chorus.core.config import InputError, validate
from chorus.core.paper import fmt
from chorus.core.plots import interval_caption, save, subplots
from chorus.core.runs import RunDir
from chorus.core.seeding import call_seed
from chorus.core.stats import MIN_UNITS, cluster_bootstrap, interval_text
from chorus.serving.roles import build_engines, plan_roles
from chorus.simulate.belief import bayes
from chorus.simulate.belief.analysis import pearson, transfer_curve
from chorus.simulate.belief.channel import LLMAppraiser, temperature_scale
from chorus.simulate.belief.topics import Topic
from chorus.simulate.belief.trajectory import Trajectories, fit, kappa_closed_form
from chorus.simulate.debate.bda import DebateTraceError, read_run
from chorus.simulate.debate.config import BeliefReadConfig, DebateConfig, load
from chorus.simulate.debate.forced_choice import forced_choice
from chorus.simulate.debate.kappa_readings import CRITERION, READINGS, UNIT, fit_readings, interval_fields
from chorus.simulate.debate.prompts import load_prompts, readout_prefill, turn_messages
from chorus.simulate.debate.protocol import qkey
from chorus.simulate.debate.questions import Item, validate_item, write_bench

MAPPING: dict[str, Any] = {
    "version": 2,
    "stance_axis": "two-option items: labels[0] is a+, labels[1] is a-",
    "b0": "the agent's forced-choice reading right after its round-0 turn (f = 1)",
    "s": "the speaker's reading right after the turn it spoke (f = 1)",
    "b_round_r": "the agent's reading at round r before it writes (f = 0), after hearing round r - 1",
    "heard": "peers' turns of rounds 0..r-1, round by round in seat order, one update each; own turns are not evidence",
    "heard_averaged": "the second reading, fitted beside the first: each round r' < r one update of weight w whose e is "
                      "the mean of that round's finite peer e (kappa_readings.py); the data's preference is reported",
    "e": "the appraiser's p_plus of the turn (temperature-scaled by tau), read once and consumed by every peer",
    "missing_e": "an empty turn or a failed appraisal updates nobody (no forgetting either)",
    "placebo": "reflection readings at round 1 inverted against the round-0 peer turns they never read",
}
READ, SPOKE = 0.0, 1.0  # the f of a reading: before writing, right after the turn
APPRAISE_ROLE = 2       # the belief layer's appraiser role id in request seeds


class BeliefReadError(InputError):
    """A debate run cannot be read by the belief layer; the message names the run and the problem."""


# -- questions and the appraiser's topic -----------------------------------------------------------
def stance_items(items: Mapping[str, Item], qids) -> tuple[dict[str, Item], dict[str, int]]:
    """The questions of ``qids`` with a stance axis (two options), and the others counted by reason."""
    keep: dict[str, Item] = {}
    left: Counter = Counter()
    for q in sorted(set(qids)):
        it = items.get(q)
        if it is None:
            raise BeliefReadError(f"question {q!r} of the turns is not in the run's bench.jsonl")
        if it.numeric:
            left["numeric"] += 1
        elif len(it.labels or ()) != 2:
            left["not_two_options"] += 1
        else:
            keep[q] = it
    return keep, {k: int(left.get(k, 0)) for k in ("numeric", "not_two_options")}


def appraiser_topic(item: Item, template: Mapping[str, Any]):
    """The belief layer's topic for one two-option question (setting = the question)."""
    def side(k: int) -> str:
        lab, text = item.labels[k], item.options[k]
        return text if text.lower() == lab.lower() else f"{lab}. {text}"
    data = {"id": f"debate-{item.id}", "version": int(template.get("version", 1)), "title": item.id,
            "setting": item.question, "a_plus": side(0), "a_minus": side(1),
            "a_plus_short": item.labels[0], "a_minus_short": item.labels[1],
            "stance_phrases": template["stance_phrases"], "prompts": template["prompts"]}
    return validate(Topic, data, source=f"appraiser topic of question {item.id!r}")


def load_template(name: str) -> dict[str, Any]:
    return load_prompts(name, like="stance_appraiser_v1")


# -- readings ----------------------------------------------------------------------------------------
def _responses(turns: pd.DataFrame) -> dict[tuple, list[str]]:
    """(condition, qid, round) -> every agent's response in agent order."""
    out: dict[tuple, list[str]] = {}
    for (c, q, r), g in turns.sort_values(["condition", "qid", "round", "agent"]).groupby(["condition", "qid", "round"], sort=False):
        out[(c, q, int(r))] = [t if isinstance(t, str) else "" for t in g["response"]]
    return out


def reading_jobs(items: Mapping[str, Item], turns: pd.DataFrame, P: dict) -> tuple[list[dict], list[list[dict]]]:
    """(keys, conversations) of every reading the analysis uses: f = 1 after each round-0 turn (shared by the
    conditions) and after each debate turn but the last round's; f = 0 at every round r >= 1 of each condition."""
    resp = _responses(turns)
    last = int(turns["round"].max())
    conds = sorted(set(turns["condition"]))
    keys, convs = [], []
    for q, it in items.items():
        for c in conds:
            for r in range(0, last + 1):
                now = resp.get((c, q, r))
                if now is None or (r > 0 and (c, q, r - 1) not in resp):
                    continue
                prev = resp.get((c, q, r - 1), [])
                for a in range(len(now)):
                    msgs = turn_messages(it, a, r, c, prev, P)
                    if r > 0:
                        keys.append({"qid": q, "condition": c, "agent": a, "round": r, "f": READ})
                        convs.append(readout_prefill(msgs, "", P))
                    if (r == 0 and c == conds[0]) or (c == "debate" and 0 < r < last):
                        keys.append({"qid": q, "condition": "shared" if r == 0 else c, "agent": a, "round": r, "f": SPOKE})
                        convs.append(readout_prefill(msgs, now[a], P))
    return keys, convs


def probe_readings(engine: Any, items: Mapping[str, Item], turns: pd.DataFrame, P: dict, progress: Any = None) -> pd.DataFrame:
    """The debaters' forced-choice beliefs: P(a+) = softmax of the two label log-probs."""
    keys, convs = reading_jobs(items, turns, P)
    lps = forced_choice(engine, convs, [items[k["qid"]].labels for k in keys], progress=progress)
    rows = []
    for k, lp in zip(keys, lps):
        plus, minus = items[k["qid"]].labels
        rows.append({**k, "lp_plus": lp[plus], "lp_minus": lp[minus],
                     "b": float(1.0 / (1.0 + np.exp(lp[minus] - lp[plus])))})
    return _expand_shared(pd.DataFrame(rows), turns)


def _expand_shared(df: pd.DataFrame, turns: pd.DataFrame) -> pd.DataFrame:
    """Round-0 readings (condition "shared") copied to every condition of the run."""
    if df.empty:
        return df
    sh = df[df["condition"] == "shared"]
    parts = [df[df["condition"] != "shared"]] + [sh.assign(condition=c) for c in sorted(set(turns["condition"]))]
    return pd.concat(parts, ignore_index=True).sort_values(["qid", "condition", "round", "f", "agent"], ignore_index=True)


def planted_readings(run_path: Path, items: Mapping[str, Item]) -> pd.DataFrame:
    p = run_path / "tables" / "beliefs.parquet"
    if not p.is_file():
        raise BeliefReadError(f"{run_path}: reading = planted needs tables/beliefs.parquet (a synthetic run's latent "
                              f"beliefs); this run has none: use reading = probe")
    df = pd.read_parquet(p)
    return df[df["qid"].isin(list(items))].reset_index(drop=True)


# -- evidence ----------------------------------------------------------------------------------------
def heard_turns(turns: pd.DataFrame, items: Mapping[str, Item]) -> pd.DataFrame:
    """The debate turns some peer reads (rounds 0..last-1), one row each."""
    last = int(turns["round"].max())
    t = turns[(turns["condition"] == "debate") & (turns["round"] < last) & turns["qid"].isin(list(items))]
    return t[["qid", "family", "round", "agent", "response", "parsed", "answer"]].sort_values(
        ["qid", "round", "agent"], ignore_index=True)


def appraise(engine: Any, items: Mapping[str, Item], heard: pd.DataFrame, template: Mapping[str, Any], *,
             tau: float, seed: int) -> pd.DataFrame:
    """e of every heard turn by the belief layer's appraiser (one read per turn; seeds from the turn)."""
    topics = {q: appraiser_topic(it, template) for q, it in items.items()}
    h = heard.reset_index(drop=True)
    texts = [t if isinstance(t, str) and t.strip() else None for t in h["response"]]
    idx = [i for i, t in enumerate(texts) if t is not None]
    p = np.full(len(h), np.nan)
    attempts = np.zeros(len(h), dtype=int)
    errors: list[str | None] = ["no utterance" if t is None else None for t in texts]
    if idx:
        app = LLMAppraiser(engine)
        convs = [topics[h.at[i, "qid"]].appraiser_messages(texts[i]) for i in idx]

        def seed_of(j: int, attempt: int) -> int:
            i = idx[j]
            return call_seed(seed, qkey(h.at[i, "qid"]), int(h.at[i, "round"]), int(h.at[i, "agent"]), APPRAISE_ROLE, attempt)
        pj, aj, ej = app.read(convs, seed_of)
        p[idx], attempts[idx] = pj, aj
        for j, i in enumerate(idx):
            errors[i] = ej[j]
    e = np.where(np.isfinite(p), temperature_scale(p, tau), np.nan)
    return h.drop(columns=["response"]).assign(p_raw=p, e=e, attempts=attempts, error=errors)


def oracle_evidence(heard: pd.DataFrame, readings: pd.DataFrame) -> pd.DataFrame:
    """e = s: the speaker's own reading right after the turn (no appraiser call)."""
    s = _spoke(readings)
    e = [s.get((q, int(r), int(a)), np.nan) for q, r, a in zip(heard["qid"], heard["round"], heard["agent"])]
    return heard.drop(columns=["response"]).assign(p_raw=np.nan, e=np.asarray(e, float), attempts=0, error=None)


def _spoke(readings: pd.DataFrame) -> dict[tuple, float]:
    sp = readings[(readings["f"] == SPOKE) & (readings["condition"] == "debate")]
    return {(q, int(r), int(a)): float(b) for q, r, a, b in zip(sp["qid"], sp["round"], sp["agent"], sp["b"])}


# -- observations: each reading with the evidence it heard ------------------------------------------------
def observations(readings: pd.DataFrame, evidence: pd.DataFrame, items: Mapping[str, Item], *, condition: str,
                 rounds: list[int] | None = None, w: float = 1.0, update: str = "sequential"):
    """(rows, Trajectories): one row per f = 0 reading of ``condition`` at round r >= 1 (``rounds``: only those),
    with what the agent heard before it: the debate's peer turns of rounds 0..r-1 (the reflection placebo hears
    the same turns it never read, so use it at round 1 only, where they are the shared round-0 turns).
    ``update``: "sequential", one update per heard turn in seat order; "averaged", one update per round with
    the mean of its finite peer e (the rows are the same; only the Trajectories differ)."""
    if update not in READINGS:
        raise BeliefReadError(f"update reading must be one of {list(READINGS)}, got {update!r}")
    b0 = {(q, int(a)): float(b) for q, a, b in zip(*(readings[(readings["f"] == SPOKE) & (readings["round"] == 0)
                                                              & (readings["condition"] == condition)][c]
                                                     for c in ("qid", "agent", "b")))}
    e = {(q, int(r), int(a)): float(x) for q, r, a, x in zip(evidence["qid"], evidence["round"], evidence["agent"], evidence["e"])}
    n_agents = {q: int(g["agent"].max()) + 1 for q, g in readings.groupby("qid")}
    rd = readings[(readings["f"] == READ) & (readings["condition"] == condition)]
    if rounds is not None:
        rd = rd[rd["round"].isin(rounds)]
    rows, ev_row, ev_lag, ev_e = [], [], [], []
    for q, a, r, b in zip(rd["qid"], rd["agent"].astype(int), rd["round"].astype(int), rd["b"]):
        if (q, a) not in b0:
            continue
        by_round = [[x for x in (e.get((q, t, j), np.nan) for j in range(n_agents[q]) if j != a) if np.isfinite(x)]
                    for t in range(r)]
        heard = [x for xs in by_round for x in xs]
        # averaged: a round with no finite e is no update, so the lags close up as they do over a NaN turn
        updates = heard if update == "sequential" else [float(np.mean(xs)) for xs in by_round if xs]
        i = len(rows)
        for k, x in enumerate(updates):
            ev_row.append(i)
            ev_lag.append(len(updates) - 1 - k)
            ev_e.append(x)
        rows.append({"qid": q, "family": items[q].family, "domain": items[q].domain, "condition": condition,
                     "agent": a, "round": r, "b0": b0[(q, a)], "b": float(b), "n_heard": len(heard)})
    df = pd.DataFrame(rows, columns=["qid", "family", "domain", "condition", "agent", "round", "b0", "b", "n_heard"])
    tr = Trajectories.from_events(df["b0"].to_numpy(), df["b"].to_numpy(), ev_row, ev_lag, ev_e, w)
    return df, tr


def invert(df: pd.DataFrame, tr, cfg: BeliefReadConfig) -> pd.DataFrame:
    """The closed-form kappa of every reading at ``cfg.gamma``, and whether it is well conditioned."""
    A, M = tr.sums(cfg.gamma)
    ebar = tr.evidence_mean(cfg.gamma)
    k = kappa_closed_form(tr, cfg.gamma)
    keep = np.isfinite(ebar) & (np.abs(ebar - df["b0"].to_numpy()) > cfg.kappa_filter) & ~np.isnan(k)
    return df.assign(A=A, M=M, ebar=ebar, kappa_hat=k, keep=keep)


# -- per-agent table --------------------------------------------------------------------------------------
def _median_ci(k: np.ndarray, clusters: np.ndarray, cfg: BeliefReadConfig, key: int):
    """The median kappa_hat with its family-bootstrap ``Interval`` (refused over fewer than MIN_UNITS
    families: an interval over a handful of families is mostly the draw's own noise)."""
    return cluster_bootstrap(lambda idx: float(np.median(k[idx])) if len(idx) else float("nan"), clusters,
                             n_boot=cfg.n_boot, seed=call_seed(cfg.seed, key), ci=cfg.ci, resampled=UNIT,
                             min_units=MIN_UNITS)


def agent_table(deb: pd.DataFrame, tr_deb, plac: pd.DataFrame | None, drift: pd.DataFrame, cfg: BeliefReadConfig,
                averaged: tuple[pd.DataFrame, Any] | None = None) -> pd.DataFrame:
    """One row per agent and one pooled (``all``): kappa over every debate reading (closed form at gamma, median
    of the well-conditioned ones, with its interval), the joint (kappa, gamma) fit, round-1 kappa beside the
    reflection placebo, and the drift |b_R - b0| in each condition. ``averaged`` (its observations and
    Trajectories, the same rows as ``deb``): the averaged reading's kappa and fit beside them (``_avg``
    columns, the same family resamples) and which reading the data prefer (``kappa_readings.fit_readings``)."""
    rows = []
    for ag in [*sorted(deb["agent"].unique()), "all"]:
        sel = np.ones(len(deb), bool) if ag == "all" else (deb["agent"] == ag).to_numpy()
        key = 99 if ag == "all" else int(ag)
        d = deb[sel]
        kept = d[d["keep"]]
        row: dict[str, Any] = {"agent": "all" if ag == "all" else f"A{int(ag) + 1}", "readings": int(len(d)),
                               "retained": float(d["keep"].mean()) if len(d) else float("nan"),
                               "toward_evidence": _toward(kept)}
        row.update(interval_fields(_median_ci(kept["kappa_hat"].to_numpy(), kept["family"].to_numpy(), cfg, key), "kappa"))
        trs = {"sequential": tr_deb.take(np.flatnonzero(sel))}
        if averaged is not None:
            da = averaged[0][sel]
            ka = da[da["keep"]]  # same seed: the same family resamples as the sequential median's
            row.update(interval_fields(_median_ci(ka["kappa_hat"].to_numpy(), ka["family"].to_numpy(), cfg, key), "kappa_avg"))
            row["retained_avg"] = float(da["keep"].mean()) if len(da) else float("nan")
            trs["averaged"] = averaged[1].take(np.flatnonzero(sel))
        if cfg.fit_gamma or averaged is not None:
            row.update(fit_readings(trs, d["family"].to_numpy(), gamma=None if cfg.fit_gamma else cfg.gamma,
                                    n_boot=cfg.n_boot, ci=cfg.ci, seed=call_seed(cfg.seed, key, 1), min_units=MIN_UNITS))
        r1 = kept[kept["round"] == 1]
        row.update(interval_fields(_median_ci(r1["kappa_hat"].to_numpy(), r1["family"].to_numpy(), cfg, key + 1000),
                                   "kappa_round1"))
        if plac is not None:
            p = plac if ag == "all" else plac[plac["agent"] == ag]
            pk = p[p["keep"]]
            row.update(interval_fields(_median_ci(pk["kappa_hat"].to_numpy(), pk["family"].to_numpy(), cfg, key + 2000),
                                       "kappa_placebo"), placebo_readings=int(len(p)))
        for cond in ("debate", "reflection"):
            g = drift[(drift["condition"] == cond) & (drift["agent"] == row["agent"])]
            if len(g):
                row[f"drift_{cond}"] = float(g.sort_values("round")["mean_abs_move"].iloc[-1])
        rows.append(row)
    return pd.DataFrame(rows)


def _toward(kept: pd.DataFrame) -> float:
    """Share of well-conditioned readings that moved toward what was heard."""
    if not len(kept):
        return float("nan")
    return float((np.sign(kept["b"] - kept["b0"]) == np.sign(kept["ebar"] - kept["b0"])).mean())


def drift_table(readings: pd.DataFrame) -> pd.DataFrame:
    """Mean |b_r - b0| and mean (b_r - b0) per condition, agent (and all) and round r >= 1."""
    b0 = readings[(readings["f"] == SPOKE) & (readings["round"] == 0)][["qid", "condition", "agent", "b"]].rename(columns={"b": "b0"})
    rd = readings[readings["f"] == READ].merge(b0, on=["qid", "condition", "agent"], how="inner")
    rd = rd.assign(move=rd["b"] - rd["b0"])
    rows = []
    for (c, r), g in rd.groupby(["condition", "round"], sort=True):
        for ag, h in [*((f"A{int(a) + 1}", x) for a, x in g.groupby("agent")), ("all", g)]:
            rows.append({"condition": c, "round": int(r), "agent": ag, "n": int(len(h)),
                         "mean_abs_move": float(h["move"].abs().mean()), "mean_move": float(h["move"].mean())})
    return pd.DataFrame(rows, columns=["condition", "round", "agent", "n", "mean_abs_move", "mean_move"])


def channel_audit(readings: pd.DataFrame, evidence: pd.DataFrame, cfg: BeliefReadConfig) -> dict[str, Any]:
    """The belief layer's audit: e against the speaker's s (Pearson, transfer curve), and s against the
    answer the turn stated (1 for a+, 0 for a-; parsed turns only)."""
    s = _spoke(readings)
    ut = evidence.assign(s=[s.get((q, int(r), int(a)), np.nan) for q, r, a in
                            zip(evidence["qid"], evidence["round"], evidence["agent"])])
    ut = ut[np.isfinite(ut["s"])]
    said = ut[[isinstance(a, str) for a in ut["answer"]]]
    fin = ut["e"][np.isfinite(ut["e"])]
    return {"n": int(len(fin)), "pearson_s_e": pearson(ut["s"], ut["e"]),
            "e_distinct": int(fin.nunique()),  # 1: a constant channel, Pearson undefined
            "transfer_curve": transfer_curve(ut[["s", "e"]], cfg.bins).to_dict("records"),
            "reading_stated": {"n": int(len(said)),
                               "pearson": pearson(said["s"], (said["answer"] == said["plus"]).astype(float))}}


# -- the command -----------------------------------------------------------------------------------------
def readings_compared(table: pd.DataFrame, cfg: BeliefReadConfig) -> dict[str, Any]:
    """The pooled row's two readings side by side, each interval with its level, and the preference."""
    r = table[table["agent"] == "all"].iloc[0].to_dict() if len(table) else {}

    def iv(col: str) -> str:
        return interval_text(r.get(f"{col}_lo"), r.get(f"{col}_hi"), ci=cfg.ci, n_units=r.get(f"{col}_n_units"),
                             resampled=r.get(f"{col}_resampled"), refused=r.get(f"{col}_ci_refused"))

    def fit_iv(col: str) -> str:
        return interval_text(r.get(f"{col}_lo"), r.get(f"{col}_hi"), ci=cfg.ci, n_units=r.get("fit_n_units"),
                             resampled=r.get("fit_resampled"), refused=r.get("fit_ci_refused"))
    side = {name: {"kappa": r.get(f"kappa{sfx}"), "kappa_interval": iv(f"kappa{sfx}"),
                   "kappa_fit": r.get(f"kappa_fit{sfx}"), "kappa_fit_interval": fit_iv(f"kappa_fit{sfx}"),
                   "gamma_fit": r.get(f"gamma_fit{sfx}"), "fit_rmse": r.get(f"fit_rmse{sfx}")}
            for name, sfx in (("sequential", ""), ("averaged", "_avg"))}
    # The verdict sums the per-agent log-likelihood ratios (each debater its own kappa and gamma): one
    # (kappa, gamma) over agents of different kappa is misspecified under both readings, and on a planted
    # sequential debate its residuals preferred either reading by the draw (its row is kept, named pooled).
    per = table[table["agent"] != "all"]
    llr = float(per["loglik_seq_vs_avg"].sum()) if "loglik_seq_vs_avg" in per and len(per) else float("nan")
    prefer = "undecided" if np.isnan(llr) else "tie" if llr == 0 else "sequential" if llr > 0 else "averaged"
    return {**side, "prefer": prefer, "loglik_seq_vs_avg": llr,
            "agents_preferring": {k: int((per.get("prefer", pd.Series(dtype=str)) == k).sum()) for k in READINGS},
            "min_agent_prefer_share": float(per["prefer_share"].min()) if "prefer_share" in per and len(per) else None,
            "pooled_fit_prefer": r.get("prefer"), "pooled_fit_loglik_seq_vs_avg": r.get("loglik_seq_vs_avg"),
            "pooled_fit_prefer_share": r.get("prefer_share"),
            "criterion": CRITERION + "; summed over agents, each fitted on its own readings",
            "gamma_fitted": bool(cfg.fit_gamma)}


def _line(name: str, b: dict[str, Any]) -> str:
    c = b.get("readings_compared") or {}
    pref = (f"; the data prefer the {c['prefer']} reading (log-likelihood ratio {fmt(c.get('loglik_seq_vs_avg'))} "
            f"summed over agents; agents {c.get('agents_preferring')})" if c.get("prefer") else "")
    return (f"belief layer ({b['reading']} readings, appraiser {b['appraiser']}, gamma {b['gamma']}): " + "; ".join(
        f"{r['agent']} kappa {fmt(r['kappa'])} sequential / {fmt(r.get('kappa_avg'))} averaged "
        f"(placebo {fmt(r.get('kappa_placebo'))})" for r in b["agents"]) + pref)


@reader("debate belief", part="debate", folder="belief", line=_line)
def brief(s: dict[str, Any]) -> dict[str, Any]:
    """What a debate run's report shows of a ``debate belief`` run made in it: each agent's kappa under both
    readings (sequential, averaged) with its interval and what that interval resamples, which reading the
    data prefer, the placebo and drift, and the channel audit."""
    keep = ("agent", "kappa", "kappa_lo", "kappa_hi", "kappa_fit", "gamma_fit", "kappa_avg", "kappa_avg_lo",
            "kappa_avg_hi", "kappa_fit_avg", "gamma_fit_avg", "prefer", "loglik_seq_vs_avg", "prefer_share",
            "kappa_round1", "kappa_placebo", "drift_debate", "drift_reflection", "retained")
    ci = (s.get("readings_compared") or {})

    def text(r: dict, col: str) -> str:
        return interval_text(r.get(f"{col}_lo"), r.get(f"{col}_hi"), ci=s.get("ci", 0.95),
                             n_units=r.get(f"{col}_n_units"), resampled=r.get(f"{col}_resampled"),
                             refused=r.get(f"{col}_ci_refused"))
    return {"model": s.get("model"), "reading": s["reading"], "appraiser": s["appraiser"], "gamma": s["gamma"],
            "counts": s["counts"], "audit": {"pearson_s_e": s["audit"]["pearson_s_e"], "n": s["audit"]["n"],
                                             "reading_stated": s["audit"]["reading_stated"]},
            "readings_compared": ci or None,
            "agents": [{**{k: r.get(k) for k in keep}, "kappa_interval": text(r, "kappa"),
                        "kappa_avg_interval": text(r, "kappa_avg") if "kappa_avg" in r else None}
                       for r in s["agents"]]}


def run_belief(run_dir: str | Path, cfg: BeliefReadConfig | None = None, *, out: str | Path | None = None,
               engine: Any = None, appraiser_engine: Any = None, make_plots: bool = True,
               progress: Any = None) -> tuple[Path, dict[str, Any]]:
    """``chorus debate belief``: readings and evidence of a debate run -> RUN/belief/ (a run directory: config,
    provenance, tables readings / evidence / observations / agents / drift, summary.json, plots)."""
    cfg = cfg or BeliefReadConfig()
    src = Path(run_dir)
    turns, n_questions, stance, left, template, dcfg, need_model = _inputs(src, cfg)
    outp = Path(out) if out is not None else src / "belief"
    run = RunDir.create(outp, part="debate-belief", config=cfg, seeds={"seed": cfg.seed}, command="debate belief",
                        source_run=str(src.resolve()), mapping=MAPPING,
                        appraiser_prompts={"name": template["_name"], "sha256": template["_sha256"]},
                        **reader_provenance("debate belief", src, "debate", __name__))
    engines = _engines(src, dcfg, cfg, engine, appraiser_engine) if need_model else {}
    for role, eng in engines.items():
        run.record_engines(role, eng)
    if cfg.reading == "probe":
        readings = probe_readings(engines["model"], stance, turns, load_prompts(dcfg.prompts), progress=progress)
    else:
        readings = planted_readings(src, stance)
        readings = readings[readings["condition"].isin(set(turns["condition"]))]
    heard = heard_turns(turns, stance)
    evidence = (appraise(engines["appraiser"], stance, heard, template, tau=cfg.tau, seed=cfg.seed)
                if cfg.appraiser == "model" else oracle_evidence(heard, readings))
    plus = {q: it.labels[0] for q, it in stance.items()}
    evidence = evidence.assign(plus=evidence["qid"].map(plus))
    deb_df, deb_tr = observations(readings, evidence, stance, condition="debate", w=cfg.w)
    deb = invert(deb_df, deb_tr, cfg)
    avg_df, avg_tr = observations(readings, evidence, stance, condition="debate", w=cfg.w, update="averaged")
    avg = invert(avg_df, avg_tr, cfg)
    plac = None
    if cfg.reflection:
        p_df, p_tr = observations(readings, evidence, stance, condition="reflection", rounds=[1], w=cfg.w)
        plac = invert(p_df, p_tr, cfg)
    drift = drift_table(readings)
    table = agent_table(deb, deb_tr, plac, drift, cfg, averaged=(avg, avg_tr))
    audit = channel_audit(readings, evidence, cfg)
    for name, df in (("readings", readings), ("evidence", evidence), ("agents", table), ("drift", drift),
                     ("observations_averaged", avg),
                     ("observations", pd.concat([deb, plac], ignore_index=True) if plac is not None else deb)):
        run.write_table(name, df)
    summary = {"source_run": str(src.resolve()), "model": _model_name(dcfg), "reading": cfg.reading,
               "appraiser": cfg.appraiser if cfg.appraiser == "oracle" else _model_name(dcfg, cfg.appraiser_model),
               "tau": cfg.tau, "gamma": cfg.gamma, "w": cfg.w, "ci": cfg.ci, "kappa_filter": cfg.kappa_filter, "mapping": MAPPING["version"],
               "counts": {"questions": n_questions, "stance_questions": len(stance),
                          "left_out": left, "agents": int(turns["agent"].max()) + 1, "rounds": int(turns["round"].max()),
                          "unparsed_turns": int((~turns["parsed"].astype(bool)).sum()),
                          "heard_turns": int(len(heard)), "no_evidence": int((~np.isfinite(evidence["e"])).sum()),
                          "appraisal_errors": dict(Counter(x for x in evidence["error"] if isinstance(x, str))),
                          "readings": int(len(readings)), "observations": int(len(deb)),
                          "retained": int(deb["keep"].sum())},
               "agents": table.to_dict("records"), "readings_compared": readings_compared(table, cfg),
               "audit": audit,
               "drift": drift[drift["agent"] == "all"].to_dict("records")}
    run.write_summary(summary)
    if make_plots:
        _plot(table, drift, audit, summary, run.plot_path("belief"))
    run.finish()
    return run.path, summary


def _inputs(src: Path, cfg: BeliefReadConfig):
    """What ``run_belief`` reads of the debate run before any model: its turns (the stance questions',
    the conditions read), the question count, the stance items and those left out, the appraiser's
    template, the debate's config and whether a model is needed; one line naming what is missing."""
    try:
        turns, items, _ = read_run(src)
    except DebateTraceError as err:
        raise BeliefReadError(str(err)) from None
    conds = sorted(set(turns["condition"])) if len(turns) else []
    if "debate" not in conds:
        raise BeliefReadError(f"{src}: no debate condition in this run (it has {conds}): nothing was heard")
    if cfg.reflection and "reflection" not in conds:
        raise BeliefReadError(f"{src}: no reflection condition (it has {conds}): the debate kappa is read against "
                              f"reflection drift; rerun with conditions [debate, reflection], or set reflection=false")
    n_questions = int(turns["qid"].nunique())
    stance, left = stance_items(items, turns["qid"])
    if not stance:
        raise BeliefReadError(f"{src}: no question with two options (a stance axis) among its {turns['qid'].nunique()} "
                              f"questions (left out: {left})")
    turns = turns[turns["qid"].isin(list(stance))]
    if not cfg.reflection:
        turns = turns[turns["condition"] == "debate"]
    if int(turns["round"].max()) < 1:
        raise BeliefReadError(f"{src}: the debate has round 0 only: no agent heard a peer")
    template = load_template(cfg.appraiser_prompts)
    dcfg = _debate_config(src)
    need_model = cfg.reading == "probe" or cfg.appraiser == "model"
    if need_model and dcfg is None:
        raise BeliefReadError(f"{src}: no config.yaml, so the debate's model is unknown: reading = probe and "
                              f"appraiser = model need it (a synthetic run takes reading=planted appraiser=oracle)")
    return turns, n_questions, stance, left, template, dcfg, need_model


# -- chorus debate belief RUN_DIR: a registered verb (chorus.core.verbs) -------------------------------------
def _source_dir(cfg: BeliefReadConfig) -> Path:
    if cfg.run is None:
        raise BeliefReadError("no debate run directory: give RUN_DIR (the config's run)")
    return Path(cfg.run)


def plan_belief(cfg: BeliefReadConfig):
    """``chorus debate belief --check``: the debate run read and checked as the run reads it, then the
    device plan of the models the readings and the appraiser need (None where none is: planted
    readings, oracle appraiser); no model loaded."""
    src = _source_dir(cfg)
    *_, dcfg, need_model = _inputs(src, cfg)
    return plan_roles(_specs(dcfg, cfg), phase_of=lambda role: "belief") if need_model else None


def run_belief_verb(cfg: BeliefReadConfig, *, out: str | Path | None = None, progress: Any = None,
                    make_plots: bool = True):
    """``run_belief`` as the verb runs it (``run(cfg, *, out=, progress=, make_plots=)``, the debate run
    being ``cfg.run``). Returns ``(RunDir, summary)``."""
    path, summary = run_belief(_source_dir(cfg), cfg, out=out, make_plots=make_plots, progress=progress)
    return RunDir(path), summary


def _debate_config(src: Path):
    if not (src / "config.yaml").is_file():
        return None
    return load(src / "config.yaml", DebateConfig)


def _model_name(dcfg, spec=None) -> str | None:
    spec = spec if spec is not None else (dcfg.model if dcfg is not None else None)
    return None if spec is None else (spec.profile if hasattr(spec, "profile") else str(spec))


def _engines(src: Path, dcfg, cfg: BeliefReadConfig, engine: Any, appraiser_engine: Any) -> dict[str, Any]:
    """The debate's model (readings) and the appraiser's (the same engine unless ``appraiser_model`` names
    another), on the debate run's call store: a rerun or a killed run repeats no finished call."""
    if engine is not None:
        return {"model": engine, "appraiser": appraiser_engine or engine}
    specs = _specs(dcfg, cfg)
    plan = plan_roles(specs, phase_of=lambda role: "belief")
    built = build_engines(specs, store=src / "calls.sqlite", plan=plan)
    return {"model": built["model"], "appraiser": built.get("appraiser", built["model"])}


def _specs(dcfg, cfg: BeliefReadConfig) -> dict[str, Any]:
    """The roles' models: the debate's own, and the appraiser's where ``appraiser_model`` names another."""
    specs: dict[str, Any] = {"model": dcfg.model}
    if cfg.appraiser_model is not None:
        specs["appraiser"] = cfg.appraiser_model
    return specs


def _plot(table: pd.DataFrame, drift: pd.DataFrame, audit: dict[str, Any], summary: dict[str, Any], path: Path) -> None:
    """Kappa per agent (debate, round 1, placebo) with intervals; drift by round; the transfer curve."""
    fig, (a1, a2, a3) = subplots(1, 3, figsize=(13.0, 3.8))
    x = np.arange(len(table))
    drawn = []
    for off, col, lab in ((-0.25, "kappa", "debate, every round"), (0.0, "kappa_round1", "debate, round 1"),
                          (0.25, "kappa_placebo", "reflection placebo, round 1")):
        if col not in table:
            continue
        v = table[col].to_numpy(float)
        lo, hi = table[f"{col}_lo"].to_numpy(float), table[f"{col}_hi"].to_numpy(float)
        ok = np.isfinite(v) & (v > 0)
        err = np.vstack([np.where(np.isfinite(lo), np.clip(v - lo, 0, None), 0), np.where(np.isfinite(hi), np.clip(hi - v, 0, None), 0)])
        a1.errorbar(x[ok] + off, v[ok], yerr=err[:, ok], fmt="o", capsize=3, label=lab)
        bounded = ok & np.isfinite(lo) & np.isfinite(hi)   # a refused interval (under MIN_UNITS) draws no bar
        drawn += [{"resampled": r.get(f"{col}_resampled"), "n_units": r.get(f"{col}_n_units")}
                  for r, b in zip(table.to_dict("records"), bounded) if b]
    a1.set_yscale("log")
    a1.set_xticks(x, table["agent"])
    a1.set_ylabel("kappa (median, closed form)")
    a1.legend(fontsize=7)
    a1.set_title(f"stubbornness, gamma = {summary['gamma']}", fontsize=9)
    d = drift[drift["agent"] == "all"]
    for c, g in d.groupby("condition"):
        a2.plot(g["round"], g["mean_abs_move"], marker="o", label=c)
    a2.set_xlabel("round")
    a2.set_ylabel("mean |b_r - b0|")
    a2.legend(fontsize=7)
    a2.set_title("drift of the readings", fontsize=9)
    tc = pd.DataFrame(audit["transfer_curve"])
    if len(tc):
        a3.errorbar(tc["s_mean"], tc["e_mean"], yerr=tc["e_std"].fillna(0), fmt="o-", capsize=2)
    a3.plot([0, 1], [0, 1], color="grey", lw=0.8, ls="--")
    a3.set_xlabel("speaker's reading s")
    a3.set_ylabel("appraised e (bin mean +- 1 SD)")
    a3.set_title(f"channel audit: r = {audit['pearson_s_e']:.2f} (n = {audit['n']})", fontsize=9)
    fig.suptitle(f"belief layer over a debate ({summary.get('model')}; reading {summary['reading']}, "
                 f"appraiser {summary['appraiser']})", fontsize=9)
    fig.tight_layout()
    if drawn:
        interval_caption(fig, drawn, ci=summary.get("ci") or 0.95, unit=UNIT, what="kappa error bars")
    save(fig, path)


# -- a synthetic debate whose agents follow the belief layer's update (recovery checks: tests and bench/) ----
def synthetic_belief_debate(out: str | Path, kappas: list[float], *, gamma: float = 0.7, w: float = 1.0, n: int = 200,
                            rounds: int = 3, seed: int = 0, update: str = "sequential") -> Path:
    """A finished debate run directory over ``n`` two-option questions whose agent i is a belief-layer agent with
    kappa ``kappas[i]``: its b0 is drawn per question, every turn says its belief (the oracle's e = s), each agent
    takes one ``bayes.step`` per peer turn of the round before, in seat order, and answers a+ when b > 1/2. The
    reflection agents hear nothing and keep b0. The latent beliefs are ``tables/beliefs.parquet`` (the readings'
    schema), so ``reading=planted appraiser=oracle`` must return every kappa (and gamma) exactly.
    ``update="averaged"`` plants the other reading: each agent takes one ``bayes.step`` per round, its e the
    mean of its peers' beliefs (``kappa_readings``): then the averaged columns are the exact ones."""
    if update not in READINGS:
        raise BeliefReadError(f"update must be one of {list(READINGS)}, got {update!r}")
    rng = np.random.default_rng(seed)
    kap = np.asarray(kappas, float)
    N = len(kap)
    items = [validate_item({"id": f"q{k:05d}", "domain": "values", "subdomain": "synthetic", "family": f"f{k // 2:05d}",
                            "question": "?", "options": ["yes", "no"], "labels": ["yes", "no"], "reference": None})
             for k in range(n)]
    turns, beliefs = [], []
    for it in items:
        b0 = rng.uniform(0.05, 0.95, N)
        a0, c0 = bayes.prior_counts(kap, b0)
        for cond in ("debate", "reflection"):
            al, be = a0.copy(), c0.copy()
            for r in range(rounds + 1):
                b = bayes.credence(al, be)
                for a in range(N):
                    ans = "yes" if b[a] > 0.5 else "no"
                    turns.append({"qid": it.id, "family": it.family, "domain": it.domain, "subdomain": it.subdomain,
                                  "agent": a, "round": r, "condition": cond, "shared": r == 0, "response": f"I say {ans}.",
                                  "answer": ans, "parsed": True, "reference": None})
                    if r > 0:
                        beliefs.append({"qid": it.id, "condition": cond, "agent": a, "round": r, "f": READ, "b": float(b[a])})
                    if (r == 0 and cond == "debate") or (cond == "debate" and r < rounds):
                        beliefs.append({"qid": it.id, "condition": "shared" if r == 0 else cond, "agent": a,
                                        "round": r, "f": SPOKE, "b": float(b[a])})
                if cond == "debate" and r < rounds:
                    s = b.copy()  # every turn of this round says its speaker's belief; heard in seat order
                    for a in range(N):
                        if update == "averaged":
                            al[a], be[a] = bayes.step(al[a], be[a], a0[a], c0[a], np.delete(s, a).mean(), gamma, w)
                            continue
                        for j in range(N):
                            if j != a:
                                al[a], be[a] = bayes.step(al[a], be[a], a0[a], c0[a], s[j], gamma, w)
    run = RunDir.create(Path(out), part="debate", seeds={"seed": seed},
                        synthetic={"kappas": list(map(float, kappas)), "gamma": gamma, "w": w, "update": update})
    write_bench(items, run.path / "bench.jsonl")
    tdf = pd.DataFrame(turns)
    run.write_table("turns", tdf)
    run.write_table("beliefs", _expand_shared(pd.DataFrame(beliefs), tdf))
    run.finish()
    return run.path
