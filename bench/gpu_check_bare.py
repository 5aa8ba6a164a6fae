"""The GPU check for a bare GPU machine: no vLLM, no registry, the machine's own python3.

    .venv/bin/python scripts/bare_wheels.py            # here: the missing wheels into .whl/ (< 60 MiB)
    # there, in the source tree with .whl/ beside it, in one command:
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site:. python3 bench/gpu_check_bare.py --out DIR     # full size, < 9.5 min
    .venv/bin/python bench/gpu_check_bare.py --tiny --out DIR              # anywhere (CI, CPU): tiny sizes

Per paper architecture, in the order ``--models`` names them (default Llama-3.1-8B, Gemma-4-E4B,
Qwen3.5-9B; each keeps back what the later ones need, and one that does not fit is recorded as
skipped), in its own process: a full-size dummy folder drawn on the GPU
in bf16 (``chorus.serving.dummy``), then on the transformers backend in bf16 first chorus against raw
transformers (``ratios``: ``bench/chorus_ratios.py``, every path as a time ratio chorus/raw of
interleaved medians), then the rehearsal's own paths
(``chorus.rehearse``: load, batched chat, JSON output, choices, option log-probs, knockout
against a plain pass, residual patch, probe activations), the knockout's cost over a plain pass,
both knockout routes (nnsight and the attention interface: equal log-probs, each one's seconds, on
short and debate-length peer messages), knockout through generation (cached against recomputed),
on a hybrid the recurrent-state knockout (cost by mixer, exactness, the message unreadable),
the engine's close, one LoRA step (peft and a torch optimizer on a second load of the engine),
the load/close/load cycle (free device memory back within 1 GiB after each close), the memory
planner's decision for a vLLM + transformers pool of the model, checked against what the
transformers copy measured, and (Llama only, the DEBATE recipe's base) one real full fine-tuning
step at the paper's sizes in the precision the SFT planner picks, its peak beside the estimate. Every step records status, seconds, peak memory and its numbers in
one JSON, ``DIR/gpu-check-bare.json``, rewritten after every step (a kill keeps what finished);
the children's output goes to ``DIR/gpu-check-bare.log``. Exit 1 when a step failed.

Nothing here imports vLLM, TRL, datasets or pyarrow (tests/test_gpu_check.py proves it), and the
module's top imports the standard library only, so a missing wheel is one clear line.
"""
from __future__ import annotations

import argparse
import importlib.metadata as md
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

GIB = 2 ** 30
REPORT = "gpu-check-bare.json"
LOG = "gpu-check-bare.log"
ALIASES = {"llama": "llama-3.1-8b-instruct", "gemma": "gemma-4-e4b-it", "qwen": "qwen3.5-9b"}
ORDER = ["llama-3.1-8b-instruct", "gemma-4-e4b-it", "qwen3.5-9b"]  # the names --models knows
HYBRIDS = {"qwen3.5-9b"}  # recurrent (Gated DeltaNet) layers: the recurrent knockout step runs on these
# Seconds a model needs on an H200 at full size: 1.5x what each took there on 2026-12-04 (llama 75 s,
# qwen 91 s, gemma 71 s: bench/results/gpu-check-bare-h200.json), less the margin the steps added since
# need: the ratio step's share (RATIOS_S) for each and the full SFT step (llama only) are not yet
# measured on a GPU. Started only while that much is left.
MODEL_NEED_S = {"llama-3.1-8b-instruct": 200, "gemma-4-e4b-it": 150, "qwen3.5-9b": 170}
FULL_STEP_ARCH = "llama-3.1-8b-instruct"  # the paper's DEBATE recipe fine-tunes Llama-3.1-8B
TINY_NEED_S = 20
# per step, full size (tiny: 2 s): a step starts only while its need is left before the model's deadline
STEP_NEED_S = {"build": 60, "hf.load": 40, "ratios": 30, "bf16.invariance": 10, "knockout.cost": 15, "knockout.routes": 20,
               "knockout.generate": 20, "knockout.recurrent": 30, "sft.lora_step": 50, "sft.full_step": 60}
# the ratio step's own share of a model's budget at full size (not yet measured on a GPU: an estimate);
# the keys that do not fit are recorded as skipped, most informative first (bench/chorus_ratios.py)
RATIOS_S = 60
PATH_NEED_S = 10
REHEARSE_PATHS = ["hf.load", "hf.chat", "hf.json_schema", "hf.choice", "hf.option_logprobs", "hf.knockout",
                  "hf.patch", "hf.probe"]
CYCLE_TOL_GIB = 1.0
NOMINAL_DEVICE_GIB = 80.0  # no CUDA (the tiny run): plan for an H100, reported, not checked
# what the bare check imports; a missing one is named before anything runs
NEEDED = {"torch": "torch", "transformers": "transformers", "peft": "peft", "yaml": "pyyaml", "psutil": "psutil",
          "pydantic": "pydantic", "jsonschema": "jsonschema", "nnsight": "nnsight", "xgrammar": "xgrammar",
          "numpy": "numpy", "pandas": "pandas"}
VERSIONS = ["torch", "transformers", "peft", "accelerate", "nnsight", "xgrammar", "pydantic", "numpy", "safetensors",
            "tokenizers", "jsonschema"]


