"""The curve analysis on the bundled real traces and on synthetic shapes the traces do not show.

The expectations for the real traces come from their own labels (read here by the test, never by the
analysis). The timing rule is the product's promise: GPUOOMImminent while at least half of the time from
a leak's onset to its OOM remains.
"""

import json

import numpy as np
import pytest

import synth
from conftest import example
from daemon.analysis.analyzer import Analyzer
from daemon.analysis.curve import evaluate, theil_sen
from daemon.config import AnalysisConfig
from daemon.model import Sample
from daemon.trace import read_trace

TRACES = ["vllm_startup", "staircase", "sawtooth", "spike", "stray", "tp_imbalance"]


def labels(name):
    """The recording's own annotations: header `expect` and the timed events (test-side only)."""
    with open(example(name + ".jsonl")) as f:
        head = json.loads(f.readline())
        events = [json.loads(line) for line in f if '"event"' in line]
    return head["expect"], events


def run_trace(name):
    h, recs = read_trace(example(name + ".jsonl"))
    a = Analyzer(h.gpus)
    trans = []
    for _, r in recs:
        if isinstance(r, Sample):
            trans += a.add_sample(r)
        else:
            a.add_proc(r)
    return a, trans


def fired(trans, alert, gpu=None):
    return [tr.t for tr in trans if tr.alert.alertname == alert and tr.state == "firing"
            and (gpu is None or dict(tr.alert.labels).get("gpu") == gpu)]


@pytest.mark.parametrize("name", TRACES)
def test_real_trace_shapes_and_leaks(name):
    expect, _ = labels(name)
    a, trans = run_trace(name)
    s = a.summary()
    for gpu, shape in expect["shape"].items():
        assert s["gpus"][gpu]["shape"] == shape, (gpu, s["gpus"][gpu])
    leak_any = any(g["leak"] for g in s["gpus"].values())
    assert leak_any == expect["leak"]
    if not expect["leak"]:
        assert not fired(trans, "GPUMemoryLeak") and not fired(trans, "GPUOOMImminent")
    for g in s["gpus"].values():
        if g["leak"]:
            assert g["eta_seconds"] is not None and g["leak_bytes_per_second"] > 0


def test_staircase_pages_in_the_first_half():
    _, events = labels("staircase")
    onset = next(e["t"] for e in events if e.get("event") == "phase" and e.get("name") == "leak")
    oom = next(e["t"] for e in events if e.get("event") == "oom")
    _, trans = run_trace("staircase")
    t = fired(trans, "GPUOOMImminent", "0")
    assert t and t[0] <= onset + (oom - onset) / 2, (t, onset, oom)


def test_spike_risk_before_the_final_spike():
    _, events = labels("spike")
    oom = next(e["t"] for e in events if e.get("event") == "oom")
    _, trans = run_trace("spike")
    t = fired(trans, "GPUMemorySpikeRisk", "0")
    assert t and t[0] < oom


def test_stray_and_imbalance_from_traces():
    a, trans = run_trace("stray")
    strays = [f for f in a.summary()["findings"] if f["kind"] == "stray"]
    assert [f["pid"] for f in strays] == [928]
    assert "kill 928" in strays[0]["advice"]
    a, trans = run_trace("tp_imbalance")
    kinds = {(f["kind"], f["gpu"]) for f in a.summary()["findings"]}
    assert ("imbalance", "0") in kinds and ("leak", "1") in kinds and ("leak", "0") not in kinds


# ---- synthetic shapes (the held-out cases listed in the traces README) --------------------------------
def run_synth(fns, seconds):
    a = Analyzer(synth.info(len(fns)))
    trans = []
    for s in synth.trace(fns, seconds):
        trans += a.add_sample(s)
    return a, trans


LEAKS = {
    "ramp": (lambda: synth.ramp(base=0.3, rate=1.5 * synth.GiB), 10.0, "ramp"),
    "fine_staircase_high_base": (lambda: synth.staircase(base=0.4, step=1.5 * synth.GiB, every=0.8), 10.0, "staircase"),
    "rising_sawtooth": (lambda: synth.sawtooth(trough_step=0.05), 8.0, "sawtooth"),
    "staircase": (lambda: synth.staircase(), 10.0, "staircase"),
}


@pytest.mark.parametrize("case", sorted(LEAKS))
def test_leak_to_oom_pages_in_time(case):
    make, onset, shape = LEAKS[case]
    fn, state = synth.oom_clip(make())
    a, trans = run_synth([fn], 120)
    oom = state["dead"]
    assert oom is not None
    t = fired(trans, "GPUOOMImminent")
    assert t and t[0] <= onset + (oom - onset) / 2, (t, onset, oom)
    g = a.summary()["gpus"]["0"]
    assert g["leak"] and g["shape"] == shape


@pytest.mark.parametrize("util", [0.5, 0.8, 0.9, 0.95])
def test_healthy_start_never_pages(util):
    a, trans = run_synth([synth.startup(util)], 90)
    assert not fired(trans, "GPUMemoryLeak") and not fired(trans, "GPUOOMImminent")
    assert a.summary()["gpus"]["0"]["shape"] == "stable"


def test_bounded_sawtooth_is_quiet():
    a, trans = run_synth([synth.sawtooth()], 80)
    assert not fired(trans, "GPUMemoryLeak") and not fired(trans, "GPUOOMImminent")
    assert a.summary()["gpus"]["0"]["shape"] == "sawtooth"


