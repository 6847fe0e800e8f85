"""Describe the processes NVML reports (psutil): name, short redacted cmdline, parent, age, user, container.

NVML reports host PIDs. Inside a container without the host PID namespace psutil cannot see them; such a
PID is described as `visible=False` and the analysis says how to run the sidecar (`--pid=host`, or
`shareProcessNamespace: true` in Kubernetes). A PID that vanishes mid-scan or that psutil may not read
is skipped or described with what could be read; nothing here raises.
"""

from __future__ import annotations

import re
import time
from urllib.parse import urlsplit

from ..model import ProcInfo, SourceStatus
from ..redact import short_cmdline

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
    except psutil.NoSuchProcess:
        return ProcInfo(pid, visible=False, alive=False)
    except psutil.AccessDenied:
        return ProcInfo(pid, visible=True)
    torch_cuda, cudart = maps_cuda(pid)
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
    )


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
                return c.pid
    except (psutil.AccessDenied, OSError, ValueError):
        return None
    return None


def matching_pids(pattern: str) -> set[int]:
    """PIDs whose command line matches a regular expression (for `--server-cmdline`)."""
    rx = re.compile(pattern)
    out = set()
    if psutil is None:
        return out
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if rx.search(" ".join(p.info["cmdline"] or ())):
                out.add(p.info["pid"])
        except (psutil.NoSuchProcess, psutil.AccessDenied, TypeError):
            continue
    return out


class ProcessScanner:
    """Describes new PIDs once, refreshes whether parents are alive, forgets PIDs gone for a while."""

    name = "processes"

    def __init__(self, forget_after_s: float = 600.0):
        self.known: dict[int, ProcInfo] = {}
        self.forget_after_s = forget_after_s
        self._last_seen: dict[int, float] = {}
        self.status = SourceStatus("processes", True)

    def scan(self, pids) -> list[ProcInfo]:
        """Returns the ProcInfos that are new or changed (parents gone, re-parented)."""
        t0 = time.perf_counter()
        now = time.monotonic()
        changed = []
        for pid in pids:
            self._last_seen[pid] = now
            info = self.known.get(pid)
            if info is None:
                info = describe(pid)
                self.known[pid] = info
                changed.append(info)
                if info.ppid and info.ppid not in self.known and info.ppid > 1:
                    parent = describe(info.ppid)
                    self.known[info.ppid] = parent
                    self._last_seen[info.ppid] = now
                    changed.append(parent)
            elif info.visible and psutil is not None:
                try:
                    ppid = psutil.Process(pid).ppid()
                except psutil.Error:
                    ppid = info.ppid
                if ppid != info.ppid:
                    info = describe(pid)
                    self.known[pid] = info
                    changed.append(info)
        for pid, info in list(self.known.items()):  # parents that died make their children orphans
            if info.alive and pid not in pids and not alive(pid):
                dead = ProcInfo(**{**{s: getattr(info, s) for s in info.__slots__}, "alive": False})
                self.known[pid] = dead
                changed.append(dead)
            if now - self._last_seen.get(pid, now) > self.forget_after_s:
                self.known.pop(pid, None)
                self._last_seen.pop(pid, None)
        self.status = SourceStatus("processes", psutil is not None, None if psutil else "psutil missing",
                                   time.perf_counter() - t0)
        return changed
