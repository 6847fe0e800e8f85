"""What the allocator probe tells that NVML cannot: live tensors apart from PyTorch's cache.

NVML sees the caching allocator's high-water mark. A healthy server whose freed activations stay cached
climbs in steps and levels off near 100%; a real leak under a warm cache is invisible to NVML until the
cache is used up. Inside the process the two differ plainly:
- live tensors (`allocated`) that keep growing after the process first settled: a leak. Decisive, and
  earlier than NVML, because the bytes are counted when the tensor is made, not when the cache runs out;
- the reserved pool growing over flat live tensors: cache growth, healthy but wasteful
  (`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` gives it back); a curve leak that is only this is
  not a leak;
- `num_alloc_retries` rising: the allocator had to flush its cache to satisfy a request because the card
  is full. The next request that does not fit is a CUDA OOM: page.

`judge()` is pure (arrays in, a verdict out); `AllocBook` keeps a bounded history per (card, process) and
turns verdicts into findings for the analyzer's per-card evaluation (`AllocBook.judge_card`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..config import AllocatorConfig, AnalysisConfig
from ..model import AllocSample
from ..words import duration, gib
from ..words import rate as words_rate  # `rate` names a leak's bytes/s here
from .alerts import Condition
from .curve import calm_shape
from .findings import Finding

MiB = float(1 << 20)
Seq = Sequence[Any] | np.ndarray  # readings in time order (None where a counter was not reported)


@dataclass(frozen=True)
class AllocVerdict:
    """One process on one card, as its allocator says."""

    leak: bool = False
    leak_bytes_per_second: float = 0.0  # growth of live tensors (their floor) while leaking
    leak_since: float | None = None
    cache_growth: bool = False
    cache_growth_bytes: float = 0.0  # reserved rise over the window while live tensors stayed flat
    allocated_growth_bytes: float = 0.0  # floor of live tensors: rise over the window
    retries_recent: int = 0  # alloc retries within the retry window
    ooms_recent: int = 0
    allocated_bytes: int = 0
    reserved_bytes: int = 0
    inactive_split_bytes: int = 0
    settled_at: float | None = None  # the first quiet stretch (end of start-up)


def rolling_min(t: np.ndarray, y: np.ndarray, span_s: float) -> np.ndarray:
    """Trailing minimum over `span_s`: the floor of live tensors, below the per-request activations."""
    out = np.empty_like(y)
    j = 0
    for i in range(len(y)):
        while t[i] - t[j] > span_s:
            j += 1
        out[i] = y[j : i + 1].min()
    return out


def rolling_max(t: np.ndarray, y: np.ndarray, span_s: float) -> np.ndarray:
    return -rolling_min(t, -y, span_s)


def settled(t: np.ndarray, floor: np.ndarray, cfg: AllocatorConfig) -> float | None:
    """End of the first stretch of `settle_s` in which the floor moved less than `flat_fraction` of itself
    (and at least `flat_bytes`): the process has finished starting (weights, KV pool and graph capture climb
    first and must not count as a leak)."""
    j = 0
    for i in range(len(t)):
        while j < i and abs(floor[i] - floor[j]) > max(cfg.flat_bytes, cfg.flat_fraction * floor[i]):
            j += 1
        if t[i] - t[j] >= cfg.settle_s:
            return float(t[i])
    return None


def theil_sen(x: np.ndarray, y: np.ndarray) -> float:
    """Median of pairwise slopes: one transient caught in the floor cannot swing the rate."""
    i, j = np.triu_indices(len(x), 1)
    dx = x[j] - x[i]
    ok = dx > 0
    return float(np.median((y[j] - y[i])[ok] / dx[ok])) if ok.any() else 0.0


def kendall_tau(x: np.ndarray, y: np.ndarray) -> float:
    """Share of rising pairs minus falling pairs (-1..1): a leak rises between almost any two readings."""
    i, j = np.triu_indices(len(x), 1)
    s = np.sign(x[j] - x[i]) * np.sign(y[j] - y[i])
    return float(s.sum() / len(s)) if len(s) else 0.0


def judge(
    t: Seq,
    allocated: Seq,
    reserved: Seq,
    retries: Seq | None,
    ooms: Seq | None,
    cfg: AllocatorConfig,
    now: float | None = None,
    settled_at: float | None = None,
    inactive_split: Seq | None = None,
) -> AllocVerdict:
    """The verdict over one (card, process) history; arrays in time order, counters cumulative."""
    t = np.asarray(t, dtype=float)
    if len(t) == 0:
        return AllocVerdict()
    a = np.asarray(allocated, dtype=float)
    r = np.asarray(reserved, dtype=float)
    now = float(t[-1]) if now is None else now
    floor = rolling_min(t, a, cfg.floor_s)
    if settled_at is None:
        settled_at = settled(t, floor, cfg)
    split = inactive_split[-1] if inactive_split is not None and len(inactive_split) else None

    # Alloc retries and OOMs within the retry window (counters: compare with the value before it).
    rec = t >= now - cfg.retry_window_s
    before = ~rec
    rt = _counter_rise(retries, rec, before)
    oo = _counter_rise(ooms, rec, before)

    # Leak: the floor of live tensors rises steadily over a trailing window, after start-up. The windows
    # double from the shortest span up to the leak window, newest first, so a leak that began a little while
    # ago is judged over its own span rather than diluted by the flat minute before it. Without a leak, the
    # growth reported is the whole leak window's.
    leak, rate, since, a_rise = False, 0.0, None, 0.0
    span = cfg.leak_min_span_s
    while settled_at is not None:
        w = (t >= now - span) & (t >= settled_at)
        tw, fw = t[w], floor[w]
        if len(tw) >= 5 and tw[-1] - tw[0] >= cfg.leak_min_span_s:
            slope = theil_sen(tw, fw)
            a_rise = slope * float(tw[-1] - tw[0])
            jumps = np.diff(fw)
            one_off = float(jumps.max()) > cfg.leak_max_jump_fraction * a_rise if a_rise > 0 else True
            if (
                a_rise >= cfg.leak_min_bytes
                and kendall_tau(tw, fw) >= cfg.leak_min_tau
                and not one_off
                and not _returns(floor[(t >= settled_at) & (t < tw[0])], fw, cfg)
            ):
                leak, rate = True, slope
                rising = np.nonzero(jumps > 0)[0]
                since = float(tw[rising[0]]) if len(rising) else float(tw[0])
                break
        if span >= cfg.leak_window_s:
            break
        span = min(2 * span, cfg.leak_window_s)
    # Cache growth: the idle cache (reserved minus live, at its highest over `floor_s`, when no activation
    # is alive) grew over the window, while live tensors did not (no leak), once start-up is over.
    cache_size = rolling_max(t, r - a, cfg.floor_s)
    cw = t >= now - cfg.cache_window_s
    c_rise = float(cache_size[-1] - cache_size[cw].min()) if cw.any() else 0.0
    cache = settled_at is not None and not leak and c_rise >= cfg.cache_min_bytes
    return AllocVerdict(
        leak=leak,
        leak_bytes_per_second=rate,
        leak_since=since,
        cache_growth=cache,
        cache_growth_bytes=c_rise if cache else 0.0,
        allocated_growth_bytes=a_rise,
        retries_recent=rt,
        ooms_recent=oo,
        allocated_bytes=int(a[-1]),
        reserved_bytes=int(r[-1]),
        inactive_split_bytes=int(split or 0),
        settled_at=settled_at,
    )


def _returns(before: np.ndarray, fw: np.ndarray, cfg: AllocatorConfig) -> bool:
    """Is a window's rise a return to a level these live tensors held before and gave back? Seasonality, as
    the curve's: the weights of a server that slept and woke (vLLM's sleep mode: to host memory and back), a
    batch that drained and came back. Only growth past that earlier level, by a leak's least rise, is new."""
    if not len(before):
        return False
    held = float(before.max())
    gave_back = held - float(fw[0]) >= cfg.leak_min_bytes
    return gave_back and float(fw[-1]) - held < cfg.leak_min_bytes


