"""The daemon's own cost: CPU share while replaying at 10 Hz, and /metrics scrape latency and size.

    python bench/daemon_cost.py [--seconds 60]
    python bench/daemon_cost.py --rss-hours 1 [--out bench/results/daemon_rss_8cards_1h.json]

Side by side in one run: 1 card, 8 cards, and 8 cards with 50 processes each, each replayed by a real
`oomwatch run --replay` process at 10 Hz (the default --interval) from traces built of the real
recordings. CPU share = (user + system CPU time of the daemon) / wall time, measured after a 10 s warm-up;
the scrape latency is the median of 200 sequential GETs of /metrics.

`--rss-hours H` is the long run instead: one daemon replaying 8 cards at 10 Hz for H hours with the host-RAM
trend running, its RSS sampled every 30 s. A replay has no process scanner (psutil reads live PIDs only), so
the trace carries what a live scan would have recorded (`oomwatch record` writes the same lines): a `proc`
line for every holder and its server's parent, and an `rss` line every `process_interval` with all of their
resident memory and this host's memory as the limit; one server leaks host RAM so HostMemoryLeak's judge
fits and fires as it would live. The trace is longer than the run: replayed `rss` lines keep their trace
times on a `--loop`, so the run must not wrap.
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
from dataclasses import replace

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import psutil  # noqa: E402
from traces import ROOT, multi_gpu  # noqa: E402

from oomwatch.config import DaemonConfig  # noqa: E402
from oomwatch.model import ProcInfo, RssSample, Sample  # noqa: E402
from oomwatch.trace import header_line, proc_line, rss_line, sample_line  # noqa: E402

RSS_EVERY_S = 30.0  # the daemon's RSS is sampled this often in the long run
RSS_MARKS_MIN = (1, 10, 30, 60)  # ... and reported at these minutes
RSS_BUDGET_MIB = 64.0  # the bound for 8 cards after an hour
PID_BASE = 100_000  # card i's PIDs are PID_BASE * (i + 1) + the recording's PID: no two cards share one
SERVER_RSS = 5 << 30  # a warm vLLM server's resident memory (weights mapped, tokenizer, CUDA context)
PARENT_RSS = 900 << 20  # its API server
RSS_NOISE = 8 << 20  # allocator arenas and GC move a real RSS by a few MiB between scans
LEAK_BYTES_PER_S = 256 << 10  # card 0's server leaks host RAM (0.9 GiB/h): the judge fires on it


def write_trace(path, n_gpus, seconds, procs):
    gpus, samples = multi_gpu(n_gpus, seconds, hz=10.0, procs_per_gpu=procs)
    with open(path, "w") as f:
        f.write(header_line(gpus, 10.0) + "\n")
        for s in samples:
            f.write(sample_line(s) + "\n")


def card_pid(i, pid):
    return PID_BASE * (i + 1) + pid


def rss_trace_procs(samples):
    """(holder ProcInfos, parent ProcInfos): each card's holders are children of one API server per card."""
    holders, parents = {}, {}
    for s in samples:
        for g in s.gpus:
            parent = card_pid(g.index, 1)
            parents.setdefault(parent, ProcInfo(parent, "vllm", ("vllm", "serve"), 1, 1.8e9, "root"))
            for pid, _ in g.procs:
                holders.setdefault(
                    pid, ProcInfo(pid, "python3", ("python3", "-m", "vllm.worker"), parent, 1.8e9, "root", True, True)
                )
    return holders, parents


def scan_rss(t, holders, parents, rng):
    """What one live process scan would read: every holder and parent, noisy; card 0's server leaking."""
    out = []
    for pid in sorted(holders):
        leak = LEAK_BYTES_PER_S * t if pid // PID_BASE == 1 else 0
        out.append((pid, int(SERVER_RSS + leak + rng.uniform(-RSS_NOISE, RSS_NOISE))))
    for pid in sorted(parents):
        out.append((pid, int(PARENT_RSS + rng.uniform(-RSS_NOISE, RSS_NOISE))))
    return tuple(out)


