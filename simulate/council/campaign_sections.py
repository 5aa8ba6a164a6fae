"""The sections of a campaign numbers file: one registered function per table, figure or diagnostic
of the BDA paper, each a pure function of the campaign's stored traces (and, for the LLM baselines,
their stored rows): no model call anywhere. A section returns JSON-able numbers; a section that
cannot be computed from these inputs returns ``{"missing": why}`` and the paper report names the
command that makes its inputs. Registered with ``@section`` into ``SECTIONS`` (``chorus.core.paper.Sections``,
the one section shape of every paper report)."""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from chorus.aggregate.contagion import contagion_summary
from chorus.aggregate.counts import Pool
from chorus.aggregate.policy_shift import before_after, coalition, shift_table, shifted_stream
from chorus.aggregate.results import independent_plurality
from chorus.core.paper import Sections
from chorus.core.runs import file_sha256
from chorus.core.stats import ece, reliability_table
from chorus.simulate.council.adversary import compliance
from chorus.simulate.council.campaign_inputs import CellInput
from chorus.simulate.council.llm_baselines import baseline_metrics


@dataclass(frozen=True)
class Options:
    methods: tuple[str, ...]
    outer_folds: int = 5
    inner_folds: int = 5
    n_resamples: int = 2000
    seed: int = 0
    protocol: str = "strict"
    budgets: tuple[int, ...] = (10, 25, 50, 100)
    label_seeds: tuple[int, ...] = (0, 1, 2)
    sweeps: tuple[str, ...] = ()


@dataclass
class Context:
    cells: dict[str, CellInput]
    options: Options
    sources: list = field(default_factory=list)

    def councils(self) -> list[str]:
        return sorted({c.council for c in self.cells.values()})

    def select(self, council: str | None = None, *, attacked: bool | None = None, K: int | None = None) -> list[CellInput]:
        out = [c for c in self.cells.values() if council is None or c.council == council]
        if attacked is not None:
            out = [c for c in out if c.attacked == attacked]
        if K is not None:
            out = [c for c in out if c.K == K]
        return out


# one registered section per table, figure or diagnostic, in registration order (chorus.core.paper.Section:
# its title says where the paper reports it; spec: which cells it reads, named in the report when they
# are missing, and whether the verifier re-derives it by default)
SECTIONS = Sections()


def section(name: str, *, paper: str, needs: str, cheap: bool = False):
    return SECTIONS.exports(name, paper, needs=needs, cheap=cheap)


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _each(cells: Sequence[CellInput], fn: Callable[[CellInput], dict[str, Any]], missing: str) -> dict[str, Any]:
    """``fn`` per cell; a cell it cannot compute (a pool too small for its folds, ...) is reported, not hidden."""
    out = {}
    for c in cells:
        try:
            out[c.key] = fn(c)
        except Exception as e:  # noqa: BLE001
            out[c.key] = {"error": _err(e)}
    return {"cells": out} if out else {"missing": missing}


def _records(df) -> list[dict[str, Any]]:
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
            for r in df.to_dict(orient="records")]


def _supervised(methods: Sequence[str]) -> list[str]:
    from chorus.aggregate.methods import make_method  # lazy: pulls in scipy
    return [m for m in methods if "+" not in m and getattr(make_method(m), "supervised", False)]


def _run(traces: list, methods: Sequence[str], o: Options, *, bootstrap: bool = True) -> dict[str, Any]:
    """Nested CV of every method over ``traces`` with its bootstrap: ``aggregate``'s run record."""
    return _cell(traces, methods, o, bootstrap=bootstrap).record


def _cell(traces: list, methods: Sequence[str], o: Options, *, bootstrap: bool = True):
    """``aggregate``'s evaluated ``Cell`` (record, pool, cross-validated predictions)."""
    from chorus.aggregate.config import RunConfig  # lazy: pulls in scipy
    from chorus.aggregate.experiments import evaluate_run  # lazy: pulls in scipy

    ref = "plurality" if "plurality" in methods else methods[0]
    pairs = [(m, ref) for m in methods if m != ref]
    if {"bda_confusion", "stacker"} <= set(methods):   # the BDA paper's regime split (§7): confusion vs stacker
        pairs.append(("bda_confusion", "stacker"))
    cfg = RunConfig(name="campaign", traces="(campaign cell)", seed=o.seed, protocol=o.protocol, on_violation="skip",
                    methods=list(methods),
                    outer_folds=o.outer_folds, inner_folds=o.inner_folds,
                    bootstrap={"n_resamples": o.n_resamples, "reference": ref, "pairs": pairs})
    return evaluate_run(cfg, traces, bootstrap=bootstrap)


