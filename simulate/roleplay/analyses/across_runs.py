"""``chorus roleplay stats``: statistics across stored role-play runs (math: ``chorus.simulate.roleplay.across_runs``),
as a sealed analysis run: summary.json (what ``stats.json`` held), stats.md, tables/*.parquet, plots/errors.png."""
from __future__ import annotations

from pydantic import Field

from chorus.core.analyses import AnalysisConfig, Result, analysis, run_dirs


class StatsConfig(AnalysisConfig):
    runs: run_dirs("roleplay") = Field(min_length=1, description="Roleplay run directories (one per split and "
                                                                 "model set).")


def show(console, result: Result) -> None:
    s = result.summary
    c = s["compute"]["total"]
    console.print(f"{len(s['runs'])} runs: {len(s['normal_tests'])} normal-approximation tests, {len(s['sign_tests'])} "
                  f"sign tests, {len(s['model_sign_check'])} model-level checks, {len(s['correlations'])} correlations; "
                  f"compute {c['wall_s']:.0f} wall s, {c['gpu_hours']:.3g} GPU-hours ({c['runs_with_compute']} of "
                  f"{c['runs']} runs recorded it)", soft_wrap=True)
    for m in s["missing"]:
        console.print(f"missing {m['statistic']}: {m['missing']}; run: {m['command']}", soft_wrap=True,
                      markup=False, highlight=False)


def brief(summary: dict) -> dict:
    c = summary["compute"]["total"]
    return {"runs": len(summary["runs"]), "normal_tests": len(summary["normal_tests"]),
            "sign_tests": len(summary["sign_tests"]), "model_sign_checks": len(summary["model_sign_check"]),
            "correlations": len(summary["correlations"]), "missing": len(summary["missing"]),
            "gpu_hours": c["gpu_hours"]}


@analysis("roleplay", config=StatsConfig, show=show, brief=brief, plots=True)
def stats():
    """Statistics across stored roleplay runs (splits, models): normal approximation on the bootstrap bars,
    exact sign tests over condition cells, the model-level sign check, cross-model error correlations, and
    the runs' summed compute."""
    from chorus.simulate.roleplay.across_runs import analyse, markdown, table_for_parquet

    def compute(cfg: StatsConfig) -> Result:
        s, tables = analyse(cfg.runs)

        def errors(path):
            from chorus.simulate.roleplay.plots import error_scatter
            error_scatter(tables["bars"], path)
        return Result(summary=s, tables={n: table_for_parquet(df) for n, df in tables.items() if len(df)},
                      plots={"errors": errors} if len(tables["bars"]) else {},
                      texts={"stats.md": markdown(s, tables)})
    return compute
