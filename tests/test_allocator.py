"""The daemon's side of the allocator probe: the directory reader, the `alloc` trace line, the judge, and
the verdicts on two real H200 recordings (bench/gpu_probe.py: a healthy cache growth and a warm-cache leak
to a real CUDA OOM), with and without the probe's lines."""

import json
import os

import numpy as np
import pytest

from conftest import ROOT
from oomwatch.analysis.allocator import AllocBook, judge
from oomwatch.config import AllocatorConfig
from oomwatch.model import AllocSample, GpuInfo
from oomwatch.sources.allocator import AllocatorSource

GiB = 1 << 30
MB = 1_000_000
UUID = "GPU-25fc3e73-c1a6-57a5-6d92-4d50ac1b29fa"
RESULTS = os.path.join(ROOT, "bench", "results")


def write_probe(d, pid, t, devices, interval=1.0, name=None):
    doc = {"format": "oomwatch-probe/1", "pid": pid, "time": t, "interval_s": interval, "devices": devices}
    with open(os.path.join(d, name or f"{pid}.json"), "w") as f:
        json.dump(doc, f)


def dev(uuid=UUID, index=0, allocated=5 * GiB, reserved=8 * GiB, retries=0, ooms=0):
    return {
        "uuid": uuid,
        "index": index,
        "allocated_bytes": allocated,
        "reserved_bytes": reserved,
        "active_bytes": allocated,
        "inactive_split_bytes": 1 << 20,
        "alloc_retries": retries,
        "ooms": ooms,
    }


# ---- the directory ---------------------------------------------------------------------------------------
def test_source_joins_by_uuid_not_by_the_process_index(tmp_path):
    gpus = [GpuInfo(0, "H200", "GPU-aaaa", 140 * GiB), GpuInfo(1, "H200", UUID, 140 * GiB)]
    now = 1000.0
    alive = {11, 12}
    # PID 11 sees card 1 as its device 0 (CUDA_VISIBLE_DEVICES=1); a device of a card we don't watch is left out
    write_probe(tmp_path, 11, now - 0.5, [dev(index=0), dev(uuid="GPU-other", index=1)])
    write_probe(tmp_path, 12, now - 0.2, [dev(uuid="GPU-aaaa", index=0, allocated=GiB, reserved=2 * GiB)])
    src = AllocatorSource(gpus, str(tmp_path), clock=lambda: now, pid_alive=lambda p: p in alive)
    got = sorted(src.poll(42.0), key=lambda a: a.pid)
    assert [(a.pid, a.uuid, src.card_index(a.uuid), a.allocated_bytes, a.t) for a in got] == [
        (11, UUID, 1, 5 * GiB, 42.0),
        (12, "GPU-aaaa", 0, GiB, 42.0),
    ]
    assert got[0].inactive_split_bytes == 1 << 20 and got[0].alloc_retries == 0 and src.status.up


def test_stale_files_are_ignored_and_removed(tmp_path):
    gpus = [GpuInfo(0, "H200", UUID, 140 * GiB)]
    now = 1000.0
    write_probe(tmp_path, 21, now - 3.5, [dev()])  # more than 3 intervals old
    write_probe(tmp_path, 22, now - 1.6, [dev()])  # missed a rewrite, and its PID is gone
    write_probe(tmp_path, 28, now - 0.3, [dev()])  # a PID we cannot see, but rewritten: another PID namespace
    write_probe(tmp_path, 23, now - 2.5, [dev()])  # within 3 intervals and alive
    write_probe(tmp_path, 24, now - 5.0, [dev()], interval=2.0)  # its own interval is 2 s: still fresh
    (tmp_path / ".25.json.tmp").write_text("{half")  # a probe mid-write
    (tmp_path / "26.json").write_text("not json")
    write_probe(tmp_path, 27, now, [dev()], name="notes.json")
    src = AllocatorSource(gpus, str(tmp_path), clock=lambda: now, pid_alive=lambda p: p not in (22, 28))
    assert sorted(a.pid for a in src.poll(1.0)) == [23, 24, 28]
    left = sorted(os.listdir(tmp_path))
    assert "21.json" not in left and "22.json" not in left and src.removed == 2
    assert {"23.json", "24.json", ".25.json.tmp", "26.json", "notes.json"} <= set(left)


