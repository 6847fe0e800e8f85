"""The flight recorder's dump carries the allocator probes' and the process scans' lines of its window, in
time order with the samples, so a post-mortem of a warm-cache leak or a host-RAM leak has its evidence."""

from __future__ import annotations

from oomwatch.exporters.recorder import FlightRecorder
from oomwatch.model import AllocSample, GpuInfo, GpuSample, RssSample, Sample
from oomwatch.trace import read_trace

GiB = 1 << 30


def test_dump_holds_alloc_and_rss_lines_of_the_window_in_time_order(tmp_path):
    fr = FlightRecorder(window_s=10.0)
    for k in range(40):  # 20 s at 2 Hz; the window keeps the last 10 s
        t = k * 0.5
        fr.add(Sample(t, (GpuSample(0, (10 + k) * GiB, procs=((42, (10 + k) * GiB),)),)))
        if k % 4 == 0:
            fr.alloc(t, [AllocSample(t, 42, "GPU-a", (8 + k) * GiB, (10 + k) * GiB, 0, 0, 0)])
            fr.rss(RssSample(t, ((42, (2 + k) << 20),)))
    path = fr.frozen().dump(str(tmp_path / "dump.jsonl"), [GpuInfo(0, "H200", "GPU-a", 140 * GiB)], "test")
    _, recs = read_trace(path)
    got = [r for _, r in recs]
    times = [r.t if isinstance(r, (Sample, RssSample)) else r[0].t for r in got]
    assert times == sorted(times)  # one time order for every line type
    allocs = [r for r in got if isinstance(r, tuple)]
    rss = [r for r in got if isinstance(r, RssSample)]
    assert allocs and rss and all(isinstance(a, AllocSample) for r in allocs for a in r)
    assert min(times) >= 19.5 - 10.0  # only the window
    assert allocs[-1][0].allocated_bytes == (8 + 36) * GiB and rss[-1].rss == ((42, 38 << 20),)
