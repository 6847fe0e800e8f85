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
    dynamic_kv_cache,
    empty_cache_sawtooth,
    engine_start,
    hold,
    hot_swap,
    kv_from_free,
    lazy_nccl,
    leak,
    load_cycle,
    lora_adapters,
    paged_pool_swing,
    reload_ratchet,
    sleep_wake,
    stray,
    tall_transient,
    tenant,
    transients,
    warmup,
)
from .layouts import (
    PY,
    hf_app,
    hf_server,
    mps,
    notebook,
    rl_colocated,
    sglang,
    tgi,
    triton,
    triton_stub,
    trtllm_serve,
    vllm_v0,
    vllm_v1,
)
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
    tags: tuple = ()  # the classes and BEHAVIOURS.md items it stands for (not written into the trace)

    @property
    def note(self) -> str:
        return " ".join((self.fn.__doc__ or "").split())

    @property
    def gpu_samples(self) -> int:
        return (int(round(self.duration * self.hz)) + 1) * len(self.cards)

    def build(self, reseed: int = 0) -> Trace:
        """The trace; `reseed` K > 0 draws the same scenario from another seed (its transients, timings and
        loads fall differently), to see whether a verdict holds beyond one draw."""
        key = self.name if not reseed else f"{self.name}#{reseed}"
        s = Trace(self.name, list(self.cards), self.hz, self.duration, zlib.crc32(key.encode()), self.note)
        self.fn(s)
        return s


SCENARIOS: dict[str, Spec] = {}


def scenario(cards, duration: float, hz: float, fast: bool = False, tags: tuple = ()):
    def deco(fn):
        SCENARIOS[fn.__name__] = Spec(fn.__name__, tuple(cards), duration, hz, fast, fn, tuple(tags))
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


@scenario(["A100", "A100"], 6 * H, 0.5, fast=True)
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


# ==== Detection v3: beyond vLLM and SGLang, beyond a steady server (BEHAVIOURS.md section 5) ===========
# Tags: the classes (c1 no-flag starts, c2 slow leaks on small cards, c3 memory following load,
# c4 tight small cards, c5 lifecycle events, c6 flat serving and tenants, c7 restarts/leaks/spikes) and the
# section 5 items each scenario stands for. Sizes: Qwen2.5-3B ~5.75 GiB of bf16 weights, 14B ~27.5 GiB,
# Qwen3-30B-A3B ~57 GiB; KV per token (bf16): 3B ~37 KB, 7B ~57 KB, 32B ~262 KB.
Q3, Q14, MOE, BGE = (
    "Qwen/Qwen2.5-3B-Instruct",
    "Qwen/Qwen2.5-14B-Instruct",
    "Qwen/Qwen3-30B-A3B",
    "BAAI/bge-large-en-v1.5",
)
NOPOOL: dict[str, Any] = dict(util=0, profile=0, captures=0)  # engine_start of a server without a pool
TEI = ["text-embeddings-router", "--model-id", BGE, "--port", "8080"]
BATCH = ["/usr/bin/python3", "/opt/jobs/nightly_embed.py", "--shard", "all"]


# ---- c1: starts of servers without a utilisation flag, generate() and continuous batching ---------------
@scenario(["H200"], 30 * MIN, 5.0, fast=True, tags=("c1", "hf_uvicorn", "dynamic_kv"))
def hf_uvicorn_7b_generate_h200(s):
    """Healthy: a Hugging Face app under uvicorn on an H200 (no utilisation flag): context, Qwen2.5-7B in 4
    shards, one warm-up generate(), then plain generate() with a dynamic KV cache (57 KB/token, batches of
    4 long-tailed prompts up to 32k tokens): the allocator's cache climbs ~7.5 GB, 16.0 -> 23.5 GB, in six
    steps over ~2.5 minutes with the largest request (H200, transformers 5.17: 15.4 -> 22.9 GB over 100 s),
    then levels off."""
    srv = hf_app(s, [0], Q7, at=10)
    ready = engine_start(s, srv, 10, weights=14.2 * GiB, shards=4, shard_gap=(1, 3), **NOPOOL)
    w = warmup(s, srv, ready + 2, 64 * MiB)
    dynamic_kv_cache(s, srv, w + 5, per_s=0.7, median_tokens=3000, batch=4)
    s.end(srv)


@scenario(["T4"], 6 * H, 0.5, tags=("c1", "hf_uvicorn", "dynamic_kv"))
def hf_uvicorn_3b_generate_t4(s):
    """Healthy: an HF app under uvicorn serves Qwen2.5-3B on a 16 GB T4 (torch sees 14.58 GiB) for six
    hours: weights in 2 shards, a warm-up, then a dynamic KV cache (37 KB/token, prompts up to 32k) that
    grows with the largest request and levels off about 1.2 GB higher."""
    srv = hf_app(s, [0], Q3, at=20)
    ready = engine_start(s, srv, 20, weights=5.75 * GiB, shards=2, **NOPOOL)
    w = warmup(s, srv, ready + 3, 200 * MiB)
    dynamic_kv_cache(s, srv, w + 10, per_s=0.3, per_token=37e3, median_tokens=1500)
    s.end(srv)


@scenario(["L40S", "L40S"], 6 * H, 0.2, tags=("c1", "hf_uvicorn", "dynamic_kv"))
def hf_device_map_32b_2x_l40s(s):
    """Healthy: one uvicorn process (one PID on both cards, device_map="auto") holds Qwen2.5-32B split over
    two 48 GB L40S; generate() with a dynamic KV cache (262 KB/token, batches of 2 up to 32k tokens, half
    per card) levels off ~8.6 GB over the weights on each card."""
    srv = hf_app(s, [0, 1], Q32, at=30)
    ready = engine_start(s, srv, 30, weights=31 * GiB, shards=9, **NOPOOL)
    w = warmup(s, srv, ready + 3, 500 * MiB)
    dynamic_kv_cache(s, srv, w + 10, per_s=0.2, per_token=262e3, median_tokens=2000, batch=2)
    s.end(srv)
    s.imbalance = None  # device_map splits the layers unevenly: not judged


@scenario(["A10", "A10"], 30 * MIN, 2.0, fast=True, tags=("c1", "tgi"))
def tgi_tp2_a10_start(s):
    """Healthy: TGI (PID 1 in its container, no utilisation flag) shards a 7B over two A10s: context, NCCL,
    weights, a warm-up prefill of 1.5 GiB kept by the allocator, then a KV cache that fills 95% of what is
    left; it serves flat at the top."""
    srv = tgi(s, [0, 1], Q7, at=8, pid=1, ppid=0)
    ready = engine_start(s, srv, 8, weights=7.1 * GiB, shards=2, **NOPOOL)
    w = warmup(s, srv, ready + 1, 1.5 * GiB)
    done = kv_from_free(s, srv, w + 1, fraction=0.95)
    allocator_cache(s, srv, done, largest=[120 * MiB, 150 * MiB], steps=3, level_off_s=5 * MIN)
    s.end(srv)


