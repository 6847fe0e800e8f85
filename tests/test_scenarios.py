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
from oomwatch.model import ProcInfo, Sample  # noqa: E402
from oomwatch.trace import read_trace  # noqa: E402

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


def test_a_reseeded_scenario_is_the_same_scenario_drawn_again():
    """`bench/detection.py --reseed K` scores each scenario drawn from another seed: the same story (cards,
    length, episodes), other draws (transients, timings), and each draw reproducible."""
    from bench import detection as D  # noqa: N812

    spec, k = D.scenario_of("crash_loop_l4#2")
    assert spec is SCENARIOS["crash_loop_l4"] and k == 2
    assert D.scenario_of("crash_loop_l4#x") is None and D.scenario_of("no_such_scenario") is None
    h0, r0, t0 = D.load("crash_loop_l4")
    h2, r2, t2 = D.load("crash_loop_l4#2")
    assert [g["name"] for g in h0["gpus"]] == [g["name"] for g in h2["gpus"]]
    assert {e["kind"] for e in t0["episodes"]} == {e["kind"] for e in t2["episodes"]} == {"leak"}
    a, b = [json.dumps(r) for r in r0], [json.dumps(r) for r in r2]
    assert a != b and len(b) > 1000
    assert b == [json.dumps(r) for r in D.load("crash_loop_l4#2")[1]]
    assert D.main(["--reseed", "-1"]) == 2


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
    # the gate (tests/test_detection.py) replays the fast subset in every CI run: about a minute of it
    assert 10 <= len(FAST) <= 32 and sum(SCENARIOS[n].gpu_samples for n in FAST) <= 340_000


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
    from oomwatch.trace import parse_line

    recs = SCENARIOS["start_7b_l4_warm_disk"].build().records()
    next(recs)
    parsed = [parse_line(r) for r in recs]
    assert any(isinstance(p, Sample) for p in parsed) and any(isinstance(p, ProcInfo) for p in parsed)
    assert any(p is None for p in parsed)  # annotations (phase, done) are dropped


# ---- Detection v3: the behaviours of BEHAVIOURS.md section 5, each checked against its docstring ---------
from bench.scenarios import behaviours as beh  # noqa: E402
from bench.scenarios import layouts as lay  # noqa: E402
from bench.scenarios.model import MB, Trace  # noqa: E402

NOPOOL = dict(util=0, profile=0, captures=0)
GB = 10**9


def _used(s: Trace, card: int = 0) -> np.ndarray:
    return sum((s.demand(p)[0] for p in s.procs if p.card == card), np.zeros(s.n))


def _at(s: Trace, arr: np.ndarray, t: float) -> float:
    return float(arr[s.idx(t)])


def _hf(card="H100", hz=1.0, duration=3600.0, weights=15 * GiB, cards=1):
    s = Trace("t", [card] * cards, hz, duration, seed=7)
    srv = lay.hf_app(s, list(range(cards)), "m", at=5)
    ready = beh.engine_start(s, srv, 5, weights=weights, shards=4, **NOPOOL)
    return s, srv, ready


def test_hot_swap_peaks_at_old_plus_new_weights_then_falls_back():
    s, srv, ready = _hf()
    freed = beh.hot_swap(s, srv, 600, weights=15 * GiB, shards=4, hold_s=90)
    u = _used(s)
    before, peak, after = _at(s, u, 590), _at(s, u, freed - 1), _at(s, u, freed + 1)
    assert abs(peak - before - 15 * GiB) < 1 * MiB  # both models resident
    assert abs(after - before) < 0.05 * GiB and freed - 90 > 600  # back to one model after the hold
    assert not s.episodes


def test_hot_swap_into_a_new_pid_ends_the_old_server():
    s = Trace("t", ["A100"], 1.0, 1800, seed=3)
    srv = lay.triton(s, [0], "org/m", at=10, backend="python")
    beh.engine_start(s, srv, 10, weights=27.5 * GiB, shards=6, **NOPOOL)
    new = lay.triton_stub(s, srv.ranks[0].ppid, 0, "org/m", 600)
    freed = beh.hot_swap(s, srv, 600, weights=27.5 * GiB, shards=6, hold_s=45, into=new)
    u = _used(s)
    assert new.ranks[0].pid != srv.ranks[0].pid and new.ranks[0].ppid == srv.ranks[0].ppid
    assert _at(s, u, freed - 1) > 2 * 27.5 * GiB and _at(s, u, freed + 1) < 29 * GiB
    assert srv.ranks[0].end == freed and not s.episodes


