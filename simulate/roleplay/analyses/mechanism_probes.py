"""``chorus roleplay probes``: the mechanism probes across stored role-play runs (math:
``chorus.simulate.roleplay.mechanism_probes``), as a sealed analysis run: summary.json (what ``probes.json`` held),
probes.md, tables/*.parquet, plots/probes.png."""
from __future__ import annotations

from pydantic import Field

from chorus.core.analyses import AnalysisConfig, Result, analysis, run_dirs


class ProbesConfig(AnalysisConfig):
    runs: run_dirs("roleplay") = Field(min_length=1, description="Roleplay run directories, the baseline first.")


def show(console, result: Result) -> None:
    s = result.summary
    console.print(f"{len(s['runs'])} runs (baseline {s['baseline']}): {len(s['temperature'])} temperature rows, "
                  f"{len(s['memory'])} memory rows, {len(s['on_topic'])} on-topic rows", soft_wrap=True,
                  markup=False, highlight=False)
    for m in s["missing"]:   # not markup: the commands hold YAML lists ([...])
        console.print(f"missing {m['probe']}: {m['missing']}; run: {m['command']}", soft_wrap=True,
                      markup=False, highlight=False)


def brief(summary: dict) -> dict:
    return {"runs": len(summary["runs"]), "temperature_rows": len(summary["temperature"]),
            "memory_rows": len(summary["memory"]), "on_topic_rows": len(summary["on_topic"]),
            "missing": len(summary["missing"])}


@analysis("roleplay", config=ProbesConfig, show=show, brief=brief, plots=True)
def probes():
    """The mechanism probes across stored roleplay runs: tweet/private delta SD by decoding temperature
    (T=0 / default / T=1) and with the memory ablated, and the first- vs last-round on-topic rate. The first
    RUN is the baseline; the others may differ from it only in generation.temperature or memory.ablate."""
    from chorus.simulate.roleplay.mechanism_probes import analyse, markdown

    def compute(cfg: ProbesConfig) -> Result:
        s, tables = analyse(cfg.runs)

        def bars(path):
            from chorus.simulate.roleplay.plots import probe_bars
            probe_bars(tables["temperature"], tables["memory"], path)
        return Result(summary=s, tables={n: df for n, df in tables.items() if len(df)}, plots={"probes": bars},
                      texts={"probes.md": markdown(s, tables)})
    return compute
