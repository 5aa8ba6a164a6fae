"""The three model-facing roles behind small Protocols, batch-first, for any number of concepts.

- generator: renders each speaker's credence as a comment (``Turn`` -> ``Utterances``); the
  topic renders a Beta credence or a (concepts, stances) array;
- appraiser: reads each comment back into evidence: e in [0, 1] (temperature-scaled p_plus) for
  a Beta topic; for a multi-concept topic ONE structured call per utterance (an integer rating
  0..100 per stance of every concept) normalised to each concept's simplex, then
  temperature-scaled (``dirichlet.temperature_scale``); a concept missing from the answer or an
  invalid distribution on it fails that concept only (NaN evidence, moves nobody on it);
- probe: an independent 0-100 self-report per agent per round (never fed back; Beta topics).

Every call is one batch across the runs advancing in lockstep; every request carries its own
seed, derived from (root seed, run seed, round, turn or agent, role, attempt) with
``chorus.core.seeding.call_seed``, so a run's results do not depend on what it was batched with.

Oracle implementations (e = s, probe = b) make no model calls; LLM implementations talk to a
``serving`` engine (``build_engine``) through ``chat`` only.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from chorus.core.seeding import call_seed

from . import dirichlet
from .topics import WEIGHT_MAX, MultiTopic, Topic

GEN, APPRAISE, PROBE = 1, 2, 3  # role ids in the seed keys

P_PLUS_SCHEMA = {
    "type": "object",
    "properties": {"p_plus": {"type": "number", "minimum": 0, "maximum": 1}},
    "required": ["p_plus"],
    "additionalProperties": False,
}
STANCE_SCHEMA = {
    "type": "object",
    "properties": {"stance": {"type": "integer", "minimum": 0, "maximum": 100}},
    "required": ["stance"],
    "additionalProperties": False,
}


@dataclass
class RunKey:
    """What a run's model calls may depend on: its replicate seed, its topic and the
    appraiser temperature tau fitted for that topic."""
    seed: int
    topic: Topic
    tau: float = 1.0
    correction: str = "none"  # the run's channel_correction ('none', 'stored' or a path)


@dataclass
class Turn:
    """One turn of every run in the batch: who speaks and what they believe."""
    root_seed: int
    round: int
    turn: int
    runs: Sequence[RunKey]
    speakers: np.ndarray  # (R,)
    s: np.ndarray         # (R,) speakers' latent beliefs

    def seed(self, i: int, role: int, attempt: int = 0) -> int:
        """The request seed of run ``i`` for ``role``: independent of the batch."""
        return call_seed(self.root_seed, self.runs[i].seed, self.round, self.turn, role, attempt)

    def seeds(self, role: int, attempt: int = 0) -> list[int]:
        return [self.seed(i, role, attempt) for i in range(len(self.runs))]


@dataclass
class ProbeRound:
    """End of a round: every agent of every run reports its stance."""
    root_seed: int
    round: int
    runs: Sequence[RunKey]
    b: np.ndarray  # (R, N) current beliefs

    def seed(self, i: int, agent: int, attempt: int = 0) -> int:
        return call_seed(self.root_seed, self.runs[i].seed, self.round, agent, PROBE, attempt)


@dataclass
class Utterances:
    texts: list[str | None] | None  # None: no text at all (oracle); an entry None: failed
    prompt_tokens: np.ndarray | None = None
    completion_tokens: np.ndarray | None = None


@dataclass
class Appraisals:
    """Beta topics: (R,) arrays; multi-concept topics: (R, C, K_max), NaN rows for failed concepts."""
    p_raw: np.ndarray           # the appraiser's stated p_plus / normalised ratings (NaN if failed)
    e: np.ndarray               # calibrated evidence (NaN if failed: updates nobody)
    attempts: np.ndarray        # (R,) model calls spent
    errors: list = field(default_factory=list)  # R errors (None = ok); multi-concept: R lists of C
    e_raw: np.ndarray | None = None  # evidence before a channel correction (None: no correction)


@runtime_checkable
class Generator(Protocol):
    def generate(self, turn: Turn) -> Utterances: ...


@runtime_checkable
class Appraiser(Protocol):
    def appraise(self, turn: Turn, utterances: Utterances) -> Appraisals: ...


@runtime_checkable
class Probe(Protocol):
    def probe(self, pr: ProbeRound) -> tuple[np.ndarray, int]:
        """(R, N) self-reports on [0, 1] (NaN = failed), and the number of failures."""
        ...


# -- calibration -------------------------------------------------------------------------
def temperature_scale(p, tau, eps: float = 1e-6) -> np.ndarray:
    """p_cal = sigmoid(logit(p) / tau) (p clipped to [eps, 1-eps]; NaN stays NaN)."""
    p = np.clip(np.asarray(p, dtype=float), eps, 1.0 - eps)
    z = np.log(p) - np.log1p(-p)
    return 1.0 / (1.0 + np.exp(-z / np.asarray(tau, dtype=float)))


# -- oracle --------------------------------------------------------------------------------
class OracleGenerator:
    """No text: the speaker's belief travels as is."""

    def generate(self, turn: Turn) -> Utterances:
        return Utterances(texts=None)


