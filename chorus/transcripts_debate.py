"""The debate side of the transcript viewer (``chorus.transcripts``): a debate run's turns as the page's
units, the switches between answers (``switch_table``), and the influence runs whose measurements
are shown on the turns (``links``: readouts, knockout, ablation margins, counterfactual debates),
found only through what those run directories declare. Helpers shared with
``chorus.transcripts_groups``."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd
import yaml

from chorus.core.config import InputError

NO_PEERS = ("reflection", "vote")   # conditions whose agents read no peer's message
INDEX_COLS = ["id", "family", "domain", "text", "switches", "to_peer", "measures", "messages"]


class ViewerError(InputError):
    """The directory cannot be viewed (missing, or it stores no messages)."""


# -- small helpers -------------------------------------------------------------------------------
def _read_json(p: Path) -> Any:
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def _read_yaml(p: Path) -> Any:
    try:
        return yaml.safe_load(p.read_text())
    except (OSError, yaml.YAMLError):
        return None


def _table(run: Path, name: str) -> pd.DataFrame | None:
    p = run / "tables" / f"{name}.parquet"
    if not p.is_file():
        return None
    return pd.read_parquet(p)


def _s(v: Any) -> str | None:
    """A label or None (NaN, None and non-strings that are missing)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return str(v)


def _b(v: Any) -> bool | None:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return None
    return bool(v)


def _f(v: Any, nd: int = 4) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return round(x, nd) if math.isfinite(x) else None


def _i(v: Any) -> int | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return int(x) if math.isfinite(x) else None


def record_state(run: Path) -> dict[str, Any]:
    """A run directory against its record (``chorus.core.runs.seal_state``), as the page says it: sealed,
    UNVERIFIED (no record), NOT AS WRITTEN (changed or missing files: ``problems``) or NOT SEALED (files
    the record does not list)."""
    from chorus.core.runs import MANIFEST, seal_state
    st = seal_state(run)
    if not st.sealed:
        return {"ok": False, "problems": False, "text": f"UNVERIFIED: no {MANIFEST} (the run did not finish, its "
                "record was removed, or an older chorus made it): nothing shown is checked against a record"}
    if st.problems:
        return {"ok": False, "problems": True, "text": "NOT AS WRITTEN: " + "; ".join(st.problems[:20])}
    if st.unsealed:
        return {"ok": False, "problems": False, "text": f"NOT SEALED: {len(st.unsealed)} file(s) present that the "
                f"run's record does not list: " + ", ".join(st.unsealed[:20])}
    return {"ok": True, "problems": False, "text": f"sealed: its {st.n_files} files are the ones it wrote"}


def standing(run: Path) -> dict[str, Any]:
    """Where a run's messages and numbers come from, as the page says it at the top: the one decision
    of ``chorus.serving.standing.run_standing`` (embedded demo model, a user's model, oracle or synthetic
    mode, or no recorded model: hand-written, synthetic or scripted messages)."""
    from chorus.serving.standing import run_standing
    return run_standing(run).as_dict()


# -- switches ------------------------------------------------------------------------------------
def switch_table(turns: pd.DataFrame, key: str = "answer") -> pd.DataFrame:
    """One row per turn of ``turns`` (columns qid, agent, round, condition, ``key``) with

    * ``prev``: the same agent's parsed answer one round earlier in the same condition (None when
      that turn is missing or unparsed);
    * ``switched``: True when both answers are parsed and differ, False when both are parsed and
      equal, None otherwise (an unparsed answer is neither a switch nor a stay);
    * ``to_peers``: on a switch in a condition whose agents read their peers (not ``NO_PEERS``),
      every other agent whose previous-round answer is the new answer, ascending (the peers whose
      answer it took; empty when none held it). Empty for conditions without peers.
    """
    # plain lists: a pandas string column would turn None back into NaN (and NaN != NaN)
    conds, qids, rounds, agents_ = (turns[c].tolist() for c in ("condition", "qid", "round", "agent"))
    vals = [_answer(a) for a in turns[key].tolist()]
    ans = {(c, q, int(r), int(a)): v for c, q, r, a, v in zip(conds, qids, rounds, agents_, vals)}
    agents: dict[tuple, list[int]] = {}
    for (c, q, r, a) in ans:
        agents.setdefault((c, q, r), []).append(a)
    prev, sw, to = [], [], []
    for c, q, r, a, now in zip(conds, qids, rounds, agents_, vals):
        r, a = int(r), int(a)
        p = ans.get((c, q, r - 1, a)) if r > 0 else None
        prev.append(p)
        if p is None or now is None:
            sw.append(None)
            to.append([])
            continue
        sw.append(bool(p != now))
        if p != now and c not in NO_PEERS:
            to.append(sorted(j for j in agents.get((c, q, r - 1), []) if j != a and ans.get((c, q, r - 1, j)) == now))
        else:
            to.append([])
    return pd.DataFrame({"qid": qids, "agent": agents_, "round": rounds, "condition": conds,
                         "prev": pd.Series(prev, dtype=object, index=turns.index),
                         "switched": pd.Series(sw, dtype=object, index=turns.index), "to_peers": to}, index=turns.index)


