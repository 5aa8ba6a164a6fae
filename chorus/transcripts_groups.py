"""The council and role-play sides of the transcript viewer (``chorus.transcripts``): every typed move of
every council in trace order with the seats' raw replies, every message of every role-play group in
reading order with its stance label."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from chorus.transcripts_debate import INDEX_COLS, _b, _f, _i, _s, _table, record_state, standing


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
                                   "fam": ds, "dom": None, "sub": None, "turns": []})
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
            "record": record_state(run), "links": [], "notes": [note] if note else [], "n_units": len(units),
            "n_messages": sum(len(u["turns"]) for u in units.values()),
            "index_cols": INDEX_COLS,
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
            "record": record_state(run), "links": [], "notes": [], "n_units": len(units), "n_messages": sum(len(u["turns"]) for u in units.values()),
            "index_cols": INDEX_COLS,
            "index": index, "units": list(units.values())}
