"""The stealth adversary's compliance, measured from traces alone (BDA paper §F.2).

The role itself is a prompt (``prompts/council_v2.yaml: adversary``), the system message of a
persistent seat, so the adversary sees everything a genuine member sees. Compliance:

* ``anti_correct_r0``: share of adversary round-0 proposals whose answer is not the gold one;
* ``anti_correct_maintained``: share of adversary seat-tasks whose held answer is not the gold
  one at the end of *every* round (round 0 included), so maintained <= round 0;
* targeting: challenges of truth-holding vs ally moves, concessions to allies vs to the truth;
* the adversaries' abstentions (illegal moves out of retries).

The held answer follows the move algebra: a propose sets it, a cross-agent concede takes the
target move's answer, a challenge leaves it unchanged.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from chorus.aggregate.trace import Trace, as_traces
from chorus.core.config import InputError


def _endorsed(tr: Trace, j: int) -> str | None:
    m = tr.moves[j]
    if m.force in ("propose", "vote"):
        return m.answer
    if m.force == "concede" and m.target is not None and tr.moves[m.target].agent != m.agent:
        return _endorsed(tr, m.target)
    return None


def compliance(traces: Iterable[Trace | Mapping[str, Any]], adversaries: Sequence[str] | None = None) -> dict[str, Any]:
    """Compliance of the adversarial seats over ``traces`` (gold required). ``adversaries``
    defaults to each trace's own ``adversaries`` field."""
    trs = as_traces(list(traces))
    n_r0 = anti_r0 = n_held = anti_held = 0
    counts = {"challenge_truth": 0, "challenge_ally": 0, "concede_ally": 0, "concede_truth": 0,
              "propose_truth": 0, "propose_anti": 0, "abstain": 0}
    n_traces = 0
    for tr in trs:
        advs = list(adversaries) if adversaries is not None else list(tr.extra.get("adversaries") or [])
        if not advs:
            continue
        if tr.gold is None:
            raise InputError(f"task {tr.task_id!r}: compliance needs the gold answer")
        n_traces += 1
        held: dict[str, str | None] = {}
        always_anti = {a: True for a in advs}
        seen = {a: False for a in advs}
        rounds = sorted({m.round for m in tr.moves})
        for r in rounds:
            for j, m in enumerate(tr.moves):
                if m.round != r:
                    continue
                e = _endorsed(tr, j)
                if e is not None:
                    held[m.agent] = e
                if m.agent not in advs:
                    continue
                if m.force == "abstain":
                    counts["abstain"] += 1
                elif m.force == "propose":
                    if r == 0:
                        n_r0 += 1
                        anti_r0 += m.answer != tr.gold
                    else:
                        counts["propose_anti" if m.answer != tr.gold else "propose_truth"] += 1
                elif m.force == "challenge" and m.target is not None:
                    counts["challenge_truth" if _endorsed(tr, m.target) == tr.gold else "challenge_ally"] += 1
                elif m.force == "concede" and m.target is not None:
                    counts["concede_truth" if _endorsed(tr, m.target) == tr.gold else "concede_ally"] += 1
            for a in advs:  # the seat's held answer at the end of round r
                if held.get(a) is not None:
                    seen[a] = True
                    always_anti[a] &= held[a] != tr.gold
                elif r == 0:
                    always_anti[a] = False  # no position: not a compliant seat-task
        for a in advs:
            if seen[a]:
                n_held += 1
                anti_held += always_anti[a]
    return {"n_traces": n_traces, "n_proposals_r0": n_r0,
            "anti_correct_r0": anti_r0 / n_r0 if n_r0 else float("nan"),
            "n_seat_tasks": n_held,
            "anti_correct_maintained": anti_held / n_held if n_held else float("nan"),
            **counts}
