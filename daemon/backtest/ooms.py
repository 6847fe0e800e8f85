"""Suspected OOMs in a card's history, and whether the analysis paged ahead of each.

Prometheus keeps no record of a CUDA OOM, only its footprint: a card near full whose memory then falls to
a bare CUDA context (or to nothing) within about one step, because the process that ran out died and the
driver took its memory back. A server shut down on purpose leaves the same footprint, so the finding is a
suspicion; where kube-state-metrics runs, a container restart right after the drop (the pod's
`kube_pod_container_status_restarts_total` going up) says it was a crash, not a deploy.

An OOM counts as paged when a page (a critical alert: GPUOOMImminent) was firing at the card's last sample
before the drop; the lead is from the page's start to that sample (the last moment the card was known
alive: a conservative lead, at most one step short).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..model import Sample

#: Used memory at or above this share of the usable memory (total - reserved) is "near full".
NEAR_FULL_RATIO = 0.95
#: At or below this, what is left on the card is at most a CUDA context (300-600 MiB) or nothing.
CONTEXT_BYTES = 1 << 30
#: The fall must take at most one step, and at least this long is allowed: a dying process' memory is
#: given back over a few hundred milliseconds, seen in several samples at 10 Hz.
MIN_DROP_WINDOW_S = 3.0


@dataclass
class SuspectedOOM:
    t: float  # the last sample near full (analysis time)
    peak_used_ratio: float
    dropped_at: float  # the first sample at a context or less
    paged_at: float | None = None  # when the page that was firing at `t` began
    restarted: bool | None = None  # kube-state-metrics saw the container restart (None: not known)

    @property
    def paged_ahead_s(self) -> float | None:
        return None if self.paged_at is None else self.t - self.paged_at


class OomDetector:
    """Fed every sample of one card in order (`add`); `found` lists the suspected OOMs."""

    def __init__(self, index: int, total_bytes: int, step_s: float):
        self.index, self.total_bytes = index, total_bytes
        self.window_s = max(step_s * 1.5, MIN_DROP_WINDOW_S)  # one step, with the scrape's jitter
        self.found: list[SuspectedOOM] = []
        self._full_t: float | None = None  # the last sample near full, and how full
        self._full_ratio = 0.0
        self._peak_ratio = 0.0

    def add(self, s: Sample) -> None:
        for g in s.gpus:
            if g.index != self.index or g.used_bytes is None:
                continue
            usable = self.total_bytes - (g.reserved_bytes or 0)
            if usable <= 0:
                return
            ratio = g.used_bytes / usable
            if ratio >= NEAR_FULL_RATIO:
                self._full_t, self._full_ratio = s.t, ratio
                self._peak_ratio = max(self._peak_ratio, ratio)
            elif self._full_t is not None:
                if s.t - self._full_t > self.window_s:
                    self._full_t, self._peak_ratio = None, 0.0  # it came down slowly: not a death
                elif g.used_bytes <= CONTEXT_BYTES:
                    self.found.append(SuspectedOOM(self._full_t, round(self._peak_ratio, 4), s.t))
                    self._full_t, self._peak_ratio = None, 0.0


def match_pages(ooms: Iterable[SuspectedOOM], pages: list[tuple[float, float | None]]) -> None:
    """Set `paged_at` of each OOM: the start of the page (start, end or None while firing) that was
    firing at its last full sample."""
    for o in ooms:
        firing = [a for a, b in pages if a <= o.t and (b is None or b >= o.t)]
        o.paged_at = min(firing) if firing else None
