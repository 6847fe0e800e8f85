"""Host RAM that keeps growing in a server process while its GPU memory is flat (HostMemoryLeak).

Many "vLLM leaks" are host memory, not GPU memory: multimodal input caches, request logs, tokenizer
caches, Python objects kept per request. The process scan reads each server process's resident memory
(the GPU holders and their parents up to the server's root, so vLLM V1's API server is followed too);
after the process's warm-up, a Mann-Kendall test (Kendall's tau of RSS against time) says whether the
trend is monotonic and a Theil-Sen slope, robust to the odd jump of an arena or a GC, says how fast.
With a memory limit (cgroup v2 `memory.max` inside a container, else the host's memory) the rate gives a
time to the limit. Pure: the scan's numbers in, findings out; the statistics are trend.py's (no scipy).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ..config import HostMemConfig
from ..model import ProcInfo
from ..words import duration, gib
from .alerts import Condition
from .findings import Finding
from .processes import ProcRole, group_members
from .trend import mann_kendall, theil_sen

MAX_FIT_POINTS = 120  # points given to the trend test (evenly spaced): Theil-Sen is quadratic in them


@dataclass(frozen=True, slots=True)
class HostTrend:
    pid: int
    rss_bytes: int
    bytes_per_second: float
    tau: float
    p_value: float
    span_s: float
    points: int
    leak: bool


@dataclass(frozen=True, slots=True)
class HostLimit:
    limit_bytes: int
    used_bytes: int | None
    source: str  # cgroup | host


def trend(t: Sequence[float], y: Sequence[float]) -> tuple[float, float, float]:
    """(Theil-Sen slope, Kendall tau-b, two-sided p-value) of y against t (increasing times).

    The GPU analysis' statistics (trend.py: Mann-Kendall with the tie-corrected variance, Theil-Sen), so
    host and GPU trends are judged alike and the daemon needs no scipy. tau-b = S / sqrt(n0 (n0 - n2)),
    n2 the pairs tied in y (none in t); the p-value is the normal approximation with continuity
    correction, as Mann-Kendall is usually given (scipy's asymptotic p-value omits the correction)."""
    if len(set(y)) == 1:
        return 0.0, 0.0, 1.0
    x, v = np.asarray(t, dtype=float), np.asarray(y, dtype=float)
    n = len(v)
    _, counts = np.unique(v, return_counts=True)
    n0 = n * (n - 1) / 2.0
    n2 = float(np.sum(counts * (counts - 1))) / 2.0
    s, z = mann_kendall(v)
    slope, _, _ = theil_sen(x, v)
    tau = s / math.sqrt(n0 * (n0 - n2))
    return slope, tau, math.erfc(abs(z) / math.sqrt(2.0))


class HostMemJudge:
    """Keeps each followed process's RSS over the window and judges the trend after its warm-up."""

    def __init__(self, cfg: HostMemConfig | None = None):
        self.cfg = cfg or HostMemConfig()
        self.series: dict[int, deque[tuple[float, int]]] = {}
        self.first_seen: dict[int, float] = {}
        self.limit: HostLimit | None = None
        self.trends: dict[int, HostTrend] = {}
        self.latest: dict[int, int] = {}  # pid -> last RSS (for the metric)
        self._dirty: set[int] = set()

    def add(self, t: float, rss: Iterable[tuple[int, int]], limit: HostLimit | None = None) -> None:
        cfg = self.cfg
        seen = set()
        for pid, b in rss:
            seen.add(pid)
            if pid not in self.series:
                if len(self.series) >= cfg.max_pids:
                    continue
                self.series[pid] = deque()
                self.first_seen[pid] = t
            s = self.series[pid]
            s.append((t, int(b)))
            while s and s[0][0] < t - cfg.window_s - cfg.warmup_s:
                s.popleft()
            self.latest[pid] = int(b)
            self._dirty.add(pid)
        for pid in list(self.series):  # a process that is gone is forgotten with its trend
            if pid not in seen:
                for d in (self.series, self.first_seen, self.trends, self.latest):
                    d.pop(pid, None)
        if limit is not None:
            self.limit = limit

    def _fit(self, pid: int) -> HostTrend | None:
        cfg = self.cfg
        s = self.series.get(pid)
        if not s:
            return None
        t_last = s[-1][0]
        start = max(self.first_seen[pid] + cfg.warmup_s, t_last - cfg.window_s)
        pts = [(t, b) for t, b in s if t >= start]
        if len(pts) < cfg.min_points or pts[-1][0] - pts[0][0] < cfg.min_span_s:
            return HostTrend(pid, s[-1][1], 0.0, 0.0, 1.0, 0.0 if not pts else pts[-1][0] - pts[0][0], len(pts), False)
        if len(pts) > MAX_FIT_POINTS:
            step = len(pts) / MAX_FIT_POINTS
            pts = [pts[int(k * step)] for k in range(MAX_FIT_POINTS - 1)] + [pts[-1]]
        t = [p[0] for p in pts]
        y = [float(p[1]) for p in pts]
        slope, tau, p = trend(t, y)
        span = t[-1] - t[0]
        leak = (
            p < cfg.p_value
            and tau >= cfg.min_tau
            and slope >= cfg.min_bytes_per_second
            and slope * span >= cfg.min_growth_bytes
        )
        return HostTrend(pid, s[-1][1], slope, tau, p, span, len(pts), leak)

    def judge(
        self, now: float, roles: dict[int, ProcRole], procs: dict[int, ProcInfo], gpu_flat: bool
    ) -> list[tuple[Finding, Condition]]:
        """Findings for server processes whose RSS leaks while GPU memory is flat."""
        for pid in self._dirty:
            tr = self._fit(pid)
            if tr is not None:
                self.trends[pid] = tr
        self._dirty.clear()
        out: list[tuple[Finding, Condition]] = []
        if not gpu_flat:
            return out  # a GPU leak is the finding then; host growth beside it is part of the same story
        for pid in sorted(server_processes(roles, procs)):
            tr = self.trends.get(pid)
            if tr is not None and tr.leak:
                out.append(host_ram_leak(tr, procs.get(pid), self.limit, now))
        return out


def server_processes(roles: dict[int, ProcRole], procs: dict[int, ProcInfo]) -> set[int]:
    """Server holders and their parents up to their group's root (vLLM V1's API server, SGLang's launcher)."""
    return set().union(*group_members(roles, procs).values())


def host_ram_leak(tr: HostTrend, info: ProcInfo | None, limit: HostLimit | None, t: float) -> tuple[Finding, Condition]:
    name = (info.name if info else "") or "?"
    rate_h = tr.bytes_per_second * 3600
    eta = None
    where = ""
    if limit is not None:
        used = limit.used_bytes if limit.used_bytes is not None else tr.rss_bytes
        left = max(0.0, limit.limit_bytes - used)
        eta = left / tr.bytes_per_second if tr.bytes_per_second > 0 else None
        what = "the container's memory limit" if limit.source == "cgroup" else "the host's memory"
        where = f"; {what} ({gib(limit.limit_bytes)}) is reached in {duration(eta)}"
    summary = (
        f"PID {tr.pid} ({name}): host RAM grows while GPU memory is flat, {gib(rate_h)}/h, "
        f"now {gib(tr.rss_bytes)} resident{where}"
    )
    ev = {
        "pid": tr.pid,
        "process": name,
        "rss_bytes": tr.rss_bytes,
        "leak_bytes_per_second": round(tr.bytes_per_second, 1),
        "kendall_tau": round(tr.tau, 3),
        "p_value": float(f"{tr.p_value:.3g}"),
        "window_seconds": round(tr.span_s, 1),
        "points": tr.points,
        "limit_bytes": None if limit is None else limit.limit_bytes,
        "limit_source": None if limit is None else limit.source,
        "eta_seconds": None if eta is None else round(eta, 1),
    }
    advice = (
        "This is host memory, not the GPU: the engine's KV cache cannot cause it. Known causes in vLLM: the "
        "multimodal processor cache (lower --mm-processor-cache-gb, or 0), request logging "
        "(--disable-log-requests / --enable-log-requests off), per-request objects kept by custom code, and "
        "tokenizer caches. Profile the process with `py-spy dump --pid PID` or `memray attach PID`; restart "
        "the server before the limit if it cannot be fixed now (the kernel's OOM killer ends it otherwise)."
    ).replace("PID", str(tr.pid))
    f = Finding("host_ram_leak", None, tr.pid, summary, ev, advice, "warning", t)
    c = Condition(
        "HostMemoryLeak",
        (("pid", str(tr.pid)),),
        f"PID {tr.pid} ({name}) host RAM grows {gib(rate_h)}/h while GPU memory is flat",
        summary + ".",
        eta,
        tr.bytes_per_second,
    )
    return f, c


MAX_PROCESS_SERIES = 32  # processes exported with their resident memory (largest first): bounded cardinality


@dataclass(frozen=True, slots=True)
class ProcessView:
    """One process for the exporters: its role, server group, Kubernetes names and resident memory."""

    pid: int
    process: str
    role: str  # server | stray | other
    group: str | None
    rss_bytes: int | None
    pod: str | None = None
    namespace: str | None = None
    container: str | None = None


def process_views(
    judge: HostMemJudge, roles: dict[int, ProcRole], procs: dict[int, ProcInfo]
) -> tuple[ProcessView, ...]:
    """GPU holders and their server groups' processes, with their last RSS (largest first, bounded).

    For `Snapshot` (call with the analysis' lock held); everything returned is a frozen copy."""
    groups = group_members(roles, procs)
    member_group = {pid: g for g, pids in groups.items() for pid in pids}
    pids = set(roles) | set(member_group)
    out = []
    for pid in pids:
        info = procs.get(pid)
        r = roles.get(pid)
        role = r.role if r is not None else "server"  # a non-holder here is a server group's parent
        group = r.group if r is not None else member_group.get(pid)
        out.append(
            ProcessView(
                pid,
                ((info.name if info else "") or "?")[:32],
                role,
                group,
                judge.latest.get(pid, info.rss_bytes if info else None),
                info.pod if info else None,
                info.namespace if info else None,
                info.container_name if info else None,
            )
        )
    out.sort(key=lambda v: (-(v.rss_bytes or 0), v.pid))
    return tuple(out[:MAX_PROCESS_SERIES])
