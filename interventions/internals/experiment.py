"""``chorus influence knockout|patch|probe`` over a debate run directory or a bench file.

Contexts come from round 0 of a debate run (``source.run``) or are generated here from the
bench (the debate part's helpers), one (receiver, peer) pair per question whose answers differ
(``interventions.ablations.select_pairs``), read at f = 0 as adoption margins
``logit(peer answer) - logit(receiver's previous answer)``.

Knockout contexts. In the debate prompt every peer sits in ONE user message, so "the peer
message" is located as a character range of that message: the contexts are the single-peer
debate prompts of the ablations (question, the receiver's own previous response as its own
turn, then a user message quoting one peer), and the block target is ``(index of that user
message, start, end)`` of the quoted peer block (``knockout.block: peer_block``, the name line
and the quoted text) or of the peer's text alone (``peer_text``). The instruction after it stays
visible, so a knockout removes the peer's content and nothing else. The no-message baseline is
the matched reflection prompt. Share removed = (m_full - m_ko) / (m_full - m_no) (a ratio
of means over pairs, clustered bootstrap by question family; over 100% is reported and read
as all of the effect).

Patching pairs the source-cue contexts of ``ablations.cue_contexts``'s design: the same peer
text under two descriptions that differ in one factor (record: good -> poor with the status
fixed; status: professor -> ordinary with the record fixed). Positions must align, so a pair
whose descriptions tokenise to different lengths is skipped and counted.

Every model readout goes through the run's call store (knockout and patch results are keyed
like engine calls; probe activations are cached in RUN/activations.npz), so a killed run
recomputes nothing it already stored.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from core.config import ConfigError, load_config
from core.progress import Progress
from core.runs import RunDir, amends_run
from core.seeding import rng as make_rng
from core.stats import cluster_bootstrap, ratio_ci
from interventions import ablations as ab
from interventions import knockout as ko
from interventions import patching as pt
from interventions import plots as ip
from interventions import transfer as tr
from interventions.concepts import run_concepts
from interventions.concepts import summarize as summarize_concepts
from interventions.experiment import source_turns, start_run
from interventions.internals.config import InternalsConfig
from interventions.knockout import layer_map
from interventions.probes import activations, probe_layers
from interventions.recurrent import supported
from interventions.spans import find_range, message_token_span
from interventions.transfer import summarize as summarize_transfer
from simulate.debate.experiment import plan_engines
from simulate.debate.forced_choice import forced_choice, option_strings
from simulate.debate.prompts import debate_messages, peer_block, readout_prefill, reflection_messages

VERBS = ("knockout", "patch", "probe", "transfer", "concepts")


# -- contexts ----------------------------------------------------------------------------------
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
        out.append({"meta": _meta(p, it), "full": full, "none": none, "block": (idx, s, e)})
    return out


def cue_context(it, p: dict, P: dict, rec: str, st: str) -> tuple[list[dict], str]:
    desc = f"{P['status'][st]}, {P['record'][rec]}"
    name = P["peer_name_cue"].format(k=p["peer"] + 1, desc=desc)
    return readout_prefill(debate_messages(it, p["own_text"], [(name, p["peer_text"])], P), "", P), desc


def cue_pairs(items: dict, pairs: Sequence[dict], P: dict, contrast: str) -> list[dict]:
    """(X, Y) source-cue contexts differing in one factor; ``x_cue``/``y_cue`` name them."""
    out = []
    for p in pairs:
        it = items[p["qid"]]
        fixed = ("professor", "ordinary") if contrast == "record" else ("good", "poor")
        for f in fixed:
            if contrast == "record":
                (cx, dx), (cy, dy) = cue_context(it, p, P, "good", f), cue_context(it, p, P, "poor", f)
                names = (f"good_{f}", f"poor_{f}")
            else:
                (cx, dx), (cy, dy) = cue_context(it, p, P, f, "professor"), cue_context(it, p, P, f, "ordinary")
                names = (f"{f}_professor", f"{f}_ordinary")
            out.append({"meta": {**_meta(p, it), "x_cue": names[0], "y_cue": names[1]},
                        "x": cx, "y": cy, "x_desc": dx, "y_desc": dy})
    return out


def probe_contexts(items: dict, pairs: Sequence[dict], P: dict, concept: str) -> tuple[list[dict], list[list[dict]], list[int]]:
    meta, convs, labels = [], [], []
    for c in (knockout_contexts(items, pairs, P) if concept == "message" else []):
        for lab, conv in ((1, c["full"]), (0, c["none"])):
            meta.append({**c["meta"], "context": "full" if lab else "no_message"})
            convs.append(conv)
            labels.append(lab)
    if concept in ("record", "status"):
        for p in pairs:
            it = items[p["qid"]]
            for rec in ("good", "poor"):
                for st in ("professor", "ordinary"):
                    conv, _ = cue_context(it, p, P, rec, st)
                    meta.append({**_meta(p, it), "context": f"{rec}_{st}"})
                    convs.append(conv)
                    labels.append(int(rec == "good") if concept == "record" else int(st == "professor"))
    return meta, convs, labels


def _meta(p: dict, it) -> dict:
    return {"qid": p["qid"], "family": p["family"], "subdomain": p["subdomain"], "receiver": p["receiver"],
            "peer": p["peer"], "own_answer": p["own_answer"], "peer_answer": p["peer_answer"],
            "labels": list(it.labels)}


# -- cached model work -----------------------------------------------------------------------------
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
    out: dict[str, Any] = {"curves": []}
    if not len(t):
        return out
    one = t.drop_duplicates("qid")
    eff = (one["margin_full"] - one["margin_no_message"]).to_numpy(float)
    fam = one["family"].to_numpy()
    est, lo, hi = cluster_bootstrap(lambda i: float(eff[i].mean()), fam, n_boot=n_boot, seed=seed, ci=ci)
    out["n_pairs"] = int(len(one))
    out["message_effect"] = {"mean": est, "ci_low": lo, "ci_high": hi}
    if "mixer" not in t.columns:  # runs made before recurrent knockout cut attention only
        t = t.assign(mixer="attention", n_recurrent=0)
    for (mixer, kind, layer, q), g in t.groupby(["mixer", "kind", "layer", "queries"], sort=True):
        g = g.sort_values("qid")
        num = (g["margin_full"] - g["margin_knockout"]).to_numpy(float)
        den = (g["margin_full"] - g["margin_no_message"]).to_numpy(float)
        s, slo, shi = ratio_ci(num, den, g["family"].to_numpy(), n_boot=n_boot, seed=seed, ci=ci)
        rec = {"kind": kind, "layer": int(layer), "queries": q, "mixer": mixer, "share_removed": s, "ci_low": slo,
               "ci_high": shi, "reading": "all of the effect" if np.isfinite(s) and s >= 1 else None,
               "margin_knockout": float(g["margin_knockout"].mean()), "n_masked": int(g["n_masked"].iloc[0]),
               "n_recurrent": int(g["n_recurrent"].iloc[0]), "unmaskable": g["unmaskable"].iloc[0], "n": int(len(g))}
        out["curves"].append(rec)
        if kind == "all":
            out.setdefault("all_layers_by_mixer", {}).setdefault(mixer, {})[q] = rec
            if mixer == "attention":
                out.setdefault("all_layers", {})[q] = rec
    by = out.get("all_layers_by_mixer", {})
    if len(by) > 1:
        out["mixer_shares"] = mixer_shares(t, n_boot=n_boot, seed=seed, ci=ci)
    return out


def mixer_shares(t: pd.DataFrame, *, n_boot: int, seed: int, ci: float) -> dict[str, Any]:
    """The peer-influence paper's architecture question, per query variant, on the all-layers
    conditions of one run: the share of the peer effect removed by cutting attention only, the
    recurrent route only, and both, and what neither single cut explains (``both - attention -
    recurrent``: the routes' overlap when negative, their interplay when positive), each a ratio of
    means over pairs with a family-clustered interval. The paper infers the recurrent share as
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
                s, lo, hi = ratio_ci(full - wide[m].to_numpy(float), den, fam, n_boot=n_boot, seed=seed, ci=ci)
                rec[m] = {"share_removed": s, "ci_low": lo, "ci_high": hi}
        if all(m in wide for m in ("attention", "recurrent", "both")):
            num = wide["attention"].to_numpy(float) + wide["recurrent"].to_numpy(float) - wide["both"].to_numpy(float) - full
            s, lo, hi = ratio_ci(num, den, fam, n_boot=n_boot, seed=seed, ci=ci)
            rec["interaction"] = {"share_removed": s, "ci_low": lo, "ci_high": hi}
        if "attention" in rec:
            rec["recurrent_inferred"] = 1.0 - rec["attention"]["share_removed"]
        out[q] = rec
    return out


def run_patch_pairs(eng: Any, cps: list[dict], layers: Any, progress: Progress | None = None) -> tuple[pd.DataFrame, dict]:
    lm = layer_map(eng)
    layers = list(range(lm.n_layers)) if layers == "all" else [int(x) for x in layers]
    bad = [x for x in layers if not 0 <= x < lm.n_layers]
    if bad:
        raise ConfigError(f"patch.layers: {bad} out of range (the model has {lm.n_layers} layers, valid 0..{lm.n_layers - 1})")
    jobs, skipped = [], []
    for c in cps:
        px, py = eng.render(c["x"]), eng.render(c["y"])
        idx = len(c["y"]) - 2
        sx = message_token_span(eng.tokenizer, px.text, px.ids, c["x"], (idx, *find_range(c["x"][idx]["content"], c["x_desc"])))
        sy = message_token_span(eng.tokenizer, py.text, py.ids, c["y"], (idx, *find_range(c["y"][idx]["content"], c["y_desc"])))
        if len(px.ids) != len(py.ids) or (sx.start, sx.end) != (sy.start, sy.end) or \
                px.ids[:sy.start] != py.ids[:sy.start] or px.ids[sy.end:] != py.ids[sy.end:]:
            skipped.append({"qid": c["meta"]["qid"], "x_cue": c["meta"]["x_cue"], "y_cue": c["meta"]["y_cue"],
                            "reason": f"cue spans do not align ({sx.end - sx.start} vs {sy.end - sy.start} tokens)"})
            continue
        labs = c["meta"]["labels"]
        oid = pt.option_ids(eng, py, [" " + x for x in labs])
        jobs.append((c, px, py, list(range(sy.start, sy.end)), oid))
    if progress:
        progress(len(jobs), 0)
    reqs = [{"x": c["x"], "y": c["y"], "positions": pos, "layers": layers} for c, px, py, pos, oid in jobs]

    def compute(todo: list[int]) -> list[dict]:
        out = []
        for t in todo:
            c, px, py, pos, oid = jobs[t]
            r = pt.interchange(eng, px.ids, py.ids, pos, layers)
            out.append({"x": r["x"][oid].tolist(), "y": r["y"][oid].tolist(), "patched": r["patched"][:, oid].tolist()})
            if progress:
                progress(len(jobs), 1)
        return out
    res = eng.cached("patch", reqs, compute)
    rows = []
    for (c, px, py, pos, oid), r in zip(jobs, res):
        m = c["meta"]
        labs = m["labels"]
        ip, io = labs.index(m["peer_answer"]), labs.index(m["own_answer"])
        mx, my = r["x"][ip] - r["x"][io], r["y"][ip] - r["y"][io]
        for k, L in enumerate(layers):
            mp = r["patched"][k][ip] - r["patched"][k][io]
            rows.append({**{a: b for a, b in m.items() if a != "labels"}, "layer": L, "n_positions": len(pos),
                         "margin_x": mx, "margin_y": my, "margin_patched": mp,
                         "restored": float(pt.restored_share(mp, mx, my))})
    return pd.DataFrame(rows), {"n_pairs": len(jobs), "n_skipped": len(skipped), "skipped": skipped}


def summarize_patch(t: pd.DataFrame, *, n_boot: int, seed: int, ci: float) -> dict[str, Any]:
    """Per layer: mean patched margin shift (m_patched - m_Y) and the restored share as a ratio
    of means, mean(m_patched - m_Y) / mean(m_X - m_Y)."""
    out: dict[str, Any] = {"curve": []}
    if not len(t):
        return out
    one = t.drop_duplicates(["qid", "x_cue"])
    d = (one["margin_x"] - one["margin_y"]).to_numpy(float)
    est, lo, hi = cluster_bootstrap(lambda i: float(d[i].mean()), one["family"].to_numpy(), n_boot=n_boot, seed=seed, ci=ci)
    out["cue_effect_x_minus_y"] = {"mean": est, "ci_low": lo, "ci_high": hi, "n": int(len(one))}
    for L, g in t.groupby("layer", sort=True):
        num = (g["margin_patched"] - g["margin_y"]).to_numpy(float)
        den = (g["margin_x"] - g["margin_y"]).to_numpy(float)
        s, slo, shi = ratio_ci(num, den, g["family"].to_numpy(), n_boot=n_boot, seed=seed, ci=ci)
        out["curve"].append({"layer": int(L), "restored": s, "ci_low": slo, "ci_high": shi,
                             "shift": float(num.mean()), "n": int(len(g))})
    return out


def probe_activations(run: RunDir, eng: Any, convs: list[list[dict]], layers: list[int]) -> np.ndarray:
    """Activations, cached in RUN/activations.npz under a hash of the contexts and layers."""
    h = hashlib.sha256(json.dumps({"convs": convs, "layers": layers, "model": eng.identity},
                                  sort_keys=True).encode()).hexdigest()
    path = run.path / "activations.npz"
    if path.is_file():
        z = np.load(path, allow_pickle=False)
        if str(z["key"]) == h:
            return z["acts"]
    acts = activations(eng, convs, layers)
    np.savez_compressed(path, acts=acts, key=np.array(h))
    return acts


# -- runs -----------------------------------------------------------------------------------------
def held_beside(cfg: InternalsConfig, verb: str) -> dict[str, Any]:
    """The engines a verb holds beside the receiver (role "model", transformers), for the device
    plan: a transfer's own sender (``TransferSpec.sender_spec``, as ``interventions.transfer``
    builds it; held with the receiver, so in the same phase); none for the other verbs."""
    sender = cfg.transfer.sender_spec(cfg.model) if verb == "transfer" else None
    return {"sender": sender} if sender is not None else {}


def plan_internals(cfg: InternalsConfig, verb: str):
    """The device plan of an internals verb, before anything loads (``chorus influence VERB --check``):
    the receiver on transformers, a transfer's sender beside it, one phase named after the verb."""
    ecfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"backend": "hf"})})
    return plan_engines(ecfg, verb, held_beside(cfg, verb))


