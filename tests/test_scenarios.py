"""The scenario generator (bench/scenarios): deterministic, labelled, and faithful to the real recordings.

The start-up and allocator models are checked against the two H200 recordings in ../shared/traces: each
is rebuilt from its own parameters (card, shards, utilisation, captures, transient sizes, cache steps and
the time they took) as `replica_*` in the catalog, and the features below are measured the same way on
both curves. Inputs of the replica (given from the recording) are shards, utilisation, capture count and
first size, the largest transient, the number of cache steps and the span they took; what the test checks
is that composing them yields the recording's curve: the start's length, the KV level, the captures as
NVML sees them at 20 Hz, the step sizes, the final level and, for TP=2, the gap between the ranks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import shared

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.scenarios import FAST, SCENARIOS  # noqa: E402
from daemon.model import ProcInfo, Sample  # noqa: E402
from daemon.trace import read_trace  # noqa: E402

GiB, MiB = 1 << 30, 1 << 20

# feature: (tolerance, "abs" or "rel") - stated once, used for both recordings
TOLERANCE = {
    "start_s": (0.15, "rel"),  # first memory to the end of graph capture
    "kv_share": (0.005, "abs"),  # level right after the KV jump, share of the card
    "shards": (0, "abs"),  # weight-loading steps of >= 1 GiB
    "captures": (0.15, "rel"),  # capture steps NVML sees (several merge into one 50 ms sample)
    "capture_gib": (0.10, "rel"),  # what the captures add
    "cache_steps": (1, "abs"),  # allocator high-water steps (>= 300 MiB) after the start
    "step_gib_max": (0.10, "rel"),  # the largest step: about the largest transient
    "cache_gib": (0.10, "rel"),  # what the steps add in all
    "final_share": (0.01, "abs"),  # the level it settles at, share of the card
    "level_off_s": (0.25, "rel"),  # from the end of the start to the last step
}
RANK_GAP_TOL_GIB = 0.5  # TP=2: the ranks level off this close to the recording's gap (1.85 GiB)


def curve(records):
    head = records[0]
    samples = [r for r in records[1:] if "gpus" in r and "t" in r]
    t = np.array([r["t"] for r in samples])
    used = np.array([[g["used"] for g in r["gpus"]] for r in samples], dtype=float)
    return head, t, used


def features(t, used, total) -> dict:
    """Start and allocator features of one card's curve, from the curve alone."""
    d = np.diff(used)
    i0 = int(np.nonzero(used > 0)[0][0])
    kv = int(np.nonzero(d > 0.3 * total)[0][0]) + 1  # the KV pool: one jump over 30% of the card
    pre = d[i0 : kv - 1]
    shards = int(np.sum((pre >= GiB) & (pre < 0.04 * total)))  # the profile spike is taller
    after = d[kv:]
    big = np.nonzero(after >= 300 * MiB)[0]
    small = np.nonzero((after > 0) & (after < 300 * MiB))[0]
    first_big = kv + big[0] if len(big) else len(used) - 1
    caps = small[kv + small < first_big]
    ready = kv + caps[-1] + 1 if len(caps) else kv
    steps = after[big]
    final = used[np.nonzero(used > 0.5 * total)[0][-1]]
    return {
        "start_s": t[ready] - t[i0],
        "kv_share": used[kv] / total,
        "shards": shards,
        "captures": len(caps),
        "capture_gib": (used[ready] - used[kv]) / GiB,
        "cache_steps": len(big),
        "step_gib_max": steps.max() / GiB,
        "cache_gib": steps.sum() / GiB,
        "final_share": final / total,
        "level_off_s": t[kv + big[-1] + 1] - t[ready],
    }


def _compare(real_name: str, replica: str):
    path = shared("traces", real_name + ".jsonl")
    with open(path, encoding="utf-8") as f:
        real = [json.loads(line) for line in f if line.strip()]
    gen = list(SCENARIOS[replica].build().records())
    (hr, tr, ur), (hg, tg, ug) = curve(real), curve(gen)
    assert [g["total"] for g in hr["gpus"]] == [g["total"] for g in hg["gpus"]]
    out = []
    for c, g in enumerate(hr["gpus"]):
        fr, fg = features(tr, ur[:, c], g["total"]), features(tg, ug[:, c], g["total"])
        for k, (tol, how) in TOLERANCE.items():
            err = abs(fg[k] - fr[k]) / (abs(fr[k]) if how == "rel" else 1.0)
            assert err <= tol + 1e-12, (
                f"GPU {c} {k}: generated {fg[k]:.3f}, recording {fr[k]:.3f} (tolerance {tol} {how})"
            )
        out.append((fr, fg))
    return out


def test_replica_reproduces_serving_cache_growth():
    _compare("serving_cache_growth", "replica_serving_cache_growth")


def test_replica_reproduces_tp2_cache_growth():
    (r0, g0), (r1, g1) = _compare("tp2_cache_growth", "replica_tp2_cache_growth")
    total = 150754820096
    gap_real = abs(r1["final_share"] - r0["final_share"]) * total / GiB
    gap_gen = abs(g1["final_share"] - g0["final_share"]) * total / GiB
    assert abs(gap_gen - gap_real) <= RANK_GAP_TOL_GIB, (gap_gen, gap_real)


