"""`oomwatch run --prometheus URL`, the central mode, against real servers: a real Prometheus scraping a small
dcgm-exporter stand-in that plays two real traces in real time (a staircase leak to OOM on node-leak, a
healthy vLLM start on node-ok), a real Alertmanager, and oomwatch as a process of its own."""

from __future__ import annotations

import bisect
import json
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import example, free_port, need_binary, stop_process
from oomwatch.backtest.series import shard_of
from oomwatch.backtest.tsdb import trace_gpus, trace_points
from servers import Alertmanager, LocalHttp, Prometheus, QuietHandler, Webhook, start_oomwatch, wait_http

pytestmark = [pytest.mark.integration, pytest.mark.slow]
MIB = 1 << 20
POD = {"namespace": "ml", "pod": "vllm-0", "container": "vllm"}
CARDS = (("node-leak", "staircase.jsonl", POD), ("node-ok", "vllm_startup.jsonl", {}))
METRICS = (("DCGM_FI_DEV_FB_USED", 1), ("DCGM_FI_DEV_FB_FREE", 2), ("DCGM_FI_DEV_FB_RESERVED", 3))


class DcgmStandIn(LocalHttp):
    """dcgm-exporter's /metrics for each card, its value the trace's at the seconds since `start()` (the
    last point once a trace is over), in MiB as dcgm-exporter writes it."""

    def __init__(self):
        self.t0 = time.time()
        self.cards = []
        for k, (node, name, pod) in enumerate(CARDS):
            path = example(name)
            g = trace_gpus(path)[0]
            pts = list(trace_points(path, g.index, 0.0))
            labels = {"gpu": "0", "UUID": f"GPU-central-{k}", "device": "nvidia0", "modelName": g.name}
            self.cards.append(({**labels, "Hostname": node, **pod}, [p[0] for p in pts], pts))
        outer = self

        class H(QuietHandler):
            def do_GET(self):
                self.reply(200, "text/plain; version=0.0.4", outer.text().encode())

        super().__init__(H)
        self.target = self.base.removeprefix("http://")

    def start(self):
        self.t0 = time.time()

    def text(self) -> str:
        now = time.time() - self.t0
        lines = []
        for metric, col in METRICS:
            lines.append(f"# TYPE {metric} gauge")
            for labels, ts, pts in self.cards:
                p = pts[max(0, bisect.bisect_right(ts, now) - 1)]
                lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
                lines.append(f"{metric}{{{lab}}} {round((p[col] or 0) / MIB)}")
        return "\n".join(lines) + "\n"


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def _until(what, deadline: float, every: float = 0.5):
    """`what()` once it is truthy, polled until `deadline` seconds have passed (then AssertionError)."""
    end = time.time() + deadline
    last = None
    while time.time() < end:
        last = what()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"not within {deadline:.0f} s (last: {last!r})")


def _metrics_once(addr: str, has: str, deadline: float = 20) -> str:
    """The central's /metrics once it contains `has`."""
    return wait_http(f"http://{addr}/metrics", deadline=deadline, ok=lambda body: has in body)


def _series(metrics: str, name: str) -> list[str]:
    return [ln for ln in metrics.splitlines() if ln.startswith(name + "{")]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    need_binary("prometheus")
    need_binary("prometheus-alertmanager")
    tmp = tmp_path_factory.mktemp("central")
    exporter = DcgmStandIn()
    prom = Prometheus(str(tmp), exporter.target, [], scrape_interval="1s")
    hook = Webhook()
    am = Alertmanager(str(tmp), hook.url).start()
    exporter.start()
    yield exporter, prom, am, hook
    for stop in (am.stop, prom.stop, hook.close, exporter.close):
        stop()


def test_cards_beyond_the_cap_are_counted_not_watched(fleet):
    _exporter, prom, _am, _hook = fleet
    p, addr = start_oomwatch("--prometheus", prom.url, "--max-cards", "1")
    try:
        metrics = _metrics_once(addr, 'state="over_cap"} 1.0')
        assert 'state="watched"} 1.0' in metrics
        assert {s.split('node="')[1].split('"')[0] for s in _series(metrics, "oomwatch_gpu_memory_used_bytes")} == {
            "node-leak"
        }  # the first in fleet order (node, GPU)
    finally:
        stop_process(p)


def test_a_selector_narrows_the_cards(fleet):
    _exporter, prom, _am, _hook = fleet
    p, addr = start_oomwatch("--prometheus", prom.url, "--selector", 'Hostname="node-ok"')
    try:
        metrics = _metrics_once(addr, 'state="watched"} 1.0')
        used = _series(metrics, "oomwatch_gpu_memory_used_bytes")
        assert len(used) == 1 and 'node="node-ok"' in used[0]
    finally:
        stop_process(p)


def test_shards_split_the_fleet_by_node_as_the_backtest_does(fleet):
    """N centrals with --shard K/N watch disjoint parts of the fleet that together are all of it, each card in
    the shard `oomwatch backtest --shard` puts it in (crc32 of its node)."""
    _exporter, prom, _am, _hook = fleet
    nodes = {node for node, _, _ in CARDS}
    want = {k: {n for n in nodes if shard_of(n, 2) == k} for k in (0, 1)}
    assert all(want.values()), "the stand-in's nodes must fall in both shards for this test to mean anything"
    seen = {}
    for k in (0, 1):
        p, addr = start_oomwatch("--prometheus", prom.url, "--shard", f"{k}/2")
        try:
            metrics = _metrics_once(addr, f'state="watched"}} {len(want[k])}.0')
            seen[k] = {s.split('node="')[1].split('"')[0] for s in _series(metrics, "oomwatch_gpu_memory_used_bytes")}
        finally:
            stop_process(p)
    assert seen == want


