"""The scenarios: each a few lines composed from named behaviours, with its cards, length and rate.

Sizes per card: a 7-8B model in bf16 is ~15 GiB of weights (4 shards), 32B ~62 GiB, 70B ~132 GiB
(split over the TP ranks, 30-40 shards per card). The seed is derived from the name, so adding a
scenario never changes another.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

from .behaviours import (
    allocator_cache,
    compile_warmup,
    crash_loop,
    daily_load,
    empty_cache_sawtooth,
    engine_start,
    leak,
    stray,
    tall_transient,
    transients,
)
from .layouts import hf_server, sglang, vllm_v0, vllm_v1
from .model import DAY, GB, MB, MIN, GiB, H, MiB, Trace

Q7, L8, Q32, L70 = (
    "Qwen/Qwen2.5-7B-Instruct",
    "meta-llama/Llama-3.1-8B-Instruct",
    "Qwen/Qwen2.5-32B-Instruct",
    "meta-llama/Llama-3.1-70B-Instruct",
)


@dataclass(frozen=True)
class Spec:
    name: str
    cards: tuple
    duration: float
    hz: float
    fast: bool
    fn: object

    @property
    def note(self) -> str:
        return " ".join((self.fn.__doc__ or "").split())

    @property
    def gpu_samples(self) -> int:
        return (int(round(self.duration * self.hz)) + 1) * len(self.cards)

    def build(self) -> Trace:
        s = Trace(self.name, list(self.cards), self.hz, self.duration, zlib.crc32(self.name.encode()), self.note)
        self.fn(s)
        return s


SCENARIOS: dict[str, Spec] = {}


def scenario(cards, duration: float, hz: float, fast: bool = False):
    def deco(fn):
        SCENARIOS[fn.__name__] = Spec(fn.__name__, tuple(cards), duration, hz, fast, fn)
        return fn

    return deco


# ---- healthy: starts, serving, restarts --------------------------------------------------------------
@scenario(["L4"], 10 * MIN, 10.0, fast=True)
def start_7b_l4_warm_disk(s):
    """Healthy: vLLM V1 starts a 7B on one L4 from a warm disk in ~20 s, then serves with a caching
    allocator that levels off."""
    srv = vllm_v1(s, [0], Q7, at=15)
    ready = engine_start(
        s,
        srv,
        15,
        weights=14.2 * GiB,
        shards=4,
        util=0.9,
        shard_gap=(1, 2),
        captures=35,
        capture_first=60 * MiB,
        capture_fall=0.05,
        graph_s=8,
    )
    allocator_cache(s, srv, ready, largest=400 * MiB, steps=5, level_off_s=120)


@scenario(["A100", "A100"], 1 * H, 2.0)
def v0_tp2_a100_serving(s):
    """Healthy: vLLM V0 TP=2 (server holds card 0, forked worker card 1) starts a 32B and serves an
    hour; the ranks' caches level off a little apart."""
    srv = vllm_v0(s, [0, 1], Q32, at=30)
    ready = engine_start(s, srv, 30, weights=31 * GiB, shards=9, util=0.9, captures=67, capture_first=120 * MiB)
    allocator_cache(s, srv, ready, largest=[1.0 * GiB, 1.3 * GiB], steps=[5, 6], level_off_s=[600, 900])


@scenario(["H100"] * 4, 40 * MIN, 5.0, fast=True)
def v1_tp4_70b_h100_start(s):
    """Healthy: vLLM V1 TP=4 (API server without GPU memory, EngineCore, one worker per card) loads a
    70B in 35 shards per card over ~3 minutes, then serves."""
    srv = vllm_v1(s, [0, 1, 2, 3], L70, at=20)
    ready = engine_start(s, srv, 20, weights=33 * GiB, shards=35, util=0.92, shard_gap=(3, 7))
    allocator_cache(s, srv, ready, largest=1.2 * GiB, steps=6, level_off_s=900)


