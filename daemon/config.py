"""One place for every threshold, horizon and period.

The daemon, `oomwatch replay`, `oomwatch diagnose`, the exporters and the docs all read these names, so a
threshold is changed here once. Times are seconds, sizes bytes, fractions 0..1 of a card's total memory.

The curve analysis tests the floor's trend at windows from 15 s to 7 days (`trend_windows_s`), because a
leak that OOMs in a minute and one that OOMs in a week must both be caught; its confirmations scale with the
ETA; the few absolute times below are the shortest evidence we accept, not the expected pace.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field

from .credentials import ClientAuth

#: Default listen port. dcgm-exporter uses 9400 and nvidia_gpu_exporter 9835; 9846 is free in the
#: Prometheus default port allocation list as far as we know.
DEFAULT_PORT = 9846
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"

#: BLAS threads for numpy in the daemon: its arrays are a few thousand points, where threads only cost
#: (one per core: 37 threads and 5x the idle CPU on a 32-core host). See daemon/threads.py.
BLAS_THREADS = 1

#: Bounds the command line puts on time values (flags and OOMWATCH_* alike). Sampling faster than every
#: 10 ms costs CPU and shows nothing more (NVML's own counters update no faster), and a zero or negative
#: period would make the scheduler spin; a period over an hour misses every event oomwatch looks for.
MIN_INTERVAL_S = 0.01
MAX_INTERVAL_S = 3600.0
#: A duration or timeout beyond a year is a typo, and would overflow the timers it is handed to.
MAX_SECONDS = 366 * 86400.0


@dataclass(frozen=True)
class AlertSpec:
    """One alert, the one place it is described: the daemon's alert book and findings, the Prometheus rules
    (rules/build.py), the dashboard (grafana/build.py), the flight dumps (daemon/flight.py) and the runbooks'
    headings (tests/test_alert_specs.py) all read these fields.

    The rule's PromQL lives in rules/build.py, keyed by `name` (it is built from AnalysisConfig's
    thresholds, and build.py refuses an alert without one or an expression without an alert)."""

    name: str
    severity: str  # critical pages; warning does not
    meaning: str  # one line, used in docs and as a fallback summary
    for_s: float  # the daemon's `for`: how long its condition holds before it fires (seconds)
    rule_for_evaluations: int  # the rule's `for`, in evaluations of AlertTiming.rule_eval_interval_s
    why_for: str  # why those two waits
    labels: tuple[str, ...]  # its labels besides alertname, severity and node: the daemon's and the rule's alike
    clear_s: float | None = None  # firing this long after its condition went false (None: AlertTiming.clear_s)
    card_scoped: bool = False  # about one card's memory curve: its episode ends when the card's processes do
    dumps: bool = False  # its firing writes a flight dump of the last window (daemon/flight.py)
    daemon: bool = True  # False: raised by the rules only (oomwatch cannot page about its own absence)


#: How long a page stays firing once its forecast stops holding (with the forecast's own hysteresis, Analyzer): a
#: minute rides out one odd evaluation; it ends at once when the card's processes exit. The leak warning holds as
#: long: a page on a leak says the leak too, so the two end together.
PAGE_CLEAR_S = 60.0

#: Every alert, in the order the rules file lists them. The daemon evaluates every `eval_interval_s` (about a
#: second) on 10 Hz samples, and its detectors demand structural evidence (kept steps, rising troughs), so its
#: `for_s` only has to outlast one odd sample. Prometheus evaluates every 15-60 s on scraped gauges: one odd
#: scrape is one evaluation, so a rule waits `rule_for_evaluations` evaluations at the slowest common interval.
#: A count of 0 forwards a verdict the daemon has already debounced (its ETA or spike risk) without a second wait.
ALERT_SPECS: tuple[AlertSpec, ...] = (
    AlertSpec(
        "GPUOOMImminent",
        "critical",
        "at the current growth, the card is full within the horizon",
        0.0,
        0,
        "an ETA inside the horizon is already a fitted leak: page at once; the rule forwards the daemon's "
        "debounced ETA",
        ("gpu", "uuid"),
        clear_s=PAGE_CLEAR_S,  # the page holds only while its forecast does
        card_scoped=True,
        dumps=True,
    ),
    AlertSpec(
        "GPUMemoryLeak",
        "warning",
        "memory that is never given back keeps growing after warm-up",
        2.0,
        1,
        "the leak detector already demands a sustained trend: ride out one odd evaluation; the gauge is the "
        "daemon's debounced leak rate, one more look",
        ("gpu", "uuid"),
        clear_s=PAGE_CLEAR_S,  # as the page (a trend tested on minutes, or the probe's live tensors read
        # mid-request, flickers at its edge: one episode, not several)
        card_scoped=True,
        dumps=True,
    ),
    AlertSpec(
        "GPUMemorySpikeRisk",
        "warning",
        "recent transient peaks are taller than the free headroom",
        0.0,
        0,
        "a spike is over in seconds, waiting would page after the OOM; the rule's spike heights are already a "
        "5-minute maximum",
        ("gpu", "uuid"),
        clear_s=60.0,  # a sawtooth's floor moves each cycle: one warning, not one per cycle
        card_scoped=True,
        dumps=True,
    ),
    AlertSpec(
        "GPUMemoryImbalance",
        "warning",
        "cards of one server differ by more than the threshold",
        5.0,
        5,
        "cards load at different moments while a model loads; the rule computes it from raw used bytes, and a "
        "load or restart takes minutes",
        ("gpu",),
    ),
    AlertSpec(
        "GPUStrayProcess",
        "warning",
        "a process holds GPU memory outside the served process tree",
        2.0,
        1,
        "a process may hold memory for a moment while it exits; a PID seen in two scrapes is not on its way out",
        ("gpu", "uuid", "pid"),
    ),
    AlertSpec(
        "KVCachePressure",
        "warning",
        "the engine's KV cache is nearly full and requests queue or are preempted",
        10.0,
        2,
        "a burst fills the cache briefly, only a sustained queue matters; raw engine gauges: a burst passes "
        "within two evaluations",
        ("url", "engine"),
    ),
    AlertSpec(
        "GPUTelemetryDown",
        "critical",
        "NVML or an engine endpoint stopped answering",
        0.0,
        1,
        "a source is marked down only after it failed: say so at once; one failed scrape of a source is a blip, "
        "two are an outage",
        ("source",),
    ),
    AlertSpec(
        "HostMemoryLeak",
        "warning",
        "a server process's resident host memory keeps growing while GPU memory is flat",
        60.0,
        10,
        "host RSS is sampled every process scan (seconds), not at 10 Hz; it grows with caches for minutes after "
        "start, a leak keeps going",
        ("pid",),
    ),
    AlertSpec(
        "OomwatchDown",
        "critical",
        "Prometheus cannot scrape oomwatch, so none of the alerts above can fire",
        0.0,
        2,
        "a restart (new image, node drain) misses a scrape or two; longer is an outage",
        ("instance", "job"),
        daemon=False,
    ),
)
#: The table by name.
SPECS: dict[str, AlertSpec] = {s.name: s for s in ALERT_SPECS}

#: name: (severity, meaning) of the alerts the daemon raises (a view of ALERT_SPECS).
ALERTS: dict[str, tuple[str, str]] = {s.name: (s.severity, s.meaning) for s in ALERT_SPECS if s.daemon}
#: Alerts that only Prometheus can raise (oomwatch cannot page about its own absence): in rules/ only.
RULE_ONLY_ALERTS: dict[str, tuple[str, str]] = {s.name: (s.severity, s.meaning) for s in ALERT_SPECS if not s.daemon}
#: Alerts about one card's memory curve: their episodes end when the card's processes are gone.
CARD_ALERTS: tuple[str, ...] = tuple(s.name for s in ALERT_SPECS if s.card_scoped)
#: Alerts whose firing writes a flight dump (the memory ones; a stray or a down source needs no curve).
DUMP_ALERTS: tuple[str, ...] = tuple(s.name for s in ALERT_SPECS if s.dumps)

RUNBOOK_BASE = "https://github.com/oomwatch/oomwatch/blob/main/docs/runbooks/"

#: The label naming the machine on every series and pushed alert, and where its value comes from: the
#: Kubernetes downward API (`spec.nodeName` as NODE_NAME; a pod's own host name is the pod's name), else
#: the host name.
NODE_LABEL = "node"
NODE_ENV = "NODE_NAME"


def node_name() -> str:
    """The value of the `node` label: $NODE_NAME if set, else the host name."""
    import socket

    return os.environ.get(NODE_ENV, "").strip() or socket.gethostname()


def runbook_url(alertname: str, base: str = RUNBOOK_BASE) -> str:
    """The one place a runbook link is derived from an alert's name (as the mixins do)."""
    return f"{base}{alertname}.md"