def test_slow_leak_far_from_oom_has_finite_eta():
    a, _ = run_synth([synth.staircase(base=0.3, step=1 * synth.GiB, every=4)], 60)
    g = a.summary()["gpus"]["0"]
    assert g["leak"] and g["eta_seconds"] is not None and g["eta_seconds"] > 60


def test_one_card_idle_beside_a_full_one():
    a, trans = run_synth([lambda t: 0 if t < 5 else 0.9 * synth.TOTAL, lambda t: 0], 30)
    imb = [f for f in a.summary()["findings"] if f["kind"] == "imbalance"]
    assert imb and imb[0]["evidence"]["kind"] == "idle_card" and "tensor-parallel-size" in imb[0]["advice"]


def test_leak_resolves_after_it_stops():
    fn = synth.staircase(base=0.2, step=2 * synth.GiB, every=1.0)
    stop = lambda t: fn(min(t, 25.0))  # noqa: E731 - growth stops at 25 s, memory stays
    _, trans = run_synth([stop], 80)
    assert fired(trans, "GPUMemoryLeak")
    assert [tr for tr in trans if tr.alert.alertname == "GPUMemoryLeak" and tr.state == "resolved"]


# ---- pure pieces --------------------------------------------------------------------------------------
def test_theil_sen_ignores_an_outlier():
    x = np.arange(10.0)
    y = 2 * x
    y[5] = 100
    assert theil_sen(x, y) == pytest.approx(2.0)


def test_evaluate_flat_is_stable_and_empty_is_idle():
    cfg = AnalysisConfig()
    t = np.arange(0, 30, 0.25)
    flat = np.full_like(t, 50e9)
    v = evaluate(t, flat, flat, flat, 140e9, cfg)
    assert v.shape == "stable" and not v.leak and not v.spike_risk
    assert evaluate(t[:0], t[:0], t[:0], t[:0], 140e9, cfg).shape == "idle"


def test_bucket_ring_keeps_the_window_in_order():
    from daemon.analysis.series import BucketSeries

    s = BucketSeries(bucket_s=1.0, window_s=10.0)
    for k in range(0, 250):  # 25 buckets of 10 samples: wraps the ring twice
        s.add(k / 10.0, float(k))
    t, mn, mx, last = s.arrays()
    assert len(t) == 11  # 10 closed buckets + the open one
    assert list(mn) == [float(10 * b) for b in range(14, 25)]
    assert list(mx) == [float(10 * b + 9) for b in range(14, 25)]
    assert np.all(np.diff(t) > 0)


def test_pid_churn_keeps_memory_bounded():
    from daemon.model import GpuInfo, GpuSample, ProcInfo

    a = Analyzer([GpuInfo(0, "g", "u", 100 << 30)])
    for k in range(20000):  # a new orphaned PID every 0.5 s for ~2.8 hours
        t = k * 0.5
        pid = 10000 + k
        a.add_proc(ProcInfo(pid, "python3", ("python3",), 1, 1.0))
        a.add_sample(Sample(t, (GpuSample(0, 50 << 30, procs=((pid, 1 << 30), (1, 49 << 30))),)))
    assert len(a.procs) < 2000 and len(a.fired) <= 512 and len(a.book.alerts) < 2000


def test_kv_pressure_from_the_engine_and_its_advice():
    from daemon.model import EngineSnapshot

    a = Analyzer(synth.info(1))
    a.set_engines([EngineSnapshot("http://v:8000/metrics", "vllm", True, engine="0", kv_cache_usage_ratio=0.97,
                                  requests_running=64, requests_waiting=12, preemptions_total=5)])
    trans = []
    for s in synth.trace([lambda t: 0.9 * synth.TOTAL], 30):
        trans += a.add_sample(s)
    assert fired(trans, "KVCachePressure")
    f = [f for f in a.summary()["findings"] if f["kind"] == "kv_pressure"][0]
    assert "not memory" in f["advice"] and "--max-num-seqs" in f["advice"]
    assert not fired(trans, "GPUMemoryLeak")


def test_engine_not_serving_yet_means_warm_up():
    from daemon.model import EngineSnapshot

    a = Analyzer(synth.info(1), engines_expected=True)
    a.set_engines([EngineSnapshot("http://v:8000/metrics", up=False, error="connection refused")])
    fn = synth.staircase(base=0.1, step=3 * synth.GiB, every=1.0)
    trans = []
    for s in synth.trace([fn], 25):
        trans += a.add_sample(s)
    assert not fired(trans, "GPUMemoryLeak")  # the engine is still starting: its climb is warm-up
    a.set_engines([EngineSnapshot("http://v:8000/metrics", "vllm", True, kv_cache_usage_ratio=0.0)])
    for s in synth.trace([fn], 45)[500:]:
        trans += a.add_sample(s)
    assert fired(trans, "GPUMemoryLeak")  # serving, and still growing: a leak


def test_idle_card_with_a_bare_cuda_context_beside_a_full_one():
    a = Analyzer(synth.info(2))
    samples = synth.trace([lambda t: 0 if t < 5 else 0.9 * synth.TOTAL, lambda t: 0 if t < 5 else 400 << 20], 30,
                          pids=[77, 77])  # the server holds a 400 MiB context on the second card
    for s in samples:
        a.add_sample(s)
    imb = [f for f in a.summary()["findings"] if f["kind"] == "imbalance"]
    assert imb and imb[0]["evidence"]["kind"] == "idle_card"