@scenario(["H200"] * 8, 6 * H, 0.5)
def sglang_tp8_h200_network_start(s):
    """Healthy: SGLang TP=8 (a scheduler per rank under one launcher) loads a 70B from network storage
    (10 minutes), then serves six hours."""
    srv = sglang(s, list(range(8)), L70, at=60)
    ready = engine_start(s, srv, 60, weights=16.5 * GiB, shards=38, util=0.85, profile=0.0, shard_gap=(12, 19))
    allocator_cache(s, srv, ready, largest=2.0 * GiB, steps=7, level_off_s=2 * H)


@scenario(["H100"], 20 * MIN, 2.0, fast=True)
def compile_warmup_late(s):
    """Healthy: minutes after a start, torch.compile and new batch shapes add 16 allocations of 20-80 MB
    over three minutes (a short staircase that is not a leak)."""
    srv = vllm_v1(s, [0], L8, at=10)
    ready = engine_start(s, srv, 10, weights=15 * GiB, shards=4, util=0.9)
    allocator_cache(s, srv, ready, largest=800 * MiB, steps=5, level_off_s=200)
    compile_warmup(s, srv, ready + 5 * MIN, count=16, over=3 * MIN)


@scenario(["L4"], 30 * MIN, 10.0, fast=True)
def empty_cache_sawtooth_l4(s):
    """Healthy: a server that calls torch.cuda.empty_cache() every 20 s: a bounded sawtooth of up to
    3 GiB over weights and KV at 70%."""
    srv = vllm_v1(s, [0], Q7, at=10)
    ready = engine_start(s, srv, 10, weights=14.2 * GiB, shards=4, util=0.7, captures=35, capture_first=60 * MiB)
    empty_cache_sawtooth(s, srv, ready, period=20, height=3 * GiB)


@scenario(["A10"], 3 * DAY, 0.2)
def daily_cycle_hf_a10(s):
    """Healthy: a server without a preallocated pool follows three days of daily load, between weights
    only and 6 GiB more at the busy hour, falling gradually, with visible transients."""
    srv = hf_server(s, 0, Q7, at=30)
    ready = engine_start(s, srv, 30, weights=14.2 * GiB, shards=4, util=0, profile=0, captures=0)
    daily_load(s, srv, ready, peak=6 * GiB)
    transients(s, srv, ready, per_s=0.5, lo=50 * MiB, hi=1 * GiB)


# ---- the two real recordings, rebuilt from their parameters (tests/test_scenarios.py compares them) -----

#: The start both H200 recordings made (the same faithful vLLM-like start on each rank), from their parameters.
H200_RECORDED_START: dict[str, Any] = dict(
    weights=13 * GiB,
    shards=5,
    util=0.9,
    profile=0.1,
    captures=51,
    capture_first=160 * MiB,
    capture_fall=0.07,
    graph_s=17,
    shard_gap=(2.5, 3.5),
    profile_s=(2.0, 3.0),
)


@scenario(["H200"], 197.0, 20.0)
def replica_serving_cache_growth(s):
    """Healthy: the H200 recording serving_cache_growth rebuilt from its parameters: 5 shards of 2.6 GiB
    about 3 s apart, a 10% profile spike, KV to 90%, 51 captures from 160 MiB falling 7% over 18 s, then
    150 s of serving with transients up to 1.5 GiB cached in 7 steps over ~90 s."""
    srv = vllm_v1(s, [0], Q32, at=6.1)
    ready = engine_start(s, srv, 6.1, **H200_RECORDED_START)
    allocator_cache(s, srv, ready, largest=1.5 * GiB, steps=7, level_off_s=88)
    s.end(srv, stop=195.7)


@scenario(["H200", "H200"], 165.0, 20.0)
def replica_tp2_cache_growth(s):
    """Healthy: the H200 recording tp2_cache_growth rebuilt from its parameters: two ranks under one
    launcher, the same start on each, then 120 s of serving with different request mixes (transients
    up to ~1 GiB; 4 and 6 cache steps): the ranks level off ~1.9 GB apart."""
    srv = sglang(s, [0, 1], Q32, at=6.6)
    ready = engine_start(s, srv, 6.6, **H200_RECORDED_START)
    allocator_cache(s, srv, ready, largest=[1.0 * GiB, 1.0 * GiB], steps=[4, 6], level_off_s=[90, 48])
    s.end(srv, stop=163.4)


