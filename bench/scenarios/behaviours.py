"""Named behaviours of GPU memory next to an inference server, each modelling facts of BEHAVIOURS.md.

Every function adds memory to the processes of a `Server` (or a stray process) from a given trace time
on and, when the behaviour is dangerous, writes its ground truth (`Episode`, strays). Randomness comes
only from the trace's seeded generator, so a scenario is byte-identical run to run. Sizes are bytes,
times seconds of trace time.
"""

from __future__ import annotations

import numpy as np

from .model import DAY, Episode, GiB, MiB, Proc, Server, Trace


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
) -> None:
    """Memory kept across requests and never given back (section 3): `rate` bytes/s from `onset` on the
    given ranks (all by default; often one). Rates: MB/hour (OOM after days) to GB/s.

    `ramp`: many small tensors (2 MiB blocks of PyTorch's small pool), seen at once. `staircase`: one
    large chunk every `every` s; `troughs`: the same under an empty_cache sawtooth of period `every`
    (the troughs rise); `warm_cache`: a ramp of large tensors. Large tensors are carved from the
    allocator's cached free blocks first, so on a warm cache they stay invisible until it is used up,
    then the card sits near 100% until the OOM (H200: 60 MB/s hidden for 48 s, then 40 s at 99.5%)."""
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
        s.episodes.append(Episode(p.card, "leak", pattern, float(onset), rate, deadline_s=deadline_s, pid=p.pid))


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