def _setup(cfg: InternalsConfig, verb: str, out: Path | None, engine: Any, progress: Progress | None):
    # internals need the weights: transformers; planned (device_plan in provenance) before it loads
    run, engine, P = start_run(cfg, verb, out, engine, backend="hf", roles=held_beside(cfg, verb))
    MECHANICS[verb].precheck(cfg, engine)  # e.g. a layer set this model cannot cut, before any generation
    turns, items = source_turns(cfg, run, engine, 0, progress)
    pairs = ab.select_pairs(items, turns, seed=cfg.seed, max_pairs=cfg.interventions.max_pairs,
                            require_disagreement=cfg.interventions.require_disagreement)
    return run, engine, items, pairs, P


# -- the five verbs: what each measures on the selected pairs, and how its table is summarized --------
@dataclass(frozen=True)
class Mechanic:
    """One internals verb. ``measure(cfg, run, eng, items, pairs, P, progress, info)`` writes its
    tables and fills ``info`` (RUN/<verb>_info.json); ``summarize(cfg, run, info, table, summary,
    make_plots)`` adds its numbers and figures to the summary from the run directory alone;
    ``precheck(cfg, eng)`` refuses what this model cannot do before any generation; ``own_run``: a
    verb with a pipeline of its own (concepts reads debate and reflection contexts, not pairs)."""
    measure: Callable[..., None] | None
    summarize: Callable[..., None]
    precheck: Callable[[InternalsConfig, Any], Any] = lambda cfg, eng: None
    own_run: Callable[..., tuple[RunDir, dict[str, Any]]] | None = None


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


