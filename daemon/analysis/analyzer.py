"""The incremental analysis shared by the daemon, `oomwatch replay` and `oomwatch diagnose`.

Samples and process descriptions go in as they come; every `eval_interval_s` of sample time each card's
lifecycle is updated (lifecycle.py: idle, starting, serving, exiting), its curve judged at the scales
where growth shows (curve.py over history.py, with trend.py's statistics), and the alert book updated.
Warnings and pages are confirmed for a share of their ETA, so a cycle's ramp or a step that stops clears
before anyone is paged; an alert that fires opens an episode (what fired, when, on what evidence, how it
ended) that the summary tells after the fact. No I/O: the caller feeds it and reads `summary()`. Running
the same object over a trace and live is what makes a replayed verdict the verdict the daemon would give.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from ..config import AlertTiming, AnalysisConfig
from ..model import AllocSample, EngineSnapshot, GpuInfo, GpuSample, ProcInfo, Sample, SourceStatus
from . import findings
from .alerts import AlertBook, Transition
from .allocator import AllocBook
from .curve import CardJudge, CurveVerdict
from .history import History
from .hostmem import HostLimit, HostMemJudge
from .imbalance import CardLoad, find_imbalance
from .lifecycle import Lifecycle
from .mig import mig_findings
from .processes import GroupChange, GroupTracker, ProcRole, card_group, classify


@dataclass
class GpuState:
    info: GpuInfo
    history: History
    lc: Lifecycle
    judge: CardJudge
    sample: GpuSample | None = None
    verdict: CurveVerdict = field(default_factory=lambda: CurveVerdict("idle"))
    capacity_bytes: float = 0.0
    budget_bytes: float | None = None
    peak_used_bytes: int = 0
    busy: dict[str, Any] = field(default_factory=dict)  # the current (or last) busy period: shapes, leak, peaks
    oom_since: float | None = None  # when the OOM projection became urgent (its confirmation clock)
    leak_since: float | None = None  # when the leak verdict began (its confirmation clock)
    oom_last: float = 0.0  # the last evaluation that found the projection urgent
    # (verdict, the info findings built from it): rebuilt only when the verdict changes
    shown: tuple[CurveVerdict, list[findings.Finding]] | None = None
    ever_leak: bool = False  # for the plot: the strongest leak verdict seen, and when
    last_leak_verdict: CurveVerdict | None = None
    last_leak_t: float | None = None
    quiet_lo: float = float("inf")  # range of used bytes since the last evaluation
    quiet_hi: float = float("-inf")

    @property
    def busy_since(self) -> float | None:
        """When the current (or last) busy period began (its start)."""
        return self.busy.get("since") if self.busy else None

    @property
    def warm_end(self) -> float | None:
        """When that period's start ended (None while it is still starting)."""
        s = self.lc.serving_since
        return s if s is not None and self.busy_since is not None and s >= self.busy_since else None

    @property
    def series(self) -> History:
        """The history (its `arrays()` is the finest level: the last 15 minutes)."""
        return self.history


def _new_busy(now: float) -> dict[str, Any]:
    return {
        "since": now,
        "shape_time": Counter(),
        "leak_shape_time": Counter(),
        "leak": False,
        "rate": 0.0,
        "eta": None,
        "peak": 0.0,
        "start_peak": 0.0,
        "last": now,
        "growth": "",
        "no_headroom": False,
    }


