"""Prompt-level interventions on one receiver reading one peer message (peer-influence paper §4):
message ablations, source cues and self-attribution. All are read out at f = 0
(right after reading, before writing) as adoption margins

    margin = logit(peer's answer) - logit(receiver's previous answer)

and an intervention's effect is its margin minus the no-message (reflection) margin.

Pairs come from round 0 of a debate run: per question one (receiver, peer) pair whose parsed
answers differ (seeded choice). Contexts, all with the receiver's own previous response as
its own turn:

* ``no_message``: the reflection prompt (no peer);
* ``full``: the peer's full response; ``answer_only``: "Answer: X" only;
  ``reasoning_only``: the response with its answer statements removed and label mentions
  masked; ``filler``: neutral sentences length-matched (tokens) to the full response;
  ``unrelated``: the answer-stripped reasoning of a response to another question family;
* cues: the peer's name carries a source description crossing track record (good/poor) with
  status (professor/ordinary), "Agent k ({status}, {record})"; ``self_label``: the same text
  labelled as the receiver's own previous response instead of another agent's (same slot);
  ``moved``: the same text with the other-agent label placed before the question instead of
  after it (position control).

reasoning share = reasoning effect / (reasoning effect + answer effect) (ratio of means);
record/status ratio = mean(good - poor) / mean(professor - ordinary).

Cue sets. ``original`` (prompt keys ``status`` / ``record``) is the paper's wording: a numeric
record ("correct 9 times out of 10" vs "1 time out of 10") against a descriptive status, so a
larger record effect could be a stronger or longer wording rather than a stronger dimension.
``matched`` (``status_matched`` / ``record_matched``, opt-in) is the magnitude-matched set: both
phrases in one template ("who is a professor / layperson in this field", "who has answered most
past questions correctly / wrongly"), of equal length in words (7 each, near-equal in tokens:
``phrase_tokens``), each contrast a single-word swap between polar terms with the same hedge
("most"), so the two dimensions differ in content only. Its crossed cues are
``good_professor@matched`` etc.; ``no_message``, ``plain``, ``self_label`` and ``moved`` are shared.
Per set the summary reports the magnitude of each single-dimension contrast (record effect,
status effect, family-clustered intervals) beside their ratio, under ``cue_sets``. No
margin-calibrated matching: rescaling or selecting pairs by their measured margins would condition
on the outcome being compared.
"""
from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np
import pandas as pd

from chorus.core.seeding import rng as make_rng
from chorus.core.stats import cluster_bootstrap, ratio_fields, ratio_interval
from chorus.simulate.debate.forced_choice import forced_choice
from chorus.simulate.debate.prompts import debate_messages, labels_text, peer_block, readout_prefill, reflection_messages
from chorus.simulate.debate.questions import Item
from chorus.simulate.debate.protocol import qkey
from chorus.core.config import InputError

ABLATIONS = ("no_message", "full", "answer_only", "reasoning_only", "filler", "unrelated")
CUES = ("no_message", "plain", "good_professor", "good_ordinary", "poor_professor", "poor_ordinary",
        "self_label", "moved")
CROSSED = ("good_professor", "good_ordinary", "poor_professor", "poor_ordinary")   # {record}_{status}


def strip_answer(text: str, labels: Sequence[str], mask: str = "___") -> str:
    """Remove answer statements ("Answer: X", "the answer is X", bold labels) and mask every
    other standalone mention of a label, so the reasoning no longer states the answer."""
    alt = "|".join(re.escape(x) for x in sorted(labels, key=len, reverse=True))
    words = any(len(x) > 1 for x in labels)
    fl = re.I
    t = re.sub(r"(?im)^.*\b(?:final\s+)?answer\s*[*_]*\s*[:=].*$", "", text)
    t = re.sub(rf"(?:the\s+)?(?:correct\s+|right\s+|best\s+)?(?:answer|choice|option)\s+(?:is|would be|should be)\s*:?\s*"
               rf"\**\(?(?:{alt})\)?\**(?![A-Za-z0-9])", mask, t, flags=fl)
    t = re.sub(rf"\*\*\s*\(?(?:{alt})\)?[.:)]?\s*\*\*", mask, t, flags=fl if words else 0)
    t = re.sub(rf"(?<![A-Za-z0-9])\(?(?:{alt})\)?(?=[.:)]\s)", mask, t, flags=fl if words else 0)
    t = re.sub(rf"(?<![A-Za-z0-9'])(?:{alt})(?![A-Za-z0-9'])", lambda m: m.group(0) if (not words and m.group(0) == "A"
               and re.match(r"\s+[a-z]", t[m.end():m.end() + 3])) else mask, t, flags=fl if words else 0)
    t = re.sub(r"\n{3,}", "\n\n", t).strip()
    return t or mask


