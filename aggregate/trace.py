"""Council traces: the JSONL interchange format between the councils and the aggregators.

One task per line::

    {"task_id": "tqa-0007", "candidates": ["true", "false"], "gold": "false",
     "moves": [{"agent": "A1", "round": 0, "force": "propose", "answer": "true", "confidence": 0.8},
               {"agent": "A2", "round": 1, "force": "challenge", "target": 0}]}

``Trace.from_dict`` validates the structure (types, candidates, gold, answers, targets);
whether a move is *legal* under a council protocol is the automaton's job
(``chorus.aggregate.moves``). Unknown keys are kept in ``extra`` and written back unchanged.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from chorus.aggregate.errors import TraceError
from chorus.core.jsonl import iter_jsonl, open_text

FORCES = ("propose", "vote", "concede", "challenge", "retract", "abstain")
#: forces that must name an answer, and forces that must name a target move
NEEDS_ANSWER = frozenset({"propose", "vote"})
NEEDS_TARGET = frozenset({"concede", "challenge"})

_MOVE_KEYS = ("agent", "round", "force", "answer", "target", "confidence", "text")
_TRACE_KEYS = ("task_id", "candidates", "gold", "moves", "question_id")


@dataclass(frozen=True, slots=True)
class Move:
    """One typed move. ``target`` indexes an earlier move of the same trace."""

    agent: str
    round: int
    force: str
    answer: str | None = None
    target: int | None = None
    confidence: float | None = None
    text: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"agent": self.agent, "round": self.round, "force": self.force}
        for k in ("answer", "target", "confidence", "text"):
            v = getattr(self, k)
            if v is not None:
                d[k] = v
        d.update(self.extra)
        return d


@dataclass(frozen=True, slots=True)
class Trace:
    """One task: candidates, optional gold answer, and the ordered moves of the council."""

    task_id: str
    candidates: tuple[str, ...]
    moves: tuple[Move, ...]
    gold: str | None = None
    question_id: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    # -- construction ------------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Trace":
        """Build a trace from one JSONL trace record; raises ``TraceError`` naming the
        task, the move index and the field on any structural problem."""
        if not isinstance(d, Mapping):
            raise TraceError(f"a trace record must be a JSON object, got {type(d).__name__}")
        if "task_id" not in d:
            raise TraceError("trace record has no 'task_id'")
        tid = d["task_id"]
        if isinstance(tid, bool) or not isinstance(tid, (str, int)) or tid == "":
            raise TraceError(f"task_id must be a non-empty string, got {tid!r}")
        tid = str(tid)
        where = f"task {tid!r}"

        cands = d.get("candidates")
        if not isinstance(cands, (list, tuple)):
            raise TraceError(f"{where}: 'candidates' must be a list of strings, got {cands!r}")
        if len(cands) < 2:
            raise TraceError(f"{where}: needs at least two candidates, got {len(cands)}: {list(cands)!r}")
        for c in cands:
            if not isinstance(c, str) or c == "":
                raise TraceError(f"{where}: candidate {c!r} is not a non-empty string")
        if len(set(cands)) != len(cands):
            dup = sorted({c for c in cands if list(cands).count(c) > 1})
            raise TraceError(f"{where}: duplicate candidates {dup!r}")
        cands = tuple(cands)
        cset = frozenset(cands)

        gold = d.get("gold")
        if gold is not None and gold not in cset:
            raise TraceError(f"{where}: gold {gold!r} is not one of the candidates {list(cands)!r}")

        qid = d.get("question_id")
        if qid is not None:
            if isinstance(qid, bool) or not isinstance(qid, (str, int)):
                raise TraceError(f"{where}: question_id must be a string, got {qid!r}")
            qid = str(qid)

        raw_moves = d.get("moves")
        if not isinstance(raw_moves, (list, tuple)):
            raise TraceError(f"{where}: 'moves' must be a list, got {raw_moves!r}")
        if len(raw_moves) == 0:
            raise TraceError(f"{where}: empty trace (no moves)")
        moves = tuple(_parse_move(m, j, where, cands, cset) for j, m in enumerate(raw_moves))
        extra = {k: v for k, v in d.items() if k not in _TRACE_KEYS}
        return cls(task_id=tid, candidates=cands, moves=moves, gold=gold, question_id=qid,
                   extra=extra)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"task_id": self.task_id, "candidates": list(self.candidates)}
        if self.question_id is not None:
            d["question_id"] = self.question_id
        d["gold"] = self.gold
        d["moves"] = [m.to_dict() for m in self.moves]
        d.update(self.extra)
        return d

    # -- views -------------------------------------------------------------------------
    @property
    def K(self) -> int:
        return len(self.candidates)

    @property
    def agents(self) -> tuple[str, ...]:
        """Agents in order of first appearance."""
        return tuple(dict.fromkeys(m.agent for m in self.moves))

    @property
    def qid(self) -> str:
        """The question this task asks (``question_id`` when given, else ``task_id``)."""
        return self.question_id if self.question_id is not None else self.task_id

    def with_gold(self, gold: str | None) -> "Trace":
        if gold is not None and gold not in self.candidates:
            raise TraceError(f"task {self.task_id!r}: gold {gold!r} is not one of the candidates "
                             f"{list(self.candidates)!r}")
        return replace(self, gold=gold)

    def truncate(self, max_round: int) -> "Trace":
        """Keep the moves of rounds <= ``max_round`` (targets stay valid: they point back)."""
        kept = [m for m in self.moves if m.round <= max_round]
        if len(kept) != len(self.moves):
            # moves are kept by position; a kept move may only target a kept one
            keep_idx = {j for j, m in enumerate(self.moves) if m.round <= max_round}
            new_index = {old: new for new, old in enumerate(sorted(keep_idx))}
            out = []
            for j in sorted(keep_idx):
                m = self.moves[j]
                if m.target is not None:
                    if m.target not in new_index:
                        raise TraceError(f"task {self.task_id!r}, move {j}: targets move {m.target} "
                                         f"of a later round; cannot truncate to round {max_round}")
                    m = replace(m, target=new_index[m.target])
                out.append(m)
            kept = out
        if not kept:
            raise TraceError(f"task {self.task_id!r}: no moves left at rounds <= {max_round}")
        return replace(self, moves=tuple(kept))


def _parse_move(m: Any, j: int, where: str, cands: tuple[str, ...], cset: frozenset) -> Move:
    at = f"{where}, move {j}"
    if not isinstance(m, Mapping):
        raise TraceError(f"{at}: a move must be a JSON object, got {type(m).__name__}")
    agent = m.get("agent")
    if isinstance(agent, bool) or not isinstance(agent, (str, int)) or agent == "":
        raise TraceError(f"{at}: 'agent' must be a non-empty string, got {agent!r}")
    agent = str(agent)
    rnd = m.get("round")
    if isinstance(rnd, bool) or not isinstance(rnd, int) or rnd < 0:
        raise TraceError(f"{at}: 'round' must be an integer >= 0, got {rnd!r}")
    force = m.get("force")
    if not isinstance(force, str) or force.lower() not in FORCES:
        raise TraceError(f"{at}: unknown force {force!r} (expected one of {', '.join(FORCES)})")
    force = force.lower()
    answer = m.get("answer")
    if answer is not None and answer not in cset:
        raise TraceError(f"{at}: answer {answer!r} is not one of the candidates {list(cands)!r}")
    if force in NEEDS_ANSWER and answer is None:
        raise TraceError(f"{at}: a {force} move needs an 'answer'")
    target = m.get("target")
    if target is not None:
        if isinstance(target, bool) or not isinstance(target, int):
            raise TraceError(f"{at}: 'target' must be an integer move index, got {target!r}")
        if target < 0:
            raise TraceError(f"{at}: target {target} is out of range (moves are indexed from 0)")
        if target >= j:
            raise TraceError(f"{at}: target {target} points forward (a target must be an earlier "
                             f"move, index < {j})")
    if force in NEEDS_TARGET and target is None:
        raise TraceError(f"{at}: a {force} move needs a 'target' (index of an earlier move)")
    conf = m.get("confidence")
    if conf is not None:
        if isinstance(conf, bool) or not isinstance(conf, (int, float)) or not math.isfinite(conf) \
                or not 0.0 <= conf <= 1.0:
            raise TraceError(f"{at}: confidence must be a number in [0, 1], got {conf!r}")
        conf = float(conf)
    text = m.get("text")
    if text is not None and not isinstance(text, str):
        raise TraceError(f"{at}: 'text' must be a string, got {type(text).__name__}")
    extra = {k: v for k, v in m.items() if k not in _MOVE_KEYS}
    return Move(agent=agent, round=rnd, force=force, answer=answer, target=target,
                confidence=conf, text=text, extra=extra)


# -- files -------------------------------------------------------------------------------
def iter_traces(path: str | Path) -> Iterator[tuple[int, Trace]]:
    """Yield ``(line_number, trace)``; a malformed line raises ``TraceError`` naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"trace file not found: {path}")
    for lineno, rec in iter_jsonl(path, error=TraceError):
        try:
            yield lineno, Trace.from_dict(rec)
        except TraceError as err:
            raise TraceError(f"{path} line {lineno}: {err}") from None


