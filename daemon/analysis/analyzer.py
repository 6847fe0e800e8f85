"""The incremental analysis shared by the daemon, `oomwatch replay` and `oomwatch diagnose`.

Samples and process descriptions go in as they come; every `eval_interval_s` of sample time the
detectors run over each card's window and the alert book is updated. No I/O: the caller feeds it and
reads `state()` / `summary()`. Running the same object over a trace and live is what makes a replayed
verdict the verdict the daemon would have given.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..config import AlertTiming, AnalysisConfig
from ..model import EngineSnapshot, GpuInfo, GpuSample, ProcInfo, Sample, SourceStatus
from . import findings as F
from .alerts import AlertBook, Transition
from .curve import CurveVerdict, evaluate
from .imbalance import CardLoad, find_imbalance
from .processes import ProcRole, classify
from .series import BucketSeries


@dataclass
class GpuState:
    info: GpuInfo
    series: BucketSeries
    sample: GpuSample | None = None
    verdict: CurveVerdict = field(default_factory=lambda: CurveVerdict("idle"))
    capacity_bytes: float = 0.0
    budget_bytes: float | None = None
    peak_used_bytes: int = 0
    shape_time: Counter = field(default_factory=Counter)
    ever_leak: bool = False
    leak_shape_time: Counter = field(default_factory=Counter)
    last_leak_rate: float = 0.0
    last_leak_eta: float | None = None
    busy_since: float | None = None  # the current (or last) busy episode: start, end of warm-up, last seen
    warm_end: float | None = None
    busy_last: float | None = None
    plateau_bytes: float = 0.0
    last_leak_verdict: CurveVerdict | None = None
    last_leak_t: float | None = None
    quiet_lo: float = float("inf")  # range of used bytes since the last full evaluation
    quiet_hi: float = float("-inf")
    full_eval_at: float = float("-inf")


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
            g.index: GpuState(g, BucketSeries(self.cfg.bucket_s, self.cfg.window_s), capacity_bytes=g.total_bytes)
            for g in gpus
        }
        self.procs: dict[int, ProcInfo] = {}
        self._proc_seen: dict[int, float] = {}  # last time a PID held memory (to forget churned PIDs)
        self.roles: dict[int, ProcRole] = {}
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
        self.findings: list[F.Finding] = []  # current
        self.fired: dict[tuple, F.Finding] = {}  # every finding whose alert fired, latest evidence

    # ---- input -------------------------------------------------------------------------------
    def add_proc(self, p: ProcInfo) -> None:
        self.procs[p.pid] = p

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
            st.series.add(t, u)
            if u < st.quiet_lo:
                st.quiet_lo = u
            if u > st.quiet_hi:
                st.quiet_hi = u
            if g.used_bytes > st.peak_used_bytes:
                st.peak_used_bytes = g.used_bytes
            if g.reserved_bytes is not None:
                st.capacity_bytes = st.info.total_bytes - g.reserved_bytes
        if t >= self._next_eval:
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
        cur: list[F.Finding] = []
        util = self._engine_budget()
        engine_up = any(e.up for e in self.engines)
        if engine_up and self.engine_up_since is None:
            self.engine_up_since = now
        warming = (self.engines_expected and self.engine_up_since is None and self.t0 is not None
                   and now - self.t0 < cfg.engine_warmup_max_s)

        # Who holds what, per card and in total.
        holders: dict[int, float] = {}
        for st in self.gpus.values():
            for pid, b in st.sample.procs if st.sample else ():
                holders[pid] = holders.get(pid, 0.0) + (b or 0)
        self.roles = classify(holders, self.procs, self.server_pids) if holders else {}
        self._forget(now, holders)

        loads = []
        for idx, st in self.gpus.items():
            gpu, uuid, name = str(idx), st.info.uuid, st.info.name
            cap = st.capacity_bytes
            st.budget_bytes = util * st.info.total_bytes if util else None
            if self._quiet(st, now):
                # Nothing moved since a calm verdict: the same verdict (re-checked in full every 10 s).
                v = st.verdict
                used = st.sample.used_bytes if st.sample and st.sample.used_bytes is not None else v.floor_bytes
            else:
                t_, mn, mx, la = st.series.arrays()
                v = evaluate(t_, mn, mx, la, cap, cfg, not_before=self.engine_up_since)
                used = float(la[-1]) if len(la) else 0.0
                st.full_eval_at = now
            st.quiet_lo, st.quiet_hi = float("inf"), float("-inf")
            if warming and v.leak:  # the engine is not serving yet: its climb is warm-up by definition
                v = CurveVerdict("stable", floor_bytes=v.floor_bytes, peak_bytes=v.peak_bytes,
                                 headroom_bytes=v.headroom_bytes, regime_start=v.regime_start)
            st.verdict = v
            dt = cfg.eval_interval_s
            if v.shape != "idle":
                st.shape_time[v.shape] += dt
                if st.busy_since is None or (st.busy_last is not None and now - st.busy_last > 5 * dt):
                    st.busy_since = now - dt
                st.busy_last, st.warm_end, st.plateau_bytes = now, v.regime_start, v.floor_bytes
            if v.leak:
                st.ever_leak = True
                st.leak_shape_time[v.shape] += dt
                st.last_leak_rate = v.leak_bytes_per_second
                st.last_leak_eta = v.eta_seconds
                st.last_leak_verdict, st.last_leak_t = v, now
                f, c = F.leak(gpu, uuid, name, v, cap, st.info.total_bytes, now)
                cur.append(f)
                conds.append(c)
                if v.eta_seconds is not None and v.eta_seconds <= cfg.oom_horizon_s:
                    f, c = F.oom_imminent(gpu, uuid, name, v, cap, cfg.oom_horizon_s, now)
                    cur.append(f)
                    conds.append(c)
            if v.spike_risk:
                f, c = F.spike_risk(gpu, uuid, name, v, cap, cfg.spike_margin, now)
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
                    f, c = F.stray(gpu, uuid, pid, self.procs.get(pid), b, r.why, now)
                    cur.append(f)
                    conds.append(c)
            group = "server" if "server" in roles_here else (f"pid{st.sample.procs[0][0]}" if roles_here else None)
            loads.append(CardLoad(gpu, used, cap, group, v.shape == "idle", v.leak))

        invisible = [pid for pid in holders if pid in self.procs and not self.procs[pid].visible]
        if invisible:
            f = F.pids_invisible(invisible, now)
            cur.append(f)
            self.fired[("pids_invisible", None, None, ())] = f

        for imb in find_imbalance(loads, cfg.imbalance_fraction, cfg.busy_fraction):
            f, c = F.imbalance(imb, now)
            cur.append(f)
            conds.append(c)

        for e in self.engines:
            for snap in e.engines or (e,):
                kv = snap.kv_cache_usage_ratio
                if snap.up and kv is not None and kv >= cfg.kv_pressure_ratio and (
                    (snap.requests_waiting or 0) > 0 or (snap.requests_swapped or 0) > 0
                ):
                    f, c = F.kv_pressure(snap, cfg.kv_pressure_ratio, now)
                    cur.append(f)
                    conds.append(c)
        for name, s in self.sources.items():
            if not s.up:
                f, c = F.telemetry_down(name, s.error, now)
                cur.append(f)
                conds.append(c)

        self.findings = cur
        trans = self.book.update(now, conds)
        firing_keys = {(a.alertname, a.labels) for a in self.book.firing()}
        by_alert = {
            "leak": "GPUMemoryLeak", "oom_imminent": "GPUOOMImminent", "spike_risk": "GPUMemorySpikeRisk",
            "stray": "GPUStrayProcess", "imbalance": "GPUMemoryImbalance", "kv_pressure": "KVCachePressure",
            "telemetry_down": "GPUTelemetryDown",
        }
        for f, c in zip([f for f in cur if f.kind != "pids_invisible"], conds):
            if (by_alert[f.kind], c.labels) in firing_keys:
                self.fired[(f.kind, f.gpu, f.pid, c.labels)] = f
        self.book.prune(now)
        self.transitions.extend(trans)
        if len(self.transitions) > 10000:
            del self.transitions[:-5000]
        return trans

    def _forget(self, now: float, holders) -> None:
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

    def _quiet(self, st: GpuState, now: float) -> bool:
        v = st.verdict
        if v.leak or v.spike_risk or v.shape not in ("stable", "idle") or now - st.full_eval_at >= 10.0:
            return False
        q = max(self.cfg.step_fraction * st.capacity_bytes, float(self.cfg.step_min_bytes))
        return st.quiet_hi - st.quiet_lo < q / 4 and abs(st.quiet_hi - v.floor_bytes) < q / 4

    # ---- output ------------------------------------------------------------------------------
    def summary_shape(self, st: GpuState) -> str:
        if st.ever_leak and st.leak_shape_time:
            return st.leak_shape_time.most_common(1)[0][0]
        if not st.shape_time:
            return "idle"
        return st.shape_time.most_common(1)[0][0]

    def summary(self) -> dict:
        gpus = {}
        for idx, st in self.gpus.items():
            gpus[str(idx)] = {
                "shape": self.summary_shape(st),
                "leak": st.ever_leak,
                "leak_bytes_per_second": round(st.last_leak_rate, 1),
                "eta_seconds": None if st.last_leak_eta is None else round(st.last_leak_eta, 1),
                "peak_used_bytes": int(st.peak_used_bytes),
            }
        fs = sorted(self.fired.values(), key=lambda f: (F.SEVERITY_ORDER.get(f.severity, 9), f.t or 0))
        seconds = 0.0 if self.t0 is None or self.now is None else self.now - self.t0
        return {
            "gpus": gpus,
            "findings": [f.to_json() for f in fs],
            "samples": self.samples,
            "seconds": round(seconds, 3),
        }