# ---- leaks to OOM -------------------------------------------------------------------------------------
@scenario(["H100"], 90 * MIN, 1.0, fast=True)
def leak_55min_to_oom_h100(s):
    """A leak outside the KV pool (small tensors, 4 MB/s) ends in CUDA OOM about 55 minutes after its
    onset: vLLM V1 on an H100 at 80%, ramp starting 10 minutes after ready."""
    srv = vllm_v1(s, [0], L8, at=20)
    ready = engine_start(s, srv, 20, weights=15 * GiB, shards=4, util=0.8)
    allocator_cache(s, srv, ready, largest=1 * GiB, steps=5, level_off_s=300)
    leak(s, srv, ready + 10 * MIN, rate=4 * MB)
    s.end(srv)


@scenario(["H200"], 10 * MIN, 10.0, fast=True)
def leak_gb_per_second_h200(s):
    """A leak of 1.5 GB/s (per-request CUDA graphs gone wrong) on a server at 60% of an H200: CUDA OOM
    within a minute of its onset."""
    srv = vllm_v1(s, [0], Q32, at=10)
    ready = engine_start(s, srv, 10, weights=62 * GiB, shards=14, util=0.6, shard_gap=(0.5, 1.5))
    leak(s, srv, ready + 2 * MIN, rate=1.5 * GB)
    s.end(srv)


@scenario(["A100", "A100"], 30 * MIN, 5.0, fast=True)
def staircase_leak_rank1_a100(s):
    """One rank leaks in steps: vLLM V0 TP=2 at 80%; rank 1 keeps 512 MiB every 20 s until CUDA OOM
    (the whole server dies with it)."""
    srv = vllm_v0(s, [0, 1], Q32, at=10)
    ready = engine_start(s, srv, 10, weights=31 * GiB, shards=8, util=0.8)
    leak(s, srv, ready + 3 * MIN, rate=512 * MiB / 20, ranks=[1], pattern="staircase", every=20)
    s.end(srv)
    s.imbalance = True


@scenario(["H200"], 10 * MIN, 10.0, fast=True)
def warm_cache_leak_h200(s):
    """A leak of 60 MB/s starts while the allocator's cache is warm (the H200 experiment): NVML sees
    nothing until the cache is used up, then the card sits near 100% until CUDA OOM."""
    srv = vllm_v1(s, [0], Q32, at=5)
    ready = engine_start(s, srv, 5, weights=13.3 * GiB, shards=5, util=0.9, graph_s=18, shard_gap=(2.5, 3.5))
    allocator_cache(s, srv, ready, largest=1.5 * GiB, steps=7, level_off_s=90)
    leak(s, srv, ready + 150, rate=60 * MB, pattern="warm_cache")
    s.end(srv)


@scenario(["L4"], 60 * MIN, 2.0, fast=True)
def crash_loop_l4(s):
    """A restart loop: a 7B on an L4 leaks 40 MB/s from a minute after ready, dies of CUDA OOM, is
    restarted with back-off (new PIDs) and fills up again."""
    crash_loop(
        s,
        lambda t: vllm_v1(s, [0], Q7, at=t),
        20,
        start=dict(weights=14.2 * GiB, shards=4, util=0.85, captures=35, capture_first=60 * MiB),
        cache=dict(largest=300 * MiB, steps=4, level_off_s=60),
        leak_after=60,
        rate=40 * MB,
    )


# ---- slow leaks that never reach OOM in the trace -------------------------------------------------
@scenario(["L4"], 2 * DAY, 0.2)
def leak_30mb_per_hour_l4(s):
    """A 30 MB/hour leak on a 24 GB card over two days (vLLM issue 28230, "grows over days"): nowhere
    near OOM when the trace ends; it must be flagged within 6 hours."""
    srv = vllm_v1(s, [0], Q7, at=30)
    ready = engine_start(s, srv, 30, weights=14.2 * GiB, shards=4, util=0.85, captures=35, capture_first=60 * MiB)
    allocator_cache(s, srv, ready, largest=64 * MiB, steps=3, level_off_s=1 * H)
    leak(s, srv, ready + 2 * H, rate=30 * MB / H, deadline_s=6 * H)