def _measure_patch(cfg, run, eng, items, pairs, P, progress, info) -> None:
    info["n_layers"] = layer_map(eng).n_layers
    if pairs:
        cps = cue_pairs(items, pairs, P, cfg.patch.contrast)
        if cfg.patch.max_pairs:
            cps = cps[:cfg.patch.max_pairs]
        table, pinfo = run_patch_pairs(eng, cps, cfg.patch.layers, progress)
        info.update(pinfo)
        run.write_table("patch", table)


def _measure_transfer(cfg, run, eng, items, pairs, P, progress, info) -> None:
    info.update(tr.run_experiment(cfg, run, eng, items, pairs, P, progress))  # latent state transfer


def _measure_probe(cfg, run, eng, items, pairs, P, progress, info) -> None:
    lm = layer_map(eng)
    layers = list(range(lm.n_layers)) if cfg.probe.layers == "all" else [int(x) for x in cfg.probe.layers]
    bad = [x for x in layers if not 0 <= x < lm.n_layers]
    if bad:
        raise ConfigError(f"probe.layers: {bad} out of range (valid 0..{lm.n_layers - 1})")
    info["n_layers"] = lm.n_layers
    if pairs:
        meta, convs, labels = probe_contexts(items, pairs, P, cfg.probe.concept)
        if progress:
            progress(len(layers) + 1, 0)
        acts = probe_activations(run, eng, convs, layers)
        if progress:
            progress(len(layers) + 1, 1)
        groups = [m["family"] for m in meta]
        t = probe_layers(acts, labels, layers=layers, groups=groups, n_perm=cfg.probe.n_perm,
                         n_splits=cfg.probe.n_splits, seed=cfg.seed, C=cfg.probe.C)
        t["concept"] = cfg.probe.concept
        run.write_table("probe", t)
        run.write_table("probe_contexts", pd.DataFrame([{**{k: v for k, v in m.items() if k != "labels"},
                                                         "label": y} for m, y in zip(meta, labels)]))
        if progress:
            progress(len(layers) + 1, len(layers))


