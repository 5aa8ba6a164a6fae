"""The BDA paper's tables and figures in the paper's order, rendered from one campaign numbers file
alone (``chorus paper bda CAMPAIGN``; ``chorus paper bda RUN... --out CAMPAIGN`` exports the campaign
first, ``chorus.simulate.council.campaign``): no number is computed here beyond arithmetic on the file's
own entries (means, differences), none is typed by hand, and every table names the cells it reads.
A section whose inputs the campaign lacks says so, under the same heading, and gives the command that
makes them. Each section renders its body from the page (``Paper``: the numbers and their helpers);
``SECTIONS`` holds them in the paper's order.

Writes ``CAMPAIGN/paper.md`` and ``CAMPAIGN/figures/*.png``."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from chorus.core.paper import Sections
from chorus.core.runs import amends_run
from chorus.simulate.council.campaign import read_numbers
from chorus.papers import bda_more
from chorus.papers.bda_parts import RUN_ATTACK, RUN_CLEAN, cell, each, missing, reads, sources, table
from chorus.papers.bda_parts import ci as paper_ci
from chorus.core.plots import save, subplots

COMMAND = "chorus paper bda"

HEADLINE = ("accuracy", "ece_ew", "brier")


def _ds_starts(u: dict) -> str | None:
    """The Dawid-Skene fit's starts in one cell: how many fixed points they reached and each start's
    log-likelihood (None for a campaign built before every fit ran its starts)."""
    if "starts" not in u:
        return None
    lls = ", ".join(f"{r['start']} {r['loglik']:.6f}" for r in u["starts"])
    return f"{u['fixed_points']} ({lls}; kept {u['start_kept']})"


# the cell, table, missing-line and sources helpers, shared with the report's later sections (bda_more.py)
_f, _table, _missing, _sources = cell, table, missing, sources


class Paper:
    """The page: the campaign's numbers, the helpers every section reads them with, and the parts written."""

    def __init__(self, numbers: dict[str, Any], root: Path):
        self.n = numbers
        self.root = root
        self.figs = root / "figures"
        self.parts: list[str] = []

    # helpers ---------------------------------------------------------------------------------
    def sec(self, name: str) -> dict[str, Any] | None:
        s = self.n["sections"].get(name)
        return None if s is None or "missing" in s else s

    def why(self, name: str) -> str:
        s = self.n["sections"].get(name)
        return "the section was not exported" if s is None else s.get("missing", "")

    def cells(self, *, attacked: bool | None = None, K: int | None = None, gt: int | None = None) -> list[str]:
        out = []
        for k, c in self.n["cells"].items():
            if attacked is not None and bool(c["adversaries"]) != attacked:
                continue
            if K is not None and c["K"] != K:
                continue
            if gt is not None and c["K"] <= gt:
                continue
            out.append(k)
        return out

    def metrics(self, key: str) -> dict[str, Any] | None:
        s = self.sec("cells")
        c = (s or {}).get("cells", {}).get(key)
        return None if c is None or "error" in c else c

    def add(self, title: str, body: str) -> None:
        self.parts.append(f"## {title}\n\n{body.strip()}\n")

    def fig(self, name: str, draw: Callable[[Any], None]) -> str:
        self.figs.mkdir(parents=True, exist_ok=True)
        fig, ax = subplots(figsize=(6.4, 4.2))
        draw(ax)
        fig.tight_layout()
        p = self.figs / f"{name}.png"
        save(fig, p)
        return f"![{name}](figures/{p.name})"

    def lead(self) -> str:
        """The paper's lead comparison before every table: on each council's clean binary pool (Table 2),
        each BDA variant's accuracy against plurality, the paired difference with its question- and
        seed-clustered intervals (each naming what it resamples), and where the numbers come from
        (``chorus.serving.standing``, recorded in the numbers file at export)."""
        st = self.n.get("standing")
        where = (f"Numbers from: {st['text']}." if isinstance(st, dict) and st.get("text") else
                 "Numbers from: not recorded (a campaign exported before chorus recorded its sources' standing; "
                 "export it again to have it said).")
        s = self.sec("pooled_binary")
        if not s:
            return f"## Headline\n\n{where}\n\n" + _missing(self.why("pooled_binary"), RUN_CLEAN) + "\n"
        rows = []
        for council, c in s["councils"].items():
            if "error" in c:
                rows.append([council, "-", None, None, f"not computed ({c['error']})", "-"])
                continue
            boots = [{(b["a"], b["metric"]): b for b in c.get(k) or []}
                     for k in ("bootstrap_clustered", "bootstrap_seed_clustered")]
            plur = c["metrics"].get("plurality", {}).get("accuracy")
            for m, v in c["metrics"].items():
                if m.startswith("bda"):
                    rows.append([council, m, v.get("accuracy"), plur] + [paper_ci(b.get((m, "accuracy"))) for b in boots])
        return (f"## Headline: BDA against plurality on the clean binary pool\n\n{where}\n\n"
                + _table(["council", "method", "accuracy", "plurality", "ΔAcc (question-clustered)",
                          "ΔAcc (seed-clustered)"], rows) + "\n")

    def render(self) -> str:
        for s in SECTIONS:
            key = s.spec.get("reads")
            if key is None:
                self.add(s.title, s.render(self))
            else:   # a section made from one exported section: said missing here when the campaign lacks it
                got = self.sec(key)
                self.add(s.title, s.render(self, got) if got else _missing(self.why(key), s.missing))
        srcs = "\n".join(f"- `{s['path']}`: council `{s['council']}` ({s['kind']}), seats {', '.join(s['seats'])}, "
                         f"{s['rounds']} rounds" + (f"; {s['standing']['kind']}" if s.get("standing") else "")
                         for s in self.n["sources"])
        o = self.n["options"]
        head = (f"# BDA paper report\n\nRendered by `{COMMAND}` from `numbers.json` alone "
                f"({self.n['schema']}); aggregation: {len(o['methods'])} methods, {o['outer_folds']} x "
                f"{o['inner_folds']} nested CV, seed {o['seed']}, protocol {o['protocol']}.\n\n{self.lead()}\n"
                f"Sources:\n{srcs}\n")
        return head + "\n" + "\n".join(self.parts)


