"""The immutable view the exporters read, and the one function that builds it from the analysis.

Exporters (metrics, status page, Alertmanager, recorder, plot, report) never touch the sampler's or the
analysis' live objects: they read the latest `Snapshot`, swapped in whole, so a scrape sees one
consistent moment and can neither block nor corrupt the sampling loop. Everything in it is a copy:
frozen dataclasses, tuples, read-only mappings; the history is copied out of the analysis' ring while the
sampler holds its lock (a view of the ring is valid only until the next sample).

`build()` is the only place that reads the analysis for the exporters, through a few accessors at its
top, typed against the Analyzer's public attributes (no `getattr` fallbacks): a field renamed in the
analysis fails mypy here instead of exporting empty values, and a change inside the analysis is one edit.

Shape (for code that reads it):
    Snapshot.t / .wall             analysis time (trace seconds or monotonic) and its wall-clock time
    Snapshot.gpus[i]               GpuView: info, sample, verdict (VerdictView), capacity, budget, history
    GpuView.history                tuple of History, one per window ("15m", ...); `GpuView.window(name)`
    History                        window, seconds, t (analysis time), used_bytes (bucket maxima), both tuples
    Snapshot.procs                 ProcView per (card, PID) holding memory
    Snapshot.alerts                AlertView: labels, annotations (read-only), state, times (analysis and wall)
    Snapshot.findings              FindingView (frozen copy of the analysis' findings)
    Snapshot.sources / .sinks      SourceStatus of what feeds the analysis / of what the daemon writes to
    Snapshot.engines               EngineSnapshot per engine URL
    Snapshot.suspected_ooms, .flight_dumps, counters and costs
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from .model import EngineSnapshot, GpuInfo, GpuSample, SourceStatus

if TYPE_CHECKING:  # the analysis' public attributes this module reads (imported for types only)
    from .analysis.alerts import Alert
    from .analysis.allocator import AllocView
    from .analysis.analyzer import Analyzer
    from .analysis.curve import CurveVerdict
    from .analysis.findings import Finding
    from .analysis.hostmem import ProcessView

__all__ = [
    "AlertView",
    "FindingView",
    "GpuView",
    "History",
    "ProcView",
    "Snapshot",
    "VerdictView",
    "alert_view",
    "build",
    "downsample",
    "finding_view",
    "histories",
    "verdict_view",
]


def _frozen_map(d: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(d or {}))


@dataclass(frozen=True, slots=True)
class VerdictView:
    """What the exporters show of a card's curve verdict (a copy; the analysis may change its own type)."""

    shape: str = "idle"
    leak: bool = False
    leak_bytes_per_second: float = 0.0
    leak_confidence: float = 0.0
    eta_seconds: float | None = None
    floor_bytes: float = 0.0
    peak_bytes: float = 0.0
    spike_height_bytes: float = 0.0
    headroom_bytes: float = 0.0
    spike_risk: bool = False


@dataclass(frozen=True, slots=True)
class History:
    """One card's used bytes over one window, downsampled (bucket maxima, so spikes show)."""

    window: str
    seconds: float
    t: tuple[float, ...] = ()
    used_bytes: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class GpuView:
    info: GpuInfo
    sample: GpuSample | None
    verdict: VerdictView
    capacity_bytes: float
    budget_bytes: float | None
    history: tuple[History, ...] = ()
    phase: str = ""  # idle | starting | serving | exiting (analysis/lifecycle.py)
    verdict_text: str = ""  # one plain sentence of the card's state now

    def window(self, name: str) -> History | None:
        return next((h for h in self.history if h.window == name), None)


@dataclass(frozen=True, slots=True)
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
    """An alert as the exporters see it. Labels and annotations are read-only copies."""

    labels: Mapping[str, Any]
    annotations: Mapping[str, Any]
    state: str
    active_since: float  # analysis time
    fired_at: float | None  # analysis time
    eta_seconds: float | None = None
    active_since_wall: float | None = None  # unix seconds
    fired_at_wall: float | None = None  # unix seconds

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", _frozen_map(self.labels))
        object.__setattr__(self, "annotations", _frozen_map(self.annotations))


@dataclass(frozen=True)
class FindingView:
    """A frozen copy of one finding (the JSON contract's findings entry)."""

    kind: str
    gpu: str | None
    pid: int | None
    summary: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    advice: str = ""
    severity: str = "warning"

    def __post_init__(self) -> None:
        object.__setattr__(self, "evidence", _freeze(self.evidence))

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "gpu": self.gpu,
            "pid": self.pid,
            "summary": self.summary,
            "evidence": _thaw(self.evidence),
            "advice": self.advice,
            "severity": self.severity,
        }


def _freeze(v: Any) -> Any:
    """A read-only copy of JSON-like data: mappings become read-only mappings, lists tuples."""
    if isinstance(v, Mapping):
        return MappingProxyType({k: _freeze(x) for k, x in v.items()})
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    return v


def _thaw(v: Any) -> Any:
    """`_freeze` undone into fresh dicts and lists (for JSON)."""
    if isinstance(v, Mapping):
        return {k: _thaw(x) for k, x in v.items()}
    if isinstance(v, tuple):
        return [_thaw(x) for x in v]
    return v


