"""A debate run read as council traces, and BDA over them (``chorus debate bda RUN``).

The mapping from turns to typed moves (``MAPPING``; written into every trace and into
``RUN/bda-<condition>/mapping.json``):

* agents are anonymised ``A1..AI`` in agent order, as in a live council;
* round 0: each parsed answer is a ``propose``;
* round r >= 1: an answer equal to the agent's own latest answer is a renewed ``propose``; a changed
  answer that a peer gave in round r - 1 (what the agent read before answering) is a ``concede`` to
  that peer's round r - 1 move (the lowest-numbered such peer); any other changed answer is a
  ``propose`` (in the reflection condition no peer is read, so every move is a propose);
* an unparsed turn is no move (counted per round, never guessed), and an agent whose round-0 turn
  is unparsed makes no move on that question (the STRICT automaton takes later moves only from
  agents that proposed in round 0; counted as ``without_round_0``); a question with no parsed turn
  is no trace; numeric items (no option set) and unlabelled questions are left out and counted
  (nested cross-validation fits on gold);
* candidates are the item's option labels, gold its reference; the compute-matched vote arm, where
  the run has it, rides along as each trace's ``vote_arm`` tallies (its parsed samples);
* a trace's ``question_id`` is the item's family, so variants of one scenario are one cluster in the
  question-clustered bootstrap, as in the debate's own analysis.

Every move the mapping writes is legal under the BDA paper's STRICT automaton (one move per agent
per round, round 0 proposals only, concessions to another agent's earlier move). The pool needs one
candidate set per aggregation, so traces are grouped by their candidate set and each group is one
``aggregate`` run directory (``chorus aggregate verify`` reads it like any other).
"""
from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from chorus.aggregate.counts import Pool
from chorus.aggregate.errors import LabelError
from chorus.aggregate.selection import outer_splits, stratified_splits
from chorus.aggregate.trace import Move, Trace, dump_traces
from chorus.core.plots import save, subplots
from chorus.core.analyses import reader, reader_provenance
from chorus.core.paper import fmt
from chorus.core.runs import RunDir, write_json
from chorus.simulate.debate.questions import Item, load_items, validate_item, write_bench
from chorus.core.config import InputError

MAPPING: dict[str, Any] = {
    "version": 1,
    "agents": "A1..AI in agent order",
    "round_0": "propose (the parsed answer)",
    "kept_answer": "propose (renewed)",
    "switched_to_a_peer_answer": "concede to the lowest-numbered peer's round r-1 move with that answer",
    "switched_elsewhere": "propose",
    "unparsed_turn": "no move",
    "unparsed_round_0": "the agent makes no move on that question",
    "reflection": "no peer is read: every move is a propose",
    "vote_arm": "parsed compute-matched vote samples, tallied per candidate",
    "question_id": "the item's family (the bootstrap's cluster)",
}


class DebateTraceError(InputError):
    """A debate run cannot be read as traces; the message names the run and the problem."""


def question_moves(turns: pd.DataFrame, *, peers_visible: bool) -> tuple[list[Move], Counter]:
    """One question's turns (one condition) -> its moves, and the unparsed turns per round."""
    name = {int(a): f"A{int(a) + 1}" for a in turns["agent"].unique()}  # agent i is seat A(i+1) in every question
    moves: list[Move] = []
    unparsed: Counter = Counter()
    latest: dict[int, str] = {}  # agent -> its latest parsed answer
    prev_round: dict[int, tuple[int, str]] = {}  # agent -> (move index, answer) of the round before
    for r, g in turns.sort_values(["round", "agent"]).groupby("round", sort=True):
        this_round: dict[int, tuple[int, str]] = {}
        for a, ans in zip(g["agent"].astype(int), g["answer"]):
            if not isinstance(ans, str):
                unparsed[int(r)] += 1
                continue
            if int(r) > 0 and a not in latest:  # no round-0 proposal: STRICT takes no later move from it
                unparsed["without_round_0"] += 1
                continue
            own = latest.get(a)
            target = None
            if int(r) > 0 and own is not None and ans != own and peers_visible:
                target = next((j for p, (j, x) in sorted(prev_round.items()) if p != a and x == ans), None)
            if target is None:
                moves.append(Move(name[a], int(r), "propose", answer=ans))
            else:
                moves.append(Move(name[a], int(r), "concede", target=target))
            this_round[a] = (len(moves) - 1, ans)
            latest[a] = ans
        prev_round = this_round
    return moves, unparsed