# -- what machine this is (stdlib, torch optional: shared with bench/gpu_check.py) -----------------
def nvidia_smi() -> dict[str, Any]:
    """The driver and GPU as nvidia-smi reports them (independent of torch: an old driver shows here)."""
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,name,memory.total", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return {"nvidia_smi": f"not run: {type(err).__name__}"}
    if p.returncode != 0:
        return {"nvidia_smi": f"exit {p.returncode}: {(p.stderr or p.stdout).strip()[:200]}"}
    first = p.stdout.strip().splitlines()[0] if p.stdout.strip() else ""
    parts = [x.strip() for x in first.split(",")]
    return {"driver": parts[0] if parts else None, "smi_gpu": parts[1] if len(parts) > 1 else None,
            "smi_memory": parts[2] if len(parts) > 2 else None}


def device_info() -> dict[str, Any]:
    info: dict[str, Any] = {"python": platform.python_version(), "host": platform.node()}
    try:
        import torch
    except ImportError:
        info["torch"] = None
    else:
        info.update(torch=torch.__version__, cuda_build=torch.version.cuda, cuda_available=torch.cuda.is_available())
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            info.update(gpu=p.name, gpu_gib=round(p.total_memory / GIB, 2), capability=f"{p.major}.{p.minor}",
                        gpus=torch.cuda.device_count())
    info.update(nvidia_smi())
    return info


def header_line(info: dict[str, Any]) -> str:
    gpu = info.get("gpu") or info.get("smi_gpu") or "no GPU seen"
    mem = f" ({info['gpu_gib']} GiB)" if info.get("gpu_gib") else ""
    drv = info.get("driver") or info.get("nvidia_smi") or "unknown"
    return (f"torch {info.get('torch')} (CUDA build {info.get('cuda_build')}, available: {info.get('cuda_available')})"
            f" | driver {drv} | GPU {gpu}{mem} | python {info['python']}")


def versions() -> dict[str, str | None]:
    out = {}
    for n in VERSIONS:
        try:
            out[n] = md.version(n)
        except md.PackageNotFoundError:
            out[n] = None
    return out


# -- the report, shared by the parent and its children (one writer at a time) -----------------------
def save(path: Path, report: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=2, default=str))
    os.replace(tmp, path)  # a kill mid-write never leaves half a file


def _cuda():
    import torch
    return torch if torch.cuda.is_available() else None


def _mem() -> dict[str, float]:
    """Free and total device memory (the driver's view), and what PyTorch holds."""
    torch = _cuda()
    if torch is None:
        return {}
    free, total = torch.cuda.mem_get_info()
    return {"free_gib": round(free / GIB, 3), "total_gib": round(total / GIB, 3),
            "allocated_gib": round(torch.cuda.memory_allocated() / GIB, 3),
            "reserved_gib": round(torch.cuda.memory_reserved() / GIB, 3)}


# -- one model, in a child process ----------------------------------------------------------------------
class Model:
    """The child's run of one architecture: its steps, written into the shared report after each."""

    def __init__(self, arch: str, report_path: Path, work: Path, deadline: float, tiny: bool,
                 dtype: str = "bfloat16"):
        self.arch, self.report_path, self.work, self.deadline, self.tiny = arch, report_path, work, deadline, tiny
        self.dtype = dtype if _cuda() is not None else None  # the engine's; on a CPU its default (float32)
        self.steps: list[dict[str, Any]] = []
        self.mem: dict[str, Any] = {}  # device memory at the cycle's points
        self.folder: Path | None = None

    def write(self, running: str | None = None) -> None:
        rep = json.loads(self.report_path.read_text())
        rep["steps"] = [s for s in rep["steps"] if s.get("model") != self.arch] + self.steps
        m = rep["models"].setdefault(self.arch, {})
        m["running"] = running
        save(self.report_path, rep)

    def need(self, name: str) -> float:
        return 2.0 if self.tiny else STEP_NEED_S.get(name, PATH_NEED_S)

    def over_budget(self, name: str) -> str | None:
        left = self.deadline - time.time()
        if left < self.need(name):
            return f"budget: {left:.0f} s left before this model's deadline, the step needs ~{self.need(name):.0f} s"
        return None

    def skip(self, name: str, why: str) -> dict[str, Any]:
        rec = {"model": self.arch, "step": name, "status": "skipped", "error": why}
        self.steps.append(rec)
        self.write()
        return rec

    def run(self, name: str, fn: Callable[[], dict[str, Any]], always: bool = False) -> dict[str, Any]:
        """Run one step (one of ours) unless the model's budget cannot hold it (``always``: a close)."""
        from chorus.rehearse import timed_step
        why = None if always else self.over_budget(name)
        if why:
            return self.skip(name, why)
        rec: dict[str, Any] = {"model": self.arch, "step": name}
        self.write(running=name)
        timed_step(fn, rec, digits=2)
        self.steps.append(rec)
        print(f"{self.arch} {name}: {rec['status']} {rec['seconds']} s {rec.get('error', '')[:200]}", flush=True)
        self.write()
        return rec

    def skip_rest(self, names: list[str], why: str) -> None:
        for n in names:
            self.skip(n, why)


