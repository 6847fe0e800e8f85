"""Read one card's memory curve: shape, leak, time to OOM and spike risk. Arrays in, a verdict out.

The one idea everything here rests on is the *kept floor*: for each moment s, the least memory the card
held from s until now (a suffix minimum). Memory that was given back drops out of it, memory that is
still held stays in. A leak is a kept floor that keeps rising; a sawtooth's floor is its troughs; a
spike never touches it.

Warm-up: an inference server's start climbs (weights, a profile pass, the KV pool up to its
`gpu_memory_utilization` line, CUDA graphs) and then stays flat. Its climb is dominated by one
allocation (the KV pool) many times larger than any other step, and growth right after it stops within
a few steps. So growth is only counted after the last *dominant* allocation, and only a run of at least
`leak_min_steps` kept rises over `leak_min_span_s` that is still going on is a leak. Where the engine
says its budget, growth up to that line is never a leak either (see `Analyzer`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import AnalysisConfig

SHAPES = ("stable", "staircase", "ramp", "sawtooth", "spike", "idle")


@dataclass(frozen=True, slots=True)
class CurveVerdict:
    shape: str
    leak: bool = False
    leak_bytes_per_second: float = 0.0
    leak_confidence: float = 0.0
    leak_since: float | None = None  # time of the first counted rise
    eta_seconds: float | None = None
    steps: int = 0
    regime_start: float | None = None  # end of warm-up (last dominant allocation)
    floor_bytes: float = 0.0
    peak_bytes: float = 0.0  # recent peak (what OOMs first)
    spike_height_bytes: float = 0.0
    headroom_bytes: float = 0.0
    spike_risk: bool = False
    releases: int = 0


def _median(a) -> float:
    """np.median costs ~20 us of overhead; the arrays here are usually a handful of values."""
    n = len(a)
    if n > 64:
        return float(np.median(a))
    v = sorted(a.tolist() if isinstance(a, np.ndarray) else a)
    m = n // 2
    return float(v[m]) if n % 2 else (v[m - 1] + v[m]) / 2.0


def theil_sen(x: np.ndarray, y: np.ndarray) -> float:
    """Median of pairwise slopes: one odd step or outlier cannot swing the leak rate."""
    n = len(x)
    if n < 2:
        return 0.0
    i, j = np.triu_indices(n, 1)
    dx = x[j] - x[i]
    ok = dx > 0
    if not ok.any():
        return 0.0
    return _median((y[j] - y[i])[ok] / dx[ok])


def _fit_quality(x: np.ndarray, y: np.ndarray, slope: float) -> float:
    """R^2 of the robust line: how well a steady rate explains the rises (0..1)."""
    if len(x) < 3:
        return 0.5
    b = _median(y - slope * x)
    res = y - (slope * x + b)
    tot = np.sum((y - y.mean()) ** 2)
    if tot <= 0:
        return 0.0
    return float(max(0.0, 1.0 - np.sum(res**2) / tot))


def evaluate(
    t: np.ndarray,
    mins: np.ndarray,
    maxs: np.ndarray,
    lasts: np.ndarray,
    capacity: float,
    cfg: AnalysisConfig,
    budget_bytes: float | None = None,
    not_before: float | None = None,
) -> CurveVerdict:
    """Judge a card from its bucketed history. `capacity` is what the card can hold (total - reserved);
    `not_before`: the moment the engine first answered (its climb before that is warm-up)."""
    n = len(t)
    if n == 0:
        return CurveVerdict("idle")
    now = t[-1]
    used_now = float(lasts[-1])
    idle_bytes = cfg.idle_fraction * capacity
    if n < 3:
        return CurveVerdict("idle" if used_now < idle_bytes else "stable", floor_bytes=used_now, peak_bytes=used_now)

    kept = np.minimum.accumulate(mins[::-1])[::-1]  # the kept floor
    q = max(cfg.step_fraction * capacity, float(cfg.step_min_bytes))
    rel = cfg.release_fraction * capacity

    # Start of the current regime: after the card last sat idle (a server stopped and started again).
    idle_idx = np.nonzero(maxs < idle_bytes)[0]
    start = int(idle_idx[-1]) + 1 if len(idle_idx) else 0
    if start >= n - 1:
        return CurveVerdict("idle" if used_now < idle_bytes else "stable", floor_bytes=used_now, peak_bytes=used_now)

    # Releases: memory given back (a drop of `rel` or more within a bucket or across a boundary).
    prev_last = np.concatenate(([lasts[start]], lasts[start:-1]))
    drop = np.maximum(prev_last, maxs[start:]) - lasts[start:]
    rel_idx = np.nonzero(drop >= rel)[0] + start

    # Only growth held for `hold_s`, and for a curve that gives memory back, only up to the last release:
    # the cycle in progress has not had its chance to give back yet.
    cut = int(np.searchsorted(t, now - cfg.hold_s, side="right")) - 1
    if len(rel_idx):
        # A cycle is in progress while we are within 1.5 periods of the last release (the period is
        # the median gap between releases, or the rise before the first one).
        rt = t[rel_idx]
        period = _median(np.diff(rt)) if len(rt) >= 2 else float(rt[0] - t[start])
        if now - rt[-1] < 1.5 * period:
            cut = min(cut, int(rel_idx[-1]))
    cut = max(cut, start)

    # Kept rises: crossings of a `q` grid on the kept floor.
    seg = kept[start : cut + 1]
    lv = np.floor(seg / q)
    ev = np.nonzero(np.diff(lv) > 0)[0] + 1
    ev_sizes = seg[ev] - seg[ev - 1]
    ev_t = t[start + ev]
    regime_start_t = float(t[start])
    regime_idx = start
    if len(ev) >= 1:
        big = int(np.argmax(ev_sizes))
        others = np.concatenate((ev_sizes[:big], ev_sizes[big + 1 :]))
        med = _median(others) if len(others) else 0.0
        if ev_sizes[big] >= cfg.dominant_fraction * capacity and ev_sizes[big] >= cfg.dominant_factor * med:
            regime_idx = start + int(ev[big])
            regime_start_t = float(t[regime_idx])
            ev, ev_sizes, ev_t = ev[big + 1 :], ev_sizes[big + 1 :], ev_t[big + 1 :]
    # Growth before the engine answered is its start-up, never a leak.
    if not_before is not None and len(ev):
        keep = ev_t >= not_before
        ev, ev_sizes, ev_t = ev[keep], ev_sizes[keep], ev_t[keep]
    # Growth within the engine's own budget (KV pool, graphs) is never a leak.
    if budget_bytes is not None and len(ev):
        over = seg[ev] > budget_bytes
        ev, ev_sizes, ev_t = ev[over], ev_sizes[over], ev_t[over]

    rel_after = rel_idx[rel_idx > regime_idx]
    floor_now = float(kept[cut])  # the level held for `hold_s` (for a sawtooth: its last trough)
    leak = False
    rate = 0.0
    conf = 0.0
    since = None
    shape = "stable"
    peak_ref = used_now

    # 1. Sawtooth whose troughs rise: the kept floor at each release, plus the base before the first.
    if len(rel_after) >= cfg.trough_min_rises:
        tr_idx = np.concatenate(([min(regime_idx + 1, n - 1)], rel_after))
        troughs = kept[tr_idx]
        rises = np.diff(troughs)
        k = cfg.trough_min_rises
        if len(rises) >= k and np.all(rises[-k:] >= q):
            sel = tr_idx[-(k + 4) :]
            rate = theil_sen(t[sel], kept[sel])
            if rate > 0:
                leak = True
                since = float(t[tr_idx[-(k + 1)]])
                conf = min(1.0, (k + 1) / 5.0) * _fit_quality(t[sel], kept[sel], rate)
                shape = "sawtooth"
                peak_ref = float(maxs[rel_after[-2] :].max())

    # 2. Staircase / ramp: a run of kept rises that is still going on.
    if not leak and len(ev) >= cfg.leak_min_steps:
        span = float(ev_t[-1] - ev_t[0])
        gaps = np.diff(ev_t)
        stale_after = max(cfg.leak_stale_factor * _median(gaps), cfg.leak_stale_min_s)
        if span >= cfg.leak_min_span_s and (t[cut] - ev_t[-1]) <= stale_after:
            pts_t = ev_t[-32:]
            pts_y = seg[ev[-32:]]
            rate = theil_sen(pts_t, pts_y)
            if rate > 0:
                leak = True
                since = float(ev_t[0])
                conf = min(1.0, len(ev) / 8.0) * _fit_quality(pts_t, pts_y, rate)
                rising = np.diff(seg[ev[0] :]) > 0
                shape = "staircase" if np.count_nonzero(rising) < 0.6 * len(rising) else "ramp"

    # Transients: peaks above the floor that were given back (within the spike window, after warm-up).
    w0 = max(regime_idx, int(np.searchsorted(t, now - cfg.spike_window_s)))
    kept_next = np.concatenate((kept[w0 + 1 :], kept[-1:]))
    excess = maxs[w0:] - kept_next
    trans = excess >= cfg.transient_fraction * capacity
    height = 0.0
    duty = 0.0
    if trans.any() and len(rel_after):
        # Only excursions that ended (given back) are transients; the last bucket's may still be a step.
        height = float(excess[:-1].max()) if len(excess) > 1 else 0.0
        duty = np.count_nonzero(trans) / len(trans)
    if leak and shape in ("staircase", "ramp") and len(rel_after) >= 2 and duty >= cfg.spike_duty_max:
        shape = "sawtooth"  # the floor rises under a cycle: a leak hidden in a sawtooth
    if not leak:
        if len(rel_after) and height >= cfg.transient_fraction * capacity:
            shape = "spike" if (duty < cfg.spike_duty_max or len(rel_after) < 2) else "sawtooth"
        elif used_now < idle_bytes:
            shape = "idle"
    spike_risk = height > 0 and floor_now + height * (1.0 + cfg.spike_margin) >= capacity

    eta = None
    if leak and rate > 0:
        eta = max(0.0, (capacity - max(peak_ref, used_now)) / rate)
    return CurveVerdict(
        shape=shape,
        leak=leak,
        leak_bytes_per_second=rate if leak else 0.0,
        leak_confidence=round(conf, 3),
        leak_since=since,
        eta_seconds=eta,
        steps=int(len(ev)),
        regime_start=regime_start_t,
        floor_bytes=floor_now,
        peak_bytes=float(maxs[w0:].max()),
        spike_height_bytes=height,
        headroom_bytes=capacity - floor_now,
        spike_risk=bool(spike_risk),
        releases=int(len(rel_after)),
    )
