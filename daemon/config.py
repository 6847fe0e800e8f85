"""One place for every threshold, horizon and period.

The daemon, `oomwatch replay`, `oomwatch diagnose`, the exporters and the docs all read these names, so a
threshold is changed here once. Times are seconds, sizes bytes, fractions 0..1 of a card's total memory.

The curve detectors are scale-free where they can be (they count steps and cycles, not minutes), because a
leak that OOMs in a minute and one that OOMs in a day must both be caught; the few absolute times below are
the shortest evidence we accept, not the expected pace.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

#: Default listen port. dcgm-exporter uses 9400 and nvidia_gpu_exporter 9835; 9846 is free in the
#: Prometheus default port allocation list as far as we know.
DEFAULT_PORT = 9846
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"

ALERTS = {
    # name: (severity, one-line meaning used in docs and as a fallback summary)
    "GPUMemoryLeak": ("warning", "memory that is never given back keeps growing after warm-up"),
    "GPUOOMImminent": ("critical", "at the current growth, the card is full within the horizon"),
    "GPUMemorySpikeRisk": ("warning", "recent transient peaks are taller than the free headroom"),
    "GPUMemoryImbalance": ("warning", "cards of one server differ by more than the threshold"),
    "GPUStrayProcess": ("warning", "a process holds GPU memory outside the served process tree"),
    "KVCachePressure": ("warning", "the engine's KV cache is nearly full and requests queue or are preempted"),
    "GPUTelemetryDown": ("critical", "NVML or an engine endpoint stopped answering"),
}

RUNBOOK_BASE = "https://github.com/oomwatch/oomwatch/blob/main/docs/runbooks/"


def runbook_url(alertname: str, base: str = RUNBOOK_BASE) -> str:
    """The one place a runbook link is derived from an alert's name (as the mixins do)."""
    return f"{base}{alertname}.md"


@dataclass(frozen=True)
class AnalysisConfig:
    """Thresholds of the curve analysis (pure; no I/O)."""

    bucket_s: float = 0.25  # raw samples are folded into buckets of min/max/last
    window_s: float = 900.0  # history kept per card (the flight recorder keeps the same span)
    eval_interval_s: float = 0.5  # how often the detectors run (in trace time)
    idle_fraction: float = 0.01  # below this share of total a card with no process is idle
    step_fraction: float = 0.005  # smallest floor rise counted as a step (of total) ...
    step_min_bytes: int = 256 << 20  # ... and never less than this
    hold_s: float = 1.0  # a rise counts as kept once it has been held this long
    dominant_factor: float = 3.0  # a rise this many times the median step is an allocation, not a leak
    dominant_fraction: float = 0.05  # ... and at least this share of the card
    leak_min_steps: int = 4  # kept rises after the last dominant allocation before a staircase/ramp is a leak
    leak_min_span_s: float = 6.0  # ... spread over at least this long
    leak_stale_factor: float = 3.0  # growth has stopped when no step came for this many median intervals
    leak_stale_min_s: float = 5.0  # ... and at least this long
    trough_min_rises: int = 2  # consecutive rising troughs of a sawtooth that make a leak
    release_fraction: float = 0.02  # a drop this large (of total) is memory given back
    spike_margin: float = 0.25  # the next spike may be this much taller than the tallest seen
    spike_window_s: float = 300.0  # how far back transient peaks count
    transient_fraction: float = 0.02  # a peak this far above the floor is a transient
    spike_duty_max: float = 0.3  # transients above the floor less than this share of the time: spikes
    oom_horizon_s: float = 600.0  # GPUOOMImminent when the ETA is inside this
    imbalance_fraction: float = 0.10  # spread between cards of one server (of total)
    busy_fraction: float = 0.5  # a card this full beside an idle one is "one card used of several"
    kv_pressure_ratio: float = 0.90  # engine KV usage considered nearly full
    gpu_memory_utilization_default: float | None = None  # budget line when no engine says it
    engine_warmup_max_s: float = 300.0  # an engine that never answers stops holding the curve in warm-up


@dataclass(frozen=True)
class AlertTiming:
    """`for` (pending before firing) and `clear` (hysteresis before resolving), per alert."""

    for_s: dict = field(
        default_factory=lambda: {
            "GPUMemoryLeak": 2.0,
            "GPUOOMImminent": 0.0,
            "GPUMemorySpikeRisk": 0.0,
            "GPUMemoryImbalance": 5.0,
            "GPUStrayProcess": 2.0,
            "KVCachePressure": 10.0,
            "GPUTelemetryDown": 0.0,
        }
    )
    clear_s: float = 10.0


@dataclass(frozen=True)
class DaemonConfig:
    """Everything `oomwatch run` needs; each field is a flag and an `OOMWATCH_<NAME>` variable."""

    listen: str = DEFAULT_LISTEN
    interval: float = 0.1
    process_interval: float = 2.0
    engine_interval: float = 5.0
    push_interval: float = 1.0
    engine_url: tuple[str, ...] = ()
    alertmanager_url: tuple[str, ...] = ()
    record: str | None = None
    replay: str | None = None
    speed: float = 1.0
    loop: bool = False
    server_pid: int | None = None
    server_cmdline: str | None = None
    flight_dir: str | None = None
    external_url: str | None = None
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)
    alerts: AlertTiming = field(default_factory=AlertTiming)


def env_default(name: str, default):
    """The `OOMWATCH_<NAME>` environment variable, or the default (flags override both)."""
    return os.environ.get("OOMWATCH_" + name.upper().replace("-", "_"), default)
