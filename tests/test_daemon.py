"""The daemon as a user runs it: a real process, real HTTP, real promtool, signals."""

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import example, free_port, need_binary, stop_process
from servers import start_oomwatch, wait_http

GOLDEN = os.path.join(os.path.dirname(__file__), "golden")


def oomwatch(*args, **kw):
    return subprocess.run([sys.executable, "-m", "oomwatch", *args], capture_output=True, text=True, timeout=60, **kw)


def get(url, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


@pytest.fixture
def daemon_proc(tmp_path):
    procs = []

    def start(*args):
        p, target = start_oomwatch(*args)
        procs.append(p)
        return p, f"http://{target}"

    yield start
    for p in procs:
        stop_process(p, kill=True)


def test_run_replay_serves_clean_metrics(daemon_proc, tmp_path):
    promtool = need_binary("promtool")
    p, url = daemon_proc("--replay", example("stray.jsonl"), "--speed", "8")
    deadline = time.time() + 15
    text = ""
    while time.time() < deadline:
        text = get(url + "/metrics")
        if 'role="stray"' in text and 'alertname="GPUStrayProcess"' in text:
            break
        time.sleep(0.2)
    stray = [
        ln for ln in text.splitlines() if ln.startswith("oomwatch_gpu_process_memory_bytes{") and 'pid="928"' in ln
    ]
    for label in ('gpu="0"', 'process="python3"', 'role="stray"', 'node="', 'uuid="GPU-'):
        assert stray and label in stray[0], stray
    assert re.search(r'oomwatch_build_info\{python="[\d.]+\w*",version="[^"]+"\} 1.0', text)
    assert "process_resident_memory_bytes " in text and "python_info{" in text  # prometheus_client's own
    assert re.search(r'oomwatch_alert\{alertname="GPUStrayProcess".*pid="928".*\} 1.0', text)
    for name in (
        "oomwatch_gpu_memory_total_bytes",
        "oomwatch_gpu_memory_used_bytes",
        "oomwatch_gpu_memory_free_bytes",
        "oomwatch_gpu_memory_reserved_bytes",
        "oomwatch_gpu_memory_leak_bytes_per_second",
        "oomwatch_gpu_memory_shape",
        "oomwatch_source_up",
        "oomwatch_sample_duration_seconds",
    ):
        assert name in text
    assert "workload.py" not in text  # no command line in any label
    lint = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    st = json.loads(get(url + "/api/v1/status"))
    assert st["gpus"][0]["processes"] and st["gpus"][0]["history"]["used_bytes"]
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 0


def test_sigterm_flushes_the_record(daemon_proc, tmp_path):
    rec = tmp_path / "rec.jsonl"
    p, url = daemon_proc("--replay", example("sawtooth.jsonl"), "--speed", "4", "--record", str(rec))
    time.sleep(2.0)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 0
    lines = rec.read_text().splitlines()
    assert json.loads(lines[0])["format"] == "gpu-memory-trace/1"
    assert len(lines) > 20
    for line in lines:  # every line complete
        json.loads(line)


def test_engine_down_is_a_metric_and_an_alert(daemon_proc):
    dead = f"http://127.0.0.1:{free_port()}"
    p, url = daemon_proc("--replay", example("vllm_startup.jsonl"), "--engine-url", dead)
    deadline = time.time() + 15
    while time.time() < deadline:
        text = get(url + "/metrics")
        if 'alertname="GPUTelemetryDown"' in text:
            break
        time.sleep(0.3)
    assert re.search(rf'oomwatch_source_up{{node="[^"]+",source="engine:{re.escape(dead)}/metrics"}} 0.0', text)
    assert 'alertname="GPUTelemetryDown"' in text
    assert p.poll() is None  # still serving


@pytest.mark.parametrize(
    "args,msg",
    [
        (["replay", "/nonexistent.jsonl"], "cannot read trace"),
        (["run"], "NVML"),
        (["run", "--replay", "x.jsonl", "--speed", "0"], "greater than 0"),
        (["run", "--bogus"], "unrecognized arguments"),
        (["engines", "ftp://nowhere"], "not an http"),
        (["run", "--replay", "pyproject.toml"], "not JSON"),
        (["diagnose", "--replay", "/nonexistent"], "cannot read trace"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, msg):
    r = oomwatch(*args)
    assert r.returncode == 2, r.stderr
    assert msg in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_listen_port_taken_is_one_line():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        r = oomwatch("run", "--replay", example("stray.jsonl"), "--listen", f"127.0.0.1:{s.getsockname()[1]}")
    finally:
        s.close()
    assert r.returncode == 2 and "cannot listen" in r.stderr


def test_env_vars_configure_run(daemon_proc, monkeypatch):
    port = free_port()
    env = dict(os.environ, OOMWATCH_LISTEN=f"127.0.0.1:{port}", OOMWATCH_REPLAY=example("spike.jsonl"))
    p = subprocess.Popen([sys.executable, "-m", "oomwatch", "run"], env=env, stderr=subprocess.PIPE)
    try:
        assert "oomwatch_gpu_memory_total_bytes" in wait_http(f"http://127.0.0.1:{port}/metrics", deadline=15.0)
    finally:
        stop_process(p)


#: Lines of an exposition that change from run to run or host to host: timings, the process' own
#: numbers, the interpreter's version.
_VOLATILE = re.compile(r"oomwatch_(\w+_)?duration_seconds|(# (HELP|TYPE) )?(process_|python_)")


def _exposition(trace, at):
    """The whole /metrics of a trace replayed to its end, minus what varies (in-process, deterministic):
    the node label is pinned through NODE_NAME, the Python version in the build info is masked."""
    from prometheus_client import generate_latest

    from oomwatch.config import DaemonConfig
    from oomwatch.exporters.metrics import make_registry
    from oomwatch.sampler import Sampler
    from oomwatch.sources.replay import ReplaySource

    clock = [0.0]
    src = ReplaySource(trace, speed=1.0, clock=lambda: clock[0])
    s = Sampler(DaemonConfig(replay=trace), src, clock=lambda: clock[0])
    s.sample_job()
    clock[0] = at  # everything up to `at` seconds of the trace is due now
    s.sample_job()
    old = os.environ.get("NODE_NAME")
    os.environ["NODE_NAME"] = "gpu-node-1"
    try:
        text = generate_latest(make_registry(lambda: s.snapshot)).decode()
    finally:
        os.environ.pop("NODE_NAME") if old is None else os.environ.__setitem__("NODE_NAME", old)
    keep = [re.sub(r'python="[^"]*"', 'python="X"', ln) for ln in text.splitlines() if not _VOLATILE.match(ln)]
    return "\n".join(keep) + "\n"


@pytest.mark.parametrize("name,at", [("stray", 30.0), ("tp_imbalance", 40.0), ("staircase", 40.0)])
def test_golden_exposition(name, at):
    got = _exposition(example(name + ".jsonl"), at)
    path = os.path.join(GOLDEN, name + ".prom")
    if os.environ.get("OOMWATCH_UPDATE_GOLDEN"):
        with open(path, "w") as f:
            f.write(got)
    with open(path) as f:
        assert got == f.read()


#: The daemon's own threads: main, the HTTP server, apscheduler's loop and a few job workers. numpy's
#: OpenBLAS would add one per core (37 on a 32-core host) unless pinned before numpy loads.
MAX_DAEMON_THREADS = 8


def _no_blas_env():
    env = dict(os.environ)
    for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.pop(k, None)
    return env


def test_the_daemon_runs_few_threads():
    psutil = pytest.importorskip("psutil")
    p, target = start_oomwatch("--replay", example("staircase.jsonl"), "--loop", env=_no_blas_env())
    try:
        get(f"http://{target}/metrics")
        time.sleep(2)  # every job has run at least once
        n = psutil.Process(p.pid).num_threads()
    finally:
        stop_process(p)
    assert n <= MAX_DAEMON_THREADS, f"{n} threads"


def test_the_console_entry_pins_blas_before_numpy_loads():
    """Importing the CLI, then numpy, starts no BLAS worker (numpy alone starts one per core beyond the first)."""
    count = "import os; print(len(os.listdir('/proc/self/task')))"
    if not os.path.isdir("/proc/self/task"):
        pytest.skip("needs /proc to count threads")
    r = subprocess.run(
        [sys.executable, "-c", "import oomwatch.cli, numpy; " + count],
        capture_output=True,
        text=True,
        env=_no_blas_env(),
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) == 1
    seen = {}
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):  # what importing the CLI leaves in the environment
        r = subprocess.run(
            [sys.executable, "-c", f"import oomwatch.cli, os; print(os.environ[{var!r}])"],
            capture_output=True,
            text=True,
            env={**_no_blas_env(), "OMP_NUM_THREADS": "3"},
            timeout=60,
        )
        seen[var] = r.stdout.strip()
    assert seen == {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "3"}  # pinned by default, a user's value kept
