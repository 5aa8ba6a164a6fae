"""The DEBATE-style group format (JSONL, one group per line), its validating loader, the
golden-group mask, the group-/topic-generalisation splits and reverse coding. Pure: no model code.

One line::

    {"group_id": "g1", "topic": "Angels are real.", "truth_framed": false,
     "split": {"group": "train", "topic": "test"},
     "participants": [{"id": "p1", "demographics": {...},
                       "initial": {"text": "...", "stance": 4}, "final": {"text": "...", "stance": 3}}, x4],
     "rounds": [{"tweets": {"p1": "...", ...},
                 "chats": [{"a": "p1", "b": "p2", "utterances": [{"speaker": "p1", "text": "..."}, ...]}]}, x3]}

Optional: ``"synthetic": true`` / ``"note"`` on a group; a tweet may be ``{"text", "on_topic"}`` and an
utterance may carry ``"on_topic"`` (human validity labels, used by the mask and the SFT set);
``initial`` / ``final`` / a tweet may be null (a dropout: valid format, fails the mask).

Stances are on the 1-6 slider scale. ``Group.coded(s)`` applies the reverse coding s -> 7 - s for
truth-framed topics so that larger always means endorsing the false statement; the loader keeps
the raw slider values and every analysis goes through ``coded``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from chorus.core.jsonl import iter_jsonl
from chorus.core.config import InputError

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "debate_synthetic.jsonl"
STANCE_MIN, STANCE_MAX = 1.0, 6.0
SPLIT_KINDS = ("group", "topic")
SPLIT_PARTS = ("train", "test")
N_PARTICIPANTS, N_ROUNDS = 4, 3


class GroupFormatError(InputError):
    """A malformed group record; the message names file, line, group and field."""


@dataclass
class Opinion:
    text: str
    stance: float          # raw slider value (not reverse-coded)


@dataclass
class Participant:
    id: str
    demographics: dict[str, Any]
    initial: Opinion | None
    final: Opinion | None


@dataclass
class Utterance:
    speaker: str
    text: str
    on_topic: bool | None = None


@dataclass
class Chat:
    a: str
    b: str
    utterances: list[Utterance]

    def partner_of(self, pid: str) -> str | None:
        return self.b if pid == self.a else self.a if pid == self.b else None


@dataclass
class Round:
    tweets: dict[str, str | None]
    tweet_on_topic: dict[str, bool | None]
    chats: list[Chat]

    def chat_of(self, pid: str) -> Chat | None:
        for c in self.chats:
            if pid in (c.a, c.b):
                return c
        return None


@dataclass
class Group:
    group_id: str
    topic: str
    truth_framed: bool
    split: dict[str, str]
    participants: list[Participant]
    rounds: list[Round]
    synthetic: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ids(self) -> list[str]:
        return [p.id for p in self.participants]

    def participant(self, pid: str) -> Participant:
        for p in self.participants:
            if p.id == pid:
                return p
        raise KeyError(pid)

    def coded(self, s: float | None) -> float | None:
        """Reverse coding for truth-framed topics (s -> 7 - s); None and NaN pass through."""
        if s is None or s != s:
            return s
        return 7.0 - s if self.truth_framed else float(s)

    def partner(self, pid: str, r: int) -> str | None:
        c = self.rounds[r].chat_of(pid)
        return c.partner_of(pid) if c else None


# -- loading ---------------------------------------------------------------------------------
def _where(src: str, line: int, gid: Any) -> str:
    return f"{src}:{line} (group {gid!r})" if gid is not None else f"{src}:{line}"


def _need(d: dict, key: str, typ: type | tuple, where: str, path: str, allow_none: bool = False) -> Any:
    if not isinstance(d, dict):
        raise GroupFormatError(f"{where}: field {path} must be an object, got {type(d).__name__}")
    if key not in d:
        raise GroupFormatError(f"{where}: missing field {path}.{key}".replace(" .", " "))
    v = d[key]
    if v is None and allow_none:
        return None
    if not isinstance(v, typ) or (isinstance(v, bool) and typ is not bool):
        tn = typ.__name__ if isinstance(typ, type) else "/".join(t.__name__ for t in typ)
        raise GroupFormatError(f"{where}: field {path}.{key} must be {tn}, got {v!r}".replace(" .", " "))
    return v


def check_stance(v: Any, where: str, path: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        raise GroupFormatError(f"{where}: field {path} must be a number on the 1-6 scale, got {v!r}")
    if not (STANCE_MIN <= v <= STANCE_MAX):
        raise GroupFormatError(f"{where}: field {path} = {v!r} is off the 1-6 stance scale")
    return float(v)


def _opinion(d: Any, where: str, path: str) -> Opinion | None:
    if d is None:
        return None
    text = _need(d, "text", str, where, path)
    return Opinion(text=text, stance=check_stance(_need(d, "stance", (int, float), where, path), where, f"{path}.stance"))


def parse_group(rec: Any, where: str) -> Group:
    if not isinstance(rec, dict):
        raise GroupFormatError(f"{where}: a line must be a JSON object, got {type(rec).__name__}")
    gid = _need(rec, "group_id", str, where, "")
    where = f"{where} (group {gid!r})"
    topic = _need(rec, "topic", str, where, "")
    if not topic.strip():
        raise GroupFormatError(f"{where}: field topic is empty")
    tf = _need(rec, "truth_framed", bool, where, "")
    split = _need(rec, "split", dict, where, "")
    for k, v in split.items():
        if k not in SPLIT_KINDS or v not in SPLIT_PARTS:
            raise GroupFormatError(f"{where}: field split.{k} = {v!r}: expected keys {SPLIT_KINDS} with values {SPLIT_PARTS}")
    parts = []
    for i, p in enumerate(_need(rec, "participants", list, where, "")):
        path = f"participants[{i}]"
        pid = _need(p, "id", str, where, path)
        demo = p.get("demographics", {}) if isinstance(p, dict) else None
        if not isinstance(demo, dict):
            raise GroupFormatError(f"{where}: field {path}.demographics must be an object, got {demo!r}")
        parts.append(Participant(pid, demo, _opinion(p.get("initial"), where, f"{path}.initial"),
                                 _opinion(p.get("final"), where, f"{path}.final")))
    ids = [p.id for p in parts]
    if len(set(ids)) != len(ids):
        raise GroupFormatError(f"{where}: field participants has duplicate ids {ids}")
    rounds = []
    for r, rd in enumerate(_need(rec, "rounds", list, where, "")):
        path = f"rounds[{r}]"
        tw_raw = _need(rd, "tweets", dict, where, path)
        tweets, tw_on = {}, {}
        for pid, t in tw_raw.items():
            if pid not in ids:
                raise GroupFormatError(f"{where}: field {path}.tweets names unknown participant {pid!r}")
            if isinstance(t, dict):
                tweets[pid] = _need(t, "text", str, where, f"{path}.tweets.{pid}")
                tw_on[pid] = t.get("on_topic")
            elif t is None or isinstance(t, str):
                tweets[pid], tw_on[pid] = t, None
            else:
                raise GroupFormatError(f"{where}: field {path}.tweets.{pid} must be text, got {t!r}")
        chats = []
        for c, ch in enumerate(_need(rd, "chats", list, where, path)):
            cpath = f"{path}.chats[{c}]"
            a, b = _need(ch, "a", str, where, cpath), _need(ch, "b", str, where, cpath)
            for x in (a, b):
                if x not in ids:
                    raise GroupFormatError(f"{where}: field {cpath} names unknown participant {x!r}")
            if a == b:
                raise GroupFormatError(f"{where}: field {cpath}: a participant cannot chat with themself ({a!r})")
            utts = []
            for k, u in enumerate(_need(ch, "utterances", list, where, cpath)):
                upath = f"{cpath}.utterances[{k}]"
                sp = _need(u, "speaker", str, where, upath)
                if sp not in (a, b):
                    raise GroupFormatError(f"{where}: field {upath}.speaker = {sp!r} is not in this chat ({a!r}, {b!r})")
                utts.append(Utterance(sp, _need(u, "text", str, where, upath), u.get("on_topic")))
            chats.append(Chat(a, b, utts))
        seen = [x for c in chats for x in (c.a, c.b)]
        if len(set(seen)) != len(seen):
            raise GroupFormatError(f"{where}: field {path}.chats: a participant is in two chats of one round")
        rounds.append(Round(tweets, tw_on, chats))
    known = {"group_id", "topic", "truth_framed", "split", "participants", "rounds"}
    extra = {k: v for k, v in rec.items() if k not in known}
    return Group(gid, topic, tf, dict(split), parts, rounds, synthetic=bool(rec.get("synthetic", False)), extra=extra)


def load_groups(path: str | Path = FIXTURE) -> list[Group]:
    """Every group of a JSONL file, validated; the first malformed record raises, naming file,
    line, group and field. Blank lines and lines starting with '//' are skipped."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"group file not found: {path}")
    groups, seen = [], {}
    for n, rec in iter_jsonl(path, error=GroupFormatError, where="{path}:{n}", comments=True):
        g = parse_group(rec, f"{path}:{n}")
        if g.group_id in seen:
            raise GroupFormatError(f"{path}:{n}: duplicate group_id {g.group_id!r} (first on line {seen[g.group_id]})")
        seen[g.group_id] = n
        groups.append(g)
    if not groups:
        raise GroupFormatError(f"{path}: no groups")
    return groups


