"""Analysis throughput: GPU-samples per second over an hour-long 8-GPU trace built from real recordings.

    python bench/analysis_throughput.py [--seconds 3600] [--gpus 8] [--repeat 3] [--step S] [--baseline TREE]

One NVML sample of one card costs ~46 us on an H200 (bench/results/gpu_live_abd.json), so the analysis of
one GPU-sample must cost less: > 20,000 GPU-samples/s on one core; the target is 100,000. The trace loops
the bundled recordings (starts, leaks to OOM, sawtooths, spikes, strays) on every card, so it is the
analysis' worst case: every card starts, leaks or cycles every minute or so.

`--step S` reads the trace one sample per S seconds (the first of each step, as a Prometheus scrape keeps
it): the cost at a fleet's scrape step, where every sample is an evaluation (at 20 Hz one in twenty is).

`--baseline TREE` runs the same measurement, in the same run, on another checkout of the project (for
instance `git worktree add /tmp/base <commit>`), repeat for repeat, so the two medians are side by side on
one machine state: this script, on this tree's trace, with TREE's analysis on the import path.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from traces import multi_gpu

from oomwatch.analysis.analyzer import Analyzer

ap = argparse.ArgumentParser()
ap.add_argument("--seconds", type=float, default=3600)
ap.add_argument("--gpus", type=int, default=8)
ap.add_argument("--repeat", type=int, default=3)
ap.add_argument("--step", type=float, default=0.0, help="read one sample per this many seconds (0: every sample)")
ap.add_argument("--baseline", metavar="TREE", help="another checkout to measure alongside, run for run")
a = ap.parse_args()
gpus, samples = multi_gpu(a.gpus, a.seconds)
if a.step > 0:
    kept, last = [], -float("inf")
    for s in samples:
        if s.t - last >= a.step:
            kept.append(s)
            last = s.t
    samples = kept


def once() -> float:
    an = Analyzer(gpus)
    t0 = time.perf_counter()
    for s in samples:
        an.add_sample(s)
    return len(samples) * a.gpus / (time.perf_counter() - t0)


def _importable(tree: str) -> str:
    """What puts `tree`'s analysis on the path: its folders laid out as `oomwatch` (bench/srctree.py), or, for
    a checkout from before the package was named so, the tree itself (`daemon`)."""
    lay_out = os.path.join(tree, "bench", "srctree.py")
    if not os.path.isfile(lay_out):
        return tree
    return subprocess.run([sys.executable, lay_out], capture_output=True, text=True, check=True).stdout.strip()


def baseline_once() -> float:
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run(
        [
            sys.executable,
            os.path.abspath(__file__),
            "--seconds",
            str(a.seconds),
            "--gpus",
            str(a.gpus),
            "--repeat",
            "1",
            "--step",
            str(a.step),
        ],
        cwd=here,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": _importable(os.path.abspath(a.baseline))},
        check=True,
    )
    return json.loads(out.stdout.splitlines()[-1])["gpu_samples_per_second_median"]


rates, base = [], []
for _ in range(a.repeat):
    if a.baseline:
        base.append(baseline_once())
    rates.append(once())
res = {
    "gpu_samples": len(samples) * a.gpus,
    "trace_seconds": a.seconds,
    "gpus": a.gpus,
    "step_s": a.step,
    "gpu_samples_per_second_median": round(statistics.median(rates)),
    "runs": [round(r) for r in rates],
    "us_per_gpu_sample_median": round(1e6 / statistics.median(rates), 2),
}
if base:
    res["baseline_gpu_samples_per_second_median"] = round(statistics.median(base))
    res["baseline_runs"] = [round(r) for r in base]
    res["speedup"] = round(statistics.median(rates) / statistics.median(base), 2)
print(json.dumps(res))