def test_sleep_levels_and_wake():
    s = Trace("t", ["H200", "H200"], 2.0, 3600, seed=5)
    srv = lay.vllm_v1(s, [0, 1], "m", at=10)
    ready = beh.engine_start(s, srv, 10, weights=31 * GiB, shards=8, util=0.9)
    cyc = beh.sleep_wake(s, srv, ready + 300, asleep_s=300, level=2, cycles=3, period=900, remain_rank={1: 4.8 * GiB})
    assert len(cyc) == 3
    for card, low in ((0, 1.4 * GiB), (1, 4.8 * GiB)):
        u = _used(s, card)
        awake = _at(s, u, ready + 290)
        for asleep, woke in cyc:
            assert asleep - (ready + 300 + 900 * cyc.index((asleep, woke))) <= 4.0  # falls asleep within 1-4 s
            assert abs(_at(s, u, asleep + 5) - low) < 1 * MiB  # level 2: ~1.4 GiB (4.8 on one rank) stays
            assert abs(_at(s, u, woke + 1) - awake) < 1 * MiB  # back to the level before
            assert woke - (asleep - 4.0) - 300 <= 1.0 + 4.0  # level 2 wakes in 0.1-1 s
    assert not s.episodes


def test_sleep_with_expandable_segments_frees_nothing():
    s = Trace("t", ["A100"], 1.0, 3600, seed=5)
    srv = lay.vllm_v1(s, [0], "m", at=10)
    ready = beh.engine_start(s, srv, 10, weights=15 * GiB, shards=4, util=0.9)
    beh.sleep_wake(s, srv, ready + 300, asleep_s=300, cycles=3, period=900, frees=False)
    u = _used(s)
    i = s.idx(ready + 1)
    assert u[i:].max() == u[i:].min()


def test_rl_cycle_swings_between_two_and_ninety_percent():
    spec = SCENARIOS["rl_colocate_cycle_4x_h100"]
    s = spec.build()
    u = _used(s, 2) / s.cards[2].total
    late = u[s.idx(600) :]
    assert late.min() < 0.025 and late.max() > 0.88
    swings = np.sum(np.diff((late > 0.5).astype(int)) == -1)
    assert swings >= 50  # every four minutes for hours


def test_lora_staircase_stops_at_the_cap_and_leaks_without_one():
    s, srv, ready = _hf(duration=6 * 3600.0, hz=0.5)
    n = beh.lora_adapters(s, srv, ready + 60, per_h=12, cap=4)
    u = _used(s)
    steps = np.diff(u[s.idx(ready + 30) :])
    steps = steps[steps != 0]
    assert n == 4 and len(steps) == 4 and not s.episodes
    assert set(np.round(steps / MB).astype(int)) <= {84, 168, 336}
    s2, srv2, ready2 = _hf(duration=6 * 3600.0, hz=0.5)
    n2 = beh.lora_adapters(s2, srv2, ready2 + 60, per_h=12)
    assert n2 > 30 and len(s2.episodes) == 1
    e = s2.episodes[0]
    assert e.kind == "leak" and e.pattern == "staircase" and abs(e.rate - 196 * MB * 12 / 3600) < 1


def test_reload_ratchet_rises_by_the_residue_and_its_twin_returns():
    for residue in (0, 0.4 * GB):
        s, srv, ready = _hf(card="A10", weights=5.75 * GiB, duration=3 * 3600.0)
        k = beh.reload_ratchet(s, srv, 600, every=600, weights=5.75 * GiB, shards=2, residue=residue)
        u = _used(s)
        base = _at(s, u, 590)
        troughs = [_at(s, u, 600 + j * 600 - 5) - base for j in range(1, k)]
        assert np.allclose(troughs, [residue * j for j in range(1, k)], atol=1 * MiB)
        peak = _at(s, u, 600 + 8)  # both models resident during the reload
        assert peak - base >= 5.75 * GiB - 1 * MiB
        assert bool(s.episodes) == bool(residue)


def test_paged_pool_swings_between_weights_and_91_percent():
    s, srv, ready = _hf(card="H200", duration=1800.0, hz=5.0)
    n = beh.paged_pool_swing(s, srv, ready + 5)
    u = _used(s)[s.idx(ready + 6) :]
    total = s.cards[0].total
    assert abs(u.max() / total - 0.91) < 0.001
    assert u.min() < 16.5 * GiB and n > 150  # weights only between batches, every few seconds


