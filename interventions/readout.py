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

Controls (paper §4.1; ``readout.controls``): each debate receiver turn is also read with every peer
message in its context replaced by (``unrelated``) the answer-stripped reasoning of a response to a
question of another family, or (``filler``) neutral sentences token-length matched to that message;
the question, the agent's own previous response and its own rationale prefix stay. The rows carry
the condition ``debate@unrelated`` / ``debate@filler``; ``committed_at_read`` reports each
condition's gap against reflection: if the gap collapses under a control, the peers' relevant
content is what drives the early commitment.

Model-facing code is thin: contexts are rebuilt from the turns table with the same prompt
builders the protocol used, and scored in one ``engine.option_logprobs`` batch per label set.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

import numpy as np
import pandas as pd

from chorus.core.seeding import rng as make_rng
from chorus.core.stats import cluster_bootstrap
from chorus.simulate.debate.forced_choice import forced_choice
from chorus.simulate.debate.prompts import readout_prefill, turn_messages, debate_messages
from chorus.simulate.debate.questions import Item
from chorus.interventions.ablations import filler_text, unrelated_reasoning
from chorus.simulate.debate.protocol import qkey
from chorus.core.config import InputError

FRACTIONS = (0.0, 0.25, 0.5, 0.75, 1.0)
CONTROLS = ("unrelated", "filler")
BASELINE = "reflection"


def control_condition(control: str) -> str:
    """The readouts-table condition of a debate turn read under ``control``."""
    return f"debate@{control}"


def control_peers(items: dict[str, Item], peers: Sequence[tuple[str, str]], control: str, *, family: str,
                  pool: Sequence[tuple[str, str]], tokenizer: Any, P: dict,
                  rng: np.random.Generator) -> list[tuple[str, str]] | None:
    """The peers' (name, text) with each text replaced under ``control`` (names and order kept):
    ``unrelated`` reasoning drawn from ``pool`` outside ``family``, or ``filler`` matched in tokens
    to the text it replaces as the context shows it (stripped) (the texts of ``chorus.interventions.ablations``). None where no other family
    is in the pool."""
    out = []
    for name, text in peers:
        if control == "unrelated":
            new = unrelated_reasoning(items, pool, family, rng)
        elif control == "filler":
            new = filler_text(tokenizer, len(tokenizer(text.strip(), add_special_tokens=False).input_ids),
                              P["filler_sentences"], rng)
        else:
            raise InputError(f"unknown readout control {control!r} (one of {', '.join(CONTROLS)})")
        if new is None:
            return None
        out.append((name, new))
    return out


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
                 rounds: Sequence[int] | None = None, tokenizer: Any, seed: int = 0,
                 controls: Sequence[str] = ()) -> tuple[list[dict], list[list[dict]]]:
    """(metadata rows, conversations) for every receiver turn (round >= 1) x fraction; a debate
    turn once more per control (condition ``debate@<control>``, see ``control_peers``)."""
    bad = [c for c in controls if c not in CONTROLS]
    if bad:
        raise InputError(f"unknown readout control(s) {bad} (known: {', '.join(CONTROLS)})")
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
        # the unrelated pool: the same condition's responses at the same round, every question
        pool = [(q, x) for (c, q, rr), xs in resp.items() if c == cond and rr == r - 1 for x in xs]
        for a in range(len(texts)):
            target = peer_target(prev_a, a, make_rng(seed, 17, qkey(qid), r, a))
            row = {"qid": qid, "family": it.family, "domain": it.domain, "subdomain": it.subdomain,
                   "condition": cond, "round": r, "agent": a, "f": 0.0, "labels": list(it.labels),
                   "prev_answer": prev_a[a], "answer": now_a[a], "peer_answer": target,
                   "changed": prev_a[a] is not None and now_a[a] is not None and prev_a[a] != now_a[a]}
            contexts = [(cond, turn_messages(it, a, r, cond, prev_t, P))]
            if cond == "debate":
                peers = [(P["peer_name"].format(k=j + 1), prev_t[j]) for j in range(len(prev_t)) if j != a]
                for c in controls:  # own stream per (turn, control): adding one control leaves the others
                    swapped = control_peers(items, peers, c, family=it.family, pool=pool, tokenizer=tokenizer, P=P,
                                            rng=make_rng(seed, 31, qkey(qid), r, a, CONTROLS.index(c)))
                    if swapped is not None:
                        contexts.append((control_condition(c), debate_messages(it, prev_t[a], swapped, P)))
            for name, msgs in contexts:
                for f in fractions:
                    convs.append(readout_prefill(msgs, partial_rationale(tokenizer, texts[a], f), P))
                    meta.append({**row, "condition": name, "f": float(f)})
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
                 seed: int = 0, controls: Sequence[str] = (), progress: Any = None) -> pd.DataFrame:
    meta, convs = readout_jobs(items, turns, P, fractions=fractions, rounds=rounds, tokenizer=engine.tokenizer,
                               seed=seed, controls=controls)
    if not convs:
        return pd.DataFrame()
    lps = forced_choice(engine, convs, [m["labels"] for m in meta], progress=progress)
    return score(meta, lps)


