"""Topics are data: a YAML file per topic (concept id, the two assertions, nine stance phrases,
generator / appraiser / probe prompts). This module loads them and renders messages."""
from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

import numpy as np
import yaml
from pydantic import field_validator

from core.config import ConfigError, Strict, resolve_config, validate

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


@lru_cache(maxsize=32)
def _load(path: str) -> Topic:
    raw = Path(path).read_bytes()
    data = yaml.safe_load(raw)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a topic file must be a mapping")
    t = validate(Topic, data, source=path)
    t.sha256 = hashlib.sha256(raw).hexdigest()
    # render once so a template error names the topic before any model call
    for role in ("generator", "appraiser", "probe"):
        try:
            if role == "appraiser":
                t.appraiser_messages("x")
            elif role == "generator":
                t.generator_messages(0.5)
            else:
                t.probe_messages(0.5)
        except (KeyError, IndexError, ValueError) as err:
            raise ConfigError(f"{path}: prompts.{role} has a bad template field: {err}") from None
    return t


def load_topic(name: str | Path) -> Topic:
    """A topic by id (a file in ``simulate/topics/``) or by path."""
    return _load(str(topic_path(name).resolve()))
