"""Findings: what is wrong, the numbers behind it, and what to change, in plain words.

Each builder takes the analysis' numbers and returns a `Finding` (the JSON contract's findings entry) and
the alert `Condition` it raises. Advice names vLLM's own flags, because that is what the user can change.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..words import duration, gib, rate
from .alerts import Condition

if TYPE_CHECKING:
    from ..model import EngineSnapshot, ProcInfo
    from .curve import CurveVerdict
    from .imbalance import Imbalance
    from .lifecycle import Lifecycle

SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


@dataclass
class Finding:
    kind: str
    gpu: str | None
    pid: int | None
    summary: str
    evidence: dict[str, Any] = field(default_factory=dict)
    advice: str = ""
    severity: str = "warning"
    t: float | None = None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("t")
        return d


def _gpu_labels(gpu: str, uuid: str) -> tuple[tuple[str, str], ...]:
    return (("gpu", gpu), ("uuid", uuid))


def leak(
    gpu: str, uuid: str, name: str, v: CurveVerdict, capacity: float, total: float, t: float
) -> tuple[Finding, Condition]:
    where = "its troughs rise every cycle" if v.shape == "sawtooth" else "and is never given back"
    summary = f"GPU {gpu}: memory keeps growing after warm-up ({v.shape}), {rate(v.leak_bytes_per_second)} {where}"
    ev = {
        "shape": v.shape,
        "leak_bytes_per_second": round(v.leak_bytes_per_second, 1),
        "confidence": v.leak_confidence,
        "growth_since_seconds": None if v.leak_since is None else round(v.leak_since, 2),
        "steps": v.steps,
        "floor_bytes": int(v.floor_bytes),
        "capacity_bytes": int(capacity),
        "eta_seconds": None if v.eta_seconds is None else round(v.eta_seconds, 1),
        "eta_at_lower_bound_seconds": None if v.eta_lo_seconds is None else round(v.eta_lo_seconds, 1),
        "window_seconds": v.window_s,
        "phase": v.phase,
        "test": v.why,
    }
    advice = (
        "Memory outside the engine's preallocated pool is growing: that is the application or a library, not "
        "the KV cache (vLLM's KV pool is fixed at start). Find what holds references across requests (tensors "
        "kept in lists, a growing cache, per-request CUDA graphs); in vLLM keep --enforce-eager off unless needed "
        "and check custom logits processors. Lowering --gpu-memory-utilization only delays the OOM; restart the "
        "server before the ETA if it cannot be fixed now."
    )
    if v.shape == "sawtooth":
        advice = (
            "Each cycle gives most memory back but not all: the troughs rise. Look for state kept between "
            "batches (accumulated outputs, caches keyed per request). " + advice.split(": that is", 1)[0] + "."
        )
    f = Finding("leak", gpu, None, summary, ev, advice, "warning", t)
    c = Condition(
        "GPUMemoryLeak",
        _gpu_labels(gpu, uuid),
        f"GPU {gpu} ({name}) memory leak: {rate(v.leak_bytes_per_second)}",
        f"{summary}; floor now {gib(v.floor_bytes)} of {gib(capacity)}; full in {duration(v.eta_seconds)}.",
        v.eta_seconds,
        v.leak_bytes_per_second,
    )
    return f, c


def oom_imminent(
    gpu: str, uuid: str, name: str, v: CurveVerdict, capacity: float, horizon: float, t: float
) -> tuple[Finding, Condition]:
    # The analyzer pages only a verdict with an ETA (the latched page at the top says 0: full now).
    eta = 0.0 if v.eta_seconds is None else v.eta_seconds
    summary = (
        f"GPU {gpu}: at {rate(v.leak_bytes_per_second)} it is full in {duration(eta)} "
        f"({gib(capacity - max(v.peak_bytes, v.floor_bytes))} left)"
    )
    ev = {
        "eta_seconds": round(eta, 1),
        "horizon_seconds": horizon,
        "leak_bytes_per_second": round(v.leak_bytes_per_second, 1),
        "peak_used_bytes": int(v.peak_bytes),
        "capacity_bytes": int(capacity),
    }
    advice = (
        "This card will hit CUDA out-of-memory soon. Drain and restart the server now (the memory is held by "
        "the leaking process), then fix the growth (see GPUMemoryLeak)."
    )
    f = Finding("oom_imminent", gpu, None, summary, ev, advice, "critical", t)
    c = Condition(
        "GPUOOMImminent",
        _gpu_labels(gpu, uuid),
        f"GPU {gpu} ({name}) runs out of memory in {duration(eta)}",
        summary + ".",
        eta,
        eta,
    )
    return f, c


def spike_risk(
    gpu: str, uuid: str, name: str, v: CurveVerdict, capacity: float, margin: float, t: float
) -> tuple[Finding, Condition]:
    summary = (
        f"GPU {gpu}: transient peaks of {gib(v.spike_height_bytes)} above a floor of {gib(v.floor_bytes)}; "
        f"only {gib(v.headroom_bytes)} free, so one {int(margin * 100)}% taller OOMs"
    )
    ev = {
        "spike_height_bytes": int(v.spike_height_bytes),
        "floor_bytes": int(v.floor_bytes),
        "headroom_bytes": int(v.headroom_bytes),
        "peak_used_bytes": int(v.peak_bytes),
        "margin": margin,
    }
    advice = (
        "Peaks come from prefill activations and sampling of large batches. In vLLM lower "
        "--max-num-batched-tokens (smaller prefill chunks) or --max-num-seqs, or lower --gpu-memory-utilization "
        "to leave room for activations outside the KV pool; long prompts: cap --max-model-len."
    )
    f = Finding("spike_risk", gpu, None, summary, ev, advice, "warning", t)
    c = Condition(
        "GPUMemorySpikeRisk",
        _gpu_labels(gpu, uuid),
        f"GPU {gpu} ({name}) transient peaks are taller than its free headroom",
        summary + ".",
    )
    return f, c


def stray(
    gpu: str, uuid: str, pid: int, info: ProcInfo | None, held: float | None, why: str, t: float
) -> tuple[Finding, Condition]:
    name = (info.name if info else "") or "?"
    cmd = " ".join(info.cmdline) if info and info.cmdline else name
    summary = f"GPU {gpu}: PID {pid} ({cmd}) holds {gib(held)} outside the served process tree ({why})"
    ev = {
        "pid": pid,
        "process": name,
        "cmdline": cmd,
        "held_bytes": int(held or 0),
        "ppid": info.ppid if info else None,
        "user": info.username if info else None,
        "why": why,
    }
    advice = (
        f"Check it is not wanted (`ps -o pid,ppid,user,lstart,args -p {pid}`), then stop it: `kill {pid}` "
        f"(then `kill -9 {pid}` if it ignores SIGTERM). That frees {gib(held)} on GPU {gpu}. "
        "oomwatch never kills anything itself."
    )
    f = Finding("stray", gpu, pid, summary, ev, advice, "warning", t)
    c = Condition(
        "GPUStrayProcess",
        (("gpu", gpu), ("pid", str(pid)), ("uuid", uuid)),
        f"PID {pid} ({name}) holds {gib(held)} on GPU {gpu} outside the server",
        summary + ".",
    )
    return f, c


def imbalance(imb: Imbalance, t: float) -> tuple[Finding, Condition]:
    if imb.kind == "idle_card":
        summary = (
            f"GPU {imb.high_gpu} is {imb.spread_fraction:.0%} full while GPU {imb.low_gpu} sits idle: "
            "the server uses one card of several"
        )
        advice = (
            "Spread the model over the cards: in vLLM set --tensor-parallel-size to the number of cards "
            "(or --pipeline-parallel-size across nodes); or run a second replica on the idle card. Check "
            "CUDA_VISIBLE_DEVICES lists every card."
        )
    else:
        extra = f"; GPU {', '.join(imb.leak_gpus)} leaks while the others do not" if imb.leak_gpus else ""
        summary = (
            f"cards of one server differ by {imb.spread_fraction:.0%} of their memory "
            f"(GPU {imb.high_gpu} highest, GPU {imb.low_gpu} lowest){extra}"
        )
        advice = (
            "Tensor-parallel ranks should hold the same memory. Look on the fuller card for a process that is "
            "not a rank (GPUStrayProcess) or growth on one rank only (GPUMemoryLeak); a rank that differs from "
            "start may be a card shared with another job: pin jobs with CUDA_VISIBLE_DEVICES."
        )
    ev = {
        "kind": imb.kind,
        "gpus": list(imb.gpus),
        "spread_fraction": round(imb.spread_fraction, 4),
        "high_gpu": imb.high_gpu,
        "low_gpu": imb.low_gpu,
        "leak_gpus": list(imb.leak_gpus),
    }
    f = Finding("imbalance", imb.high_gpu, None, summary, ev, advice, "warning", t)
    c = Condition(
        "GPUMemoryImbalance",
        (("gpu", imb.high_gpu),),
        f"GPU memory imbalance across cards ({imb.kind})",
        summary + ".",
        None,
        imb.spread_fraction,
    )
    return f, c


def kv_pressure(snap: EngineSnapshot, threshold: float, t: float) -> tuple[Finding, Condition]:
    summary = (
        f"{snap.kind} at {snap.url}: KV cache {snap.kv_cache_usage_ratio:.0%} used with "
        f"{snap.requests_waiting or 0:.0f} requests waiting"
        + (f", {snap.preemptions_total:.0f} preemptions so far" if snap.preemptions_total else "")
    )
    ev = {
        "kv_cache_usage_ratio": snap.kv_cache_usage_ratio,
        "requests_running": snap.requests_running,
        "requests_waiting": snap.requests_waiting,
        "preemptions_total": snap.preemptions_total,
        "threshold": threshold,
    }
    advice = (
        "This costs throughput and latency, not memory: the KV pool is preallocated and cannot OOM. "
        "To serve more at once, give the pool more room: a higher --gpu-memory-utilization if the card has "
        "headroom, --kv-cache-dtype fp8, a smaller --max-model-len, or more cards (--tensor-parallel-size). "
        "To stop preemption instead, lower --max-num-seqs."
    )
    f = Finding("kv_pressure", None, None, summary, ev, advice, "warning", t)
    labels = (("engine", snap.engine or ""), ("url", snap.url))
    c = Condition(
        "KVCachePressure",
        labels,
        f"KV cache nearly full on {snap.url}",
        summary + ".",
        None,
        snap.kv_cache_usage_ratio or 0.0,
    )
    return f, c


def telemetry_down(source: str, error: str | None, t: float) -> tuple[Finding, Condition]:
    summary = f"source {source} is not answering: {error or 'no data'}"
    advice = (
        "oomwatch cannot see this source, so it cannot warn about it. For NVML: is the driver loaded and the "
        "container started with the NVIDIA runtime (`--gpus all`)? For an engine: is the URL right and the "
        "server up?"
    )
    f = Finding("telemetry_down", None, None, summary, {"source": source, "error": error}, advice, "critical", t)
    c = Condition("GPUTelemetryDown", (("source", source),), f"oomwatch lost telemetry from {source}", summary + ".")
    return f, c


def pids_invisible(pids: Collection[int], t: float) -> Finding:
    """NVML reports host PIDs; a sidecar in its own PID namespace cannot describe them."""
    summary = (
        f"NVML reports {len(pids)} process(es) holding GPU memory that this PID namespace cannot see "
        f"(PIDs {', '.join(map(str, sorted(pids)[:5]))}): strays and the served tree cannot be told apart"
    )
    advice = (
        "NVML reports host PIDs. Run oomwatch in the host's PID namespace: `docker run --pid=host ...`; in "
        "Kubernetes as a node-wide DaemonSet with `hostPID: true` (deploy/kubernetes/daemonset.yaml). As a "
        "sidecar with `shareProcessNamespace: true` it sees the server's processes but cannot map NVML's "
        "host PIDs to them; the memory curves and alerts still work."
    )
    return Finding("pids_invisible", None, None, summary, {"pids": sorted(pids)}, advice, "info", t)


def start_does_not_fit(
    gpu: str, uuid: str, lc: Lifecycle, peak: float, capacity: float, total: float, t: float
) -> Finding:
    """The server climbed to the card's limit during its start and its process died: it does not fit."""
    kind = lc.kind or "the server"
    summary = (
        f"GPU {gpu}: {kind} reached {gib(peak)} of {gib(capacity)} while starting and its process exited "
        "before it served: the start does not fit on this card"
    )
    ev = {
        "peak_used_bytes": int(peak),
        "capacity_bytes": int(capacity),
        "engine": lc.kind,
        "budget_fraction": lc.budget,
        "start_seconds": None if lc.start_t is None else round(t - lc.start_t, 1),
    }
    advice = (
        "Give the start room: lower --gpu-memory-utilization (vLLM; SGLang: --mem-fraction-static) so weights, "
        "KV pool and CUDA graphs fit under the card, cap --max-model-len (a smaller KV pool and profile run), "
        "or spread the model over more cards with --tensor-parallel-size."
    )
    return Finding("start_does_not_fit", gpu, None, summary, ev, advice, "warning", t)