@scenario(["H100"], 12 * H, 0.2, fast=True)
def leak_500mb_per_hour_h100(s):
    """A 500 MB/hour leak (a growing Python-side cache of GPU tensors) from an hour after the start;
    twelve hours later the card is still short of OOM: it must be flagged within 6 hours."""
    srv = vllm_v1(s, [0], L8, at=30)
    ready = engine_start(s, srv, 30, weights=15 * GiB, shards=4, util=0.8)
    allocator_cache(s, srv, ready, largest=500 * MiB, steps=5, level_off_s=30 * MIN)
    leak(s, srv, ready + 1 * H, rate=500 * MB / H)


# ---- other processes --------------------------------------------------------------------------------
@scenario(["H100"], 30 * MIN, 2.0, fast=True)
def orphan_beside_server_h100(s):
    """An orphaned worker of a crashed run (parent gone, ppid 1) still holds 8 GiB when vLLM starts
    next to it at 80%."""
    stray(s, 0, 1.0, 8 * GiB, cmdline=["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", L8])
    srv = vllm_v1(s, [0], L8, at=60)
    ready = engine_start(s, srv, 60, weights=15 * GiB, shards=4, util=0.8)
    allocator_cache(s, srv, ready, largest=1 * GiB, steps=5, level_off_s=300)


# ---- more healthy serving: long runs, restarts, layouts ----------------------------------------------
@scenario(["H100"], 7 * DAY, 0.2)
def week_serving_with_upgrades_h100(s):
    """Healthy: a week of vLLM V1 serving an 8B on an H100; the allocator cache levels off over six
    hours; an upgrade restarts the server (new PIDs) on days 3 and 6."""
    t = 30.0
    for stop in (3 * DAY, 6 * DAY, None):
        srv = vllm_v1(s, [0], L8, at=t)
        ready = engine_start(s, srv, t, weights=15 * GiB, shards=4, util=0.9)
        allocator_cache(s, srv, ready, largest=800 * MiB, steps=6, level_off_s=6 * H)
        if stop is not None:
            t = s.end(srv, stop=stop) + 45


@scenario(["A100", "A100"], 3 * DAY, 0.2)
def nightly_restart_v0_tp2_a100(s):
    """Healthy: vLLM V0 TP=2 serves a 32B for three days and is restarted every night at 03:00 by a
    cron job; each start climbs to the line again."""
    t = 60.0
    for stop in (1 * DAY - 21 * H + 3 * H, 2 * DAY - 21 * H + 3 * H, 3 * DAY - 21 * H + 3 * H, None):
        srv = vllm_v0(s, [0, 1], Q32, at=t)
        ready = engine_start(s, srv, t, weights=31 * GiB, shards=9, util=0.88)
        allocator_cache(s, srv, ready, largest=[600 * MiB, 800 * MiB], steps=6, level_off_s=3 * H)
        if stop is None or stop >= s.duration:
            break
        t = s.end(srv, stop=stop) + 90


@scenario(["L4", "L4"], 2 * H, 1.0)
def container_pid1_v0_tp2_l4(s):
    """Healthy: vLLM V0 TP=2 in a container, the server is PID 1, so its forked worker's parent is PID 1
    too (not an orphan); a 7B over two L4s."""
    srv = vllm_v0(s, [0, 1], Q7, at=5, pid=1, ppid=0)
    ready = engine_start(s, srv, 5, weights=7.1 * GiB, shards=2, util=0.9, captures=35, capture_first=60 * MiB)
    allocator_cache(s, srv, ready, largest=[400 * MiB, 500 * MiB], steps=5, level_off_s=20 * MIN)


@scenario(["L4", "L4"], 1 * DAY, 0.2)
def sglang_tp2_l4_day(s):
    """Healthy: SGLang TP=2 (mem_fraction_static 0.88, no profile run) serves a 7B for a day."""
    srv = sglang(s, [0, 1], Q7, at=40)
    ready = engine_start(
        s, srv, 40, weights=7.1 * GiB, shards=2, util=0.88, profile=0, captures=40, capture_first=80 * MiB
    )
    allocator_cache(s, srv, ready, largest=[600 * MiB, 500 * MiB], steps=6, level_off_s=4 * H)


