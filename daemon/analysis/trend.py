"""Is the floor rising, significantly and for good? Mann-Kendall and Theil-Sen on block minima.

A leak is memory that is kept, so the test runs on the *floor*: the window is cut into blocks and each
block contributes its minimum (transients and cycles shorter than a block drop out; a sawtooth judged
with blocks at least one cycle long is judged by its troughs). On those minima:

- Mann-Kendall (Kendall's tau against time) says whether they rise monotonically more than chance
  would. Minima of adjacent blocks are autocorrelated and a flat floor is full of ties, so the test runs
  on few aggregated blocks (<= `trend_blocks`), uses the tie-corrected variance, and a strict alpha
  (`trend_z`, one-sided p < 0.001).
- Theil-Sen gives the slope (median of pairwise slopes: one odd step cannot swing it) and its confidence
  interval from the same Kendall statistic (Sen 1968): the lower bound is what the page trusts.
- A step is a rise above the floor's own noise: a flat floor read with a few MiB of noise (another context's
  small allocations, an exporter's rounding) has block minima that rise as often as they fall, and counting
  those rises as steps makes a handful of the allocator's steps look like a ramp of fine ones
  (`step_noise`). A floor that only steps or leaks seldom falls, so its every rise still counts.
- Monotone is not enough: a single step up (a new allocator high-water mark) is monotone too. Growth is
  *sustained* only when it is spread over the window (no single block-to-block rise carries more than
  `trend_step_share` of it), still present in the last third, and not decelerating (the second half's
  slope at least `trend_decel` of the first half's). Growth that fails these levelled off: cache growth
  or a plateau, never a leak.
- A climb that still counts as sustained may be slowing: `damped_rise` says how much further it goes if its
  pace keeps falling as it did (Gardner and McKenzie's damped trend on the window's two halves, at the
  Theil-Sen interval's cautious ends), so the page's forecast can stop a load short of the card.

Own vectorised versions rather than scipy.stats.kendalltau/theilslopes: on <= 48 points they give the
same numbers (tests/test_trend.py checks against scipy) at a fraction of the cost (bench/RESULTS.md).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: The index pairs (i < j) of the fit sizes used lately. Bounded: the host-RAM trend fits every size from 20 to
#: 120 points, and one cached pair list for each (8 n(n-1) bytes) held ~4 MiB of the daemon's RSS; a miss costs
#: one `triu_indices`, far less than the fit it serves.
PAIRS_CACHED = 16


@functools.lru_cache(maxsize=PAIRS_CACHED)
def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.triu_indices(n, 1)


def _var_s(y: np.ndarray) -> float:
    """Variance of Kendall's S under no trend, corrected for ties (groups of equal values)."""
    n = len(y)
    ys = np.sort(y)
    edges = np.flatnonzero(ys[1:] != ys[:-1])
    if len(edges) == n - 1:  # no ties
        return n * (n - 1) * (2 * n + 5) / 18.0
    counts = np.diff(np.concatenate(([-1], edges, [n - 1]))).astype(float)
    return (n * (n - 1) * (2 * n + 5) - float(np.dot(counts * (counts - 1), 2 * counts + 5))) / 18.0


def mann_kendall(y: np.ndarray, var: float | None = None) -> tuple[float, float]:
    """(S, z): Kendall's S of y against its order and its normal score, ties corrected, continuity corrected."""
    n = len(y)
    if n < 3:
        return 0.0, 0.0
    i, j = _pairs(n)
    s = float(np.sign(y[j] - y[i]).sum())
    if var is None:
        var = _var_s(y)
    if var <= 0:
        return s, 0.0
    z = (s - 1) / math.sqrt(var) if s > 0 else ((s + 1) / math.sqrt(var) if s < 0 else 0.0)
    return s, z


