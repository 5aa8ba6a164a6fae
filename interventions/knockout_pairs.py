"""The knockout experiment over the debate pairs (``chorus influence knockout``): contexts,
conditions, the pair loop, the cross-check and the summary; the mechanics it drives are
``chorus.interventions.knockout``, the shared runner ``chorus.interventions.internals.experiment``.

Knockout contexts. In the debate prompt every peer sits in ONE user message, so "the peer
message" is located as a character range of that message: the contexts are the single-peer
debate prompts of the ablations (question, the receiver's own previous response as its own
turn, then a user message quoting one peer), and the block target is ``(index of that user
message, start, end)`` of the quoted peer block (``knockout.block: peer_block``, the name line
and the quoted text) or of the peer's text alone (``peer_text``). The instruction after it stays
visible, so a knockout removes the peer's content and nothing else. The no-message baseline is
the matched reflection prompt. Share removed = (m_full - m_ko) / (m_full - m_no) (a ratio
of means over pairs with its Fieller interval, question families as clusters: unbounded, and said
so, where the message effect's own interval reaches 0; over 100% is reported and read as all of the
effect).

The best single layer is picked after looking at every layer's share, so its own interval would
understate it: ``best_single_layer`` reports it with the family-wise band of the max-|t| over the
layers searched (``chorus.core.stats.max_t_band``, question families resampled as by the other
intervals) and the family-wise p-value of "this layer removes nothing", beside its unadjusted
(Fieller) interval.

Knockout results are keyed in the run's call store like engine calls, so a killed run
recomputes nothing it already stored.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from chorus.core.progress import Progress
from chorus.core.seeding import rng as make_rng
from chorus.core.stats import cluster_bootstrap, max_t_band, ratio_fields, ratio_interval
from chorus.interventions import knockout as ko
from chorus.interventions import plots as ip
from chorus.interventions.ablations import pair_meta
from chorus.interventions.knockout import layer_map
from chorus.interventions.mechanic import Mechanic, bootstrapped
from chorus.interventions.recurrent import supported
from chorus.interventions.spans import find_range
from chorus.simulate.debate.forced_choice import forced_choice, option_strings
from chorus.simulate.debate.prompts import debate_messages, peer_block, readout_prefill, reflection_messages


def knockout_contexts(items: dict, pairs: Sequence[dict], P: dict, *, block: str = "peer_block") -> list[dict]:
    """Per pair: the single-peer debate context, the reflection (no message) context and the
    block target (message index, start, end) of the peer's message inside it."""
    out = []
    for p in pairs:
        it = items[p["qid"]]
        name = P["peer_name"].format(k=p["peer"] + 1)
        full = readout_prefill(debate_messages(it, p["own_text"], [(name, p["peer_text"])], P), "", P)
        none = readout_prefill(reflection_messages(it, p["own_text"], P), "", P)
        idx = len(full) - 2  # the user message that quotes the peer (the last one is the readout prefill)
        part = peer_block(name, p["peer_text"], P) if block == "peer_block" else p["peer_text"].strip()
        s, e = find_range(full[idx]["content"], part)
        out.append({"meta": pair_meta(p, it), "full": full, "none": none, "block": (idx, s, e)})
    return out


def _margin(lp: dict, m: dict) -> float:
    return float(lp[" " + m["peer_answer"]] - lp[" " + m["own_answer"]])


