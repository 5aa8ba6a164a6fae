"""The frozen judge pass (``chorus.simulate.judge``) over a debate run: its unparsed turns out as
records, the turns re-scored with the verdicts and the collective metrics after the pass back."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from chorus.core.config import load_config
from chorus.core.runs import RunDir, amends_run
from chorus.simulate.debate.config import DebateConfig
from chorus.simulate.debate.metrics import condition_metrics, question_table
from chorus.simulate.debate.questions import load_items
from chorus.simulate.judge import (DEFAULT_JUDGE, DEFAULT_PROMPT, JudgeError, judge_engine, judge_info, judge_pass,
                                   judged_answers, ledger_counts, load_judge_prompt, read_ledger, write_ledger)


def debate_records(turns: pd.DataFrame, items: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The debate's unparsed turns; a shared round-0 turn (one generation listed under each
    condition) is one record."""
    bad = turns[~turns["parsed"].astype(bool)]
    out, seen = [], set()
    for _, r in bad.iterrows():
        cond = "shared" if bool(r["shared"]) else r["condition"]
        rid = f"{r['qid']}|a{int(r['agent'])}|r{int(r['round'])}|{cond}"
        if rid in seen:
            continue
        seen.add(rid)
        it = items.get(r["qid"])
        if it is None or not it.labels:
            raise JudgeError(f"turn {rid}: question {r['qid']!r} has no labels in RUN/bench.jsonl")
        word = [str(o).lower() for o in it.options or []] == [lab.lower() for lab in it.labels]
        out.append({"part": "debate", "record_id": rid, "candidates": list(it.labels),
                    "options": None if word else list(it.options), "answer_text": r["response"],
                    "qid": r["qid"], "agent": int(r["agent"]), "round": int(r["round"]), "condition": cond})
    return out


def debate_turn_ids(turns: pd.DataFrame) -> list[str]:
    return [f"{q}|a{int(a)}|r{int(r)}|{'shared' if s else c}"
            for q, a, r, s, c in zip(turns["qid"], turns["agent"], turns["round"], turns["shared"], turns["condition"])]


def apply_debate_verdicts(turns: pd.DataFrame, ledger: pd.DataFrame | None) -> pd.DataFrame:
    """The turns table re-scored with the pass's answers (``answer``, ``parsed``, ``correct``);
    the originals stay in ``answer_original`` / ``parsed_original``, ``judged`` marks the changes."""
    m = judged_answers(ledger)
    t = turns.copy()
    t["answer_original"], t["parsed_original"] = t["answer"], t["parsed"].astype(bool)
    new = [a if p else m.get(rid) for a, p, rid in zip(t["answer"], t["parsed_original"], debate_turn_ids(t))]
    t["answer"] = new
    t["parsed"] = [a is not None for a in new]
    t["judged"] = t["parsed"] & ~t["parsed_original"]
    t["correct"] = [None if (not isinstance(ref, str)) or a is None else a == ref
                    for a, ref in zip(t["answer"], t["reference"])]
    return t


def debate_judged(turns: pd.DataFrame, ledger: pd.DataFrame | None, *, seed: int = 0) -> dict[str, Any]:
    """Per condition: parse rates before and after the pass and the collective metrics recomputed
    on the re-scored turns (the summary's own metrics stay the originals)."""
    t = apply_debate_verdicts(turns, ledger)
    q = question_table(t, seed=seed)
    out: dict[str, Any] = {"counts": ledger_counts(ledger) if ledger is not None else None, "conditions": {}}
    for cond in sorted(t["condition"].unique()):
        s = t[t["condition"] == cond]
        out["conditions"][cond] = {"parse_rate_before": float(s["parsed_original"].mean()),
                                   "parse_rate_after": float(s["parsed"].mean()),
                                   "n_turns": int(len(s)), "n_judged": int(s["judged"].sum()),
                                   "metrics_after": condition_metrics(q, t, cond)}
    return out


@amends_run
def debate_judge(run_dir: str | Path, *, profile: str = DEFAULT_JUDGE, backend: str = "auto", engine: Any = None,
                 prompt: str = DEFAULT_PROMPT, max_tokens: int = 16, rerender: bool = True,
                 make_plots: bool = True) -> dict[str, Any]:
    """The judge pass over a debate run's unparsed turns (calls in RUN/calls.sqlite); writes the
    ledger and judge.json and, unless ``rerender`` is False, sets the ``judge`` entry of an existing
    summary.json (``debate_judged``, the entry ``chorus.simulate.debate.experiment.report`` writes; the
    rest of the summary and the plots are not touched: ``chorus debate judge`` re-renders the
    whole report after the pass). ``make_plots`` is deprecated and ignored (the judge entry has
    no figure)."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file() or not (run_dir / "tables" / "turns.parquet").is_file():
        raise FileNotFoundError(f"{run_dir}: no config.yaml / tables/turns.parquet (not a debate run directory?)")
    cfg = load_config(run_dir / "config.yaml", DebateConfig)
    turns = pd.read_parquet(run_dir / "tables" / "turns.parquet")
    records = debate_records(turns, load_items(run_dir))
    eng = judge_engine(profile, backend, run_dir / "calls.sqlite", engine)
    ledger = judge_pass(eng, records, prompt=prompt, seed=cfg.seed, max_tokens=max_tokens)
    t = apply_debate_verdicts(turns, ledger)
    rates = [{"condition": c, "n_turns": int(len(s)), "parse_rate": float(s["parsed_original"].mean()),
              "parse_rate_judged": float(s["parsed"].mean()), "n_judge_mapped": int(s["judged"].sum())}
             for c, s in t.groupby("condition", sort=True)]
    info = judge_info(ledger, load_judge_prompt(prompt), eng, "debate", rates)
    write_ledger(run_dir, ledger, info, eng)
    run = RunDir(run_dir)
    if rerender and (run.path / "summary.json").is_file():
        summary = run.summary()
        summary["judge"] = debate_judged(turns, read_ledger(run_dir), seed=cfg.seed)  # as report() reads it
        run.write_summary(summary)
    return info


