"""The belief-layer paper's tables and figures in the paper's order, from stored belief runs
(``chorus paper belief RUN... --out DIR``): one numbers file (``DIR/numbers.json``: each section's
numbers read from the runs' ``summary.json`` and tables, with the run and its summary's sha256 behind
every section) and ``DIR/paper.md`` rendered from that file alone, the runs' own figures copied beside
it. Nothing is computed here beyond reading (Tables 2-3 across models come from ``models_table``), no
model call is made, and a section without its run names the command that makes it.

Runs are recognised by their ``summary.json`` (``experiment``, ``mode``, ``model``) and provenance
(``command: calibrate``)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from chorus.core.paper import PaperError, Sections, fmt, md_table, missing_line, render_sections, run_plots, write_paper
from chorus.core.runs import file_sha256, json_safe
from chorus.core.stats import interval_text
from chorus.serving.standing import combined, run_standing

SCHEMA = "chorus.belief-paper/1"
COMMAND = "chorus paper belief"
LLM = "--set mode=llm --set llm.model=PROFILE"


def _kappa_interval(c: dict[str, Any], run: dict[str, Any]) -> str:
    """A kappa level's interval with what it resamples ("[0.9, 1.1] (95%, 12 runs resampled)"), or why
    there is none (too few runs); a run written before intervals named their level shows bare bounds."""
    if "kappa_hat_ci_resampled" not in c:
        return f"[{fmt(c.get('kappa_hat_ci_low'))}, {fmt(c.get('kappa_hat_ci_high'))}] (level not recorded)"
    return interval_text(c.get("kappa_hat_ci_low"), c.get("kappa_hat_ci_high"), ci=c.get("kappa_hat_ci_level") or 0.95,
                         n_units=c.get("kappa_hat_ci_units"), resampled=c.get("kappa_hat_ci_resampled"),
                         refused=c.get("kappa_hat_ci_refused"))


def _read_run(path: Path) -> dict[str, Any]:
    if not path.is_dir():
        raise PaperError(f"{path}: not a run directory")
    prov = json.loads((path / "provenance.json").read_text()) if (path / "provenance.json").is_file() else {}
    sp = path / "summary.json"
    if not sp.is_file():
        raise PaperError(f"{path}: no summary.json (finish it, or rebuild it with chorus belief recompute {path})")
    s = json.loads(sp.read_text())
    if prov.get("part") != "belief":
        raise PaperError(f"{path}: not a belief run (provenance part {prov.get('part')!r})")
    kind = "calibrate" if prov.get("command") == "calibrate" else s.get("experiment") or prov.get("kind") or "run"
    model = s.get("model") or prov.get("model") or ("oracle" if s.get("mode") == "oracle" else None)
    if isinstance(model, dict):
        model = model.get("profile") or model.get("path")
    return {"path": str(path), "kind": str(kind), "mode": s.get("mode"), "model": None if model is None else str(model),
            "summary": s, "summary_sha256": file_sha256(sp), "plots": run_plots(path),
            "standing": run_standing(path, s)}


def _pick(runs: list[dict], *kinds: str) -> list[dict]:
    return [r for r in runs if r["kind"] in kinds]


def _src(r: dict) -> dict[str, Any]:
    return {"run": r["path"], "model": r["model"], "mode": r["mode"], "summary_sha256": r["summary_sha256"]}


REGIME_KEYS = ("degroot_initial_mean", "degroot_landing", "degroot_final_variance", "fj_final_variance", "fj_persists",
               "fj_r2", "fj_rmse", "committed_monotone", "committed_smooth", "committed_tipping_ratio")
COND_KEYS = ("label", "population", "gamma", "kappa", "initial_mean", "final_mean", "landing_shift", "final_variance",
             "persists", "fj_r2", "fj_rmse", "channel_pearson", "appraisal_failure_rate")


SECTIONS = Sections()


def _rows(kind: str, fig: str, cmd: str, rows) -> Any:
    """A section of one run kind: each run's rows and its figure, or the command that makes such a run."""
    def export(runs: list[dict]) -> dict[str, Any]:
        rs = _pick(runs, kind)
        return {"rows": [{**_src(r), **rows(r)} for r in rs], "figures": [(r["path"], fig) for r in rs]} if rs \
            else {"missing": f"a {kind} run: {cmd}"}
    return export


