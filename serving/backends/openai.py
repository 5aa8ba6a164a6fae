"""OpenAI-compatible backend: one or more servers (e.g. ``chorus serve`` / ``vllm serve``, one per
GPU or a cluster deployment); requests are spread over them, least-busy first.

Prompts are rendered locally with the profile's tokenizer and sent as token ids to
``/v1/completions``, so a server sees exactly the tokens the local backends see. Option readouts
use vLLM's ``logprob_token_ids`` / ``prompt_logprobs`` extensions.
"""
from __future__ import annotations

import os
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import Any, Iterator

from serving.backends import Finished
from serving.profiles import ModelError, Profile
from serving.types import Sampling


class EndpointError(RuntimeError):
    """A server could not be reached or answered with an error."""


class OpenAIBackend:
    name = "openai"

    def __init__(self, profile: Profile, *, endpoints: list[str] | str | None = None, served_model: str | None = None,
                 max_model_len: int | None = None, concurrency: int = 32, timeout_s: float = 600.0,
                 api_key: str | None = None):
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
        key = api_key or os.environ.get("OPENAI_API_KEY", "EMPTY")
        self.client = httpx.Client(timeout=timeout_s, headers={"Authorization": f"Bearer {key}"})
        self._load = {e: 0 for e in self.endpoints}
        self.sent = {e: 0 for e in self.endpoints}  # requests per endpoint, for provenance and tests
        self._lock = threading.Lock()
        self.concurrency = concurrency * len(self.endpoints)
        self.max_model_len = max_model_len or self._server_max_len()

    def _server_max_len(self) -> int:
        lens = []
        for e in self.endpoints:
            try:
                r = self.client.get(f"{e}/models", timeout=10)
                r.raise_for_status()
            except Exception as err:
                raise EndpointError(f"OpenAI-compatible server {e} is not reachable: {err}") from None
            models = {m["id"]: m for m in r.json().get("data", [])}
            if self.model_name not in models:
                raise EndpointError(f"server {e} does not serve '{self.model_name}' (it serves {sorted(models)})")
            lens.append(int(models[self.model_name].get("max_model_len") or 4096))
        return min(lens)

    def settings(self) -> dict[str, Any]:
        return {"backend": "openai", "endpoints": self.endpoints, "served_model": self.model_name,
                "max_model_len": self.max_model_len, "concurrency": self.concurrency}

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            ep = min(self.endpoints, key=lambda e: self._load[e])  # least outstanding requests
            self._load[ep] += 1
            self.sent[ep] += 1
        try:
            r = self.client.post(f"{ep}/completions", json={"model": self.model_name, **body})
            if r.status_code != 200:
                raise EndpointError(f"{ep} answered {r.status_code}: {r.text[:300]}")
            return r.json()
        except EndpointError:
            raise
        except Exception as err:
            raise EndpointError(f"request to {ep} failed: {err}") from None
        finally:
            with self._lock:
                self._load[ep] -= 1

    def _many(self, bodies: list[dict[str, Any]]) -> Iterator[list[tuple[int, dict, float]]]:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=min(self.concurrency, max(1, len(bodies)))) as pool:
            futs = {pool.submit(self._post, b): i for i, b in enumerate(bodies)}
            pending = set(futs)
            try:
                while pending:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    yield [(futs[f], f.result(), time.perf_counter() - t0) for f in done]
            finally:
                for f in pending:
                    f.cancel()

    def generate(self, prompts: list[list[int]], samplings: list[Sampling]) -> Iterator[Finished]:
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
