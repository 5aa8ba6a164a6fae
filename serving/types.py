"""Requests and results shared by every backend. Plain data; no model code."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from chorus.core.config import InputError

Message = dict[str, str]
Conversation = list[Message]


class RequestError(InputError):
    """Invalid input to an engine call: messages, sampling parameters, schema or options."""


class ContextLengthError(RequestError):
    """A prompt (plus its requested new tokens) does not fit the model's context window."""


@dataclass(frozen=True)
class RequestSampling:
    """Sampling parameters of one request, as the engine hands it to a backend (a config's ``generation``
    block is ``chorus.serving.spec.Sampling``). ``seed`` makes a sampled output reproducible."""
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    seed: int | None = None
    json_schema: dict | None = None       # structured output: a JSON schema
    choices: tuple[str, ...] | None = None  # structured output: exactly one of these strings

    def __post_init__(self) -> None:
        t, p, m = self.temperature, self.top_p, self.max_tokens
        if not (isinstance(t, (int, float)) and math.isfinite(t) and t >= 0):
            raise RequestError(f"temperature must be a finite number >= 0, got {t!r}")
        if not (isinstance(p, (int, float)) and 0 < p <= 1):
            raise RequestError(f"top_p must be in (0, 1], got {p!r}")
        if not (isinstance(m, int) and not isinstance(m, bool) and m >= 1):
            raise RequestError(f"max_tokens must be an integer >= 1, got {m!r}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise RequestError(f"stop must be non-empty strings, got {self.stop!r}")
        if self.seed is not None and not (isinstance(self.seed, int) and 0 <= self.seed < 2**63):
            raise RequestError(f"seed must be an integer in [0, 2**63), got {self.seed!r}")
        # one canonical form, so that temperature=0 and temperature=0.0 are the same stored call
        object.__setattr__(self, "temperature", float(t))
        object.__setattr__(self, "top_p", float(p))
        if self.json_schema is not None and self.choices is not None:
            raise RequestError("give either json_schema or choices, not both")
        if self.choices is not None and (not self.choices or any(not isinstance(c, str) or not c for c in self.choices)):
            raise RequestError(f"choices must be a non-empty list of non-empty strings, got {self.choices!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def constrained(self) -> bool:
        return self.json_schema is not None or self.choices is not None

    def key_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stop"] = list(self.stop)
        d["choices"] = list(self.choices) if self.choices is not None else None
        return d


@dataclass
class Completion:
    """One generated reply."""
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str               # "stop" (EOS or a stop string) | "length"
    conformed: bool | None = None    # structured output: did the text satisfy the schema/choices
    parsed: Any = None               # the parsed JSON value or the chosen string (None if not conformed)
    cached: bool = False             # served from the call store
    latency_s: float = 0.0           # model time per request (batch time / batch size)
    error: str | None = None         # why a constrained output did not conform

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("cached")
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], cached: bool = False) -> "Completion":
        return cls(**{k: d.get(k) for k in ("text", "prompt_tokens", "completion_tokens", "finish_reason",
                                            "conformed", "parsed", "latency_s", "error")}, cached=cached)


@dataclass
class PreparedPrompt:
    """A conversation rendered by the tokenizer's chat template, as token ids; ``offsets``: each token's
    character range in ``text`` where the render asked for them (``Engine.render_many(offsets=True)``,
    from the same tokenizer call as ``ids``), else None."""
    text: str
    ids: list[int]
    offsets: list[tuple[int, int]] | None = field(default=None, compare=False, repr=False)


def validate_conversations(conversations: Sequence[Any]) -> list[Conversation]:
    if isinstance(conversations, (str, bytes)) or not isinstance(conversations, Sequence):
        raise RequestError("conversations must be a list of chat message lists")
    out = []
    for i, conv in enumerate(conversations):
        if isinstance(conv, (str, bytes)) or not isinstance(conv, Sequence) or not conv:
            raise RequestError(f"conversation {i} must be a non-empty list of {{'role', 'content'}} dicts")
        msgs = []
        for j, m in enumerate(conv):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise RequestError(f"conversation {i}, message {j}: expected {{'role': str, 'content': str}}, got {m!r}")
            if m["role"] not in ("system", "user", "assistant"):
                raise RequestError(f"conversation {i}, message {j}: unknown role {m['role']!r}")
            msgs.append({"role": m["role"], "content": m["content"]})
        out.append(msgs)
    return out


def broadcast_seeds(seed: int | Sequence[int | None] | None, n: int) -> list[int | None]:
    """An int applies to every request; a list gives one seed per request."""
    if seed is None or isinstance(seed, int):
        return [seed] * n
    seeds = list(seed)
    if len(seeds) != n:
        raise RequestError(f"seed list has {len(seeds)} entries for {n} conversations")
    return seeds
