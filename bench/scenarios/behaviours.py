"""Named behaviours of GPU memory next to an inference server, each modelling facts of BEHAVIOURS.md.

Every function adds memory to the processes of a `Server` (or a stray process) from a given trace time
on and, when the behaviour is dangerous, writes its ground truth (`Episode`, strays). Randomness comes
only from the trace's seeded generator, so a scenario is byte-identical run to run. Sizes are bytes,
times seconds of trace time.
"""

from __future__ import annotations

import numpy as np

from .model import DAY, MB, Episode, GiB, MiB, Proc, Server, Trace


def engine_start(
    s: Trace,
    srv: Server,
    at: float,
    weights: float,
    shards: int,
    util: float = 0.9,
    profile: float = 0.1,
    captures: int = 51,
    capture_first: float = 160 * MiB,
    capture_fall: float = 0.07,
    graph_s: float | None = None,
    shard_gap: tuple = (1.0, 6.0),
    profile_s: tuple = (1.0, 5.0),
) -> float:
    """A vLLM/SGLang start on every rank (section 1); returns when the last rank is ready.

    CUDA context 0.3-0.6 GB, NCCL buffers 0.2-0.5 GB a few seconds later with several ranks; `weights`
    (per card) in `shards` regular steps `shard_gap` s apart (1-6 s; a 70B over 4-8 cards: 30-40 shards
    per card over 2-5 min); the profile run's spike of `profile` x total (5-15%) for 1-5 s, given back;
    the KV pool: one jump to `util` x total inside a sample; `captures` CUDA graphs (35-67) of falling
    size (the first 60-160 MB, each `capture_fall` smaller) over `graph_s` (10-60 s). Ranks move in
    lockstep (collectives), each with its own jitter. A server without a pool (util=0, captures=0,
    profile=0) only loads its weights. H200 recording: 5 shards of 2.6 GiB 3 s apart,
    a 10% profile spike for 2.5 s, 90% KV, 51 captures from 160 MB falling by 7% over 18 s.
    """
    r = s.rng
    tp = len(srv.ranks)
    gaps = r.uniform(*shard_gap, shards)
    shard_t = at + 1.0 + np.concatenate([[0.0], np.cumsum(gaps[1:])])
    prof_t = shard_t[-1] + r.uniform(1.0, 3.0)
    prof_len = r.uniform(*profile_s)
    kv_t = prof_t + prof_len + r.uniform(0.5, 1.5)
    graph_s = graph_s if graph_s is not None else r.uniform(10.0, 60.0)
    sizes = capture_first * (1 - capture_fall) ** np.arange(captures)
    cap_t = kv_t + 1.0 + np.sort(r.uniform(0, graph_s, captures))
    ready = 0.0
    for p in srv.ranks:
        j = lambda: r.uniform(-0.3, 0.3)  # noqa: E731  per-rank jitter
        total = s.cards[p.card].total
        held = r.uniform(0.3, 0.6) * GiB
        p.step("static", at + r.uniform(0, 0.5), held)
        if tp > 1:
            nccl = r.uniform(0.2, 0.5) * GiB
            p.step("static", at + r.uniform(2, 5), nccl)
            held += nccl
        w = weights / shards * r.uniform(0.97, 1.03, shards)
        p.step("static", shard_t + j(), w)
        held += w.sum()
        if profile:
            t0 = prof_t + j()
            p.step("visible", t0, profile * total)
            p.step("visible", t0 + prof_len, -profile * total)
        if util:
            p.step("static", kv_t + j(), max(util * total - held, 0.0))
        if captures:
            p.step("static", cap_t + j(), sizes)
        done = (cap_t[-1] if captures else kv_t) + r.uniform(0.2, 1.0) + 0.3
        s.event(done, "phase", name="ready", gpu=p.card, pid=p.pid)
        ready = max(ready, done)
    return ready