# -- D.7's drift guard: counts the verifier re-derives in plain Python ----------------------------
@section("inventory", paper="App. D.7 (move inventory, trace counts, parse rates, seat reliabilities, "
                            "majority accuracy and ECE, adversary compliance)", needs="any cell", cheap=True)
def inventory(ctx: Context) -> dict[str, Any]:
    import numpy as np

    out = {}
    for key, c in ctx.cells.items():
        trs = c.traces
        moves = [m for tr in trs for m in tr.moves]
        agents = sorted({m.agent for m in moves})
        r0 = {a: [m.answer == tr.gold for tr in trs if tr.gold is not None for m in tr.moves
                  if m.agent == a and m.round == 0 and m.force == "propose"] for a in agents}
        lab = [tr for tr in trs if tr.gold is not None]
        plur = independent_plurality(lab)
        # ties count fractionally (1 / tied winners): the expected accuracy of any random tie-break
        correct = np.array([(tr.gold in w) / len(w) for tr, (w, _) in zip(lab, plur)], float)
        conf = np.array([f for _, f in plur], float)
        n_abst = sum(m.force == "abstain" for m in moves)
        cell = {"council": c.council, "dataset": c.dataset, "condition": c.condition, "K": c.K,
                "n_traces": len(trs), "n_labelled": len(lab), "n_questions": len({tr.qid for tr in trs}),
                "gen_seeds": sorted({str(tr.extra.get("gen_seed")) for tr in trs if tr.extra.get("gen_seed") is not None}),
                "adversaries": c.adversaries, "n_moves": len(moves),
                # a swap-in condition's stand-ins (live councils record {seat: {profile, persona}})
                "swapped": {k: v for tr in trs for k, v in (tr.extra.get("swapped") or {}).items()},
                "moves_by_force": dict(sorted(Counter(m.force for m in moves).items())),
                "move_parse_rate": 1.0 - n_abst / len(moves) if moves else None,
                "round0_accuracy_by_seat": {a: (float(np.mean(v)) if v else None) for a, v in r0.items()},
                "plurality_accuracy": float(correct.mean()) if len(lab) else None,
                "plurality_ece_ew": ece(conf, correct) if len(lab) else None}
        if c.attacked and lab:
            cell["compliance"] = compliance(lab)
        out[key] = cell
    return {"cells": out}


# -- the main tables: every method's nested CV per cell --------------------------------------------
@section("cells", paper="Tables 1, 2 and 9; Fig. 4 and 5; Table 6 (every method, every cell; per seed)",
         needs="any labelled cell")
def cells(ctx: Context) -> dict[str, Any]:
    import numpy as np

    from chorus.aggregate.experiments import per_task  # lazy: pulls in scipy
    out = {}
    for key, c in ctx.cells.items():
        try:
            cell = _cell(c.traces, ctx.options.methods, ctx.options)
        except Exception as e:  # noqa: BLE001 -- a pool too small for its folds is reported, not hidden
            out[key] = {"error": _err(e)}
            continue
        rec = cell.record
        out[key] = {k: rec[k] for k in ("K", "n_traces", "n_evaluated", "n_questions", "agents", "traces_sha256",
                                        "metrics", "metrics_by_seed", "bootstrap", "bootstrap_clustered",
                                        "bootstrap_seed_clustered", "folds")}
        # Fig. 4's reliability diagrams need per-task confidences: the binned curves are kept, not the tasks
        rel = {}
        for m in cell.cv.methods:
            d = per_task(cell.cv, m)
            t = reliability_table(d["confidence"], d["correct"])
            rel[m] = {k: np.asarray(t[k]).tolist() for k in ("bin", "count", "confidence", "accuracy")}
        out[key]["reliability"] = rel
    return {"cells": out}


@section("pooled_binary", paper="Table 2 (clean binary pool: every method, Δ vs plurality with pooled and "
                                "question-clustered CIs)", needs="clean K = 2 cells")
