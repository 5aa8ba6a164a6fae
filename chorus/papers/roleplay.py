"""The DEBATE paper's tables and figures in the paper's order, from stored runs (``chorus paper roleplay
RUN... --out DIR``): ``DIR/numbers.json`` (each section's rows read from the runs' ``summary.json`` or
output files, every row naming its run and that file's sha256) and ``DIR/paper.md`` rendered from it
alone, the runs' figures copied beside it. No model call, nothing recomputed that a run computed:
statistics and Fig. 12 from ``across_runs.analyse`` (or a ``roleplay stats`` output), the mechanism probes
from ``mechanism_probes.analyse`` (or a ``roleplay probes`` output), annotator robustness from a ``roleplay
annotators`` output. A section without its runs names the command that makes them. Inputs are
recognised by ``provenance.json`` ``part``: roleplay (``run``/``eval``; summary with ``cells``), sft
(its ``compare_run`` read too), roleplay-annotators, roleplay-stats, roleplay-probes."""
from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from chorus.core.paper import PaperError, Sections, fmt, md_table, render_sections, run_plots, write_paper
from chorus.core.runs import file_sha256, json_safe
from chorus.serving.standing import standing

SCHEMA = "chorus.roleplay-paper/1"
COMMAND = "chorus paper roleplay"
OWN_FILE = {"roleplay": "summary.json", "sft": "summary.json", "roleplay-annotators": "annotators.json",
            "roleplay-stats": "stats.json", "roleplay-probes": "probes.json"}
# the analyses (chorus.core.analyses) whose runs a paper reads, by the kind the sections ask for; their
# record is summary.json (an output of an earlier chorus, part roleplay-stats / -probes, is read as before)
ANALYSIS_KIND = {"roleplay stats": "roleplay-stats", "roleplay probes": "roleplay-probes",
                 "roleplay annotators": "roleplay-annotators"}
SETUP_NAMES = {"full_dynamics": "Full Dynamics Simulation", "next_message": "Next Message Prediction",
               "rollout": "DeGroot rollout", "human": "human"}
STANCE = ("single_error", "update_error", "convergence_error", "delta_sd", "delta_pairwise", "delta_range",
          "partner_gap_spearman")
TEXT = ("rouge_l", "semantic_similarity", "length_deviation", "on_topic_rate")


@dataclass
class Ctx:
    runs: list[dict[str, Any]]
    cache: dict[str, Any] = field(default_factory=dict)

    def of(self, part: str) -> list[dict[str, Any]]:
        return [r for r in self.runs if r["part"] == part]

    @property
    def data(self) -> str:   # the data file for a missing run's command
        rp = self.of("roleplay")
        p = rp[0]["config"].get("data", {}).get("path") if rp else None
        return f" --set data.path={p or 'groups.jsonl'}"


def _read_run(path: Path) -> dict[str, Any]:
    if not path.is_dir():
        raise PaperError(f"{path}: not a run directory")
    pp = path / "provenance.json"
    prov = json.loads(pp.read_text()) if pp.is_file() else {}
    part = ANALYSIS_KIND.get(prov.get("analysis"), prov.get("part"))
    if part not in OWN_FILE:
        raise PaperError(f"{path}: not a roleplay, SFT, annotators, stats or probes output (provenance part {part!r})")
    name = "summary.json" if prov.get("analysis") in ANALYSIS_KIND else OWN_FILE[part]
    f = path / name
    if not f.is_file():
        raise PaperError(f"{path}: no {name} (finish the run, or rebuild a roleplay run's summary with "
                         f"chorus roleplay recompute {path})")
    data = json.loads(f.read_text())
    if part == "roleplay" and "cells" not in data:
        raise PaperError(f"{path}: summary.json holds no cells (rebuild it with chorus roleplay recompute {path})")
    cfg = {}
    if (path / "config.yaml").is_file():
        import yaml
        cfg = yaml.safe_load((path / "config.yaml").read_text()) or {}
    return {"path": str(path), "part": part, "file": name, "sha256": file_sha256(f), "data": data,
            "config": cfg, "plots": run_plots(path)}