@scenario(["H100"] * 4, 2 * H, 0.5, tags=("c1", "tgi"))
def tgi_tp4_70b_h100_network(s):
    """Healthy: TGI shards a 70B over four H100s from network storage: each rank reads its slice of 30
    safetensors files over ~4 minutes (a regular staircase), warms up with 4 GiB, then its KV cache
    takes 95% of what is free."""
    srv = tgi(s, [0, 1, 2, 3], L70, at=20)
    ready = engine_start(s, srv, 20, weights=33 * GiB, shards=30, shard_gap=(5, 11), **NOPOOL)
    w = warmup(s, srv, ready + 2, 4 * GiB)
    done = kv_from_free(s, srv, w + 1, fraction=0.95)
    allocator_cache(s, srv, done, largest=300 * MiB, steps=4, level_off_s=20 * MIN)
    s.end(srv)


@scenario(["T4"], 4 * H, 0.5, tags=("c1", "triton", "dynamic_kv"))
def triton_python_backend_t4(s):
    """Healthy: Triton (explicit model control, no utilisation flag) serves Qwen2.5-3B through its Python
    backend on a T4: the stub process (tritonserver's child) loads the weights, warms up and generates
    with a dynamic KV cache that levels off."""
    srv = triton(s, [0], Q3, at=15, backend="python")
    ready = engine_start(s, srv, 15, weights=5.75 * GiB, shards=2, **NOPOOL)
    w = warmup(s, srv, ready + 2, 300 * MiB)
    dynamic_kv_cache(s, srv, w + 5, per_s=0.2, per_token=37e3, median_tokens=1000, max_tokens=16384)
    s.end(srv)


@scenario(["H100", "H100"], 3 * H, 0.5, tags=("c1", "triton", "trtllm"))
def triton_trtllm_tp2_h100(s):
    """Healthy: Triton's tensorrtllm backend, TP=2 under mpirun (one tritonserver per rank): each rank
    deserialises its 31 GiB engine in 4 fast chunks, then the KV cache takes 90% of the free memory
    (kv_cache_free_gpu_mem_fraction), not 90% of the card; runtime buffers settle after."""
    srv = triton(s, [0, 1], Q32, at=20, backend="tensorrtllm")
    ready = engine_start(s, srv, 20, weights=31 * GiB, shards=4, shard_gap=(0.5, 1.5), **NOPOOL)
    done = kv_from_free(s, srv, ready + 2, fraction=0.9)
    allocator_cache(s, srv, done, largest=[500 * MiB, 600 * MiB], steps=4, level_off_s=30 * MIN)
    s.end(srv)


@scenario(["H200"], 1 * H, 2.0, tags=("c1", "trtllm"))
def trtllm_serve_8b_h200(s):
    """Healthy: TensorRT-LLM's trtllm-serve (PyTorch backend, no utilisation flag) on an H200: context,
    an 8B in 4 shards, a KV cache of 90% of what is free (free_gpu_memory_fraction), a bounded
    compile/graph warm-up, then serving."""
    srv = trtllm_serve(s, [0], L8, at=10)
    ready = engine_start(s, srv, 10, weights=15 * GiB, shards=4, **NOPOOL)
    done = kv_from_free(s, srv, ready + 3, fraction=0.9)
    compile_warmup(s, srv, done + 5, count=12, over=40)
    allocator_cache(s, srv, done + 60, largest=800 * MiB, steps=5, level_off_s=10 * MIN)
    s.end(srv)


@scenario(["H200"] * 8, 30 * MIN, 1.0, tags=("c1", "trtllm"))
def trtllm_serve_tp8_70b_h200(s):
    """Healthy: trtllm-serve TP=8 (the serve process holds no memory, MPI workers hold one card each)
    loads a 70B in 32 shards per card, then takes 90% of the free memory for the KV cache."""
    srv = trtllm_serve(s, list(range(8)), L70, at=15)
    ready = engine_start(s, srv, 15, weights=16.5 * GiB, shards=32, shard_gap=(1, 4), **NOPOOL)
    done = kv_from_free(s, srv, ready + 3, fraction=0.9)
    allocator_cache(s, srv, done, largest=600 * MiB, steps=4, level_off_s=10 * MIN)
    s.end(srv)


@scenario(["A10"], 4 * H, 0.5, tags=("c1", "notebook", "dynamic_kv"))
def notebook_generate_a10(s):
    """Healthy: a data scientist's notebook loads a 7B on an A10, runs a warm-up cell, then calls
    generate() now and then for four hours: the dynamic KV cache grows with the longest prompt tried and
    levels off; nothing on a command line says where the climb ends."""
    srv = notebook(s, 0, at=60)
    ready = engine_start(s, srv, 60, weights=14.2 * GiB, shards=4, shard_gap=(2, 5), **NOPOOL)
    w = warmup(s, srv, ready + 30, 100 * MiB)
    dynamic_kv_cache(s, srv, w + 60, per_s=0.02, median_tokens=3000, max_tokens=32768)
    s.end(srv)


CB = [PY, "-m", "transformers.cli.transformers", "serve", "--continuous_batching", "--port", "8000"]


@scenario(["L40S"], 30 * MIN, 5.0, fast=True, tags=("c1", "paged_pool"))
def cb_paged_pool_swing_l40s(s):
    """Healthy: `transformers serve` with continuous batching on an L40S: the paged pool (sized from
    max_memory_percent) is allocated around every batch and given back, so the card swings between
    weights-only (~16 GB) and 91% every few seconds."""
    srv = hf_app(s, [0], L8, at=10, cmd=CB, name="transformers")
    ready = engine_start(s, srv, 10, weights=15 * GiB, shards=4, **NOPOOL)
    paged_pool_swing(s, srv, ready + 5)
    s.end(srv)


@scenario(["H200"], 6 * H, 0.5, tags=("c1", "paged_pool"))
def cb_paged_pool_swing_h200_hours(s):
    """Healthy: transformers continuous batching on an H200 for six hours: a ~122 GB paged pool taken and
    given back around every batch (2-8 s), between 15 GB of weights and 91% of the card."""
    srv = hf_app(s, [0], Q7, at=10, cmd=CB, name="transformers")
    ready = engine_start(s, srv, 10, weights=14.2 * GiB, shards=4, **NOPOOL)
    paged_pool_swing(s, srv, ready + 5)
    s.end(srv)


