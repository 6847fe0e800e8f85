"""Prometheus exposition: one collector over the sampler's latest snapshot, and the HTTP server.

Nothing is kept between scrapes (client_python's custom-collector pattern): each scrape yields fresh
families from one immutable `Snapshot`, section by section (`SECTIONS`): a section that fails is left out
of that scrape and counted in `oomwatch_exporter_errors_total{section}`, the others are served.
`describe()` is given so registering touches no NVML. Labels are bounded: processes carry `pid`, a short
process name and a role, never a command line, and the process list is capped at `MAX_PROCS` per card
(largest holders first).
"""

from __future__ import annotations

import collections
import logging
import platform
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, StateSetMetricFamily
from prometheus_client.metrics_core import Metric

from oomwatch import __version__
from oomwatch.config import NODE_LABEL, node_name
from oomwatch.model import GpuInfo
from oomwatch.words import SHAPES

from .labels import URL_LABELS, shown
from .server import Handler, PooledHTTPServer, Route
from .webconfig import WebConfigHolder

if TYPE_CHECKING:
    from oomwatch.snapshot import Snapshot

Families = Iterator[Metric]

__all__ = [
    "BUILD_INFO",
    "MAX_PROCS",
    "SECTIONS",
    "OomwatchCollector",
    "dcgm_labels",
    "make_registry",
    "registry_of",
    "serve",
    "with_node",
]

log = logging.getLogger("oomwatch.http")
MAX_PROCS = 32
BUILD_INFO = "oomwatch_build_info"

_FAMILIES = [
    ("oomwatch_gpu_memory_total_bytes", "Total memory of the card (NVML).", "gauge"),
    (
        "oomwatch_gpu_info",
        "1 per watched card, with the labels dcgm-exporter puts on it: dcgm_gpu (its gpu: the physical card) "
        "and, for a MIG instance, GPU_I_ID and GPU_I_PROFILE (empty on a whole card); join on (node, uuid).",
        "gauge",
    ),
    ("oomwatch_gpu_memory_used_bytes", "Memory in use on the card (NVML memory info v2).", "gauge"),
    ("oomwatch_gpu_memory_free_bytes", "Memory free on the card.", "gauge"),
    ("oomwatch_gpu_memory_reserved_bytes", "Memory the driver reserves (not usable).", "gauge"),
    (
        "oomwatch_gpu_memory_floor_bytes",
        "Memory held for the hold time: the kept floor (a sawtooth's trough).",
        "gauge",
    ),
    ("oomwatch_gpu_memory_budget_bytes", "The engine's budget line: gpu_memory_utilization x total.", "gauge"),
    ("oomwatch_gpu_utilization_ratio", "GPU compute utilisation (0..1).", "gauge"),
    ("oomwatch_gpu_process_memory_bytes", "Memory held by a process on a card, with its role.", "gauge"),
    (
        "oomwatch_gpu_memory_leak_bytes_per_second",
        "Growth rate of the kept floor after warm-up (0 when no leak).",
        "gauge",
    ),
    ("oomwatch_gpu_memory_leak_confidence", "Confidence of the leak fit (0..1).", "gauge"),
    (
        "oomwatch_gpu_oom_eta_seconds",
        "Seconds until the card is full at the current leak rate (absent when no leak).",
        "gauge",
    ),
    ("oomwatch_gpu_memory_spike_height_bytes", "Tallest recent transient above the floor.", "gauge"),
    ("oomwatch_gpu_memory_headroom_bytes", "Capacity minus the kept floor.", "gauge"),
    ("oomwatch_gpu_memory_shape", "The curve's shape now.", "stateset"),
    ("oomwatch_engine_up", "Whether the engine endpoint answered with metrics.", "gauge"),
    ("oomwatch_engine_kv_cache_usage_ratio", "The engine's KV cache usage (0..1).", "gauge"),
    ("oomwatch_engine_requests_running", "Requests the engine is running.", "gauge"),
    ("oomwatch_engine_requests_waiting", "Requests the engine has queued.", "gauge"),
    ("oomwatch_engine_preemptions", "Preemptions the engine reported (its counter).", "counter"),
    ("oomwatch_engine_prefix_cache_hit_ratio", "Prefix cache hits over queries.", "gauge"),
    ("oomwatch_engine_gpu_memory_utilization_ratio", "The engine's gpu_memory_utilization setting.", "gauge"),
    ("oomwatch_alert", "1 for each firing alert, with its labels.", "gauge"),
    ("oomwatch_source_up", "Whether a source answered in its last cycle.", "gauge"),
    ("oomwatch_source_duration_seconds", "How long the source's last cycle took.", "gauge"),
    ("oomwatch_sample_duration_seconds", "Time of the last NVML sample of all cards.", "gauge"),
    ("oomwatch_analysis_duration_seconds", "Time of the last analysis evaluation.", "gauge"),
    ("oomwatch_samples", "Samples taken since start.", "counter"),
    ("oomwatch_sink_up", "Whether a sink (recorder, Alertmanager, flight dumps) took its last write.", "gauge"),
    ("oomwatch_suspected_ooms", "Server processes that vanished while their card was nearly full.", "counter"),
    ("oomwatch_flight_dumps", "Flight-recorder traces written (on a memory alert or a suspected OOM).", "counter"),
    ("oomwatch_exporter_errors", "Exposition sections dropped from a scrape because building them failed.", "counter"),
    (
        "oomwatch_process_resident_memory_bytes",
        "Resident host memory (RSS) of a GPU process or of its server's parent processes.",
        "gauge",
    ),
    (
        "oomwatch_process_info",
        "1 per GPU process and server parent: its role, server group and Kubernetes names (join on pid).",
        "gauge",
    ),
    (
        "oomwatch_process_allocator_allocated_bytes",
        "Live tensors of a process on a card (PyTorch allocator probe).",
        "gauge",
    ),
    (
        "oomwatch_process_allocator_reserved_bytes",
        "Memory PyTorch's caching allocator holds: live tensors plus cache.",
        "gauge",
    ),
    ("oomwatch_process_allocator_inactive_split_bytes", "Cached blocks split and not in use (fragmentation).", "gauge"),
    (
        "oomwatch_process_allocator_alloc_retries_total",
        "Times the allocator flushed its cache to fit a request.",
        "counter",
    ),
    ("oomwatch_process_allocator_ooms_total", "CUDA out-of-memory errors the allocator raised.", "counter"),
]


