"""The peer-influence paper's tables and figures in the paper's order, from stored runs
(``chorus paper influence RUN... --out DIR``): debate runs (``chorus debate run``: collective
outcomes, long debates, subdomains, unlabelled and numeric questions, scenario frames) and influence
runs (``chorus influence readout | ablate | cues | knockout | patch | probe | concepts | transfer``),
any number of models.

One numbers file (``DIR/numbers.json``: per section, rows read from the runs' ``summary.json``, every
row naming its run, model and that summary's sha256) and ``DIR/paper.md`` rendered from that file
alone, the runs' own figures copied beside it. Nothing is recomputed here (each run's report already
computed its numbers from its tables; ``chorus debate recompute`` / ``chorus influence <verb>`` rebuild
them), no model is called, and a section whose runs are missing names the command that makes them.
Each section's ``export`` maps one run to its rows; ``spec``: the run kinds it reads, its figures, a note.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from chorus.core.paper import PaperError, Sections, md_table, missing_line, render_sections, write_paper
from chorus.core.runs import file_sha256, json_safe
from chorus.core.stats import UNBOUNDED, record_level
from chorus.serving.standing import standing

SCHEMA = "chorus.influence-paper/1"
COMMAND = "chorus paper influence"
LONG_ROUNDS = 4   # a debate of more rounds than the paper's three is a long debate (Table 14: twelve)
DEBATE = "chorus debate run default --set model.profile=PROFILE"
LONG = "chorus debate run long --set model.profile=PROFILE"
INFLUENCE = "chorus influence {verb} {config} --set source.run=DEBATE_RUN --set model.profile=PROFILE"


def _read_run(path: Path) -> dict[str, Any]:
    if not (path / "provenance.json").is_file():
        raise PaperError(f"{path}: not a run directory (no provenance.json)")
    prov = json.loads((path / "provenance.json").read_text())
    sp = path / "summary.json"
    if not sp.is_file():
        raise PaperError(f"{path}: no summary.json (finish the run, or rebuild it with its report command)")
    s = json.loads(sp.read_text())
    part = prov.get("part")
    if part == "debate" and "conditions" in s:
        kind = "long_debate" if int(s.get("rounds") or 0) >= LONG_ROUNDS else "debate"
    elif part == "influence" and s.get("verb"):
        kind = str(s["verb"])
    else:
        raise PaperError(f"{path}: neither a debate run nor an influence run (provenance part {part!r})")
    return {"path": str(path), "name": path.name, "kind": kind, "model": s.get("model"), "summary": s,
            "summary_sha256": file_sha256(sp), "prov": prov}


def _src(r: dict) -> dict[str, Any]:
    return {"run": r["name"], "model": r["model"]}


REFUSED = "refused"


def _lv(d: dict | None, *, prefix: str = "", method: str | None = None) -> dict[str, Any]:
    """The ``level`` cell of a row with an interval: what it resamples and how many units ("95%, 40
    question families resampled"; "95%, Fieller, 40 question families"), read from the bootstrap's own
    record (issue 51: an interval names its level). A bootstrap over fewer than ``MIN_UNITS`` units is
    refused: its bound cells say ``refused`` and ``level`` says why; a record made before intervals
    carried their level says "level not recorded". Merge it after the bound cells."""
    level, refused = record_level(d or {}, lo=f"{prefix}ci_low", hi=f"{prefix}ci_high", prefix=prefix, method=method)
    return {"ci_low": REFUSED, "ci_high": REFUSED, "level": level} if refused else {"level": level}


def _ci(d: dict | None, key: str = "mean") -> dict[str, Any]:
    d = d or {}
    return {"value": d.get(key, d.get("estimate", d.get("delta"))), "ci_low": d.get("ci_low"), "ci_high": d.get("ci_high"),
            **_lv(d)}


def _ratio_cells(d: dict) -> dict[str, Any]:
    """A ratio's interval cells: its bounds, or UNBOUNDED in both where its denominator's interval
    contains 0 (never a finite interval there), which interval it is and over how many units."""
    if d.get("unbounded"):
        return {"ci_low": UNBOUNDED, "ci_high": UNBOUNDED, "interval": d["unbounded"],
                **({"level": _units(d)} if _units(d) else {})}
    if d.get("interval") == "fieller":
        return {"ci_low": d.get("ci_low"), "ci_high": d.get("ci_high"), "interval": "fieller",
                **_lv(d, method="Fieller")}
    return {"ci_low": d.get("ci_low"), "ci_high": d.get("ci_high"),
            "interval": d.get("interval") or "percentile bootstrap (run made before Fieller intervals)", **_lv(d)}


def _units(d: dict) -> str:
    """"40 question families" from a record that names its units; empty where it does not."""
    from chorus.core.stats import plural
    n = d.get("n_units", d.get("n_clusters"))
    return plural(d["resampled"], int(n)) if d.get("resampled") and n is not None else ""


# -- the sections, in the paper's order ------------------------------------------------------------
SECTIONS = Sections()


def section(key: str, title: str, kinds: Sequence[str], missing: str, figures: Sequence[str] = (), note: str = ""):
    """Register a section whose export maps a run of one of ``kinds`` to its rows (flat dicts), in the
    order of registration, which is the paper's; ``figures``: plots/<name>.png of each run, copied."""
    return SECTIONS.exports(key, title, missing=missing, kinds=tuple(kinds), figures=tuple(figures), note=note)


_RO = INFLUENCE.format(verb="readout", config="default")


@section("fig1_committed", "§4.1 / Figure 1: committed-at-read by rationale fraction (answer-changing responses)",
         ["readout"], _RO, ["committed_at_read"])
def _fig1(r):
    for cond, by in r["summary"].get("committed_at_read", {}).get("by_condition", {}).items():
        for f, v in by.items():
            yield {"condition": cond, "f": float(f), "share": v["share"], "ci_low": v["ci_low"], "ci_high": v["ci_high"],
                   **_lv(v), "n": v["n"]}


@section("s41_gaps", "§4.1: the f = 0 gap vs reflection, and under unrelated reasoning and neutral filler",
         ["readout"], _RO + " --set 'readout.controls=[unrelated, filler]'", ["committed_gaps"],
         note="A gap that collapses under a control says the peers' relevant content drives the early commitment.")
def _gaps(r):
    cr = r["summary"].get("committed_at_read", {})
    gaps = cr.get("gaps_f0") or ({"debate": cr["debate_minus_reflection_f0"]} if "debate_minus_reflection_f0" in cr else {})
    for cond, g in gaps.items():
        yield {"condition": cond, **_ci(g, "delta"), "n": g.get("n"), "n_reflection": g.get("n_baseline")}
    if gaps and len(gaps) == 1:
        yield {"condition": "controls", "value": None,
               "missing": "rerun with --set 'readout.controls=[unrelated, filler]'"}


@section("table9_paired", "Table 9 (§C.1): paired committed-at-read, questions with changes in both conditions",
         ["readout"], _RO)
def _t9(r):
    cr = r["summary"].get("committed_at_read", {})
    sides = {"debate": cr.get("paired_f0")} | dict(cr.get("paired_f0_controls") or {})
    for cond, p in sides.items():
        if p:
            yield {"condition": cond, "n_questions": p.get("n_questions"), "favours": p.get("favours_debate"),
                   "ties": p.get("ties"), "favours_reflection": p.get("favours_reflection"),
                   "mean_difference": p.get("mean_difference"), "ci_low": p.get("ci_low"), "ci_high": p.get("ci_high"),
                   **_lv(p), "sign_test_p": p.get("sign_test_p")}


_AB = INFLUENCE.format(verb="ablate", config="default")


@section("s42_ablations", "§4.2: message ablations (adoption-margin effect vs no message, logits)", ["ablate"], _AB,
         ["ablate_effects"])
def _ablate(r):
    for name, e in r["summary"].get("effects", {}).items():
        yield {"intervention": name, **_ci(e), "n": e.get("n")}


@section("table10_reasoning", "Table 10 (§C.1): incoming reasoning share by domain; answer-reasoning additivity",
         ["ablate"], _AB)
def _t10(r):
    s = r["summary"]
    if "reasoning_share" in s:
        yield {"domain": "all", "reasoning_share": s["reasoning_share"]["estimate"], **_ratio_cells(s["reasoning_share"]),
               "n": s.get("n_pairs")}
    for d, v in (s.get("reasoning_share_by_domain") or {}).items():
        yield {"domain": d, "reasoning_share": v["estimate"], **_ratio_cells(v), "n": v["n"]}
    a = s.get("additivity")
    if a:
        yield {"domain": "additivity", "full": a["full"], "answer_plus_reasoning": a["answer_plus_reasoning"],
               "full_minus_parts": a["full_minus_parts"]["mean"], "ci_low": a["full_minus_parts"]["ci_low"],
               "ci_high": a["full_minus_parts"]["ci_high"], **_lv(a["full_minus_parts"]),
               "full_over_parts": a["full_over_parts"]["estimate"]}


_CU = INFLUENCE.format(verb="cues", config="default")


@section("fig2_cues", "§4.3 / Figure 2: source cues (record x status) and self-attribution", ["cues"],
         _CU + " --set 'cues.sets=[original, matched]'", ["cues_effects", "cue_sets"])
def _cues(r):
    s = r["summary"]
    for k in ("record_effect", "status_effect", "record_status_ratio", "status_within_poor_record", "relabel_shift",
              "position_shift", "relabel_position_ratio"):
        if k in s:
            yield {"quantity": k, "cue_set": "original", **_ci(s[k]), **(_ratio_cells(s[k]) if k.endswith("ratio") else {})}
    for cs, d in (s.get("cue_sets") or {}).items():
        for k in ("record_effect", "status_effect", "record_status_ratio"):
            if k in d:
                yield {"quantity": k, "cue_set": cs, **_ci(d[k]), **(_ratio_cells(d[k]) if k.endswith("ratio") else {})}


_INT = "chorus influence {verb} internals --set source.run=DEBATE_RUN --set model.profile=PROFILE"


@section("s44_knockout", "§4.4: attention knockout, share of the peer-message effect removed", ["knockout"],
         _INT.format(verb="knockout"), ["knockout_curves", "knockout_mixers"],
         note="Over 100% means all of the effect (and more) was removed. Shares carry Fieller intervals, "
              "unbounded where the message effect's interval contains 0. The best single layer is chosen "
              "after looking at every layer: its interval and p-value are family-wise over the layers "
              "searched; its own interval, as if chosen in advance, is the 'unadjusted' row.")
def _knock(r):
    s = r["summary"]
    yield {"condition": "message effect (logits)", "layer": None, **_ci(s.get("message_effect")), "n": s.get("n_pairs")}
    for c in s.get("curves", []):
        if c["kind"] == "all":   # single-layer and cumulative curves: the figure; the best single layer below
            yield {"condition": f"{c['kind']} / {c['queries']} / {c['mixer']}", "layer": c["layer"],
                   "value": c["share_removed"], **_ratio_cells(c), "n": c["n"]}
    if "best_single_layer" in s:
        for b in s["best_single_layer"]:
            tag = f"{b['queries']} / {b['mixer']}"
            yield {"condition": f"best single layer / {tag}", "layer": b["layer"], "value": b["share_removed"],
                   **_ratio_cells(b), **({} if b.get("unbounded") else _lv(b)), "p_value": b["p_value"], "n": b["n"]}
            yield {"condition": f"best single layer / {tag} (unadjusted: as if chosen in advance)",
                   "layer": b["layer"], "value": b["share_removed"], **_ratio_cells(b["unadjusted"]), "n": b["n"]}
        return
    single = [c for c in s.get("curves", []) if c["kind"] == "single" and c["share_removed"] is not None]
    if single:  # a run summarised before the family-wise band: its row says what it is
        best = max(single, key=lambda c: c["share_removed"] if c["share_removed"] == c["share_removed"] else -1e9)
        yield {"condition": f"best single layer / {best['queries']} / {best['mixer']} (unadjusted: as if chosen in "
                            f"advance; resume the run with `chorus influence knockout` for the family-wise interval)",
               "layer": best["layer"], "value": best["share_removed"], **_ratio_cells(best), "n": best["n"]}


@section("s45_patch", "§4.5: residual interchange at the source-cue positions (share of the cue effect restored)",
         ["patch"], _INT.format(verb="patch"), ["patch_curve"])
def _patch(r):
    s = r["summary"]
    yield {"layer": "cue effect X - Y (logits)", **_ci(s.get("cue_effect_x_minus_y")),
           "n": (s.get("cue_effect_x_minus_y") or {}).get("n")}
    for c in s.get("curve", []):
        yield {"layer": c["layer"], "value": c["restored"], **_ratio_cells(c), "n": c["n"]}


@section("fig6_concepts", "Figure 6 (§C.1): concept directions while reading peers and at the decision token",
         ["concepts"], _INT.format(verb="concepts"), ["concepts_reading", "concepts_decision"])
def _concepts(r):
    s = r["summary"]
    yield {k: s.get(k) for k in ("n_probes", "n_probes_above_null_p90", "probe_best_layer", "n_shift_cells",
                                 "n_shift_cells_above_null_q90", "shift_at_best_layer",
                                 "shift_null_q90_at_best_layer", "spread_at_best_layer")}


@section("c1_probes", "§C.1: debate-state probes beside the shuffled-label null", ["probe"],
         _INT.format(verb="probe"), ["probe_auroc"],
         note="A probe that does not clear the shuffled-label 90th percentile reads the topic, not the state.")
def _probe(r):
    s = r["summary"]
    b = s.get("best_layer") or {}
    yield {"concept": s.get("concept"), "best_layer": b.get("layer"), "auroc": b.get("auroc"),
           "null_p90": b.get("null_p90"), "p_value": b.get("p_value"),
           "layers_above_null_p90": s.get("n_layers_above_null_p90"), "layers": len(s.get("layers", []))}


@section("fig8_transfer", "Figure 8 (§C.1): latent state transfer, split by whether the sender was right",
         ["transfer"], _INT.format(verb="transfer"), ["transfer_share"],
         note="shift: toward the sender's answer (logits); a wrong sender still pulling there transfers its answer, "
              "not the truth.")
def _transfer(r):
    s = r["summary"]
    for c in s.get("curve", []):
        yield {"arm": c["arm"], "sender": "all", "layers": f"{c['layer_s']}->{c['layer_r']}", "share": c["share"],
               "shift": c["shift"], "ci_low": c["shift_ci_low"], "ci_high": c["shift_ci_high"],
               **_lv(c, prefix="shift_"), "n": c["n"]}
    for c in s.get("by_sender", []):
        yield {"arm": c["arm"], "sender": "right" if c["sender_right"] else "wrong",
               "layers": f"{c['layer_s']}->{c['layer_r']}", "share": None, "shift": c["shift"],
               "ci_low": c["ci_low"], "ci_high": c["ci_high"], **_lv(c), "n": c["n"]}


@section("s5_outcomes", "§5: collective outcomes on fully parsed, labelled non-numeric questions (debate vs reflection)",
         ["debate"], DEBATE, ["unanimity_by_round", "n_eff_by_round"])
def _outcomes(r):
    p = r["summary"].get("paired", {})
    for d in p.get("deltas", []):
        yield {"comparison": f"{d['a']} - {d['b']}", "delta": d["delta"], "ci_low": d["ci_low"],
               "ci_high": d["ci_high"], **_lv(d), "p_perm": d.get("p_perm"), "n": d.get("n", p.get("n_paired"))}
    if "n_eff_delta" in p:
        e = p["n_eff_delta"]
        yield {"comparison": "n_eff debate - reflection", "delta": e["delta"], "ci_low": e["ci_low"],
               "ci_high": e["ci_high"], **_lv(e), "p_perm": None, "n": p.get("n_paired")}


_VOTE_PAIRS = {("debate_final_majority", "vote_majority"): ("debate - vote", "accuracy (final majority)"),
               ("reflection_final_majority", "vote_majority"): ("reflection - vote", "accuracy (final majority)"),
               ("debate_wrong_unanimous", "vote_wrong_unanimous"): ("debate - vote", "wrong unanimity"),
               ("reflection_wrong_unanimous", "vote_wrong_unanimous"): ("reflection - vote", "wrong unanimity")}


def _families(d: dict) -> str:
    """What a vote-arm interval resamples, from the bootstrap's own record of it."""
    if d.get("n_clusters") is None:
        return "question-family clustered bootstrap (family count not recorded)"
    return f"paired bootstrap over {d['n_clusters']} question families ({d.get('n_resamples')} resamples)"


@section("s51_vote", "§5.1: debate vs the compute-matched majority vote (the headline's companion)",
         ["debate", "long_debate"], DEBATE + " --set voting.enabled=true", ["vote_arms"],
         note="The vote arm draws independent round-0 answers until it has generated as many tokens as debate on "
              "each question; all arms are scored on the same fully parsed, labelled questions. Arm intervals "
              "resample the same question families as the paired differences.")
def _vote(r):
    v = r["summary"].get("vote")
    if not v or not v.get("arms"):
        return
    deltas = {(d["a"], d["b"]): d for d in v.get("deltas", [])}
    units = _families(next(iter(deltas.values()), {}))
    for arm, m in v["arms"].items():
        for metric, key in (("accuracy (final majority)", "accuracy"), ("wrong unanimity", "wrong_unanimity")):
            yield {"comparison": arm, "metric": metric, **_ci(m[key], "estimate"), "p_perm": None,
                   "n": v["n_paired"], "interval": units, "tokens_per_question": m["tokens_per_question"]}
    for (a, b), (name, metric) in _VOTE_PAIRS.items():
        d = deltas.get((a, b))
        if d:
            yield {"comparison": name, "metric": metric, **_ci(d, "delta"), "p_perm": d.get("p_perm"),
                   "n": d.get("n"), "interval": _families(d)}
    yield {"comparison": "compute matching", "metric": "questions matched / cap hits",
           "value": f"{v['n_matched']} / {v['n_cap_hits']}", "n": v["n_questions"],
           "vote_minus_debate_tokens": v["tokens_per_question"]["gap_vote_minus_debate"]["mean"]}


@section("table13_domain", "Table 13 (§C.2) by domain: collective outcomes of debate and reflection per bench domain",
         ["debate"], DEBATE,
         note="Each domain's block is the run's own question table restricted to that domain. Differences pair the "
              "questions both conditions score; their intervals resample the domain's question families.")
def _t13(r):
    s = r["summary"]
    if "by_domain" not in s and "conditions" in s:   # a run summarised before the per-domain table
        yield {"domain": None, "missing": f"rebuild the summary with `chorus debate recompute {r['path']}`"}
        return
    for dom, b in (s.get("by_domain") or {}).items():
        for cond, m in b["conditions"].items():
            yield {"domain": dom, "row": cond, **m}
        for d in b.get("deltas", []):
            yield {"domain": dom, "row": d["comparison"], "delta": d["delta"], "ci_low": d["ci_low"],
                   "ci_high": d["ci_high"], **_lv(d), "n_scored": d["n"], "interval": _families(d)}


@section("table14_long", "Table 14 (§C.2): long debates, final round", ["long_debate"], LONG,
         ["outcomes_by_round", "c2_split", "c2_wrong_initial_majority"])
def _long(r):
    c2 = r["summary"].get("c2", {})
    for c in c2.get("final_round_curves", []):
        yield {"round": c2.get("final_round"), **{k: v for k, v in c.items() if k != "round"},
               **(_lv(c) if "ci_low" in c else {})}


@section("fig11_subdomains", "§C.3 / Figure 11: debate - reflection by subdomain (Benjamini-Hochberg across cells)",
         ["debate"], DEBATE)
def _sub(r):
    for c in r["summary"].get("paired", {}).get("by_subdomain", []):
        yield {k: c.get(k) for k in ("metric", "subdomain", "n", "debate", "reflection", "delta", "p_perm", "q_bh",
                                     "significant")}


@section("a8_unlabelled", "§A.8: labelled and unlabelled questions apart (agreement on unlabelled is not correctness)",
         ["debate", "long_debate"], DEBATE)
def _a8(r):
    for group, by in r["summary"].get("stance_dynamics", {}).items():
        for cond, v in by.items():
            yield {"group": group, "condition": cond, "n_questions": v.get("n_questions"),
                   "persistence": v.get("persistence"), "n_steps": v.get("n_steps"),
                   "final_distribution": json.dumps(v.get("final_distribution"))}


@section("numeric", "Numeric questions (own rows, kept out of the comparisons above)", ["debate", "long_debate"],
         DEBATE + " --set 'bench.counts={numeric: 100}'")
def _numeric(r):
    n = r["summary"].get("numeric")
    if not n:
        return
    for cond, m in n["conditions"].items():
        R = max(m["accuracy_by_round"], key=int)
        yield {"condition": cond, "questions": n["n_questions"], "final_round": R,
               "accuracy": m["accuracy_by_round"][R], "agreement": m["agreement_by_round"][R],
               "scored": m["n_scored_by_round"][R], "unreadable": m["n_unreadable"]}


@section("a4_frames", "§A.4: scenario frames (decision stakes) as a factor", ["debate", "long_debate"],
         DEBATE + " --set bench.scenario_frames=stakes")
def _frames(r):
    bf = r["summary"].get("by_frame") or {}
    for frame, f in (bf.get("frames") or {}).items():
        for cond, v in f["conditions"].items():
            yield {"frame": frame, "stakes": f"{f.get('stakes_dimension')}={f.get('stakes_level')}", "condition": cond,
                   **{k: v.get(k) for k in ("n_questions", "n_steps", "persistence", "change_rate")}}
    for cond, dims in (bf.get("stakes") or {}).items():
        for dim, c in dims.items():
            yield {"frame": f"high - low {dim}", "stakes": dim, "condition": cond,
                   "change_rate": c.get("delta_change_rate"),
                   "n_steps": f"{c['low']['n_steps']} / {c['high']['n_steps']}"}


# -- export and render ------------------------------------------------------------------------------
def export(run_dirs: Sequence[str | Path]) -> dict[str, Any]:
    """The numbers dict of the runs, by section in the paper's order (no file written)."""
    if not run_dirs:
        raise PaperError("no run directory given")
    runs = [_read_run(Path(p).resolve()) for p in run_dirs]
    sections: dict[str, Any] = {}
    for s in SECTIONS:
        kinds = s.spec["kinds"]
        mine = [r for r in runs if r["kind"] in kinds]
        rows = [{**_src(r), **row} for r in mine for row in s.export(r)]
        entry: dict[str, Any] = {"title": s.title, "kinds": list(kinds), "note": s.spec["note"],
                                 "runs": [{**_src(r), "path": r["path"], "summary_sha256": r["summary_sha256"]}
                                          for r in mine]}
        if not mine:
            entry["missing"] = s.missing
        elif not rows:
            entry["missing"] = f"the runs given ({', '.join(r['name'] for r in mine)}) hold none of it; {s.missing}"
        else:
            entry["rows"] = rows
            entry["figures"] = [[r["path"], f"plots/{f}.png"] for r in mine for f in s.spec["figures"]
                                if (Path(r["path"]) / "plots" / f"{f}.png").is_file()]
        sections[s.key] = entry
    models = sorted({str(r["model"]) for r in runs})
    return json_safe({"schema": SCHEMA, "models": models, "note": standing(models).text,   # where the numbers come from, said on the page
                      "runs": [{**_src(r), "kind": r["kind"], "path": r["path"], "summary_sha256": r["summary_sha256"]}
                               for r in runs], "sections": sections})


def _table(rows: list[dict]) -> str:
    """Rows of differing keys: every key any row has is a column, in first-seen order."""
    return md_table(list(dict.fromkeys(k for r in rows for k in r)), rows)


def _body(s, entry: dict[str, Any]) -> str:
    return (f"{entry['note']}\n\n" if entry.get("note") else "") + _table(entry["rows"])


def render(numbers: dict[str, Any], out: Path) -> str:
    """paper.md from the numbers dict; the runs' figures are copied to ``out/figures``. A section is laid
    out by the numbers file's own title (a file exported by another chorus keeps its headings)."""
    parts = ["# Peer influence in debate: paper report", "",
             f"Rendered by `{COMMAND}` from `numbers.json` alone ({numbers['schema']}); models: "
             f"{', '.join(numbers['models'])}. Every row names its run. Runs:", ""]
    if numbers.get("note"):
        parts += [f"**{numbers['note']}**", ""]
    parts += [f"- `{r['run']}`: {r['kind']}, model {r['model']} (`{r['path']}`)" for r in numbers["runs"]]
    stored = Sections()
    for key, s in numbers["sections"].items():
        stored.add(key, s["title"])
    parts += render_sections(stored, numbers, out, body=_body,
                             missing=lambda s, e: missing_line(e["missing"], f"{COMMAND} RUN... --out DIR"))
    return "\n".join(parts) + "\n"


def build_paper(run_dirs: Sequence[str | Path], out: str | Path) -> tuple[Path, dict[str, Any]]:
    """``out/numbers.json`` from the runs, then ``out/paper.md`` from that file; (paper.md, numbers)."""
    return write_paper(Path(out), export(run_dirs), render, paper="influence", runs=run_dirs)