def knockout_conditions(eng: Any, spec) -> tuple[list[dict], dict]:
    """(conditions, plan): every layer set the sweep runs, per token mixer cut (``spec.mixers``):
    the attention layers masked (``layers``), the recurrent layers severed (``recurrent``), and the
    requested layers neither cuts (``unmaskable``)."""
    lm = layer_map(eng)
    n = lm.n_layers
    sweep_layers = list(range(n)) if spec.layers == "all" else [int(x) for x in spec.layers]
    lm.resolve(sweep_layers)  # range check, naming the valid range
    mixers = list(spec.mixers)
    if any(m != "attention" for m in mixers):
        supported(lm)  # one line: no recurrent layers, or a family chorus cannot cut
    conds = []

    def add(kind, layer, q, req, mixer):
        att = [x for x in req if x in lm.attention] if mixer != "recurrent" else []
        rec = [x for x in req if x not in lm.attention] if mixer != "attention" else []
        conds.append({"kind": kind, "layer": layer, "queries": q, "mixer": mixer, "layers": att, "recurrent": rec,
                      "unmaskable": [x for x in req if x not in att and x not in rec]})
    for mixer in mixers:
        for q in spec.queries:
            add("all", -1, q, list(range(n)), mixer)
        for q in spec.sweep_queries:
            for L in sweep_layers:
                if spec.single:
                    add("single", L, q, [L], mixer)
                if spec.cumulative:
                    add("cumulative", L, q, list(range(L, n)), mixer)
    info = {"model_type": lm.model_type, "n_layers": n, "masked_layers": lm.maskable,
            "unmaskable_layers": list(lm.unmaskable), "mixers": mixers}
    return conds, info


def run_knockout_pairs(eng: Any, ctxs: list[dict], conds: list[dict], progress: Progress | None = None, *,
                       route: str = "nnsight", cross_check: int = 0, tol: float = 1e-4, seed: int = 0,
                       info: dict | None = None) -> pd.DataFrame:
    """Margins with the message, without it, and with each knockout condition, knocked out by ``route``.
    ``cross_check``: that many contexts (seeded) have every condition recomputed by the other route, and a
    difference above ``tol`` fails the run (``KnockoutError``); ``info`` receives the route and the check."""
    full = forced_choice(eng, [c["full"] for c in ctxs], [c["meta"]["labels"] for c in ctxs])
    none = forced_choice(eng, [c["none"] for c in ctxs], [c["meta"]["labels"] for c in ctxs])
    todo_conds = [c for c in conds if c["layers"] or c.get("recurrent")]
    total = len(ctxs) * len(todo_conds)
    if progress:
        progress(total, 0)
    rows = []
    by_labels: dict[tuple, list[int]] = {}
    for i, c in enumerate(ctxs):
        by_labels.setdefault(tuple(c["meta"]["labels"]), []).append(i)
    results: dict[tuple[int, int], dict] = {}
    span_tokens: dict[int, int] = {}
    checked: list[tuple] = []  # one entry per context: what the cross-check may recompute
    for labs, idx in by_labels.items():
        opts = option_strings(labs)
        base = ko.prepare_rows(eng, [ctxs[i]["full"] for i in idx], opts, [ctxs[i]["block"] for i in idx])
        for j, i in enumerate(idx):
            span_tokens[i] = len(base[j].span)
        reqs, jobs = [], []
        for j, i in enumerate(idx):  # context-major: one context's conditions share a prefix cache
            for k, cond in enumerate(todo_conds):
                req = {"messages": ctxs[i]["full"], "options": opts, "block": list(ctxs[i]["block"]),
                       "layers": cond["layers"], "queries": cond["queries"], "route": route}
                if cond.get("recurrent"):  # only then: attention-only calls keep the keys stored runs have
                    req["recurrent"] = cond["recurrent"]
                reqs.append(req)
                jobs.append((i, k, j))

        def context_rows(chunk: list[int], jobs=jobs, base=base) -> list:  # bound now: the cross-check calls it later
            rws = []
            for t in chunk:
                i, k, j = jobs[t]
                b = base[j]
                c = todo_conds[k]
                rws.append(ko.Row(b.prompt, b.options, b.span, frozenset(c["layers"]), c["queries"],
                                  frozenset(c.get("recurrent", ()))))
            return rws

        step = max(len(todo_conds), 1)  # one context per chunk: its conditions share the prefix cache

        def compute(todo: list[int]) -> list[dict]:
            out = []
            for a in range(0, len(todo), step):
                chunk = todo[a:a + step]
                for v in ko.run_rows_shared_prefix(eng, context_rows(chunk), route):
                    out.append({"logprobs": dict(zip(opts, v))})
                if progress:
                    progress(total, len(chunk))
            return out
        res = eng.cached("knockout", reqs, compute)
        for (i, k, j), r in zip(jobs, res):
            results[(i, k)] = r["logprobs"]
        checked.extend((labs, opts, list(range(a, min(a + step, len(jobs)))), context_rows, jobs, res)
                       for a in range(0, len(jobs), step))
    check = _cross_check(eng, checked, route, cross_check, tol, seed) if todo_conds else {"contexts": 0}
    if info is not None:
        info.update(knockout_route=route, cross_check=check)
    for i, c in enumerate(ctxs):
        m = c["meta"]
        lp_full = {" " + k: v for k, v in full[i].items()}
        lp_none = {" " + k: v for k, v in none[i].items()}
        m_full, m_no = _margin(lp_full, m), _margin(lp_none, m)
        for k, cond in enumerate(todo_conds):
            lp = results[(i, k)]
            rows.append({**{x: y for x, y in m.items() if x != "labels"}, "kind": cond["kind"], "layer": cond["layer"],
                         "queries": cond["queries"], "mixer": cond.get("mixer", "attention"),
                         "n_masked": len(cond["layers"]), "n_recurrent": len(cond.get("recurrent", ())),
                         "unmaskable": ",".join(map(str, cond["unmaskable"])),
                         "margin_full": m_full, "margin_no_message": m_no, "margin_knockout": _margin(lp, m),
                         "block_message": c["block"][0], "block_start": c["block"][1], "block_end": c["block"][2],
                         "span_tokens": span_tokens[i]})
    return pd.DataFrame(rows)


