"""The synthetic backend: a model-free channel with known biases behind the ``Backend`` protocol.

Generator g writes "stance x" with x = s + r_g; appraiser a reads the number back as
clip(x + q_a + noise). It is served through a real ``Engine`` (``synthetic_engine``: the plain
template, a one-id-per-character tokenizer, the call store), so a pipeline that runs on it runs
unchanged on a model. It knows no topics: the caller passes the stance phrases it should
recognise in a prompt, each with the stance it stands for (``chorus belief cross --synthetic``
passes every shipped topic's phrases at their bin midpoints: ``chorus.simulate.belief.cross``).
"""
from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from chorus.core.seeding import stable_int
from chorus.serving.backends import Finished
from chorus.serving.engine import Engine
from chorus.serving.profiles import Profile
from chorus.serving.store import CallStore


class CharTokenizer:
    """One id per character: the engine renders prompts with its plain template, the synthetic
    backend reads them back verbatim."""
    chat_template = None
    bos_token = ""

    def __call__(self, text: str | list[str], add_special_tokens: bool = False, **_: Any) -> "_Encoding":
        # one text, or a batch as a Hugging Face tokenizer takes it (Engine.prepare encodes in one call)
        if isinstance(text, str):
            return _Encoding(input_ids=[ord(c) for c in text])
        return _Encoding(input_ids=[[ord(c) for c in t] for t in text])


class _Encoding(dict):
    """``enc["input_ids"]`` and ``enc.input_ids``, as a Hugging Face ``BatchEncoding`` gives both."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


_NUMBER = re.compile(r"stance (-?\d+(?:\.\d+)?)")
_COMMENT = re.compile(r'Comment: "(.*?)"', re.DOTALL)


class SyntheticBackend:
    """Generator: the stance phrase in the prompt -> its stance + r, written as "stance x"
    (``render`` does the same from an exact s). Appraiser: the number in the comment + q +
    seeded Gaussian noise, clipped, as {"p_plus": ...}; a comment without one, or a draw under
    ``fail_rate``, gives malformed JSON (a failure, never a default). Probe: the phrase's stance
    x 100. Deterministic in (prompt, seed, temperature).

    ``phrases``: phrase -> the stance in [0, 1] it stands for (the longest phrase found in a
    prompt wins; none: the generator has nothing to say, the probe returns {})."""
    name = "synthetic"
    max_model_len = 1 << 24

    def __init__(self, model: str, render_bias: float, read_bias: float, noise: float = 0.0,
                 fail_rate: float = 0.0, phrases: Mapping[str, float] | None = None):
        self.model, self.r, self.q, self.noise, self.fail_rate = model, render_bias, read_bias, noise, fail_rate
        self._phrases = sorted((phrases or {}).items(), key=lambda kv: -len(kv[0]))  # longest match first

    def settings(self) -> dict[str, Any]:
        return {"synthetic": True, "render_bias": self.r, "read_bias": self.q, "noise": self.noise,
                "fail_rate": self.fail_rate}

    def _phrase_stance(self, text: str) -> float | None:
        return next((x for ph, x in self._phrases if ph in text), None)

    def render(self, s: float) -> str:
        return f"I put my stance {float(np.clip(s + self.r, 0.0, 1.0)):.4f} on this."

    def _gen(self, prompt: str, smp: Any) -> str:
        # the draw depends on the whole request, like a model's output (not on the seed alone)
        key = [stable_int(self.model, bits=32, algo="crc32"), stable_int(prompt, bits=32, algo="crc32")]
        g = np.random.default_rng([int(smp.seed or 0), *key, int(smp.temperature * 1000)])
        props = (smp.json_schema or {}).get("properties", {})
        if "p_plus" in props:
            m = _COMMENT.search(prompt)
            x = _NUMBER.search(m.group(1)) if m else None
            if x is None or g.random() < self.fail_rate:
                return '{"p_plus": '
            p = float(np.clip(float(x.group(1)) + self.q + self.noise * g.standard_normal(), 0.0, 1.0))
            return json.dumps({"p_plus": round(p, 6)})
        x = self._phrase_stance(prompt)
        if "stance" in props:
            return json.dumps({"stance": round(100 * float(x))}) if x is not None else "{}"
        return self.render(x) if x is not None else "I have nothing to say."

    def generate(self, prompts: list[list[int]], samplings: list[Any]) -> Iterator[Finished]:
        out = []
        for j, (ids, smp) in enumerate(zip(prompts, samplings)):
            text = self._gen("".join(map(chr, ids)), smp)
            out.append((j, {"text": text, "prompt_tokens": len(ids), "completion_tokens": len(text),
                            "finish_reason": "stop", "latency_s": 0.0}))
        yield out

    def option_logprobs(self, prompts, options):
        raise NotImplementedError("the synthetic channel has no log-probabilities")

    def close(self) -> None:
        pass


def synthetic_engine(model: str, render_bias: float, read_bias: float, *, noise: float = 0.0,
                     fail_rate: float = 0.0, phrases: Mapping[str, float] | None = None,
                     store: str | Path | None = None, description: str = "synthetic channel"):
    """A ``chorus.serving.Engine`` around the synthetic backend of ``model`` (its identity hashes the
    channel's parameters, so a changed bias never reads a stale store entry)."""
    be = SyntheticBackend(model, render_bias, read_bias, noise, fail_rate, phrases)
    h = hashlib.sha256(json.dumps(be.settings(), sort_keys=True).encode()).hexdigest()[:16]
    prof = Profile(model, "synthetic", description, chat=False)
    return Engine(prof, be, CharTokenizer(), dtype="synthetic", store=CallStore(store) if store else None,
                  weights_sha256=h)
