"""What the allocator probe costs its host, and what it buys: detection with and without it.

    python bench/probe_cost.py                 # cost with a fake torch (any machine)
    python bench/probe_cost.py --detect DIR    # + replay DIR/probe_*.jsonl with and without their alloc lines

Cost: CPU seconds of one probe tick (read the stats, write and rename the file) with a fake torch whose
`memory_stats` returns the real key set for 1 and 8 devices, median of 5 runs of 2000 ticks; at one tick a
second that is the share of one core. The real-torch number comes from bench/gpu_probe.py on an H200
(bench/results/gpu_probe.json) and is printed beside it. Also the `.pth` line's cost at every interpreter
start when OOMWATCH_PROBE is unset.

Detection: each recorded trace (bench/gpu_probe.py) replayed through the whole analysis, once as recorded
and once with its `alloc` lines removed (NVML alone); the first page after the leak starts, and how long
before the real OOM it came.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench.srctree import importable  # noqa: E402

importable()  # the device machine runs a bare copy of the tree


def fake_torch(devices: int) -> types.ModuleType:
    keys = {
        "allocated_bytes.all.current": 120 << 30,
        "reserved_bytes.all.current": 126 << 30,
        "reserved_bytes.all.peak": 126 << 30,
        "active_bytes.all.current": 120 << 30,
        "inactive_split_bytes.all.current": 1 << 28,
        "num_alloc_retries": 0,
        "num_ooms": 0,
    }
    # the real dict has ~90 keys (per pool, per size class); pad to that so the copy costs what it costs
    keys.update({f"pad_{i}.all.current": i for i in range(90)})
    t = types.ModuleType("torch")
    t.cuda = types.SimpleNamespace(
        is_initialized=lambda: True,
        is_available=lambda: True,
        device_count=lambda: devices,
        memory_stats=lambda i: dict(keys),
        get_device_properties=lambda i: types.SimpleNamespace(uuid=f"00000000-0000-0000-0000-00000000000{i}"),
    )
    return t


def tick_cost(devices: int, n: int = 2000, runs: int = 5) -> dict:
    from oomwatch.probe import Probe

    sys.modules["torch"] = fake_torch(devices)
    try:
        p = Probe(tempfile.mkdtemp(prefix="probecost-"), 1.0)
        p.check_directory()
        for _ in range(50):
            p.tick()
        cpu = []
        for _ in range(runs):
            c0 = time.process_time()
            for _ in range(n):
                p.tick()
            cpu.append((time.process_time() - c0) / n)
        return {
            "devices": devices,
            "cpu_seconds_per_tick": statistics.median(cpu),
            "core_fraction_at_1hz": statistics.median(cpu) / p.interval_s,
        }
    finally:
        del sys.modules["torch"]


def pth_cost(n: int = 200000) -> float:
    """Seconds the .pth line costs at interpreter start with OOMWATCH_PROBE unset."""
    with open(os.path.join(ROOT, "daemon", "probe", "oomwatch-probe.pth")) as f:
        code = compile(f.read(), "oomwatch-probe.pth", "exec")
    env = os.environ.pop("OOMWATCH_PROBE", None)
    try:
        t0 = time.perf_counter()
        for _ in range(n):
            exec(code, {})
        return (time.perf_counter() - t0) / n
    finally:
        if env is not None:
            os.environ["OOMWATCH_PROBE"] = env


def detect(directory: str) -> list[dict]:
    from oomwatch.feed import replay_trace

    rows = []
    for fn in sorted(os.listdir(directory)):
        if not (fn.startswith("probe_") and fn.endswith(".jsonl")):
            continue
        path = os.path.join(directory, fn)
        phases = {}
        with open(path) as f:
            lines = f.readlines()
        for line in lines:
            o = json.loads(line)
            if o.get("event") in ("phase", "oom"):
                phases.setdefault(o["phase"], o["t"])
        stripped = os.path.join(tempfile.mkdtemp(), fn)
        with open(stripped, "w") as g:
            g.writelines(x for x in lines if '"alloc"' not in x)
        for label, p in (("with probe", path), ("NVML only", stripped)):
            r = replay_trace(p)
            pages = [
                (tr.t, tr.alert.alertname)
                for tr in r.transitions
                if tr.state == "firing" and tr.alert.alertname in ("GPUMemoryLeak", "GPUOOMImminent")
            ]
            start = phases.get("leak_start")
            first = min(pages)[0] if pages else None
            rows.append(
                {
                    "trace": fn,
                    "run": label,
                    "leak_start": start,
                    "oom": phases.get("oom"),
                    "first_page_t": first,
                    "first_page": min(pages)[1] if pages else None,
                    "after_leak_start_s": None if first is None or start is None else round(first - start, 1),
                    "before_oom_s": None if first is None or "oom" not in phases else round(phases["oom"] - first, 1),
                    "findings": sorted({f["kind"] for f in r.summary["findings"]}),
                }
            )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--detect", metavar="DIR", help="replay DIR/probe_*.jsonl with and without alloc lines")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    res = {"fake_torch": [tick_cost(1), tick_cost(8)], "pth_line_seconds_unset": pth_cost()}
    gpu = os.path.join(ROOT, "bench", "results", "gpu_probe.json")
    if os.path.exists(gpu):
        with open(gpu) as f:
            c = json.load(f).get("cost", {})
        res["real_torch_h200"] = {
            k: c.get(k)
            for k in ("torch", "cpu_seconds_per_tick", "wall_median_s", "wall_p99_s", "core_fraction_at_1hz")
        }
    if a.detect:
        res["detection"] = detect(a.detect)
    if a.json:
        print(json.dumps(res, indent=1))
        return 0
    print("probe tick (read stats, write + rename the file), CPU per tick and share of a core at 1 Hz:")
    for r in res["fake_torch"]:
        print(
            f"  fake torch, {r['devices']} device(s): {r['cpu_seconds_per_tick'] * 1e6:7.0f} us  "
            f"{r['core_fraction_at_1hz']:.5%}"
        )
    if "real_torch_h200" in res:
        r = res["real_torch_h200"]
        print(
            f"  torch {r['torch']} on an H200, 1 device: {r['cpu_seconds_per_tick'] * 1e6:7.0f} us  "
            f"{r['core_fraction_at_1hz']:.5%}  (wall median {r['wall_median_s'] * 1e6:.0f} us, "
            f"p99 {r['wall_p99_s'] * 1e6:.0f} us)"
        )
    print(f".pth line at interpreter start, OOMWATCH_PROBE unset: {res['pth_line_seconds_unset'] * 1e9:.0f} ns")
    for r in res.get("detection", []):
        print(
            f"  {r['trace']:28s} {r['run']:10s} leak starts {r['leak_start']}  first page "
            f"{r['first_page'] or 'none'} at {r['first_page_t'] and round(r['first_page_t'], 1)}: "
            f"{r['after_leak_start_s']} s after the leak started, {r['before_oom_s']} s before the OOM; "
            f"findings {', '.join(r['findings'])}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