def _regimes(runs: list[dict]) -> dict[str, Any]:
    # a regimes sweep by name, or any run whose headline measured a regime
    regimes = [r for r in runs if r["kind"] in ("regimes", "degroot", "fj", "committed") or (
        r["kind"] not in ("kappa_recovery", "gamma_ablation", "gamma_sweep_oracle", "calibrate") and any(
            (r["summary"].get("headline") or {}).get(k) is not None for k in ("degroot_landing", "fj_r2", "committed_monotone")))]
    return {"rows": [{**_src(r), **{k: r["summary"]["headline"].get(k) for k in REGIME_KEYS}}
                     for r in regimes], "figures": [(r["path"], "plots/trajectories.png") for r in regimes]} \
        if regimes else {"missing": f"a regimes run: chorus belief sweep regimes {LLM} (or --set mode=oracle)"}


def _kappa_recovery(runs: list[dict]) -> dict[str, Any]:
    kap = _pick(runs, "kappa_recovery")
    return {"rows": [{**_src(r), "by_condition": r["summary"].get("kappa_recovery"),
                      "by_seed": r["summary"].get("kappa_recovery_by_seed"),
                      **{k: r["summary"]["headline"].get(k) for k in (
                          "kappa_spearman", "kappa_spearman_by_seed_min", "kappa_spearman_every_seed_one",
                          "kappa_median_rel_error", "kappa_exact_max_rel_error")}} for r in kap],
            "figures": [(r["path"], "plots/kappa_recovery.png") for r in kap]} \
        if kap else {"missing": f"a kappa-recovery sweep: chorus belief sweep kappa_recovery {LLM}"}


def _conditions(r: dict) -> dict[str, Any]:
    return {"conditions": [{k: c.get(k) for k in COND_KEYS} for c in r["summary"].get("conditions", [])]}


_TABLES_MISSING = (f"each model's regimes and kappa_recovery runs: chorus belief sweep regimes {LLM}; "
                   f"chorus belief sweep kappa_recovery {LLM}")


def _models_tables(runs: list[dict]) -> tuple | None:
    """Tables 2 and 3 across models (``models_table``), from the runs that hold both a headline and a
    kappa recovery; made once for both sections."""
    table_runs = [r for r in runs if r["kind"] != "calibrate" and {"headline", "kappa_recovery"} <= set(r["summary"])]
    if not table_runs:
        return None
    from chorus.simulate.belief.models_table import models_tables
    return (*models_tables([r["path"] for r in table_runs]), table_runs)


def _table2(runs: list[dict], tables: tuple | None) -> dict[str, Any]:
    if tables is None:
        return {"missing": _TABLES_MISSING}
    t2, _, sources, table_runs = tables
    return {"table": t2.reset_index().to_dict(orient="records"), "sources": sources,
            "runs": [_src(r) for r in table_runs]}


def _table3(runs: list[dict], tables: tuple | None) -> dict[str, Any]:
    return {"missing": _TABLES_MISSING} if tables is None else {"rows": tables[1].to_dict(orient="records")}


def _calibration(runs: list[dict]) -> dict[str, Any]:
    cal = _pick(runs, "calibrate")
    return {"rows": [{**_src(r), **{k: r["summary"].get(k) for k in (
        "tau", "ece_before", "ece_after", "ce_before", "ce_after", "n_train", "n_val", "n_failed", "tau_at_bound")}}
        for r in cal], "figures": [(r["path"], "plots/calibration.png") for r in cal]} if cal else {
        "missing": "an appraiser calibration per model: chorus belief calibrate --model PROFILE --out DIR"}


