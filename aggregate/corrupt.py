"""Count-level corruption of existing council traces (BDA paper App. F.1, F.3, F.8 on real traces).

``corrupt_traces(traces, adversary, seed=...)`` applies the synthetic councils' adversary
(``chorus.aggregate.synthetic_councils.Adversary``) to traces a live council produced, so the dose-response
grid and the sleeper axis run over real deliberations:

* **Seats.** ``persistent``: the same seats in every task (``adversary.seats``, default the
  last k of the council's seats in natural order); ``rotating``: k fresh random seats per task
  among that task's seats. A k larger than a task's seat count is refused.
* **Which moves.** Each *informative* move of an adversarial seat (one the protocol accepts and
  that endorses or rejects a candidate: propose, vote, cross-agent concede, challenge) is
  flipped with probability ``p_wrong`` toward a wrong candidate ``w``: uniformly random among
  the non-gold candidates, or ``target="fixed"``: the candidate after gold in the task's list
  (as in ``synthetic_councils.py``). Abstentions, self-concessions and rejected moves are never touched.
* **How a move is flipped** (the redirection of ``synthetic_councils.generate_council``): propose/vote
  -> the same force with answer ``w``; concede -> a concession to an earlier-round move of
  another seat that endorses ``w`` (picked at random), else a proposal of ``w``; challenge ->
  a challenge of an earlier-round move of another seat that endorses gold, else a proposal of
  ``w``. A flipped move keeps agent, round and stated confidence (the stealth adversary states
  the same confidence); its text, which argued for the old answer, is dropped; its extras gain
  ``corrupted_from`` (the old force / answer / target) and a council's ``target_agent`` follows
  the new target.
* **Replies to a flipped move.** Another seat's concede or challenge that targets a move whose
  endorsed answer changed would otherwise change meaning (or become illegal: a concede states
  the answer it concedes to). Its own endorsement is kept: it is re-pointed to the latest
  earlier-round move of another seat that still endorses the old answer, else a concede becomes
  a proposal of that answer (the same +1), and a challenge becomes a proposal of the other
  candidate at K = 2 (the same consistent / inconsistent counts c, d). At K > 2 a challenge
  with no such target becomes a proposal of its stated answer, or, without one, keeps its
  target (it now rejects the flipped answer); those few are listed as ``changed``. Repaired
  moves gain ``repointed_from`` (the old target). So the non-adversarial seats' counts c, d
  are unchanged at K = 2, and every move neither flipped nor repaired is byte-identical.
* **Randomness.** Per task, streams ``rng(seed, 15, h(task_id), s)`` (``h`` a stable hash of
  the task id): seat choice, one uniform per move (flip when below ``p_wrong``), one wrong-answer
  draw and one target draw per move. A task's corruption therefore does not depend on the file
  order, the clean and corrupted versions pair, and a move flipped at ``p_wrong`` is flipped at
  every larger ``p_wrong`` (common random numbers along the dose axis).

A trace with at least one changed move carries ``corruption`` in its record (seats, flipped,
repaired and changed move indices); every other trace is returned as it was, so ``p_wrong = 0``
is the identity. The result is checked: the protocol accepts exactly the moves it accepted
before.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from chorus.aggregate.counts import natural_key
from chorus.aggregate.moves import get_protocol
from chorus.aggregate.synthetic_councils import Adversary
from chorus.aggregate.trace import Move, Trace
from chorus.core.seeding import rng as make_rng
from chorus.core.seeding import stable_int
from chorus.core.config import InputError

KEY_CORRUPT = 15  # synthetic_councils.py uses stream keys 10..14
KEY_SLEEPER_PICK = 14  # the sleeper's calibration pick, as in synthetic_councils.sleeper_traces
KEY_SPLIT = 16


def task_key(task_id: str) -> int:
    """A stable 31-bit integer per task id (streams must not depend on list position)."""
    return stable_int(task_id, bits=31)


def council_seats(traces: Sequence[Trace]) -> tuple[str, ...]:
    """Every seat of the traces, in natural order (A2 before A10)."""
    return tuple(sorted({a for tr in traces for a in tr.agents}, key=natural_key))


def _check(traces: Sequence[Trace], adversary: Adversary) -> tuple[str, ...] | None:
    """Refuse an adversary the traces cannot hold; the persistent seats (None for rotating)."""
    for tr in traces:
        n = len(tr.agents)
        if adversary.k > n:
            raise InputError(f"adversary k={adversary.k} exceeds the {n} seats of task {tr.task_id!r} "
                             f"(seats {list(tr.agents)!r})")
    if adversary.kind != "persistent":
        return None
    seats = council_seats(traces)
    names = tuple(adversary.seats) if adversary.seats is not None else seats[len(seats) - adversary.k:]
    unknown = [s for s in names if s not in seats]
    if unknown or len(set(names)) != adversary.k:
        raise InputError(f"adversary seats {list(names)!r} must be {adversary.k} distinct seats of "
                         f"{list(seats)!r}")
    return names


def corrupt_traces(traces: Sequence[Trace], adversary: Adversary, *, seed: int = 0,
                   protocol: str = "strict") -> list[Trace]:
    """``traces`` with the adversary's flips applied (see the module docstring); pure."""
    traces = list(traces)
    fixed = _check(traces, adversary)
    if adversary.k == 0 or adversary.p_wrong == 0:
        return traces
    proto = get_protocol(protocol)
    return [_corrupt_one(tr, adversary, fixed, seed, proto) for tr in traces]


