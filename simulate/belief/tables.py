"""Tidy tables from engine results: events (one row per listener update), utterances, beliefs
(per agent per round, with the probe), runs, agents and edges. A report is computed from these
tables alone."""
from __future__ import annotations

import json
from typing import Sequence

import numpy as np
import pandas as pd

from .config import Condition
from .engine import GroupResult


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