# -- the sections, each a function of the page returning its body -----------------------------------
def table1(p: Paper) -> str:
    keys = [k for k in p.cells(attacked=True) if p.metrics(k)]
    if not keys:
        return _missing("no attacked cell with metrics (" + p.why("cells") + ")", RUN_ATTACK)
    methods = list(p.metrics(keys[0])["metrics"])
    clean = {k: k.rsplit("/", 1)[0] + "/clean" for k in keys}
    rows = [[m] + [p.metrics(k)["metrics"].get(m, {}).get("accuracy") for k in keys] for m in methods]
    refs = [[f"clean {m}"] + [(p.metrics(clean[k]) or {}).get("metrics", {}).get(m, {}).get("accuracy")
                              for k in keys] for m in ("plurality", "bda_per_agent")]
    return _table(["method"] + [k.split("/", 1)[1] for k in keys], rows + refs) + "\n\n" + _sources(keys)


@reads("pooled_binary", RUN_CLEAN)
def table2(p: Paper, s: dict) -> str:
    def one(council: str, c: dict) -> str:
        boot = {(b["a"], b["metric"]): b for b in c.get("bootstrap") or []}
        bc = {(b["a"], b["metric"]): b for b in c.get("bootstrap_clustered") or []}

        def ci(d, m):
            b = d.get((m, "accuracy"))
            return "-" if b is None else paper_ci(b)
        rows = [[m, v["accuracy"], v["ece_ew"], v.get("ece_em"), v["brier"], ci(boot, m), ci(bc, m)]
                for m, v in c["metrics"].items()]
        base = (p.sec("baselines") or {}).get("cells", {})
        for k in c["cells"]:
            for m, v in base.get(k, {}).items():
                rows.append([f"{m} ({k.split('/')[1]})", v.get("accuracy"), v.get("ece_ew"), None, v.get("brier"),
                             "-", "-"])
        return f"**{council}** ({c['n_traces']} trials)\n\n" + _table(
            ["method", "accuracy", "ECE ew", "ECE em", "Brier", "ΔAcc vs plurality (pooled CI)",
             "ΔAcc (question-clustered CI)"], rows) + "\n\n" + _sources(c["cells"])
    return "\n\n".join(each(s["councils"], one, lambda k: f"**{k}**"))


