"""The BDA paper's §C.8 numerical checks, each the implemented posterior (``one_coin_posterior``, the
fitted ``OneCoinBDA``) against a closed form computed here apart from it:

* ``symmetric``: Beta(1, 1), N seats unanimously proposing one answer: the posterior on it is
  1 / (1 + (K - 1)^(1 - N)) (each seat's factor is 1/2 for that answer and 1 / (2 (K - 1)) for a rival),
  pinned at 1/2 for every N when K = 2 and rising to 1 when K > 2 (Theorem 2(d), Proposition 3);
* ``k_minus_1``: the reference trace (K = 3, one proposal, Beta(7, 3)) has posterior (0.7, 0.15, 0.15);
  dropping the (K - 1)^-(N - e) factor gives (7, 3, 3) / 13 = (0.538, 0.231, 0.231); at K = 2 the two agree;
* ``invariance``: every self-reported confidence permuted across the given traces (Theorem 3): the fitted
  one-coin's posteriors, hyperparameters and priors do not change by a bit (maximum difference 0);
* ``ceiling``: Beta(8.8, 7.2), theta* = 0.8, I = 3 seats each casting round(0.8 N) votes for g and the rest
  for h: the posterior on g is expit(I [lnB(a + c, b + N - c) - lnB(a + N - c, b + c)]), climbing towards
  the ceiling expit(I (a - b) log(theta* / (1 - theta*))) and never reaching it (Theorem 2(c));
* ``weighted_majority``: single endorsements with random priors: the posterior equals the
  w_i = log(mu_i / (1 - mu_i)) weighted rule with the log((1 - mu_i) / (K - 1)) term (Proposition 2).

``c8_checks(traces)`` returns them all, each with ``holds``; ``chorus aggregate c8 TRACES`` writes
them to a run, and the campaign's ``c8`` section puts them in the BDA paper report."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
from scipy.special import betaln, expit

from chorus.aggregate.posterior import one_coin_posterior
from chorus.aggregate.trace import Move, Trace
from chorus.core.config import InputError
from chorus.core.seeding import rng as make_rng

SYMMETRIC_N = (1, 2, 3, 5, 10, 20)      # the paper's table rows
SYMMETRIC_K = (2, 3, 4)                 # its columns
CEILING_N = (1, 5, 20, 100, 500)
EXACT = 1e-12                           # a closed form and the implementation agree to float rounding


def _unanimous(K: int, N: int) -> dict[str, Any]:
    return {"task_id": "c8", "candidates": [f"c{k}" for k in range(K)],
            "moves": [{"agent": f"A{i}", "round": 0, "force": "propose", "answer": "c0"} for i in range(N)]}


def symmetric_table() -> dict[str, Any]:
    rows, worst = [], 0.0
    for N in SYMMETRIC_N:
        for K in SYMMETRIC_K:
            got = one_coin_posterior(_unanimous(K, N), {f"A{i}": (1, 1) for i in range(N)})["c0"]
            exact = 1.0 / (1.0 + float(K - 1) ** (1 - N))
            worst = max(worst, abs(got - exact))
            rows.append({"N": N, "K": K, "posterior": got, "closed_form": exact})
    pinned = all(abs(r["posterior"] - 0.5) <= EXACT for r in rows if r["K"] == 2)   # 0.5 to float rounding
    return {"rows": rows, "max_abs_diff": worst, "k2_pinned_at_half": pinned, "holds": worst <= EXACT and pinned}


def k_minus_1_factor() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for K in (3, 2):
        cands = [f"c{k}" for k in range(K)]
        tr = {"task_id": "c8", "candidates": cands,
              "moves": [{"agent": "A", "round": 0, "force": "propose", "answer": "c0"}]}
        got = [one_coin_posterior(tr, {"A": (7, 3)})[c] for c in cands]
        # one proposal: F(c0) = B(8, 3) / B(7, 3) = 0.7; F(rival) = B(7, 4) / B(7, 3) = 0.3, times (K - 1)^-1
        f0, f1 = math.exp(betaln(8, 3) - betaln(7, 3)), math.exp(betaln(7, 4) - betaln(7, 3))
        with_f = np.array([f0] + [f1 / (K - 1)] * (K - 1))
        without = np.array([f0] + [f1] * (K - 1))
        out[f"K{K}"] = {"posterior": got, "closed_form": (with_f / with_f.sum()).tolist(),
                        "without_factor": (without / without.sum()).tolist()}
    k3, k2 = out["K3"], out["K2"]
    diff = max(abs(a - b) for k in (k3, k2) for a, b in zip(k["posterior"], k["closed_form"]))
    out.update({"max_abs_diff": diff, "factor_moves_k3": abs(k3["without_factor"][0] - k3["posterior"][0]) > 0.1,
                "k2_without_equals_with": max(abs(a - b) for a, b in zip(k2["without_factor"], k2["posterior"])) <= EXACT})
    out["holds"] = diff <= EXACT and out["factor_moves_k3"] and out["k2_without_equals_with"]
    return out


def _rewrite_confidences(traces: Sequence[Trace], seed: int) -> list[Trace]:
    """Every move's confidence permuted across all moves of all traces (a move without one gets a fresh draw)."""
    r = make_rng(seed, 81)
    confs = np.array([np.nan if m.confidence is None else m.confidence for t in traces for m in t.moves], float)
    confs = confs[r.permutation(len(confs))]
    confs = np.where(np.isnan(confs), r.random(len(confs)), confs)
    it = iter(confs.tolist())
    return [Trace(t.task_id, t.candidates, tuple(Move(m.agent, m.round, m.force, m.answer, m.target, next(it), m.text,
                                                      m.extra) for m in t.moves), t.gold, t.question_id, t.extra)
            for t in traces]


