"""OpenAI-compatible backend: one or more servers (e.g. ``chorus serve`` / ``vllm serve``, one per
GPU or a cluster deployment); requests are spread over them, least-busy first.

Prompts are rendered locally with the profile's tokenizer and sent as token ids to
``/v1/completions``, so a server sees exactly the tokens the local backends see. Option readouts
read vLLM's ``prompt_logprobs``; JSON-schema and choice replies use vLLM's ``structured_outputs``.

What a server must offer: these are vLLM's extensions to the OpenAI API, so the servers that work
are vLLM's own (``chorus serve``, ``vllm serve``). A plain OpenAI-compatible server is refused when
the engine loads, before any request, with one line naming what it lacks (``IncompatibleServerError``,
bad input: exit 2). chorus never falls back to text prompts: the call store keys results on the
model, not the backend, so every backend must compute the same thing (docs/openai.md).

Faults: a transient failure (connection error, timeout, HTTP 429 or 5xx) is retried with bounded
exponential back-off and jitter (tenacity), each attempt on the least-busy healthy endpoint. An
endpoint that refuses connections, or whose connections fail (reset, timeout) ``down_after`` times
in a row, leaves the rotation; it is probed (``GET /models``) every ``probe_every_s`` and comes
back when it answers. An endpoint that answers 429 / 5xx is alive and stays in rotation. Any other
error (a 4xx: bad request, wrong key) is not retried. When no endpoint answers within the retry
budget, the batch stops with one error after the requests that did finish are handed back (the
engine stores them). Greedy and seeded requests give the same result on any replica, so a retried
request changes nothing but the time.

In flight: each endpoint has its own limit on requests in flight, starting at ``concurrency``. An
answer of 429 or 503 (the server says it is overloaded) halves that endpoint's limit; each success
raises it by 1/limit, up to ``concurrency`` again (additive increase, multiplicative decrease, as
TCP does). A small server ends up with few requests in flight and a large one with many.

Checks before any call, per endpoint: a well-formed URL, reachable, the API key accepted, the model
served, the same tokenizer (a probe string tokenised by the server's ``/tokenize`` must give the
local token ids, since prompts are sent as ids), and one small completion that asks for every
extension the roles use (token-id prompt, ``prompt_logprobs``, a ``structured_outputs`` choice): a
server that rejects a field is caught by its status, one that ignores a field by its answer.
"""
from __future__ import annotations

import os
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import Any, Iterator

from chorus.serving.backends import BackendTraits, Finished
from chorus.serving.profiles import ModelError, Profile
from chorus.serving.types import RequestSampling
from chorus.core.config import InputError

BACKEND = "OpenAIBackend", 3  # this module is backend "openai", listed third (serving.backends)


class EndpointError(RuntimeError):
    """A server could not be reached or answered with an error."""


class TransientError(EndpointError):
    """A failure worth retrying elsewhere or later: connection, timeout, 429, 5xx, no healthy endpoint."""


class IncompatibleServerError(EndpointError, ModelError):
    """A server that answers but cannot give chorus's exact results: one of vLLM's extensions is
    missing, or it tokenizes differently. A ModelError, so the command line counts it as bad input
    (exit 2, like a model that is not ready) and a role's name is put before the message."""


# the end of every refusal: the servers that have what the backend needs
SERVE_HINT = "serve the model with `chorus serve` or `vllm serve`"


def _one_line(text: str, limit: int = 200) -> str:
    """A server's error body as a short single line (refusals are one line)."""
    return " ".join(text.split())[:limit]


def missing_extension(answer: dict[str, Any], ids: list[int], choice: str) -> str | None:
    """What the answer to the extensions probe shows the server lacks, or None when it has all.

    The probe sent ``ids`` as a token-id prompt with ``prompt_logprobs: 0`` and a
    ``structured_outputs`` choice of ``choice``. Servers that do not know a field often ignore it,
    so each extension is judged by what came back: the prompt counted as those ids, a log-prob for
    each of them, and exactly the one allowed reply."""
    first = (answer.get("choices") or [{}])[0]
    counted = (answer.get("usage") or {}).get("prompt_tokens")
    if counted is not None and counted != len(ids):
        return (f"did not take the prompt as token ids on POST /completions ({len(ids)} ids sent, {counted} prompt "
                "tokens counted); the openai backend sends exact token ids, a vLLM extension")
    plp = first.get("prompt_logprobs")
    if not isinstance(plp, list):
        return ("gives no prompt_logprobs on POST /completions, a vLLM extension that option log-probabilities "
                "are read from")
    if len(plp) != len(ids) or any(str(t) not in (plp[i] or {}) for i, t in enumerate(ids) if i):
        return ("scored other tokens than the token ids sent on POST /completions (its prompt_logprobs do not "
                "match them); the openai backend needs the prompt taken as exact token ids")
    if first.get("text") != choice:
        return (f"ignores structured_outputs on POST /completions, a vLLM extension that JSON-schema and choice "
                f"replies are constrained by (asked for {choice!r}, got {first.get('text')!r})")
    return None