# -- linked influence runs -----------------------------------------------------------------------
@dataclass
class Link:
    """An influence run whose measurements are shown on a debate's turns."""

    path: Path
    kind: str            # readout | knockout | margins | counterfactual
    how: str             # why it is linked (what the run directory declares)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        return {"path": str(self.path), "name": self.path.name, "kind": self.kind, "how": self.how, **self.info}


def declared_source(d: Path) -> str | None:
    """The debate run an influence run declares it read: ``source.run`` of its config.yaml, else
    ``source_run`` of its provenance.json."""
    cfg = _read_yaml(d / "config.yaml")
    src = ((cfg or {}).get("source") or {}).get("run") if isinstance(cfg, dict) and isinstance(cfg.get("source"), dict) else None
    if not src:
        src = (_read_json(d / "provenance.json") or {}).get("source_run")
    return str(src) if src else None


def _points_at(src: str, d: Path, run: Path) -> bool:
    """Whether the path ``src`` that the run directory ``d`` declares is ``run``: absolute, or relative
    to the working directory or to any folder above ``d`` (where its command was started)."""
    target = run.resolve()
    p = Path(src)
    if p.is_absolute():
        return p.resolve() == target
    return any((base / p).resolve() == target for base in [Path.cwd(), *d.resolve().parents])


def _candidates(run: Path, extra: Sequence[Path]) -> list[Path]:
    run = run.resolve()
    out: list[Path] = []
    pools = [run, run.parent, run.parent.parent / "influence"]
    for pool in pools:
        if pool.is_dir():
            out += sorted(p for p in pool.iterdir() if p.is_dir() and p != run)
    out += [Path(p).resolve() for p in extra]
    return list(dict.fromkeys(out))


def links(run: Path, extra: Sequence[Path] = ()) -> list[Link]:
    """The influence runs shown on ``run``'s turns: ``run`` itself when it holds readouts, knockout or
    margins tables, then every candidate (``_candidates``: inside the run, beside it, in
    ``../influence/``, and ``extra``) whose declared source (``declared_source``) is ``run``. A folder
    named in ``extra`` that declares another source is refused (``ViewerError``)."""
    run = Path(run)
    found: list[Link] = []
    found += _measures(run, "this run's own tables", counterfactual=False)
    named = {Path(p).resolve() for p in extra}
    for d in _candidates(run, extra):
        src = declared_source(d)
        if src is None or not _points_at(src, d, run):
            if d in named:
                raise ViewerError(f"--with {d}: it does not declare {run} as its source "
                                  f"(source.run = {src!r}); only runs made from this run are shown on it")
            continue
        state = record_state(d)
        if state["problems"]:   # numbers its run did not write are never shown: named instead
            found.append(Link(d, "not shown", f"declares source.run = {src}", info={"state": state["text"]}))
            continue
        for link in _measures(d, f"declares source.run = {src}"):
            link.info["state"] = state["text"]
            found.append(link)
    return found


