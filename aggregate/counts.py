"""Counts e, c, d, N and the expanded pseudo-observations n, vectorised over many tasks.

For agent i and hypothesis g, over i's informative moves (N_i of them):

* ``e[i, g]``  positive endorsements of g;
* ``c[i, g]``  moves consistent with g: positive endorsements of g plus rejections of any a != g;
* ``d[i, g] = N_i - c[i, g]``;
* ``n[i, g']`` expanded pseudo-observations of the confusion model: propose/concede a -> {a},
  challenge/retract a -> every g' != a. This is the same tally as ``c`` (BDA paper §C.5 writes both
  as c), so ``n`` is an alias.

A ``Pool`` holds the signed endorsement tallies of many traces that share K as integer
arrays ``pos[t, i, g]`` / ``neg[t, i, g]`` (task, agent, candidate), plus round-0 proposals,
stated confidences and gold indices: everything every estimator reads. It never holds text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from chorus.aggregate.errors import LabelError, TraceError
from chorus.aggregate.moves import OnViolation, Protocol, ProtocolReport, get_protocol
from chorus.aggregate.trace import FORCES, Trace


def natural_key(s: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s))


@dataclass(eq=False)
class Pool:
    """Endorsement tallies of T traces with a common K, over a fixed agent list."""

    task_ids: tuple[str, ...]
    question_ids: tuple[str, ...]
    agents: tuple[str, ...]
    candidates: list[tuple[str, ...]]  # per task, in index order
    shared_candidates: tuple[str, ...] | None  # the common label set when every task has it
    pos: np.ndarray  # (T, I, K) positive endorsements
    neg: np.ndarray  # (T, I, K) negative endorsements (rejections)
    r0_answer: np.ndarray  # (T, I) candidate index of the round-0 proposal, -1 if none
    r0_conf: np.ndarray  # (T, I) its stated confidence, nan if none
    gold: np.ndarray  # (T,) gold candidate index, -1 if unlabelled
    report: ProtocolReport = field(default_factory=ProtocolReport)
    # (T, K) positive endorsements made in each trace's last round (a debate's final answers)
    final_votes: np.ndarray | None = None
    # (T, I, K) positive endorsements by propose / vote moves only (the reliability-estimator ablation)
    prop_pos: np.ndarray | None = None
    # (T, K) an independent vote arm's tallies carried in the trace (``vote_arm``), nan if none
    arm_votes: np.ndarray | None = None
    # (E, 6) every accepted endorsement as (task, agent, candidate, sign, round, force index into
    # trace.FORCES): what finer reliability keys re-tally (``chorus.aggregate.keys``)
    endorsements: np.ndarray | None = None

    # -- construction ------------------------------------------------------------------
    @classmethod
    def from_traces(cls, traces: Sequence[Trace], *, protocol: "str | Protocol" = "strict",
                    on_violation: OnViolation = "error", agents: Sequence[str] | None = None,
                    candidates: Sequence[str] | None = None,
                    gold: "Mapping[str, Any] | Sequence[Any] | None" = None) -> "Pool":
        """Tally ``traces``. ``agents`` fixes the agent axis (an unknown agent is an error);
        ``candidates`` fixes the shared label order; ``gold`` overrides the traces' gold
        (a mapping task_id -> label, or a sequence aligned with ``traces``)."""
        traces = list(traces)
        if not traces:
            raise TraceError("no traces given")
        proto = get_protocol(protocol)
        K = traces[0].K
        for tr in traces:
            if tr.K != K:
                raise TraceError(f"task {tr.task_id!r} has K={tr.K} candidates but task "
                                 f"{traces[0].task_id!r} has K={K}; aggregate one K at a time")
        seen: set[str] = set()
        for tr in traces:
            if tr.task_id in seen:
                raise TraceError(f"duplicate task_id {tr.task_id!r}")
            seen.add(tr.task_id)
        # shared label set?
        first = set(traces[0].candidates)
        shared = all(set(tr.candidates) == first for tr in traces)
        if candidates is not None:
            candidates = tuple(candidates)
            if not shared or set(candidates) != first:
                raise TraceError(f"these traces do not all have the candidates {list(candidates)!r}")
            shared_c: tuple[str, ...] | None = candidates
        else:
            shared_c = traces[0].candidates if shared else None
        # agent axis
        all_agents: dict[str, None] = {}
        for tr in traces:
            for m in tr.moves:
                all_agents.setdefault(m.agent, None)
        if agents is None:
            agent_list = tuple(sorted(all_agents, key=natural_key))
        else:
            agent_list = tuple(agents)
            unknown = [a for a in all_agents if a not in set(agent_list)]
            if unknown:
                raise TraceError(f"agent(s) {unknown!r} were not seen when fitting "
                                 f"(known: {list(agent_list)!r})")
        a_index = {a: i for i, a in enumerate(agent_list)}
        T, I = len(traces), len(agent_list)
        pos = np.zeros((T, I, K), dtype=np.int32)
        neg = np.zeros((T, I, K), dtype=np.int32)
        r0a = np.full((T, I), -1, dtype=np.int64)
        r0c = np.full((T, I), np.nan)
        final = np.zeros((T, K))
        prop = np.zeros((T, I, K), dtype=np.int32)
        arm = np.full((T, K), np.nan)
        report = ProtocolReport()
        ends: list[tuple[int, int, int, int, int, int]] = []
        cand_lists: list[tuple[str, ...]] = []
        for t, tr in enumerate(traces):
            cl = shared_c if shared_c is not None else tr.candidates
            cand_lists.append(cl)
            c_index = {c: k for k, c in enumerate(cl)}
            last = max(m.round for m in tr.moves)
            if tr.extra.get("vote_arm") is not None:
                arm[t] = _arm_tallies(tr, c_index)
            for en in proto.endorsements(tr, on_violation, report):
                i, k = a_index[en.agent], c_index[en.candidate]
                ends.append((t, i, k, en.sign, en.round, FORCES.index(tr.moves[en.move].force)))
                if en.sign > 0:
                    pos[t, i, k] += 1
                    if en.round == last:
                        final[t, k] += 1
                    if tr.moves[en.move].force in ("propose", "vote"):
                        prop[t, i, k] += 1
                    # the round-0 proposal (first accepted one) feeds the vote baselines
                    if en.round == 0 and r0a[t, i] < 0 and tr.moves[en.move].force == "propose":
                        r0a[t, i] = k
                        conf = tr.moves[en.move].confidence
                        r0c[t, i] = np.nan if conf is None else conf
                else:
                    neg[t, i, k] += 1
        g = _gold_indices(traces, cand_lists, gold)
        return cls(task_ids=tuple(tr.task_id for tr in traces),
                   question_ids=tuple(tr.qid for tr in traces), agents=agent_list,
                   candidates=cand_lists, shared_candidates=shared_c, pos=pos, neg=neg,
                   r0_answer=r0a, r0_conf=r0c, gold=g, report=report, final_votes=final, arm_votes=arm, prop_pos=prop,
                   endorsements=np.array(ends, dtype=np.int64).reshape(-1, 6))

    # -- shape ---------------------------------------------------------------------------
    @property
    def T(self) -> int:
        return self.pos.shape[0]

    @property
    def I(self) -> int:
        return self.pos.shape[1]

    @property
    def K(self) -> int:
        return self.pos.shape[2]

    def __len__(self) -> int:
        return self.T

    # -- counts --------------------------------------------------------------------------
    @cached_property
    def N(self) -> np.ndarray:
        """(T, I) informative moves per agent."""
        return self.pos.sum(-1) + self.neg.sum(-1)

    @property
    def e(self) -> np.ndarray:
        return self.pos

    @cached_property
    def c(self) -> np.ndarray:
        """(T, I, K) moves consistent with each hypothesis."""
        return self.pos + (self.neg.sum(-1, keepdims=True) - self.neg)

    @property
    def d(self) -> np.ndarray:
        return self.N[..., None] - self.c

    @property
    def n(self) -> np.ndarray:
        """(T, I, K) expanded pseudo-observations (confusion model); equal to ``c``."""
        return self.c

    @cached_property
    def pair_keys(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Distinct (c, d) pairs: ``key[t, i, g]`` indexes ``ck``/``dk``. With few moves per
        agent there are only a handful, so a Beta-function table per prior is a gather."""
        c, d = self.c, self.d
        m = int(max(c.max(initial=0), d.max(initial=0))) + 1
        code = c.astype(np.int64) * m + d
        uniq, key = np.unique(code, return_inverse=True)
        return key.reshape(c.shape).astype(np.intp), (uniq // m).astype(float), (uniq % m).astype(float)

    @cached_property
    def kterm(self) -> np.ndarray:
        """(T, K) the (K-1) factor summed over agents: -sum_i (N_i - e_i(g)) log(K-1)."""
        if self.K == 2:
            return np.zeros((self.T, self.K))
        return -((self.N[..., None] - self.pos).sum(1)) * np.log(self.K - 1)

    @property
    def labelled(self) -> np.ndarray:
        return self.gold >= 0

    def onehot(self, idx: np.ndarray) -> np.ndarray:
        y = np.zeros((len(idx), self.K))
        y[np.arange(len(idx)), self.gold[idx]] = 1.0
        return y

    def require_labels(self, idx: np.ndarray, what: str = "fitting") -> None:
        miss = np.flatnonzero(self.gold[idx] < 0)
        if len(miss):
            ex = [self.task_ids[idx[j]] for j in miss[:3]]
            raise LabelError(f"{what} needs gold labels, but {len(miss)} of {len(idx)} tasks have "
                             f"none (e.g. {ex!r})")

    def require_shared_labels(self, what: str) -> tuple[str, ...]:
        if self.shared_candidates is None:
            raise TraceError(f"{what} needs every task to share one candidate set (labels with "
                             f"cross-task identity); these traces have differing candidates")
        return self.shared_candidates

    # -- tidy views -----------------------------------------------------------------------
    def counts_frame(self, idx: np.ndarray | None = None) -> pd.DataFrame:
        """Tidy (task_id, agent, candidate, e, c, d, N, n) rows."""
        idx = np.arange(self.T) if idx is None else np.asarray(idx)
        T, I, K = len(idx), self.I, self.K
        tt, ii, kk = np.meshgrid(np.arange(T), np.arange(I), np.arange(K), indexing="ij")
        rows = idx[tt.ravel()]
        return pd.DataFrame({
            "task_id": np.asarray(self.task_ids, dtype=object)[rows],
            "agent": np.asarray(self.agents, dtype=object)[ii.ravel()],
            "candidate": [self.candidates[r][k] for r, k in zip(rows, kk.ravel())],
            "e": self.e[idx].ravel(), "c": self.c[idx].ravel(), "d": self.d[idx].ravel(),
            "N": np.repeat(self.N[idx].ravel(), K), "n": self.n[idx].ravel(),
        })


def _arm_tallies(tr: Trace, c_index: Mapping[str, int]) -> np.ndarray:
    """A trace's ``vote_arm`` field ({candidate: count}, e.g. a debate's compute-matched vote arm)
    as a (K,) tally; a candidate outside the task's set or a negative count is an error."""
    votes = tr.extra["vote_arm"]
    if not isinstance(votes, Mapping):
        raise TraceError(f"task {tr.task_id!r}: 'vote_arm' must map candidates to counts, got {votes!r}")
    out = np.zeros(len(c_index))
    for cand, n in votes.items():
        if cand not in c_index:
            raise TraceError(f"task {tr.task_id!r}: vote_arm candidate {cand!r} is not one of {list(c_index)!r}")
        if isinstance(n, bool) or not isinstance(n, (int, float)) or n < 0:
            raise TraceError(f"task {tr.task_id!r}: vote_arm count for {cand!r} must be >= 0, got {n!r}")
        out[c_index[cand]] = n
    return out


def _gold_indices(traces: Sequence[Trace], cand_lists, gold) -> np.ndarray:
    T = len(traces)
    out = np.full(T, -1, dtype=np.int64)
    if gold is None:
        labels = [tr.gold for tr in traces]
    elif isinstance(gold, Mapping):
        labels = [gold.get(tr.task_id, tr.gold) for tr in traces]
    elif isinstance(gold, pd.Series) and not isinstance(gold.index, pd.RangeIndex):
        labels = [gold.get(tr.task_id, tr.gold) for tr in traces]
    else:
        labels = list(gold)
        if len(labels) != T:
            raise LabelError(f"gold has {len(labels)} labels for {T} traces")
    for t, (tr, lab) in enumerate(zip(traces, labels)):
        if lab is None or (isinstance(lab, float) and np.isnan(lab)):
            continue
        if lab not in cand_lists[t]:
            raise LabelError(f"task {tr.task_id!r}: gold {lab!r} is not one of the candidates "
                             f"{list(cand_lists[t])!r}")
        out[t] = cand_lists[t].index(lab)
    return out


def trace_counts(trace: Trace, protocol: "str | Protocol" = "general") -> pd.DataFrame:
    """The counts of one trace as a tidy frame (agent, candidate, e, c, d, N, n)."""
    pool = Pool.from_traces([trace], protocol=protocol)
    return pool.counts_frame().drop(columns="task_id")