def pooled_binary(ctx: Context) -> dict[str, Any]:
    out = {}
    for council in ctx.councils():
        cs = ctx.select(council, attacked=False, K=2)
        if not cs:
            continue
        try:
            rec = _run([t for c in cs for t in c.traces], ctx.options.methods, ctx.options)
        except Exception as e:  # noqa: BLE001
            out[council] = {"error": _err(e), "cells": [c.key for c in cs]}
            continue
        out[council] = {"cells": [c.key for c in cs], "n_traces": rec["n_traces"], "metrics": rec["metrics"],
                        "bootstrap": rec["bootstrap"], "bootstrap_clustered": rec["bootstrap_clustered"],
                        "bootstrap_seed_clustered": rec["bootstrap_seed_clustered"],
                        "metrics_by_seed": rec["metrics_by_seed"]}
    return {"councils": out} if out else {"missing": "no clean K = 2 cell"}


# -- the LLM baselines (stored rows of the council runs; never re-generated) ------------------------
@section("baselines", paper="Tables 1, 2, 9 (MoA, MoA-Lite, Self-MoA, ArgLLMs rows)", needs="council runs with baselines",
         cheap=True)
def baselines(ctx: Context) -> dict[str, Any]:
    from pathlib import Path

    import pandas as pd

    out = {}
    for s in ctx.sources:
        p = Path(s.path) / "tables" / "baselines.parquet"
        if s.kind != "council_run" or not p.is_file():
            continue
        for r in baseline_metrics(pd.read_parquet(p).to_dict(orient="records")):
            key = f"{s.council}/{r['dataset']}/{r['condition']}"
            out.setdefault(key, {})[r["method"]] = {k: r.get(k) for k in ("n", "accuracy", "ece_ew", "brier",
                                                                           "parse_rate", "tokens_per_task")}
    return {"cells": out} if out else {"missing": "no council run with LLM baselines (tables/baselines.parquet)"}


# -- the appendices' diagnostics -----------------------------------------------------------------
@section("flips", paper="App. E.4, Fig. 6 (decision flips, round 0 vs full trace, neutral prior, by K)",
         needs="clean labelled cells", cheap=True)
def flips(ctx: Context) -> dict[str, Any]:
    from chorus.aggregate.flips import decision_flips, flip_summary  # lazy: pulls in scipy
    out = {}
    for council in ctx.councils():
        cs = ctx.select(council, attacked=False)
        if not cs:
            continue
        per = {c.dataset: decision_flips(c.traces, seed=ctx.options.seed) for c in cs}
        import pandas as pd
        out[council] = {"by_K": _records(flip_summary(pd.concat(per.values(), ignore_index=True))),
                        "by_dataset": {d: _records(flip_summary(t)) for d, t in per.items()}}
    return {"councils": out} if out else {"missing": "no clean cell"}


@section("table7", paper="Table 7 (reliability-key granularity at the fixed prior (0.58, 2, 16); reliability "
                           "estimator by inner CV; one set of folds)", needs="clean K = 2 cells")
def table7(ctx: Context) -> dict[str, Any]:
    from chorus.aggregate.granularity import ablation_table  # lazy: pulls in scipy
    o = ctx.options
    out = {}
    for council in ctx.councils():
        cs = ctx.select(council, attacked=False, K=2)
        if cs:
            try:
                t = ablation_table([t for c in cs for t in c.traces], outer_folds=o.outer_folds,
                                   inner_folds=o.inner_folds, seed=o.seed, protocol=o.protocol, on_violation="skip")
                out[council] = {"cells": [c.key for c in cs], "rows": _records(t)}
            except Exception as e:  # noqa: BLE001
                out[council] = {"error": _err(e)}
    return {"councils": out} if out else {"missing": "no clean K = 2 cell"}


@section("label_efficiency", paper="App. E.6, Table 11 and Fig. 3 (n labels, disjoint calibrate / hold-out, seeds)",
         needs="clean labelled cells")
def label_efficiency(ctx: Context) -> dict[str, Any]:
    from chorus.aggregate.label_efficiency import efficiency_curve  # lazy: pulls in scipy
    from chorus.aggregate.label_efficiency import label_efficiency as sweep  # lazy: pulls in scipy
    o = ctx.options
    arms = _supervised(o.methods)
    out = {}
    for c in ctx.select(attacked=False):
        n_lab = sum(t.gold is not None for t in c.traces)
        budgets = [b for b in o.budgets if 2 <= b < n_lab]
        if not budgets:
            out[c.key] = {"error": f"no label budget of {list(o.budgets)} leaves a hold-out of {n_lab} labelled tasks"}
            continue
        try:
            t = sweep(c.traces, arms, budgets, seeds=o.label_seeds, protocol=o.protocol, on_violation="skip",
                      inner_folds=o.inner_folds)
        except Exception as e:  # noqa: BLE001
            out[c.key] = {"error": _err(e)}
            continue
        out[c.key] = {"budgets": budgets, "rows": _records(t),
                      "curve": {m: _records(efficiency_curve(t, m)) for m in ("accuracy", "ece_ew")}}
    return {"cells": out} if out else {"missing": "no clean cell"}