def read_runs(run_dirs: Sequence[str | Path]) -> list[dict[str, Any]]:
    """Every input read and recognised; an SFT run's comparison run is added when not given."""
    if not run_dirs:
        raise PaperError("no run directory given")
    runs = [_read_run(Path(p).resolve()) for p in run_dirs]
    have = {r["path"] for r in runs}
    for r in list(runs):
        cmp_ = r["data"].get("compare_run") if r["part"] == "sft" else None
        if cmp_ and str(Path(cmp_).resolve()) not in have and Path(cmp_).is_dir():
            runs.append(_read_run(Path(cmp_).resolve()) | {"via": r["path"]})
            have.add(runs[-1]["path"])
    return runs


def _src(r: dict) -> dict[str, Any]:
    return {"run": r["path"], "file": r["file"], "summary_sha256": r["sha256"]}


def _miss(what: str, command: str) -> dict[str, str]:
    return {"missing": what, "command": command}


SECTIONS = Sections()


def section(key: str, title: str, needs_roleplay: bool = False, **cols: list[str]):
    """Register a section (in the paper's order) whose export reads the paper's inputs (``Ctx``), with the
    columns paper.md shows of each of its tables; ``needs_roleplay``: without a roleplay run the section
    names the command that makes one."""
    def wrap(fn):
        SECTIONS.add(key, title, export=lambda c: _miss("a roleplay run", f"chorus roleplay run default{c.data}")
                     if needs_roleplay and not c.of("roleplay") else fn(c), cols=cols)
        return fn
    return wrap


def _cell_rows(r: dict, metrics: Sequence[str]) -> list[dict[str, Any]]:
    s = r["data"]
    split = f"{s['split']['kind']}/{s['split']['part']}"
    rows = [{**_src(r), "split": split, "model": "human", "profile": None, "setup": "human", "channel": ch,
             **{m: h.get(m) for m in metrics if m in h}} for ch, h in s.get("human", {}).items()]
    for key, c in s["cells"].items():
        src, setup, ch = key.split("/")
        rows.append({**_src(r), "split": split, "model": src, "profile": s.get("models", {}).get(src),
                     "setup": SETUP_NAMES.get(setup, setup), "channel": ch, **{m: c.get(m) for m in metrics},
                     "human_delta_sd": s.get("human", {}).get(ch, {}).get("delta_sd")})
    return rows


def _figs(runs: list[dict], *names: str) -> list[list[str]]:
    return [[r["path"], p] for r in runs for p in r["plots"] if Path(p).stem in names]


@section("table1_splits", "Table 1: evaluated groups per split and the golden-group mask", True,
         rows=["run", "split", "n_groups", "n_train_groups", "n_excluded", "n_topics", "synthetic_data"])
def _splits(c: Ctx) -> dict[str, Any]:
    return {"rows": [{**_src(r), "split": f"{r['data']['split']['kind']}/{r['data']['split']['part']}",
                      "n_groups": r["data"].get("n_groups"), "n_train_groups": r["data"].get("n_train_groups"),
                      "n_excluded": r["data"].get("mask", {}).get("n_excluded"), "n_topics": len(r["data"].get("topics", [])),
                      "synthetic_data": r["data"].get("synthetic_data")} for r in c.of("roleplay")]}


def _split_gaps(c: Ctx) -> list[dict[str, str]]:
    have = {r["data"]["split"]["kind"] for r in c.of("roleplay")}
    return [_miss(f"no run of the {sp} split", f"chorus roleplay run {'topic' if sp == 'topic' else 'default'}{c.data}")
            for sp in ("group", "topic") if sp not in have]


@section("stance_fidelity", "Stance fidelity per model x setup x split against humans (Figs. 2, 11, 13-17)", True,
         rows=["run", "split", "model", "setup", "channel", *STANCE, "human_delta_sd"])
def _stance(c: Ctx) -> dict[str, Any]:
    rp = c.of("roleplay")
    return {"rows": [x for r in rp for x in _cell_rows(r, STANCE)], "also_missing": _split_gaps(c),
            "figures": _figs(rp, "convergence", "sd_trajectories", "endpoint_distributions")}


@section("degroot", "DeGroot baseline: alpha fitted on the training split's human stances",
         rows=["run", "split", "alpha", "sse", "n_groups", "n_obs", "skipped"])
def _degroot(c: Ctx) -> dict[str, Any]:
    rows = [{**_src(r), "split": r["data"]["split"]["kind"], **r["data"]["degroot"]}
            for r in c.of("roleplay") if r["data"].get("degroot")]
    return {"rows": rows} if rows else _miss("a roleplay run with a DeGroot fit",
                                             f"chorus roleplay run default{c.data} --set analysis.degroot=true")