@dataclass(frozen=True)
class AllocatorConfig:
    """The allocator probe's judge (daemon/analysis/allocator.py): live tensors against PyTorch's cache.

    Probes write once a second, so times here are tens of samples, not hundreds."""

    floor_s: float = 10.0  # live-tensor floor = min over this: a busy server has activations alive most of
    # the time (1-2 s each, several at once), so only a 10 s minimum sees below them
    settle_s: float = 10.0  # start-up ends at the first stretch this long with a flat floor ...
    flat_bytes: int = 256 << 20  # ... flat meaning within this ...
    flat_fraction: float = 0.01  # ... or this share of the floor (a busy 128 GB floor wobbles by 0.6 GB)
    leak_window_s: float = 60.0  # the floor's rise is judged over trailing windows that double from
    # `leak_min_span_s` up to this minute, so a leak that began lately is judged over its own span
    leak_min_span_s: float = 15.0  # at least this much growth in view (one-second readings: 15 of them)
    leak_min_bytes: int = 768 << 20  # a fitted rise of at least this (above the floor's 0.6 GB wobble)
    leak_min_tau: float = 0.6  # Kendall's tau of floor vs time: nearly every pair of readings rises
    leak_max_jump_fraction: float = 0.5  # one reading-to-reading jump above this share is an allocation
    cache_window_s: float = 120.0  # cache growth: the idle cache's rise over the last two minutes ...
    cache_min_bytes: int = 512 << 20  # ... of at least this (a 1.5 GB activation step is typical) ...
    cache_flat_fraction: float = 0.25  # ... while live tensors rose by less than this share of it
    retry_window_s: float = 60.0  # alloc retries (cache flushed to fit a request) this recent page
    max_series: int = 256  # (card, process) histories kept: bounded under PID churn
    max_points: int = 600  # readings kept per history: ten minutes at one a second
    forget_s: float = 10.0  # a process whose readings stopped this long ago is gone (its file went stale)


