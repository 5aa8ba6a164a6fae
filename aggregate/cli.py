"""``chorus aggregate``: run | sweep | verify (plus generate, check and flips for trace files).

Heavy imports (numpy, pandas, scikit-learn, crowd-kit, matplotlib) happen inside the verbs:
this module is imported on every ``chorus`` call.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from chorus.core.cliutil import add_verbs, renamed_option
from chorus.core.cliutil import fail as _fail
from chorus.core.progress import progress
from chorus.core.verbs import Option, Verb, register
from chorus.core.config import ConfigError, InputError
from chorus.core.runs import RecordError, check_output, require_sealed, write_json

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="BDA aggregation over council traces: run, sweep, verify.")

def _user_errors() -> tuple[type[BaseException], ...]:
    from chorus.aggregate.errors import LabelError, PriorError, TraceError

    return (ConfigError, TraceError, LabelError, PriorError, InputError)


# options several commands share, declared once
_PROTOCOL = typer.Option("strict", "--protocol", help="strict | general")
_SEED = typer.Option(0, "--seed")
_OUTER = typer.Option(5, "--outer-folds")
_INNER = typer.Option(5, "--inner-folds")


def _load_all(paths: List[Path]) -> list:
    """Every trace of every file, in order."""
    from chorus.aggregate.trace import load_traces
    return [tr for p in paths for tr in load_traces(p)]


def _show(console, path: Path, summary: dict) -> None:
    console.print((Path(path) / "results.md").read_text(), markup=False, highlight=False, soft_wrap=True)
    console.print(f"[green]results:[/] {Path(path) / 'results.json'}\n[green]run directory:[/] {path} "
                  f"(tables/, plots/, results.md, summary.json)")


_ERRORS = ("chorus.aggregate.errors:TraceError", "chorus.aggregate.errors:LabelError", "chorus.aggregate.errors:PriorError",
           "chorus.core.config:InputError")
_QUIET = Option("quiet", "--quiet", bool, False, "No progress bar.", "progress:enabled", negate=True)
register(Verb(
    "aggregate", "run", help="Traces + methods -> nested-CV posteriors, metrics, bootstrap, tables, plots, one results file.",
    config_help="Run config (a path or a shipped name in aggregate/configs/, e.g. run_synthetic).",
    load="chorus.aggregate.config:load_run_config", source="chorus.aggregate.config:config_path",
    run="chorus.aggregate.experiments:run_to_dir", show=_show, unit="fold x method", plots=False, options=(_QUIET,),
    errors=_ERRORS, configs="chorus.aggregate.config:CONFIGS_DIR/run_*.yaml"))
register(Verb(
    "aggregate", "sweep", help="Adversary sweeps over a synthetic council or a real trace file (--traces): "
                               "dose-response (regime x k x p_wrong) or the sleeper axis (f).",
    config_help="Sweep config (kind: dose_response | sleeper; a path or a shipped name, e.g. sweep_dose).",
    load="chorus.aggregate.config:load_sweep_config", run="chorus.aggregate.experiments:sweep_to_dir", show=_show,
    unit="fold x method", plots=False, errors=_ERRORS, configs="chorus.aggregate.config:CONFIGS_DIR/sweep_*.yaml",
    options=(Option("traces", "--traces", Optional[Path], None, "A council trace file (.jsonl / .jsonl.gz) to "
                    "corrupt instead of the config's synthetic council.", "config:traces"), _QUIET)))
add_verbs(app, "aggregate")


@app.command()
def verify(run_dir: Path = typer.Argument(..., help="A run directory holding results.json."),
           all_cells: bool = typer.Option(False, "--all", help="Recompute every cell of a sweep."),
           cells: Optional[int] = typer.Option(None, "--cells", help="Recompute N evenly spaced cells (sweeps; default 4)."),
           tolerance: float = typer.Option(1e-6, "--tolerance", help="Largest allowed absolute difference."),
           no_bootstrap: bool = typer.Option(False, "--no-bootstrap", help="Skip recomputing the bootstrap."),
           quiet: bool = typer.Option(False, "--quiet")) -> None:
    """Recompute numbers of results.json from the stored traces; exit 1 on any mismatch."""
    from rich.console import Console
    from rich.table import Table

    from chorus.aggregate.errors import VerifyError
    from chorus.aggregate.results import verify as do_verify
    from chorus.core.stats import check_tolerance


    try:
        check_tolerance(tolerance)   # before the record is hashed: NaN would pass every difference
        require_sealed(run_dir, exempt=("results.json",))   # the rest as written (no record: unverified); results.json is recomputed below
        with progress("verify", "fold x method", enabled=not quiet) as update:
            checks = do_verify(run_dir, cells="all" if all_cells else cells, tolerance=tolerance,
                               bootstrap=not no_bootstrap, progress=update)
    except (VerifyError, RecordError, *_user_errors()) as err:
        _fail(str(err), 1 if isinstance(err, RecordError) else 2)   # an edited record: verification failed
    con = Console()
    bad = [c for c in checks if not c.ok]
    cells_seen = sorted({c.cell for c in checks if c.cell != "-"})
    if bad:
        t = Table(title="mismatches")
        for col in ("cell", "quantity", "stored", "recomputed"):
            t.add_column(col, overflow="fold")
        for c in bad[:50]:
            t.add_row(c.cell, c.what, repr(c.stored), repr(c.recomputed))
        con.print(t)
        con.print(f"[bold red]FAILED[/]: {len(bad)} of {len(checks)} checks differ "
                  f"(tolerance {tolerance}) in {run_dir / 'results.json'}")
        raise typer.Exit(1)
    worst = max((c.diff for c in checks if c.diff is not None), default=0.0)
    con.print(f"[bold green]OK[/]: {len(checks)} checks over {len(cells_seen)} cell(s) "
              f"({', '.join(cells_seen)}) recompute within {tolerance} (largest difference {worst:.3g}) "
              f"for {run_dir / 'results.json'}")


@app.command()
def generate(out: Path = typer.Option(..., "--out", help="Trace file to write (.jsonl or .jsonl.gz)."),
             n_tasks: int = typer.Option(1500, "--n", help="Number of tasks."),
             candidates: Optional[int] = typer.Option(None, "--candidates", help="Candidates per task (K; default 2)."),
             reliabilities: str = typer.Option("0.74,0.68,0.68", "--reliabilities", help="Seat reliabilities, comma-separated."),
             rounds: int = typer.Option(3, "--rounds"),
             adversary: Optional[str] = typer.Option(None, "--adversary", help="persistent | rotating"),
             k: int = typer.Option(1, "--k", help="Adversarial seats."),
             p_wrong: float = typer.Option(1.0, "--p-wrong"),
             seed: int = typer.Option(0, "--seed"),
             prefix: str = typer.Option("syn", "--prefix", help="Task-id prefix (disjoint sets for lodo / transfer)."),
             K_old: Optional[int] = typer.Option(None, "--K", hidden=True)) -> None:
    """Write a synthetic council trace file (the trace JSONL of ``chorus.aggregate.trace``)."""
    from chorus.aggregate.synthetic import Adversary, CouncilSpec, generate_council
    from chorus.aggregate.trace import dump_traces

    K = renamed_option(K_old, "--K", "--candidates", candidates)   # beside --k (adversarial seats), one letter apart
    K = 2 if K is None else K
    try:
        check_output(out)   # never into (or over) a run directory
        try:
            rel = tuple(float(x) for x in reliabilities.split(","))
        except ValueError:
            raise InputError(f"--reliabilities {reliabilities!r}: expected numbers, comma-separated") from None
        spec = CouncilSpec(n_tasks=n_tasks, K=K, rounds=rounds, reliabilities=rel)
        adv = Adversary(kind=adversary, k=k, p_wrong=p_wrong) if adversary else None
        dump_traces(generate_council(spec, adversary=adv, seed=seed, prefix=prefix), out)
    except _user_errors() as err:
        _fail(str(err))
    typer.echo(f"wrote {n_tasks} traces to {out}")


@app.command()
def check(traces: Path = typer.Argument(..., help="Trace file (.jsonl / .jsonl.gz)."),
          protocol: str = _PROTOCOL) -> None:
    """Validate a trace file and run the protocol automaton; report rejected moves (exit 1 if any)."""
    import json

    from chorus.aggregate.moves import check_all
    from chorus.aggregate.trace import load_traces

    try:
        trs = load_traces(traces)
        rep = check_all(trs, protocol)
    except _user_errors() as err:
        _fail(str(err))
    typer.echo(json.dumps(rep.to_dict(), indent=2))
    if rep.rejected:
        raise typer.Exit(1)


@app.command()
def flips(traces: List[Path] = typer.Argument(..., help="Trace files (.jsonl / .jsonl.gz); labelled traces are read."),
          b: float = typer.Option(0.58, "--b", help="The neutral prior's mean reliability (every seat the same)."),
          s: float = typer.Option(16.0, "--s", help="The neutral prior's strength."),
          seed: int = typer.Option(0, "--seed", help="Tie-break seed."),
          protocol: str = _PROTOCOL,
          out: Optional[Path] = typer.Option(None, "--out", help="Folder for flips.parquet, flips_by_k.json and "
                                                                  "plots/flip_ratios.png (default: print only).")) -> None:
    """The decision-flip diagnostic (BDA paper E.4, Fig. 6): round 0 against the full trace under a neutral
    prior, as fixes and breaks by K."""
    from rich.console import Console
    from rich.table import Table

    from chorus.aggregate.flips import decision_flips, flip_summary, plot_ratios

    try:
        check_output(out)   # never into (or over) a run directory
        trs = _load_all(traces)
        per_task = decision_flips(trs, b=b, s=s, seed=seed, protocol=protocol)
    except _user_errors() as err:
        _fail(str(err))
    summ = flip_summary(per_task)
    t = Table(title=f"decision flips, round 0 -> full trace (neutral prior b={b}, s={s}; {len(per_task)} labelled tasks)")
    cols = ["K", "n_tasks", "changed", "fixed", "broken", "swapped", "net", "ratio", "accuracy_round0", "accuracy_full"]
    for c in cols:
        t.add_column(c)
    for row in summ.to_dict("records"):
        t.add_row(*(f"{row[c]:.3f}" if isinstance(row[c], float) else str(row[c]) for c in cols))
    Console().print(t)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        per_task.to_parquet(out / "flips.parquet", index=False)
        write_json(out / "flips_by_k.json", {"b": b, "s": s, "seed": seed, "protocol": protocol,
                                             "sources": [str(p) for p in traces], "by_K": summ.to_dict("records")})
        (out / "plots").mkdir(exist_ok=True)
        plot_ratios(summ, out / "plots" / "flip_ratios.png")
        typer.echo(f"results: {out} (flips.parquet, flips_by_k.json, plots/flip_ratios.png)")


@app.command()
def switch(traces: List[Path] = typer.Argument(..., help="Trace files (.jsonl / .jsonl.gz); labelled K = 2 traces are read."),
           methods: str = typer.Option("bda_per_agent,plurality", "--methods",
                                       help="Arms compared under nested CV, comma-separated."),
           seed: int = _SEED, outer_folds: int = _OUTER, inner_folds: int = _INNER,
           protocol: str = _PROTOCOL,
           out: Optional[Path] = typer.Option(None, "--out", help="Folder for switch.json, switch.parquet and "
                                                                   "plots/label_switching.png (default: print only).")) -> None:
    """The K = 2 label-switching demonstration (BDA paper App. F.10): unsupervised Dawid-Skene, majority- and
    spectral-initialised, beside its mirror image (equal likelihood) and the supervised arms under nested CV."""
    from rich.console import Console
    from rich.table import Table

    from chorus.aggregate.label_switching import demonstrate, plot, table

    try:
        check_output(out)   # never into (or over) a run directory
        trs = _load_all(traces)
        res = demonstrate(trs, compared=[m.strip() for m in methods.split(",") if m.strip()], seed=seed,
                          outer_folds=outer_folds, inner_folds=inner_folds, protocol=protocol)
    except _user_errors() as err:
        _fail(str(err))
    t = table(res)
    tab = Table(title=f"label switching at K = 2 ({res['n_tasks']} labelled tasks; seat accuracy "
                      + ", ".join(f"{a} {v:.3f}" for a, v in res["seat_accuracy"].items()) + ")")
    for c in t.columns:
        tab.add_column(c)
    for row in t.to_dict("records"):
        tab.add_row(*(f"{v:.4f}" if isinstance(v, float) else str(v) for v in row.values()))
    Console().print(tab)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        t.to_parquet(out / "switch.parquet", index=False)
        write_json(out / "switch.json", {"sources": [str(p) for p in traces], "seed": seed, "protocol": protocol, **res})
        (out / "plots").mkdir(exist_ok=True)
        plot(res, out / "plots" / "label_switching.png")
        typer.echo(f"results: {out} (switch.json, switch.parquet, plots/label_switching.png)")


@app.command()
def truncation(traces: List[Path] = typer.Argument(..., help="Trace files (.jsonl / .jsonl.gz), attacked or not."),
               methods: str = typer.Option("plurality,stacker,bda_per_agent,bda_confusion", "--methods",
                                           help="Methods, comma-separated."),
               seed: int = _SEED, outer_folds: int = _OUTER, inner_folds: int = _INNER,
               n_boot: int = typer.Option(2000, "--n-boot", help="Paired bootstrap resamples."),
               protocol: str = _PROTOCOL,
               out: Optional[Path] = typer.Option(None, "--out", help="Folder for truncation.parquet, "
                                                                       "truncation_deltas.parquet and truncation.json.")) -> None:
    """Round-0-truncated against full-trace aggregation (BDA paper Table 14): each basis its own leak-free
    nested CV on the same folds; per method, full - round0 with a question-clustered paired interval."""
    from rich.console import Console
    from rich.table import Table

    from chorus.aggregate.methods import check_method
    from chorus.aggregate.truncation import truncation_table

    try:
        check_output(out)   # never into (or over) a run directory
        ms = [check_method(m.strip()) for m in methods.split(",") if m.strip()]
        trs = _load_all(traces)
        metrics, deltas = truncation_table(trs, ms, outer_folds=outer_folds, inner_folds=inner_folds, seed=seed,
                                           protocol=protocol, n_boot=n_boot)
    except _user_errors() as err:
        _fail(str(err))
    t = Table(title=f"round 0 against the full trace ({len(trs)} traces, nested CV per basis)")
    for c in ("method", "acc round0", "acc full", "delta [CI]", "brier round0", "brier full"):
        t.add_column(c)
    for m in ms:
        r0 = metrics[(metrics.basis == "round0") & (metrics.method == m)].iloc[0]
        fu = metrics[(metrics.basis == "full") & (metrics.method == m)].iloc[0]
        d = deltas[(deltas.method == m) & (deltas.metric == "accuracy")].iloc[0]
        t.add_row(m, f"{r0.accuracy:.3f}", f"{fu.accuracy:.3f}", f"{d.delta:+.3f} [{d.ci_low:+.3f}, {d.ci_high:+.3f}]",
                  f"{r0.brier:.3f}", f"{fu.brier:.3f}")
    Console().print(t)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        metrics.to_parquet(out / "truncation.parquet", index=False)
        deltas.to_parquet(out / "truncation_deltas.parquet", index=False)
        write_json(out / "truncation.json", {"sources": [str(p) for p in traces], "methods": ms, "seed": seed,
                                             "outer_folds": outer_folds, "inner_folds": inner_folds,
                                             "metrics": metrics.to_dict("records"), "deltas": deltas.to_dict("records")})
        typer.echo(f"results: {out} (truncation.parquet, truncation_deltas.parquet, truncation.json)")


@app.command()
def lodo(sets: List[str] = typer.Argument(..., help="NAME=FILE trace sets (two or more), e.g. truthfulqa=RUN/traces/a.jsonl."),
         methods: str = typer.Option("plurality,best_member,ds_em,bda_shared,bda_per_agent,bda_confusion", "--methods",
                                     help="Methods, comma-separated (aggregate method names)."),
         seed: int = _SEED, inner_folds: int = _INNER,
         outer_folds: int = typer.Option(5, "--outer-folds", help="Folds of the in-domain comparison."),
         protocol: str = _PROTOCOL,
         out: Optional[Path] = typer.Option(None, "--out", help="Folder for lodo.parquet and lodo.json.")) -> None:
    """Leave-one-dataset-out transfer (BDA paper E.2 / E.4): fit on every set but one, predict the one left
    out, beside the in-domain nested CV of that set."""
    from rich.console import Console
    from rich.table import Table

    from chorus.aggregate.lodo import leave_one_dataset_out, transfer_gap
    from chorus.aggregate.methods import check_method
    from chorus.aggregate.trace import load_traces

    try:
        check_output(out)   # never into (or over) a run directory
        paths, named = {}, {}
        for s in sets:
            name, sep, path = s.partition("=")
            if not sep or not name or not path:
                raise InputError(f"a trace set is NAME=FILE, got {s!r}")
            paths[name], named[name] = path, load_traces(path)
        ms = [check_method(m.strip()) for m in methods.split(",") if m.strip()]
        table = leave_one_dataset_out(named, ms, seed=seed, inner_folds=inner_folds, outer_folds=outer_folds,
                                      protocol=protocol)
    except _user_errors() as err:
        _fail(str(err))
    gap = transfer_gap(table)
    t = Table(title="leave-one-dataset-out: accuracy under transfer vs in domain")
    for c in ("held_out", "method", "transfer", "in_domain", "gap"):
        t.add_column(c)
    for row in gap.to_dict("records"):
        t.add_row(str(row["held_out"]), str(row["method"]),
                  *(f"{row[c]:.3f}" for c in ("transfer", "in_domain", "gap")))
    Console().print(t)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        table.to_parquet(out / "lodo.parquet", index=False)
        write_json(out / "lodo.json", {"sets": paths,
                                       "methods": ms, "seed": seed, "inner_folds": inner_folds,
                                       "outer_folds": outer_folds, "protocol": protocol,
                                       "rows": table.to_dict("records")})
        typer.echo(f"results: {out} (lodo.parquet, lodo.json)")


@app.command()
def labels(traces: Path = typer.Argument(..., help="A labelled trace file (.jsonl / .jsonl.gz)."),
           budgets: str = typer.Option("10,20,50,100", "--budgets", help="Label budgets, comma-separated."),
           seeds: str = typer.Option("0,1,2", "--seeds", help="Calibration draws, comma-separated."),
           methods: str = typer.Option("best_member,stacker,gated,bda_shared,bda_per_agent,bda_confusion,plurality",
                                       "--methods", help="Methods, comma-separated."),
           protocol: str = _PROTOCOL,
           out: Optional[Path] = typer.Option(None, "--out", help="Folder for labels.parquet, labels.json and "
                                                                   "plots/label_efficiency.png.")) -> None:
    """Label efficiency (BDA paper E.6, Table 11): every method fitted on n labelled tasks, scored on the
    disjoint rest, over seeds."""
    from rich.console import Console
    from rich.table import Table

    from chorus.aggregate.label_efficiency import efficiency_curve, label_efficiency, plot_curve
    from chorus.aggregate.methods import check_method
    from chorus.aggregate.trace import load_traces

    try:
        check_output(out)   # never into (or over) a run directory
        try:
            ns = [int(x) for x in budgets.split(",") if x.strip()]
            sds = [int(x) for x in seeds.split(",") if x.strip()]
        except ValueError:
            raise InputError(f"--budgets and --seeds take integers, comma-separated; got {budgets!r}, {seeds!r}") from None
        ms = [check_method(m.strip()) for m in methods.split(",") if m.strip()]
        table = label_efficiency(load_traces(traces), ms, ns, seeds=sds, protocol=protocol)
    except _user_errors() as err:
        _fail(str(err))
    curve = efficiency_curve(table)
    t = Table(title=f"label efficiency: hold-out accuracy, mean +- SD over {len(sds)} seeds")
    t.add_column("method")
    for n in ns:
        t.add_column(f"n={n}")
    for m in ms:
        c = curve[curve["method"] == m].set_index("budget")
        t.add_row(m, *(f"{c.at[n, 'mean']:.3f} +- {c.at[n, 'sd']:.3f}" for n in ns))
    Console().print(t)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        table.to_parquet(out / "labels.parquet", index=False)
        write_json(out / "labels.json", {"traces": str(traces), "budgets": ns, "seeds": sds, "methods": ms,
                                         "protocol": protocol, "curve": curve.to_dict("records")})
        (out / "plots").mkdir(exist_ok=True)
        plot_curve(curve, out / "plots" / "label_efficiency.png")
        typer.echo(f"results: {out} (labels.parquet, labels.json, plots/label_efficiency.png)")


@app.command()
def contagion(traces: List[Path] = typer.Argument(..., help="Attacked trace files that name their adversarial seats."),
              protocol: str = _PROTOCOL) -> None:
    """Contagion under attack (BDA paper G / F.14): genuine seats flipped by the coalition and the effective
    corrupted fraction against the nominal one."""
    import json

    from chorus.aggregate.contagion import contagion_summary
    from chorus.aggregate.trace import load_traces

    try:
        out = {str(p): contagion_summary(load_traces(p), protocol) for p in traces}
    except _user_errors() as err:
        _fail(str(err))
    typer.echo(json.dumps(out, indent=2))


@app.command("keys")
def keys_ablation(traces: List[Path] = typer.Argument(..., help="Labelled trace files (.jsonl / .jsonl.gz), read as one pool."),
                  b: float = typer.Option(0.58, "--b", help="The granularity half's fixed prior: mean reliability."),
                  kappa: float = typer.Option(2.0, "--kappa", help="The fixed prior's spread of the key reliabilities."),
                  s: float = typer.Option(16.0, "--s", help="The fixed prior's strength."),
                  seed: int = _SEED, outer_folds: int = _OUTER, inner_folds: int = _INNER,
                  protocol: str = _PROTOCOL,
                  out: Optional[Path] = typer.Option(None, "--out", help="Folder for keys.parquet, keys.json and "
                                                                          "plots/keys.png (default: print only).")) -> None:
    """Table 7 (BDA paper E.2) in one command: reliability-key granularity (shared, agent, agent x round,
    agent x force) under a fixed prior, and the reliability estimator (all moves, proposals, round 0) by inner
    CV, every arm on the same nested-CV outer folds."""
    from rich.console import Console
    from rich.table import Table

    from chorus.aggregate.granularity import ablation_table, plot

    try:
        check_output(out)   # never into (or over) a run directory
        trs = _load_all(traces)
        tab = ablation_table(trs, prior={"b": b, "kappa": kappa, "s": s}, outer_folds=outer_folds,
                             inner_folds=inner_folds, seed=seed, protocol=protocol)
    except _user_errors() as err:
        _fail(str(err))
    t = Table(title=f"Table 7: reliability key (fixed prior b={b}, kappa={kappa}, s={s}) and estimator (inner CV); "
                    f"{len(trs)} traces, {outer_folds} outer folds")
    cols = {"half": "half", "arm": "arm", "n_seats": "seats", "moves_per_seat": "moves/seat", "accuracy": "acc",
            "brier": "Brier", "ece_ew": "ECE ew", "ece_em": "ECE em"}
    for c in cols.values():
        t.add_column(c)
    for row in tab.to_dict("records"):
        t.add_row(*(f"{row[c]:.{1 if c == 'moves_per_seat' else 4}f}" if isinstance(row[c], float) else str(row[c])
                    for c in cols))
    Console().print(t)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        tab.to_parquet(out / "keys.parquet", index=False)
        write_json(out / "keys.json", {"sources": [str(p) for p in traces], "n_traces": len(trs),
                                       "fixed_prior": {"b": b, "kappa": kappa, "s": s}, "seed": seed,
                                       "outer_folds": outer_folds, "inner_folds": inner_folds, "protocol": protocol,
                                       "rows": tab.to_dict("records")})
        (out / "plots").mkdir(exist_ok=True)
        plot(tab, out / "plots" / "keys.png")
        typer.echo(f"results: {out} (keys.parquet, keys.json, plots/keys.png)")


# -- policy shift and row drift (BDA paper §8 / App. F): aggregate/policy_shift.py, aggregate/drift.py --------
_SHIFT_K = typer.Option(2, "--k", help="Coalition seats (the last k of the council).")
_SHIFT_P = typer.Option(1.0, "--p-wrong", help="Share of the coalition's informative moves flipped.")


@app.command()
def shift(traces: List[Path] = typer.Argument(..., help="Clean labelled trace files sharing one candidate list."),
          methods: str = typer.Option("plurality,bda_per_agent,bda_confusion,stacker", "--methods",
                                      help="Methods, comma-separated."),
          kinds: Optional[str] = typer.Option(None, "--kinds", help="Shifts, comma-separated: permute (K >= 3), "
                                                                    "classes, honest, sleeper (default: all that exist at K)."),
          n_calibration: int = typer.Option(200, "--n-calibration", help="Calibration window (whole questions)."),
          k: int = _SHIFT_K, p_wrong: float = _SHIFT_P, seed: int = _SEED, inner_folds: int = _INNER,
          protocol: str = _PROTOCOL,
          out: Optional[Path] = typer.Option(None, "--out", help="Folder for shift.json, shift.parquet and "
                                                                 "plots/policy_shift.png.")) -> None:
    """Policy shift (BDA paper §8 / App. F): every method fitted on the old policy's calibration window, scored
    on the same deployment tasks without and with the coalition's policy shift."""
    from rich.console import Console
    from rich.table import Table

    from chorus.aggregate.methods import check_method
    from chorus.aggregate.policy_shift import before_after, coalition, plot, shift_table

    try:
        check_output(out)   # never into (or over) a run directory
        ms = [check_method(m.strip()) for m in methods.split(",") if m.strip()]
        trs = _load_all(traces)
        ks = None if kinds is None else [x.strip() for x in kinds.split(",") if x.strip()]
        adv = coalition(trs, k=k, p_wrong=p_wrong)
        tab = shift_table(trs, ms, kinds=ks, adversary=adv, n_calibration=n_calibration, seed=seed,
                          protocol=protocol, inner_folds=inner_folds)
    except _user_errors() as err:
        _fail(str(err))
    ba = before_after(tab)
    t = Table(title=f"policy shift: deployment accuracy without / with the shift (coalition {list(adv.seats)}, "
                    f"p_wrong={p_wrong}; calibration {int(tab.n_calibration.iloc[0])} tasks; edge = vs bda_per_agent)")
    cols = ["kind", "method", "acc_no_shift", "acc_shift", "delta_acc", "edge_no_shift", "edge_shift", "brier_no_shift",
            "brier_shift"]
    for c in cols:
        t.add_column(c)
    for row in ba.to_dict("records"):
        t.add_row(*(f"{row[c]:+.3f}" if c.startswith(("delta", "edge")) else f"{row[c]:.3f}"
                    if isinstance(row[c], float) else str(row[c]) for c in cols))
    Console().print(t)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        tab.to_parquet(out / "shift.parquet", index=False)
        write_json(out / "shift.json", {"sources": [str(p) for p in traces], "methods": ms, "seed": seed,
                                        "coalition": list(adv.seats), "p_wrong": p_wrong, "protocol": protocol,
                                        "inner_folds": inner_folds, "rows": tab.to_dict("records"),
                                        "before_after": ba.to_dict("records")})
        (out / "plots").mkdir(exist_ok=True)
        plot(tab, out / "plots" / "policy_shift.png")
        typer.echo(f"results: {out} (shift.json, shift.parquet, plots/policy_shift.png)")