def test_missing_directory_is_a_down_source_not_an_error(tmp_path):
    src = AllocatorSource([GpuInfo(0, "H200", UUID, 140 * GiB)], str(tmp_path / "nope"), create=False)
    assert src.poll(1.0) == [] and src.status.up and "no probes" in src.status.error  # opt-in: nothing failed
    (tmp_path / "file").write_text("")
    src3 = AllocatorSource([GpuInfo(0, "H200", UUID, 140 * GiB)], str(tmp_path / "file"), create=False)
    assert src3.poll(1.0) == [] and not src3.status.up and "cannot read" in src3.status.error
    src2 = AllocatorSource([GpuInfo(0, "H200", UUID, 140 * GiB)], str(tmp_path / "made"))
    assert os.path.isdir(tmp_path / "made") and src2.poll(1.0) == [] and src2.status.up
    assert oct(os.stat(tmp_path / "made").st_mode & 0o7777) == "0o1777"  # servers of other users may write


def test_probe_writes_what_the_source_reads(tmp_path, monkeypatch):
    """The contract end to end: the probe's own writer, the daemon's own reader."""
    import sys
    import types

    from oomwatch.probe import Probe

    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(
        is_initialized=lambda: True,
        is_available=lambda: True,
        device_count=lambda: 1,
        memory_stats=lambda i: {
            "allocated_bytes.all.current": 3 * GiB,
            "reserved_bytes.all.current": 4 * GiB,
            "num_alloc_retries": 5,
            "num_ooms": 1,
        },
        get_device_properties=lambda i: types.SimpleNamespace(uuid=UUID.removeprefix("GPU-")),
    )
    monkeypatch.setitem(sys.modules, "torch", torch)
    p = Probe(str(tmp_path), 1.0)
    assert p.tick()
    src = AllocatorSource([GpuInfo(3, "H200", UUID, 140 * GiB)], str(tmp_path))
    (a,) = src.poll(7.0)
    assert (a.pid, src.card_index(a.uuid), a.allocated_bytes, a.reserved_bytes, a.alloc_retries, a.ooms) == (
        os.getpid(),
        3,
        3 * GiB,
        4 * GiB,
        5,
        1,
    )


# ---- the trace line --------------------------------------------------------------------------------------
def test_alloc_line_round_trips_and_old_readers_skip_it(tmp_path):
    from oomwatch.trace import alloc_line, parse_line, read_trace

    samples = [
        AllocSample(3.5, 11, UUID, 5 * GiB, 8 * GiB, 1 << 20, 2, 0),
        AllocSample(3.5, 12, UUID, GiB, GiB, None, None, None),
    ]
    rec = parse_line(json.loads(alloc_line(3.5, samples)))
    assert rec == tuple(samples)
    p = tmp_path / "t.jsonl"
    p.write_text(
        "\n".join(
            [
                json.dumps({"format": "gpu-memory-trace/1", "gpus": [{"index": 0, "uuid": UUID, "total": 140 * GiB}]}),
                json.dumps({"t": 1.0, "gpus": [{"i": 0, "used": GiB, "procs": []}]}),
                alloc_line(1.2, samples),
                json.dumps({"t": 1.5, "gpus": [{"i": 0, "used": GiB, "procs": []}]}),
            ]
        )
        + "\n"
    )
    _, recs = read_trace(str(p))
    kinds = [type(r).__name__ for _, r in recs]
    assert kinds == ["Sample", "tuple", "Sample"]


# ---- the judge (pure) ------------------------------------------------------------------------------------
def series(seconds, alloc, reserved, retries=None, seed=1):
    """One reading a second; a busy server's activations (up to 3 GB, most of the time) on top of `alloc`."""
    rng = np.random.default_rng(seed)
    t = np.arange(0.0, seconds, 1.0)
    act = np.where(rng.random(len(t)) < 0.75, rng.uniform(0.1e9, 3e9, len(t)), 0.0)
    a = np.array([alloc(x) for x in t]) + act
    r = np.maximum(np.array([reserved(x) for x in t]), a)
    rt = [retries(x) for x in t] if retries else [0] * len(t)
    return t, a, r, rt, [0] * len(t)