@section("lodo", paper="App. E.2 / E.4 (leave-one-dataset-out transfer)", needs="two or more clean datasets of one K")
def lodo(ctx: Context) -> dict[str, Any]:
    from chorus.aggregate.lodo import leave_one_dataset_out  # lazy: pulls in scipy
    out = {}
    for council in ctx.councils():
        for K in sorted({c.K for c in ctx.select(council, attacked=False)}):
            cs = ctx.select(council, attacked=False, K=K)
            if len(cs) < 2:
                continue
            try:
                t = leave_one_dataset_out({c.dataset: c.traces for c in cs}, list(ctx.options.methods),
                                          protocol=ctx.options.protocol, on_violation="skip", seed=ctx.options.seed,
                                          inner_folds=ctx.options.inner_folds, outer_folds=ctx.options.outer_folds)
                out[f"{council}/K{K}"] = {"rows": _records(t)}
            except Exception as e:  # noqa: BLE001
                out[f"{council}/K{K}"] = {"error": _err(e)}
    return {"groups": out} if out else {"missing": "no council with two clean datasets of the same K"}


@section("transfer", paper="App. E.4 (cross-domain transfer: fit on the binary sets, predict a K > 2 set)",
         needs="clean K = 2 cells and a clean K > 2 cell of one council")
def transfer(ctx: Context) -> dict[str, Any]:
    from chorus.aggregate.transfer import cross_domain_transfer  # lazy: pulls in scipy
    o = ctx.options
    out = {}
    for council in ctx.councils():
        src = ctx.select(council, attacked=False, K=2)
        for tgt in [c for c in ctx.select(council, attacked=False) if c.K > 2]:
            if not src:
                continue
            try:
                t = cross_domain_transfer({c.dataset: c.traces for c in src}, tgt.traces, list(o.methods),
                                          target_name=tgt.dataset, protocol=o.protocol, on_violation="skip",
                                          seed=o.seed, inner_folds=o.inner_folds, outer_folds=o.outer_folds)
                out[tgt.key] = {"sources": [c.key for c in src], "rows": _records(t)}
            except Exception as e:  # noqa: BLE001
                out[tgt.key] = {"error": _err(e)}
    return {"groups": out} if out else {"missing": "no council with clean binary sets and a clean K > 2 set"}


def _shift_kind(K: int) -> str:
    # the shift that keeps every seat's accuracy (BDA paper §8: the confusion's exposure, the one-coin's
    # robustness): which wrong answer the coalition backs (K > 2) or which class it lies on (K = 2)
    return "permute" if K > 2 else "classes"


@section("shift", paper="§8 / App. F (a policy shift between fits: every method fitted before, scored after)",
         needs="clean labelled cells")
