"""Build long multi-GPU traces from the bundled real recordings (for benchmarks and the soak).

Each card plays one of the real traces, looped with its times shifted, so an hour of 8 cards is made of
real NVML curves (warm-ups, leaks to OOM, sawtooths, spikes, strays) rather than synthetic noise.
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from oomwatch.model import GpuInfo, GpuSample, Sample  # noqa: E402
from oomwatch.trace import read_trace  # noqa: E402

EXAMPLES = os.path.join(ROOT, "daemon", "examples")
NAMES = ["vllm_startup", "staircase", "sawtooth", "spike", "stray", "tp_imbalance"]


def _card_series(name, gpu=0):
    _, it = read_trace(os.path.join(EXAMPLES, name + ".jsonl"))
    return [(r.t, r.gpus[gpu]) for _, r in it if isinstance(r, Sample)]


def multi_gpu(n_gpus=8, seconds=3600.0, hz=20.0, procs_per_gpu=0):
    """Samples of `n_gpus` cards for `seconds` at `hz`; extra fake holder PIDs per card if asked."""
    series = []
    for i in range(n_gpus):
        name = NAMES[i % len(NAMES)]
        series.append(_card_series(name, 1 if (name == "tp_imbalance" and i >= len(NAMES)) else 0))
    total = 150_754_820_096
    gpus = tuple(GpuInfo(i, "NVIDIA H200", f"GPU-bench-{i}", total) for i in range(n_gpus))
    out = []
    idx = [0] * n_gpus
    n = int(seconds * hz)
    for k in range(n):
        t = k / hz
        gs = []
        for i, ser in enumerate(series):
            _, g = ser[idx[i]]
            idx[i] = (idx[i] + 1) % len(ser)
            procs = g.procs
            if procs_per_gpu:
                procs = procs + tuple((100000 + i * 1000 + j, 1 << 28) for j in range(procs_per_gpu))
            gs.append(GpuSample(i, g.used_bytes, g.free_bytes, g.reserved_bytes, g.util_percent, procs))
        out.append(Sample(t, tuple(gs)))
    return gpus, out
