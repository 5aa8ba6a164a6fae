"""LLM-based aggregation baselines through the serving layer, each with its token cost, and the
fair attack (BDA paper §B.2, F.7) that puts the same stealth role inside each method's own generation.

* **MoA-Lite**: a synthesizer reads the council's round-0 surfaces (answer + reasoning) and
  answers (one proposer layer). Reads the council, so under attack it reads the adversary.
* **MoA**: a second proposer layer (each seat's model re-answers with the first layer's
  responses as references; an adversarial seat keeps its role), then the synthesizer.
* **Self-MoA**: six samples of one model on the question, then the synthesizer. Never reads the
  council; fair attack: the role is prepended to round(6 k / I) of the six samples.
* **ArgLLMs**: per candidate statement, one supporting and one attacking argument (depth-1
  tree); an evaluator scores each argument's base strength (expected digit 0..9 from option
  log-probabilities, /9); DF-QuAD gives the statement's strength. Binary claims: one tree for
  "true", P(true) = strength; K > 2: one tree per option, strengths normalised. Fair attack:
  the generator is told to make the verdict-flipping side compelling and the other a weak
  strawman (routed by gold); the evaluator stays clean.

Token cost per task: prompt + completion tokens of every call the method needs, including the
council's round-0 calls for MoA(-Lite) (their proposers); ArgLLMs' evaluator counts its prompt
tokens plus one token per scored option.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from chorus.simulate.council import prompts as pr
from chorus.simulate.council.runner import Council, Seat, seat_for, task_key
from chorus.core.seeding import call_seed, rng
from chorus.aggregate.metrics import summarize

DIGITS = [str(d) for d in range(10)]
_KEYS = {"moa_lite": 1, "moa": 2, "self_moa": 3, "argllms": 4}


# -- DF-QuAD (pure) ---------------------------------------------------------------------------------
def dfquad_aggregate(strengths: Sequence[float]) -> float:
    """F(v_1..v_n) = 1 - prod(1 - v_i); 0 for no arguments."""
    out = 1.0
    for v in strengths:
        out *= 1.0 - float(v)
    return 1.0 - out


def dfquad_combine(v0: float, va: float, vs: float) -> float:
    """C(v0, va, vs): move the base score toward 0 (attack wins) or 1 (support wins) by |vs - va|."""
    if va >= vs:
        return v0 - v0 * abs(vs - va)
    return v0 + (1.0 - v0) * abs(vs - va)


def dfquad_strength(tree: Mapping[str, Any]) -> float:
    """Gradual strength of a tree ``{"base": b, "attackers": [trees], "supporters": [trees]}``."""
    va = dfquad_aggregate([dfquad_strength(t) for t in tree.get("attackers", ())])
    vs = dfquad_aggregate([dfquad_strength(t) for t in tree.get("supporters", ())])
    return dfquad_combine(float(tree["base"]), va, vs)


# -- helpers ----------------------------------------------------------------------------------------
def _seed(root: int, method: str, c: Council, *key: int) -> int:
    return call_seed(root, 1000 + _KEYS[method], c.gen_seed, task_key(c.task.task_id), *key)


def _proba_from(answer: str, level: str, cands: Sequence[str]) -> list[float]:
    K = len(cands)
    p = pr.rubric_probability(level, K)
    return [p if c == answer else (1.0 - p) / (K - 1) for c in cands]


def _tok(out: Any) -> tuple[int, int]:
    return int(out.prompt_tokens or 0), int(out.completion_tokens or 0)


def _row(method: str, c: Council, answer: str | None, proba: list[float] | None, parsed: bool,
         ptok: int, ctok: int, n_calls: int, **extra: Any) -> dict[str, Any]:
    return {"method": method, "dataset": c.task.dataset, "condition": c.condition, "gen_seed": c.gen_seed,
            "trace_id": c.trace_id, "task_id": c.task.task_id, "gold": c.task.gold,
            "candidates": list(c.task.candidates), "answer": answer, "proba": proba, "parsed": parsed,
            "options": None if c.task.options is None else list(c.task.options),
            "prompt_tokens": ptok, "completion_tokens": ctok, "tokens": ptok + ctok, "n_calls": n_calls, **extra}


def _r0_surfaces(c: Council) -> list[tuple[str, str]]:
    return [(m["answer"], m.get("text") or "") for m in c.moves if m["round"] == 0 and m["force"] == "propose"]


def _r0_cost(turns: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], tuple[int, int, int]]:
    """(condition, trace_id) -> (prompt, completion, calls) of the council's round-0 requests
    (retries included). The condition is part of the key: a clean and an attacked council of the
    same task and seed share their trace id."""
    out: dict[tuple[str, str], list[int]] = {}
    for t in turns:
        if t["round"] == 0:
            v = out.setdefault((t["condition"], t["trace_id"]), [0, 0, 0])
            v[0] += t["prompt_tokens"]
            v[1] += t["completion_tokens"]
            v[2] += 1
    return {k: tuple(v) for k, v in out.items()}  # type: ignore[misc]


def _synthesize(eng, councils: Sequence[Council], responses: Sequence[list[tuple[str, str]]], P: dict,
                *, root: int, method: str, gen) -> list[tuple[Any, str | None, list[float] | None]]:
    """One synthesizer call per council (batched per candidate set). Returns (out, answer, proba)."""
    res: list[Any] = [None] * len(councils)
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, c in enumerate(councils):
        groups.setdefault(c.task.candidates, []).append(i)
    for cands, idx in groups.items():
        convs = [pr.moa_synth_messages(councils[i].task.public(), responses[i], P) for i in idx]
        outs = eng.chat(convs, temperature=0.0, max_tokens=gen.max_tokens,
                        json_schema=pr.envelope_schema(cands, gen.max_chars, with_evidence=False),
                        seed=[_seed(root, method, councils[i], 99) for i in idx])
        for i, out in zip(idx, outs):
            d = out.parsed if out.conformed and isinstance(out.parsed, dict) else None
            if d and d.get("answer") in cands and d.get("confidence") in pr.RUBRIC:
                res[i] = (out, d["answer"], _proba_from(d["answer"], d["confidence"], cands))
            else:
                res[i] = (out, None, None)
    return res


# -- the four methods -------------------------------------------------------------------------------
def moa_lite(councils, engines, synth: str, turns, P, *, root: int, gen) -> list[dict[str, Any]]:
    r0 = _r0_cost(turns)
    resp = [_r0_surfaces(c) for c in councils]
    rows = []
    for c, rs, (out, ans, proba) in zip(councils, resp, _synthesize(engines[synth], councils, resp, P, root=root,
                                                                     method="moa_lite", gen=gen)):
        p0, c0, n0 = r0.get((c.condition, c.trace_id), (0, 0, 0))
        pt, ct = _tok(out)
        rows.append(_row("moa_lite", c, ans, proba, ans is not None, p0 + pt, c0 + ct, n0 + 1, n_responses=len(rs),
                         response=out.text))  # the raw reply, for the judge pass
    return rows


def _envelopes(eng, convs, cands, seeds, gen) -> list[tuple[tuple[int, int], tuple[str, str] | None]]:
    """One batch of round-0 envelopes: per request its (prompt, completion) tokens and its
    (answer, reasoning), or None when it did not parse to a candidate (counted by the caller)."""
    outs = eng.chat(convs, temperature=gen.temperature, top_p=gen.top_p, max_tokens=gen.max_tokens,
                    json_schema=pr.envelope_schema(cands, gen.max_chars), seed=seeds)
    res = []
    for out in outs:
        d = out.parsed if out.conformed and isinstance(out.parsed, dict) else None
        ok = bool(d) and d.get("answer") in cands
        res.append((_tok(out), (d["answer"], str(d.get("reasoning") or "")) if ok else None))
    return res


def moa(councils, seats: Sequence[Seat], engines, synth: str, turns, P, *, root: int, gen) -> list[dict[str, Any]]:
    r0 = _r0_cost(turns)
    layer1 = [_r0_surfaces(c) for c in councils]
    layer2: list[list[tuple[str, str]]] = [[] for _ in councils]
    cost2 = np.zeros((len(councils), 3), dtype=int)
    groups: dict[tuple[str, tuple[str, ...]], list[tuple[int, int]]] = {}
    for i, c in enumerate(councils):
        for si, s in enumerate(seats):   # a swapped seat's stand-in proposes in its place
            groups.setdefault((c.seat(s).profile, c.task.candidates), []).append((i, si))
    for (profile, cands), reqs in groups.items():
        convs = [pr.moa_layer_messages(councils[i].task.public(), seat_for(councils[i], councils[i].seat(seats[si]), P), layer1[i], P)
                 for i, si in reqs]
        outs = _envelopes(engines[profile], convs, cands, [_seed(root, "moa", councils[i], 1, si) for i, si in reqs], gen)
        for (i, _si), (tok, resp) in zip(reqs, outs):
            cost2[i] += (*tok, 1)
            if resp:
                layer2[i].append(resp)
    rows = []
    for i, (c, (out, ans, proba)) in enumerate(zip(councils, _synthesize(engines[synth], councils, layer2, P,
                                                                         root=root, method="moa", gen=gen))):
        p0, c0, n0 = r0.get((c.condition, c.trace_id), (0, 0, 0))
        pt, ct = _tok(out)
        rows.append(_row("moa", c, ans, proba, ans is not None, p0 + int(cost2[i, 0]) + pt,
                         c0 + int(cost2[i, 1]) + ct, n0 + int(cost2[i, 2]) + 1, n_responses=len(layer2[i]),
                         response=out.text))
    return rows


def n_attacked_samples(samples: int, k: int, I: int) -> int:
    """The fair attack's share of Self-MoA samples: the council's adversary share k / I."""
    return int(math.floor(samples * k / I + 0.5))


def self_moa(councils, engines, profile: str, synth: str, P, *, root: int, gen, samples: int, n_seats: int,
             fair_attack: bool, persona: str = "analyst") -> list[dict[str, Any]]:
    resp: list[list[tuple[str, str]]] = [[] for _ in councils]
    cost = np.zeros((len(councils), 3), dtype=int)
    groups: dict[tuple[str, ...], list[tuple[int, int]]] = {}
    for i, c in enumerate(councils):
        for j in range(samples):
            groups.setdefault(c.task.candidates, []).append((i, j))
    for cands, reqs in groups.items():
        convs = []
        for i, j in reqs:
            c = councils[i]
            n_adv = n_attacked_samples(samples, len(c.adversaries), n_seats) if fair_attack else 0
            adv = pr.adversary_preamble(c.task, P) if j < n_adv else None
            convs.append(pr.round0_messages(c.task.public(), pr.seat_text(persona, P, adv), P))
        outs = _envelopes(engines[profile], convs, cands, [_seed(root, "self_moa", councils[i], 1, j) for i, j in reqs], gen)
        for (i, _j), (tok, r) in zip(reqs, outs):
            cost[i] += (*tok, 1)
            if r:
                resp[i].append(r)
    rows = []
    for i, (c, (out, ans, proba)) in enumerate(zip(councils, _synthesize(engines[synth], councils, resp, P,
                                                                         root=root, method="self_moa", gen=gen))):
        pt, ct = _tok(out)
        rows.append(_row("self_moa", c, ans, proba, ans is not None, int(cost[i, 0]) + pt, int(cost[i, 1]) + ct,
                         int(cost[i, 2]) + 1, n_responses=len(resp[i]), response=out.text))
    return rows


def _arg_candidates(c: Council) -> list[str]:
    cands = list(c.task.candidates)
    return ["true"] if cands == ["true", "false"] else cands


def _prompt_len(eng, conv) -> int:
    try:
        return len(eng.render(conv).ids)
    except Exception:  # engines without a renderer (scripted tests) report no cost
        return 0


def argllms(councils, engines, generator: str, evaluator: str, P, *, root: int, gen, claim_base: float,
            fair_attack: bool, tie_seed: int = 0) -> list[dict[str, Any]]:

    reqs: list[tuple[int, str, str]] = []  # (council, candidate, side)
    for i, c in enumerate(councils):
        for cand in _arg_candidates(c):
            for side in ("support", "attack"):
                reqs.append((i, cand, side))
    convs = []
    for i, cand, side in reqs:
        c = councils[i]
        pub = c.task.public()
        strength = None
        if fair_attack and c.adversaries:
            # undermine the correct option, bolster the wrong ones (routed by gold; BDA paper §F.7)
            flip = "attack" if cand == c.task.gold else "support"
            strength = "strong" if side == flip else "weak"
        convs.append(pr.arg_generate_messages(pub, pr.arg_statement(pub, cand, P), side, P, strength))
    geng = engines[generator]
    outs = geng.chat(convs, temperature=gen.temperature, top_p=gen.top_p, max_tokens=min(gen.max_tokens, 80),
                     seed=[_seed(root, "argllms", councils[i], 1, j) for j, (i, _, _) in enumerate(reqs)])
    eng = engines[evaluator]
    evals = [pr.arg_evaluate_messages(councils[i].task.public(), pr.arg_statement(councils[i].task.public(), cand, P),
                                      side, out.text, P) for (i, cand, side), out in zip(reqs, outs)]
    lps = eng.option_logprobs(evals, DIGITS)
    cost = np.zeros((len(councils), 3), dtype=int)
    base: dict[tuple[int, str, str], float] = {}
    for (i, cand, side), out, conv, lp in zip(reqs, outs, evals, lps):
        pt, ct = _tok(out)
        cost[i] += (pt + _prompt_len(eng, conv) + len(DIGITS), ct, 2)
        v = np.array([lp[d] for d in DIGITS], dtype=float)
        p = np.exp(v - v.max())
        p /= p.sum()
        base[(i, cand, side)] = float(p @ np.arange(10)) / 9.0
    rows = []
    for i, c in enumerate(councils):
        cands = list(c.task.candidates)
        sig = {cand: dfquad_strength({"base": claim_base,
                                      "supporters": [{"base": base[(i, cand, "support")]}],
                                      "attackers": [{"base": base[(i, cand, "attack")]}]})
               for cand in _arg_candidates(c)}
        if cands == ["true", "false"]:
            proba = [sig["true"], 1.0 - sig["true"]]
        else:
            s = np.array([sig[x] for x in cands])
            proba = list(s / s.sum()) if s.sum() > 0 else [1.0 / len(cands)] * len(cands)
        top = np.flatnonzero(np.isclose(proba, max(proba), rtol=0, atol=1e-12))
        k = int(top[0]) if len(top) == 1 else int(rng(tie_seed, 11, task_key(c.trace_id)).choice(top))
        rows.append(_row("argllms", c, cands[k], [float(x) for x in proba], True, int(cost[i, 0]), int(cost[i, 1]),
                         int(cost[i, 2]), strengths=sig))
    return rows


def run_baselines(councils: Sequence[Council], seats: Sequence[Seat], engines, turns, P, *, methods: Sequence[str],
                  synthesizer: str, self_moa_profile: str, argllms_generator: str, samples: int, claim_base: float,
                  fair_attack: bool, root: int, gen) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if "moa_lite" in methods:
        rows += moa_lite(councils, engines, synthesizer, turns, P, root=root, gen=gen)
    if "moa" in methods:
        rows += moa(councils, seats, engines, synthesizer, turns, P, root=root, gen=gen)
    if "self_moa" in methods:
        rows += self_moa(councils, engines, self_moa_profile, synthesizer, P, root=root, gen=gen, samples=samples,
                         n_seats=len(seats), fair_attack=fair_attack)
    if "argllms" in methods:
        rows += argllms(councils, engines, argllms_generator, synthesizer, P, root=root, gen=gen,
                        claim_base=claim_base, fair_attack=fair_attack, tie_seed=root)
    return rows


def baseline_metrics(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (dataset, condition, method): accuracy / ECE / Brier over parsed tasks (via
    ``chorus.aggregate.metrics.summarize``), parse rate, accuracy counting unparsed as wrong, tokens/task."""
    import pandas as pd


    df = pd.DataFrame(list(rows))
    out = []
    if df.empty:
        return out
    for (ds, cond, m), g in df.groupby(["dataset", "condition", "method"], sort=False):
        ok = g[g["parsed"]]
        rec: dict[str, Any] = {"dataset": ds, "condition": cond, "method": m, "n_tasks": int(len(g)),
                               "parse_rate": float(g["parsed"].mean()),
                               "tokens_per_task": float(g["tokens"].mean()),
                               "calls_per_task": float(g["n_calls"].mean())}
        if len(ok):
            cands = list(ok.iloc[0]["candidates"])
            ans = np.array([cands.index(a) for a in ok["answer"]])
            gold = np.array([cands.index(x) for x in ok["gold"]])
            proba = np.array([list(p) for p in ok["proba"]], dtype=float)
            rec.update(summarize(ans, proba, gold))
            rec["accuracy_all"] = float((ans == gold).sum() / len(g))
        out.append(rec)
    return out
