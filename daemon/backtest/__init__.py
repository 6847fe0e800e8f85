"""Fleet mode: the same analysis `oomwatch replay` runs, over the GPU-memory history a cluster's Prometheus
already keeps (issue #24), so a team can see what oomwatch would have paged, and ahead of which OOMs,
before it deploys a single sidecar.

    series.py   which exporters' series are understood, which card each belongs to, sharding
    card.py     one card: chunked reads -> trace records -> the analysis; its alerts, OOMs, verdict
    ooms.py     suspected OOMs (near full, then emptied within a step) and the page ahead of each
    fleet.py    list the cards, a small worker pool, streaming results
    report.py   text for people, JSON Lines for machines (DESIGN.md's contract), the totals
    options.py  the flags' values (--since, --start/--end, --step, --shard)
    command.py  `oomwatch backtest`'s parser and command
    tsdb.py     trace -> dcgm-exporter OpenMetrics -> a real Prometheus TSDB (tests, bench, demos)

The Prometheus reader itself is `oomwatch.sources.prometheus`. The names below load lazily: the CLI imports
`command` for every invocation, and that must not pull in the analysis (numpy) for `--help`.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CardResult": "card",
    "run_card": "card",
    "backtest": "fleet",
    "list_cards": "fleet",
    "Options": "options",
    "Totals": "report",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)