def _standin_tokenizer(work: Path) -> str | None:
    """Where the embedded model is not prepared (the bare machine), point its profile at a folder
    holding only its tokenizer (carried in .whl/): ``chorus.serving.dummy`` reads nothing else of it."""
    from chorus.serving.profiles import DEFAULT_PROFILE, get_profile
    prof = get_profile(DEFAULT_PROFILE)
    if prof.status()[0]:
        return None
    src = ROOT / ".whl" / "standin-tokenizer"
    if not (src / "tokenizer.json").is_file():
        raise RuntimeError(f"no stand-in tokenizer: {prof.status()[1]}, and {src}/tokenizer.json is missing "
                           f"(run scripts/bare_wheels.py where the embedded model is prepared)")
    out = work / "standin-tokenizer"
    out.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        shutil.copy(f, out / f.name)
    # the profile's folder check wants a weights file; an empty safetensors stands for it
    (out / "model.safetensors").write_bytes(len(b"{}").to_bytes(8, "little") + b"{}")
    os.environ[prof.env_var] = str(out)
    return str(out)


def _build(m: Model) -> dict[str, Any]:
    from chorus.serving.device import free_device_memory
    from chorus.serving.dummy import PATTERN_PERIOD, build_dummy
    standin = _standin_tokenizer(m.work)
    t0 = time.perf_counter()
    kw: dict[str, Any] = ({"layers": PATTERN_PERIOD[m.arch], "narrow_by": 16} if m.tiny else
                          {"layers": None, "device": "cuda" if _cuda() is not None else "cpu"})
    m.folder = build_dummy(m.arch, m.work / m.arch, dtype="bfloat16", **kw)
    free_device_memory()  # the drawn weights' blocks: the cycle's baseline is an empty device
    meta = json.loads((m.folder / "chorus_dummy.json").read_text())
    size = sum(f.stat().st_size for f in m.folder.glob("*.safetensors"))
    m.mem["before_load"] = _mem()
    return {"build_s": round(time.perf_counter() - t0, 1), "layers": meta["layers"], "full_layers": meta["full_layers"],
            "parameters": meta["parameters"], "weights_on_disk_gib": round(size / GIB, 3),
            "standin_tokenizer": standin or "the embedded model's", "device": kw.get("device", "cpu"),
            "memory": m.mem["before_load"]}


def _distinct(chats: list[list[dict]]) -> list[list[dict]]:
    """The chats made pairwise distinct (a case number after the question, outside the peer's span):
    the engine computes identical requests once, so repeated chats would time a plain pass over fewer
    rows than the knockout's."""
    return [[{**c[0], "content": f"{c[0]['content']}\n(case {k + 1})"}] for k, c in enumerate(chats)]


def _knockout_cost(r: Any) -> dict[str, Any]:
    """Knockout in every maskable layer against the plain readout, same batch, interleaved medians."""
    import warnings

    from _recorder import interleaved_medians

    from chorus.rehearse import KO_CHAT, OPTIONS, PEER
    from chorus.interventions import knockout
    eng = r.engine("hf")
    chats = _distinct(KO_CHAT * 4)
    start = KO_CHAT[0][0]["content"].index(PEER)
    target = (0, start, start + len(PEER))
    plain = lambda: knockout.option_logprobs(eng, chats, OPTIONS, None)
    ko = lambda: knockout.option_logprobs(eng, chats, OPTIONS, target, layers="all", queries="after")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a hybrid names its recurrent layers once per call
        med, _ = interleaved_medians({"plain": plain, "knockout": ko})
    return {"rows": len(chats), "plain_s": round(med["plain"], 4), "knockout_s": round(med["knockout"], 4),
            "ratio_knockout_vs_plain": round(med["knockout"] / med["plain"], 3), "dtype": eng.dtype}