def allocator_cache(
    s: Trace, srv: Server, at: float, largest: float | list, steps: int | list = 6, level_off_s: float | list = 90.0
) -> None:
    """PyTorch's caching allocator while serving (section 2): freed activations stay reserved, so NVML
    shows the high-water mark. Per rank it rises `steps` times (a handful), each step about the largest
    transient so far (growing toward `largest`: 50 MB to several GB), at growing intervals, and levels
    off `level_off_s` after `at`. Ranks draw their own steps (different request mixes: 1-3% apart).
    H200 recording: +9.3 GiB in 6-7 steps of 1.2-1.5 GB over 90 s, transients of at most 1.5 GB.
    """
    r = s.rng
    for k, p in enumerate(srv.ranks):
        big = largest[k] if isinstance(largest, list) else largest
        n = steps[k] if isinstance(steps, list) else steps
        span = level_off_s[k] if isinstance(level_off_s, list) else level_off_s
        size = big * (1 - 0.2 * 0.6 ** np.arange(n)) * r.uniform(0.97, 1.02, n)
        gaps = 1.25 ** np.arange(n - 1) * r.lognormal(0.0, 0.5, n - 1)
        times = at + r.uniform(0.1, 0.5) + np.concatenate([[0.0], np.cumsum(gaps / gaps.sum() * span)])
        p.step("cache", times, size)
        p.step("work", times, np.diff(np.concatenate([[0.0], np.maximum.accumulate(size)])))


def compile_warmup(s: Trace, srv: Server, at: float, count: int = 15, over: float = 180.0) -> None:
    """Late `torch.compile` / new batch shapes (section 1): `count` (10-20) allocations of 20-80 MB
    spread over `over` seconds, kept; a short staircase minutes after the start that is not a leak."""
    r = s.rng
    for p in srv.ranks:
        p.step("static", at + np.sort(r.uniform(0, over, count)), r.uniform(20, 80, count) * MiB)


def leak(
    s: Trace,
    srv: Server,
    onset: float,
    rate: float,
    ranks: list[int] | None = None,
    pattern: str = "ramp",
    every: float = 30.0,
    deadline_s: float | None = None,
    page: bool = True,
) -> None:
    """Memory kept across requests and never given back (section 3): `rate` bytes/s from `onset` on the
    given ranks (all by default; often one). Rates: MB/hour (OOM after days) to GB/s.

    `ramp`: many small tensors (2 MiB blocks of PyTorch's small pool), seen at once. `staircase`: one
    large chunk every `every` s; `troughs`: the same under an empty_cache sawtooth of period `every`
    (the troughs rise); `warm_cache`: a ramp of large tensors. Large tensors are carved from the
    allocator's cached free blocks first, so on a warm cache they stay invisible until it is used up,
    then the card sits near 100% until the OOM (H200: 60 MB/s hidden for 48 s, then 40 s at 99.5%). `page=False`
    marks a leak whose card is never full within a page's horizon in the trace: a warning, no page."""
    for k in ranks if ranks is not None else range(len(srv.ranks)):
        p = srv.ranks[k]
        if onset >= min(s.duration, p.end):
            continue
        if pattern in ("staircase", "troughs"):
            chunk = rate * every
            s.add_curve(p, "leak", onset, lambda dt, chunk=chunk: np.floor(dt / every + 1) * chunk)
        else:
            s.add_curve(
                p,
                "leak" if pattern == "warm_cache" else "kept",
                onset,
                lambda dt: np.floor(rate * dt / (2 * MiB)) * 2 * MiB,
            )
        s.episodes.append(
            Episode(p.card, "leak", pattern, float(onset), rate, deadline_s=deadline_s, pid=p.pid, page=page)
        )


def empty_cache_sawtooth(
    s: Trace, srv: Server, at: float, period: float, height: float, growth: float = 0.0, onset: float | None = None
) -> None:
    """`torch.cuda.empty_cache()` called every `period` s (section 2): within a period the cache climbs
    in steps to 70-100% of `height`, then is given back at once: a bounded sawtooth (healthy). With
    `growth` (bytes/s, from `onset`) the peaks grow, longer prompts, until one no longer fits (section 3:
    "peaks that grow"); that is a dangerous episode."""
    r = s.rng
    t_on = onset if onset is not None else at
    for p in srv.ranks:
        amps = r.uniform(0.7, 1.0, int((s.duration - at) / period) + 2) * height

        def saw(dt, amps=amps):
            cyc = np.floor(dt / period).astype(np.int64)
            ph = dt / period - cyc
            extra = growth * np.maximum(dt - (t_on - at), 0.0)
            return (amps[cyc] + extra) * np.ceil(ph * 8) / 8

        s.add_curve(p, "visible", at, saw)
        if growth:
            s.episodes.append(Episode(p.card, "peaks", "peaks", float(t_on), growth, pid=p.pid))


