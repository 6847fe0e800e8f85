"""Fault injection: every source failing in turn while the daemon keeps serving and says what is wrong."""

import json
import re
import time

from prometheus_client import generate_latest

from conftest import example, free_port
from fake_nvml import FakeNvml
from oomwatch.config import DaemonConfig
from oomwatch.exporters.alertmanager import AlertmanagerPusher
from oomwatch.exporters.metrics import make_registry
from oomwatch.sampler import Sampler
from oomwatch.sources.engines import EngineSource
from oomwatch.sources.nvml import NvmlSource
from servers import LocalHttp, QuietHandler, StaticServer


def sampler_with_fake(cards=2, **kw):
    nv = FakeNvml(cards=cards)
    for i, c in enumerate(nv.cards):
        c.update(used=(40 + 10 * i) << 30, procs=[(100 + i, (40 + 10 * i) << 30)])
    src = NvmlSource(lib=nv)
    src.open()
    return nv, Sampler(DaemonConfig(), src, **kw)


def exposition(s):
    """The exposition without the `node` label (the same on every series; tests/test_labels.py checks it), so
    the assertions below read as the series' own labels."""
    text = generate_latest(make_registry(lambda: s.snapshot)).decode()
    return re.sub(r'\{node="[^"]*"\}|node="[^"]*",|,node="[^"]*"', "", text)


def test_nvml_gone_after_start(monkeypatch):
    nv, s = sampler_with_fake()
    clock = [1000.0]
    monkeypatch.setattr("time.monotonic", lambda: clock[0])
    for _ in range(30):
        clock[0] += 0.1
        s.sample_job()
    nv.gone = True
    for _ in range(30):
        clock[0] += 0.1
        s.sample_job()
    text = exposition(s)
    assert 'oomwatch_source_up{source="nvml"} 0.0' in text
    assert 'oomwatch_alert{alertname="GPUTelemetryDown"' in text
    assert "oomwatch_gpu_memory_used_bytes{" not in text  # no made-up zeros for unreadable cards
    assert "oomwatch_gpu_memory_total_bytes{" in text  # the daemon still serves what it knows


def test_one_card_lost_the_other_goes_on(monkeypatch):
    nv, s = sampler_with_fake()
    clock = [0.0]
    monkeypatch.setattr("time.monotonic", lambda: clock[0])
    nv.fail[("nvmlDeviceGetMemoryInfo", 1)] = 15  # GPU is lost
    for _ in range(20):
        clock[0] += 0.1
        s.sample_job()
    text = exposition(s)
    assert 'oomwatch_gpu_memory_used_bytes{gpu="0"' in text and 'oomwatch_gpu_memory_used_bytes{gpu="1"' not in text
    assert 'oomwatch_source_up{source="nvml"} 0.0' in text
    st = [x for x in s.snapshot.sources if x.name == "nvml"][0]
    assert "GPU 1" in st.error and "lost" in st.error.lower()


class Flaky(QuietHandler):
    mode = {"code": 500, "delay": 0.0}
    received: list = []

    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        body = self.rfile.read(n)
        time.sleep(self.mode["delay"])
        if self.mode["code"] == 200:
            self.received.append(json.loads(body))
        self.send_response(self.mode["code"])
        self.end_headers()


def test_alertmanager_5xx_then_slow_then_back():
    srv = LocalHttp(Flaky)
    url = srv.base
    pusher = AlertmanagerPusher([url], interval_s=0.01, timeout_s=0.3)
    from oomwatch.snapshot import AlertView

    alert = AlertView(
        {"alertname": "GPUOOMImminent", "severity": "critical", "gpu": "0"},
        {"summary": "s", "description": "d", "runbook_url": "r"},
        "firing",
        0.0,
        0.0,
        active_since_wall=time.time(),
        fired_at_wall=time.time(),
    )
    try:
        Flaky.mode.update(code=500, delay=0.0)
        pusher.push([alert], time.time())
        assert not pusher.status[pusher.urls[0]].up and "500" in pusher.status[pusher.urls[0]].error
        Flaky.mode.update(code=200, delay=1.0)  # slower than the timeout
        time.sleep(0.1)
        t0 = time.perf_counter()
        pusher.push([alert], time.time())
        assert time.perf_counter() - t0 < 1.0  # bounded by the timeout: the daemon never waits long
        Flaky.mode.update(code=200, delay=0.0)
        for _ in range(50):
            time.sleep(0.1)
            pusher.push([alert], time.time())
            if Flaky.received:
                break
        assert Flaky.received and Flaky.received[-1][0]["labels"]["alertname"] == "GPUOOMImminent"
        assert pusher.status[pusher.urls[0]].up
    finally:
        srv.close()


