"""Council tasks from ``../shared/data`` (read in place): the ArgLLMs claim sets (K = 2),
PubMedQA (K = 3, class-balanced sample) and MMLU (K = 4).

A ``Task`` keeps its gold label apart from what a prompt may show: prompts are rendered from
``Task.public()`` only, which has no gold (tested: an honest prompt is identical whatever the
gold). Rows with a missing or unreadable gold label, or prompts too long for the small models'
windows, are excluded and counted (``info["excluded"]``), never guessed.
"""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chorus.config import ConfigError

DEFAULT_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"

CLAIM_FILES = {
    "truthfulclaim": "argllms_claims/derived/truthfulclaim_experiment.jsonl",
    "strategyclaim": "argllms_claims/derived/strategyclaim_experiment.jsonl",
    "medclaim": "argllms_claims/derived/medclaim_experiment.jsonl",
}
DATASETS = (*CLAIM_FILES, "pubmedqa", "mmlu")
BINARY = ("true", "false")
PUBMED = ("yes", "no", "maybe")
LETTERS = ("A", "B", "C", "D")


class DataError(ConfigError):
    """A data file or row is unusable; the message names the file, the line and the field."""


@dataclass(frozen=True)
class Task:
    task_id: str
    dataset: str
    question: str  # the text a seat sees (claim, abstract + question, or MC question)
    candidates: tuple[str, ...]
    options: tuple[str, ...] | None  # option texts shown beside the candidate labels (MMLU)
    gold: str
    source: dict[str, Any] = field(default_factory=dict)

    @property
    def K(self) -> int:
        return len(self.candidates)

    def public(self) -> dict[str, Any]:
        """Everything a prompt may use (no gold)."""
        return {"task_id": self.task_id, "dataset": self.dataset, "question": self.question,
                "candidates": list(self.candidates),
                "options": None if self.options is None else list(self.options)}

    def candidate_text(self, c: str) -> str:
        """A candidate as a reader sees it (MMLU: 'B (option text)')."""
        if self.options is None:
            return c
        return f"{c} ({self.options[self.candidates.index(c)]})"


def _read_jsonl(path: Path) -> list[tuple[int, dict]]:
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    rows = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rows.append((n, json.loads(line)))
            except json.JSONDecodeError as err:
                raise DataError(f"{path} line {n}: not valid JSON ({err.msg})") from None
    return rows


def _bool_gold(v: Any) -> bool | None:
    """The claim sets encode gold as int, bool or float (SOURCE.md); anything else is missing."""
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)) and v in (0, 1):
        return bool(v)
    return None


def load_claims(name: str, data_dir: Path) -> tuple[list[Task], list[dict]]:
    path = data_dir / CLAIM_FILES[name]
    tasks, excluded = [], []
    for n, r in _read_jsonl(path):
        g = _bool_gold(r.get("valid"))
        if g is None:
            excluded.append({"dataset": name, "row": n, "reason": f"missing gold: field 'valid' = {r.get('valid')!r}"})
            continue
        if name == "medclaim":
            q, c = r.get("question"), r.get("claim_only")
            text = f"Background: {q.strip()}\nClaim: {c.strip()}" if isinstance(q, str) and isinstance(c, str) else None
        else:
            text = r.get("claim").strip() if isinstance(r.get("claim"), str) else None
        if not text:
            excluded.append({"dataset": name, "row": n, "reason": "missing field 'claim'"})
            continue
        tasks.append(Task(task_id=f"{name}-{n}", dataset=name, question=text, candidates=BINARY, options=None,
                          gold="true" if g else "false", source={"file": str(CLAIM_FILES[name]), "line": n}))
    return tasks, excluded


def load_pubmedqa(data_dir: Path, max_context_chars: int = 1500) -> tuple[list[Task], list[dict]]:
    path = data_dir / "pubmedqa" / "ori_pqal.json"
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    rows = json.loads(path.read_text(encoding="utf-8"))
    tasks, excluded = [], []
    for pmid, r in rows.items():
        gold = r.get("final_decision")
        if gold not in PUBMED:
            excluded.append({"dataset": "pubmedqa", "row": pmid, "reason": f"missing gold: final_decision = {gold!r}"})
            continue
        ctx = " ".join(r.get("CONTEXTS") or [])
        if len(ctx) > max_context_chars:
            excluded.append({"dataset": "pubmedqa", "row": pmid, "reason": f"context over {max_context_chars} chars"})
            continue
        # LONG_ANSWER is the abstract's conclusion: it leaks the answer, so it is never shown
        q = f"Abstract (without its conclusion): {ctx}\nQuestion: {r['QUESTION'].strip()}"
        tasks.append(Task(task_id=f"pubmedqa-{pmid}", dataset="pubmedqa", question=q, candidates=PUBMED,
                          options=None, gold=gold, source={"file": "pubmedqa/ori_pqal.json", "pmid": pmid}))
    return tasks, excluded