def committed_at_read(readouts: pd.DataFrame, *, n_boot: int = 2000, seed: int = 0, ci: float = 0.95) -> dict[str, Any]:
    """Per condition and fraction: among answer-changing responses, the share whose readout
    argmax equals the eventual answer (clustered bootstrap CI); debate - reflection at f = 0
    (``debate_minus_reflection_f0``) and, for debate and each control condition present,
    that condition - reflection at f = 0 (``gaps_f0``, keyed by condition)."""
    out: dict[str, Any] = {"by_condition": {}, "ci_level": ci}   # the level every interval here covers
    ch = readouts[readouts["changed"]]
    for (cond, f), g in ch.groupby(["condition", "f"]):
        hit = (g["argmax"] == g["answer"]).to_numpy(float)
        est, lo, hi = iv = cluster_bootstrap(lambda idx: float(hit[idx].mean()) if len(idx) else np.nan,
                                        g["family"].to_numpy(), n_boot=n_boot, seed=seed, ci=ci, resampled="question family")
        out["by_condition"].setdefault(cond, {})[str(f)] = {"share": est, "ci_low": lo, "ci_high": hi, **iv.fields(), "n": int(len(g))}
    z = ch[ch["f"] == 0.0]
    gaps = {c: _gap(z, c, n_boot=n_boot, seed=seed, ci=ci) for c in gap_conditions(z["condition"])}
    if gaps:
        out["gaps_f0"] = gaps
    if "debate" in gaps:
        out["debate_minus_reflection_f0"] = {k: gaps["debate"][k] for k in ("delta", "ci_low", "ci_high", "resampled", "n_units", "ci_refused")}
    return out


def gap_conditions(conditions: Any) -> list[str]:
    """debate, then its control conditions in ``CONTROLS`` order, those present beside reflection."""
    have = set(conditions)
    if BASELINE not in have:
        return []
    return [c for c in ("debate", *map(control_condition, CONTROLS)) if c in have]


def _gap(z: pd.DataFrame, cond: str, *, n_boot: int, seed: int, ci: float) -> dict[str, Any]:
    """share(cond) - share(reflection) on the rows ``z`` (one fraction), families resampled."""
    z = z[z["condition"].isin([cond, BASELINE])]
    hit = (z["argmax"] == z["answer"]).to_numpy(float)
    isd = (z["condition"] == cond).to_numpy()

    def diff(idx):
        a, b = hit[idx][isd[idx]], hit[idx][~isd[idx]]
        return float(a.mean() - b.mean()) if len(a) and len(b) else np.nan
    est, lo, hi = iv = cluster_bootstrap(diff, z["family"].to_numpy(), n_boot=n_boot, seed=seed, ci=ci, resampled="question family")
    return {"delta": est, "ci_low": lo, "ci_high": hi, **iv.fields(), "n": int(isd.sum()), "n_baseline": int((~isd).sum())}


def paired_committed_at_read(readouts: pd.DataFrame, *, f: float = 0.0, n_boot: int = 2000, seed: int = 0,
                             ci: float = 0.95, condition: str = "debate") -> dict[str, Any]:
    """The paired committed-at-read of the peer-influence paper (§C.1, Table 9): on the questions with
    answer changes in both conditions, each question's committed-at-read share in debate minus its share in
    reflection (among that question's answer-changing responses at fraction ``f``). Reports the share of
    those questions where the difference favours debate (> 0; the paper's 87% / 86% / 64%), ties and the
    reverse, the mean difference with a family-clustered bootstrap interval, and a two-sided sign test
    over the questions that are not ties. ``condition``: the side read against reflection, e.g. a
    control's ``debate@filler`` (its rows' ``debate`` column then holds that condition's share;
    ``favours_debate``: favours that condition)."""
    from scipy.stats import binomtest

    z = readouts[readouts["changed"] & (readouts["f"] == f)] if len(readouts) else readouts
    rows = []
    for qid, g in z.groupby("qid", sort=True):
        share = {c: float((h["argmax"] == h["answer"]).mean()) for c, h in g.groupby("condition")}
        if {condition, BASELINE} <= set(share):
            rows.append({"qid": qid, "family": g["family"].iloc[0], "debate": share[condition],
                         "reflection": share[BASELINE], "difference": share[condition] - share[BASELINE]})
    n = len(rows)
    if not n:
        return {"f": f, "n_questions": 0, **({"condition": condition} if condition != "debate" else {})}
    d = np.array([r["difference"] for r in rows])
    est, lo, hi = iv = cluster_bootstrap(lambda idx: float(d[idx].mean()), np.array([r["family"] for r in rows]),
                                    n_boot=n_boot, seed=seed, ci=ci, resampled="question family")
    pos, neg = int((d > 0).sum()), int((d < 0).sum())
    return {"f": f, **({"condition": condition} if condition != "debate" else {}), "n_questions": n,
            "favours_debate": pos / n, "ties": float((d == 0).mean()),
            "favours_reflection": neg / n, "mean_difference": est, "ci_low": lo, "ci_high": hi, **iv.fields(),
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
    est, lo, hi = iv = cluster_bootstrap(lambda idx: float(shift[idx].mean()), fam, n_boot=n_boot, seed=seed, ci=ci, resampled="question family")
    return {"n": int(len(common)), "margin_debate": float(d.loc[common, "margin"].mean()),
            "margin_reflection": float(r.loc[common, "margin"].mean()), "shift": est, "ci_low": lo, "ci_high": hi, **iv.fields()}
