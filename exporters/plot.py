"""Annotated charts of a run, one per card: `oomwatch replay TRACE --plot FILE.png` and `diagnose --plot`.

Each card gets a panel for the whole trace and, when the trace is longer than a window the analysis keeps
(15 minutes, 6 hours, 7 days), one panel per shorter window, so a slow leak shows over hours and a spike
still shows in the last minutes. Every panel is drawn from the analysis' own history level for its window
(daemon/analysis/history.py): the maximum per bucket as the line (a spike never averages away) and the
floor (minimum per bucket) lightly under it. On top: warm-up shaded, the capacity (OOM) line and the
engine's budget line, the leak fit projected to the OOM line with its ETA, transient spikes marked, a
vertical line where each alert fired, and each episode (alert fired .. resolved) as a shaded span labelled
with its alert, leak rate and ETA, the reason it ended in the legend. matplotlib is an optional extra
(`pip install oomwatch[plot]`). What the chart marks is also written into the PNG's metadata ("oomwatch"
key, JSON), so tools and tests can read the windows, episodes, ETA and alert times without looking at pixels.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oomwatch.analysis.alerts import Transition
    from oomwatch.analysis.analyzer import Analyzer, GpuState
    from oomwatch.model import Sample

__all__ = ["COLORS", "GiB", "PlotUnavailable", "Recorder", "duration", "plot", "rate", "windows"]


class PlotUnavailable(RuntimeError):  # noqa: N818 - the name the CLI catches
    pass


GiB = float(1 << 30)
COLORS = {"critical": "#c62828", "warning": "#ef6c00"}
MiB = float(1 << 20)
#: Windows the history keeps (AnalysisConfig.history_levels spans): a panel each when the trace is longer.
WINDOW_NAMES = {900.0: "15 min", 21600.0: "6 h", 604800.0: "7 d"}
#: Time unit of a panel's x axis by its span: (up to this many seconds, unit name, seconds per unit).
UNITS = ((1200.0, "seconds", 1.0), (3 * 3600.0, "minutes", 60.0), (3 * 86400.0, "hours", 3600.0))
#: How far past the end of the top panel the leak fit is drawn (share of its span) before it is cut short.
PROJECT_SHARE = 0.35
#: Below the lowest floor of a zoomed (shorter-window) panel, this share of its gap to capacity stays visible.
ZOOM_MARGIN = 0.25


class Recorder:
    """Collects what the chart needs while the analysis runs (used bytes per card, at bucket resolution)."""

    def __init__(self, bucket_s: float = 0.25):
        self.bucket_s = bucket_s
        self.series: dict[int, tuple[list[float], list[int]]] = {}  # card -> (times, used bytes)
        self._last: dict[int, float] = {}

    def add(self, sample: Sample) -> None:
        for g in sample.gpus:
            if g.used_bytes is None:
                continue
            if sample.t - self._last.get(g.index, -1e9) >= self.bucket_s:
                ts, us = self.series.setdefault(g.index, ([], []))
                ts.append(sample.t)
                us.append(g.used_bytes)
                self._last[g.index] = sample.t
            else:  # keep the bucket's peak: spikes must show
                ts, us = self.series[g.index]
                if g.used_bytes > us[-1]:
                    us[-1] = g.used_bytes


def duration(seconds: float) -> str:
    """A duration as people read it on a chart (45 s, 12 min, 13.6 h, 2.1 d)."""
    s = abs(seconds)
    if s < 10:
        return f"{seconds:g} s"
    if s < 120:
        return f"{seconds:.0f} s"
    if s < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if s < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def rate(bytes_per_second: float) -> str:
    """A leak rate in the unit that keeps it readable (MiB/s for fast leaks, MiB/h for slow ones)."""
    if abs(bytes_per_second) >= MiB:
        return f"{bytes_per_second / MiB:.0f} MiB/s"
    return f"{bytes_per_second * 3600 / MiB:.0f} MiB/h"


def windows(st: GpuState, t0: float, now: float) -> list[dict[str, Any]]:
    """The panels of one card, longest first: the whole trace (or as much of it as the coarsest level holds),
    then each kept window shorter than the trace. Each names the history level it is drawn from."""
    span = max(now - t0, 0.0)
    levels = st.history.levels
    longest = levels[-1].cap * levels[-1].bucket_s
    out: list[dict[str, Any]] = []
    whole = min(span, longest)
    label = (
        f"whole trace ({duration(span)})" if span <= longest else f"last {WINDOW_NAMES.get(longest, duration(longest))}"
    )
    cand = [(whole, label)] + [
        (r.cap * r.bucket_s, f"last {WINDOW_NAMES.get(r.cap * r.bucket_s, duration(r.cap * r.bucket_s))}")
        for r in reversed(levels)
        if r.cap * r.bucket_s < whole
    ]
    for secs, lab in cand:
        ring = st.history.pick(secs)
        out.append({"label": lab, "seconds": round(secs, 3), "bucket_s": ring.bucket_s, "ring": ring})
    return out


def plot(
    path: str,
    analyzer: Analyzer,
    recorder: Recorder,
    transitions: Iterable[Transition],
    card: str | None = None,
    since: str | None = None,
) -> dict[str, Any]:
    """Draw every card of `analyzer` into `path`; returns the marks (also in the PNG's metadata). `card` names
    the card in the top panel's title instead of its index and model (a backtest's node and GPU); `since` says
    when time 0 was (a backtest's first sample, in UTC) on the x axes instead of "the trace started"."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotUnavailable("--plot needs matplotlib: pip install 'oomwatch[plot]'") from None
    cards = list(analyzer.gpus.values())
    t0 = analyzer.t0 or 0.0
    now = analyzer.now if analyzer.now is not None else t0
    trans = list(transitions)
    severity = {tr.alert.alertname: tr.alert.severity for tr in trans}
    panels = {st.info.index: windows(st, t0, now) for st in cards}
    rows = sum(len(p) for p in panels.values()) or 1
    fig, axes = plt.subplots(rows, 1, figsize=(14, 3.4 * rows), squeeze=False)
    axs = list(axes[:, 0])
    marks: dict[str, Any] = {"gpus": {}, "t0": round(t0, 3)}  # alert and episode times are trace times
    for st in cards:
        idx = st.info.index
        m: dict[str, Any] = {"alerts": [], "eta_seconds": None, "warmup": None, "spikes": [], "windows": []}
        spikes = _spikes(analyzer, recorder, st)
        m["spikes"] = [round(s - t0, 2) for s, _ in spikes]
        alerts = [tr for tr in trans if tr.state == "firing" and dict(tr.alert.labels).get("gpu") in (None, str(idx))]
        m["alerts"] = [{"alert": tr.alert.alertname, "t": round(tr.t, 3)} for tr in alerts]
        # this card's episodes (and any without a card, as its alerts); "panels": where each is drawn
        eps = [
            {
                "alert": e["alert"],
                "start": e["start"],
                "end": e["end"],
                "open": e["end"] is None,
                "leak_bytes_per_second": e.get("leak_bytes_per_second"),
                "eta_seconds": e.get("eta_seconds"),
                "ended_because": e.get("ended_because"),
                "label": _episode_label(e),
                "panels": [],
            }
            for e in analyzer.episodes
            if e.get("gpu") in (None, str(idx))
        ]
        m["episodes"] = eps
        for pi, w in enumerate(panels[idx]):
            ax = axs.pop(0)
            top = pi == 0
            _panel(ax, analyzer, st, w, t0, now, top, spikes, alerts, eps, severity, m, card, since)
            ring = w.pop("ring")
            _, lo, hi, _ = ring.since(max(now - w["seconds"], t0))
            w["buckets"] = len(hi)
            w["peak_bytes"] = int(hi.max()) if len(hi) else None  # the max per bucket keeps the peak
            w["floor_bytes"] = int(lo.min()) if len(lo) else None
            w["from"] = round(max(now - w["seconds"], t0) - t0, 3)
            w["to"] = round(now - t0, 3)
            m["windows"].append(w)
        marks["gpus"][str(idx)] = m
    fig.tight_layout()
    fig.savefig(path, dpi=90, metadata={"oomwatch": json.dumps(marks)}, bbox_inches="tight")
    plt.close(fig)
    return marks


def _episode_label(e: dict[str, Any]) -> str:
    text = str(e["alert"])
    if e.get("leak_bytes_per_second"):
        text += f" {rate(float(e['leak_bytes_per_second']))}"
        if e.get("eta_seconds") is not None:
            text += f", OOM in {duration(float(e['eta_seconds']))}"
    return text


def _spikes(analyzer: Analyzer, recorder: Recorder, st: GpuState) -> list[tuple[float, float]]:
    """Short peaks well above a level that holds before and after them (up and back within ~2 s), from the
    recorder's full-rate series; a sawtooth's slow ramp to its peak is not one. (time, used bytes) each."""
    ts, us = recorder.series.get(st.info.index, ([], []))
    w = max(2, int(2.0 / recorder.bucket_s))
    k = max(1, int(1.0 / recorder.bucket_s))
    thr = analyzer.cfg.transient_fraction * st.capacity_bytes
    out: list[tuple[float, float]] = []
    for i in range(w, len(us) - w):
        before, after = min(us[i - w : i]), min(us[i + 1 : i + w + 1])
        sudden = us[i - k] - before < thr / 2
        if sudden and us[i] - max(before, after) > thr and us[i] == max(us[i - w : i + w + 1]) and us[i] > us[i - 1]:
            out.append((ts[i], float(us[i])))
    return out


def _panel(
    ax: Any,
    analyzer: Analyzer,
    st: GpuState,
    w: dict[str, Any],
    t0: float,
    now: float,
    top: bool,
    spikes: list[tuple[float, float]],
    alerts: list[Transition],
    eps: list[dict[str, Any]],
    severity: dict[str, str],
    m: dict[str, Any],
    card: str | None = None,
    since: str | None = None,
) -> None:
    """One window of one card; the top panel (the whole trace) also carries the leak fit and its ETA."""
    secs = float(w["seconds"])
    lo_t = max(now - secs, t0)
    unit, scale = next(((u, s) for lim, u, s in UNITS if secs <= lim), ("days", 86400.0))

    def x(t: float) -> float:
        return (t - t0) / scale

    t, mn, mx, _ = w["ring"].since(lo_t)
    xs = (t - t0) / scale
    cap = st.capacity_bytes
    ax.fill_between(xs, mn / GiB, mx / GiB, color="#1565c0", alpha=0.15, lw=0, label="floor .. peak per bucket")
    ax.plot(xs, mn / GiB, color="#1565c0", lw=0.6, alpha=0.45)
    ax.plot(xs, mx / GiB, color="#1565c0", lw=1.3, label=f"used (max per {duration(w['bucket_s'])})")
    ax.axhline(cap / GiB, color="#c62828", ls="--", lw=1, label=f"capacity {cap / GiB:.1f} GiB (OOM)")
    if st.budget_bytes:
        ax.axhline(st.budget_bytes / GiB, color="#757575", ls=":", lw=1, label="engine budget")
    ymax = cap / GiB * 1.08
    band = ax.get_xaxis_transform()  # x in data, y as a share of the panel's height
    if st.busy_since is not None and st.warm_end is not None and st.warm_end > st.busy_since:
        if st.warm_end >= lo_t:
            ax.axvspan(x(max(st.busy_since, lo_t)), x(st.warm_end), color="#9e9e9e", alpha=0.2, label="warm-up")
        m["warmup"] = [round(st.busy_since - t0, 2), round(st.warm_end - t0, 2)]
    right = x(now)
    lv = st.last_leak_verdict
    if lv is not None and st.last_leak_t is not None and lv.eta_seconds is not None:
        ta = st.last_leak_t
        m["eta_seconds"] = round(lv.eta_seconds, 1)
        m["eta_at"] = round(ta - t0, 2)
        if top:
            start = max(lv.floor_bytes, lv.peak_bytes if lv.shape == "sawtooth" else lv.floor_bytes)
            end_t = ta + lv.eta_seconds
            horizon = now + PROJECT_SHARE * max(now - lo_t, 1.0)
            cut = min(end_t, horizon)
            frac = 1.0 if end_t <= ta else (cut - ta) / (end_t - ta)
            y_end = start + frac * (cap - start)
            ax.plot(
                [x(ta), x(cut)],
                [start / GiB, y_end / GiB],
                color="#c62828",
                lw=1.2,
                ls="-.",
                label=f"leak {rate(lv.leak_bytes_per_second)}",
            )
            ax.annotate(
                f"OOM in {duration(lv.eta_seconds)}" + (" \u2192" if cut < end_t else ""),
                (x(cut), y_end / GiB),
                textcoords="offset points",
                xytext=(-60, 6),
                color="#c62828",
                fontsize=9,
            )
            right = max(right, x(cut))
    drawn = False
    for ts, u in spikes:
        if ts >= lo_t:
            ax.plot(x(ts), u / GiB, "v", color="#ef6c00", ms=7, label=None if drawn else "spike")
            drawn = True
    for tr in alerts:
        if tr.t < lo_t:
            continue
        color = COLORS.get(tr.alert.severity, "#555")
        ax.axvline(x(tr.t), color=color, lw=0.9, alpha=0.8)
        ax.text(
            x(tr.t),
            0.97,
            tr.alert.alertname,
            rotation=90,
            va="top",
            ha="right",
            fontsize=8,
            color=color,
            transform=band,
        )
    for i, e in enumerate(eps):
        end = now if e["end"] is None else float(e["end"])
        if end < lo_t:
            continue
        color = COLORS.get(severity.get(e["alert"], ""), "#6a1b9a")
        why = "still firing when the trace ended" if e["open"] else e["ended_because"] or "resolved"
        ax.axvspan(
            x(max(float(e["start"]), lo_t)),
            x(end),
            color=color,
            alpha=0.1,
            hatch="//" if e["open"] else None,
            label=textwrap.fill(f"episode {i + 1}: {e['label']}; ended: {why}", 48, subsequent_indent="  "),
        )
        ax.text(
            x(max(float(e["start"]), lo_t)),
            0.04 + 0.08 * (i % 3),
            f" {i + 1}: {e['label']}",
            fontsize=8,
            color=color,
            va="bottom",
            ha="left",
            transform=band,
        )
        e["panels"].append(len(m["windows"]))
    who = card or f"GPU {st.info.index} {st.info.name}"
    name = f"{who}: {analyzer.summary_shape(st)}" + (" (leak)" if st.ever_leak else "")
    ax.set_title(f"{name}, {w['label']}" if top else f"{card or f'GPU {st.info.index}'}, {w['label']}", fontsize=11)
    ax.set_ylabel("GiB")
    ax.set_xlabel(f"{unit} since {since or 'the trace started'}")
    ax.set_xlim(x(lo_t), right + (right - x(lo_t)) * 0.01)
    # the top panel keeps 0 at the bottom (how full the card is); shorter windows zoom to their floor, so
    # a growth of a few hundred MiB on an 80 GiB card still shows as a slope
    bottom = 0.0
    if not top and len(mn):
        lo = float(mn.min()) / GiB
        bottom = max(0.0, lo - ZOOM_MARGIN * max(cap / GiB - lo, 0.5))
    ax.set_ylim(bottom, ymax)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, borderaxespad=0.0)
