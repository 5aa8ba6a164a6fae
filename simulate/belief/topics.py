"""Topics are data, one YAML file each; this module loads them and renders messages.

- A Beta topic (``simulate/topics/*.yaml``): one concept with two assertions, nine stance
  phrases, generator / appraiser / probe prompts.
- A multi-concept topic (``simulate/topics/multi/``): several concepts (the agent's identity
  graph), each with an id, a title, a question and K >= 2 competing stances (id, assertion, the
  short ``phrase`` used to render a credence), optional signed couplings between concepts
  (``{from, to, weight, map}``, see ``dirichlet``), five strength ``levels`` that render a
  credence vector as words (no numbers) and the generator / appraiser prompts. Its appraiser
  answers one JSON object for every concept (``appraiser_schema``).

Inconsistent topics fail at load, naming the field."""
from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path

import numpy as np
import yaml
from pydantic import ConfigDict, Field, field_validator

from chorus.core.config import ConfigError, Strict, resolve_config, validate

TOPICS_DIR = Path(__file__).resolve().parent.parent / "topics"

# nine bins on b: [0,.10) [.10,.25) [.25,.35) [.35,.45] (.45,.55] (.55,.65) [.65,.75) [.75,.90) [.90,1]
_LOWER = (0.10, 0.25, 0.35)          # b >= x opens bins 1..3
_UPPER = (0.45, 0.55)                # b > x opens bins 4..5
_LOWER2 = (0.65, 0.75, 0.90)         # b >= x opens bins 6..8


def stance_bin(b) -> np.ndarray:
    """Index 0..8 of the stance phrase for credence ``b`` (nine bins, exact edges)."""
    b = np.asarray(b, dtype=float)
    idx = np.zeros(b.shape, dtype=int)
    for x in _LOWER:
        idx += b >= x
    for x in _UPPER:
        idx += b > x
    for x in _LOWER2:
        idx += b >= x
    return idx


class Prompt(Strict):
    system: str
    user: str


class Prompts(Strict):
    generator: Prompt
    appraiser: Prompt
    probe: Prompt


class Topic(Strict):
    id: str
    version: int = 1
    title: str
    setting: str
    a_plus: str
    a_minus: str
    a_plus_short: str
    a_minus_short: str
    stance_phrases: list[str]
    prompts: Prompts
    sha256: str = ""  # filled by load_topic: hash of the file's bytes

    @field_validator("stance_phrases")
    @classmethod
    def _nine(cls, v: list[str]) -> list[str]:
        if len(v) != 9:
            raise ValueError(f"need exactly 9 stance phrases, got {len(v)}")
        return v

    # -- rendering -----------------------------------------------------------------
    def _fields(self, **extra: str) -> dict[str, str]:
        return {"setting": self.setting, "a_plus": self.a_plus, "a_minus": self.a_minus,
                "a_plus_short": self.a_plus_short, "a_minus_short": self.a_minus_short, **extra}

    def _messages(self, p: Prompt, **extra: str) -> list[dict[str, str]]:
        f = self._fields(**extra)
        return [{"role": "system", "content": p.system.format_map(f).strip()},
                {"role": "user", "content": p.user.format_map(f).strip()}]

    def stance(self, b: float) -> str:
        return self.stance_phrases[int(stance_bin(b))]

    def generator_messages(self, b: float) -> list[dict[str, str]]:
        return self._messages(self.prompts.generator, stance=self.stance(b))

    def appraiser_messages(self, statement: str) -> list[dict[str, str]]:
        return self._messages(self.prompts.appraiser, statement=statement.replace('"', "'"))

    def probe_messages(self, b: float) -> list[dict[str, str]]:
        return self._messages(self.prompts.probe, stance=self.stance(b))


def topic_path(name: str | Path) -> Path:
    return resolve_config(name, TOPICS_DIR, missing=f"topic = {str(name)!r}: no such topic file")


def list_topics() -> list[str]:
    return sorted(p.stem for p in TOPICS_DIR.glob("*.yaml"))


def _read(path: str, cls: type, roles: dict, check=None):
    """A topic file, validated (``check``: the cross-field checks) and rendered once per role
    (``roles``: role -> a call that renders it) so a template error names the topic before any
    model call; ``sha256`` is the hash of the file's bytes."""
    raw = Path(path).read_bytes()
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a topic file must be a mapping")
    t = validate(cls, data, source=path)
    if check is not None:
        check(t, path)
    t.sha256 = hashlib.sha256(raw).hexdigest()
    for role, render in roles.items():
        try:
            render(t)
        except (KeyError, IndexError, ValueError) as err:
            raise ConfigError(f"{path}: prompts.{role} has a bad template field: {err}") from None
    return t


@lru_cache(maxsize=32)
def _load(path: str) -> Topic:
    return _read(path, Topic, {"generator": lambda t: t.generator_messages(0.5),
                               "appraiser": lambda t: t.appraiser_messages("x"),
                               "probe": lambda t: t.probe_messages(0.5)})


