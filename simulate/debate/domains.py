"""Table 13 of the peer-influence paper (§C.2) by domain: the collective outcomes of debate and
reflection (initial and final majority accuracy, wrong unanimity, and wrong unanimity given a wrong
initial majority), one block per bench domain, with the paired differences the paper reads from them.

Each domain is the run's own question table restricted to that domain, so a domain's numbers are
what ``metrics.condition_metrics`` would give on a run of that domain alone (same definitions, same
seeded tie-breaks). The paired differences use the questions every condition scores, as
``metrics.paired_comparisons`` does for the whole bench, with its question-family clustered paired
bootstrap (``metrics.paired_mean_deltas``): the interval resamples the domain's question families.
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from chorus.simulate.debate.metrics import condition_metrics, paired_mean_deltas

#: the Table 13 columns kept per (domain, condition): everything else is in the whole-bench summary
TABLE13 = ("n_scored", "acc_initial_majority", "acc_final_majority", "wrong_unanimity", "n_wrong_initial_majority",
           "wrong_unanimity_given_wrong_initial")
#: (a, b) -> what the difference says
PAIRS = {("debate_final_majority", "reflection_final_majority"): "accuracy, debate - reflection",
         ("debate_final_majority", "initial_majority"): "accuracy, debate final - initial",
         ("debate_wrong_unanimous", "reflection_wrong_unanimous"): "wrong unanimity, debate - reflection"}


def _paired(q: pd.DataFrame, *, n_boot: int, seed: int, ci: float) -> dict[str, Any]:
    d = q[q["condition"] == "debate"].set_index("qid")
    r = q[q["condition"] == "reflection"].set_index("qid")
    ok = [k for k in d.index.intersection(r.index) if d.at[k, "fully_parsed"] and r.at[k, "fully_parsed"]
          and d.at[k, "labelled"] and d.at[k, "final_round"] == r.at[k, "final_round"]]
    if not ok:
        return {"n_paired": 0, "deltas": []}
    d, r = d.loc[ok], r.loc[ok]
    R = int(d["final_round"].iloc[0])
    arms = {"debate_final_majority": d[f"majority_correct_{R}"].astype(float).to_numpy(),
            "reflection_final_majority": r[f"majority_correct_{R}"].astype(float).to_numpy(),
            "initial_majority": d["majority_correct_0"].astype(float).to_numpy(),
            "debate_wrong_unanimous": d["wrong_unanimous"].astype(float).to_numpy(),
            "reflection_wrong_unanimous": r["wrong_unanimous"].astype(float).to_numpy()}
    tab = paired_mean_deltas(arms, list(PAIRS), d["family"].to_numpy(), n_boot=n_boot, seed=seed, ci=ci)
    tab["comparison"] = [PAIRS[(a, b)] for a, b in zip(tab["a"], tab["b"])]
    return {"n_paired": len(ok), "deltas": tab.to_dict(orient="records")}


def domain_table(q: pd.DataFrame, turns: pd.DataFrame, *, seed: int = 0, n_boot: int = 2000,
                 ci: float = 0.95) -> dict[str, Any]:
    """{domain: {"conditions": {condition: Table 13 columns}, "n_paired", "deltas"}} over the run's
    question table ``q`` (``metrics.question_table``) and its turns table."""
    out: dict[str, Any] = {}
    if "domain" not in q:   # no choice question at all (a numeric-only bench): no table to split
        return out
    for dom in sorted(q["domain"].dropna().unique()):
        qd, td = q[q["domain"] == dom], turns[turns["domain"] == dom]
        conds = {c: {k: condition_metrics(qd, td, c)[k] for k in TABLE13} for c in sorted(qd["condition"].unique())}
        out[str(dom)] = {"conditions": conds}
        if {"debate", "reflection"} <= set(conds):
            out[str(dom)].update(_paired(qd, n_boot=n_boot, seed=seed, ci=ci))
    return out