def filler_text(tokenizer: Any, n_tokens: int, sentences: Sequence[str], rng: np.random.Generator) -> str:
    """Neutral sentences, token-length matched to ``n_tokens`` (cut at a token boundary)."""
    parts: list[str] = []
    while len(tokenizer(" ".join(parts), add_special_tokens=False).input_ids) < n_tokens:
        parts.append(sentences[int(rng.integers(len(sentences)))])
    ids = tokenizer(" ".join(parts), add_special_tokens=False).input_ids[:max(n_tokens, 1)]
    return tokenizer.decode(ids, skip_special_tokens=True)


def unrelated_reasoning(items: dict[str, Item], pool: Sequence[tuple[str, str]], family: str,
                        rng: np.random.Generator) -> str | None:
    """The answer-stripped text of a response to a question of another family than ``family``:
    seeded choice from ``pool`` ((qid, response) pairs, in a fixed order); None where no other
    family is there. One draw from ``rng`` when there is a candidate, none otherwise."""
    others = [(q, t) for q, t in pool if items[q].family != family]
    if not others:
        return None
    q, t = others[int(rng.integers(len(others)))]
    return strip_answer(t, items[q].labels)


def select_pairs(items: dict[str, Item], turns: pd.DataFrame, *, seed: int = 0, max_pairs: int | None = None,
                 require_disagreement: bool = True) -> list[dict[str, Any]]:
    """One (receiver, peer) pair per question from round 0, answers parsed and (by default)
    different; seeded choice among candidates."""
    r0 = turns[(turns["round"] == 0)].drop_duplicates(["qid", "agent"]).sort_values(["qid", "agent"])
    pairs = []
    for qid, g in r0.groupby("qid", sort=True):
        if qid not in items:
            continue
        texts, answers = list(g["response"]), [a if isinstance(a, str) else None for a in g["answer"]]
        cands = [(i, j) for i in range(len(texts)) for j in range(len(texts)) if i != j
                 and answers[i] is not None and answers[j] is not None
                 and (answers[i] != answers[j] or not require_disagreement)]
        if not cands:
            continue
        i, j = cands[int(make_rng(seed, 19, qkey(qid)).integers(len(cands)))]
        pairs.append({"qid": qid, "family": items[qid].family, "domain": items[qid].domain,
                      "subdomain": items[qid].subdomain, "receiver": i, "peer": j,
                      "own_text": texts[i], "own_answer": answers[i], "peer_text": texts[j], "peer_answer": answers[j]})
    if max_pairs is not None and len(pairs) > max_pairs:
        keep = sorted(make_rng(seed, 23).choice(len(pairs), max_pairs, replace=False))
        pairs = [pairs[k] for k in keep]
    return pairs


def _peer_name(pair: dict, P: dict, desc: str | None = None) -> str:
    k = pair["peer"] + 1
    return P["peer_name"].format(k=k) if desc is None else P["peer_name_cue"].format(k=k, desc=desc)


