"""What every source is to the sampler: a name, the cards it covers, its health, `poll(now)`, `close()`.

NVML, replay, engine endpoints and the process scanner all satisfy `Source`, so the sampler drives them
the same way: it calls `poll(now)` on its schedule and routes the records that come back by their type
(`Sample`, `ProcInfo`, `EngineSnapshot`, ...). A source turns its own failures into its `status` and
returns what it could read; it never raises for an outage (the sampler still catches, belt and braces).

Sinks (the trace recorder, Alertmanager, flight dumps) are not sources: they report their own
`SourceStatus` as `oomwatch_sink_up{sink}` and never page as telemetry.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ..model import GpuInfo, ProcInfo, RssSample, Sample, SourceStatus

__all__ = ["SampleTap", "Sink", "Source"]


@runtime_checkable
class Source(Protocol):
    """Something the sampler polls for records."""

    name: str
    status: SourceStatus

    @property
    def cards(self) -> tuple[GpuInfo, ...]:
        """The cards this source reports on (empty for engines and processes)."""
        ...

    def poll(self, now: float) -> list[object]:
        """Everything new as of `now` (the sampler's monotonic clock): records to route by type."""
        ...

    def close(self) -> None:
        """Let go of handles and connections; safe to call twice."""
        ...


@runtime_checkable
class Sink(Protocol):
    """Something the daemon writes to; its health is a metric and a log line, never an alert."""

    name: str
    status: SourceStatus


@runtime_checkable
class SampleTap(Sink, Protocol):
    """A sink that takes every record the sampler routes (the trace recorder, `diagnose --plot`'s tap).
    It may also take allocator records (`alloc(t, samples)`); the sampler asks whether it has one."""

    def sample(self, s: Sample) -> None: ...

    def proc(self, t: float, p: ProcInfo) -> None: ...

    def rss(self, r: RssSample) -> None: ...

    def close(self) -> None: ...
