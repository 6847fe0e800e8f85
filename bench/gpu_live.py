"""Live validation on real GPUs (run on a machine with NVIDIA cards and torch for the workloads).

    python3 bench/gpu_live.py OUTDIR

What it does, each with real CUDA allocations in separate torch processes (oomwatch itself uses NVML only):
  A. the cost of one NVML sample per card (oomwatch's NvmlSource.read) against `nvidia-smi` as a subprocess;
  B. `record` for ~20 s while a torch process allocates in steps; the trace read back equals what was sampled;
     the recorder's own PID never appears among the GPUs' processes;
  C. the real daemon on real NVML: a "server" on GPU 0, an orphaned torch process beside it, and a rank on
     GPU 1 that leaks to a real CUDA OOM: GPUOOMImminent before the OOM (lead time), GPUStrayProcess with the
     orphan's PID, GPUMemoryImbalance, and the daemon's PID absent from every card's process list;
  D. `oomwatch diagnose` live for 10 s.
Writes OUTDIR/gpu_live.json and prints a table.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench.srctree import importable, pythonpath  # noqa: E402

importable()  # the device machine runs a bare copy of the tree
OUT = sys.argv[1] if len(sys.argv) > 1 else "/tmp/gpu_live"
os.makedirs(OUT, exist_ok=True)
PY = sys.executable
GiB = 1 << 30
RESULTS: dict = {}

HOLD = r"""
import sys, time, torch
gpu, frac, secs = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
free, total = torch.cuda.mem_get_info(gpu)
x = torch.empty(int(total * frac), dtype=torch.uint8, device=f"cuda:{gpu}")
print("ready", flush=True)
time.sleep(secs)
"""
STEPS = r"""
import sys, time, torch
gpu, step, n = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
every, hold = float(sys.argv[4]), float(sys.argv[5])
keep = []
for i in range(n):
    keep.append(torch.empty(int(step * (1 << 30)), dtype=torch.uint8, device=f"cuda:{gpu}"))
    time.sleep(every)
time.sleep(hold)
"""
LEAK = r"""
import sys, time, torch
gpu, base, step, every, out = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
free, total = torch.cuda.mem_get_info(gpu)
keep = [torch.empty(int(total * base), dtype=torch.uint8, device=f"cuda:{gpu}")]
time.sleep(3)
open(out + ".onset", "w").write(str(time.time()))
while True:
    try:
        keep.append(torch.empty(int(step * (1 << 30)), dtype=torch.uint8, device=f"cuda:{gpu}"))
    except torch.cuda.OutOfMemoryError as e:
        open(out, "w").write(str(time.time()))
        print("real CUDA OOM:", str(e)[:120], flush=True)
        time.sleep(2)
        break
    time.sleep(every)