@app.command()
def drift(traces: List[Path] = typer.Argument(..., help="Labelled trace files, read in order as one stream."),
          window: int = typer.Option(..., "--window", help="Tasks per window W; the first W are the reference."),
          shift_kind: Optional[str] = typer.Option(None, "--shift", help="Plant a policy shift in the (clean) stream: "
                                                                         "permute | classes | honest | sleeper."),
          shift_at: Optional[int] = typer.Option(None, "--shift-at", help="First task under the new policy "
                                                                          "(default: the middle of the stream)."),
          k: int = _SHIFT_K, p_wrong: float = _SHIFT_P,
          lam: float = typer.Option(1.0, "--lam", help="Fixed Dirichlet concentration of the window rows."),
          factor: float = typer.Option(2.0, "--factor", help="Alarm when drift > factor x noise floor."),
          n_boot: int = typer.Option(200, "--n-boot", help="Bootstrap pairs behind the noise floor."),
          seed: int = _SEED, protocol: str = _PROTOCOL,
          out: Optional[Path] = typer.Option(None, "--out", help="Folder for drift.json, drift.parquet and "
                                                                 "plots/drift.png.")) -> None:
    """Row drift (BDA paper §8 / App. F): confusion rows refitted on a sliding window against the reference
    window; alarm at drift above factor x the bootstrap noise floor."""
    import numpy as np
    import pandas as pd

    from chorus.aggregate.counts import Pool
    from chorus.aggregate.drift import (RowDriftDetector, StreamCounts, alarm_delay, first_alarm, plot_drift,
                                 shifted_fraction)
    from chorus.aggregate.policy_shift import coalition, shifted_stream

    try:
        check_output(out)   # never into (or over) a run directory
        trs = _load_all(traces)
        det = RowDriftDetector(window, lam=lam, factor=factor, n_boot=n_boot, seed=seed)
        adv = None
        if shift_kind is not None:
            at = len(trs) // 2 if shift_at is None else shift_at
            adv = coalition(trs, k=k, p_wrong=p_wrong)
            trs = shifted_stream(trs, shift_kind, at, adv, seed=seed, protocol=protocol)
        elif shift_at is not None:
            raise InputError(f"--shift-at={shift_at} plants nothing without --shift")
        pool = Pool.from_traces(trs, protocol=protocol)
        s = StreamCounts.from_pool(pool)
        d = det.fit(s).drift(s)
    except _user_errors() as err:
        _fail(str(err))
    t_al = first_alarm(d, det.threshold_)
    res = {"sources": [str(p) for p in traces], "n_tasks": s.T, "window": window, "lam": lam, "factor": factor,
           "n_boot": n_boot, "seed": seed, "protocol": protocol, "distance": "max over seats of the mean over rows "
           "of the total-variation distance", "noise_floor": det.noise_floor_, "threshold": det.threshold_,
           "null_drift_sd": float(det.null_drifts_.std(ddof=1)), "reference_class_counts": det.class_counts_,
           "max_drift": float(np.nanmax(d)), "first_alarm": t_al,
           "first_alarm_task": None if t_al is None else pool.task_ids[t_al],
           "windows_monitored": int(np.isfinite(d).sum()), "windows_alarmed": int((d > det.threshold_).sum())}
    if shift_kind is not None:
        delay = alarm_delay(t_al, at, window)
        res.update(shift=shift_kind, shift_at=at, coalition=list(adv.seats), p_wrong=p_wrong, alarm_delay=delay,
                   alarm_before_shift=delay is not None and delay <= 0)
    typer.echo(f"row drift, W={window}: noise floor {det.noise_floor_:.4f}, alarm line {det.threshold_:.4f}, "
               f"max drift {res['max_drift']:.4f}; first alarm: "
               + ("none" if t_al is None else f"task {t_al} ({res['first_alarm_task']})")
               + ("" if shift_kind is None else f"; planted {shift_kind} at {at}, alarm delay "
                  + ("none" if res["alarm_delay"] is None else f"{res['alarm_delay']:.3f} of a window")))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        frame = pd.DataFrame({"t": np.arange(s.T), "task_id": list(pool.task_ids), "drift": d,
                              "alarm": d > det.threshold_})
        if shift_kind is not None:
            frame["shifted_fraction"] = shifted_fraction(frame["t"].to_numpy(), at, window)
        frame.to_parquet(out / "drift.parquet", index=False)
        write_json(out / "drift.json", res)
        (out / "plots").mkdir(exist_ok=True)
        plot_drift(d, det.threshold_, det.noise_floor_, out / "plots" / "drift.png", window=window,
                   shift_at=None if shift_kind is None else at, alarm=t_al)
        typer.echo(f"results: {out} (drift.json, drift.parquet, plots/drift.png)")


