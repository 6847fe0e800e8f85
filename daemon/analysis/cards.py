"""What the analysis keeps per card between evaluations: its history, lifecycle, judge and verdict, and the
current (or last) busy period. Plain records; the detectors (detectors.py) update them."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..model import GpuInfo, GpuSample
from . import findings
from .curve import CardJudge, CurveVerdict
from .history import History
from .lifecycle import Lifecycle


@dataclass
class BusyPeriod:
    """One busy period of a card, from its start: what the summary tells of it and the page's latches."""

    since: float  # when the start began
    last: float  # the last evaluation in it (starting or serving)
    shape_time: dict[str, float] = field(default_factory=dict)  # seconds judged in each shape
    leak_shape_time: dict[str, float] = field(default_factory=dict)  # ... while the verdict was a leak
    leak: bool = False  # a leak verdict was seen in this period
    rate: float = 0.0  # the last leak verdict's rate (bytes/s) ...
    eta: float | None = None  # ... and its ETA (s)
    peak: float = 0.0  # the highest peak the verdicts saw (bytes)
    start_peak: float = 0.0  # the most used while starting (bytes)
    growth: str = ""  # the last growth verdict (cache_growth, plateau), kept once seen
    no_headroom: bool = False  # the last verdict's no-headroom flag
    leak_confirmed: bool = False  # a GPUMemoryLeak finding was confirmed in this period (the forecast's gate)
    paging: bool = False  # GPUOOMImminent's condition held at the last evaluation (the forecast's hysteresis)
    tallest: float = 0.0  # the tallest transient while serving (bytes): the allocator cache at the top
    full_t: float | None = None  # when the floor reached the top (None: below it)
    full_free: float = 0.0  # what was free when it did (bytes)


@dataclass
class GpuState:
    info: GpuInfo
    history: History
    lc: Lifecycle
    judge: CardJudge
    sample: GpuSample | None = None
    verdict: CurveVerdict = field(default_factory=lambda: CurveVerdict("idle"))
    capacity_bytes: float = 0.0
    budget_bytes: float | None = None
    peak_used_bytes: int = 0
    busy: BusyPeriod | None = None  # the current (or last) busy period: shapes, leak, peaks
    oom_since: float | None = None  # when the OOM projection became urgent (its confirmation clock)
    leak_since: float | None = None  # when the leak verdict began (its confirmation clock)
    leak_due: bool = False  # the leak verdict has held its confirmation (until it ends)
    leak_said_since: float | None = None  # the leak warning's condition has been raised since (None: it is not)
    leak_fired: bool = False  # ... and raised again its `for` later: the warning fired (it holds, `_leak_holds`)
    alloc_leak_since: float | None = None  # the same two for the allocator probe's leak (live tensors)
    alloc_leak_due: bool = False
    oom_last: float = 0.0  # the last evaluation that found the projection urgent
    oom_at: float = 0.0  # when the projection put the OOM as its confirmation began
    # (verdict, the info findings built from it): rebuilt only when the verdict changes
    shown: tuple[CurveVerdict, list[findings.Finding]] | None = None
    ever_leak: bool = False  # for the plot: the strongest leak verdict seen, and when
    last_leak_verdict: CurveVerdict | None = None
    last_leak_t: float | None = None
    quiet_lo: float = float("inf")  # range of used bytes since the last evaluation
    quiet_hi: float = float("-inf")
    eval_used: float | None = None  # the reading the last evaluation saw (the range starts from it) ...
    eval_t: float = 0.0  # ... and when

    @property
    def busy_since(self) -> float | None:
        """When the current (or last) busy period began (its start)."""
        return self.busy.since if self.busy is not None else None

    @property
    def warm_end(self) -> float | None:
        """When that period's start ended (None while it is still starting)."""
        s = self.lc.serving_since
        return s if s is not None and self.busy_since is not None and s >= self.busy_since else None

    @property
    def series(self) -> History:
        """The history (its `arrays()` is the finest level: the last 15 minutes)."""
        return self.history

    @property
    def used_now(self) -> float:
        """Used bytes at the last sample (0 when it had none)."""
        return float(self.sample.used_bytes) if self.sample and self.sample.used_bytes is not None else 0.0