def transients(
    s: Trace,
    srv: Server,
    at: float,
    until: float | None = None,
    per_s: float = 0.5,
    lo: float = 50 * MiB,
    hi: float = 2 * GiB,
) -> None:
    """Activation transients NVML can see (servers without a caching pool, section 2): one forward pass
    at a time, `per_s` a second, 50 MB to several GB (log-uniform `lo`..`hi`), held 0.1-2 s."""
    r = s.rng
    until = s.duration if until is None else until
    n = int((until - at) * per_s * 1.2) + 1
    for p in srv.ranks:
        held = r.uniform(0.1, 2.0, n)
        gaps = r.exponential(1.0 / per_s, n)
        start = at + np.cumsum(gaps + np.concatenate([[0.0], held[:-1]]))
        keep = start + held < until
        size = np.exp(r.uniform(np.log(lo), np.log(hi), n))[keep]
        p.step("visible", start[keep], size)
        p.step("visible", (start + held)[keep], -size)


def daily_load(s: Trace, srv: Server, at: float, peak: float, busy_hour: float = 14.0) -> None:
    """A server without a preallocated pool follows the load (section 2): a daily cycle between
    weights-only (night) and `peak` bytes more at the busy hour, rising and falling gradually, in
    64 MiB blocks (the allocator grows and returns segments)."""
    phase = 2 * np.pi * ((at / DAY) - busy_hour / 24.0)
    for p in srv.ranks:
        s.add_curve(
            p,
            "visible",
            at,
            lambda dt: np.floor(peak * (0.5 + 0.5 * np.cos(2 * np.pi * dt / DAY + phase)) ** 2 / (64 * MiB)) * 64 * MiB,
        )


def tall_transient(s: Trace, srv: Server, at: float, size: float, rank: int = 0) -> None:
    """One transient taller than the free headroom (section 3: one long prompt after the card filled up,
    `prompt_logprobs`): CUDA OOM at `at` unless it fits."""
    p = srv.ranks[rank]
    p.step("visible", at, size)
    p.step("visible", at + 1.0, -size)
    s.episodes.append(Episode(p.card, "spike", "spike", float(at), 0.0, pid=p.pid))


def stray(
    s: Trace,
    card: int,
    at: float,
    size: float,
    ppid: int = 1,
    cmdline: list | None = None,
    name: str = "python3",
    until: float | None = None,
) -> Proc:
    """Another process on the card (section 3): an orphaned worker of a crashed run (ppid 1), a notebook,
    a second server started by mistake. Holds `size` bytes from `at` (its context first)."""
    p = s.proc(name, cmdline or ["python3", "train.py", "--resume"], ppid, at - 30.0, card)
    p.step("static", at, 0.4 * GiB)
    p.step("static", at + s.rng.uniform(1.0, 4.0), max(size - 0.4 * GiB, 0.0))
    if until is not None:
        p.end = until
    s.strays.append((card, p.pid, at))
    return p


def crash_loop(
    s: Trace,
    make,
    at: float,
    start: dict,
    cache: dict,
    leak_after: float,
    rate: float,
    ranks: list[int] | None = None,
    backoff: float = 10.0,
    max_backoff: float = 300.0,
) -> int:
    """A restart loop (section 3): a server that leaks, dies of CUDA OOM, is restarted after a back-off
    (10 s doubling to 5 min, as Kubernetes' CrashLoopBackOff) and fills up again. `make(t)` returns a
    new `Server` (new PIDs) created at t. Returns the number of OOMs."""
    t, wait, ooms = at, backoff, 0
    while t < s.duration - 60:
        srv = make(t)
        ready = engine_start(s, srv, t, **start)
        allocator_cache(s, srv, ready, **cache)
        leak(s, srv, ready + leak_after, rate, ranks)
        died = s.end(srv)
        if died is None:
            break
        ooms += 1
        t, wait = died + wait, min(wait * 2, max_backoff)
    return ooms