def load_traces(path: str | Path) -> list[Trace]:
    """Read a JSONL (or JSONL.gz) trace file; task ids must be unique within it."""
    out: list[Trace] = []
    seen: dict[str, int] = {}
    for lineno, tr in iter_traces(path):
        if tr.task_id in seen:
            raise TraceError(f"{path} line {lineno}: duplicate task_id {tr.task_id!r} (first on line "
                             f"{seen[tr.task_id]}); repeats of a question need distinct task_ids and "
                             f"a shared question_id")
        seen[tr.task_id] = lineno
        out.append(tr)
    if not out:
        raise TraceError(f"{path}: no traces")
    return out


def trace_line(tr: Trace) -> str:
    """The canonical JSONL line of a trace (what ``dump_traces`` writes and hashes)."""
    return json.dumps(tr.to_dict(), separators=(",", ":"), ensure_ascii=False)


def traces_sha256(traces: Iterable[Trace]) -> str:
    """SHA-256 of the canonical JSONL text of ``traces`` (independent of compression)."""
    import hashlib

    h = hashlib.sha256()
    for tr in traces:
        h.update((trace_line(tr) + "\n").encode("utf-8"))
    return h.hexdigest()


def dump_traces(traces: Iterable[Trace], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_text(path, "w") as fh:
        for tr in traces:
            fh.write(trace_line(tr) + "\n")
    return path


def as_traces(obj: Any) -> list[Trace]:
    """Accept a Trace, a dict, a path, or a sequence of traces/dicts."""
    if isinstance(obj, Trace):
        return [obj]
    if isinstance(obj, (str, Path)):
        return load_traces(obj)
    if isinstance(obj, Mapping):
        return [Trace.from_dict(obj)]
    if isinstance(obj, Sequence) or hasattr(obj, "__iter__"):
        out = [t if isinstance(t, Trace) else Trace.from_dict(t) for t in obj]
        if not out:
            raise TraceError("no traces given")
        return out
    raise TypeError(f"cannot read traces from {type(obj).__name__}")
