"""``chorus aggregate transfer``: cross-domain transfer to another K (math: ``chorus.aggregate.transfer``)."""
from __future__ import annotations

from pydantic import Field

from chorus.aggregate.analyses.fields import InnerFolds, Protocol, Seed, checked_methods
from chorus.core.analyses import AnalysisConfig, Csv, NamedTraceFile, NamedTraceFiles, Result, analysis, split_named


class TransferConfig(AnalysisConfig):
    sources: NamedTraceFiles = Field(description="NAME=FILE source trace sets (one K), e.g. "
                                                 "truthfulqa=RUN/traces/a.jsonl.")
    target: NamedTraceFile = Field(description="NAME=FILE: the trace set predicted, of another K "
                                               "(e.g. pubmedqa=RUN/traces/p.jsonl).")
    methods: Csv[str] = Field(["plurality", "best_member", "ds_em", "bda_shared", "bda_per_agent", "bda_tempered",
                               "bda_confusion"], description="Methods, comma-separated (aggregate method names).")
    seed: Seed = 0
    inner_folds: InnerFolds = 5
    outer_folds: int = Field(5, description="Folds of the target's in-domain comparison.")
    protocol: Protocol = "strict"


def show(console, result: Result) -> None:
    from rich.table import Table

    from chorus.aggregate.transfer import transfer_summary

    table = result.tables["transfer"]
    (tname,) = result.summary["target"]
    t = Table(title=f"transfer {'+'.join(result.summary['sources'])} (K={table['K_sources'].iloc[0]}) -> {tname} "
                    f"(K={table['K_target'].iloc[0]}), beside {tname}'s in-domain nested CV")
    cols = [c for m in ("accuracy", "ece_ew", "brier") for c in (f"{m}_transfer", f"{m}_in_domain")]
    t.add_column("method")
    for c in cols:
        t.add_column(c.replace("_in_domain", " in").replace("_transfer", " tr"))
    for row in transfer_summary(table).to_dict("records"):
        t.add_row(str(row["method"]), *("skipped" if row.get(c) != row.get(c) else f"{row[c]:.3f}" for c in cols))
    console.print(t)
    for row in table[table["skipped"].astype(bool)].to_dict("records"):
        console.print(f"skipped {row['method']}: {row['reason']}", markup=False, highlight=False, soft_wrap=True)


def brief(summary: dict) -> dict:
    """Per method: accuracy under transfer (skipped methods left out)."""
    return {r["method"]: r["accuracy"] for r in summary["rows"]
            if r["evaluation"] == "transfer" and not r.get("skipped") and "accuracy" in r}


@analysis("aggregate", config=TransferConfig, show=show, brief=brief)
def transfer():
    """Cross-domain transfer (BDA paper E.2 / E.4): fit on the pooled sources, predict a target of another K, beside
    the target's in-domain nested CV; methods that cannot cross K (the confusion model) are skipped with the reason."""
    from chorus.aggregate.trace import load_traces
    from chorus.aggregate.transfer import cross_domain_transfer, table_records

    def compute(cfg: TransferConfig) -> Result:
        paths = dict(split_named(s, "a source trace set") for s in cfg.sources)
        tname, tpath = split_named(cfg.target, "--target")
        ms = checked_methods(cfg.methods)
        table = cross_domain_transfer({n: load_traces(p) for n, p in paths.items()}, load_traces(tpath), ms,
                                      target_name=tname, seed=cfg.seed, inner_folds=cfg.inner_folds,
                                      outer_folds=cfg.outer_folds, protocol=cfg.protocol)
        return Result(summary={"sources": paths, "target": {tname: tpath}, "methods": ms, "seed": cfg.seed,
                               "inner_folds": cfg.inner_folds, "outer_folds": cfg.outer_folds,
                               "protocol": cfg.protocol, "rows": table_records(table)},
                      tables={"transfer": table})
    return compute
