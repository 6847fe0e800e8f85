"""Plain-language reports: what each card is doing, what is wrong, the evidence, what to change.

Used by `oomwatch diagnose` and the human form of `oomwatch replay`. Reads an `Analyzer` after a run;
no I/O besides returning text.
"""

from __future__ import annotations

from .analysis.analyzer import Analyzer, GpuState
from .analysis.findings import SEVERITY_ORDER, duration, gib

SHAPE_WORDS = {
    "stable": "flat",
    "staircase": "climbing in steps that are never given back",
    "ramp": "climbing steadily",
    "sawtooth": "rising and falling in cycles",
    "spike": "flat with short spikes",
    "idle": "idle",
}


def card_line(a: Analyzer, st: GpuState) -> str:
    i = st.info
    shape = a.summary_shape(st)
    cap = st.capacity_bytes or i.total_bytes
    t, mn, mx, la = st.series.arrays()
    used = float(la[-1]) if len(la) else 0.0
    peak = st.peak_used_bytes
    head = f"GPU {i.index} {i.name}: {used / cap:.1%} used now, peak {peak / cap:.1%} ({gib(peak)} of {gib(cap)})"
    if st.ever_leak:
        eta = f", full in {duration(st.last_leak_eta)} at that rate" if st.last_leak_eta is not None else ""
        return f"{head}; {SHAPE_WORDS[shape]}: memory grows by {st.last_leak_rate / (1 << 20):.0f} MiB/s{eta}."
    if shape == "idle":
        return f"{head}; idle."
    idle_now = st.verdict.shape == "idle"
    tail = "; idle now (its processes exited)" if idle_now else ""
    if shape == "stable" and st.warm_end is not None and st.busy_since is not None:
        climb = max(0.0, st.warm_end - st.busy_since)
        flat_for = max(0.0, (st.busy_last or st.warm_end) - st.warm_end)
        if st.budget_bytes:
            what = f"the engine's preallocation up to its budget line ({st.budget_bytes / i.total_bytes:.0%})"
        else:
            what = "a one-time allocation (an engine preallocating its KV pool looks like this)"
        return (f"{head}; reached {st.plateau_bytes / cap:.1%} in {climb:.0f} s and stayed flat for "
                f"{flat_for:.0f} s: {what}, healthy{tail}.")
    return f"{head}; {SHAPE_WORDS.get(shape, shape)}{tail}."


def render(a: Analyzer, summary: dict) -> str:
    lines = ["Cards:"]
    for st in a.gpus.values():
        lines.append("  " + card_line(a, st))
    fs = sorted(summary["findings"], key=lambda f: SEVERITY_ORDER.get(f.get("severity", "warning"), 9))
    if not fs:
        lines.append("")
        lines.append("Healthy: no leak, no risk of running out of memory, no stray process, cards balanced.")
        return "\n".join(lines)
    lines.append("")
    lines.append(f"Findings ({len(fs)}), worst first:")
    for n, f in enumerate(fs, 1):
        lines.append(f"{n}. [{f.get('severity', 'warning')}] {f['summary']}")
        ev = ", ".join(f"{k}={_fmt(k, v)}" for k, v in f["evidence"].items() if v is not None)
        if ev:
            lines.append(f"   evidence: {ev}")
        lines.append(f"   what to change: {f['advice']}")
    return "\n".join(lines)


def _fmt(k: str, v):
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if k.endswith("_bytes"):
            return gib(v)
        if k.endswith("_bytes_per_second"):
            return f"{v / (1 << 20):.0f} MiB/s"
        if k.endswith("seconds"):
            return duration(v)
    return v