@section("sft_comparison", "Post-training: base vs SFT vs human (Fig. 2 group split, Fig. 11 topic split)",
         training=["run", "split", "base_profile", "lora", "n_examples", "global_steps", "first_loss", "last_loss",
                   "compare_run"],
         rows=["run", "split", "setup", "channel", "metric", "human", "base", "sft"])
def _sft(c: Ctx) -> dict[str, Any]:
    train = [{**_src(r), **{k: r["data"].get(k) for k in ("split", "base_profile", "lora", "n_examples", "global_steps",
                                                        "first_loss", "last_loss", "compare_run")}} for r in c.of("sft")]
    cmp_ = [r for r in c.of("roleplay") if {"base", "sft"} <= set(r["data"].get("models", {}))]
    rows = []
    for r in cmp_:
        s = r["data"]
        for setup in s.get("setups", []):
            for ch in ("public", "private"):
                for m in STANCE + TEXT:
                    rows.append({**_src(r), "split": s["split"]["kind"], "setup": SETUP_NAMES.get(setup, setup),
                                 "channel": ch, "metric": m, "human": s["human"].get(ch, {}).get(m),
                                 **{lab: s["cells"].get(f"{lab}/{setup}/{ch}", {}).get(m) for lab in ("base", "sft")}})
    if not train and not rows:
        return _miss("an SFT run with its base-vs-SFT comparison", f"chorus sft train default{c.data} --set "
                     "base.profile=PROFILE (compare: default; --set data.split=topic for Fig. 11)")
    out: dict[str, Any] = {"training": train, "rows": rows}
    have = {x["split"] for x in rows}
    out["also_missing"] = [_miss(f"no base-vs-SFT comparison of the {sp} split", f"chorus sft train default{c.data} "
                                 f"--set data.split={sp} --set base.profile=PROFILE") for sp in ("group", "topic")
                           if sp not in have]
    out["figures"] = _figs(cmp_, "convergence", "sd_trajectories")
    return out


@section("beyond_stance", "Beyond stance: ROUGE-L, embedding similarity, length deviation, on-topic rate (Figs. 9, 10)", True,
         rows=["run", "split", "model", "setup", "channel", *TEXT])
def _text(c: Ctx) -> dict[str, Any]:
    return {"rows": [x for r in c.of("roleplay") for x in _cell_rows(r, TEXT)], "also_missing": _split_gaps(c)}


@section("annotators", "Annotator robustness: a second LLM judge",
         rows=["run", "annotated_run", "run_classifier", "classifier", "stance_kappa", "stance_kappa_quadratic",
               "stance_n", "on_topic_kappa", "on_topic_n"],
         headline=["run", "classifier", "metric", "value"])
def _annot(c: Ctx) -> dict[str, Any]:
    an = c.of("roleplay-annotators")
    if not an:
        rp = c.of("roleplay")
        return _miss("an annotators output", f"chorus roleplay annotators {rp[0]['path'] if rp else 'RUN'} "
                                             "-m PROFILE")
    rows = [{**_src(r), "annotated_run": r["data"]["run"], "run_classifier": r["data"]["run_classifier"],
             "classifier": p, **{f"{t}_{k}": ag[t].get(k) for t in ("stance", "on_topic") for k in ("kappa", "n")},
             "stance_kappa_quadratic": ag["stance"].get("kappa_quadratic")}
            for r in an for p, ag in r["data"]["agreement"].items()]
    head = [{**_src(r), "classifier": p, "metric": k, "value": v} for r in an
            for p, h in r["data"]["headline"].items() for k, v in h.items() if k.endswith("/delta_sd")]
    return {"rows": rows, "headline": head, "figures": _figs(an, "annotators")}


def _stamp(rows: list[dict], c: Ctx) -> list[dict]:
    """Each row's run(s) with the sha256 of the summary it was computed from."""
    sha = {r["path"]: r["sha256"] for r in c.runs}

    def of(p: str) -> str | None:
        f = Path(p) / "summary.json"
        return sha.get(p) or (file_sha256(f) if f.is_file() else None)
    for x in rows:
        if isinstance(x.get("run"), str):
            x["summary_sha256"] = of(x["run"])
        if isinstance(x.get("runs"), list):
            x["summary_sha256"] = [of(p) for p in x["runs"]]
    return rows