class OracleAppraiser:
    """e = s: the language round-trip replaced by a perfect channel. Multi-concept: the speaker's
    credence vector per concept with its last stance closed as 1 - the rest, so K = 2 gives the
    Beta layer's (s, 1 - s)."""

    def __init__(self):
        self._last: dict[str, np.ndarray] = {}  # per topic: (C, Kmax) mask of each concept's last stance

    def appraise(self, turn: Turn, utterances: Utterances) -> Appraisals:
        n = len(turn.s)
        if turn.s.ndim == 1:
            return Appraisals(p_raw=turn.s, e=turn.s, attempts=np.zeros(n, dtype=np.int32))
        topic: MultiTopic = turn.runs[0].topic
        last = self._last.get(topic.id)
        if last is None:
            last = self._last[topic.id] = np.arange(turn.s.shape[-1]) == (np.array(topic.Ks) - 1)[:, None]
        return Appraisals(p_raw=turn.s, e=dirichlet.close_simplex(turn.s, last), attempts=np.zeros(n, dtype=np.int32))


class OracleProbe:
    """probe = b."""

    def probe(self, pr: ProbeRound) -> tuple[np.ndarray, int]:
        return pr.b.copy(), 0


# -- LLM -----------------------------------------------------------------------------------
def _number(out: Any, key: str) -> tuple[float | None, str | None]:
    """The value of ``key`` in a structured completion, or (None, why)."""
    parsed = getattr(out, "parsed", None)
    if parsed is None:
        if getattr(out, "conformed", None) is False:
            return None, "non-conforming output"
        try:
            parsed = json.loads(out.text)
        except (json.JSONDecodeError, TypeError):
            return None, "not valid JSON"
    if not isinstance(parsed, dict) or key not in parsed:
        return None, f"no {key!r} field"
    v = parsed[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None, f"{key} is not a number"
    return float(v), None


def clean_utterance(text: str | None) -> str | None:
    """Strip whitespace and wrapping quotes; an empty comment is a failed generation."""
    if text is None:
        return None
    t = text.strip().strip('"').strip()
    return t or None


class LLMGenerator:
    def __init__(self, engine: Any, temperature: float = 0.9, top_p: float = 1.0,
                 max_tokens: int = 60):
        self.engine, self.temperature, self.top_p, self.max_tokens = engine, temperature, top_p, max_tokens
        self.requests = 0

    def generate(self, turn: Turn) -> Utterances:
        # s is a credence, or a (concepts, stances) array for a multi-concept topic: the topic renders it
        convs = [rk.topic.generator_messages(s) for rk, s in zip(turn.runs, turn.s)]
        self.requests += len(convs)
        outs = self.engine.chat(convs, temperature=self.temperature, top_p=self.top_p,
                                max_tokens=self.max_tokens, seed=turn.seeds(GEN))
        return Utterances(texts=[clean_utterance(o.text) for o in outs],
                          prompt_tokens=np.array([o.prompt_tokens or 0 for o in outs]),
                          completion_tokens=np.array([o.completion_tokens or 0 for o in outs]))


class LLMAppraiser:
    """Structured output {"p_plus": x}, calibrated with each run's tau; an invalid answer
    is retried (at ``retry_temperature``, fresh seed) up to ``max_retries`` times, then
    recorded as failed: e = NaN, which updates nobody. Never a default value."""

    def __init__(self, engine: Any, temperature: float = 0.0, max_tokens: int = 40,
                 max_retries: int = 2, retry_temperature: float = 0.7):
        self.engine = engine
        self.temperature, self.max_tokens = temperature, max_tokens
        self.max_retries, self.retry_temperature = max_retries, retry_temperature
        self.requests = 0

    def read(self, convs: list, seed_of) -> tuple[np.ndarray, np.ndarray, list[str | None]]:
        """Raw p_plus for each conversation (NaN after the retries fail).
        ``seed_of(i, attempt)`` gives the request seed."""
        n = len(convs)
        p = np.full(n, np.nan)
        attempts = np.zeros(n, dtype=np.int32)
        errors: list[str | None] = [None] * n
        todo = list(range(n))
        for attempt in range(1 + self.max_retries):
            if not todo:
                break
            temp = self.temperature if attempt == 0 else self.retry_temperature
            self.requests += len(todo)
            outs = self.engine.chat([convs[i] for i in todo], json_schema=P_PLUS_SCHEMA,
                                    temperature=temp, max_tokens=self.max_tokens,
                                    seed=[seed_of(i, attempt) for i in todo])
            again = []
            for i, o in zip(todo, outs):
                attempts[i] += 1
                v, why = _number(o, "p_plus")
                if v is not None and not (0.0 <= v <= 1.0):
                    v, why = None, f"p_plus = {v} outside [0, 1]"
                if v is None:
                    errors[i] = why
                    again.append(i)
                else:
                    p[i], errors[i] = v, None
            todo = again
        return p, attempts, errors

    def appraise(self, turn: Turn, utterances: Utterances) -> Appraisals:
        texts = utterances.texts or [None] * len(turn.runs)
        idx = [i for i, t in enumerate(texts) if t is not None]
        n = len(texts)
        p = np.full(n, np.nan)
        attempts = np.zeros(n, dtype=np.int32)
        errors: list[str | None] = ["no utterance" if t is None else None for t in texts]
        if idx:
            convs = [turn.runs[i].topic.appraiser_messages(texts[i]) for i in idx]
            pi, ai, ei = self.read(convs, lambda j, a: turn.seed(idx[j], APPRAISE, a))
            p[idx], attempts[idx] = pi, ai
            for j, i in enumerate(idx):
                errors[i] = ei[j]
        tau = np.array([rk.tau for rk in turn.runs])
        e = np.where(np.isfinite(p), temperature_scale(p, tau), np.nan)
        return Appraisals(p_raw=p, e=e, attempts=attempts, errors=errors)


class LLMProbe:
    """An independent 0-100 self-report per agent (structured output {"stance": k})."""

    def __init__(self, engine: Any, temperature: float = 0.0, max_tokens: int = 16,
                 max_retries: int = 1, retry_temperature: float = 0.7):
        self.engine, self.temperature, self.max_tokens = engine, temperature, max_tokens
        self.max_retries, self.retry_temperature = max_retries, retry_temperature
        self.requests = 0

    def probe(self, pr: ProbeRound) -> tuple[np.ndarray, int]:
        R, N = pr.b.shape
        out = np.full((R, N), np.nan)
        todo = [(i, j) for i in range(R) for j in range(N)]
        for attempt in range(1 + self.max_retries):
            if not todo:
                break
            convs = [pr.runs[i].topic.probe_messages(float(pr.b[i, j])) for i, j in todo]
            temp = self.temperature if attempt == 0 else self.retry_temperature
            self.requests += len(convs)
            outs = self.engine.chat(convs, json_schema=STANCE_SCHEMA, temperature=temp,
                                    max_tokens=self.max_tokens,
                                    seed=[pr.seed(i, j, attempt) for i, j in todo])
            again = []
            for (i, j), o in zip(todo, outs):
                v, _ = _number(o, "stance")
                if v is None or not (0.0 <= v <= 100.0):
                    again.append((i, j))
                else:
                    out[i, j] = v / 100.0
            todo = again
        return out, len(todo)


# -- multi-concept LLM appraiser ----------------------------------------------------------------
def parse_ratings(out: Any, topic: MultiTopic) -> tuple[np.ndarray, list[str | None]]:
    """(C, Kmax) normalised ratings (NaN rows for failed concepts) and the per-concept errors."""
    C, Kmax = topic.C, max(topic.Ks)
    p = np.full((C, Kmax), np.nan)
    parsed = getattr(out, "parsed", None)
    if parsed is None:
        try:  # a non-conforming answer may still carry some concepts
            parsed = json.loads(out.text)
        except (json.JSONDecodeError, TypeError):
            why = "non-conforming output" if getattr(out, "conformed", None) is False else "not valid JSON"
            return p, [why] * C
    if not isinstance(parsed, dict):
        return p, ["answer is not a JSON object"] * C
    errors: list[str | None] = []
    for ci, c in enumerate(topic.concepts):
        obj = parsed.get(c.id)
        why = None
        if obj is None:
            why = f"no {c.id!r} in the answer"
        elif not isinstance(obj, dict):
            why = f"{c.id} is not an object"
        elif set(obj) != set(c.stance_ids):
            miss, extra = sorted(set(c.stance_ids) - set(obj)), sorted(set(obj) - set(c.stance_ids))
            why = f"{c.id}: " + "; ".join(([f"missing {miss}"] if miss else []) + ([f"unknown {extra}"] if extra else []))
        else:
            vals = [obj[s] for s in c.stance_ids]
            if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) for v in vals):
                why = f"{c.id}: a rating is not a number"
            elif any(not (0 <= v <= WEIGHT_MAX) for v in vals):
                why = f"{c.id}: a rating is outside 0..{WEIGHT_MAX}"
            elif sum(vals) <= 0:
                why = f"{c.id}: every rating is zero (no distribution)"
            else:
                v = np.asarray(vals, dtype=float)
                p[ci, : c.K] = v / v.sum()
                p[ci, c.K:] = 0.0
        errors.append(why)
    return p, errors