@scenario(["A100"], 20 * MIN, 10.0, tags=("c1", "paged_pool"))
def cb_paged_pool_swing_a100_10hz(s):
    """Healthy: transformers continuous batching on an A100 sampled at 10 Hz: every batch takes the pool
    (to 91%) in one sample and gives it back in one, short batches of 1-3 s."""
    srv = hf_app(s, [0], Q14, at=10, cmd=CB, name="transformers")
    ready = engine_start(s, srv, 10, weights=27.5 * GiB, shards=6, **NOPOOL)
    paged_pool_swing(s, srv, ready + 5, batch_s=(1.0, 3.0), gap_s=(0.2, 1.0))
    s.end(srv)


# ---- c2: slow leaks on small cards (a leak warning, never a page) --------------------------------------
@scenario(["A10"], 1 * DAY, 0.2, tags=("c2", "small_card"))
def leak_30mb_per_hour_a10_day(s):
    """A 30 MB/hour leak on a 24 GB A10 over a day (vLLM V1 at 85%): hundreds of MB of headroom left at
    the end, an ETA of many hours: a leak warning within 6 hours, never a page."""
    srv = vllm_v1(s, [0], Q7, at=30)
    ready = engine_start(s, srv, 30, weights=14.2 * GiB, shards=4, util=0.85, captures=35, capture_first=60 * MiB)
    allocator_cache(s, srv, ready, largest=100 * MiB, steps=3, level_off_s=1 * H)
    leak(s, srv, ready + 1 * H, rate=30 * MB / H, deadline_s=6 * H, page=False)
    s.end(srv)


@scenario(["T4"], 1 * DAY, 0.2, tags=("c2", "small_card", "hf_uvicorn"))
def leak_30mb_per_hour_hf_t4_day(s):
    """A 30 MB/hour leak in an HF app under uvicorn on a 16 GB T4 (a list of cached GPU tensors), from two
    hours after its dynamic cache levelled off: a leak warning within 6 hours, no page (GBs free)."""
    srv = hf_app(s, [0], Q3, at=20)
    ready = engine_start(s, srv, 20, weights=5.75 * GiB, shards=2, **NOPOOL)
    dynamic_kv_cache(s, srv, ready + 10, until=1 * H, per_s=0.5, per_token=37e3, median_tokens=2000)
    leak(s, srv, 3 * H, rate=30 * MB / H, deadline_s=6 * H, page=False)
    s.end(srv)


@scenario(["L4", "L4"], 1 * DAY, 0.2, tags=("c2", "small_card"))
def leak_30mb_per_hour_one_rank_l4_tp2(s):
    """One rank of vLLM V0 TP=2 on two L4s leaks 30 MB/hour for a day (the other flat): a leak warning on
    card 0 within 6 hours, no page."""
    srv = vllm_v0(s, [0, 1], Q7, at=30)
    ready = engine_start(s, srv, 30, weights=7.1 * GiB, shards=2, util=0.85, captures=35, capture_first=60 * MiB)
    allocator_cache(s, srv, ready, largest=[200 * MiB, 250 * MiB], steps=4, level_off_s=1 * H)
    leak(s, srv, ready + 2 * H, rate=30 * MB / H, ranks=[0], deadline_s=6 * H, page=False)
    s.end(srv)


@scenario(["L40S"], 12 * H, 0.2, fast=True, tags=("c2",))
def leak_500mb_per_hour_l40s_far_from_oom(s):
    """A 500 MB/hour leak far from OOM: an HF app holds a 7B on a 48 GB L40S (~30 GB free) and keeps
    500 MB/hour from an hour in; 5.5 GB later the card is still half empty: a warning, no page."""
    srv = hf_app(s, [0], Q7, at=20)
    ready = engine_start(s, srv, 20, weights=14.2 * GiB, shards=4, **NOPOOL)
    w = warmup(s, srv, ready + 2, 300 * MiB)
    dynamic_kv_cache(s, srv, w + 5, until=40 * MIN, per_s=0.5, median_tokens=2000, max_tokens=16384)
    leak(s, srv, 1 * H, rate=500 * MB / H, page=False)
    s.end(srv)


@scenario(["A100"], 16 * H, 0.2, tags=("c2",))
def leak_500mb_per_hour_a100_far_from_oom(s):
    """A 500 MB/hour leak on an A100 where vLLM runs at 60% (~28 GB free): 7.5 GB in 15 hours, never close
    to OOM: a warning, never a page."""
    srv = vllm_v1(s, [0], L8, at=30)
    ready = engine_start(s, srv, 30, weights=15 * GiB, shards=4, util=0.6)
    allocator_cache(s, srv, ready, largest=500 * MiB, steps=5, level_off_s=30 * MIN)
    leak(s, srv, ready + 1 * H, rate=500 * MB / H, page=False)
    s.end(srv)


# ---- c3: memory following the load (no pool); twins with a leak under the cycles -----------------------
@scenario(["H100"], 1 * DAY, 0.2, fast=True, tags=("c3",))
def hourly_load_cycle_hf_h100_day(s):
    """Healthy: an HF app without a pool on an H100 follows hour-long load cycles for a day, between ~20 GB
    and ~70 GB, rising and falling gradually: 24 cycles with returning troughs, never a warning."""
    srv = hf_app(s, [0], L8, at=30)
    ready = engine_start(s, srv, 30, weights=15 * GiB, shards=4, **NOPOOL)
    load_cycle(s, srv, ready + 60, period=1 * H, swing=46 * GiB, floor=3.5 * GiB)
    s.end(srv)


@scenario(["A100"], 4 * DAY, 0.2, tags=("c3",))
def daily_load_cycle_hf_a100_4d(s):
    """Healthy: a server without a pool on an A100 follows four days of daily load between ~20 GB at night
    and ~70 GB at the busy hour (each day's peak a little different), gradually."""
    srv = hf_app(s, [0], L8, at=30)
    ready = engine_start(s, srv, 30, weights=15 * GiB, shards=4, **NOPOOL)
    load_cycle(s, srv, ready + 60, period=DAY, swing=46 * GiB, floor=3.5 * GiB, phase=0.1)
    s.end(srv)