@app.command()
def transfer(sources: List[str] = typer.Argument(..., help="NAME=FILE source trace sets (one K), e.g. "
                                                          "truthfulqa=RUN/traces/a.jsonl."),
             target: str = typer.Option(..., "--target", help="NAME=FILE: the trace set predicted, of another K "
                                                             "(e.g. pubmedqa=RUN/traces/p.jsonl)."),
             methods: str = typer.Option("plurality,best_member,ds_em,bda_shared,bda_per_agent,bda_tempered,bda_confusion",
                                         "--methods", help="Methods, comma-separated (aggregate method names)."),
             seed: int = _SEED, inner_folds: int = _INNER,
             outer_folds: int = typer.Option(5, "--outer-folds", help="Folds of the target's in-domain comparison."),
             protocol: str = _PROTOCOL,
             out: Optional[Path] = typer.Option(None, "--out", help="Folder for transfer.parquet and transfer.json.")) -> None:
    """Cross-domain transfer (BDA paper E.2 / E.4): fit on the pooled sources, predict a target of another K, beside
    the target's in-domain nested CV; methods that cannot cross K (the confusion model) are skipped with the reason."""
    from rich.console import Console
    from rich.table import Table

    from chorus.aggregate.methods import check_method
    from chorus.aggregate.trace import load_traces
    from chorus.aggregate.transfer import cross_domain_transfer, table_records, transfer_summary

    def named(spec: str, what: str) -> tuple[str, str]:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise InputError(f"{what} is NAME=FILE, got {spec!r}")
        return name, path

    try:
        check_output(out)   # never into (or over) a run directory
        paths = dict(named(s, "a source trace set") for s in sources)
        tname, tpath = named(target, "--target")
        ms = [check_method(m.strip()) for m in methods.split(",") if m.strip()]
        table = cross_domain_transfer({n: load_traces(p) for n, p in paths.items()}, load_traces(tpath), ms,
                                      target_name=tname, seed=seed, inner_folds=inner_folds, outer_folds=outer_folds,
                                      protocol=protocol)
    except _user_errors() as err:
        _fail(str(err))
    summ = transfer_summary(table)
    t = Table(title=f"transfer {'+'.join(paths)} (K={table['K_sources'].iloc[0]}) -> {tname} "
                    f"(K={table['K_target'].iloc[0]}), beside {tname}'s in-domain nested CV")
    cols = [c for m in ("accuracy", "ece_ew", "brier") for c in (f"{m}_transfer", f"{m}_in_domain")]
    t.add_column("method")
    for c in cols:
        t.add_column(c.replace("_in_domain", " in").replace("_transfer", " tr"))
    for row in summ.to_dict("records"):
        t.add_row(str(row["method"]), *("skipped" if row.get(c) != row.get(c) else f"{row[c]:.3f}" for c in cols))
    Console().print(t)
    for row in table[table["skipped"].astype(bool)].to_dict("records"):
        typer.echo(f"skipped {row['method']}: {row['reason']}")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        table.to_parquet(out / "transfer.parquet", index=False)
        write_json(out / "transfer.json", {"sources": paths, "target": {tname: tpath}, "methods": ms, "seed": seed,
                                           "inner_folds": inner_folds, "outer_folds": outer_folds, "protocol": protocol,
                                           "rows": table_records(table)})
        typer.echo(f"results: {out} (transfer.parquet, transfer.json)")
