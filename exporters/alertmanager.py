"""Push alerts straight to Alertmanager (v2 API), because a scrape-and-evaluate path is too slow for a spike.

Like Prometheus does: every firing alert is re-sent each push with `endsAt` a few intervals ahead (so
Alertmanager resolves it by itself if oomwatch dies), and a resolve is sent with `endsAt` = now. Every
configured Alertmanager (an HA pair) gets every alert. A push that fails (down, slow, 5xx) is retried
next round with backoff; resolves are kept until delivered; the daemon never waits on it.
"""

from __future__ import annotations

import datetime as dt
import logging
import time

from daemon.model import SourceStatus

log = logging.getLogger("oomwatch.alertmanager")


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).isoformat().replace("+00:00", "Z")


def alert_payload(labels: dict, annotations: dict, starts_wall: float, ends_wall: float, generator_url: str) -> dict:
    return {
        "labels": {k: str(v) for k, v in labels.items() if v not in (None, "")},
        "annotations": {k: str(v) for k, v in annotations.items() if v not in (None, "")},
        "startsAt": _iso(starts_wall),
        "endsAt": _iso(ends_wall),
        "generatorURL": generator_url,
    }


class AlertmanagerPusher:
    def __init__(self, urls, generator_url: str = "http://localhost/", interval_s: float = 1.0,
                 timeout_s: float = 2.0, client=None):
        import httpx

        self.urls = [u.rstrip("/") + ("" if u.rstrip("/").endswith("/api/v2/alerts") else "/api/v2/alerts")
                     for u in urls]
        self.generator_url = generator_url
        self.interval_s = interval_s
        self._client = client or httpx.Client(timeout=timeout_s)
        self._resolved: dict[tuple, dict] = {}  # resolves not yet delivered everywhere
        self._failures: dict[str, int] = {u: 0 for u in self.urls}
        self._next_try: dict[str, float] = {u: 0.0 for u in self.urls}
        self.status = {u: SourceStatus(f"alertmanager:{u}", True) for u in self.urls}
        self.delivered = 0

    def resolved(self, alert_view, wall_now: float, mono_to_wall) -> None:
        key = tuple(sorted(alert_view.labels.items()))
        self._resolved[key] = alert_payload(
            alert_view.labels, alert_view.annotations, mono_to_wall(alert_view.active_since), wall_now,
            self.generator_url,
        )

    def push(self, firing, wall_now: float, mono_to_wall) -> None:
        """Send the current firing alerts plus undelivered resolves to every Alertmanager."""
        ends = wall_now + max(4 * self.interval_s, 60.0)
        body = [
            alert_payload(a.labels, a.annotations, mono_to_wall(a.fired_at or a.active_since), ends,
                          self.generator_url)
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
                r = self._client.post(url, json=body + resolves)
                ok = r.status_code < 300
                err = None if ok else f"HTTP {r.status_code}"
            except Exception as e:  # noqa: BLE001 - httpx errors, DNS, refused: all the same here
                ok, err = False, str(e)[:160] or type(e).__name__
            dur = time.perf_counter() - t0
            self.status[url] = SourceStatus(f"alertmanager:{url}", ok, err, dur)
            if ok:
                self._failures[url] = 0
                self.delivered += len(body) + len(resolves)
            else:
                all_ok = False
                n = self._failures[url] = self._failures[url] + 1
                self._next_try[url] = time.monotonic() + min(30.0, self.interval_s * 2 ** min(n, 5))
                log.warning("Alertmanager %s: %s (retrying)", url, err)
        if all_ok:
            self._resolved.clear()

    def close(self):
        self._client.close()