def _channel(runs: list[dict]) -> dict[str, Any]:
    audit = [r for r in runs if r["summary"].get("transfer")]
    return {"rows": [{**_src(r), "channel_pearson": r["summary"]["headline"].get("channel_pearson"),
                      "transfer": r["summary"]["transfer"]} for r in audit],
            "figures": [(r["path"], "plots/transfer.png") for r in audit]} if audit else {
        "missing": f"any single-concept run with utterances: chorus belief sweep regimes {LLM}"}


def _correction(runs: list[dict]) -> dict[str, Any]:
    corr = [r for r in runs if r["summary"].get("channel_correction")]
    return {"rows": [{**_src(r), "channel_correction": r["summary"]["channel_correction"]} for r in corr]} if corr else {
        "missing": "a corrected-vs-raw sweep: chorus belief run channel_calibration --out CAL; chorus belief correct "
                   "fit CAL; chorus belief sweep channel_biased"}


def _kappa_body(s: dict) -> str:
    out = []
    for r in s["rows"]:
        out.append(f"**{Path(r['run']).name}** ({r['model']}): pooled Spearman {fmt(r['kappa_spearman'])}, "
                   f"per-seed minimum {fmt(r['kappa_spearman_by_seed_min'])} (every seed 1.0: "
                   f"{r['kappa_spearman_every_seed_one']}), one-step identity max relative error "
                   f"{fmt(r['kappa_exact_max_rel_error'])}")
        out.append(md_table(
            ["prescribed kappa", "median kappa_hat", "IQR", "interval (level, units resampled)", "events",
             "retained"],
            [[c["kappa"], c["kappa_hat_median"], c["kappa_hat_iqr"], _kappa_interval(c, r), c["events"],
              c["retained"]] for c in r["by_condition"] or []]))
        out.append(md_table(["seed", "levels", "Spearman", "median rel. error"],
                            [[b["seed"], b["levels"], b["spearman"], b["median_rel_error"]]
                             for b in r["by_seed"] or []]))
    return "\n\n".join(out)


def _conditions_body(s: dict) -> str:
    return "\n\n".join(f"**{Path(r['run']).name}** ({r['model'] or r['mode']})\n\n" + md_table(
        ["condition", "final mean", "landing shift", "final variance", "persists", "FJ R²", "channel r"],
        [[c["label"], c["final_mean"], c["landing_shift"], c["final_variance"], c["persists"], c["fj_r2"],
          c["channel_pearson"]] for c in r["conditions"]]) for r in s["rows"])


def _table2_body(s: dict) -> str:
    rows = s["table"]
    cols = [c for c in rows[0] if c != "metric"] if rows else []
    return md_table(["metric"] + cols, [[r.get("metric")] + [r.get(c) for c in cols] for r in rows]) + \
        "\n\nSources (model -> metric -> run): `" + json.dumps(s["sources"]) + "`"


SECTIONS.add("fig2_regimes", "Figure 2: one knob, three regimes (against their closed forms)", export=_regimes,
             render=lambda s: md_table(
                 ["run", "model", "DeGroot initial mean", "DeGroot landing", "DeGroot final var.", "FJ final var.",
                  "FJ persists", "FJ R²", "committed monotone", "committed smooth"],
                 [[Path(r["run"]).name, r["model"], r["degroot_initial_mean"], r["degroot_landing"],
                   r["degroot_final_variance"], r["fj_final_variance"], r["fj_persists"], r["fj_r2"],
                   r["committed_monotone"], r["committed_smooth"]] for r in s["rows"]]))
SECTIONS.add("kappa_recovery", "§5.1 / Figure 5: prescribed kappa recovered through the channel",
             export=_kappa_recovery, render=_kappa_body)
SECTIONS.add("table1_forgetting", "Table 1: forgetting ablation", render=_conditions_body, export=_rows(
    "gamma_ablation", "plots/trajectories.png", f"chorus belief sweep gamma_ablation {LLM}", _conditions))