# ---- beyond vLLM and SGLang, beyond a steady server (BEHAVIOURS.md section 5) ------------------------
def _level(s: Trace, p: Proc, t: float) -> float:
    """What NVML shows of `p` at trace time t (0 before it starts)."""
    return float(s.demand(p)[0][min(s.idx(t), s.n - 1)])


def _card_used(s: Trace, card: int, t: float) -> float:
    return sum(_level(s, q, t) for q in s.procs if q.card == card)


def warmup(s: Trace, srv: Server, at: float, size: float, held_s: tuple = (1.0, 3.0)) -> float:
    """The warm-up of a server without a utilisation flag (section 5: context, weights, warm-up): one
    dummy batch (TGI: a prefill of `max_batch_prefill_tokens`; an HF app or a notebook: one generate()),
    `size` bytes of activations per rank held 1-3 s. The caching allocator keeps the blocks reserved
    afterwards, so NVML stays at the peak: the climb ends one step higher, not back down. Returns when
    the warm-up is over."""
    r = s.rng
    done = at
    for p in srv.ranks:
        t0, held = at + r.uniform(0.2, 1.0), r.uniform(*held_s)
        p.step("cache", t0, size)
        p.step("work", t0, size)
        p.step("work", t0 + held, -size)
        done = max(done, t0 + held)
    return done


def kv_from_free(s: Trace, srv: Server, at: float, fraction: float = 0.9) -> float:
    """A KV cache sized from what is free, not from the total (section 5: no utilisation flag on the
    command line): TensorRT-LLM (`trtllm-serve`, Triton's tensorrtllm backend) takes
    `free_gpu_memory_fraction` (default 0.9) of the memory free after the weights and warm-up; TGI fills
    what its warm-up left (`--cuda-memory-fraction` 1.0, ~0.95 of it). One jump inside a sample on
    each rank, to `fraction` of the card's free memory (every process on it counts). Returns when done."""
    r = s.rng
    done = at
    for p in srv.ranks:
        t = at + r.uniform(0.0, 0.3)
        free = s.cards[p.card].capacity - _card_used(s, p.card, t)
        p.step("static", t, max(fraction * free, 0.0))
        done = max(done, t)
    return done + 0.5


def dynamic_kv_cache(
    s: Trace,
    srv: Server,
    at: float,
    until: float | None = None,
    per_s: float = 1.0,
    per_token: float = 57e3,
    median_tokens: float = 2000.0,
    max_tokens: float = 32768.0,
    batch: int = 1,
    sigma: float = 1.2,
) -> float:
    """Plain `generate()` with a dynamic KV cache (section 5): a request costs `per_token` bytes per token
    (~57 KB for a 7B with grouped-query attention: Qwen2.5-7B, 28 layers x 4 KV heads x 128 x 2 x bf16)
    times its tokens (long-tailed: lognormal of median `median_tokens`, clipped at `max_tokens`, the
    model's context) times `batch`, split over the ranks (device_map="auto" puts each card's layers'
    share on it). Freed after each request, but the allocator keeps the blocks: NVML shows the largest
    request so far, rising at each new maximum, then levelling off at `batch` x `max_tokens` x
    `per_token`. H200, transformers 5.17: 15.4 -> 22.9 GB over 100 s (batch 4, 32k tokens: 7.5 GB).
    Returns the final level above the weights (per rank)."""
    r = s.rng
    until = s.duration if until is None else until
    n = int((until - at) * per_s * 1.2) + 2
    times = at + np.cumsum(r.exponential(1.0 / per_s, n))
    toks = np.minimum(np.exp(r.normal(np.log(median_tokens), sigma, n)), max_tokens)
    keep = times < until
    times, cost = times[keep], (per_token * toks * batch / len(srv.ranks))[keep]
    if not len(cost):
        return 0.0
    top = np.maximum.accumulate(cost)
    new = np.concatenate([[True], top[1:] > top[:-1] + 2 * MiB])
    inc = np.diff(np.concatenate([[0.0], np.ceil(top[new] / (2 * MiB)) * 2 * MiB]))
    for p in srv.ranks:
        p.step("cache", times[new], inc)
        p.step("work", times[new], inc)
    return float(inc.sum())


