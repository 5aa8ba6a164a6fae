"""Row drift (BDA paper §8 / App. F): a detector that announces a change in a seat's error structure
(a between-fit policy shift, a sleeper turning) from labelled tasks in stream order. Pure numpy.

* **Rows.** On a window of W consecutive labelled tasks the confusion rows are refitted with a fixed
  concentration ``lam`` (no inner CV, so every window of a stream is one vectorised pass): the Dirichlet
  posterior means of ``confusion.py``, P_i(g'|g) = (M_i[g, g'] + lam R_i[g, g']) / (sum_g' M_i[g, g'] + lam),
  R_i the one-coin row at the window's own r_i (``posterior.reliabilities``: the same fill for a silent seat).
* **Drift.** d(P, Q) = max over seats i of the mean over true answers g of the total-variation distance
  1/2 sum_g' |P_i(g'|g) - Q_i(g'|g)|; it lies in [0, 1]. The max over seats because a policy belongs to
  seats (one turned seat must suffice); the unweighted mean over g so that a shift confined to one class
  is not diluted by how rare that class is.
* **Reference and noise floor.** The reference fit is the stream's first W tasks (the calibration
  window). The noise floor is the mean drift between the fits on two independent bootstrap resamples
  (W tasks, with replacement) of that window: by the bootstrap principle, the drift that two W-task
  windows of an unchanged council show from sampling alone, which is the null of d(reference, window).
  The alarm fires at the first monitored window whose drift exceeds ``factor`` x floor (``factor`` = 2,
  the paper's "twice the noise floor"). Monitored windows lie wholly after the reference window (a
  window sharing tasks with the reference would understate its drift).
* **Needs.** Every class must hold at least ``min_per_class`` tasks of the reference window (a row
  fitted from fewer is mostly prior, and its bootstrap spread says nothing) and the stream at least 2W
  tasks (the reference window and one monitored window); otherwise ``ValueError`` naming ``window``.
* **Delay.** With the first post-shift task at position s, the window ending at t holds
  (t - s + 1) / W shifted tasks: the alarm delay is that fraction at the first alarm (above 1: the alarm
  needed more than a whole shifted window).

    >>> s = StreamCounts.from_pool(pool)                   # tasks in stream order, all labelled
    >>> det = RowDriftDetector(window=200).fit(s)          # reference_rows_, noise_floor_, threshold_
    >>> d = det.drift(s)                                   # (T,): NaN where no monitored window ends
    >>> t = first_alarm(d, det.threshold_); alarm_delay(t, shift_at, 200)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chorus.aggregate.counts import Pool
from chorus.aggregate.posterior import MU_CLIP
from chorus.core.seeding import rng as make_rng
from chorus.core.plots import save, subplots
from chorus.core.config import InputError

KEY_DRIFT_BOOT = 41  # the noise floor's bootstrap stream (seed, KEY_DRIFT_BOOT)
MIN_PER_CLASS = 10


@dataclass(frozen=True)
class StreamCounts:
    """What the rows need per task, in stream order: n (T, I, K) expanded observations (``Pool.n``),
    gold (T,), cons (T, I) = c_i(gold) and moves (T, I) = N_i (the reliability numerator and denominator)."""

    n: np.ndarray
    gold: np.ndarray
    cons: np.ndarray
    moves: np.ndarray
    labels: tuple[str, ...]

    @classmethod
    def from_pool(cls, pool: Pool) -> "StreamCounts":
        idx = np.arange(pool.T)
        pool.require_labels(idx, "row drift")
        labels = pool.require_shared_labels("row drift")
        g = pool.gold
        return cls(n=pool.n.astype(float), gold=g.copy(), cons=pool.c[idx, :, g].astype(float),
                   moves=pool.N.astype(float), labels=tuple(labels))

    @property
    def T(self) -> int:
        return len(self.gold)

    @property
    def K(self) -> int:
        return len(self.labels)

    def take(self, idx: np.ndarray) -> "StreamCounts":
        idx = np.asarray(idx)
        return StreamCounts(self.n[idx], self.gold[idx], self.cons[idx], self.moves[idx], self.labels)

    def contributions(self) -> np.ndarray:
        """(T, I, K, K): task t's addition to M_i[g, g'] (its n_i in row g = its gold)."""
        X = np.zeros(self.n.shape[:2] + (self.K, self.K))
        X[np.arange(self.T), :, self.gold, :] = self.n
        return X


def rows(M: np.ndarray, num: np.ndarray, den: np.ndarray, lam: float, mu_clip: float = MU_CLIP) -> np.ndarray:
    """Dirichlet posterior-mean rows, batched: M (..., I, K, K), num / den (..., I) the reliability counts."""
    K = M.shape[-1]
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
    silent = np.isnan(r)
    if silent.any():  # as posterior.reliabilities: the others' mean; all silent: 1/K
        some = (~silent).any(-1, keepdims=True)
        mean = np.where(some, np.nansum(np.where(silent, 0.0, r), -1, keepdims=True)
                        / np.maximum((~silent).sum(-1, keepdims=True), 1), 1.0 / K)
        r = np.where(silent, mean, r)
    r = np.clip(r, mu_clip, 1.0 - mu_clip)
    eye = np.eye(K)
    R = r[..., None, None] * eye + ((1.0 - r) / (K - 1))[..., None, None] * (1.0 - eye)
    return (M + lam * R) / (M.sum(-1, keepdims=True) + lam)


def row_drift(P: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """max_i mean_g TV(P_i(.|g), Q_i(.|g)) over the trailing (I, K, K) axes."""
    return 0.5 * np.abs(P - Q).sum(-1).mean(-1).max(-1)


def window_sums(x: np.ndarray, W: int) -> np.ndarray:
    """(T - W + 1, ...): sums of W consecutive entries along axis 0 (entry j ends at task j + W - 1)."""
    S = np.concatenate([np.zeros((1,) + x.shape[1:]), np.cumsum(x, axis=0)])
    return S[W:] - S[:-W]


def first_alarm(drift: np.ndarray, threshold: float) -> int | None:
    """The first stream position whose window drift exceeds ``threshold`` (None: never)."""
    hit = np.flatnonzero(np.nan_to_num(drift, nan=-np.inf) > threshold)
    return int(hit[0]) if len(hit) else None


def shifted_fraction(t: np.ndarray | int, shift_at: int, W: int) -> np.ndarray:
    """Fraction of the window ending at t that lies at or after ``shift_at``, in [0, 1]."""
    return np.clip((np.asarray(t) - shift_at + 1) / W, 0.0, 1.0)


def alarm_delay(t_alarm: int | None, shift_at: int, W: int) -> float | None:
    """(t_alarm - shift_at + 1) / W: the shifted share of the window at the alarm; may exceed 1, is <= 0
    for an alarm before the shift (a false alarm); None when no alarm fired."""
    return None if t_alarm is None else (t_alarm - shift_at + 1) / W


class RowDriftDetector:
    """Row drift against the reference window (see the module docstring).

    Fitted: ``reference_rows_`` (I, K, K), ``null_drifts_`` (n_boot,), ``noise_floor_`` (their mean),
    ``threshold_`` (factor x floor), ``class_counts_`` (tasks per class in the reference window).
    """

    def __init__(self, window: int, *, lam: float = 1.0, factor: float = 2.0, n_boot: int = 200,
                 mu_clip: float = MU_CLIP, min_per_class: int = MIN_PER_CLASS, seed: int = 0):
        if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 2:
            raise InputError(f"window must be an integer >= 2, got {window!r}")
        if not (np.isfinite(lam) and lam > 0):
            raise InputError(f"lam must be a positive number, got {lam!r}")
        if not (np.isfinite(factor) and factor > 0):
            raise InputError(f"factor must be a positive number, got {factor!r}")
        if n_boot < 2:
            raise InputError(f"n_boot must be >= 2, got {n_boot!r}")
        self.window, self.lam, self.factor, self.n_boot = int(window), float(lam), float(factor), int(n_boot)
        self.mu_clip, self.min_per_class, self.seed = mu_clip, int(min_per_class), seed

    def _check(self, s: StreamCounts) -> None:
        W = self.window
        if s.T < 2 * W:
            raise InputError(f"window={W} needs a stream of at least 2 x window = {2 * W} labelled tasks "
                             f"(reference + one monitored window); got {s.T}")
        cnt = np.bincount(s.gold[:W], minlength=s.K)
        k = int(np.argmin(cnt))
        if cnt[k] < self.min_per_class:
            raise InputError(f"window={W} is too short for the noise floor: the reference window holds "
                             f"{int(cnt[k])} tasks of class {s.labels[k]!r}, it needs >= {self.min_per_class} "
                             f"of each of the K={s.K} classes")

    def fit(self, s: StreamCounts) -> "RowDriftDetector":
        self._check(s)
        W = self.window
        X = s.contributions()[:W]
        self.reference_rows_ = rows(X.sum(0), s.cons[:W].sum(0), s.moves[:W].sum(0), self.lam, self.mu_clip)
        # two independent bootstrap resamples per draw, as multiplicities (2, B, W): no (B, W, ...) copies
        w = make_rng(self.seed, KEY_DRIFT_BOOT).multinomial(W, np.full(W, 1.0 / W), size=(2, self.n_boot)).astype(float)
        P = rows(np.einsum("abw,wikl->abikl", w, X), w @ s.cons[:W], w @ s.moves[:W], self.lam, self.mu_clip)
        self.null_drifts_ = row_drift(P[0], P[1])
        self.noise_floor_ = float(self.null_drifts_.mean())
        self.threshold_ = self.factor * self.noise_floor_
        self.class_counts_ = {c: int(v) for c, v in zip(s.labels, np.bincount(s.gold[:W], minlength=s.K))}
        return self

    def window_rows(self, s: StreamCounts) -> np.ndarray:
        """(T - W + 1, I, K, K): the rows of every window; entry j ends at task j + W - 1."""
        W = self.window
        return rows(window_sums(s.contributions(), W), window_sums(s.cons, W), window_sums(s.moves, W),
                    self.lam, self.mu_clip)

    def drift(self, s: StreamCounts) -> np.ndarray:
        """(T,): drift of the window ending at each task against the reference; NaN before 2W - 1
        (the first window with no reference task)."""
        W = self.window
        out = np.full(s.T, np.nan)
        if s.T >= 2 * W:
            out[2 * W - 1:] = row_drift(self.window_rows(s)[W:], self.reference_rows_)
        return out


def plot_drift(drift: np.ndarray, threshold: float, floor: float, path, *, window: int,
               shift_at: int | None = None, alarm: int | None = None) -> None:
    """Drift over the stream (x: the last task of each window) with the floor, the alarm line, the
    reference window, and the planted shift and first alarm when given."""
    fig, ax = subplots(figsize=(6.5, 3.6))
    t = np.arange(len(drift))
    ax.plot(t, drift, lw=1.0, color="C0", label="row drift vs reference")
    ax.axhline(floor, color="grey", ls=":", lw=1.0, label="noise floor")
    ax.axhline(threshold, color="C3", ls="--", lw=1.0, label="alarm line")
    ax.axvspan(0, window - 1, color="grey", alpha=0.12, label="reference window")
    if shift_at is not None:
        ax.axvline(shift_at, color="C2", lw=1.0, label="planted shift")
    if alarm is not None:
        ax.axvline(alarm, color="C3", lw=1.0, alpha=0.6, label="first alarm")
    ax.set_xlim(0, max(len(drift) - 1, 1))
    ax.set_xlabel("stream position (last task of the window)")
    ax.set_ylabel(f"drift (W = {window})")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    save(fig, path)