@scenario(["H100"], 1 * DAY, 0.2, tags=("c3",))
def hourly_load_cycle_with_leak_h100_day(s):
    """The twin of hourly_load_cycle_hf_h100_day with a real leak under it: 200 MB kept every cycle from
    the third hour, so the troughs rise (4 GB in the day, far from OOM): a leak warning, no page."""
    srv = hf_app(s, [0], L8, at=30)
    ready = engine_start(s, srv, 30, weights=15 * GiB, shards=4, **NOPOOL)
    load_cycle(s, srv, ready + 60, period=1 * H, swing=46 * GiB, floor=3.5 * GiB)
    leak(s, srv, 3 * H, rate=200 * MB / H, pattern="troughs", every=1 * H, page=False)
    s.end(srv)


@scenario(["A100"], 4 * DAY, 0.2, tags=("c3",))
def daily_load_cycle_with_leak_a100_4d(s):
    """The twin of daily_load_cycle_hf_a100_4d with a 2 GB/day leak under the daily cycle from day one: the
    nightly troughs rise 2 GB a night; far from OOM: a leak warning within two days, no page."""
    srv = hf_app(s, [0], L8, at=30)
    ready = engine_start(s, srv, 30, weights=15 * GiB, shards=4, **NOPOOL)
    load_cycle(s, srv, ready + 60, period=DAY, swing=46 * GiB, floor=3.5 * GiB, phase=0.1)
    leak(s, srv, 1 * DAY, rate=2 * GB / DAY, deadline_s=2 * DAY, page=False)
    s.end(srv)


@scenario(["L4"], 12 * H, 0.5, tags=("c3", "small_card"))
def request_cycles_no_pool_l4_12h(s):
    """Healthy: an HF app on an L4 serves bursts of batch requests every ten minutes for twelve hours: 72
    cycles of up to 5 GiB above the weights, each returning to the floor."""
    srv = hf_app(s, [0], Q7, at=20)
    ready = engine_start(s, srv, 20, weights=14.2 * GiB, shards=4, **NOPOOL)
    load_cycle(s, srv, ready + 30, period=10 * MIN, swing=5 * GiB, floor=0.3 * GiB, vary=(0.6, 1.0))
    s.end(srv)


@scenario(["L40S"], 3 * DAY, 0.2, tags=("c3",))
def daily_cycle_tgi_with_leak_l40s_3d(s):
    """TGI without paged attention (an older architecture) on an L40S under a daily cycle of up to 20 GiB,
    with a 1 GB/day ramp under it: rising troughs over three days, no OOM: a warning, no page."""
    srv = tgi(s, [0], Q7, at=30)
    ready = engine_start(s, srv, 30, weights=14.2 * GiB, shards=4, **NOPOOL)
    load_cycle(s, srv, ready + 60, period=DAY, swing=20 * GiB, floor=1 * GiB, phase=0.3)
    leak(s, srv, 12 * H, rate=1 * GB / DAY, deadline_s=2 * DAY, page=False)
    s.end(srv)


# ---- c4: small cards left 200-300 MB free by the start -----------------------------------------------
TIGHT_L4: dict[str, Any] = dict(weights=7.1 * GiB, shards=2, util=0.9, captures=45, capture_first=119 * MiB)


@scenario(["L4", "L4"], 20 * MIN, 5.0, fast=True, tags=("c4", "small_card"))
def tp2_l4_95pct_rank1_leak_5mbs(s):
    """vLLM V1 TP=2 on two 24 GB L4s: --gpu-memory-utilization 0.9 plus CUDA graphs leave ~290 MB free
    (vLLM issues 33920, 7553); rank 1 then leaks 5 MB/s: CUDA OOM within about a minute (must page)."""
    srv = vllm_v1(s, [0, 1], Q7, at=10)
    ready = engine_start(s, srv, 10, **TIGHT_L4)
    leak(s, srv, ready + 10 * MIN, rate=5 * MB, ranks=[1])
    s.end(srv)
    s.imbalance = True


@scenario(["A10", "A10"], 30 * MIN, 2.0, tags=("c4", "small_card"))
def tp2_a10_95pct_rank0_staircase(s):
    """vLLM V0 TP=2 on two A10s started to ~99% of their capacity (~290 MB free); rank 0 keeps 50 MB every
    10 s (5 MB/s, a staircase): CUDA OOM about a minute later (must page)."""
    srv = vllm_v0(s, [0, 1], Q7, at=10)
    ready = engine_start(s, srv, 10, **TIGHT_L4)
    leak(s, srv, ready + 8 * MIN, rate=5 * MB, ranks=[0], pattern="staircase", every=10)
    s.end(srv)
    s.imbalance = True


@scenario(["T4"], 30 * MIN, 5.0, fast=True, tags=("c4", "small_card"))
def t4_95pct_leak_1mbs(s):
    """vLLM on a 16 GB T4 (14.58 GiB for torch) at 0.9 plus graphs: ~300 MB free; a 1 MB/s leak of small
    tensors then reaches CUDA OOM in about five minutes (must page)."""
    srv = vllm_v1(s, [0], Q3, at=10)
    ready = engine_start(s, srv, 10, weights=5.75 * GiB, shards=2, util=0.9, captures=45, capture_first=60 * MiB)
    leak(s, srv, ready + 10 * MIN, rate=1 * MB)
    s.end(srv)


@scenario(["L4", "L4"], 6 * H, 0.2, fast=True, tags=("c4", "small_card"))
def tp2_l4_95pct_flat_6h(s):
    """Healthy twin of tp2_l4_95pct_rank1_leak_5mbs: the same start to ~99% of two L4s' capacity (~290 MB
    free), then flat for six hours."""
    srv = vllm_v1(s, [0, 1], Q7, at=10)
    engine_start(s, srv, 10, **TIGHT_L4)
    s.end(srv)
    s.summary_shape = {0: "stable", 1: "stable"}


@scenario(["T4"], 1 * DAY, 0.2, tags=("c4", "small_card"))
def t4_95pct_flat_day(s):
    """Healthy twin of t4_95pct_leak_1mbs: vLLM on a T4 at 0.9 plus graphs, ~300 MB free, flat for a day."""
    srv = vllm_v1(s, [0], Q3, at=10)
    engine_start(s, srv, 10, weights=5.75 * GiB, shards=2, util=0.9, captures=45, capture_first=60 * MiB)
    s.end(srv)
    s.summary_shape = {0: "stable"}