def ablation_contexts(items: dict[str, Item], pairs: Sequence[dict], P: dict, tokenizer: Any, *,
                      seed: int = 0) -> tuple[list[dict], list[list[dict]]]:
    meta, convs = [], []
    pool = [(o["qid"], o["peer_text"]) for o in pairs]
    for n, p in enumerate(pairs):
        it = items[p["qid"]]
        labs = it.labels
        rng = make_rng(seed, 29, n)
        name = _peer_name(p, P)
        unrelated = unrelated_reasoning(items, pool, p["family"], rng)  # drawn before the filler: same stream
        full_tokens = len(tokenizer(p["peer_text"], add_special_tokens=False).input_ids)
        texts = {"full": p["peer_text"],
                 "answer_only": f"Answer: {p['peer_answer']}",
                 "reasoning_only": strip_answer(p["peer_text"], labs),
                 "filler": filler_text(tokenizer, full_tokens, P["filler_sentences"], rng),
                 "unrelated": unrelated}
        for cond in ABLATIONS:
            if cond == "no_message":
                msgs = reflection_messages(it, p["own_text"], P)
            elif texts[cond] is None:
                continue
            else:
                msgs = debate_messages(it, p["own_text"], [(name, texts[cond])], P)
            convs.append(readout_prefill(msgs, "", P))
            meta.append({**_pmeta(p, it), "intervention": cond})
    return meta, convs


def cue_phrases(P: dict, cue_set: str) -> tuple[dict[str, str], dict[str, str]]:
    """(status, record) descriptions of one cue set: ``original`` reads the prompt keys ``status`` /
    ``record``, any other set ``status_<set>`` / ``record_<set>``."""
    keys = ("status", "record") if cue_set == "original" else (f"status_{cue_set}", f"record_{cue_set}")
    if any(k not in P for k in keys):
        raise InputError(f"unknown cue set {cue_set!r}: the prompts have no {keys[0]!r} / {keys[1]!r}")
    return P[keys[0]], P[keys[1]]


def cue_name(cue: str, cue_set: str) -> str:
    """The intervention name of a crossed cue in a set; the original set keeps the bare names."""
    return cue if cue_set == "original" else f"{cue}@{cue_set}"


def cue_descriptions(P: dict, cue_set: str) -> dict[str, str]:
    """Intervention name -> the peer's source description, for the four crossed cues of a set."""
    status, record = cue_phrases(P, cue_set)
    return {cue_name(f"{rec}_{st}", cue_set): f"{status[st]}, {record[rec]}"
            for rec in ("good", "poor") for st in ("professor", "ordinary")}


def phrase_tokens(P: dict, cue_set: str, tokenizer: Any) -> dict[str, int]:
    """Token length of each phrase of a set under ``tokenizer`` (leading space, as it follows a
    comma or parenthesis in the name): the check that a set's wording is length-matched."""
    status, record = cue_phrases(P, cue_set)
    return {k: len(tokenizer(" " + v, add_special_tokens=False).input_ids) for k, v in {**status, **record}.items()}


def cue_contexts(items: dict[str, Item], pairs: Sequence[dict], P: dict,
                 sets: Sequence[str] = ("original",)) -> tuple[list[dict], list[list[dict]]]:
    """Cue contexts per pair: the shared controls once, the four crossed cues per cue set (in
    ``sets`` order, between ``plain`` and ``self_label``: the default order is the one set's)."""
    descs = {n: d for s in sets for n, d in cue_descriptions(P, s).items()}
    order = ["no_message", "plain", *descs, "self_label", "moved"]
    meta, convs = [], []
    for p in pairs:
        it = items[p["qid"]]
        ctx = {"no_message": reflection_messages(it, p["own_text"], P),
               "plain": debate_messages(it, p["own_text"], [(_peer_name(p, P), p["peer_text"])], P)}
        for name, desc in descs.items():
            ctx[name] = debate_messages(it, p["own_text"], [(_peer_name(p, P, desc), p["peer_text"])], P)
        ctx["self_label"] = debate_messages(it, p["own_text"], [(P["self_name"], p["peer_text"])], P)
        moved = reflection_messages(it, p["own_text"], P)
        moved[-3] = {"role": "user",  # the question turn: the peer's message now precedes the question
                     "content": peer_block(_peer_name(p, P), p["peer_text"], P) + "\n\n" + moved[-3]["content"]}
        moved[-1] = {"role": "user", "content": P["debate"].format(
            peers="(see the response quoted before the question)",
            instruction=P["instruction"].format(labels=labels_text(it.labels)))}
        ctx["moved"] = moved
        for cond in order:
            convs.append(readout_prefill(ctx[cond], "", P))
            meta.append({**_pmeta(p, it), "intervention": cond})
    return meta, convs


