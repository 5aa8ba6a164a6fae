"""One seed in the config spawns every generator; no global random state."""
from __future__ import annotations

import numpy as np


def rng(seed: int, *key: int) -> np.random.Generator:
    """A generator for one named stream under a root seed (``key`` spawns independent streams)."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=tuple(key)))


def call_seed(seed: int, *key: int) -> int:
    """A 31-bit per-request model seed derived from the root seed and a key (run, round, agent, ...)."""
    return int(np.random.SeedSequence(seed, spawn_key=tuple(key)).generate_state(1, np.uint32)[0] >> 1)
