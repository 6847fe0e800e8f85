"""Robustness: does a verdict hold when the recorder is not the one that made the trace?

    python bench/robustness.py [--only NAME ...] [--fast] [--jobs N] [--json OUT] [--perturb P ...]

Traces from other hands differ from ours in how they were sampled, not only in what the server did. Every
trace of bench/detection.py's three sources is scored as recorded and once per perturbation below, each a
thing real samplers do, drawn with a seed of its own per trace (the same run gives the same figures):

- `jitter`: each reading's time moves by up to 40% of the interval around it (a Python sampler on a busy
  host; the readings keep their order).
- `drop`: one reading in five is lost at random (NVML calls that time out, a sampler that skips).
- `stall`: the recorder stops for 20 readings every 600 (a GC pause, a node under pressure, a scrape lost).
- `noise`: every reading is off by a few MiB (sd 4 MiB; another context's small allocations, the driver's
  own bookkeeping), free memory moving with it.

A perturbation changes the recorder, never the truth, so the gate is the one of bench/detection.py: a new
false page or false leak warning under any perturbation is a regression. A leak the perturbed trace no
longer shows in time (lost readings near an OOM) is reported as `lost`, not hidden. The scorer alone reads
the truth. Totals per source and perturbation go to stdout (and, with --json, to a file), each trace that
passes as recorded and fails perturbed is named with its reason (and one that only passes perturbed).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import random
import sys
import time
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench import detection as D  # noqa: E402, N812

JITTER_SHARE = 0.4  # of the interval around a reading: the readings keep their order
DROP_SHARE = 0.2  # readings lost at random
STALL_EVERY, STALL_LEN = 600, 20  # readings: a stop of 20 every 600
NOISE_SD_BYTES = 4 << 20  # a few MiB, the size of the smallest allocations a CUDA context makes


def _samples(recs: list) -> list[int]:
    from oomwatch.model import Sample

    return [k for k, r in enumerate(recs) if isinstance(r, Sample)]


def jitter(recs: list, rng: random.Random) -> list:
    idx = _samples(recs)
    out = list(recs)
    for a, k, b in zip([None, *idx[:-1]], idx, [*idx[1:], None], strict=True):
        t = recs[k].t
        lo = t - JITTER_SHARE * (t - recs[a].t) if a is not None else t
        hi = t + JITTER_SHARE * (recs[b].t - t) if b is not None else t
        out[k] = dataclasses.replace(recs[k], t=rng.uniform(lo, hi))
    return out


def drop(recs: list, rng: random.Random) -> list:
    keep = set(_samples(recs))
    lost = {k for k in keep if rng.random() < DROP_SHARE}
    return [r for k, r in enumerate(recs) if k not in lost]


def stall(recs: list, rng: random.Random) -> list:
    idx = _samples(recs)
    off = rng.randrange(STALL_EVERY)
    lost = {k for n, k in enumerate(idx) if (n + off) % STALL_EVERY < STALL_LEN}
    return [r for k, r in enumerate(recs) if k not in lost]


def noise(recs: list, rng: random.Random) -> list:
    out = list(recs)
    for k in _samples(recs):
        s = recs[k]
        gpus = []
        for g in s.gpus:
            if g.used_bytes is None or g.used_bytes == 0:  # an empty card reads 0 exactly
                gpus.append(g)
                continue
            e = int(rng.gauss(0.0, NOISE_SD_BYTES))
            e = max(e, -g.used_bytes)
            if g.free_bytes is not None:
                e = min(e, g.free_bytes)
            free = None if g.free_bytes is None else g.free_bytes - e
            gpus.append(dataclasses.replace(g, used_bytes=g.used_bytes + e, free_bytes=free))
        out[k] = dataclasses.replace(s, gpus=tuple(gpus))
    return out


PERTURBATIONS = {"jitter": jitter, "drop": drop, "stall": stall, "noise": noise}


def _transform(name: str, item: str):
    seed = zlib.crc32(f"{name}:{D.run_name(item)}".encode())
    return lambda recs: PERTURBATIONS[name](recs, random.Random(seed))


def _one(args: tuple[str, tuple[str, ...]]) -> dict:
    item, names = args
    base = D.run_one(item)
    out = {"name": base["name"], "source": base.get("source"), "base": _brief(base), "perturbed": {}}
    for name in names:
        out["perturbed"][name] = _brief(D.run_one(item, _transform(name, item)))
    return out


def _brief(r: dict) -> dict:
    if "error" in r:
        return {"error": r["error"], "passed": False, "fail": [r["error"]]}
    return {k: r[k] for k in ("passed", "false_pages", "false_leaks", "missed_ooms", "fail")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python bench/robustness.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--perturb", nargs="+", choices=sorted(PERTURBATIONS), default=list(PERTURBATIONS))
    ap.add_argument("--fast", action="store_true", help="only the CI subset (plus the recordings)")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="only these scenarios or trace files")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--json", metavar="OUT", help="also write the results here")
    a = ap.parse_args(argv)
    a.reseed = 0
    items, skipped = D.items_for(a)
    bad = [i for i in items if D.scenario_of(i) is None and not os.path.isfile(i)]
    if bad:
        print(f"unknown scenario or missing trace: {bad[0]}", file=sys.stderr)
        return 2
    names = tuple(a.perturb)
    t0 = time.perf_counter()
    results = []
    with multiprocessing.get_context("fork").Pool(max(1, a.jobs)) as pool:
        for k, r in enumerate(pool.imap_unordered(_one, [(i, names) for i in items]), 1):
            results.append(r)
            print(f"[{k}/{len(items)}] {r['name']}", file=sys.stderr)
    tot: dict = {}
    for src in D.SOURCES:
        rs = [r for r in results if r["source"] == src]
        if not rs:
            continue
        for name in ("as recorded", *names):
            b = [r["base"] if name == "as recorded" else r["perturbed"][name] for r in rs]
            ok = [x for x in b if "error" not in x]
            tot[f"{src} {name}"] = {
                "traces": len(rs),
                "passed": sum(x["passed"] for x in b),
                "false_pages": sum(x["false_pages"] for x in ok),
                "false_leaks": sum(x["false_leaks"] for x in ok),
                "missed_ooms": sum(x["missed_ooms"] for x in ok),
                "errors": len(b) - len(ok),
            }
    for key, row in tot.items():
        print(f"{key:28s} {json.dumps(row)}")
    regressions = 0
    for r in sorted(results, key=lambda r: r["name"]):
        b = r["base"]
        for name, p in r["perturbed"].items():
            worse = (
                "error" in p or p["false_pages"] > b.get("false_pages", 0) or p["false_leaks"] > b.get("false_leaks", 0)
            )
            regressions += worse
            if worse or (b["passed"] and not p["passed"]):
                tag = "NEW FALSE" if worse else "lost"
                print(f"  {tag:9s} {name:6s} {r['name']}: {'; '.join(p['fail'])[:300]}")
            elif p["passed"] and not b["passed"]:
                print(f"  {'gained':9s} {name:6s} {r['name']}")
    for s in skipped:
        print("skipped:", s)
    print(f"{len(results)} traces x {1 + len(names)} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(
                {"perturbations": list(names), "totals": tot, "results": results, "skipped": skipped}, f, indent=1
            )
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
