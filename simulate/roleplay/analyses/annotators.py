"""``chorus roleplay annotators``: annotator robustness of a stored role-play run (math and model calls:
``chorus.simulate.roleplay.annotators``), as a sealed analysis run: summary.json (what ``annotators.json``
held), annotators.md, tables/{kappa,confusion,headline,labels}.parquet, plots/annotators.png. The command
keeps its hand-written options (``-m/--model``, the renamed ``--classifier``) and runs this analysis."""
from __future__ import annotations

from pydantic import Field

from chorus.core.analyses import AnalysisConfig, Result, analysis, run_dir


class AnnotatorsConfig(AnalysisConfig):
    run: run_dir("roleplay") = Field(description="A finished roleplay run directory.")
    model: list[str] = Field(default_factory=list, description="Other classifier models (profiles, model folders "
                                                               "or Hugging Face ids from the local cache).")


def _fmt(v) -> str:
    return "nan" if v is None or v != v else f"{v:.3f}"


def show(console, result: Result) -> None:
    r = result.summary
    for p, ag in r["agreement"].items():
        st, ot = ag["stance"], ag["on_topic"]
        calls = r["engines"].get(p, {}).get("model_calls")
        console.print(f"{p} vs {r['run_classifier']}: stance kappa {_fmt(st['kappa'])} (quadratic "
                      f"{_fmt(st['kappa_quadratic'])}, n={st['n']}, dropped {st['n_dropped']}), on-topic kappa "
                      f"{_fmt(ot['kappa'])} (n={ot['n']}, dropped {ot['n_dropped']}); {calls} new model calls",
                      soft_wrap=True, markup=False, highlight=False)
    if r.get("note"):
        console.print(r["note"], style="yellow", soft_wrap=True, markup=False, highlight=False)


def brief(summary: dict) -> dict:
    out: dict = {"run_classifier": summary["run_classifier"]}
    for p, ag in summary["agreement"].items():
        out[f"stance kappa ({p})"] = ag["stance"]["kappa"]
        out[f"on-topic kappa ({p})"] = ag["on_topic"]["kappa"]
    return out


@analysis("roleplay", config=AnnotatorsConfig, show=show, brief=brief, plots=True)
def annotators():
    """Annotator robustness: re-classify a stored roleplay run's texts (stance, on-topic) with other classifier
    models through the run's call store; Cohen's kappa per label against the run's classifier, confusion
    matrices, and the headline metrics recomputed under each."""
    from chorus.simulate.roleplay.annotators import compute_annotations, markdown

    def compute(cfg: AnnotatorsConfig, engines=None, progress=None) -> Result:
        summary, tables, own = compute_annotations(cfg.run, cfg.model, engines=engines, progress=progress)

        def agreement(path):
            from chorus.simulate.roleplay.plots import annotator_agreement
            annotator_agreement(tables["kappa"], tables["headline"], own, path)
        md_tables = {k: v for k, v in tables.items() if k != "labels"}
        return Result(summary=summary, tables=tables, plots={"annotators": agreement},
                      texts={"annotators.md": markdown(summary, md_tables)},
                      provenance={"engines": summary["engines"]})
    return compute