@dataclass(frozen=True)
class AnalysisConfig:
    """Thresholds of the curve analysis (pure; no I/O)."""

    bucket_s: float = 0.25  # raw samples are folded into buckets of min/max/last
    window_s: float = 900.0  # the finest history level's span (the flight recorder keeps the same span)
    # (bucket, span) per history level: full rate for 15 min, 1 s for 6 h, 1 min for 7 days (slow leaks)
    history_levels: tuple[tuple[float, float], ...] = ((0.25, 900.0), (1.0, 21600.0), (60.0, 604800.0))
    eval_interval_s: float = 1.0  # how often the detectors run (in trace time): memory needs no finer verdicts
    idle_fraction: float = 0.01  # below this share of total a card with no process is idle
    # -- lifecycle (lifecycle.py)
    settle_fraction: float = 0.01  # a floor rise this large (of capacity) restarts the settle clock ...
    settle_min_bytes: int = 256 << 20  # ... and never less than this (one graph capture is ~160 MB)
    settle_s: float = 15.0  # a start is over once the card held steady this long (graphs end within seconds)
    start_max_s: float = 900.0  # the slowest start (70B from network storage) takes about 10 minutes, plus margin
    dominant_fraction: float = 0.05  # a rise this large within one evaluation is an allocation (KV pool, shard)
    dominant_factor: float = 1.5  # ... and the KV pool's is this much larger than any rise before it
    graphs_fraction: float = 0.05  # where a start stops: CUDA graphs add a few % above the KV pool or budget ...
    graphs_min_bytes: int = 3 << 30  # ... and up to 3 GB (vLLM issue 7553: 2.4 GB beyond 0.9), 12% of a 24 GB card
    start_eta_ratio: float = 1.5  # page a climb (a start's, or a serving card's since its floor was lowest)
    # only when what is left, in time or in bytes, is under this many times the climb so far:
    # a climb that has lasted T goes on for another 1.5 T with odds of T / (T + 1.5 T) = 40% (Gott's Copernican
    # argument: nothing says where in its climb we look at it); fewer pages would land too late to act on
    exit_grace_s: float = 5.0  # memory released this soon after a process went away is its exit, not a spike
    # -- trend of the floor (trend.py)
    # seconds to days, a few times apart: a window is tested from half its length, so a gap as wide as one day to
    # seven hid a leak too slow to rise `leak_min_bytes` in a day (5 MB/h) until the 7-day window at 3.5 days.
    # The shortest sets how soon a climb from a flat floor shows: only once it holds a third of the window or so
    # (Theil-Sen's lower bound stays at 0 while most pairs are flat): 10-12 s into a 30 s window, 5-7 s into 15 s;
    # a leak of 1 GB/s fills what a server at 50% leaves of a 48 GB card in about 20 s
    trend_windows_s: tuple[float, ...] = (15.0, 30.0, 120.0, 600.0, 3600.0, 21600.0, 86400.0, 172800.0, 604800.0)
    trend_cadence: float = 60.0  # a window is re-tested this many times per its length (long ones rarely) ...
    trend_retest_min_s: float = 1.0  # ... and never more often than this (block minima barely move in a second)
    trend_min_span_s: float = 6.0  # the shortest evidence a trend is tested on
    trend_blocks: int = 32  # blocks (minima) per window: few enough that adjacent ones are near independent
    trend_min_blocks: int = 8  # fewer blocks cannot reach the strict alpha below
    trend_z: float = 3.09  # Mann-Kendall one-sided p < 0.001: strict, because block minima are autocorrelated
    trend_ci_z: float = 1.96  # Theil-Sen confidence interval (95%); its lower bound gives the cautious ETA
    trend_step_share: float = 0.5  # one block-to-block rise carrying more than this of the growth is a step
    trend_late_share: float = 0.15  # growth must still show in the window's last third ...
    trend_decel: float = 0.25  # ... and the second half's slope be at least this of the first half's
    floor_window_s: float = 10.0  # the floor now: least used over this (a trough of a short cycle) ...
    floor_min_readings: int = 5  # ... and over at least this many readings: read every 5 s, 10 s are two readings,
    # each mid-transient as often as not on a server without a pool (one pass in flight half the time): both are,
    # one time in four; all five, one time in 32 (enough for the floor alone; a transient stacked on it needs more)
    # The floor a transient is stacked on (the page's envelope, the spike risk) spans at least this many readings:
    # where every one of them was taken mid-transient, that transient is counted twice and the envelope passes the
    # card at once. At one pass in flight half the time that is 2^-N an evaluation: five readings were all caught
    # once in three days at a busy hour read every 5 s (a false page); twenty, once in two months of such readings
    # (2^20 x 5 s) at worst. The floor itself keeps its five: stretched to twenty it lags a climb read once a
    # second by 20 s, and a start that leaks from its birth is paged that much later.
    envelope_min_readings: int = 20
    leak_min_bytes: int = 128 << 20  # less growth is no leak worth a warning (a 30 MB/h leak passes it in 4 h)
    cycle_regularity: float = 0.5  # releases whose gaps vary by more than this (coefficient of variation) are
    # no repeating cycle (a sawtooth's empty_cache is periodic: CV ~0.1; transients come as a Poisson process: 1);
    # judging troughs, at the trend's confidence (curve.py `_regular`: the CV's upper bound from the gaps' count)
    trough_min_rise_bytes: int = 64 << 20  # a trough this much above the last one rose (sawtooth leaks)
    headroom_share: float = 0.2  # near the top, growth of this share of what is left counts (see _min_rise)
    ramp_share: float = 0.6  # a floor rising in at least this share of its blocks is a ramp, else a staircase
    top_ramp_share: float = 0.5  # at >= no_headroom_fraction only growth this continuous is a leak (compiles step)
    load_follow_window_s: float = 86400.0  # a pool-less server's memory follows its daily load: warn on a day+
    cache_steps_max: int = 8  # the caching allocator steps a handful of times in a window (and so much in all)
    # The allocator's steps are each about the size of the tallest transient so far: a window's rises under this
    # share of its largest, all before the first large one, are a start's last graph captures (35-67 of falling
    # size), not steps of the cache, where the large ones carry this share of the rise (curve.py `_cache_like`).
    cache_step_share: float = 0.5
    cache_eta_ratio: float = 3.0  # fine-stepped growth filling the card in under this many times its span is no cache
    cache_fine_step_share: float = 0.15  # ... fine: no step carries more of it (7+ steps; high-water marks are few)
    no_headroom_fraction: float = 0.98  # a floor this full is "no headroom left" (the cache is reclaimed first)
    # -- transients
    spike_margin: float = 0.25  # the next spike may be this much taller than the tallest seen ...
    spike_margin_bytes: int = 512 << 20  # ... and at least this much (on a 24 GB card 2% is less than a prefill)
    # How far back transient peaks count: the finest history level's span. A steady load's tallest transient
    # over 5 minutes (~100 of them) swings by its last few percent from one window to the next, enough to
    # resolve a spike-risk warning and fire it again on an unchanged load (and to miss its OOM in between).
    spike_window_s: float = 900.0
    transient_fraction: float = 0.02  # a peak this far above the floor (of capacity) is a transient ...
    transient_min_bytes: int = 256 << 20  # ... and at least this large (below it is allocator noise)
    quiet_recheck_s: float = 30.0  # a quiet serving card is judged in full at least this often
    quiet_fraction: float = 0.002  # used bytes moving less than this (of capacity) between evaluations is quiet
    transient_scan_s: float = 15.0  # transients are looked for in this recent stretch at each evaluation
    transient_min_readings: int = 3  # ... which must hold this many: a transient is a reading above the floor on
    # both sides (a card read once a scrape step, 15-60 s, has one or two there and no transient is looked for)
    oom_for_fraction: float = 0.15  # GPUOOMImminent confirms for this share of its ETA (wait longer when far)
    oom_for_max_s: float = 60.0  # ... but never longer than this
    leak_for_fraction: float = 0.25  # GPUMemoryLeak confirms for this share of its ETA (a cycle's ramp gives back) ...
    leak_for_max_s: float = 120.0  # ... but never longer than this ...
    leak_for_min_s: float = 30.0  # ... nor shorter (one ramp of a cycle); an urgent leak pages through GPUOOMImminent
    # A warning waits while the rise has stalled: no step for this many of its mean gaps (steps of a steady
    # process leave a gap this long with odds e^-3 = 5%; a staircase that has ended leaves it at once).
    stall_gaps: float = 3.0
    excursion_max_s: float = 60.0  # a rise younger than this and within a past excursion may be a cycle's ramp
    confirm_gap_s: float = 10.0  # a confirmation clock survives this long without its condition (a noisy ETA)
    oom_bound_factor: float = 2.0  # ... and the slope's lower bound projects the OOM within this many horizons
    oom_horizon_s: float = 600.0  # GPUOOMImminent when the ETA is inside this
    oom_lead_margin_s: float = 10.0  # ... started this much early: evaluation steps and the ETA's own noise take
    # seconds off the lead, and a page must land with the whole horizon still ahead
    imbalance_fraction: float = 0.10  # spread between cards of one server (of total)
    busy_fraction: float = 0.5  # a card this full beside an idle one is "one card used of several"
    kv_pressure_ratio: float = 0.90  # engine KV usage considered nearly full
    gpu_memory_utilization_default: float | None = None  # budget line when no engine says it
    engine_warmup_max_s: float = 600.0  # an engine that never answers stops holding the curve in warm-up
    idle_card_min_s: float = 60.0  # a card counts as idle beside a full one only once idle this long
    allocator: AllocatorConfig = field(default_factory=AllocatorConfig)  # the in-process probe's judge