@reads("label_efficiency", RUN_CLEAN)
def fig3(p: Paper, s: dict) -> str:
    body, ok = [], {k: v for k, v in s["cells"].items() if "error" not in v}
    for k, v in s["cells"].items():
        if "error" in v:
            body.append(f"`{k}`: not computed ({v['error']}).")
    for k, v in ok.items():
        acc = v["curve"]["accuracy"]
        ece = {(r["budget"], r["method"]): r for r in v["curve"]["ece_ew"]}
        rows = [[r["method"], r["budget"], f"{r['mean']:.3f} ± {_f(r['sd'])}",
                 f"{ece[(r['budget'], r['method'])]['mean']:.3f}"] for r in acc]
        body.append(f"**{k}**\n\n" + _table(["method", "n labels", "accuracy (mean ± SD over seeds)",
                                              "ECE ew (mean)"], rows))
    if ok:
        k0, v0 = next(iter(ok.items()))

        def draw(ax):
            for m in sorted({r["method"] for r in v0["curve"]["accuracy"]}):
                pts = [(r["budget"], r["mean"]) for r in v0["curve"]["accuracy"] if r["method"] == m]
                ax.plot(*zip(*pts), marker="o", label=m)
            ax.set_xlabel("labels (n)")
            ax.set_ylabel("hold-out accuracy")
            ax.set_title(f"label efficiency, {k0}")
            ax.legend(fontsize=7)
        body.insert(0, p.fig("fig3_label_efficiency", draw))
    return "\n\n".join(body)


def fig4(p: Paper) -> str:
    keys = [k for k in p.cells(attacked=False, K=2) if p.metrics(k)]
    if not keys:
        return _missing("no clean K = 2 cell", RUN_CLEAN)
    pooled: dict[str, dict[int, list[float]]] = {}
    for k in keys:
        for m, r in p.metrics(k)["reliability"].items():
            for b, n, c, a in zip(r["bin"], r["count"], r["confidence"], r["accuracy"]):
                acc = pooled.setdefault(m, {}).setdefault(b, [0.0, 0.0, 0.0])
                acc[0] += n
                acc[1] += n * c
                acc[2] += n * a
    show = [m for m in ("bda_per_agent", "plurality", "bda_confusion", "stacker") if m in pooled]

    def draw(ax):
        ax.plot([0, 1], [0, 1], "k:", lw=1)
        for m in show:
            pts = sorted((v[1] / v[0], v[2] / v[0]) for v in pooled[m].values() if v[0])
            ax.plot(*zip(*pts), marker="o", label=m)
        ax.set_xlabel("predicted confidence")
        ax.set_ylabel("accuracy")
        ax.legend(fontsize=8)
        ax.set_title("pooled clean binary cells")
    return (p.fig("fig4_reliability", draw) + "\n\n" +
             _sources(keys))


def fig5(p: Paper) -> str:
    keys = [k for k in p.cells(attacked=False) if (p.metrics(k) or {}).get("metrics_by_seed")]
    if not keys:
        return (_missing(
            "no clean cell with two or more generation seeds", "chorus council run full --set gen_seeds=[0,1,2]"))
    rows, bars = [], {}
    for k in keys:
        by = p.metrics(k)["metrics_by_seed"]
        for sd, ms in by["seeds"].items():
            for m in ("plurality", "bda_per_agent", "bda_confusion"):
                if m in ms:
                    rows.append([k.split("/", 1)[1], sd, m, ms[m]["ece_ew"], ms[m]["ece_em"], ms[m]["accuracy"]])
                    bars.setdefault(m, []).append(ms[m]["ece_ew"])
    summ = []
    for k in keys:
        for m, v in p.metrics(k)["metrics_by_seed"]["across_seeds"].items():
            summ.append([k.split("/", 1)[1], m] + [f"{v[x]['mean']:.3f} ± {v[x]['sd']:.3f}" for x in HEADLINE])

    def draw(ax):
        w = 0.8 / max(1, len(bars))
        for j, (m, vals) in enumerate(bars.items()):
            ax.bar([i + j * w for i in range(len(vals))], vals, width=w, label=m)
        ax.set_ylabel("ECE (equal-width)")
        ax.set_xlabel("(dataset, seed) cell")
        ax.legend(fontsize=8)
    return (p.fig("fig5_ece_cells", draw) + "\n\n" +
             _table(["cell", "seed", "method", "ECE ew", "ECE em", "accuracy"], rows) + "\n\n" +
             _table(["cell", "method", "accuracy", "ECE ew", "Brier"], summ) + "\n\n" + _sources(keys))


