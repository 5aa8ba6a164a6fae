"""The compute-matched majority-vote arm (self-consistency): the "Debate or Vote" baseline.

For each question the arm draws independent answers to the round-0 prompt (same temperature,
top_p and max_tokens as the debate) until it has *generated* as many tokens as the debate
condition did on that question, round 0 included. The I round-0 answers are its first I samples
(shared, so the vote arm starts from the same round 0 as debate and reflection).

Stop rule, exact within one generation: with b = debate's completion tokens on the question
and s_k the vote arm's running total after sample k, the arm stops at the first k with
s_k >= b; so s_{k-1} < b <= s_k and 0 <= s_k - b < tokens of sample k (no extra sample is
drawn when round 0 alone already reaches b). A cap ``voting.max_samples`` (round-0 samples
included) stops a question short of b; such cap hits are counted, never hidden.

Sampling runs in waves across questions (one engine batch per wave, as the protocol does). A
wave asks each open question for about as many samples as its remaining tokens need at its
mean sample length so far; samples past the stopping point ("overdrawn") are counted in
``voting.json`` and are not votes. Every sample's seed derives from (config seed, question,
sample index) under the condition key "vote", so the arm does not depend on wave sizes, and
reruns are read from the call store.

Answer = plurality of the parsed samples (ties broken by the same seeded draw as the final
round of debate and reflection, ``metrics.question_table``); unparsed samples are counted, not
votes. Per question: unanimous = at least two parsed samples, all the same answer; wrong
unanimity = unanimous on an answer that is not the reference; wrong majority = one wrong answer
holds more than half of the parsed votes.
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from chorus.core.seeding import call_seed, rng as make_rng
from chorus.core.stats import mean_ci, permutation_pvalue
from chorus.simulate.debate.metrics import paired_mean_deltas, plurality
from chorus.simulate.debate.parse import parse_answer
from chorus.simulate.debate.prompts import round0_messages
from chorus.simulate.debate.protocol import CONDITION_KEY, qkey
from chorus.simulate.debate.questions import Item
from chorus.core.plots import figure, interval_caption, save
from chorus.simulate.debate.plots import COLORS
from chorus.core.config import InputError

VOTE_COLUMNS = ["qid", "sample", "shared", "response", "answer", "parsed", "truncated", "completion_tokens",
                "seed", "cached"]


def vote_seed(seed: int, qid: str, sample: int) -> int:
    """The seed of vote sample ``sample`` (>= I; samples < I are the shared round-0 answers)."""
    return call_seed(seed, qkey(qid), 0, sample, CONDITION_KEY["vote"])


def condition_tokens(turns: pd.DataFrame, condition: str) -> dict[str, int]:
    """qid -> completion tokens a condition generated on the question (round 0 included)."""
    t = turns[turns["condition"] == condition]
    return {str(k): int(v) for k, v in t.groupby("qid")["completion_tokens"].sum().items()}


def run_voting(engine: Any, items: Sequence[Item], turns: pd.DataFrame, *, agents: int, temperature: float = 0.7,
               top_p: float = 1.0, max_tokens: int = 2048, seed: int = 0, prompts: dict, max_samples: int = 64,
               per_wave: int | None = None,
               progress: Callable[[int, int], None] | None = None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Draw the vote arm for every question debate ran (``turns``: the protocol's table).
    Returns (votes table, one row per sample in VOTE_COLUMNS; info: waves, overdraw, times)."""
    if max_samples < agents:
        raise InputError(f"max_samples = {max_samples} is below agents = {agents} "
                         f"(the round-0 answers are the first samples)")
    by_id = {it.id: it for it in items}
    budget = condition_tokens(turns, "debate")
    r0 = turns[(turns["condition"] == "debate") & (turns["round"] == 0)].sort_values(["qid", "agent"])
    rows: dict[str, list[dict[str, Any]]] = {}
    spent: dict[str, int] = {}
    for qid, g in r0.groupby("qid", sort=True):
        if qid not in by_id:
            raise InputError(f"question {qid!r} is in the turns table but not among the items")
        if len(g) != agents:
            raise InputError(f"question {qid!r}: {len(g)} round-0 answers in the turns table, expected {agents}")
        rows[qid] = [{"qid": qid, "sample": int(a), "shared": True, "response": resp, "answer": ans,
                      "parsed": bool(p), "truncated": bool(tr), "completion_tokens": int(ct), "seed": int(s),
                      "cached": bool(c)}
                     for a, resp, ans, p, tr, ct, s, c in zip(g["agent"], g["response"], g["answer"], g["parsed"],
                                                              g["truncated"], g["completion_tokens"], g["seed"],
                                                              g["cached"])]
        spent[qid] = sum(r["completion_tokens"] for r in rows[qid])
    open_q = [q for q in rows if spent[q] < budget[q] and len(rows[q]) < max_samples]
    P = prompts
    waves: list[dict[str, Any]] = []
    overdrawn = overdrawn_tokens = new_tokens = 0
    model_s = 0.0
    t_start = time.perf_counter()
    while open_q:
        jobs: list[tuple[str, int]] = []
        for q in open_q:
            k = len(rows[q])
            mean = max(spent[q] / k, 1.0)  # a run of empty answers must not ask for 0 samples
            n = min(max(1, math.ceil((budget[q] - spent[q]) / mean)), max_samples - k)
            if per_wave:
                n = min(n, per_wave)
            jobs.extend((q, k + j) for j in range(n))
        seeds = [vote_seed(seed, q, k) for q, k in jobs]
        if progress:
            progress(len(jobs), 0)

        def _prog(_n: int, k: int) -> None:
            if progress and k:
                progress(len(jobs), k)

        t0 = time.perf_counter()
        outs = engine.chat([round0_messages(by_id[q], P) for q, _ in jobs], temperature=temperature, top_p=top_p,
                           max_tokens=max_tokens, seed=seeds, progress=_prog)
        dt = time.perf_counter() - t0
        model_s += dt
        wave_new = sum(o.completion_tokens for o in outs if not o.cached)
        new_tokens += wave_new
        waves.append({"wave": len(waves), "batch_size": len(jobs), "questions": len(open_q), "wall_s": dt,
                      "new_tokens": wave_new, "cached": sum(bool(o.cached) for o in outs)})
        closed = set()
        for (q, k), out, s in zip(jobs, outs, seeds):  # jobs of a question are in sample order
            if q in closed:
                overdrawn += 1
                overdrawn_tokens += 0 if out.cached else int(out.completion_tokens)
                continue
            ans = parse_answer(out.text, by_id[q].labels)
            rows[q].append({"qid": q, "sample": k, "shared": False, "response": out.text, "answer": ans,
                            "parsed": ans is not None, "truncated": out.finish_reason == "length",
                            "completion_tokens": int(out.completion_tokens), "seed": s, "cached": bool(out.cached)})
            spent[q] += int(out.completion_tokens)
            if spent[q] >= budget[q] or len(rows[q]) >= max_samples:
                closed.add(q)
        open_q = [q for q in open_q if q not in closed]
    votes = pd.DataFrame([r for q in sorted(rows) for r in rows[q]], columns=VOTE_COLUMNS)
    info = {"n_questions": len(rows), "max_samples": max_samples, "per_wave": per_wave, "waves": waves,
            "n_overdrawn": overdrawn, "overdrawn_tokens": overdrawn_tokens, "new_tokens": new_tokens,
            "model_s": model_s, "wall_s": time.perf_counter() - t_start}
    return votes, info


