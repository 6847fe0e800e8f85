"""One card's backtest: read its curve from Prometheus chunk by chunk, turn it into the records a trace
gives (a header with one GPU, then samples; no processes: Prometheus has none), and feed them to the
analysis exactly as `oomwatch replay` does (`oomwatch.feed.feed` into a fresh `Analyzer`).

Records are built through `oomwatch.trace.parse_header`/`parse_line` from trace-shaped lines, so a backtest
sample is the very record a recorded trace would give for the same numbers. Memory is bounded by one chunk
(at most 10,000 steps) plus the analysis' fixed history: a month of a card is never held at once.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..analysis.alerts import Transition
from ..analysis.analyzer import Analyzer
from ..errors import one_line
from ..feed import feed
from ..model import GpuInfo, Sample
from ..sources.prometheus import PrometheusClient, PrometheusError, Series, chunks
from ..trace import header_line, parse_header, parse_line
from .ooms import OomDetector, SuspectedOOM, match_pages
from .series import POD_LABELS, Card, label_matchers

#: The alert that pages (critical) and the one that warns of a leak; the names the daemon uses.
PAGE_ALERT = "GPUOOMImminent"
LEAK_ALERT = "GPUMemoryLeak"
#: How long after a suspected OOM a container restart still counts as its crash.
RESTART_WINDOW_S = 600.0
RESTARTS_METRIC = "kube_pod_container_status_restarts_total"


@dataclass
class CardResult:
    """What a backtest found on one card; `to_json` is its line of `oomwatch backtest --json`."""

    card: Card
    step_s: float
    start: float | None = None
    end: float | None = None
    samples: int = 0
    alerts: list[dict[str, Any]] = field(default_factory=list)
    ooms: list[SuspectedOOM] = field(default_factory=list)
    verdict: str = ""
    episodes: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    chart: str | None = None  # the chart drawn of it (`--plot DIR`, cards that paged) ...
    chart_error: str | None = None  # ... or why it could not be written

    @property
    def days(self) -> float:
        return 0.0 if self.start is None or self.end is None else (self.end - self.start) / 86400.0

    def count(self, alert: str) -> int:
        return sum(1 for a in self.alerts if a["alert"] == alert and a["state"] == "firing")

    def to_json(self) -> dict[str, Any]:
        return {
            "card": self.card.to_json(),
            "source": self.card.source.name,
            "start": self.start,
            "end": self.end,
            "step_s": self.step_s,
            "samples": self.samples,
            "alerts": self.alerts,
            "suspected_ooms": [
                {
                    "t": round(o.t, 3),
                    "peak_used_ratio": o.peak_used_ratio,
                    "paged_ahead_s": None if o.paged_ahead_s is None else round(o.paged_ahead_s, 1),
                    "restarted": o.restarted,
                }
                for o in self.ooms
            ],
            "verdict": self.verdict,
            "episodes": self.episodes,
            "error": self.error,
            "chart": self.chart,
            "chart_error": self.chart_error,
        }


def run_card(
    client: PrometheusClient,
    card: Card,
    start: float,
    end: float,
    step: float,
    plot_dir: str | None = None,
) -> CardResult:
    """Backtest one card over [start, end]. A card-local failure is returned in `error`; a fatal one
    (every card would meet it) is raised. With `plot_dir`, a card that paged is drawn there (`chart`)."""
    res = CardResult(card, step)
    t_wall = time.perf_counter()
    try:
        _analyse(client, card, start, end, step, res, plot_dir)
    except PrometheusError as e:
        if e.fatal:
            raise
        res.error = str(e)
    except Exception as e:  # noqa: BLE001 - one card's odd curve must not end a fleet's backtest: its line says
        res.error = f"analysis failed ({type(e).__name__}: {e}); please report it with this card's series"
    res.seconds = time.perf_counter() - t_wall
    return res


def _analyse(
    client: PrometheusClient,
    card: Card,
    start: float,
    end: float,
    step: float,
    res: CardResult,
    plot_dir: str | None = None,
) -> None:
    points = _points(client, card, start, end, step)
    first = next(points, None)
    if first is None:
        res.error = "no samples in the range"
        return
    total = _total(first)
    if total is None:
        res.error = "the card's size is unknown (no free, reserved or total series beside the used one)"
        return
    gpus = card_gpus(card, total, step)
    index = gpus[0].index
    t0 = first[0][0]
    analyzer = Analyzer(gpus)
    ooms = OomDetector(index, total, step)
    trans: list[Transition] = []
    last = [t0]

    def records() -> Iterator[object]:
        for chunk in _chain(first, points):
            for t, used, free, reserved in chunk:
                last[0] = t
                yield sample_record(index, t - t0, used, free, reserved)

    on_sample: Callable[[Sample], None] = ooms.add
    recorder = None
    if plot_dir is not None:
        from oomwatch.exporters.plot import Recorder

        recorder = Recorder(bucket_s=step)  # one point a step: a chart's spikes are then "up and back in a step"

        def on_sample(s: Sample) -> None:
            ooms.add(s)
            recorder.add(s)

    res.samples = feed(analyzer, records(), trans.append, on_sample)
    summary = analyzer.summary()
    res.start, res.end = round(t0, 3), round(last[0], 3)
    res.alerts = [_alert(tr, t0) for tr in trans]
    pages = _intervals(trans, PAGE_ALERT, t0)
    for o in ooms.found:
        o.t, o.dropped_at = o.t + t0, o.dropped_at + t0
    match_pages(ooms.found, pages)
    res.ooms = ooms.found
    _restarts(client, card, res.ooms)
    res.verdict = str(summary["gpus"].get(str(index), {}).get("verdict", ""))
    res.episodes = [_shift(ep, t0) for ep in summary["episodes"]]
    if plot_dir is not None and recorder is not None and res.count(PAGE_ALERT):
        _chart(plot_dir, card, analyzer, recorder, trans, t0, res)


def chart_name(card: Card) -> str:
    """The chart's file name: node and GPU, in characters any file system takes (labels may hold '/', ':')."""
    raw = f"{card.node or 'unknown'}-gpu{card.gpu}-{card.uuid[-8:] if card.uuid else ''}".rstrip("-")
    return re.sub(r"[^A-Za-z0-9._-]+", "_", raw)[:120] + ".png"