def _pmeta(p: dict, it: Item) -> dict:
    return {"qid": p["qid"], "family": p["family"], "domain": p["domain"], "subdomain": p["subdomain"],
            "receiver": p["receiver"], "peer": p["peer"], "own_answer": p["own_answer"],
            "peer_answer": p["peer_answer"], "labels": list(it.labels)}


def pair_meta(p: dict, it) -> dict:
    """A pair's columns in the internals verbs' tables (knockout, patch, probe): ``_pmeta``'s
    without ``domain``, as their stored tables have them. Here, beside ``select_pairs``, because
    the three pipelines share it and none of them imports another for it."""
    return {"qid": p["qid"], "family": p["family"], "subdomain": p["subdomain"], "receiver": p["receiver"],
            "peer": p["peer"], "own_answer": p["own_answer"], "peer_answer": p["peer_answer"],
            "labels": list(it.labels)}


def score_margins(engine: Any, meta: list[dict], convs: list[list[dict]]) -> pd.DataFrame:
    lps = forced_choice(engine, convs, [m["labels"] for m in meta])
    rows = []
    for m, lp in zip(meta, lps):
        vals = [lp[x] for x in m["labels"]]
        rows.append({**m, "logprobs": vals, "argmax": m["labels"][int(np.argmax(vals))],
                     "margin": lp[m["peer_answer"]] - lp[m["own_answer"]]})
    return pd.DataFrame(rows)


def effects(table: pd.DataFrame, *, baseline: str = "no_message") -> pd.DataFrame:
    """Wide per-pair margins and effects (margin - baseline margin) per intervention."""
    index = [c for c in ("qid", "family", "domain", "subdomain") if c in table.columns]
    w = table.pivot_table(index=index, columns="intervention", values="margin").reset_index()
    for c in [c for c in table["intervention"].unique() if c != baseline]:
        w[f"effect_{c}"] = w[c] - w[baseline]
    return w


def _ratio_ci(num: np.ndarray, den: np.ndarray, fam: np.ndarray, n_boot: int, seed: int, ci: float,
              share: bool = False) -> dict[str, float]:
    r = ratio_interval(num, den, fam, share=share, ci=ci, resampled="question family")   # Fieller: unbounded, and saying so, near a 0 denominator
    return {"estimate": r["estimate"], **ratio_fields(r)}


def cue_sets_in(columns: Sequence[str]) -> list[str]:
    """The cue sets whose four crossed cues are all columns of a wide table (original first)."""
    cols = set(columns)
    sets = ["original"] if set(CROSSED) <= cols else []
    for c in columns:
        s = c.split("@", 1)[1] if "@" in c and not c.startswith("effect_") else None
        if s and s not in sets and {cue_name(x, s) for x in CROSSED} <= cols:
            sets.append(s)
    return sets


def cue_contrasts(w: pd.DataFrame, cue_set: str, *, n_boot: int = 2000, seed: int = 0,
                  ci: float = 0.95) -> dict[str, Any]:
    """One cue set's single-dimension contrasts (record: good - poor, status: professor - ordinary,
    each averaged over the other dimension), their ratio, and status within a poor record."""
    fam = w["family"].to_numpy()
    gp, go, pp_, po = (w[cue_name(x, cue_set)] for x in CROSSED)
    rec = ((gp + go) - (pp_ + po)).to_numpy(float) / 2
    sta = ((gp + pp_) - (go + po)).to_numpy(float) / 2
    pp = (pp_ - po).to_numpy(float)
    out: dict[str, Any] = {}
    for name, v in (("record_effect", rec), ("status_effect", sta)):
        est, lo, hi = iv = cluster_bootstrap(lambda idx: float(np.nanmean(v[idx])), fam, n_boot=n_boot, seed=seed, ci=ci, resampled="question family")
        out[name] = {"mean": est, "ci_low": lo, "ci_high": hi, **iv.fields()}
    out["record_status_ratio"] = _ratio_ci(rec, sta, fam, n_boot, seed, ci)
    est, lo, hi = iv = cluster_bootstrap(lambda idx: float(np.nanmean(pp[idx])), fam, n_boot=n_boot, seed=seed, ci=ci, resampled="question family")
    out["status_within_poor_record"] = {"mean": est, "ci_low": lo, "ci_high": hi, **iv.fields()}
    return out


