"""Fleet-mode cost: `oomwatch backtest` over N cards x D days at a step, read from a real Prometheus TSDB,
beside `oomwatch replay`'s throughput on the very same curves.

    python bench/backtest.py [--cards 20] [--days 2] [--step 30] [--workers N] [--json OUT]

The cards are synthetic but shaped like a fleet's: vLLM servers that start to 90 % and sit there (restarted
daily), slow leaks that climb from 60 % to a CUDA OOM in about 10 hours and restart, bounded sawtooths.
They are written as dcgm-exporter series (`oomwatch.backtest.tsdb`), made into blocks by promtool, served by
Prometheus on 127.0.0.1, and the backtest runs as its own process (`python -m oomwatch backtest --json`) so
its wall time and peak RSS are its own. The replay side writes each card as a gpu-memory-trace/1 file and
times `oomwatch.feed.replay_trace` over it in this process (the analysis alone, no HTTP).

The full-scale target is 1,000 cards x 30 days at 30 s (86.4 M samples) in under 10 minutes; the report
says whether the rate measured here extrapolates to it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from oomwatch.backtest.tsdb import PromServer, SeriesSpec, create_blocks, dcgm_labels, write_dcgm  # noqa: E402
from oomwatch.feed import replay_trace  # noqa: E402
from oomwatch.model import GpuInfo, GpuSample, Sample  # noqa: E402
from oomwatch.trace import header_line, sample_line  # noqa: E402

GIB = 1 << 30
TOTAL = 80 * GIB  # an 80 GB card
RESERVED = GIB // 2
USABLE = TOTAL - RESERVED
BASE = 1_780_000_000.0  # 2026-05-28: imported as old blocks
TARGET = {"cards": 1000, "days": 30, "step_s": 30.0, "seconds": 600.0}
WARM_S = 1800.0  # a leaking server serves flat this long after its start before it starts leaking
KINDS = ("healthy", "healthy", "leak", "sawtooth")  # half the fleet healthy, a quarter leaking, a quarter cycling


def curve(kind: str, seed: int, days: float, step: float):
    """(t, used, free, reserved) every `step` for `days`: one card of the fleet."""
    rnd = random.Random(seed)
    n = int(days * 86400 / step)
    phase = rnd.uniform(0, 86400)
    level = 0.0
    leak_rate = USABLE * 0.39 / (10 * 3600)  # 60 % -> 99 % in about 10 hours
    for k in range(n):
        t = BASE + k * step
        age = (t - BASE + phase) % 86400  # seconds since the daily (re)start
        if kind == "healthy":
            ratio = 0.0 if age < 300 else min(0.9, (age - 300) / 120 * 0.9)
            ratio += rnd.uniform(-0.002, 0.002) if ratio > 0 else 0.0
            ratio += 0.03 if ratio > 0.5 and rnd.random() < 0.01 else 0.0  # a prefill transient in a scrape
        elif kind == "leak":
            if level <= 0.0:
                level = 0.6 * USABLE if age > 300 else 0.0
            elif age > WARM_S:  # served flat for half an hour, then leaks
                level += leak_rate * step * rnd.uniform(0.5, 1.5)
                if level >= 0.995 * USABLE:
                    level = 0.0  # the OOM: the process dies, the card empties; restarts after 5 minutes
                    phase = (phase - age) % 86400  # its next start is 5 minutes from now
            ratio = level / USABLE
        else:
            ratio = 0.3 + 0.4 * ((t % 1800) / 1800)
        used = max(0, min(USABLE, int(ratio * USABLE)))
        yield t, used, USABLE - used, RESERVED


def cards(n: int):
    return [(f"gpu-node-{k // 8:03d}", k % 8, f"GPU-bench-{k:05d}", KINDS[k % len(KINDS)], k) for k in range(n)]


def write_traces(d: str, fleet, days: float, step: float) -> list[str]:
    paths = []
    for _node, gpu, uuid, kind, seed in fleet:
        p = os.path.join(d, f"{uuid}.jsonl")
        with open(p, "w", encoding="utf-8") as f:
            f.write(header_line([GpuInfo(gpu, "NVIDIA H100 80GB HBM3", uuid, TOTAL)], 1.0 / step) + "\n")
            for t, u, fr, r in curve(kind, seed, days, step):
                f.write(sample_line(Sample(t - BASE, (GpuSample(gpu, u, fr, r),))) + "\n")
        paths.append(p)
    return paths


def run_backtest(url: str, days: float, step: float, workers: int) -> tuple[dict, float, float]:
    """The backtest as its own process: (its totals line, wall s, peak RSS MiB of its whole process tree:
    the command, its fork server and its worker processes, summed, sampled every 0.1 s; not Prometheus')."""
    argv = [sys.executable, "-m", "oomwatch", "backtest", "--prometheus", url, "--start", f"{BASE}"]
    argv += ["--end", f"{BASE + days * 86400}", "--step", f"{step:g}", "--workers", str(workers), "--json"]
    peak = 0
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=err)
        proc = psutil.Process(p.pid)
        while p.poll() is None:
            peak = max(peak, _tree_rss(proc))
            time.sleep(0.1)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        lines, msg = out.read().decode().splitlines(), err.read().decode().strip()
    if p.returncode not in (0, 1) or not lines:
        raise SystemExit(f"backtest failed ({p.returncode}): {msg}")
    return json.loads(lines[-1])["totals"], wall, peak / 2**20