def _long_chats(n: int, words: int) -> tuple[list[list[dict]], tuple[int, int, int]]:
    """``n`` chats whose peer message is about ``words`` words of reasoning (a debate turn's length):
    the knockout's cost where it matters, on realistic spans, not the rehearsal's one-line peer."""
    from chorus.rehearse import KO_CHAT, PEER
    body = " ".join(["The evidence on both sides is weak, but the second option fits the facts better."]
                    * max(1, words // 16))
    peer = f"{PEER} {body}"
    chats = []
    for c in _distinct((KO_CHAT * n)[:n]):
        text = c[0]["content"].replace(PEER, peer)
        chats.append([{"role": "user", "content": text}])
    start = chats[0][0]["content"].index(peer)
    return chats, (0, start, start + len(peer))


def _knockout_routes(r: Any, tiny: bool) -> dict[str, Any]:
    """Issue 33's route question on this device: the nnsight route (the default) against the
    registered attention function, every maskable layer cut, on short and debate-length peer
    messages; the largest log-prob difference between the routes (a run's cross-check fails above
    its ``cross_check_tol``, 1e-4 by default) and each route's seconds, interleaved medians."""
    import warnings

    from _recorder import interleaved_medians

    from chorus.rehearse import CheckFailed, KO_CHAT, OPTIONS, PEER
    from chorus.interventions import knockout
    eng = r.engine("hf")
    start = KO_CHAT[0][0]["content"].index(PEER)
    cases = {"short": (_distinct(KO_CHAT * 4), (0, start, start + len(PEER))),
             "long": _long_chats(2 if tiny else 8, 48 if tiny else 1200)}
    out: dict[str, Any] = {"tol": 1e-4}
    worst = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a hybrid names its recurrent layers once per call
        for name, (chats, target) in cases.items():
            f = {rt: (lambda rt=rt: knockout.option_logprobs(eng, chats, OPTIONS, target, layers="all",
                                                             queries="after", route=rt))
                 for rt in ("nnsight", "interface")}
            f["plain"] = lambda: knockout.option_logprobs(eng, chats, OPTIONS, None)
            res = {k: g() for k, g in f.items()}  # warm-up, and the values compared
            diff = max(abs(a[o] - b[o]) for a, b in zip(res["nnsight"], res["interface"]) for o in OPTIONS)
            moved = max(abs(a[o] - b[o]) for a, b in zip(res["nnsight"], res["plain"]) for o in OPTIONS)
            med, _ = interleaved_medians(f, warmup=False)  # warmed up above
            out[name] = {"rows": len(chats), "prompt_tokens": len(eng.render(chats[0]).ids),
                         "max_abs_diff_routes": diff, "bitwise_equal": diff == 0.0, "max_shift_vs_plain": moved,
                         **{f"{k}_s": round(v, 4) for k, v in med.items()},
                         "ratio_nnsight_vs_interface": round(med["nnsight"] / med["interface"], 3),
                         "ratio_nnsight_vs_plain": round(med["nnsight"] / med["plain"], 3)}
            worst = max(worst, diff)
    if worst > out["tol"]:
        raise CheckFailed(f"the nnsight and interface routes differ by {worst:.3g} (tolerance {out['tol']})", out)
    return out


def _knockout_generate(r: Any, tiny: bool) -> dict[str, Any]:
    """Knockout through generation on this device (issue 33 part 3): a greedy reply with the peer
    message cut in every maskable layer, with the KV cache and recomputed without it. On CPU in
    float32 the two are the same tokens (tests/test_knockout_generate.py); here in bf16 the cached
    and recomputed kernels round differently, so the check is that the cut reached the decode steps
    (the reply's log-probs differ from the plain reply's) and the agreement is reported: tokens
    equal before the first divergence, and the largest log-prob gap over that common prefix."""
    import warnings

    from chorus.rehearse import CheckFailed
    from chorus.interventions.knockout_generate import greedy
    eng = r.engine("hf")
    chats, target = _long_chats(1, 48 if tiny else 400)
    conv = chats[0]
    n = 8 if tiny else 32
    out: dict[str, Any] = {"max_new_tokens": n, "prompt_tokens": len(eng.render(conv).ids)}
    rep = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k, kw in (("plain", {"block_message": None}), ("cached", {"block_message": target}),
                      ("recomputed", {"block_message": target, "use_cache": False})):
            t0 = time.perf_counter()
            rep[k] = greedy(eng, conv, max_new_tokens=n, **kw)
            out[f"{k}_s"] = round(time.perf_counter() - t0, 3)
            out[f"{k}_tokens"] = len(rep[k].ids)
    a, b = rep["cached"], rep["recomputed"]
    same = next((i for i, (x, y) in enumerate(zip(a.ids, b.ids)) if x != y), min(len(a.ids), len(b.ids)))
    out.update(cached_is_cached=a.cached, equal_prefix_tokens=same, same_reply=a.ids == b.ids,
               max_logprob_gap_on_prefix=max((abs(x - y) for x, y in zip(a.logprobs[:same], b.logprobs[:same])),
                                             default=0.0))
    p = rep["plain"]
    out["cut_changed_reply"] = p.ids != a.ids or any(abs(x - y) > 1e-3 for x, y in zip(p.logprobs, a.logprobs))
    if not out["cut_changed_reply"]:
        raise CheckFailed("the knockout left the generated reply and its log-probs unchanged", out)
    return out


def _knockout_recurrent(r: Any, tiny: bool) -> dict[str, Any]:
    """Issue 33 part 2 on this device (hybrids only): the cost of cutting the peer message in every
    layer by attention only, the recurrent route only, and both, against the plain readout, on
    debate-length messages; the first recurrent layer's cut output against the float64
    token-by-token recomputation; and the readout unchanged when the message's tokens are replaced
    with every route cut (``bench/bench_recurrent_knockout.py``'s ``measure``)."""
    from bench_recurrent_knockout import measure

    from chorus.rehearse import CheckFailed, Skip
    from chorus.interventions import knockout
    eng = r.engine("hf")
    lm = knockout.layer_map(eng)
    if not lm.unmaskable:
        raise Skip(f"{lm.model_type}: no recurrent layer")
    d = measure(eng, n=2 if tiny else 8, words=48 if tiny else 1000, repeats=3)
    # bf16: the cut layer runs the model's kernels in bf16, the reference in float64
    tol = 1e-4 if d["dtype"] == "float32" else 5e-2
    problems = []
    if d["exactness"]["max_rel_diff"] > tol:
        problems.append(f"the cut layer differs from its recomputation by {d['exactness']['max_rel_diff']:.3g} "
                        f"(relative; tolerance {tol})")
    if d["message_swapped_max_logprob_change"]["both"] != 0.0:
        problems.append(f"with every route cut the message still moves the readout by "
                        f"{d['message_swapped_max_logprob_change']['both']:.3g}")
    if problems:
        raise CheckFailed("; ".join(problems), d)
    return d


def _ratios(m: Model, r: Any) -> dict[str, Any]:
    """chorus against raw transformers on this model (``bench/chorus_ratios.py``): every key a time
    ratio chorus/raw of interleaved medians, the most informative keys first, until its share of
    the budget is spent (the rest recorded as skipped)."""
    from chorus_ratios import measure

    from chorus.rehearse import CheckFailed
    # full size: its share, leaving the later steps theirs; tiny: every key (the check's own test)
    deadline = None if m.tiny else min(m.deadline - 60, time.time() + RATIOS_S)
    d = measure(r.engine("hf"), "tiny" if m.tiny else "full", deadline=deadline,
                **({"repeats": 1, "min_seconds": 0, "new_tokens": 2, "words": 48} if m.tiny else {}))
    errors = {k: v["error"] for k, v in d["ratios"].items() if "error" in v}
    if errors:
        raise CheckFailed(f"ratio keys failed: {errors}", d)
    return d


def _bf16_invariance(m: Model, r: Any) -> dict[str, Any]:
    """Issue 52 part 4: bf16 option log-probs of chats of three lengths batched against alone, under
    the engine's attention and eager, and the padded row's drift per layer (``bench/batch_invariance.py``).
    On a CPU (float32 engine) a second engine of the same folder is loaded in bf16."""
    from batch_invariance import measure

    from chorus.serving import load_engine
    eng = r.engine("hf")
    if eng.dtype == "bfloat16":
        return measure(eng)
    bf = load_engine(str(m.folder), "hf", dtype="bfloat16")
    try:
        return measure(bf)
    finally:
        bf.close()


def _sft_full_step(m: Model) -> dict[str, Any]:
    """One real optimizer step of the paper's full fine-tuning recipe (``sft default.yaml``: micro-batch
    and length, gradient checkpointing, its optimizer) in the precision the planner picks for this
    device (``sft_memory.choose_precision``), with the peak device memory beside the estimate. The loss
    head is computed in token chunks under checkpointing, as TRL's fused head does, so no (tokens x
    vocabulary) logits are kept. ``--tiny`` (CPU): the recipe's settings at 1 x 64 tokens on the tiny
    model, fp32. The estimate's overhead (CUDA context, allocator slack) is outside torch's peak."""
    import math
    from dataclasses import replace

    import torch
    from torch.utils.checkpoint import checkpoint
    from transformers import AutoModelForCausalLM

    from chorus.rehearse import CheckFailed
    from chorus.serving.device import free_device_memory
    from chorus.simulate.roleplay.config import SftConfig, load
    from chorus.simulate.roleplay.sft_memory import AUTO_PRECISIONS, choose_precision, estimate, settings_for
    cuda = _cuda() is not None
    recipe = settings_for(load("default", SftConfig, part="sft"))
    if m.tiny:
        recipe = replace(recipe, micro_batch=1, seq_len=64)
    config = json.loads((m.folder / "config.json").read_text())
    device_gib = (torch.cuda.get_device_properties(0).total_memory / GIB) if cuda else NOMINAL_DEVICE_GIB
    usable = device_gib * 0.9  # plan_devices' max_utilization
    import importlib.util
    cands = tuple(p for p in AUTO_PRECISIONS if p != "bf16-8bit" or importlib.util.find_spec("bitsandbytes"))
    s, considered = choose_precision(config, recipe, usable, candidates=cands if cuda else ("fp32",))
    est = estimate(config, s)
    d: dict[str, Any] = {"precision": est.precision, "considered_gib": considered, "usable_gib": round(usable, 3),
                         "micro_batch": s.micro_batch, "seq_len": s.seq_len, "optim": s.optim,
                         "gradient_checkpointing": s.gradient_checkpointing, "estimate": est.to_dict(),
                         "estimate_gib": round(est.total_gib, 3),
                         "estimate_without_overhead_gib": round(est.total_gib - est.overhead_gib, 3)}
    if est.total_gib > usable:
        raise CheckFailed(f"no precision fits: {considered} GiB against {usable:.1f} usable", d)
    dev = "cuda" if cuda else "cpu"
    if cuda:
        free_device_memory()
        torch.cuda.reset_peak_memory_stats()
    model = AutoModelForCausalLM.from_pretrained(str(m.folder), dtype=getattr(torch, s.dtype)).to(dev)
    try:
        model.train()
        model.config.use_cache = False
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-5, fused=cuda and s.optim == "adamw_torch_fused")
        vocab = model.get_output_embeddings().weight.shape[0]
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(0, vocab, (s.micro_batch, s.seq_len), generator=g).to(dev)
        base, head = model.get_decoder(), model.get_output_embeddings()
        auto = torch.autocast("cuda", dtype=torch.bfloat16) if cuda and s.act_dtype == "bfloat16" else _null()
        t0 = time.perf_counter()
        with auto:
            hidden = base(input_ids=ids).last_hidden_state[:, :-1].reshape(-1, head.weight.shape[1])
            tgt = ids[:, 1:].reshape(-1)
            chunk = 4096

            def part(h, t):  # recomputed in the backward pass: one chunk's logits alive at a time
                return torch.nn.functional.cross_entropy(head(h).float(), t, reduction="sum")
            loss = sum(checkpoint(part, hidden[i:i + chunk], tgt[i:i + chunk], use_reentrant=False)
                       for i in range(0, hidden.shape[0], chunk)) / tgt.numel()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        d.update(step_s=round(time.perf_counter() - t0, 3), loss=round(float(loss.detach()), 4),
                 parameters=sum(p.numel() for p in params),
                 state_dtype=str(next(iter(opt.state.values()))["exp_avg"].dtype).replace("torch.", ""))
        if cuda:
            d.update(peak_allocated_gib=round(torch.cuda.max_memory_allocated() / GIB, 3),
                     peak_reserved_gib=round(torch.cuda.max_memory_reserved() / GIB, 3))
            d["measured_vs_estimate"] = round(d["peak_reserved_gib"] / d["estimate_without_overhead_gib"], 3)
        else:
            d["peak_device_gib"] = "no CUDA device: the step ran on the CPU, the peak is the step's RSS"
        del opt, loss, hidden, params
    finally:
        del model
        free_device_memory()
    if not math.isfinite(d["loss"]):
        raise CheckFailed("the full fine-tuning step's loss is not finite", d)
    return d


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _loaded(m: Model) -> None:
    m.mem["loaded"] = _mem()


def _close(m: Model, r: Any) -> dict[str, Any]:
    r.release("hf")  # the rehearsal's own close: engine.close(), then its collect and cache release
    m.mem["after_close"] = _mem()
    return {"memory": m.mem["after_close"], **_returned(m, "after_close")}


def _returned(m: Model, key: str) -> dict[str, Any]:
    a, b = m.mem.get("before_load", {}), m.mem.get(key, {})
    if "free_gib" not in a or "free_gib" not in b:
        return {"free_back_checked": False}
    gap = round(a["free_gib"] - b["free_gib"], 3)
    if gap > CYCLE_TOL_GIB:
        from chorus.rehearse import CheckFailed
        raise CheckFailed(f"{gap:.2f} GiB of device memory not given back at {key} (tolerance {CYCLE_TOL_GIB})",
                          {"memory": b, "not_returned_gib": gap})
    return {"free_back_checked": True, "not_returned_gib": gap}


def _lora_step(m: Model) -> dict[str, Any]:
    """One LoRA step on a second load of the engine (the load/close/load cycle's second load):
    peft adapters on every linear layer (the shipped LoRA config's), completion-only loss,
    gradient checkpointing, AdamW; then the engine is closed and the device checked again."""
    import math

    import torch
    from peft import LoraConfig, get_peft_model

    from chorus.serving import load_engine
    eng = load_engine(str(m.folder), "hf", dtype=m.dtype)
    try:
        m.mem["second_load"] = _mem()
        model, tok = eng.backend.model, eng.tokenizer
        reply = " ".join(["The river bends past the old mill and the bridge."] * (2 if m.tiny else 24))
        prompt = eng.render([{"role": "user", "content": "Write about the river."}]).ids
        answer = tok(reply, add_special_tokens=False)["input_ids"] + [eng.backend.eos_ids[0]]
        ids = torch.tensor([prompt + answer] * 2, device=eng.backend.device)
        labels = ids.clone()
        labels[:, :len(prompt)] = -100  # completion-only: the prompt is context, not target
        model.train()
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        pm = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear",
                                              task_type="CAUSAL_LM"))
        trainable = [p for p in pm.parameters() if p.requires_grad]
        lora_b = [p for n, p in pm.named_parameters() if "lora_B" in n]
        opt = torch.optim.AdamW(trainable, lr=1e-4)
        t0 = time.perf_counter()
        loss = pm(input_ids=ids, labels=labels).loss
        loss.backward()
        grad = float(torch.nn.utils.clip_grad_norm_(trainable, 1e9))
        opt.step()
        opt.zero_grad(set_to_none=True)
        step_s = time.perf_counter() - t0
        moved = float(sum(p.detach().abs().sum() for p in lora_b))  # lora_B starts at zero
        d = {"tokens": int(ids.numel()), "prompt_tokens": len(prompt), "loss": round(float(loss.detach()), 4),
             "grad_norm": round(grad, 4), "trainable": sum(p.numel() for p in trainable),
             "of": sum(p.numel() for p in pm.parameters()), "lora_b_abs_sum": moved, "step_s": round(step_s, 3),
             "memory_loaded": m.mem["second_load"]}
        del loss, opt, trainable, lora_b, pm, model
    finally:
        from chorus.serving.device import free_device_memory
        eng.close()
        free_device_memory()  # the optimizer's and autograd's blocks are ours to give back, not the engine's
        m.mem["after_second_close"] = _mem()
    d["memory_after_close"] = m.mem["after_second_close"]
    from chorus.rehearse import _check
    return _check(math.isfinite(d["loss"]) and math.isfinite(d["grad_norm"]) and d["lora_b_abs_sum"] > 0,
                  "the LoRA step did not move the adapters with a finite loss", d)


