"""``chorus belief calibrate``: its typed config (the appraiser's model, the topic or a filled-in
labelset CSV, the seed, whether the fit is stored), validated and its labelled set read before any
model call, and the run (``calibration.calibrate`` into a run directory: the scores table, the
calibration plot, the fit as summary.json)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

import pandas as pd
from pydantic import Field, PrivateAttr

from chorus.core.config import Strict
from chorus.serving.spec import ModelSpec

from .calibration import calibrate, load_labels
from .config import load_command_config
from .labelset import read_labels_csv
from chorus.serving.roles import plan_roles
from chorus.core.runs import RunDir, run_dir_path
from . import plots

DEFAULT_TOPIC = "transit_priority"
COMMAND = "calibrate"


class CalibrateConfig(Strict):
    """Which model appraises which labelled set: the topic's shipped set, or a filled-in labelset CSV
    (``labels``; its topic, which ``topic`` must then match when given)."""
    model: ModelSpec = Field(default_factory=ModelSpec, description="the appraiser's model (a profile "
                             "name is short for {profile: NAME})")
    topic: Optional[str] = Field(None, description=f"a topic with a labelled set (null: {DEFAULT_TOPIC}, "
                                 "or the labels file's topic)")
    seed: int = Field(0, ge=0, description="the 80/20 split and the request seeds")
    store: bool = Field(True, description="store the fit in the user cache for later runs to reuse")
    labels: Optional[str] = Field(None, description="a filled-in labelset CSV (chorus belief labelset) "
                                  "instead of the topic's shipped set")
    skip_unlabelled: bool = Field(False, description="with labels: leave rows without a label out "
                                  "(counted) instead of refusing")
    _inputs: Any = PrivateAttr(None)

    def inputs(self) -> tuple[str, pd.DataFrame | None]:
        """The topic id and the labelled set (None: the topic's shipped set, checked to exist), read
        once; bad input is refused with one line naming it (no model call, no directory)."""
        if self._inputs is None:
            if self.labels is None:
                topic = self.topic or DEFAULT_TOPIC
                load_labels(topic)
                self._inputs = (topic, None)
            else:   # a person's labels of a model's own generations (belief-layer paper App. B)
                labelled = read_labels_csv(self.labels, self.topic, self.skip_unlabelled)
                self._inputs = (labelled.attrs["topic"], labelled)
        return self._inputs


def load_calibrate_config(config: str | Path, overrides: dict[str, Any] | None = None) -> CalibrateConfig:
    """``chorus belief calibrate [CONFIG]``: a path or a shipped name in ``configs/calibrate/``
    (``default``), validated, its labelled set read (``CalibrateConfig.inputs``)."""
    cfg = load_command_config(config, CalibrateConfig, COMMAND, overrides)
    cfg.inputs()
    return cfg


def plan_engines(cfg: CalibrateConfig):
    """``chorus belief calibrate --check``: the appraiser's device plan (no model call)."""
    cfg.inputs()
    return plan_roles({"appraiser": cfg.model})


def run_calibrate(cfg: CalibrateConfig, out: str | Path | None = None, *,
                  progress: Callable[[int, int], Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """Appraise the labelled set with the config's model, fit tau, store the fit (``cfg.store``),
    write the run directory (default ``runs/belief/calibrate-TOPIC-TIME``: the scores table, the
    calibration plot, the fit as summary.json). Returns ``(RunDir, fit)``."""

    topic, labelled = cfg.inputs()
    model = cfg.model.profile
    run = RunDir.create(run_dir_path(out, "belief", f"{COMMAND}-{topic}"), part="belief", seeds={"root": cfg.seed},
                        command=COMMAND, model=model, topic=topic, labels_file=cfg.labels)
    from chorus.serving import build_engine  # at call time: the seam tests patch
    engine = build_engine(cfg.model, store=run.store_path)
    n = len(labelled) if labelled is not None else len(load_labels(topic))
    try:
        if progress:
            progress(n, 0)
        fit, scores = calibrate(engine, model, topic, seed=cfg.seed, store=cfg.store, labels=labelled)
        if progress:
            progress(n, n)
    finally:
        engine.close()
    run.write_table("calibration_scores", scores)
    plots.calibration(scores, fit["tau"], run.plot_path("calibration"))
    run.write_summary(fit)
    run.update_provenance(engine=getattr(engine, "identity", None))
    run.finish()
    return run, fit
