"""The ``chorus demo`` stage of the role-play part: both setups on the SYNTHETIC fixture with the
embedded model, the metrics and the plots (no SFT in tiny). Resumable through the run's store."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from chorus.serving.profiles import DEFAULT_PROFILE
from chorus.simulate.roleplay.config import Analysis, ClassifierSpec, DataSpec, Generation, LabelledModel, RoleplayConfig
from chorus.core.config import InputError

SIZES = {
    # tiny: one group-split test group, 2 utterances per chat, short messages, DeGroot on 2 train groups
    # (CPU prefill of the ~400-token memory prompts dominates the time)
    "tiny": dict(limit=1, train_limit=2, max_tokens=16, max_utterances=2, n_boot=200),
    # full: both test groups (one per topic), DeGroot on all 6 training groups
    "full": dict(limit=None, train_limit=None, max_tokens=24, max_utterances=2, n_boot=1000),
}


def demo_config(size: str = "tiny", profile: str = DEFAULT_PROFILE, backend: str = "hf",
                dtype: str | None = None) -> RoleplayConfig:
    if size not in SIZES:
        raise InputError(f"size must be one of {sorted(SIZES)}, got {size!r}")
    s = SIZES[size]
    return RoleplayConfig(name=f"roleplay-demo-{size}", seed=0,
                          data=DataSpec(split="group", part="test", limit=s["limit"], train_limit=s["train_limit"]),
                          models=[LabelledModel(label="base", profile=profile, backend=backend, dtype=dtype)],
                          generation=Generation(temperature=0.7, max_tokens=s["max_tokens"],
                                                max_utterances=s["max_utterances"]),
                          # the tiny model's guided choice is nearly constant; its label expectation is not
                          classifier=ClassifierSpec(stance_readout="expected"),
                          analysis=Analysis(n_boot=s["n_boot"]))


def run_demo(out: Path, *, size: str = "tiny", progress=None, engine: Any = None, backend: str = "hf",
             dtype: str | None = None, profile: str = DEFAULT_PROFILE) -> dict:
    """Run the role-play demo into run directory ``out``; returns summary.json's content.
    ``backend`` serves the role-play generations and the classifier readouts ("auto": vLLM where
    installed); ``dtype`` None = the engine's default (chorus demo passes bfloat16); ``profile``
    the model of the role-play and the classifier (chorus demo passes its ``-m/--model``)."""
    from chorus.simulate.roleplay.experiment import run_roleplay  # at call time: the seam tests patch
    cfg = demo_config(size, profile=profile, backend=backend, dtype=dtype)
    engines = {"base": engine} if engine is not None else None
    _, summary = run_roleplay(cfg, Path(out), progress=progress, engines=engines)
    return summary