# ---- c5: reloads, hot-swaps, lazy NCCL, sleep mode, compile, LoRA -------------------------------------
@scenario(["H100"], 2 * H, 1.0, fast=True, tags=("c5", "hot_swap", "hf_uvicorn"))
def hot_swap_in_process_hf_h100(s):
    """Healthy: an HF app swaps its 8B for a new version in the same process: the new weights load
    before the old are freed, both resident (+15 GiB) for 90 s, then back to one model."""
    srv = hf_app(s, [0], L8, at=10)
    ready = engine_start(s, srv, 10, weights=15 * GiB, shards=4, **NOPOOL)
    dynamic_kv_cache(s, srv, ready + 5, until=50 * MIN, per_s=0.5, median_tokens=2000, max_tokens=16384)
    hot_swap(s, srv, 50 * MIN, weights=15 * GiB, shards=4, hold_s=90)
    s.end(srv)


@scenario(["A100"], 2 * H, 1.0, tags=("c5", "hot_swap", "triton"))
def hot_swap_new_stub_triton_a100(s):
    """Healthy: Triton loads a new version of a 14B (Python backend): a new stub process (new PID) takes
    its context and weights while the old stub still holds its own, for ~45 s, then the old exits."""
    srv = triton(s, [0], Q14, at=15, backend="python")
    ready = engine_start(s, srv, 15, weights=27.5 * GiB, shards=6, **NOPOOL)
    allocator_cache(s, srv, ready, largest=1 * GiB, steps=4, level_off_s=15 * MIN)
    new = triton_stub(s, srv.ranks[0].ppid, 0, Q14, 60 * MIN)
    freed = hot_swap(s, srv, 60 * MIN, weights=27.5 * GiB, shards=6, hold_s=45, into=new)
    allocator_cache(s, new, freed + 10, largest=1 * GiB, steps=4, level_off_s=15 * MIN)
    s.end(new)


@scenario(["H200"], 1 * H, 2.0, tags=("c5", "hot_swap"))
def hot_swap_new_vllm_behind_router_h200(s):
    """Healthy: a new vLLM version starts beside the old one on an H200 (each at 45% of the card; the new
    one's budget counts the whole card), both serve for two minutes behind a router, then the old exits."""
    old = vllm_v1(s, [0], L8, at=10)
    ready = engine_start(s, old, 10, weights=15 * GiB, shards=4, util=0.45)
    allocator_cache(s, old, ready, largest=600 * MiB, steps=4, level_off_s=10 * MIN)
    new = vllm_v1(s, [0], L8, at=25 * MIN)
    ready2 = engine_start(s, new, 25 * MIN, weights=15 * GiB, shards=4, util=0.45)
    s.end(old, stop=ready2 + 2 * MIN)
    allocator_cache(s, new, ready2, largest=600 * MiB, steps=4, level_off_s=10 * MIN)
    s.end(new)


@scenario(["A10"], 3 * H, 1.0, fast=True, tags=("c5", "reload", "triton"))
def triton_reload_ratchet_to_oom_a10(s):
    """A leak by reloads: Triton (in-process PyTorch backend) reloads a 3B every 5 minutes on an A10;
    each reload holds old and new weights for ~40 s and leaves ~0.4 GB behind (Triton issues 3320,
    2023), until a reload no longer fits: CUDA OOM after about two hours."""
    srv = triton(s, [0], Q3, at=10)
    ready = engine_start(s, srv, 10, weights=5.75 * GiB, shards=2, **NOPOOL)
    reload_ratchet(s, srv, ready + 5 * MIN, every=5 * MIN, weights=5.75 * GiB, shards=2, residue=0.4 * GB)
    s.end(srv)


@scenario(["H100"], 8 * H, 0.5, tags=("c5", "reload", "triton"))
def triton_reloads_healthy_h100(s):
    """Healthy twin of triton_reload_ratchet_to_oom_a10: Triton reloads an 8B every 20 minutes for eight
    hours; each reload peaks at two models for 20-60 s and falls back to exactly one."""
    srv = triton(s, [0], L8, at=10)
    ready = engine_start(s, srv, 10, weights=15 * GiB, shards=4, **NOPOOL)
    reload_ratchet(s, srv, ready + 20 * MIN, every=20 * MIN, weights=15 * GiB, shards=4, residue=0)
    s.end(srv)


@scenario(["H100"], 1 * DAY, 0.2, tags=("c5", "reload", "triton"))
def triton_reload_ratchet_slow_h100(s):
    """A slow reload leak: Triton reloads an 8B every 30 minutes on an H100 and keeps 250 MB each time;
    after a day 12 GB are gone but the peak still fits: a leak warning, no page."""
    srv = triton(s, [0], L8, at=10)
    ready = engine_start(s, srv, 10, weights=15 * GiB, shards=4, **NOPOOL)
    reload_ratchet(s, srv, ready + 30 * MIN, every=30 * MIN, weights=15 * GiB, shards=4, residue=250 * MB)
    s.episodes[-1].page = False
    s.end(srv)


@scenario(["H100", "H100"], 2 * H, 1.0, tags=("c5", "nccl_lazy"))
def lazy_nccl_first_collective_tp2_h100(s):
    """Healthy: vLLM V1 TP=2 at 85% on two H100s; 25 minutes after ready a lazily created communicator's
    first collective adds ~512 MiB on each rank (NCCL issue 2363), once."""
    srv = vllm_v1(s, [0, 1], Q32, at=15)
    ready = engine_start(s, srv, 15, weights=31 * GiB, shards=8, util=0.85)
    allocator_cache(s, srv, ready, largest=[700 * MiB, 800 * MiB], steps=4, level_off_s=10 * MIN)
    lazy_nccl(s, srv, ready + 25 * MIN)
    s.end(srv)


@scenario(["A100"] * 4, 6 * H, 0.2, tags=("c5", "nccl_lazy"))
def lazy_nccl_hours_after_ready_tp4_a100(s):
    """Healthy: SGLang TP=4 on A100s; three hours after ready the first request of a kind that needs a new
    communicator adds ~512 MiB on every rank: one step, hours late, then flat."""
    srv = sglang(s, [0, 1, 2, 3], L70, at=30)
    ready = engine_start(s, srv, 30, weights=33 * GiB, shards=35, util=0.86, profile=0)
    allocator_cache(s, srv, ready, largest=500 * MiB, steps=4, level_off_s=1 * H)
    lazy_nccl(s, srv, ready + 3 * H)
    s.end(srv)


