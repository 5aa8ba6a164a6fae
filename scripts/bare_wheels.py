"""Wheels for the bare GPU machine: exactly the packages the bare GPU check imports that the
machine lacks, downloaded into the ignored ``.whl/`` to travel with the source tree.

    .venv/bin/python scripts/bare_wheels.py          # download into .whl/, print sizes, fail over 60 MiB
    .venv/bin/python scripts/bare_wheels.py --check  # only compare the pins with this venv's versions

The bare machine has its own Python 3.12 with torch, transformers, peft, accelerate, numpy, pandas,
pyyaml, psutil and the rest of ``BARE_HAS``, no registry, and at most 64 MiB travels per call: the
wheels below (cp312, manylinux x86-64, pinned to the versions the CPU tests ran) plus the embedded
model's tokenizer, which ``chorus.serving.dummy`` pads into every dummy folder's stand-in tokenizer (the
embedded model itself, 270 MB, is not prepared there). pip's ``--no-deps``: every missing
dependency is named here, once.
"""
from __future__ import annotations

import argparse
import importlib.metadata as md
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEST = ROOT / ".whl"
LIMIT_MIB = 60  # of the 64 MiB a call carries: the source tree needs the rest

# name -> version; the comment says which import on the bare path needs it
WHEELS: dict[str, str] = {
    "pydantic": "2.14.4",                  # chorus.core.config, chorus.core.runs (every run's config and provenance)
    "pydantic-core": "2.50.5",
    "annotated-types": "0.8.0",
    "typing-inspection": "0.4.5",
    "typing-extensions": "4.16.0",         # pydantic 2.14 needs >= 4.16; the machine's may be older
    "jsonschema": "4.26.0",                # chorus.serving.structured: json_schema requests are checked first
    "jsonschema-specifications": "2025.9.1",
    "referencing": "0.37.0",
    "rpds-py": "2026.9.1",
    "nnsight": "0.8.1",                    # chorus.interventions.patching / probes (residual patch, activations)
    "greenlet": "3.5.6",
    "websocket-client": "1.9.2",
    "zstandard": "0.25.0",
    "xgrammar": "0.2.8",                   # chorus.serving.backends.grammar: JSON output and choices on hf
    "apache-tvm-ffi": "0.1.15.post2",
}

# what the bare machine already has (its image's package list, device notes of 2026-11-17)
BARE_HAS = frozenset("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin
jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax
llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack
multidict multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro
nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft
nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py
nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec
patsy peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11
py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock
pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu
safetensors scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers
setuptools shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard
tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio
torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton typer
typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
""".split())

# never on the bare path: vLLM cannot travel (hundreds of MB, its own torch); TRL and datasets are
# not needed (the LoRA step is peft + a torch optimizer); pyarrow is there but 40 MB if it had to travel
NEVER = ("vllm", "trl", "datasets", "pyarrow")

PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64"]
STANDIN = "standin-tokenizer"  # .whl/standin-tokenizer/: the embedded model's tokenizer files
STANDIN_FILES = ("tokenizer.json", "tokenizer_config.json", "config.json")


def norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def pin_mismatches() -> list[str]:
    """Pins that differ from what this interpreter (the CPU venv) has installed."""
    out = []
    for name, want in WHEELS.items():
        try:
            have = md.version(name)
        except md.PackageNotFoundError:
            have = None
        if have != want:
            out.append(f"{name}: pinned {want}, this venv has {have}")
    return out


def wheel_name(path: Path) -> str:
    return norm(path.name.split("-")[0])


def download(dest: Path) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    plat = [a for p in PLATFORMS for a in ("--platform", p)]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
           "--implementation", "cp", *plat, "-d", str(dest), *[f"{n}=={v}" for n, v in WHEELS.items()]]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"bare_wheels: pip download failed: {(p.stderr or p.stdout).strip().splitlines()[-1:]}")
    want = {norm(n): v for n, v in WHEELS.items()}
    kept = []
    for f in sorted(dest.glob("*.whl")):
        if want.get(wheel_name(f)) == f.name.split("-")[1]:
            kept.append(f)
        else:  # an older pin or a stray wheel: two versions of one package stop the whole install
            f.unlink()
    got = {wheel_name(f) for f in kept}
    if got != set(want):
        sys.exit(f"bare_wheels: no cp312 manylinux wheel for {sorted(set(want) - got)}")
    return kept


def copy_standin(dest: Path) -> list[Path]:
    sys.path.insert(0, str(ROOT))
    from chorus.serving.profiles import DEFAULT_PROFILE, get_profile
    prof = get_profile(DEFAULT_PROFILE)
    ready, why = prof.status()
    if not ready:
        sys.exit(f"bare_wheels: the stand-in tokenizer comes from the embedded model: {why}")
    out = dest / STANDIN
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for n in STANDIN_FILES:
        if (prof.path / n).is_file():
            shutil.copy(prof.path / n, out / n)
            files.append(out / n)
    return files


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dest", type=Path, default=DEST)
    ap.add_argument("--check", action="store_true", help="only compare the pins with this interpreter's packages")
    a = ap.parse_args()
    bad = pin_mismatches()
    if a.check:
        print("\n".join(bad) or "pins match this venv")
        sys.exit(1 if bad else 0)
    if bad:  # the wheels must be the versions the CPU tests ran
        print("bare_wheels: warning: " + "; ".join(bad), file=sys.stderr)
    files = download(a.dest) + copy_standin(a.dest)
    total = 0
    for f in files:
        size = f.stat().st_size
        total += size
        print(f"{size / 2**20:8.2f} MiB  {f.relative_to(a.dest)}")
    print(f"{total / 2**20:8.2f} MiB  total in {a.dest} (limit {LIMIT_MIB} MiB)")
    if total > LIMIT_MIB * 2**20:
        sys.exit(f"bare_wheels: {total / 2**20:.1f} MiB is over the {LIMIT_MIB} MiB that may travel")


if __name__ == "__main__":
    main()
