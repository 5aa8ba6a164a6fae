"""scripts/preflight.py's checks with constructed inputs, and scripts/setup.sh's wiring of them
(run in a scratch copy with stand-in nvidia-smi, python, pip and chorus: nothing is installed)."""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GIB = 1 << 30


def _load_preflight():
    # scripts/ is not a package: import the file by path
    spec = importlib.util.spec_from_file_location("preflight", ROOT / "scripts" / "preflight.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


pf = _load_preflight()


def _good_facts(**over):
    facts = {
        "version_info": (3, 12, 3), "executable": "/usr/bin/python3", "root": "/home/u/chorus",
        "venv_exists": False, "has_venv": True, "has_ensurepip": True, "free_bytes": 100 * GIB,
        "include_dir": "/usr/include/python3.12", "has_python_h": True, "compiler": "/usr/bin/gcc",
        "smi_returncode": 0, "smi_output": "580.65.06\n",
    }
    facts.update(over)
    return facts


# ---- the engine choice ---------------------------------------------------------------------------

@pytest.mark.parametrize("env, smi, want", [
    (None, True, "gpu"), (None, False, "cpu"), ("", True, "gpu"), ("auto", False, "cpu"),
    ("cpu", True, "cpu"),  # CHORUS_ENGINE=cpu on a GPU machine takes the CPU branch
    ("gpu", False, "gpu"), (" GPU ", True, "gpu"), ("CPU", True, "cpu"),
])
def test_choose_engine(env, smi, want):
    assert pf.choose_engine(env, smi) == want


def test_choose_engine_refuses_unknown_value():
    with pytest.raises(ValueError, match="CHORUS_ENGINE='cuda' is not one of gpu, cpu"):
        pf.choose_engine("cuda", True)


# ---- Python and venv -----------------------------------------------------------------------------

def test_python_too_old_names_found_and_needed():
    msg = pf.python_problem((3, 10, 12), "/usr/bin/python3")
    assert "Python 3.10.12 (/usr/bin/python3) is too old" in msg and "needs Python 3.11 or newer" in msg
    assert "python3.11-venv" in msg and "PYTHON=python3.11 bash scripts/setup.sh" in msg


@pytest.mark.parametrize("vi", [(3, 11, 0), (3, 12, 3), (3, 13, 1)])
def test_python_new_enough(vi):
    assert pf.python_problem(vi) is None


def test_venv_missing_names_the_debian_package():
    msg = pf.venv_problem((3, 12, 3), True, False)
    assert "no ensurepip module" in msg and "sudo apt-get install python3.12-venv" in msg
    assert "no venv module" in pf.venv_problem((3, 11, 4), False, False)
    assert pf.venv_problem((3, 11, 4), True, True) is None


# ---- the NVIDIA driver ---------------------------------------------------------------------------

@pytest.mark.parametrize("text, want", [
    ("580.65.06", [(580, 65, 6)]),
    ("535.104.05\n535.104.05\n", [(535, 104, 5), (535, 104, 5)]),
    ("  590.44.01 \r\n", [(590, 44, 1)]),
    ("", []), ("N/A", []), ("[Not Supported]", []), ("garbage 580.65.06 x", []), (None, []),
])
def test_parse_driver_versions(text, want):
    assert pf.parse_driver_versions(text) == want


@pytest.mark.parametrize("out", ["580.65.06", "580.65.06\n580.65.06\n", "580.82.07", "590.44.01", "610.1"])
def test_driver_new_enough(out):
    assert pf.driver_problem(0, out) is None


@pytest.mark.parametrize("out, found", [
    ("550.54.15", "550.54.15"), ("535.104.05\n535.104.05", "535.104.05"),
    ("580.65.05", "580.65.05"), ("590.44.01\n550.54.15", "550.54.15"),  # the oldest of several decides
])
def test_driver_too_old_names_found_and_needed(out, found):
    msg = pf.driver_problem(0, out)
    assert msg.startswith("NVIDIA driver %s is too old" % found)
    assert "needs NVIDIA driver 580.65.06 or newer" in msg and "CHORUS_ENGINE=cpu" in msg and "upgrade" in msg


@pytest.mark.parametrize("out", ["", "garbage", "N/A\n"])
def test_driver_unreadable(out):
    msg = pf.driver_problem(0, out)
    assert msg.startswith("could not read the NVIDIA driver version") and "580.65.06" in msg


def test_nvidia_smi_failing_or_missing():
    msg = pf.driver_problem(9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")
    assert msg.startswith("nvidia-smi failed (exit 9: NVIDIA-SMI has failed") and "CHORUS_ENGINE=cpu" in msg
    assert pf.driver_problem(None, "").startswith("nvidia-smi not found")


# ---- compiler, headers, disk ---------------------------------------------------------------------

def test_compiler_and_headers():
    assert pf.compiler_problem("/usr/bin/gcc", (3, 12, 3)) is None
    msg = pf.compiler_problem(None, (3, 12, 3))
    assert "no C compiler found" in msg and "build-essential python3.12-dev" in msg and "Triton" in msg
    assert pf.headers_problem("/usr/include/python3.12", True, (3, 12, 3)) is None
    msg = pf.headers_problem("/usr/include/python3.12", False, (3, 12, 3))
    assert "Python.h not found in /usr/include/python3.12" in msg and "python3.12-dev" in msg


def test_disk_need_and_found():
    assert pf.disk_need_gib("gpu", False) == 15 and pf.disk_need_gib("cpu", False) == 7
    assert pf.disk_need_gib("gpu", True) == pf.RERUN_NEED_GIB
    msg = pf.disk_problem(3 * GIB, 15, "/home/u/chorus", "gpu")
    assert msg.startswith("only 3.0 GiB free on the filesystem of /home/u/chorus") and "GPU stack needs about 15 GiB" in msg
    assert pf.disk_problem(int(6.9 * GIB), 7, "/r", "cpu") is not None
    assert pf.disk_problem(20 * GIB, 15, "/r", "gpu") is None


# ---- all together --------------------------------------------------------------------------------

def test_collect_problems_good_machine():
    assert pf.collect_problems("gpu", _good_facts()) == []
    assert pf.collect_problems("cpu", _good_facts()) == []


def test_collect_problems_every_problem_one_line():
    bad = _good_facts(version_info=(3, 10, 12), has_ensurepip=False, free_bytes=GIB, has_python_h=False,
                      compiler=None, smi_output="550.54.15\n")
    gpu = pf.collect_problems("gpu", bad)
    assert len(gpu) == 6 and all("\n" not in p for p in gpu)
    # the CPU branch asks nothing of the driver, the compiler or the headers
    cpu = pf.collect_problems("cpu", bad)
    assert len(cpu) == 3 and not any("driver" in p or "Python.h" in p or "compiler" in p for p in cpu)
    # an existing .venv needs no venv module and only the rerun margin of disk
    assert pf.collect_problems("cpu", _good_facts(venv_exists=True, has_venv=False, free_bytes=3 * GIB)) == []


def test_main_prints_problems_and_fails(monkeypatch, capsys):
    monkeypatch.setattr(pf, "gather_facts", lambda engine, root: _good_facts(smi_output="550.54.15"))
    assert pf.main(["--engine", "gpu"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == ["[setup] " + pf.driver_problem(0, "550.54.15")]
    monkeypatch.setattr(pf, "gather_facts", lambda engine, root: _good_facts())
    assert pf.main(["--engine", "gpu"]) == 0


def test_gather_facts_here_has_every_key():
    facts = pf.gather_facts("cpu", str(ROOT))
    assert set(_good_facts()) == set(facts) and facts["free_bytes"] > 0
    pf.collect_problems("cpu", facts)  # runs on real facts without error


def test_preflight_parses_as_python_36():
    """It must run under an old system python3 to say that it is too old."""
    ast.parse((ROOT / "scripts" / "preflight.py").read_text(), feature_version=(3, 6))


# ---- scripts/setup.sh in a scratch copy ------------------------------------------------------------

def _scratch_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for rel in ("scripts/setup.sh", "scripts/preflight.py", "pyproject.toml", "setup.py",
                "scripts/constraints-cpu.txt", "scripts/constraints-gpu.txt"):
        shutil.copy2(ROOT / rel, repo / rel)
    return repo


def _bin(tmp_path: Path, name: str, body: str) -> None:
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    (d / name).write_text("#!/bin/sh\n" + body + "\n")
    (d / name).chmod(0o755)


def _setup(repo: Path, tmp_path: Path, **env):
    full = {k: v for k, v in os.environ.items() if k not in ("CHORUS_ENGINE", "PYTHON", "VIRTUAL_ENV")}
    full["PATH"] = "%s:%s" % (tmp_path / "bin", full.get("PATH", "/usr/bin:/bin"))
    full["PYTHON"] = sys.executable
    full.update(env)
    return subprocess.run(["bash", str(repo / "scripts" / "setup.sh")], cwd=tmp_path, env=full,
                          capture_output=True, text=True, timeout=60)


def _stamp(repo: Path, engine: str) -> str:
    digest = hashlib.sha256(b"".join((repo / rel).read_bytes() for rel in (
        "pyproject.toml", "setup.py", "scripts/setup.sh", f"scripts/constraints-{engine}.txt")))
    return ".setup-%s-%s" % (engine, digest.hexdigest()[:16])


def test_setup_stops_on_old_driver_before_making_venv(tmp_path):
    repo = _scratch_repo(tmp_path)
    _bin(tmp_path, "nvidia-smi", 'echo 550.54.15; echo 550.54.15')
    res = _setup(repo, tmp_path)
    assert res.returncode == 1
    assert "[setup] NVIDIA driver 550.54.15 is too old: the GPU stack" in res.stderr and "580.65.06" in res.stderr
    assert not (repo / ".venv").exists()


def test_setup_stops_when_nvidia_smi_fails(tmp_path):
    repo = _scratch_repo(tmp_path)
    _bin(tmp_path, "nvidia-smi", "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"; exit 9")
    res = _setup(repo, tmp_path)
    assert res.returncode == 1 and "[setup] nvidia-smi failed (exit 9: NVIDIA-SMI has failed" in res.stderr


def test_cpu_engine_on_a_gpu_machine(tmp_path):
    _bin(tmp_path, "nvidia-smi", "echo 550.54.15")
    env = dict(os.environ, PATH="%s:%s" % (tmp_path / "bin", os.environ["PATH"]))
    run = lambda **e: subprocess.run([sys.executable, str(ROOT / "scripts" / "preflight.py"), "--choose-engine"],
                                     env=dict(env, **e), capture_output=True, text=True).stdout.strip()
    assert run(CHORUS_ENGINE="cpu") == "cpu" and run(CHORUS_ENGINE="") == "gpu"


def test_setup_removes_a_half_made_venv(tmp_path):
    repo = _scratch_repo(tmp_path)
    # a python whose venv module dies after making .venv/bin/python, as a missing python3-venv does
    _bin(tmp_path, "halfpy", 'if [ "$1" = -m ] && [ "$2" = venv ]; then mkdir -p "$3/bin"; touch "$3/bin/python"; '
                             'chmod +x "$3/bin/python"; echo "ensurepip is not available" >&2; exit 1; fi\n'
                             'exec %s "$@"' % sys.executable)
    res = _setup(repo, tmp_path, PYTHON=str(tmp_path / "bin" / "halfpy"), CHORUS_ENGINE="cpu")
    assert res.returncode == 1 and "-m venv .venv' failed" in res.stderr and "nothing was installed" in res.stderr
    assert not (repo / ".venv").exists()


def test_setup_refuses_to_switch_engine_in_place(tmp_path):
    repo = _scratch_repo(tmp_path)
    (repo / ".venv").mkdir()
    (repo / ".venv" / _stamp(repo, "cpu")).touch()
    _bin(tmp_path, "nvidia-smi", "echo 580.65.06")
    res = _setup(repo, tmp_path)
    assert res.returncode == 1 and ".venv holds the CPU stack and this run asks for GPU: rm -rf .venv" in res.stderr


def test_setup_rerun_takes_the_stamp_path(tmp_path):
    repo = _scratch_repo(tmp_path)
    (repo / ".venv" / "bin").mkdir(parents=True)
    (repo / ".venv" / "bin" / "activate").write_text("")
    (repo / ".venv" / _stamp(repo, "cpu")).touch()
    log = tmp_path / "calls"
    _bin(tmp_path, "pip", "echo pip must not run on a rerun >&2; exit 1")
    _bin(tmp_path, "chorus", 'echo "$@" >> %s' % log)
    res = _setup(repo, tmp_path, CHORUS_ENGINE="cpu")
    assert res.returncode == 0, res.stderr
    assert log.read_text().splitlines() == ["models prepare smollm2-135m-instruct", "models prepare gemma3-270m"]
    assert "installing" not in res.stdout


def test_setup_unknown_option():
    res = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh"), "--bogus"], capture_output=True, text=True)
    assert res.returncode == 2 and "unknown option --bogus" in res.stderr
