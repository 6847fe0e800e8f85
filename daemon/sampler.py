"""The sampler: periodic jobs poll the sources, feed the analysis and publish a fresh snapshot.

apscheduler runs one job per kind of source (NVML or replay every `--interval`, processes every
`process_interval`, engines every `engine_interval`, the Alertmanager push every `push_interval`), each
with `max_instances=1` and coalescing, so a slow call is skipped rather than piled up. Every source is
driven through the `Source` protocol (`poll(now)`, daemon/sources/base.py) and its records are routed by
type. A job that fails is caught and reported as its source being down; the others go on.

Sinks (the trace recorder, Alertmanager, flight dumps) report their health separately: a full disk or a
down Alertmanager is `oomwatch_sink_up{sink} 0` and a log line, never GPUTelemetryDown.

The exporters read only `Sampler.snapshot`, built by `oomwatch.snapshot.build` under the analysis' lock.
Suspected OOMs and flight dumps live in daemon/flight.py.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from . import snapshot as snap
from .analysis.analyzer import Analyzer
from .config import DaemonConfig
from .feed import rss_limit
from .flight import DUMP_ALERTS, FlightDumps, VanishWatch
from .logbudget import LogBudget
from .model import AllocSample, EngineSnapshot, ProcInfo, RssSample, Sample, SourceStatus
from .sources.base import SampleTap, Source

if TYPE_CHECKING:
    from .sources.discovery import EngineDiscovery
    from .sources.engines import EngineSource
    from .sources.processes import ProcessScanner

__all__ = ["Sampler"]

log = logging.getLogger("oomwatch.sampler")


class Sampler:
    def __init__(
        self,
        cfg: DaemonConfig,
        source: Source,
        engines: Iterable[EngineSource] = (),
        scanner: ProcessScanner | None = None,
        recorder: SampleTap | None = None,
        pusher: Any = None,
        flight: Any = None,
        server_pids: set[int] | None = None,
        clock: Callable[[], float] | None = None,
        discovery: EngineDiscovery | None = None,
    ):
        self.cfg = cfg
        self.source = source
        if discovery is None and scanner is not None and getattr(cfg, "engine_discovery", False) and not cfg.replay:
            from .sources.discovery import EngineDiscovery

            discovery = EngineDiscovery(cfg.engine_url)
        self.discovery = None if cfg.replay else discovery  # EngineDiscovery: engines found by their ports
        self.engines = list(engines)
        self.replay = bool(cfg.replay)
        self.scanner = None if self.replay else scanner  # a replay's trace carries its process descriptions
        self.recorder = recorder
        self.pusher = pusher
        self.flight = FlightDumps(flight, cfg.flight_dir, source.cards) if flight and cfg.flight_dir else None
        self.vanish = VanishWatch(cfg.sampler.suspect_oom_fraction)
        self._clock = clock
        self.analyzer = Analyzer(
            source.cards,
            cfg.analysis,
            cfg.alerts,
            server_pids,
            # Only an engine the user named holds a start as "still loading" from the first sample. Discovery
            # alone must not: with no engine there (a plain PyTorch job) a climb from birth to the OOM would go
            # unpaged while oomwatch waited for an engine that never comes (seen live on an H200). vLLM and
            # SGLang starts are told by their command lines in the lifecycle.
            engines_expected=bool(self.engines),
        )
        self._lock = threading.Lock()
        self.snapshot = snap.Snapshot(started_at=time.time())
        self._wall_offset = time.time() - time.monotonic()
        self._replay_t0, self._replay_wall0 = 0.0, time.time()
        self._sched: Any = None
        self._stopping = threading.Event()  # set by stop(): a job waiting on an endpoint gives up at once
        self._log_budget = LogBudget("alert transitions")
        self._sample_cost: float | None = None
        self._analysis_cost: float | None = None
        self._sources: dict[str, SourceStatus] = {}
        self._sinks: dict[str, SourceStatus] = {}
        self._history: dict[int, tuple[snap.History, ...]] = {}
        self._texts: dict[int, str] = {}  # each card's verdict sentence, rebuilt once per history refresh tick
        self._texts_t = -math.inf
        self._history_t: dict[str, float] = {}  # when each window was last copied (analysis time)
        self._replay_over = False  # a replay without --loop has ended (see `_end_replay`)
        self.allocator = None  # the allocator probes' directory (daemon/sources/allocator.py)
        if cfg.probe_dir and not self.replay:
            from .sources.allocator import AllocatorSource

            self.allocator = AllocatorSource(source.cards, cfg.probe_dir)

    def _now(self) -> float:
        return self._clock() if self._clock is not None else time.monotonic()

    @contextlib.contextmanager
    def holding_analysis(self) -> Iterator[Analyzer]:
        """The analysis with the sampler's lock held, for whoever must read or restore it whole (the
        state keeper's saves and loads); no sample is ingested meanwhile."""
        with self._lock:
            yield self.analyzer

    @property
    def wall_offset(self) -> float:
        """Analysis time + this = wall time (unix seconds), as of the latest live sample."""
        return self._wall_offset

    # ---- jobs ----------------------------------------------------------------------------------
    def sample_job(self) -> None:
        try:
            t0 = time.perf_counter()
            records = self.source.poll(self._now())
            self._sample_cost = 0.0 if self.replay else time.perf_counter() - t0
            if not self._replay_over:
                self._sources[self.source.name] = self.source.status
            self._route(records)
            if self.replay and getattr(self.source, "finished", False) and not self.cfg.loop and not self._replay_over:
                self._end_replay()
        except Exception as e:  # noqa: BLE001 - a failing cycle is reported, never fatal
            log.exception("sample cycle failed")
            self._sources[self.source.name] = SourceStatus(self.source.name, False, f"{type(e).__name__}: {e}")
            self._publish()

    def _end_replay(self) -> None:
        """A replay without --loop has ended: say so once, resolve what still fires (Alertmanager gets the
        resolves) and mark the source down with its reason; /metrics keeps serving the last state."""
        self._replay_over = True
        st = self.source.status
        self._sources[self.source.name] = st if not st.up else SourceStatus(self.source.name, False, "trace ended")
        with self._lock:
            now = self.analyzer.now
            trans = self.analyzer.end_input()
        for tr in trans:
            self._on_transition(tr)
        self._publish()
        log.info(
            "replay of %s ended at t=%.1f s after %d samples%s; still serving the last state",
            self.cfg.replay,
            now or 0.0,
            self.analyzer.samples,
            f", {len(trans)} alert(s) resolved" if trans else "",
        )

    def _route(self, records: Iterable[object]) -> None:
        """Hand each record to whatever takes its type."""
        for rec in records:
            if isinstance(rec, Sample):
                self._ingest(rec)
            elif isinstance(rec, ProcInfo):
                self._add_proc(rec)
            elif isinstance(rec, RssSample):
                self._add_rss(rec)
            elif isinstance(rec, tuple):  # a replayed `alloc` line
                self._add_alloc([a for a in rec if isinstance(a, AllocSample)])
            else:
                log.debug("no route for a %s record", type(rec).__name__)

    def _add_proc(self, p: ProcInfo, record: bool = False) -> None:
        with self._lock:
            self.analyzer.add_proc(p)
            t = self.analyzer.now or 0.0
        if record and self.recorder:
            self.recorder.proc(t, p)
        if self.flight:
            self.flight.add_proc(t, p)

    def _add_alloc(self, samples: list[AllocSample]) -> None:
        with self._lock:
            for a in samples:
                self.analyzer.add_alloc(a)
        if self.recorder and samples and hasattr(self.recorder, "alloc"):
            self.recorder.alloc(samples[0].t, samples)
        if self.flight and samples:
            self.flight.alloc(samples[0].t, samples)

    def allocator_job(self) -> None:
        """Read the allocator probes' files (one per server process that runs the probe)."""
        src = self.allocator
        if src is None:  # scheduled only with an allocator source
            return
        try:
            self._add_alloc(src.poll(self._now()))
            self._sources[src.name] = src.status
        except Exception as e:  # noqa: BLE001
            log.exception("allocator probe read failed")
            self._sources[src.name] = SourceStatus(src.name, False, str(e))

    def _add_rss(self, r: RssSample) -> None:
        with self._lock:
            self.analyzer.add_rss(r.t, r.rss, rss_limit(r))
        if self.recorder:
            self.recorder.rss(r)
        if self.flight:
            self.flight.rss(r)

    def _ingest(self, s: Sample) -> None:
        if not self.replay:
            self._wall_offset = time.time() - s.t
        elif self.analyzer.now is None:
            self._replay_t0, self._replay_wall0 = s.t, time.time()
        if self.recorder:
            self.recorder.sample(s)
            self._sinks[self.recorder.name] = self.recorder.status
        if self.flight:
            self.flight.add(s)
        t0 = time.perf_counter()
        with self._lock:
            vanished = self.vanish.check(s, self.analyzer)
            for st in self._sources.values():
                self.analyzer.set_source(st)
            trans = self.analyzer.add_sample(s)
        self._analysis_cost = time.perf_counter() - t0
        for gpu in vanished:
            self._dump(f"suspected-oom-gpu{gpu}")
        for tr in trans:
            self._on_transition(tr)
        self._publish()
        if self.pusher and self._sched is not None and trans:
            # page now, not at the next push tick
            job = self._sched.get_job("push")
            if job is not None:
                job.modify(next_run_time=_utcnow())

    def _dump(self, reason: str) -> str | None:
        if not self.flight:
            return None
        path = self.flight.dump(reason)
        self._sinks[self.flight.name] = self.flight.status
        return path

    def _on_transition(self, tr: Any) -> None:
        a = tr.alert
        # a page is a warning; its end is ordinary news (within a budget: a replay at --speed 1e6 --loop
        # makes hundreds a second)
        level = logging.WARNING if tr.state == "firing" else logging.INFO
        self._log_budget.log(log, level, "%s %s %s", a.alertname, tr.state, a.summary)
        if tr.state == "firing" and a.alertname in DUMP_ALERTS:
            path = self._dump(a.alertname)
            if path:
                with self._lock:
                    a.annotations["trace"] = path
        if tr.state == "resolved" and self.pusher:
            with self._lock:
                view = snap.alert_view(a, self.mono_to_wall)
            self.pusher.resolved(view, time.time())

    def process_job(self) -> None:
        if not self.scanner:
            return
        try:
            with self._lock:
                pids = {p for st in self.analyzer.gpus.values() if st.sample for p, _ in st.sample.procs}
            self.scanner.watch(pids)
            for p in self.scanner.poll(self._now()):
                if isinstance(p, RssSample):
                    self._add_rss(p)
                elif isinstance(p, ProcInfo):  # holders and their parents: a trace carries the server tree
                    self._add_proc(p, record=True)
            self._sources[self.scanner.name] = self.scanner.status
            if self.discovery is not None:
                self._discover()
        except Exception as e:  # noqa: BLE001
            log.exception("process scan failed")
            self._sources[self.scanner.name] = SourceStatus(self.scanner.name, False, str(e))

    def _discover(self) -> None:
        """Probe new or changed server groups for their engine; a found engine counts as `--engine-url`."""
        from .analysis.processes import group_members

        if self.discovery is None:  # called only with discovery on
            return
        with self._lock:
            groups = group_members(self.analyzer.roles, self.analyzer.procs)
        new, gone = self.discovery.update(groups)
        for d in gone:
            log.info("server group %s is gone; no longer scraping %s", d.group, getattr(d.source, "shown", "an engine"))
            self.engines = [e for e in self.engines if e is not d.source]
            self._sources.pop(d.source.name, None)
            d.source.close()
            with self._lock:
                self.analyzer.server_pids.discard(d.pid)  # a reused PID must not be taken for the server
        for d in new:
            self.engines = [*self.engines, d.source]
            with self._lock:
                self.analyzer.server_pids.add(d.pid)
                self.analyzer.engines_expected = True  # as if given by --engine-url from now on
        if new and self._sched is not None and self._sched.get_job("engines") is not None:
            self._sched.get_job("engines").modify(next_run_time=_utcnow())

    def engine_job(self) -> None:
        """Scrape every engine at once, each on its own worker within its own deadline, and wait no longer
        than the slowest deadline (or until stop): a slow or dripping endpoint holds up nothing else."""
        snaps: list[EngineSnapshot] = []
        now = self._now()
        engines = list(self.engines)
        for e in engines:
            if hasattr(e, "begin"):
                e.begin()
        for e in engines:
            try:
                got = [e.collect(self._stopping)] if hasattr(e, "collect") else e.poll(now)
                snaps += [r for r in got if isinstance(r, EngineSnapshot)]
            except Exception as ex:  # noqa: BLE001 - EngineSource never raises; belt and braces
                log.exception("engine scrape failed")
                e.status = SourceStatus(e.name, False, str(ex))
            self._sources[e.name] = e.status
        with self._lock:
            self.analyzer.set_engines(snaps)

    def push_job(self) -> None:
        if not self.pusher:
            return
        self.pusher.push([a for a in self.snapshot.alerts if a.state == "firing"], time.time())
        changed = False
        for st in self.pusher.status.values():
            changed |= self._sinks.get(st.name) != st
            self._sinks[st.name] = st
        if changed:  # a sink's health shows even when no sample comes (a replay that has ended)
            self._publish()

    # ---- snapshot ------------------------------------------------------------------------------
    def mono_to_wall(self, t: float) -> float:
        if self.replay:  # trace seconds played at `speed`
            return self._replay_wall0 + (t - self._replay_t0) / self.cfg.speed
        return self._wall_offset + t

    def _refresh_history(self, now: float) -> None:
        """Copy the windows that are due: each at most once per point it shows (15 min / 600 points: every
        1.5 s; 7 days: every 17 min), and never more often than `history_refresh_s`. A window still empty is
        due at that pace, so a new card's long windows fill from its first minutes."""
        sc = self.cfg.sampler
        empty = {h.window for hs in self._history.values() for h in hs if not h.t}
        due = [
            (name, secs)
            for name, secs in sc.history_windows
            if not (
                0.0
                <= now - self._history_t.get(name, -math.inf)
                < (sc.history_refresh_s if name in empty else max(sc.history_refresh_s, secs / sc.history_points))
            )
        ]
        if not due:
            return
        for idx, fresh in snap.histories(self.analyzer, due, sc.history_points).items():
            have = {h.window: h for h in self._history.get(idx, ())}
            have.update((h.window, h) for h in fresh)
            self._history[idx] = tuple(have[name] for name, _ in sc.history_windows if name in have)
        for name, _ in due:
            self._history_t[name] = now

    def _publish(self) -> None:
        with self._lock:
            an = self.analyzer
            if an.now is not None:
                self._refresh_history(an.now)
                if not 0.0 <= an.now - self._texts_t < self.cfg.sampler.history_refresh_s:
                    # a sentence costs ~8 us a card; the analysis judges once a second: not at every sample
                    self._texts = {idx: an.verdict_text(st) for idx, st in an.gpus.items()}
                    self._texts_t = an.now
            self.snapshot = snap.build(
                an,
                to_wall=self.mono_to_wall,
                sources=self._sources.values(),
                sinks=self._sinks.values(),
                engines=[e.last for e in self.engines],
                history=self._history,
                texts=self._texts,
                suspected_ooms=self.vanish.count,
                flight_dumps=self.flight.count if self.flight else 0,
                sample_duration_seconds=self._sample_cost,
                analysis_duration_seconds=self._analysis_cost,
                started_at=self.snapshot.started_at,
                allocs=an.alloc.views(
                    {st.info.uuid: st.info.index for st in an.gpus.values()},
                    {pid: r.role for pid, r in an.roles.items()},
                ),
            )

    # ---- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        from apscheduler.schedulers.background import BackgroundScheduler

        sch = BackgroundScheduler(job_defaults={"max_instances": 1, "coalesce": True, "misfire_grace_time": None})
        sch.add_job(self.sample_job, _every(self.cfg.interval), id="sample", next_run_time=_utcnow())
        if self.scanner:
            sch.add_job(self.process_job, _every(self.cfg.process_interval), id="processes", next_run_time=_utcnow())
        if self.engines or self.discovery is not None:
            sch.add_job(self.engine_job, _every(self.cfg.engine_interval), id="engines", next_run_time=_utcnow())
        if self.pusher:
            sch.add_job(self.push_job, _every(self.cfg.push_interval), id="push")
        if self.allocator:
            sch.add_job(self.allocator_job, _every(self.cfg.probe_interval), id="allocator", next_run_time=_utcnow())
        sch.start()
        self._sched = sch

    def stop(self) -> None:
        self._stopping.set()
        if self._sched is not None:
            self._sched.shutdown(wait=True)
            self._sched = None
        if self.recorder:
            self.recorder.close()
        if self.flight:
            self.flight.join()
        for e in self.engines:
            e.close()
        if self.scanner:
            self.scanner.close()
        if self.pusher:
            try:
                self.push_job()
            finally:
                self.pusher.close()


def _every(seconds: float) -> Any:
    """An interval trigger as an object, not the "interval" alias: the alias is looked up through package
    metadata (entry points), which a vendored or zipped install may not carry."""
    from apscheduler.triggers.interval import IntervalTrigger

    return IntervalTrigger(seconds=seconds)


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)