"""
ORPHAN_LAUNCHER = r"""
import subprocess, sys
p = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]], start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(p.pid, flush=True)
"""


def spawn(code, *args, **kw):
    return subprocess.Popen([PY, "-c", code, *map(str, args)], stdout=subprocess.PIPE, text=True, **kw)


def wait_ready(p):
    line = p.stdout.readline()
    assert "ready" in line, line


def part_a():
    from oomwatch.sources.nvml import NvmlSource

    src = NvmlSource()
    gpus = src.open()
    p = spawn(HOLD, 0, 0.05, 60)
    wait_ready(p)
    for _ in range(50):
        src.read()
    full, memonly = [], []
    for _ in range(2000):
        t0 = time.perf_counter()
        src.read()
        full.append(time.perf_counter() - t0)
    for _ in range(2000):
        t0 = time.perf_counter()
        src.read(with_procs=False)
        memonly.append(time.perf_counter() - t0)
    smi = []
    for _ in range(10):
        t0 = time.perf_counter()
        subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader"],
            capture_output=True,
            check=False,
        )
        smi.append(time.perf_counter() - t0)
    p.kill()
    n = len(gpus)
    med = statistics.median(full)
    RESULTS["A"] = {
        "gpus": n,
        "sample_all_gpus_with_procs_median_us": round(med * 1e6, 1),
        "sample_all_gpus_with_procs_p99_us": round(sorted(full)[int(0.99 * len(full))] * 1e6, 1),
        "per_gpu_with_procs_median_us": round(med * 1e6 / n, 1),
        "per_gpu_memory_only_median_us": round(statistics.median(memonly) * 1e6 / n, 1),
        "nvidia_smi_subprocess_median_us": round(statistics.median(smi) * 1e6, 1),
        "ratio_nvidia_smi_over_oomwatch_sample": round(statistics.median(smi) / med, 1),
        "driver": src.driver,
    }
    src.close()


def part_b():
    from oomwatch.exporters.recorder import TraceRecorder
    from oomwatch.model import Sample
    from oomwatch.sources.nvml import NvmlSource
    from oomwatch.sources.processes import ProcessScanner
    from oomwatch.trace import read_trace

    path = os.path.join(OUT, "recorded_steps.jsonl")
    src = NvmlSource()
    gpus = src.open()
    rec = TraceRecorder(path, gpus, 20.0, src.driver)
    sc = ProcessScanner()
    w = spawn(STEPS, 0, 8, 8, 1.5, 5)
    kept = []
    t0 = time.monotonic()
    own_pid_seen = False
    while time.monotonic() - t0 < 20:
        s = src.read(t=round(time.monotonic() - t0, 4))
        kept.append(s)
        rec.sample(s)
        own_pid_seen |= any(pid == os.getpid() for g in s.gpus for pid, _ in g.procs)
        for info in sc.scan({pid for g in s.gpus for pid, _ in g.procs}):
            rec.proc(s.t, info)
        time.sleep(0.05)
    rec.close()
    w.wait()
    _, it = read_trace(path)
    back = [r for _, r in it if isinstance(r, Sample)]
    replay = subprocess.run(
        [PY, "-m", "oomwatch", "replay", path, "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=pythonpath()),
    )
    summary = json.loads(replay.stdout.strip().splitlines()[-1])["summary"]
    peak = max(g.used_bytes or 0 for s in kept for g in s.gpus)
    RESULTS["B"] = {
        "samples": len(kept),
        "round_trip_equal": back == kept,
        "recorder_pid_in_gpu_processes": own_pid_seen,
        "peak_used_gib": round(peak / GiB, 2),
        "replay_summary_gpu0": summary["gpus"]["0"],
    }
    src.close()


def read_float(path):
    """The number a child wrote to `path` (a time stamp), or None when it wrote none."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return float(f.read())


def metrics(url):
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=2) as r:
            return r.read().decode()
    except OSError:
        return ""


