"""Findings: what is wrong, the numbers behind it, and what to change, in plain words.

Each builder takes the analysis' numbers and returns a `Finding` (the JSON contract's findings entry) and
the alert `Condition` it raises. Advice names vLLM's own flags, because that is what the user can change.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .alerts import Condition

GiB = float(1 << 30)
SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


def gib(b: float | None) -> str:
    return "n/a" if b is None else f"{b / GiB:.1f} GiB"


def duration(s: float | None) -> str:
    if s is None:
        return "never"
    s = float(s)
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    if s < 172800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"


@dataclass
class Finding:
    kind: str
    gpu: str | None
    pid: int | None
    summary: str
    evidence: dict = field(default_factory=dict)
    advice: str = ""
    severity: str = "warning"
    t: float | None = None

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("t")
        return d


def _gpu_labels(gpu: str, uuid: str) -> tuple:
    return (("gpu", gpu), ("uuid", uuid))


def leak(gpu, uuid, name, v, capacity, total, t) -> tuple[Finding, Condition]:
    rate_mib = v.leak_bytes_per_second / (1 << 20)
    where = "its troughs rise every cycle" if v.shape == "sawtooth" else f"in {v.steps} steps that were never given back"
    summary = f"GPU {gpu}: memory keeps growing after warm-up ({v.shape}), {rate_mib:.0f} MiB/s {where}"
    ev = {
        "shape": v.shape,
        "leak_bytes_per_second": round(v.leak_bytes_per_second, 1),
        "confidence": v.leak_confidence,
        "growth_since_seconds": None if v.leak_since is None else round(v.leak_since, 2),
        "steps": v.steps,
        "floor_bytes": int(v.floor_bytes),
        "capacity_bytes": int(capacity),
        "eta_seconds": None if v.eta_seconds is None else round(v.eta_seconds, 1),
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
        f"GPU {gpu} ({name}) memory leak: {rate_mib:.0f} MiB/s",
        f"{summary}; floor now {gib(v.floor_bytes)} of {gib(capacity)}; full in {duration(v.eta_seconds)}.",
        v.eta_seconds,
        v.leak_bytes_per_second,
    )
    return f, c


def oom_imminent(gpu, uuid, name, v, capacity, horizon, t) -> tuple[Finding, Condition]:
    summary = (
        f"GPU {gpu}: at {v.leak_bytes_per_second / (1 << 20):.0f} MiB/s it is full in {duration(v.eta_seconds)} "
        f"({gib(capacity - max(v.peak_bytes, v.floor_bytes))} left)"
    )
    ev = {
        "eta_seconds": round(v.eta_seconds, 1),
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
        f"GPU {gpu} ({name}) runs out of memory in {duration(v.eta_seconds)}",
        summary + ".",
        v.eta_seconds,
        v.eta_seconds,
    )
    return f, c


def spike_risk(gpu, uuid, name, v, capacity, margin, t) -> tuple[Finding, Condition]:
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


def stray(gpu, uuid, pid, info, held, why, t) -> tuple[Finding, Condition]:
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


def imbalance(imb, t) -> tuple[Finding, Condition]:
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


def kv_pressure(snap, threshold, t) -> tuple[Finding, Condition]:
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
    c = Condition("KVCachePressure", labels, f"KV cache nearly full on {snap.url}", summary + ".", None,
                  snap.kv_cache_usage_ratio or 0.0)
    return f, c


def telemetry_down(source: str, error: str | None, t) -> tuple[Finding, Condition]:
    summary = f"source {source} is not answering: {error or 'no data'}"
    advice = (
        "oomwatch cannot see this source, so it cannot warn about it. For NVML: is the driver loaded and the "
        "container started with the NVIDIA runtime (`--gpus all`)? For an engine: is the URL right and the "
        "server up?"
    )
    f = Finding("telemetry_down", None, None, summary, {"source": source, "error": error}, advice, "critical", t)
    c = Condition("GPUTelemetryDown", (("source", source),), f"oomwatch lost telemetry from {source}", summary + ".")
    return f, c


def pids_invisible(pids, t) -> Finding:
    """NVML reports host PIDs; a sidecar in its own PID namespace cannot describe them."""
    summary = (f"NVML reports {len(pids)} process(es) holding GPU memory that this PID namespace cannot see "
               f"(PIDs {', '.join(map(str, sorted(pids)[:5]))}): strays and the served tree cannot be told apart")
    advice = ("NVML reports host PIDs. Run oomwatch in the host's PID namespace: `docker run --pid=host ...`; in "
              "Kubernetes as a node-wide DaemonSet with `hostPID: true` (deploy/kubernetes/daemonset.yaml). As a "
              "sidecar with `shareProcessNamespace: true` it sees the server's processes but cannot map NVML's "
              "host PIDs to them; the memory curves and alerts still work.")
    return Finding("pids_invisible", None, None, summary, {"pids": sorted(pids)}, advice, "info", t)
