"""Exporters read the sampler's snapshot: Prometheus /metrics, the status page, Alertmanager push, traces.

Each reads only `daemon.snapshot.Snapshot` (or, for the recorders, the records the sampler hands them);
none reaches into the analysis.
"""

__all__ = ["alertmanager", "metrics", "plot", "recorder", "status"]