def shift(ctx: Context) -> dict[str, Any]:
    o = ctx.options

    def one(c: CellInput) -> dict[str, Any]:
        lab = [t for t in c.traces if t.gold is not None]
        t = shift_table(lab, list(o.methods), kinds=[_shift_kind(c.K)], n_calibration=min(200, len(lab) // 3),
                        seed=o.seed, protocol=o.protocol, inner_folds=o.inner_folds)
        return {"rows": _records(before_after(t))}
    return _each(ctx.select(attacked=False), one, "no clean cell")


@section("drift", paper="§8 / App. F (row drift announcing a planted policy shift: alarm at twice the noise floor, "
                        "delay as a fraction of a window)", needs="clean labelled cells")
def drift(ctx: Context) -> dict[str, Any]:
    from chorus.aggregate.drift import RowDriftDetector, StreamCounts, alarm_delay, first_alarm  # lazy: pulls in scipy
    o = ctx.options

    def one(c: CellInput) -> dict[str, Any]:
        lab = [t for t in c.traces if t.gold is not None]
        W = len(lab) // 4       # a reference window, a clean window, the shift at 2W, two windows after it
        at, kind = 2 * W, _shift_kind(c.K)
        trs = shifted_stream(lab, kind, at, coalition(lab), seed=o.seed, protocol=o.protocol)
        sc = StreamCounts.from_pool(Pool.from_traces(trs, protocol=o.protocol, on_violation="skip"))
        det = RowDriftDetector(W, seed=o.seed).fit(sc)
        d = det.drift(sc)
        t_al = first_alarm(d, det.threshold_)
        return {"rows": [{"shift": kind, "window": W, "shift_at": at, "noise_floor": det.noise_floor_,
                          "threshold": det.threshold_,
                          "max_drift_before_shift": float(max([x for x in d[:at] if x == x], default=float("nan"))),
                          "first_alarm": t_al, "alarm_delay_windows": alarm_delay(t_al, at, W)}]}
    return _each(ctx.select(attacked=False), one, "no clean cell")


def _refit_per_basis(ctx: Context, table: Callable, *, attacked: bool) -> dict[str, Any]:
    """Each (attacked or clean) cell's traces refitted per basis by ``table`` (round 0 vs full, or each
    round r), with the campaign's folds, seed and resamples: its metrics and its paired deltas."""
    o = ctx.options

    def one(c: CellInput) -> dict[str, Any]:
        m, d = table(c.traces, list(o.methods), outer_folds=o.outer_folds, inner_folds=o.inner_folds,
                     seed=o.seed, protocol=o.protocol, on_violation="skip", n_boot=o.n_resamples)
        return {"metrics": _records(m), "deltas": _records(d)}
    return _each(ctx.select(attacked=attacked), one, "no attacked cell" if attacked else "no clean cell")


@section("truncation", paper="App. F.5, Table 14 (round-0-truncated vs full trace under attack, refit per basis)",
         needs="attacked cells")
def truncation(ctx: Context) -> dict[str, Any]:
    from chorus.aggregate.truncation import truncation_table  # lazy: pulls in scipy
    return _refit_per_basis(ctx, truncation_table, attacked=True)


@section("contagion", paper="App. G / F.14 (genuine seats flipped; effective vs nominal corrupted fraction)",
         needs="attacked cells", cheap=True)
def contagion(ctx: Context) -> dict[str, Any]:
    return _each(ctx.select(attacked=True), lambda c: contagion_summary([t for t in c.traces if t.gold is not None],
                                                                         ctx.options.protocol), "no attacked cell")


@section("switch", paper="App. F.10 (K = 2 label switching: unsupervised DS from majority and spectral starts, "
                         "the mirror, supervised BDA)", needs="K = 2 cells")
def switch(ctx: Context) -> dict[str, Any]:
    from chorus.aggregate.label_switching import demonstrate  # lazy: pulls in scipy
    o = ctx.options
    return _each(ctx.select(K=2), lambda c: demonstrate(c.traces, outer_folds=o.outer_folds, inner_folds=o.inner_folds,
                                                        seed=o.seed, protocol=o.protocol, on_violation="skip"),
                 "no K = 2 cell")


@section("sweeps", paper="App. F.3 Table 12 (synthetic dose-response) and F.8 Figure 7 (the sleeper axis): "
                         "chorus aggregate sweep runs, embedded verbatim with their provenance", needs="sweep runs",
         cheap=True)
def sweeps(ctx: Context) -> dict[str, Any]:
    # the grid costs CPU-hours: read from its own run (verified there by chorus aggregate verify), as the paper
    # embeds its grid with provenance and regeneration command
    import json
    from pathlib import Path

    out = {}
    for p in ctx.options.sweeps:
        f = Path(p) / "results.json"
        if not f.is_file():
            out[str(p)] = {"error": f"no results.json in {p} (a chorus aggregate sweep run directory)"}
            continue
        r = json.loads(f.read_text())
        cmd = f"chorus aggregate sweep {(r.get('config') or {}).get('name', 'CONFIG')} --out {p}"
        out[str(p)] = {"kind": r.get("kind"), "name": r.get("name"), "sha256": file_sha256(f), "regenerate": cmd,
                       "cells": [{"params": c["params"], "n_traces": c.get("n_traces"),
                                  "metrics": {m: {k: v.get(k) for k in ("accuracy", "ece_ew", "brier")}
                                              for m, v in c["metrics"].items()}} for c in r.get("cells", [])]}
    return {"runs": out} if out else {"missing": "no sweep run given (--sweep DIR)"}


@section("c8", paper="App. C.8 (numerical checks: the symmetric-prior table, the (K - 1) factor, confidence "
                     "invariance over the clean binary traces, the K = 2 ceiling, the weighted-majority form; "
                     "chorus aggregate c8 TRACES)", needs="clean K = 2 cells")
def c8(ctx: Context) -> dict[str, Any]:
    from chorus.aggregate.c8 import c8_checks  # lazy: pulls in scipy
    o = ctx.options
    out = {}
    for council in ctx.councils():
        cs = ctx.select(council, attacked=False, K=2)
        if cs:   # the paper's invariance check permutes confidences across every clean binary trace
            out[council] = {"cells": [c.key for c in cs],
                            **c8_checks([t for c in cs for t in c.traces], seed=o.seed, protocol=o.protocol,
                                        inner_folds=o.inner_folds)}
    return {"councils": out} if out else {"missing": "no clean K = 2 cell"}


def _truncation_by_cell(sources: list) -> dict[str, dict[str, Any]]:
    """Per cell key: the council runs' generations that hit the token limit (``finish_reason == "length"``),
    over every attempt the runner made (retries included: each was a generation paid for)."""
    from pathlib import Path

    import pandas as pd

    out: dict[str, dict[str, Any]] = {}
    for s in sources:
        p = Path(s.path) / "tables" / "turns.parquet"
        if s.kind != "council_run" or not p.is_file():
            continue
        t = pd.read_parquet(p, columns=["dataset", "condition", "finish_reason"])
        for (d, c), g in t.groupby(["dataset", "condition"], sort=True):
            acc = out.setdefault(f"{s.council}/{d}/{c}", {"n_generations": 0, "n_truncated": 0, "runs": []})
            acc["n_generations"] += int(len(g))
            acc["n_truncated"] += int((g["finish_reason"] == "length").sum())
            acc["runs"].append(str(s.path))
    for v in out.values():
        v["truncation_rate"] = v["n_truncated"] / v["n_generations"] if v["n_generations"] else None
    return out


@section("composition", paper="Tables 3-8 (the bench each table reads: datasets, K, questions, generation seeds, "
                              "trials, rounds; the share of generations truncated at the token limit)",
         needs="any cell", cheap=True)
def composition(ctx: Context) -> dict[str, Any]:
    trunc = _truncation_by_cell(ctx.sources)
    out = {}
    for key, c in ctx.cells.items():
        trs = c.traces
        cell = {"council": c.council, "dataset": c.dataset, "condition": c.condition, "K": c.K,
                "n_questions": len({tr.qid for tr in trs}), "n_traces": len(trs),
                "n_labelled": sum(tr.gold is not None for tr in trs),
                "gen_seeds": sorted({str(tr.extra.get("gen_seed")) for tr in trs if tr.extra.get("gen_seed") is not None}),
                "rounds": 1 + max((m.round for tr in trs for m in tr.moves), default=-1)}
        # a bare trace store keeps no generations: its truncation rate is not recorded, and says so
        cell["truncation"] = trunc.get(key) or {"missing": "a trace store keeps no generation records (the council "
                                                           "run's tables/turns.parquet does)"}
        out[key] = cell
    return {"cells": out}


@section("rounds", paper="Table 8 / App. E.4 (traces truncated to at most round r for every r, leak-free "
                         "refit per round; the last round minus each earlier one, question-clustered)",
         needs="clean labelled cells")
def rounds(ctx: Context) -> dict[str, Any]:
    from chorus.aggregate.truncation import per_round_table  # lazy: pulls in scipy
    return _refit_per_basis(ctx, per_round_table, attacked=False)


@section("permutation", paper="App. F.11 (per-task label permutation: every method refitted on traces whose "
                              "candidates are relabelled per task, beside the unpermuted cell)", needs="attacked cells")
def permutation(ctx: Context) -> dict[str, Any]:
    from chorus.aggregate.experiments import cell_metrics, run_cell  # lazy: pulls in scipy
    from chorus.aggregate.synthetic_councils import permute_labels  # lazy: pulls in scipy
    o = ctx.options

    def one(c: CellInput) -> dict[str, Any]:
        # the relabelling keeps every within-task structure and destroys cross-task label identity: what a
        # method still wins here it wins from the trace's structure, what it loses came from the labels
        _, cv = run_cell(permute_labels(c.traces, seed=o.seed), list(o.methods), grids={}, protocol=o.protocol,
                         on_violation="skip", seed=o.seed, outer_folds=o.outer_folds, inner_folds=o.inner_folds)
        return {"permutation_seed": o.seed, "metrics": cell_metrics(cv)}
    return _each(ctx.select(attacked=True), one, "no attacked cell")