def _live_rise(rows: Sequence[tuple[Any, ...]], v: Any, av: AllocVerdict, cfg: AllocatorConfig) -> float:
    """How much one process's live tensors (their floor) rose over what the curve calls a leak: from the
    curve's `leak_since` when it has one (the span its claim rests on), else the judge's own (the leak window).

    The span matters: a batch that drained and came back (continuous batching drops its KV for a second)
    pulls the floor of a fixed window down and up again, a rise no leak made; over the curve's own span the
    live tensors of a healthy server lie flat while its cache grows."""
    since = getattr(v, "leak_since", None) if getattr(v, "leak", False) else None
    if since is None:
        return av.allocated_growth_bytes
    t = np.asarray([x[0] for x in rows], dtype=float)
    a = np.asarray([x[1] for x in rows], dtype=float)
    floor = rolling_min(t, a, cfg.floor_s)
    w = t >= since
    if np.count_nonzero(w) < 2:
        return 0.0
    tw, fw = t[w], floor[w]
    return max(0.0, theil_sen(tw, fw) * float(tw[-1] - tw[0]))


def _counter_rise(c: Seq | None, rec: np.ndarray, before: np.ndarray) -> int:
    if c is None:
        return 0
    v = np.asarray([np.nan if x is None else x for x in c], dtype=float)
    vr = v[rec]
    vr = vr[~np.isnan(vr)]
    if not len(vr):
        return 0
    vb = v[before]
    vb = vb[~np.isnan(vb)]
    base = vb[-1] if len(vb) else vr[0]
    return int(max(0.0, vr.max() - base))