@scenario(["H200"] * 8, 1 * H, 10.0)
def v1_tp8_h200_busy_hour(s):
    """Healthy: vLLM V1 TP=8 on eight H200s through a busy hour sampled at 10 Hz: a 70B starts in
    about two minutes and its ranks' caches level off 1-3% apart."""
    srv = vllm_v1(s, list(range(8)), L70, at=20)
    ready = engine_start(s, srv, 20, weights=16.5 * GiB, shards=32, util=0.9, shard_gap=(1, 5))
    allocator_cache(
        s,
        srv,
        ready,
        largest=[900 * MiB + k * 50 * MiB for k in range(8)],
        steps=[4, 5, 5, 6, 4, 5, 6, 5],
        level_off_s=15 * MIN,
    )


@scenario(["L4", "L4"], 30 * MIN, 5.0)
def one_card_of_two_used_l4(s):
    """Healthy curve, wrong setup: a 7B serves from card 0 of two L4s (tensor parallel not set); card 1
    idles beside a full one (imbalance expected)."""
    srv = vllm_v1(s, [0], Q7, at=10)
    ready = engine_start(s, srv, 10, weights=14.2 * GiB, shards=4, util=0.9, captures=35, capture_first=60 * MiB)
    allocator_cache(s, srv, ready, largest=300 * MiB, steps=4, level_off_s=5 * MIN)
    s.imbalance = True


@scenario(["A100"], 12 * H, 0.5)
def rolling_restarts_a100(s):
    """Healthy: node drains restart a vLLM V1 server every three hours; each exit releases everything
    at once (not a spike, not a crash) and the next start climbs again."""
    t = 20.0
    for k in range(4):
        srv = vllm_v1(s, [0], Q32, at=t)
        ready = engine_start(s, srv, t, weights=62 * GiB, shards=14, util=0.9)
        allocator_cache(s, srv, ready, largest=500 * MiB, steps=5, level_off_s=40 * MIN)
        if k < 3:
            t = s.end(srv, stop=(k + 1) * 3 * H) + 120


@scenario(["A10"], 10 * MIN, 10.0, fast=True)
def start_at_80_percent_a10(s):
    """Healthy: vLLM V0 on an A10 at gpu_memory_utilization 0.8 (not the default line), then serving
    with visible transients under empty_cache (expandable segments)."""
    srv = vllm_v0(s, [0], Q7, at=8)
    ready = engine_start(s, srv, 8, weights=14.2 * GiB, shards=4, util=0.8, captures=35, capture_first=60 * MiB)
    transients(s, srv, ready, per_s=2.0, lo=64 * MiB, hi=1.5 * GiB)


# ---- more leaks -------------------------------------------------------------------------------------
@scenario(["H100"] * 4, 1 * DAY, 0.2)
def leak_200mb_per_hour_one_rank_h100(s):
    """One rank of four leaks 200 MB/hour (multimodal inputs kept, vLLM issue 27452) from two hours
    after a 70B start; the others stay flat."""
    srv = vllm_v1(s, [0, 1, 2, 3], L70, at=30)
    ready = engine_start(s, srv, 30, weights=33 * GiB, shards=35, util=0.9)
    allocator_cache(s, srv, ready, largest=600 * MiB, steps=5, level_off_s=1 * H)
    leak(s, srv, ready + 2 * H, rate=200 * MB / H, ranks=[2])
    s.end(srv)


@scenario(["A100"], 16 * H, 0.5)
def leak_1gb_per_hour_to_oom_a100(s):
    """A leak of 1 GB/hour (tensors kept across requests) from an hour after the start reaches CUDA OOM
    after about ten hours on an A100 at 85%."""
    srv = vllm_v1(s, [0], Q32, at=30)
    ready = engine_start(s, srv, 30, weights=62 * GiB, shards=14, util=0.85)
    allocator_cache(s, srv, ready, largest=800 * MiB, steps=5, level_off_s=40 * MIN)
    leak(s, srv, ready + 1 * H, rate=1 * GB / H)
    s.end(srv)