def _chart(
    plot_dir: str, card: Card, analyzer: Analyzer, recorder: Any, trans: list[Transition], t0: float, res: CardResult
) -> None:
    """Draw the card as `replay --plot` draws a trace; a chart that cannot be written is said on the card's
    line (the backtest's numbers stand without it)."""
    from datetime import datetime, timezone

    from oomwatch.exporters.plot import PlotUnavailable, plot

    path = os.path.join(plot_dir, chart_name(card))
    since = datetime.fromtimestamp(t0, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    try:
        plot(path, analyzer, recorder, trans, card=f"{card.node or '?'} gpu {card.gpu}", since=since)
    except (OSError, ValueError, PlotUnavailable) as e:
        res.chart_error = one_line(f"{type(e).__name__}: {e}")
        return
    res.chart = path


def card_gpus(card: Card, total_bytes: int, step_s: float) -> tuple[GpuInfo, ...]:
    """The header a trace of this card would carry (one GPU), read through the trace parser like a file's."""
    index = int(card.gpu) if card.gpu.isdigit() else 0
    info = GpuInfo(index, card.model, card.uuid, total_bytes)
    return parse_header(header_line([info], 1.0 / step_s), "prometheus").gpus


def sample_record(index: int, t: float, used: int, free: int | None, reserved: int | None) -> object:
    """The very record a recorded trace gives for these numbers (no utilisation, no processes: Prometheus
    has none), so the analysis cannot tell a Prometheus card from a trace."""
    g: dict[str, Any] = {"i": index, "used": used, "free": free, "reserved": reserved, "util": None, "procs": []}
    return parse_line({"t": t, "gpus": [g]})


#: One chunk of a card's curve: (unix s, used, free, reserved) in bytes, None where not read.
Chunk = list[tuple[float, int, int | None, int | None]]


def _points(client: PrometheusClient, card: Card, start: float, end: float, step: float) -> Iterator[Chunk]:
    """The card's samples chunk by chunk (empty chunks skipped), every role read on the same step grid."""
    roles = [r for r in ("used", "free", "reserved") if r in card.roles]
    scale = card.source.scale_bytes
    for s, e in chunks(start, end, step):
        got = {r: _merge(client.query_range(card.query(r), s, e, step)) for r in roles}
        used = got.get("used", {})
        chunk: Chunk = []
        for t in sorted(used):
            free, res = got.get("free", {}).get(t), got.get("reserved", {}).get(t)
            chunk.append((t, _bytes(used[t], scale), _opt_bytes(free, scale), _opt_bytes(res, scale)))
        if chunk:
            if "total" in card.roles and "free" not in card.roles:
                chunk = _free_from_total(client, card, s, e, step, chunk)
            yield chunk


def _free_from_total(client: PrometheusClient, card: Card, s: float, e: float, step: float, chunk: Chunk) -> Chunk:
    totals = _merge(client.query_range(card.query("total"), s, e, step))
    scale = card.source.scale_bytes
    out: Chunk = []
    for t, used, _free, res in chunk:
        tot = totals.get(t)
        out.append((t, used, None if tot is None else max(0, _bytes(tot, scale) - used - (res or 0)), res))
    return out


def _merge(series: list[Series]) -> dict[float, float]:
    """One curve from a query's series (one with `max by`; the largest value where several overlap)."""
    out: dict[float, float] = {}
    for s in series:
        for t, v in zip(s.t, s.v, strict=True):
            if t not in out or v > out[t]:
                out[t] = v
    return out


def _bytes(v: float, scale: float) -> int:
    return int(round(v * scale))


def _opt_bytes(v: float | None, scale: float) -> int | None:
    return None if v is None or not math.isfinite(v) else _bytes(v, scale)


def _total(chunk: Chunk) -> int | None:
    """The card's size from its first chunk: the largest used + free + reserved seen."""
    sums = [u + f + (r or 0) for _t, u, f, r in chunk if f is not None]
    return max(sums) if sums else None


def _chain(first: Chunk, rest: Iterator[Chunk]) -> Iterator[Chunk]:
    yield first
    yield from rest


def _alert(tr: Transition, t0: float) -> dict[str, Any]:
    al = tr.alert
    return {
        "alert": al.alertname,
        "state": tr.state,
        "t": round(tr.t + t0, 3),
        "summary": al.summary,
        "eta_seconds": None if al.eta_seconds is None else round(al.eta_seconds, 1),
    }


def _intervals(trans: list[Transition], alert: str, t0: float) -> list[tuple[float, float | None]]:
    """(start, end or None) of each firing of `alert`, in unix seconds."""
    out: list[tuple[float, float | None]] = []
    open_at: dict[tuple[tuple[str, str], ...], float] = {}
    for tr in trans:
        if tr.alert.alertname != alert:
            continue
        key = tr.alert.labels
        if tr.state == "firing":
            open_at[key] = tr.t + t0
        elif key in open_at:
            out.append((open_at.pop(key), tr.t + t0))
    out.extend((a, None) for a in open_at.values())
    return out


def _shift(ep: dict[str, Any], t0: float) -> dict[str, Any]:
    """An episode of the summary with its times in unix seconds."""
    ep = dict(ep)
    for k in ("start", "end"):
        if isinstance(ep.get(k), (int, float)):
            ep[k] = round(ep[k] + t0, 3)
    return ep


def _restarts(client: PrometheusClient, card: Card, ooms: list[SuspectedOOM]) -> None:
    """Mark each OOM with whether kube-state-metrics saw the card's container restart right after it
    (left None where the card has no pod labels or the cluster has no kube-state-metrics)."""
    pod = card.pod or {}
    if not ooms or not pod.get("pod") or not pod.get("namespace"):
        return
    q = f"sum({RESTARTS_METRIC}{label_matchers({k: pod[k] for k in POD_LABELS if pod.get(k)})})"
    for o in ooms:
        try:
            before = client.query(q, o.t)
            after = client.query(q, o.t + RESTART_WINDOW_S)
        except PrometheusError:
            continue  # evidence, not the verdict: a failed look-up leaves it unknown
        if before and after:
            o.restarted = after[0][1] > before[0][1]


__all__ = ["CardResult", "run_card", "card_gpus", "sample_record", "PAGE_ALERT", "LEAK_ALERT"]
