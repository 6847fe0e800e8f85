"""Typed, immutable records that flow from the sources to the analysis and the exporters.

Units are in the field names. A value a source could not read is None, never 0: a missing reading must
drop out of the analysis, not pretend the card is empty (nvitop's `int(NA) == 0` trap).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """What does not change while a card is attached."""

    index: int
    name: str
    uuid: str
    total_bytes: int
    mig: bool = False
    mig_parent: int | None = None  # a MIG instance: the index of the card it is carved from
    mig_instance: str | None = None  # ... and its GPU/compute instance ("gi1/ci0")
    mig_note: str | None = None  # MIG on but instances unreadable: why (the whole card is watched instead)


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One card at one instant. `procs` are (pid, used_bytes or None) pairs from NVML."""

    index: int
    used_bytes: int | None
    free_bytes: int | None = None
    reserved_bytes: int | None = None
    util_percent: int | None = None
    procs: tuple[tuple[int, int | None], ...] = ()


@dataclass(frozen=True, slots=True)
class Sample:
    """All cards at one instant; `t` is seconds (trace time in replay, monotonic-based live)."""

    t: float
    gpus: tuple[GpuSample, ...]


@dataclass(frozen=True, slots=True)
class ProcInfo:
    """A process seen holding GPU memory. `cmdline` is already redacted and shortened."""

    pid: int
    name: str = ""
    cmdline: tuple[str, ...] = ()
    ppid: int | None = None
    create_time: float | None = None
    username: str | None = None
    libtorch_cuda: bool | None = None
    libcudart: bool | None = None
    container: str | None = None
    visible: bool = True  # False when this PID namespace cannot see it (NVML gives host PIDs)
    alive: bool = True
    pgid: int | None = None  # process group: a re-parented worker keeps its dead parent's group
    rss_bytes: int | None = None  # resident host memory when described (the trend comes from RssSample)
    pod: str | None = None  # Kubernetes pod, namespace and container, when known
    namespace: str | None = None
    container_name: str | None = None


@dataclass(frozen=True, slots=True)
class RssSample:
    """Resident host memory of the server processes at one process scan: (pid, bytes) pairs."""

    t: float
    rss: tuple[tuple[int, int], ...]
    limit_bytes: int | None = None  # the memory limit the servers live under (cgroup v2 memory.max, else host)
    limit_used_bytes: int | None = None  # what is used under that limit now
    limit_source: str | None = None  # cgroup | host


@dataclass(frozen=True, slots=True)
class AllocSample:
    """PyTorch's caching allocator in one process on one card at `t` (the in-process probe, `alloc` lines).

    `allocated_bytes` are live tensors, `reserved_bytes` what the allocator holds from CUDA (live + cache);
    the counters are cumulative since the process started. `uuid` joins it to a card, whatever
    CUDA_VISIBLE_DEVICES made of the process's own device numbers.
    """

    t: float
    pid: int
    uuid: str
    allocated_bytes: int
    reserved_bytes: int
    inactive_split_bytes: int | None = None
    alloc_retries: int | None = None
    ooms: int | None = None


@dataclass(frozen=True, slots=True)
class SourceStatus:
    """One source's health for this cycle (node_exporter's scrape_collector_success)."""

    name: str
    up: bool
    error: str | None = None
    duration_seconds: float = 0.0


@dataclass(frozen=True)
class EngineSnapshot:
    """What one engine endpoint believes about its memory, normalised across engines."""

    url: str
    kind: str | None = None  # vllm | sglang | tgi | llamacpp
    up: bool = False
    error: str | None = None
    model: str | None = None
    engine: str | None = None
    kv_cache_usage_ratio: float | None = None
    requests_running: float | None = None
    requests_waiting: float | None = None
    requests_swapped: float | None = None
    preemptions_total: float | None = None
    prefix_cache_hit_ratio: float | None = None
    gpu_memory_utilization: float | None = None
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    cache_dtype: str | None = None
    prefix_caching: bool | None = None
    kv_cache_memory_bytes: int | None = None
    engines: tuple[EngineSnapshot, ...] = field(default=())  # data-parallel engines behind one URL
    kv_pools: tuple[tuple[str, float], ...] = ()  # per memory pool usage where the engine splits it (SGLang)
