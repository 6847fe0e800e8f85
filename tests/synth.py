"""Synthetic curves shaped like the cases the real traces do not show (see the traces README).

They exercise the detectors on shapes beyond the bundled recordings; each returns a list of `Sample`s at
20 Hz plus the moments a test needs (leak onset, OOM time). The OOM is modelled as CUDA's: an allocation
that would pass the capacity fails and the process exits (memory back to 0).
"""

from __future__ import annotations

from oomwatch.model import GpuInfo, GpuSample, Sample

TOTAL = 150_754_820_096
RESERVED = 644_939_776
CAP = TOTAL - RESERVED
GiB = 1 << 30
HZ = 20.0


def info(n=1):
    return tuple(GpuInfo(i, "NVIDIA H200", f"GPU-synth-{i}", TOTAL) for i in range(n))


def _samples(fns, seconds, pids=None):
    out = []
    n = int(seconds * HZ)
    for k in range(n):
        t = k / HZ
        gs = []
        for i, fn in enumerate(fns):
            u = fn(t)
            u = 0 if u is None else int(min(u, CAP))
            procs = (((pids or [1000 + i])[i], u),) if u > 0 else ()
            gs.append(GpuSample(i, u, CAP - u, RESERVED, 0, procs))
        out.append(Sample(t, tuple(gs)))
    return out


def oom_clip(fn, alloc=lambda t: 0):
    """Memory follows fn until fn(t) + the next allocation exceeds capacity; then the process dies."""
    state = {"dead": None}

    def f(t):
        if state["dead"] is not None and t >= state["dead"]:
            return 0
        u = fn(t)
        if u + alloc(t) > CAP:
            state["dead"] = t
            return 0
        return u

    return f, state


def startup(util=0.9, t0=5.0):
    """vLLM-like: 4 weight shards, a profile spike, KV to `util`, graph capture, flat."""
    w = 4.3 * GiB

    def f(t):
        if t < t0:
            return 0
        d = t - t0
        u = min(4, int(d / 0.7) + 1) * w
        if 3.2 <= d < 4.6:
            u += 18 * GiB
        if d >= 5.0:
            u = util * TOTAL - 2 * GiB
        if d >= 5.8:
            u += min(2 * GiB, (d - 5.8) / 2.0 * 2 * GiB)
        return u

    return f


def staircase(base=0.15, step=6 * GiB, every=2.5, t_leak=10.0, t0=5.0):
    return lambda t: (
        0 if t < t0 else base * TOTAL + (max(0, int((t - t_leak) / every) + 1) * step if t >= t_leak else 0)
    )


def ramp(base=0.3, rate=1.5 * GiB, t_leak=10.0, t0=5.0, chunk=64 << 20):
    return lambda t: 0 if t < t0 else base * TOTAL + (int((t - t_leak) * rate / chunk) * chunk if t >= t_leak else 0)


def sawtooth(base=0.3, amp=0.45, period=5.0, rise=4.0, trough_step=0.0, t_leak=8.0, t0=5.0):
    def f(t):
        if t < t0:
            return 0
        if t < t_leak:
            return base * TOTAL
        c, ph = divmod(t - t_leak, period)
        floor = base * TOTAL + c * trough_step * TOTAL
        if ph >= rise + 0.5:  # given back, all but this cycle's leaked part
            return floor + trough_step * TOTAL
        return floor + amp * TOTAL * min(ph, rise) / rise

    return f


def trace(fns, seconds, pids=None):
    return _samples(fns, seconds, pids)
