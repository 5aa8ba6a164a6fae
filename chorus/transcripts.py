"""``chorus view RUN`` (and ``chorus report RUN``): the transcript viewer, one self-contained HTML page
per run (``RUN/transcripts.html``) with every message the run stored, read in order.

What it shows, all read from the run's files (nothing typed here):

* debate runs (``chorus debate run``, and influence runs that generated their own turns): every turn
  of every question (``tables/turns.parquet``, numeric items from ``tables/numeric_turns.parquet``,
  the vote arm's samples from ``tables/votes.parquet``), with the question and its options
  (``bench.jsonl``). Each turn shows its parsed answer, whether the agent switched (its parsed answer
  differs from its own parsed answer one round earlier: ``switch_table``) and to whose answer (the
  peers whose previous-round answer it took; only agents that read peers can take one);
* where the run has them, the influence measurements on each turn: forced-choice readouts
  (``chorus influence readout``: ``tables/readouts.parquet``), knockout margins per (receiver, peer)
  (``chorus influence knockout``: ``tables/knockout.parquet``, the all-layer rows), ablation and cue
  margins (``tables/margins.parquet``) and counterfactual debates (``chorus influence counterfactual``:
  ``RUN/counterfactual-*/``, whose replayed and cut arms are shown as conditions of their own). They
  are taken from the run itself and from influence runs that declare this run as their source
  (``source.run`` in their config.yaml, or ``source_run`` in their provenance); those are looked for
  beside the run, in ``../influence/`` next to the run's folder, inside it, and in the folders named
  with ``--with`` (``links``);
* council runs (``chorus council run``): every typed move of every council in trace order
  (``traces/*.jsonl``), with the seat's raw reply of each attempt (``tables/turns.parquet``);
* role-play runs (``chorus roleplay run``): every message of every group, human and simulated
  (``tables/messages.parquet``), with its stance label where the classifier gave one;
* a demo directory: one section per stage that stored messages.

Size: the messages are split into chunks of about ``CHUNK_BYTES`` of JSON, each in its own
``<script type="application/json">`` element; past ``GZIP_ABOVE`` bytes in all they are gzip-compressed
and base64-encoded, and the page decodes only the chunk of the question it shows (the browser's
``DecompressionStream``). The question list is rendered a page at a time. No network request is made:
the script is inline and reads nothing but the page.
"""
from __future__ import annotations

import base64
import gzip
import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd
import yaml

from chorus import __version__

VIEWER = "transcripts.html"
CHUNK_BYTES = 256_000      # JSON bytes per lazily decoded chunk
GZIP_ABOVE = 2_000_000     # total JSON bytes above which chunks are stored gzip + base64
ASSETS = Path(__file__).resolve().parent / "data"
NO_PEERS = ("reflection", "vote")   # conditions whose agents read no peer's message


class ViewerError(ValueError):
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


def _profiles(obj: Any) -> list[str]:
    """Every ``profile`` string in a provenance record (engines, seats), depth first."""
    if isinstance(obj, dict):
        return [v for k, v in obj.items() if k == "profile" and isinstance(v, str)] + \
            [p for v in obj.values() for p in _profiles(v)]
    if isinstance(obj, list):
        return [p for v in obj for p in _profiles(v)]
    return []


