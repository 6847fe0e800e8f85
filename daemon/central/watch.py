"""One card of the fleet: its own `Analyzer`, fed each new scrape as the record a trace would give.

The card is sized from the first points that show free memory (used + free + reserved, as the backtest sizes
it); a card whose exporter gives no free, reserved or total series cannot be judged and is not started.
Times given to the analysis are seconds since the central's epoch (`to_wall` adds it back), one clock for
every card, so episodes and alerts of different cards line up.
"""

from __future__ import annotations

import dataclasses
import math

from ..analysis.alerts import Alert, Transition
from ..analysis.analyzer import Analyzer
from ..backtest.card import card_gpus, sample_record
from ..backtest.series import POD_LABELS, Card
from ..config import NODE_LABEL, DaemonConfig
from ..feed import feed
from ..snapshot import AlertView, Snapshot, alert_view, build, histories
from .reader import Point

__all__ = ["CardWatch", "card_size"]


def card_size(points: list[Point]) -> int | None:
    """The card's size: the largest used + free + reserved among the points that show free memory."""
    sums = [u + f + (r or 0) for _t, u, f, r in points if f is not None]
    return max(sums) if sums else None


class CardWatch:
    """A card's analysis and what the exporters read of it; not thread-safe (the central's lock guards it)."""

    def __init__(self, card: Card, total_bytes: int, cfg: DaemonConfig, epoch: float, step_s: float):
        self.card = card
        self.cfg = cfg
        self.epoch = epoch
        gpus = card_gpus(card, total_bytes, step_s)
        self.index = gpus[0].index
        self.analyzer = Analyzer(gpus, cfg.analysis, cfg.alerts)
        self.last_t = -math.inf  # unix time of the newest sample fed
        self.snapshot = Snapshot()

    def labels(self) -> dict[str, str]:
        """What an alert of this card carries besides the analysis' own labels: the exporter's host as `node`,
        and the pod using the card where the exporter maps pods (dcgm-exporter on Kubernetes)."""
        out = {NODE_LABEL: self.card.node}
        out.update({k: v for k, v in (self.card.pod or {}).items() if k in POD_LABELS and v})
        return out

    def feed(self, points: list[Point]) -> tuple[int, list[Transition]]:
        """Feed the points newer than the last one fed; (samples fed, alert transitions)."""
        new = [p for p in points if p[0] > self.last_t]
        if not new:
            return 0, []
        trans: list[Transition] = []
        records = (sample_record(self.index, t - self.epoch, u, f, r) for t, u, f, r in new)
        n = feed(self.analyzer, records, trans.append)
        self.last_t = new[-1][0]
        return n, trans

    def end(self) -> list[Transition]:
        """The card is gone (no sample for `stale_s`): what still fires resolves."""
        return self.analyzer.end_input()

    def view(self, a: Alert) -> AlertView:
        """One of this card's alerts as the exporters and Alertmanager see it: with its node and pod."""
        v = alert_view(a, self.to_wall)
        return dataclasses.replace(v, labels={**v.labels, **self.labels()})

    def to_wall(self, t: float) -> float:
        return t + self.epoch

    def refresh(self) -> Snapshot:
        """A fresh snapshot of the card (its history windows copied now: a card gets a sample per scrape, so
        once per read is the pace of its data); kept in `snapshot`."""
        sc = self.cfg.sampler
        an = self.analyzer
        hist = histories(an, sc.history_windows, sc.history_points)
        self.snapshot = build(an, to_wall=self.to_wall, history=hist, started_at=self.epoch)
        return self.snapshot
