"""One seed in the config spawns every generator; no global random state."""
from __future__ import annotations

import hashlib
import zlib

import numpy as np


def rng(seed: int, *key: int) -> np.random.Generator:
    """A generator for one named stream under a root seed (``key`` spawns independent streams)."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=tuple(key)))


def call_seed(seed: int, *key: int) -> int:
    """A 31-bit per-request model seed derived from the root seed and a key (run, round, agent, ...)."""
    return int(np.random.SeedSequence(seed, spawn_key=tuple(key)).generate_state(1, np.uint32)[0] >> 1)


def stable_int(text: str, *, bits: int = 31, algo: str = "sha256") -> int:
    """A stable integer from a string (an id, a name), to key a stream or seed: the top ``bits``
    bits of the big-endian digest of its UTF-8 bytes (``algo``: ``"sha256"``, or ``"crc32"`` with
    ``bits`` <= 32; at ``bits=32`` that is ``zlib.crc32`` itself). The same in every process, unlike
    ``hash()``. Each caller's ``bits``/``algo`` are fixed: changing them changes every stream keyed
    by it (and every stored call seeded from it)."""
    data = text.encode("utf-8")
    if algo == "sha256":
        digest = hashlib.sha256(data).digest()
    elif algo == "crc32":
        digest = zlib.crc32(data).to_bytes(4, "big")
    else:
        raise ValueError(f"stable_int: algo must be 'sha256' or 'crc32', got {algo!r}")
    width = 8 * len(digest)
    if not 1 <= bits <= width:
        raise ValueError(f"stable_int: bits must lie in 1..{width} for {algo}, got {bits}")
    return int.from_bytes(digest, "big") >> (width - bits)