def _cycle(m: Model) -> dict[str, Any]:
    from chorus.rehearse import CheckFailed
    d: dict[str, Any] = {k: m.mem.get(k) for k in ("before_load", "loaded", "after_close", "second_load",
                                                   "after_second_close")}
    if "free_gib" not in (m.mem.get("before_load") or {}):
        return {**d, "checked": False, "why": "no CUDA device: free device memory is not measured here"}
    gaps = {k: round(m.mem["before_load"]["free_gib"] - m.mem[k]["free_gib"], 3)
            for k in ("after_close", "after_second_close") if m.mem.get(k)}
    d.update(checked=True, not_returned_gib=gaps, tolerance_gib=CYCLE_TOL_GIB)
    if len(gaps) < 2:
        raise CheckFailed(f"the cycle did not complete (closes measured: {sorted(gaps)})", d)
    bad = {k: v for k, v in gaps.items() if v > CYCLE_TOL_GIB}
    if bad:
        raise CheckFailed(f"device memory not given back within {CYCLE_TOL_GIB} GiB: {bad}", d)
    return d


def _plan(m: Model) -> dict[str, Any]:
    """``chorus.serving.plan.plan_devices`` for a vLLM + transformers pool of this model on this device,
    against what the transformers copy measured: its resident weights and its peak."""
    from chorus.rehearse import CheckFailed
    from chorus.serving.memory import weights_gib
    from chorus.serving.plan import DevicePlanError, Need, plan_devices
    cuda = _cuda() is not None
    dtype = m.dtype or "float32"
    planned_w = weights_gib(m.folder, dtype)
    loaded = m.mem.get("loaded") or {}
    device = loaded.get("total_gib") or NOMINAL_DEVICE_GIB
    try:  # the pool's case: one model on vLLM and its transformers copy (chorus.serving.engine.plan_pool)
        plan = plan_devices([Need("model", m.arch, b, dtype, planned_w) for b in ("vllm", "hf")], device)
    except DevicePlanError as err:
        raise CheckFailed(str(err), {"device_gib": device, "weights_gib": planned_w}) from None
    vllm, hf = plan.phases[0].engines  # in the declared order
    d: dict[str, Any] = {"plan": plan.to_dict(), "planned_weights_gib": round(planned_w, 3)}
    if not cuda:
        return {**d, "checked": False, "why": f"no CUDA device: planned for a nominal {NOMINAL_DEVICE_GIB} GiB device"}
    peaks = [s.get("peak_gpu_gib") or 0.0 for s in m.steps if s["step"].startswith("hf.") or s["step"] == "knockout.cost"]
    before = m.mem["before_load"]
    # what the copy takes from the driver: its peak tensors plus the allocator's slack at load
    slack = max(0.0, (before["free_gib"] - loaded["free_gib"]) - loaded["allocated_gib"])
    peak = max(peaks, default=0.0) + slack
    # CUDA contexts (this process's and the parent's) and whatever else holds the device
    context = before["total_gib"] - before["free_gib"] - before["reserved_gib"]
    d.update(resident_weights_gib=loaded["allocated_gib"], allocator_slack_gib=round(slack, 3),
             cuda_context_gib=round(context, 3), hf_peak_device_gib=round(peak, 3),
             vllm_reserves_gib=round(vllm.gpu_memory_utilization * device, 3), checked=True)
    problems = []
    # one-sided: a text-only load (Qwen3.5 leaves its vision tower on disk) holds less than the files
    if loaded["allocated_gib"] > 1.03 * planned_w + 0.25:
        problems.append(f"resident weights {loaded['allocated_gib']:.2f} GiB, over the planned {planned_w:.2f} GiB")
    if peak > hf.need_gib:
        problems.append(f"the transformers copy peaked at {peak:.2f} GiB, over the planned {hf.need_gib:.2f} GiB")
    if plan.mode == "share" and vllm.gpu_memory_utilization * device + peak + context > device:
        problems.append(f"vLLM's {vllm.gpu_memory_utilization:.3f} share, the copy's {peak:.2f} GiB and "
                        f"{context:.2f} GiB of CUDA context exceed the device's {device:.2f} GiB")
    if problems:
        raise CheckFailed("; ".join(problems), d)
    return d


