"""Analysis throughput: GPU-samples per second over an hour-long 8-GPU trace built from real recordings.

    python bench/analysis_throughput.py [--seconds 3600] [--gpus 8] [--repeat 3]

One NVML sample of one card costs ~46 us on an H200 (bench/results/gpu_live_abd.json), so the analysis of
one GPU-sample must cost less: > 20,000 GPU-samples/s on one core, aiming for 100,000.
"""

import argparse
import json
import statistics
import time

from traces import multi_gpu

from daemon.analysis.analyzer import Analyzer

ap = argparse.ArgumentParser()
ap.add_argument("--seconds", type=float, default=3600)
ap.add_argument("--gpus", type=int, default=8)
ap.add_argument("--repeat", type=int, default=3)
a = ap.parse_args()
gpus, samples = multi_gpu(a.gpus, a.seconds)
rates = []
for _ in range(a.repeat):
    an = Analyzer(gpus)
    t0 = time.perf_counter()
    for s in samples:
        an.add_sample(s)
    dt = time.perf_counter() - t0
    rates.append(len(samples) * a.gpus / dt)
print(json.dumps({"gpu_samples": len(samples) * a.gpus, "trace_seconds": a.seconds, "gpus": a.gpus,
                  "gpu_samples_per_second_median": round(statistics.median(rates)),
                  "runs": [round(r) for r in rates],
                  "us_per_gpu_sample_median": round(1e6 / statistics.median(rates), 2)}))
