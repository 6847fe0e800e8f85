"""One read of a fleet's GPU memory from Prometheus: the raw samples scraped since the last read, per card.

One request per read, whatever the fleet's size: an instant query of a range selector over every GPU-memory
metric name the backtest understands (`{__name__=~"DCGM_FI_DEV_FB_USED|...", <selector>}[90s]`). A range
selector returns the samples as scraped, with their scrape timestamps, so each scrape is fed to the analysis
once and the scrape interval is read off their spacing; the series are grouped into cards by
`oomwatch.backtest.series` exactly as the backtest groups them, and a card's several series (pod labels that
changed) are merged by their maximum, as the backtest's `max by` does. The central's first read also takes
each card's history before that, one point a minute (`read_history`, a subquery: one request too).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..backtest.card import _bytes, _merge, _opt_bytes
from ..backtest.series import SOURCES, Card, CardKey, cards_from_series, in_shard, series_key
from ..sources.prometheus import PrometheusClient, Series

__all__ = ["FleetRead", "FleetReader", "Point", "metric_names"]

#: (unix s, used, free, reserved) in bytes; free and reserved None where the exporter has no such series.
Point = tuple[float, int, int | None, int | None]


def metric_names() -> list[str]:
    """Every GPU-memory metric of every understood exporter (SOURCES' order)."""
    return [m for s in SOURCES for m in s.metrics.values()]


@dataclass(frozen=True)
class FleetRead:
    """What one read found: each card with its points (oldest first), and the scrape interval they show."""

    cards: list[tuple[Card, list[Point]]]
    scrape_interval_s: float | None  # median spacing of the cards' samples; None with fewer than 2 anywhere


class FleetReader:
    """Reads the fleet through one `PrometheusClient`; `selector` narrows the series (`job="dcgm"`)."""

    def __init__(self, client: PrometheusClient, selector: str = "", shard: tuple[int, int] | None = None):
        self.client = client
        self.shard = shard  # (K, N): only the cards of the nodes that hash to K (`backtest.series.shard_of`)
        inner = selector.strip().strip("{}").strip()
        self._matchers = f'__name__=~"{"|".join(metric_names())}"' + (f",{inner}" if inner else "")

    def query(self, window_s: float) -> str:
        """The PromQL of one read looking `window_s` back."""
        return f"{{{self._matchers}}}[{max(1, int(-(-window_s // 1)))}s]"

    def history_query(self, window_s: float, step_s: float) -> str:
        """The PromQL of a history read: a subquery, each series' value every `step_s` over `window_s`."""
        return f"{{{self._matchers}}}[{max(1, int(-(-window_s // 1)))}s:{max(1, int(-(-step_s // 1)))}s]"

    def read(self, at: float, window_s: float) -> FleetRead:
        """The samples of (at - window_s, at], per card (PrometheusError, one line, when the read fails)."""
        return self._per_card(self.client.query_samples(self.query(window_s), at))

    def read_history(self, at: float, window_s: float, step_s: float) -> FleetRead:
        """Each card's curve over (at - window_s, at] one point per `step_s` (the last value scraped by then, as
        `query_range` gives it): hours of a fleet in one answer of a few points per series-minute."""
        return self._per_card(self.client.query_samples(self.history_query(window_s, step_s), at))

    def _per_card(self, series: list[Series]) -> FleetRead:
        by_card: dict[CardKey, dict[str, list[Series]]] = {}
        for s in series:
            hit = series_key(s.labels)
            if hit is not None:
                by_card.setdefault(hit[2], {}).setdefault(hit[1], []).append(s)
        cards = _one_per_card(cards_from_series([s.labels for s in series if s.t]))
        cards = [c for c in cards if in_shard(c, self.shard)]
        out = [(c, _points(c, by_card.get(c.key, {}))) for c in cards]
        out = [(c, p) for c, p in out if p]
        return FleetRead(out, _spacing([p for _, p in out]))


def _one_per_card(cards: list[Card]) -> list[Card]:
    """One card per physical GPU: where two exporters (or oomwatch's own series, scraped back from a central
    oomwatch) report the same UUID, the first source of SOURCES' order is kept."""
    rank = {s.name: k for k, s in enumerate(SOURCES)}
    best: dict[tuple[str, str], Card] = {}
    for c in cards:
        key = ("uuid", c.uuid) if c.uuid else ("card", f"{c.node}/{c.gpu}")
        have = best.get(key)
        if have is None or rank[c.source.name] < rank[have.source.name]:
            best[key] = c
    keep = set(map(id, best.values()))
    return [c for c in cards if id(c) in keep]


def _points(card: Card, roles: dict[str, list[Series]]) -> list[Point]:
    """The card's points, every role on the used series' timestamps (one scrape writes them all at once)."""
    scale = card.source.scale_bytes
    got = {r: _merge(ss) for r, ss in roles.items()}
    used, free, reserved, total = (got.get(r, {}) for r in ("used", "free", "reserved", "total"))
    out: list[Point] = []
    for t in sorted(used):
        u, r = _bytes(used[t], scale), _opt_bytes(reserved.get(t), scale)
        f = _opt_bytes(free.get(t), scale)
        if f is None and t in total:  # nvidia_gpu_exporter: free from total where no free series
            f = max(0, _bytes(total[t], scale) - u - (r or 0))
        out.append((t, u, f, r))
    return out


def _spacing(curves: list[list[Point]]) -> float | None:
    """The scrape interval the samples show: the median of each card's median spacing."""
    per_card = []
    for pts in curves:
        gaps = [b[0] - a[0] for a, b in zip(pts, pts[1:], strict=False) if b[0] > a[0]]
        if gaps:
            per_card.append(statistics.median(gaps))
    return statistics.median(per_card) if per_card else None