def part_c():
    import pynvml

    port = 19846
    url = f"http://127.0.0.1:{port}"
    server = spawn(HOLD, 0, 0.5, 300)
    wait_ready(server)
    launcher = subprocess.run(
        [PY, "-c", ORPHAN_LAUNCHER, HOLD, "0", "0.1", "300"], capture_output=True, text=True, timeout=30
    )
    orphan = int(launcher.stdout.split()[0])
    time.sleep(8)  # let the orphan's torch start and allocate
    with open(os.path.join(OUT, "daemon.log"), "w") as log:  # the daemon keeps its own copy of the descriptor
        d = subprocess.Popen(
            [
                PY,
                "-m",
                "oomwatch",
                "run",
                "--listen",
                f"127.0.0.1:{port}",
                "--server-pid",
                str(server.pid),
                "--flight-dir",
                os.path.join(OUT, "flight"),
            ],
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=pythonpath()),
            stdout=log,
            stderr=log,
        )
    for _ in range(100):
        if metrics(url):
            break
        time.sleep(0.1)
    time.sleep(4)
    oom_file = os.path.join(OUT, "leak_oom_time")
    leak = spawn(LEAK, 1, 0.3, 4, 1.5, oom_file)
    seen: dict = {}
    daemon_in_procs = False
    t_end = time.time() + 90
    while time.time() < t_end:
        m = metrics(url)
        now = time.time()
        for key, rx in (
            ("oom_imminent_gpu1", r'oomwatch_alert\{alertname="GPUOOMImminent"[^}]*gpu="1"'),
            ("leak_gpu1", r'oomwatch_alert\{alertname="GPUMemoryLeak"[^}]*gpu="1"'),
            ("stray_orphan", rf'oomwatch_alert\{{alertname="GPUStrayProcess"[^}}]*pid="{orphan}"'),
            ("imbalance", r'oomwatch_alert\{alertname="GPUMemoryImbalance"'),
            (
                "server_role",
                rf'oomwatch_gpu_process_memory_bytes\{{gpu="0",pid="{server.pid}",process="[^"]*",role="server"',
            ),
            (
                "orphan_role_stray",
                rf'oomwatch_gpu_process_memory_bytes\{{gpu="0",pid="{orphan}",process="[^"]*",role="stray"',
            ),
            ("false_stray_server", rf'GPUStrayProcess[^}}]*pid="{server.pid}"'),
            ("false_leak_gpu0", r'oomwatch_alert\{alertname="GPUMemoryLeak"[^}]*gpu="0"'),
        ):
            if key not in seen and re.search(rx, m):
                seen[key] = now
        daemon_in_procs |= f'pid="{d.pid}"' in m
        if os.path.exists(oom_file) and "oom_imminent_gpu1" in seen and now - read_float(oom_file) > 3:
            break
        time.sleep(0.25)
    pynvml.nvmlInit()
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        daemon_in_procs |= any(p.pid == d.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h))
    m = metrics(url)
    cost = re.search(r"^oomwatch_sample_duration_seconds ([0-9.e+-]+)", m, re.M)
    d.terminate()
    d.wait(10)
    leak.wait(10)
    for p in (server,):
        p.kill()
    with contextlib.suppress(OSError):
        os.kill(orphan, 9)
    t_oom = read_float(oom_file)
    t_onset = read_float(oom_file + ".onset")
    fire = seen.get("oom_imminent_gpu1")
    RESULTS["C"] = {
        "real_oom": t_oom is not None,
        "leak_onset_to_oom_s": None if not (t_oom and t_onset) else round(t_oom - t_onset, 1),
        "oom_imminent_lead_s": None if not (t_oom and fire) else round(t_oom - fire, 1),
        "oom_imminent_after_onset_s": None if not (t_onset and fire) else round(fire - t_onset, 1),
        "stray_flagged_with_orphan_pid": "stray_orphan" in seen,
        "orphan_role_stray": "orphan_role_stray" in seen,
        "server_role_server": "server_role" in seen,
        "server_flagged_as_stray": "false_stray_server" in seen,
        "imbalance": "imbalance" in seen,
        "leak_on_gpu0_false_alarm": "false_leak_gpu0" in seen,
        "daemon_pid_in_gpu_processes": daemon_in_procs,
        "daemon_last_sample_duration_s": float(cost.group(1)) if cost else None,
        "flight_files": sorted(os.listdir(os.path.join(OUT, "flight")))
        if os.path.isdir(os.path.join(OUT, "flight"))
        else [],
    }


def part_d():
    w = spawn(STEPS, 0, 6, 5, 1.0, 12)
    r = subprocess.run(
        [PY, "-m", "oomwatch", "diagnose", "--duration", "10"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=pythonpath()),
    )
    w.wait()
    with open(os.path.join(OUT, "diagnose.txt"), "w") as f:
        f.write(r.stdout + r.stderr)
    RESULTS["D"] = {"exit": r.returncode, "first_lines": r.stdout.splitlines()[:4]}


PARTS = os.environ.get("PARTS", "abcd")
for part in [f for f in (part_a, part_b, part_c, part_d) if f.__name__[-1] in PARTS]:
    t0 = time.time()
    try:
        part()
    except Exception as e:  # noqa: BLE001  # a broken part is a result: report it and run the next
        RESULTS[part.__name__] = {"error": f"{type(e).__name__}: {e}"}
    print(f"{part.__name__} done in {time.time() - t0:.1f} s", flush=True)
with open(os.path.join(OUT, "gpu_live.json"), "w") as f:
    json.dump(RESULTS, f, indent=1)
print(json.dumps(RESULTS, indent=1))
