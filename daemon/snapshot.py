"""The immutable view the exporters read: built by the sampler after each cycle, swapped in whole.

Exporters never touch the sampler's or the analysis' live objects; they read the latest `Snapshot`, so
a scrape sees one consistent moment and can never block or corrupt the sampling loop.
"""

from __future__ import annotations

from dataclasses import dataclass

from .analysis.curve import CurveVerdict
from .model import EngineSnapshot, GpuInfo, GpuSample, SourceStatus


@dataclass(frozen=True)
class GpuView:
    info: GpuInfo
    sample: GpuSample | None
    verdict: CurveVerdict
    capacity_bytes: float
    budget_bytes: float | None


@dataclass(frozen=True)
class ProcView:
    gpu: str
    pid: int
    used_bytes: int | None
    name: str
    role: str
    cmdline: str = ""
    why: str = ""


@dataclass(frozen=True)
class AlertView:
    labels: dict
    annotations: dict
    state: str
    active_since: float
    fired_at: float | None
    eta_seconds: float | None = None


@dataclass(frozen=True)
class Snapshot:
    t: float | None = None
    gpus: tuple[GpuView, ...] = ()
    procs: tuple[ProcView, ...] = ()
    alerts: tuple[AlertView, ...] = ()
    sources: tuple[SourceStatus, ...] = ()
    engines: tuple[EngineSnapshot, ...] = ()
    findings: tuple = ()
    samples_total: int = 0
    sample_duration_seconds: float | None = None
    analysis_duration_seconds: float | None = None
    started_at: float = 0.0