# -- golden-group mask ------------------------------------------------------------------------
def mask_reasons(g: Group, on_topic: dict[str, bool] | None = None) -> list[str]:
    """Why ``g`` fails the golden-group mask ([] = golden): four participants who complete every
    phase (initial, R tweets, a chat each round with at least one utterance of their own, final)
    with non-empty text that no label marks off-topic. ``on_topic``: optional classifier labels
    keyed by text (applied where the record carries none)."""
    why: list[str] = []

    def bad(text: str | None, label: bool | None, what: str) -> None:
        if text is None or not text.strip():
            why.append(f"{what}: missing")
            return
        lab = label if label is not None else (on_topic or {}).get(text)
        if lab is False:
            why.append(f"{what}: off-topic")

    if len(g.participants) != N_PARTICIPANTS:
        why.append(f"participants: {len(g.participants)} (need {N_PARTICIPANTS})")
    if len(g.rounds) != N_ROUNDS:
        why.append(f"rounds: {len(g.rounds)} (need {N_ROUNDS})")
    for p in g.participants:
        bad(p.initial.text if p.initial else None, None, f"{p.id} initial")
        bad(p.final.text if p.final else None, None, f"{p.id} final")
        for r, rd in enumerate(g.rounds):
            bad(rd.tweets.get(p.id), rd.tweet_on_topic.get(p.id), f"{p.id} tweet round {r + 1}")
            c = rd.chat_of(p.id)
            own = [u for u in c.utterances if u.speaker == p.id] if c else []
            if not own:
                why.append(f"{p.id} chat round {r + 1}: missing")
            for u in own:
                bad(u.text, u.on_topic, f"{p.id} chat round {r + 1}")
    return why