def _bootstrapped(summarize: Callable[..., dict], *figures: tuple[str, Callable, str]) -> Callable[..., None]:
    """A verb's summary from its table with the run's bootstrap settings, and a figure per
    ``(summary key, plot, name)`` where the summary has that key."""
    def summarize_verb(cfg, run, info, t, summary, make_plots) -> None:
        a = cfg.analysis
        summary.update(summarize(t, n_boot=a.n_boot, seed=cfg.seed, ci=a.ci))
        for key, plot, name in figures:
            if make_plots and summary.get(key):
                plot(summary, run.plot_path(name))
    return summarize_verb


def _summarize_concepts(cfg, run, info, t, summary, make_plots) -> None:
    pt = run.path / "tables" / "concept_probe.parquet"
    probe = pd.read_parquet(pt) if pt.is_file() else pd.DataFrame()
    summary.update(summarize_concepts(t, probe))
    if make_plots and len(probe):
        for site in info.get("sites", []):
            ip.concept_site(t, probe, run.plot_path(f"concepts_{site}"), site=site, model=cfg.model.profile)


def _summarize_probe(cfg, run, info, t, summary, make_plots) -> None:
    if len(t):
        summary["concept"] = cfg.probe.concept
        summary["layers"] = t.to_dict(orient="records")
        best = t.loc[t["auroc"].idxmax()]
        summary["best_layer"] = {"layer": int(best["layer"]), "auroc": float(best["auroc"]),
                                 "null_p90": float(best["null_p90"]), "p_value": float(best["p_value"])}
        summary["n_layers_above_null_p90"] = int(t["above_null_p90"].sum())
        if make_plots:
            ip.probe_curve(t, run.plot_path("probe_auroc"), concept=cfg.probe.concept)


