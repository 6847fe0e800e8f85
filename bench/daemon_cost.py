"""The daemon's own cost: CPU share while replaying at 10 Hz, and /metrics scrape latency and size.

    python bench/daemon_cost.py [--seconds 60]

Side by side in one run: 1 card, 8 cards, and 8 cards with 50 processes each, each replayed by a real
`oomwatch run --replay` process at 10 Hz (the default --interval) from traces built of the real
recordings. CPU share = (user + system CPU time of the daemon) / wall time, measured after a 10 s warm-up;
the scrape latency is the median of 200 sequential GETs of /metrics.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import psutil  # noqa: E402
from traces import ROOT, multi_gpu  # noqa: E402

from oomwatch.trace import header_line, sample_line  # noqa: E402


def write_trace(path, n_gpus, seconds, procs):
    gpus, samples = multi_gpu(n_gpus, seconds, hz=10.0, procs_per_gpu=procs)
    with open(path, "w") as f:
        f.write(header_line(gpus, 10.0) + "\n")
        for s in samples:
            f.write(sample_line(s) + "\n")


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(trace, seconds):
    port = free_port()
    p = subprocess.Popen(
        [sys.executable, "-m", "oomwatch", "run", "--replay", trace, "--loop", "--listen", f"127.0.0.1:{port}"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(url, timeout=1).read()
                break
            except OSError:
                time.sleep(0.1)
        time.sleep(10)
        proc = psutil.Process(p.pid)
        c0, w0 = proc.cpu_times(), time.perf_counter()
        rss0 = proc.memory_info().rss
        time.sleep(seconds)
        c1, w1 = proc.cpu_times(), time.perf_counter()
        cpu = (c1.user + c1.system - c0.user - c0.system) / (w1 - w0)
        lat, size = [], 0
        for _ in range(200):
            t0 = time.perf_counter()
            body = urllib.request.urlopen(url, timeout=5).read()
            lat.append(time.perf_counter() - t0)
            size = len(body)
        return {
            "cpu_share": round(cpu, 4),
            "scrape_median_ms": round(statistics.median(lat) * 1e3, 2),
            "scrape_p99_ms": round(sorted(lat)[197] * 1e3, 2),
            "metrics_bytes": size,
            "rss_mib": round(proc.memory_info().rss / 2**20, 1),
            "rss_start_mib": round(rss0 / 2**20, 1),
            "threads": proc.num_threads(),
        }
    finally:
        p.terminate()
        p.wait(10)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    a = ap.parse_args()
    out = {}
    with tempfile.TemporaryDirectory() as d:
        for name, n, procs in (("1 GPU", 1, 0), ("8 GPUs", 8, 0), ("8 GPUs x 50 procs", 8, 50)):
            path = os.path.join(d, f"{n}-{procs}.jsonl")
            write_trace(path, n, 600, procs)
            out[name] = measure(path, a.seconds)
    base = out["1 GPU"]
    for v in out.values():
        v["cpu_ratio_vs_1gpu"] = round(v["cpu_share"] / base["cpu_share"], 2) if base["cpu_share"] else None
        v["scrape_ratio_vs_1gpu"] = round(v["scrape_median_ms"] / base["scrape_median_ms"], 2)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
