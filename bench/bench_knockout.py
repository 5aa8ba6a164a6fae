"""Benchmark of attention knockout (issue 6).

    .venv/bin/python bench/bench_knockout.py                                 # 50 contexts, embedded model
    .venv/bin/python bench/bench_knockout.py --contexts 6 --repeats 3 --out bench/results/knockout.json
    .venv/bin/python bench/bench_knockout.py --source-run runs/debate/X   # contexts from a debate run
    .venv/bin/python bench/bench_knockout.py --profile /models/llama --dtype bfloat16   # a GPU (its default)

(1) Cost of a knocked-out forward pass relative to a plain forward pass on the same batch (last
    position, as readouts run): plain (the hf backend's own forward), knockout in all layers by
    each route (``knockout.route``: nnsight edits of the attention modules' mask inputs, or the
    registered AttentionInterface function), and the shared-prefix sweep path (one context under
    every single-layer condition) by each route. Interleaved repeats, medians; the routes must
    agree bitwise. ``nnsight_vs_interface`` is the ratio the default route is chosen by (nnsight
    unless it is above 1.1x; at the 8B architecture's widths: ``--profile`` a ``chorus models
    dummy llama-3.1-8b-instruct --layers 2`` folder).
(2) Wall time of a full single-layer + cumulative sweep over all layers (queries "after") plus
    the two all-layer variants on ``--contexts`` contexts, no call store, by ``--route``.
Contexts: by default synthetic single-peer debate prompts built from the bench questions (own
answer and a disagreeing peer, ~60 tokens each), so no generation is needed; with
``--source-run`` the round-0 pairs of a debate run. The dtype is the engine's default (float32 on
a CPU, bfloat16 on a GPU, where an 8B model in float32 is neither what users run nor a fair time);
in bfloat16 the two routes are compared by their largest difference rather than bitwise. On a GPU
every timed pass ends with a device synchronisation (kernels run asynchronously). SmolLM2-135M
numbers are plumbing, not findings.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _recorder import interleaved_medians, machine, write_result  # noqa: E402  (bench/ is the script directory)


def synthetic_pairs(n: int) -> tuple[dict, list[dict]]:
    from chorus.simulate.debate.questions import build_bench
    items, _ = build_bench(seed=0)
    items = [it for it in items if it.labels and len(it.labels) >= 2 and not it.word_labels][:n]
    pairs = []
    for it in items:
        a, b = it.labels[0], it.labels[1]
        own = (f"Looking at the options, {a} ({it.options[0]}) seems the most defensible to me, although I am "
               f"not fully certain about the alternatives. Answer: {a}")
        peer = (f"I went through each option in turn. {it.options[1]} fits the question best, and the other "
                f"options either overstate or miss the key point that the question is asking about. "
                f"Answer: {b}")
        pairs.append({"qid": it.id, "family": it.family, "domain": it.domain, "subdomain": it.subdomain,
                      "receiver": 0, "peer": 1, "own_text": own, "own_answer": a, "peer_text": peer, "peer_answer": b})
    return {it.id: it for it in items}, pairs


def run_pairs(path: str, n: int) -> tuple[dict, list[dict]]:
    from chorus.core.runs import RunDir
    from chorus.interventions.ablations import select_pairs
    from chorus.simulate.debate.questions import load_bench
    run = RunDir(path)
    items = {it.id: it for it in load_bench(run.path / "bench.jsonl")}
    return items, select_pairs(items, run.read_table("turns"), max_pairs=n)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--contexts", type=int, default=50, help="contexts of the full sweep")
    ap.add_argument("--batch", type=int, default=8, help="contexts in the cost-ratio batch")
    ap.add_argument("--repeats", type=int, default=5, help="interleaved repeats of the cost-ratio passes")
    ap.add_argument("--profile", default="smollm2-135m-instruct")
    ap.add_argument("--source-run", default=None, help="a debate run directory (default: synthetic contexts)")
    ap.add_argument("--skip-sweep", action="store_true")
    ap.add_argument("--route", default="nnsight", choices=["nnsight", "interface"], help="the route of the sweep (2)")
    ap.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"],
                    help="the engine's dtype (default: float32 on a CPU, bfloat16 on a GPU)")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON result here")
    a = ap.parse_args()

    import torch

    from chorus.interventions import knockout as ko
    from chorus.interventions import knockout_pairs as kp
    from chorus.interventions.internals.config import KnockoutSpec
    from chorus.simulate.debate.forced_choice import option_strings
    from chorus.serving import load_engine
    from chorus.simulate.debate.prompts import load_prompts

    from chorus.serving.engine import default_dtype

    eng = load_engine(a.profile, "hf", dtype=a.dtype or default_dtype())
    P = load_prompts()
    n_needed = max(a.contexts, a.batch)
    items, pairs = run_pairs(a.source_run, n_needed) if a.source_run else synthetic_pairs(n_needed)
    ctxs = kp.knockout_contexts(items, pairs, P)
    be, lm = eng.backend, ko.layer_map(eng)
    res: dict = {"machine": machine(), "profile": a.profile, "n_layers": lm.n_layers, "dtype": eng.dtype,
                 "contexts_source": a.source_run or "synthetic"}

    # (1) cost ratio on one batch
    bc = ctxs[:a.batch]
    opts = option_strings(bc[0]["meta"]["labels"])
    rows = ko.prepare_rows(eng, [c["full"] for c in bc], opts, [c["block"] for c in bc])
    seqs = [r.prompt for r in rows]
    readout = [(len(s) - 1, len(s)) for s in seqs]
    ko_rows = [ko.Row(r.prompt, r.options, r.span, frozenset(lm.maskable), "after") for r in rows]
    res["batch"] = {"rows": len(rows), "tokens_max": max(map(len, seqs)), "tokens_mean": statistics.mean(map(len, seqs))}

    def plain_last():
        be._last_logprobs(seqs)

    def route_last(route):
        return lambda: ko._forward(be, lm, ko_rows, seqs, readout, keep=1, route=route)

    one = rows[0]  # the sweep path: one context under every single-layer condition, prefix cache shared
    sweep_rows = [ko.Row(one.prompt, one.options, one.span, frozenset([L]), "after") for L in lm.maskable]

    def route_sweep(route):
        return lambda: ko.run_rows_shared_prefix(eng, sweep_rows, route)

    fns = {"plain": plain_last, "knockout_interface": route_last("interface"), "knockout_nnsight": route_last("nnsight"),
           "sweep_interface": route_sweep("interface"), "sweep_nnsight": route_sweep("nnsight")}
    med, times = interleaved_medians(fns, a.repeats)  # the warm-up builds nnsight's wrapper once
    res["forward_s_median"] = med
    res["forward_s_all"] = times
    res["ratio_interface_vs_plain"] = med["knockout_interface"] / med["plain"]
    res["ratio_nnsight_vs_plain"] = med["knockout_nnsight"] / med["plain"]
    res["nnsight_vs_interface"] = med["knockout_nnsight"] / med["knockout_interface"]
    res["sweep_nnsight_vs_interface"] = med["sweep_nnsight"] / med["sweep_interface"]
    a_lp, n_lp = route_last("interface")(), route_last("nnsight")()
    res["routes_bitwise_equal"] = bool(torch.equal(a_lp, n_lp)) and \
        ko.run_rows_shared_prefix(eng, sweep_rows, "interface") == ko.run_rows_shared_prefix(eng, sweep_rows, "nnsight")
    res["routes_max_abs_diff"] = float((a_lp.float() - n_lp.float().to(a_lp.device)).abs().max())
    print(json.dumps({k: res[k] for k in ("dtype", "forward_s_median", "ratio_interface_vs_plain", "ratio_nnsight_vs_plain",
                                          "nnsight_vs_interface", "sweep_nnsight_vs_interface", "routes_bitwise_equal",
                                          "routes_max_abs_diff")}, indent=2))

    # (2) full sweep
    if not a.skip_sweep:
        sc = ctxs[:a.contexts]
        conds, _ = kp.knockout_conditions(eng, KnockoutSpec(queries=["after", "decision"], sweep_queries=["after"]))
        eng.store = None
        t0 = time.perf_counter()
        table = kp.run_knockout_pairs(eng, sc, conds, route=a.route)
        wall = time.perf_counter() - t0
        s = kp.summarize_knockout(table, n_boot=200, seed=0, ci=0.95)
        res["sweep"] = {"route": a.route, "contexts": len(sc), "conditions": len(conds), "forward_rows": len(sc) * len(conds),
                        "wall_s": wall, "s_per_context": wall / len(sc),
                        "prompt_tokens_mean": float(statistics.mean(len(eng.render(c["full"]).ids) for c in sc)),
                        "all_layers": s.get("all_layers"), "message_effect": s.get("message_effect"),
                        "single": [(r["layer"], r["share_removed"]) for r in s["curves"] if r["kind"] == "single"],
                        "cumulative": [(r["layer"], r["share_removed"]) for r in s["curves"] if r["kind"] == "cumulative"]}
        print(json.dumps({k: v for k, v in res["sweep"].items() if k not in ("single", "cumulative")}, indent=2, default=float))
    if a.out:
        write_result(a.out, res)


if __name__ == "__main__":
    main()
