"""The one path from records to the analysis, shared by `run`, `replay`, `diagnose`, the benchmarks and the
tests: whatever a trace or a live source yields (samples, process descriptions, later engine and allocator
snapshots) goes in here, so a replayed verdict is exactly the verdict the daemon would have given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .analysis.alerts import Transition
from .analysis.analyzer import Analyzer
from .model import AllocSample, ProcInfo, RssSample, Sample

if TYPE_CHECKING:
    from .analysis.hostmem import HostLimit


def feed(
    analyzer: Analyzer,
    records: Iterable[object],
    on_transition: Callable[[Transition], None] | None = None,
    on_sample: Callable[[Sample], None] | None = None,
) -> int:
    """Fold every record into `analyzer` in order; returns the number of samples fed.

    `on_transition` sees each alert transition as it happens; `on_sample` each sample before it is
    analysed (a plot recorder). Record types the analysis does not know are skipped.
    """
    n = 0
    for rec in records:
        if isinstance(rec, Sample):
            if on_sample is not None:
                on_sample(rec)
            trans = analyzer.add_sample(rec)
            n += 1
            if on_transition is not None:
                for tr in trans:
                    on_transition(tr)
        elif isinstance(rec, ProcInfo):
            analyzer.add_proc(rec)
        elif isinstance(rec, RssSample):
            analyzer.add_rss(rec.t, rec.rss, rss_limit(rec))
        elif isinstance(rec, tuple):  # an `alloc` line: the allocator probes' readings
            for a in rec:
                if isinstance(a, AllocSample):
                    analyzer.add_alloc(a)
    return n


@dataclass
class ReplayResult:
    """What `oomwatch replay` computes for one trace."""

    analyzer: Analyzer
    transitions: list[Transition]
    summary: dict[str, Any]


def replay_trace(
    path: str,
    on_transition: Callable[[Transition], None] | None = None,
    on_sample: Callable[[Sample], None] | None = None,
    **analyzer_kw: Any,
) -> ReplayResult:
    """Run the whole analysis over a trace as fast as it goes (raises `TraceError` on a bad file)."""
    from .errors import TraceError
    from .sources.replay import ReplaySource

    src = ReplaySource(path)
    a = Analyzer(src.gpus, **analyzer_kw)
    trans: list[Transition] = []

    def _t(tr: Transition) -> None:
        trans.append(tr)
        if on_transition is not None:
            on_transition(tr)

    feed(a, src.all(), _t, on_sample)
    if src.status.error:
        raise TraceError(src.status.error)
    return ReplayResult(a, trans, a.summary())


def rss_limit(rec: RssSample) -> HostLimit | None:
    """The memory limit an RSS record carries, as the host-memory judge takes it (None when absent)."""
    from .analysis.hostmem import HostLimit

    if rec.limit_bytes is None:
        return None
    return HostLimit(rec.limit_bytes, rec.limit_used_bytes, rec.limit_source or "host")