def debate_traces(turns: pd.DataFrame, items: Mapping[str, Item], *, condition: str = "debate",
                  votes: pd.DataFrame | None = None) -> tuple[list[Trace], dict[str, Any]]:
    """A debate run's turns (``tables/turns.parquet``) as council traces of one condition.

    Returns the traces of the labelled, option-set questions and the counts of everything left out."""
    have = sorted(set(turns["condition"])) if len(turns) else []
    if condition not in have:
        raise DebateTraceError(f"condition {condition!r} is not in this run (it has {have})")
    t = turns[turns["condition"] == condition]
    tallies = _vote_tallies(votes) if votes is not None and condition == "debate" else {}
    out: list[Trace] = []
    left: Counter = Counter()
    unparsed: Counter = Counter()
    n_moves: Counter = Counter()
    for qid, g in t.groupby("qid", sort=True):
        it = items.get(qid)
        if it is None:
            raise DebateTraceError(f"question {qid!r} of the turns is not in the run's bench.jsonl")
        if it.numeric or not it.labels:
            left["numeric"] += 1
            continue
        moves, miss = question_moves(g, peers_visible=condition == "debate")
        unparsed.update(miss)
        if not moves:
            left["no_parsed_turn"] += 1
            continue
        gold = it.reference if isinstance(it.reference, str) else None
        if gold is None:
            left["unlabelled"] += 1
            continue
        if gold not in it.labels:
            raise DebateTraceError(f"question {qid!r}: reference {gold!r} is not one of its labels {it.labels}")
        n_moves.update(m.force for m in moves)
        extra: dict[str, Any] = {"source": "debate", "condition": condition, "domain": it.domain,
                                 "subdomain": it.subdomain, "family": it.family, "mapping": MAPPING["version"]}
        if qid in tallies:
            extra["vote_arm"] = {c: n for c, n in tallies[qid].items() if c in it.labels}
        out.append(Trace(task_id=str(qid), candidates=tuple(it.labels), moves=tuple(moves), gold=gold,
                         question_id=str(it.family), extra=extra))
    info = {"condition": condition, "n_questions": int(t["qid"].nunique()), "n_traces": len(out),
            "left_out": {k: int(left.get(k, 0)) for k in ("numeric", "unlabelled", "no_parsed_turn")},
            "unparsed_turns_by_round": {str(k): int(v) for k, v in sorted(unparsed.items(), key=str)
                                        if k != "without_round_0"},
            "n_unparsed_turns": int(sum(v for k, v in unparsed.items() if k != "without_round_0")),
            "n_turns_without_round_0": int(unparsed.get("without_round_0", 0)), "moves": {k: int(v) for k, v in sorted(n_moves.items())},
            "vote_arm": bool(tallies)}
    return out, info


def _vote_tallies(votes: pd.DataFrame) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = defaultdict(dict)
    ok = votes[votes["parsed"].astype(bool)]
    for (qid, ans), n in ok.groupby(["qid", "answer"]).size().items():
        out[str(qid)][str(ans)] = int(n)
    return dict(out)


def candidate_groups(traces: list[Trace]) -> dict[str, list[Trace]]:
    """Traces grouped by candidate set (``A-B-C-D``, ``no-yes``): one aggregation each."""
    groups: dict[str, list[Trace]] = defaultdict(list)
    for tr in traces:
        groups["-".join(sorted(tr.candidates))].append(tr)
    return dict(sorted(groups.items()))


def read_run(run_dir: str | Path) -> tuple[pd.DataFrame, dict[str, Item], pd.DataFrame | None]:
    """A debate run directory's turns, bench items and vote samples (None without the vote arm)."""
    run = RunDir(run_dir)
    if not (run.path / "tables" / "turns.parquet").is_file():
        raise DebateTraceError(f"{run.path}: no tables/turns.parquet (not a debate run directory?)")
    if not (run.path / "bench.jsonl").is_file():
        raise DebateTraceError(f"{run.path}: no bench.jsonl (the questions the debate ran)")
    votes = run.read_table("votes") if (run.path / "tables" / "votes.parquet").is_file() else None
    return run.read_table("turns"), load_items(run.path), votes


# -- BDA over a debate run ---------------------------------------------------------------------------
DEFAULT_CONFIG = "run_debate"  # aggregate/configs/run_debate.yaml


def _feasible(traces: list[Trace], cfg: Any) -> None:
    """Raise ``LabelError`` (naming the group's sizes) when nested CV cannot split these traces,
    before any run directory is made."""
    import numpy as np

    pool = Pool.from_traces(traces, protocol=cfg.protocol, on_violation=cfg.on_violation)
    for tr, _ in outer_splits(pool, cfg.outer_folds, cfg.seed):
        gold = pool.gold[np.asarray(tr)]
        for itr, _ in stratified_splits(gold, cfg.inner_folds, 0, f"inner folds of {len(tr)} training tasks"):
            if cfg.recalibrated():  # isotonic recalibration folds the inner training part once more
                stratified_splits(gold[np.asarray(itr)], cfg.inner_folds, 0,
                                  f"recalibration folds of {len(itr)} inner training tasks (or set recalibrate=[])")


