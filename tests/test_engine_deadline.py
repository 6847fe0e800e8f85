"""#22: an engine endpoint that drips its body (one byte at a time, each read well inside httpx's per-read
timeout) must be cut off at the scrape's total deadline, and must hold up neither sampling nor a clean stop
nor `oomwatch engines`. The drip server is real HTTP on 127.0.0.1, bounded in bytes and in time."""

import os
import subprocess
import sys
import threading
import time

from fake_nvml import FakeNvml
from oomwatch.config import DaemonConfig
from oomwatch.sampler import Sampler
from oomwatch.sources.engines import EngineSource
from oomwatch.sources.nvml import NvmlSource
from servers import LocalHttp, QuietHandler

DRIP_EVERY_S = 0.2  # well inside any per-read timeout: only a total deadline stops it
DRIP_BYTES = 50  # 10 s of drip at most: the server never outlives the test by much
TIMEOUT_S = 1.0
SLACK_S = 0.6  # scheduling on a shared 2-core machine


class Drip(QuietHandler):
    stop = threading.Event()

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(DRIP_BYTES))
        self.end_headers()
        try:
            for _ in range(DRIP_BYTES):
                if self.stop.wait(DRIP_EVERY_S):
                    return
                self.wfile.write(b"#")
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):  # the client gave up: that is the point
            pass


def drip_server():
    Drip.stop.clear()
    return LocalHttp(Drip)


def close(srv):
    Drip.stop.set()
    srv.close()


def test_drip_endpoint_is_down_with_timeout_within_the_deadline():
    srv = drip_server()
    try:
        e = EngineSource(srv.base, timeout_s=TIMEOUT_S, retries=2, backoff_s=0.01)
        t0 = time.monotonic()
        s = e.scrape()
        took = time.monotonic() - t0
        e.close(wait_s=5)
    finally:
        close(srv)
    assert took < TIMEOUT_S + SLACK_S, took
    assert not s.up and "timed out" in s.error and "timeout" in s.error
    assert not e.status.up and e.status.duration_seconds <= TIMEOUT_S + SLACK_S


def test_a_hung_scrape_is_not_piled_up():
    srv = drip_server()
    try:
        e = EngineSource(srv.base, timeout_s=0.3, retries=0)
        e.scrape()
        first = e._inflight
        e.scrape()  # the first one is still dripping: no second worker
        assert first is None or e._inflight is first
        e.close(wait_s=5)
    finally:
        close(srv)


def test_sampler_keeps_sampling_and_stops_promptly_beside_a_drip_endpoint():
    srv = drip_server()
    try:
        nv = FakeNvml(cards=1)
        src = NvmlSource(lib=nv)
        src.open()
        eng = EngineSource(srv.base, timeout_s=5.0, retries=0)  # a deadline longer than the test
        cfg = DaemonConfig(interval=0.05, engine_interval=0.5)
        s = Sampler(cfg, src, [eng])
        s.start()
        time.sleep(1.0)
        n0 = s.analyzer.samples
        time.sleep(0.5)
        assert s.analyzer.samples > n0  # sampling goes on while the engine drips
        t0 = time.monotonic()
        s.stop()
        assert time.monotonic() - t0 < 1.5  # not the engine's 5 s, not the drip's 10 s
    finally:
        close(srv)
        eng.close(wait_s=6)


def test_engines_command_returns_within_its_timeout_in_total():
    srv = drip_server()
    try:
        t0 = time.monotonic()
        p = subprocess.run(
            [sys.executable, "-m", "oomwatch", "engines", srv.base, srv.base + "/x", "--timeout", "1"],
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
        took = time.monotonic() - t0
    finally:
        close(srv)
    assert p.returncode == 1 and "timed out" in p.stdout and "Traceback" not in p.stderr
    assert took < 1.0 + 2.5, took  # interpreter start-up plus the one shared second, not 2 x 1 s