# -- per-question outcomes -----------------------------------------------------------------------
def vote_question_table(votes: pd.DataFrame, turns: pd.DataFrame, *, seed: int = 0,
                        max_samples: int | None = None) -> pd.DataFrame:
    """One row per question: the vote arm's answer and indicators, and its tokens beside
    debate's (and reflection's where it ran). From the run's tables alone."""
    deb = turns[turns["condition"] == "debate"]
    meta = deb.drop_duplicates("qid").set_index("qid")
    final_round = deb.groupby("qid")["round"].max()
    budget = condition_tokens(turns, "debate")
    refl = condition_tokens(turns, "reflection")
    out = []
    for qid, g in votes.groupby("qid", sort=True):
        g = g.sort_values("sample")
        ref = meta.at[qid, "reference"]
        ref = ref if isinstance(ref, str) else None
        answers = [a if isinstance(a, str) else None for a in g["answer"]]
        parsed = [a for a in answers if a is not None]
        rng = make_rng(seed, 7, qkey(qid), int(final_round[qid]))  # the final round's tie-break draw
        maj, uniq = plurality(answers, rng)
        counts = pd.Series(parsed, dtype=object).value_counts()
        unanimous = len(parsed) >= 2 and len(counts) == 1
        vt, bt = int(g["completion_tokens"].sum()), budget[qid]
        last = int(g["completion_tokens"].iloc[-1])
        n_extra = int((~g["shared"].astype(bool)).sum())
        rec = {"qid": qid, "family": meta.at[qid, "family"], "domain": meta.at[qid, "domain"],
               "subdomain": meta.at[qid, "subdomain"], "reference": ref, "labelled": ref is not None,
               "n_samples": int(len(g)), "n_extra": n_extra, "n_parsed": len(parsed),
               "n_unparsed": int(len(g) - len(parsed)), "n_truncated": int(g["truncated"].sum()),
               "vote_tokens": vt, "debate_tokens": bt, "reflection_tokens": refl.get(qid),
               "token_gap": vt - bt, "last_sample_tokens": last,
               # the stop rule held: reached the budget, and the sample before the last had not
               "matched": vt >= bt and (n_extra == 0 or vt - last < bt),
               "cap_hit": vt < bt and (max_samples is None or len(g) >= max_samples),
               "majority": maj, "majority_unique": bool(uniq),
               "majority_share": float(counts.iloc[0] / len(parsed)) if parsed else float("nan"),
               "unanimous": unanimous}
        if ref is not None:
            rec["majority_correct"] = (maj == ref) if maj is not None else None
            rec["wrong_unanimous"] = unanimous and parsed[0] != ref
            rec["wrong_majority"] = any(a != ref and c > len(parsed) / 2 for a, c in counts.items())
        else:
            rec["majority_correct"] = rec["wrong_unanimous"] = rec["wrong_majority"] = None
        out.append(rec)
    return pd.DataFrame(out)