class OpenAIBackend(BackendTraits):
    name = "openai"
    local_weights = False   # served elsewhere: only its tokenizer is read here

    def __init__(self, profile: Profile, *, endpoints: list[str] | str | None = None, served_model: str | None = None,
                 max_model_len: int | None = None, concurrency: int = 32, timeout_s: float = 600.0,
                 api_key: str | None = None, max_attempts: int = 8, backoff_s: float = 0.5,
                 backoff_max_s: float = 30.0, down_after: int = 3, probe_every_s: float = 5.0):
        import httpx
        from transformers import AutoTokenizer

        eps = endpoints or os.environ.get("CHORUS_OPENAI_ENDPOINTS", "http://127.0.0.1:8000/v1")
        if isinstance(eps, str):
            eps = [e.strip() for e in eps.split(",") if e.strip()]
        self.endpoints = [e.rstrip("/") for e in eps]
        if not profile.status()[0]:
            raise ModelError(f"backend 'openai' renders prompts with the profile's local tokenizer: "
                             f"{profile.status()[1]}")
        self.tokenizer = AutoTokenizer.from_pretrained(str(profile.path))
        self.model_name = served_model or profile.name
        key = api_key or os.environ.get("VLLM_API_KEY") or os.environ.get("OPENAI_API_KEY", "EMPTY")
        self.client = httpx.Client(timeout=timeout_s, headers={"Authorization": f"Bearer {key}"})
        self._load = {e: 0 for e in self.endpoints}
        self.sent = {e: 0 for e in self.endpoints}  # requests per endpoint, for provenance and tests
        self._lock = threading.Lock()
        if max_attempts < 1 or backoff_s < 0 or backoff_max_s < backoff_s or down_after < 1 or probe_every_s <= 0:
            raise InputError("openai backend: need max_attempts >= 1, 0 <= backoff_s <= backoff_max_s, "
                             "down_after >= 1 and probe_every_s > 0")
        self.retry = {"max_attempts": max_attempts, "backoff_s": backoff_s, "backoff_max_s": backoff_max_s,
                      "down_after": down_after, "probe_every_s": probe_every_s}
        self._fails = {e: 0 for e in self.endpoints}  # consecutive failures
        self._down: dict[str, float] = {}  # endpoint -> when to probe it next
        self.faults = {"retries": 0, "taken_out": 0, "brought_back": 0, "overloaded": 0}  # for provenance
        self.last_errors: dict[str, str] = {}
        if concurrency < 1:
            raise InputError("openai backend: concurrency (requests in flight per endpoint) must be >= 1")
        self.per_endpoint = concurrency
        self.concurrency = concurrency * len(self.endpoints)
        self._limit = {e: float(concurrency) for e in self.endpoints}  # adaptive in-flight limit (AIMD)
        self._room = threading.Condition(self._lock)
        try:  # every endpoint checked before any call; a refused one leaves no client open
            served_len = self._server_max_len()  # always: an unserved model would 404 below like a missing endpoint
            self.max_model_len = max_model_len or served_len
            self.tokenizer_check = {e: self._check_tokenizer(e) for e in self.endpoints}
            for e in self.endpoints:
                self._check_extensions(e)
        except BaseException:
            self.client.close()
            raise

    def _server_max_len(self) -> int:
        """Every endpoint checked before any call: a URL, reachable, the key accepted, the model served."""
        import httpx
        lens = []
        for e in self.endpoints:
            try:
                url = httpx.URL(e)
            except Exception as err:
                raise EndpointError(f"endpoint {e!r} is not a URL: {err}") from None
            if url.scheme not in ("http", "https") or not url.host:
                raise EndpointError(f"endpoint {e!r} is not an http(s) URL with a host (e.g. http://127.0.0.1:8000/v1)")
            try:
                r = self.client.get(f"{e}/models", timeout=10)
            except Exception as err:
                raise EndpointError(f"OpenAI-compatible server {e} is not reachable: {err}") from None
            if r.status_code in (401, 403):
                raise EndpointError(f"server {e} rejected the API key (HTTP {r.status_code}); pass api_key= or set "
                                    "VLLM_API_KEY to the key the server was started with")
            if r.status_code != 200:
                raise EndpointError(f"server {e} answered GET /models with HTTP {r.status_code}: {r.text[:200]}")
            models = {m["id"]: m for m in r.json().get("data", [])}
            if self.model_name not in models:
                raise EndpointError(f"server {e} does not serve '{self.model_name}' (it serves {sorted(models)})")
            lens.append(int(models[self.model_name].get("max_model_len") or 4096))
        return min(lens)

    # a probe with words, digits, punctuation, non-ASCII and whitespace runs: where tokenizers differ
    PROBE = "Chorus probe: Ünïcödé naïve café — 3.14159, 42%; \"quoted\"  two  spaces\n\tTab. 東京 🙂"

    def _check_tokenizer(self, e: str) -> str:
        """Prompts go out as token ids, so the server must share the local tokenizer. vLLM serves
        ``POST /tokenize`` beside ``/v1``; a server without it is refused (sending ids to a server
        whose tokenizer is unknown could give other results, silently)."""
        root = e[: -len("/v1")] if e.endswith("/v1") else e
        local = self.tokenizer(self.PROBE, add_special_tokens=False)["input_ids"]
        try:
            r = self.client.post(f"{root}/tokenize", timeout=10, json={
                "model": self.model_name, "prompt": self.PROBE, "add_special_tokens": False})
        except Exception as err:
            raise EndpointError(f"server {e} is not reachable for the tokenizer check: {err}") from None
        if r.status_code in (404, 405, 501):  # not found, method not allowed, not implemented: no such endpoint
            raise IncompatibleServerError(
                f"server {e} has no POST /tokenize (HTTP {r.status_code} at {root}/tokenize), the vLLM extension "
                f"the openai backend checks the server's tokenizer with before it sends prompts as token ids; "
                f"{SERVE_HINT}")
        if r.status_code != 200:
            raise EndpointError(f"server {e} answered POST /tokenize with HTTP {r.status_code}: {_one_line(r.text)}")
        try:
            remote = r.json().get("tokens")
        except (ValueError, AttributeError):
            remote = None
        if not isinstance(remote, list):
            raise IncompatibleServerError(
                f"server {e} answered POST /tokenize without a list of tokens (vLLM's answer, which the openai "
                f"backend checks the server's tokenizer with): {_one_line(r.text)}; {SERVE_HINT}")
        if remote != local:
            first = next((i for i, (a, b) in enumerate(zip(local, remote)) if a != b), min(len(local), len(remote)))
            raise IncompatibleServerError(
                f"server {e} tokenizes differently from the local profile '{self.model_name}' (prompts are sent "
                f"as token ids): the probe gives {len(remote)} ids there and {len(local)} here, first "
                f"difference at position {first}; serve the same model folder the profile points at")
        return "same"

    # a reply no model writes unconstrained, so getting exactly it shows structured_outputs at work
    PROBE_CHOICE = "zebra-42"

    def _check_extensions(self, e: str) -> None:
        """One small greedy completion that asks for each vLLM extension the roles use: a token-id
        prompt (every role), its ``prompt_logprobs`` (option readouts) and a ``structured_outputs``
        choice (JSON-schema and choice replies). Refused with one line naming the first one missing."""
        ids = self.tokenizer(self.PROBE, add_special_tokens=False)["input_ids"]
        body = {"model": self.model_name, "prompt": ids, "max_tokens": 16, "temperature": 0.0,
                "prompt_logprobs": 0, "structured_outputs": {"choice": [self.PROBE_CHOICE]}}
        try:
            r = self.client.post(f"{e}/completions", json=body, timeout=60)
        except Exception as err:
            raise EndpointError(f"server {e} is not reachable for the extensions check: {err}") from None
        if r.status_code in (404, 405, 501):
            raise IncompatibleServerError(
                f"server {e} has no POST /completions (HTTP {r.status_code}), the endpoint the openai backend sends "
                f"token-id prompts to; {SERVE_HINT}")
        if r.status_code in (400, 422):  # a strict server refuses fields outside the OpenAI API
            raise IncompatibleServerError(
                f"server {e} refuses the openai backend's request on POST /completions (HTTP {r.status_code}: "
                f"{_one_line(r.text)}); it needs vLLM's extensions there: token-id prompts, prompt_logprobs, "
                f"structured_outputs; {SERVE_HINT}")
        if r.status_code != 200:
            raise EndpointError(f"server {e} answered the extensions check on POST /completions with HTTP "
                                f"{r.status_code}: {_one_line(r.text)}")
        try:
            answer = r.json()
        except ValueError:
            answer = {}
        missing = missing_extension(answer if isinstance(answer, dict) else {}, ids, self.PROBE_CHOICE)
        if missing:
            raise IncompatibleServerError(f"server {e} {missing}; {SERVE_HINT}")

    def settings(self) -> dict[str, Any]:
        return {"backend": "openai", "endpoints": self.endpoints, "served_model": self.model_name,
                "max_model_len": self.max_model_len, "concurrency": self.concurrency, "retry": self.retry,
                "faults": dict(self.faults), "down": sorted(self._down),
                "in_flight_limit": {e: int(v) for e, v in self._limit.items()},
                "tokenizer_check": self.tokenizer_check}

    # -- health ------------------------------------------------------------------------------
    def _probe_due(self) -> None:
        """Probe the endpoints out of rotation whose time has come; bring back those that answer."""
        now = time.monotonic()
        with self._lock:
            due = [e for e, t in self._down.items() if t <= now]
            for e in due:  # one prober per endpoint and period
                self._down[e] = now + self.retry["probe_every_s"]
        for e in due:
            try:
                ok = self.client.get(f"{e}/models", timeout=10.0).status_code == 200
            except Exception:
                ok = False
            if ok:
                with self._lock:
                    if self._down.pop(e, None) is not None:
                        self._fails[e] = 0
                        self.faults["brought_back"] += 1

    def _failed(self, ep: str, err: str, refused: bool) -> None:
        """A connection-level failure at ``ep``: out of rotation when refused or after ``down_after`` in a row."""
        with self._lock:
            self._fails[ep] += 1
            self.last_errors[ep] = err
            if ep not in self._down and (refused or self._fails[ep] >= self.retry["down_after"]):
                self._down[ep] = time.monotonic() + self.retry["probe_every_s"]
                self.faults["taken_out"] += 1

    def _pick(self) -> str:
        """The healthy endpoint with the most room under its in-flight limit; waits while all are full."""
        while True:
            self._probe_due()
            with self._room:
                healthy = [e for e in self.endpoints if e not in self._down]
                if not healthy:
                    raise TransientError("no healthy endpoint: " + "; ".join(
                        f"{e}: {self.last_errors.get(e, 'out of rotation')}" for e in self.endpoints))
                free = [e for e in healthy if self._load[e] < int(self._limit[e])]
                if free:
                    ep = min(free, key=lambda e: self._load[e] / self._limit[e])  # least busy for its size
                    self._load[ep] += 1
                    self.sent[ep] += 1
                    return ep
                self._room.wait(timeout=0.1)  # a request finishing, or a probe due, makes room

    def _release(self, ep: str, outcome: str) -> None:
        """One request at ``ep`` ended: ``ok`` grows its limit additively, ``overloaded`` halves it."""
        with self._room:
            self._load[ep] -= 1
            if outcome == "ok":
                self._limit[ep] = min(float(self.per_endpoint), self._limit[ep] + 1.0 / self._limit[ep])
            elif outcome == "overloaded":
                self._limit[ep] = max(1.0, self._limit[ep] / 2)
                self.faults["overloaded"] += 1
            self._room.notify_all()

    def _post_once(self, body: dict[str, Any]) -> dict[str, Any]:
        import httpx
        ep = self._pick()
        try:
            r = self.client.post(f"{ep}/completions", json={"model": self.model_name, **body})
        except httpx.TransportError as err:  # refused, reset, timed out: the server may be gone
            self._release(ep, "failed")
            self._failed(ep, f"{type(err).__name__}: {err}", refused=isinstance(err, httpx.ConnectError))
            raise TransientError(f"request to {ep} failed: {type(err).__name__}: {err}") from None
        except BaseException:
            self._release(ep, "failed")
            raise
        self._release(ep, "overloaded" if r.status_code in (429, 503) else
                      "ok" if r.status_code == 200 else "failed")
        if r.status_code == 429 or r.status_code >= 500:
            # it answered, so it is alive: back off and retry, but keep it in rotation (a busy
            # only server must not be taken out by a few 503s among many requests in flight)
            with self._lock:
                self.last_errors[ep] = f"HTTP {r.status_code}"
            raise TransientError(f"{ep} answered {r.status_code}: {r.text[:300]}")
        if r.status_code != 200:
            raise EndpointError(f"{ep} answered {r.status_code}: {r.text[:300]}")
        with self._lock:
            self._fails[ep] = 0
        return r.json()

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential_jitter

        def count(_state) -> None:
            with self._lock:
                self.faults["retries"] += 1

        r = self.retry
        try:
            for attempt in Retrying(stop=stop_after_attempt(r["max_attempts"]), reraise=True, before_sleep=count,
                                    retry=retry_if_exception_type(TransientError),
                                    wait=wait_exponential_jitter(multiplier=r["backoff_s"], max=r["backoff_max_s"],
                                                                 jitter=r["backoff_s"])):
                with attempt:
                    return self._post_once(body)
        except TransientError as err:
            raise EndpointError(f"gave up after {r['max_attempts']} attempts: {err}") from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _many(self, bodies: list[dict[str, Any]]) -> Iterator[list[tuple[int, dict, float]]]:
        """Results as they finish. After a request fails for good, queued ones are cancelled, the
        ones in flight are drained and handed back (so the engine stores them), then it raises."""
        t0 = time.perf_counter()
        errors: list[Exception] = []
        with ThreadPoolExecutor(max_workers=min(self.concurrency, max(1, len(bodies)))) as pool:
            futs = {pool.submit(self._post, b): i for i, b in enumerate(bodies)}
            pending = set(futs)
            try:
                while pending:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    ok = []
                    for f in done:
                        if f.cancelled():
                            continue
                        try:
                            ok.append((futs[f], f.result(), time.perf_counter() - t0))
                        except Exception as err:
                            errors.append(err)
                    if errors:
                        for f in pending:
                            f.cancel()
                    if ok:
                        yield ok
            finally:
                for f in pending:
                    f.cancel()
        if errors:
            raise errors[0]

    def generate(self, prompts: list[list[int]], samplings: list[RequestSampling]) -> Iterator[Finished]:
        bodies = []
        for p, s in zip(prompts, samplings):
            b: dict[str, Any] = {"prompt": p, "max_tokens": s.max_tokens, "temperature": s.temperature,
                                 "top_p": s.top_p, "stop": list(s.stop) or None, "seed": s.seed}
            if s.json_schema is not None:
                b["structured_outputs"] = {"json": s.json_schema}
            elif s.choices is not None:
                b["structured_outputs"] = {"choice": list(s.choices)}
            bodies.append(b)
        for done in self._many(bodies):
            group: Finished = []
            for i, r, lat in done:
                c, u = r["choices"][0], r.get("usage") or {}
                group.append((i, {"text": c["text"], "prompt_tokens": u.get("prompt_tokens", len(prompts[i])),
                                  "completion_tokens": u.get("completion_tokens", 0),
                                  "finish_reason": "length" if c.get("finish_reason") == "length" else "stop",
                                  "latency_s": lat}))
            yield group

    def option_logprobs(self, prompts: list[list[int]], options: list[list[list[int]]]) -> list[list[float]]:
        out: list[list[float]] = [[0.0] * len(o) for o in options]
        pairs = [(i, k) for i, opts in enumerate(options) for k in range(len(opts))]
        seqs = [prompts[i] + options[i][k] for i, k in pairs]
        bodies = [{"prompt": s, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0} for s in seqs]
        for done in self._many(bodies):
            for j, r, _ in done:
                i, k = pairs[j]
                plp = r["choices"][0]["prompt_logprobs"]
                out[i][k] = sum(float(plp[pos][str(seqs[j][pos])]["logprob"]) for pos in range(len(prompts[i]), len(seqs[j])))
        return out

    def close(self) -> None:
        self.client.close()