@reads("table7", RUN_CLEAN)
def table7(p: Paper, s: dict) -> str:
    return "\n\n".join(each(s["councils"], lambda council, c: f"**{council}**\n\n" + _table(
        ["half", "arm", "prior", "pseudo-seats", "moves per seat", "accuracy", "ECE ew", "Brier"],
        [[r["half"], r["arm"], r["prior"], r["n_seats"], r["moves_per_seat"], r["accuracy"], r["ece_ew"],
          r["brier"]] for r in c["rows"]]) + "\n\n" + _sources(c["cells"]), lambda k: f"**{k}**"))


def transfer(p: Paper) -> str:
    body = []
    s = p.sec("lodo")
    if s:
        for g, v in s["groups"].items():
            if "error" in v:
                body.append(f"`{g}`: not computed ({v['error']}).")
                continue
            by = {}
            for r in v["rows"]:
                by.setdefault((r["held_out"], r["method"]), {})[r["evaluation"]] = r
            rows = [[h, m, e.get("transfer", {}).get("accuracy"), e.get("in_domain", {}).get("accuracy"),
                     e.get("transfer", {}).get("ece_ew"), e.get("in_domain", {}).get("ece_ew")]
                    for (h, m), e in sorted(by.items())]
            body.append(f"**{g}**, leave one dataset out\n\n" + _table(
                ["held out", "method", "acc. transfer", "acc. in domain", "ECE transfer", "ECE in domain"], rows))
    else:
        body.append(_missing(p.why("lodo"), "chorus council run full --out RUN (three binary datasets)"))
    t = p.sec("transfer")
    if t:
        for g, v in t.get("groups", {}).items():
            if "error" in v:
                body.append(f"`{g}` cross-domain: not computed ({v['error']}).")
                continue
            body.append(f"**{g}**, cross-domain transfer from {', '.join(v['sources'])}\n\n" + _table(
                ["method", "evaluation", "accuracy", "ECE ew", "Brier", "note"],
                [[r.get("method"), r.get("evaluation"), r.get("accuracy"), r.get("ece_ew"), r.get("brier"),
                  r.get("reason") or ""] for r in v["rows"]]))
    else:
        body.append("Cross-domain: " + _missing(p.why("transfer"), "chorus council run full (binary sets + pubmedqa)"))
    return "\n\n".join(body)


def table9(p: Paper) -> str:
    keys = [k for k in p.cells(attacked=False, gt=2) if p.metrics(k)]
    if not keys:
        return (_missing("no clean cell with K > 2",
                                                         "chorus council run full (pubmedqa, mmlu)"))
    methods = list(p.metrics(keys[0])["metrics"])
    rows = [[m] + [f"{p.metrics(k)['metrics'][m]['accuracy']:.3f} / {p.metrics(k)['metrics'][m]['ece_ew']:.3f}"
                   if m in p.metrics(k)["metrics"] else "-" for k in keys] for m in methods]
    return _table(["method"] + [k.split("/", 1)[1] for k in keys], rows) + "\n\n" + _sources(keys)


@reads("flips", RUN_CLEAN)
def fig6(p: Paper, s: dict) -> str:
    body, series = [], {}
    for council, c in s["councils"].items():
        body.append(f"**{council}**\n\n" + _table(
            ["K", "tasks", "fixed", "broken", "fix:break ratio", "acc. round 0", "acc. full"],
            [[r["K"], r["n_tasks"], r["fixed"], r["broken"], r["ratio"], r["accuracy_round0"], r["accuracy_full"]]
             for r in c["by_K"]]))
        series[council] = [(r["K"], r["ratio"]) for r in c["by_K"] if r["ratio"] is not None]

    def draw(ax):
        for name, pts in series.items():
            if pts:
                ax.plot(*zip(*pts), marker="o", label=name)
        ax.axhline(1.0, color="k", ls=":", lw=1)
        ax.set_xlabel("K (answer-set size)")
        ax.set_ylabel("fix : break ratio")
        ax.legend(fontsize=8)
    return p.fig("fig6_flips", draw) + "\n\n" + "\n\n".join(body)