@dataclass(frozen=True)
class AlertTiming:
    """How long a condition must hold before it pages, in the daemon and in the Prometheus rules: a view of
    an alert spec table (ALERT_SPECS by default; see there for why the daemon's and the rules' waits differ)."""

    specs: tuple[AlertSpec, ...] = ALERT_SPECS
    clear_s: float = 10.0  # a firing alert resolves after its condition was false this long (no flapping)
    rule_eval_interval_s: float = 60.0  # Prometheus evaluates rules every 15-60 s; size `for` for the slowest

    @functools.cached_property
    def for_s(self) -> dict[str, float]:
        """The daemon's `for` per alert it raises (seconds)."""
        return {s.name: s.for_s for s in self.specs if s.daemon}

    @functools.cached_property
    def clear_by_alert(self) -> dict[str, float]:
        """The alerts that stay firing longer than `clear_s` once their condition is false (seconds)."""
        return {s.name: s.clear_s for s in self.specs if s.clear_s is not None}

    @functools.cached_property
    def rule_for_evaluations(self) -> dict[str, int]:
        """The rules' `for` per alert, in evaluations."""
        return {s.name: s.rule_for_evaluations for s in self.specs}

    def spec(self, alertname: str) -> AlertSpec:
        return next(s for s in self.specs if s.name == alertname)

    def rule_for_s(self, alertname: str) -> float:
        """The `for` of an alert's Prometheus rule, in seconds."""
        return self.rule_for_evaluations[alertname] * self.rule_eval_interval_s