def run_model(arch: str, report_path: Path, work: Path, deadline: float, tiny: bool, dtype: str = "bfloat16") -> None:
    import tempfile as _tf

    from chorus.rehearse import _Rehearsal, _run_path
    m = Model(arch, report_path, work, deadline, tiny, dtype)
    later = [*REHEARSE_PATHS, "ratios", "bf16.invariance", "knockout.cost", "knockout.routes", "knockout.generate",
             *(["knockout.recurrent"] if arch in HYBRIDS else []), "hf.close", "sft.lora_step", "memory.cycle",
             "memory.plan", *(["sft.full_step"] if tiny or arch == FULL_STEP_ARCH else [])]
    try:
        if m.run("build", lambda: _build(m))["status"] != "pass":
            return m.skip_rest(later, "no model folder (build failed)")
        with _tf.TemporaryDirectory(prefix="chorus-bare-") as tmp:
            r = _Rehearsal(str(m.folder.resolve()), m.folder, m.dtype, Path(tmp))
            try:
                for name in REHEARSE_PATHS:  # the rehearsal's own paths, on one engine it loads once
                    why = m.over_budget(name)
                    if why:
                        m.skip(name, why)
                        continue
                    m.write(running=name)
                    rec = {"model": arch, "step": name, **_run_path(name, r)}
                    rec.pop("path", None)
                    m.steps.append(rec)
                    if name == "hf.load" and rec["status"] == "pass":
                        _loaded(m)
                        rec["detail"]["memory"] = m.mem["loaded"]
                    print(f"{arch} {name}: {rec['status']} {rec['seconds']} s {rec.get('error', '')[:200]}", flush=True)
                    m.write()
                    if name == "hf.load":  # the most informative step first: chorus against raw transformers
                        m.run("ratios", lambda: _ratios(m, r))
                m.run("bf16.invariance", lambda: _bf16_invariance(m, r))
                m.run("knockout.cost", lambda: _knockout_cost(r))
                m.run("knockout.routes", lambda: _knockout_routes(r, m.tiny))
                m.run("knockout.generate", lambda: _knockout_generate(r, m.tiny))
                if arch in HYBRIDS:
                    m.run("knockout.recurrent", lambda: _knockout_recurrent(r, m.tiny))
            finally:
                m.run("hf.close", lambda: _close(m, r), always=True)
        m.run("sft.lora_step", lambda: _lora_step(m))
        m.run("memory.cycle", lambda: _cycle(m))
        m.run("memory.plan", lambda: _plan(m))
        if m.tiny or arch == FULL_STEP_ARCH:
            m.run("sft.full_step", lambda: _sft_full_step(m))  # last: it needs the whole device
    finally:
        if m.folder is not None:
            shutil.rmtree(m.folder, ignore_errors=True)  # 15-18 GB: the next model needs the disk
        m.write()