def _tree_rss(proc: psutil.Process) -> int:
    total = 0
    try:
        for q in [proc, *proc.children(recursive=True)]:
            total += q.memory_info().rss
    except psutil.Error:  # a worker that ended between the listing and its reading
        pass
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cards", type=int, default=20)
    ap.add_argument("--days", type=float, default=2.0)
    ap.add_argument("--step", type=float, default=30.0)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="worker processes (default: the CPUs)")
    ap.add_argument("--json", metavar="OUT", help="also write the figures here")
    a = ap.parse_args()
    fleet = cards(a.cards)
    res: dict = {"cards": a.cards, "days": a.days, "step_s": a.step, "workers": a.workers, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="oomwatch-bench-") as d:
        om = os.path.join(d, "fleet.om")
        t0 = time.perf_counter()
        specs = [
            SeriesSpec(
                dcgm_labels(node, gpu, uuid, "NVIDIA H100 80GB HBM3"),
                lambda k=kind, s=seed: curve(k, s, a.days, a.step),
            )
            for node, gpu, uuid, kind, seed in fleet
        ]
        with open(om, "w", encoding="utf-8") as f:
            res["series_samples"] = write_dcgm(f, specs)
        res["openmetrics_mb"] = round(os.path.getsize(om) / 1e6, 1)
        res["generate_s"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        create_blocks(om, os.path.join(d, "tsdb"))
        res["promtool_s"] = round(time.perf_counter() - t0, 2)
        os.remove(om)
        with PromServer(os.path.join(d, "tsdb")) as prom:
            totals, wall, rss = run_backtest(prom.url, a.days, a.step, a.workers)
        res["backtest"] = {
            "wall_s": round(wall, 2),
            "peak_rss_mib_all_processes": round(rss, 1),
            "samples": totals["samples"],
            "samples_per_s_wall": round(totals["samples"] / wall, 0),
            "samples_per_s_per_core": round(totals["samples"] / wall / min(a.workers, os.cpu_count() or 1), 0),
            "cards_failed": totals["cards_failed"],
            "pages": totals["pages"],
            "pages_per_card_day": totals["pages_per_card_day"],
            "leak_warnings": totals["leak_warnings"],
            "suspected_ooms": totals["suspected_ooms"],
            "suspected_ooms_paged": totals["suspected_ooms_paged"],
            "lead_s_median": totals["lead_s_median"],
        }
        paths = write_traces(d, fleet, a.days, a.step)
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        t0 = time.perf_counter()
        n = sum(replay_trace(p).analyzer.samples for p in paths)
        rt = time.perf_counter() - t0
        res["replay"] = {"samples": n, "wall_s": round(rt, 2), "samples_per_s": round(n / rt, 0)}
        res["replay"]["bench_process_peak_rss_mib"] = round(
            max(rss0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024), 1
        )
    need = TARGET["cards"] * TARGET["days"] * 86400 / TARGET["step_s"]
    rate = res["backtest"]["samples_per_s_wall"]
    res["target"] = {
        **TARGET,
        "samples": int(need),
        "samples_per_s_needed": round(need / TARGET["seconds"], 0),
        "this_run_s": round(need / rate, 0) if rate else None,  # this machine, these workers
        "cores_needed": math.ceil(need / res["backtest"]["samples_per_s_per_core"] / TARGET["seconds"])
        if rate
        else None,
    }
    print(json.dumps(res, indent=2))
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