def start_then(after):
    """Weights and a KV pool in the first 8 s (a start that must not count), then `after(t)` bytes more."""
    return lambda x: (20e9 if x < 5 else 120e9) + (after(x) if x >= 8 else 0.0)


def test_judge_a_leak_under_a_warm_cache_is_decisive():
    t, a, r, rt, oo = series(120, start_then(lambda x: 60 * MB * max(0.0, x - 40)), lambda x: 126e9)
    v = judge(t, a, r, rt, oo, AllocatorConfig())
    assert v.leak and 45 * MB < v.leak_bytes_per_second < 75 * MB and v.leak_since >= 40
    early = judge(t[:30], a[:30], r[:30], rt[:30], oo[:30], AllocatorConfig())
    assert not early.leak  # the start (weights, KV pool) is not a leak


def test_judge_a_recent_leak_over_its_own_span_not_the_flat_minute_before():
    """200 MB/s of live tensors for the last 30 s after a flat minute: the trailing windows double from the
    shortest span, so the leak is judged over its own span and found (a fixed minute diluted it until 40 s)."""
    t, a, r, rt, oo = series(100, start_then(lambda x: 200 * MB * max(0.0, x - 70)), lambda x: 126e9, seed=4)
    v = judge(t, a, r, rt, oo, AllocatorConfig())
    assert v.leak and 100 * MB < v.leak_bytes_per_second < 300 * MB and v.leak_since >= 60
    flat = judge(t[:70], a[:70], r[:70], rt[:70], oo[:70], AllocatorConfig())
    assert not flat.leak


