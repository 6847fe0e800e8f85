"""Exporters read the sampler's snapshot: Prometheus /metrics, the status page, Alertmanager push, traces."""