def _run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "oomwatch", "run", "--listen", f"127.0.0.1:{free_port()}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    "args, says",
    [
        (["--prometheus", "ftp://user:hunter2@prom:9090"], "not an http(s)://HOST[:PORT] Prometheus URL"),
        (["--prometheus", "http://"], "not an http(s)://HOST[:PORT] Prometheus URL"),
        (["--prometheus", "http://127.0.0.1:1", "--replay", "example:staircase"], "--replay need NVML"),
        (["--prometheus", "http://127.0.0.1:1", "--max-cards", "0"], "--max-cards: must be from 1"),
        (["--prometheus", "http://127.0.0.1:1", "--shard", "2/2"], "--shard: must be K/N with 0 <= K < N"),
        (["--shard", "0/2", "--replay", "example:staircase"], "--shard: for the central mode only"),
        (["--selector", 'job="dcgm"', "--replay", "example:staircase"], "--selector: for the central mode only"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, says):
    r = _run(*args)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in r.stderr
    assert "hunter2" not in r.stderr


def test_a_selector_prometheus_refuses_is_one_line_and_exit_2(fleet):
    _exporter, prom, _am, _hook = fleet
    r = _run("--prometheus", prom.url, "--selector", "Hostname=~")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--selector" in lines[0] and "not a PromQL label matcher" in lines[0]


def test_prometheus_down_at_start_is_a_metric_not_an_exit():
    port = free_port()
    p, addr = start_oomwatch("--prometheus", f"http://127.0.0.1:{port}")
    try:
        body = wait_http(f"http://{addr}/metrics", ok=lambda b: 'alertname="GPUTelemetryDown"' in b)
        assert any(s.endswith(" 0.0") for s in _series(body, "oomwatch_source_up"))
        assert 'state="watched"} 0.0' in body
        assert p.poll() is None
    finally:
        assert stop_process(p) == 0


def test_central_pages_the_leak_not_the_healthy_card_and_survives_prometheus_going_down(fleet):
    exporter, prom, am, hook = fleet
    p, addr = start_oomwatch("--prometheus", prom.url, "--alertmanager-url", am.url)
    try:
        page = _until(lambda: hook.alerts("GPUOOMImminent", "firing"), 90)[0][1]
        assert page["labels"]["node"] == "node-leak" and page["labels"]["gpu"] == "0"
        assert page["labels"]["uuid"] == "GPU-central-0" and page["labels"]["severity"] == "critical"
        assert page["labels"]["pod"] == "vllm-0" and page["labels"]["namespace"] == "ml"  # the exporter's pod
        assert page["annotations"]["summary"].startswith("node-leak: ")
        metrics = _get(f"http://{addr}/metrics")
        used = _series(metrics, "oomwatch_gpu_memory_used_bytes")
        assert any('node="node-leak"' in s and 'uuid="GPU-central-0"' in s and 'gpu="0"' in s for s in used)
        assert any('node="node-ok"' in s and 'uuid="GPU-central-1"' in s for s in used)
        assert 'oomwatch_fleet_cards{node="' in metrics and 'state="watched"} 2.0' in metrics
        interval = [s for s in metrics.splitlines() if s.startswith("oomwatch_fleet_scrape_interval_seconds{")]
        assert interval and 0.5 <= float(interval[0].split()[-1]) <= 2.0  # found from the samples: 1 s
        up = [s for s in _series(metrics, "oomwatch_source_up") if 'source="prometheus:' in s]
        assert up and up[0].endswith(" 1.0")
        status = json.loads(_get(f"http://{addr}/api/v1/status"))
        assert {g["name"].split()[0] for g in status["gpus"]} == {"node-leak", "node-ok"}

        # The healthy start was never paged or warned about, through the whole of both traces.
        time.sleep(max(0.0, exporter.t0 + 62 - time.time()))
        for name in ("GPUOOMImminent", "GPUMemoryLeak", "GPUMemorySpikeRisk"):
            assert not [a for _, a in hook.alerts(name) if a["labels"].get("node") == "node-ok"], name

        prom.stop()  # Prometheus goes away: a metric and GPUTelemetryDown, and the central keeps running
        down = _until(
            lambda: [
                s
                for s in _series(_get(f"http://{addr}/metrics"), "oomwatch_source_up")
                if 'source="prometheus:' in s and s.endswith(" 0.0")
            ],
            30,
        )
        assert down
        _until(lambda: 'alertname="GPUTelemetryDown"' in _get(f"http://{addr}/metrics"), 10)
        tel = _until(lambda: hook.alerts("GPUTelemetryDown", "firing"), 20)[0][1]
        assert tel["labels"]["source"].startswith("prometheus:http://127.0.0.1:")
        time.sleep(3)
        assert p.poll() is None
    finally:
        assert stop_process(p) == 0