MECHANICS: dict[str, Mechanic] = {
    "knockout": Mechanic(_measure_knockout, _bootstrapped(summarize_knockout, ("curves", ip.knockout_curves, "knockout_curves"),
                                                          ("mixer_shares", ip.knockout_mixers, "knockout_mixers")),
                         precheck=lambda cfg, eng: knockout_conditions(eng, cfg.knockout)),
    "patch": Mechanic(_measure_patch, _bootstrapped(summarize_patch, ("curve", ip.patch_curve, "patch_curve"))),
    "probe": Mechanic(_measure_probe, _summarize_probe),
    "transfer": Mechanic(_measure_transfer, _bootstrapped(summarize_transfer, ("curve", ip.transfer_curve, "transfer_share"))),
    "concepts": Mechanic(None, _summarize_concepts, own_run=run_concepts),
}
assert tuple(MECHANICS) == VERBS  # one list of the internals verbs


def run_internals(cfg: InternalsConfig, verb: str, out: Path | None = None, *, progress: Progress | None = None,
                  make_plots: bool = True, engine: Any = None) -> tuple[RunDir, dict[str, Any]]:
    """verb: knockout | patch | probe | transfer | concepts (``MECHANICS``)."""
    if verb not in MECHANICS:
        raise ConfigError(f"unknown verb {verb!r}: choose one of {', '.join(VERBS)}")
    m = MECHANICS[verb]
    if m.own_run is not None:
        return m.own_run(cfg, out, progress=progress, make_plots=make_plots, engine=engine, report=report)
    run, eng, items, pairs, P = _setup(cfg, verb, out, engine, progress)
    info: dict[str, Any] = {"n_pairs": len(pairs)}
    m.measure(cfg, run, eng, items, pairs, P, progress, info)
    (run.path / f"{verb}_info.json").write_text(json.dumps(info, indent=2, default=str))
    summary = report(run.path, verb, make_plots=make_plots)
    run.finish()
    return run, summary


@amends_run
def report(run_dir: str | Path, verb: str | None = None, *, make_plots: bool = True) -> dict[str, Any]:
    """summary.json and plots from RUN/config.yaml, RUN/tables/*.parquet and RUN/<verb>_info.json."""
    run = RunDir(run_dir)
    if verb is None:
        verb = next((v for v in VERBS if (run.path / f"{v}_info.json").is_file()), None)
        if verb is None:
            raise FileNotFoundError(f"{run.path}: no knockout/patch/probe results (not an internals run?)")
    cfg = load_config(run.path / "config.yaml", InternalsConfig)
    info = json.loads((run.path / f"{verb}_info.json").read_text())
    summary: dict[str, Any] = {"experiment": cfg.name, "verb": verb, "model": cfg.model.profile, **info}
    tab = run.path / "tables" / f"{verb}.parquet"
    t = pd.read_parquet(tab) if tab.is_file() else pd.DataFrame()
    MECHANICS[verb].summarize(cfg, run, info, t, summary, make_plots)
    run.write_summary(summary)
    return summary