def confidence_invariance(traces: Sequence[Trace], *, seed: int = 0, protocol: str = "strict",
                          inner_folds: int = 5) -> dict[str, Any]:
    """The one-coin (per-agent prior, inner CV) fitted on the labelled traces of each candidate set, then
    fitted again on the rewritten copies: posteriors, chosen hyperparameters and priors compared."""
    from chorus.aggregate.estimators import OneCoinBDA  # lazy: pulls in scipy's optimisers

    groups: dict[tuple[str, ...], list[Trace]] = {}
    for t in traces:
        if t.gold is not None:
            groups.setdefault(tuple(t.candidates), []).append(t)
    if not groups:
        raise InputError("the confidence-invariance check needs labelled traces (a gold answer to fit the one-coin)")
    rows, worst, same = [], 0.0, True
    for cands, trs in sorted(groups.items()):
        new = _rewrite_confidences(trs, seed)
        kw = dict(random_state=seed, protocol=protocol, on_violation="skip", inner_folds=inner_folds)
        a, b = OneCoinBDA(**kw).fit(trs), OneCoinBDA(**kw).fit(new)
        pa = a.predict_proba(trs)["probability"].to_numpy()
        pb = b.predict_proba(new)["probability"].to_numpy()
        d = float(np.max(np.abs(pa - pb))) if len(pa) else 0.0
        eq = a.hyperparams_ == b.hyperparams_ and a.priors_ == b.priors_
        changed = sum(x.confidence != y.confidence for t, u in zip(trs, new) for x, y in zip(t.moves, u.moves))
        rows.append({"candidates": list(cands), "n_traces": len(trs), "moves_rewritten": changed,
                     "max_abs_diff": d, "same_fit": eq})
        worst, same = max(worst, d), same and eq
    return {"groups": rows, "max_abs_diff": worst, "holds": worst == 0.0 and same}


def ceiling(a: float = 8.8, b: float = 7.2, theta: float = 0.8, seats: int = 3) -> dict[str, Any]:
    cap = float(expit(seats * (a - b) * math.log(theta / (1 - theta))))
    rows = []
    for N in CEILING_N:
        c = round(theta * N)
        moves = [{"agent": f"A{i}", "round": 0, "force": "vote", "answer": "g" if j < c else "h"}
                 for i in range(seats) for j in range(N)]
        got = one_coin_posterior({"task_id": "c8", "candidates": ["g", "h"], "moves": moves},
                                 {f"A{i}": (a, b) for i in range(seats)})["g"]
        exact = float(expit(seats * (betaln(a + c, b + N - c) - betaln(a + N - c, b + c))))
        rows.append({"N": N, "posterior": got, "closed_form": exact})
    diff = max(abs(r["posterior"] - r["closed_form"]) for r in rows)
    post = [r["posterior"] for r in rows]
    below = all(p < cap for p in post)
    rising = all(x < y for x, y in zip(post, post[1:]))
    return {"prior": [a, b], "theta": theta, "seats": seats, "ceiling": cap, "rows": rows, "max_abs_diff": diff,
            "below_ceiling": below, "rising": rising, "holds": diff <= EXACT and below and rising}


def weighted_majority(n: int = 200, seed: int = 0) -> dict[str, Any]:
    r = make_rng(seed, 82)
    worst = 0.0
    for _ in range(n):
        K, I = int(r.integers(2, 5)), int(r.integers(1, 7))
        cands = [f"c{k}" for k in range(K)]
        answers = r.integers(K, size=I)
        mu, s = r.uniform(0.05, 0.95, I), r.uniform(0.5, 40, I)
        tr = {"task_id": "c8", "candidates": cands,
              "moves": [{"agent": f"A{i}", "round": 0, "force": "propose", "answer": cands[x]} for i, x in enumerate(answers)]}
        post = one_coin_posterior(tr, {f"A{i}": (mu[i] * s[i], (1 - mu[i]) * s[i]) for i in range(I)})
        score = np.zeros(K)
        for i, x in enumerate(answers):   # a seat's vote adds log mu_i to its answer, log((1 - mu_i)/(K - 1)) elsewhere
            score += np.where(np.arange(K) == x, math.log(mu[i]), math.log((1 - mu[i]) / (K - 1)))
        want = np.exp(score - score.max())
        worst = max(worst, float(np.max(np.abs(np.array([post[c] for c in cands]) - want / want.sum()))))
    return {"instances": n, "max_abs_diff": worst, "holds": worst <= 1e-10}


def c8_checks(traces: Sequence[Trace], *, seed: int = 0, protocol: str = "strict", inner_folds: int = 5) -> dict[str, Any]:
    """Every §C.8 check; ``holds``: all of them hold."""
    out = {"symmetric": symmetric_table(), "k_minus_1": k_minus_1_factor(),
           "invariance": confidence_invariance(traces, seed=seed, protocol=protocol, inner_folds=inner_folds),
           "ceiling": ceiling(), "weighted_majority": weighted_majority(seed=seed)}
    out["holds"] = all(v["holds"] for v in out.values())
    return out