@dataclass(frozen=True)
class AllocView:
    """One process on one card for the exporters (metrics, status page)."""

    gpu: str
    uuid: str
    pid: int
    role: str
    allocated_bytes: int
    reserved_bytes: int
    inactive_split_bytes: int | None
    alloc_retries: int | None
    ooms: int | None
    verdict: str  # leak | cache_growth | retries | ok


class _History:
    __slots__ = ("rows", "settled_at", "last")

    def __init__(self, n: int):
        self.rows: deque[tuple[float, int, int, int | None, int | None, int | None]] = deque(maxlen=n)
        self.settled_at: float | None = None
        self.last: AllocVerdict = AllocVerdict()


class AllocBook:
    """Bounded allocator histories per (card UUID, PID), judged per card by the analyzer."""

    def __init__(self, cfg: AllocatorConfig | None = None, horizon_s: float = AnalysisConfig.oom_horizon_s):
        self.cfg = cfg or AllocatorConfig()
        self.horizon_s = horizon_s  # GPUOOMImminent's horizon: the analysis' one, named once in AnalysisConfig
        self.hist: dict[tuple[str, int], _History] = {}
        self.latest: dict[tuple[str, int], AllocSample] = {}

    def add(self, s: AllocSample) -> None:
        key = (s.uuid, s.pid)
        h = self.hist.get(key)
        if h is None:
            if len(self.hist) >= self.cfg.max_series:
                oldest = min(self.latest, key=lambda k: self.latest[k].t)
                self.hist.pop(oldest, None)
                self.latest.pop(oldest, None)
            h = self.hist[key] = _History(self.cfg.max_points)
        h.rows.append((s.t, s.allocated_bytes, s.reserved_bytes, s.inactive_split_bytes, s.alloc_retries, s.ooms))
        self.latest[key] = s

    def _fresh(self, uuid: str, now: float) -> Iterator[tuple[int, _History]]:
        for (u, pid), s in list(self.latest.items()):
            if u != uuid:
                continue
            if now - s.t > self.cfg.forget_s:  # the process is gone (its probe file went stale)
                self.hist.pop((u, pid), None)
                self.latest.pop((u, pid), None)
                continue
            yield pid, self.hist[(u, pid)]

    def judge_card(
        self, gpu: str, uuid: str, name: str, v: Any, capacity_bytes: float, used_bytes: float | None, now: float
    ) -> tuple[Any, list[tuple[Finding, Condition | None]]]:
        """The allocator's say on one card: (the curve verdict, perhaps corrected, [(Finding, Condition|None)]).

        A curve leak is withdrawn when every probed process on the card shows flat live tensors over the span
        the curve's claim rests on (`_live_rise`) and its reserved pool grew: that climb is the cache (said as
        a `cache_growth` finding instead).
        """
        cfg = self.cfg
        out: list[tuple[Finding, Condition | None]] = []
        any_probe, all_flat, cache_pids = False, True, []
        served = getattr(v, "regime_start", None)  # when the card's start ended: what came before is loading
        for pid, h in self._fresh(uuid, now):
            rows = [x for x in h.rows if served is None or x[0] >= served]
            if not rows:
                continue
            t = [x[0] for x in rows]
            av = judge(
                t,
                [x[1] for x in rows],
                [x[2] for x in rows],
                [x[4] for x in rows],
                [x[5] for x in rows],
                cfg,
                now,
                h.settled_at,
                [x[3] for x in rows],
            )
            if h.settled_at is None:
                h.settled_at = av.settled_at
            h.last = av
            any_probe = True
            if av.leak and getattr(v, "phase", "serving") == "starting":
                # the card's start is still under way: live tensors growing is the model being loaded
                all_flat = False
            elif av.leak:
                all_flat = False
                if getattr(v, "growth", None) in ("cache_growth", "plateau"):
                    v = replace(v, growth=None)  # the curve took this climb for cache; live tensors say leak
                out += _leak(gpu, uuid, name, pid, av, capacity_bytes, used_bytes, self.horizon_s, now)
            elif _live_rise(rows, v, av, cfg) > cfg.cache_flat_fraction * max(
                av.cache_growth_bytes, cfg.leak_min_bytes
            ):
                all_flat = False
            if av.cache_growth:
                cache_pids.append((pid, av))
            if av.retries_recent > 0:
                out.append(_retries(gpu, uuid, name, pid, av, capacity_bytes, used_bytes, cfg, now))
        if any_probe and all_flat and cache_pids:
            pid, av = max(cache_pids, key=lambda x: x[1].cache_growth_bytes)
            out.append((_cache_growth(gpu, pid, av, v, now), None))
            if getattr(v, "leak", False):  # and its shape is the card's own apart from the climb (no ramp)
                shape = calm_shape(v.shape == "sawtooth", v.spike_height_bytes)
                v = replace(v, shape=shape, leak=False, eta_seconds=None, leak_bytes_per_second=0.0)
        return v, out

    def describe(self, uuid: str) -> list[str]:
        """One plain line per probed process on a card (diagnose)."""
        out = []
        for (u, pid), s in sorted(self.latest.items()):
            if u != uuid:
                continue
            av = self.hist[(u, pid)].last if (u, pid) in self.hist else AllocVerdict()
            what = (
                "its allocator had to flush the cache to fit requests: out of memory is near"
                if av.retries_recent
                else f"live tensors grow {words_rate(av.leak_bytes_per_second)}: a leak"
                if av.leak
                else f"the cache grew {gib(av.cache_growth_bytes)} over flat live tensors: cache, not a leak"
                if av.cache_growth
                else "live tensors flat"
            )
            out.append(
                f"PID {pid} (allocator probe): live tensors {gib(s.allocated_bytes)}, reserved "
                f"{gib(s.reserved_bytes)} (cache {gib(s.reserved_bytes - s.allocated_bytes)}), "
                f"{s.alloc_retries or 0} alloc retries, {s.ooms or 0} OOMs; {what}."
            )
        return out

    def views(self, card_of: dict[str, int], roles: dict[int, str]) -> tuple[AllocView, ...]:
        """What the exporters show: the latest reading per (card, process), with its verdict."""
        out = []
        for (uuid, pid), s in sorted(self.latest.items()):
            gpu = card_of.get(uuid)
            if gpu is None:
                continue
            h = self.hist.get((uuid, pid))
            av = h.last if h else AllocVerdict()
            what = (
                "retries" if av.retries_recent else "leak" if av.leak else "cache_growth" if av.cache_growth else "ok"
            )
            out.append(
                AllocView(
                    str(gpu),
                    uuid,
                    pid,
                    roles.get(pid, "other"),
                    s.allocated_bytes,
                    s.reserved_bytes,
                    s.inactive_split_bytes,
                    s.alloc_retries,
                    s.ooms,
                    what,
                )
            )
        return tuple(out)