def _g(name: str, labels: list[str]) -> GaugeMetricFamily:
    """A labelled gauge family with its help text from the family table."""
    return GaugeMetricFamily(name, _DOCS[name], labels=labels)


def _gauges(labels: list[str], *names: str) -> dict[str, GaugeMetricFamily]:
    return {n: _g(n, labels) for n in names}


class _OnCard(Protocol):
    @property
    def gpu(self) -> str: ...


_T = TypeVar("_T", bound=_OnCard)


def _largest_per_card(items: Iterable[_T], size: Callable[[_T], float]) -> Iterator[_T]:
    """The items largest first, at most `MAX_PROCS` per card: the label cardinality stays bounded."""
    per_gpu: dict[str, int] = {}
    for it in sorted(items, key=lambda x: -size(x)):
        if per_gpu.get(it.gpu, 0) >= MAX_PROCS:
            continue
        per_gpu[it.gpu] = per_gpu.get(it.gpu, 0) + 1
        yield it


class OomwatchCollector:
    """Every family of `SECTIONS`, each series labelled with `node` (see `with_node`)."""

    def __init__(self, get_snapshot: Callable[[], Snapshot], node: str | None = None):
        self._get = get_snapshot
        self.node = node_name() if node is None else node

    def describe(self) -> Families:
        for name, doc, typ in _FAMILIES:
            if typ == "counter":
                yield CounterMetricFamily(name.removesuffix("_total"), doc)
            elif typ == "stateset":
                yield StateSetMetricFamily(name, doc)
            else:
                yield GaugeMetricFamily(name, doc)

    def collect(self) -> Families:
        """Each section on its own: a bad value in one drops that section and counts, never the scrape."""
        s = self._get()
        for section in SECTIONS:
            try:
                fams = list(section(s))  # built whole before yielding, so a failure yields nothing half-done
            except Exception:  # noqa: BLE001 - one section's bug must not cost the whole exposition
                log.exception("metrics section %s failed", section.__name__)
                with _errors_lock:
                    _section_errors[section.__name__] += 1
                continue
            yield from (with_node(f, self.node) for f in fams)
        errs = CounterMetricFamily("oomwatch_exporter_errors", _DOCS["oomwatch_exporter_errors"], labels=["section"])
        with _errors_lock:
            for name, n in sorted(_section_errors.items()):
                errs.add_metric([name.removeprefix("_")], n)
        yield with_node(errs, self.node)


def with_node(fam: Metric, node: str) -> Metric:
    """`fam` with `node` in every series' labels and URL-valued labels redacted: the one place both are
    done. `node` tells a card, a process or an alert from another node's in a cluster-wide Prometheus,
    and the joins `on (node, gpu)`, `on (node, pid)` hold however the scrape is relabelled (DESIGN.md)."""
    fam.samples = [smp._replace(labels={NODE_LABEL: node, **_shown(smp.labels)}) for smp in fam.samples]
    return fam


