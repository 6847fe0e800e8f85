"""Coarse steps: does the analysis give, at a fleet's scrape step, the verdict it gives at full rate?

    python bench/coarse.py [--steps 15 60] [--fast] [--only NAME ...] [--jobs N] [--json OUT]

Every trace of bench/detection.py's three sources (the project's generator, the second generator, the real
recordings) is replayed twice: as recorded, and read one sample a step (the first reading of each step, as
a Prometheus scrape of dcgm-exporter keeps it), through exactly what `oomwatch replay` runs. Per card, the
two alerts that matter (GPUOOMImminent, GPUMemoryLeak) are compared, and each difference is classed:

- `new_false`: the coarse step alone raises an alert on a healthy card: a backtest would call a healthy
  card a leak. The one class that must stay empty.
- `unseen`: an alert replay raises on a leak the step cannot show: the leak's span before its OOM (or its
  deadline) holds fewer steps than any trend is judged on (`trend_min_blocks`).
- `missed`: an alert replay raises on a leak that spans enough steps, and the coarse step does not.
- `extra`: the coarse step alone flags a card that truly leaks (replay misses it).
- `quieter`: replay's alert on a healthy card (its false alert) that the coarse step does not raise.

The scorer alone reads the truth (bench/detection.py's). Progress goes to stderr; the totals per source and
step, and every difference, to stdout (and, with --json, to a file).
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench import detection as D  # noqa: E402, N812

ALERTS = (D.PAGE, D.LEAK)
CLASSES = ("new_false", "missed", "unseen", "extra", "quieter")


def fired(item: str, step: float) -> tuple[dict[str, set[str]], dict, float]:
    """({gpu: alerts fired}, truth, trace length) for `item` read one sample every `step` s (0: all)."""
    from oomwatch.analysis.analyzer import Analyzer
    from oomwatch.feed import feed
    from oomwatch.model import Sample
    from oomwatch.trace import parse_header, parse_line

    header, recs, truth = D.load(item)
    an = Analyzer(parse_header(json.dumps(header), item).gpus)
    kept, last = [], -float("inf")
    for o in recs:
        r = parse_line(o)
        if r is None:
            continue
        if isinstance(r, Sample):
            if step and r.t - last < step:
                continue
            last = r.t
        kept.append(r)
    trans: list = []
    feed(an, kept, trans.append)
    out: dict[str, set[str]] = collections.defaultdict(set)
    for tr in trans:
        if tr.state == "firing" and tr.alert.alertname in ALERTS:
            out[dict(tr.alert.labels).get("gpu", "")].add(tr.alert.alertname)
    return out, truth, truth["duration"]


def _shown(item: str) -> str:
    """A trace as the report names it: a scenario by name, a file by its name alone (no machine's path)."""
    return item if D.scenario_of(item) is not None else os.path.basename(item)


def leak_span(truth: dict, gpu: int) -> float:
    """The longest span a true leak episode of this card has to be seen in (onset to OOM or deadline)."""
    spans = []
    for e in truth["episodes"]:
        if e["gpu"] != gpu or e["kind"] != "leak":
            continue
        end = e["oom"] if e.get("oom") is not None else e["onset"] + (e.get("deadline_s") or 0.0)
        spans.append(max(0.0, end - e["onset"]))
    return max(spans, default=0.0)


def compare(item: str, steps: tuple[float, ...]) -> dict:
    from oomwatch.config import AnalysisConfig

    min_steps = AnalysisConfig().trend_min_blocks
    full, truth, _ = fired(item, 0.0)
    leaking = {e["gpu"] for e in truth["episodes"] if e["kind"] == "leak"}
    gpus = sorted({int(g) for g in full if g.isdigit()} | leaking)
    res: dict = {"item": _shown(item), "name": D.run_name(item), "source": D.source_of(item), "steps": {}}
    for step in steps:
        coarse, _, _ = fired(item, step)
        diffs = []
        for g in sorted(set(gpus) | {int(x) for x in coarse if x.isdigit()}):
            a, b = full.get(str(g), set()), coarse.get(str(g), set())
            for alert in ALERTS:
                if (alert in a) == (alert in b):
                    continue
                sick = g in leaking
                if alert in b:
                    kind = "extra" if sick else "new_false"
                elif not sick:
                    kind = "quieter"
                else:
                    kind = "unseen" if leak_span(truth, g) < min_steps * step else "missed"
                diffs.append({"gpu": g, "alert": alert, "class": kind})
        res["steps"][str(int(step))] = diffs
    return res


def _one(args: tuple[str, tuple[float, ...]]) -> dict:
    item, steps = args
    try:
        return compare(item, steps)
    except Exception as e:  # noqa: BLE001  a trace the analysis cannot read is reported, the others go on
        return {"item": _shown(item), "name": D.run_name(item), "error": f"{type(e).__name__}: {e}"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python bench/coarse.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=float, nargs="+", default=[15.0, 60.0], help="scrape steps in s (15 60)")
    ap.add_argument("--fast", action="store_true", help="only the CI subset (plus the recordings)")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="only these scenarios or trace files")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--json", metavar="OUT", help="also write the results here")
    a = ap.parse_args(argv)
    if any(s <= 0 for s in a.steps):
        print("--steps: every step must be above 0 s", file=sys.stderr)
        return 2
    a.reseed = 0
    items, skipped = D.items_for(a)
    bad = [i for i in items if D.scenario_of(i) is None and not os.path.isfile(i)]
    if bad:
        print(f"unknown scenario or missing trace: {bad[0]}", file=sys.stderr)
        return 2
    steps = tuple(a.steps)
    t0 = time.perf_counter()
    results = []
    with multiprocessing.get_context("fork").Pool(max(1, a.jobs)) as pool:
        for k, r in enumerate(pool.imap_unordered(_one, [(i, steps) for i in items]), 1):
            results.append(r)
            print(f"[{k}/{len(items)}] {r['name']}{': ERROR ' + r['error'] if 'error' in r else ''}", file=sys.stderr)
    errors = [r for r in results if "error" in r]
    tot: dict = {}
    for src in D.SOURCES:
        for step in steps:
            c = collections.Counter()
            rs = [r for r in results if r.get("source") == src]
            for r in rs:
                for d in r["steps"][str(int(step))]:
                    c[d["class"]] += 1
                c["traces_agreeing"] += not r["steps"][str(int(step))]
            if rs:
                tot[f"{src} @ {int(step)} s"] = {"traces": len(rs), **{k: c[k] for k in ("traces_agreeing", *CLASSES)}}
    for key, row in tot.items():
        print(key, json.dumps(row))
    for r in sorted((r for r in results if "error" not in r), key=lambda r: r["name"]):
        for step, diffs in r["steps"].items():
            for d in diffs:
                print(f"  {d['class']:9s} {step:>3s} s  {r['name']}  GPU {d['gpu']}  {d['alert']}")
    for s in skipped:
        print("skipped:", s)
    print(f"{len(results)} traces in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"steps": list(steps), "totals": tot, "results": results, "skipped": skipped}, f, indent=1)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
