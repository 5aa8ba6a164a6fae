"""Demo hook for ``chorus demo``: a small live council on the embedded models (CPU), clean and
with one persistent stealth seat, aggregated by BDA vs plurality and compared with the LLM
baselines. Resumable: every call goes through the run's store."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from chorus.simulate.council.config import load
from chorus.simulate.council.experiment import run_council_experiment
from chorus.core.config import InputError

SIZES = {"tiny": "demo_tiny", "full": "demo_full"}


def run_demo(out: Path, *, size: str = "tiny", progress: Callable[[int, int], None] | None = None,
             backend: str = "auto", dtype: str | None = None, profile: str | None = None) -> dict[str, Any]:
    """tiny: 6 TruthfulQA claims, 3 seats (personas of the demo's model), 3 rounds; full: 10 claims.
    Returns the summary. ``profile``: the demo's model for every seat and the synthesizer (default:
    the config's, the embedded model).
    ``backend`` ("auto": vLLM where installed) serves every seat; batched JSON generation is where
    vLLM beats transformers most on a CPU."""

    if size not in SIZES:
        raise InputError(f"size must be one of {', '.join(SIZES)}, got {size!r}")
    over: dict[str, Any] = {"models.backend": backend}
    if dtype is not None:  # else the config's
        over["models.dtype"] = dtype
    cfg = load(SIZES[size], overrides=over)
    if profile is not None:  # one model in three personas, as the config has it
        cfg = load(SIZES[size], overrides={**over, "seats": [{**s.model_dump(exclude_unset=True), "profile": profile} for s in cfg.seats],
                                           "baselines.synthesizer": profile})
    _, summary = run_council_experiment(cfg, Path(out), progress=progress)
    return summary
