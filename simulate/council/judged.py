"""The frozen judge pass (``chorus.simulate.judge``) over a council run: the baselines' unparsed
answers out as records, parse rates and accuracy before and after the pass back."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from chorus.core.config import load_config
from chorus.core.runs import amends_run
from chorus.simulate.council.config import CouncilConfig
from chorus.simulate.judge import (DEFAULT_JUDGE, DEFAULT_PROMPT, JudgeError, judge_engine, judge_info, judge_pass,
                                   judged_answers, load_judge_prompt, write_ledger)


def council_records(base: pd.DataFrame) -> list[dict[str, Any]]:
    """The council baselines' unparsed answers (ArgLLMs returns a label by construction)."""
    if not len(base):
        return []
    bad = base[~base["parsed"].astype(bool)]
    if len(bad) and "response" not in base.columns:
        raise JudgeError("tables/baselines.parquet has no 'response' column (a run from before the judge pass): "
                         "rerun `chorus council run` with the same --out; the call store answers every call")
    out = []
    for _, r in bad.iterrows():
        opts = r.get("options") if "options" in base.columns else None
        opts = None if opts is None or isinstance(opts, (float, str)) else opts  # NaN / missing: no option texts
        out.append({"part": "council", "record_id": f"{r['dataset']}|{r['condition']}|{r['method']}|{r['trace_id']}",
                    "candidates": list(r["candidates"]), "options": None if opts is None else list(opts),
                    "answer_text": r["response"], "dataset": r["dataset"], "condition": r["condition"],
                    "method": r["method"], "trace_id": r["trace_id"]})
    return out


def council_judged(base: pd.DataFrame, ledger: pd.DataFrame | None) -> pd.DataFrame:
    """Per (dataset, condition, method): parse rate and accuracy over all tasks (unparsed = wrong)
    before and after the pass. The originals (``parsed``, ``answer``) are left as they were."""
    cols = ["dataset", "condition", "method", "n_tasks", "parse_rate", "parse_rate_judged", "accuracy_all",
            "accuracy_all_judged", "n_judge_mapped"]
    if not len(base):
        return pd.DataFrame(columns=cols)
    m = judged_answers(ledger)
    b = base.assign(record_id=base["dataset"] + "|" + base["condition"] + "|" + base["method"] + "|" + base["trace_id"])
    parsed = b["parsed"].astype(bool)
    after = [a if p else m.get(rid) for a, p, rid in zip(b["answer"], parsed, b["record_id"])]
    b = b.assign(after=after, correct=[p and a == g for a, p, g in zip(b["answer"], parsed, b["gold"])])
    b["correct_after"] = [a is not None and a == g for a, g in zip(b["after"], b["gold"])]
    b["mapped"] = ~parsed & b["after"].notna()
    rows = []
    for (ds, cond, meth), g in b.groupby(["dataset", "condition", "method"], sort=False):
        rows.append({"dataset": ds, "condition": cond, "method": meth, "n_tasks": int(len(g)),
                     "parse_rate": float(g["parsed"].astype(bool).mean()),
                     "parse_rate_judged": float(g["after"].notna().mean()),
                     "accuracy_all": float(g["correct"].mean()),
                     "accuracy_all_judged": float(g["correct_after"].mean()),
                     "n_judge_mapped": int(g["mapped"].sum())})
    return pd.DataFrame(rows, columns=cols)


@amends_run
def council_judge(run_dir: str | Path, *, profile: str = DEFAULT_JUDGE, backend: str = "auto", engine: Any = None,
                  prompt: str = DEFAULT_PROMPT, max_tokens: int = 16, rerender: bool = True,
                  make_plots: bool = True, aggregate: bool = True) -> dict[str, Any]:
    """The judge pass over a council run's unparsed baseline answers (calls in RUN/calls.sqlite);
    writes the ledger and judge.json. The report is not re-rendered here: call
    ``chorus.simulate.council.experiment.report(RUN)`` after it (``chorus council judge`` does).
    ``rerender``, ``make_plots`` and ``aggregate`` are deprecated and ignored (they were the
    re-render's), kept so that callers passing them still work."""
    run_dir = Path(run_dir)
    bpath = run_dir / "tables" / "baselines.parquet"
    if not (run_dir / "config.yaml").is_file() or not (run_dir / "tables" / "turns.parquet").is_file():
        raise FileNotFoundError(f"{run_dir}: no config.yaml / tables/turns.parquet (not a council run directory?)")
    cfg = load_config(run_dir / "config.yaml", CouncilConfig)
    base = pd.read_parquet(bpath) if bpath.is_file() else pd.DataFrame()
    records = council_records(base)
    eng = judge_engine(profile, backend, run_dir / "calls.sqlite", engine)
    ledger = judge_pass(eng, records, prompt=prompt, seed=cfg.seed, max_tokens=max_tokens)
    rates = council_judged(base, ledger).to_dict(orient="records")
    info = judge_info(ledger, load_judge_prompt(prompt), eng, "council", rates)
    write_ledger(run_dir, ledger, info, eng)
    return info