def _cross_check(eng: Any, contexts: list[tuple], route: str, n: int, tol: float, seed: int) -> dict[str, Any]:
    """Recompute ``n`` seeded contexts' conditions by the other route, exactly as the run computed them
    (the same rows in one shared-prefix call); a difference above ``tol`` is a ``KnockoutError``."""
    other = "interface" if route == "nnsight" else "nnsight"
    if n == 0 or not contexts:
        return {"contexts": 0, "other_route": other}
    pick = sorted(make_rng(seed, 41).choice(len(contexts), size=min(n, len(contexts)), replace=False).tolist())
    worst, rows = 0.0, 0
    for c in pick:
        labs, opts, chunk, context_rows, jobs, res = contexts[c]
        again = ko.run_rows_shared_prefix(eng, context_rows(chunk), other)
        for t, v in zip(chunk, again):
            got = [res[t]["logprobs"][o] for o in opts]
            worst = max(worst, max(abs(x - y) for x, y in zip(got, v)))
            rows += 1
        if worst > tol:
            raise ko.KnockoutError(f"knockout cross-check: routes {route} and {other} differ by {worst:.3g} in log-prob "
                                   f"on context {c} (tolerance {tol}); set knockout.route={other} or report this")
    return {"contexts": len(pick), "rows": rows, "other_route": other, "max_abs_diff": worst, "tolerance": tol}