@scenario(["A100"] * 4, 4 * DAY, 0.2)
def leak_days_to_oom_v0_tp4_a100(s):
    """A leak that takes days: every rank of vLLM V0 TP=4 keeps 80 MB/hour (vLLM issue 28230, "grows
    over days") and the server dies of CUDA OOM after more than three days."""
    srv = vllm_v0(s, [0, 1, 2, 3], L70, at=60)
    ready = engine_start(s, srv, 60, weights=33 * GiB, shards=36, util=0.88)
    allocator_cache(s, srv, ready, largest=500 * MiB, steps=5, level_off_s=2 * H)
    leak(s, srv, ready + 3 * H, rate=80 * MB / H)
    s.end(srv)


@scenario(["H100", "H100"], 8 * H, 0.5)
def leak_every_rank_v1_tp2_h100(s):
    """Every rank leaks 3 GB/hour (per-request CUDA graphs) under vLLM V1 TP=2 at 80% from 30 minutes
    after ready, to CUDA OOM."""
    srv = vllm_v1(s, [0, 1], Q32, at=15)
    ready = engine_start(s, srv, 15, weights=31 * GiB, shards=8, util=0.8)
    allocator_cache(s, srv, ready, largest=[900 * MiB, 1.1 * GiB], steps=5, level_off_s=20 * MIN)
    leak(s, srv, ready + 30 * MIN, rate=3 * GB / H)
    s.end(srv)


@scenario(["H200"] * 8, 3 * H, 0.5)
def leak_one_rank_tp8_h200(s):
    """Rank 5 of eight leaks 6 GB/hour (a cache kept on one rank) under SGLang TP=8; the others stay
    flat; CUDA OOM on rank 5 kills the server."""
    srv = sglang(s, list(range(8)), L70, at=30)
    ready = engine_start(s, srv, 30, weights=16.5 * GiB, shards=34, util=0.88, profile=0)
    allocator_cache(s, srv, ready, largest=1.5 * GiB, steps=5, level_off_s=30 * MIN)
    leak(s, srv, ready + 40 * MIN, rate=6 * GB / H, ranks=[5])
    s.end(srv)
    s.imbalance = True


@scenario(["H100"], 8 * H, 0.5)
def warm_cache_slow_leak_h100(s):
    """A 1.6 MB/s leak of large tensors starts under a warm 6 GiB allocator cache: NVML shows nothing
    for most of an hour, then a slow climb, then the card sits near 100% until CUDA OOM."""
    srv = vllm_v1(s, [0], L8, at=20)
    ready = engine_start(s, srv, 20, weights=15 * GiB, shards=4, util=0.85)
    allocator_cache(s, srv, ready, largest=1.2 * GiB, steps=6, level_off_s=1 * H)
    leak(s, srv, ready + 2 * H, rate=1.6 * MB, pattern="warm_cache")
    s.end(srv)


@scenario(["L4"], 1 * H, 2.0, fast=True)
def rising_troughs_l4(s):
    """A sawtooth whose troughs rise: empty_cache every 30 s, and 96 MiB kept each cycle, until CUDA
    OOM (a leak hidden in a healthy-looking pattern)."""
    srv = vllm_v1(s, [0], Q7, at=10)
    ready = engine_start(s, srv, 10, weights=14.2 * GiB, shards=4, util=0.7, captures=35, capture_first=60 * MiB)
    empty_cache_sawtooth(s, srv, ready, period=30, height=2.5 * GiB)
    leak(s, srv, ready + 5 * MIN, rate=96 * MiB / 30, pattern="troughs", every=30)
    s.end(srv)


@scenario(["A10"], 2 * H, 2.0)
def growing_peaks_a10(s):
    """Peaks that grow (longer and longer prompts) over a flat floor: an empty_cache sawtooth whose
    peaks grow 3 GiB an hour until one no longer fits: CUDA OOM."""
    srv = vllm_v1(s, [0], Q7, at=10)
    ready = engine_start(s, srv, 10, weights=14.2 * GiB, shards=4, util=0.72, captures=35, capture_first=60 * MiB)
    empty_cache_sawtooth(s, srv, ready, period=45, height=1.5 * GiB, growth=3 * GiB / H, onset=ready + 10 * MIN)
    s.end(srv)


