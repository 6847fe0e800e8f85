"""Prometheus exposition: one collector over the sampler's latest snapshot, and the HTTP server.

Nothing is kept between scrapes (client_python's custom-collector pattern): each scrape yields fresh
families from one immutable `Snapshot`. `describe()` is given so registering touches no NVML. Labels are
bounded: processes carry `pid`, a short process name and a role, never a command line, and the process
list is capped at `MAX_PROCS` per card (largest holders first).
"""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, CounterMetricFamily, StateSetMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from daemon.analysis.curve import SHAPES

log = logging.getLogger("oomwatch.http")
MAX_PROCS = 32

_FAMILIES = [
    ("oomwatch_gpu_memory_total_bytes", "Total memory of the card (NVML).", "gauge"),
    ("oomwatch_gpu_memory_used_bytes", "Memory in use on the card (NVML memory info v2).", "gauge"),
    ("oomwatch_gpu_memory_free_bytes", "Memory free on the card.", "gauge"),
    ("oomwatch_gpu_memory_reserved_bytes", "Memory the driver reserves (not usable).", "gauge"),
    ("oomwatch_gpu_memory_floor_bytes", "Memory held for the hold time: the kept floor (a sawtooth's trough).", "gauge"),
    ("oomwatch_gpu_memory_budget_bytes", "The engine's budget line: gpu_memory_utilization x total.", "gauge"),
    ("oomwatch_gpu_utilization_ratio", "GPU compute utilisation (0..1).", "gauge"),
    ("oomwatch_gpu_process_memory_bytes", "Memory held by a process on a card, with its role.", "gauge"),
    ("oomwatch_gpu_memory_leak_bytes_per_second", "Growth rate of the kept floor after warm-up (0 when no leak).", "gauge"),
    ("oomwatch_gpu_memory_leak_confidence", "Confidence of the leak fit (0..1).", "gauge"),
    ("oomwatch_gpu_oom_eta_seconds", "Seconds until the card is full at the current leak rate (absent when no leak).", "gauge"),
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
]


def _g(name, doc, labels):
    return GaugeMetricFamily(name, doc, labels=labels)


