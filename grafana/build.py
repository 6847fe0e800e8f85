"""Build grafana/oomwatch.json from code: one place for panels, queries and thresholds.

    python grafana/build.py            # rewrites grafana/oomwatch.json
    python grafana/build.py --check    # exit 1 if the committed JSON is stale

Read top to bottom as an on-call engineer does: is anything firing, which card, how long until OOM, what
shape, who holds the memory, what the engine thinks, and is oomwatch itself healthy.
"""

from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "oomwatch.json")
sys.path.insert(0, os.path.dirname(HERE))

from oomwatch.config import RUNBOOK_BASE, SPECS, AnalysisConfig, runbook_url  # noqa: E402

#: Alert names, runbook links and the OOM horizon come from daemon/config.py's alert spec table and config.
RUNBOOKS = RUNBOOK_BASE
HORIZON_S = AnalysisConfig().oom_horizon_s
#: Every query is scoped by the node and instance variables (a cluster's Prometheus holds many nodes).
SEL = 'node=~"$node",instance=~"$instance"'
GSEL = SEL + ',gpu=~"$gpu"'
DS = {"type": "prometheus", "uid": "${datasource}"}
#: The datasource input Grafana's import asks for (a file imported by hand); provisioning ignores it and the
#: `datasource` variable falls back to the default Prometheus.
DS_INPUT = "DS_PROMETHEUS"
#: Processes of the chosen namespace and pod (oomwatch_process_info, from the process scan). A process with
#: no known pod is always shown: only processes known to belong to another pod are hidden.
POD_SEL = 'namespace=~"$namespace",pod=~"$pod"'
OTHER_PODS = f"(oomwatch_process_info{{{SEL}}} unless oomwatch_process_info{{{SEL},{POD_SEL}}})"

_id = 0


def alert(name):
    """An alert's name as a panel mentions it: one the spec table has."""
    if name not in SPECS:
        raise SystemExit(f"grafana/build.py: no alert {name} in daemon/config.py's ALERT_SPECS")
    return name


def _num(x):
    """A number as JSON writes it (600, not 600.0)."""
    return int(x) if float(x).is_integer() else x


def _next_id():
    global _id
    _id += 1
    return _id


def target(expr, legend="", ref="A", fmt="time_series", instant=False):
    return {
        "datasource": DS,
        "expr": expr,
        "legendFormat": legend,
        "refId": ref,
        "format": fmt,
        "instant": instant,
        "range": not instant,
    }


def panel(kind, title, targets, x, y, w, h, unit=None, desc="", **extra):
    p = {
        "id": _next_id(),
        "type": kind,
        "title": title,
        "description": desc,
        "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "targets": targets,
        "fieldConfig": {"defaults": {"unit": unit} if unit else {}, "overrides": []},
        "options": {},
    }
    for k, v in extra.items():
        if k == "defaults":
            p["fieldConfig"]["defaults"].update(v)
        elif k == "overrides":
            p["fieldConfig"]["overrides"] = v
        else:
            p[k] = v
    return p


def thresholds(*steps):
    return {"thresholds": {"mode": "absolute", "steps": [{"color": c, "value": v} for v, c in steps]}}