def _stats(x: Sequence[float]) -> dict[str, float]:
    a = np.asarray(list(x), float)
    if not len(a):
        return {"mean": float("nan"), "min": float("nan"), "max": float("nan")}
    return {"mean": float(a.mean()), "min": float(a.min()), "max": float(a.max())}


def _ci(v: np.ndarray, fam: np.ndarray, **kw) -> dict[str, float]:
    iv = mean_ci(v, fam, resampled="question family", **kw)
    est, lo, hi = iv
    return {"estimate": est, "ci_low": lo, "ci_high": hi, **iv.fields()}


def vote_summary(vq: pd.DataFrame, votes: pd.DataFrame, q: pd.DataFrame, *, info: dict[str, Any] | None = None,
                 seed: int = 0, n_boot: int = 2000, n_perm: int = 2000, ci: float = 0.95) -> dict[str, Any]:
    """The "vote" section of summary.json. ``vq``: vote_question_table; ``q``: the debate /
    reflection question table (``metrics.question_table``); ``info``: voting.json."""
    n = len(vq)
    s: dict[str, Any] = {
        "n_questions": int(n), "n_samples": int(len(votes)),
        "samples_per_question": _stats(vq["n_samples"]) if n else _stats([]),
        "parse_rate": float(votes["parsed"].mean()) if len(votes) else float("nan"),
        "n_unparsed": int((~votes["parsed"].astype(bool)).sum()), "n_truncated": int(votes["truncated"].sum()),
        "n_cap_hits": int(vq["cap_hit"].sum()) if n else 0, "n_matched": int(vq["matched"].sum()) if n else 0,
        "tokens_per_question": {"vote": _stats(vq["vote_tokens"] if n else []),
                                "debate": _stats(vq["debate_tokens"] if n else []),
                                "reflection": _stats(vq["reflection_tokens"].dropna() if n else []),
                                "gap_vote_minus_debate": _stats(vq["token_gap"] if n else [])}}
    if info:
        s["max_samples"] = info.get("max_samples")
        s["scheduling"] = {"waves": len(info.get("waves", [])), "batch_sizes": [w["batch_size"] for w in info["waves"]],
                           **{k: info.get(k) for k in ("n_overdrawn", "overdrawn_tokens", "new_tokens", "model_s",
                                                      "wall_s")}}
    own = vq[vq["labelled"] & vq["majority"].notna()] if n else vq
    s["n_scored"] = int(len(own))
    for k in ("majority_correct", "wrong_unanimous", "wrong_majority"):
        s[{"majority_correct": "accuracy", "wrong_unanimous": "wrong_unanimity"}.get(k, k)] = (
            float(own[k].astype(float).mean()) if len(own) else float("nan"))
    # beside debate and reflection: questions every arm scores (debate / reflection fully parsed,
    # labelled, same final round; the vote arm has a majority)
    conds = [c for c in ("debate", "reflection") if c in set(q["condition"])]
    tabs = {c: q[q["condition"] == c].set_index("qid") for c in conds}
    ids = list(own["qid"]) if len(own) else []
    for c in conds:
        t = tabs[c]
        ids = [k for k in ids if k in t.index and t.at[k, "fully_parsed"] and t.at[k, "labelled"]]
    if len(conds) == 2:
        ids = [k for k in ids if tabs["debate"].at[k, "final_round"] == tabs["reflection"].at[k, "final_round"]]
    s["n_paired"] = len(ids)
    if not ids:
        return s
    v = own.set_index("qid").loc[ids]
    fam = v["family"].to_numpy()
    arms = {"vote_majority": v["majority_correct"].astype(float).to_numpy(),
            "vote_wrong_unanimous": v["wrong_unanimous"].astype(float).to_numpy()}
    for c in conds:
        t = tabs[c].loc[ids]
        arms[f"{c}_final_majority"] = np.array([t.at[k, f"majority_correct_{int(t.at[k, 'final_round'])}"]
                                                for k in ids], float)
        arms[f"{c}_wrong_unanimous"] = t["wrong_unanimous"].astype(float).to_numpy()
    kw = {"n_boot": n_boot, "seed": seed, "ci": ci}
    tok = {"debate": v["debate_tokens"], "reflection": v["reflection_tokens"], "vote": v["vote_tokens"]}
    s["arms"] = {arm: {"accuracy": _ci(arms[f"{arm}_final_majority" if arm != "vote" else "vote_majority"], fam, **kw),
                       "wrong_unanimity": _ci(arms[f"{arm}_wrong_unanimous"], fam, **kw),
                       "tokens_per_question": float(np.asarray(tok[arm], float).mean())}
                 for arm in [*conds, "vote"]}
    pairs = [(f"{c}_final_majority", "vote_majority") for c in conds]
    pairs += [(f"{c}_wrong_unanimous", "vote_wrong_unanimous") for c in conds]
    tab = paired_mean_deltas(arms, pairs, fam, n_boot=n_boot, seed=seed, ci=ci)
    tab["p_perm"] = [permutation_pvalue(arms[a], arms[b], fam, n_perm=n_perm, seed=seed) for a, b in pairs]
    s["deltas"] = tab.to_dict(orient="records")
    return s


