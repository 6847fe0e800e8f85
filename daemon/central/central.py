"""The central evaluator: read the fleet from Prometheus every scrape interval, feed each card's Analyzer,
publish one `FleetSnapshot`, push alerts.

Like the daemon's sampler, periodic jobs run on apscheduler (`max_instances=1`, coalescing: a slow read is
skipped, never piled up): the read every scrape interval (never faster: a faster read finds no new sample),
the Alertmanager push every `push_interval`. The read period starts at `--scrape-interval` (or
`CentralConfig.default_scrape_s`) and follows the spacing the samples show.

Prometheus is a source like NVML: a read that fails (down, a timeout, an answer that is not its API) is
`oomwatch_source_up{source="prometheus:URL"} 0` and, through an Analyzer of no cards that sees only the
sources (the daemon's own TelemetryDown detector), GPUTelemetryDown; the central keeps running and the next
read that works catches up on what was missed (it looks back to the last good read, up to `backfill_s`).
The first read takes, besides, `history_s` of each card one point a minute: a central that restarts (an
upgrade, a node drain) judges a slow leak on hours of its curve at once, instead of losing them.

Cards: at most `max_cards` are watched, the first in fleet order (node, GPU) when more are found, and a card
once watched keeps its place; the others are counted (`oomwatch_fleet_cards{state="over_cap"}`). A card with
no sample for `stale_s` is gone: its alerts resolve and its place is free.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import snapshot as snap
from ..analysis.alerts import Transition
from ..analysis.analyzer import Analyzer
from ..backtest.series import CardKey
from ..config import DaemonConfig
from ..errors import UsageError
from ..logbudget import LogBudget
from ..model import SourceStatus
from ..sampler import _every, _utcnow  # the daemon's own triggers (an object, not the entry-point alias)
from ..sources.prometheus import PrometheusClient, PrometheusError
from .reader import FleetRead, FleetReader
from .view import CardView, FleetSnapshot, merged
from .watch import CardWatch, card_size

__all__ = ["Central"]

log = logging.getLogger("oomwatch.central")


class Central:
    def __init__(
        self,
        cfg: DaemonConfig,
        client: PrometheusClient,
        pusher: Any = None,
        clock: Callable[[], float] = time.time,
    ):
        self.cfg = cfg
        self.client = client
        self.reader = FleetReader(client, cfg.selector, cfg.shard)
        self.pusher = pusher
        self._clock = clock
        cc = cfg.central
        self.source = f"prometheus:{client.shown}"
        self.lookback_s = max(cc.backfill_s, cc.history_s)  # how far back the first read reaches
        self.epoch = clock() - self.lookback_s - 1.0  # analysis time 0: before the oldest sample the first read gets
        self.health = Analyzer((), cfg.analysis, cfg.alerts)  # no cards: it judges the sources only
        self.watches: dict[CardKey, CardWatch] = {}
        self.scrape_interval_s = cfg.scrape_interval
        self.interval_s = max(cfg.interval, cfg.scrape_interval or cc.default_scrape_s)
        self.state = FleetSnapshot()
        self.reads = 0  # reads that worked
        self._attempts = 0  # reads tried: a refused selector is bad input at the first (exit 2), later a source down
        self._last_ok: float | None = None  # wall time of the last read that worked
        self._status = SourceStatus(self.source, True)
        self._sinks: dict[str, SourceStatus] = {}
        self._counts = (0, 0, 0)  # found, over the cap, unsized
        self._costs: tuple[float | None, float | None] = (None, None)  # read, evaluation (seconds)
        self._lock = threading.Lock()  # one read (or the final push) at a time touches the cards
        self._sched: Any = None
        self._log_budget = LogBudget("alert transitions")

    # ---- the read ------------------------------------------------------------------------------
    def read_job(self) -> None:
        """One read and evaluation of the fleet; a failure of any kind is the source down, never the end."""
        try:
            self.read()
        except UsageError:  # the first read's refused --selector: run_central ends with one line
            raise
        except Exception as e:  # noqa: BLE001 - a failing cycle is reported, never fatal
            log.exception("central read failed")
            self._set_status(SourceStatus(self.source, False, f"{type(e).__name__}: {e}"))
            self._publish()

    def read(self) -> None:
        now = self._clock()
        t0 = time.perf_counter()
        got: FleetRead | None = None
        past: tuple[FleetRead, float] | None = None  # the history and how long it took to read
        first, self._attempts = self._attempts == 0, self._attempts + 1
        try:
            got = self.reader.read(now, self._window(now))
            status = SourceStatus(self.source, True, None, time.perf_counter() - t0)
            if self._last_ok is None:  # the first read that works (Prometheus may have been down at start)
                past = self._history(now)
        except PrometheusError as e:
            if first and "bad_data" in str(e):  # the only user input in the query is the selector
                raise UsageError(f"--selector {self.cfg.selector!r} is not a PromQL label matcher: {e}") from None
            status = SourceStatus(self.source, False, str(e), time.perf_counter() - t0)
        read_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        with self._lock:
            if past is not None:
                t2 = time.perf_counter()
                n = self._evaluate(past[0])
                log.info(
                    "history: %d card(s), %d point(s) over the %.3g h before the last %.0f min, read in %.1f s, "
                    "analysed in %.1f s",
                    len(past[0].cards),
                    n,
                    (self.cfg.central.history_s - self.cfg.central.backfill_s) / 3600,
                    self.cfg.central.backfill_s / 60,
                    past[1],
                    time.perf_counter() - t2,
                )
            if got is not None:
                self.reads += 1
                self._last_ok = now
                self._evaluate(got)
                self._follow(got.scrape_interval_s)
            self._end_stale(now)
            self._set_status(status)
            self.health.set_source(status)
            for tr in self.health.evaluate(now - self.epoch):
                self._on_transition(tr, None)
        self._costs = (read_s, time.perf_counter() - t1)
        self._publish()

    def _window(self, now: float) -> float:
        """How far back this read looks: everything since the last good read (an outage is caught up on,
        up to `backfill_s`), at least `min_read_window_s`; the first read takes `backfill_s`."""
        cc = self.cfg.central
        if self._last_ok is None:
            return cc.backfill_s
        return min(cc.backfill_s, max(cc.min_read_window_s, now - self._last_ok + 2 * self.interval_s))

    def _history(self, now: float) -> tuple[FleetRead, float] | None:
        """The cards' curves before the first good read's window (`CentralConfig.history_s`), one point per
        `history_step_s`, and the seconds the read took; None when there is none to read or the read failed
        (one warning line): the cards are then judged from that read's window on, as without it."""
        cc = self.cfg.central
        if cc.history_s <= cc.backfill_s:
            return None
        t0 = time.perf_counter()
        try:
            past = self.reader.read_history(now - cc.backfill_s, cc.history_s - cc.backfill_s, cc.history_step_s)
        except PrometheusError as e:  # its limits, or a query API without subqueries: judged from now on
            log.warning("history before the last %.0f min not read: %s", cc.backfill_s / 60, e)
            return None
        return past, time.perf_counter() - t0

    def _evaluate(self, got: FleetRead) -> int:
        """Feed each card its new points (a card seen for the first time is started); the points fed."""
        over = unsized = fed = 0
        step = self.scrape_interval_s or got.scrape_interval_s or self.cfg.central.default_scrape_s
        for card, points in got.cards:
            w = self.watches.get(card.key)
            if w is None:
                if len(self.watches) >= self.cfg.max_cards:
                    over += 1
                    continue
                total = card_size(points)
                if total is None:
                    unsized += 1
                    continue
                w = self.watches[card.key] = CardWatch(card, total, self.cfg, self.epoch, step)
                log.info("watching %s gpu %s (%s, %s)", card.node, card.gpu, card.uuid or "no UUID", card.source.name)
            else:
                w.card = card  # the pod labels as last seen
            n, trans = w.feed(points)
            fed += n
            if n:
                w.refresh()
            for tr in trans:
                self._on_transition(tr, w)
        self._counts = (len(got.cards), over, unsized)
        return fed

    def _end_stale(self, now: float) -> None:
        for key, w in list(self.watches.items()):
            if now - w.last_t > self.cfg.central.stale_s:
                log.info("%s gpu %s: no sample for %.0f s; no longer watched", w.card.node, w.card.gpu, now - w.last_t)
                for tr in w.end():
                    self._on_transition(tr, w)
                del self.watches[key]

    def _follow(self, found: float | None) -> None:
        """Read at the scrape interval the samples show (unless --scrape-interval is given), never faster."""
        if self.cfg.scrape_interval is not None or found is None:
            return
        self.scrape_interval_s = found
        want = max(self.cfg.interval, found)
        if abs(want - self.interval_s) > self.cfg.central.interval_change * self.interval_s:
            log.info("scrape interval found: %.3g s; reading every %.3g s", found, want)
            self.interval_s = want
            if self._sched is not None and self._sched.get_job("read") is not None:
                self._sched.get_job("read").reschedule(_every(want))

    def _on_transition(self, tr: Transition, w: CardWatch | None) -> None:
        a = tr.alert
        where = f"{w.card.node} gpu {w.card.gpu}: " if w is not None else ""
        level = logging.WARNING if tr.state == "firing" else logging.INFO
        self._log_budget.log(log, level, "%s%s %s %s", where, a.alertname, tr.state, a.summary)
        if self.pusher is None:
            return
        if tr.state == "resolved":
            view = w.view(a) if w is not None else snap.alert_view(a, self._to_wall)
            self.pusher.resolved(view, time.time())
        elif self._sched is not None and self._sched.get_job("push") is not None:
            self._sched.get_job("push").modify(next_run_time=_utcnow())  # page now, not at the next tick

    def _set_status(self, st: SourceStatus) -> None:
        if st.up != self._status.up:
            if st.up:
                log.info("%s answers again", self.source)
            else:
                log.warning("%s: %s", self.source, st.error)
        self._status = st

    def _to_wall(self, t: float) -> float:
        return t + self.epoch

    # ---- the snapshot --------------------------------------------------------------------------
    def _publish(self) -> None:
        with self._lock:
            cards = tuple(_card_view(w) for w in sorted(self.watches.values(), key=_order))
            read_s, eval_s = self._costs
            health = snap.build(
                self.health,
                to_wall=self._to_wall,
                sources=[self._status],
                sinks=self._sinks.values(),
                sample_duration_seconds=read_s,
                analysis_duration_seconds=eval_s,
                started_at=self.epoch + self.lookback_s,
            )
            found, over, unsized = self._counts
            now = self._clock()
            self.state = FleetSnapshot(
                cards,
                health,
                merged(cards, health, now - self.epoch, now),
                found,
                over,
                unsized,
                self.interval_s,
                self.scrape_interval_s,
            )

    # ---- Alertmanager --------------------------------------------------------------------------
    def push_job(self) -> None:
        if self.pusher is None:
            return
        self.pusher.push(self.state.firing(), time.time())
        changed = False
        for st in self.pusher.status.values():
            changed |= self._sinks.get(st.name) != st
            self._sinks[st.name] = st
        if changed:
            self._publish()

    # ---- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Read every `interval_s` from now on (the first read is the caller's: `read_job`), push every
        `push_interval`."""
        from apscheduler.schedulers.background import BackgroundScheduler

        sch = BackgroundScheduler(job_defaults={"max_instances": 1, "coalesce": True, "misfire_grace_time": None})
        sch.add_job(self.read_job, _every(self.interval_s), id="read")
        if self.pusher is not None:
            sch.add_job(self.push_job, _every(self.cfg.push_interval), id="push", next_run_time=_utcnow())
        sch.start()
        self._sched = sch

    def stop(self) -> None:
        if self._sched is not None:
            self._sched.shutdown(wait=True)
            self._sched = None
        if self.pusher is not None:
            try:
                self.push_job()
            finally:
                self.pusher.close()


def _card_view(w: CardWatch) -> CardView:
    labels = w.labels()
    alerts = tuple(dataclasses.replace(a, labels={**a.labels, **labels}) for a in w.snapshot.alerts)
    c = w.card
    return CardView(c.node, c.gpu, c.uuid, c.model, c.source.name, labels, w.snapshot, alerts)


def _order(w: CardWatch) -> tuple[str, int, str]:
    g = w.card.gpu
    return (w.card.node, int(g) if g.isdigit() else 1 << 30, w.card.uuid)