def _tables(s: dict, c: Ctx, keys: Sequence[str], also: list[dict], **extra: Any) -> dict[str, Any]:
    """A stats/probes result's tables, stamped, with what it says is missing (or its own missing line)."""
    if isinstance(s.get("missing"), str):
        return s
    return {**{k: _stamp(s.get(k, []), c) for k in keys}, **({"source": s["source"]} if "source" in s else {}),
            "also_missing": also, "figures": s.get("figures", []), **extra}


def _given(c: Ctx, part: str, fig: str) -> dict[str, Any] | None:
    """A stats or probes output among the inputs: its own file, read as it is."""
    g = c.of(part)
    return {**g[0]["data"], "source": _src(g[0]), "figures": _figs(g[:1], fig)} if g else None


def _plain(c: Ctx) -> list[dict]:
    """Roleplay runs at full memory and the first such run's temperature (what stats may pool)."""
    rp = [r for r in c.of("roleplay") if not r["config"].get("memory", {}).get("ablate")]
    t = rp[0]["config"].get("generation", {}).get("temperature") if rp else None
    return [r for r in rp if r["config"].get("generation", {}).get("temperature") == t]


def _probe_runs(c: Ctx, P: Any) -> list[str]:
    """The baseline (the first plain run) and each run differing from it only in a probed field, one per cell."""
    base = P.load_probe_run(_plain(c)[0]["path"])
    paths, cells = [str(base.path)], {(base.temperature, tuple(sorted(base.ablate)))}
    for r in [r for r in c.of("roleplay") if r["path"] not in paths]:
        try:
            pr = P.load_probe_run(r["path"])
        except P.ProbesInputError:
            continue
        key = (pr.temperature, tuple(sorted(pr.ablate)))
        if key not in cells and all(d.startswith(tuple(f"{v}:" for v in P.VARIED)) for d in P.differences(base, pr)):
            paths.append(r["path"])
            cells.add(key)
    return paths


PROBE_COLS = ["run", "condition", "source", "setup", "tweet_delta_sd", "private_delta_sd", "human_tweet_delta_sd",
              "human_private_delta_sd"]


@section("probes", "Appendix: mechanism probes (decoding temperature, topic drift round 1 vs 3, memory ablation)",
         temperature=PROBE_COLS, memory=PROBE_COLS,
         on_topic=["run", "source", "setup", "condition", "rate_first", "rate_last", "change"])
def _probes(c: Ctx) -> dict[str, Any]:
    s = _given(c, "roleplay-probes", "probes")
    if s is None:
        try:   # mechanism_probes.py may be absent (a checkout without the mechanism probes)
            P = importlib.import_module("chorus.simulate.roleplay.mechanism_probes")
        except ImportError:
            P = None
        if not hasattr(P, "analyse"):
            return _miss("mechanism probes", "chorus roleplay probes RUN...")
        if not _plain(c):
            return _miss("mechanism probes", "chorus roleplay probes RUN_BASE RUN_T0 RUN_T1 RUN_ABLATED")
        s = P.analyse(_probe_runs(c, P))[0]
    also = [_miss(f"{m['probe']}: {m['missing']}", m["command"]) for m in s.get("missing", [])]
    return _tables(s, c, ("temperature", "memory", "on_topic"), also, baseline=s.get("baseline"))


def _stats(c: Ctx) -> dict[str, Any]:
    if "stats" not in c.cache:
        s = _given(c, "roleplay-stats", "errors")
        if s is None and _plain(c):
            from chorus.simulate.roleplay.across_runs import analyse
            s = analyse([r["path"] for r in _plain(c)])[0]
        c.cache["stats"] = s or _miss("roleplay runs of both splits", "chorus roleplay stats RUN_GROUP RUN_TOPIC [RUN...]")
    return c.cache["stats"]


def _stats_missing(s: dict, fig12: bool) -> list[dict[str, str]]:
    return [_miss(f"{m['statistic']}: {m['missing']}", m["command"]) for m in s.get("missing", [])
            if isinstance(m, dict) and m["statistic"].startswith("Fig. 12") == fig12]


@section("statistics", "Statistics across runs (Findings 1-4): normal approximation on the bars, exact sign tests "
                       "over the condition cells, model-level sign check",
         normal_tests=["split", "channel", "metric", "a", "b", "mean_a", "mean_b", "z", "p", "runs"],
         sign_tests=["test", "metric", "k", "n", "ties", "p", "cells"],
         model_sign_check=["split", "setup", "metric", "k", "n", "p", "models"])
