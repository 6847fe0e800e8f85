"""/metrics of the central mode (`oomwatch run --prometheus URL`): the daemon's exposition, card by card.

Each watched card's series are the daemon's own sections (`_gpus`, `_alerts` of exporters/metrics.py) run
over that card's snapshot and labelled with the card's node (`with_node`), so a card read from Prometheus is
exposed exactly as a sidecar on its host would expose it and the rules, dashboards and joins `on (node, gpu)`
work unchanged. Families of the same name are merged across cards (one family per name in an exposition).
The central's own health (Prometheus as a source, Alertmanager as a sink, GPUTelemetryDown, costs) carries
the central's node. Label cardinality is bounded by the card cap (`--max-cards`): about 20 series per card;
cards beyond it are counted, never exposed (`oomwatch_fleet_cards{state="over_cap"}`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from oomwatch.config import node_name

from .metrics import Families, OomwatchCollector, _alerts, _gpus, _health, registry_of, with_node

if TYPE_CHECKING:
    from oomwatch.central.view import FleetSnapshot
    from oomwatch.snapshot import Snapshot

__all__ = ["CARD_SECTIONS", "FLEET_FAMILIES", "FleetCollector", "fleet_registry"]

log = logging.getLogger("oomwatch.http")

#: The daemon's sections that describe one card (no processes, engines or probes: Prometheus has none).
CARD_SECTIONS = (_gpus, _alerts)
#: The central's own sections, over its health snapshot.
OWN_SECTIONS = (_alerts, _health)

FLEET_FAMILIES = [
    (
        "oomwatch_fleet_cards",
        "Cards found in Prometheus by state: watched (evaluated and exposed), over_cap (beyond --max-cards, "
        "not evaluated), unsized (no free, reserved or total series to size them by).",
    ),
    ("oomwatch_fleet_read_interval_seconds", "How often the central reads the fleet (never faster than the scrape)."),
    ("oomwatch_fleet_scrape_interval_seconds", "The exporters' scrape interval, as the samples' spacing shows it."),
]
_FLEET_DOCS = dict(FLEET_FAMILIES)


class FleetCollector:
    """Every watched card's series (node = the card's host), then the central's own (node = its host)."""

    def __init__(self, get_state: Callable[[], FleetSnapshot], node: str | None = None):
        self._get = get_state
        self.node = node_name() if node is None else node
        self._errors: dict[str, int] = {}

    def describe(self) -> Families:
        yield from OomwatchCollector(lambda: None, self.node).describe()  # type: ignore[arg-type,return-value]
        for name, doc in FLEET_FAMILIES:
            yield GaugeMetricFamily(name, doc)

    def collect(self) -> Families:
        st = self._get()
        fams: dict[str, Metric] = {}
        for c in st.cards:
            self._add(fams, CARD_SECTIONS, c.snapshot, c.node)
        self._add(fams, OWN_SECTIONS, st.health, self.node)
        yield from fams.values()
        cards = GaugeMetricFamily("oomwatch_fleet_cards", _FLEET_DOCS["oomwatch_fleet_cards"], labels=["state"])
        for state, n in (("watched", len(st.cards)), ("over_cap", st.cards_over_cap), ("unsized", st.cards_unsized)):
            cards.add_metric([state], n)
        yield with_node(cards, self.node)
        for name, v in (
            ("oomwatch_fleet_read_interval_seconds", st.interval_s),
            ("oomwatch_fleet_scrape_interval_seconds", st.scrape_interval_s),
        ):
            if v is not None:
                yield with_node(GaugeMetricFamily(name, _FLEET_DOCS[name], value=v), self.node)
        errs = CounterMetricFamily(
            "oomwatch_exporter_errors",
            "Exposition sections dropped from a scrape because building them failed.",
            labels=["section"],
        )
        for name, n in sorted(self._errors.items()):
            errs.add_metric([name], n)
        yield with_node(errs, self.node)

    def _add(
        self, fams: dict[str, Metric], sections: Iterable[Callable[[Snapshot], Families]], s: Snapshot, node: str
    ) -> None:
        """Each section over `s`, its series labelled `node`, merged into `fams` by family name; a section that
        fails is left out for this card and counted (the other cards and sections are served)."""
        for section in sections:
            try:
                built = [with_node(f, node) for f in section(s)]
            except Exception:  # noqa: BLE001 - one card's odd value must not cost the fleet's exposition
                log.exception("metrics section %s failed for a card of %s", section.__name__, node)
                key = section.__name__.removeprefix("_")
                self._errors[key] = self._errors.get(key, 0) + 1
                continue
            for f in built:
                have = fams.get(f.name)
                if have is None:
                    fams[f.name] = f
                else:
                    have.samples.extend(f.samples)


def fleet_registry(get_state: Callable[[], FleetSnapshot], process_metrics: bool = True) -> CollectorRegistry:
    """The central's registry: the fleet collector, build info, and the process collectors (as the daemon's)."""
    return registry_of(FleetCollector(get_state), process_metrics)