@dataclass(frozen=True)
class HostMemoryRule:
    """HostMemoryLeak in Prometheus: a growth gate and a level gate on the server's resident memory."""

    window_s: float = 1800.0  # fit RSS over 30 min: allocator caches settle within minutes, a leak does not
    growth_bytes_per_hour: float = 1 << 30  # predicted growth per hour that counts (1 GiB/h OOMs a host in days)
    level_bytes: float = 2 << 30  # below this RSS a growing process is still warming up (tokenizer, imports)


@dataclass(frozen=True)
class HostMemConfig:
    """The daemon's HostMemoryLeak judge: a trend test on each server process's resident memory."""

    warmup_s: float = 300.0  # imports, tokenizers, CUDA graphs and allocator arenas settle in the first minutes
    window_s: float = 1800.0  # trend over the last 30 min of scans: long enough to tell a leak from a cache
    min_points: int = 20  # fewer scans than this say nothing about a trend
    min_span_s: float = 120.0  # ... nor do scans spread over less than this
    p_value: float = 0.01  # Mann-Kendall significance: a monotonic trend, not noise
    min_tau: float = 0.5  # and a strong one (Kendall tau): most pairs of scans rise
    min_bytes_per_second: float = 16 << 10  # slower than 16 KiB/s (1.3 GiB a day) is not worth a page
    min_growth_bytes: int = 64 << 20  # the fitted growth over the window must reach 64 MiB
    max_pids: int = 64  # processes followed at once (bounded memory under PID churn)