@reads("truncation", RUN_ATTACK)
def table14(p: Paper, s: dict) -> str:
    rows = []
    for k, v in s["cells"].items():
        if "error" in v:
            rows.append([k.split("/", 1)[1], "not computed: " + v["error"], None, None, None])
            continue
        by = {(r["basis"], r["method"]): r["accuracy"] for r in v["metrics"]}
        d = {r["method"]: r for r in v["deltas"] if r["metric"] == "accuracy"}
        for m in ("bda_per_agent", "bda_confusion", "plurality", "stacker"):
            if ("full", m) in by:
                rows.append([k.split("/", 1)[1], m, by[("round0", m)], by[("full", m)],
                             paper_ci(d[m]) if m in d else "-"])
    return _table(["cell", "method", "acc. round 0", "acc. full", "full - round 0 (question-clustered CI)"], rows)


@reads("contagion", RUN_ATTACK)
def contagion(p: Paper, s: dict) -> str:
    rows = [[k.split("/", 1)[1], v.get("flip_rate"), v.get("flip_rate_when_challenged"),
             v.get("nominal_corrupted_fraction"), v.get("effective_corrupted_fraction")] if "error" not in v
            else [k.split("/", 1)[1], "not computed: " + v["error"], None, None, None]
            for k, v in s["cells"].items()]
    return _table(["cell", "flip rate", "flip rate when challenged", "nominal", "effective"], rows)


@reads("switch", RUN_ATTACK)
def switch(p: Paper, s: dict) -> str:
    rows = []
    for k, v in s["cells"].items():
        if "error" in v:
            rows.append([k.split("/", 1)[1], "not computed: " + v["error"], None, None, None])
            continue
        u = v["unsupervised"]
        cv = v["cross_validated"]
        rows.append([k.split("/", 1)[1], u.get("ds_em", {}).get("accuracy"), u.get("ds_em_spectral", {}).get("accuracy"),
                     u.get("ds_em", {}).get("mirror_accuracy"), cv.get("bda_per_agent", {}).get("accuracy"),
                     _ds_starts(u.get("ds_em", {}))])
    return (_table(["cell", "DS (majority start)", "DS (spectral start)", "mirror", "BDA per-agent (CV)",
                     "DS starts: fixed points (log-lik)"], rows))


def drift(p: Paper) -> str:
    body = []
    for name, title in (("shift", "policy shift between fits"), ("drift", "row-drift detector")):
        s = p.sec(name)
        if not s:
            body.append(f"{title}: " + _missing(p.why(name), RUN_ATTACK))
            continue
        for g, v in s.get("groups", s.get("cells", {})).items():
            if "error" in v:
                body.append(f"`{g}` {title}: not computed ({v['error']}).")
            elif v.get("rows"):
                body.append(f"**{g}**, {title}\n\n" + _table(list(v["rows"][0]), [list(r.values()) for r in v["rows"]]))
    return "\n\n".join(body)


@reads("inventory", RUN_CLEAN)
def seats(p: Paper, s: dict) -> str:
    rows = []
    for k, v in s["cells"].items():
        m = (p.metrics(k) or {}).get("metrics", {})
        sw = v.get("swapped") or {}
        seat = lambda a: f"{a}={sw[a].get('profile')}" if a in sw else a  # noqa: E731 -- a swapped seat names its stand-in
        rows.append([k.split("/", 1)[1], ", ".join(f"{seat(a)} {_f(r)}" for a, r in v["round0_accuracy_by_seat"].items()),
                     m.get("plurality", {}).get("accuracy"), m.get("bda_per_agent", {}).get("accuracy"),
                     m.get("bda_confusion", {}).get("accuracy"), m.get("bda_confusion", {}).get("ece_ew")])
    return ("Each seat's measured round-0 accuracy r beside the aggregators, per cell (a swap condition is a cell).\n\n" +
             _table(["cell", "seat r (round 0)", "plurality", "BDA per-agent", "BDA confusion", "confusion ECE"], rows))


@reads("inventory", RUN_CLEAN)
def inventory(p: Paper, s: dict) -> str:
    rows = [[k.split("/", 1)[1], v["n_traces"], v["n_questions"], ",".join(v["gen_seeds"]) or "-",
             ", ".join(f"{f} {n}" for f, n in v["moves_by_force"].items()), v["move_parse_rate"],
             v["plurality_accuracy"], v["plurality_ece_ew"]] for k, v in s["cells"].items()]
    return (_table(["cell", "traces", "questions", "seeds", "moves by force", "parse rate", "majority acc.",
                     "majority ECE"], rows) +
             "\n\nRe-derived from the stores by `chorus council campaign-verify CAMPAIGN` (tolerance 1.5e-3).")