def paged_pool_swing(
    s: Trace,
    srv: Server,
    at: float,
    share: float = 0.91,
    batch_s: tuple = (2.0, 8.0),
    gap_s: tuple = (0.3, 2.0),
    until: float | None = None,
) -> int:
    """transformers' continuous batching without a persistent manager (section 5): the paged pool, sized
    from `max_memory_percent` to bring the card to `share` (~91%) of its total, is allocated at the start
    of every batch (one sample) and given back after it (`batch_s`, 2-8 s; `gap_s` between batches), so
    the card swings between weights-only and ~91% every few seconds, for hours; bounded, healthy. H200:
    a ~122 GB pool beside 15 GB of weights. Returns the number of batches."""
    r = s.rng
    until = s.duration if until is None else until
    n = int((until - at) / (batch_s[0] + gap_s[0])) + 2
    count = 0
    for p in srv.ranks:
        pool = share * s.cards[p.card].total - _card_used(s, p.card, at)
        held, gaps = r.uniform(*batch_s, n), r.uniform(*gap_s, n)
        start = at + np.cumsum(gaps + np.concatenate([[0.0], held[:-1]]))
        keep = start + held < until
        p.step("visible", start[keep], pool)
        p.step("visible", (start + held)[keep], -pool)
        count = max(count, int(keep.sum()))
    return count


def hot_swap(
    s: Trace,
    srv: Server,
    at: float,
    weights: float,
    shards: int,
    hold_s: float,
    new_weights: float | None = None,
    shard_gap: tuple = (1.0, 4.0),
    into: Server | None = None,
) -> float:
    """A model reload or hot-swap (section 5: Triton's model control, a new version behind a router): the
    new weights load (`new_weights`, default `weights`, per rank, in `shards`) before the old are freed,
    so for `hold_s` (tens of seconds to minutes) both are resident (+ a whole model); then memory falls
    back by the old `weights`. In the same process (`into` None), or in a new one (`into`: a Server of
    new PIDs on the same cards: its context, then the weights; then the old server exits, its PIDs
    vanish). Healthy. Returns when the old weights are freed."""
    r = s.rng
    neww = weights if new_weights is None else new_weights
    gaps = r.uniform(*shard_gap, shards)
    shard_t = at + 1.0 + np.concatenate([[0.0], np.cumsum(gaps[1:])])
    freed = float(shard_t[-1]) + hold_s
    for p in into.ranks if into is not None else srv.ranks:
        if into is not None:
            p.step("static", at + r.uniform(0.0, 0.5), r.uniform(0.3, 0.6) * GiB)
        p.step("static", shard_t + r.uniform(-0.2, 0.2), np.full(shards, neww / shards))
        if into is None:
            p.step("static", freed, -weights)
    s.event(float(shard_t[0]), "phase", name="swap_load", gpu=srv.cards[0])
    s.event(freed, "phase", name="swap_free", gpu=srv.cards[0])
    if into is not None:
        s.end(srv, stop=freed)
    return freed


def reload_ratchet(
    s: Trace,
    srv: Server,
    at: float,
    every: float,
    weights: float,
    shards: int,
    residue: float,
    hold_s: tuple = (20.0, 60.0),
    shard_gap: tuple = (0.5, 2.0),
    until: float | None = None,
) -> int:
    """Repeated model reloads in one process (section 5: Triton `--model-control-mode=explicit`, a
    pipeline pushing a new version every `every` s): each reload is a hot swap (new weights load, both
    resident for 20-60 s, the old freed). With `residue` > 0 each reload leaves that much behind
    (Triton issues 3320, 2023: a fraction of a GB per reload): a staircase that ratchets up until a
    reload's peak (old + new + residue) no longer fits: a leak (episode from the first residue, rate
    residue/every). With residue 0: healthy, the peaks bounded. Returns the number of reloads."""
    r = s.rng
    until = s.duration if until is None else until
    t, k = at, 0
    onset = None
    while t < until:
        gaps = r.uniform(*shard_gap, shards)
        shard_t = t + np.concatenate([[0.0], np.cumsum(gaps[1:])])
        freed = float(shard_t[-1]) + r.uniform(*hold_s)
        for p in srv.ranks:
            p.step("static", shard_t, np.full(shards, weights / shards))
            p.step("static", freed, -weights)
            if residue:
                p.step("kept", freed, residue)
        onset = freed if onset is None else onset
        s.event(float(shard_t[0]), "phase", name="reload", gpu=srv.cards[0])
        t, k = t + every, k + 1
    if residue and onset is not None:
        for p in srv.ranks:
            s.episodes.append(Episode(p.card, "leak", "staircase", onset, residue / every, pid=p.pid))
    return k