@scenario(["H200"] * 8, 1 * H, 1.0, tags=("c5", "ep_all_to_all"))
def ep_all_to_all_nccl_8x_h200(s):
    """Healthy: an expert-parallel MoE (Qwen3-30B-A3B, EP=8 under SGLang) on eight H200s; the first
    all_to_all, minutes after ready, takes each card's NCCL memory from 1.06 to 4.34 GB (+3.3 GB,
    NCCL issue 1685) in a few allocations, then it stays flat."""
    srv = sglang(s, list(range(8)), MOE, at=20)
    ready = engine_start(s, srv, 20, weights=7.2 * GiB, shards=16, util=0.8, profile=0)
    allocator_cache(s, srv, ready, largest=800 * MiB, steps=4, level_off_s=10 * MIN)
    lazy_nccl(s, srv, ready + 6 * MIN, size=3.28 * GB, pieces=4, over=2.0)
    s.end(srv)


@scenario(["H100"], 1 * H, 2.0, fast=True, tags=("c5", "sleep"))
def vllm_sleep_level1_h100(s):
    """Healthy: vLLM V1 with sleep mode on an H100: three level-1 sleeps (weights offloaded, KV dropped)
    down to ~1.4 GiB within 1-4 s, each woken 1-6 s after the call back to 90%."""
    srv = vllm_v1(s, [0], L8, at=10)
    ready = engine_start(s, srv, 10, weights=15 * GiB, shards=4, util=0.9)
    sleep_wake(s, srv, ready + 10 * MIN, asleep_s=5 * MIN, level=1, cycles=3, period=15 * MIN)
    s.end(srv)


@scenario(["H200", "H200"], 2 * H, 1.0, tags=("c5", "sleep"))
def vllm_sleep_level2_tp2_h200(s):
    """Healthy: vLLM V1 TP=2 on two H200s sleeps at level 2 (weights and KV dropped) every 30 minutes for
    10 minutes; rank 0 keeps ~1.4 GiB, rank 1 ~4.8 GiB; waking takes under a second."""
    srv = vllm_v1(s, [0, 1], Q32, at=10)
    ready = engine_start(s, srv, 10, weights=31 * GiB, shards=8, util=0.9)
    sleep_wake(
        s, srv, ready + 15 * MIN, asleep_s=10 * MIN, level=2, cycles=4, period=30 * MIN, remain_rank={1: 4.8 * GiB}
    )
    s.end(srv)
    s.imbalance = None


@scenario(["H100"] * 4, 4 * H, 0.5, tags=("c5", "sleep", "rl"))
def rl_colocate_cycle_4x_h100(s):
    """Healthy: an RL trainer (veRL) colocating vLLM on four H100s: rollouts at ~90%, then vLLM sleeps for
    the training step and the card drops to ~2%: a four-minute cycle, for four hours."""
    srv = rl_colocated(s, [0, 1, 2, 3], Q7, at=30)
    ready = engine_start(s, srv, 30, weights=3.6 * GiB, shards=4, util=0.9)
    sleep_wake(s, srv, ready + 90, asleep_s=150, level=1, cycles=60, period=4 * MIN)
    s.end(srv)


@scenario(["A100", "A100"], 1 * H, 2.0, fast=True, tags=("c5", "sleep", "rl"))
def rl_colocate_cycle_2x_a100(s):
    """Healthy: an RL trainer colocating vLLM on two A100s: level-2 sleeps during the training step (down
    to ~2% of the card), wakes for rollouts (~90%), every three minutes for an hour."""
    srv = rl_colocated(s, [0, 1], Q3, at=20)
    ready = engine_start(s, srv, 20, weights=2.9 * GiB, shards=2, util=0.9, captures=40)
    sleep_wake(s, srv, ready + 60, asleep_s=100, level=2, cycles=20, period=3 * MIN)
    s.end(srv)


@scenario(["A100"], 1 * H, 1.0, tags=("c5", "sleep", "expandable"))
def sleep_expandable_frees_nothing_a100(s):
    """Healthy: vLLM with PYTORCH_CUDA_ALLOC_CONF=expandable_segments is put to sleep three times, and each
    sleep frees nothing (vLLM PR 11743): the card stays at its serving level throughout."""
    srv = vllm_v1(s, [0], L8, at=10)
    ready = engine_start(s, srv, 10, weights=15 * GiB, shards=4, util=0.9)
    allocator_cache(s, srv, ready, largest=600 * MiB, steps=4, level_off_s=5 * MIN)
    sleep_wake(s, srv, ready + 10 * MIN, asleep_s=5 * MIN, cycles=3, period=15 * MIN, frees=False)
    s.end(srv)


@scenario(["L40S"], 1 * H, 1.0, tags=("c5", "compile"))
def compile_staircase_sglang_l40s(s):
    """Healthy: SGLang with --enable-torch-compile on an L40S: ten minutes after ready, new batch shapes
    compile: 14 allocations of 20-80 MB over four minutes, a bounded staircase, then flat."""
    srv = sglang(s, [0], L8, at=10)
    ready = engine_start(s, srv, 10, weights=15 * GiB, shards=4, util=0.85, profile=0)
    allocator_cache(s, srv, ready, largest=400 * MiB, steps=4, level_off_s=5 * MIN)
    compile_warmup(s, srv, ready + 10 * MIN, count=14, over=4 * MIN)
    s.end(srv)


@scenario(["A100"], 12 * H, 0.2, tags=("c5", "lora_cap"))
def lora_capped_8_adapters_a100(s):
    """Healthy: adapters loaded on demand up to a cap of 8 (LoRAX --max-active-adapters) beside a 7B on an
    A100: a staircase of 84-336 MB steps over the first hours that stops at the cap."""
    srv = vllm_v1(s, [0], Q7, at=30)
    ready = engine_start(s, srv, 30, weights=14.2 * GiB, shards=4, util=0.8)
    allocator_cache(s, srv, ready, largest=500 * MiB, steps=4, level_off_s=20 * MIN)
    lora_adapters(s, srv, ready + 10 * MIN, per_h=3, cap=8)
    s.end(srv)


@scenario(["L4"], 2 * H, 1.0, tags=("c5", "lora_cap", "small_card"))
def lora_capped_4_adapters_l4(s):
    """Healthy: on a 24 GB L4 an HF app loads LoRA adapters on demand up to a cap of 4 (84-336 MB each),
    within half an hour; then new adapters replace evicted ones and the level stays."""
    srv = hf_app(s, [0], Q7, at=20)
    ready = engine_start(s, srv, 20, weights=14.2 * GiB, shards=4, **NOPOOL)
    dynamic_kv_cache(s, srv, ready + 5, per_s=0.3, median_tokens=1500, max_tokens=8192)
    lora_adapters(s, srv, ready + 2 * MIN, per_h=12, cap=4)
    s.end(srv)


