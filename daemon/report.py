"""Plain-language reports: what each card is doing, what is wrong, the evidence, what to change.

Used by `oomwatch diagnose` and the human form of `oomwatch replay`. Reads an `Analyzer` after a run;
no I/O besides returning text.
"""

from __future__ import annotations

from typing import Any

from .analysis.analyzer import Analyzer, GpuState
from .analysis.findings import SEVERITY_ORDER
from .config import CARD_ALERTS
from .words import duration, gib, rate

SHAPE_WORDS = {
    "stable": "flat",
    "staircase": "climbing in steps that are never given back",
    "ramp": "climbing steadily",
    "sawtooth": "rising and falling in cycles",
    "spike": "flat with short spikes",
    "idle": "idle",
}


def _pct(b: float, cap: float) -> str:
    """`b` as a share of `cap`; a card of no known size (0 bytes) shows the bytes instead of dividing by 0."""
    return f"{b / cap:.1%}" if cap > 0 else gib(b)


def _episode_words(a: Analyzer, st: GpuState) -> str:
    """What happened on this card, from its episodes: when each alert held and how it ended."""
    t0 = a.t0 or 0.0
    out = []
    for e in a.episodes:
        if e["gpu"] != str(st.info.index) or e["alert"] not in CARD_ALERTS:
            continue
        what = {
            "GPUMemoryLeak": "a leak was suspected",
            "GPUOOMImminent": "an OOM was projected",
            "GPUMemorySpikeRisk": "spike risk held",
        }[e["alert"]]
        if e["end"] is None:
            out.append(f"{what} from {e['start'] - t0:.0f} s and still holds")
        else:
            out.append(
                f"{what} from {e['start'] - t0:.0f} s to {e['end'] - t0:.0f} s and ended because {e['ended_because']}"
            )
    return "; ".join(out)


def verdict_sentence(a: Analyzer, st: GpuState) -> str:
    """One plain sentence of the card's state at the end (never a past rate projected onto an idle card)."""
    v, lc = st.verdict, st.lc
    cap = st.capacity_bytes or st.info.total_bytes
    used = float(st.sample.used_bytes) if st.sample and st.sample.used_bytes is not None else v.floor_bytes
    b = st.busy
    if lc.phase == "idle":
        s = "idle now"
        if b is not None:
            s += f" (its processes exited; it peaked at {_pct(b.peak, cap)})"
    elif lc.phase == "exiting":
        s = f"exiting now: its processes are gone and {_pct(used, cap)} is being given back"
    elif lc.phase == "starting":
        what = f"{lc.kind} start" if lc.kind else "start"
        s = f"in its {what} since {max(0.0, (a.now or 0) - (lc.start_t or 0)):.0f} s, {_pct(used, cap)} used"
        if v.leak:
            s += (
                f", climbing {rate(v.leak_bytes_per_second)} past where a start stops: "
                f"full in {duration(v.eta_seconds)}"
            )
    elif v.leak:
        s = (
            f"{SHAPE_WORDS.get(v.shape, v.shape)} at {rate(v.leak_bytes_per_second)} "
            f"(floor {_pct(v.floor_bytes, cap)}),"
            f" full in {duration(v.eta_seconds)}"
        )
    else:
        s = f"{SHAPE_WORDS.get(v.shape, v.shape)} at {_pct(v.floor_bytes, cap)} now"
        if v.growth == "cache_growth":
            s += f" after {gib(v.growth_bytes)} of caching-allocator growth that levelled off"
        elif v.growth == "plateau":
            s += f" after growing {gib(v.growth_bytes)} and levelling off"
        if v.no_headroom:
            s += "; no headroom left above the floor"
        if v.spike_risk:
            s += f"; transients of {gib(v.spike_height_bytes)} are taller than the {gib(v.headroom_bytes)} left"
    ep = _episode_words(a, st)
    return f"{s[0].upper()}{s[1:]}" + (f"; {ep}." if ep else ".")


def card_line(a: Analyzer, st: GpuState) -> str:
    i = st.info
    cap = st.capacity_bytes or i.total_bytes
    used = float(st.sample.used_bytes) if st.sample and st.sample.used_bytes is not None else 0.0
    peak = st.peak_used_bytes
    head = f"GPU {i.index} {i.name}: {_pct(used, cap)} used now, peak {_pct(peak, cap)} ({gib(peak)} of {gib(cap)})"
    return f"{head}; {verdict_sentence(a, st)}"


def render(a: Analyzer, summary: dict[str, Any]) -> str:
    lines = ["Cards:"]
    for st in a.gpus.values():
        lines.append("  " + card_line(a, st))
        lines += ["    " + x for x in a.alloc.describe(st.info.uuid)]  # the allocator probe, where it runs
    fs = sorted(summary["findings"], key=lambda f: SEVERITY_ORDER.get(f.get("severity", "warning"), 9))
    if not fs:
        lines.append("")
        lines.append("Healthy: no leak, no risk of running out of memory, no stray process, cards balanced.")
        return "\n".join(lines)
    lines.append("")
    lines.append(f"Findings ({len(fs)}), worst first:")
    for n, f in enumerate(fs, 1):
        when = "" if f.get("holds", True) else " (earlier, no longer holds: see the card's line)"
        lines.append(f"{n}. [{f.get('severity', 'warning')}] {f['summary']}{when}")
        ev = ", ".join(f"{k}={_fmt(k, v)}" for k, v in f["evidence"].items() if v is not None)
        if ev:
            lines.append(f"   evidence: {ev}")
        lines.append(f"   what to change: {f['advice']}")
    return "\n".join(lines)


def _fmt(k: str, v: object) -> object:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if k.endswith("_bytes"):
            return gib(v)
        if k.endswith("_bytes_per_second"):
            return rate(v)
        if k.endswith("seconds"):
            return duration(v)
    return v