def load_topic(name: str | Path) -> Topic:
    """A topic by id (a file in ``simulate/topics/``) or by path."""
    return _load(str(topic_path(name).resolve()))


# -- multi-concept topics --------------------------------------------------------------------
MULTI_TOPICS_DIR = TOPICS_DIR / "multi"
# strength levels on the margin between the top two credences: [0,.1) [.1,.3) [.3,.5) [.5,.8) [.8,1].
# For K = 2 (margin = |2b - 1|) the edges fall at b = .55 .65 .75 .90, the nine-bin scheme's.
LEVEL_EDGES = (0.1, 0.3, 0.5, 0.8)
WEIGHT_MAX = 100  # the appraiser rates each stance 0..WEIGHT_MAX (integers: short, well-formed JSON)


class Stance(Strict):
    id: str = Field(min_length=1)
    assertion: str = Field(min_length=1)
    phrase: str = Field(min_length=1)


class Concept(Strict):
    id: str = Field(min_length=1)
    title: str
    question: str
    stances: list[Stance]

    @property
    def K(self) -> int:
        return len(self.stances)

    @property
    def stance_ids(self) -> list[str]:
        return [s.id for s in self.stances]


class Coupling(Strict):
    """Evidence on ``from`` also moves ``to`` (signed ``weight``); ``map`` sends stances of
    ``from`` to stances of ``to`` (default: stances with the same id); an unmapped stance
    spreads its mass evenly over ``to``'s stances."""
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    from_: str = Field(alias="from")
    to: str
    weight: float = Field(ge=-1.0, le=1.0)
    map: dict[str, str] | None = None


class MultiPrompts(Strict):
    generator: Prompt
    appraiser: Prompt


class MultiTopic(Strict):
    id: str
    version: int = 1
    title: str
    setting: str
    concepts: list[Concept]
    couplings: list[Coupling] = Field(default_factory=list)
    levels: list[str]
    prompts: MultiPrompts
    sha256: str = ""  # filled by load_multi_topic: hash of the file's bytes

    # -- structure -------------------------------------------------------------------
    @property
    def C(self) -> int:
        return len(self.concepts)

    @property
    def concept_ids(self) -> list[str]:
        return [c.id for c in self.concepts]

    @property
    def Ks(self) -> list[int]:
        return [c.K for c in self.concepts]

    def index(self, concept_id: str) -> int:
        return self.concept_ids.index(concept_id)

    def coupling_matrix(self, cp: Coupling) -> np.ndarray:
        """The row-stochastic (K_from, K_to) stance map of a coupling."""
        a, b = self.concepts[self.index(cp.from_)], self.concepts[self.index(cp.to)]
        pairs = cp.map if cp.map is not None else {s: s for s in a.stance_ids if s in b.stance_ids}
        M = np.full((a.K, b.K), 1.0 / b.K)  # unmapped: neutral, evenly over the target
        for s_from, s_to in pairs.items():
            i = a.stance_ids.index(s_from)
            M[i] = 0.0
            M[i, b.stance_ids.index(s_to)] = 1.0
        return M

    # -- rendering ---------------------------------------------------------------------
    def stance(self, concept: int, b) -> str:
        """The words for credence vector ``b`` on concept ``concept`` (level of the margin
        between the top two stances; ties go to the earlier stance)."""
        c = self.concepts[concept]
        b = np.asarray(b, dtype=float)[: c.K]
        order = np.argsort(-b, kind="stable")
        margin = float(b[order[0]] - b[order[1]])
        level = int(np.searchsorted(LEVEL_EDGES, margin, side="right"))
        return self.levels[level].format(top=c.stances[order[0]].phrase, second=c.stances[order[1]].phrase)

    def _issues(self) -> str:
        blocks = []
        for c in self.concepts:
            lines = [f"Question ({c.title}): {c.question}"]
            lines += [f"- {s.id}: {s.assertion}." for s in c.stances]
            blocks.append("\n".join(lines))
        return "\n\n".join(blocks)

    def _messages(self, p: Prompt, **extra: str) -> list[dict[str, str]]:
        f = {"setting": self.setting, "issues": self._issues(), **extra}
        return [{"role": "system", "content": p.system.format_map(f).strip()},
                {"role": "user", "content": p.user.format_map(f).strip()}]

    def generator_messages(self, b) -> list[dict[str, str]]:
        """``b``: (C, K_max) credences (rows padded beyond each concept's K)."""
        views = "\n".join(f"- on the {c.title}, you are {self.stance(i, b[i])}." for i, c in enumerate(self.concepts))
        return self._messages(self.prompts.generator, views=views)

    def answer_format(self) -> str:
        return json.dumps({c.id: {s.id: f"<0-{WEIGHT_MAX}>" for s in c.stances} for c in self.concepts}).replace('"<', "<").replace('>"', ">")

    def appraiser_messages(self, statement: str) -> list[dict[str, str]]:
        return self._messages(self.prompts.appraiser, statement=statement.replace('"', "'"),
                              format=self.answer_format())

    def appraiser_schema(self) -> dict:
        """One object per concept, one integer rating 0..WEIGHT_MAX per stance, all required."""
        rating = {"type": "integer", "minimum": 0, "maximum": WEIGHT_MAX}
        return {"type": "object",
                "properties": {c.id: {"type": "object", "properties": {s.id: rating for s in c.stances},
                                      "required": c.stance_ids, "additionalProperties": False}
                               for c in self.concepts},
                "required": self.concept_ids, "additionalProperties": False}