# -- the parent -------------------------------------------------------------------------------------------
def missing_packages() -> list[str]:
    return [dist for mod, dist in NEEDED.items() if importlib.util.find_spec(mod) is None]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for gpu-check-bare.json and its log")
    ap.add_argument("--tiny", action="store_true", help="tiny sizes on any machine (CI, CPU)")
    ap.add_argument("--budget-s", type=float, default=540.0, help="wall-clock budget for all models (default 540: "
                                                                 "one 10-minute device command with the install)")
    ap.add_argument("--models", default="llama,gemma,qwen",
                    help="comma-separated, in the order they run: llama, gemma, qwen")
    ap.add_argument("--work", type=Path, default=None, help="where the dummy folders go (default: a temp folder)")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"],
                    help="the engines' dtype on a GPU (default bfloat16, what users run; float32 separates "
                         "rounding from a real difference); a CPU runs float32")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        run_model(a.child, a.out / REPORT, a.work, a.deadline, a.tiny, a.dtype)
        return 0
    t_all = time.time()
    info = device_info()
    print(header_line(info), flush=True)  # first: what the numbers below were measured on
    models = []
    for x in a.models.split(","):
        x = x.strip()
        if x not in ALIASES and x not in ORDER:
            print(f"gpu_check_bare: unknown model {x!r}: choose from {', '.join(ALIASES)}", file=sys.stderr)
            return 2
        if ALIASES.get(x, x) not in models:
            models.append(ALIASES.get(x, x))
    missing = missing_packages()
    if missing:
        print(f"gpu_check_bare: missing packages {', '.join(missing)}: install the carried wheels first "
              f"(python3 -m pip install --no-index --no-deps --target /tmp/site .whl/*.whl; "
              f"PYTHONPATH=/tmp/site:.)", file=sys.stderr)
        return 2
    if not a.tiny and not info.get("cuda_available"):
        print(f"gpu_check_bare: torch sees no CUDA device ({header_line(info)}); use --tiny on a CPU", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    report_path = a.out / REPORT
    report: dict[str, Any] = {"check": "gpu-check-bare", "command": " ".join(sys.argv), "tiny": a.tiny,
                              "budget_s": a.budget_s, "dtype": a.dtype if info.get("cuda_available") else "float32",
                              "device": info, "versions": versions(), "models": {},
                              "steps": []}
    save(report_path, report)
    work = a.work or Path(tempfile.mkdtemp(prefix="chorus-gpu-check-bare-"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    try:
        with open(a.out / LOG, "a") as log:
            for i, arch in enumerate(models):  # in the order asked: the first gets its budget first
                left = a.budget_s - (time.time() - t_all)
                need = TINY_NEED_S if a.tiny else MODEL_NEED_S[arch]
                # what the models after this one need is kept for them: breadth before depth
                reserve = sum(TINY_NEED_S if a.tiny else MODEL_NEED_S[x] for x in models[i + 1:])
                report = json.loads(report_path.read_text())
                if left < need:
                    report["models"][arch] = {"status": "skipped", "reason": f"budget: {left:.0f} s left, needs ~{need} s"}
                    save(report_path, report)
                    print(f"{arch}: skipped ({left:.0f} s left, needs ~{need} s)", flush=True)
                    continue
                t0 = time.time()
                own = max(need, left - reserve)
                deadline = t0 + own - 5  # the child stops starting steps here; killed 5 s later
                cmd = [sys.executable, str(Path(__file__).resolve()), "--child", arch, "--out", str(a.out),
                       "--work", str(work), "--deadline", str(deadline), "--dtype", a.dtype] + (["--tiny"] if a.tiny else [])
                log.write(f"\n==== {arch}\n")
                log.flush()
                at = log.tell()
                try:
                    p = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=own)
                    rc: Any = p.returncode
                except subprocess.TimeoutExpired:
                    rc = "killed at the budget"
                shutil.rmtree(work / arch, ignore_errors=True)
                report = json.loads(report_path.read_text())
                m = report["models"].setdefault(arch, {})
                running = m.pop("running", None)
                if rc != 0 and running:  # the step it was in when it died
                    report["steps"].append({"model": arch, "step": running, "status": "fail",
                                            "error": f"the model's process ended ({rc}) during this step"})
                m.update(status="ran" if rc == 0 else "fail", exit=rc, seconds=round(time.time() - t0, 1))
                if rc != 0:
                    log.flush()
                    with open(a.out / LOG, errors="replace") as f:
                        f.seek(at)
                        m["log_tail"] = f.read()[-2000:]
                save(report_path, report)
                print(f"{arch}: {m['status']} in {m['seconds']} s", flush=True)
    finally:
        if a.work is None:
            shutil.rmtree(work, ignore_errors=True)
    report = json.loads(report_path.read_text())
    report["counts"] = {s: sum(x["status"] == s for x in report["steps"]) for s in ("pass", "fail", "skipped")}
    report["total_s"] = round(time.time() - t_all, 1)
    save(report_path, report)
    for s in report["steps"]:
        print(f"  {s['model']:<22} {s['step']:<18} {s['status']:<7} {s.get('seconds', '')} "
              f"{(s.get('error') or '')[:120]}")
    print(f"{report['counts']} in {report['total_s']} s -> {report_path}")
    failed = report["counts"]["fail"] or any(m.get("status") == "fail" for m in report["models"].values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
