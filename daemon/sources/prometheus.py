"""Read series from a Prometheus HTTP API (`/api/v1/series`, `/api/v1/query_range`, `/api/v1/query`).

The fleet already keeps GPU memory in Prometheus (dcgm-exporter, nvidia_gpu_exporter, oomwatch's own
metrics), so `oomwatch backtest` reads it from there. Two facts of that API shape this module:
- a range query may return at most `MAX_POINTS_PER_SERIES` points per series (Prometheus answers 400
  "exceeded maximum resolution of 11,000 points per timeseries"), so long ranges are read in chunks;
- a failure is one line for the user: an unreachable server, a refused query, a timeout, an answer that
  is not Prometheus' JSON. Errors that every further query would meet too (`fatal`) stop a backtest; the
  others belong to the one card that met them.

Only I/O and parsing here: what the series mean is `oomwatch.backtest`'s business.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from ..errors import OomwatchError

#: Prometheus' own limit on points per series in one range query (promql/engine: `maxPointsPerSeries`).
MAX_POINTS_PER_SERIES = 11_000
#: Points we ask for per chunk: under the limit with room for the inclusive end point and rounding.
CHUNK_POINTS = 10_000
DEFAULT_TIMEOUT_S = 30.0
_TOO_MANY = re.compile(r"maximum resolution|too many (points|samples)|exceeded .*points", re.IGNORECASE)


class PrometheusError(OomwatchError):
    """A Prometheus query that failed; `fatal` when every further query would fail the same way."""

    def __init__(self, message: str, fatal: bool = False):
        super().__init__(message)
        self.fatal = fatal

    def __reduce__(self) -> tuple[type, tuple[str, bool]]:  # `fatal` survives the trip from a worker process
        return type(self), (str(self), self.fatal)


def redact_url(url: str) -> str:
    """`url` as it may be shown: no userinfo, no query, and `oomwatch.redact.redact_url`'s token rules."""
    from .. import redact

    shared = getattr(redact, "redact_url", None)  # landing beside this module; the strip suffices without it
    base = _strip(url)
    return str(shared(base)) if callable(shared) else base


def _strip(url: str) -> str:
    """`url` without userinfo and query (`https://user:pw@host/p?token=x` -> `https://host/p`): what the
    HTTP client is given as its base (credentials go in its auth instead)."""
    try:
        u = urlsplit(url)
        host = u.hostname or ""
        if ":" in host:  # an IPv6 literal keeps its brackets
            host = f"[{host}]"
        if u.port is not None:
            host = f"{host}:{u.port}"
        return urlunsplit((u.scheme, host, u.path, "", ""))  # the query may carry a token too
    except ValueError:
        return "<unparsable URL>"


def check_url(url: str) -> str:
    """The API base URL (trailing slash dropped), or a one-line error for one that cannot be Prometheus'."""
    try:
        u = urlsplit(url)
        ok = u.scheme in ("http", "https") and bool(u.hostname) and (u.port is None or u.port > 0)
        httpx.URL(url)
    except (ValueError, httpx.InvalidURL):
        ok = False
    if not ok:
        raise PrometheusError(f"not an http(s)://HOST[:PORT] Prometheus URL: {redact_url(url)!r}", fatal=True)
    return url.rstrip("/")


@dataclass(frozen=True)
class Series:
    """One series of a range query: its labels and its points as parallel lists (unix s, value)."""

    labels: dict[str, str]
    t: list[float]
    v: list[float]


def chunks(start: float, end: float, step: float, points: int = CHUNK_POINTS) -> Iterator[tuple[float, float]]:
    """[start, end] cut into ranges of at most `points` steps each; consecutive ranges do not overlap."""
    span = step * (points - 1)
    s = start
    while s <= end:
        e = min(end, s + span)
        yield s, e
        s = e + step