def _config(config: str | Path, name: str, traces: Path, overrides: Mapping[str, Any] | None, vote_arm: bool):
    from chorus.aggregate.config import load_run_config  # lazy: pulls in scipy
    over = {"name": name, **dict(overrides or {}), "traces": str(traces)}
    cfg = load_run_config(config, over)
    if not vote_arm and "vote_arm" in cfg.methods:  # the run has no vote arm: the method has nothing to read
        methods = [m for m in cfg.methods if m != "vote_arm"]
        upd: dict[str, Any] = {"methods": methods}
        if cfg.recalibrate is not None:
            upd["recalibrate"] = [m for m in cfg.recalibrate if m != "vote_arm"]
        data = cfg.model_dump(mode="json", by_alias=True)
        data.update(upd)
        if data["bootstrap"].get("pairs"):
            data["bootstrap"]["pairs"] = [p for p in data["bootstrap"]["pairs"] if "vote_arm" not in p]
        cfg = type(cfg).model_validate(data)
    return cfg


def run_bda(run_dir: str | Path, *, condition: str = "debate", config: str | Path = DEFAULT_CONFIG,
            overrides: Mapping[str, Any] | None = None, out: str | Path | None = None,
            make_plots: bool = True) -> tuple[Path, dict[str, Any]]:
    """``chorus debate bda``: a debate run's turns -> traces (``RUN/bda-CONDITION/traces/GROUP.jsonl``)
    -> one ``aggregate`` run per candidate group (nested CV of every method, bootstrap, reliability
    plots) -> ``summary.json`` with each group's metrics beside the debate's own majorities."""
    import json

    from chorus.aggregate.experiments import run_experiment  # lazy: pulls in scipy

    turns, items, votes = read_run(run_dir)
    traces, info = debate_traces(turns, items, condition=condition, votes=votes)
    if not traces:
        raise DebateTraceError(f"{run_dir}: no labelled option question has a parsed turn in condition "
                               f"{condition!r} (left out: {info['left_out']})")
    out = Path(out) if out is not None else Path(run_dir) / f"bda-{condition}"
    # every group planned before any write: when none can be cross-validated the command says so in one
    # line and leaves no run behind (an unfinished one would stop the debate's report)
    plan: dict[str, tuple[Any, dict[str, Any]]] = {}
    skipped: dict[str, dict[str, Any]] = {}
    groups = candidate_groups(traces)
    for name, trs in groups.items():
        cfg = _config(config, f"debate-bda-{name}", (out / "traces" / f"{name}.jsonl").resolve(), overrides,
                      info["vote_arm"])
        g: dict[str, Any] = {"n_traces": len(trs), "candidates": list(trs[0].candidates),
                             "n_agents": len({m.agent for tr in trs for m in tr.moves})}
        try:
            _feasible(trs, cfg)
        except LabelError as err:
            skipped[name] = {**g, "skipped": str(err)}
            continue
        plan[name] = (cfg, g)
    if not plan:
        raise DebateTraceError(f"{run_dir}: no candidate group can be cross-validated: " + "; ".join(
            f"{k} ({g['n_traces']} questions): {g['skipped']}" for k, g in skipped.items()))
    # a run directory of its own (never the debate run's files): checked, held, sealed at its end
    run = RunDir.create(out, part="debate-bda", command="debate bda", source_run=str(Path(run_dir).resolve()),
                        condition=condition, **reader_provenance("debate bda", run_dir, "debate", __name__))
    write_json(out / "mapping.json", {**MAPPING, "source_run": str(Path(run_dir).resolve()), **info})
    summary: dict[str, Any] = {"source_run": str(Path(run_dir).resolve()), "condition": condition,
                               "mapping": MAPPING["version"], **info, "debate": _debate_numbers(run_dir, condition),
                               "groups": {}}
    for name, trs in groups.items():
        dump_traces(trs, out / "traces" / f"{name}.jsonl")  # skipped groups' traces too: the record of all
        if name in skipped:
            summary["groups"][name] = skipped[name]
            continue
        cfg, g = plan[name]
        results = json.loads(run_experiment(cfg, out / name).read_text())
        cell = results["cells"][0]
        g.update({"run": name, "methods": list(cell["metrics"]), "metrics": cell["metrics"],
                  "bootstrap": [b for b in cell.get("bootstrap") or [] if b["metric"] == "accuracy"]})
        summary["groups"][name] = g
    if make_plots:
        _plot(summary, out / "plots" / "bda_methods.png")
    write_json(out / "summary.json", summary)
    run.finish()
    return out, summary


