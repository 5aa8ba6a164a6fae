"""The rehearsal (issue 17): one model folder taken through every path chorus offers.

Each path is one small, real use of a part's public API (a batched chat, guided JSON, a knockout,
a debate round, a LoRA step, ...) on one model, run inside its own try/except so one failure never
stops the others. Per path it records pass / fail / skipped, wall time and the peak memory of this
process and its children (sampled every 50 ms), so a user learns on their own machine, before a
real run, which paths work with their model and what they cost. With a dummy folder from
``chorus.serving.dummy`` it rehearses a paper architecture without its weights: the numbers then say
nothing about answers, only about plumbing, memory and speed.

Backends run one after the other (hf, then vllm, then openai): each engine is loaded once, shared
by that backend's paths, and closed before the next backend loads, so two copies of the model are
never resident at once. The hf readouts are kept for the vllm phase to compare against.

    from chorus.rehearse import rehearse, PATHS
    res = rehearse("/models/Llama-3.1-8B-Instruct", backends=["hf", "vllm"], out=Path("runs/rehearse"))
    [(r["path"], r["status"], r["seconds"], r["peak_rss_gib"]) for r in res["results"]]
"""
from __future__ import annotations

import gc
import json
import math
import os
import platform
import tempfile
import threading
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

from chorus.serving.backends import BACKENDS as _BACKENDS, trait
from chorus.core.runs import library_versions, write_json
from chorus.registry import run_verb
from chorus.simulate.belief.channel import LLMAppraiser, LLMGenerator, LLMProbe, ProbeRound, RunKey, Turn
from chorus.simulate.belief.topics import load_topic
from chorus.serving.launch import free_port, start_server, stop_server, wait_healthy
from chorus.serving.profiles import all_profiles, get_profile
from chorus.interventions import knockout, patching, probes
from chorus.core.config import InputError

__all__ = ["PATHS", "BACKENDS", "rehearse", "Skip", "CheckFailed"]

BACKENDS = tuple(_BACKENDS)  # serving.backends' table: the order the phases run in, whatever order is asked for
GIB = 2 ** 30
SAMPLE_S = 0.05
# The engine's documented tolerances (tests/test_serving_engine.py): float32 results do not depend
# on the batch and hf and vllm agree within 1e-3. Other dtypes make no such promise: reported only.
FLOAT32_TOL = 1e-3

CHATS = [[{"role": "user", "content": q}] for q in (
    "What is the capital of France?", "Name a primary colour.", "What is 2 + 2?",
    "Is the earth round? Answer yes or no.")]
OPTIONS = ["A", "B"]
MC = [[{"role": "user", "content": f"Question: {q}\nA. {a}\nB. {b}\nAnswer with A or B."}] for q, a, b in (
    ("Which is a fruit?", "apple", "chair"), ("Which is larger?", "the sun", "the moon"),
    ("Which is a colour?", "seven", "blue"), ("Which animal says moo?", "a cow", "a cat"))]
SCHEMA = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}, "sure": {"type": "boolean"}},
          "required": ["answer", "sure"], "additionalProperties": False}
CHOICES = ["yes", "no", "maybe"]
# knockout: the span whose attention is cut is a peer's claim inside the one user message
PEER = "My friend is certain that the answer is B."
KO_CHAT = [[{"role": "user", "content": f"{PEER}\nQuestion: {q}\nA. {a}\nB. {b}\nAnswer with A or B."}]
           for q, a, b in (("Which is a fruit?", "apple", "chair"), ("Which is larger?", "the sun", "the moon"))]


class Skip(Exception):
    """The path does not apply here (the backend, the model or the machine lacks it); the reason."""


class CheckFailed(RuntimeError):
    """The path ran but broke one of chorus' promises; ``detail`` keeps the numbers measured."""

    def __init__(self, msg: str, detail: dict[str, Any]):
        super().__init__(msg)
        self.detail = detail