@scenario(["A100", "A100"], 6 * H, 0.5)
def crash_loop_v0_tp2_a100(s):
    """A restart loop on two A100s: vLLM V0 TP=2 leaks 8 GB/hour on every rank from 10 minutes after
    ready, dies of CUDA OOM, is restarted with back-off and fills up again."""
    crash_loop(
        s,
        lambda t: vllm_v0(s, [0, 1], Q32, at=t),
        30,
        start=dict(weights=31 * GiB, shards=8, util=0.9),
        cache=dict(largest=1 * GiB, steps=5, level_off_s=15 * MIN),
        leak_after=10 * MIN,
        rate=8 * GB / H,
    )


@scenario(["L4"], 5 * DAY, 0.2)
def daily_cycle_with_leak_l4(s):
    """A 50 MB/hour leak under a daily load cycle (a server without a pool) over five days: the
    nightly troughs rise; nowhere near OOM at the end."""
    srv = hf_server(s, 0, Q7, at=30)
    ready = engine_start(s, srv, 30, weights=14.2 * GiB, shards=4, util=0, profile=0, captures=0)
    daily_load(s, srv, ready, peak=4 * GiB)
    transients(s, srv, ready, per_s=0.3, lo=50 * MiB, hi=600 * MiB)
    leak(s, srv, ready + 6 * H, rate=50 * MB / H)


@scenario(["A100"], 30 * MIN, 10.0, fast=True)
def spike_oom_hf_a100(s):
    """Transients taller than the free headroom: a server without a pool whose prefill buffers reach
    14 GiB beside 62 GiB of weights; a long prompt asks 24 GiB and fails with CUDA OOM."""
    srv = hf_server(s, 0, Q32, at=10)
    ready = engine_start(s, srv, 10, weights=62 * GiB, shards=14, util=0, profile=0, captures=0)
    transients(s, srv, ready, per_s=0.5, lo=1 * GiB, hi=14 * GiB)
    tall_transient(s, srv, ready + 20 * MIN, 24 * GiB)
    s.end(srv)


@scenario(["H100"], 20 * MIN, 5.0)
def fine_staircase_high_base_h100(s):
    """A finer staircase from a higher base: 128 MiB kept every 4 s from 93% of an H100 until CUDA OOM."""
    srv = vllm_v0(s, [0], L8, at=10)
    ready = engine_start(s, srv, 10, weights=15 * GiB, shards=4, util=0.93)
    leak(s, srv, ready + 4 * MIN, rate=128 * MiB / 4, pattern="staircase", every=4)
    s.end(srv)


# ---- more strays ------------------------------------------------------------------------------------
@scenario(["A100", "A100"], 2 * H, 1.0)
def notebook_on_serving_card_a100(s):
    """A notebook (under Jupyter, outside the server's tree) takes 6 GiB on card 1 of a vLLM V0 TP=2
    server at 80% for half an hour, then its kernel is shut down."""
    srv = vllm_v0(s, [0, 1], Q32, at=20)
    ready = engine_start(s, srv, 20, weights=31 * GiB, shards=8, util=0.8)
    allocator_cache(s, srv, ready, largest=1 * GiB, steps=5, level_off_s=20 * MIN)
    jupyter = s.pid()
    stray(
        s,
        1,
        40 * MIN,
        6 * GiB,
        ppid=jupyter,
        until=70 * MIN,
        cmdline=["python3", "-m", "ipykernel_launcher", "-f", "kernel-1.json"],
    )


@scenario(["H100", "H100"], 1 * H, 1.0)
def orphan_worker_after_crash_h100(s):
    """An orphan of a crashed vLLM V0 TP=2 run (its worker, re-parented to PID 1, same command line)
    still holds 30 GiB on card 1 when the server is started again at 50%."""
    stray(
        s,
        1,
        1.0,
        30 * GiB,
        cmdline=[
            "/usr/bin/python3",
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            Q32,
            "--tensor-parallel-size",
            "2",
        ],
    )
    srv = vllm_v0(s, [0, 1], Q32, at=90)
    ready = engine_start(s, srv, 90, weights=31 * GiB, shards=8, util=0.5)
    allocator_cache(s, srv, ready, largest=1 * GiB, steps=5, level_off_s=20 * MIN)
    s.imbalance = None  # card 1 holds 30 GiB more: whether that is imbalance is not judged
