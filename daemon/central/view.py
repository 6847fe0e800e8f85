"""The fleet as the exporters see it: one immutable `FleetSnapshot`, swapped in whole after each read.

Each watched card keeps its own `Snapshot` (built by `oomwatch.snapshot.build` from its Analyzer, as the
daemon builds one), so /metrics runs the daemon's own exposition sections over each card and labels the
series with the card's node (exporters/fleet.py). The status page reads one merged `Snapshot` (`status`): the
cards numbered 0..n-1 in fleet order, each named by its node, GPU index and model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..snapshot import AlertView, FindingView, Snapshot

__all__ = ["CardView", "FleetSnapshot", "merged"]


@dataclass(frozen=True)
class CardView:
    """One watched card: who it is (as the exporter labels it) and its latest snapshot."""

    node: str
    gpu: str
    uuid: str
    model: str
    source: str  # dcgm-exporter | nvidia_gpu_exporter | oomwatch
    labels: Mapping[str, str]  # what its alerts carry besides the analysis' own: node, pod, namespace, container
    snapshot: Snapshot
    alerts: tuple[AlertView, ...] = ()  # its alerts with `labels` added


@dataclass(frozen=True)
class FleetSnapshot:
    cards: tuple[CardView, ...] = ()
    health: Snapshot = field(default_factory=Snapshot)  # the central's own: sources, sinks, GPUTelemetryDown, costs
    status: Snapshot = field(default_factory=Snapshot)  # the merged view the status page reads
    cards_found: int = 0  # cards with samples in the last read (before the cap)
    cards_over_cap: int = 0  # found but not watched: beyond --max-cards
    cards_unsized: int = 0  # found, but no free/reserved/total series to size them by
    interval_s: float | None = None  # the read period in use
    scrape_interval_s: float | None = None  # the scrape interval the samples show (or --scrape-interval)

    def firing(self) -> list[AlertView]:
        """Every firing alert of the fleet: the central's own and each card's (with its node and pod)."""
        own = [a for a in self.health.alerts if a.state == "firing"]
        return own + [a for c in self.cards for a in c.alerts if a.state == "firing"]


def merged(cards: tuple[CardView, ...], health: Snapshot, t: float, wall: float) -> Snapshot:
    """One Snapshot of the whole fleet for the status page, as of `t` (analysis time; `wall` unix): card k of
    the fleet is GPU k there, named `node gpuN model`; findings and episodes point at that number (alerts
    keep their real labels, node and gpu); counts add up."""
    gpus, findings, episodes = [], [], []
    for k, c in enumerate(cards):
        for g in c.snapshot.gpus:
            info = dataclasses.replace(g.info, index=k, name=f"{c.node} gpu{c.gpu} {c.model}".strip())
            gpus.append(dataclasses.replace(g, info=info))
        findings += [dataclasses.replace(f, gpu=str(k)) for f in c.snapshot.findings if isinstance(f, FindingView)]
        episodes += [_renumber(e, k, c.node) for e in c.snapshot.episodes]
    alerts = list(health.alerts) + [a for c in cards for a in c.alerts]
    return dataclasses.replace(
        health,
        t=t,
        wall=wall,
        gpus=tuple(gpus),
        alerts=tuple(alerts),
        findings=tuple(list(health.findings) + findings),
        episodes=tuple(sorted(episodes, key=lambda e: e.get("start") or 0.0)[-50:]),
        samples_total=sum(c.snapshot.samples_total for c in cards),
    )


def _renumber(e: Mapping[str, Any], k: int, node: str) -> Mapping[str, Any]:
    d = dict(e)
    if d.get("gpu") is not None:
        d["gpu"] = str(k)
    d["node"] = node
    return MappingProxyType(d)