SECTIONS.add("fig3_gamma_sweep", "Figure 3 / Appendix A: the oracle gamma sweep", render=_conditions_body,
             export=_rows("gamma_sweep_oracle", "plots/variance_vs_gamma.png", "chorus belief sweep gamma_sweep_oracle",
                          _conditions))
SECTIONS.add("table2_models", "Table 2: the full pipeline across models", export=_table2, render=_table2_body,
             needs_tables=True)
SECTIONS.add("table3_kappa", "Table 3: recovered stubbornness per prescribed kappa", export=_table3,
             needs_tables=True, render=lambda s: md_table(list(s["rows"][0]) if s["rows"] else ["-"],
                                                          [list(r.values()) for r in s["rows"]]))
SECTIONS.add("appB_calibration", "Appendix B: appraiser calibration per model", export=_calibration,
             render=lambda s: md_table(
                 ["run", "model", "tau", "ECE before", "ECE after", "CE before", "CE after", "train / val", "failed"],
                 [[Path(r["run"]).name, r["model"], r["tau"], r["ece_before"], r["ece_after"], r["ce_before"],
                   r["ce_after"], f"{r['n_train']} / {r['n_val']}", r["n_failed"]] for r in s["rows"]]))
SECTIONS.add("appC_channel", "Appendix C: auditing the language channel (transfer curves)", export=_channel,
             render=lambda s: md_table(
                 ["run", "model", "channel Pearson (e vs s)", "transfer bins"],
                 [[Path(r["run"]).name, r["model"], r["channel_pearson"], len(r["transfer"] or [])] for r in s["rows"]]))
SECTIONS.add("appC_correction", "Appendix C: directional channel correction", export=_correction,
             render=lambda s: "\n\n".join(f"**{Path(r['run']).name}**: `{json.dumps(r['channel_correction'])[:2000]}`"
                                          for r in s["rows"]))


def export(run_dirs: Sequence[str | Path]) -> dict[str, Any]:
    """The numbers dict of the runs, by paper section (no file written)."""
    if not run_dirs:
        raise PaperError("no run directory given")
    runs = [_read_run(Path(p).resolve()) for p in run_dirs]
    tables = _models_tables(runs) if any(s.spec.get("needs_tables") for s in SECTIONS) else None
    sec = {s.key: s.export(runs, tables) if s.spec.get("needs_tables") else s.export(runs) for s in SECTIONS}
    # where each run's numbers come from (chorus.serving.standing), kept in the file the paper renders from
    return json_safe({"schema": SCHEMA, "runs": [_src(r) | {"kind": r["kind"], "standing": r["standing"].as_dict()}
                                                 for r in runs],
                      "standing": combined([r["standing"] for r in runs], [Path(r["path"]).name for r in runs]).as_dict(),
                      "sections": sec})


def render(numbers: dict[str, Any], out: Path) -> str:
    """paper.md from the numbers dict; the runs' figures are copied to ``out/figures``."""
    st = numbers.get("standing")
    where = (f"Numbers from: {st['text']}." if isinstance(st, dict) and st.get("text") else
             "Numbers from: not recorded (a numbers file exported before chorus recorded its runs' standing).")
    parts = ["# Belief-layer paper report", "",
             f"Rendered by `{COMMAND}` from `numbers.json` alone ({numbers['schema']}).", "", where, "",
             "Runs:", ""]
    parts += [f"- `{r['run']}`: {r['kind']}, {r['mode']}, model {r['model']}"
              + (f"; {r['standing']['kind']}" if isinstance(r.get("standing"), dict) else "") for r in numbers["runs"]]
    parts += render_sections(SECTIONS, numbers, out, body=None,
                             missing=lambda s, e: missing_line(e["missing"], f"{COMMAND} RUN... --out DIR"))
    return "\n".join(parts) + "\n"


def build_paper(run_dirs: Sequence[str | Path], out: str | Path) -> Path:
    """``out/numbers.json`` from the runs, then ``out/paper.md`` from it; returns paper.md."""
    return write_paper(Path(out), export(run_dirs), render, paper="belief", runs=run_dirs)[0]