def summarize_knockout(t: pd.DataFrame, *, n_boot: int, seed: int, ci: float) -> dict[str, Any]:
    out: dict[str, Any] = {"curves": [], "ci_level": ci}   # the level every interval here covers
    if not len(t):
        return out
    one = t.drop_duplicates("qid")
    eff = (one["margin_full"] - one["margin_no_message"]).to_numpy(float)
    fam = one["family"].to_numpy()
    est, lo, hi = iv = cluster_bootstrap(lambda i: float(eff[i].mean()), fam, n_boot=n_boot, seed=seed, ci=ci, resampled="question family")
    out["n_pairs"] = int(len(one))
    out["message_effect"] = {"mean": est, "ci_low": lo, "ci_high": hi, **iv.fields()}
    if "mixer" not in t.columns:  # runs made before recurrent knockout cut attention only
        t = t.assign(mixer="attention", n_recurrent=0)
    for (mixer, kind, layer, q), g in t.groupby(["mixer", "kind", "layer", "queries"], sort=True):
        g = g.sort_values("qid")
        num = (g["margin_full"] - g["margin_knockout"]).to_numpy(float)
        den = (g["margin_full"] - g["margin_no_message"]).to_numpy(float)
        r = ratio_interval(num, den, g["family"].to_numpy(), ci=ci, resampled="question family")
        s = r["estimate"]
        rec = {"kind": kind, "layer": int(layer), "queries": q, "mixer": mixer, "share_removed": s, **ratio_fields(r),
               "reading": "all of the effect" if np.isfinite(s) and s >= 1 else None,
               "margin_knockout": float(g["margin_knockout"].mean()), "n_masked": int(g["n_masked"].iloc[0]),
               "n_recurrent": int(g["n_recurrent"].iloc[0]), "unmaskable": g["unmaskable"].iloc[0], "n": int(len(g))}
        out["curves"].append(rec)
        if kind == "all":
            out.setdefault("all_layers_by_mixer", {}).setdefault(mixer, {})[q] = rec
            if mixer == "attention":
                out.setdefault("all_layers", {})[q] = rec
    best = best_single_layer(t, out["curves"], n_boot=n_boot, seed=seed, ci=ci)
    if best:
        out["best_single_layer"] = best
    by = out.get("all_layers_by_mixer", {})
    if len(by) > 1:
        out["mixer_shares"] = mixer_shares(t, n_boot=n_boot, seed=seed, ci=ci)
    return out


def best_single_layer(t: pd.DataFrame, curves: list[dict], *, n_boot: int, seed: int, ci: float) -> list[dict]:
    """Per token mixer and query variant of the single-layer sweep: the layer removing the largest share,
    with the interval a choice made after looking needs (module docstring). The family-wise band is
    ``max_t_band`` of the layers' shares (bootstrap-t of the max-|t|, question families resampled); the
    family-wise p-value is that of the layers' effects removed
    in logits (mean m_full - m_ko: the same null, share 0, without the ratio's tails). Where the message
    effect's interval reaches 0 the shares have no interval and the band is unbounded too; the p-value
    stands. ``unadjusted`` is the layer's own Fieller interval, as if it had been chosen in advance."""
    out = []
    single = t[t["kind"] == "single"]
    for (mixer, q), g in single.groupby(["mixer", "queries"], sort=True):
        wide = g.pivot_table(index=["qid", "family"], columns="layer", values="margin_knockout", aggfunc="first")
        wide = wide.dropna(axis=0).reset_index()   # pairs with every layer: one row set for the whole family
        layers = [c for c in wide.columns if c not in ("qid", "family")]
        if len(layers) < 1 or len(wide) < 2:
            continue
        base = g.drop_duplicates("qid").set_index("qid")
        full = base.loc[wide["qid"], "margin_full"].to_numpy(float)
        den = full - base.loc[wide["qid"], "margin_no_message"].to_numpy(float)
        num = full[:, None] - wide[layers].to_numpy(float)   # (pairs, layers): effect removed, logits
        fam = wide["family"].to_numpy()

        band = max_t_band(num, den, fam, n_boot=n_boot, seed=seed, ci=ci, resampled="question family")
        logit = max_t_band(num, None, fam, n_boot=n_boot, seed=seed, ci=ci, resampled="question family")
        est = np.asarray(band["estimate"], float)
        if not np.isfinite(est).any():
            continue
        j = int(np.nanargmax(est))
        own = next((c for c in curves if c["kind"] == "single" and c["mixer"] == mixer and c["queries"] == q
                    and c["layer"] == int(layers[j])), {})
        unbounded = own.get("unbounded")
        out.append({
            "mixer": mixer, "queries": q, "layer": int(layers[j]), "share_removed": float(est[j]),
            "ci_low": None if unbounded else band["ci_low"][j], "ci_high": None if unbounded else band["ci_high"][j],
            "p_value": logit["p_value"][j], "unbounded": unbounded,
            "interval": f"family-wise over {len(layers)} layers (bootstrap-t of the max-|t|, question families resampled)",
            "critical_t": band["critical"], "effect_removed": float(logit["estimate"][j]),
            "effect_removed_ci_low": logit["ci_low"][j], "effect_removed_ci_high": logit["ci_high"][j],
            "n_layers_searched": len(layers), "n": int(len(wide)), "n_clusters": band["n_clusters"],
            "n_boot": band["n_boot"], "resampled": "question family", "n_units": band["n_clusters"],
            "unadjusted": {"ci_low": own.get("ci_low"), "ci_high": own.get("ci_high"), "interval": own.get("interval"),
                           "unbounded": unbounded, "resampled": own.get("resampled"), "n_units": own.get("n_units")}})
    return out