# -- measurement -------------------------------------------------------------------------------
def _anon_bytes(pid: int) -> int:
    """Anonymous (process-owned) memory from /proc/PID/smaps_rollup: RSS summed over processes
    also counts the memory-mapped checkpoint's file pages (reclaimable page cache) and every
    process's shared libraries, which made vLLM's CPU engine look twice its weights."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Anonymous:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class _PeakRSS:
    """Peak RSS of this process plus its children (vLLM's engine core, ``chorus serve``), sampled
    by a background thread: a path's peak is often a transient (load, training step) that
    before/after readings miss."""

    def __init__(self) -> None:
        import psutil
        self._proc = psutil.Process()
        self._psutil = psutil
        self.peak = 0
        self.peak_anon = 0  # anonymous memory only (0 where /proc/PID/smaps_rollup is missing)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="chorus-rehearse-rss", daemon=True)

    def sample(self) -> int:
        total, anon = 0, 0
        for p in [self._proc, *self._children()]:
            try:
                total += p.memory_info().rss
                anon += _anon_bytes(p.pid)
            except (self._psutil.NoSuchProcess, self._psutil.AccessDenied):
                pass  # a child that ended between listing and reading
        self.peak = max(self.peak, total)
        self.peak_anon = max(self.peak_anon, anon)
        return total

    def _children(self) -> list:
        try:
            return self._proc.children(recursive=True)
        except self._psutil.Error:
            return []

    def _loop(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.sample()

    def __enter__(self) -> "_PeakRSS":
        self.start = self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def _cuda():
    try:
        import torch
        return torch if torch.cuda.is_available() else None
    except ImportError:  # pragma: no cover
        return None


def _machine() -> dict[str, Any]:
    import psutil
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    m: dict[str, Any] = {"kind": "cpu", "cpu": cpu, "cores": os.cpu_count(),
                         "physical_cores": psutil.cpu_count(logical=False),
                         "ram_gib": round(psutil.virtual_memory().total / GIB, 2),
                         "ram_available_gib": round(psutil.virtual_memory().available / GIB, 2),
                         "platform": platform.platform(), "torch_threads": None,
                         "CHORUS_TORCH_THREADS": os.environ.get("CHORUS_TORCH_THREADS")}
    try:
        import torch
        m["torch_threads"] = torch.get_num_threads()
    except ImportError:  # pragma: no cover
        pass
    torch = _cuda()
    if torch is not None:
        props = torch.cuda.get_device_properties(0)
        m.update(kind="gpu", gpu=props.name, gpus=torch.cuda.device_count(),
                 gpu_gib=round(props.total_memory / GIB, 2))
    return m


def _config_summary(folder: Path) -> dict[str, Any]:
    cfg = json.loads((folder / "config.json").read_text())
    t = cfg.get("text_config") or cfg  # multimodal configs (Gemma-4, Qwen3.5) nest the decoder
    out = {"model_type": cfg.get("model_type"), "architectures": cfg.get("architectures"),
           "layers": t.get("num_hidden_layers"), "hidden": t.get("hidden_size"),
           "vocab": t.get("vocab_size") or cfg.get("vocab_size"),
           "weights_gib": round(sum(f.stat().st_size for f in folder.glob("*.safetensors")) / GIB, 3)}
    dummy = folder / "chorus_dummy.json"
    if dummy.is_file():  # a chorus.serving.dummy folder: random weights, say so in the report
        d = json.loads(dummy.read_text())
        out["dummy"] = {k: d.get(k) for k in ("architecture", "layers", "full_layers", "parameters", "tokenizer")}
    return out


def _err(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"[:500]


def _where(err: BaseException) -> str | None:
    tb = traceback.extract_tb(err.__traceback__)
    return f"{Path(tb[-1].filename).name}:{tb[-1].lineno} in {tb[-1].name}" if tb else None


def _max_diff(a: list[dict[str, float]], b: list[dict[str, float]]) -> float:
    return max(abs(x[o] - y[o]) for x, y in zip(a, b) for o in x)


def _finite(lps: list[dict[str, float]]) -> bool:
    return all(math.isfinite(v) for d in lps for v in d.values())


def _r(x: float | None, n: int = 4) -> float | None:
    return None if x is None else round(float(x), n)


# -- the run's state ----------------------------------------------------------------------------
class _Rehearsal:
    """What the paths share: the model, one engine per backend (loaded on first use), a temp
    folder for run directories, and the hf results later phases compare against."""

    def __init__(self, model: str, folder: Path, dtype: str | None, tmp: Path):
        self.model, self.folder, self.dtype, self.tmp = model, folder, dtype, tmp
        self.engines: dict[str, Any] = {}
        self.load_s: dict[str, float] = {}
        self.load_error: dict[str, str] = {}
        self.released: set[str] = set()
        self.hf_logprobs: list[dict[str, float]] | None = None
        self.hf_greedy: list[str] | None = None

    def engine(self, backend: str) -> Any:
        if backend in self.engines:
            return self.engines[backend]
        if backend in self.load_error:
            raise Skip(f"the {backend} engine did not load: {self.load_error[backend]}")
        if backend in self.released:
            raise Skip(f"the {backend} engine was already released (run its paths before hf.sft)")
        from chorus.serving import build_engine  # at call time: the seam tests patch
        from chorus.serving.backends import backend_class
        kw: dict[str, Any] = {}
        cls = backend_class(backend)
        if not cls.installed():
            self.load_error[backend] = f"{cls.needs_name} is not installed ({cls.install})"
            raise Skip(self.load_error[backend])
        if _cuda() is None:
            kw.update(cls.cpu_options)  # vLLM: no graph capture on CPU, a faster start, same results
        t0 = time.perf_counter()
        try:
            # no call store: every readout must be computed, never read back
            eng = build_engine({"profile": str(self.model), "backend": backend, "dtype": self.dtype, "options": kw})
        except Exception as err:
            self.load_error[backend] = _err(err)
            raise
        self.load_s[backend] = time.perf_counter() - t0
        self.engines[backend] = eng
        return eng

    def release(self, backend: str) -> None:
        """Close the backend's engine and give its memory back before anything else loads."""
        eng = self.engines.pop(backend, None)
        try:
            if eng is not None:
                self.released.add(backend)
                eng.close()
        finally:
            del eng
            _free()


def _free() -> None:
    """Collect reference cycles (TRL's trainer keeps a whole model copy alive in one until the
    next collection, measured: 6 GB) and hand cached CUDA blocks back."""
    gc.collect()
    torch = _cuda()
    if torch is not None:
        torch.cuda.empty_cache()


def _check(ok: bool, msg: str, detail: dict[str, Any]) -> dict[str, Any]:
    if not ok:
        raise CheckFailed(msg, detail)
    return detail


# -- serving paths (hf and vllm) -------------------------------------------------------------------
def _load(backend: str) -> Callable[[_Rehearsal], dict[str, Any]]:
    def run(r: _Rehearsal) -> dict[str, Any]:
        eng = r.engine(backend)
        d: dict[str, Any] = {"load_s": _r(r.load_s.get(backend), 2), "dtype": eng.dtype,
                             "max_model_len": eng.max_model_len}
        if trait(backend, "exposes_model"):   # the transformers model is here: its size and device
            m = eng.model
            d["params"] = sum(p.numel() for p in m.parameters())
            d["device"] = str(next(m.parameters()).device)
        return d
    return run


def _chat(backend: str) -> Callable[[_Rehearsal], dict[str, Any]]:
    def run(r: _Rehearsal) -> dict[str, Any]:
        eng = r.engine(backend)
        t0 = time.perf_counter()
        outs = eng.chat(CHATS, temperature=0.0, max_tokens=16)
        dt = time.perf_counter() - t0
        toks = sum(o.completion_tokens for o in outs)
        d: dict[str, Any] = {"chats": len(outs), "new_tokens": toks, "tokens_per_s": _r(toks / dt, 2),
                             "finish": sorted({o.finish_reason for o in outs}), "first": outs[0].text[:60]}
        if trait(backend, "exposes_model"):   # the reference the other backends are compared with
            r.hf_greedy = [o.text for o in outs]
        elif r.hf_greedy is not None:
            # the engine's promise (hf and vllm agree on greedy text) is checked by the tests in
            # float32; a random-weight model can have near ties, so this is reported, not failed
            d["same_text_as_hf"] = sum(a == o.text for a, o in zip(r.hf_greedy, outs)) / len(outs)
        return _check(len(outs) == len(CHATS), "fewer completions than chats", d)
    return run


def _json_schema(backend: str) -> Callable[[_Rehearsal], dict[str, Any]]:
    def run(r: _Rehearsal) -> dict[str, Any]:
        outs = r.engine(backend).chat(CHATS, json_schema=SCHEMA, temperature=0.0, max_tokens=32)
        cut = sum(o.finish_reason == "length" for o in outs)
        bad = [o for o in outs if not o.conformed and o.finish_reason != "length"]
        d = {"conformed": sum(bool(o.conformed) for o in outs) / len(outs), "cut_at_max_tokens": cut,
             "first": outs[0].text[:60]}
        # guided decoding must force the schema; only the token limit may cut an output short
        return _check(not bad, f"{len(bad)} output(s) finished without conforming: {bad[0].text[:80]!r}"
                      if bad else "", d)
    return run


def _choice(backend: str) -> Callable[[_Rehearsal], dict[str, Any]]:
    def run(r: _Rehearsal) -> dict[str, Any]:
        outs = r.engine(backend).chat(CHATS, choices=CHOICES, temperature=0.0, max_tokens=8)
        picked = [o.parsed for o in outs]
        d = {"picked": picked, "conformed": sum(bool(o.conformed) for o in outs) / len(outs)}
        return _check(all(o.conformed and o.parsed in CHOICES for o in outs),
                      f"an answer outside the choices: {[o.text for o in outs]!r}", d)
    return run


def _option_logprobs(backend: str) -> Callable[[_Rehearsal], dict[str, Any]]:
    def run(r: _Rehearsal) -> dict[str, Any]:
        eng = r.engine(backend)
        batch = eng.option_logprobs(MC, OPTIONS)
        alone = eng.option_logprobs(MC[:1], OPTIONS)
        inv = _max_diff(alone, batch[:1])
        d: dict[str, Any] = {"batch_vs_alone_max_abs_diff": inv, "dtype": eng.dtype,
                             "p_A_first": _r(math.exp(batch[0]["A"]))}
        strict = eng.dtype == "float32"
        problems = [] if _finite(batch + alone) else ["a log-probability is not finite"]
        if strict and inv > FLOAT32_TOL:
            problems.append(f"float32 readout depends on the batch: max |diff| {inv:.2e} > {FLOAT32_TOL}")
        if trait(backend, "exposes_model"):
            r.hf_logprobs = batch
        elif r.hf_logprobs is not None:
            agree = _max_diff(batch, r.hf_logprobs)
            d["vs_hf_max_abs_diff"] = agree
            if strict and agree > FLOAT32_TOL:
                problems.append(f"{backend} and hf disagree: max |diff| {agree:.2e} > {FLOAT32_TOL}")
        else:
            d["vs_hf"] = "no hf readouts in this rehearsal (run with the hf backend to compare)"
        return _check(not problems, "; ".join(problems), d)
    return run


# -- interventions (hf only: they need the transformers weights) ----------------------------------
def _knockout(r: _Rehearsal) -> dict[str, Any]:
    eng = r.engine("hf")
    p = knockout.plan(eng, "all")
    if not p["masked"]:
        raise Skip(f"{p['model_type']}: no layer can be masked (all {p['n_layers']} are recurrent)")
    start = KO_CHAT[0][0]["content"].index(PEER)
    target = (0, start, start + len(PEER))  # the same character range in both chats
    plain = knockout.option_logprobs(eng, KO_CHAT, OPTIONS, None)
    with warnings.catch_warnings(record=True) as caught:  # a hybrid names its unmaskable layers
        warnings.simplefilter("always")
        dec = knockout.option_logprobs(eng, KO_CHAT, OPTIONS, target, layers="all", queries="decision")
        aft = knockout.option_logprobs(eng, KO_CHAT, OPTIONS, target, layers="all", queries="after")
    margin = lambda lp: [d["A"] - d["B"] for d in lp]
    m0, md, ma = margin(plain), margin(dec), margin(aft)
    d = {"layers_masked": len(p["masked"]), "layers_unmaskable": len(p["unmaskable"]),
         "margin_plain": [_r(x) for x in m0],
         "margin_shift_decision": [_r(b - a, 6) for a, b in zip(m0, md)],
         "margin_shift_after": [_r(b - a, 6) for a, b in zip(m0, ma)],
         "warnings": [str(w.message)[:120] for w in caught][:2]}
    changed = _max_diff(plain, dec) > 0 and _max_diff(plain, aft) > 0
    return _check(_finite(dec + aft) and changed,
                  "knockout left the readout unchanged (the mask did not reach the attention)", d)


def _patch(r: _Rehearsal) -> dict[str, Any]:
    import numpy as np

    eng = r.engine("hf")
    n = knockout.plan(eng, "all")["n_layers"]
    conv = lambda w: [{"role": "user", "content": f"Agent 2 (a source with an {w} record) says the answer is B. "
                       "Which answer do you pick? A. Paris B. Rome"}, {"role": "assistant", "content": "Answer:"}]
    pair = None
    for xw, yw in (("excellent", "terrible"), ("good", "bad"), ("honest", "sloppy"), ("strong", "weak")):
        px, py = eng.render(conv(xw)), eng.render(conv(yw))
        if len(px.ids) == len(py.ids):  # interchange aligns the two runs position by position
            pair = (xw, yw, px, py)
            break
    if pair is None:
        raise Skip("no cue pair of equal token length in this tokenizer")
    xw, yw, px, py = pair
    diff = [i for i, (a, b) in enumerate(zip(px.ids, py.ids)) if a != b]
    layers = sorted({0, n // 2, n - 1})
    res = patching.interchange(eng, px.ids, py.ids, diff, layers)
    try:
        opt = patching.option_ids(eng, py, [" A", " B"])
    except patching.PatchError as err:  # the readout is one next-token distribution
        raise Skip(str(err)) from None
    m = lambda v: float(v[opt[0]] - v[opt[1]])
    mx, my = m(res["x"]), m(res["y"])
    mp = np.array([m(v) for v in res["patched"]])
    # after the last layer nothing mixes positions: patching only the cue leaves the readout as Y's
    last_vs_y = float(np.abs(res["patched"][-1] - res["y"]).max())
    d = {"cue": f"{xw}->{yw}", "cue_tokens": len(diff), "layers": layers, "margin_x": _r(mx), "margin_y": _r(my),
         "restored_share": [_r(v) for v in patching.restored_share(mp, mx, my)],
         "last_layer_vs_y_max_abs_diff": last_vs_y}
    ok = np.isfinite(res["patched"]).all() and res["patched"].shape[0] == len(layers)
    tol = 1e-4 if eng.dtype == "float32" else math.inf
    return _check(bool(ok) and last_vs_y <= tol, f"patched run inconsistent (last layer vs Y {last_vs_y:.2e})", d)


def _probe(r: _Rehearsal) -> dict[str, Any]:
    import numpy as np

    eng = r.engine("hf")
    n = knockout.plan(eng, "all")["n_layers"]
    layer = n // 2
    acts = probes.activations(eng, CHATS, [layer])
    d = {"layer": layer, "shape": list(acts.shape), "mean_norm": _r(float(np.linalg.norm(acts, axis=-1).mean()), 3)}
    return _check(acts.shape[:2] == (len(CHATS), 1) and bool(np.isfinite(acts).all()),
                  "activations of the wrong shape or not finite", d)


# -- simulate (on the engine already loaded) ----------------------------------------------------------
def _debate(backend: str) -> Callable[[_Rehearsal], dict[str, Any]]:
    def run(r: _Rehearsal) -> dict[str, Any]:
        eng = r.engine(backend)
        # short questions (misconceptions) and 16 new tokens: plumbing, not a finding
        run_, _summary = run_verb(("debate", "run"), "smoke", {
            "name": f"rehearse-{backend}", "rounds": 1, "agents": 3, "bench.limit": 2,
            "bench.subdomains": ["misconceptions"], "generation.max_tokens": 16,
            "analysis.n_boot": 50, "analysis.n_perm": 50,
            "model.profile": r.model, "model.backend": backend, "model.dtype": eng.dtype},
            r.tmp / f"debate-{backend}", engine=eng, make_plots=False)
        turns = run_.read_table("turns")
        proto = json.loads((run_.path / "protocol.json").read_text())
        d = {"questions": int(turns["qid"].nunique()), "turns": len(turns),
             "batches": [b["batch_size"] for b in proto["batches"]], "parsed": _r(float(turns["parsed"].mean()), 3),
             "model_s": _r(proto["model_s"], 2)}
        # lockstep: round 0 is one batch, round 1 one batch holding both conditions
        return _check(len(turns) > 0 and len(proto["batches"]) == 2, "the debate round did not run in lockstep", d)
    return run


def _council(r: _Rehearsal) -> dict[str, Any]:
    eng = r.engine("hf")
    seats = [{"profile": r.model, "persona": p} for p in ("analyst", "skeptic", "analyst")]
    run_, _summary = run_verb(("council", "run"), "tiny", {"name": "rehearse-council", "data": [{"dataset": "truthfulqa_claims", "n": 2, "balanced": True}],
                        "seats": seats, "rounds": 2, "conditions": [{"name": "clean"}],
                        "generation": {"temperature": 0.7, "max_chars": 20, "max_tokens": 48, "max_retries": 0},
                        "baselines.methods": [], "models.backend": "hf"},
        r.tmp / "council", engines={r.model: eng}, make_plots=False, aggregate=False)
    turns = run_.read_table("turns")
    gen = json.loads((run_.path / "generation.json").read_text())
    stats = next(v for k, v in gen.items() if not k.startswith("_"))
    traces = list((run_.path / "traces").glob("*.jsonl"))
    moves = sum(len(json.loads(line)["moves"]) for f in traces for line in f.read_text().splitlines() if line)
    d = {"councils": stats["n_councils"], "seat_turns": len(turns), "trace_moves": moves,
         "abstentions": stats["n_abstentions"], "batches": stats["n_batches"], "model_s": _r(stats["model_s"], 2)}
    # an abstention is a legal trace entry (random weights rarely make a legal move): plumbing passes
    return _check(bool(traces) and moves == 2 * 3 * 2, "the council traces lack moves", d)


def _belief(r: _Rehearsal) -> dict[str, Any]:
    import numpy as np

    eng = r.engine("hf")
    topic = load_topic("transit_priority")
    runs = [RunKey(seed=0, topic=topic), RunKey(seed=1, topic=topic)]
    turn = Turn(root_seed=0, round=0, turn=0, runs=runs, speakers=np.array([0, 1]), s=np.array([0.2, 0.8]))
    utt = LLMGenerator(eng, max_tokens=16).generate(turn)
    app = LLMAppraiser(eng, max_retries=0).appraise(turn, utt)
    rep, failed = LLMProbe(eng, max_retries=0).probe(ProbeRound(root_seed=0, round=0, runs=runs,
                                                                b=np.array([[0.3, 0.7], [0.5, 0.9]])))
    # an unparsed answer is the role working as designed (counted, never defaulted): not a failure
    return {"generated": sum(t is not None for t in utt.texts), "of": len(runs),
            "appraiser_parsed": int(np.isfinite(app.p_raw).sum()),
            "appraiser_errors": sorted({e for e in app.errors if e}),
            "probe_parsed": int(rep.size - failed), "probe_of": int(rep.size)}


def _sft(r: _Rehearsal) -> dict[str, Any]:
    import shutil

    if "hf" in r.engines:
        tok = r.engines["hf"].tokenizer
    else:  # the tokenizer alone answers this; no need to load the serving copy for it
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(str(r.folder))
    if not getattr(tok, "chat_template", None):
        raise Skip("the tokenizer has no chat template; the SFT set is conversational")
    # TRL loads its own trainable copy: the serving copy goes first (this is the last hf path)
    r.release("hf")
    over = {"name": "rehearse-sft", "base.profile": r.model, "base.backend": "hf", "data.limit": 2,
            "data.kinds": ["tweet"], "training.max_steps": 1, "training.per_device_batch_size": 2,
            "register_as": None, "compare": None}
    out = r.tmp / "sft"
    try:
        _run, s = run_verb(("sft", "train"), "smoke", over, out)
    finally:
        shutil.rmtree(out, ignore_errors=True)  # the merged model is a full copy of the weights
        _free()
    d = {"steps": s["global_steps"], "examples": s["n_examples"], "loss": _r(s["first_loss"]), "lora": s["lora"],
         "train_s": _r(s["train_runtime_s"], 2)}
    return _check(s["global_steps"] == 1 and s["first_loss"] is not None and math.isfinite(s["first_loss"]),
                  "the training step did not produce a finite loss", d)


# -- openai: a real `chorus serve` on loopback ------------------------------------------------------
def _openai_chat(r: _Rehearsal) -> dict[str, Any]:
    import importlib.util

    from chorus.serving import build_engine  # at call time: the seam tests patch
    if importlib.util.find_spec("vllm") is None:
        raise Skip("`chorus serve` needs vLLM, which is not installed")

    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    args = ["--dtype", r.dtype] if r.dtype else []
    if _cuda() is None:
        args.append("--extra=--enforce-eager")
    log_path = r.tmp / "serve.log"
    t0 = time.perf_counter()
    proc = start_server(str(r.model), port, log=log_path, args=args)
    try:
        wait_healthy(proc, url, api_key=os.environ.get("VLLM_API_KEY"), log=log_path)
        start_s = time.perf_counter() - t0
        eng = build_engine({"profile": str(r.model), "backend": "openai", "endpoints": [url]})
        try:
            t1 = time.perf_counter()
            outs = eng.chat(CHATS, temperature=0.0, max_tokens=16)
            dt = time.perf_counter() - t1
        finally:
            eng.close()
        toks = sum(o.completion_tokens for o in outs)
        d: dict[str, Any] = {"server_start_s": _r(start_s, 2), "chats": len(outs), "new_tokens": toks,
                             "tokens_per_s": _r(toks / dt, 2)}
        if r.hf_greedy is not None:
            d["same_text_as_hf"] = sum(a == o.text for a, o in zip(r.hf_greedy, outs)) / len(outs)
        return d
    finally:
        stop_server(proc)  # its own session: vLLM's workers end with it


# -- the registry ---------------------------------------------------------------------------------------
# Order matters: hf.sft releases the hf engine (TRL loads its own copy), so it is the last hf path;
# the vllm phase compares against the hf readouts kept by hf.option_logprobs.
PATHS: dict[str, tuple[str, Callable[[_Rehearsal], dict[str, Any]]]] = {
    "hf.load": ("hf", _load("hf")),
    "hf.chat": ("hf", _chat("hf")),
    "hf.json_schema": ("hf", _json_schema("hf")),
    "hf.choice": ("hf", _choice("hf")),
    "hf.option_logprobs": ("hf", _option_logprobs("hf")),
    "hf.knockout": ("hf", _knockout),
    "hf.patch": ("hf", _patch),
    "hf.probe": ("hf", _probe),
    "hf.debate": ("hf", _debate("hf")),
    "hf.council": ("hf", _council),
    "hf.belief": ("hf", _belief),
    "hf.sft": ("hf", _sft),
    "vllm.load": ("vllm", _load("vllm")),
    "vllm.chat": ("vllm", _chat("vllm")),
    "vllm.json_schema": ("vllm", _json_schema("vllm")),
    "vllm.choice": ("vllm", _choice("vllm")),
    "vllm.option_logprobs": ("vllm", _option_logprobs("vllm")),
    "vllm.debate": ("vllm", _debate("vllm")),
    "openai.chat": ("openai", _openai_chat),
}


def _select(backends: list[str], paths: list[str] | None) -> list[str]:
    bad = [b for b in backends if b not in BACKENDS]
    if bad:
        raise InputError(f"unknown backend(s) {bad}: choose from {', '.join(BACKENDS)}")
    short = {n.split(".", 1)[1] for n in PATHS}
    if paths is not None:
        unknown = [p for p in paths if p not in PATHS and p not in short]
        if unknown:
            raise InputError(f"unknown path(s) {unknown}: choose from {', '.join(PATHS)} "
                             f"(or a short name such as 'chat' for every backend)")
        off = [p for p in paths if p in PATHS and PATHS[p][0] not in backends]
        if off:
            raise InputError(f"path(s) {off} belong to a backend not in backends={list(backends)}")
    # a short name ('chat') selects that path on every backend asked for
    want = lambda n: paths is None or n in paths or n.split(".", 1)[1] in paths
    out = [n for b in BACKENDS if b in backends for n, (kind, _) in PATHS.items() if kind == b and want(n)]
    if not out:
        raise InputError(f"no path of {paths} runs on backends {list(backends)}")
    return out


def timed_step(fn: Callable[[], Any], rec: dict[str, Any] | None = None, *, digits: int = 3) -> dict[str, Any]:
    """Run one check step: status (pass / skipped / fail with where), seconds, peak RSS and, on
    CUDA, peak device memory, into ``rec``. One step's failure never stops the others. The one
    step recorder of the rehearsal and the bare GPU check."""
    rec = {} if rec is None else rec
    torch = _cuda()
    if torch is not None:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    with _PeakRSS() as mem:
        try:
            rec.update(status="pass", detail=fn())
        except Skip as why:
            rec.update(status="skipped", error=str(why)[:500])
        except CheckFailed as err:
            rec.update(status="fail", detail=err.detail, error=_err(err), where=_where(err))
        except Exception as err:  # one step's failure never stops the others
            rec.update(status="fail", error=_err(err), where=_where(err))
    rec["seconds"] = round(time.perf_counter() - t0, digits)
    if hasattr(os, "getloadavg"):  # times are only comparable on an otherwise idle machine
        rec["load_avg_1m"] = round(os.getloadavg()[0], 2)
    rec["peak_rss_gib"] = round(mem.peak / GIB, 3)
    rec["rss_start_gib"] = round(mem.start / GIB, 3)
    if mem.peak_anon:
        rec["peak_anon_gib"] = round(mem.peak_anon / GIB, 3)
    if torch is not None:
        rec["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated() / GIB, 3)
    return rec


def _run_path(name: str, r: _Rehearsal) -> dict[str, Any]:
    kind, fn = PATHS[name]
    return timed_step(lambda: fn(r), {"path": name, "backend": kind})


def rehearse(model: str | Path, *, backends: Sequence[str] = ("hf", "vllm"), paths: list[str] | None = None,
             dtype: str | None = None, out: Path | None = None,
             progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Take ``model`` (a profile name or a model folder) through every path of ``PATHS`` on
    ``backends``; ``paths`` narrows to some (full names like ``hf.chat`` or short ones like
    ``chat``). Returns the rehearsal dict and, with ``out``, writes ``out/rehearsal.json`` (after
    every path, so a killed rehearsal keeps what it measured). ``progress(total, k)``: the
    convention of ``chorus.core.progress``, one unit per path."""
    selected = _select(list(backends), paths)
    if dtype is not None and dtype not in ("float32", "bfloat16", "float16"):
        raise InputError(f"dtype must be float32, bfloat16 or float16, got {dtype!r}")
    prof = get_profile(str(model))
    folder = prof.require()  # a missing model is one clear error, before anything runs
    # a folder travels as its absolute path: `chorus serve` and the run configs resolve it elsewhere
    ref = str(model) if str(model) in all_profiles() else str(Path(folder).resolve())
    report: dict[str, Any] = {
        "model": str(model), "profile": prof.name, "folder": str(Path(folder).resolve()),
        "config": _config_summary(Path(folder)), "machine": _machine(), "versions": library_versions(),
        "backends": [b for b in BACKENDS if b in backends], "dtype": dtype, "results": []}
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
    if progress:
        progress(len(selected), 0)
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="chorus-rehearse-") as tmp:
        r = _Rehearsal(ref, Path(folder), dtype, Path(tmp))
        try:
            for i, name in enumerate(selected):
                report["results"].append(_run_path(name, r))
                nxt = selected[i + 1] if i + 1 < len(selected) else None
                kind = PATHS[name][0]
                if nxt is None or PATHS[nxt][0] != kind:
                    r.release(kind)  # never two backends' copies of the model at once
                if out is not None:
                    write_json(out / "rehearsal.json", report)
                if progress:
                    progress(len(selected), 1)
        finally:
            for b in list(r.engines):
                r.release(b)
    report["seconds"] = round(time.perf_counter() - t_start, 2)
    report["counts"] = {s: sum(x["status"] == s for x in report["results"]) for s in ("pass", "fail", "skipped")}
    if out is not None:
        write_json(out / "rehearsal.json", report)
    return report
