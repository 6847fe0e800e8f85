"""The incremental analysis shared by the daemon, `oomwatch replay` and `oomwatch diagnose`.

Samples and process descriptions go in as they come; every `eval_interval_s` of sample time the detectors
run (detectors.py: each card's lifecycle, idle, starting, serving, exiting, and its curve judged at the
scales where growth shows, curve.py over history.py with trend.py's statistics; strays, imbalance, KV
pressure, telemetry, host RAM), each isolated from the others, and the alert book is updated.
Warnings and pages are confirmed for a share of their ETA, so a cycle's ramp or a step that stops clears
before anyone is paged; an alert that fires opens an episode (what fired, when, on what evidence, how it
ended) that the summary tells after the fact. No I/O: the caller feeds it and reads `summary()`. Running
the same object over a trace and live is what makes a replayed verdict the verdict the daemon would give.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Iterable
from typing import Any

from ..config import CARD_ALERTS, AlertTiming, AnalysisConfig
from ..model import AllocSample, EngineSnapshot, GpuInfo, ProcInfo, Sample, SourceStatus
from . import findings
from .alerts import AlertBook, Transition
from .allocator import AllocBook
from .cards import BusyPeriod, GpuState
from .curve import CardJudge
from .detectors import Context, Detection, Detector, default_detectors
from .history import History
from .hostmem import HostLimit, HostMemJudge
from .lifecycle import Lifecycle
from .processes import GroupChange, GroupTracker, ProcRole, classify

__all__ = ["CARD_EPISODE_ALERTS", "Analyzer", "BusyPeriod", "FiredKey", "GpuState"]

log = logging.getLogger("oomwatch.analysis")

#: Alerts about one card's memory curve: they end when the card's processes are gone (`card_scoped` specs).
CARD_EPISODE_ALERTS = CARD_ALERTS
#: A finding's place in `Analyzer.fired`: (kind, gpu, pid, the labels of its alert; () for none).
FiredKey = tuple[str, str | None, int | None, tuple[tuple[str, str], ...]]


def _most(seconds: dict[str, float]) -> str:
    """The shape judged longest (the first one seen among equals, as Counter.most_common)."""
    return max(seconds.items(), key=lambda kv: kv[1])[0]


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
        self.detectors: list[Detector] = default_detectors()  # run in this order (detectors.py)
        self.analysis_errors: Counter[str] = Counter()  # per detector: the runs that raised (per card if per-card)
        self._logged_errors: set[str] = set()  # detectors whose failure was logged (once each)
        self._last_error: dict[str, str] = {}  # per detector: its last exception, as one line

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

    def _context(self, now: float) -> Context:
        """Who holds what, per card and in total; the roles and server groups; the engine's budget."""
        cfg = self.cfg
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
        return Context(
            now,
            cfg,
            self.gpus,
            self.procs,
            self.roles,
            holders,
            self.engines,
            self.sources,
            self.alloc,
            self.hostmem,
            util,
            self.engine_up_since,
            warming,
        )

    def _run(self, d: Detector, ctx: Context, failed: dict[str, list[str]]) -> list[Detection]:
        """One detector, isolated: one that raises is counted and logged (once), and the others go on."""
        try:
            return d.run(ctx)
        except Exception as e:  # noqa: BLE001 -- any bug in one detector must not blind the others
            self.analysis_errors[d.name] += 1
            if d.name not in self._logged_errors:
                self._logged_errors.add(d.name)
                log.error("analysis: the %s detector raised %s: %s", d.name, type(e).__name__, e, exc_info=True)
            failed.setdefault(d.name, [])
            if ctx.card is not None:
                failed[d.name].append(str(ctx.card.info.index))
            self._last_error[d.name] = f"{type(e).__name__}: {e}"[:200]
            return []

    def evaluate(self, now: float) -> list[Transition]:
        ctx = self._context(now)
        out: list[Detection] = []
        failed: dict[str, list[str]] = {}
        per_card = [d for d in self.detectors if d.per_card]
        for st in self.gpus.values():
            on_card = ctx.on(st)
            for d in per_card:
                out += self._run(d, on_card, failed)
        for d in self.detectors:
            if not d.per_card:
                out += self._run(d, ctx, failed)
        for name, gpus in failed.items():  # a detector that failed: what it watches is unwatched, say so
            err = findings.analysis_error(name, self._last_error[name], gpus, self.analysis_errors[name], now)
            out.append(Detection(*err))
        self.findings = [x.finding for x in out]
        for x in out:  # findings that raise no alert but hold: kept among those that fired
            if x.keep_as is not None:
                self.fired[(x.keep_as, x.finding.gpu, x.finding.pid, ())] = x.finding
        # A card whose processes are gone ends its memory episodes now, and raises none until one is back.
        ended = {str(idx) for idx, st in self.gpus.items() if st.lc.phase in ("idle", "exiting")}
        conditions = [
            c
            for c in (x.condition for x in out)
            if c is not None and not (c.alertname in CARD_EPISODE_ALERTS and dict(c.labels).get("gpu") in ended)
        ]
        trans = self.book.update(now, conditions)
        for gpu in sorted(ended):
            trans += self.book.end(now, CARD_EPISODE_ALERTS, gpu)
        firing_keys = {(a.alertname, a.labels) for a in self.book.firing()}
        for x in out:
            c, f = x.condition, x.finding
            if c is not None and (c.alertname, c.labels) in firing_keys:
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
            peak = st.busy.peak if st.busy is not None else 0.0
            if v.floor_bytes < peak - max(self.cfg.transient_fraction * st.capacity_bytes, 1.0):
                return "memory was given back"
            return "the growth stopped (the floor levelled off)"
        return "its condition cleared"

    # ---- output ------------------------------------------------------------------------------
    def summary_shape(self, st: GpuState) -> str:
        """The shape of the current busy period (of the last one when the card is idle now)."""
        b = st.busy
        if b is None:
            return "idle"
        if b.leak_confirmed and b.leak_shape_time:  # a leak the alert confirmed, not a passing verdict
            return _most(b.leak_shape_time)
        served = {k: n for k, n in b.shape_time.items() if k != "idle"}
        return _most(served) if served else "idle"

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
                "leak": b.leak_confirmed if b is not None else False,
                "leak_bytes_per_second": round(b.rate if b is not None else 0.0, 1),
                "eta_seconds": None if b is None or b.eta is None else round(b.eta, 1),
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