def mixer_shares(t: pd.DataFrame, *, n_boot: int, seed: int, ci: float) -> dict[str, Any]:
    """The peer-influence paper's architecture question, per query variant, on the all-layers
    conditions of one run: the share of the peer effect removed by cutting attention only, the
    recurrent route only, and both, and what neither single cut explains (``both - attention -
    recurrent``: the routes' overlap when negative, their interplay when positive), each a ratio of
    means over pairs with a family-clustered Fieller interval (``ratio_interval``). The paper infers the recurrent share as
    ``1 - attention``; here it is measured (``recurrent``) beside that inference."""
    out: dict[str, Any] = {}
    a = t[t["kind"] == "all"]
    for q, g in a.groupby("queries", sort=True):
        wide = g.pivot_table(index=["qid", "family"], columns="mixer", values="margin_knockout", aggfunc="first")
        base = g.drop_duplicates("qid").set_index("qid")
        wide = wide.reset_index()
        full = base.loc[wide["qid"], "margin_full"].to_numpy(float)
        none = base.loc[wide["qid"], "margin_no_message"].to_numpy(float)
        fam = wide["family"].to_numpy()
        den = full - none
        rec: dict[str, Any] = {"n": int(len(wide))}
        for m in ("attention", "recurrent", "both"):
            if m in wide:
                r = ratio_interval(full - wide[m].to_numpy(float), den, fam, ci=ci, resampled="question family")
                rec[m] = {"share_removed": r["estimate"], **ratio_fields(r)}
        if all(m in wide for m in ("attention", "recurrent", "both")):
            num = wide["attention"].to_numpy(float) + wide["recurrent"].to_numpy(float) - wide["both"].to_numpy(float) - full
            r = ratio_interval(num, den, fam, ci=ci, resampled="question family")
            rec["interaction"] = {"share_removed": r["estimate"], **ratio_fields(r)}
        if "attention" in rec:
            rec["recurrent_inferred"] = 1.0 - rec["attention"]["share_removed"]
        out[q] = rec
    return out


def _measure_knockout(cfg, run, eng, items, pairs, P, progress, info) -> None:
    conds, plan = knockout_conditions(eng, cfg.knockout)
    info.update(plan, knockout_route=cfg.knockout.route)
    run.update_provenance(knockout_route=cfg.knockout.route)
    info["skipped_conditions"] = [c for c in conds if not c["layers"]]
    if pairs:
        ctxs = knockout_contexts(items, pairs, P, block=cfg.knockout.block)
        k = cfg.knockout
        run.write_table("knockout", run_knockout_pairs(eng, ctxs, conds, progress, route=k.route, cross_check=k.cross_check,
                                                       tol=k.cross_check_tol, seed=cfg.seed, info=info))


MECHANIC = Mechanic(_measure_knockout, bootstrapped(summarize_knockout, ("curves", ip.knockout_curves, "knockout_curves"),
                                                    ("mixer_shares", ip.knockout_mixers, "knockout_mixers")),
                    precheck=lambda cfg, eng: knockout_conditions(eng, cfg.knockout))
