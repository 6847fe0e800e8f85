"""The live daemon, not a replay: a plain torch process that leaks from its birth to the OOM must page even
with engine discovery on (the default) and no engine to be found.

Found on a real H200 (bench/gpu_live.py): `oomwatch run` with discovery on waited for an engine that never
came and held the climb as an engine start, so it never paged, while `oomwatch replay` of its own flight dump
paged 26 s before the OOM. Here the recorded curve is played through NVML's fake (the one part that cannot
run here) into the daemon's own sampler with a real process scanner and real discovery; the holder is this
test's own process (a real PID with no engine port).
"""

from __future__ import annotations

import json
import os

from conftest import ROOT
from fake_nvml import FakeNvml

TRACE = os.path.join(ROOT, "bench", "results", "gpu_live_birth_leak.jsonl")


def test_a_leak_from_birth_pages_live_with_discovery_on_and_no_engine():
    from oomwatch.config import DaemonConfig
    from oomwatch.sampler import Sampler
    from oomwatch.sources.nvml import NvmlSource
    from oomwatch.sources.processes import ProcessScanner

    with open(TRACE, encoding="utf-8") as f:
        lines = [json.loads(x) for x in f if x.strip()]
    samples = [r for r in lines if "gpus" in r and "t" in r]
    oom_t = next(r["t"] for r in lines if r.get("event") == "oom")  # the scorer's truth, read by the test only
    onset = next(r["t"] for r in lines if r.get("event") == "phase" and r.get("name") == "leak")
    me = os.getpid()
    nv = FakeNvml(cards=2)
    src = NvmlSource(lib=nv)
    src.open()
    clock = [samples[0]["t"]]
    s = Sampler(DaemonConfig(), src, scanner=ProcessScanner(), clock=lambda: clock[0])
    assert s.discovery is not None  # the default: discovery on
    try:
        next_scan = clock[0]
        for r in samples:
            clock[0] = r["t"]
            for g in r["gpus"]:
                nv.cards[g["i"]].update(used=g["used"], procs=[(me, b) for _, b in g["procs"][:1]])
            s.sample_job()
            if r["t"] >= next_scan:
                s.process_job()
                next_scan = r["t"] + 2.0
        pages = [
            tr.t
            for tr in s.analyzer.transitions
            if tr.alert.alertname == "GPUOOMImminent" and tr.state == "firing" and dict(tr.alert.labels)["gpu"] == "1"
        ]
        assert s.engines == []  # nothing to discover: the holder listens on no engine port
        assert pages, "the leak from birth to the OOM was never paged"
        lead = oom_t - pages[0]
        assert lead >= min(600.0, (oom_t - onset) / 2), f"paged only {lead:.1f} s before the OOM"
    finally:
        s.stop()