def _forecast(v: CurveVerdict, st: GpuState, used: float, cap: float, now: float, top_share: float) -> CurveVerdict:
    """The verdict with the ETA of the card's upper envelope at the rate of the leak confirmed in this busy
    period (the verdict's own while it has one).

    Below the top, the envelope is the reading, or the floor plus the tallest recent transient. At the top
    (the floor at `top_share` of the card) NVML stops moving: the allocator frees its cache and retries, so
    the leak goes on out of sight, eating what was free when the card filled plus the cache (which holds
    freed activations: at most the tallest transient this server served). The ETA counts that down at the
    leak's rate from when the card filled; a 30 MB/h leak at the top is hours away, a 60 MB/s one seconds."""
    b = st.busy
    rate = v.leak_bytes_per_second if v.leak else float(b.get("rate", 0.0))
    if rate <= 0:
        return replace(v, eta_seconds=None)
    if v.floor_bytes >= top_share * cap:
        if b.get("full_t") is None:
            b["full_t"] = now
            b["full_free"] = max(0.0, cap - used)
        left = float(b.get("tallest", 0.0)) + b["full_free"] - rate * (now - b["full_t"])
        return replace(v, eta_seconds=max(0.0, left) / rate, leak_bytes_per_second=rate)
    b["full_t"] = None
    top = max(used, v.floor_bytes + v.spike_height_bytes)
    return replace(v, eta_seconds=max(0.0, cap - top) / rate, leak_bytes_per_second=rate)


#: Alerts about one card's memory curve: they end when the card's processes are gone.
CARD_EPISODE_ALERTS = ("GPUMemoryLeak", "GPUOOMImminent", "GPUMemorySpikeRisk")
#: Finding kinds that raise no alert (shown, never paged).
#: A finding's place in `Analyzer.fired`: (kind, gpu, pid, the labels of its alert; () for none).
FiredKey = tuple[str, str | None, int | None, tuple[tuple[str, str], ...]]
NO_ALERT = ("pids_invisible", "mig_unreadable", "cache_growth", "plateau", "no_headroom", "start_does_not_fit")