@scenario(["L40S"], 3 * H, 0.5, fast=True, tags=("c5", "lora_leak", "trtllm"))
def lora_uncapped_trtllm_to_oom_l40s(s):
    """A LoRA leak: trtllm-serve on an L40S keeps every adapter it has loaded (a list never pruned,
    TensorRT-LLM PR 12815): 84-336 MB steps at ~20 new adapters an hour, no cap, into the ~3 GB its KV
    fraction left free: CUDA OOM about 40 minutes after the first."""
    srv = trtllm_serve(s, [0], Q7, at=10)
    ready = engine_start(s, srv, 10, weights=14.2 * GiB, shards=4, **NOPOOL)
    done = kv_from_free(s, srv, ready + 2, fraction=0.9)
    lora_adapters(s, srv, done + 10 * MIN, per_h=20)
    s.end(srv)


@scenario(["A100"], 1 * DAY, 0.2, tags=("c5", "lora_leak"))
def lora_uncapped_slow_a100(s):
    """A slow LoRA leak: a server keeps every adapter (no cap), two new ones an hour, ~400 MB/hour beside a
    7B at 80% of an A100; a day later it is still short of OOM: a warning, no page."""
    srv = vllm_v1(s, [0], Q7, at=30)
    ready = engine_start(s, srv, 30, weights=14.2 * GiB, shards=4, util=0.8)
    lora_adapters(s, srv, ready + 20 * MIN, per_h=2)
    s.episodes[-1].page = False
    s.end(srv)


# ---- c6: flat serving for hours; several tenants on one card -------------------------------------------
@scenario(["H100", "H100"], 6 * H, 0.2, tags=("c6", "flat"))
def flat_tp2_h100_6h(s):
    """Healthy: vLLM V1 TP=2 on two H100s serves flat for six hours after its start; the summary must say
    stable."""
    srv = vllm_v1(s, [0, 1], Q32, at=20)
    ready = engine_start(s, srv, 20, weights=31 * GiB, shards=8, util=0.9)
    allocator_cache(s, srv, ready, largest=[400 * MiB, 450 * MiB], steps=3, level_off_s=10 * MIN)
    s.end(srv)
    s.summary_shape = {0: "stable", 1: "stable"}


@scenario(["L40S", "L40S"], 6 * H, 1.0, tags=("c6", "flat"))
def flat_tp2_l40s_6h(s):
    """Healthy: SGLang TP=2 on two 48 GB L40S serves a 14B flat for six hours at 1 Hz."""
    srv = sglang(s, [0, 1], Q14, at=20)
    ready = engine_start(s, srv, 20, weights=13.8 * GiB, shards=4, util=0.88, profile=0)
    allocator_cache(s, srv, ready, largest=[300 * MiB, 350 * MiB], steps=3, level_off_s=10 * MIN)
    s.end(srv)
    s.summary_shape = {0: "stable", 1: "stable"}


@scenario(["H100"], 4 * H, 0.5, fast=True, tags=("c6", "tenant"))
def embedding_tenant_beside_vllm_h100(s):
    """Healthy: a second team's embedding server (TEI, 3 GB, its own supervisor) was on the H100 before
    vLLM V1 started at 0.9, whose budget counts the whole card: vLLM takes 0.9 of the card minus the
    tenant. The tenant is "other": neither an orphan nor a stray."""
    tenant(s, 0, 5, 3 * GB, TEI, name="text-embeddings-router", libtorch=False)
    srv = vllm_v1(s, [0], L8, at=60)
    ready = engine_start(s, srv, 60, weights=15 * GiB, shards=4, util=0.9 - 3 * GB / s.cards[0].total)
    allocator_cache(s, srv, ready, largest=500 * MiB, steps=4, level_off_s=10 * MIN)
    s.end(srv)


@scenario(["A100"], 2 * H, 1.0, tags=("c6", "tenant", "mps"))
def mps_server_and_clients_a100(s):
    """Healthy: an A100 shared under MPS: the MPS server (~27 MB) and two clients, the watched vLLM at 0.6
    and another team's HF app with 16 GB; none is a stray."""
    ctl = mps(s, [0], at=2)
    hold(s, ctl, 2, 27 * MB)
    tenant(s, 0, 20, 16 * GiB, [PY, "/srv/team-b/app.py"])
    srv = vllm_v1(s, [0], L8, at=60)
    ready = engine_start(s, srv, 60, weights=15 * GiB, shards=4, util=0.6)
    allocator_cache(s, srv, ready, largest=500 * MiB, steps=4, level_off_s=10 * MIN)
    s.end(srv)


@scenario(["L40S"], 2 * DAY, 0.2, tags=("c6", "tenant", "batch_job"))
def nightly_batch_job_beside_hf_l40s(s):
    """Healthy: a nightly batch job (cron, 2 h to 3.5 h into each day, 10 GB) shares an L40S with an HF app
    serving a 7B with a dynamic cache; the job is "other", not a stray, and the server stays flat."""
    srv = hf_app(s, [0], Q7, at=30)
    ready = engine_start(s, srv, 30, weights=14.2 * GiB, shards=4, **NOPOOL)
    dynamic_kv_cache(s, srv, ready + 10, per_s=0.1, median_tokens=2000, max_tokens=16384, batch=2)
    cron = s.pid()
    for d in range(2):
        tenant(s, 0, d * DAY + 2 * H, 10 * GB, BATCH, ppid=cron, until=d * DAY + 3.5 * H)
    s.end(srv)


@scenario(["H200"], 1 * DAY, 0.2, tags=("c6", "tenant", "mps", "batch_job"))
def three_tenants_h200(s):
    """Healthy: an H200 shared by SGLang at mem_fraction_static 0.7 (its own share), a second team's
    embedding server (4 GB), the MPS server (~27 MB) and a nightly batch job (20 GB, 2 h to 4 h into the
    day): three other PIDs, none of them a stray."""
    ctl = mps(s, [0], at=2)
    hold(s, ctl, 2, 27 * MB)
    tenant(s, 0, 10, 4 * GB, TEI, name="text-embeddings-router", libtorch=False)
    srv = sglang(s, [0], Q32, at=60)
    ready = engine_start(s, srv, 60, weights=62 * GiB, shards=14, util=0.7, profile=0)
    allocator_cache(s, srv, ready, largest=1 * GiB, steps=4, level_off_s=30 * MIN)
    tenant(s, 0, 2 * H, 20 * GB, BATCH, ppid=s.pid(), until=4 * H)
    s.end(srv)