def theil_sen(x: np.ndarray, y: np.ndarray, z: float = 1.96, var: float | None = None) -> tuple[float, float, float]:
    """(slope, lo, hi): median pairwise slope and its confidence interval at normal score `z` (Sen 1968)."""
    n = len(x)
    if n < 2:
        return 0.0, 0.0, 0.0
    i, j = _pairs(n)
    dx = x[j] - x[i]
    ok = dx > 0
    sl = np.sort((y[j] - y[i])[ok] / dx[ok])
    m = len(sl)
    if m == 0:
        return 0.0, 0.0, 0.0
    slope = float(sl[(m - 1) // 2] + sl[m // 2]) / 2.0  # the median (sl is sorted)
    if var is None:
        var = _var_s(y)
    c = z * math.sqrt(max(var, 0.0))
    lo_i = int(max(0, math.floor((m - c) / 2.0) - 1))
    hi_i = int(min(m - 1, math.ceil((m + c) / 2.0)))
    return slope, float(sl[lo_i]), float(sl[hi_i])


@dataclass(frozen=True, slots=True)
class Trend:
    """The floor over one window: whether it rises for good, how fast, and why not if not."""

    window_s: float
    significant: bool = False  # Mann-Kendall
    sustained: bool = False  # spread, still going, not decelerating
    slope: float = 0.0  # bytes/s (Theil-Sen)
    slope_lo: float = 0.0  # lower confidence bound
    rise_bytes: float = 0.0  # last block minimum minus first
    since: float | None = None  # first block whose minimum rose
    z: float = 0.0
    why_not: str = ""  # "one step", "levelled off", "decelerating", "not significant", ...
    floor_bytes: float = 0.0  # the last block's minimum
    blocks: int = 0
    max_step_bytes: float = 0.0  # the largest block-to-block rise
    rising_blocks: int = 0  # blocks whose minimum rose over the previous one
    # a significant rise's block rises where they stepped, else 0 (`start_tail`); no part of equality or repr
    step_rises: np.ndarray | None = field(default=None, compare=False, repr=False)
    last_rise: float | None = None  # end of the last block whose minimum rose (when the rise was last seen)

    @property
    def leak(self) -> bool:
        return self.significant and self.sustained and self.slope_lo > 0


def block_minima(
    t: np.ndarray, mins: np.ndarray, blocks: int, min_block_s: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """(block end times, block minima) over `blocks` equal-time blocks (fewer if `min_block_s` says so)."""
    n = len(t)
    if n == 0:
        return t[:0], mins[:0]
    span = float(t[-1] - t[0])
    if min_block_s > 0 and span > 0:
        blocks = min(blocks, int(span // min_block_s))
    blocks = max(1, min(blocks, n))
    edges = np.searchsorted(t, t[0] + span * np.arange(blocks) / blocks, side="left")
    if blocks > 1:
        keep = np.empty(len(edges), dtype=bool)
        keep[0] = True
        np.not_equal(edges[1:], edges[:-1], out=keep[1:])
        edges = edges[keep]  # sorted already: dropping repeats is np.unique without its sort
    ends = np.empty(len(edges), dtype=np.intp)
    ends[:-1] = edges[1:] - 1
    ends[-1] = n - 1
    return t[ends], np.minimum.reduceat(mins, edges)


#: A normal difference's absolute value has its median at 0.6745 sd: the robust sd is 1.4826 times it (MAD).
MAD_TO_SD = 1.4826
#: Block minima of a flat, noisy floor fall between half of their neighbours; where fewer than a quarter of
#: them fall, the falls are releases (or nothing), not noise, and every rise is a step.
NOISE_FALL_SHARE = 0.25


def step_noise(up: np.ndarray, z: float, most: float) -> float:
    """How far block minima rise by noise alone: `z` robust sds of their falls (`MAD_TO_SD`), and never more
    than `most` (the card's quiet level) so that a leak's fine steps beside a release still count; 0 where the
    floor falls too seldom to be noise (`NOISE_FALL_SHARE`)."""
    falls = -up[up < 0]
    if most <= 0 or len(falls) < NOISE_FALL_SHARE * len(up):
        return 0.0
    return min(most, z * MAD_TO_SD * _median(falls))


def _median(a: np.ndarray) -> float:
    """`np.median` of a short 1-d array, to the bit, without its generic machinery (a third of a coarse
    step's trend test went there)."""
    s = np.sort(a)
    n = len(s)
    h = n // 2
    return float(s[h]) if n % 2 else float((s[h - 1] + s[h]) / 2.0)


def floor_trend(
    t: np.ndarray,
    mins: np.ndarray,
    window_s: float,
    cfg: Any,
    min_block_s: float = 0.0,
    min_rise: float = 0.0,
    noise_most: float = 0.0,
) -> Trend:
    """Judge the floor of (t, mins) (already cut to the window) with the statistics above. `noise_most`: the
    most a rise can be and still be the floor's noise rather than a step (`step_noise`; 0: every rise is one)."""
    bt, by = block_minima(t, mins, cfg.trend_blocks, min_block_s)
    n = len(by)
    if n < cfg.trend_min_blocks:
        return Trend(window_s, why_not="too few blocks", blocks=n, floor_bytes=float(by[-1]) if n else 0.0)
    rise = float(by[-1] - by[0])
    var = _var_s(by)
    _, z = mann_kendall(by, var)
    up = np.diff(by)
    stepped = up > step_noise(up, cfg.trend_z, noise_most)
    base: dict[str, Any] = dict(
        window_s=window_s,
        z=round(z, 2),
        rise_bytes=rise,
        floor_bytes=float(by[-1]),
        blocks=n,
        max_step_bytes=float(up.max()),
        rising_blocks=int(np.count_nonzero(stepped)),
    )
    if z < cfg.trend_z or rise <= 0:
        return Trend(**base, why_not="not significant")
    base["step_rises"] = np.where(stepped, up, 0.0)  # only a significant rise is ever judged as a cache's
    x = bt - bt[0]
    slope, lo, _ = theil_sen(x, by, cfg.trend_ci_z, var)
    if rise < min_rise:  # no leak, but its pace is the recent one for a longer window's forecast
        return Trend(**base, slope=slope, slope_lo=lo, why_not="too small")
    if not stepped.any():  # every rise within the noise: the rise is in the many small ones, as before
        stepped = up > 0
    first = int(np.argmax(stepped))
    since = float(bt[first])
    last = len(up) - int(np.argmax(stepped[::-1]))
    base.update(significant=True, slope=slope, slope_lo=lo, since=since, last_rise=float(bt[last]))
    if float(up.max()) > cfg.trend_step_share * rise:
        return Trend(**base, why_not="one step")
    third = n - max(2, n // 3)
    if float(by[-1] - by[third]) < cfg.trend_late_share * rise:
        return Trend(**base, why_not="levelled off")
    h = n // 2
    r1 = float(by[h] - by[0]) / max(x[h] - x[0], 1e-9)
    r2 = float(by[-1] - by[h]) / max(x[-1] - x[h], 1e-9)
    if r1 > 0 and r2 < cfg.trend_decel * r1:
        return Trend(**base, why_not="decelerating")
    return Trend(**base, sustained=True)


def start_tail(step_rises: np.ndarray | None, rise: float, share: float) -> int | None:
    """How many steps a rise holds past a start's tail: its rises of at least `share` of the largest, where
    every smaller one came before the first of them and those carry `share` of the whole `rise` (the tail of
    a start's graph captures, falling in size, then a cache's few steps); None where the rise is not so
    made (a fine rise after the first large one, or fine ones that carry most of it)."""
    if step_rises is None or rise <= 0:
        return None
    big = step_rises >= share * float(step_rises.max())
    first = int(np.argmax(big))
    if step_rises[first + 1 :][~big[first + 1 :]].any() or float(step_rises[big].sum()) < share * rise:
        return None
    return int(np.count_nonzero(big))


def damped_rise(x: np.ndarray, y: np.ndarray, z: float) -> float:
    """How much further a climb that is slowing down goes: the damped trend of Gardner and McKenzie (1985).

    The window's block minima (x seconds, y bytes) are cut in two halves, each with its Theil-Sen pace and
    interval at normal score `z`. Where the later half's upper bound is below the earlier half's lower bound,
    the climb is slowing at that confidence, and its pace is damped by phi = hi2 / lo1 per half window (the
    cautious ends: the most the later pace can be, the least the earlier one can). A pace damped by phi each
    half window H adds up to hi2 * H * phi / (1 - phi) more: a geometric series, the longest tail of the
    damped family (a load near its peak slows faster). inf where the climb is not slowing at that confidence:
    a leak keeps its pace, and memory that follows load slows as the load nears its peak."""
    n = len(y)
    h = n // 2
    if h < 3:  # fewer than three blocks a half give no interval
        return math.inf
    _, lo1, _ = theil_sen(x[:h] - x[0], y[:h], z)
    _, _, hi2 = theil_sen(x[h:] - x[h], y[h:], z)
    if lo1 <= 0 or hi2 >= lo1:
        return math.inf
    phi = max(0.0, hi2) / lo1
    half = float(x[-1] - x[0]) / 2.0
    return max(0.0, hi2) * half * phi / (1.0 - phi)


def steady_steps_p(times: Any, origin: float, now: float, window_s: float) -> float:
    """How likely, were these steps the records of a stationary load, that as many of them fall in the last
    `window_s` (1.0: nothing to say).

    The caching allocator reserves more only when a batch needs more than it ever has: its high-water steps
    are the records (new maxima) of the load's demand. Records of independent draws are independent
    Bernoulli(1/j) events of the draw index j (Renyi 1962), so their count over draws (a, b] is about
    Poisson(ln(b / a)), whatever the draw rate: records come ever more rarely, a handful in a day. A leak
    keeps stepping at its own rate. `times`: the steps since the load began at `origin`; the first one is
    what the window's lower edge cannot go below (before it, the draws' rate is unknown)."""
    ts = [float(x) - origin for x in times if float(x) > origin]
    if len(ts) < 2:
        return 1.0
    age = now - origin
    lo = max(age - window_s, ts[0])
    n = sum(1 for x in ts[1:] if x > lo)
    lam = math.log(age / lo) if lo > 0 else math.inf
    if n == 0 or not math.isfinite(lam):
        return 1.0
    # P(Poisson(lam) >= n) = 1 - sum_{i<n} e^-lam lam^i / i!
    term, cdf = math.exp(-lam), 0.0
    for i in range(n):
        cdf += term
        term *= lam / (i + 1)
    return max(0.0, 1.0 - cdf)


def kept_floor(mins: np.ndarray) -> np.ndarray:
    """For each bucket, the least memory held from it until now (suffix minimum): what was never given back."""
    return np.minimum.accumulate(mins[::-1])[::-1]