class MultiLLMAppraiser:
    """One JSON-schema-constrained call per utterance for every concept; per-concept failures."""

    def __init__(self, engine: Any, temperature: float = 0.0, max_tokens: int = 200,
                 max_retries: int = 2, retry_temperature: float = 0.7):
        self.engine = engine
        self.temperature, self.max_tokens = temperature, max_tokens
        self.max_retries, self.retry_temperature = max_retries, retry_temperature
        self.requests = 0

    def appraise(self, turn: Turn, utterances: Utterances) -> Appraisals:
        R = len(turn.runs)
        topic: MultiTopic = turn.runs[0].topic
        if any(rk.topic.id != topic.id for rk in turn.runs):
            raise ValueError("every run of a multi-concept group must share its topic")
        C, Kmax = topic.C, max(topic.Ks)
        texts = utterances.texts or [None] * R
        p = np.full((R, C, Kmax), np.nan)
        attempts = np.zeros(R, dtype=np.int32)
        errors: list[list[str | None]] = [["no utterance"] * C if t is None else [None] * C for t in texts]
        todo = [i for i, t in enumerate(texts) if t is not None]
        schema = topic.appraiser_schema()
        for attempt in range(1 + self.max_retries):
            if not todo:
                break
            temp = self.temperature if attempt == 0 else self.retry_temperature
            self.requests += len(todo)
            outs = self.engine.chat([topic.appraiser_messages(texts[i]) for i in todo], json_schema=schema,
                                    temperature=temp, max_tokens=self.max_tokens,
                                    seed=[turn.seed(i, APPRAISE, attempt) for i in todo])
            again = []
            for i, o in zip(todo, outs):
                attempts[i] += 1
                pi, why = parse_ratings(o, topic)
                for ci in range(C):
                    if np.isnan(p[i, ci, 0]):  # only concepts still failed take this answer
                        if why[ci] is None:
                            p[i, ci], errors[i][ci] = pi[ci], None
                        else:
                            errors[i][ci] = why[ci]
                if any(e is not None for e in errors[i]):
                    again.append(i)
            todo = again
        tau = np.array([rk.tau for rk in turn.runs], dtype=float)
        e = np.full_like(p, np.nan)
        for ci, K in enumerate(topic.Ks):
            ok = np.isfinite(p[:, ci, 0])
            if ok.any():
                e[ok, ci, :K] = dirichlet.temperature_scale(p[ok, ci, :K], tau[ok])
                e[ok, ci, K:] = 0.0
        return Appraisals(p_raw=p, e=e, attempts=attempts, errors=errors)