@reads("baselines", RUN_ATTACK)
def fig2(p: Paper, b: dict) -> str:
    rows = []
    for k, ms in sorted(b["cells"].items()):
        for m, v in sorted(ms.items()):
            rows.append([k.split("/", 1)[1], m, v.get("accuracy"), v.get("ece_ew"), v.get("parse_rate")])
    return _table(["cell", "method", "accuracy", "ECE ew", "parse rate"], rows)


def table4(p: Paper) -> str:
    rows = [[m, d] for m, d in (p.n.get("methods") or {}).items()]
    return _table(["method", "what it reads and fits"], rows)


def table5(p: Paper) -> str:
    inv = (p.sec("inventory") or {}).get("cells", {})
    base = (p.sec("baselines") or {}).get("cells", {})
    rows = [[k.split("/", 1)[1], v.get("move_parse_rate")] + [base.get(k, {}).get(m, {}).get("parse_rate")
                                                             for m in ("moa", "moa_lite", "self_moa", "argllms")]
            for k, v in inv.items()]
    if not rows:
        return _missing(p.why("inventory"), RUN_CLEAN)
    return _table(["cell", "council moves", "MoA", "MoA-Lite", "Self-MoA", "ArgLLMs"], rows)


def table10(p: Paper) -> str:
    rows = []
    for k in p.cells(attacked=None):
        c = p.metrics(k)
        if not c:
            continue
        hp = {}
        for f in c.get("folds") or []:
            for h in ("hp_lambda", "hp_tau"):
                if h in f and f[h] is not None:
                    hp.setdefault((f["method"], h), []).append(f[h])

        def mean(m, h):
            v = hp.get((m, h))
            return sum(v) / len(v) if v else None
        m = c["metrics"]
        rows.append([k.split("/", 1)[1], mean("bda_confusion", "hp_lambda"), mean("bda_confusion", "hp_tau"),
                     mean("bda_tempered", "hp_tau")] +
                    [m.get(a, {}).get(x) for a in ("bda_per_agent", "bda_tempered", "bda_confusion")
                     for x in ("accuracy", "ece_ew")])
    if not rows:
        return _missing(p.why("cells"), RUN_CLEAN)
    return (_table(["cell", "confusion lambda", "confusion tau", "tempered one-coin tau", "one-coin acc.",
                     "one-coin ECE", "tempered acc.", "tempered ECE", "confusion acc.", "confusion ECE"], rows))


@reads("sweeps", "chorus aggregate sweep sweep_dose --out DOSE; chorus aggregate sweep sweep_sleeper "
                                "--out SLEEPER; then chorus paper bda RUN... --out CAMPAIGN --sweep DOSE --sweep SLEEPER")
def sweeps(p: Paper, s: dict) -> str:
    body = []
    for path, r in s["runs"].items():
        if "error" in r:
            body.append(f"`{path}`: {r['error']}")
            continue
        methods = list(r["cells"][0]["metrics"]) if r["cells"] else []
        keys = [k for k in r["cells"][0]["params"] if k != "n_calibration"] if r["cells"] else []
        body.append(f"**{r['kind']}** (`{path}`, results.json sha256 {r['sha256'][:12]}; regenerate: "
                    f"`{r['regenerate']}`)\n\n" + _table(keys + [f"{m} acc." for m in methods],
                                                           [[c["params"].get(k) for k in keys] +
                                                            [c["metrics"][m]["accuracy"] for m in methods]
                                                            for c in r["cells"]]))
        if r["kind"] == "sleeper" and r["cells"]:
            def draw(ax, r=r, methods=methods):
                for m in methods:
                    ax.plot([c["params"]["f"] for c in r["cells"]], [c["metrics"][m]["accuracy"] for c in r["cells"]],
                            marker="o", label=m)
                ax.set_xlabel("f (share of the calibration window already turned)")
                ax.set_ylabel("deployment accuracy")
                ax.legend(fontsize=8)
            body.append(p.fig("fig7_sleeper", draw))
    return "\n\n".join(body)


def table13(p: Paper) -> str:
    keys = [k for k in p.cells(attacked=True) if p.metrics(k)]
    if not keys:
        return _missing("no attacked cell", RUN_ATTACK)
    methods = [m for m in p.metrics(keys[0])["metrics"] if "+iso" not in m]
    return (_table(["method"] + [k.split("/", 1)[1] for k in keys],
                    [[m] + [p.metrics(k)["metrics"].get(m, {}).get("ece_ew") for k in keys] for m in methods]))


