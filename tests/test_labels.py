"""Labels that fit a cluster: `node` on every series and pushed alert, `uuid` on per-process series, no
credentials in any label, and the daemon's own build and process metrics.

A hand-built snapshot, so these hold whatever the analysis concludes.
"""

import json

import httpx
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from oomwatch.exporters.alertmanager import AlertmanagerPusher
from oomwatch.exporters.metrics import make_registry
from snapshots import SECRET_URL, UUID
from snapshots import cluster_snapshot as _snapshot


def _families(monkeypatch, node="gpu-node-3"):
    monkeypatch.setenv("NODE_NAME", node)
    text = generate_latest(make_registry(_snapshot)).decode()
    return text, {f.name: f for f in text_string_to_metric_families(text)}


def test_every_oomwatch_series_names_its_node(monkeypatch):
    text, fams = _families(monkeypatch)
    ours = [
        s
        for f in fams.values()
        if f.name.startswith("oomwatch_") and f.name != "oomwatch_build_info"
        for s in f.samples
    ]
    assert len(ours) > 20
    assert {s.labels.get("node") for s in ours} == {"gpu-node-3"}


def test_node_falls_back_to_the_host_name(monkeypatch):
    import socket

    monkeypatch.delenv("NODE_NAME", raising=False)
    text = generate_latest(make_registry(_snapshot)).decode()
    assert f'node="{socket.gethostname()}"' in text


def test_process_series_carry_the_cards_uuid(monkeypatch):
    _, fams = _families(monkeypatch)
    procs = fams["oomwatch_gpu_process_memory_bytes"].samples
    assert {s.labels["pid"] for s in procs} == {"925", "928"} and {s.labels["uuid"] for s in procs} == {UUID}


def test_no_credentials_in_any_label(monkeypatch):
    text, fams = _families(monkeypatch)
    assert "s3cret-pw" not in text and "alice" not in text
    up = {s.labels["source"]: s.value for s in fams["oomwatch_source_up"].samples}
    assert any(k.startswith("engine:http://") and "vllm:8000" in k for k in up)


def test_build_info_and_the_processes_own_metrics(monkeypatch):
    import platform

    from oomwatch import __version__

    _, fams = _families(monkeypatch)
    (info,) = fams["oomwatch_build_info"].samples
    assert info.labels == {"version": __version__, "python": platform.python_version()} and info.value == 1
    assert fams["process_resident_memory_bytes"].samples[0].value > 1 << 20
    assert "process_open_fds" in fams and "python_info" in fams
    plain = generate_latest(make_registry(_snapshot, process_metrics=False)).decode()
    assert "process_resident_memory_bytes" not in plain and "oomwatch_build_info" in plain


def test_pushed_alerts_carry_node_and_the_same_redacted_labels(monkeypatch):
    monkeypatch.setenv("NODE_NAME", "gpu-node-3")
    sent = []

    def handler(request):
        sent.extend(json.loads(request.content))
        return httpx.Response(200)

    client = httpx.Client(transport=httpx.MockTransport(handler))
    pusher = AlertmanagerPusher([SECRET_URL.replace("/metrics", "")], client=client)
    pusher.push([a for a in _snapshot().alerts], 1e9 + 5)
    pusher.close()
    by_name = {a["labels"]["alertname"]: a for a in sent}
    stray = by_name["GPUStrayProcess"]
    assert stray["labels"] == {
        "alertname": "GPUStrayProcess",
        "severity": "warning",
        "gpu": "0",
        "uuid": UUID,
        "pid": "928",
        "node": "gpu-node-3",
    }
    assert stray["annotations"]["summary"].startswith("gpu-node-3: PID 928")
    assert "s3cret-pw" not in json.dumps(sent)
    assert all("s3cret-pw" not in s.name for s in pusher.status.values())
    # the exposition's oomwatch_alert for the same alert: the same labels (plus its fixed, empty keys)
    _, fams = _families(monkeypatch)
    shown = {s.labels["alertname"]: s.labels for s in fams["oomwatch_alert"].samples}
    assert {k: v for k, v in shown["GPUTelemetryDown"].items() if v} == by_name["GPUTelemetryDown"]["labels"]


def test_the_whole_exposition_lints_clean(monkeypatch):
    """Build info, the process collectors and `node` on everything: `promtool check metrics` finds nothing."""
    import subprocess

    from conftest import need_binary

    text, _ = _families(monkeypatch)
    r = subprocess.run([need_binary("promtool"), "check", "metrics"], input=text, capture_output=True, text=True)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), r.stdout + r.stderr


def test_mig_instances_carry_dcgm_exporters_labels():
    """dcgm-exporter labels a MIG instance with its physical card's `gpu`, `GPU_I_ID` and `GPU_I_PROFILE`;
    oomwatch watches it as index 1000 * (card + 1) + n, so `oomwatch_gpu_info` carries dcgm's three for joins."""
    from oomwatch.exporters.metrics import dcgm_labels
    from oomwatch.model import GpuInfo

    mig = GpuInfo(2001, "NVIDIA H200 MIG 3g.71gb", "MIG-abc", 71 << 30, True, mig_parent=1, mig_instance="gi2/ci0")
    assert dcgm_labels(mig) == ("1", "2", "3g.71gb")
    whole = GpuInfo(0, "NVIDIA H200", "GPU-abc", 141 << 30)
    assert dcgm_labels(whole) == ("0", "", "")


def test_every_family_the_daemon_and_the_central_define_is_documented():
    """docs/metrics.md names every `oomwatch_*` family either exposition can serve (a counter by its
    `_total` sample name), so a new metric cannot ship undocumented."""
    import os

    from oomwatch.exporters.fleet import FleetCollector
    from oomwatch.exporters.metrics import OomwatchCollector

    with open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "docs", "metrics.md"), encoding="utf-8") as f:
        text = f.read()
    names = set()
    for collector in (OomwatchCollector(_snapshot, "n"), FleetCollector(lambda: None, "n")):  # type: ignore[arg-type]
        for fam in collector.describe():
            names.add(fam.name + "_total" if fam.type == "counter" else fam.name)
    assert len(names) > 40
    missing = sorted(n for n in names if n.startswith("oomwatch_") and f"`{n}" not in text)
    assert not missing, f"not in docs/metrics.md: {missing}"
