"""Collective outcomes of debate vs reflection. Pure: numpy/pandas only, no model code.

Definitions (peer-influence paper §5):

* a question is *fully parsed* in a condition when every agent's answer parsed in every round;
  accuracy-type metrics use fully parsed, reference-labelled, non-numeric questions;
* majority = plurality of the agents' answers, ties broken by a seeded draw per question and
  round (never by position);
* wrong unanimity: all agents give the same answer and it is not the reference;
* effective independent voters: n_eff = I / (1 + (I - 1) rho), rho the mean pairwise Pearson
  correlation of the agents' per-question correctness (pairs where it is undefined, i.e. an
  agent with constant correctness, are left out; NaN when no pair is defined);
* initial-plurality lock-in: among groups split at round 0 that have a unique plurality answer
  and are unanimous at the end, the share whose final answer is that plurality answer;
* unanimity by round: the share of groups whose agents all agree at round r (all groups, and
  the initially split ones).

Uncertainty: question-clustered (cluster = family) paired bootstrap for per-question means
(``chorus.core.stats.paired_bootstrap``), a clustered bootstrap for n_eff, a
cluster-level sign-flip permutation null for paired deltas, and Benjamini-Hochberg across
cells (subdomains).
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

import numpy as np
import pandas as pd

from chorus.core.seeding import rng as make_rng, stable_int
from chorus.core.stats import benjamini_hochberg, cluster_bootstrap, permutation_pvalue, paired_bootstrap


# -- n_eff ---------------------------------------------------------------------------------
def mean_pairwise_correlation(correct: np.ndarray) -> float:
    X = np.asarray(correct, float)
    if X.ndim != 2 or X.shape[1] < 2:
        raise ValueError(f"correct must be a questions x agents array with >= 2 agents, got shape {X.shape}")
    if np.isnan(X).any():
        raise ValueError("correct contains NaN (unparsed answers must be excluded before computing n_eff)")
    I = X.shape[1]
    sd = X.std(axis=0)
    if (sd > 0).sum() < 2:
        return float("nan")   # fewer than two agents vary: no pair's correlation is defined
    rs = []
    for i in range(I):
        for j in range(i + 1, I):
            # an agent that never varies covaries with no one: its pairs count as 0, not skipped.
            # Skipping them averaged a subset, whose mean can fall below the bound -1/(I-1) that
            # the mean over all pairs keeps (the correlation matrix with those entries 0 is still
            # positive semi-definite), and n_eff went infinite or negative
            rs.append(0.0 if sd[i] == 0 or sd[j] == 0 else float(np.corrcoef(X[:, i], X[:, j])[0, 1]))
    return float(np.mean(rs))


def effective_voters(correct: np.ndarray) -> float:
    """n_eff = I / (1 + (I - 1) * rho) for a questions x agents 0/1 correctness array; rho is the
    mean correlation over all agent pairs, a constant agent's pairs counted as 0; NaN when fewer
    than two agents vary; infinite only at the bound rho = -1/(I-1)."""
    X = np.asarray(correct, float)
    rho = mean_pairwise_correlation(X)
    I = X.shape[1]
    if not np.isfinite(rho):
        return float("nan")
    den = 1.0 + (I - 1) * rho
    # rho = -1/(I-1), the most anti-correlated a group can be: as many voters as you like
    return float(I / den) if den > 1e-12 else float("inf")


# -- votes -----------------------------------------------------------------------------------
def plurality(answers: Sequence[Any], rng: np.random.Generator | None = None) -> tuple[Any, bool]:
    """(plurality answer over the non-None answers, whether it was unique). A tie is broken by
    ``rng`` (seeded per question); without one the answer is None when tied."""
    c = Counter(a for a in answers if a is not None)
    if not c:
        return None, False
    top = max(c.values())
    best = sorted(k for k, v in c.items() if v == top)
    if len(best) == 1:
        return best[0], True
    return (best[int(rng.integers(len(best)))] if rng is not None else None), False


def _qkey(qid: str) -> int:
    return stable_int(qid, bits=31)


def question_table(turns: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """One row per (condition, question): per-round answers and the per-question indicators."""
    rows = []
    R = int(turns["round"].max()) if len(turns) else 0
    for (cond, qid), g in turns.groupby(["condition", "qid"], sort=True):
        g = g.sort_values(["round", "agent"])
        agents = sorted(g["agent"].unique())
        rounds = sorted(g["round"].unique())
        A = {int(r): [None] * len(agents) for r in rounds}
        for r, a, ans in zip(g["round"], g["agent"], g["answer"]):
            A[int(r)][agents.index(a)] = ans if isinstance(ans, str) else None
        ref = g["reference"].iloc[0]
        ref = ref if isinstance(ref, str) else None
        full = len(rounds) == R + 1 and all(x is not None for r in rounds for x in A[r])
        rec: dict[str, Any] = {"condition": cond, "qid": qid, "family": g["family"].iloc[0],
                               "domain": g["domain"].iloc[0], "subdomain": g["subdomain"].iloc[0],
                               "reference": ref, "labelled": ref is not None, "n_agents": len(agents),
                               "n_rounds": len(rounds) - 1, "fully_parsed": full,
                               "truncated": int(g["truncated"].sum()), "unparsed": int((~g["parsed"].astype(bool)).sum())}
        for r in rounds:
            rng = make_rng(seed, 7, _qkey(qid), int(r))  # same tie-break draw in both conditions
            maj, uniq = plurality(A[r], rng)
            parsed_r = all(x is not None for x in A[r])
            rec[f"majority_{r}"] = maj
            rec[f"unanimous_{r}"] = parsed_r and len(set(A[r])) == 1
            if ref is not None:
                rec[f"majority_correct_{r}"] = (maj == ref) if maj is not None else None
                rec[f"correct_agents_{r}"] = [None if x is None else int(x == ref) for x in A[r]]
        p0, u0 = plurality(A[0])
        rec["split_0"] = all(x is not None for x in A[0]) and len(set(A[0])) > 1
        rec["plurality_0"] = p0 if u0 else None
        fin = A[rounds[-1]]
        rec["final_answer"] = fin[0] if rec[f"unanimous_{rounds[-1]}"] else None
        rec["wrong_unanimous"] = (rec[f"unanimous_{rounds[-1]}"] and ref is not None and fin[0] != ref)
        rec["final_round"] = int(rounds[-1])
        rows.append(rec)
    return pd.DataFrame(rows)


def _mean(x) -> float:
    x = np.asarray(list(x), float)
    return float(x.mean()) if len(x) else float("nan")


def condition_metrics(q: pd.DataFrame, turns: pd.DataFrame, condition: str) -> dict[str, Any]:
    """Headline metrics of one condition from its question table ``q`` (rows of that condition)."""
    q = q[q["condition"] == condition]
    t = turns[turns["condition"] == condition]
    R = int(q["final_round"].max()) if len(q) else 0
    out: dict[str, Any] = {"n_questions": int(len(q)), "n_turns": int(len(t)),
                           "parse_rate": float(t["parsed"].mean()) if len(t) else float("nan"),
                           "n_unparsed": int((~t["parsed"].astype(bool)).sum()),
                           "n_truncated": int(t["truncated"].sum()),
                           "truncated_rate": float(t["truncated"].mean()) if len(t) else float("nan"),
                           "n_fully_parsed": int(q["fully_parsed"].sum())}
    lab = q[q["fully_parsed"] & q["labelled"] & (q["final_round"] == R)]
    out["n_scored"] = int(len(lab))
    out["acc_initial_majority"] = _mean(lab["majority_correct_0"]) if len(lab) else float("nan")
    out["acc_final_majority"] = _mean(lab[f"majority_correct_{R}"]) if len(lab) else float("nan")
    out["acc_initial_individual"] = _mean(np.mean(c) for c in lab["correct_agents_0"]) if len(lab) else float("nan")
    out["acc_final_individual"] = _mean(np.mean(c) for c in lab[f"correct_agents_{R}"]) if len(lab) else float("nan")
    out["wrong_unanimity"] = _mean(lab["wrong_unanimous"]) if len(lab) else float("nan")
    wrong0 = lab[lab["majority_correct_0"] == False]  # noqa: E712
    out["n_wrong_initial_majority"] = int(len(wrong0))
    out["wrong_unanimity_given_wrong_initial"] = _mean(wrong0["wrong_unanimous"]) if len(wrong0) else float("nan")
    out["n_eff_by_round"] = {int(r): (effective_voters(np.array(list(lab[f"correct_agents_{r}"])))
                                      if len(lab) >= 2 else float("nan")) for r in range(R + 1)}
    out["n_eff_initial"] = out["n_eff_by_round"].get(0, float("nan"))
    out["n_eff_final"] = out["n_eff_by_round"].get(R, float("nan"))
    full = q[q["fully_parsed"] & (q["final_round"] == R)]
    split = full[full["split_0"]]
    out["n_split_0"] = int(len(split))
    out["unanimity_by_round"] = {int(r): _mean(full[f"unanimous_{r}"]) for r in range(R + 1)}
    out["unanimity_by_round_split"] = {int(r): _mean(split[f"unanimous_{r}"]) for r in range(R + 1)}
    lock = split[split[f"unanimous_{R}"] & split["plurality_0"].notna()]
    out["n_lockin_groups"] = int(len(lock))
    out["lockin_initial_plurality"] = _mean(lock["final_answer"] == lock["plurality_0"]) if len(lock) else float("nan")
    return out


# -- uncertainty -----------------------------------------------------------------------------
def paired_mean_deltas(per_arm: dict[str, np.ndarray], pairs: Sequence[tuple[str, str]], clusters: np.ndarray,
                       *, n_boot: int = 2000, seed: int = 0, ci: float = 0.95) -> pd.DataFrame:
    """Paired, question-clustered bootstrap of differences of per-question means (A - B),
    via ``chorus.core.stats.paired_bootstrap`` (its "accuracy" statistic is the mean)."""

    n = len(clusters)
    data = {k: {"correct": np.asarray(v, float), "confidence": np.zeros(n), "brier": np.zeros(n)}
            for k, v in per_arm.items()}
    if n == 0 or n_boot == 0:
        return pd.DataFrame([{"a": a, "b": b, "delta": (float(np.mean(per_arm[a]) - np.mean(per_arm[b])) if n else float("nan")),
                              "ci_low": float("nan"), "ci_high": float("nan"), "n": n} for a, b in pairs])
    df = paired_bootstrap(data, pairs, metrics=("accuracy",), clusters=clusters, n_resamples=n_boot, seed=seed, ci=ci,
                          resampled="question family")
    df = df.drop(columns=["metric"])
    df["n"] = n
    return df


def paired_comparisons(q: pd.DataFrame, *, n_boot: int = 2000, n_perm: int = 2000, seed: int = 0,
                       ci: float = 0.95, fdr_q: float = 0.05) -> dict[str, Any]:
    """Debate vs reflection on the questions fully parsed, labelled and present in both
    conditions; plus final vs initial majority within each condition. Clustered by family."""
    d = q[q["condition"] == "debate"].set_index("qid")
    r = q[q["condition"] == "reflection"].set_index("qid")
    common = d.index.intersection(r.index)
    ok = [k for k in common if d.at[k, "fully_parsed"] and r.at[k, "fully_parsed"] and d.at[k, "labelled"]
          and d.at[k, "final_round"] == r.at[k, "final_round"]]
    out: dict[str, Any] = {"n_paired": len(ok), "ci_level": ci}   # the level the deltas' intervals cover
    if not ok:
        return out
    d, r = d.loc[ok], r.loc[ok]
    R = int(d["final_round"].iloc[0])
    fam = d["family"].to_numpy()
    arms = {"debate_final_majority": d[f"majority_correct_{R}"].astype(float).to_numpy(),
            "reflection_final_majority": r[f"majority_correct_{R}"].astype(float).to_numpy(),
            "initial_majority": d["majority_correct_0"].astype(float).to_numpy(),
            "debate_wrong_unanimous": d["wrong_unanimous"].astype(float).to_numpy(),
            "reflection_wrong_unanimous": r["wrong_unanimous"].astype(float).to_numpy()}
    pairs = [("debate_final_majority", "reflection_final_majority"),
             ("debate_final_majority", "initial_majority"),
             ("reflection_final_majority", "initial_majority"),
             ("debate_wrong_unanimous", "reflection_wrong_unanimous")]
    tab = paired_mean_deltas(arms, pairs, fam, n_boot=n_boot, seed=seed, ci=ci)
    tab["p_perm"] = [permutation_pvalue(arms[a], arms[b], fam, n_perm=n_perm, seed=seed) for a, b in pairs]
    out["deltas"] = tab.to_dict(orient="records")

    # n_eff at the final round: clustered bootstrap of debate - reflection
    Cd = np.array(list(d[f"correct_agents_{R}"]), float)
    Cr = np.array(list(r[f"correct_agents_{R}"]), float)
    iv = cluster_bootstrap(lambda idx: effective_voters(Cd[idx]) - effective_voters(Cr[idx]), fam,
                           n_boot=n_boot, seed=seed, ci=ci, resampled="question family")
    est, lo, hi = iv
    out["n_eff_delta"] = {"debate": effective_voters(Cd), "reflection": effective_voters(Cr), "delta": est,
                          "ci_low": lo, "ci_high": hi, "resampled": iv.resampled, "n_units": iv.n_units}
    # per-subdomain cells of the wrong-unanimity delta, BH across cells
    cells = []
    for sub, idx in d.groupby("subdomain").indices.items():
        a, b = arms["debate_wrong_unanimous"][idx], arms["reflection_wrong_unanimous"][idx]
        cells.append({"subdomain": sub, "n": int(len(idx)), "debate": float(a.mean()), "reflection": float(b.mean()),
                      "delta": float((a - b).mean()),
                      "p_perm": permutation_pvalue(a, b, fam[idx], n_perm=n_perm, seed=seed)})
    qv = benjamini_hochberg([c["p_perm"] for c in cells])
    for c, qq in zip(cells, qv):
        c["q_bh"] = float(qq)
        c["significant"] = bool(qq <= fdr_q) if np.isfinite(qq) else False
    out["wrong_unanimity_by_subdomain"] = cells
    out["by_subdomain"] = subdomain_cells(d, r, R, n_perm=n_perm, seed=seed, fdr_q=fdr_q)
    return out


#: seed 002 §C.3 / Fig. 11: debate - reflection by subdomain (indicator per question; None = not in the cell)
SUBDOMAIN_METRICS = {
    "unanimity_gain": lambda q, R: q[f"unanimous_{R}"].astype(float),
    "accuracy_gain": lambda q, R: q[f"majority_correct_{R}"].astype(float),
    "wrong_unanimity": lambda q, R: q["wrong_unanimous"].astype(float),
    # among questions whose round-0 majority was wrong (the same questions in both conditions: round 0 is
    # shared), ending unanimous on a wrong answer
    "wrong_majority_lockin": lambda q, R: q["wrong_unanimous"].astype(float).where(q["majority_correct_0"] == False),  # noqa: E712
}


def subdomain_cells(d: pd.DataFrame, r: pd.DataFrame, R: int, *, n_perm: int = 2000, seed: int = 0,
                    fdr_q: float = 0.05) -> list[dict[str, Any]]:
    """Per (metric, subdomain): debate and reflection means on the paired questions, the delta, a
    family-clustered permutation p-value, and Benjamini-Hochberg q over every cell of every metric (one
    family of tests: the multiplicity control of Fig. 11)."""
    fam = d["family"].to_numpy()
    cells = []
    for metric, f in SUBDOMAIN_METRICS.items():
        a_all, b_all = f(d, R).to_numpy(float), f(r, R).to_numpy(float)
        for sub, idx in d.groupby("subdomain").indices.items():
            keep = idx[np.isfinite(a_all[idx]) & np.isfinite(b_all[idx])]
            a, b = a_all[keep], b_all[keep]
            cells.append({"metric": metric, "subdomain": sub, "n": int(len(keep)),
                          "debate": float(a.mean()) if len(keep) else float("nan"),
                          "reflection": float(b.mean()) if len(keep) else float("nan"),
                          "delta": float((a - b).mean()) if len(keep) else float("nan"),
                          "p_perm": permutation_pvalue(a, b, fam[keep], n_perm=n_perm, seed=seed)
                          if len(keep) else float("nan")})
    qv = benjamini_hochberg([c["p_perm"] for c in cells])
    for c, qq in zip(cells, qv):
        c["q_bh"] = float(qq)
        c["significant"] = bool(qq <= fdr_q) if np.isfinite(qq) else False
    return cells


def collective_summary(turns: pd.DataFrame, *, seed: int = 0, n_boot: int = 2000, n_perm: int = 2000,
                       ci: float = 0.95, fdr_q: float = 0.05) -> tuple[dict[str, Any], pd.DataFrame]:
    """Every collective metric of a turns table: (summary dict, question table)."""
    q = question_table(turns, seed=seed)
    summary: dict[str, Any] = {"conditions": {}}
    for cond in sorted(turns["condition"].unique()):
        summary["conditions"][cond] = condition_metrics(q, turns, cond)
    if {"debate", "reflection"} <= set(turns["condition"].unique()):
        summary["paired"] = paired_comparisons(q, n_boot=n_boot, n_perm=n_perm, seed=seed, ci=ci, fdr_q=fdr_q)
    summary["stance_dynamics"] = stance_dynamics(turns)
    return summary, q


def stance_dynamics(turns: pd.DataFrame) -> dict[str, Any]:
    """Seed 002 §A.8: labelled and unlabelled questions reported apart (agreement on an unlabelled
    question is never correctness). Per group and condition: questions, the final round's answer
    distribution, persistence (the share of an agent's consecutive parsed answers that stay the same)
    and the round-to-round transition counts between answer labels."""
    out: dict[str, Any] = {}
    if not len(turns):
        return out
    lab = turns["reference"].map(lambda x: x is not None and x == x) if "reference" in turns else \
        pd.Series(False, index=turns.index)
    for group, sel in (("labelled", lab), ("unlabelled", ~lab)):
        g_all = turns[sel]
        for cond, g in g_all.groupby("condition", sort=True):
            out.setdefault(group, {})[cond] = stance_block(g)
    return out


def _steps(g: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(parsed answers of one condition's turns, their consecutive-round steps with the previous answer)."""
    ans = g[g["answer"].map(lambda x: isinstance(x, str))].sort_values(["qid", "agent", "round"])
    prev = ans.groupby(["qid", "agent"])["answer"].shift()
    step = ans.assign(prev=prev)[prev.notna() & (ans["round"] == ans.groupby(["qid", "agent"])["round"].shift() + 1)]
    return ans, step


def stance_block(g: pd.DataFrame) -> dict[str, Any]:
    """§A.8 stance numbers of one condition's turns ``g``: questions, final-round answer distribution
    (the last round of ``g``), persistence over consecutive parsed answers, transition counts."""
    ans, step = _steps(g)
    last = ans[ans["round"] == g["round"].max()]
    trans = step.groupby(["prev", "answer"]).size()
    return {
        "n_questions": int(g["qid"].nunique()),
        "final_distribution": {k: float(v) for k, v in last["answer"].value_counts(normalize=True).sort_index().items()},
        "persistence": float((step["prev"] == step["answer"]).mean()) if len(step) else float("nan"),
        "n_steps": int(len(step)),
        "transitions": [{"from": a, "to": b, "n": int(n)} for (a, b), n in trans.items()]}


FRAME_COLUMNS = ["condition", "frame", "stakes_dimension", "stakes_level", "n_questions", "n_families", "n_turns",
                 "n_parsed", "n_steps", "n_changes", "persistence", "change_rate", "final_distribution"]


def frame_dynamics(turns: pd.DataFrame, frames: Sequence[dict[str, Any]]) -> tuple[dict[str, Any], pd.DataFrame]:
    """Frame as a reported factor (seed 002 §A.4 / §A.8) for the constructed scenarios: ``frames`` holds
    one {qid, frame, stakes_dimension, stakes_level} record per framed item (``questions.item_frames``);
    turns of other questions are left out. Per (condition, frame): the §A.8 stance numbers
    (``stance_block``) plus change_rate = n_changes / n_steps = 1 - persistence. Per (condition, stakes
    dimension): the low and high levels' change rates and high - low (only where both levels ran).
    Returns (summary block, table ``by_frame``: one row per condition and frame, FRAME_COLUMNS; the final
    distribution as JSON text, since its labels vary)."""
    import json

    meta = {f["qid"]: f for f in frames}
    t = turns[turns["qid"].isin(meta)]
    rows, per_frame = [], {}
    for (cond, frame), g in t.groupby([t["condition"], t["qid"].map(lambda q: meta[q]["frame"])], sort=True):
        f = meta[g["qid"].iloc[0]]
        b = stance_block(g)
        _, step = _steps(g)
        n_changes = int((step["prev"] != step["answer"]).sum())
        b.update(n_changes=n_changes, change_rate=(n_changes / b["n_steps"]) if b["n_steps"] else float("nan"),
                 n_families=int(g["family"].nunique()))
        per_frame.setdefault(frame, {"stakes_dimension": f["stakes_dimension"], "stakes_level": f["stakes_level"],
                                     "conditions": {}})["conditions"][cond] = b
        rows.append({"condition": cond, "frame": frame, "stakes_dimension": f["stakes_dimension"],
                     "stakes_level": f["stakes_level"], "n_questions": b["n_questions"], "n_families": b["n_families"],
                     "n_turns": int(len(g)), "n_parsed": int(g["answer"].map(lambda x: isinstance(x, str)).sum()),
                     "n_steps": b["n_steps"], "n_changes": n_changes, "persistence": b["persistence"],
                     "change_rate": b["change_rate"], "final_distribution": json.dumps(b["final_distribution"])})
    tab = pd.DataFrame(rows, columns=FRAME_COLUMNS)
    return {"n_questions": int(t["qid"].nunique()), "n_families": int(t["family"].nunique()),
            "frames": per_frame, "stakes": stakes_contrast(tab)}, tab


def stakes_contrast(tab: pd.DataFrame) -> dict[str, Any]:
    """condition -> stakes dimension -> low / high change rates (pooled steps over that level's frames) and
    high - low; a dimension with only one level (e.g. the default frames: high only) has delta None."""
    out: dict[str, Any] = {}
    lev = tab[tab["stakes_dimension"].notna() & tab["stakes_level"].notna()]
    for (cond, dim), g in lev.groupby(["condition", "stakes_dimension"], sort=True):
        cell: dict[str, Any] = {}
        for level in ("low", "high"):
            x = g[g["stakes_level"] == level]
            steps, changes = int(x["n_steps"].sum()), int(x["n_changes"].sum())
            cell[level] = {"n_questions": int(x["n_questions"].sum()), "n_steps": steps, "n_changes": changes,
                           "change_rate": changes / steps if steps else float("nan")}
        both = all(cell[k]["n_steps"] for k in ("low", "high"))
        cell["delta_change_rate"] = cell["high"]["change_rate"] - cell["low"]["change_rate"] if both else None
        out.setdefault(cond, {})[dim] = cell
    return out
