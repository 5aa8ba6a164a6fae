"""``chorus belief models``: the belief-layer paper's Tables 2 and 3 across models (math:
``chorus.simulate.belief.models_table``), as a sealed analysis run: summary.json (what ``models.json``
held), table2.csv, table3.csv, tables/table2.parquet and tables/table3.parquet."""
from __future__ import annotations

from pydantic import Field

from chorus.core.analyses import AnalysisConfig, Result, analysis, run_dirs


class ModelsConfig(AnalysisConfig):
    runs: run_dirs("belief") = Field(min_length=1, description="Belief run directories of one or more models (e.g. "
                                                               "each model's regimes, committed and kappa_recovery "
                                                               "sweeps).")


def show(console, result: Result) -> None:
    import pandas as pd
    from rich.table import Table

    from chorus.simulate.belief.models_table import fmt, wide_table3
    t2 = pd.DataFrame(result.summary["table2"])
    t = Table(title=f"Table 2 across models ({len(result.summary['runs'])} runs)")
    t.add_column("metric")
    for m in t2.columns:
        t.add_column(str(m))
    for k, row in t2.iterrows():
        t.add_row(str(k), *(fmt(v) for v in row))
    console.print(t)
    w = wide_table3(pd.DataFrame(result.summary["table3"]))
    if len(w):
        t = Table(title="Table 3: median recovered kappa per prescribed kappa")
        t.add_column("model")
        for c in w.columns:
            t.add_column(c)
        for m, row in w.iterrows():
            t.add_row(str(m), *(fmt(v) for v in row))
        console.print(t)


def brief(summary: dict) -> dict:
    t2 = summary["table2"]
    out: dict = {"runs": len(summary["runs"]), "models": len(t2)}
    for m, col in t2.items():   # each model's kappa recovery, the paper's lead number of Table 2
        if isinstance(col, dict) and "kappa_spearman" in col:
            out[f"kappa_spearman ({m})"] = col["kappa_spearman"]
    return out


@analysis("belief", config=ModelsConfig, show=show, brief=brief)
def models():
    """The belief-layer paper's Tables 2 and 3 across models: the headline metrics (channel alignment, regimes,
    kappa recovery, probe audit) with one column per model, and each model's recovered kappa per prescribed
    kappa."""
    from chorus.simulate.belief.models_table import models_tables

    def compute(cfg: ModelsConfig) -> Result:
        t2, t3, sources = models_tables([str(p) for p in cfg.runs])
        return Result(summary={"runs": [str(p) for p in cfg.runs], "table2": t2.to_dict(),
                               "table3": t3.to_dict("records"), "sources": sources},
                      tables={"table2": t2.reset_index().rename(columns={"index": "metric"}), "table3": t3},
                      texts={"table2.csv": t2.to_csv(), "table3.csv": t3.to_csv(index=False)})
    return compute
