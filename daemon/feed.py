"""The one path from records to the analysis, shared by `run`, `replay`, `diagnose`, the benchmarks and the
tests: whatever a trace or a live source yields (samples, process descriptions, later engine and allocator
snapshots) goes in here, so a replayed verdict is exactly the verdict the daemon would have given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .analysis.analyzer import Analyzer
from .analysis.alerts import Transition
from .model import ProcInfo, Sample


def feed(analyzer: Analyzer, records: Iterable[object],
         on_transition: Callable[[Transition], None] | None = None,
         on_sample: Callable[[Sample], None] | None = None) -> int:
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
    return n


@dataclass
class ReplayResult:
    """What `oomwatch replay` computes for one trace."""

    analyzer: Analyzer
    transitions: list[Transition]
    summary: dict


def replay_trace(path: str, on_transition: Callable[[Transition], None] | None = None,
                 on_sample: Callable[[Sample], None] | None = None, **analyzer_kw) -> ReplayResult:
    """Run the whole analysis over a trace as fast as it goes (raises `TraceError` on a bad file)."""
    from .sources.replay import ReplaySource
    from .trace import TraceError

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