def test_dynamic_kv_cache_grows_with_the_largest_request_and_levels_off():
    s, srv, ready = _hf(card="H200", duration=1800.0, hz=5.0, weights=14.2 * GiB)
    rise = beh.dynamic_kv_cache(s, srv, ready + 5, per_s=1.0, median_tokens=4000, batch=4)
    u = _used(s)
    assert abs(rise - 4 * 32768 * 57e3) < 50 * MiB  # 7.5 GB: batch x max tokens x 57 KB
    assert np.all(np.diff(u[s.idx(ready) :]) >= 0)  # the allocator keeps the high-water mark
    last = np.nonzero(np.diff(u))[0][-1]
    assert s.t[last] < ready + 400  # levels off within minutes, flat for the rest


def test_kv_from_free_takes_its_fraction_of_what_is_free():
    s = Trace("t", ["H100"], 2.0, 600, seed=2)
    srv = lay.trtllm_serve(s, [0], "m", at=5)
    ready = beh.engine_start(s, srv, 5, weights=15 * GiB, shards=4, **NOPOOL)
    done = beh.kv_from_free(s, srv, ready + 2, fraction=0.9)
    u = _used(s)
    cap = s.cards[0].capacity
    before, after = _at(s, u, ready + 1), _at(s, u, done + 1)
    assert abs((cap - after) - 0.1 * (cap - before)) < 1 * MiB


def test_lazy_nccl_is_one_bounded_step():
    s = Trace("t", ["H200"] * 2, 1.0, 3600, seed=2)
    srv = lay.sglang(s, [0, 1], "m", at=5)
    ready = beh.engine_start(s, srv, 5, weights=7 * GiB, shards=4, util=0.8, profile=0)
    beh.lazy_nccl(s, srv, ready + 600, size=3.28 * GB, pieces=4, over=2.0)
    for c in (0, 1):
        u = _used(s, c)
        assert abs(_at(s, u, ready + 610) - _at(s, u, ready + 590) - 3.28 * GB) < 1 * MiB
        assert _at(s, u, 3599) == _at(s, u, ready + 610)


def test_load_cycle_troughs_return_and_peaks_are_bounded():
    s, srv, ready = _hf(duration=86400.0, hz=0.2)
    beh.load_cycle(s, srv, ready + 60, period=3600, swing=46 * GiB, floor=3.5 * GiB)
    u = _used(s)
    base = _at(s, u, ready + 30)
    for h in range(2, 23):
        cyc = u[s.idx(ready + 60 + h * 3600) : s.idx(ready + 60 + (h + 1) * 3600)] - base
        assert cyc.min() <= 3.5 * GiB + 64 * MiB and 0.8 * 46 * GiB - 128 * MiB <= cyc.max() <= 49.5 * GiB


def test_warmup_leaves_the_climb_one_step_higher():
    s, srv, ready = _hf(duration=600.0)
    done = beh.warmup(s, srv, ready + 2, 1.5 * GiB)
    u = _used(s)
    assert abs(_at(s, u, done + 5) - _at(s, u, ready + 1) - 1.5 * GiB) < 1 * MiB


def test_tenants_and_mps_are_other_processes_not_strays():
    s = Trace("t", ["A100"], 1.0, 600, seed=2)
    ctl = lay.mps(s, [0], at=2)
    beh.hold(s, ctl, 2, 27 * MB)
    p = beh.tenant(s, 0, 10, 3 * GB, ["text-embeddings-router"], name="text-embeddings-router")
    assert not s.strays and p.ppid == s.shell != 1 and ctl.ranks[0].ppid == ctl.parents[0].pid
    assert _at(s, s.demand(ctl.ranks[0])[0], 100) == 27 * MB
    assert abs(_at(s, s.demand(p)[0], 100) - 3 * GB) < 1


def test_device_map_app_is_one_pid_on_every_card():
    s = SCENARIOS["hf_device_map_32b_2x_l40s"].build()
    recs = list(s.records())
    pids = [{p[0] for p in g["procs"]} for r in recs if "gpus" in r and "t" in r for g in r["gpus"]][-2:]
    assert pids[0] == pids[1] and len(pids[0]) == 1
    assert sum(1 for r in recs if r.get("event") == "proc") == 1