def _labels(gpu: str, uuid: str) -> tuple[tuple[str, str], ...]:
    return (("gpu", gpu), ("uuid", uuid))


def _tensor_room(capacity: float, used: float | None, av: AllocVerdict) -> float:
    """Bytes live tensors can still grow by: what is free on the card plus this process's cache."""
    free = capacity - (used if used is not None else av.reserved_bytes)
    return max(0.0, free) + max(0, av.reserved_bytes - av.allocated_bytes)


def _leak(
    gpu: str,
    uuid: str,
    name: str,
    pid: int,
    av: AllocVerdict,
    capacity: float,
    used: float | None,
    horizon_s: float,
    now: float,
) -> list[tuple[Finding, Condition | None]]:
    rate = av.leak_bytes_per_second
    room = _tensor_room(capacity, used, av)
    eta = room / rate if rate > 0 else None
    summary = (
        f"GPU {gpu}: live tensors of PID {pid} keep growing, {words_rate(rate)} "
        f"(+{gib(av.allocated_growth_bytes)}; PyTorch's allocator counts them, whatever its cache hides)"
    )
    ev = {
        "source": "allocator probe",
        "leak_bytes_per_second": round(rate, 1),
        "growth_since_seconds": None if av.leak_since is None else round(av.leak_since, 2),
        "allocated_bytes": av.allocated_bytes,
        "reserved_bytes": av.reserved_bytes,
        "allocated_growth_bytes": int(av.allocated_growth_bytes),
        "tensor_room_bytes": int(room),
        "eta_seconds": None if eta is None else round(eta, 1),
    }
    advice = (
        "The process itself keeps tensors alive across requests: this is not the KV pool and not the "
        "allocator's cache (both are outside `allocated`). Find what holds references (tensors kept in "
        "lists, a growing cache, per-request CUDA graphs); restart the server before the ETA if it "
        "cannot be fixed now."
    )
    f = Finding("leak", gpu, pid, summary, ev, advice, "warning", now)
    c = Condition(
        "GPUMemoryLeak",
        _labels(gpu, uuid),
        f"GPU {gpu} ({name}) memory leak: {words_rate(rate)}",
        f"{summary}; full in {duration(eta)}.",
        eta,
        rate,
    )
    out: list[tuple[Finding, Condition | None]] = [(f, c)]
    if eta is not None and eta <= horizon_s:
        s2 = f"GPU {gpu}: at {words_rate(rate)} of live tensors it is full in {duration(eta)} ({gib(room)} left)"
        f2 = Finding(
            "oom_imminent",
            gpu,
            pid,
            s2,
            dict(ev, horizon_seconds=horizon_s),
            "Drain and restart the server now, then fix the growth (see GPUMemoryLeak).",
            "critical",
            now,
        )
        out.append(
            (
                f2,
                Condition(
                    "GPUOOMImminent",
                    _labels(gpu, uuid),
                    f"GPU {gpu} ({name}) runs out of memory in {duration(eta)}",
                    s2 + ".",
                    eta,
                    eta,
                ),
            )
        )
    return out


