"""Where and how `chorus serve` listens, decided in one place from the arguments vLLM itself will use.

`chorus serve` builds a `vllm serve` command line from its own options plus the user's `--extra`
pass-through; vLLM keeps the last of a repeated option, takes abbreviations (`--hos`), and reads a
`--config` YAML. A check of chorus's own `--host` alone therefore misses what the server really does
(`--extra=--host=0.0.0.0` used to open the server without a key while chorus printed 127.0.0.1). So the
whole final command line is parsed with vLLM's own parser and the decision is made on that namespace.

What counts as opening the server beyond this machine (each needs an API key):
- `--host` that is not a loopback address: an empty host, `0.0.0.0`, `::`, a LAN address or any host
  name other than `localhost` (a name may resolve anywhere, so it is not trusted);
- `--data-parallel-address` that is not loopback (multi-node data parallel: the engines' coordination
  ports listen there; vLLM's key guards HTTP only, so the key is the user's explicit consent, not a lock);
- `--allowed-origins` (cross-origin browser access: any web page open in a local browser could drive it).
`--uds` listens on a Unix socket only (no network) and needs nothing.

With a key, vLLM guards only the `/v1`, `/v2` and `/inference` paths (`/invocations` and `/metrics`
stay open, its own docs warn); `KeyGuard` closes every path but `/health`.
"""
from __future__ import annotations

import errno
import hashlib
import ipaddress
import os
import secrets
import socket
from argparse import Namespace
from dataclasses import dataclass

from chorus.core.config import InputError

KEYS_ENV = "CHORUS_SERVE_KEYS"   # the server's keys, newline-separated: in the environment, never in argv
GUARD = f"{__name__}.KeyGuard"  # vLLM imports it by this path
OPEN_PATHS = ("/health",)        # load balancers probe it without a key


class ListenError(InputError):
    """A server that would listen where the user has not allowed it, or cannot listen at all."""


def is_loopback(host: str | None) -> bool:
    if host == "localhost":
        return True
    if not host:   # vLLM binds "" (all interfaces) for an empty or missing host
        return False
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False   # another host name: it may resolve to any interface


def parse_serve_args(argv: list[str]) -> Namespace:
    """``vllm serve ARGV`` parsed exactly as vLLM will parse it (its parser, its --config, its abbreviations)."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="chorus serve")
    ServeSubcommand().subparser_init(parser.add_subparsers(dest="subparser"))
    return parser.parse_args(["serve", *argv])


@dataclass(frozen=True)
class Listening:
    url: str                   # what clients connect to
    keys: tuple[str, ...]      # the keys in force (vLLM's --api-key list, else $VLLM_API_KEY)

    @property
    def keyed(self) -> bool:
        return bool(self.keys)


def decide(ns: Namespace, env_key: str | None) -> Listening:
    """Where the server parsed as ``ns`` may listen, or a ListenError naming the option and its value
    (the rule only: ``check_free`` then tries the address)."""
    keys = tuple(k for k in (ns.api_key or [env_key]) if k)   # vLLM's rule: --api-key wins over the variable
    if ns.uds:
        return Listening(f"unix:{ns.uds}", keys)
    opens = []
    if not is_loopback(ns.host):
        opens.append(f"--host {ns.host or '(empty: every interface)'}")
    if ns.data_parallel_address and not is_loopback(ns.data_parallel_address):
        opens.append(f"--data-parallel-address {ns.data_parallel_address}")
    if ns.allowed_origins:
        opens.append(f"--allowed-origins {ns.allowed_origins}")
    if opens and not keys:
        raise ListenError(f"{', '.join(opens)} opens the server beyond this machine: give --api-key (or set "
                          "VLLM_API_KEY); clients send it with api_key= or VLLM_API_KEY")
    if not 0 < ns.port < 65536:
        raise ListenError(f"--port must be 1-65535, got {ns.port}")
    host = ns.host or "0.0.0.0"
    return Listening(f"http://{f'[{host}]' if ':' in host else host}:{ns.port}/v1", keys)


def check_free(host: str, port: int) -> None:
    """A port already taken is one line now, not vLLM's traceback after the model is read (its range
    is ``decide``'s; a port out of range that reaches here is bind's OverflowError, named below)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as vLLM binds it
        try:
            s.bind((host.strip("[]"), port))
        except (OSError, OverflowError) as err:
            raise ListenError(bind_problem(err, host, port)) from None


def bind_problem(err: OSError | OverflowError, host: str, port: int) -> str:
    if isinstance(err, OverflowError):
        return f"--port must be 1-65535, got {port}"
    if isinstance(err, socket.gaierror):
        return f"--host {host} does not resolve to an address of this machine"
    if err.errno == errno.EADDRINUSE:
        return f"port {port} on {host or 'every interface'} is already in use: stop what holds it or pick --port"
    if err.errno == errno.EADDRNOTAVAIL:
        return f"--host {host} is not an address of this machine"
    if err.errno == errno.EACCES:
        return f"port {port} needs privileges to bind: pick --port above 1023"
    return f"cannot listen on {host or 'every interface'}:{port}: {err.strerror or err}"


class KeyGuard:
    """ASGI middleware: with a key in force, every path but /health answers 401 without it (vLLM's own
    check guards only /v1, /v2 and /inference). vLLM adds it by import path (``--middleware``)."""

    def __init__(self, app) -> None:
        self.app = app
        self.hashes = [hashlib.sha256(k.encode()).digest() for k in os.environ.get(KEYS_ENV, "").split("\n") if k]

    def allowed(self, scope) -> bool:
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                scheme, _, token = value.decode("latin-1").partition(" ")
                digest = hashlib.sha256(token.encode()).digest()
                return scheme.lower() == "bearer" and any(secrets.compare_digest(digest, h) for h in self.hashes)
        return False

    async def __call__(self, scope, receive, send) -> None:
        path = scope.get("path", "").removeprefix(scope.get("root_path", ""))
        if (scope["type"] not in ("http", "websocket") or not self.hashes or scope.get("method") == "OPTIONS"
                or path in OPEN_PATHS or self.allowed(scope)):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b'{"error": "Unauthorized"}'})
