"""Host RAM: a server process whose resident memory keeps growing while its GPU memory is flat.

The statistics run on real RSS readings of a real growing process, on synthetic series with the
shapes that must not page (warm-up growth, a flat line with noise, a GC sawtooth), and end to end
through a trace with `rss` lines replayed by the same analysis the daemon runs.
"""

import contextlib
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import stop_process
from oomwatch.analysis.hostmem import HostLimit, HostMemJudge, trend
from oomwatch.analysis.processes import ProcRole
from oomwatch.config import HostMemConfig
from oomwatch.model import ProcInfo, RssSample
from oomwatch.sources.processes import ProcessScanner, memory_limit

MiB = 1 << 20
ROLES = {10: ProcRole(10, "server", "", "10")}
PROCS = {10: ProcInfo(10, "python3", ("python3",), 1, 0.0)}


def judge_series(t, y, gpu_flat=True, cfg=None, limit=None):
    j = HostMemJudge(cfg or HostMemConfig())
    for ti, yi in zip(t, y, strict=True):
        j.add(float(ti), [(10, int(yi))], limit)
    return j, j.judge(float(t[-1]), ROLES, PROCS, gpu_flat)


def test_slow_leak_after_warmup_is_found_with_rate_and_time_to_limit():
    rng = np.random.default_rng(1)
    t = np.arange(0, 2400, 2.0)
    y = 4e9 + 200 * 1024 * t + rng.normal(0, 8 * MiB, len(t))  # 200 KiB/s under 8 MiB of noise
    y[t < 300] = 2e9 + t[t < 300] * 6e6  # warm-up: loading, fast
    _, out = judge_series(t, y, limit=HostLimit(32 << 30, 20 << 30, "cgroup"))
    assert len(out) == 1
    f, c = out[0]
    assert f.kind == "host_ram_leak" and f.pid == 10 and c.alertname == "HostMemoryLeak"
    assert f.evidence["leak_bytes_per_second"] == pytest.approx(200 * 1024, rel=0.1)
    assert f.evidence["limit_source"] == "cgroup"
    assert f.evidence["eta_seconds"] == pytest.approx((12 << 30) / (200 * 1024), rel=0.1)
    assert "while GPU memory is flat" in f.summary and "container's memory limit" in f.summary


@pytest.mark.parametrize("shape", ["flat_noise", "warmup_only", "gc_sawtooth", "tiny_drift"])
def test_shapes_that_must_not_page(shape):
    rng = np.random.default_rng(2)
    t = np.arange(0, 2400, 2.0)
    if shape == "flat_noise":
        y = 6e9 + rng.normal(0, 30 * MiB, len(t))
    elif shape == "warmup_only":  # grows 4 GiB while loading, then flat
        y = np.where(t < 280, 2e9 + t * 15e6, 2e9 + 280 * 15e6) + rng.normal(0, 4 * MiB, len(t))
    elif shape == "gc_sawtooth":  # rises and is given back every 5 minutes
        y = 6e9 + (t % 300) * 1e6
    else:  # 2 KiB/s: real but not worth a page (under min_bytes_per_second)
        y = 6e9 + 2048 * t
    _, out = judge_series(t, y)
    assert out == []


def test_gpu_leak_beside_it_is_the_finding_instead():
    t = np.arange(0, 2400, 2.0)
    _, out = judge_series(t, 4e9 + 1e6 * t, gpu_flat=False)
    assert out == []


def test_trend_statistics_are_those_of_scipy():
    from scipy.stats import kendalltau, theilslopes

    t = np.arange(50.0)
    y = 3 * t + np.sin(t) * 5
    slope, tau, p = trend(t.tolist(), y.tolist())
    assert slope == pytest.approx(theilslopes(y, t)[0]) and tau == pytest.approx(kendalltau(t, y)[0])
    assert p < 1e-6 and trend([0, 1, 2], [5, 5, 5]) == (0.0, 0.0, 1.0)


@pytest.mark.parametrize("seed", range(4))
def test_trend_with_ties_and_noise_agrees_with_scipy(seed):
    """RSS in pages repeats values (ties): tau-b and the slope as scipy gives them, the p-value as its
    asymptotic one up to the continuity correction."""
    from scipy.stats import kendalltau, theilslopes

    rng = np.random.default_rng(seed)
    t = np.arange(0, 240, 2.0)
    y = np.round(6e9 + 2e5 * t * (seed % 2) + rng.normal(0, 3e7, len(t)), -8)  # rounded: many ties
    slope, tau, p = trend(t.tolist(), y.tolist())
    ref = kendalltau(t, y, method="asymptotic")
    assert tau == pytest.approx(ref.statistic, abs=1e-9)
    assert slope == pytest.approx(theilslopes(y, t)[0])
    assert p == pytest.approx(ref.pvalue, rel=0.15, abs=2e-3)


