"""Annotated charts of a run, one per card: `oomwatch replay TRACE --plot FILE.png` and `diagnose --plot`.

Warm-up shaded, the capacity (OOM) line and the engine's budget line, the leak fit projected to the OOM line
with its ETA, transient spikes marked, and a vertical line where each alert fired. matplotlib is an optional
extra (`pip install oomwatch[plot]`). What the chart marks is also written into the PNG's metadata
("oomwatch" key, JSON), so tools and tests can read the ETA and alert times without looking at pixels.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from daemon.analysis.alerts import Transition
    from daemon.analysis.analyzer import Analyzer
    from daemon.model import Sample

__all__ = ["COLORS", "GiB", "PlotUnavailable", "Recorder", "plot"]


class PlotUnavailable(RuntimeError):  # noqa: N818 - the name the CLI catches
    pass


GiB = float(1 << 30)
COLORS = {"critical": "#c62828", "warning": "#ef6c00"}


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


def plot(path: str, analyzer: Analyzer, recorder: Recorder, transitions: Iterable[Transition]) -> dict[str, Any]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotUnavailable("--plot needs matplotlib: pip install 'oomwatch[plot]'") from None
    cards = list(analyzer.gpus.values())
    fig, axes = plt.subplots(len(cards), 1, figsize=(11, 3.6 * len(cards)), squeeze=False)
    marks: dict[str, Any] = {"gpus": {}}
    t0 = analyzer.t0 or 0.0
    for ax, st in zip(axes[:, 0], cards, strict=True):
        idx = st.info.index
        ts, us = recorder.series.get(idx, ([], []))
        cap = st.capacity_bytes
        x = [t - t0 for t in ts]
        ax.plot(x, [u / GiB for u in us], color="#1565c0", lw=1.4, label="used")
        ax.axhline(cap / GiB, color="#c62828", ls="--", lw=1, label=f"capacity {cap / GiB:.1f} GiB (OOM)")
        if st.budget_bytes:
            ax.axhline(st.budget_bytes / GiB, color="#757575", ls=":", lw=1, label="engine budget")
        m: dict[str, Any] = {"alerts": [], "eta_seconds": None, "warmup": None, "spikes": []}
        if st.busy_since is not None and st.warm_end is not None and st.warm_end > st.busy_since:
            ax.axvspan(st.busy_since - t0, st.warm_end - t0, color="#9e9e9e", alpha=0.2, label="warm-up")
            m["warmup"] = [round(st.busy_since - t0, 2), round(st.warm_end - t0, 2)]
        lv = st.last_leak_verdict
        if lv is not None and st.last_leak_t is not None and lv.eta_seconds is not None:
            ta = st.last_leak_t - t0
            start = max(lv.floor_bytes, lv.peak_bytes if lv.shape == "sawtooth" else lv.floor_bytes)
            xs = [ta, ta + lv.eta_seconds]
            ax.plot(
                xs,
                [start / GiB, cap / GiB],
                color="#c62828",
                lw=1.2,
                ls="-.",
                label=f"leak {lv.leak_bytes_per_second / (1 << 20):.0f} MiB/s",
            )
            ax.annotate(
                f"OOM in {lv.eta_seconds:.0f} s",
                (xs[1], cap / GiB),
                textcoords="offset points",
                xytext=(-40, 6),
                color="#c62828",
                fontsize=9,
            )
            m["eta_seconds"] = round(lv.eta_seconds, 1)
            m["eta_at"] = round(ta, 2)
        # spikes: short peaks well above a level that holds before and after them (up and back within ~2 s);
        # a sawtooth's slow ramp to its peak is not one
        w = max(2, int(2.0 / recorder.bucket_s))
        k = max(1, int(1.0 / recorder.bucket_s))
        thr = analyzer.cfg.transient_fraction * cap
        for i in range(w, len(us) - w):
            before, after = min(us[i - w : i]), min(us[i + 1 : i + w + 1])
            sudden = us[i - k] - before < thr / 2
            if (
                sudden
                and us[i] - max(before, after) > thr
                and us[i] == max(us[i - w : i + w + 1])
                and us[i] > us[i - 1]
            ):
                ax.plot(x[i], us[i] / GiB, "v", color="#ef6c00", ms=8, label="spike" if not m["spikes"] else None)
                m["spikes"].append(round(x[i], 2))
        for tr in transitions:
            labels = dict(tr.alert.labels)
            if tr.state != "firing" or labels.get("gpu") not in (None, str(idx)):
                continue
            ax.axvline(tr.t - t0, color=COLORS.get(tr.alert.severity, "#555"), lw=0.9, alpha=0.8)
            ax.text(
                tr.t - t0,
                ax.get_ylim()[1] * 0.97,
                tr.alert.alertname,
                rotation=90,
                va="top",
                ha="right",
                fontsize=8,
                color=COLORS.get(tr.alert.severity, "#555"),
            )
            m["alerts"].append({"alert": tr.alert.alertname, "t": round(tr.t, 3)})
        ax.set_title(
            f"GPU {idx} {st.info.name}: {analyzer.summary_shape(st)}" + (" (leak)" if st.ever_leak else ""), fontsize=11
        )
        ax.set_ylabel("GiB")
        ax.set_xlabel("seconds")
        ax.set_ylim(0, cap / GiB * 1.08)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
        marks["gpus"][str(idx)] = m
    fig.tight_layout()
    fig.savefig(path, dpi=90, metadata={"oomwatch": json.dumps(marks)})
    plt.close(fig)
    return marks