def dashboard():
    panels = [
        panel(
            "stat",
            "Alerts firing",
            [target(f"count(oomwatch_alert{{{SEL}}} == 1) or vector(0)")],
            0,
            0,
            4,
            4,
            desc="Alerts oomwatch itself evaluates and pushes (one per alert and card or PID).",
            defaults=thresholds((None, "green"), (1, "red")),
        ),
        panel(
            "stat",
            "Time to OOM",
            [
                target(
                    f"min by (node, gpu) (oomwatch_gpu_oom_eta_seconds{{{GSEL}}}) "
                    f"or min by (node, gpu) (oomwatch_gpu_memory_total_bytes{{{GSEL}}} * 0 + Inf)",
                    "{{node}} GPU {{gpu}}",
                )
            ],
            4,
            0,
            8,
            4,
            unit="s",
            desc="At the current leak rate; infinite when nothing leaks.",
            defaults=thresholds(
                (None, "red"), (_num(HORIZON_S), "orange"), (3600, "green")
            ),  # inside the horizon: paged
        ),
        panel(
            "stat",
            "Used now",
            [
                target(
                    f"oomwatch_gpu_memory_used_bytes{{{GSEL}}} / oomwatch_gpu_memory_total_bytes{{{GSEL}}}",
                    "{{node}} GPU {{gpu}}",
                )
            ],
            12,
            0,
            6,
            4,
            unit="percentunit",
            defaults=thresholds((None, "green"), (0.95, "orange")),
        ),
        panel(
            "stat",
            "oomwatch sources up",
            [target(f"min(oomwatch_source_up{{{SEL}}})")],
            18,
            0,
            6,
            4,
            desc=f"0 when NVML, an engine or Alertmanager stopped answering ({alert('GPUTelemetryDown')}).",
            defaults=thresholds((None, "red"), (1, "green")),
        ),
        panel(
            "timeseries",
            "Memory per card: used, kept floor, engine budget, total",
            [
                target(f"oomwatch_gpu_memory_used_bytes{{{GSEL}}}", "{{node}} GPU {{gpu}} used", "A"),
                target(f"oomwatch_gpu_memory_floor_bytes{{{GSEL}}}", "{{node}} GPU {{gpu}} kept floor", "B"),
                target(f"oomwatch_gpu_memory_budget_bytes{{{GSEL}}}", "{{node}} GPU {{gpu}} engine budget", "C"),
                target(f"oomwatch_gpu_memory_total_bytes{{{GSEL}}}", "{{node}} GPU {{gpu}} total (OOM line)", "D"),
            ],
            0,
            4,
            16,
            9,
            unit="bytes",
            desc="A flat line at the budget after start is healthy preallocation. A rising kept floor is a leak.",
            overrides=[
                {
                    "matcher": {"id": "byRegexp", "options": ".*total.*"},
                    "properties": [
                        {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
                        {"id": "color", "value": {"mode": "fixed", "fixedColor": "red"}},
                    ],
                },
                {
                    "matcher": {"id": "byRegexp", "options": ".*budget.*"},
                    "properties": [{"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [4, 4]}}],
                },
            ],
        ),
        panel(
            "table",
            "Firing alerts (click for the runbook)",
            [target(f"oomwatch_alert{{{SEL}}} == 1", fmt="table", instant=True)],
            16,
            4,
            8,
            9,
            transformations=[
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {
                            "Time": True,
                            "Value": True,
                            "__name__": True,
                            "job": True,
                            "engine": True,
                            "url": True,
                        }
                    },
                }
            ],
            overrides=[
                {
                    "matcher": {"id": "byName", "options": "alertname"},
                    "properties": [
                        {"id": "links", "value": [{"title": "runbook", "url": runbook_url("${__value.text}")}]}
                    ],
                }
            ],
        ),
        panel(
            "state-timeline",
            "Curve shape",
            [
                target(
                    f"max by (node, gpu, oomwatch_gpu_memory_shape) (oomwatch_gpu_memory_shape{{{GSEL}}}) == 1",
                    "{{node}} GPU {{gpu}} {{oomwatch_gpu_memory_shape}}",
                )
            ],
            0,
            13,
            12,
            6,
            desc="stable and idle are healthy; staircase, ramp and a sawtooth with rising troughs are leaks.",
        ),
        panel(
            "timeseries",
            "Leak rate",
            [target(f"oomwatch_gpu_memory_leak_bytes_per_second{{{GSEL}}}", "{{node}} GPU {{gpu}}")],
            12,
            13,
            12,
            6,
            unit="Bps",
        ),
        panel(
            "timeseries",
            "Memory per process, by role",
            [
                target(
                    f"sum by (node, gpu, role) (oomwatch_gpu_process_memory_bytes{{{GSEL}}} "
                    f"unless on (node, pid) {OTHER_PODS})",
                    "{{node}} GPU {{gpu}} {{role}}",
                )
            ],
            0,
            19,
            12,
            8,
            unit="bytes",
            desc=f"stray = orphaned or older than the server ({alert('GPUStrayProcess')}). The namespace and pod "
            "variables hide processes of other pods.",
            defaults={"custom": {"stacking": {"mode": "normal"}, "fillOpacity": 30}},
        ),
        panel(
            "timeseries",
            "KV cache usage beside NVML used",
            [
                target(f"oomwatch_engine_kv_cache_usage_ratio{{{SEL}}}", "KV cache {{engine}} {{model}}", "A"),
                target(
                    f"oomwatch_gpu_memory_used_bytes{{{GSEL}}} / oomwatch_gpu_memory_total_bytes{{{GSEL}}}",
                    "{{node}} GPU {{gpu}} used",
                    "B",
                ),
            ],
            12,
            19,
            12,
            8,
            unit="percentunit",
            desc="KV full with memory flat: pressure (throughput), not a leak. Memory rising with KV flat: a leak.",
        ),
        panel(
            "timeseries",
            "Imbalance across cards",
            [
                target(
                    f"max by (node, instance) (oomwatch_gpu_memory_used_bytes{{{SEL}}} "
                    f"/ oomwatch_gpu_memory_total_bytes{{{SEL}}}) "
                    f"- min by (node, instance) (oomwatch_gpu_memory_used_bytes{{{SEL}}} "
                    f"/ oomwatch_gpu_memory_total_bytes{{{SEL}}})",
                    "{{node}} {{instance}} spread",
                )
            ],
            0,
            27,
            8,
            6,
            unit="percentunit",
        ),
        panel(
            "timeseries",
            "Spike height vs headroom",
            [
                target(f"oomwatch_gpu_memory_spike_height_bytes{{{GSEL}}}", "{{node}} GPU {{gpu}} spike", "A"),
                target(f"oomwatch_gpu_memory_headroom_bytes{{{GSEL}}}", "{{node}} GPU {{gpu}} headroom", "B"),
            ],
            8,
            27,
            8,
            6,
            unit="bytes",
        ),
        panel(
            "timeseries",
            "oomwatch's own cost and health",
            [
                target(f"oomwatch_sample_duration_seconds{{{SEL}}}", "{{node}} NVML sample", "A"),
                target(f"oomwatch_analysis_duration_seconds{{{SEL}}}", "{{node}} analysis", "B"),
                target(f"oomwatch_source_up{{{SEL}}}", "{{node}} up {{source}}", "C"),
                # $__rate_interval: at least four scrape intervals, whatever the Prometheus' scrape interval is
                target(f"rate(oomwatch_samples_total{{{SEL}}}[$__rate_interval])", "{{node}} samples/s", "D"),
            ],
            16,
            27,
            8,
            6,
        ),
    ]
    var = lambda name, query, label: {  # noqa: E731
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "query": {"query": query, "refId": name},
        "definition": query,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "refresh": 2,
        "current": {"text": "All", "value": "$__all"},
    }
    return {
        "__inputs": [
            {
                "name": DS_INPUT,
                "label": "Prometheus",
                "description": "The Prometheus that scrapes oomwatch",
                "type": "datasource",
                "pluginId": "prometheus",
                "pluginName": "Prometheus",
            }
        ],
        "__requires": [
            {"type": "grafana", "id": "grafana", "name": "Grafana", "version": "10.0.0"},
            {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
        ],
        "uid": "oomwatch",
        "title": "oomwatch: GPU memory",
        "tags": ["oomwatch", "gpu", "vllm"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "10s",
        "time": {"from": "now-30m", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {"text": "Prometheus", "value": "${" + DS_INPUT + "}"},
                },
                var("node", "label_values(oomwatch_gpu_memory_total_bytes, node)", "node"),
                var("instance", 'label_values(oomwatch_gpu_memory_total_bytes{node=~"$node"}, instance)', "instance"),
                var("gpu", f"label_values(oomwatch_gpu_memory_total_bytes{{{SEL}}}, gpu)", "GPU"),
                var("namespace", 'label_values(oomwatch_process_info{node=~"$node"}, namespace)', "namespace"),
                var(
                    "pod",
                    'label_values(oomwatch_process_info{node=~"$node",namespace=~"$namespace"}, pod)',
                    "pod",
                ),
            ]
        },
        "annotations": {"list": []},
        "links": [{"title": "Runbooks", "url": RUNBOOKS, "type": "link"}],
        "panels": panels,
    }


def main():
    text = json.dumps(dashboard(), indent=2) + "\n"
    if "--check" in sys.argv:
        with open(OUT) as f:
            if f.read() != text:
                print("grafana/oomwatch.json is stale: run python grafana/build.py", file=sys.stderr)
                return 1
        return 0
    with open(OUT, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
