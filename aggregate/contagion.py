"""Contagion under attack (BDA paper App. G / F.14): genuine seats flipped by the coalition, and the
effective corrupted fraction against the nominal one.

Read from attacked traces that name their adversarial seats (``adversaries``, as live councils write
them). Per trace:

* a genuine seat is *flipped* when its round-0 proposal was right and its last positive endorsement
  (its final answer) is wrong; *challenged* when an adversarial seat challenged one of its moves;
* *nominal* corrupted fraction: adversarial seats / seats; *effective*: (adversarial seats + genuine
  seats whose final answer is wrong) / seats, the share of the council that ends on a wrong answer
  through attack or contagion (the paper: 0.68 / 0.72 against 2/3 at k = 2).

Genuine seats whose round-0 proposal was already wrong are not counted as flipped (no contagion is
needed for them), but they do count in the effective fraction, which is about what the aggregator
finally faces.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from chorus.aggregate.errors import TraceError
from chorus.aggregate.moves import get_protocol
from chorus.aggregate.trace import Trace


def seat_outcomes(traces: Sequence[Trace], protocol: str = "strict") -> pd.DataFrame:
    """One row per (trace, genuine seat): right at round 0, right at the end, challenged by an adversary,
    flipped. Traces without gold or without ``adversaries`` are an error naming the first."""
    proto = get_protocol(protocol)
    rows = []
    for tr in traces:
        adv = tr.extra.get("adversaries")
        if adv is None or tr.gold is None:
            raise TraceError(f"task {tr.task_id!r}: contagion needs labelled traces that name their adversarial "
                             f"seats ('adversaries'; live council attack traces do)")
        adv = set(adv)
        _, ends = proto.run(tr)
        first: dict[str, str] = {}
        last: dict[str, str] = {}
        for en in ends:
            if en.sign > 0:
                if en.round == 0 and en.agent not in first and tr.moves[en.move].force == "propose":
                    first[en.agent] = en.candidate
                last[en.agent] = en.candidate
        challenged = {tr.moves[m.target].agent for m in tr.moves
                      if m.force == "challenge" and m.agent in adv and m.target is not None}
        for seat in tr.agents:
            if seat in adv:
                continue
            r0, fin = first.get(seat), last.get(seat)
            rows.append({"task_id": tr.task_id, "seat": seat, "n_seats": len(tr.agents), "n_adversaries": len(adv),
                         "right_round0": r0 == tr.gold if r0 is not None else None,
                         "right_final": fin == tr.gold if fin is not None else None,
                         "challenged": seat in challenged,
                         "flipped": r0 == tr.gold and fin is not None and fin != tr.gold})
    return pd.DataFrame(rows)


def contagion_summary(traces: Sequence[Trace], protocol: str = "strict") -> dict[str, Any]:
    """Flip rates (all genuine seats, and those challenged by the coalition) and the nominal vs effective
    corrupted fraction, averaged over traces."""
    s = seat_outcomes(traces, protocol)
    if not len(s):
        raise TraceError("no genuine seat in these traces: every seat is adversarial")
    per = s.groupby("task_id").agg(n_seats=("n_seats", "first"), n_adv=("n_adversaries", "first"),
                                   wrong_final=("right_final", lambda x: int((x == False).sum())))  # noqa: E712
    nominal = (per["n_adv"] / per["n_seats"]).to_numpy(float)
    effective = ((per["n_adv"] + per["wrong_final"]) / per["n_seats"]).to_numpy(float)
    right0 = s[s["right_round0"] == True]  # noqa: E712
    ch = right0[right0["challenged"]]
    return {"n_traces": int(len(per)), "n_genuine_seat_tasks": int(len(s)),
            "flip_rate": float(right0["flipped"].mean()) if len(right0) else float("nan"),
            "flip_rate_when_challenged": float(ch["flipped"].mean()) if len(ch) else float("nan"),
            "n_challenged": int(len(ch)), "nominal_corrupted_fraction": float(np.mean(nominal)),
            "effective_corrupted_fraction": float(np.mean(effective))}