def summarize_effects(w: pd.DataFrame, *, n_boot: int = 2000, seed: int = 0, ci: float = 0.95) -> dict[str, Any]:
    fam = w["family"].to_numpy()
    out: dict[str, Any] = {"n_pairs": int(len(w)), "effects": {}}
    for c in [c for c in w.columns if c.startswith("effect_")]:
        v = w[c].to_numpy(float)
        est, lo, hi = iv = cluster_bootstrap(lambda idx: float(np.nanmean(v[idx])), fam, n_boot=n_boot, seed=seed, ci=ci, resampled="question family")
        out["effects"][c[len("effect_"):]] = {"mean": est, "ci_low": lo, "ci_high": hi, **iv.fields(), "n": int(np.isfinite(v).sum())}
    if {"effect_reasoning_only", "effect_answer_only"} <= set(w.columns):
        out["reasoning_share"] = _ratio_ci(w["effect_reasoning_only"].to_numpy(float),
                                           w["effect_answer_only"].to_numpy(float), fam, n_boot, seed, ci, share=True)
        if "domain" in w.columns:  # seed 002 Table 10: the reasoning share by domain (knowledge / safety / values)
            out["reasoning_share_by_domain"] = {
                str(d): {**_ratio_ci(g["effect_reasoning_only"].to_numpy(float), g["effect_answer_only"].to_numpy(float),
                                     g["family"].to_numpy(), n_boot, seed, ci, share=True), "n": int(len(g))}
                for d, g in w.groupby("domain", sort=True)}
        if "effect_full" in w.columns:  # answer-reasoning additivity: full effect against the sum of the parts
            full = w["effect_full"].to_numpy(float)
            parts = (w["effect_answer_only"] + w["effect_reasoning_only"]).to_numpy(float)
            gap = full - parts
            est, lo, hi = iv = cluster_bootstrap(lambda idx: float(np.nanmean(gap[idx])), fam, n_boot=n_boot, seed=seed, ci=ci, resampled="question family")
            out["additivity"] = {"full": float(np.nanmean(full)), "answer_plus_reasoning": float(np.nanmean(parts)),
                                 "full_minus_parts": {"mean": est, "ci_low": lo, "ci_high": hi, **iv.fields()},
                                 "full_over_parts": _ratio_ci(full, parts, fam, n_boot, seed, ci)}
    sets = cue_sets_in(w.columns)
    per_set = {s: cue_contrasts(w, s, n_boot=n_boot, seed=seed, ci=ci) for s in sets}
    out.update(per_set.get("original", {}))   # the paper's set at the top level, as before
    if set(sets) - {"original"}:   # only when another set was asked for: the default summary is unchanged
        out["cue_sets"] = per_set
    if {"self_label", "plain", "moved"} <= set(w.columns):
        lab = (w["plain"] - w["self_label"]).to_numpy(float)
        pos = (w["plain"] - w["moved"]).to_numpy(float)
        for name, v in (("relabel_shift", lab), ("position_shift", pos)):
            est, lo, hi = iv = cluster_bootstrap(lambda idx: float(np.nanmean(v[idx])), fam, n_boot=n_boot, seed=seed, ci=ci, resampled="question family")
            out[name] = {"mean": est, "ci_low": lo, "ci_high": hi, **iv.fields()}
        out["relabel_position_ratio"] = _ratio_ci(np.abs(lab), np.abs(pos), fam, n_boot, seed, ci)
    return out