def test_new_layouts_are_the_engines_process_trees():
    s = Trace("t", ["H100"] * 2, 1.0, 60, seed=1)
    cases = {
        "tgi": lay.tgi(s, [0, 1], "m", at=5, pid=1, ppid=0),
        "triton_trtllm": lay.triton(s, [0, 1], "m", at=5, backend="tensorrtllm"),
        "triton_python": lay.triton(s, [0], "m", at=5, backend="python"),
        "triton": lay.triton(s, [1], "m", at=5),
        "trtllm_serve": lay.trtllm_serve(s, [0, 1], "m", at=5),
        "notebook": lay.notebook(s, 0, at=5),
        "rl_colocated": lay.rl_colocated(s, [0, 1], "m", at=5),
    }
    for name, srv in cases.items():
        assert [p.card for p in srv.ranks] == srv.cards, name
        assert all(p.card is None for p in srv.parents), name
        pids = {p.pid for p in srv.parents}
        assert all(p.ppid in pids for p in srv.ranks) or not srv.parents, name  # ranks are the parents' children
    assert cases["tgi"].parents[0].pid == 1 and cases["tgi"].ranks[0].ppid == 1
    assert len({p.pid for p in cases["triton"].ranks}) == 1 and not cases["triton"].parents


def test_cli_lists_by_tag():
    from bench.scenarios.__main__ import main

    assert main(["--list", "--tag", "sleep"]) == 0


# ---- the corpus: >= 80 scenarios, every class of the issue, honest truths -------------------------------
CLASSES = {
    "c1": "starts without a utilisation flag, generate(), continuous batching",
    "c2": "slow leaks on small cards",
    "c3": "memory following load, and twins with a leak under it",
    "c4": "tight small cards: a start to ~99%, then a leak (or flat)",
    "c5": "hot-swaps, reloads, lazy NCCL, sleep mode, compile, LoRA",
    "c6": "flat serving for hours, tenants",
    "c7": "restart loops, one rank of many, MB/h to GB/s, spike OOMs",
}
ITEMS = [
    "hf_uvicorn",
    "tgi",
    "triton",
    "trtllm",
    "notebook",
    "dynamic_kv",
    "paged_pool",
    "hot_swap",
    "reload",
    "nccl_lazy",
    "ep_all_to_all",
    "sleep",
    "rl",
    "expandable",
    "compile",
    "lora_cap",
    "lora_leak",
    "tenant",
    "mps",
    "batch_job",
    "small_card",
    "flat",
    "restart",
    "one_rank",
    "spike",
]


def test_corpus_covers_every_class_of_detection_v3():
    specs = list(SCENARIOS.values())
    assert len(specs) >= 80
    for c in CLASSES:
        tagged = [s for s in specs if c in s.tags]
        assert len(tagged) >= 4, (c, CLASSES[c])
        healthy = [not s.build().episodes for s in tagged]
        if c not in ("c2", "c7"):  # the classes of healthy behaviours have healthy variants ...
            assert any(healthy), c
        if c not in ("c1", "c6"):  # ... and those of dangerous ones (or with twins) dangerous ones
            assert not all(healthy), c
    for item in ITEMS:
        assert any(item in s.tags for s in specs), item
    new = [s for s in specs if s.tags]
    assert {s.cards[0] for s in new} >= {"T4", "L4", "A10", "L40S", "A100", "H100", "H200"}  # 16/24/48/80/141 GB
    assert {len(s.cards) for s in new} >= {1, 2, 4, 8}
    assert min(s.hz for s in new) <= 0.2 and max(s.hz for s in new) >= 10
    fast_new = [s for s in new if s.fast]
    assert 12 <= len(fast_new) <= 18 and sum(s.gpu_samples for s in fast_new) <= 150_000


def test_truths_are_honest():
    """A scenario whose note says healthy has no episode and no stray; any other has one. A leak marked
    `page: false` never reaches OOM and keeps hours of headroom at its rate; every episode of a leak to
    OOM ends in that OOM."""
    for name, spec in SCENARIOS.items():
        s = spec.build()
        truth = s.truth()
        healthy = spec.note.startswith("Healthy")
        assert healthy == (not truth["episodes"] and not truth["strays"]), name
        for e in truth["episodes"]:
            if e.get("page") is False:
                assert e["kind"] == "leak" and e["oom"] is None, name
                u = np.minimum(_used(s, e["gpu"]), s.cards[e["gpu"]].capacity)
                free = s.cards[e["gpu"]].capacity - u[s.idx(e["onset"]) :].max()
                assert free / e["rate_bytes_per_second"] > 3 * 3600, (name, free)
    for spec in SCENARIOS.values():
        if "tenant" in spec.tags or "mps" in spec.tags:
            assert not spec.build().strays  # other tenants are not strays