def _measures(d: Path, how: str, counterfactual: bool = True) -> list[Link]:
    out = []
    for name, kind in (("readouts", "readout"), ("knockout", "knockout"), ("margins", "margins")):
        t = _table(d, name) if (d / "tables" / f"{name}.parquet").is_file() else None
        if t is not None and len(t):
            out.append(Link(d, kind, how, {name: t}))
    if counterfactual and (d / "tables" / "turns.parquet").is_file() and (_read_json(d / "provenance.json") or {}).get("part") == \
            "influence-counterfactual":
        cfg = _read_yaml(d / "config.yaml") or {}
        summ = _read_json(d / "summary.json") or {}
        q = _table(d, "questions")
        out.append(Link(d, "counterfactual", how, {"turns": _table(d, "turns"), "questions": q},
                        {"receiver": _i(summ.get("receiver", cfg.get("receiver"))),
                         "peer": _i(summ.get("peer", cfg.get("peer"))),
                         "round": _i(summ.get("round", cfg.get("round"))),
                         "layers": summ.get("layers", cfg.get("layers")),
                         "queries": summ.get("queries", cfg.get("queries"))}))
    return out


# -- debate --------------------------------------------------------------------------------------
def _items(run: Path) -> tuple[dict[str, Any], str | None]:
    if not (run / "bench.jsonl").is_file():
        return {}, "no bench.jsonl in the run: question texts and options are not shown"
    try:
        from chorus.simulate.debate.questions import load_items
        return load_items(run), None
    except Exception as err:   # a damaged bench must not stop the transcripts
        return {}, f"bench.jsonl unreadable ({type(err).__name__}): question texts and options are not shown"


def _debate_turns(run: Path) -> pd.DataFrame | None:
    t = _table(run, "turns")
    if t is None or not {"qid", "agent", "round", "condition", "response"} <= set(t.columns):
        return None
    t = t.copy()
    if "answer" not in t:
        t["answer"] = None
    n = _table(run, "numeric_turns")
    if n is not None and len(n):
        n = n.copy()
        n["answer"] = n["value"].map(lambda v: float(v) if v is not None and v == v else None)
        t = pd.concat([t, n[[c for c in n.columns if c in set(t.columns) | {"value", "tolerance"}]]], ignore_index=True)
    return t


def _cond_order(conds: Iterable[str]) -> list[str]:
    base = ["debate", "reflection", "vote"]
    cs = list(dict.fromkeys(conds))
    return [c for c in base if c in cs] + [c for c in cs if c not in base]


def _answer(v: Any) -> Any:
    if isinstance(v, str):
        return v
    if isinstance(v, float) and math.isfinite(v):
        return round(v, 6)
    return None


def _turn_rows(t: pd.DataFrame, sw: pd.DataFrame) -> list[tuple[str, dict[str, Any]]]:
    """(qid, turn record) per row; shared round-0 rows stored once with every condition they belong to."""
    n = len(t)
    col = lambda c: t[c].tolist() if c in t.columns else [None] * n  # noqa: E731
    out: list[tuple[str, dict[str, Any]]] = []
    shared_seen: dict[tuple, dict] = {}
    for qid, c, r, a, text, ans, parsed, trunc, ok, tok, shared, value, prev, s, to in zip(
            col("qid"), col("condition"), col("round"), col("agent"), col("response"), col("answer"), col("parsed"),
            col("truncated"), col("correct"), col("completion_tokens"), col("shared"), col("value"),
            sw["prev"].tolist(), sw["switched"].tolist(), sw["to_peers"].tolist()):
        rec = {"c": c, "r": int(r), "a": int(a), "t": "" if text is None else str(text), "ans": _answer(ans),
               "p": _b(parsed), "tr": _b(trunc), "ok": _b(ok), "prev": _answer(prev), "sw": s, "to": list(to),
               "tok": _i(tok)}
        if value is not None and value == value:
            rec["num"] = True
        if _b(shared) and rec["r"] == 0:
            k = (qid, rec["a"], rec["t"])
            if k in shared_seen:
                shared_seen[k]["c"].append(c)
                continue
            rec["c"] = [c]
            shared_seen[k] = rec
        out.append((qid, rec))
    return out


def _round(x: Any, nd: int = 3) -> Any:
    return _f(x, nd)


def _rounded(xs: Any, nd: int = 3) -> list:
    """A sequence of numbers rounded, NaN and infinities as None (JSON has neither)."""
    if xs is None:
        return []
    return [y if math.isfinite(y) else None for y in np.round(np.asarray(xs, dtype=float), nd).tolist()]