def test_engine_50mb_body_is_refused():
    srv = StaticServer(b"# " + b"x" * (50 << 20))
    try:
        e = EngineSource(srv.url, retries=0)
        t0 = time.perf_counter()
        snap = e.scrape()
        assert not snap.up and "larger than" in snap.error and time.perf_counter() - t0 < 5
    finally:
        srv.close()


def test_record_to_a_full_disk_keeps_serving(tmp_path):
    from oomwatch.exporters.recorder import TraceRecorder
    from oomwatch.sources.replay import ReplaySource

    src = ReplaySource(example("stray.jsonl"), speed=1e6)
    rec = TraceRecorder("/dev/full", src.gpus)  # every write fails with ENOSPC
    s = Sampler(DaemonConfig(replay=example("stray.jsonl")), src, recorder=rec)
    s.sample_job()
    s.sample_job()
    text = exposition(s)
    assert 'oomwatch_sink_up{sink="recorder"} 0.0' in text  # a sink's health, ...
    assert 'source="recorder"' not in text  # ... not a source: a full disk never pages as telemetry
    assert "GPUTelemetryDown" not in text and not any(f.kind == "telemetry_down" for f in s.analyzer.fired.values())
    assert "oomwatch_samples_total 940.0" in text  # every sample analysed and exposed
    assert any(f.kind == "stray" for f in s.analyzer.fired.values())  # the analysis went on
    assert any(x.name == "recorder" and not x.up and "/dev/full" in x.error for x in s.snapshot.sinks)


def test_alertmanager_down_is_a_sink_not_telemetry():
    """An Alertmanager that refuses: its sink is down, the daemon's sources are up, nothing pages for it."""
    from oomwatch.sources.replay import ReplaySource

    dead = f"http://127.0.0.1:{free_port()}"
    clock = [0.0]
    pusher = AlertmanagerPusher([dead], interval_s=0.01, timeout_s=0.3)
    s = Sampler(
        DaemonConfig(replay=example("stray.jsonl")),
        ReplaySource(example("stray.jsonl")),
        pusher=pusher,
        clock=lambda: clock[0],
    )
    try:
        for _ in range(3):
            clock[0] += 10.0  # 30 s of the trace (it lasts 94 s): the stray fires, the replay goes on
            s.sample_job()
            s.push_job()
        text = exposition(s)
    finally:
        pusher.close()
    assert f'oomwatch_sink_up{{sink="alertmanager:{dead}/api/v2/alerts"}} 0.0' in text
    assert 'oomwatch_source_up{source="replay"} 1.0' in text and "alertmanager" not in text.split("sink_up")[0]
    assert "GPUTelemetryDown" not in text and 'oomwatch_alert{alertname="GPUStrayProcess"' in text


def test_a_failing_metrics_section_costs_only_that_section(monkeypatch):
    """One bad value must not fail the whole scrape: the section is dropped and counted."""
    import oomwatch.exporters.metrics as m
    from oomwatch.sources.replay import ReplaySource

    clock = [0.0]
    s = Sampler(
        DaemonConfig(replay=example("stray.jsonl")), ReplaySource(example("stray.jsonl")), clock=lambda: clock[0]
    )
    s.sample_job()
    clock[0] = 30.0  # the stray has fired; the trace goes on
    s.sample_job()

    def broken(snap):
        raise ValueError("a bad value")
        yield  # pragma: no cover - makes this a generator like the real sections

    broken.__name__ = "_processes"
    monkeypatch.setattr(m, "SECTIONS", [broken if f.__name__ == "_processes" else f for f in m.SECTIONS])
    before = m._section_errors["_processes"]
    text = exposition(s)
    assert "oomwatch_gpu_process_memory_bytes{" not in text  # the broken section is left out ...
    assert "oomwatch_gpu_memory_used_bytes{" in text and "oomwatch_alert{" in text  # ... the others are served
    assert f'oomwatch_exporter_errors_total{{section="processes"}} {before + 1.0}' in text