def standing(run: Path) -> dict[str, Any]:
    """Who wrote a run's messages, as the page says it at the top: the models its provenance records
    and ``chorus.serving.profiles.embedded_note`` on them; a run whose provenance names no model is
    said to be so (hand-written, synthetic or scripted messages)."""
    from chorus.serving.profiles import embedded_note
    prov = _read_json(run / "provenance.json") or {}
    models = list(dict.fromkeys(_profiles(prov)))
    note = embedded_note(models) if models else None
    if not models:
        text = ("no model is recorded in this run's provenance.json: its messages were not generated by a "
                "recorded engine (hand-written, synthetic or scripted)")
    elif note:
        text = f"Note: {note}."
    else:
        text = f"models: {', '.join(models)} (not embedded demo models)"
    return {"models": models, "embedded": bool(note), "text": text}


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
        found += _measures(d, f"declares source.run = {src}")
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
    # counterfactual arms: conditions of their own (the factual arm is the debate itself)
    cf_meta = []
    frames = [turns]
    for li, l in enumerate(lk):
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
        cf_meta.append(li)
    allt = pd.concat(frames, ignore_index=True) if len(frames) > 1 else turns
    sw = switch_table(allt)
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
    for u in units.values():
        deb = [t for t in u["turns"] if t.get("sw") is not None]
        n_sw = sum(bool(t["sw"]) for t in deb)
        n_peer = sum(bool(t["sw"]) and bool(t.get("to")) for t in deb)
        n_meas = sum(len(t.get("ro", ())) for t in u["turns"]) + len(u.get("ko", ())) + len(u.get("ab", ())) + \
            len(u.get("cf", ()))
        index.append([u["id"], u["fam"], u["dom"], (u["q"] or "")[:160], n_sw, n_peer, n_meas, len(u["turns"])])
    n_msgs = sum(len(u["turns"]) for u in units.values())
    return {"kind": "debate", "name": name, "path": str(run.resolve()), "standing": standing(run),
            "conditions": conds, "agents": agents, "rounds": rounds, "peers_read": [c for c in conds if c not in NO_PEERS],
            "links": linfo, "notes": notes, "n_units": len(units), "n_messages": n_msgs,
            "index_cols": ["id", "family", "domain", "text", "switches", "to_peer", "measures", "messages"],
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


# -- council -------------------------------------------------------------------------------------
def _council_tasks(run: Path) -> tuple[dict[str, Any], str | None]:
    """task id -> Task, reloaded from the run's config (the traces store no question text)."""
    try:
        from chorus.simulate.council.config import load
        from chorus.simulate.council.experiment import select_tasks
        cfg = load(run / "config.yaml")
        return {t.task_id: t for _, tasks, _ in select_tasks(cfg) for t in tasks}, None
    except Exception as err:   # the data moved or the config is unreadable: the moves still show
        return {}, (f"the question texts are not stored in the traces and could not be reloaded from the run's "
                    f"config ({type(err).__name__}: {' '.join(str(err).split())[:160]})")


def _council_section(run: Path, name: str) -> dict[str, Any] | None:
    from chorus.core.jsonl import iter_jsonl
    files = sorted((run / "traces").glob("*.jsonl*")) if (run / "traces").is_dir() else []
    if not files:
        return None
    tasks, note = _council_tasks(run)
    attempts: dict[tuple, list] = {}
    raw = _table(run, "turns")
    if raw is not None and len(raw):
        for row in raw.sort_values(["trace_id", "condition", "round", "agent", "attempt"]).itertuples(index=False):
            d = row._asdict()
            attempts.setdefault((d["trace_id"], d["condition"], int(d["round"]), str(d["agent"])), []).append(
                {"n": int(d["attempt"]), "t": str(d["text"] or ""), "legal": _b(d.get("legal")), "why": _s(d.get("reason")),
                 "prof": _s(d.get("profile")), "per": _s(d.get("persona"))})
    recs = []
    for f in files:
        for _, d in iter_jsonl(f):
            recs.append((f.name, d))
    seeds = {d.get("gen_seed") for _, d in recs}
    units: dict[str, dict[str, Any]] = {}
    agents: set[str] = set()
    rounds: set[int] = set()
    for fname, d in recs:
        qid = str(d.get("question_id") or d["task_id"])
        ds = d.get("dataset") or fname.split("__")[0]
        uid = f"{ds}/{qid}"
        cond = str(d.get("condition") or fname.split("__")[-1].split(".")[0])
        if len(seeds) > 1:
            cond = f"{cond} · seed {d.get('gen_seed')}"
        task = tasks.get(qid)
        u = units.setdefault(uid, {"id": uid, "q": task.question if task else None,
                                   "opts": [[c, o] for c, o in zip(task.candidates, task.options or [])] if task and task.options else [],
                                   "cands": list(d.get("candidates") or []), "ref": _s(d.get("gold")),
                                   "fam": ds, "dom": ds, "sub": None, "turns": []})
        pos: dict[str, Any] = {}      # agent -> its answer held after its latest endorsing move
        moves = d.get("moves") or []
        for j, m in enumerate(moves):
            a = str(m.get("agent"))
            r = int(m.get("round", 0))
            agents.add(a)
            rounds.add(r)
            force = m.get("force")
            ans = m.get("answer")
            before = dict(pos)
            prev = pos.get(a)
            endorses = force in ("propose", "concede", "vote")
            rec = {"c": cond, "r": r, "a": a, "m": j, "force": force, "ans": ans, "t": m.get("text") or "",
                   "ev": m.get("evidence"), "conf": m.get("confidence"), "tgt": m.get("target_agent"),
                   "tgt_ans": moves[m["target"]].get("answer") if isinstance(m.get("target"), int) and
                   0 <= m["target"] < len(moves) else None,
                   "why": m.get("abstain_reason"), "adv": a in (d.get("adversaries") or []),
                   "att": attempts.get((d["task_id"], d.get("condition"), r, a), [])}
            if endorses and prev is not None and ans is not None:
                rec["prev"] = prev
                rec["sw"] = ans != prev
                if ans != prev:
                    rec["to"] = [m["target_agent"]] if force == "concede" and m.get("target_agent") else \
                        sorted(b for b, x in before.items() if b != a and x == ans)
            if endorses and ans is not None:
                pos[a] = ans
            u["turns"].append(rec)
    index = []
    for u in units.values():
        n_sw = sum(bool(t.get("sw")) for t in u["turns"])
        n_peer = sum(bool(t.get("sw")) and bool(t.get("to")) for t in u["turns"])
        index.append([u["id"], u["fam"], u["dom"], (u["q"] or "")[:160], n_sw, n_peer, 0, len(u["turns"])])
    conds = list(dict.fromkeys(t["c"] for u in units.values() for t in u["turns"]))
    return {"kind": "council", "name": name, "path": str(run.resolve()), "standing": standing(run),
            "conditions": conds, "agents": sorted(agents), "rounds": sorted(rounds), "peers_read": conds,
            "links": [], "notes": [note] if note else [], "n_units": len(units),
            "n_messages": sum(len(u["turns"]) for u in units.values()),
            "index_cols": ["id", "family", "domain", "text", "switches", "to_peer", "measures", "messages"],
            "index": index, "units": list(units.values())}


# -- role-play -----------------------------------------------------------------------------------
KIND_ORDER = {"initial": 0, "tweet": 1, "chat": 2, "final": 3}


def _roleplay_section(run: Path, name: str) -> dict[str, Any] | None:
    msgs = _table(run, "messages")
    if msgs is None or not len(msgs) or "group_id" not in msgs:
        return None
    labels = _table(run, "labels")
    lab: dict[tuple, dict] = {}
    if labels is not None and len(labels) and {"topic", "text"} <= set(labels.columns):
        keep = [c for c in ("stance_raw", "on_topic") if c in labels.columns]
        for row in labels.itertuples(index=False):
            d = row._asdict()
            lab[(d["topic"], d["text"])] = {k: d[k] for k in keep}
    m = msgs.copy()
    m["_o"] = m["kind"].map(KIND_ORDER).fillna(9)
    # a round's chats one after another (each in its utterance order), not interleaved by utterance index
    m["_pair"] = [("" if k != "chat" else "|".join(sorted([str(a), str(b)]))) for k, a, b in
                  zip(m["kind"], m["participant"], m["partner"])]
    m = m.sort_values(["group_id", "source", "setup", "round", "_o", "_pair", "k", "participant"], kind="stable")
    units: dict[str, dict[str, Any]] = {}
    agents: set[str] = set()
    rounds: set[int] = set()
    for row in m.itertuples(index=False):
        d = row._asdict()
        g = str(d["group_id"])
        cond = "human" if d["source"] == "human" else f"{d['source']} · {d['setup']}"
        u = units.setdefault(g, {"id": g, "q": str(d["topic"]), "opts": [], "ref": None,
                                 "fam": str(d["topic"]), "dom": "truth-framed" if d.get("truth_framed") else "opinion",
                                 "sub": None, "turns": []})
        a = str(d["participant"])
        r = int(d["round"])
        agents.add(a)
        rounds.add(r)
        rec = {"c": cond, "r": r, "a": a, "kind": d["kind"], "k": _i(d.get("k")), "with": _s(d.get("partner")),
               "t": "" if d["text"] is None else str(d["text"]), "tok": _i(d.get("completion_tokens")),
               "fin": _s(d.get("finish_reason"))}
        lb = lab.get((d["topic"], d["text"]))
        if lb:
            st = lb.get("stance_raw")   # the classifier's agreement with the topic's statement, 1-6, not reverse coded
            rec["stance"] = _f(st, 3) if st is not None else None
            if "on_topic" in lb:
                rec["on_topic"] = _b(lb["on_topic"])
        u["turns"].append(rec)
    index = [[u["id"], u["fam"], u["dom"], u["q"][:160], 0, 0, 0, len(u["turns"])] for u in units.values()]
    conds = list(dict.fromkeys(t["c"] for u in units.values() for t in u["turns"]))
    conds = (["human"] if "human" in conds else []) + [c for c in conds if c != "human"]
    return {"kind": "roleplay", "name": name, "path": str(run.resolve()), "standing": standing(run),
            "conditions": conds, "agents": sorted(agents), "rounds": sorted(rounds), "peers_read": [],
            "links": [], "notes": [], "n_units": len(units), "n_messages": sum(len(u["turns"]) for u in units.values()),
            "index_cols": ["id", "family", "domain", "text", "switches", "to_peer", "measures", "messages"],
            "index": index, "units": list(units.values())}


# -- the page ------------------------------------------------------------------------------------
def sections(run_dir: str | Path, with_runs: Sequence[str | Path] = ()) -> list[dict[str, Any]]:
    """Every section of the page for ``run_dir``: the run's own (debate, council or role-play), or, for a
    demo directory, one per stage folder that stored messages."""
    run = Path(run_dir)
    extra = [Path(p) for p in with_runs]
    own = _sections_of(run, run.resolve().name, extra)
    if own:
        return own
    from chorus.stages import STAGES
    out = []
    rank = {name: k for k, name in enumerate(STAGES)}   # a demo's stages in the order it runs them
    for d in sorted((p for p in run.iterdir() if p.is_dir() and (p / "provenance.json").is_file()),
                    key=lambda p: (rank.get(p.name, len(rank)), p.name)):
        out += _sections_of(d, d.name, extra)
    return out


def _sections_of(run: Path, name: str, extra: Sequence[Path]) -> list[dict[str, Any]]:
    out = []
    for build in (lambda: _debate_section(run, name, extra), lambda: _council_section(run, name),
                  lambda: _roleplay_section(run, name)):
        s = build()
        if s is not None:
            out.append(s)
    return out


def _script_json(obj: Any) -> str:
    """JSON that is safe inside a ``<script>`` element (no ``</`` or ``<!--`` can close or open anything)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).replace("</", "<\\/") \
        .replace("<!--", "<\\u0021--")


def _chunks(units: list[dict[str, Any]]) -> list[tuple[list[str], str]]:
    """(unit ids, JSON text of the object id -> unit) per chunk of about ``CHUNK_BYTES``; each unit is
    serialised once."""
    out: list[tuple[list[str], str]] = []
    ids: list[str] = []
    parts: list[str] = []
    size = 0
    for u in units:
        part = _script_json(u["id"]) + ":" + _script_json(u)
        if parts and size + len(part) > CHUNK_BYTES:
            out.append((ids, "{" + ",".join(parts) + "}"))
            ids, parts, size = [], [], 0
        ids.append(u["id"])
        parts.append(part)
        size += len(part)
    if parts:
        out.append((ids, "{" + ",".join(parts) + "}"))
    return out


def render(secs: list[dict[str, Any]], *, title: str, run_path: str) -> tuple[str, dict[str, Any]]:
    """The page (HTML text) and what it holds (``stats``: sections, units, messages, bytes, compression)."""
    parts: list[str] = []
    meta_secs = []
    total_raw = 0
    chunked = []
    for si, s in enumerate(secs):
        ch = _chunks(s["units"])
        texts = [t for _, t in ch]
        total_raw += sum(len(t.encode()) for t in texts)
        chunked.append(texts)
        where = {uid: k for k, (ids, _) in enumerate(ch) for uid in ids}
        meta = {k: v for k, v in s.items() if k != "units"}
        meta["index"] = [row + [where[row[0]]] for row in s["index"]]
        meta["index_cols"] = s["index_cols"] + ["chunk"]
        meta["n_chunks"] = len(ch)
        meta_secs.append(meta)
    enc = "gzip" if total_raw > GZIP_ABOVE else "json"
    for si, texts in enumerate(chunked):
        for k, t in enumerate(texts):
            body = base64.b64encode(gzip.compress(t.encode(), 6, mtime=0)).decode() if enc == "gzip" else t
            parts.append(f'<script type="application/json" id="chunk-{si}-{k}" data-enc="{enc}">{body}</script>')
    n_units = sum(s["n_units"] for s in secs)
    n_msgs = sum(s["n_messages"] for s in secs)
    meta = {"title": title, "run": run_path, "version": __version__, "encoding": enc, "sections": meta_secs,
            "n_units": n_units, "n_messages": n_msgs}
    css = (ASSETS / "transcripts.css").read_text()
    js = (ASSETS / "transcripts.js").read_text()
    doc = ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
           "<meta name='viewport' content='width=device-width,initial-scale=1'>"
           "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; script-src 'unsafe-inline'; "
           "style-src 'unsafe-inline'; img-src data:\">"
           f"<title>{html.escape(title)}</title><style>{css}</style></head><body>"
           f"<noscript><p>This page renders the transcripts with its inline script; allow scripts for this file.</p></noscript>"
           f'<script type="application/json" id="meta">{_script_json(meta)}</script>'
           + "".join(parts) + f"<div id='app'></div><script>{js}</script></body></html>")
    stats = {"sections": len(secs), "units": n_units, "messages": n_msgs, "json_bytes": total_raw,
             "encoding": enc, "html_bytes": len(doc.encode())}
    return doc, stats


def viewer_path(report: str | Path) -> Path:
    """Where the viewer goes beside a report file: ``RUN/transcripts.html`` beside ``RUN/report.html``,
    ``NAME-transcripts.html`` beside any other ``NAME.html``."""
    report = Path(report)
    return report.with_name(VIEWER if report.name == "report.html" else f"{report.stem}-transcripts.html")


def transcripts_link(run_dir: str | Path, report: str | Path) -> str:
    """For ``chorus report``: write the viewer beside the report (``viewer_path``) and return the
    report's paragraph linking to it; "" for a run with no messages. A viewer that cannot be written is
    said in the paragraph, never raised: the report still renders."""
    try:
        path, st = write_viewer(run_dir, viewer_path(report), required=False)
    except Exception as err:   # the report must not fail for its companion page
        return (f"<p class='warn'>transcripts: not written ({html.escape(type(err).__name__)}: "
                f"{html.escape(' '.join(str(err).split())[:200])})</p>")
    if path is None:
        return ""
    return (f"<p><b><a href='{html.escape(path.name)}'>Transcripts</a></b>: every message of this run "
            f"({st['messages']} in {st['units']} questions or groups), by question, condition, round and agent, "
            f"with the switches between answers and the influence measurements made on them "
            f"(<code>{html.escape(path.name)}</code>, {st['html_bytes'] / 1e6:.1f} MB).</p>")


def write_viewer(run_dir: str | Path, out: str | Path | None = None, *, with_runs: Sequence[str | Path] = (),
                 required: bool = True) -> tuple[Path | None, dict[str, Any]]:
    """Write the viewer of ``run_dir`` to ``out`` (default ``RUN/transcripts.html``); returns (path, stats).
    A run that stored no messages: ``ViewerError`` when ``required``, else (None, {})."""
    run = Path(run_dir)
    if not run.is_dir():
        raise ViewerError(f"{run}: no such run directory")
    secs = sections(run, with_runs)
    if not secs:
        if required:
            src = declared_source(run)
            raise ViewerError(f"{run}: no messages to show (no debate turns, council traces or role-play messages)"
                              + (f"; it measured the turns of {src}: chorus view {src} shows them with its "
                                 f"measurements" if src else ""))
        return None, {}
    part = (_read_json(run / "provenance.json") or {}).get("part", "run")
    doc, stats = render(secs, title=f"chorus {part}: {run.resolve().name}: transcripts", run_path=str(run.resolve()))
    path = Path(out) if out is not None else run / VIEWER
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(doc, encoding="utf-8")
    tmp.replace(path)
    return path, stats