def _debate_section(run: Path, name: str, extra: Sequence[Path]) -> dict[str, Any] | None:
    turns = _debate_turns(run)
    if turns is None or not len(turns):
        return None
    items, bench_note = _items(run)
    lk = links(run, extra)
    notes = [bench_note] if bench_note else []
    turns = turns.sort_values(["qid", "round", "condition", "agent"], kind="stable").reset_index(drop=True)
    # counterfactual arms: conditions of their own (the factual arm is the debate itself); their rounds
    # before the cut round are the debate's own turns, used for the switches and not shown twice
    frames = [turns]
    cf_from: dict[str, int] = {}
    for l in lk:
        if l.kind != "counterfactual" or l.tables.get("turns") is None:
            continue
        tag = l.path.name.removeprefix("counterfactual-")
        ct = l.tables["turns"]
        for arm in ("replay", "cut"):
            a = ct[ct["condition"] == arm].copy()
            if len(a):
                a["condition"] = f"{tag} · {arm}"
                a["shared"] = False
                frames.append(a)
                cf_from[f"{tag} · {arm}"] = l.info.get("round") or 0
    allt = pd.concat(frames, ignore_index=True) if len(frames) > 1 else turns
    sw = switch_table(allt)
    if cf_from:
        keep = [r >= cf_from.get(c, 0) for c, r in zip(allt["condition"], allt["round"])]
        allt, sw = allt[keep].reset_index(drop=True), sw[keep].reset_index(drop=True)
    units: dict[str, dict[str, Any]] = {}
    for qid in dict.fromkeys(allt["qid"]):
        it = items.get(qid)
        g = allt[allt["qid"] == qid].iloc[0] if it is None else None
        units[qid] = {"id": qid, "q": it.question if it else None,
                      "opts": [[lab, txt] for lab, txt in zip(it.labels or [], it.options or [])] if it else [],
                      "ref": _s(it.reference) if it else (_s(g["reference"]) if g is not None and "reference" in g else None),
                      "sys": it.system if it else None,
                      "fam": it.family if it else _s(g.get("family")), "dom": it.domain if it else _s(g.get("domain")),
                      "sub": it.subdomain if it else _s(g.get("subdomain")), "turns": []}
    for qid, rec in _turn_rows(allt, sw):
        units[qid]["turns"].append(rec)
    # the vote arm's samples
    votes = _table(run, "votes")
    if votes is not None and len(votes):
        for row in votes.itertuples(index=False):
            d = row._asdict()
            if d["qid"] in units:
                units[d["qid"]]["turns"].append({"c": "vote", "r": None, "a": None, "s": int(d["sample"]),
                                                 "t": str(d["response"] or ""), "ans": _answer(d.get("answer")),
                                                 "p": _b(d.get("parsed")), "tr": _b(d.get("truncated")),
                                                 "sh": _b(d.get("shared")), "tok": _i(d.get("completion_tokens"))})
    linfo = [l.record() for l in lk]
    _attach_measures(units, lk, linfo)
    conds = _cond_order(c for cs in (t["c"] for u in units.values() for t in u["turns"])
                        for c in (cs if isinstance(cs, list) else [cs]))
    agents = sorted({int(a) for a in allt["agent"]})
    rounds = sorted({int(r) for r in allt["round"]})
    index = []
    for u in units.values():   # the list counts the run's own arms (not the counterfactual replays)
        deb = [t for t in u["turns"] if t.get("sw") is not None and t["c"] not in cf_from]
        n_sw = sum(bool(t["sw"]) for t in deb)
        n_peer = sum(bool(t["sw"]) and bool(t.get("to")) for t in deb)
        n_meas = sum(len(t.get("ro", ())) for t in u["turns"]) + len(u.get("ko", ())) + len(u.get("ab", ())) + \
            len(u.get("cf", ()))
        index.append([u["id"], u["fam"], u["dom"], (u["q"] or "")[:160], n_sw, n_peer, n_meas, len(u["turns"])])
    n_msgs = sum(len(u["turns"]) for u in units.values())
    return {"kind": "debate", "name": name, "path": str(run.resolve()), "standing": standing(run),
            "conditions": conds, "agents": agents, "rounds": rounds, "peers_read": [c for c in conds if c not in NO_PEERS],
            "links": linfo, "notes": notes, "n_units": len(units), "n_messages": n_msgs, "cf_from": cf_from,
            "record": record_state(run),
            "index_cols": INDEX_COLS,
            "index": index, "units": list(units.values())}