def lazy_nccl(
    s: Trace,
    srv: Server,
    at: float,
    size: float = 512 * MiB,
    ranks: list[int] | None = None,
    pieces: int = 1,
    over: float = 1.0,
) -> None:
    """NCCL buffers allocated lazily (section 5): a communicator created at its first collective adds
    ~512 MiB per rank (NCCL issue 2363), minutes or hours after the server is ready; the first all_to_all
    of an expert-parallel model took a card from 1.06 to 4.34 GB of NCCL memory (+3.28 GB, NCCL issue
    1685). `size` per rank in `pieces` allocations over `over` s, kept; one bounded step, healthy."""
    r = s.rng
    for k in ranks if ranks is not None else range(len(srv.ranks)):
        p = srv.ranks[k]
        t = at + np.sort(r.uniform(0.0, over, pieces)) + r.uniform(0.0, 0.3)
        p.step("static", t, size / pieces)


def sleep_wake(
    s: Trace,
    srv: Server,
    at: float,
    asleep_s: float,
    level: int = 1,
    cycles: int = 1,
    period: float | None = None,
    remain: float = 1.4 * GiB,
    remain_rank: dict | None = None,
    fall_s: tuple = (1.0, 4.0),
    wake_s: tuple | None = None,
    frees: bool = True,
) -> list:
    """vLLM sleep mode (section 5; vLLM docs `sleep_mode`, blog 2025-10-26): level 1 offloads the weights
    to host memory and drops the KV cache, level 2 drops both; ~1.4 GiB stays (`remain`; up to ~4.8 GiB
    on one rank: `remain_rank` {rank: bytes}). Falling asleep takes 1-4 s (in steps), waking 0.1-6 s
    (level 1 copies the weights back: 1-6 s; level 2 only re-allocates: 0.1-1 s), back to the level before.
    `cycles` sleeps `period` s apart (RL trainers colocating vLLM: ~2% <-> ~90% every few minutes, for
    hours). With `expandable_segments` (`frees=False`, vLLM PR 11743) a sleep frees nothing: NVML stays
    flat. Healthy. Returns [(fell asleep, woke)] per cycle."""
    r = s.rng
    wake_s = wake_s if wake_s is not None else ((1.0, 6.0) if level == 1 else (0.1, 1.0))
    period = period if period is not None else asleep_s * 2
    drop = [_level(s, p, at) - (remain_rank or {}).get(k, remain) for k, p in enumerate(srv.ranks)]
    out = []
    for c in range(cycles):
        t0 = at + c * period
        if t0 + asleep_s >= s.duration:
            break
        fall, wake = r.uniform(*fall_s), r.uniform(*wake_s)
        for k, p in enumerate(srv.ranks):
            if frees and drop[k] > 0:
                p.step("static", t0 + np.sort(r.uniform(0, fall, 4)), -drop[k] / 4)
                p.step("static", t0 + asleep_s + np.sort(r.uniform(0, wake, 3)), drop[k] / 3)
        s.event(t0, "phase", name=f"sleep_level{level}", gpu=srv.cards[0])
        s.event(t0 + asleep_s, "phase", name="wake_up", gpu=srv.cards[0])
        out.append((t0 + fall, t0 + asleep_s + wake))
    return out