def golden_mask(groups: Iterable[Group], on_topic: dict[str, bool] | None = None) -> tuple[list[Group], list[dict]]:
    """(kept groups, excluded [{group_id, reasons}]): excluded groups are counted, never silently dropped."""
    kept, excluded = [], []
    for g in groups:
        why = mask_reasons(g, on_topic)
        if why:
            excluded.append({"group_id": g.group_id, "topic": g.topic, "reasons": why})
        else:
            kept.append(g)
    return kept, excluded


# -- splits ------------------------------------------------------------------------------------
def select_split(groups: Iterable[Group], kind: str, part: str) -> list[Group]:
    """Groups of split ``kind`` (group | topic) and ``part`` (train | test | all)."""
    if kind not in SPLIT_KINDS:
        raise ValueError(f"split kind must be one of {SPLIT_KINDS}, got {kind!r}")
    if part == "all":
        return list(groups)
    if part not in SPLIT_PARTS:
        raise ValueError(f"split part must be train, test or all, got {part!r}")
    out = []
    for g in groups:
        if kind not in g.split:
            raise GroupFormatError(f"group {g.group_id!r}: no split.{kind} label (needed for the {kind} split)")
        if g.split[kind] == part:
            out.append(g)
    return out


def to_record(g: Group) -> dict[str, Any]:
    """The JSONL record of a group (inverse of ``parse_group``)."""
    def op(o):
        return None if o is None else {"text": o.text, "stance": o.stance}
    rounds = []
    for rd in g.rounds:
        tw = {pid: (t if rd.tweet_on_topic.get(pid) is None else {"text": t, "on_topic": rd.tweet_on_topic[pid]})
              for pid, t in rd.tweets.items()}
        rounds.append({"tweets": tw, "chats": [
            {"a": c.a, "b": c.b, "utterances": [
                {"speaker": u.speaker, "text": u.text, **({} if u.on_topic is None else {"on_topic": u.on_topic})}
                for u in c.utterances]} for c in rd.chats]})
    rec = {"group_id": g.group_id, "topic": g.topic, "truth_framed": g.truth_framed, "split": g.split,
           "participants": [{"id": p.id, "demographics": p.demographics, "initial": op(p.initial),
                             "final": op(p.final)} for p in g.participants], "rounds": rounds}
    rec.update(g.extra)
    return rec