# ---- c7: restart loops, one rank of many, MB/hour to GB/s, spikes on small cards ---------------------
@scenario(["T4"], 1 * H, 2.0, fast=True, tags=("c7", "restart", "hf_uvicorn", "small_card"))
def crash_loop_hf_t4(s):
    """A restart loop on a T4: an HF app (3B) leaks 20 MB/s from a minute after its start, dies of CUDA
    OOM, is restarted with back-off (new PIDs) and fills up again."""
    crash_loop(
        s,
        lambda t: hf_app(s, [0], Q3, at=t),
        20,
        start=dict(weights=5.75 * GiB, shards=2, **NOPOOL),
        cache=dict(largest=200 * MiB, steps=3, level_off_s=30),
        leak_after=60,
        rate=20 * MB,
    )


@scenario(["H100"] * 4, 1 * H, 1.0, tags=("c7", "restart"))
def crash_loop_tp4_one_rank_h100(s):
    """A restart loop where one rank of four leaks: vLLM V1 TP=4, rank 3 keeps 100 MB/s from 2 minutes
    after ready; the server dies of CUDA OOM, restarts (new PIDs) and leaks again."""
    crash_loop(
        s,
        lambda t: vllm_v1(s, [0, 1, 2, 3], L70, at=t),
        20,
        start=dict(weights=33 * GiB, shards=35, util=0.9, shard_gap=(1, 3)),
        cache=dict(largest=500 * MiB, steps=4, level_off_s=60),
        leak_after=2 * MIN,
        rate=100 * MB,
        ranks=[3],
    )
    s.imbalance = True


@scenario(["L40S"] * 4, 1 * H, 1.0, tags=("c7", "one_rank"))
def leak_one_rank_of_4_staircase_l40s(s):
    """Rank 2 of vLLM V0 TP=4 on L40S keeps 256 MiB every minute (a cache kept on one rank) from 10 minutes
    after ready, the others flat: CUDA OOM on rank 2 kills the server."""
    srv = vllm_v0(s, [0, 1, 2, 3], Q32, at=15)
    ready = engine_start(s, srv, 15, weights=15.5 * GiB, shards=5, util=0.9)
    allocator_cache(s, srv, ready, largest=300 * MiB, steps=3, level_off_s=5 * MIN)
    leak(s, srv, ready + 10 * MIN, rate=256 * MiB / 60, ranks=[2], pattern="staircase", every=60)
    s.end(srv)
    s.imbalance = True


@scenario(["H100"] * 8, 12 * H, 0.2, tags=("c7", "one_rank"))
def leak_one_rank_of_8_slow_h100(s):
    """Rank 6 of vLLM V1 TP=8 on H100s leaks 100 MB/hour from two hours after ready; the other seven stay
    flat; the card is nowhere near full at the end: a leak warning, no page."""
    srv = vllm_v1(s, list(range(8)), L70, at=20)
    ready = engine_start(s, srv, 20, weights=16.5 * GiB, shards=32, util=0.88)
    allocator_cache(s, srv, ready, largest=500 * MiB, steps=4, level_off_s=30 * MIN)
    leak(s, srv, ready + 2 * H, rate=100 * MB / H, ranks=[6], page=False)
    s.end(srv)


@scenario(["A100"] * 8, 30 * MIN, 1.0, tags=("c7", "one_rank"))
def leak_one_rank_of_8_fast_a100(s):
    """Rank 0 of SGLang TP=8 on A100s leaks 2 GB a minute (per-request buffers kept) from 5 minutes after
    ready: CUDA OOM within minutes."""
    srv = sglang(s, list(range(8)), L70, at=20)
    ready = engine_start(s, srv, 20, weights=16.5 * GiB, shards=32, util=0.8, profile=0, shard_gap=(1, 3))
    leak(s, srv, ready + 5 * MIN, rate=2 * GB / MIN, ranks=[0])
    s.end(srv)
    s.imbalance = True


@scenario(["H200"], 3 * DAY, 0.2, tags=("c7", "slow"))
def leak_5mb_per_hour_h200_3d(s):
    """A 5 MB/hour leak on an H200 over three days (vLLM V1 at 0.9): 350 MB in all, far from OOM; judged
    within two days of its onset, never a page."""
    srv = vllm_v1(s, [0], Q32, at=30)
    ready = engine_start(s, srv, 30, weights=62 * GiB, shards=14, util=0.9)
    allocator_cache(s, srv, ready, largest=800 * MiB, steps=5, level_off_s=2 * H)
    leak(s, srv, ready + 4 * H, rate=5 * MB / H, deadline_s=2 * DAY, page=False)
    s.end(srv)


@scenario(["L40S"], 10 * MIN, 10.0, tags=("c7", "fast_leak"))
def leak_gb_per_second_l40s(s):
    """A leak of 1 GB/s on an L40S where vLLM runs at 50% (~22 GB free): CUDA OOM about 20 s after its
    onset."""
    srv = vllm_v1(s, [0], L8, at=10)
    ready = engine_start(s, srv, 10, weights=15 * GiB, shards=4, util=0.5, shard_gap=(0.5, 1.5))
    leak(s, srv, ready + 2 * MIN, rate=1 * GB)
    s.end(srv)


@scenario(["T4"], 30 * MIN, 5.0, fast=True, tags=("c7", "spike", "small_card"))
def spike_oom_hf_t4(s):
    """Transients taller than the headroom on a T4: an HF app (3B) whose prefill buffers reach 7.5 GiB
    beside 6 GiB of weights (the card peaks about 1 GB short of full); a long prompt asks 9 GiB and fails
    with CUDA OOM."""
    srv = hf_app(s, [0], Q3, at=10)
    ready = engine_start(s, srv, 10, weights=5.75 * GiB, shards=2, **NOPOOL)
    transients(s, srv, ready, per_s=0.5, lo=500 * MiB, hi=7.5 * GiB)
    tall_transient(s, srv, ready + 20 * MIN, 9 * GiB)
    s.end(srv)


@scenario(["L4"], 20 * MIN, 5.0, tags=("c7", "spike", "small_card"))
def spike_oom_l4_max_num_seqs(s):
    """A spike OOM after an upgrade raised max_num_seqs on an L4: vLLM V1 at 0.9 plus graphs leaves ~900
    MB; sampler transients outside the budget reach 850 MB, then one asks 1.5 GiB: CUDA OOM."""
    srv = vllm_v1(s, [0], Q7, at=10)
    ready = engine_start(s, srv, 10, weights=14.2 * GiB, shards=4, util=0.9, captures=35, capture_first=60 * MiB)
    transients(s, srv, ready, per_s=1.0, lo=100 * MiB, hi=850 * MiB)
    tall_transient(s, srv, ready + 12 * MIN, 1.5 * GiB)
    s.end(srv)
