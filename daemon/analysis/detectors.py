"""The analysis core as detectors behind one interface.

Each detector looks at one evaluation's `Context` (who holds what, the roles, the cards' states, engines,
sources) and returns its `Detection`s: a finding together with the alert condition it raises (or None for a
finding that is shown, never paged). A per-card detector runs once per card, with `ctx.card` set; the
others once per evaluation. `Analyzer.evaluate` runs each one inside its own guard, so one that raises is
counted, logged and alerted on (GPUTelemetryDown, source `analysis:<name>`) while the others go on.

Order is part of the contract: per card the curve, then its strays; then visibility (PIDs, MIG),
imbalance, KV pressure, telemetry, host RAM. The alert book and the summary see findings in that order.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from ..config import ALERT_SPECS
from . import findings
from .alerts import Condition
from .cards import BusyPeriod, GpuState
from .curve import CurveVerdict
from .imbalance import CardLoad, find_imbalance
from .mig import mig_findings
from .processes import ProcRole, card_group

if TYPE_CHECKING:
    from ..config import AnalysisConfig
    from ..model import EngineSnapshot, ProcInfo, SourceStatus
    from .allocator import AllocBook
    from .hostmem import HostMemJudge

__all__ = [
    "CardCurve",
    "Context",
    "Detection",
    "Detector",
    "HostRam",
    "Imbalance",
    "KvPressure",
    "Strays",
    "TelemetryDown",
    "Visibility",
    "default_detectors",
]


@dataclass(frozen=True, slots=True)
class Detection:
    """One finding and the condition it raises, together.

    `keep_as`: a finding without an alert that is still kept among those that fired (the summary tells it),
    under this kind (its own; a card's growth finding keeps one place whichever kind it is now)."""

    finding: findings.Finding
    condition: Condition | None = None
    keep_as: str | None = None


@dataclass(frozen=True)
class Context:
    """What one evaluation's detectors read: the cards' states and who holds what on them."""

    now: float
    cfg: AnalysisConfig
    gpus: dict[int, GpuState]
    procs: dict[int, ProcInfo]
    roles: dict[int, ProcRole]
    holders: dict[int, float]  # pid -> bytes held over all cards
    engines: list[EngineSnapshot]
    sources: dict[str, SourceStatus]
    alloc: AllocBook
    hostmem: HostMemJudge
    budget_fraction: float | None  # the engine's gpu_memory_utilization (or the configured default)
    engine_up_since: float | None
    warming: bool  # an engine is expected and has not answered yet (the curve holds its start)
    card: GpuState | None = None  # the card a per-card detector judges

    def on(self, card: GpuState) -> Context:
        """This context for one card's detectors (a shallow copy: `dataclasses.replace` re-runs `__init__`,
        which cost as much as a quiet card's whole evaluation)."""
        c = copy.copy(self)
        object.__setattr__(c, "card", card)
        return c

    @property
    def st(self) -> GpuState:
        if self.card is None:
            raise TypeError("a per-card detector ran without a card")
        return self.card


class Detector(Protocol):
    """`run` returns this evaluation's detections; it may update the card state it was given."""

    @property
    def name(self) -> str: ...

    @property
    def per_card(self) -> bool: ...

    def run(self, ctx: Context) -> list[Detection]: ...


# ---- one card's memory curve ---------------------------------------------------------------------
def _forecast(v: CurveVerdict, b: BusyPeriod, used: float, cap: float, now: float, top_share: float) -> CurveVerdict:
    """The verdict with the ETA of the card's upper envelope at the rate of the leak confirmed in this busy
    period (the verdict's own while it has one).

    Below the top, the envelope is the reading, or the floor plus the tallest excursion given back lately (of
    any height: `CardJudge._transients`). At the top (the floor at `top_share` of the card) NVML stops
    moving: the allocator frees its cache and retries, so the leak goes on out of sight, eating what was
    free when the card filled plus the cache (which holds freed activations: at most the tallest transient
    this server served), less the room the next forward pass still takes where passes are still seen given
    back (the excursion). The ETA counts that down at the leak's rate from when the card filled; a 30 MB/h
    leak at the top is hours away, a 60 MB/s one seconds."""
    rate = v.leak_bytes_per_second if v.leak else float(b.rate)
    if rate <= 0:
        return replace(v, eta_seconds=None)
    if v.floor_bytes >= top_share * cap:
        if b.full_t is None:
            b.full_t = now
            b.full_free = max(0.0, cap - used)
        left = float(b.tallest) + b.full_free - v.excursion_bytes - rate * (now - b.full_t)
        return replace(v, eta_seconds=max(0.0, left) / rate, leak_bytes_per_second=rate)
    top = max(used, v.floor_bytes + v.excursion_bytes)
    return replace(v, eta_seconds=max(0.0, cap - top) / rate, leak_bytes_per_second=rate)


def _track(
    st: GpuState, v: CurveVerdict, prev: str, phase: str, used: float, cap: float, now: float, cfg: AnalysisConfig
) -> list[Detection]:
    """Keep what the summary tells of the current (or last) busy period; the finished-start finding and
    the growth and headroom findings of a serving card."""
    b = st.busy
    if phase == "starting" and (prev != "starting" or b is None):
        b = st.busy = BusyPeriod(since=now, last=now)
    if b is None:
        return []
    if phase in ("starting", "serving"):
        b.last = now
        b.shape_time[v.shape] = b.shape_time.get(v.shape, 0.0) + cfg.eval_interval_s
        b.peak = max(b.peak, v.peak_bytes)
        if phase == "serving":
            b.tallest = max(b.tallest, v.spike_height_bytes)
        b.growth, b.no_headroom = v.growth or b.growth, v.no_headroom
        if phase == "starting":
            b.start_peak = max(b.start_peak, used)
    if v.leak:
        st.ever_leak, st.last_leak_verdict, st.last_leak_t = True, v, now
        b.leak = True
        b.leak_shape_time[v.shape] = b.leak_shape_time.get(v.shape, 0.0) + cfg.eval_interval_s
        b.rate, b.eta = v.leak_bytes_per_second, v.eta_seconds
    gpu = str(st.info.index)
    out: list[Detection] = []
    if (
        prev == "starting"
        and phase in ("exiting", "idle")
        and not b.leak
        and b.start_peak >= cfg.no_headroom_fraction * cap
    ):
        f = findings.start_does_not_fit(gpu, st.info.uuid, st.lc, b.start_peak, cap, st.info.total_bytes, now)
        out.append(Detection(f, keep_as=f.kind))
    if phase != "serving" or v.leak:
        return out
    if st.shown is not None and st.shown[0] is v:  # the same verdict as last time: the same findings
        return out + [Detection(f) for f in st.shown[1]]
    shown = []
    if v.growth:
        f = findings.growth(gpu, v, cap, now)
        out.append(Detection(f, keep_as="growth"))
        shown.append(f)
    if v.no_headroom:
        f = findings.no_headroom(gpu, v, cap, now)
        out.append(Detection(f, keep_as=f.kind))
        shown.append(f)
    st.shown = (v, shown)
    return out


def _leak_wait(eta: float | None, cfg: AnalysisConfig) -> float:
    """How long a leak verdict must hold before GPUMemoryLeak fires: a share of its ETA, bounded, so a load's
    ramp that will be given back (a cycle, a burst of longer requests) clears first. One rule for every
    source of the verdict: the card's curve and the allocator probe's live tensors."""
    e = eta if eta is not None else float("inf")
    return min(cfg.leak_for_max_s, max(cfg.leak_for_min_s, cfg.leak_for_fraction * e))


def _alloc_confirmed(
    st: GpuState, by_alloc: list[tuple[findings.Finding, Condition | None]], now: float, cfg: AnalysisConfig
) -> list[tuple[findings.Finding, Condition | None]]:
    """The allocator probe's findings, its leak warning held to the curve's confirmation (`_leak_wait`).

    Sampled once a second, a busy server's live tensors are nearly always mid-request, so their floor follows
    a load that ramps up as kept tensors would, for a minute or two, and then dips. A leak keeps rising. The
    probe's own page (its ETA inside the horizon) is not held: a page on a leak says the leak too."""
    leak = next((c for f, c in by_alloc if c is not None and c.alertname == "GPUMemoryLeak"), None)
    if leak is None:
        st.alloc_leak_since, st.alloc_leak_due = None, False
        return by_alloc
    if st.alloc_leak_since is None:
        st.alloc_leak_since = now
    paged = any(c is not None and c.alertname == "GPUOOMImminent" for f, c in by_alloc)
    st.alloc_leak_due = st.alloc_leak_due or paged or now - st.alloc_leak_since >= _leak_wait(leak.eta_seconds, cfg)
    if st.alloc_leak_due:
        return by_alloc
    return [(f, c) for f, c in by_alloc if c is not leak]


def _mean_gap(v: CurveVerdict) -> float:
    """The mean gap between the steps of a leak verdict's rise (0 where it stepped fewer than twice)."""
    if v.last_rise is None or v.leak_since is None or v.steps < 2:
        return 0.0
    return max(0.0, (v.last_rise - v.leak_since) / (v.steps - 1))


def _urgent_on_its_own(v: CurveVerdict, now: float, cfg: AnalysisConfig) -> bool:
    """Does a leak verdict need no confirmation wait? Urgent (its forecast fills the card within the horizon),
    and likely to go on that long by the leak's own age: Gott's rule (`start_eta_ratio`) over the trend's own
    span, not over the climb since the floor was lowest, which at the top of the card holds the cache's own
    warm-up. The wait lets a rise that stops lapse first (late compiles after the cache warmed: fine steps at
    a steady pace for two minutes, urgent for a moment); a leak that has gone on long enough to be likely to
    fill the card needs none. Urgent only: a ramp that stops at the top while its forecast is far off waits
    as any other (the allocator keeping a long generation's tensors)."""
    if not v.urgent or v.eta_seconds is None or v.leak_since is None:
        return False
    return v.eta_seconds <= cfg.start_eta_ratio * (now - v.leak_since)


def _stalled(v: CurveVerdict, now: float, cfg: AnalysisConfig) -> bool:
    """A rise that stepped several times and has not stepped since for `stall_gaps` of its own mean gaps:
    the floor has stopped where a leak would have gone on (a torch.compile or cache staircase that ended).
    The warning waits for the next step; a page does not (its forecast has a check of its own)."""
    gap = _mean_gap(v)
    return gap > 0 and v.last_rise is not None and now - v.last_rise > cfg.stall_gaps * gap


#: How long the leak warning's condition holds before the warning fires (its spec's `for`): raised again this
#: long after it was first, it fired (analysis/alerts.py), and from then on it ends only on evidence.
_LEAK_FOR_S = next(s.for_s for s in ALERT_SPECS if s.name == "GPUMemoryLeak")


def _leak_holds(st: GpuState, v: CurveVerdict, cached: bool, phase: str, now: float, cfg: AnalysisConfig) -> bool:
    """Does a leak warning that is firing hold while its verdict has lapsed? Yes while nothing says the leak
    stopped: the card still serves, its floor gave nothing back since the last leak verdict, the probe's
    live tensors do not explain it as the allocator's cache (`cached`), and its next step is not overdue
    (no step for `stall_gaps` + ln n of its n mean gaps, counted from the last rise that verdict or the present
    one, levelled, saw). `stall_gaps` alone is the odds for one gap (`_stalled`); a held warning is judged
    over the leak's whole life, and a steady process leaves a gap of x means somewhere in its n gaps with
    odds of about n e^-x, so ln n more keeps the same odds for the life.

    A slow staircase (adapters kept a few an hour, a list that grows per request) leaves stretches between
    two steps where no window's trend is significant, and the curve reads its floor as levelled off;
    dropping the warning there resolved it and fired it again at the next step: one leak, a flapping alert.
    A ramp's steps are a block apart, so a ramp that stops lets the warning go within a few blocks."""
    last = st.last_leak_verdict
    if not st.leak_fired or last is None or st.last_leak_t is None or phase != "serving" or cached:
        return False
    gap = _mean_gap(last)
    if gap <= 0 or last.last_rise is None or (st.lc.release_times and st.lc.release_times[-1] > st.last_leak_t):
        return False
    rose = max(last.last_rise, v.last_rise if v.last_rise is not None else last.last_rise)
    return now - rose <= (cfg.stall_gaps + math.log(last.steps - 1)) * gap


class CardCurve:
    """Leak, OOM page and spike risk from one card's curve: its lifecycle, the curve judge (curve.py), the
    allocator probe's say, and the confirmations that make a warning or a page wait a share of its ETA."""

    name = "curve"
    per_card = True

    def run(self, ctx: Context) -> list[Detection]:
        st, cfg, now = ctx.st, ctx.cfg, ctx.now
        out: list[Detection] = []
        gpu, uuid, name = str(st.info.index), st.info.uuid, st.info.name
        cap = st.capacity_bytes
        util = ctx.budget_fraction
        st.budget_bytes = util * st.info.total_bytes if util else None
        used = st.used_now
        lo = st.quiet_lo if st.quiet_lo != float("inf") else used
        hi = st.quiet_hi if st.quiet_hi != float("-inf") else used
        # How far memory moved since the reading the last evaluation saw: read once an evaluation or slower (a
        # 1 Hz recorder, a reading every 5 s), the range within one evaluation is one reading, and a card that
        # jumps by gigabytes between readings would look quiet and have no transient looked for. Only where the
        # transient scan still holds `transient_min_readings`: at a scrape's step it holds one or two and sees
        # none, and a reading off the last verdict's floor re-judges the card anyway (`curve.moved_floor`).
        steps = cfg.transient_min_readings - 1  # the gaps between that many readings
        prev = st.eval_used if st.eval_used is not None and steps * (now - st.eval_t) <= cfg.transient_scan_s else lo
        moved = max(hi, prev) - min(lo, prev)
        st.quiet_lo, st.quiet_hi, st.eval_used, st.eval_t = float("inf"), float("-inf"), used, now
        procs_here = st.sample.procs if st.sample else ()
        pids = frozenset(pid for pid, b in procs_here if b is None or b > 0)
        prev_phase = st.lc.phase
        phase = st.lc.update(now, lo, used, pids, ctx.procs, ctx.engine_up_since, cap, cfg)
        if phase == "starting" and st.lc.kind is None:
            st.lc.refresh_kind(pids, ctx.procs)
        v = st.judge.judge(now, st.history, st.lc, cap, st.info.total_bytes, ctx.warming, moved)
        # The allocator probe's say (live tensors vs cache); it may withdraw a curve leak that is cache. Only
        # while the card has processes: once they are gone, a probe file's last readings are of the dead.
        by_alloc: list[tuple[findings.Finding, Condition | None]] = []
        if phase not in ("idle", "exiting"):
            used_bytes = st.sample.used_bytes if st.sample else None
            v, by_alloc = ctx.alloc.judge_card(gpu, uuid, name, v, cap, used_bytes, now)
        by_alloc = _alloc_confirmed(st, by_alloc, now, cfg)
        for f, c in by_alloc:  # no alert (cache_growth): a finding that holds
            out.append(Detection(f, c) if c is not None else Detection(f, keep_as=f.kind))
        st.verdict = v
        out += _track(st, v, prev_phase, phase, used, cap, now, cfg)
        # Confirmation scales with urgency: wait a share of the ETA (bounded) before warning or paging,
        # so a cycle's ramp that will be given back, or a step that stops, resolves before it fires.
        page = False
        if v.leak and v.urgent and v.eta_seconds is not None:
            band = max(0.0, (v.eta_lo_seconds or v.eta_seconds) - v.eta_seconds)  # the forecast's own spread
            if st.oom_since is None:
                st.oom_since, st.oom_at = now, now + v.eta_seconds + band
            st.oom_last = now
            wait = (
                v.confirm_s if v.confirm_s is not None else min(cfg.oom_for_max_s, cfg.oom_for_fraction * v.eta_seconds)
            )
            page = now - st.oom_since >= wait
            if page and wait > 0 and now + v.eta_seconds > st.oom_at + (now - st.oom_since):
                # The forecast did not hold while it was confirmed: the moment it puts the OOM receded, beyond
                # its own spread, by all the time waited (its ETA did not shrink at all: a climb slowing toward
                # its peak, as load does; a leak keeps its date, whatever the noise of its rate). Confirm again
                # from the forecast as it stands now.
                page = False
                st.oom_since, st.oom_at = now, now + v.eta_seconds + band
        elif st.oom_since is not None and now - st.oom_last > cfg.confirm_gap_s:
            st.oom_since = None  # one odd evaluation does not restart the confirmation
        b = st.busy
        at_top = v.floor_bytes >= cfg.no_headroom_fraction * cap  # the allocator's cache hides what comes next
        if b is not None and not at_top:
            b.full_t = None  # below the top: a later return to it fills the card anew (`_forecast` counts from it)
        leak_due = False  # the leak verdict has held its own confirmation (or the first forecast pages)
        if v.leak:
            if st.leak_since is None:
                st.leak_since = now
            wait = _leak_wait(v.eta_seconds, cfg)
            # A leak at the top of the card that is urgent on its own evidence confirms at once
            # (`_urgent_on_its_own`). There the allocator serves the leak from its cache, out of NVML's sight:
            # the curve stops moving, the verdict's ETA (at NVML's pace) goes to none and the verdict lapses
            # before either wait ends, and the OOM comes unpaged. Confirmed, the top's forecast (`_forecast`)
            # counts that cache down at the leak's rate.
            leak_due = (
                page
                or st.leak_due
                or (
                    (now - st.leak_since >= wait or (at_top and _urgent_on_its_own(v, now, cfg)))
                    and not _stalled(v, now, cfg)
                )
            )
            st.leak_due = leak_due
            if leak_due and b is not None:
                b.leak_confirmed = True
        else:
            st.leak_since, st.leak_due = None, False
        pv = v
        if (
            not page
            and phase == "serving"
            and b is not None
            and b.leak_confirmed
            and (at_top or (v.leak and (b.paging or not v.seasonal)))
        ):
            # The forecast from the leak this busy period confirmed, while it holds (not a level the card
            # reached before and gave back: a cycle coming round) or once it has filled the card; hysteresis
            # of twice the horizon while paged. At its last rate, is the card full within the horizon? A
            # leak that filled the card leaves only the allocator's cache, which runs out at a moment NVML
            # cannot see, so the last known rate is the forecast; a slow leak near the top (30 MB/h) is hours
            # away.
            pv = _forecast(v, b, used, cap, now, cfg.no_headroom_fraction)
            fill = pv.eta_seconds
            limit = cfg.oom_horizon_s * (cfg.oom_bound_factor if b.paging else 1.0)
            # the page lands with the horizon still ahead: the same allowance as `CardJudge._urgent`
            allowance = min(cfg.oom_for_max_s, cfg.oom_for_fraction * fill) if fill is not None else 0.0
            page = fill is not None and fill <= limit + allowance + cfg.oom_lead_margin_s
        said = v.leak and (leak_due or page)  # a page on a leak says the leak too, whichever forecast paged
        cached = any(f.kind == "cache_growth" for f, _ in by_alloc)
        if said or _leak_holds(st, v, cached, phase, now, cfg):
            lv = v if said else st.last_leak_verdict  # a lapsed verdict that still holds: its last evidence
            f, c = findings.leak(gpu, uuid, name, lv or v, cap, st.info.total_bytes, now)
            out.append(Detection(f, c))
            st.leak_said_since = now if st.leak_said_since is None else st.leak_said_since
            st.leak_fired = st.leak_fired or now - st.leak_said_since >= _LEAK_FOR_S  # as the alert book fires it
        else:
            st.leak_said_since, st.leak_fired = None, False
        if b is not None:
            b.paging = page
        if page:
            f, c = findings.oom_imminent(gpu, uuid, name, pv, cap, cfg.oom_horizon_s, now)
            out.append(Detection(f, c))
        if v.spike_risk:
            f, c = findings.spike_risk(gpu, uuid, name, v, cap, cfg.spike_margin, now)
            out.append(Detection(f, c))
        return out


class Strays:
    """Processes holding memory on a card outside the served process tree (GPUStrayProcess)."""

    name = "strays"
    per_card = True

    def run(self, ctx: Context) -> list[Detection]:
        st = ctx.st
        out = []
        for pid, held in st.sample.procs if st.sample else ():
            r = ctx.roles.get(pid)
            if r is not None and r.role == "stray":
                f, c = findings.stray(str(st.info.index), st.info.uuid, pid, ctx.procs.get(pid), held, r.why, ctx.now)
                out.append(Detection(f, c))
        return out


# ---- across cards and beside them ----------------------------------------------------------------
class Visibility:
    """What the watch cannot see: PIDs of another namespace, MIG instances NVML does not open (info)."""

    name = "visibility"
    per_card = False

    def run(self, ctx: Context) -> list[Detection]:
        out = []
        invisible = [pid for pid in ctx.holders if pid in ctx.procs and not ctx.procs[pid].visible]
        if invisible:
            out.append(Detection(findings.pids_invisible(invisible, ctx.now), keep_as="pids_invisible"))
        for f in mig_findings(ctx.gpus.values(), ctx.now):  # MIG on, instances unreadable: the watch is coarse
            out.append(Detection(f, keep_as="mig_unreadable"))
        return out


class Imbalance:
    """Cards of one server that differ, or one card idle beside a full one (GPUMemoryImbalance)."""

    name = "imbalance"
    per_card = False

    def run(self, ctx: Context) -> list[Detection]:
        cfg, now = ctx.cfg, ctx.now
        loads = []
        for idx, st in ctx.gpus.items():
            used, cap, phase = st.used_now, st.capacity_bytes, st.lc.phase
            procs_here = st.sample.procs if st.sample else ()
            group = card_group(procs_here, ctx.roles) if any(pid in ctx.roles for pid, _ in procs_here) else None
            # A card whose process just exited is neither idle beside a full one nor a spread: it is leaving.
            just_left = phase == "exiting" or (
                phase == "idle" and st.lc.idle_since is not None and now - st.lc.idle_since < cfg.idle_card_min_s
            )
            if not just_left:
                idle = phase == "idle" or used < cfg.idle_fraction * cap  # a bare CUDA context is idle
                # a rank leaks once its warning's confirmation has held, not on one evaluation's verdict: a trend
                # at its edge flickers, and on ranks that all leak it flickers on one while the others lag
                leaked = st.busy is not None and st.busy.leak_confirmed
                loads.append(CardLoad(str(idx), used, cap, group, idle, st.leak_due or st.alloc_leak_due, leaked))
        return [
            Detection(*findings.imbalance(imb, now))
            for imb in find_imbalance(loads, cfg.imbalance_fraction, cfg.busy_fraction)
        ]


class KvPressure:
    """An engine's KV cache nearly full while requests wait or are swapped (KVCachePressure)."""

    name = "kv_pressure"
    per_card = False

    def run(self, ctx: Context) -> list[Detection]:
        out = []
        ratio = ctx.cfg.kv_pressure_ratio
        for e in ctx.engines:
            for snap in e.engines or (e,):
                kv = snap.kv_cache_usage_ratio
                if (
                    snap.up
                    and kv is not None
                    and kv >= ratio
                    and ((snap.requests_waiting or 0) > 0 or (snap.requests_swapped or 0) > 0)
                ):
                    out.append(Detection(*findings.kv_pressure(snap, ratio, ctx.now)))
        return out


class TelemetryDown:
    """A source that stopped answering (GPUTelemetryDown)."""

    name = "telemetry"
    per_card = False

    def run(self, ctx: Context) -> list[Detection]:
        return [
            Detection(*findings.telemetry_down(name, s.error, ctx.now)) for name, s in ctx.sources.items() if not s.up
        ]


class HostRam:
    """A server process's resident host memory growing while GPU memory is flat (HostMemoryLeak)."""

    name = "host_ram"
    per_card = False

    def run(self, ctx: Context) -> list[Detection]:
        gpu_flat = not any(s.verdict.leak for s in ctx.gpus.values())
        return [Detection(f, c) for f, c in ctx.hostmem.judge(ctx.now, ctx.roles, ctx.procs, gpu_flat)]


def default_detectors() -> list[Detector]:
    """Every detector, in the order their findings are told."""
    return [CardCurve(), Strays(), Visibility(), Imbalance(), KvPressure(), TelemetryDown(), HostRam()]