def _lines(name: str) -> list[str]:
    return [json.dumps(r) for r in SCENARIOS[name].build().records()]


@pytest.mark.parametrize("name", ["crash_loop_l4", "staircase_leak_rank1_a100"])
def test_generation_is_deterministic(name):
    a, b = _lines(name), _lines(name)
    assert a == b
    assert len(a) > 1000


def _write_scenario(folder, name, timeout=120):
    """`python -m bench.scenarios --write FOLDER --only NAME`, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "bench.scenarios", "--write", str(folder), "--only", name],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_cli_writes_byte_identical_files(tmp_path):
    outs = []
    for k in range(2):
        d = tmp_path / str(k)
        r = _write_scenario(d, "warm_cache_leak_h200")
        assert r.returncode == 0, r.stderr
        outs.append((d / "warm_cache_leak_h200.jsonl").read_bytes())
    assert outs[0] == outs[1]
    bad = _write_scenario(tmp_path, "nope", timeout=60)
    assert bad.returncode == 2 and "unknown scenario" in bad.stderr and "Traceback" not in bad.stderr


def test_written_trace_reads_back_without_annotations(tmp_path):
    """The replay reader keeps samples and process descriptions only; the truth stays in annotations."""
    from bench.scenarios import write

    p = tmp_path / "t.jsonl"
    write(SCENARIOS["orphan_beside_server_h100"], str(p))
    header, recs = read_trace(str(p))
    kinds = {type(r).__name__ for _, r in recs}
    assert kinds == {"Sample", "ProcInfo"}
    assert [g.name for g in header.gpus] == ["NVIDIA H100 80GB HBM3"]
    head = json.loads(p.read_text().splitlines()[0])
    assert head["truth"]["strays"] and head["expect"]["stray"] is True and head["scenario"]


def test_corpus_spans_the_required_range():
    specs = list(SCENARIOS.values())
    assert len(specs) >= 30
    assert {len(s.cards) for s in specs} >= {1, 2, 4, 8}
    assert {s.cards[0] for s in specs} >= {"L4", "A10", "A100", "H100", "H200"}
    assert min(s.duration for s in specs) <= 600 and max(s.duration for s in specs) >= 7 * 86400
    assert min(s.hz for s in specs) <= 0.2 and max(s.hz for s in specs) >= 10
    assert sum(s.gpu_samples for s in specs) <= 8_000_000
    assert 10 <= len(FAST) <= 16 and sum(SCENARIOS[n].gpu_samples for n in FAST) <= 300_000


@pytest.mark.parametrize(
    "name", list(SCENARIOS) if os.environ.get("OOMWATCH_BENCH_FULL") == "1" else FAST + ["replica_tp2_cache_growth"]
)
def test_truth_matches_the_curve(name):
    """Every OOM in the truth is an `oom` event and its card drops to nothing; every proc line comes
    before the first sample holding that PID; free + used + reserved = total."""
    s = SCENARIOS[name].build()
    recs = list(s.records())
    head, truth = recs[0], recs[0]["truth"]
    totals = {g["index"]: g["total"] for g in head["gpus"]}
    oom_events = {(r["gpu"], r["t"]) for r in recs if r.get("event") == "oom"}
    assert oom_events == {(e["gpu"], e["oom"]) for e in truth["episodes"] if e["oom"] is not None}
    described: set[int] = set()
    used_at: list = []
    for r in recs[1:]:
        if r.get("event") == "proc":
            described.add(r["pid"])
        elif "gpus" in r:
            for g in r["gpus"]:
                assert g["used"] + g["free"] + g["reserved"] == totals[g["i"]]
                assert 0 <= g["used"] <= totals[g["i"]] - g["reserved"]
                assert all(p[0] in described for p in g["procs"])
                assert sum(p[1] for p in g["procs"]) == g["used"]
                used_at.append((g["i"], r["t"], g["used"]))
    for e in truth["episodes"]:
        assert e["onset"] <= e["visible"] and (e["oom"] is None or e["onset"] < e["oom"])
        if e["oom"] is not None:
            soon = e["oom"] + 1 + 2 / head["sample_hz"]
            after = [u for i, t, u in used_at if i == e["gpu"] and e["oom"] + 1 < t <= soon]
            assert after and max(after) == 0
    for st in truth["strays"]:
        assert any(r.get("event") == "proc" and r["pid"] == st["pid"] for r in recs)


def test_sample_records_parse_as_the_analysis_reads_them():
    from daemon.trace import parse_line

    recs = SCENARIOS["start_7b_l4_warm_disk"].build().records()
    next(recs)
    parsed = [parse_line(r) for r in recs]
    assert any(isinstance(p, Sample) for p in parsed) and any(isinstance(p, ProcInfo) for p in parsed)
    assert any(p is None for p in parsed)  # annotations (phase, done) are dropped