def write_rss_trace(path, n_gpus, seconds):
    """`n_gpus` cards of the real recordings at 10 Hz, with the proc and rss lines of a live recording."""
    import random

    gpus, samples = multi_gpu(n_gpus, seconds, hz=10.0)
    samples = [
        Sample(s.t, tuple(replace(g, procs=tuple((card_pid(g.index, p), b) for p, b in g.procs)) for g in s.gpus))
        for s in samples
    ]
    holders, parents = rss_trace_procs(samples)
    every, limit, rng = DaemonConfig().process_interval, psutil.virtual_memory().total, random.Random(0)
    next_scan = 0.0
    with open(path, "w") as f:
        f.write(header_line(gpus, 10.0) + "\n")
        for p in (*parents.values(), *holders.values()):
            f.write(proc_line(0.0, p) + "\n")
        for s in samples:
            f.write(sample_line(s) + "\n")
            if s.t >= next_scan:
                rss = scan_rss(s.t, holders, parents, rng)
                f.write(rss_line(RssSample(s.t, rss, limit, sum(b for _, b in rss), "host")) + "\n")
                next_scan += every
    return len(holders) + len(parents)


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_daemon(trace):
    """A real `oomwatch run --replay TRACE --loop` at the default interval, answering /metrics; (process, url)."""
    port = free_port()
    p = subprocess.Popen(
        [sys.executable, "-m", "oomwatch", "run", "--replay", trace, "--loop", "--listen", f"127.0.0.1:{port}"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    for _ in range(100):
        try:
            urllib.request.urlopen(url, timeout=1).read()
            break
        except OSError:
            time.sleep(0.1)
    return p, url


def measure(trace, seconds):
    p, url = start_daemon(trace)
    try:
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


def mib(b):
    return round(b / 2**20, 1)


def host_ram_series(body):
    """The host-RAM trend as the daemon exposes it: process RSS series and a firing HostMemoryLeak."""
    text = body.decode()
    return {
        "process_rss_series": text.count("\noomwatch_process_resident_memory_bytes{"),
        "host_memory_leak_firing": 'alertname="HostMemoryLeak"' in text,
    }


def rss_report(hours, rows, cpu, wall, pids, done):
    """The long run's figures: RSS at the marks (the last sample at or before each), max, CPU share."""
    at = {}
    for m in RSS_MARKS_MIN:
        before = [r for r in rows if r["t_min"] <= m + 0.01]
        if before and before[-1]["t_min"] >= m - RSS_EVERY_S / 60:
            at[f"{m}_min"] = before[-1]["rss_mib"]
    peak = max(r["rss_mib"] for r in rows)
    return {
        "command": f"python bench/daemon_cost.py --rss-hours {hours:g}",
        "setup": f"oomwatch run --replay (8 cards, 10 Hz, --loop), host-RAM trend on: {pids} processes' rss every "
        f"{DaemonConfig().process_interval:g} s in the trace; daemon RSS sampled every {RSS_EVERY_S:g} s",
        "finished": done,
        "rss_mib_at": at,
        "rss_max_mib": peak,
        "rss_budget_mib": RSS_BUDGET_MIB,
        "under_budget": peak < RSS_BUDGET_MIB,
        "cpu_share": round(cpu / wall, 4) if wall else None,
        "samples": rows,
    }


def rss_run(hours, out):
    """One daemon, 8 cards, `hours` long; the report is rewritten after every sample (a cut run keeps its rows)."""
    seconds = hours * 3600
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "8-rss.jsonl")
        pids = write_rss_trace(trace, 8, seconds + 300)
        p, url = start_daemon(trace)
        try:
            proc = psutil.Process(p.pid)
            c0, w0 = proc.cpu_times(), time.monotonic()
            rows, k = [], 0
            while True:
                k += 1
                time.sleep(max(0.0, w0 + k * RSS_EVERY_S - time.monotonic()))
                c, w = proc.cpu_times(), time.monotonic()
                row = {
                    "t_min": round((w - w0) / 60, 2),
                    "rss_mib": mib(proc.memory_info().rss),
                    "threads": proc.num_threads(),
                }
                row.update(host_ram_series(urllib.request.urlopen(url, timeout=5).read()))
                rows.append(row)
                done = w - w0 >= seconds
                report = rss_report(hours, rows, c.user + c.system - c0.user - c0.system, w - w0, pids, done)
                with open(out, "w") as f:
                    json.dump(report, f, indent=1)
                if done:
                    return report
        finally:
            p.terminate()
            p.wait(10)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--rss-hours", type=float, help="the long run instead: one daemon, 8 cards, this many hours")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "daemon_rss_8cards_1h.json"))
    a = ap.parse_args()
    if a.rss_hours is not None:
        if a.rss_hours <= 0:
            ap.error("--rss-hours must be above 0")
        report = rss_run(a.rss_hours, a.out)
        print(json.dumps({k: v for k, v in report.items() if k != "samples"}, indent=1))
        return
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
