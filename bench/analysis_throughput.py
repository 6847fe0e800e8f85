"""Analysis throughput: GPU-samples per second over an hour-long 8-GPU trace built from real recordings.

    python bench/analysis_throughput.py [--seconds 3600] [--gpus 8] [--repeat 3] [--baseline TREE]

One NVML sample of one card costs ~46 us on an H200 (bench/results/gpu_live_abd.json), so the analysis of
one GPU-sample must cost less: > 20,000 GPU-samples/s on one core; the target is 100,000. The trace loops
the bundled recordings (starts, leaks to OOM, sawtooths, spikes, strays) on every card, so it is the
analysis' worst case: every card starts, leaks or cycles every minute or so.

`--baseline TREE` runs the same measurement, in the same run, on another checkout of the project (for
instance `git worktree add /tmp/base <commit>`), repeat for repeat, so the two medians are side by side on
one machine state.
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
ap.add_argument("--baseline", metavar="TREE", help="another checkout to measure alongside, run for run")
a = ap.parse_args()
gpus, samples = multi_gpu(a.gpus, a.seconds)


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
    here = os.path.join(os.path.abspath(a.baseline), "bench")
    out = subprocess.run(
        [
            sys.executable,
            os.path.join(here, "analysis_throughput.py"),
            "--seconds",
            str(a.seconds),
            "--gpus",
            str(a.gpus),
            "--repeat",
            "1",
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
    "gpu_samples_per_second_median": round(statistics.median(rates)),
    "runs": [round(r) for r in rates],
    "us_per_gpu_sample_median": round(1e6 / statistics.median(rates), 2),
}
if base:
    res["baseline_gpu_samples_per_second_median"] = round(statistics.median(base))
    res["baseline_runs"] = [round(r) for r in base]
    res["speedup"] = round(statistics.median(rates) / statistics.median(base), 2)
print(json.dumps(res))