@dataclass(frozen=True)
class Snapshot:
    t: float | None = None
    wall: float | None = None
    gpus: tuple[GpuView, ...] = ()
    procs: tuple[ProcView, ...] = ()
    alerts: tuple[AlertView, ...] = ()
    sources: tuple[SourceStatus, ...] = ()
    sinks: tuple[SourceStatus, ...] = ()
    engines: tuple[EngineSnapshot, ...] = ()
    findings: tuple[FindingView, ...] = ()
    samples_total: int = 0
    suspected_ooms: int = 0
    flight_dumps: int = 0
    sample_duration_seconds: float | None = None
    analysis_duration_seconds: float | None = None
    started_at: float = 0.0
    allocs: tuple[AllocView, ...] = ()  # AllocView per (card, process) from the allocator probe (analysis/allocator.py)
    host_processes: tuple[
        ProcessView, ...
    ] = ()  # ProcessView (host RAM) per GPU holder and server process (analysis/hostmem.py)
    episodes: tuple[Mapping[str, Any], ...] = ()  # the latest alert episodes: what fired when, how it ended


# ---- building ----------------------------------------------------------------------------------------

#: Episodes carried to the exporters (the status page lists them, newest last); replay --json and
#: diagnose give them all.
EPISODES_SHOWN = 50


def verdict_view(v: CurveVerdict) -> VerdictView:
    return VerdictView(
        v.shape,
        v.leak,
        v.leak_bytes_per_second,
        v.leak_confidence,
        v.eta_seconds,
        v.floor_bytes,
        v.peak_bytes,
        v.spike_height_bytes,
        v.headroom_bytes,
        v.spike_risk,
    )


def alert_view(a: Alert, to_wall: Callable[[float], float]) -> AlertView:
    """An AlertView of one of the analysis' alerts, with its times also on the wall clock."""
    return AlertView(
        a.all_labels(),
        a.all_annotations(),
        a.state,
        a.active_since,
        a.fired_at,
        a.eta_seconds,
        to_wall(a.active_since),
        None if a.fired_at is None else to_wall(a.fired_at),
    )


def finding_view(f: Finding) -> FindingView:
    return FindingView(f.kind, f.gpu, f.pid, f.summary, f.evidence, f.advice, f.severity)


def downsample(t: Any, used: Any, window: str, seconds: float, points: int) -> History:
    """The last `seconds` of (t, used), at most `points` long, each point the maximum of the buckets it
    stands for (so a spike shows) at the time of the newest of them. Copies (tuples of floats)."""
    t, used = np.asarray(t, dtype=float), np.asarray(used, dtype=float)
    if len(t) == 0:
        return History(window, seconds)
    lo = int(np.searchsorted(t, t[-1] - seconds, side="left"))
    t, used = t[lo:], used[lo:]
    n = len(t)
    step = max(1, -(-n // max(1, points)))
    if step > 1:
        idx = np.arange(0, n, step)
        used = np.maximum.reduceat(used, idx)
        t = t[np.minimum(idx + step, n) - 1]
    return History(window, seconds, tuple(t.tolist()), tuple(used.tolist()))


def build(
    analyzer: Analyzer,
    *,
    to_wall: Callable[[float], float],
    sources: Iterable[SourceStatus] = (),
    sinks: Iterable[SourceStatus] = (),
    engines: Iterable[EngineSnapshot] = (),
    history: Mapping[int, tuple[History, ...]] | None = None,
    texts: Mapping[int, str] | None = None,
    **counters: Any,
) -> Snapshot:
    """A Snapshot of the analysis now. Call with the analysis' lock held; the result shares nothing live.

    `history` and `texts` (each card's verdict sentence) are passed in because they are refreshed less often
    than the rest (without `texts` the sentences are made here); `counters` are Snapshot's counter and cost
    fields (samples are read from the analysis).
    """
    # The analysis accessors, all here: cards, processes and roles, alerts, findings, sample count.
    cards = list(analyzer.gpus.values())
    procs_info, roles = analyzer.procs, analyzer.roles
    alerts = [a for a in analyzer.book.alerts.values() if a.state != "resolved"]
    findings = list(analyzer.findings)
    from .analysis.hostmem import process_views

    host_processes = process_views(analyzer.hostmem, roles, procs_info)

    history = history or {}
    gpus = tuple(
        GpuView(
            st.info,
            st.sample,
            verdict_view(st.verdict),
            st.capacity_bytes,
            st.budget_bytes,
            history.get(st.info.index, ()),
            st.lc.phase,
            texts[st.info.index] if texts is not None and st.info.index in texts else analyzer.verdict_text(st),
        )
        for st in cards
    )
    procs = []
    for st in cards:
        for pid, b in st.sample.procs if st.sample else ():
            info, role = procs_info.get(pid), roles.get(pid)
            procs.append(
                ProcView(
                    str(st.info.index),
                    pid,
                    b,
                    info.name if info else "",
                    role.role if role else "other",
                    " ".join(info.cmdline) if info else "",
                    role.why if role else "",
                )
            )
    now = analyzer.now
    return Snapshot(
        t=now,
        wall=None if now is None else to_wall(now),
        gpus=gpus,
        procs=tuple(procs),
        alerts=tuple(alert_view(a, to_wall) for a in alerts),
        sources=tuple(sources),
        sinks=tuple(sinks),
        engines=tuple(engines),
        findings=tuple(finding_view(f) for f in findings),
        samples_total=analyzer.samples,
        host_processes=host_processes,
        episodes=tuple(MappingProxyType(dict(e)) for e in list(analyzer.episodes)[-EPISODES_SHOWN:]),
        **counters,
    )


def histories(analyzer: Analyzer, windows: Iterable[tuple[str, float]], points: int) -> dict[int, tuple[History, ...]]:
    """Each card's history per window, copied out of the analysis. Call with the analysis' lock held.

    A window is read from the finest history level that spans it (`History.pick`)."""
    out = {}
    wins = tuple(windows)
    for idx, st in analyzer.gpus.items():
        hs = []
        for name, secs in wins:
            t, _, mx, _ = st.history.pick(secs).arrays()  # views into a ring: downsample copies them
            hs.append(downsample(t, mx, name, secs, points))
        out[idx] = tuple(hs)
    return out