@dataclass(frozen=True)
class PushTiming:
    """The Alertmanager client: how long to wait, how to back off, how long an alert lives.

    (How often it pushes is `DaemonConfig.push_interval`, a flag.)
    """

    timeout_s: float = 2.0  # one HTTP push; the daemon never blocks longer than this on Alertmanager
    backoff_max_s: float = 30.0  # a down Alertmanager is retried at most this far apart
    backoff_max_doublings: int = 5  # backoff = interval x 2^failures, failures capped here
    ends_at_intervals: float = 4.0  # endsAt = now + this many intervals (resolved by Alertmanager if we die) ...
    ends_at_min_s: float = 60.0  # ... and at least this far ahead, so a slow push round never lets it lapse


@dataclass(frozen=True)
class SamplerTiming:
    """The sampler's own numbers besides the per-source intervals in DaemonConfig."""

    # the windows a snapshot carries per card (name, seconds): the status page draws 15m; 6h and 7d show the
    # slow leaks the analysis' coarser history levels hold
    history_windows: tuple[tuple[str, float], ...] = (("15m", 900.0), ("6h", 21600.0), ("7d", 604800.0))
    history_points: int = 600  # points per card and window on the status page (an SVG 600 px wide)
    history_refresh_s: float = 1.0  # copy a window at most this often (trace time); copying at 10 Hz would
    # cost more than the analysis
    suspect_oom_fraction: float = 0.95  # a server vanishing while its card was this full (at the last sample that
    # still showed it) is a suspected OOM; above vLLM's default budget (0.9), so a normal exit at budget is not


