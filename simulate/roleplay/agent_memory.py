"""The memory module of one role-playing agent before one message (DEBATE paper App.: M_{a_i,k}):
demographic profile, task instruction, initial opinion, previous rounds' posts and chats, and the
current round's context (own post, the partner's post, earlier utterances of the chat). Closed
world: built only from what that participant saw -- their own posts, the post of each round's
chat partner and their own chats -- never from other dyads. Pure: no model code.

``history`` is any ``Group``: the human one (next-message prediction) or the simulated copy being
filled in (full dynamics). A slot is ("tweet", r, None), ("chat", r, k) or ("final", None, None)
with r 0-based.

Ablation (the paper's memory probe): ``ablate`` drops components from every memory state built --
"initial_opinion" (the participant's own initial private opinion, text and slider) and "first_tweet"
(their own round-1 post; the partner's post stays). Dropped components are None and the prompt
leaves them out."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable

from chorus.simulate.roleplay.data import Group
from chorus.core.config import InputError

ABLATABLE = ("initial_opinion", "first_tweet")   # memory components the ablation probe may drop


@dataclass
class RoundView:
    round: int                      # 1-based
    partner: str
    partner_name: str
    own_tweet: str | None           # None: not part of this memory (not yet written)
    partner_tweet: str | None
    utterances: list[tuple[bool, str]] = field(default_factory=list)   # (spoken by self, text)


@dataclass
class Memory:
    group_id: str
    participant: str
    topic: str
    demographics: dict
    initial_text: str | None        # None: ablated (not part of this memory)
    initial_stance: float | None    # the participant's own raw slider value (what they saw); None: ablated
    rounds: list[RoundView]
    task: str                       # tweet | chat | final
    round: int | None               # 1-based round of the message to write (None for final)
    k: int | None = None            # utterance index in the chat (chat only)

    def texts(self) -> list[str]:
        """Every text in this memory, in order (for the closed-world test)."""
        out = [self.initial_text] if self.initial_text is not None else []
        for rv in self.rounds:
            out += [t for t in (rv.own_tweet, rv.partner_tweet) if t is not None]
            out += [t for _, t in rv.utterances]
        return out


def partner_name(g: Group, pid: str) -> str:
    return f"Participant {g.ids.index(pid) + 1}"


def _round_view(g: Group, pid: str, r: int, *, upto_k: int | None, with_tweets: bool = True) -> RoundView:
    rd = g.rounds[r]
    chat = rd.chat_of(pid)
    partner = chat.partner_of(pid) if chat else None
    utts = chat.utterances if chat else []
    if upto_k is not None:
        utts = utts[:upto_k]
    return RoundView(round=r + 1, partner=partner or "", partner_name=partner_name(g, partner) if partner else "nobody",
                     own_tweet=rd.tweets.get(pid) if with_tweets else None,
                     partner_tweet=(rd.tweets.get(partner) if partner else None) if with_tweets else None,
                     utterances=[(u.speaker == pid, u.text) for u in utts])


def ablated(mem: Memory, drop: Iterable[str]) -> Memory:
    """``mem`` without the components in ``drop`` (a copy; ``mem`` is left as it is)."""
    drop = set(drop)
    bad = drop - set(ABLATABLE)
    if bad:
        raise InputError(f"unknown memory component(s) {sorted(bad)}; choose from {', '.join(ABLATABLE)}")
    out = replace(mem, rounds=list(mem.rounds))
    if "initial_opinion" in drop:
        out.initial_text = out.initial_stance = None
    if "first_tweet" in drop and out.rounds and out.rounds[0].round == 1:
        out.rounds[0] = replace(out.rounds[0], own_tweet=None)
    return out


def build_memory(history: Group, pid: str, slot: tuple, ablate: Iterable[str] = ()) -> Memory:
    """The memory state of ``pid`` before writing ``slot``, from ``history``, less ``ablate``."""
    kind, r, k = slot
    p = history.participant(pid)
    if p.initial is None:
        raise InputError(f"group {history.group_id!r}: participant {pid!r} has no initial opinion (fails the mask)")
    n = len(history.rounds)
    if kind == "tweet":
        past = [_round_view(history, pid, i, upto_k=None) for i in range(r)]
    elif kind == "chat":
        past = [_round_view(history, pid, i, upto_k=None) for i in range(r)] + \
               [_round_view(history, pid, r, upto_k=k)]
    elif kind == "final":
        past = [_round_view(history, pid, i, upto_k=None) for i in range(n)]
    else:
        raise ValueError(f"unknown slot kind {kind!r}")
    mem = Memory(history.group_id, pid, history.topic, dict(p.demographics), p.initial.text, p.initial.stance,
                 past, kind, None if kind == "final" else r + 1, k)
    return ablated(mem, ablate) if ablate else mem