def _shown(labels: dict[str, str]) -> dict[str, str]:
    return {k: shown(v) if k in URL_LABELS else v for k, v in labels.items()}


_DOCS = {n: d for n, d, _ in _FAMILIES}
_errors_lock = threading.Lock()
_section_errors: collections.Counter[str] = collections.Counter()  # per process, like any counter


def _gpus(s: Snapshot) -> Families:
    docs = _DOCS
    gl = ["gpu", "uuid", "name"]
    fam = _gauges(
        gl,
        "oomwatch_gpu_memory_total_bytes",
        "oomwatch_gpu_memory_used_bytes",
        "oomwatch_gpu_memory_free_bytes",
        "oomwatch_gpu_memory_reserved_bytes",
    )
    short = ["gpu", "uuid"]
    fam2 = _gauges(
        short,
        "oomwatch_gpu_memory_floor_bytes",
        "oomwatch_gpu_memory_budget_bytes",
        "oomwatch_gpu_utilization_ratio",
        "oomwatch_gpu_memory_leak_bytes_per_second",
        "oomwatch_gpu_memory_leak_confidence",
        "oomwatch_gpu_oom_eta_seconds",
        "oomwatch_gpu_memory_spike_height_bytes",
        "oomwatch_gpu_memory_headroom_bytes",
    )
    shape = StateSetMetricFamily("oomwatch_gpu_memory_shape", docs["oomwatch_gpu_memory_shape"], labels=short)
    info = _g("oomwatch_gpu_info", ["gpu", "uuid", "dcgm_gpu", "GPU_I_ID", "GPU_I_PROFILE"])
    for g in s.gpus:
        i, u, nm = str(g.info.index), g.info.uuid, g.info.name
        fam["oomwatch_gpu_memory_total_bytes"].add_metric([i, u, nm], g.info.total_bytes)
        info.add_metric([i, u, *dcgm_labels(g.info)], 1.0)
        smp = g.sample
        if smp is not None:
            for key, val in (("used", smp.used_bytes), ("free", smp.free_bytes), ("reserved", smp.reserved_bytes)):
                if val is not None:
                    fam[f"oomwatch_gpu_memory_{key}_bytes"].add_metric([i, u, nm], val)
            if smp.util_percent is not None:
                fam2["oomwatch_gpu_utilization_ratio"].add_metric([i, u], smp.util_percent / 100.0)
        v = g.verdict
        fam2["oomwatch_gpu_memory_floor_bytes"].add_metric([i, u], v.floor_bytes)
        if g.budget_bytes is not None:
            fam2["oomwatch_gpu_memory_budget_bytes"].add_metric([i, u], g.budget_bytes)
        fam2["oomwatch_gpu_memory_leak_bytes_per_second"].add_metric([i, u], v.leak_bytes_per_second)
        fam2["oomwatch_gpu_memory_leak_confidence"].add_metric([i, u], v.leak_confidence)
        if v.eta_seconds is not None:
            fam2["oomwatch_gpu_oom_eta_seconds"].add_metric([i, u], v.eta_seconds)
        fam2["oomwatch_gpu_memory_spike_height_bytes"].add_metric([i, u], v.spike_height_bytes)
        fam2["oomwatch_gpu_memory_headroom_bytes"].add_metric([i, u], v.headroom_bytes)
        shape.add_metric([i, u], {sh: sh == v.shape for sh in SHAPES})
    yield from fam.values()
    yield info
    yield from fam2.values()
    yield shape


def dcgm_labels(info: GpuInfo) -> tuple[str, str, str]:
    """(gpu, GPU_I_ID, GPU_I_PROFILE) as dcgm-exporter labels this card: a MIG instance carries its physical
    card's index (oomwatch watches it as index 1000 * (card + 1) + n, which matches nothing there), its GPU
    instance ID ("gi1/ci0" -> "1") and its profile ("... MIG 3g.71gb" -> "3g.71gb"); a whole card only its
    index."""
    if info.mig_parent is None:
        return str(info.index), "", ""
    gi = (info.mig_instance or "").split("/")[0]
    gid = gi[2:] if gi.startswith("gi") and gi[2:].isdigit() else ""
    profile = info.name.rsplit("MIG ", 1)[1].strip() if "MIG " in info.name else ""
    return str(info.mig_parent), gid, profile