def table15(p: Paper) -> str:
    rows = []
    for k in p.n["cells"]:
        c = p.metrics(k)
        if not c or not any("+iso" in m for m in c["metrics"]):
            continue
        for m in [m for m in c["metrics"] if m.endswith("+iso")]:
            base = m[:-4]
            rows.append([k.split("/", 1)[1], base, c["metrics"].get(base, {}).get("accuracy"),
                         c["metrics"].get(base, {}).get("ece_ew"), c["metrics"][m]["accuracy"], c["metrics"][m]["ece_ew"]])
    if not rows:
        return _missing("no cell with recalibrated arms", RUN_CLEAN)
    return _table(["cell", "arm", "acc.", "ECE", "acc. +iso", "ECE +iso"], rows)


# the paper's order, with each section's heading (the same whether its inputs are there or missing)
SECTIONS = Sections()
for _key, _title, _render in (
        ("table1", "Table 1: accuracy under the live stealth coalition", table1),
        ("seed_clustered", "§7: seed-clustered intervals (generation seeds x questions resampled) beside "
                           "question-clustered ones", bda_more.seed_clustered),
        ("fig2", "Figure 2: the fair attack (the role inside each method's own generation), LLM baselines per cell",
         fig2),
        ("table2", "Table 2: clean binary results (every method, one label budget, same folds)", table2),
        ("composition", "Tables 3-8: the bench they read (datasets, K, questions, seeds, trials) and the truncation "
                        "rate", bda_more.composition),
        ("fig3", "Figure 3 / Table 11: label efficiency (disjoint calibrate / hold-out, seeds)", fig3),
        ("table4", "Table 4: every method of this campaign", table4),
        ("table5", "Table 5: parse rates (council moves; the LLM baselines' answers)", table5),
        ("inventory", "Appendix D.7: move inventory, trace counts and the drift guard's subset", inventory),
        ("fig4", "Figure 4: reliability diagram, pooled clean binary", fig4),
        ("fig5", "Figure 5 / Table 6: calibration per (dataset, seed) cell; mean ± SD across seeds", fig5),
        ("table7", "Table 7: reliability-key (fixed prior) and reliability-estimator (inner CV) ablations", table7),
        ("transfer", "Transfer (App. E.2 / E.4): leave one dataset out; cross-domain", transfer),
        ("fig6", "Figure 6 / Table 8: decision flips, round 0 vs full trace (neutral prior)", fig6),
        ("rounds", "Table 8: accuracy and calibration by the last round read (leak-free refit per round)",
         bda_more.rounds),
        ("table9", "Table 9: clean K > 2 (accuracy / ECE ew)", table9),
        ("table10", "Table 10: the confusion's CV-selected lambda and tau (mean over folds); the CV-tempered "
                    "one-coin control", table10),
        ("sweeps", "Table 12 / Figure 7: synthetic dose-response and the sleeper axis (embedded sweep runs)", sweeps),
        ("table13", "Table 13: calibration under the live attack (ECE ew)", table13),
        ("table14", "Table 14: round-0-truncated vs full trace under attack (leak-free refit per basis)", table14),
        ("table15", "Table 15: leak-free isotonic recalibration (accuracy and ECE ew, raw vs recalibrated)", table15),
        ("switch", "Appendix F.10: K = 2 label switching (unsupervised Dawid-Skene vs its mirror vs supervised BDA)",
         switch),
        ("permutation", "Appendix F.11: per-task label permutation (each method refitted on relabelled traces)",
         bda_more.permutation),
        ("contagion", "Appendix G: contagion (genuine seats flipped; effective vs nominal corrupted fraction)",
         contagion),
        ("drift", "§8 / App. F: policy shift and row drift", drift),
        ("seats", "Seat reliabilities per condition (swap-in seats, App. F: weak and near-chance seats)", seats),
        ("c8", "Appendix C.8: numerical checks (implementation against closed forms)", bda_more.c8)):
    _reads, _command = getattr(_render, "reads", (None, ""))
    SECTIONS.add(_key, _title, render=_render, missing=_command, **({"reads": _reads} if _reads else {}))


@amends_run(exempt=("paper.md", "figures/"))   # into the sealed campaign: held, checked, its record renewed
def render_paper(campaign: str | Path) -> Path:
    root = Path(campaign)
    numbers = read_numbers(root)
    p = root / "paper.md"
    p.write_text(Paper(numbers, root).render())
    return p