def load_mmlu(data_dir: Path, subjects: list[str] | None = None) -> tuple[list[Task], list[dict]]:
    files = sorted((data_dir / "mmlu" / "test").glob("*_test.csv"))
    if not files:
        raise DataError(f"no MMLU test files under {data_dir / 'mmlu' / 'test'}")
    tasks, excluded = [], []
    for f in files:
        subj = f.name[: -len("_test.csv")]
        if subjects and subj not in subjects:
            continue
        with f.open(encoding="utf-8", newline="") as fh:
            for i, r in enumerate(csv.DictReader(fh)):
                ans = (r.get("answer") or "").strip()
                if ans not in ("0", "1", "2", "3"):
                    excluded.append({"dataset": "mmlu", "row": f"{subj}:{i}", "reason": f"missing gold: answer = {ans!r}"})
                    continue
                opts = tuple((r.get(f"choice{k}") or "").strip() for k in range(4))
                if any(not o for o in opts) or len({o.lower() for o in opts}) < 4:
                    excluded.append({"dataset": "mmlu", "row": f"{subj}:{i}", "reason": "empty or duplicated options"})
                    continue
                tasks.append(Task(task_id=f"mmlu-{subj}-{i}", dataset="mmlu", question=r["question"].strip(),
                                  candidates=LETTERS, options=opts, gold=LETTERS[int(ans)],
                                  source={"file": f"mmlu/test/{f.name}", "row": i, "subject": subj}))
    return tasks, excluded


def load_tasks(dataset: str, n: int | None, *, seed: int = 0, data_dir: str | Path | None = None,
               balanced: bool | None = None, subjects: list[str] | None = None,
               max_context_chars: int = 1500) -> tuple[list[Task], dict[str, Any]]:
    """Load ``dataset`` and draw ``n`` tasks (all when None) with a seeded order.
    ``balanced`` (default: on for PubMedQA) draws an equal number per gold class."""
    from chorus.seeding import rng

    if dataset not in DATASETS:
        raise DataError(f"unknown dataset {dataset!r} (expected one of {', '.join(DATASETS)})")
    data = Path(data_dir) if data_dir else DEFAULT_DATA
    if not data.is_dir():
        raise DataError(f"data directory not found: {data}")
    if dataset in CLAIM_FILES:
        pool, excluded = load_claims(dataset, data)
    elif dataset == "pubmedqa":
        pool, excluded = load_pubmedqa(data, max_context_chars)
    else:
        pool, excluded = load_mmlu(data, subjects)
    if not pool:
        raise DataError(f"{dataset}: no usable rows ({len(excluded)} excluded)")
    balanced = (dataset == "pubmedqa") if balanced is None else balanced
    g = rng(seed, 7, DATASETS.index(dataset))
    order = [pool[int(j)] for j in g.permutation(len(pool))]
    if n is None or n >= len(order) and not balanced:
        chosen = order
    elif balanced:
        classes = list(order[0].candidates)
        per = {c: [t for t in order if t.gold == c] for c in classes}
        want = n if n is not None else len(order)
        quota = {c: want // len(classes) + (1 if k < want % len(classes) else 0) for k, c in enumerate(classes)}
        short = [c for c in classes if len(per[c]) < quota[c]]
        if short:
            raise DataError(f"{dataset}: a class-balanced sample of {want} needs {quota[short[0]]} tasks of class "
                            f"{short[0]!r}, only {len(per[short[0]])} are usable")
        chosen = [t for c in classes for t in per[c][: quota[c]]]
        chosen = [chosen[int(j)] for j in g.permutation(len(chosen))]
    else:
        chosen = order[:n]
    counts: dict[str, int] = {}
    for t in chosen:
        counts[t.gold] = counts.get(t.gold, 0) + 1
    reasons: dict[str, int] = {}
    for e in excluded:
        key = e["reason"].split(":")[0]
        reasons[key] = reasons.get(key, 0) + 1
    info = {"dataset": dataset, "data_dir": str(data), "available": len(pool), "n": len(chosen),
            "balanced": balanced, "gold_counts": counts, "excluded": len(excluded),
            "excluded_by_reason": reasons}
    return chosen, info