def _processes(s: Snapshot) -> Families:
    procs = _g(
        "oomwatch_gpu_process_memory_bytes",
        ["gpu", "uuid", "pid", "process", "role"],
    )
    uuid = {str(g.info.index): g.info.uuid for g in s.gpus}
    held = [p for p in s.procs if p.used_bytes is not None]
    for p in _largest_per_card(held, lambda p: p.used_bytes or 0):
        lab = [p.gpu, uuid.get(p.gpu, ""), str(p.pid), (p.name or "?")[:32], p.role]
        procs.add_metric(lab, p.used_bytes or 0)  # never None here
    yield procs


def _allocator(s: Snapshot) -> Families:
    """PyTorch's caching allocator per (card, process), from the in-process probes (bounded like processes).
    Absent (no family at all) where no server runs the probe: most deployments never opt in."""
    if not getattr(s, "allocs", ()):
        return
    labels = ["gpu", "uuid", "pid", "role"]
    g = _gauges(
        labels,
        "oomwatch_process_allocator_allocated_bytes",
        "oomwatch_process_allocator_reserved_bytes",
        "oomwatch_process_allocator_inactive_split_bytes",
    )
    c = {
        n: CounterMetricFamily(n.removesuffix("_total"), _DOCS[n], labels=labels)
        for n in ("oomwatch_process_allocator_alloc_retries_total", "oomwatch_process_allocator_ooms_total")
    }
    for a in _largest_per_card(getattr(s, "allocs", ()), lambda a: a.reserved_bytes):
        lab = [a.gpu, a.uuid, str(a.pid), a.role]
        g["oomwatch_process_allocator_allocated_bytes"].add_metric(lab, a.allocated_bytes)
        g["oomwatch_process_allocator_reserved_bytes"].add_metric(lab, a.reserved_bytes)
        if a.inactive_split_bytes is not None:
            g["oomwatch_process_allocator_inactive_split_bytes"].add_metric(lab, a.inactive_split_bytes)
        if a.alloc_retries is not None:
            c["oomwatch_process_allocator_alloc_retries_total"].add_metric(lab, a.alloc_retries)
        if a.ooms is not None:
            c["oomwatch_process_allocator_ooms_total"].add_metric(lab, a.ooms)
    yield from g.values()
    yield from c.values()


def _engines(s: Snapshot) -> Families:
    docs = _DOCS
    el = ["url", "kind", "model", "engine"]
    efam = _gauges(
        el,
        "oomwatch_engine_up",
        "oomwatch_engine_kv_cache_usage_ratio",
        "oomwatch_engine_requests_running",
        "oomwatch_engine_requests_waiting",
        "oomwatch_engine_prefix_cache_hit_ratio",
        "oomwatch_engine_gpu_memory_utilization_ratio",
    )
    preempt = CounterMetricFamily("oomwatch_engine_preemptions", docs["oomwatch_engine_preemptions"], labels=el)
    for top in s.engines:
        efam["oomwatch_engine_up"].add_metric([top.url, top.kind or "", top.model or "", ""], 1.0 if top.up else 0.0)
        for e in top.engines or (top,):
            lab = [top.url, e.kind or "", e.model or "", e.engine or ""]
            for attr, n in (
                ("kv_cache_usage_ratio", "oomwatch_engine_kv_cache_usage_ratio"),
                ("requests_running", "oomwatch_engine_requests_running"),
                ("requests_waiting", "oomwatch_engine_requests_waiting"),
                ("prefix_cache_hit_ratio", "oomwatch_engine_prefix_cache_hit_ratio"),
                ("gpu_memory_utilization", "oomwatch_engine_gpu_memory_utilization_ratio"),
            ):
                val = getattr(e, attr)
                if e.up and val is not None:
                    efam[n].add_metric(lab, val)
            if e.up and e.preemptions_total is not None:
                preempt.add_metric(lab, e.preemptions_total)
    yield from efam.values()
    yield preempt


def _alerts(s: Snapshot) -> Families:
    al_keys = ["alertname", "severity", "gpu", "uuid", "pid", "source", "engine", "url"]
    alert = _g("oomwatch_alert", al_keys)
    for a in s.alerts:
        if a.state == "firing":
            alert.add_metric([str(a.labels.get(k, "")) for k in al_keys], 1.0)
    yield alert