def _endorsed(moves: Sequence[Move], accepted: Sequence[bool]) -> list[str | None]:
    """The candidate each move endorses positively (the targetable answer), as in ``moves.py``."""
    out: list[str | None] = []
    for j, m in enumerate(moves):
        ans = None
        if accepted[j]:
            if m.force in ("propose", "vote"):
                ans = m.answer
            elif m.force == "concede" and m.target is not None and moves[m.target].agent != m.agent:
                ans = out[m.target]
        out.append(ans)
    return out


def _retarget(m: Move, target: int | None, agent: str | None, **extra: Any) -> dict[str, Any]:
    ex = {k: v for k, v in m.extra.items() if k != "target_agent"}
    if "target_agent" in m.extra and target is not None:
        ex["target_agent"] = agent
    ex.update(extra)
    return ex


def _corrupt_one(tr: Trace, adv: Adversary, fixed: tuple[str, ...] | None, seed: int, proto) -> Trace:
    if tr.gold is None:
        raise InputError(f"task {tr.task_id!r} has no gold answer: a flip toward a wrong candidate needs one")
    n = len(tr.moves)
    key = task_key(tr.task_id)
    if fixed is None:
        seats = sorted(tr.agents, key=natural_key)
        pick = make_rng(seed, KEY_CORRUPT, key, 0).choice(len(seats), size=adv.k, replace=False)
        bad = {seats[int(i)] for i in pick}
    else:
        bad = set(fixed)
    u = make_rng(seed, KEY_CORRUPT, key, 1).random(n)
    wdraw = make_rng(seed, KEY_CORRUPT, key, 2).integers(tr.K - 1, size=n)
    tdraw = make_rng(seed, KEY_CORRUPT, key, 3).random(n)

    verdicts, ends = proto.run(tr)
    accepted = [v.accepted for v in verdicts]
    informative = {e.move for e in ends}
    old = _endorsed(tr.moves, accepted)
    gold = tr.candidates.index(tr.gold)
    moves: list[Move] = []
    new: list[str | None] = []  # what each move of the corrupted trace endorses positively
    flipped, repaired, changed = [], [], []
    for j, m in enumerate(tr.moves):
        out = m
        if j in informative and m.agent in bad and m.force == "retract":
            raise InputError(f"task {tr.task_id!r}, move {j}: a retract by adversarial seat {m.agent!r} "
                             f"cannot be corrupted (its meaning follows the seat's corrupted position)")
        if j in informative and m.agent in bad and u[j] < adv.p_wrong:
            w = (gold + 1) % tr.K if adv.target == "fixed" else int(wdraw[j]) + (int(wdraw[j]) >= gold)
            out = _flip(tr, m, j, moves, new, accepted, tr.candidates[w], tr.gold, tdraw[j])
            flipped.append(j)
        elif (j in informative and m.force in ("concede", "challenge") and tr.moves[m.target].agent != m.agent
              and new[m.target] != old[m.target]):
            out, same = _repair(tr, m, j, moves, new, accepted, old[m.target])
            (repaired if same else changed).append(j)
        moves.append(out)
        ans = None
        if accepted[j]:
            if out.force in ("propose", "vote"):
                ans = out.answer
            elif out.force == "concede" and moves[out.target].agent != out.agent:
                ans = new[out.target]
        new.append(ans)
    if not (flipped or repaired or changed):
        return tr
    res = replace(tr, moves=tuple(moves), extra={**tr.extra, "corruption": {
        "seats": sorted(bad, key=natural_key), "flipped": flipped, "repaired": repaired, "changed": changed}})
    after = [v.accepted for v in proto.check(res)]
    if after != accepted:
        j = next(i for i, (a, b) in enumerate(zip(accepted, after)) if a != b)
        raise ValueError(f"task {tr.task_id!r}: corruption changed whether the {proto.name} protocol accepts "
                         f"move {j} ({tr.moves[j].force} by {tr.moves[j].agent}); this trace cannot be "
                         f"corrupted consistently")
    return res


def _origin(m: Move) -> dict[str, Any]:
    return {k: v for k, v in (("force", m.force), ("answer", m.answer), ("target", m.target)) if v is not None}


def _options(moves: list[Move], new: list[str | None], accepted: Sequence[bool], m: Move, j: int,
             answer: str) -> list[int]:
    """Earlier-round moves of other seats that endorse ``answer`` (what a concede or challenge may target)."""
    return [i for i in range(j) if accepted[i] and new[i] == answer and moves[i].agent != m.agent
            and moves[i].round < m.round]