class PrometheusClient:
    """A thread-safe reader of one Prometheus (one httpx connection pool shared by the worker threads)."""

    def __init__(self, url: str, timeout_s: float = DEFAULT_TIMEOUT_S, transport: httpx.BaseTransport | None = None):
        self.url = check_url(url)
        self.shown = redact_url(self.url)
        base = _strip(self.url)
        u = urlsplit(self.url)
        auth = httpx.BasicAuth(u.username or "", u.password or "") if u.username else None
        self.timeout_s = timeout_s
        self._http = httpx.Client(base_url=base, auth=auth, timeout=timeout_s, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> PrometheusClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the API ---------------------------------------------------------------------------------
    def series(self, matchers: Sequence[str], start: float, end: float) -> list[dict[str, str]]:
        """The label sets of every series matching any of `matchers` in [start, end]."""
        data = self._get("/api/v1/series", [("match[]", m) for m in matchers] + _range(start, end))
        if not isinstance(data, list):
            raise PrometheusError(f"{self.shown}: /api/v1/series answered no list", fatal=True)
        return [{str(k): str(v) for k, v in d.items()} for d in data if isinstance(d, dict)]

    def query(self, promql: str, at: float) -> list[tuple[dict[str, str], float]]:
        """An instant query: (labels, value) per series."""
        data = self._get("/api/v1/query", [("query", promql), ("time", _ts(at))])
        out = []
        for r in _result(data, "vector", self.shown):
            v = _value(r.get("value"))
            if v is not None:
                out.append((r.get("metric") or {}, v))
        return out

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[Series]:
        """One range query (at most `MAX_POINTS_PER_SERIES` points: see `query_range_chunked`)."""
        params = [("query", promql), ("start", _ts(start)), ("end", _ts(end)), ("step", f"{step:g}")]
        return _matrix(self._get("/api/v1/query_range", params), self.shown)

    def query_samples(self, promql: str, at: float) -> list[Series]:
        """An instant query of a range selector (`metric{...}[5m]`): the raw samples with the times they were
        scraped at, not a grid of steps (the central mode feeds each scrape once and learns the scrape
        interval from their spacing)."""
        return _matrix(self._get("/api/v1/query", [("query", promql), ("time", _ts(at))]), self.shown)

    def query_range_chunked(self, promql: str, start: float, end: float, step: float) -> Iterator[list[Series]]:
        """`query_range` over [start, end] in chunks within Prometheus' points limit, one chunk at a time
        (so a month of a card is never held at once)."""
        for s, e in chunks(start, end, step):
            yield self.query_range(promql, s, e, step)

    # ---- transport -------------------------------------------------------------------------------
    def _get(self, path: str, params: list[tuple[str, str]]) -> Any:
        where = f"Prometheus at {self.shown}"
        try:
            r = self._http.get(path, params=tuple(params))
        except httpx.TimeoutException:
            raise PrometheusError(
                f"{where} did not answer within {self.timeout_s:g} s (a slow or overloaded server: "
                "try --timeout, a shorter range or a coarser --step)",
                fatal=True,
            ) from None
        except httpx.TransportError as e:
            raise PrometheusError(f"cannot reach {where}: {_reason(e)}", fatal=True) from None
        try:
            body = r.json()
        except ValueError:
            body = None
        err = body.get("error") if isinstance(body, dict) else None
        if r.status_code in (400, 422) and err and _TOO_MANY.search(str(err)):
            raise PrometheusError(
                f"{where} refused the query: too many points ({_line(err)}); use a coarser --step", fatal=True
            )
        if r.status_code in (401, 403):
            raise PrometheusError(f"{where} refused access (HTTP {r.status_code}): check the credentials", fatal=True)
        if not isinstance(body, dict) or "status" not in body:
            raise PrometheusError(
                f"{where} answered HTTP {r.status_code} without Prometheus' API JSON: is this a Prometheus URL?",
                fatal=True,
            )
        if body["status"] != "success":
            # A query the server could not run (bad_data, execution, timeout inside Prometheus): this query's.
            kind = body.get("errorType") or f"HTTP {r.status_code}"
            raise PrometheusError(f"{where}: {kind}: {_line(err or 'query failed')}", fatal=r.status_code == 404)
        return body.get("data")


def _range(start: float, end: float) -> list[tuple[str, str]]:
    return [("start", _ts(start)), ("end", _ts(end))]


def _ts(t: float) -> str:
    return f"{t:.3f}"


def _value(p: Any) -> float | None:
    """A sample's value, or None for NaN, +-Inf or a malformed pair (dropped, never a 0)."""
    try:
        v = float(p[1])
    except (TypeError, ValueError, IndexError):
        return None
    return v if math.isfinite(v) else None


def _matrix(data: Any, shown: str) -> list[Series]:
    """A matrix result as Series (samples that are not finite numbers dropped, never a 0)."""
    out = []
    for r in _result(data, "matrix", shown):
        ts, vs = [], []
        for p in r.get("values") or ():
            v = _value(p)
            if v is not None:
                ts.append(float(p[0]))
                vs.append(v)
        out.append(Series(r.get("metric") or {}, ts, vs))
    return out


def _result(data: Any, kind: str, shown: str) -> list[dict[str, Any]]:
    if not isinstance(data, dict) or data.get("resultType") != kind or not isinstance(data.get("result"), list):
        raise PrometheusError(f"Prometheus at {shown} answered no {kind} result")
    return [r for r in data["result"] if isinstance(r, dict)]


def _reason(e: Exception) -> str:
    msg = str(e) or type(e).__name__
    if "refused" in msg.lower():
        return "connection refused (is Prometheus running there?)"
    return _line(msg)


def _line(msg: object, limit: int = 200) -> str:
    s = " ".join(str(msg).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."