def test_the_daemon_needs_no_scipy():
    code = (
        "import sys; sys.modules['scipy'] = None\n"  # any import of scipy raises ImportError
        "from oomwatch.analysis.hostmem import trend\n"
        "print(trend([0, 1, 2, 3, 4, 5], [1, 2, 2, 3, 5, 8]))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    with open(os.path.join(os.path.dirname(__file__), "..", "pyproject.toml")) as f:
        deps = f.read().split("dependencies = [", 1)[1].split("]", 1)[0]
    assert "scipy" not in deps


def test_real_growing_process_is_caught_from_real_scans():
    """A real process appends 1 MiB every 20 ms; the scanner reads its RSS; the judge (thresholds scaled
    to seconds) finds the trend, and a sleeping process beside it is clean."""
    grow = subprocess.Popen(
        [sys.executable, "-c", "import time\nkeep=[]\nwhile True:\n    keep.append(bytearray(1<<20)); time.sleep(0.02)"]
    )
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        sc = ProcessScanner()
        cfg = HostMemConfig(warmup_s=0.3, window_s=30, min_points=12, min_span_s=1.0, min_growth_bytes=8 * MiB)
        j = HostMemJudge(cfg)
        t0 = time.monotonic()
        sc.watch({grow.pid, idle.pid})
        for _ in range(25):
            rss = [r for r in sc.poll(time.monotonic() - t0) if isinstance(r, RssSample)][-1]
            j.add(rss.t, rss.rss)
            time.sleep(0.1)
        roles = {p: ProcRole(p, "server", "", str(p)) for p in (grow.pid, idle.pid)}
        out = j.judge(time.monotonic() - t0, roles, sc.known, True)
        assert [f.pid for f, _ in out] == [grow.pid]
        assert out[0][0].evidence["leak_bytes_per_second"] > 10 * MiB  # ~50 MiB/s
    finally:
        stop_process(grow, kill=True)
        stop_process(idle, kill=True)


def test_memory_limit_reads_cgroup_v2_max_walking_up(tmp_path):
    proc = tmp_path / "proc" / "42"
    proc.mkdir(parents=True)
    (proc / "cgroup").write_text("0::/kubepods.slice/pod-a.slice/cri-containerd-x.scope\n")
    cg = tmp_path / "cg"
    leaf = cg / "kubepods.slice" / "pod-a.slice" / "cri-containerd-x.scope"
    leaf.mkdir(parents=True)
    (leaf / "memory.max").write_text("max\n")  # no limit on the container: the pod's applies
    (cg / "kubepods.slice" / "pod-a.slice" / "memory.max").write_text(f"{16 << 30}\n")
    (cg / "kubepods.slice" / "pod-a.slice" / "memory.current").write_text(f"{5 << 30}\n")
    assert memory_limit(42, str(tmp_path / "proc"), str(cg)) == (16 << 30, 5 << 30, "cgroup")


def test_memory_limit_falls_back_to_the_host():
    lim = memory_limit(os.getpid(), cgroup_root="/nonexistent")
    assert lim is not None and lim[2] == "host" and lim[0] > (256 << 20) and 0 < lim[1] < lim[0]


def test_trace_with_rss_lines_pages_host_memory_leak_end_to_end(tmp_path):
    """A recorded trace (flat GPU, growing API-server RSS) replayed by the daemon's analysis."""
    from oomwatch.feed import replay_trace

    p = tmp_path / "hostleak.jsonl"
    lines = [
        {
            "format": "gpu-memory-trace/1",
            "sample_hz": 1,
            "gpus": [{"index": 0, "name": "H200", "uuid": "GPU-0", "total": 150_000_000_000}],
        },
        {
            "t": 0.0,
            "event": "proc",
            "pid": 100,
            "name": "python3",
            "cmdline": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
            "ppid": 50,
            "create_time": 1.0,
            "pgid": 100,
        },
        {
            "t": 0.0,
            "event": "proc",
            "pid": 101,
            "name": "VLLM::EngineCor",
            "cmdline": ["VLLM::EngineCore"],
            "ppid": 100,
            "create_time": 2.0,
            "pgid": 100,
        },
    ]
    rng = np.random.default_rng(3)
    for k in range(2400):
        lines.append(
            {
                "t": float(k),
                "gpus": [
                    {
                        "i": 0,
                        "used": 120_000_000_000,
                        "free": 30_000_000_000,
                        "reserved": 0,
                        "util": 50,
                        "procs": [[101, 119_500_000_000]],
                    }
                ],
            }
        )
        if k % 2 == 0:
            api = 3e9 + 300 * 1024 * max(0, k - 300) + rng.normal(0, 4 * MiB)
            lines.append(
                {
                    "t": float(k) + 0.5,
                    "rss": [[100, int(api)], [101, 9_000_000_000]],
                    "limit": {"bytes": 64 << 30, "used": 40 << 30, "source": "host"},
                }
            )
    p.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    res = replay_trace(str(p))
    fs = [f for f in res.summary["findings"] if f["kind"] == "host_ram_leak"]
    assert [f["pid"] for f in fs] == [100], res.summary["findings"]
    assert fs[0]["evidence"]["limit_source"] == "host"
    assert any(tr.alert.alertname == "HostMemoryLeak" and tr.state == "firing" for tr in res.transitions)


def test_resident_memory_series_are_bounded_and_carry_role_and_pod():
    from types import SimpleNamespace

    from prometheus_client import CollectorRegistry, generate_latest

    from oomwatch.analysis.hostmem import MAX_PROCESS_SERIES, process_views
    from oomwatch.exporters.metrics import _host_processes

    j = HostMemJudge()
    roles = {p: ProcRole(p, "server", "", "100") for p in range(101, 101 + 40)}
    procs = {100: ProcInfo(100, "python3", ("python3",), 1, 0.0, pod="vllm-0", namespace="llm", container_name="vllm")}
    procs.update({p: ProcInfo(p, "VLLM::Worker", (), 100, 0.0) for p in roles})
    j.add(0.0, [(100, 5 << 30)] + [(p, (1 << 30) + p) for p in roles])
    views = process_views(j, roles, procs)
    assert len(views) == MAX_PROCESS_SERIES and views[0].pid == 100 and views[0].role == "server"

    class C:
        def collect(self):
            yield from _host_processes(SimpleNamespace(host_processes=views))

    reg = CollectorRegistry()
    reg.register(C())
    text = generate_latest(reg).decode()
    assert (
        'oomwatch_process_resident_memory_bytes{container="vllm",namespace="llm",pid="100",pod="vllm-0",'
        'process="python3",role="server"} 5.36870912e+09'
    ) in text
    assert text.count("oomwatch_process_resident_memory_bytes{") == MAX_PROCESS_SERIES
    assert 'oomwatch_process_info{container="vllm",group="100"' in text


def test_trace_lines_round_trip_rss_and_process_groups():
    from oomwatch.model import RssSample
    from oomwatch.trace import parse_line, proc_line, rss_line

    r = RssSample(12.5, ((100, 3 << 30), (101, 9 << 30)), 64 << 30, 40 << 30, "cgroup")
    back = parse_line(json.loads(rss_line(r)))
    assert back == r
    bare = parse_line({"t": 1.0, "rss": [[7, 1024]]})  # without a limit
    assert bare == RssSample(1.0, ((7, 1024),))
    p = ProcInfo(100, "python3", ("python3", "-m", "vllm"), 50, 1.0, pgid=100, rss_bytes=3 << 30)
    q = parse_line(json.loads(proc_line(0.0, p)))
    assert (q.pgid, q.rss_bytes, q.ppid) == (100, 3 << 30, 50)


def test_oomwatch_record_writes_the_server_tree_and_rss_lines(tmp_path, monkeypatch):
    """`oomwatch record` on a card (the fake NVML) held by a real worker under a real server process: the
    trace has proc lines for the worker and its parent, and rss lines at the process-scan pace."""
    import subprocess as sp

    from fake_nvml import FakeNvml
    from oomwatch.cli import main

    srv = sp.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess,sys,time;w=subprocess.Popen([sys.executable,'-c',"
            "'import time;time.sleep(30)']);print(w.pid,flush=True);time.sleep(30)",
        ],
        stdout=sp.PIPE,
        text=True,
    )
    worker = int(srv.stdout.readline())
    try:
        nv = FakeNvml(cards=1)
        nv.cards[0].update(used=30 << 30, procs=[(worker, 30 << 30)])
        monkeypatch.setitem(sys.modules, "pynvml", nv)
        out = tmp_path / "rec.jsonl"
        assert main(["record", "-o", str(out), "--duration", "2.5", "--interval", "0.1"]) == 0
        lines = [json.loads(x) for x in out.read_text().splitlines()[1:]]
        procs = {x["pid"]: x for x in lines if x.get("event") == "proc"}
        assert procs[worker]["ppid"] == srv.pid and srv.pid in procs and procs[worker]["rss"] > 0
        rss = [x for x in lines if "rss" in x and "event" not in x]
        assert 1 <= len(rss) <= 3 and worker in {p for p, _ in rss[0]["rss"]}
    finally:
        stop_process(srv, kill=True)
        import psutil

        with contextlib.suppress(psutil.Error):
            psutil.Process(worker).kill()