def _retries(
    gpu: str,
    uuid: str,
    name: str,
    pid: int,
    av: AllocVerdict,
    capacity: float,
    used: float | None,
    cfg: AllocatorConfig,
    now: float,
) -> tuple[Finding, Condition]:
    summary = (
        f"GPU {gpu}: PyTorch's allocator in PID {pid} had to flush its cache {av.retries_recent} time(s) "
        f"in {cfg.retry_window_s:.0f} s to fit a request: the card is full, the next request that does "
        "not fit is a CUDA out-of-memory"
    )
    ev = {
        "source": "allocator probe",
        "alloc_retries_recent": av.retries_recent,
        "ooms_recent": av.ooms_recent,
        "allocated_bytes": av.allocated_bytes,
        "reserved_bytes": av.reserved_bytes,
        "inactive_split_bytes": av.inactive_split_bytes,
        "capacity_bytes": int(capacity),
        "used_bytes": None if used is None else int(used),
    }
    advice = (
        "The next request like these may fail. If live tensors grow (see GPUMemoryLeak), that is the cause; "
        "if they are flat, the requests need more than the card has: lower --max-num-seqs or "
        "--max-num-batched-tokens, or --gpu-memory-utilization to leave the activations room; "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True reduces fragmentation "
        f"(inactive split now {gib(av.inactive_split_bytes)})."
    )
    # A warning, not a page: a request needed more than was free and the allocator made room by freeing its
    # cache, which a card at 98-100% does for hours without failing (BEHAVIOURS.md section 2). It says the
    # next request like it may fail; whether the card fills is the forecast's to say (GPUOOMImminent).
    f = Finding("spike_risk", gpu, pid, summary, ev, advice, "warning", now)
    c = Condition(
        "GPUMemorySpikeRisk",
        _labels(gpu, uuid),
        f"GPU {gpu} ({name}): the allocator had to free its cache to fit requests",
        summary + ".",
        None,
        float(av.retries_recent),
    )
    return f, c


def _cache_growth(gpu: str, pid: int, av: AllocVerdict, v: Any, now: float) -> Finding:
    summary = (
        f"GPU {gpu}: PyTorch's cache in PID {pid} grew by {gib(av.cache_growth_bytes)} while live tensors "
        "stayed flat: freed activations kept for reuse (cache, not live tensors)"
    )
    ev = {
        "source": "allocator probe",
        "cache_growth_bytes": int(av.cache_growth_bytes),
        "allocated_bytes": av.allocated_bytes,
        "reserved_bytes": av.reserved_bytes,
        "inactive_split_bytes": av.inactive_split_bytes,
        "curve_leak_withdrawn": bool(getattr(v, "leak", False)),
    }
    advice = (
        "Healthy, but the cache takes the card's headroom: set "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True so freed blocks can be given back and reused "
        "across sizes, or call torch.cuda.empty_cache() after large one-off requests."
    )
    return Finding("cache_growth", gpu, pid, summary, ev, advice, "info", now)