def lora_adapters(
    s: Trace,
    srv: Server,
    at: float,
    per_h: float,
    cap: int | None = None,
    sizes: tuple = (84 * MB, 168 * MB, 336 * MB),
    until: float | None = None,
) -> int:
    """LoRA adapters loaded on demand (section 5: LoRAX `--max-active-adapters`, vLLM `--max-loras`): each
    new adapter (Poisson arrivals, `per_h` an hour) loads its weights and keeps them: a staircase of
    84-336 MB steps (a 7B, ranks 16-64), split over the TP ranks. With `cap` it stops at the cap (later
    adapters reuse evicted slots): healthy. Without (TensorRT-LLM PR 12815: a list of adapter tensors
    never pruned) the staircase goes on: a leak (episode from the first load, rate = mean size x
    arrivals) until OOM or the trace ends. Returns the number of adapters kept."""
    r = s.rng
    until = s.duration if until is None else until
    n = int((until - at) / 3600 * per_h * 1.5) + 5
    times = at + np.cumsum(r.exponential(3600.0 / per_h, n))
    size = r.choice(np.asarray(sizes, float), n)
    keep = times < until
    times, size = times[keep], size[keep]
    if cap is not None:
        times, size = times[:cap], size[:cap]
    tp = len(srv.ranks)
    for p in srv.ranks:
        p.step("static" if cap is not None else "kept", times, size / tp)
    if cap is None and len(times):
        for p in srv.ranks:
            rate = float(np.mean(sizes)) / tp * per_h / 3600
            s.episodes.append(Episode(p.card, "leak", "staircase", float(times[0]), rate, pid=p.pid))
    return len(times)


def load_cycle(
    s: Trace,
    srv: Server,
    at: float,
    period: float,
    swing: float,
    floor: float = 0.0,
    phase: float = 0.0,
    vary: tuple = (0.8, 1.0),
    block: float = 64 * MiB,
) -> None:
    """Memory following the load on a server without a preallocated pool (sections 2 and 4: cycles of
    1 s to 24 h): a smooth cycle of `period` s (an hour, a day) between `floor` bytes over what it held
    at `at` and floor + swing at each cycle's peak (each cycle's peak `vary` x swing), starting `phase`
    of a cycle in, rising and falling gradually in `block`s (the allocator grows and returns segments).
    Healthy: the troughs return to the floor, the peaks are bounded."""
    r = s.rng
    n = int((s.duration - at) / period) + 3
    for p in srv.ranks:
        amps = r.uniform(*vary, n) * swing

        def cyc(dt, amps=amps):
            x = dt / period + phase
            k = np.floor(x).astype(np.int64)
            v = floor + amps[k] * (0.5 - 0.5 * np.cos(2 * np.pi * (x - k)))
            return np.floor(v / block) * block

        s.add_curve(p, "visible", at, cyc)


def hold(s: Trace, srv: Server, at: float, size: float, until: float | None = None) -> None:
    """A process that holds a fixed amount from `at` (its context first, 0.3-0.5 GB, or all of `size` if
    smaller: the MPS server's ~27 MB), to `until` (it exits) or the end: an embedding server, a batch
    job, the MPS server (section 5)."""
    r = s.rng
    for p in srv.ranks:
        ctx = min(size, r.uniform(0.3, 0.5) * GiB)
        p.step("static", at, ctx)
        if size > ctx:
            p.step("static", at + r.uniform(1.0, 4.0), size - ctx)
        if until is not None:
            p.end = min(p.end, until)


def tenant(
    s: Trace,
    card: int,
    at: float,
    size: float,
    cmdline: list,
    name: str = "python3",
    ppid: int | None = None,
    until: float | None = None,
    username: str = "svc",
    libtorch: bool = True,
) -> Proc:
    """Another tenant on the card (section 5: a second team's embedding server, an MPS client, a nightly
    batch job): another PID whose parent is alive (a supervisor, cron), neither an orphan nor part of the
    watched server, holding `size` from `at` to `until`. Not a stray: the truth lists no stray for it
    (it is "other"). `libtorch=False` for a server that is not a torch process (TEI is Rust)."""
    p = s.proc(name, cmdline, s.shell if ppid is None else ppid, at - 2.0, card, username=username)
    p.libtorch_cuda = libtorch
    hold(s, Server("tenant", [p], [], [card]), at, size, until)
    return p