# -- figure ----------------------------------------------------------------------------------------
def plot_arms(vote: dict[str, Any], path: Path) -> Path:
    """Accuracy (final majority) and wrong unanimity with their clustered intervals, one bar per arm."""

    arms = vote.get("arms") or {}
    fig = figure(8.0, 3.6)
    panels = [("accuracy", "accuracy (final majority)"), ("wrong_unanimity", "wrong unanimity")]
    for i, (key, title) in enumerate(panels):
        ax = fig.add_subplot(1, 2, i + 1)
        names = list(arms)
        est = [arms[a][key]["estimate"] for a in names]
        lo = [e - arms[a][key]["ci_low"] if np.isfinite(arms[a][key]["ci_low"]) else 0.0 for a, e in zip(names, est)]
        hi = [arms[a][key]["ci_high"] - e if np.isfinite(arms[a][key]["ci_high"]) else 0.0 for a, e in zip(names, est)]
        ticks = [f"{a}\n{arms[a]['tokens_per_question']:.0f} tokens/q" for a in names]  # the matched budgets
        ax.bar(ticks, est, yerr=[lo, hi], capsize=4, color=[COLORS.get(a, "#27ae60") for a in names])
        ax.set_ylim(0, 1)
        ax.set_title(title, fontsize=10)
    fig.suptitle(f"debate, reflection and compute-matched vote (n = {vote.get('n_paired', 0)} questions)", fontsize=10)
    fig.tight_layout()
    interval_caption(fig, [m[k] for m in arms.values() for k, _ in panels], unit="question family", what="error bars")
    save(fig, path)
    return path


def report_votes(run: Any, cfg: Any, turns: pd.DataFrame, q: pd.DataFrame, *,
                 make_plots: bool = True) -> dict[str, Any]:
    """The vote arm of a run directory (``experiment.report``): writes tables/vote_questions.parquet
    and plots/vote_arms.png from tables/votes.parquet, tables/turns.parquet and voting.json."""
    import json

    votes = run.read_table("votes")
    f = run.path / "voting.json"
    info = json.loads(f.read_text()) if f.is_file() else None
    vq = vote_question_table(votes, turns, seed=cfg.seed, max_samples=cfg.voting.max_samples)
    run.write_table("vote_questions", vq)
    a = cfg.analysis
    s = vote_summary(vq, votes, q, info=info, seed=cfg.seed, n_boot=a.n_boot, n_perm=a.n_perm, ci=a.ci)
    if make_plots:
        plot_arms(s, run.plot_path("vote_arms"))
    return s