def _attach_measures(units: dict[str, dict], lk: list[Link], linfo: list[dict]) -> None:
    """Readouts onto their turns (``ro``), knockout and margins per (receiver, peer) onto the question
    (``ko``, ``ab``), counterfactual outcomes per arm onto the question (``cf``); each row names its
    link by index. A readout whose stored answer differs from the turn's is counted (``mismatch``)."""
    by_turn: dict[tuple, dict] = {}
    labels = {u["id"]: [o[0] for o in u["opts"]] for u in units.values()}
    for u in units.values():
        for t in u["turns"]:
            for c in (t["c"] if isinstance(t["c"], list) else [t["c"]]):
                if t.get("a") is not None:
                    by_turn[(u["id"], c, t["r"], t["a"])] = t
    for li, l in enumerate(lk):
        info = linfo[li]
        if l.kind == "readout":
            ro = l.tables["readouts"]
            n, miss, unmatched = 0, 0, 0
            col = lambda c: ro[c].tolist() if c in ro.columns else [None] * len(ro)  # noqa: E731
            for qid, cond, r, a, f, ans, labs, lps, arg, margin, peer in zip(
                    col("qid"), col("condition"), col("round"), col("agent"), col("f"), col("answer"), col("labels"),
                    col("logprobs"), col("argmax"), col("margin"), col("peer_answer")):
                cond = str(cond)
                t = by_turn.get((qid, cond.split("@", 1)[0], int(r), int(a)))
                if t is None:
                    unmatched += 1
                    continue
                if _s(ans) != _s(t.get("ans")):
                    miss += 1
                labs = [str(x) for x in (labs if labs is not None else [])]
                row = [li, cond, _f(f, 3), _s(arg), _rounded(lps), _round(margin), _s(peer)]
                if labs != labels.get(qid):   # the question's own labels (the usual case) are not repeated
                    row.append(labs)
                t.setdefault("ro", []).append(row)
                n += 1
            info.update(n_rows=n, n_unmatched=unmatched, n_answer_mismatch=miss)
        elif l.kind == "knockout":
            k = l.tables["knockout"]
            k = k[k["kind"] == "all"] if "kind" in k else k
            n = 0
            for row in k.itertuples(index=False):
                d = row._asdict()
                u = units.get(d["qid"])
                if u is None:
                    continue
                u.setdefault("ko", []).append([li, int(d["receiver"]), int(d["peer"]), _s(d.get("queries")),
                                               _s(d.get("mixer")), _round(d.get("margin_full")),
                                               _round(d.get("margin_no_message")), _round(d.get("margin_knockout")),
                                               _s(d.get("own_answer")), _s(d.get("peer_answer"))])
                n += 1
            info.update(n_rows=n, shown="the all-layer conditions (kind = all); the per-layer sweep is in its table")
        elif l.kind == "margins":
            m = l.tables["margins"]
            n = 0
            for row in m.itertuples(index=False):
                d = row._asdict()
                u = units.get(d["qid"])
                if u is None or "receiver" not in d:
                    continue
                u.setdefault("ab", []).append([li, int(d["receiver"]), int(d["peer"]), _s(d.get("intervention")),
                                               _round(d.get("margin")), _s(d.get("own_answer")), _s(d.get("peer_answer"))])
                n += 1
            info.update(n_rows=n)
        elif l.kind == "counterfactual":
            q = l.tables.get("questions")
            n = 0
            if q is not None:
                for row in q.itertuples(index=False):
                    d = row._asdict()
                    u = units.get(d["qid"])
                    if u is None:
                        continue
                    u.setdefault("cf", []).append([li, str(d["arm"]), _s(d.get("receiver_before")),
                                                   _s(d.get("peer_answer_before")), _s(d.get("receiver_at_round")),
                                                   _s(d.get("receiver_final")), _f(d.get("adopted_at_round"), 1),
                                                   _f(d.get("adopted_final"), 1)])
                    n += 1
            info.update(n_rows=n, tag=l.path.name.removeprefix("counterfactual-"))