def _line(name: str, b: dict[str, Any]) -> str:
    out = []
    for gname, g in b["groups"].items():
        m = g["metrics"]
        line = ", ".join(f"{k} acc {fmt(m[k]['accuracy'])}" for k in ("final_plurality", "plurality", "bda_per_agent")
                         if k in m) or f"skipped: {g['skipped']}"
        out.append(f"BDA {name}, {gname} ({g['n_traces']} questions): {line}")
    return "\n".join(out)


@reader("debate bda", part="debate", folder="bda-", line=_line)
def brief(s: dict[str, Any]) -> dict[str, Any]:
    """What a debate run's report shows of a ``debate bda`` run made in it: each group's accuracy,
    Brier and ECE per method, or why it was skipped."""
    return {"condition": s["condition"], "n_traces": s["n_traces"], "left_out": s["left_out"],
            "groups": {k: {"n_traces": g["n_traces"], "skipped": g.get("skipped"),
                           "metrics": {m: {x: v[x] for x in ("accuracy", "brier", "ece_ew")}
                                       for m, v in (g.get("metrics") or {}).items()}}
                       for k, g in s["groups"].items()}}


def _debate_numbers(run_dir: str | Path, condition: str) -> dict[str, Any]:
    """The debate's own majorities from its summary (all its labelled questions), for reference."""
    import json
    p = Path(run_dir) / "summary.json"
    if not p.is_file():
        return {}
    c = (json.loads(p.read_text()).get("conditions") or {}).get(condition) or {}
    return {k: c.get(k) for k in ("acc_initial_majority", "acc_final_majority", "wrong_unanimity", "n_scored")}


def _plot(summary: dict[str, Any], path: Path) -> None:
    """Accuracy and ECE of every method, one panel pair per candidate group."""
    groups = {k: g for k, g in summary["groups"].items() if "metrics" in g}
    fig, axes = subplots(len(groups), 2, figsize=(9.0, 0.5 + 2.6 * len(groups)), squeeze=False)
    for row, (name, g) in zip(axes, groups.items()):
        methods = g["methods"]
        for ax, metric in zip(row, ("accuracy", "ece")):
            vals = [g["metrics"][m].get(metric, float("nan")) for m in methods]
            ax.barh(range(len(methods)), vals, color="#4c72b0")
            ax.set_yticks(range(len(methods)), methods, fontsize=7)
            ax.invert_yaxis()
            ax.set_xlabel(metric)
            ax.set_title(f"{name}: {g['n_traces']} questions", fontsize=8)
    fig.suptitle(f"BDA over a debate ({summary['condition']})", fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    save(fig, path)


# -- a synthetic debate with planted reliabilities (recovery checks: tests and bench/) ------------------
def synthetic_debate(out: str | Path, reliabilities: list[float], *, n: int = 600, rounds: int = 2, seed: int = 0) -> Path:
    """A finished debate run directory (``bench.jsonl`` and ``tables/turns.parquet``) over ``n`` yes/no
    questions whose agent i answers correctly with probability ``reliabilities[i]`` in every round,
    independently: its share of moves consistent with gold is its reliability, whatever the mapping makes
    of a switch, so BDA's fitted reliabilities must recover the planted ones."""
    import numpy as np

    rng = np.random.default_rng(seed)
    items = [validate_item({"id": f"q{k:05d}", "domain": "knowledge", "subdomain": "synthetic", "family": f"q{k:05d}",
                            "question": "?", "options": ["yes", "no"], "labels": ["yes", "no"],
                            "reference": "yes" if k % 2 else "no"}) for k in range(n)]
    right = rng.random((n, rounds + 1, len(reliabilities))) < np.asarray(reliabilities)
    rows = []
    for k, it in enumerate(items):
        wrong = "no" if it.reference == "yes" else "yes"
        for r in range(rounds + 1):
            for a in range(len(reliabilities)):
                ans = it.reference if right[k, r, a] else wrong
                rows.append({"qid": it.id, "family": it.family, "domain": it.domain, "subdomain": it.subdomain,
                             "agent": a, "round": r, "condition": "debate", "shared": r == 0, "response": ans,
                             "answer": ans, "parsed": True, "reference": it.reference})
    run = RunDir.create(Path(out), part="debate", seeds={"seed": seed}, synthetic={"reliabilities": list(reliabilities)})
    write_bench(items, run.path / "bench.jsonl")
    run.write_table("turns", pd.DataFrame(rows))
    return run.path
