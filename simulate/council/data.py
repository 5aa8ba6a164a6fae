"""Council tasks from the evaluation sets (``chorus.simulate.datasets``: one loader per set, shipped with
chorus): TruthfulQA claims (K = 2, the default), StrategyQA and BoolQ (K = 2, yes/no), PubMedQA
(K = 3, class-balanced sample), MMLU (K = 4), and the optional ArgLLMs claim sets (K = 2), which
chorus may not redistribute: a user supplies them with ``data_dir`` or ``$CHORUS_DATA``.

A ``Task`` keeps its gold label apart from what a prompt may show: prompts are rendered from
``Task.public()`` only, which has no gold (tested: an honest prompt is identical whatever the
gold). Rows with a missing or unreadable gold label, or prompts too long for the small models'
windows, are excluded by the loaders and counted (``info["excluded"]``), never guessed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chorus.simulate.datasets import SHIPPED, DataError, MissingSet
from chorus.simulate.datasets import load as load_set
from chorus.core.seeding import rng

CLAIM_SETS = ("truthfulclaim", "strategyclaim", "medclaim")  # ArgLLMs: optional, not shipped
DATASETS = ("truthfulqa_claims", "strategyqa", "boolq", "pubmedqa", "mmlu", *CLAIM_SETS)
# the random stream of each dataset's draw is keyed by this index: appending keeps old draws
_STREAM = {"truthfulclaim": 0, "strategyclaim": 1, "medclaim": 2, "pubmedqa": 3, "mmlu": 4,
           "truthfulqa_claims": 5, "strategyqa": 6, "boolq": 7}

__all__ = ["Task", "DataError", "MissingSet", "DATASETS", "CLAIM_SETS", "load_tasks"]

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


def _tasks(dataset: str, data_dir: str | Path | None, subjects: list[str] | None,
           max_context_chars: int) -> tuple[list[Task], list[dict], Any]:
    opts: dict[str, Any] = {}
    if dataset in ("pubmedqa", "boolq"):
        opts["max_context_chars"] = max_context_chars
    if dataset == "mmlu" and subjects:
        opts["subjects"] = subjects
    loaded = load_set(dataset, data_dir, **opts)
    tasks = []
    for r in loaded.records:
        # ids as before the loaders were shared: traces and stores of earlier runs stay valid
        tid = f"pubmedqa-{r.row}" if dataset == "pubmedqa" else r.id
        src: dict[str, Any] = {"file": r.file, "row": r.row, **r.meta}
        tasks.append(Task(task_id=tid, dataset=dataset, question=r.question, candidates=r.labels,
                          options=r.options, gold=r.gold, source=src))
    return tasks, loaded.excluded, loaded


def load_tasks(dataset: str, n: int | None, *, seed: int = 0, data_dir: str | Path | None = None,
               balanced: bool | None = None, subjects: list[str] | None = None,
               max_context_chars: int = 1500) -> tuple[list[Task], dict[str, Any]]:
    """Load ``dataset`` and draw ``n`` tasks (all when None) with a seeded order.
    ``balanced`` (default: on for PubMedQA) draws an equal number per gold class."""

    if dataset not in DATASETS:
        raise DataError(f"unknown dataset {dataset!r} (expected one of {', '.join(DATASETS)})")
    pool, excluded, loaded = _tasks(dataset, data_dir, subjects, max_context_chars)
    if not pool:
        raise DataError(f"{dataset}: no usable rows ({len(excluded)} excluded)")
    if n is not None and n > len(pool):   # never a silent "all of them" in place of what was asked
        why = f"; {len(excluded)} rows excluded {loaded.excluded_by_reason()}" if excluded else ""
        raise DataError(f"{dataset}: n = {n} tasks asked for, but the set holds only {len(pool)} usable tasks"
                        f"{why}; ask for at most {len(pool)}, or leave n unset for all of them")
    balanced = (dataset == "pubmedqa") if balanced is None else balanced
    g = rng(seed, 7, _STREAM[dataset])
    order = [pool[int(j)] for j in g.permutation(len(pool))]
    if n is None or n == len(order) and not balanced:
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
    info = {"dataset": dataset, "data_dir": "shipped" if loaded.root == SHIPPED else str(loaded.root),
            "files": loaded.files, "available": len(pool), "n": len(chosen),
            "balanced": balanced, "gold_counts": counts, "excluded": len(excluded),
            "excluded_by_reason": loaded.excluded_by_reason()}
    return chosen, info