def growth(gpu: str, v: CurveVerdict, capacity: float, t: float) -> Finding:
    """Growth that levelled off: the caching allocator's high-water marks, a late compile, a plateau."""
    if v.growth == "cache_growth":
        summary = (
            f"GPU {gpu}: the floor rose {gib(v.growth_bytes)} in a few steps and levelled off: PyTorch's "
            "caching allocator keeping freed activation memory, not a leak"
        )
        advice = (
            "Nothing to fix: the cache is reused and given back to new requests before CUDA fails. To keep "
            "more headroom, lower --max-num-batched-tokens or --max-num-seqs (smaller activations), or set "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True."
        )
    else:
        summary = f"GPU {gpu}: the floor rose {gib(v.growth_bytes)} and levelled off (a plateau, not a leak)"
        advice = "Nothing to fix while it stays flat; oomwatch keeps testing the trend at longer windows."
    ev = {
        "growth_bytes": int(v.growth_bytes),
        "floor_bytes": int(v.floor_bytes),
        "capacity_bytes": int(capacity),
        "window_seconds": v.window_s,
        "test": v.why,
    }
    return Finding(v.growth or "plateau", gpu, None, summary, ev, advice, "info", t)


def no_headroom(gpu: str, v: CurveVerdict, capacity: float, t: float) -> Finding:
    free = gib(capacity - v.floor_bytes)
    summary = (
        f"GPU {gpu}: the floor sits at {v.floor_bytes / capacity:.1%} of the card ({free}"
        " free) after a climb: no headroom left for a transient larger than the allocator's cache"
    )
    ev = {
        "floor_bytes": int(v.floor_bytes),
        "capacity_bytes": int(capacity),
        "headroom_bytes": int(v.headroom_bytes),
        "growth_bytes": int(v.growth_bytes),
        "spike_height_bytes": int(v.spike_height_bytes),
    }
    advice = (
        "Not a page by itself: PyTorch frees its cache and retries before CUDA reports out-of-memory. A leak "
        "under a warm cache is invisible here until the cache is used up; the allocator probe "
        "(OOMWATCH_PROBE_DIR) sees live tensors. For more room lower --gpu-memory-utilization."
    )
    return Finding("no_headroom", gpu, None, summary, ev, advice, "info", t)


def analysis_error(detector: str, error: str, gpus: Collection[str], count: int, t: float) -> tuple[Finding, Condition]:
    """A detector of the analysis raised: what it watches is unwatched until it stops (GPUTelemetryDown)."""
    where = f" on GPU {', '.join(sorted(gpus))}" if gpus else ""
    summary = f"the analysis' {detector} detector failed{where}: {error}"
    ev = {"detector": detector, "error": error, "gpus": sorted(gpus), "errors_total": count}
    advice = (
        "oomwatch cannot judge what this detector watches while it fails; the other detectors go on. The "
        "daemon's log names the exception once per detector: report it with the trace "
        "(`oomwatch record`, or a flight dump) so it can be replayed."
    )
    f = Finding("analysis_error", None, None, summary, ev, advice, "critical", t)
    source = f"analysis:{detector}"
    c = Condition("GPUTelemetryDown", (("source", source),), f"oomwatch's {detector} analysis failed", summary + ".")
    return f, c
