"""A hand-built snapshot of one card with a server and a stray, engine, sources, sinks and alerts: for tests of
the exporters that must hold whatever the analysis concludes (and while it is being changed)."""

from oomwatch.model import EngineSnapshot, GpuInfo, GpuSample, SourceStatus
from oomwatch.snapshot import AlertView, GpuView, ProcView, Snapshot, VerdictView

UUID = "GPU-aa9e664e-b03d-22bd-5f6b-45c167068773"
SECRET_URL = "http://alice:s3cret-pw@vllm:8000/metrics"


def cluster_snapshot():
    gpu = GpuView(
        GpuInfo(0, "NVIDIA H200", UUID, 150 << 30),
        GpuSample(0, 100 << 30, 50 << 30, 1 << 29, 80),
        VerdictView(shape="stable", floor_bytes=1e11, headroom_bytes=5e10),
        150 << 30,
        135 << 30,
    )
    stray = AlertView(
        {"alertname": "GPUStrayProcess", "severity": "warning", "gpu": "0", "uuid": UUID, "pid": "928"},
        {"summary": "PID 928 (python3) holds 28 GiB on GPU 0 outside the server"},
        "firing",
        1.0,
        2.0,
        active_since_wall=1e9,
        fired_at_wall=1e9,
    )
    down = AlertView(
        {"alertname": "GPUTelemetryDown", "severity": "critical", "source": f"engine:{SECRET_URL}"},
        {"summary": "lost it"},
        "firing",
        1.0,
        2.0,
    )
    return Snapshot(
        t=10.0,
        gpus=(gpu,),
        procs=(ProcView("0", 928, 28 << 30, "python3", "stray"), ProcView("0", 925, 70 << 30, "python3", "server")),
        alerts=(stray, down),
        sources=(SourceStatus("nvml", True), SourceStatus(f"engine:{SECRET_URL}", False, "refused")),
        sinks=(SourceStatus(f"alertmanager:{SECRET_URL}", True),),
        engines=(EngineSnapshot(SECRET_URL, "vllm", True, model="m", engine="0", kv_cache_usage_ratio=0.5),),
    )
