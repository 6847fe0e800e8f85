"""Push alerts straight to Alertmanager (v2 API), because a scrape-and-evaluate path is too slow for a spike.

Like Prometheus does: every firing alert is re-sent each push with `endsAt` a few intervals ahead (so
Alertmanager resolves it by itself if oomwatch dies), and a resolve is sent with `endsAt` = now. Every
configured Alertmanager (an HA pair) gets every alert. A push that fails (down, slow, 5xx) is retried
next round with backoff; resolves are kept until delivered; the daemon never waits on it. Its numbers
(timeout, backoff, endsAt) are `oomwatch.config.PushTiming`.

Alertmanager is a sink: its health is `oomwatch_sink_up{sink="alertmanager:URL"}` and a log line, never a
telemetry alert. Alert times come from the snapshot's AlertViews, already on the wall clock.

Every alert gets the `node` label (the rules' copies carry it from the series, by the same name), and its
summary says the node first: a page read on a phone names the machine without opening it.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from oomwatch.config import NODE_LABEL, PushTiming, node_name
from oomwatch.credentials import ClientAuth
from oomwatch.model import SourceStatus
from oomwatch.redact import redact_url

from .labels import URL_LABELS, shown

if TYPE_CHECKING:
    import httpx

    from oomwatch.snapshot import AlertView

log = logging.getLogger("oomwatch.alertmanager")


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).isoformat().replace("+00:00", "Z")


__all__ = ["AlertmanagerPusher", "alert_payload"]


def alert_payload(
    labels: Mapping[str, Any], annotations: Mapping[str, Any], starts_wall: float, ends_wall: float, generator_url: str
) -> dict[str, Any]:
    return {
        "labels": {k: str(v) for k, v in labels.items() if v not in (None, "")},
        "annotations": {k: str(v) for k, v in annotations.items() if v not in (None, "")},
        "startsAt": _iso(starts_wall),
        "endsAt": _iso(ends_wall),
        "generatorURL": generator_url,
    }


class AlertmanagerPusher:
    """A sink: each URL's health is `status[url]` (`oomwatch_sink_up`), never a telemetry alert."""

    def __init__(
        self,
        urls: Iterable[str],
        generator_url: str = "http://localhost/",
        interval_s: float = 1.0,
        timeout_s: float | None = None,
        client: httpx.Client | None = None,
        timing: PushTiming | None = None,
        node: str | None = None,
        credentials: ClientAuth | None = None,
    ):
        """`credentials`: the `--alertmanager-*` credential files (bearer token or basic auth, CA), used for
        every URL (a basic auth user may come from each URL's own USER@)."""
        import httpx

        self.node = node_name() if node is None else node

        self.timing = timing or PushTiming()
        self.urls = [
            u.rstrip("/") + ("" if u.rstrip("/").endswith("/api/v2/alerts") else "/api/v2/alerts") for u in urls
        ]
        self.generator_url = generator_url
        self.interval_s = interval_s
        creds = credentials or ClientAuth("--alertmanager")
        self._client = client or httpx.Client(
            timeout=self.timing.timeout_s if timeout_s is None else timeout_s, verify=creds.verify()
        )
        # httpx's client default (no auth of ours) uses a URL's own user:password@, as before
        self._auth: dict[str, Any] = {u: creds.auth(u) or httpx.USE_CLIENT_DEFAULT for u in self.urls}
        self._resolved: dict[tuple[tuple[str, Any], ...], dict[str, Any]] = {}  # resolves not yet delivered everywhere
        self._failures: dict[str, int] = {u: 0 for u in self.urls}
        self._next_try: dict[str, float] = {u: 0.0 for u in self.urls}
        self.status = {u: SourceStatus(f"alertmanager:{redact_url(u)}", True) for u in self.urls}

    def resolved(self, alert_view: AlertView, wall_now: float) -> None:
        """Queue the resolve of one alert (an AlertView with wall-clock times) until every URL has it."""
        key = tuple(sorted(alert_view.labels.items()))
        self._resolved[key] = alert_payload(
            self._labels(alert_view),
            self._annotations(alert_view),
            _wall(alert_view.active_since_wall, wall_now),
            wall_now,
            self.generator_url,
        )

    def push(self, firing: Iterable[AlertView], wall_now: float) -> None:
        """Send the current firing alerts (AlertViews) plus undelivered resolves to every Alertmanager."""
        tm = self.timing
        ends = wall_now + max(tm.ends_at_intervals * self.interval_s, tm.ends_at_min_s)
        body = [
            alert_payload(
                self._labels(a),
                self._annotations(a),
                _wall(a.fired_at_wall or a.active_since_wall, wall_now),
                ends,
                self.generator_url,
            )
            for a in firing
        ]
        resolves = list(self._resolved.values())
        if not body and not resolves:
            return
        all_ok = True
        for url in self.urls:
            if time.monotonic() < self._next_try[url]:
                all_ok = False
                continue
            t0 = time.perf_counter()
            try:
                r = self._client.post(url, json=body + resolves, auth=self._auth[url])
                ok = r.status_code < 300
                err = None if ok else f"HTTP {r.status_code}"
            except Exception as e:  # noqa: BLE001 - httpx errors, DNS, refused: all the same here
                ok, err = False, str(e)[:160] or type(e).__name__
            dur = time.perf_counter() - t0
            self.status[url] = SourceStatus(f"alertmanager:{redact_url(url)}", ok, err, dur)
            if ok:
                self._failures[url] = 0
            else:
                all_ok = False
                n = self._failures[url] = self._failures[url] + 1
                backoff = self.interval_s * 2 ** min(n, tm.backoff_max_doublings)
                self._next_try[url] = time.monotonic() + min(tm.backoff_max_s, backoff)
                log.warning("Alertmanager %s: %s (retrying)", redact_url(url), err)
        if all_ok:
            self._resolved.clear()

    def _labels(self, a: AlertView) -> dict[str, Any]:
        """The alert's labels as the exposition shows them (URLs redacted), plus `node`: this host's, unless
        the alert names its own (the central mode's alerts carry the node of the card they are about)."""
        labels = {k: shown(str(v)) if k in URL_LABELS else v for k, v in a.labels.items()}
        return {NODE_LABEL: self.node, **labels}

    def _annotations(self, a: AlertView) -> dict[str, Any]:
        ann = dict(a.annotations)
        if ann.get("summary"):
            ann["summary"] = f"{a.labels.get(NODE_LABEL) or self.node}: {ann['summary']}"
        return ann

    def close(self) -> None:
        self._client.close()


def _wall(t: float | None, default: float) -> float:
    return default if t is None else t
