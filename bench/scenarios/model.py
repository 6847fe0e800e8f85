"""A synthetic recording under construction: the sample grid, the cards, the processes, and the truth.

A scenario builds one `Trace`: layouts (`layouts.py`) add processes, behaviours (`behaviours.py`) add
memory to them, `Trace.end(server)` lets a server run until it dies of CUDA OOM (or a given stop), and
`records()` yields the `gpu-memory-trace/1` lines. The ground truth (leak onsets, OOM times, strays) is
written by the behaviours as they compose the curve, never inferred from it afterwards.

What NVML shows of one process (the caching-allocator model, BEHAVIOURS.md section 2):

    used = static + max(cache, leak + work) + kept + visible

`static` is context, weights, KV pool, CUDA graphs; `cache` the allocator's high-water mark of freed
activations; `work` the largest transient now needed (served from the cache, so invisible by itself);
`leak` large tensors kept across requests, carved from the cached blocks (so a leak stays invisible
while the cache holds it); `kept` small tensors kept (PyTorch's small pool has its own segments: seen at
once); `visible` memory NVML sees come and go (servers without a caching pool, empty_cache sawtooths).
The process dies of CUDA OOM at the first sample where `static + leak + kept + work + visible` (plus the other
processes on its card) exceeds the card's capacity; until then NVML never shows more than `sit` of the
capacity, so a card can sit at 98-100% for a while before the OOM (the allocator frees and retries).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
MB, GB = 10**6, 10**9
MIN, H, DAY = 60.0, 3600.0, 86400.0
EPOCH = 1796000000.0  # create_time base: 2026-11-30, like the real recordings

#: Cards: NVML name, total bytes (nvmlDeviceGetMemoryInfo v2) and the driver-reserved bytes. H200 figures
#: are from the real recordings; the others are the drivers' MiB totals times 2**20 (reserved approximate).
CARDS = {
    "L4": ("NVIDIA L4", 23034 * MiB, 384 * MiB),
    "A10": ("NVIDIA A10", 23028 * MiB, 384 * MiB),
    "A100": ("NVIDIA A100-SXM4-80GB", 81920 * MiB, 566 * MiB),
    "H100": ("NVIDIA H100 80GB HBM3", 81559 * MiB, 566 * MiB),
    "H200": ("NVIDIA H200", 150754820096, 644939776),
    # 16 GB: torch sees 14.58 GiB of a T4 (BEHAVIOURS.md section 5); 48 GB: an L40S.
    "T4": ("Tesla T4", 15360 * MiB, 430 * MiB),
    "L40S": ("NVIDIA L40S", 46068 * MiB, 512 * MiB),
}
KINDS = ("static", "cache", "work", "leak", "kept", "visible")


@dataclass
class Card:
    index: int
    name: str
    uuid: str
    total: int
    reserved: int
    sit: float  # the highest share of capacity NVML shows before the OOM (allocator frees and retries)

    @property
    def capacity(self) -> int:
        return self.total - self.reserved


@dataclass
class Proc:
    """One process. `card` is None for processes that hold no GPU memory (a vLLM V1 API server)."""

    pid: int
    name: str
    cmdline: list
    ppid: int
    create_time: float
    card: int | None
    start: float = float("inf")  # first time it holds memory
    end: float = float("inf")  # death or exit
    username: str = "root"
    libtorch_cuda: bool = True  # what its `proc` line says it maps (a C++/Rust server or the MPS server: no)
    libcudart: bool = True
    steps: dict = field(default_factory=lambda: {k: [] for k in KINDS})  # (t, delta bytes)
    dense: dict = field(default_factory=dict)  # kind -> array over the whole grid

    def step(self, kind: str, t, delta) -> None:
        """Add `delta` bytes to one component from time `t` on (both may be arrays of many steps)."""
        self.start = min(self.start, float(np.min(t)))
        self.steps[kind].append((t, delta))


@dataclass
class Server:
    """The processes of one server: `ranks[i]` holds `cards[i]`; `parents` hold no GPU memory."""

    layout: str
    ranks: list
    parents: list
    cards: list


@dataclass
class Episode:
    """One true dangerous episode on one card.

    kind: "leak" (memory kept and never given back; pattern ramp/staircase/troughs/warm_cache), "peaks"
    (transient peaks that grow until one does not fit) or "spike" (one transient taller than the headroom).
    """

    card: int
    kind: str
    pattern: str
    onset: float
    rate: float  # bytes/s of the leak (of the peaks' growth); 0 for a spike
    end: float | None = None  # its process died or stopped
    oom: float | None = None  # a CUDA OOM on this card ended it
    deadline_s: float | None = None  # a leak that does not reach OOM: GPUMemoryLeak within this
    pid: int | None = None  # the process that leaks
    visible: float | None = None  # when NVML first shows it (a warm cache hides a leak until used up)
    page: bool = True  # False: the card is never full within a page's horizon here (a leak warning only)


class Trace:
    """One scenario's recording: `duration` s at `hz` on `cards` (keys of CARDS), all randomness drawn
    from one seeded numpy Generator in a fixed order, so the records are byte-identical run to run."""

    def __init__(self, name: str, cards: list[str], hz: float, duration: float, seed: int, note: str = ""):
        self.name, self.hz, self.duration, self.seed, self.note = name, hz, duration, seed, note
        self.rng = np.random.default_rng(seed)
        self.n = int(round(duration * hz)) + 1
        self.t = np.arange(self.n) / hz
        self.cards = []
        for i, kind in enumerate(cards):
            nm, total, res = CARDS[kind]
            u = self.rng.integers(0, 16, 32)
            h = "".join("0123456789abcdef"[x] for x in u)
            uuid = f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
            self.cards.append(Card(i, nm, uuid, total, res, float(self.rng.uniform(0.993, 0.999))))
        self.procs: list[Proc] = []
        self.events: list[tuple[float, dict]] = []
        self.episodes: list[Episode] = []
        self.strays: list[tuple[int, int, float]] = []  # (card, pid, first seen)
        self.imbalance: bool | None = False
        self.summary_shape: dict[int, str] = {}  # card -> the shape replay's summary must end with (optional)
        self._next_pid = int(self.rng.integers(1000, 30000))
        self.shell = self.pid()  # the servers' parent (a shell, a supervisor); holds no GPU memory

    # ---- building --------------------------------------------------------------------------
    def idx(self, t: float) -> int:
        """The first sample at or after trace time t."""
        return int(min(self.n, max(0, np.ceil(t * self.hz - 1e-9))))

    def pid(self) -> int:
        self._next_pid += int(self.rng.integers(1, 40))
        return self._next_pid

    def proc(
        self,
        name: str,
        cmdline: list,
        ppid: int,
        at: float,
        card: int | None,
        pid: int | None = None,
        username: str = "root",
    ) -> Proc:
        p = Proc(
            pid if pid is not None else self.pid(),
            name,
            list(cmdline),
            ppid,
            round(EPOCH + at, 2),
            card,
            username=username,
        )
        self.procs.append(p)
        return p

    def event(self, t: float, event: str, **kw) -> None:
        self.events.append((t, {"event": event, **kw}))

    def dense(self, p: Proc, kind: str) -> np.ndarray:
        if kind not in p.dense:
            p.dense[kind] = np.zeros(self.n)
        return p.dense[kind]

    def add_curve(self, p: Proc, kind: str, t0: float, values_fn) -> None:
        """Add `values_fn(t - t0)` to one component of `p` from trace time t0 on."""
        i0 = self.idx(t0)
        if i0 < self.n:
            self.dense(p, kind)[i0:] += values_fn(self.t[i0:] - t0)
        p.start = min(p.start, t0)

    def component(self, p: Proc, kind: str) -> np.ndarray:
        out = np.zeros(self.n + 1)
        if p.steps[kind]:
            ts = np.concatenate([np.atleast_1d(np.asarray(t, float)) for t, _ in p.steps[kind]])
            ds = np.concatenate(
                [np.broadcast_to(np.asarray(d, float), np.shape(np.atleast_1d(t))) for t, d in p.steps[kind]]
            )
            np.add.at(out, np.clip(np.ceil(ts * self.hz - 1e-9), 0, self.n).astype(np.int64), ds)
        out = np.cumsum(out[:-1])
        if kind in p.dense:
            out += p.dense[kind]
        return out

    def alive(self, p: Proc) -> np.ndarray:
        if p.start == float("inf"):
            return np.zeros(self.n, bool)
        return (self.t >= p.start - 1e-9) & (self.t < p.end - 1e-9)

    def demand(self, p: Proc) -> tuple[np.ndarray, np.ndarray]:
        """(what NVML shows of p, what p needs now), both zero where p is not alive."""
        c = {k: self.component(p, k) for k in KINDS}
        shown = c["static"] + np.maximum(c["cache"], c["leak"] + c["work"]) + c["kept"] + c["visible"]
        need = c["static"] + c["leak"] + c["kept"] + c["work"] + c["visible"]
        a = self.alive(p)
        return np.where(a, shown, 0.0), np.where(a, need, 0.0)

    def end(self, srv: Server, stop: float | None = None) -> float | None:
        """Run `srv` until its first CUDA OOM (the whole server dies: its PIDs vanish) or until `stop`.

        Returns the time it died or stopped (None: it runs to the end of the trace). Call it before
        adding anything that depends on when the server died (a restart)."""
        stop_i = self.n if stop is None else self.idx(stop)
        first, who, need_at = self.n, None, 0.0
        for p in srv.ranks:
            card = self.cards[p.card]
            others = sum(
                (
                    np.minimum(self.demand(q)[0], card.sit * card.capacity)
                    for q in self.procs
                    if q.card == p.card and q is not p and q not in srv.ranks
                ),
                np.zeros(self.n),
            )
            _, need = self.demand(p)
            over = np.nonzero(need[:stop_i] + others[:stop_i] > card.capacity)[0]
            if len(over) and over[0] < first:
                first, who, need_at = int(over[0]), p, need[over[0]] + others[over[0]]
        if who is None and stop is None:
            return None
        t_end = float(self.t[first]) if who is not None else stop
        for p in srv.ranks + srv.parents:
            p.end = min(p.end, t_end)
        for ep in self.episodes:
            if ep.card in srv.cards and ep.end is None and ep.onset < t_end:
                ep.end = t_end
                if who is not None and ep.card == who.card:
                    ep.oom = t_end
        if who is not None:
            card = self.cards[who.card]
            self.event(
                t_end,
                "oom",
                gpu=who.card,
                pid=who.pid,
                detail=f"CUDA out of memory. GPU {who.card} has a total capacity of "
                f"{card.capacity / GiB:.2f} GiB; the process needed {need_at / GiB:.2f} GiB",
            )
            if not any(ep.card == who.card and ep.oom == t_end for ep in self.episodes):
                raise ValueError(
                    f"{self.name}: OOM on card {who.card} at {t_end:.1f} s with no episode "
                    f"that explains it (a healthy scenario must fit its card)"
                )
        return t_end

    # ---- output ------------------------------------------------------------------------------
    def _visible(self, e: Episode) -> float:
        """When NVML first shows the episode: the leaking process's curve departs from the same curve
        without the leak by a MiB (a warm allocator cache hides a leak until it is used up)."""
        p = next((q for q in self.procs if q.pid == e.pid), None)
        if e.kind != "leak" or p is None:
            return e.onset
        shown, _ = self.demand(p)
        c = {k: self.component(p, k) for k in ("static", "cache", "work", "visible")}
        without = np.where(self.alive(p), c["static"] + np.maximum(c["cache"], c["work"]) + c["visible"], 0.0)
        limit = self.cards[p.card].sit * self.cards[p.card].capacity  # what NVML can show at most
        i0 = self.idx(e.onset)
        d = np.nonzero(np.minimum(shown[i0:], limit) - np.minimum(without[i0:], limit) >= MiB)[0]
        return float(self.t[i0 + d[0]]) if len(d) else (e.end if e.end is not None else float(self.t[-1]))

    def truth(self) -> dict:
        """The ground truth, from the composition (what the scorer judges against)."""
        for e in self.episodes:
            if e.visible is None:
                e.visible = self._visible(e)
        eps = [
            {
                "gpu": e.card,
                "kind": e.kind,
                "pattern": e.pattern,
                "onset": round(float(e.onset), 3),
                "visible": round(float(e.visible), 3),
                "rate_bytes_per_second": round(float(e.rate), 3),
                "end": None if e.end is None else round(e.end, 3),
                "oom": None if e.oom is None else round(e.oom, 3),
                "deadline_s": e.deadline_s,
                **({} if e.page else {"page": False}),
            }
            for e in sorted(self.episodes, key=lambda e: (e.onset, e.card))
        ]
        return {
            "episodes": eps,
            "strays": [{"gpu": c, "pid": p, "t": round(t, 3)} for c, p, t in self.strays],
            "imbalance": self.imbalance,
            "duration": round(float(self.t[-1]), 3),
            **({"summary_shape": {str(c): v for c, v in self.summary_shape.items()}} if self.summary_shape else {}),
        }

    def expect(self) -> dict:
        bad = {e.card for e in self.episodes}
        shape = {}
        for c in self.cards:
            pats = {e.pattern for e in self.episodes if e.card == c.index}
            shape[str(c.index)] = (
                "stable"
                if not pats
                else "sawtooth"
                if "troughs" in pats
                else "staircase"
                if "staircase" in pats
                else "spike"
                if pats <= {"spike"}
                else "ramp"
            )
        return {
            "shape": shape,
            "leak": any(e.kind == "leak" for e in self.episodes),
            "oom": any(e.oom is not None for e in self.episodes),
            "stray": bool(self.strays),
            "imbalance": bool(self.imbalance),
            "healthy_gpus": [c.index for c in self.cards if c.index not in bad],
        }

    def header(self) -> dict:
        return {
            "format": "gpu-memory-trace/1",
            "scenario": self.name,
            "expect": self.expect(),
            "note": self.note,
            "truth": self.truth(),
            "sample_hz": self.hz,
            "driver": "580.95.05",
            "gpus": [{"index": c.index, "name": c.name, "uuid": c.uuid, "total": c.total} for c in self.cards],
            "generated": f"bench.scenarios seed {self.seed}",
        }

    def records(self):
        """The header, then samples, `proc` descriptions and annotations in time order (dicts)."""
        return self._records()

    def _records(self):
        yield self.header()
        n = self.n
        rng = np.random.default_rng([self.seed, 1])  # its own stream: records() is the same every call
        jitter = np.round(rng.uniform(0.0001, 0.0006, n), 4)
        per_card = []
        for c in self.cards:
            shown = [(p, self.demand(p)[0]) for p in self.procs if p.card == c.index]
            total = sum((s for _, s in shown), np.zeros(n))
            limit = c.sit * c.capacity
            over = np.maximum(total - limit, 0.0)
            if over.any():  # the allocator frees and retries: NVML never shows more than `sit`
                m = np.array([sh for _, sh in shown])
                m[np.argmax(m, axis=0), np.arange(n)] -= over  # of the largest holder at each sample
                shown = [(p, m[k]) for k, (p, _) in enumerate(shown)]
                total = total - over
            ints = [(p.pid, np.round(sh).astype(np.int64)) for p, sh in shown]
            per_card.append((ints, sum((a for _, a in ints), np.zeros(n, np.int64))))
        util = np.where(np.array([pc[1] for pc in per_card]) > 0, rng.integers(20, 96, (len(self.cards), n)), 0)
        events = sorted(self.events, key=lambda e: e[0])
        ev_i = 0
        seen: set[int] = set()
        by_pid = {p.pid: p for p in self.procs}
        for i in range(n):
            t = float(self.t[i])
            while ev_i < len(events) and events[ev_i][0] <= t + 1e-9:
                et, ev = events[ev_i]
                yield {"t": round(et, 4), **ev}
                ev_i += 1
            ts = round(t + float(jitter[i]), 4)
            gpus = []
            for c, (shown, total) in zip(self.cards, per_card, strict=True):
                procs = [[pid, int(s[i])] for pid, s in shown if s[i] > 0]
                for pid, _ in procs:
                    # A holder first seen, then its parents up the tree (a launcher, an API server, a
                    # container's PID 1), as the daemon's process scan describes them.
                    chain = []
                    while pid in by_pid and pid not in seen and (not chain or by_pid[pid].end > t):
                        seen.add(pid)
                        chain.append(by_pid[pid])
                        pid = by_pid[pid].ppid
                    for p in chain:
                        yield {
                            "t": ts,
                            "event": "proc",
                            "pid": p.pid,
                            "name": p.name,
                            "cmdline": p.cmdline,
                            "ppid": p.ppid,
                            "create_time": p.create_time,
                            "username": p.username,
                            "libtorch_cuda": p.libtorch_cuda,
                            "libcudart": p.libcudart,
                        }
                used = int(total[i])
                gpus.append(
                    {
                        "i": c.index,
                        "used": used,
                        "free": c.capacity - used,
                        "reserved": c.reserved,
                        "util": int(util[c.index, i]),
                        "procs": sorted(procs),
                    }
                )
            yield {"t": ts, "gpus": gpus}
        for et, ev in events[ev_i:]:
            yield {"t": round(et, 4), **ev}
        yield {"t": round(float(self.t[-1]) + 0.5, 4), "event": "done"}
