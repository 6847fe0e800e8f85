"""Describe the processes NVML reports (psutil): name, short redacted cmdline, parent, age, user, container.

NVML reports host PIDs. Inside a container without the host PID namespace psutil cannot see them; such a
PID is described as `visible=False` and the analysis says how to run the sidecar (`--pid=host`, or
`shareProcessNamespace: true` in Kubernetes). A PID that vanishes mid-scan or that psutil may not read
is skipped or described with what could be read; nothing here raises.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from urllib.parse import urlsplit

from ..model import ProcInfo, RssSample, SourceStatus
from ..redact import short_cmdline
from .kubernetes import pod_of

try:
    import psutil
except ImportError:  # pragma: no cover - psutil is a dependency; keep the daemon up without it
    psutil = None

_CONTAINER_RE = re.compile(r"([0-9a-f]{64})|(?:docker|crio|containerd|libpod)-([0-9a-f]{12,64})")


def container_id(pid: int) -> str | None:
    """The container a PID runs in, from its cgroup path (first 12 hex digits), or None."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    return container_id_in(text)


def container_id_in(text: str) -> str | None:
    """The container ID in a /proc/PID/cgroup text (docker, containerd, CRI-O, podman), or None."""
    m = _CONTAINER_RE.search(text)
    if not m:
        return None
    return (m.group(1) or m.group(2))[:12]


def maps_cuda(pid: int) -> tuple[bool | None, bool | None]:
    """Whether the process maps libtorch_cuda and libcudart (None when unreadable)."""
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None, None
    return "libtorch_cuda" in text, "libcudart" in text


def describe(pid: int) -> ProcInfo:
    if psutil is None:
        return ProcInfo(pid, visible=False)
    try:
        p = psutil.Process(pid)
        with p.oneshot():
            name = p.name()
            try:
                cmd = p.cmdline()
            except (psutil.AccessDenied, psutil.ZombieProcess):
                cmd = [name]
            try:
                user = p.username()
            except (psutil.AccessDenied, KeyError):
                user = None
            ppid, created = p.ppid(), p.create_time()
            try:
                rss = int(p.memory_info().rss)
            except (psutil.AccessDenied, psutil.ZombieProcess):
                rss = None
    except psutil.NoSuchProcess:
        own = pod_of(pid)  # a sidecar's downward API names the pod even for PIDs it cannot see
        return ProcInfo(
            pid,
            visible=False,
            alive=False,
            pod=own.pod if own else None,
            namespace=own.namespace if own else None,
            container_name=own.container if own else None,
        )
    except psutil.AccessDenied:
        return ProcInfo(pid, visible=True)
    torch_cuda, cudart = maps_cuda(pid)
    try:
        pgid = os.getpgid(pid)
    except OSError:
        pgid = None
    pod = pod_of(pid)
    return ProcInfo(
        pid=pid,
        name=name,
        cmdline=short_cmdline(cmd or [name]),
        ppid=ppid,
        create_time=created,
        username=user,
        libtorch_cuda=torch_cuda,
        libcudart=cudart,
        container=container_id(pid),
        pgid=pgid,
        rss_bytes=rss,
        pod=pod.pod if pod else None,
        namespace=pod.namespace if pod else None,
        container_name=pod.container if pod else None,
    )


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as f:
            v = f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(v) if v.isdigit() else None  # "max": no limit