class OomwatchCollector:
    def __init__(self, get_snapshot):
        self._get = get_snapshot

    def describe(self):
        for name, doc, typ in _FAMILIES:
            if typ == "counter":
                yield CounterMetricFamily(name.removesuffix("_total"), doc)
            elif typ == "stateset":
                yield StateSetMetricFamily(name, doc)
            else:
                yield GaugeMetricFamily(name, doc)

    def collect(self):
        s = self._get()
        docs = {n: d for n, d, _ in _FAMILIES}
        gl = ["gpu", "uuid", "name"]
        fam = {n: _g(n, docs[n], gl) for n in (
            "oomwatch_gpu_memory_total_bytes", "oomwatch_gpu_memory_used_bytes", "oomwatch_gpu_memory_free_bytes",
            "oomwatch_gpu_memory_reserved_bytes")}
        short = ["gpu", "uuid"]
        fam2 = {n: _g(n, docs[n], short) for n in (
            "oomwatch_gpu_memory_floor_bytes", "oomwatch_gpu_memory_budget_bytes", "oomwatch_gpu_utilization_ratio",
            "oomwatch_gpu_memory_leak_bytes_per_second", "oomwatch_gpu_memory_leak_confidence",
            "oomwatch_gpu_oom_eta_seconds", "oomwatch_gpu_memory_spike_height_bytes",
            "oomwatch_gpu_memory_headroom_bytes")}
        shape = StateSetMetricFamily("oomwatch_gpu_memory_shape", docs["oomwatch_gpu_memory_shape"], labels=short)
        for g in s.gpus:
            i, u, nm = str(g.info.index), g.info.uuid, g.info.name
            fam["oomwatch_gpu_memory_total_bytes"].add_metric([i, u, nm], g.info.total_bytes)
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
        yield from fam2.values()
        yield shape

        procs = _g("oomwatch_gpu_process_memory_bytes", docs["oomwatch_gpu_process_memory_bytes"],
                   ["gpu", "pid", "process", "role"])
        per_gpu: dict[str, int] = {}
        for p in sorted(s.procs, key=lambda p: -(p.used_bytes or 0)):
            if p.used_bytes is None or per_gpu.get(p.gpu, 0) >= MAX_PROCS:
                continue
            per_gpu[p.gpu] = per_gpu.get(p.gpu, 0) + 1
            procs.add_metric([p.gpu, str(p.pid), (p.name or "?")[:32], p.role], p.used_bytes)
        yield procs

        el = ["url", "kind", "model", "engine"]
        efam = {n: _g(n, docs[n], el) for n in (
            "oomwatch_engine_up", "oomwatch_engine_kv_cache_usage_ratio", "oomwatch_engine_requests_running",
            "oomwatch_engine_requests_waiting", "oomwatch_engine_prefix_cache_hit_ratio",
            "oomwatch_engine_gpu_memory_utilization_ratio")}
        preempt = CounterMetricFamily("oomwatch_engine_preemptions", docs["oomwatch_engine_preemptions"], labels=el)
        for top in s.engines:
            efam["oomwatch_engine_up"].add_metric([top.url, top.kind or "", top.model or "", ""], 1.0 if top.up else 0.0)
            for e in top.engines or (top,):
                lab = [top.url, e.kind or "", e.model or "", e.engine or ""]
                for attr, n in (("kv_cache_usage_ratio", "oomwatch_engine_kv_cache_usage_ratio"),
                                ("requests_running", "oomwatch_engine_requests_running"),
                                ("requests_waiting", "oomwatch_engine_requests_waiting"),
                                ("prefix_cache_hit_ratio", "oomwatch_engine_prefix_cache_hit_ratio"),
                                ("gpu_memory_utilization", "oomwatch_engine_gpu_memory_utilization_ratio")):
                    val = getattr(e, attr)
                    if e.up and val is not None:
                        efam[n].add_metric(lab, val)
                if e.up and e.preemptions_total is not None:
                    preempt.add_metric(lab, e.preemptions_total)
        yield from efam.values()
        yield preempt

        al_keys = ["alertname", "severity", "gpu", "uuid", "pid", "source", "engine", "url"]
        alert = _g("oomwatch_alert", docs["oomwatch_alert"], al_keys)
        for a in s.alerts:
            if a.state == "firing":
                alert.add_metric([str(a.labels.get(k, "")) for k in al_keys], 1.0)
        yield alert

        up = _g("oomwatch_source_up", docs["oomwatch_source_up"], ["source"])
        dur = _g("oomwatch_source_duration_seconds", docs["oomwatch_source_duration_seconds"], ["source"])
        for src in s.sources:
            up.add_metric([src.name], 1.0 if src.up else 0.0)
            dur.add_metric([src.name], src.duration_seconds)
        yield up
        yield dur
        if s.sample_duration_seconds is not None:
            yield GaugeMetricFamily("oomwatch_sample_duration_seconds", docs["oomwatch_sample_duration_seconds"],
                                    value=s.sample_duration_seconds)
        if s.analysis_duration_seconds is not None:
            yield GaugeMetricFamily("oomwatch_analysis_duration_seconds", docs["oomwatch_analysis_duration_seconds"],
                                    value=s.analysis_duration_seconds)
        yield CounterMetricFamily("oomwatch_samples", docs["oomwatch_samples"], value=s.samples_total)


def make_registry(get_snapshot) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=True)
    reg.register(OomwatchCollector(get_snapshot))
    return reg


class _Handler(BaseHTTPRequestHandler):
    server_version = "oomwatch"
    routes: dict = {}

    def do_GET(self):  # noqa: N802 - http.server's naming
        path = self.path.split("?", 1)[0]
        route = self.routes.get(path)
        if route is None:
            self._send(404, "text/plain; charset=utf-8", b"not found; try /metrics\n")
            return
        try:
            ctype, body = route()
        except Exception:  # noqa: BLE001 - a failing page must not kill the server
            log.exception("error serving %s", path)
            self._send(500, "text/plain; charset=utf-8", b"internal error\n")
            return
        self._send(200, ctype, body)

    def _send(self, code, ctype, body: bytes):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):  # quiet; scrapes every 15 s would flood the log
        log.debug("%s " + fmt, self.address_string(), *args)


def serve(listen: str, get_snapshot, extra_routes: dict | None = None):
    """Start the HTTP server in a daemon thread; returns (server, thread). Raises OSError if the port is taken."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    reg = make_registry(get_snapshot)
    routes = {
        "/metrics": lambda: (CONTENT_TYPE_LATEST, generate_latest(reg)),
        "/healthz": lambda: ("text/plain; charset=utf-8", b"ok\n"),
    }
    routes.update(extra_routes or {})
    handler = type("Handler", (_Handler,), {"routes": routes})
    httpd = ThreadingHTTPServer((host, int(port)), handler)
    httpd.daemon_threads = True
    th = threading.Thread(target=httpd.serve_forever, name="oomwatch-http", daemon=True)
    th.start()
    return httpd, th

