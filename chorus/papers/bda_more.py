"""The BDA paper report's sections added for its last items (``bda.py`` lays each out with its ``Paper``, in
the paper's order): §7's seed-clustered intervals, Tables 3-8's bench composition and truncation rate,
Table 8's per-round refit, App. F.11's label-permutation control and App. C.8's numerical checks. Each
reads only the campaign numbers file (no number beyond a difference of two of its entries) and names the
cells, or the command, its numbers come from."""
from __future__ import annotations

from typing import Any

from chorus.papers.bda_parts import RUN_CLEAN, ci, each, missing, reads, sources, table

RUN_SEEDS = "chorus council run full --set 'gen_seeds=[0,1,2]' --out RUN"
C8_COMMAND = "chorus aggregate c8 TRACES..."


def _units(b: dict[str, Any]) -> str:
    """What a bootstrap row resampled, from its own record."""
    if b.get("seed_clustered"):
        return f"{b['n_seeds']} seeds x {b['n_clusters']} questions"
    return f"{b['n_clusters']} questions" if b.get("clustered") else f"{b['n_clusters']} tasks"


def seed_clustered(p) -> str:
    """Per cell (and per council's clean binary pool): each accuracy difference with its question-clustered
    and its seed-clustered interval side by side (the second resamples generation seeds too, and is wider)."""
    blocks: list[tuple[str, dict[str, Any]]] = [(k, c) for k in p.n["cells"] if (c := p.metrics(k))]
    pooled = (p.sec("pooled_binary") or {}).get("councils", {})
    blocks += [(f"{council} clean binary pool", c) for council, c in pooled.items() if "error" not in c]
    rows = []
    for name, c in blocks:
        seeded = [b for b in c.get("bootstrap_seed_clustered") or [] if b["metric"] == "accuracy"]
        qc = {(b["a"], b["b"]): b for b in c.get("bootstrap_clustered") or [] if b["metric"] == "accuracy"}
        for b in seeded:
            q = qc.get((b["a"], b["b"]))
            rows.append([name, f"{b['a']} - {b['b']}", b["delta"], ci(q), _units(q) if q else "-", ci(b), _units(b)])
    if not rows:
        why = "no cell with two or more generation seeds (or a campaign exported before the seed-clustered interval)"
        return missing(why, RUN_SEEDS)
    return ("Accuracy differences; each interval names what it resampled.\n\n" + table(
        ["cell", "difference", "Δ accuracy", "question-clustered CI", "resampled", "seed-clustered CI", "resampled"],
        rows))


@reads("c8", RUN_CLEAN)
def c8(p, s: dict) -> str:
    body = []
    for council, c in s["councils"].items():
        sym = c["symmetric"]
        Ks = sorted({r["K"] for r in sym["rows"]})
        post = {(r["N"], r["K"]): r["posterior"] for r in sym["rows"]}
        grid = [[N] + [f"{post[(N, K)]:.4f}" for K in Ks] for N in sorted({r["N"] for r in sym["rows"]})]
        k3 = c["k_minus_1"]["K3"]
        inv = c["invariance"]
        ce = c["ceiling"]
        checks = [
            ["Beta(1, 1), N unanimous seats: K = 2 pinned at 1/2, K > 2 concentrating", sym["max_abs_diff"], sym["holds"]],
            ["(K - 1) factor, K = 3 reference trace: " + ", ".join(f"{x:.3f}" for x in k3["posterior"]) +
             " (without the factor " + ", ".join(f"{x:.3f}" for x in k3["without_factor"]) + "); K = 2 the same",
             c["k_minus_1"]["max_abs_diff"], c["k_minus_1"]["holds"]],
            [f"confidence invariance: {sum(g['moves_rewritten'] for g in inv['groups'])} confidences permuted across "
             f"{sum(g['n_traces'] for g in inv['groups'])} traces, one-coin refitted", inv["max_abs_diff"], inv["holds"]],
            [f"K = 2 ceiling {ce['ceiling']:.4f} (Beta({ce['prior'][0]:g}, {ce['prior'][1]:g}), theta* = {ce['theta']:g}, "
             f"{ce['seats']} seats): " + ", ".join(f"N={r['N']} {r['posterior']:.3f}" for r in ce["rows"]),
             ce["max_abs_diff"], ce["holds"]],
            [f"weighted-majority form, {c['weighted_majority']['instances']} random single-endorsement instances",
             c["weighted_majority"]["max_abs_diff"], c["weighted_majority"]["holds"]]]
        body.append(f"**{council}** (every check {'holds' if c['holds'] else 'does NOT hold'})\n\n" +
                    table(["N"] + [f"K = {K}" for K in Ks], grid) + "\n\n" +
                    table(["check", "max |implemented - closed form|", "holds"],
                          [[t, f"{d:.2g}", "yes" if h else "NO"] for t, d, h in checks]) +
                    "\n\n" + sources(c["cells"]))
    return f"Reproduce with `{C8_COMMAND}` over the same trace files.\n\n" + "\n\n".join(body)


@reads("composition", RUN_CLEAN)
def composition(p, s: dict) -> str:
    rows = []
    for k, v in s["cells"].items():
        t = v["truncation"]
        rows.append([k.split("/", 1)[1], v["K"], v["n_questions"], ",".join(v["gen_seeds"]) or "-", v["n_traces"],
                     v["n_labelled"], v["rounds"], t.get("n_generations"), t.get("n_truncated"),
                     t.get("truncation_rate") if "missing" not in t else "not recorded"])
    notes = sorted({v["truncation"]["missing"] for v in s["cells"].values() if "missing" in v["truncation"]})
    return (table(["cell", "K", "questions", "seeds", "trials", "labelled", "rounds", "generations",
                        "truncated", "truncation rate"], rows) +
          "".join(f"\n\nNot recorded: {n}." for n in notes) +
          "\n\nThe truncation rate counts every generation the council runner made (retries included) that stopped "
          "at the token limit.")


@reads("rounds", RUN_CLEAN)
def rounds(p, s: dict) -> str:
    def one(k: str, v: dict) -> str:
        d = {(r["method"], r["max_round"]): r for r in v["deltas"] if r["metric"] == "accuracy"}
        rows = [[r["method"], r["max_round"], r["accuracy"], r["ece_ew"], r["brier"], ci(d.get((r["method"], r["max_round"])))]
                for r in v["metrics"]]
        last = max(r["max_round"] for r in v["metrics"])
        return f"**{k}**\n\n" + table(["method", "rounds read (0..r)", "accuracy", "ECE ew", "Brier",
                                        f"Δ acc., round {last} - r (question-clustered CI)"], rows)
    return "\n\n".join(each(s["cells"], one))


@reads("permutation", "chorus council run full --out RUN  (attacked conditions)")
def permutation(p, s: dict) -> str:
    rows = []
    for k, v in s["cells"].items():
        if "error" in v:
            rows.append([k.split("/", 1)[1], "not computed: " + v["error"], None, None, None])
            continue
        orig = (p.metrics(k) or {}).get("metrics", {})
        for m, x in v["metrics"].items():
            a = orig.get(m, {}).get("accuracy")
            rows.append([k.split("/", 1)[1], m, a, x["accuracy"], None if a is None else a - x["accuracy"]])
    return ("What a method keeps under the relabelling it wins from the trace's structure; what it loses "
                 "came from cross-task label identity.\n\n" +
          table(["cell", "method", "acc. as labelled", "acc. permuted", "as labelled - permuted"], rows))