def memory_limit(
    pid: int, proc: str = "/proc", cgroup_root: str = "/sys/fs/cgroup"
) -> tuple[int, int | None, str] | None:
    """(limit bytes, used bytes, "cgroup"|"host") for the memory a process lives under: its cgroup v2
    `memory.max` (walking up to the first set limit, as the kernel does), else the host's memory."""
    try:
        with open(f"{proc}/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
        path = next((ln.split("::", 1)[1] for ln in lines if ln.startswith("0::")), None)
    except OSError:
        path = None
    candidates = []
    if path is not None:
        parts = [p for p in path.strip("/").split("/") if p]
        candidates += [os.path.join(cgroup_root, *parts[:k]) for k in range(len(parts), 0, -1)]
    candidates.append(cgroup_root)  # inside a container the namespaced root is the container's own cgroup
    for d in candidates:
        lim = _read_int(os.path.join(d, "memory.max"))
        if lim is not None:
            return lim, _read_int(os.path.join(d, "memory.current")), "cgroup"
    if psutil is not None:
        vm = psutil.virtual_memory()
        return int(vm.total), int(vm.total - vm.available), "host"
    return None


def rss_of(pid: int) -> int | None:
    """Resident host memory of a PID in bytes (None when gone or unreadable)."""
    if psutil is None:
        return None
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except (psutil.Error, OSError):
        return None


def alive(pid: int) -> bool:
    return psutil is not None and psutil.pid_exists(pid)


def listening_pid(url: str) -> int | None:
    """The PID listening on an engine URL's port on this host (to find the served process)."""
    if psutil is None:
        return None
    try:
        port = urlsplit(url if "://" in url else "http://" + url).port or 80
        for c in psutil.net_connections(kind="tcp"):
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
                return int(c.pid)
    except (psutil.AccessDenied, OSError, ValueError):
        return None
    return None


def matching_pids(pattern: str) -> set[int]:
    """PIDs whose command line matches a regular expression (for `--server-cmdline`)."""
    rx = re.compile(pattern)
    out: set[int] = set()
    if psutil is None:
        return out
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if rx.search(" ".join(p.info["cmdline"] or ())):
                out.add(p.info["pid"])
        except (psutil.NoSuchProcess, psutil.AccessDenied, TypeError):
            continue
    return out


MAX_ANCESTORS = 16  # parents described above a GPU holder (a server tree is a few levels deep)


class ProcessScanner:
    """Describes new PIDs and their parents up to init once, refreshes whether parents are alive, reads
    each known process's resident memory every scan (`last_rss`), forgets PIDs gone for a while."""

    name = "processes"

    def __init__(self, forget_after_s: float = 600.0):
        self.known: dict[int, ProcInfo] = {}
        self.forget_after_s = forget_after_s
        self._last_seen: dict[int, float] = {}
        self.status = SourceStatus("processes", True)
        self.last_rss: list[tuple[int, int]] = []

    def _describe_parents(self, info: ProcInfo, now: float, changed: list[ProcInfo]) -> None:
        """The chain of parents up to PID 1: the server's root is often not a GPU holder (vLLM V1's API
        server, SGLang's launcher)."""
        cur = info
        for _ in range(MAX_ANCESTORS):
            ppid = cur.ppid
            if not ppid or ppid in self.known:  # PID 1 too: init, or the server itself in a container
                if ppid in self.known:
                    self._last_seen[ppid] = now
                break
            parent = describe(ppid)
            self.known[ppid] = parent
            self._last_seen[ppid] = now
            changed.append(parent)
            cur = parent

    def _touch_chain(self, pid: int, now: float) -> None:
        """A holder and its known parents stay known while it holds memory."""
        for _ in range(MAX_ANCESTORS + 1):
            self._last_seen[pid] = now
            info = self.known.get(pid)
            if info is None or not info.ppid or info.ppid <= 1:
                return
            pid = info.ppid

    cards: tuple[()] = ()  # the `Source` protocol: processes report no card of their own
    watched: frozenset[int] = frozenset()  # the PIDs `poll` describes: the sampler sets the GPU holders it saw

    def watch(self, pids: Iterable[int]) -> None:
        self.watched = frozenset(pids)

    def poll(self, now: float | None = None) -> list[object]:
        """The `Source` protocol: describe the watched PIDs (the new or changed ProcInfos), then one
        `RssSample`: the resident memory of every known process and the memory limit they live under."""
        out: list[object] = list(self.scan(self.watched))
        if self.last_rss:
            biggest = max(self.last_rss, key=lambda pb: pb[1])[0]
            lim = memory_limit(biggest)
            out.append(
                RssSample(
                    time.monotonic() if now is None else now,
                    tuple(self.last_rss),
                    *(lim if lim else (None, None, None)),
                )
            )
        return out

    def close(self) -> None:
        """The `Source` protocol; psutil holds nothing open between scans."""

    def scan(self, pids: Iterable[int]) -> list[ProcInfo]:
        """Returns the ProcInfos that are new or changed (parents gone, re-parented)."""
        t0 = time.perf_counter()
        now = time.monotonic()
        changed: list[ProcInfo] = []
        for pid in pids:
            self._touch_chain(pid, now)
            info = self.known.get(pid)
            if info is None:
                info = describe(pid)
                self.known[pid] = info
                changed.append(info)
                self._describe_parents(info, now, changed)
            elif info.visible and psutil is not None:
                try:
                    ppid = psutil.Process(pid).ppid()
                except psutil.Error:
                    ppid = info.ppid
                if ppid != info.ppid:
                    info = describe(pid)
                    self.known[pid] = info
                    changed.append(info)
                    self._describe_parents(info, now, changed)
        for pid, info in list(self.known.items()):  # parents that died make their children orphans
            if info.alive and pid not in pids and not alive(pid):
                dead = ProcInfo(**{**{s: getattr(info, s) for s in info.__slots__}, "alive": False})
                self.known[pid] = dead
                changed.append(dead)
            if now - self._last_seen.get(pid, now) > self.forget_after_s:
                self.known.pop(pid, None)
                self._last_seen.pop(pid, None)
        # Resident memory of every live holder and parent (PID 1 only when it holds memory itself).
        rss = []
        for pid, info in self.known.items():
            if info.alive and info.visible and (pid > 1 or pid in pids):
                b = rss_of(pid)
                if b is not None:
                    rss.append((pid, b))
        self.last_rss = sorted(rss)
        self.status = SourceStatus(
            "processes", psutil is not None, None if psutil else "psutil missing", time.perf_counter() - t0
        )
        return changed