def _statistics(c: Ctx) -> dict[str, Any]:
    s = _stats(c)
    return _tables({**s, "figures": []}, c, ("normal_tests", "sign_tests", "model_sign_check"), _stats_missing(s, False),
                   compute=s.get("compute", {}).get("total"))


@section("fig12_correlations", "Fig. 12: cross-model correlations of the stance errors",
         correlations=["split", "setup", "channel", "x", "y", "n", "pearson_r", "spearman_rho", "models"])
def _fig12(c: Ctx) -> dict[str, Any]:
    s = _stats(c)
    return _tables(s, c, ("correlations",), _stats_missing(s, True))


def export(run_dirs: Sequence[str | Path]) -> dict[str, Any]:
    """The numbers dict of the runs, by paper section (no file written)."""
    c = Ctx(read_runs(run_dirs))
    models = [m.get("profile") for r in c.runs for m in ((r.get("config") or {}).get("models") or [])
              if isinstance(m, dict)]
    return json_safe({"schema": SCHEMA, "note": standing(models).text, "runs": [_src(r) | {"part": r["part"], **({"via": r["via"]} if "via" in r else {})}
                                                for r in c.runs],
                      "sections": {s.key: {"title": s.title, **s.export(c)} for s in SECTIONS}})


def _f(v: Any) -> str:
    if isinstance(v, dict) and "mean" in v:
        return _f(v["mean"]) + (" " + _ci(v) if v.get("lo") is not None else "")
    if isinstance(v, dict) and "rho" in v:
        return f"{_f(v['rho'])} (n={v.get('n')})"
    if isinstance(v, list):
        return ", ".join(Path(x).name if isinstance(x, str) and "/" in x else _f(x) for x in v)
    # a run's path shows as its name; a tiny float in two significant digits
    return Path(v).name if isinstance(v, str) and v.startswith("/") else fmt(v, sig=2)


def _ci(v: dict) -> str:
    """A bootstrap record's interval with its level ("[0.12, 0.31] (95%, 24 groups resampled)"), refused
    below ``MIN_UNITS`` groups (issue 51); a record that names no unit (resampled "unit", older runs)
    says its level is not recorded."""
    from chorus.core.stats import record_level
    rec = {**v, "resampled": None} if v.get("resampled") in (None, "unit") else v
    level, refused = record_level(rec, lo="lo", hi="hi", ci=v.get("ci") or 0.95)
    return f"no interval ({level})" if refused else f"[{_f(v.get('lo'))}, {_f(v.get('hi'))}] ({level})"


def _table(cols: list[str], rows: list[dict]) -> str:
    return md_table(cols, rows, _f) if rows else "(none)"


def _body(s, entry: dict[str, Any]) -> str:
    """A section's tables (each under its name where it has several) and what it still lacks."""
    cols = s.spec["cols"]
    parts = []
    for name, cs in cols.items():
        if name in entry:
            parts += ([f"\n**{name}**\n"] if len(cols) > 1 else []) + [_table(cs, entry[name])]
    parts += [f"\nmissing: {m['missing']}; run: `{m['command']}`" for m in entry.get("also_missing", [])]
    return "\n".join(parts)


def render(numbers: dict[str, Any], out: Path) -> str:
    """paper.md from the numbers dict; the runs' figures are copied to ``out/figures``."""
    parts = ["# DEBATE role-play paper report", "", f"Rendered by `{COMMAND}` from `numbers.json` alone "
             f"({numbers['schema']}); run names stand for the paths listed here. Runs:", ""]
    if numbers.get("note"):
        parts[2:2] = [f"**{numbers['note']}**", ""]
    parts += [f"- `{r['run']}`: {r['part']}" + (f" (comparison of {r['via']})" if r.get("via") else "")
              + f", {r['file']} sha256 {r['summary_sha256'][:12]}" for r in numbers["runs"]]
    parts += render_sections(SECTIONS, numbers, out, body=_body, missing=lambda s, e: (
        f"missing: {e['missing']}; run: `{e['command']}`, then `{COMMAND} RUN... --out DIR`"))
    return "\n".join(parts) + "\n"


def build_paper(run_dirs: Sequence[str | Path], out: str | Path) -> Path:
    """``out/numbers.json`` from the runs, then ``out/paper.md`` from it; returns paper.md."""
    numbers = export(run_dirs)   # the runs read: those given and each SFT run's comparison run
    return write_paper(Path(out), numbers, render, paper="roleplay", runs=[r["run"] for r in numbers["runs"]])[0]