@dataclass(frozen=True)
class CentralConfig:
    """The central mode (`oomwatch run --prometheus URL`, daemon/central/): one evaluator over the GPU memory
    series a cluster's Prometheus already keeps. (The card cap and the scrape interval are flags:
    `DaemonConfig.max_cards`, `DaemonConfig.scrape_interval`.)"""

    backfill_s: float = 900.0  # the first read takes the last 15 min (the analysis' finest history level), so a
    # card that is already leaking is judged at once, not after a warm-up of the central process ...
    history_s: float = 21600.0  # ... and, before them, this much of each card's history (the analysis' 6-hour
    # level, where the trend windows up to 6 h read), one point per `history_step_s`: a central that restarts
    # judges a slow leak on hours of its curve at once, as `--state-dir` lets the sidecar (0: none)
    history_step_s: float = 60.0  # the coarsest level's bucket; a step the coarse-step tests hold verdicts at
    default_scrape_s: float = 15.0  # the read period until the samples' spacing is known (the common interval)
    min_read_window_s: float = 60.0  # each read looks back at least this far: a scrape that landed late (a slow
    # target, Prometheus' own ingestion) is still read, and each sample is fed once (by its timestamp)
    interval_change: float = 0.2  # the read period follows the scrape interval found once it differs this much
    stale_s: float = 300.0  # a card without a new sample this long is gone (Prometheus' own lookback is 5 min):
    # its alerts resolve and it is no longer watched
    timeout_s: float = 10.0  # one read of the fleet; a read slower than this is Prometheus failing, said as such


@dataclass(frozen=True)
class DaemonConfig:
    """Everything `oomwatch run` needs; each field is a flag and an `OOMWATCH_<NAME>` variable."""

    listen: str = DEFAULT_LISTEN
    interval: float = 0.1  # NVML at 10 Hz: a spike that OOMs lasts about a second; NVML costs ~1 ms a read
    process_interval: float = 2.0  # psutil per PID costs ms; a process's role changes rarely
    engine_interval: float = 5.0  # engine /metrics is text of tens of kB; KV pressure builds over seconds
    push_interval: float = 1.0  # re-send firing alerts every second: a page must not wait for a scrape
    engine_url: tuple[str, ...] = ()
    alertmanager_url: tuple[str, ...] = ()
    record: str | None = None
    replay: str | None = None
    speed: float = 1.0
    loop: bool = False
    engine_discovery: bool = True  # probe the server processes' ports for an engine (--no-engine-discovery)
    server_pid: int | None = None
    server_cmdline: str | None = None
    flight_dir: str | None = None
    state_dir: str | None = None  # analysis history kept across restarts (daemon/state.py)
    external_url: str | None = None
    # TLS and basic auth of oomwatch's own endpoints (exporter-toolkit web config; exporters/webconfig.py)
    web_config_file: str | None = None
    # credentials (file names) for the Alertmanager pushes and the engine scrapes (daemon/credentials.py)
    alertmanager_auth: ClientAuth = field(default_factory=lambda: ClientAuth("--alertmanager"))
    engine_auth: ClientAuth = field(default_factory=lambda: ClientAuth("--engine"))
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)
    alerts: AlertTiming = field(default_factory=AlertTiming)
    push: PushTiming = field(default_factory=PushTiming)
    sampler: SamplerTiming = field(default_factory=SamplerTiming)
    host_memory_rule: HostMemoryRule = field(default_factory=HostMemoryRule)
    # where server processes' allocator probes write (oomwatch.probe); "" turns reading them off
    probe_dir: str = field(default_factory=lambda: env_default("probe_dir", "/dev/shm/oomwatch"))
    probe_interval: float = 1.0  # the probes write once a second; reading faster finds nothing new
    # central mode (daemon/central/, docs/fleet.md): read a fleet's GPU memory from Prometheus instead of NVML
    prometheus: str | None = None
    selector: str = ""  # label matchers narrowing the cards read (`job="dcgm"`, `Hostname=~"gpu-.*"`)
    scrape_interval: float | None = None  # the exporters' scrape interval; None: found from the samples' spacing
    shard: tuple[int, int] | None = None  # (K, N): only the cards whose node hashes to K of N (the backtest's)
    max_cards: int = 256  # cards evaluated at most. Each costs ~0.4 ms of CPU per read, 18 series and its
    # analysis history (0.84 MiB after 6 h, up to ~2 MiB once the 7-day level fills): 256 cards are ~120 ms per
    # read, ~4,600 series and ~215 MiB (bench/central.py). Cards beyond are counted
    # (oomwatch_fleet_cards{state="over_cap"})
    central: CentralConfig = field(default_factory=CentralConfig)


def env_default(name: str, default: str) -> str:
    """The `OOMWATCH_<NAME>` environment variable, or the default (flags override both)."""
    return os.environ.get("OOMWATCH_" + name.upper().replace("-", "_"), default)
