"""Names and plain-language formatters shared by the analysis and the exporters.

They live here, not in the analysis, so the exporters (metrics, status page) depend only on the snapshot
and on this neutral module: the analysis can be rewritten without touching what a scrape or a page reads.
"""

from __future__ import annotations

__all__ = ["GiB", "SHAPES", "duration", "gib", "rate"]

#: The shapes a card's memory curve can have (the `oomwatch_gpu_memory_shape` state set, in this order).
SHAPES = ("stable", "staircase", "ramp", "sawtooth", "spike", "idle")

GiB = float(1 << 30)


def gib(b: float | None) -> str:
    """Bytes as GiB with one decimal, or "n/a" for a value a source could not read."""
    return "n/a" if b is None else f"{b / GiB:.1f} GiB"


def duration(s: float | None) -> str:
    """Seconds as a person reads them: "45 s", "12 min", "3.5 h", "2.0 days"; None is "never"."""
    if s is None:
        return "never"
    s = float(s)
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    if s < 172800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"


def rate(bps: float) -> str:
    """Bytes per second as a person reads a leak's pace: "2458 MiB/s", or per hour below 1 MiB/s ("300 MiB/hour"):
    a slow leak shown per second would read "0 MiB/s"."""
    mib = bps / (1 << 20)
    return f"{mib:.0f} MiB/s" if abs(mib) >= 1 else f"{bps * 3600 / (1 << 20):.0f} MiB/hour"