def test_judge_cache_growth_over_flat_live_tensors_is_not_a_leak():
    steps = lambda x: 120e9 + 1.5e9 * min(6, int(max(0.0, x - 20) // 12))  # noqa: E731 - the cache's steps
    t, a, r, rt, oo = series(120, start_then(lambda x: 0.0), steps)
    v = judge(t, a, r, rt, oo, AllocatorConfig())
    assert not v.leak and v.cache_growth and v.cache_growth_bytes > 4e9


def test_judge_a_flat_server_is_quiet():
    t, a, r, rt, oo = series(300, start_then(lambda x: 0.0), lambda x: 126e9, seed=3)
    v = judge(t, a, r, rt, oo, AllocatorConfig())
    assert not v.leak and not v.cache_growth and v.retries_recent == 0


def test_judge_counts_recent_alloc_retries_only():
    t, a, r, rt, oo = series(
        200, start_then(lambda x: 0.0), lambda x: 126e9, retries=lambda x: 0 if x < 60 else (3 if x < 180 else 5)
    )
    cfg = AllocatorConfig()
    assert judge(t, a, r, rt, oo, cfg).retries_recent == 2
    assert judge(t[:150], a[:150], r[:150], rt[:150], oo[:150], cfg).retries_recent == 0  # 3 was long ago


def test_book_withdraws_a_curve_leak_that_is_only_cache():
    from oomwatch.analysis.curve import CurveVerdict

    steps = lambda x: 120e9 + 1.5e9 * min(6, int(max(0.0, x - 20) // 12))  # noqa: E731
    t, a, r, _, _ = series(120, start_then(lambda x: 0.0), steps)
    book = AllocBook()
    for x, ai, ri in zip(t, a, r, strict=True):
        book.add(AllocSample(float(x), 7, UUID, int(ai), int(ri), 0, 0, 0))
    curve = CurveVerdict("staircase", leak=True, leak_bytes_per_second=1.5e9 / 12, eta_seconds=100.0)
    v, found = book.judge_card("0", UUID, "H200", curve, 140e9, 130e9, float(t[-1]))
    assert not v.leak and v.eta_seconds is None
    assert v.shape == "stable"  # no leak's shape either: a healthy card's summary must not say staircase
    assert [(f.kind, f.pid, c) for f, c in found] == [("cache_growth", 7, None)]
    assert "expandable_segments:True" in found[0][0].advice


def _batching(leak_per_s: float):
    """Continuous batching: 122 GB of live tensors (weights and the batch's KV) that drain to 14 GB for one
    second when the batch empties (at 30 s), the cache growing to the card and flushed every 13 s, and
    `leak_per_s` more live bytes a second from 45 s."""
    t = np.arange(0.0, 70.0, 1.0)
    a = np.array([14e9 if x == 30 else 122e9 + leak_per_s * max(0.0, x - 45) for x in t])
    r = a + np.array([1e9 * ((x - 30) % 13) for x in t])
    return t, a, r


@pytest.mark.parametrize("leak_per_s, withdrawn", [(0.0, True), (300 * MB, False)])
def test_book_judges_a_curve_leak_over_the_curves_own_span(leak_per_s, withdrawn):
    """A batch that drained and came back pulls a fixed window's live-tensor floor down and up again: over
    the span the curve's leak rests on (its rising troughs since 45 s), the live tensors of a healthy
    server are flat and its cache grew, so the curve's leak is the cache; a real leak in them is not."""
    from oomwatch.analysis.curve import CurveVerdict

    t, a, r = _batching(leak_per_s)
    book = AllocBook()
    for x, ai, ri in zip(t, a, r, strict=True):
        book.add(AllocSample(float(x), 7, UUID, int(ai), int(ri), 0, 0, 0))
    curve = CurveVerdict("sawtooth", leak=True, leak_bytes_per_second=3.8e9, leak_since=45.0, eta_seconds=0.0)
    v, found = book.judge_card("0", UUID, "H200", curve, 140e9, 139e9, float(t[-1]))
    assert v.leak is not withdrawn
    assert ("cache_growth" in {f.kind for f, _ in found}) is withdrawn
    assert v.shape == "sawtooth"  # a cycling card stays a sawtooth, withdrawn or not


def test_book_warns_on_retries_with_the_evidence():
    """Retries are a warning (the next request like these may fail), not a page: a card at 98-100% flushes
    its cache for hours without failing; whether it fills is the forecast's to say."""
    book = AllocBook()
    for x in range(40):
        book.add(AllocSample(float(x), 9, UUID, 120 * GiB, 130 * GiB, 0, 0 if x < 35 else 4, 0))
    _, found = book.judge_card("2", UUID, "H200", None, 140 * GiB, 139 * GiB, 39.0)
    ((f, c),) = found
    assert f.kind == "spike_risk" and f.severity == "warning" and c.alertname == "GPUMemorySpikeRisk"
    assert dict(c.labels) == {"gpu": "2", "uuid": UUID} and f.evidence["alloc_retries_recent"] == 4


def test_book_is_bounded_and_forgets_gone_processes():
    book = AllocBook(AllocatorConfig(max_series=4, max_points=10))
    for pid in range(10):
        for x in range(20):
            book.add(AllocSample(float(x + pid), pid, UUID, GiB, GiB, 0, 0, 0))
    assert len(book.hist) <= 4 and all(len(h.rows) <= 10 for h in book.hist.values())
    book.judge_card("0", UUID, "H200", None, 140 * GiB, GiB, 1000.0)
    assert book.hist == {}


# ---- real H200 recordings --------------------------------------------------------------------------------
def _trace(name):
    p = os.path.join(RESULTS, f"probe_{name}.jsonl")
    if not os.path.exists(p):
        pytest.skip(f"bench/results/probe_{name}.jsonl not recorded (bench/gpu_probe.py)")
    return p


def _replay(path, tmp_path, with_alloc=True):
    from oomwatch.feed import replay_trace

    if not with_alloc:
        q = tmp_path / "nvml_only.jsonl"
        with open(path) as f, open(q, "w") as g:
            g.writelines(line for line in f if '"alloc"' not in line)
        path = str(q)
    return replay_trace(path)


def _phases(path):
    out = {}
    with open(path) as f:
        for line in f:
            o = json.loads(line)
            if o.get("event") in ("phase", "oom"):
                out.setdefault(o["phase"], o["t"])
    return out


def _first(r, names):
    ts = [tr.t for tr in r.transitions if tr.state == "firing" and tr.alert.alertname in names]
    return min(ts) if ts else None


def test_real_warm_cache_leak_pages_long_before_the_oom_only_with_the_probe(tmp_path):
    path = _trace("warm_cache_leak")
    ph = _phases(path)
    r = _replay(path, tmp_path)
    page = _first(r, {"GPUOOMImminent"})
    assert page is not None and ph["leak_start"] < page < ph["oom"] - 30, (ph, page)
    kinds = {f["kind"] for f in r.summary["findings"]}
    assert {"leak", "oom_imminent"} <= kinds
    leak = next(f for f in r.summary["findings"] if f["kind"] == "leak")
    assert 40 * MB < leak["evidence"]["leak_bytes_per_second"] < 80 * MB  # the workload leaked 60 MB/s
    # NVML alone pages later or never: the cache hid the leak
    nvml = _replay(path, tmp_path, with_alloc=False)
    nvml_page = _first(nvml, {"GPUOOMImminent", "GPUMemoryLeak"})
    assert nvml_page is None or nvml_page > page + 10


def test_real_cache_growth_stays_quiet_and_says_cache(tmp_path):
    path = _trace("cache_growth")
    r = _replay(path, tmp_path)
    assert not [
        tr for tr in r.transitions if tr.state == "firing" and tr.alert.alertname in ("GPUMemoryLeak", "GPUOOMImminent")
    ]
    cg = [f for f in r.summary["findings"] if f["kind"] == "cache_growth" and f["evidence"].get("source")]
    # the cache's growth while serving (what grew during the start is the start's): 0.77 GB of it here
    assert cg and cg[0]["evidence"]["cache_growth_bytes"] > 512 << 20


# ---- the daemon: sampler, metrics, status page, recorder -------------------------------------------------
def test_daemon_reads_probes_exports_records_and_shows_them(tmp_path):
    import time

    from prometheus_client import generate_latest

    from fake_nvml import FakeNvml
    from oomwatch.config import DaemonConfig
    from oomwatch.exporters.metrics import make_registry
    from oomwatch.exporters.recorder import TraceRecorder
    from oomwatch.exporters.status import status
    from oomwatch.sampler import Sampler
    from oomwatch.sources.nvml import NvmlSource
    from oomwatch.trace import read_trace

    nv = FakeNvml(cards=2)
    pid = os.getpid()  # a live PID, so the file is not stale
    for i, c in enumerate(nv.cards):
        c.update(used=(40 + 10 * i) << 30, procs=[(pid, (40 + 10 * i) << 30)] if i == 1 else [])
    src = NvmlSource(lib=nv)
    src.open()
    probes = tmp_path / "probes"
    probes.mkdir()
    # the server sees card 1 as its device 0 (CUDA_VISIBLE_DEVICES=1)
    write_probe(
        probes,
        pid,
        time.time(),
        [dev(uuid="GPU-fake-1", index=0, allocated=30 * GiB, reserved=45 * GiB, retries=3, ooms=1)],
    )
    rec = TraceRecorder(str(tmp_path / "rec.jsonl"), src.cards)
    s = Sampler(DaemonConfig(probe_dir=str(probes)), src, recorder=rec)
    s.sample_job()
    s.allocator_job()
    s.sample_job()
    text = generate_latest(make_registry(lambda: s.snapshot)).decode()
    from prometheus_client.parser import text_string_to_metric_families

    got = {
        (smp.name, tuple(sorted((k, v) for k, v in smp.labels.items() if k != "node"))): smp.value
        for fam in text_string_to_metric_families(text)
        for smp in fam.samples
    }
    lab = (("gpu", "1"), ("pid", str(pid)), ("role", "other"), ("uuid", "GPU-fake-1"))
    assert got[("oomwatch_process_allocator_allocated_bytes", lab)] == 30 * GiB
    assert got[("oomwatch_process_allocator_reserved_bytes", lab)] == 45 * GiB
    assert got[("oomwatch_process_allocator_inactive_split_bytes", lab)] == 1 << 20
    assert got[("oomwatch_process_allocator_alloc_retries_total", lab)] == 3
    assert got[("oomwatch_process_allocator_ooms_total", lab)] == 1
    assert got[("oomwatch_source_up", (("source", "allocator"),))] == 1
    st = status(s.snapshot)
    (card1,) = [c for c in st["gpus"] if c["gpu"] == "1"]
    assert card1["allocator"][0]["pid"] == pid and card1["allocator"][0]["allocated_bytes"] == 30 * GiB
    assert [c["allocator"] for c in st["gpus"] if c["gpu"] == "0"] == [[]]
    s.stop()
    _, recs = read_trace(str(tmp_path / "rec.jsonl"))
    allocs = [r for _, r in recs if isinstance(r, tuple)]
    assert allocs and allocs[0][0].uuid == "GPU-fake-1" and allocs[0][0].reserved_bytes == 45 * GiB


def test_diagnose_shows_the_probe(tmp_path):
    import subprocess
    import sys

    path = _trace("warm_cache_leak")
    r = subprocess.run(
        [sys.executable, "-m", "oomwatch", "diagnose", "--replay", path],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "(allocator probe): live tensors" in r.stdout and "a leak" in r.stdout, r.stdout + r.stderr


# ---- the allocator's leak warning waits like the curve's ---------------------------------------------------
def _probe_leak_warnings(live_rise_s: float, seconds: float = 240.0):
    """A server at 120 GB whose live tensors' floor rises 15 MB/s from 40 s for `live_rise_s` seconds, then
    falls back (a load that ramped up and eased), its cache covering it (NVML flat): the times GPUMemoryLeak
    fired, fed through the Analyzer as the daemon feeds it (NVML at 20 Hz, the probe once a second)."""
    from oomwatch.analysis.analyzer import Analyzer
    from oomwatch.model import GpuSample, Sample

    total = 150 * GiB
    an = Analyzer((GpuInfo(0, "NVIDIA H200", UUID, total),))

    def live(x):
        if x < 8:
            return 0.0
        if x < 40 or x >= 40 + live_rise_s:
            return 120e9
        return 120e9 + 15 * MB * (x - 40)

    for k in range(int(seconds * 20)):
        x = k / 20
        used = 0 if x < 5 else int(130e9)
        an.add_sample(Sample(x, (GpuSample(0, used, total - used, 0, 0, ((7, used),) if used else ()),)))
        if x >= 8 and k % 20 == 0:
            a = int(live(x))
            an.add_alloc(AllocSample(x, 7, UUID, a, int(128e9), 0, 0, 0))
    return [tr.t for tr in an.transitions if tr.state == "firing" and tr.alert.alertname == "GPUMemoryLeak"]


def test_the_probes_leak_warning_waits_a_share_of_its_eta_as_the_curves_does():
    """Live tensors that rise for 80 s and fall back (a load's ramp: the probe reads mid-request) are not
    warned: the rise never held the curve's confirmation (a share of its ETA, at most 120 s). A rise that
    goes on is warned once it held that long, and not before."""
    assert _probe_leak_warnings(80.0) == []
    kept = _probe_leak_warnings(1000.0)
    verdict = 40 + AllocatorConfig().leak_min_bytes / (15 * MB)  # the rise is a leak once it is this tall
    assert kept and verdict + 120 <= kept[0] <= verdict + 120 + 30, kept


def test_a_leak_to_oom_is_warned_once_while_its_page_holds(tmp_path):
    """The real `serve_full_leak_freed` (outputs kept into 2.4 GiB of headroom on an H100, the probe on): the
    probe's live tensors, read mid-request, stop rising for 55 s before the OOM comes. The page it raised holds
    across that gap, and so does its leak warning: a page on a leak says the leak too, so they end together (a
    warning resolved and fired again 29 s later tells on-call the first one was false)."""
    path = os.path.join(RESULTS, "serve_full_leak_freed.jsonl")
    r = _replay(path, tmp_path)
    fired = [tr.alert.alertname for tr in r.transitions if tr.state == "firing"]
    assert fired.count("GPUOOMImminent") == 1, fired
    assert fired.count("GPUMemoryLeak") == 1, fired