def _health(s: Snapshot) -> Families:
    docs = _DOCS
    up = _g("oomwatch_source_up", ["source"])
    dur = _g("oomwatch_source_duration_seconds", ["source"])
    for src in s.sources:
        up.add_metric([src.name], 1.0 if src.up else 0.0)
        dur.add_metric([src.name], src.duration_seconds)
    yield up
    yield dur
    sink = _g("oomwatch_sink_up", ["sink"])
    for k in s.sinks:
        sink.add_metric([k.name], 1.0 if k.up else 0.0)
    yield sink
    if s.sample_duration_seconds is not None:
        yield GaugeMetricFamily(
            "oomwatch_sample_duration_seconds",
            docs["oomwatch_sample_duration_seconds"],
            value=s.sample_duration_seconds,
        )
    if s.analysis_duration_seconds is not None:
        yield GaugeMetricFamily(
            "oomwatch_analysis_duration_seconds",
            docs["oomwatch_analysis_duration_seconds"],
            value=s.analysis_duration_seconds,
        )
    yield CounterMetricFamily("oomwatch_samples", docs["oomwatch_samples"], value=s.samples_total)
    yield CounterMetricFamily("oomwatch_suspected_ooms", docs["oomwatch_suspected_ooms"], value=s.suspected_ooms)
    yield CounterMetricFamily("oomwatch_flight_dumps", docs["oomwatch_flight_dumps"], value=s.flight_dumps)


#: The exposition's sections, in order; each is a function of the snapshot yielding metric families.
def _host_processes(s: Snapshot) -> Families:
    """Resident host memory and identity of each server process (analysis/hostmem.py's views, capped)."""
    views = getattr(s, "host_processes", ())
    if not any(v.rss_bytes is not None for v in views):
        return  # no process scan (a replay without rss lines): no empty families in the exposition
    lab = ["pid", "process", "role", "pod", "namespace", "container"]
    rss = _g("oomwatch_process_resident_memory_bytes", lab)
    info = _g("oomwatch_process_info", lab + ["group"])
    for v in views:
        values = [str(v.pid), v.process, v.role, v.pod or "", v.namespace or "", v.container or ""]
        if v.rss_bytes is not None:
            rss.add_metric(values, v.rss_bytes)
        info.add_metric(values + [v.group or ""], 1.0)
    yield rss
    yield info


SECTIONS = [_gpus, _processes, _host_processes, _allocator, _engines, _alerts, _health]


def make_registry(get_snapshot: Callable[[], Snapshot], process_metrics: bool = True) -> CollectorRegistry:
    """oomwatch's collector, its build info and (unless `process_metrics` is False, for expositions compared
    byte for byte) prometheus_client's process, platform and GC collectors: the daemon's own RSS, CPU and
    open files are what a sidecar's owner asks about first."""
    return registry_of(OomwatchCollector(get_snapshot), process_metrics)


def registry_of(collector: Any, process_metrics: bool = True) -> CollectorRegistry:
    """A registry of `collector` with what every oomwatch exposition carries: build info and, unless
    `process_metrics` is False, the process, platform and GC collectors (the daemon's and the central's)."""
    reg = CollectorRegistry(auto_describe=True)
    reg.register(collector)
    reg.register(_BuildInfo())
    if process_metrics:
        ProcessCollector(registry=reg)
        PlatformCollector(registry=reg)
        GCCollector(registry=reg)
    return reg


class _BuildInfo:
    """`oomwatch_build_info{version, python} 1`: which release runs where (join on instance or node)."""

    def collect(self) -> Families:
        g = GaugeMetricFamily(BUILD_INFO, "oomwatch's version and Python's, always 1.", labels=["version", "python"])
        g.add_metric([__version__, platform.python_version()], 1.0)
        yield g

    def describe(self) -> Families:
        return self.collect()


def serve(
    listen: str,
    get_snapshot: Callable[[], Snapshot],
    extra_routes: dict[str, Route] | None = None,
    web: WebConfigHolder | None = None,
    registry: CollectorRegistry | None = None,
) -> tuple[PooledHTTPServer, threading.Thread]:
    """Start the HTTP server in a daemon thread; returns (server, thread). Raises OSError if the port is taken.

    `/metrics` and `/healthz`, plus `extra_routes` (the status page); see exporters/server.py for its limits.
    `web`: TLS and basic auth (exporters/webconfig.py). `registry`: what /metrics serves, if not the daemon's
    (the central mode's, exporters/fleet.py)."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    routes: dict[str, Route] = {"/healthz": lambda: ("text/plain; charset=utf-8", b"ok\n")}
    routes.update(extra_routes or {})
    handler = type("Handler", (Handler,), {"routes": routes, "registry": registry or make_registry(get_snapshot)})
    httpd = PooledHTTPServer((host, int(port)), handler, web=web)
    th = threading.Thread(target=httpd.serve_forever, name="oomwatch-http", daemon=True)
    th.start()
    return httpd, th
