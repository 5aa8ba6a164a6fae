"""Forced-choice readouts (peer-influence paper §3.3): at a point f in [0, 1] of the receiver's own rationale
(f = 0: right after reading, before writing anything), append the fixed "answer now" cue as
an assistant prefill and read the next-token log-probabilities of the option labels.

* committed-at-read: among answer-changing responses (parsed answer differs from the agent's
  own parsed previous answer), the share whose f = 0 argmax equals the eventual answer; paired by
  question on the questions with changes in both conditions (``paired_committed_at_read``, Table 9);
* adoption margin: logit(peer answer) - logit(receiver's previous answer) at the readout
  (differences of option log-probs are logit differences); the peer answer is the plurality of
  the peers' previous answers that differ from the receiver's (seeded tie-break);
* a message's effect: margin in the debate context - margin in the no-message (reflection)
  context, paired at round 1 (both conditions share round 0, so the contexts differ only by
  the peer messages).

Model-facing code is thin: contexts are rebuilt from the turns table with the same prompt
builders the protocol used, and scored in one ``engine.option_logprobs`` batch per label set.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

import numpy as np
import pandas as pd

from core.seeding import rng as make_rng
from core.stats import cluster_bootstrap
from simulate.debate.forced_choice import forced_choice
from simulate.debate.prompts import readout_prefill, turn_messages
from simulate.debate.questions import Item

FRACTIONS = (0.0, 0.25, 0.5, 0.75, 1.0)


def partial_rationale(tokenizer: Any, text: str, f: float) -> str:
    """The first round(f * n) tokens of ``text`` (n = its token count), decoded."""
    if f <= 0 or not text:
        return ""
    ids = tokenizer(text, add_special_tokens=False).input_ids
    k = int(round(f * len(ids)))
    return tokenizer.decode(ids[:k], skip_special_tokens=True) if k < len(ids) else text


def peer_target(prev_answers: Sequence[Any], agent: int, rng: np.random.Generator) -> Any:
    """Plurality of the other agents' previous answers that differ from the receiver's own."""
    own = prev_answers[agent]
    c = Counter(a for j, a in enumerate(prev_answers) if j != agent and a is not None and a != own)
    if not c or own is None:
        return None
    top = max(c.values())
    best = sorted(k for k, v in c.items() if v == top)
    return best[int(rng.integers(len(best)))]


def readout_jobs(items: dict[str, Item], turns: pd.DataFrame, P: dict, *, fractions: Sequence[float] = FRACTIONS,
                 rounds: Sequence[int] | None = None, tokenizer: Any, seed: int = 0) -> tuple[list[dict], list[list[dict]]]:
    """(metadata rows, conversations) for every receiver turn (round >= 1) x fraction."""
    from simulate.debate.protocol import qkey
    meta, convs = [], []
    t = turns.sort_values(["condition", "qid", "round", "agent"])
    resp: dict[tuple, list] = {}
    ans: dict[tuple, list] = {}
    for (cond, qid, r), g in t.groupby(["condition", "qid", "round"], sort=False):
        resp[(cond, qid, int(r))] = list(g["response"])
        ans[(cond, qid, int(r))] = [a if isinstance(a, str) else None for a in g["answer"]]
    for (cond, qid, r), texts in resp.items():
        if r == 0 or (rounds is not None and r not in rounds) or (cond, qid, r - 1) not in resp:
            continue
        it = items[qid]
        prev_t, prev_a, now_a = resp[(cond, qid, r - 1)], ans[(cond, qid, r - 1)], ans[(cond, qid, r)]
        for a in range(len(texts)):
            msgs = turn_messages(it, a, r, cond, prev_t, P)
            target = peer_target(prev_a, a, make_rng(seed, 17, qkey(qid), r, a))
            for f in fractions:
                convs.append(readout_prefill(msgs, partial_rationale(tokenizer, texts[a], f), P))
                meta.append({"qid": qid, "family": it.family, "domain": it.domain, "subdomain": it.subdomain,
                             "condition": cond, "round": r, "agent": a, "f": float(f), "labels": list(it.labels),
                             "prev_answer": prev_a[a], "answer": now_a[a], "peer_answer": target,
                             "changed": prev_a[a] is not None and now_a[a] is not None and prev_a[a] != now_a[a]})
    return meta, convs


def score(meta: list[dict], lps: list[dict[str, float]]) -> pd.DataFrame:
    rows = []
    for m, lp in zip(meta, lps):
        labs = m["labels"]
        vals = [lp[x] for x in labs]
        arg = labs[int(np.argmax(vals))]
        tgt, prev = m["peer_answer"], m["prev_answer"]
        rows.append({**m, "logprobs": vals, "argmax": arg,
                     "margin": (lp[tgt] - lp[prev]) if (tgt is not None and prev is not None) else np.nan})
    return pd.DataFrame(rows)


def run_readouts(engine: Any, items: dict[str, Item], turns: pd.DataFrame, P: dict, *,
                 fractions: Sequence[float] = FRACTIONS, rounds: Sequence[int] | None = None,
                 seed: int = 0, progress: Any = None) -> pd.DataFrame:
    meta, convs = readout_jobs(items, turns, P, fractions=fractions, rounds=rounds, tokenizer=engine.tokenizer,
                               seed=seed)
    if not convs:
        return pd.DataFrame()
    lps = forced_choice(engine, convs, [m["labels"] for m in meta], progress=progress)
    return score(meta, lps)


def committed_at_read(readouts: pd.DataFrame, *, n_boot: int = 2000, seed: int = 0, ci: float = 0.95) -> dict[str, Any]:
    """Per condition and fraction: among answer-changing responses, the share whose readout
    argmax equals the eventual answer (clustered bootstrap CI); debate - reflection at f = 0."""
    out: dict[str, Any] = {"by_condition": {}}
    ch = readouts[readouts["changed"]]
    for (cond, f), g in ch.groupby(["condition", "f"]):
        hit = (g["argmax"] == g["answer"]).to_numpy(float)
        est, lo, hi = cluster_bootstrap(lambda idx: float(hit[idx].mean()) if len(idx) else np.nan,
                                        g["family"].to_numpy(), n_boot=n_boot, seed=seed, ci=ci)
        out["by_condition"].setdefault(cond, {})[str(f)] = {"share": est, "ci_low": lo, "ci_high": hi, "n": int(len(g))}
    z = ch[ch["f"] == 0.0]
    if {"debate", "reflection"} <= set(z["condition"]):
        hit = (z["argmax"] == z["answer"]).to_numpy(float)
        isd = (z["condition"] == "debate").to_numpy()

        def diff(idx):
            a, b = hit[idx][isd[idx]], hit[idx][~isd[idx]]
            return float(a.mean() - b.mean()) if len(a) and len(b) else np.nan
        est, lo, hi = cluster_bootstrap(diff, z["family"].to_numpy(), n_boot=n_boot, seed=seed, ci=ci)
        out["debate_minus_reflection_f0"] = {"delta": est, "ci_low": lo, "ci_high": hi}
    return out


def paired_committed_at_read(readouts: pd.DataFrame, *, f: float = 0.0, n_boot: int = 2000, seed: int = 0,
                             ci: float = 0.95) -> dict[str, Any]:
    """The paired committed-at-read of the peer-influence paper (§C.1, Table 9): on the questions with
    answer changes in both conditions, each question's committed-at-read share in debate minus its share in
    reflection (among that question's answer-changing responses at fraction ``f``). Reports the share of
    those questions where the difference favours debate (> 0; the paper's 87% / 86% / 64%), ties and the
    reverse, the mean difference with a family-clustered bootstrap interval, and a two-sided sign test
    over the questions that are not ties."""
    from scipy.stats import binomtest

    z = readouts[readouts["changed"] & (readouts["f"] == f)] if len(readouts) else readouts
    rows = []
    for qid, g in z.groupby("qid", sort=True):
        share = {c: float((h["argmax"] == h["answer"]).mean()) for c, h in g.groupby("condition")}
        if {"debate", "reflection"} <= set(share):
            rows.append({"qid": qid, "family": g["family"].iloc[0], "debate": share["debate"],
                         "reflection": share["reflection"], "difference": share["debate"] - share["reflection"]})
    n = len(rows)
    if not n:
        return {"f": f, "n_questions": 0}
    d = np.array([r["difference"] for r in rows])
    est, lo, hi = cluster_bootstrap(lambda idx: float(d[idx].mean()), np.array([r["family"] for r in rows]),
                                    n_boot=n_boot, seed=seed, ci=ci)
    pos, neg = int((d > 0).sum()), int((d < 0).sum())
    return {"f": f, "n_questions": n, "favours_debate": pos / n, "ties": float((d == 0).mean()),
            "favours_reflection": neg / n, "mean_difference": est, "ci_low": lo, "ci_high": hi,
            "sign_test_p": float(binomtest(pos, pos + neg).pvalue) if pos + neg else float("nan"),
            "questions": rows}


def message_effects(readouts: pd.DataFrame, *, n_boot: int = 2000, seed: int = 0, ci: float = 0.95) -> dict[str, Any]:
    """Round-1, f = 0 adoption-margin shift: debate context - reflection context, paired by
    (question, agent)."""
    z = readouts[(readouts["round"] == 1) & (readouts["f"] == 0.0) & readouts["margin"].notna()]
    d = z[z["condition"] == "debate"].set_index(["qid", "agent"])
    r = z[z["condition"] == "reflection"].set_index(["qid", "agent"])
    common = d.index.intersection(r.index)
    if not len(common):
        return {"n": 0}
    shift = (d.loc[common, "margin"] - r.loc[common, "margin"]).to_numpy(float)
    fam = d.loc[common, "family"].to_numpy()
    est, lo, hi = cluster_bootstrap(lambda idx: float(shift[idx].mean()), fam, n_boot=n_boot, seed=seed, ci=ci)
    return {"n": int(len(common)), "margin_debate": float(d.loc[common, "margin"].mean()),
            "margin_reflection": float(r.loc[common, "margin"].mean()), "shift": est, "ci_low": lo, "ci_high": hi}
