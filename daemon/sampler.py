"""The sampler loop: periodic jobs feed the analysis and publish a fresh snapshot for the exporters.

apscheduler runs one job per source (NVML or replay every `--interval`, processes every
`process_interval`, engines every `engine_interval`, the Alertmanager push every `push_interval`), each
with `max_instances=1` and coalescing, so a slow call is skipped rather than piled up. A job that fails
is caught and reported as its source being down; the others go on.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from .analysis.analyzer import Analyzer
from .config import DaemonConfig
from .model import ProcInfo, Sample, SourceStatus
from .snapshot import AlertView, GpuView, ProcView, Snapshot

log = logging.getLogger("oomwatch.sampler")


class Sampler:
    def __init__(self, cfg: DaemonConfig, source, engines=(), scanner=None, recorder=None, pusher=None,
                 flight=None, server_pids=None):
        self.cfg = cfg
        self.source = source
        self.engines = list(engines)
        self.scanner = scanner
        self.recorder = recorder
        self.pusher = pusher
        self.flight = flight
        self.replay = hasattr(source, "poll")
        self.analyzer = Analyzer(source.gpus, cfg.analysis, cfg.alerts, server_pids, engines_expected=bool(engines))
        self._lock = threading.Lock()
        self.snapshot = Snapshot(started_at=time.time())
        self._wall_offset = time.time() - time.monotonic()
        self._replay_t0, self._replay_wall0 = 0.0, time.time()
        self._last_pids: dict[int, set[int]] = {}
        self.suspected_ooms = 0
        self.flight_files: list[str] = []
        self._sched = None
        self._sample_cost: float | None = None
        self._analysis_cost: float | None = None
        self._sources: dict[str, SourceStatus] = {}

    # ---- jobs ----------------------------------------------------------------------------------
    def sample_job(self) -> None:
        try:
            if self.replay:
                items = self.source.poll()
                self._sample_cost = 0.0
            else:
                t0 = time.perf_counter()
                items = [self.source.read()]
                self._sample_cost = time.perf_counter() - t0
            self._sources[self.source.name] = self.source.status
            for it in items:
                if isinstance(it, Sample):
                    self._ingest(it)
                elif isinstance(it, ProcInfo):
                    with self._lock:
                        self.analyzer.add_proc(it)
                    if self.flight:
                        self.flight.add_proc(self.analyzer.now or 0.0, it)
            if self.replay and self.source.finished and not self.cfg.loop and self.analyzer.now is not None:
                self._publish()
        except Exception as e:  # noqa: BLE001 - a failing cycle is reported, never fatal
            log.exception("sample cycle failed")
            self._sources[self.source.name] = SourceStatus(self.source.name, False, f"{type(e).__name__}: {e}")
            self._publish()

    def _ingest(self, s: Sample) -> None:
        if not self.replay:
            self._wall_offset = time.time() - s.t
        elif self.analyzer.now is None:
            self._replay_t0, self._replay_wall0 = s.t, time.time()
        if self.recorder:
            self.recorder.sample(s)
            self._sources["recorder"] = self.recorder.status
        if self.flight:
            self.flight.add(s)
        t0 = time.perf_counter()
        with self._lock:
            self._check_vanished(s)
            for name, st in self._sources.items():
                self.analyzer.set_source(st)
            trans = self.analyzer.add_sample(s)
        self._analysis_cost = time.perf_counter() - t0
        for tr in trans:
            self._on_transition(tr)
        self._publish()
        if self.pusher and self._sched is not None and trans:
            # page now, not at the next push tick
            job = self._sched.get_job("push")
            if job is not None:
                job.modify(next_run_time=_now())

    def _check_vanished(self, s: Sample) -> None:
        """A server process gone while its card was nearly full: a suspected OOM (event and metric)."""
        for g in s.gpus:
            pids = {p for p, _ in g.procs}
            before = self._last_pids.get(g.index, set())
            gone = before - pids
            st = self.analyzer.gpus.get(g.index)
            if gone and st is not None:
                v = st.verdict
                full = max(v.peak_bytes, v.floor_bytes) >= 0.9 * st.capacity_bytes
                if full and any(self.analyzer.roles.get(p) and self.analyzer.roles[p].role == "server" for p in gone):
                    self.suspected_ooms += 1
                    log.warning("GPU %s: server process %s vanished while the card was nearly full", g.index, gone)
                    self._dump(f"suspected-oom-gpu{g.index}")
            self._last_pids[g.index] = pids

    def _dump(self, reason: str) -> str | None:
        if not (self.flight and self.cfg.flight_dir):
            return None
        try:
            os.makedirs(self.cfg.flight_dir, exist_ok=True)
            path = os.path.join(self.cfg.flight_dir, f"oomwatch-{time.strftime('%Y%m%dT%H%M%S')}-{reason}.jsonl")
            # Copy now (cheap), write in the background: a 15-minute dump must not stall sampling.
            frozen = self.flight.frozen()
            threading.Thread(target=self._write_dump, args=(frozen, path, reason), daemon=True).start()
            self.flight_files.append(path)
            return path
        except OSError as e:
            log.error("flight recorder could not write: %s", e)
            return None

    def _write_dump(self, frozen, path, reason) -> None:
        try:
            frozen.dump(path, self.source.gpus, reason)
        except OSError as e:
            log.error("flight recorder could not write %s: %s", path, e)

    def _on_transition(self, tr) -> None:
        a = tr.alert
        log.warning("%s %s %s", a.alertname, tr.state, a.summary)
        if tr.state == "firing" and a.alertname in ("GPUOOMImminent", "GPUMemoryLeak", "GPUMemorySpikeRisk"):
            path = self._dump(a.alertname)
            if path:
                a.annotations["trace"] = path
        if tr.state == "resolved" and self.pusher:
            self.pusher.resolved(self._alert_view(a), time.time(), self.mono_to_wall)

    def process_job(self) -> None:
        if not self.scanner or self.replay:
            return
        try:
            with self._lock:
                pids = {p for st in self.analyzer.gpus.values() if st.sample for p, _ in st.sample.procs}
            changed = self.scanner.scan(pids)
            with self._lock:
                for p in changed:
                    self.analyzer.add_proc(p)
            if self.recorder:
                for p in changed:
                    if p.pid in pids:
                        self.recorder.proc(self.analyzer.now or 0.0, p)
            if self.flight:
                for p in changed:
                    self.flight.add_proc(self.analyzer.now or 0.0, p)
            self._sources["processes"] = self.scanner.status
        except Exception as e:  # noqa: BLE001
            log.exception("process scan failed")
            self._sources["processes"] = SourceStatus("processes", False, str(e))

    def engine_job(self) -> None:
        snaps = []
        for e in self.engines:
            try:
                snaps.append(e.scrape())
            except Exception as ex:  # noqa: BLE001 - EngineSource never raises; belt and braces
                log.exception("engine scrape failed")
                e.status = SourceStatus(e.name, False, str(ex))
            self._sources[e.name] = e.status
        with self._lock:
            self.analyzer.set_engines(snaps)

    def push_job(self) -> None:
        if not self.pusher:
            return
        snap = self.snapshot
        self.pusher.push([a for a in snap.alerts if a.state == "firing"], time.time(), self.mono_to_wall)
        for url, st in self.pusher.status.items():
            self._sources[st.name] = st

    # ---- snapshot ------------------------------------------------------------------------------
    def mono_to_wall(self, t: float) -> float:
        if self.replay:  # trace seconds played at `speed`
            return self._replay_wall0 + (t - self._replay_t0) / self.cfg.speed
        return self._wall_offset + t

    @staticmethod
    def _alert_view(a) -> AlertView:
        return AlertView(a.all_labels(), a.all_annotations(), a.state, a.active_since, a.fired_at, a.eta_seconds)

    def _publish(self) -> None:
        an = self.analyzer
        with self._lock:
            gpus = tuple(
                GpuView(st.info, st.sample, st.verdict, st.capacity_bytes, st.budget_bytes) for st in an.gpus.values()
            )
            procs = []
            for st in an.gpus.values():
                for pid, b in st.sample.procs if st.sample else ():
                    info = an.procs.get(pid)
                    role = an.roles.get(pid)
                    procs.append(ProcView(str(st.info.index), pid, b, info.name if info else "",
                                          role.role if role else "other",
                                          " ".join(info.cmdline) if info else "", role.why if role else ""))
            alerts = tuple(self._alert_view(a) for a in an.book.alerts.values() if a.state != "resolved")
            sources = tuple(self._sources.values())
            engines = tuple(e.last for e in self.engines)
            self.snapshot = Snapshot(
                t=an.now, gpus=gpus, procs=tuple(procs), alerts=alerts, sources=sources, engines=engines,
                findings=tuple(an.findings), samples_total=an.samples,
                sample_duration_seconds=self._sample_cost, analysis_duration_seconds=self._analysis_cost,
                started_at=self.snapshot.started_at,
            )

    def history(self, gpu: int, seconds: float = 900.0):
        """(t, used) of one card for the status page, from the analysis buckets."""
        with self._lock:
            st = self.analyzer.gpus.get(gpu)
            if st is None:
                return [], []
            t, _, mx, _ = st.series.arrays()
        if len(t) == 0:
            return [], []
        keep = t >= t[-1] - seconds
        return t[keep].tolist(), mx[keep].tolist()

    # ---- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        from apscheduler.schedulers.background import BackgroundScheduler

        sch = BackgroundScheduler(job_defaults={"max_instances": 1, "coalesce": True, "misfire_grace_time": None})
        sch.add_job(self.sample_job, "interval", seconds=self.cfg.interval, id="sample", next_run_time=_now())
        if self.scanner and not self.replay:
            sch.add_job(self.process_job, "interval", seconds=self.cfg.process_interval, id="processes",
                        next_run_time=_now())
        if self.engines:
            sch.add_job(self.engine_job, "interval", seconds=self.cfg.engine_interval, id="engines",
                        next_run_time=_now())
        if self.pusher:
            sch.add_job(self.push_job, "interval", seconds=self.cfg.push_interval, id="push")
        sch.start()
        self._sched = sch

    def stop(self) -> None:
        if self._sched is not None:
            self._sched.shutdown(wait=True)
            self._sched = None
        if self.recorder:
            self.recorder.close()
        for e in self.engines:
            e.close()
        if self.pusher:
            try:
                self.push_job()
            finally:
                self.pusher.close()


def _now():
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc)
