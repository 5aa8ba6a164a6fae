"""Tidy tables from engine results: events (one row per listener update), utterances, beliefs
(per agent per round, with the probe), runs, agents and edges. A report is computed from these
tables alone. Beta results give one row per update; multi-concept results (``concept_tables``)
one row per update, concept and stance, plus appraisals per concept and the concepts table."""
from __future__ import annotations

import json
from typing import Sequence

import numpy as np
import pandas as pd

from .config import Condition
from .lockstep import GroupResult, Result
from .topics import MultiTopic


def _ids(res: GroupResult):
    g = res.group
    run = np.array([sp.run for sp in g.specs], dtype=np.int32)
    cond = np.array([sp.condition for sp in g.specs], dtype=np.int32)
    seed = np.array([sp.seed for sp in g.specs], dtype=np.int32)
    return run, cond, seed


def events_table(res: GroupResult) -> pd.DataFrame:
    """One row per listener update: seed, round, turn, speaker, listener, speaker belief s,
    evidence e, listener b before/after, listener kappa, b0, discounted count m and update
    count c before the update."""
    g = res.group
    N = g.N
    run, cond, seed = _ids(res)
    t, r, l = np.nonzero(res.listen)
    a, b = res.alpha, res.beta
    n_before = a[t, r, l] + b[t, r, l]
    kappa = g.kappa[r, l]
    count = np.cumsum(res.listen, axis=0, dtype=np.int32)
    c_before = count[t, r, l] - 1
    df = pd.DataFrame({
        "run": run[r], "condition": cond[r], "seed": seed[r],
        "round": (t // N).astype(np.int32), "turn": (t % N).astype(np.int32),
        "speaker": res.speaker[t, r], "listener": l.astype(np.int32),
        "s": res.s[t, r], "e": res.e[t, r],
        "b_before": a[t, r, l] / n_before, "b_after": a[t + 1, r, l] / (a[t + 1, r, l] + b[t + 1, r, l]),
        "kappa": kappa, "b0": g.b0[r, l], "m": n_before - kappa, "c": c_before,
    })
    if res.e_raw is not None:  # a channel correction: e is the consumed (corrected) evidence
        df["e_raw"] = res.e_raw[t, r]
    return df


def utterances_table(res: GroupResult) -> pd.DataFrame:
    g = res.group
    T, R = res.s.shape
    run, cond, seed = _ids(res)
    tt = np.repeat(np.arange(T), R)
    rr = np.tile(np.arange(R), T)
    e = res.e.ravel()
    df = pd.DataFrame({
        "run": run[rr], "condition": cond[rr], "seed": seed[rr],
        "round": (tt // g.N).astype(np.int32), "turn": (tt % g.N).astype(np.int32),
        "speaker": res.speaker.ravel(), "s": res.s.ravel(), "p_raw": res.p_raw.ravel(), "e": e,
        "failed": ~np.isfinite(e), "attempts": res.attempts.ravel(),
        "listeners": res.listen.sum(-1).ravel().astype(np.int32),
    })
    if res.e_raw is not None:  # a channel correction: e is the consumed (corrected) evidence
        df["e_raw"] = res.e_raw.ravel()
    if res.texts is not None:
        df["text"] = pd.Series([x for row in res.texts for x in (row or [None] * R)], dtype="string")
        df["error"] = pd.Series([x for row in res.errors for x in row], dtype="string")
        df["completion_tokens"] = res.gen_tokens.ravel()
    return df


def beliefs_table(res: GroupResult) -> pd.DataFrame:
    """b per agent at the start (round 0) and after each round (round r = 1..rounds), with
    the self-report of that round (NaN at round 0 or when the probe failed)."""
    g = res.group
    R, N, rounds = g.R, g.N, g.rounds
    run, cond, seed = _ids(res)
    bb = res.b[::N]                      # (rounds+1, R, N): before turn 0 of each round, and final
    probe = np.concatenate([np.full((1, R, N), np.nan), res.probe])
    rd, rr, ag = np.meshgrid(np.arange(rounds + 1), np.arange(R), np.arange(N), indexing="ij")
    rr = rr.ravel()
    return pd.DataFrame({
        "run": run[rr], "condition": cond[rr], "seed": seed[rr], "round": rd.ravel().astype(np.int32),
        "agent": ag.ravel().astype(np.int32), "b": bb.ravel(), "probe": probe.ravel(),
        "committed": g.committed[rr, ag.ravel()],
    })


def runs_table(results: Sequence[GroupResult], conditions: Sequence[Condition]) -> pd.DataFrame:
    labels = {c.index: c.label for c in conditions}
    rows = []
    for res in results:
        for i, sp in enumerate(res.group.specs):
            c = sp.config
            rows.append({"run": sp.run, "condition": sp.condition, "label": labels[sp.condition],
                         "seed": sp.seed, "gamma": c.gamma, "w": c.w, "n_agents": c.n_agents,
                         "rounds": c.rounds, "topology": c.topology.kind, "topic": c.topic,
                         "mode": c.mode, "population": c.population.kind,
                         "kappa": c.population.kappa,
                         "committed_fraction": (c.population.committed_fraction
                                                if c.population.kind == "committed" else np.nan),
                         "n_committed": int(res.group.committed[i].sum())})
    return pd.DataFrame(rows)


def agents_table(results: Sequence[GroupResult]) -> pd.DataFrame:
    frames = []
    for res in results:
        g = res.group
        R, N = g.R, g.N
        run, _, _ = _ids(res)
        frames.append(pd.DataFrame({
            "run": np.repeat(run, N), "agent": np.tile(np.arange(N, dtype=np.int32), R),
            "kappa": g.kappa.ravel(), "b0": g.b0.ravel(), "committed": g.committed.ravel(),
            "group": g.groups.ravel().astype(str), "degree": g.adj.sum(-1).ravel().astype(np.int32)}))
    return pd.concat(frames, ignore_index=True)


def edges_table(results: Sequence[GroupResult]) -> pd.DataFrame:
    frames = []
    for res in results:
        for sp, gr in zip(res.group.specs, res.group.graphs):
            e = np.array(list(gr.edges()), dtype=np.int32).reshape(-1, 2)
            frames.append(pd.DataFrame({"run": sp.run, "u": e[:, 0], "v": e[:, 1]}))
    return pd.concat(frames, ignore_index=True)


def conditions_table(conditions: Sequence[Condition]) -> pd.DataFrame:
    return pd.DataFrame([{"condition": c.index, "label": c.label,
                          "overrides": json.dumps(c.overrides, sort_keys=True, default=str)}
                         for c in conditions])


def all_tables(results: Sequence[GroupResult], conditions: Sequence[Condition]) -> dict[str, pd.DataFrame]:
    cat = lambda f: pd.concat([f(r) for r in results], ignore_index=True)  # noqa: E731
    return {"events": cat(events_table), "utterances": cat(utterances_table),
            "beliefs": cat(beliefs_table), "runs": runs_table(results, conditions),
            "agents": agents_table(results), "edges": edges_table(results),
            "conditions": conditions_table(conditions)}


# -- multi-concept results: one row per stance ----------------------------------------------------
def _run_seed(res: Result):
    g = res.group
    return (np.array([sp.run for sp in g.specs], dtype=np.int32),
            np.array([sp.seed for sp in g.specs], dtype=np.int32))


def _cat(values: Sequence[str], codes: np.ndarray) -> pd.Categorical:
    return pd.Categorical.from_codes(codes, categories=list(values))


def _stance_rows(Ks: np.ndarray, concept: np.ndarray):
    """For items with concept indices ``concept``: (item index, stance index) of one row per stance."""
    per = Ks[concept]
    item = np.repeat(np.arange(len(concept)), per)
    starts = np.repeat(np.cumsum(per) - per, per)
    return item, (np.arange(per.sum()) - starts).astype(np.int64)


def _stance_cat(topic: MultiTopic, c: np.ndarray, k: np.ndarray) -> pd.Categorical:
    names = sorted({s.id for cc in topic.concepts for s in cc.stances})
    lut = np.array([[names.index(s.id) for s in cc.stances] + [0] * (max(topic.Ks) - cc.K)
                    for cc in topic.concepts])
    return _cat(names, lut[c, k])


def concept_events_table(res: Result) -> pd.DataFrame:
    """One row per listener update, concept and stance: run, seed, round, turn, speaker,
    listener, concept, stance (and its index k), speaker credence s, consumed evidence e (and
    the appraised e before couplings), listener b before/after, kappa, b0, discounted count m
    and update count c (on that concept) before the update."""
    g = res.group
    run, seed = _run_seed(res)
    t, r, l, c = np.nonzero(res.listen)
    a = res.alpha
    # per event first (n, kappa, count), then one row per stance
    n_before, n_after = a[t, r, l, c].sum(-1), a[t + 1, r, l, c].sum(-1)
    kappa = g.kappa[r, l, c]
    count = np.cumsum(res.listen, axis=0, dtype=np.int32)[t, r, l, c]
    i, k = _stance_rows(g.Ks, c)
    t, r, l, c = t[i], r[i], l[i], c[i]
    n_before, n_after, kappa, count = n_before[i], n_after[i], kappa[i], count[i]
    return pd.DataFrame({
        "run": run[r], "seed": seed[r], "round": (t // g.N).astype(np.int32), "turn": (t % g.N).astype(np.int32),
        "speaker": res.speaker[t, r], "listener": l.astype(np.int32),
        "concept": _cat(g.topic.concept_ids, c), "stance": _stance_cat(g.topic, c, k), "k": k.astype(np.int8),
        "s": res.s[t, r, c, k], "e": res.e[t, r, c, k], "e_appraised": res.e_appraised[t, r, c, k],
        "b_before": a[t, r, l, c, k] / n_before, "b_after": a[t + 1, r, l, c, k] / n_after,
        "kappa": kappa, "b0": g.b0[r, l, c, k], "m": n_before - kappa, "c": count - 1,
    })


def concept_appraisals_table(res: Result) -> pd.DataFrame:
    """One row per utterance, concept and stance: speaker credence s, normalised rating p_raw,
    appraised and consumed evidence, whether the concept's appraisal failed (and why), and how
    many listeners updated on it."""
    g = res.group
    run, seed = _run_seed(res)
    T, R = res.speaker.shape
    tt, rr, cc = (x.ravel() for x in np.meshgrid(np.arange(T), np.arange(R), np.arange(g.C), indexing="ij"))
    i, k = _stance_rows(g.Ks, cc)
    t, r, c = tt[i], rr[i], cc[i]
    err = None
    if res.errors is not None:
        flat = [res.errors[a][b][d] for a, b, d in zip(tt, rr, cc)]
        err = pd.Series([flat[x] for x in i], dtype="string")
    failed = ~np.isfinite(res.e_appraised[t, r, c]).all(-1)
    df = pd.DataFrame({
        "run": run[r], "seed": seed[r], "round": (t // g.N).astype(np.int32), "turn": (t % g.N).astype(np.int32),
        "speaker": res.speaker[t, r], "concept": _cat(g.topic.concept_ids, c),
        "stance": _stance_cat(g.topic, c, k), "k": k.astype(np.int8),
        "s": res.s[t, r, c, k], "p_raw": res.p_raw[t, r, c, k], "e_appraised": res.e_appraised[t, r, c, k],
        "e": res.e[t, r, c, k], "failed": failed,
        "listeners": res.listen[t, r, :, c].sum(-1).astype(np.int32),
    })
    if err is not None:
        df["error"] = err
    return df


def concept_utterances_table(res: Result) -> pd.DataFrame:
    g = res.group
    run, seed = _run_seed(res)
    T, R = res.speaker.shape
    tt = np.repeat(np.arange(T), R)
    rr = np.tile(np.arange(R), T)
    failed = ~np.isfinite(res.e_appraised).all(-1)             # (T, R, C)
    df = pd.DataFrame({
        "run": run[rr], "seed": seed[rr], "round": (tt // g.N).astype(np.int32),
        "turn": (tt % g.N).astype(np.int32), "speaker": res.speaker.ravel(),
        "attempts": res.attempts.ravel(), "failed_concepts": failed.sum(-1).ravel().astype(np.int32)})
    if res.texts is not None:
        df["text"] = pd.Series([x for row in res.texts for x in (row or [None] * R)], dtype="string")
        df["completion_tokens"] = res.gen_tokens.ravel()
    return df


def concept_beliefs_table(res: Result) -> pd.DataFrame:
    """Credence per agent, concept and stance at the start (round 0) and after each round."""
    g = res.group
    run, seed = _run_seed(res)
    R, N, C, rounds = g.R, g.N, g.C, g.rounds
    bb = res.b[::N]                                             # (rounds+1, R, N, C, Kmax)
    rd, rr, ag, cc = (x.ravel() for x in np.meshgrid(np.arange(rounds + 1), np.arange(R), np.arange(N),
                                                     np.arange(C), indexing="ij"))
    i, k = _stance_rows(g.Ks, cc)
    rd, rr, ag, cc = rd[i], rr[i], ag[i], cc[i]
    return pd.DataFrame({
        "run": run[rr], "seed": seed[rr], "round": rd.astype(np.int32), "agent": ag.astype(np.int32),
        "concept": _cat(g.topic.concept_ids, cc), "stance": _stance_cat(g.topic, cc, k), "k": k.astype(np.int8),
        "b": bb[rd, rr, ag, cc, k], "committed": g.committed[rr, ag, cc]})


def concept_agents_table(res: Result) -> pd.DataFrame:
    """Per run, agent, concept and stance: b0, and the agent's kappa / group / degree on it."""
    g = res.group
    run, _ = _run_seed(res)
    rr, ag, cc = (x.ravel() for x in np.meshgrid(np.arange(g.R), np.arange(g.N), np.arange(g.C), indexing="ij"))
    i, k = _stance_rows(g.Ks, cc)
    rr, ag, cc = rr[i], ag[i], cc[i]
    return pd.DataFrame({
        "run": run[rr], "agent": ag.astype(np.int32), "concept": _cat(g.topic.concept_ids, cc),
        "stance": _stance_cat(g.topic, cc, k), "k": k.astype(np.int8), "b0": g.b0[rr, ag, cc, k],
        "kappa": g.kappa[rr, ag, cc], "committed": g.committed[rr, ag, cc],
        "group": g.groups[rr, ag, cc].astype(str), "degree": g.adj.sum(-1)[rr, ag].astype(np.int32)})


def concept_runs_table(res: Result) -> pd.DataFrame:
    return pd.DataFrame([{"run": sp.run, "seed": sp.seed, "n_agents": sp.config.n_agents,
                          "rounds": sp.config.rounds, "topology": sp.config.topology.kind,
                          "topic": sp.config.topic, "mode": sp.config.mode} for sp in res.group.specs])


def concepts_table(res: Result) -> pd.DataFrame:
    g = res.group
    cfg = g.specs[0].config
    rows = []
    for ci, c in enumerate(g.topic.concepts):
        gamma, w, p = cfg.concept(c.id)
        inc = [cp for cp in g.couplings if cp.dst == ci]
        rows.append({"concept": c.id, "index": ci, "K": c.K, "title": c.title,
                     "stances": json.dumps(c.stance_ids), "gamma": gamma, "w": w, "population": p.kind,
                     "kappa": float(p.kappa), "coupled_in": bool(inc),
                     "couplings_in": json.dumps([{"from": g.topic.concept_ids[cp.src], "weight": cp.weight}
                                                 for cp in inc])})
    return pd.DataFrame(rows)


def concept_tables(res: Result) -> dict[str, pd.DataFrame]:
    return {"events": concept_events_table(res), "appraisals": concept_appraisals_table(res),
            "utterances": concept_utterances_table(res), "beliefs": concept_beliefs_table(res),
            "agents": concept_agents_table(res), "edges": edges_table([res]), "runs": concept_runs_table(res),
            "concepts": concepts_table(res)}