class Analyzer:
    def __init__(
        self,
        gpus: tuple[GpuInfo, ...] | list[GpuInfo],
        cfg: AnalysisConfig | None = None,
        timing: AlertTiming | None = None,
        server_pids: set[int] | None = None,
        engines_expected: bool = False,
    ):
        self.cfg = cfg or AnalysisConfig()
        self.book = AlertBook(timing)
        self.gpus: dict[int, GpuState] = {
            g.index: GpuState(
                g, History(self.cfg.history_levels), Lifecycle(), CardJudge(self.cfg), capacity_bytes=g.total_bytes
            )
            for g in gpus
        }
        self.procs: dict[int, ProcInfo] = {}
        self._proc_seen: dict[int, float] = {}  # last time a PID held memory (to forget churned PIDs)
        self.roles: dict[int, ProcRole] = {}
        self.hostmem = HostMemJudge()  # host RAM trend per server process (HostMemoryLeak)
        self.groups = GroupTracker()  # server groups over time (analysis/processes.py)
        self.group_changes: list[GroupChange] = []  # of the last evaluation: a server's start or its end
        self.alloc = AllocBook(
            self.cfg.allocator, self.cfg.oom_horizon_s
        )  # PyTorch allocator per (card, process), from the probe
        self.server_pids = set(server_pids or ())
        self.engines: list[EngineSnapshot] = []
        self.engines_expected = engines_expected
        self.engine_up_since: float | None = None
        self.sources: dict[str, SourceStatus] = {}
        self.now: float | None = None
        self.samples = 0
        self.t0: float | None = None
        self._next_eval: float | None = None
        self.transitions: list[Transition] = []
        self.findings: list[findings.Finding] = []  # current
        self.fired: dict[FiredKey, findings.Finding] = {}  # every finding whose alert fired, latest evidence
        self.episodes: deque[dict[str, Any]] = deque(maxlen=256)  # what fired when, on what evidence, how it ended
        # episodes still firing, by alert key
        self._open: dict[tuple[str, tuple[tuple[str, str], ...]], dict[str, Any]] = {}

    # ---- input -------------------------------------------------------------------------------
    def add_rss(self, t: float, rss: Iterable[tuple[int, int]], limit: HostLimit | None = None) -> None:
        """One process scan's resident host memory: [(pid, bytes), ...] (see analysis/hostmem.py)."""
        self.hostmem.add(t, rss, limit)

    def add_alloc(self, a: AllocSample) -> None:
        """One process's allocator reading on one card (the in-process probe; analysis/allocator.py)."""
        self.alloc.add(a)

    def add_proc(self, p: ProcInfo) -> None:
        self.procs[p.pid] = p
        # Seen now, even if no evaluation catches it holding memory (a PID that lives less than one).
        self._proc_seen.setdefault(p.pid, self.now if self.now is not None else 0.0)

    def set_engines(self, snaps: list[EngineSnapshot]) -> None:
        self.engines = list(snaps)

    def set_source(self, status: SourceStatus) -> None:
        self.sources[status.name] = status

    def add_sample(self, s: Sample) -> list[Transition]:
        """Fold one sample in; returns the alert transitions if an evaluation ran."""
        t = s.t
        if self.t0 is None:
            self.t0 = t
            self._next_eval = t + self.cfg.eval_interval_s
        self.now = t
        self.samples += 1
        for g in s.gpus:
            st = self.gpus.get(g.index)
            if st is None:
                continue
            st.sample = g
            if g.used_bytes is None:
                continue
            u = g.used_bytes
            st.history.add(t, u)
            if u < st.quiet_lo:
                st.quiet_lo = u
            if u > st.quiet_hi:
                st.quiet_hi = u
            if g.used_bytes > st.peak_used_bytes:
                st.peak_used_bytes = g.used_bytes
            if g.reserved_bytes is not None:
                st.capacity_bytes = st.info.total_bytes - g.reserved_bytes
        if self._next_eval is None or t >= self._next_eval:
            self._next_eval = t + self.cfg.eval_interval_s
            return self.evaluate(t)
        return []

    # ---- evaluation --------------------------------------------------------------------------
    def _engine_budget(self) -> float | None:
        for e in self.engines:
            if e.up and e.gpu_memory_utilization:
                return e.gpu_memory_utilization
        return self.cfg.gpu_memory_utilization_default

    def evaluate(self, now: float) -> list[Transition]:
        cfg = self.cfg
        conds = []
        cur: list[findings.Finding] = []
        util = self._engine_budget()
        engine_up = any(e.up for e in self.engines)
        if engine_up and self.engine_up_since is None:
            self.engine_up_since = now
        warming = (
            self.engines_expected
            and self.engine_up_since is None
            and self.t0 is not None
            and now - self.t0 < cfg.engine_warmup_max_s
        )

        # Who holds what, per card and in total.
        holders: dict[int, float] = {}
        on_cards: dict[int, set[int]] = {}
        for idx, st in self.gpus.items():
            for pid, b in st.sample.procs if st.sample else ():
                holders[pid] = holders.get(pid, 0.0) + (b or 0)
                if b is None or b > 0:
                    on_cards.setdefault(pid, set()).add(idx)
        self.roles = classify(holders, self.procs, self.server_pids, on_cards) if holders else {}
        self.group_changes = self.groups.update(self.roles, now)  # servers started / ended (all PIDs gone)
        self._forget(now, holders)

        loads = []
        for idx, st in self.gpus.items():
            gpu, uuid, name = str(idx), st.info.uuid, st.info.name
            cap = st.capacity_bytes
            st.budget_bytes = util * st.info.total_bytes if util else None
            used = float(st.sample.used_bytes) if st.sample and st.sample.used_bytes is not None else 0.0
            lo = st.quiet_lo if st.quiet_lo != float("inf") else used
            moved = st.quiet_hi - lo if st.quiet_hi != float("-inf") else 0.0
            st.quiet_lo, st.quiet_hi = float("inf"), float("-inf")
            procs_here = st.sample.procs if st.sample else ()
            pids = frozenset(pid for pid, b in procs_here if b is None or b > 0)
            prev_phase = st.lc.phase
            phase = st.lc.update(now, lo, used, pids, self.procs, self.engine_up_since, cap, cfg)
            if phase == "starting" and st.lc.kind is None:
                st.lc.refresh_kind(pids, self.procs)
            v = st.judge.judge(now, st.history, st.lc, cap, st.info.total_bytes, warming, moved)
            # The allocator probe's say (live tensors vs cache); it may withdraw a curve leak that is cache.
            v, by_alloc = self.alloc.judge_card(
                gpu, uuid, name, v, cap, st.sample.used_bytes if st.sample else None, now
            )
            for f, c in by_alloc:
                cur.append(f)
                if c is not None:
                    conds.append(c)
                else:
                    self.fired[(f.kind, gpu, f.pid, ())] = f  # no alert (cache_growth): a finding that holds
            st.verdict = v
            self._track(st, v, prev_phase, phase, used, cap, now, cur)
            # Confirmation scales with urgency: wait a share of the ETA (bounded) before warning or paging,
            # so a cycle's ramp that will be given back, or a step that stops, resolves before it fires.
            page = False
            if v.leak and v.urgent and v.eta_seconds is not None:
                if st.oom_since is None:
                    st.oom_since = now
                st.oom_last = now
                wait = (
                    v.confirm_s
                    if v.confirm_s is not None
                    else min(cfg.oom_for_max_s, cfg.oom_for_fraction * v.eta_seconds)
                )
                page = now - st.oom_since >= wait
            elif st.oom_since is not None and now - st.oom_last > cfg.confirm_gap_s:
                st.oom_since = None  # one odd evaluation does not restart the confirmation
            if v.leak:
                if st.leak_since is None:
                    st.leak_since = now
                eta = v.eta_seconds if v.eta_seconds is not None else float("inf")
                wait = min(cfg.leak_for_max_s, max(cfg.leak_for_min_s, cfg.leak_for_fraction * eta))
                if page or now - st.leak_since >= wait:
                    f, c = findings.leak(gpu, uuid, name, v, cap, st.info.total_bytes, now)
                    cur.append(f)
                    conds.append(c)
                    st.busy["leak_confirmed"] = True
            else:
                st.leak_since = None
            pv = v
            if (
                not page
                and phase == "serving"
                and st.busy.get("leak_confirmed")
                and (v.floor_bytes >= cfg.no_headroom_fraction * cap or (v.leak and st.busy.get("paging")))
            ):
                # The forecast from the leak this busy period confirmed, once it has filled the card, or while it
                # is paged (hysteresis: twice the horizon; below the top the curve's own urgency, seasonality
                # included, decides the first page): at its last rate, is the card full within the horizon? A leak that filled
                # the card leaves only the allocator's cache, which runs out at a moment NVML cannot see, so
                # the last known rate is the forecast; a slow leak near the top (30 MB/h) is hours away.
                pv = _forecast(v, st, used, cap, now, cfg.no_headroom_fraction)
                eta = pv.eta_seconds
                limit = cfg.oom_horizon_s * (cfg.oom_bound_factor if st.busy.get("paging") else 1.0)
                # the page lands with the horizon still ahead: the same confirmation allowance as `_urgent`
                allowance = min(cfg.oom_for_max_s, cfg.oom_for_fraction * eta) if eta is not None else 0.0
                page = eta is not None and eta <= limit + allowance + cfg.oom_lead_margin_s
            if st.busy:
                st.busy["paging"] = page
            if page:
                f, c = findings.oom_imminent(gpu, uuid, name, pv, cap, cfg.oom_horizon_s, now)
                cur.append(f)
                conds.append(c)
            if v.spike_risk:
                f, c = findings.spike_risk(gpu, uuid, name, v, cap, cfg.spike_margin, now)
                cur.append(f)
                conds.append(c)
            # Strays on this card.
            roles_here = []
            for pid, b in st.sample.procs if st.sample else ():
                r = self.roles.get(pid)
                if r is None:
                    continue
                roles_here.append(r.role)
                if r.role == "stray":
                    f, c = findings.stray(gpu, uuid, pid, self.procs.get(pid), b, r.why, now)
                    cur.append(f)
                    conds.append(c)
            group = card_group(procs_here, self.roles) if roles_here else None
            # A card whose process just exited is neither idle beside a full one nor a spread: it is leaving.
            just_left = phase == "exiting" or (
                phase == "idle" and st.lc.idle_since is not None and now - st.lc.idle_since < cfg.idle_card_min_s
            )
            if not just_left:
                idle = phase == "idle" or used < cfg.idle_fraction * cap  # a bare CUDA context is idle
                loads.append(CardLoad(gpu, used, cap, group, idle, v.leak))

        invisible = [pid for pid in holders if pid in self.procs and not self.procs[pid].visible]
        if invisible:
            f = findings.pids_invisible(invisible, now)
            cur.append(f)
            self.fired[("pids_invisible", None, None, ())] = f
        for f in mig_findings(self.gpus.values(), now):  # MIG on, instances unreadable: say the watch is coarse
            cur.append(f)
            self.fired[("mig_unreadable", f.gpu, None, ())] = f

        for imb in find_imbalance(loads, cfg.imbalance_fraction, cfg.busy_fraction):
            f, c = findings.imbalance(imb, now)
            cur.append(f)
            conds.append(c)

        for e in self.engines:
            for snap in e.engines or (e,):
                kv = snap.kv_cache_usage_ratio
                if (
                    snap.up
                    and kv is not None
                    and kv >= cfg.kv_pressure_ratio
                    and ((snap.requests_waiting or 0) > 0 or (snap.requests_swapped or 0) > 0)
                ):
                    f, c = findings.kv_pressure(snap, cfg.kv_pressure_ratio, now)
                    cur.append(f)
                    conds.append(c)
        for name, s in self.sources.items():
            if not s.up:
                f, c = findings.telemetry_down(name, s.error, now)
                cur.append(f)
                conds.append(c)

        for f, c in self.hostmem.judge(
            now, self.roles, self.procs, not any(s.verdict.leak for s in self.gpus.values())
        ):
            cur.append(f)
            conds.append(c)
        self.findings = cur
        trans = self.book.update(now, conds)
        for idx, st in self.gpus.items():  # a card whose processes are gone ends its memory episodes now
            if st.lc.phase in ("idle", "exiting"):
                trans += self.book.end(now, CARD_EPISODE_ALERTS, str(idx))
        firing_keys = {(a.alertname, a.labels) for a in self.book.firing()}
        by_alert = {
            "leak": "GPUMemoryLeak",
            "oom_imminent": "GPUOOMImminent",
            "spike_risk": "GPUMemorySpikeRisk",
            "stray": "GPUStrayProcess",
            "imbalance": "GPUMemoryImbalance",
            "kv_pressure": "KVCachePressure",
            "telemetry_down": "GPUTelemetryDown",
            "host_ram_leak": "HostMemoryLeak",
        }
        alerting = [f for f in cur if f.kind not in NO_ALERT]  # each has one condition in `conds`, in order
        for f, c in zip(alerting, conds, strict=False):
            if (by_alert[f.kind], c.labels) in firing_keys:
                self.fired[(f.kind, f.gpu, f.pid, c.labels)] = f
        self._episodes(trans, now)
        self.book.prune(now)
        self.transitions.extend(trans)
        if len(self.transitions) > 10000:
            del self.transitions[:-5000]
        return trans

    def _forget(self, now: float, holders: dict[int, float]) -> None:
        """Bound memory under PID churn: forget processes gone for 10 minutes (parents of holders stay)."""
        for pid in holders:
            self._proc_seen[pid] = now
        if len(self.procs) < 256 and len(self.fired) < 512:
            return
        parents = {self.procs[p].ppid for p in holders if p in self.procs}
        for pid in list(self.procs):
            if pid not in holders and pid not in parents and now - self._proc_seen.get(pid, now) > 600:
                del self.procs[pid]
                self._proc_seen.pop(pid, None)
        if len(self.fired) >= 512:  # keep the newest findings
            for key in sorted(self.fired, key=lambda k: self.fired[k].t or 0)[: len(self.fired) - 256]:
                del self.fired[key]

    def _track(
        self,
        st: GpuState,
        v: CurveVerdict,
        prev: str,
        phase: str,
        used: float,
        cap: float,
        now: float,
        cur: list[findings.Finding],
    ) -> None:
        """Keep what the summary tells of the current (or last) busy period, and the finished-start finding."""
        b = st.busy
        if phase == "starting" and (prev != "starting" or not b):
            b = st.busy = _new_busy(now)
        if not b:
            return
        if phase in ("starting", "serving"):
            b["last"] = now
            b["shape_time"][v.shape] += self.cfg.eval_interval_s
            b["peak"] = max(b["peak"], v.peak_bytes)
            if phase == "serving":
                b["tallest"] = max(b.get("tallest", 0.0), v.spike_height_bytes)
            b["growth"], b["no_headroom"] = v.growth or b["growth"], v.no_headroom
            if phase == "starting":
                b["start_peak"] = max(b["start_peak"], used)
        if v.leak:
            st.ever_leak, st.last_leak_verdict, st.last_leak_t = True, v, now
            b["leak"] = True
            b["leak_shape_time"][v.shape] += self.cfg.eval_interval_s
            b["rate"], b["eta"] = v.leak_bytes_per_second, v.eta_seconds
        gpu = str(st.info.index)
        if (
            prev == "starting"
            and phase in ("exiting", "idle")
            and not b["leak"]
            and b["start_peak"] >= self.cfg.no_headroom_fraction * cap
        ):
            f = findings.start_does_not_fit(gpu, st.info.uuid, st.lc, b["start_peak"], cap, st.info.total_bytes, now)
            self.fired[(f.kind, gpu, None, ())] = f
            cur.append(f)
        if phase != "serving" or v.leak:
            return
        if st.shown is not None and st.shown[0] is v:  # the same verdict as last time: the same findings
            cur.extend(st.shown[1])
            return
        shown = []
        if v.growth:
            f = findings.growth(gpu, v, cap, now)
            self.fired[("growth", gpu, None, ())] = f
            shown.append(f)
        if v.no_headroom:
            f = findings.no_headroom(gpu, v, cap, now)
            self.fired[("no_headroom", gpu, None, ())] = f
            shown.append(f)
        st.shown = (v, shown)
        cur.extend(shown)

    def _episodes(self, trans: list[Transition], now: float) -> None:
        """Open an episode when an alert fires, keep its strongest evidence, close it with the reason."""
        for tr in trans:
            a = tr.alert
            key = (a.alertname, a.labels)
            labels = dict(a.labels)
            if tr.state == "firing":
                ep: dict[str, Any] = {
                    "alert": a.alertname,
                    "gpu": labels.get("gpu"),
                    "pid": int(labels["pid"]) if labels.get("pid", "").isdigit() else None,
                    "start": round(tr.t, 3),
                    "end": None,
                    "shape": None,
                    "leak_bytes_per_second": None,
                    "eta_seconds": None,
                    "evidence": a.summary,
                    "ended_because": None,
                }
                self._open[key] = ep
                self.episodes.append(ep)
            elif key in self._open:
                ep = self._open.pop(key)
                ep["end"] = round(tr.t, 3)
                ep["ended_because"] = self._why_ended(ep, now)
        for ep in self._open.values():
            st = self.gpus.get(int(ep["gpu"])) if (ep["gpu"] or "").isdigit() else None
            if st is None:
                continue
            v = st.verdict
            strongest = ep["leak_bytes_per_second"]
            if v.leak and (strongest is None or v.leak_bytes_per_second >= strongest):
                ep["shape"], ep["leak_bytes_per_second"] = v.shape, round(v.leak_bytes_per_second, 1)
                ep["eta_seconds"] = None if v.eta_seconds is None else round(v.eta_seconds, 1)
                ep["evidence"] = v.why or ep["evidence"]
            elif ep["shape"] is None:
                ep["shape"] = v.shape

    def end_input(self) -> list[Transition]:
        """The input ended (a replay without --loop): resolve every alert and close its episode, so nothing
        stays paged and the episodes say so."""
        if self.now is None:
            return []
        trans = self.book.resolve_all(self.now)
        closing = [self._open.get((tr.alert.alertname, tr.alert.labels)) for tr in trans]
        self._episodes(trans, self.now)
        for ep in closing:
            if ep is not None:
                ep["ended_because"] = "the trace ended while it still held"
        self.transitions.extend(trans)
        return trans

    def _why_ended(self, ep: dict[str, Any], now: float) -> str:
        st = self.gpus.get(int(ep["gpu"])) if (ep["gpu"] or "").isdigit() else None
        if st is None:
            return "its condition cleared"
        lc, v = st.lc, st.verdict
        if lc.phase in ("idle", "exiting"):
            return "the process exited and its memory was given back"
        if lc.phase == "starting":
            return "a new start began on the card"
        if ep["alert"] in ("GPUMemoryLeak", "GPUOOMImminent"):
            if v.floor_bytes < st.busy.get("peak", 0.0) - max(self.cfg.transient_fraction * st.capacity_bytes, 1.0):
                return "memory was given back"
            return "the growth stopped (the floor levelled off)"
        return "its condition cleared"

    # ---- output ------------------------------------------------------------------------------
    def summary_shape(self, st: GpuState) -> str:
        """The shape of the current busy period (of the last one when the card is idle now)."""
        b = st.busy
        if not b:
            return "idle"
        if b.get("leak_confirmed") and b["leak_shape_time"]:  # a leak the alert confirmed, not a passing verdict
            return str(b["leak_shape_time"].most_common(1)[0][0])
        served = Counter({k: n for k, n in b["shape_time"].items() if k != "idle"})
        return served.most_common(1)[0][0] if served else "idle"

    def verdict_text(self, st: GpuState) -> str:
        """One plain sentence of the card's state now."""
        from ..report import verdict_sentence

        return verdict_sentence(self, st)

    def summary(self) -> dict[str, Any]:
        """The state at the end (per GPU: shape, leak, ETA of its current or last busy period; phase and a
        sentence of now), the findings that hold or fired, and the episodes (see DESIGN.md)."""
        gpus = {}
        for idx, st in self.gpus.items():
            b = st.busy
            gpus[str(idx)] = {
                "shape": self.summary_shape(st),
                "leak": bool(b.get("leak_confirmed", False)),
                "leak_bytes_per_second": round(b.get("rate", 0.0), 1),
                "eta_seconds": None if b.get("eta") is None else round(b["eta"], 1),
                "peak_used_bytes": int(st.peak_used_bytes),
                "phase": st.lc.phase,
                "verdict": self.verdict_text(st),
            }
        holding = {(f.kind, f.gpu, f.pid) for f in self.findings}
        fs = sorted(self.fired.values(), key=lambda f: (findings.SEVERITY_ORDER.get(f.severity, 9), f.t or 0))
        seconds = 0.0 if self.t0 is None or self.now is None else self.now - self.t0
        return {
            "gpus": gpus,
            # Each finding that fired, with its advice (a post-mortem needs it); `holds` says whether it still
            # holds at the end. What happened when, and how it ended, is in the episodes.
            "findings": [{**f.to_json(), "holds": (f.kind, f.gpu, f.pid) in holding} for f in fs],
            "episodes": [dict(e) for e in self.episodes],
            "samples": self.samples,
            "seconds": round(seconds, 3),
        }
