"""Fault injection: every source failing in turn while the daemon keeps serving and says what is wrong."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import generate_latest

from conftest import example
from daemon.config import DaemonConfig
from daemon.sampler import Sampler
from daemon.sources.engines import EngineSource
from daemon.sources.nvml import NvmlSource
from exporters.alertmanager import AlertmanagerPusher
from exporters.metrics import make_registry
from fake_nvml import FakeNvml
from servers import StaticServer


def sampler_with_fake(cards=2, **kw):
    nv = FakeNvml(cards=cards)
    for i, c in enumerate(nv.cards):
        c.update(used=(40 + 10 * i) << 30, procs=[(100 + i, (40 + 10 * i) << 30)])
    src = NvmlSource(lib=nv)
    src.open()
    return nv, Sampler(DaemonConfig(), src, **kw)


def exposition(s):
    return generate_latest(make_registry(lambda: s.snapshot)).decode()


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


class Flaky(BaseHTTPRequestHandler):
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

    def log_message(self, *a):
        pass


def test_alertmanager_5xx_then_slow_then_back():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    pusher = AlertmanagerPusher([url], interval_s=0.01, timeout_s=0.3)
    from daemon.snapshot import AlertView

    alert = AlertView({"alertname": "GPUOOMImminent", "severity": "critical", "gpu": "0"},
                      {"summary": "s", "description": "d", "runbook_url": "r"}, "firing", 0.0, 0.0)
    try:
        Flaky.mode.update(code=500, delay=0.0)
        pusher.push([alert], time.time(), lambda t: time.time())
        assert not pusher.status[pusher.urls[0]].up and "500" in pusher.status[pusher.urls[0]].error
        Flaky.mode.update(code=200, delay=1.0)  # slower than the timeout
        time.sleep(0.1)
        t0 = time.perf_counter()
        pusher.push([alert], time.time(), lambda t: time.time())
        assert time.perf_counter() - t0 < 1.0  # bounded by the timeout: the daemon never waits long
        Flaky.mode.update(code=200, delay=0.0)
        for _ in range(50):
            time.sleep(0.1)
            pusher.push([alert], time.time(), lambda t: time.time())
            if Flaky.received:
                break
        assert Flaky.received and Flaky.received[-1][0]["labels"]["alertname"] == "GPUOOMImminent"
        assert pusher.status[pusher.urls[0]].up
    finally:
        srv.shutdown()


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
    from daemon.sources.replay import ReplaySource
    from exporters.recorder import TraceRecorder

    src = ReplaySource(example("stray.jsonl"), speed=1e6)
    rec = TraceRecorder("/dev/full", src.gpus)  # every write fails with ENOSPC
    s = Sampler(DaemonConfig(replay=example("stray.jsonl")), src, recorder=rec)
    s.sample_job()
    s.sample_job()
    text = exposition(s)
    assert 'oomwatch_source_up{source="recorder"} 0.0' in text
    assert "oomwatch_samples_total 940.0" in text  # every sample analysed and exposed
    assert any(f.kind == "stray" for f in s.analyzer.fired.values())  # the analysis went on
