"""Read one card's memory curve: shape, leak, time to OOM, spike risk, at the scale where each shows.

`CardJudge.judge` runs at each evaluation with the card's multi-resolution history (history.py) and its
lifecycle (lifecycle.py) and returns a `CurveVerdict`:

- Serving: the floor's trend is tested at several windows (15 s to 7 days, `trend_windows_s`) with
  Mann-Kendall and Theil-Sen (trend.py). A short window is re-tested about every second, a long one about
  60 times per window (`trend_cadence`), so the per-sample work stays O(1) amortised while a 7-day window
  is still judged. A card that cycles (three or more releases at regular gaps, `cycle_regularity`) is
  judged with blocks at least one cycle long, i.e. by its troughs; releases at irregular gaps (transients,
  load given back now and then) are no cycle, and the troughs are judged only where the gaps' regularity
  holds at the trend's own confidence (`_regular`: a dozen gaps of transients can look regular). The
  shortest window with a sustained significant rise gives the rate; the slope's lower confidence bound gives
  the conservative ETA.
- Growth that is significant but not sustained (one step, levelled off, decelerating) is not a leak: it is
  named `cache_growth` (the caching allocator's high-water marks: a handful of steps no larger than the
  tallest transient since the server started, coming ever more rarely as the records of a load's demand do,
  `trend.steady_steps_p`; a graph capture's fine tail before the cache's first large step is no step of
  it, `cache_step_share`) or `plateau`. A sustained rise of many fine steps that would
  fill the card soon compared with its own span outpaces any cache: a leak (`_outpaces`).
- The page is a forecast: the card's upper envelope (the reading, or the floor plus the tallest excursion
  given back lately, of any height: the next forward pass's) reaches capacity within the horizon at the recent
  pace (`_recent_slope`: load slows near its peak, a cache levels off, a leak keeps going), and at the slope's
  lower bound within twice it; a climb that slows at the trend's confidence goes only as far as its damped
  trend (`trend.damped_rise`, Gardner and McKenzie), and pages only if that reaches the card (not at the top
  of the card, where the cache hides the last of a leak); and the climb is likely to go on that far
  (`start_eta_ratio`, Gott's delta-t, as in a start: what is left, in time or in bytes, within 1.5 times what
  the climb has done since the floor last stood at its lowest, after the card's last release). Where the card
  has climbed and given back before, the climbs are exchangeable: a climb younger than the longest of them
  pages if its pace fills the card before that age, or if the odds that it outlasts them all, and then goes on
  to its ETA, are still the rule's (`_outlasts_past_climbs`). A level the card already reached while serving
  and then gave back is a cycle coming round (`seasonal`): no page below it. A server without a declared pool
  follows its load: short of such a forecast, only growth that outlasts a day is a leak.
- Starting: growth is never a leak. A start stops where starts stop: at the server's declared budget (a
  known engine's command line), or a few percent above the level after its dominant jump (the KV pool, then
  graphs). Past that line the forecast decides, and the climb must also be likely to go on
  (`likely_to_go_on`, Gott's delta-t: a climb that lasted T goes on for 1.5 T more with odds of 40%). Where a
  budget is declared the climb judged is the one past its line, in time or in bytes, as a serving card's is,
  and it must be a sustained rise on its own trend (the cache's first steps can come right after the graphs,
  before the start holds steady: one or two past the line ride on the start's climb); where the line
  is only the pool's jump plus graphs, the whole climb since the pool. An
  engine that is configured and not answering yet is still loading: no urgency before its budget line.
- Spike risk: the tallest transient given back in the last `spike_window_s` against the free memory above
  the floor, with a relative and an absolute margin. Transients of a start (the profile run) and memory
  given back by an exiting process are not counted. On a card that cycles, a transient rises from the cycle's
  trough, or is the cycle's own peak (`_spike_top`); a risk seen holds until the next transient would miss the
  card by a whole margin (hysteresis, as the page's).
- The floor now is the least reading of the last `floor_window_s`, and of at least `floor_min_readings`
  readings: read every few seconds, a window of 10 s may hold only readings taken mid-transient. The floor a
  transient is stacked on (the page's envelope, the spike risk) spans at least `envelope_min_readings`: a
  floor read mid-transient there counts that transient twice.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import AnalysisConfig
from .history import History
from .lifecycle import Lifecycle
from .trend import (
    Trend,
    block_minima,
    damped_rise,
    floor_trend,
    kept_floor,
    mann_kendall,
    start_tail,
    steady_steps_p,
    theil_sen,
)

SHAPES = ("stable", "staircase", "ramp", "sawtooth", "spike", "idle")


@dataclass(frozen=True, slots=True)
class CurveVerdict:
    shape: str
    leak: bool = False
    leak_bytes_per_second: float = 0.0
    leak_confidence: float = 0.0  # 1 - p of the trend test, 0 when no leak
    leak_since: float | None = None  # first block whose floor rose
    last_rise: float | None = None  # the last block whose floor rose (a rise that has stalled is no warning yet)
    eta_seconds: float | None = None  # at the trend's rate
    steps: int = 0  # rising blocks of the floor in the tested window
    regime_start: float | None = None  # when the card's start had done its allocating (`Lifecycle.loaded_at`)
    floor_bytes: float = 0.0
    peak_bytes: float = 0.0  # recent peak (what OOMs first)
    spike_height_bytes: float = 0.0
    excursion_bytes: float = 0.0  # the tallest excursion given back lately, of any height: the envelope's
    headroom_bytes: float = 0.0  # capacity minus floor
    spike_risk: bool = False
    releases: int = 0
    phase: str = "idle"
    eta_lo_seconds: float | None = None  # at the slope's lower confidence bound (the later one)
    urgent: bool = False  # the OOM projection is significant and inside the horizon
    growth: str = ""  # "cache_growth" | "plateau" | "" (growth that is not a leak)
    growth_bytes: float = 0.0
    no_headroom: bool = False
    window_s: float | None = None  # the window where the trend shows
    why: str = ""  # the evidence in words
    confirm_s: float | None = None  # how long GPUOOMImminent waits (None: a share of the ETA, see Analyzer)
    seasonal: bool = False  # the rise is to a level this card already reached while serving and gave back


def moved_floor(hist: History, last: CurveVerdict) -> float:
    """How far the newest reading is from the floor of the last full verdict (a slow ramp adds up)."""
    cur = hist.levels[0]._cur
    return abs(cur[3] - last.floor_bytes) if cur is not None else 0.0


def likely_to_go_on(eta: float, left: float, age: float, done: float, cfg: AnalysisConfig) -> bool:
    """Gott's delta-t (`start_eta_ratio`), the one rule for every climb that could page (a start's, a cycle's,
    a leak's): a climb that has lasted `age` seconds and risen `done` bytes goes on for 1.5 times as much
    again with odds of 40%. Likely to fill the card if what is left, in time (`eta`) or in bytes (`left`), is
    within that. Bytes as well as time, because the trend's rate lags a fast leak's."""
    r = cfg.start_eta_ratio
    return eta <= r * age or left <= r * done


def _climbs_from(lc: Lifecycle) -> float | None:
    """Where this server's own climb began: after its KV pool's jump where it made one (what came before, the
    weights and the profile run, is below the pool), else its start (None before any)."""
    return lc.regime_t if lc.regime_t is not None else lc.start_t


def calm_shape(cyclic: bool, tallest: float) -> str:
    """The shape of a card that is not leaking: cycling, with transients given back, or flat."""
    return "sawtooth" if cyclic else ("spike" if tallest > 0 else "stable")


def _cycle_extremes(
    t: np.ndarray, mn: np.ndarray, mx: np.ndarray, edges: np.ndarray
) -> tuple[list[float], list[float], list[float]]:
    """Per cycle (the buckets between consecutive `edges`, non-decreasing indices; empty ones skipped): the
    time and value of its least memory (the first bucket holding it) and its highest reading. Vectorised: a
    day of a short cycle is dozens of them at every evaluation."""
    a0, end = int(edges[0]), int(edges[-1])
    starts = edges[:-1][edges[1:] > edges[:-1]] - a0
    if len(starts) == 0:
        return [], [], []
    seg = mn[a0:end]
    lows = np.minimum.reduceat(seg, starts)
    highs = np.maximum.reduceat(mx[a0:end], starts)
    at_low = np.flatnonzero(seg == np.repeat(lows, np.diff(np.append(starts, end - a0))))
    k = at_low[np.searchsorted(at_low, starts)] + a0  # the first bucket at each cycle's least
    return t[k].tolist(), mn[k].tolist(), highs.tolist()


def _least_since(mn: np.ndarray, j: int, readings: int) -> float:
    """The least reading from index `j` on, and over at least the last `readings` readings (a floor read every
    few seconds must not rest on a handful taken mid-transient)."""
    return float(mn[min(j, max(0, len(mn) - readings)) :].min())


def _idle(used: float, cap: float) -> CurveVerdict:
    return CurveVerdict("idle", floor_bytes=used, peak_bytes=used, headroom_bytes=max(0.0, cap - used))


class CardJudge:
    """Per-card analysis state between evaluations (cached trends per window, recent excursions)."""

    __slots__ = (
        "cfg",
        "trends",
        "due",
        "excursions",
        "releases",
        "shape_prev",
        "last",
        "moved_t",
        "start_due",
        "start_v",
        "start_past",
        "full_t",
        "alpha",
        "period_of",
        "spiking",
    )

    def __init__(self, cfg: AnalysisConfig):
        self.cfg = cfg
        self.alpha = 0.5 * math.erfc(cfg.trend_z / math.sqrt(2))  # the trend's own one-sided alpha, as a p
        self.trends: dict[float, Trend] = {}
        self.due: dict[float, float] = {}
        self.excursions: deque[tuple[float, float]] = deque()  # (t, height) given back while serving, falling
        self.releases: deque[float] = deque()  # replaced by the card's lifecycle release times in judge()
        self.shape_prev = "idle"
        self.last: CurveVerdict | None = None  # the last verdict, reused while nothing moves
        self.moved_t = -math.inf  # the last evaluation whose memory moved more than the quiet range
        self.start_due = -math.inf  # the start's trend is re-tested this often (its span / trend_cadence)
        self.start_v: Trend | None = None  # the start's last trend test
        self.start_past: Trend | None = None  # ... and of its climb past a declared budget's line
        self.full_t = -math.inf  # the last full judgement
        self.period_of: tuple[tuple[int, float, float], float] = ((0, 0.0, 0.0), 0.0)  # (releases' key, period)
        self.spiking = False  # the last full verdict saw spike risk (it holds to a wider margin, see `_judge`)

    def reset(self) -> None:
        self.trends.clear()
        self.due.clear()
        self.excursions.clear()
        self.start_due, self.start_v, self.start_past = -math.inf, None, None
        self.spiking = False

    # ---- pieces --------------------------------------------------------------------------------
    def _transients(
        self, now: float, t: np.ndarray, mn: np.ndarray, mx: np.ndarray, lc: Lifecycle, cap: float
    ) -> tuple[float, float]:
        """Record what the recent scan gave back; returns the window's tallest transient and tallest excursion.

        A transient is an excursion at least `transient_fraction` of the card: what the shape, the spike risk
        and the cache-growth test call a spike. The page's envelope counts every excursion, however small: an
        OOM comes when the floor plus the next forward pass's activations exceed the card, and on a 24 GB card
        passes of 50-300 MB sit below the transient's 470 MB, which a leak of 0.35 MB/s takes 20 minutes to
        cross. One record serves both: the window's tallest transient is its tallest excursion where that is
        one (no excursion in the window is taller)."""
        cfg = self.cfg
        thr = max(cfg.transient_fraction * cap, float(cfg.transient_min_bytes))
        exiting = lc.phase == "exiting" or (lc.exit_t is not None and now - lc.exit_t < cfg.exit_grace_s)
        if len(t) >= cfg.transient_min_readings and not exiting and now - self.moved_t <= cfg.transient_scan_s:
            i = int(np.searchsorted(t, now - cfg.transient_scan_s))
            if lc.start_t is not None:
                i = max(i, int(np.searchsorted(t, lc.start_t)))
            if len(t) - i >= cfg.transient_min_readings:
                # Above the floor on both sides: the least held after it (what was never given back) and the
                # least held before it in the scan. Kept memory released for good (a worker that outlived its
                # crashed server drops its KV pool) falls below the floor before it: a release, no transient.
                kept = kept_floor(mn[i:])
                before = np.minimum.accumulate(mn[i:])
                h = float(np.max(mx[i:-1] - np.maximum(kept[1:], before[:-1])))
                if h >= thr and h > lc.tallest:
                    lc.tallest = h
                if lc.phase == "serving" and h > 0:
                    # Kept falling in height: one no taller than a newer one can never be the window's tallest
                    # again, so the tallest is the first (O(1) per evaluation, whatever the window).
                    while self.excursions and self.excursions[-1][1] <= h:
                        self.excursions.pop()
                    self.excursions.append((now, h))
        while self.excursions and now - self.excursions[0][0] > cfg.spike_window_s:
            self.excursions.popleft()
        tallest = self.excursions[0][1] if self.excursions else 0.0
        return (tallest if tallest >= thr else 0.0), tallest

    def _spike_top(
        self, now: float, t: np.ndarray, mn: np.ndarray, under: float, peak: float, tallest: float, cyclic: bool
    ) -> float:
        """Where the next transient as tall as the tallest lately would reach: on the floor it stacks on (`under`,
        the floor over at least `envelope_min_readings`). On a card that cycles longer than the floor's window
        (an empty_cache sawtooth), the floor of the last 10 s is the cycle's own climb near a peak and its
        trough near a release, so that sum rises and falls with the cycle's phase: there the transient rises
        from the cycle's trough (the least reading of its last period, as far back as the finest history
        reaches), and the cycle's own peak (the highest reading of `spike_window_s`, a transient on the climb)
        is where it has reached."""
        period = self._period() if cyclic else 0.0
        if period <= self.cfg.floor_window_s:
            return under + tallest
        trough = float(mn[int(np.searchsorted(t, now - period)) :].min())
        return max(trough + tallest, peak)

    def _period(self) -> float:
        """The card's cycle: the median gap between its releases when they repeat (three or more, their
        gaps' coefficient of variation within `cycle_regularity`); 0 for releases at irregular gaps
        (transients, load given back now and then), which are no cycle to size the trend's blocks by."""
        r = self.releases
        if len(r) < 3:  # one gap is no evidence of a cycle
            return 0.0
        # Releases are only appended (in time order) and dropped from the left, so their count and two ends
        # name their contents: the period is worked out once per new release, not at every evaluation.
        key = (len(r), r[0], r[-1])
        if key == self.period_of[0]:
            return self.period_of[1]
        d = np.diff(np.fromiter(r, float))
        period = 0.0 if float(np.std(d)) > self.cfg.cycle_regularity * float(np.mean(d)) else float(np.median(d))
        self.period_of = (key, period)
        return period

    def _min_rise(self, w: float, cap: float, floor: float) -> float:
        """The least growth a window may call a leak: a settle step on short windows (the tail of graph capture
        and warm-up is smaller), `leak_min_bytes` on windows of an hour and more (slow leaks are small); on a
        nearly full card, a fifth of what is left is enough (the last gigabyte is what OOMs)."""
        cfg = self.cfg
        need = (
            float(cfg.leak_min_bytes)
            if w >= 3600
            else max(float(cfg.leak_min_bytes), cfg.settle_fraction * cap, float(cfg.settle_min_bytes))
        )
        return min(need, max(float(cfg.trough_min_rise_bytes), cfg.headroom_share * (cap - floor)))

    def _trends(
        self, now: float, hist: History, since: float, cap: float, floor: float, lc: Lifecycle
    ) -> tuple[Trend | None, Trend | None]:
        """Re-test the windows that are due. (leak, levelled): the shortest window whose rise is a leak that
        cache growth cannot explain, else the strongest rise that is not one (cache growth or a plateau)."""
        cfg = self.cfg
        period = self._period()
        best = None
        cache = None
        for w in cfg.trend_windows_s:
            if now - since < min(w, cfg.trend_min_span_s) or (w > cfg.trend_windows_s[0] and now - since < 0.5 * w):
                self.trends.pop(w, None)
                continue
            if now >= self.due.get(w, -math.inf):
                self.due[w] = now + max(cfg.trend_retest_min_s, w / cfg.trend_cadence)
                ring = hist.pick(w)
                tt, mm, _, _ = ring.since(max(since, now - w))
                if len(tt) < cfg.trend_min_blocks:  # sampled too slowly for this window
                    self.trends[w] = Trend(w, why_not="too few blocks", blocks=len(tt))
                    self.due[w] = now + w / 2
                    continue
                self.trends[w] = floor_trend(
                    tt,
                    mm,
                    w,
                    cfg,
                    min_block_s=period,
                    min_rise=self._min_rise(w, cap, floor),
                    noise_most=cfg.quiet_fraction * cap,
                )
            tr = self.trends.get(w)
            if tr is None:
                continue
            if tr.leak and (not self._cache_like(tr, lc, cap, now) or self._outpaces(tr, now, cap)):
                return tr, None
            if tr.leak:
                cache = cache or tr
            elif tr.significant and (best is None or tr.rise_bytes > best.rise_bytes):
                best = tr
        return None, cache or best

    # ---- the verdict ---------------------------------------------------------------------------
    def judge(
        self,
        now: float,
        hist: History,
        lc: Lifecycle,
        cap: float,
        total: float,
        engine_loading: bool,
        moved: float = math.inf,
    ) -> CurveVerdict:
        """`moved`: the range of used bytes since the reading the last evaluation saw. A serving card whose memory
        did not move, whose last verdict was calm and whose trend windows are not due keeps that verdict (O(1))."""
        cfg = self.cfg
        if moved >= cfg.quiet_fraction * cap:
            self.moved_t = now
        last = self.last
        if (
            last is not None
            and lc.phase == "serving"
            and last.phase == "serving"
            and not last.leak
            and not last.spike_risk
            and now - self.moved_t > cfg.transient_scan_s
            and now - self.full_t < cfg.quiet_recheck_s
            and moved_floor(hist, last) < cfg.quiet_fraction * cap
        ):
            return last
        v = self._judge(now, hist, lc, cap, total, engine_loading)
        self.last, self.full_t = v, now
        return v

    def _judge(
        self, now: float, hist: History, lc: Lifecycle, cap: float, total: float, engine_loading: bool
    ) -> CurveVerdict:
        cfg = self.cfg
        t, mn, mx, la = hist.arrays()
        if len(t) == 0:
            return _idle(0.0, cap)
        used = float(la[-1])
        self.releases = lc.release_times
        if lc.phase == "idle":
            self.reset()
            return _idle(used, cap)
        j = int(np.searchsorted(t, now - cfg.floor_window_s))
        floor = _least_since(mn, j, cfg.floor_min_readings)
        under = _least_since(mn, j, cfg.envelope_min_readings)  # the floor a transient stacks on
        peak = float(mx[int(np.searchsorted(t, now - cfg.spike_window_s)) :].max())
        tallest, excursion = self._transients(now, t, mn, mx, lc, cap)
        headroom = max(0.0, cap - floor)
        base: dict[str, Any] = dict(
            floor_bytes=floor,
            peak_bytes=peak,
            headroom_bytes=headroom,
            phase=lc.phase,
            regime_start=lc.loaded_at,
            releases=len(self.releases),
        )
        cyclic = len(self.releases) >= 2 and now - self.releases[-1] < 3 * max(self._period(), cfg.floor_window_s)
        spike_risk = False
        if lc.phase == "serving" and tallest > 0:
            margin = max(cfg.spike_margin * tallest, float(cfg.spike_margin_bytes))
            # Hysteresis (as the page's): a risk seen holds until the next transient would miss the card by a
            # whole margin. A busy hour's floor wanders by about that much, and the tallest of the window changes
            # as transients come and go: at one margin the warning would resolve and fire again all afternoon.
            spike_risk = (
                self._spike_top(now, t, mn, under, peak, tallest, cyclic) + margin * (2.0 if self.spiking else 1.0)
                >= cap
            )
        self.spiking = spike_risk
        base.update(spike_height_bytes=tallest, excursion_bytes=excursion, spike_risk=spike_risk)

        if lc.phase == "starting":
            return self._start_verdict(
                now, hist, t, mn, lc, cap, total, used, floor, under + tallest, engine_loading, base
            )
        if lc.phase != "serving":
            return CurveVerdict(self.shape_prev if self.shape_prev != "idle" else "stable", **base)

        since = lc.serving_since if lc.serving_since is not None else t[0]
        if cyclic:
            tv = self._troughs(now, hist, lc, cap, base)
            if tv is not None:
                return tv
        tr, levelled = self._trends(now, hist, since, cap, floor, lc)
        shape = calm_shape(cyclic, tallest)
        if (
            tr is not None
            and floor >= cfg.no_headroom_fraction * cap
            and tr.rising_blocks < cfg.top_ramp_share * (tr.blocks - 1)
            and not self._outpaces(tr, now, cap)
            and not self._steps_at_own_rate(tr, lc, now)
        ):
            # At the top, discrete steps are the allocator and late compiles filling the last of the card
            # (it frees its cache before CUDA fails); a leak there shows as a ramp, or as steps that keep a
            # pace of their own where the allocator's, the records of its load, come ever more rarely.
            levelled, tr = tr, None
        if tr is not None:
            steps = tr.rising_blocks
            ref = max(used, under + excursion)
            recent = min(tr.slope, self._recent_slope(tr, hist, now))
            eta = max(0.0, (cap - ref) / recent) if recent > 0 else math.inf
            eta_lo = max(0.0, (cap - ref) / tr.slope_lo)
            # A rise no taller than an excursion this server already made and gave back (its profile run, a
            # big batch), with room left for that excursion, and young, may be a cycle's ramp: it pages once not.
            within = (
                tr.rise_bytes <= lc.tallest
                and (tr.floor_bytes - tr.rise_bytes) + lc.tallest < cap
                and tr.since is not None
                and now - tr.since <= cfg.excursion_max_s
            )
            # (since the start's own climb began: a level its start held and gave back, a cycle from the
            # server's birth, was reached and survived as surely as one while serving)
            origin = _climbs_from(lc)
            seasonal = self._seen_before(hist, lc, since if origin is None else min(since, origin), now, ref, cap)
            # One rule for every climb (a start's, a cycle's, a leak's): urgent only if it is also likely to
            # go on until the card is full (`likely_to_go_on`), measured since the floor last stood at its
            # lowest; the first rising half of a load cycle pages no more than a start does.
            last_release = max((r for r in lc.release_times if r >= since), default=since)
            base_t, base_b = self._climb_base(t, mn, last_release, cap)
            likely = likely_to_go_on(eta, cap - ref, now - base_t, ref - base_b, cfg)
            urgent = self._urgent(eta, eta_lo) and not within and not seasonal and likely
            if urgent:
                urgent = self._outlasts_past_climbs(hist, lc, since, now, now - base_t, ref, recent, cap)
            if urgent and floor < cfg.no_headroom_fraction * cap:
                # The forecast with its damping: a climb slowing down may stop short of the card. Not at the top,
                # where a curve that stops is the allocator serving a leak from its cache (NVML cannot see it).
                urgent = ref + self._damped_rise(tr, hist, now, period=self._period()) >= cap
            if not urgent and self._follows_load(lc, since, tr.window_s, now):
                return self._levelled(tr, "plateau", floor, cap, shape, base)
            lshape = "sawtooth" if cyclic else ("ramp" if steps >= cfg.ramp_share * (tr.blocks - 1) else "staircase")
            self.shape_prev = lshape
            why = (
                f"the floor rose {tr.rise_bytes / 2**30:.2f} GiB over {tr.window_s / 60:.0f} min "
                f"(Mann-Kendall z={tr.z:.1f}, Theil-Sen {tr.slope / 2**20:.2f} MiB/s, lower bound "
                f"{tr.slope_lo / 2**20:.2f} MiB/s), spread over the window and not slowing"
            )
            return CurveVerdict(
                lshape,
                leak=True,
                leak_bytes_per_second=tr.slope,
                leak_confidence=round(min(1.0, 1 - 0.5 * math.erfc(tr.z / math.sqrt(2))), 4),
                leak_since=tr.since,
                last_rise=tr.last_rise,
                eta_seconds=eta,
                eta_lo_seconds=eta_lo,
                steps=steps,
                urgent=urgent,
                window_s=tr.window_s,
                why=why,
                seasonal=seasonal,
                **base,
            )
        if levelled is not None and levelled.rise_bytes > 0:
            kind = "cache_growth" if (levelled.leak or self._cache_like(levelled, lc, cap, now)) else "plateau"
            return self._levelled(levelled, kind, floor, cap, shape, base)
        self.shape_prev = shape
        nh = floor >= cfg.no_headroom_fraction * cap
        return CurveVerdict(shape, no_headroom=nh, **base)

    def _troughs(
        self, now: float, hist: History, lc: Lifecycle, cap: float, base: dict[str, Any]
    ) -> CurveVerdict | None:
        """A cycling card judged by its troughs: the least memory after each release, cycle over cycle.

        Two rises in a row, each at least a settle step, whose projection (from the troughs' Theil-Sen rate and
        the last cycle's peak) fills the card inside the horizon and soon compared with how long they have
        risen, page; a warning without urgency needs Mann-Kendall significance over the troughs (>= 8)."""
        cfg = self.cfg
        # Troughs while serving: a start's climb and its profile spike are no cycle. The history level read is
        # the finest that still holds every release remembered (an hourly cycle's troughs span many hours).
        t_start = lc.serving_since if lc.serving_since is not None else -math.inf
        kept = [r for r in lc.release_times if r >= t_start]
        if len(kept) < 2:
            return None
        t, mn, mx, _ = hist.pick(now - min(kept[0], now - 1.0) + cfg.floor_window_s).arrays()
        if len(t) == 0:
            return None
        rel = [r for r in kept if r >= t[0]]
        if len(rel) < 2:
            return None
        if t_start < t[0]:  # the history no longer reaches back to the start: the part before the first
            t_start = rel.pop(0)  # release in view is no whole cycle, so its least memory is no trough
        gaps = np.diff(rel)
        if len(gaps) >= 2 and not self._regular(gaps):
            # Releases at irregular gaps are transients and load given back, not one repeating cycle: the
            # least memory between them is no trough of a cycle (seasonality is judged by the trend windows).
            return None
        tt, ty, peaks = _cycle_extremes(t, mn, mx, np.searchsorted(t, [t_start] + rel + [now + 1.0]))
        if ty:
            # The least of the cycle in progress is its trough only once the card has turned up from it by more
            # than its noise: memory still being given back (a load falling for minutes) is no trough yet.
            k = int(np.searchsorted(t, tt[-1], side="right"))
            if k >= len(t) or float(mx[k:].max()) - ty[-1] <= cfg.quiet_fraction * cap:
                tt, ty, peaks = tt[:-1], ty[:-1], peaks[:-1]
        if len(ty) < 3:
            return None
        y = np.asarray(ty)
        x = np.asarray(tt) - tt[0]
        rises = np.diff(y)
        step = float(cfg.trough_min_rise_bytes)

        slope, lo, _ = theil_sen(x[-8:], y[-8:], cfg.trend_ci_z)
        _, z = mann_kendall(y)
        urgent_shape = len(rises) >= 2 and bool(np.all(rises[-2:] >= step))
        significant = len(y) >= cfg.trend_min_blocks and z >= cfg.trend_z and lo > 0
        if slope <= 0 or not (urgent_shape or significant):
            return None
        ref = max(peaks[-2:])
        eta = max(0.0, (cap - ref) / slope)
        eta_lo = max(0.0, (cap - ref) / lo) if lo > 0 else math.inf
        lasted = tt[-1] - tt[-3] if len(tt) >= 3 else 0.0
        urgent = urgent_shape and self._urgent(eta, eta) and eta <= cfg.start_eta_ratio * max(lasted, 1e-9)
        if not (urgent or significant):
            return None
        self.shape_prev = "sawtooth"
        why = (
            f"the troughs rose {len(rises)} cycle(s) running, {(y[-1] - y[0]) / 2**30:.1f} GiB in all, "
            f"{slope / 2**20:.0f} MiB/s; the last peak {ref / cap:.0%} of the card"
        )
        return CurveVerdict(
            "sawtooth",
            leak=True,
            leak_bytes_per_second=slope,
            leak_since=tt[1],
            leak_confidence=round(min(1.0, 1 - 0.5 * math.erfc(z / math.sqrt(2))), 4),
            eta_seconds=eta,
            eta_lo_seconds=eta_lo if math.isfinite(eta_lo) else None,
            urgent=urgent or (significant and self._urgent(eta, eta_lo)),
            steps=int(np.count_nonzero(rises > 0)),
            why=why,
            **base,
        )

    def _regular(self, gaps: np.ndarray) -> bool:
        """Do releases at these gaps repeat as one cycle? Their coefficient of variation within
        `cycle_regularity`, at the trend's own confidence: the sample CV of n gaps is uncertain by about
        CV / sqrt(2 (n - 1)), so its upper bound (`trend_z` of those) must be within it. Releases after
        transients come as a renewal process whose CV, sampled from fifteen gaps, read 0.47 on one card; a cycle's
        repeat within a few percent (a sawtooth's empty_cache: ~0.1). (`_period`, which only sizes the trend's
        blocks, takes the point estimate: a block of the wrong size costs resolution, not a false warning.)"""
        cv = float(np.std(gaps)) / max(float(np.mean(gaps)), 1e-9)
        return cv * (1.0 + self.cfg.trend_z / math.sqrt(2.0 * (len(gaps) - 1))) <= self.cfg.cycle_regularity

    def _follows_load(self, lc: Lifecycle, since: float, span: float, now: float) -> bool:
        """Is a rise of `span` seconds, short of an urgent projection, a pool-less server following its load?

        A server without a preallocated pool follows its load (a daily cycle rises for hours, and the least
        memory between its transients rises with it): only growth that outlasts a whole day
        (`load_follow_window_s`) is a leak. A server is known to be one by its command line, or by its curve:
        it gave memory back while serving."""
        window = self.cfg.load_follow_window_s
        return (
            lc.budget is None
            and (lc.kind is not None or any(r >= since for r in lc.release_times))
            and (span < window or now - since < window)
        )

    def _seen_before(self, hist: History, lc: Lifecycle, since: float, now: float, ref: float, cap: float) -> bool:
        """Seasonality: a level this card already reached since `since` and then gave back is a cycle coming
        round again (load that rises every afternoon, a batch that comes back, a start's first climb), not a
        card filling up: the forecast pages only above it, or on troughs that rise (`_troughs`). Within one
        settle step: a cycle's peaks differ by a few hundred MB from one round to the next."""
        seen = self._given_back_peak(hist, lc, since, now)
        return ref <= seen + max(self.cfg.settle_fraction * cap, float(self.cfg.settle_min_bytes))

    def _given_back_peak(self, hist: History, lc: Lifecycle, since: float, now: float) -> float:
        """The highest reading since `since` before the card's last release (0 when it never gave back)."""
        rel = [r for r in lc.release_times if r >= since]
        if not rel:
            return 0.0
        tt, _, mx, _ = hist.pick(now - since).since(since)
        before = mx[tt < rel[-1]]
        return float(before.max()) if len(before) else 0.0

    def _outlasts_past_climbs(
        self, hist: History, lc: Lifecycle, since: float, now: float, age: float, ref: float, rate: float, cap: float
    ) -> bool:
        """Is a climb of `age` seconds likely to go on until the card is full, given the climbs this card made
        while serving and then gave back?

        Gott's rule (`start_eta_ratio`) knows only the climb's own age, and pages at odds of 1 / (1 + ratio) =
        40% that it goes on. Where the card has climbed and given back n times, the climbs are exchangeable:
        the odds that this one outlasts them all, the longest lasting T, are 1 / (n + 1). A climb younger than
        T that fills the card at its present pace before T is likely to (a climb of this card has lasted that
        long). One that needs longer must outlast them all, and then go on from T to its ETA, at Gott's odds
        from there, T / (age + ETA): likely only where the product is within the rule's odds. That is never so
        from two climbs on (1/3 < 40%); after one, only where the ETA ends within a quarter of T past it. One
        that outlasts them all is judged by Gott's rule alone again: a leak under a cycle is paged once its
        climb is longer than the cycle's."""
        durations = self._given_back_climbs(hist, lc, since, now, cap)
        if not durations or age >= max(durations):
            return True
        longest = max(durations)
        if ref + rate * (longest - age) >= cap:
            return True
        if rate <= 0:  # a climb that has stopped fills nothing
            return False
        eta = (cap - ref) / rate
        return longest / (age + eta) / (len(durations) + 1) >= 1.0 / (1.0 + self.cfg.start_eta_ratio)

    def _given_back_climbs(self, hist: History, lc: Lifecycle, since: float, now: float, cap: float) -> list[float]:
        """How long each climb lasted that the card made while serving and then gave back: from where the floor
        last stood at its lowest before the climb's peak (as `_climb_base` reads it) to the peak, one climb per
        release."""
        rel = [r for r in lc.release_times if r >= since]
        if not rel:
            return []
        tt, mn, mx, _ = hist.pick(now - since).since(since)
        out = []
        for a, b in zip([since, *rel[:-1]], rel, strict=True):
            i, j = np.searchsorted(tt, [a, b])
            if j - i < 2:
                continue
            k = i + int(np.argmax(mx[i:j]))
            seg = mn[i : k + 1]
            near = np.flatnonzero(seg <= float(seg.min()) + self.cfg.quiet_fraction * cap)
            out.append(float(tt[k] - tt[i + int(near[-1])]))
        return out

    def _recent_slope(self, tr: Trend, hist: History, now: float) -> float:
        """The floor's slope in the next shorter window that was tested on enough blocks and rose enough to be
        judged (0 where its rise is not significant: the growth stopped lately; its own Theil-Sen pace where it
        rose significantly by less than a leak's least rise: a load slowing near its peak), or the trend's own.

        The forecast trusts the recent pace: memory that follows load slows as the load nears its peak, a
        cache levels off, a leak keeps going. Where the shorter windows were tested on too few blocks (samples
        15-60 s apart, as a fleet's Prometheus keeps them), the pace is the Theil-Sen slope of the newest
        `trend_min_blocks` readings of the level that holds the window, each a block of its own."""
        shorter = [w for w, t in self.trends.items() if w < tr.window_s and t.blocks >= self.cfg.trend_min_blocks]
        if shorter:
            near = self.trends[max(shorter)]
            if near.why_not == "too small":  # a significant rise, smaller than a leak's: its own pace
                return max(0.0, near.slope)
            return near.slope if near.significant else 0.0
        if not any(w < tr.window_s and t.blocks < self.cfg.trend_min_blocks for w, t in self.trends.items()):
            return tr.slope  # the shortest window of all: nothing is more recent than it
        tt, mn, _, _ = hist.pick(tr.window_s).since(now - tr.window_s)
        k = self.cfg.trend_min_blocks
        if len(tt) < 2 * k:  # as many readings as the window's own blocks: no pace newer than the window's
            return tr.slope
        return max(0.0, theil_sen(tt[-k:] - tt[-k], mn[-k:], self.cfg.trend_ci_z)[0])

    def _damped_rise(self, tr: Trend, hist: History, now: float, period: float) -> float:
        """How much further the floor rises if it keeps slowing as it has: `damped_rise` on the block minima of
        the trend's window and of each shorter window tested on enough blocks, as the trend test cut them; the
        least of them. A climb slows first where it is newest: a long window's halves may both hold its
        fast part (or its start's jump), while the shorter ones already show the load turning."""
        cfg = self.cfg
        most = math.inf
        for w, t in self.trends.items():
            if w > tr.window_s or t.blocks < cfg.trend_min_blocks:
                continue
            tt, mm, _, _ = hist.pick(w).since(now - w)
            bt, by = block_minima(tt, mm, cfg.trend_blocks, period)
            most = min(most, damped_rise(bt, by, cfg.trend_ci_z))
        return most

    def _climb_base(self, t: np.ndarray, mn: np.ndarray, since: float, cap: float) -> tuple[float, float]:
        """Where the present climb began, (time, bytes): the last time the floor stood at its lowest (within
        the card's noise, `quiet_fraction`) since `since`: the card's last release while serving, or the start
        of serving. A leak's climb began at its onset, a cycle's at its last trough (troughs differ by more
        than the noise from one round to the next); transients given back on the way leave the floor, and so
        the climb, as they were."""
        a = int(np.searchsorted(t, since))
        if a >= len(t):
            return float(t[-1]), float(mn[-1])
        seg = mn[a:]
        low = float(seg.min())
        near = np.flatnonzero(seg <= low + self.cfg.quiet_fraction * cap)
        return float(t[a + int(near[-1])]), low

    def _urgent(self, eta: float, eta_lo: float) -> bool:
        """Significant and urgent: the ETA is inside the horizon once the confirmation it will get has run
        (so the page lands with the horizon still ahead), and the slope's lower bound projects the OOM
        inside twice the horizon (a rate that may well be far slower does not page)."""
        cfg = self.cfg
        wait = min(cfg.oom_for_max_s, cfg.oom_for_fraction * eta)
        return (
            eta <= cfg.oom_horizon_s + wait + cfg.oom_lead_margin_s
            and eta_lo <= cfg.oom_bound_factor * cfg.oom_horizon_s
        )

    def _outpaces(self, tr: Trend, now: float, cap: float) -> bool:
        """A sustained rise that would fill the card soon, both at its rate and at its lower bound, and soon
        compared with how long it has risen (`cache_eta_ratio`): no cache, whatever its steps. The allocator's
        high-water marks come with new request shapes, fewer and fewer, and level off with room to spare; a
        rise made of many fine steps (the largest carries at most `cache_fine_step_share` of it and is smaller than
        what the lifecycle calls a large allocation, `settle_fraction` of the card) that has kept its
        pace and needs only a few times its own span more to reach the top is a leak that happens to step no
        taller than a transient (fine steps from a high base), at the top of the card too."""
        if not tr.leak or tr.since is None:
            return False
        cfg = self.cfg
        if tr.max_step_bytes > min(
            cfg.cache_fine_step_share * tr.rise_bytes, max(cfg.settle_fraction * cap, float(cfg.settle_min_bytes))
        ):
            return False  # a few large steps: the allocator's high-water marks may well stop at the next one
        left = max(0.0, cap - tr.floor_bytes)
        eta, eta_lo = left / tr.slope, left / tr.slope_lo
        return self._urgent(eta, eta_lo) and eta <= cfg.cache_eta_ratio * max(now - tr.since, 0.0)

    def _steps_at_own_rate(self, tr: Trend, lc: Lifecycle, now: float) -> bool:
        """The high-water mark keeps stepping at a rate of its own (`steady_steps_p` below the trend's
        alpha): no records of a load's demand, whatever the height."""
        origin = lc.loaded_at if lc.loaded_at is not None else lc.serving_since
        return origin is not None and steady_steps_p(lc.hw_times, origin, now, tr.window_s) < self.alpha

    def _cache_like(self, tr: Trend, lc: Lifecycle, cap: float, now: float) -> bool:
        """A handful of steps in the window, coming ever more rarely since the load began as the records of its
        demand do (`steady_steps_p`, at the trend's own alpha), each no taller than the tallest transient since
        the server started; sampled too slowly to have seen one, the steps alone say it.

        Every rise of the floor counts as a step, but for a start's tail: where the window's fine rises (under
        `cache_step_share` of its largest) all came before its first large one and the large ones carry that
        share of the rise, the fine ones are the last of the graph captures (a server takes requests, and its
        cache steps, only once they are done) and the large ones are the steps. Counted as steps, a capture's
        tail made a warm-up of six high-water marks a leak of twenty. A fine rise after the first large one
        (a leak under a warm cache) counts, as before."""
        cfg = self.cfg
        past_tail = start_tail(tr.step_rises, tr.rise_bytes, cfg.cache_step_share)
        if (tr.rising_blocks if past_tail is None else past_tail) > cfg.cache_steps_max:
            return False
        if self._steps_at_own_rate(tr, lc, now):
            return False  # no record of a load
        if lc.tallest <= 0:
            return True
        big = lc.tallest * (1 + cfg.spike_margin)
        return tr.rise_bytes <= cfg.cache_steps_max * big and tr.max_step_bytes <= big

    def _levelled(
        self, tr: Trend, kind: str, floor: float, cap: float, shape: str, base: dict[str, Any]
    ) -> CurveVerdict:
        nh = floor >= self.cfg.no_headroom_fraction * cap
        self.shape_prev = shape
        what = (
            "in steps no larger than the largest transient so far (the caching allocator keeping freed blocks)"
            if kind == "cache_growth"
            else "and levelled off"
        )
        why = f"the floor rose {tr.rise_bytes / 2**30:.2f} GiB over {tr.window_s / 60:.0f} min {what}: {tr.why_not}"
        return CurveVerdict(
            shape,
            growth=kind,
            growth_bytes=tr.rise_bytes,
            no_headroom=nh,
            window_s=tr.window_s,
            last_rise=tr.last_rise,
            why=why,
            **base,
        )

    def _start_verdict(
        self,
        now: float,
        hist: History,
        t: np.ndarray,
        mn: np.ndarray,
        lc: Lifecycle,
        cap: float,
        total: float,
        used: float,
        floor: float,
        envelope: float,
        engine_loading: bool,
        base: dict[str, Any],
    ) -> CurveVerdict:
        cfg = self.cfg
        self.shape_prev = "stable"
        t0 = _climbs_from(lc)
        graphs = max(cfg.graphs_fraction * total, float(cfg.graphs_min_bytes))
        line = lc.regime_level + graphs if lc.regime_t is not None else 0.0
        if lc.budget is not None:  # a known engine says where its start stops
            line = max(line, lc.budget * total + graphs)
        elif lc.kind is not None:  # a server without a declared budget: its start may fill the card
            return CurveVerdict("stable", **base)
        if engine_loading:  # the engine says it is still loading: its climb is its start, whatever the curve
            return CurveVerdict("stable", **base)
        if t0 is None or now - t0 < cfg.trend_min_span_s or floor <= line:
            return CurveVerdict("stable", **base)
        i = int(np.searchsorted(t, t0))
        if now >= self.start_due or self.start_v is None:  # re-tested ~60 times over the start's span
            self.start_due = now + max(cfg.trend_retest_min_s, (now - t0) / cfg.trend_cadence)
            self.start_v = floor_trend(t[i:], mn[i:], now - t0, self.cfg, noise_most=cfg.quiet_fraction * cap)
            self.start_past = None  # tested below, at the same cadence, once the start's climb is a leak
        tr = self.start_v
        if not tr.leak:
            return CurveVerdict("stable", **base)
        k = i
        if lc.budget is not None:
            # Past a declared budget, the climb there must be a leak on its own trend, as a serving card's climb
            # must: the allocator's first high-water steps (one or two past the line, before the start has held
            # steady) ride on the start's own climb, which the line already explains. Where it has too few
            # readings to be tested (a scrape a minute), the start's own trend speaks, as it did before.
            k += int(np.argmax(mn[i:] > line))  # where the floor first stood past the line
            if self.start_past is None:
                self.start_past = floor_trend(
                    t[k:], mn[k:], now - float(t[k]), self.cfg, noise_most=cfg.quiet_fraction * cap
                )
            if self.start_past.blocks >= cfg.trend_min_blocks and not self.start_past.leak:
                return CurveVerdict("stable", **base)
        # A newest reading that jumped as a KV pool does (the lifecycle's dominant jump: one allocation much
        # larger than any of this start before it) is judged at the next evaluation, when the lifecycle has
        # seen it and drawn the start's line above it: until then, what the card held through the last one.
        held = float(mn[int(np.searchsorted(t, now - cfg.eval_interval_s)) :].min())
        jump = used - held
        pool_jump = jump >= cfg.dominant_fraction * cap and jump >= cfg.dominant_factor * lc.max_jump
        ref = max(held if pool_jump else used, envelope)
        eta = max(0.0, (cap - ref) / tr.slope)
        eta_lo = max(0.0, (cap - ref) / tr.slope_lo)
        lasted = now - (tr.since if tr.since is not None else t0)
        if lc.budget is not None:
            # A declared budget says where this start stops: the climb that could page is the one past it (a
            # cache's first steps right after the graphs), from when the floor crossed it.
            age, done = min(lasted, now - float(t[k])), ref - line
        else:  # the line is only an estimate (the pool's jump plus graphs): the whole climb since the pool, in
            age, done = lasted, 0.0  # time (the bytes above an estimated line say nothing of what it did)
        if not self._urgent(eta, eta_lo) or not likely_to_go_on(eta, cap - ref, age, done, cfg):
            return CurveVerdict("stable", **base)
        if self._seen_before(hist, lc, t0, now, ref, cap):  # a start that climbed as high and gave it back
            return CurveVerdict("stable", **base)
        steps = int(np.count_nonzero(np.diff(kept_floor(mn[i:])) > 0))
        shape = "staircase" if steps < 0.6 * max(1, len(mn) - i) else "ramp"
        self.shape_prev = shape
        why = (
            f"since its start the floor climbed {tr.rise_bytes / 2**30:.1f} GiB at {tr.slope / 2**20:.0f} MiB/s "
            f"(Mann-Kendall z={tr.z:.1f}) past where a start stops, and is full in {eta:.0f} s"
        )
        return CurveVerdict(
            shape,
            leak=True,
            leak_bytes_per_second=tr.slope,
            leak_since=tr.since,
            leak_confidence=round(min(1.0, 1 - 0.5 * math.erfc(tr.z / math.sqrt(2))), 4),
            eta_seconds=eta,
            eta_lo_seconds=eta_lo,
            urgent=True,
            window_s=now - t0,
            why=why,
            steps=steps,
            confirm_s=0.0,
            **base,
        )  # the ETA-to-climb ratio was its confirmation
