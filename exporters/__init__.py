"""Exporters read the sampler's snapshot: Prometheus /metrics (and its HTTP server), the status page,
Alertmanager push, traces.

Each reads only `oomwatch.snapshot.Snapshot` (or, for the recorders, the records the sampler hands them);
none reaches into the analysis.
"""

__all__ = ["alertmanager", "fleet", "labels", "metrics", "plot", "recorder", "server", "status"]