def check_topic(t: MultiTopic, source: str) -> None:
    """The cross-field checks (each error names the field): K >= 2, unique concept and stance
    ids, couplings between existing distinct concepts with valid maps, incoming |weights| <= 1,
    five levels."""
    def bad(field: str, why: str):
        raise ConfigError(f"{source}: {field}: {why}")

    if not t.concepts:
        bad("concepts", "a topic needs at least one concept")
    seen: set[str] = set()
    for i, c in enumerate(t.concepts):
        if c.id in seen:
            bad(f"concepts[{i}].id", f"duplicate concept id {c.id!r}")
        seen.add(c.id)
        if c.K < 2:
            bad(f"concepts[{i}].stances", f"concept {c.id!r} has K = {c.K} stance(s); a concept needs K >= 2 "
                                          f"competing stances")
        for field in ("id", "assertion", "phrase"):
            vals = [getattr(s, field) for s in c.stances]
            dup = sorted({v for v in vals if vals.count(v) > 1})
            if dup:
                bad(f"concepts[{i}].stances", f"duplicate stance {field} {dup[0]!r} in concept {c.id!r}")
    if len(t.levels) != len(LEVEL_EDGES) + 1:
        bad("levels", f"need exactly {len(LEVEL_EDGES) + 1} strength levels, got {len(t.levels)}")
    ids = t.concept_ids
    incoming: dict[str, float] = {}
    for j, cp in enumerate(t.couplings):
        for end, cid in (("from", cp.from_), ("to", cp.to)):
            if cid not in ids:
                bad(f"couplings[{j}].{end}", f"no concept {cid!r} (concepts: {', '.join(ids)})")
        if cp.from_ == cp.to:
            bad(f"couplings[{j}]", f"a concept cannot be coupled to itself ({cp.from_!r})")
        a, b = t.concepts[ids.index(cp.from_)], t.concepts[ids.index(cp.to)]
        if cp.map is None:
            if not set(a.stance_ids) & set(b.stance_ids):
                bad(f"couplings[{j}].map", f"{cp.from_!r} and {cp.to!r} share no stance id; give a map "
                                           f"from stances of {cp.from_!r} to stances of {cp.to!r}")
        else:
            for s_from, s_to in cp.map.items():
                if s_from not in a.stance_ids:
                    bad(f"couplings[{j}].map", f"{s_from!r} is not a stance of {cp.from_!r} ({', '.join(a.stance_ids)})")
                if s_to not in b.stance_ids:
                    bad(f"couplings[{j}].map", f"{s_to!r} is not a stance of {cp.to!r} ({', '.join(b.stance_ids)})")
        incoming[cp.to] = incoming.get(cp.to, 0.0) + abs(cp.weight)
    for cid, tot in incoming.items():
        if tot > 1.0 + 1e-12:
            bad("couplings", f"the |weight|s into {cid!r} sum to {tot:g} > 1 (the mixture must stay on the simplex)")


def multi_topic_path(name: str | Path) -> Path:
    return resolve_config(name, MULTI_TOPICS_DIR, missing=f"topic = {str(name)!r}: no such multi-concept topic file")


def list_multi_topics() -> list[str]:
    return sorted(p.stem for p in MULTI_TOPICS_DIR.glob("*.yaml"))


@lru_cache(maxsize=32)
def _load_multi(path: str) -> MultiTopic:
    return _read(path, MultiTopic, {"generator": lambda t: t.generator_messages(np.full((t.C, max(t.Ks)), 0.5)),
                                    "appraiser": lambda t: t.appraiser_messages("x")}, check=check_topic)


def load_multi_topic(name: str | Path) -> MultiTopic:
    """A multi-concept topic by id (a file in ``simulate/topics/multi/``) or by path."""
    return _load_multi(str(multi_topic_path(name).resolve()))


def topic_kind(name: str | Path) -> str | None:
    """``"beta"`` (two stances, ``simulate/topics/``), ``"multi"`` (concepts, ``simulate/topics/multi/``)
    or None when no topic by that name or path can be read (the loaders then say why): a topic file
    with a ``concepts`` list is a multi-concept topic. Cheap, for a config's validation: it reads the
    file's YAML and nothing else."""
    p = Path(name)
    if p.is_file():
        try:
            data = yaml.safe_load(p.read_bytes())
        except (OSError, yaml.YAMLError):
            return None
        return "multi" if isinstance(data, dict) and "concepts" in data else "beta"
    for kind, d in (("beta", TOPICS_DIR), ("multi", MULTI_TOPICS_DIR)):
        if (d / (p.name if p.suffix == ".yaml" else f"{p.name}.yaml")).is_file():
            return kind
    return None