def _flip(tr: Trace, m: Move, j: int, moves: list[Move], new: list[str | None], accepted: Sequence[bool],
          wrong: str, gold: str, draw: float) -> Move:
    ex = {**m.extra, "corrupted_from": _origin(m)}
    if m.force in ("propose", "vote"):
        return replace(m, answer=wrong, text=None, extra=ex)
    want = wrong if m.force == "concede" else gold  # concede to the wrong answer / challenge the truth
    opts = _options(moves, new, accepted, m, j, want)
    if m.force in ("concede", "challenge") and opts:
        t = opts[min(int(draw * len(opts)), len(opts) - 1)]
        return replace(m, target=t, answer=None if m.answer is None else wrong, text=None,
                       extra=_retarget(m, t, moves[t].agent, corrupted_from=_origin(m)))
    return replace(m, force="propose", target=None, answer=wrong, text=None,
                   extra=_retarget(m, None, None, corrupted_from=_origin(m)))


def _repair(tr: Trace, m: Move, j: int, moves: list[Move], new: list[str | None], accepted: Sequence[bool],
            answer: str) -> tuple[Move, bool]:
    """A reply to a flipped move, keeping its own endorsement of ``answer`` (the target's old
    answer); returns the move and whether its counts are unchanged."""
    opts = _options(moves, new, accepted, m, j, answer)
    if opts:
        t = opts[-1]
        return replace(m, target=t, extra=_retarget(m, t, moves[t].agent, repointed_from=m.target)), True
    ex = _retarget(m, None, None, repointed_from=m.target)
    if m.force == "concede":
        return replace(m, force="propose", target=None, answer=answer, extra=ex), True
    if tr.K == 2:
        other = tr.candidates[1 - tr.candidates.index(answer)]
        return replace(m, force="propose", target=None, answer=other, extra=ex), True
    if m.answer is not None:
        return replace(m, force="propose", target=None, extra=ex), False
    return m, False


# -- the sleeper on real traces --------------------------------------------------------------
def split_by_question(traces: Sequence[Trace], n_calibration: int, *, seed: int = 0) -> tuple[list[Trace], list[Trace]]:
    """A seeded split into a calibration window of about ``n_calibration`` traces (whole
    questions, taken in a random order until the window holds at least ``n_calibration``) and
    a deployment set of the rest, so no question sits on both sides."""
    traces = list(traces)
    qids = list(dict.fromkeys(tr.qid for tr in traces))
    if not 0 < n_calibration < len(traces):
        raise InputError(f"n_calibration={n_calibration} must lie between 1 and the {len(traces)} traces - 1 "
                         f"(the rest is the deployment set)")
    size = {q: 0 for q in qids}
    for tr in traces:
        size[tr.qid] += 1
    cal_q: set[str] = set()
    total = 0
    for i in make_rng(seed, KEY_SPLIT).permutation(len(qids)):
        if total >= n_calibration:
            break
        cal_q.add(qids[int(i)])
        total += size[qids[int(i)]]
    cal = [tr for tr in traces if tr.qid in cal_q]
    dep = [tr for tr in traces if tr.qid not in cal_q]
    if not dep:
        raise InputError(f"n_calibration={n_calibration} leaves no deployment question "
                         f"({len(qids)} questions, {len(traces)} traces)")
    return cal, dep


def sleeper_from_traces(traces: Sequence[Trace], *, n_calibration: int, f: float, adversary: Adversary,
                        seed: int = 0, protocol: str = "strict") -> tuple[list[Trace], list[Trace]]:
    """The sleeper design (BDA paper §F.8) on real traces: a calibration window in which each task
    carries its corrupted trace with probability ``f`` (a per-task draw, so a task corrupted at
    ``f`` is corrupted at every larger ``f``), else its clean trace, and a disjoint deployment
    set, every trace corrupted."""
    if not 0.0 <= f <= 1.0:
        raise InputError(f"f must lie in [0, 1], got {f!r}")
    cal, dep = split_by_question(traces, n_calibration, seed=seed)
    # corrupted once over the whole file: the persistent seats are the council's, not a split's
    bad = {tr.task_id: tr for tr in corrupt_traces(traces, adversary, seed=seed, protocol=protocol)}
    picks = [make_rng(seed, KEY_SLEEPER_PICK, task_key(tr.task_id)).random() < f for tr in cal]
    return [bad[c.task_id] if p else c for c, p in zip(cal, picks)], [bad[d.task_id] for d in dep]


def corruption_counts(traces: Sequence[Trace]) -> dict[str, int]:
    """Totals of the ``corruption`` records of corrupted traces (flipped / repaired / changed moves)."""
    out = {"traces_changed": 0, "flipped": 0, "repaired": 0, "changed": 0}
    for tr in traces:
        c = tr.extra.get("corruption")
        if c:
            out["traces_changed"] += 1
            for k in ("flipped", "repaired", "changed"):
                out[k] += len(c.get(k, ()))
    return out
