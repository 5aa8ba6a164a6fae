"""``chorus aggregate drift``: row drift over a stream of traces (math: ``chorus.aggregate.drift``)."""
from __future__ import annotations

from typing import Optional

from pydantic import Field

from chorus.aggregate.analyses.fields import CoalitionSeats, Protocol, PWrong, Seed, load_all, sources
from chorus.core.analyses import AnalysisConfig, Result, TraceFiles, analysis
from chorus.core.config import InputError


class DriftConfig(AnalysisConfig):
    traces: TraceFiles = Field(description="Labelled trace files, read in order as one stream.")
    window: int = Field(description="Tasks per window W; the first W are the reference.")
    shift: Optional[str] = Field(None, description="Plant a policy shift in the (clean) stream: "
                                                   "permute | classes | honest | sleeper.")
    shift_at: Optional[int] = Field(None, description="First task under the new policy (default: the middle of the stream).")
    k: CoalitionSeats = 2
    p_wrong: PWrong = 1.0
    lam: float = Field(1.0, description="Fixed Dirichlet concentration of the window rows.")
    factor: float = Field(2.0, description="Alarm when drift > factor x noise floor.")
    n_boot: int = Field(200, description="Bootstrap pairs behind the noise floor.")
    seed: Seed = 0
    protocol: Protocol = "strict"


def show(console, result: Result) -> None:
    res = result.summary
    at = res.get("first_alarm")
    line = (f"row drift, W={res['window']}: noise floor {res['noise_floor']:.4f}, alarm line {res['threshold']:.4f}, "
            f"max drift {res['max_drift']:.4f}; first alarm: "
            + ("none" if at is None else f"task {at} ({res['first_alarm_task']})")
            + ("" if "shift" not in res else f"; planted {res['shift']} at {res['shift_at']}, alarm delay "
               + ("none" if res["alarm_delay"] is None else f"{res['alarm_delay']:.3f} of a window")))
    console.print(line, markup=False, highlight=False, soft_wrap=True)


def brief(summary: dict) -> dict:
    return {k: summary.get(k) for k in ("noise_floor", "threshold", "max_drift", "first_alarm", "alarm_delay")
            if k in summary}


@analysis("aggregate", config=DriftConfig, show=show, brief=brief, plots=True)
def drift():
    """Row drift (BDA paper §8 / App. F): confusion rows refitted on a sliding window against the reference
    window; alarm at drift above factor x the bootstrap noise floor."""
    import numpy as np
    import pandas as pd

    from chorus.aggregate.counts import Pool
    from chorus.aggregate.drift import (RowDriftDetector, StreamCounts, alarm_delay, first_alarm, plot_drift,
                                        shifted_fraction)
    from chorus.aggregate.policy_shift import coalition, shifted_stream

    def compute(cfg: DriftConfig) -> Result:
        trs = load_all(cfg.traces)
        det = RowDriftDetector(cfg.window, lam=cfg.lam, factor=cfg.factor, n_boot=cfg.n_boot, seed=cfg.seed)
        adv = at = None
        if cfg.shift is not None:
            at = len(trs) // 2 if cfg.shift_at is None else cfg.shift_at
            adv = coalition(trs, k=cfg.k, p_wrong=cfg.p_wrong)
            trs = shifted_stream(trs, cfg.shift, at, adv, seed=cfg.seed, protocol=cfg.protocol)
        elif cfg.shift_at is not None:
            raise InputError(f"--shift-at={cfg.shift_at} plants nothing without --shift")
        pool = Pool.from_traces(trs, protocol=cfg.protocol)
        s = StreamCounts.from_pool(pool)
        d = det.fit(s).drift(s)
        t_al = first_alarm(d, det.threshold_)
        res = {"sources": sources(cfg.traces), "n_tasks": s.T, "window": cfg.window, "lam": cfg.lam,
               "factor": cfg.factor, "n_boot": cfg.n_boot, "seed": cfg.seed, "protocol": cfg.protocol,
               "distance": "max over seats of the mean over rows of the total-variation distance",
               "noise_floor": det.noise_floor_, "threshold": det.threshold_,
               "null_drift_sd": float(det.null_drifts_.std(ddof=1)), "reference_class_counts": det.class_counts_,
               "max_drift": float(np.nanmax(d)), "first_alarm": t_al,
               "first_alarm_task": None if t_al is None else pool.task_ids[t_al],
               "windows_monitored": int(np.isfinite(d).sum()), "windows_alarmed": int((d > det.threshold_).sum())}
        frame = pd.DataFrame({"t": np.arange(s.T), "task_id": list(pool.task_ids), "drift": d,
                              "alarm": d > det.threshold_})
        if cfg.shift is not None:
            delay = alarm_delay(t_al, at, cfg.window)
            res.update(shift=cfg.shift, shift_at=at, coalition=list(adv.seats), p_wrong=cfg.p_wrong, alarm_delay=delay,
                       alarm_before_shift=delay is not None and delay <= 0)
            frame["shifted_fraction"] = shifted_fraction(frame["t"].to_numpy(), at, cfg.window)

        def draw(path):
            plot_drift(d, det.threshold_, det.noise_floor_, path, window=cfg.window, shift_at=at, alarm=t_al)
        return Result(summary=res, tables={"drift": frame}, plots={"drift": draw})
    return compute
