"""oomwatch against what users deploy today, side by side on the same traces.

    python bench/compare_rules.py [--scrape 15] [--markdown]

- threshold: `used / total > 0.9` held `for: 1m` (the usual GPU-memory alert);
- predict_linear: `predict_linear(used[1m], 600) > total` (node-mixin fill-up style), no `for`;
- oomwatch: GPUOOMImminent (and GPUMemorySpikeRisk, whose job is the spike case), from `oomwatch replay`.

The two rules are evaluated as Prometheus would: on samples scraped every `--scrape` seconds, evaluated
every scrape, predict_linear as a least-squares line over the window's samples. Ground truth comes from
the recordings' own annotations (the `oom` event), read here only to score: a real OOM needs a page before
it (lead time = OOM - first page); a trace without OOM must not page (a false alarm).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from oomwatch.analysis.analyzer import Analyzer  # noqa: E402
from oomwatch.model import Sample  # noqa: E402
from oomwatch.trace import read_trace  # noqa: E402

EX = os.path.join(ROOT, "daemon", "examples")


def load_real(name):
    h, it = read_trace(os.path.join(EX, name + ".jsonl"))
    recs = list(it)
    oom = None
    with open(os.path.join(EX, name + ".jsonl")) as f:  # scoring only: the recording's own annotations
        leak = json.loads(f.readline())["expect"]["leak"]
        for line in f:
            if '"event": "oom"' in line:
                oom = json.loads(line)["t"]
    return h.gpus, recs, oom, leak


def load_synth(make, seconds=120):
    import synth

    fn, state = synth.oom_clip(make())
    samples = synth.trace([fn], seconds)
    return synth.info(1), [(s.t, s) for s in samples], state["dead"], state["dead"] is not None


def rules(gpus, recs, scrape):
    """First firing time of each naive rule on any card (trace seconds), or None."""
    ts, used = [], []
    for t, r in recs:
        if isinstance(r, Sample):
            ts.append(t)
            used.append([g.used_bytes or 0 for g in r.gpus])
    ts, used = np.array(ts), np.array(used, dtype=float)
    total = np.array([g.total_bytes for g in gpus], dtype=float)
    grid = np.arange(ts[0], ts[-1], scrape)
    idx = np.searchsorted(ts, grid, side="right") - 1
    sc_t, sc_u = grid, used[idx]
    thr = pl = None
    above_since = [None] * len(gpus)
    for k, t in enumerate(sc_t):
        for i in range(len(gpus)):
            if sc_u[k, i] / total[i] > 0.9:
                above_since[i] = t if above_since[i] is None else above_since[i]
                if thr is None and t - above_since[i] >= 60:
                    thr = t
            else:
                above_since[i] = None
            w = (sc_t > t - 60) & (sc_t <= t)
            if pl is None and w.sum() >= 2:
                x, y = sc_t[w], sc_u[w, i]
                slope, icpt = np.polyfit(x - t, y, 1)
                if icpt + slope * 600 > total[i]:
                    pl = t
    return thr, pl


def oomwatch(gpus, recs):
    a = Analyzer(gpus)
    first = {}
    for _, r in recs:
        if isinstance(r, Sample):
            for tr in a.add_sample(r):
                if tr.state == "firing":
                    first.setdefault(tr.alert.alertname, tr.t)
        else:
            a.add_proc(r)
    return first


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scrape", type=float, default=15.0)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    import synth

    cases = [
        (n, lambda n=n: load_real(n))
        for n in ("vllm_startup", "sawtooth", "stray", "tp_imbalance", "spike", "staircase")
    ]
    cases += [
        ("synthetic: ramp", lambda: load_synth(lambda: synth.ramp(base=0.3, rate=1.5 * synth.GiB))),
        ("synthetic: rising sawtooth", lambda: load_synth(lambda: synth.sawtooth(trough_step=0.05))),
        (
            "synthetic: fine staircase",
            lambda: load_synth(lambda: synth.staircase(base=0.4, step=1.5 * synth.GiB, every=0.8)),
        ),
        ("synthetic: start at 80%", lambda: load_synth(lambda: synth.startup(0.8), 90)),
    ]
    rows = []
    for name, load in cases:
        gpus, recs, oom, leak = load()
        thr, pl = rules(gpus, recs, args.scrape)
        ow = oomwatch(gpus, recs)
        page = ow.get("GPUOOMImminent")
        if name == "spike":
            page = ow.get("GPUMemorySpikeRisk")
        rows.append((name, oom, leak, thr, pl, page))

    def cell(fire, oom, leak):
        at = "" if fire is None else f" (at {fire:.0f} s)"
        if oom is None and leak:  # a real leak; the workload stopped before its OOM
            return f"paged, right{at}" if fire is not None else "missed the leak"
        if oom is None:
            return f"false alarm{at}" if fire is not None else "quiet, right"
        if fire is None or fire > oom:
            return "missed"
        return f"{oom - fire:.1f} s before{at}"

    out = []
    out.append(
        "| trace | real OOM at | `used/total > 0.9 for 1m` | `predict_linear(used[1m], 600) > total` | oomwatch |"
    )
    out.append("|---|---|---|---|---|")
    score = {"thr": [0, 0], "pl": [0, 0], "ow": [0, 0]}
    for name, oom, leak, thr, pl, page in rows:
        out.append(
            f"| {name} | {'-' if oom is None else f'{oom:.1f} s'} | {cell(thr, oom, leak)} "
            f"| {cell(pl, oom, leak)} | {cell(page, oom, leak)} |"
        )
        for k, f in (("thr", thr), ("pl", pl), ("ow", page)):
            if oom is None and not leak and f is not None:
                score[k][0] += 1
            if (oom is not None and (f is None or f > oom)) or (oom is None and leak and f is None):
                score[k][1] += 1
    out.append(
        f"| **false alarms / missed** | | {score['thr'][0]} / {score['thr'][1]} | {score['pl'][0]} / "
        f"{score['pl'][1]} | {score['ow'][0]} / {score['ow'][1]} |"
    )
    print(f"Scrape and rule evaluation every {args.scrape:g} s for the two rules; oomwatch on every sample.\n")
    print("\n".join(out))


if __name__ == "__main__":
    main()
