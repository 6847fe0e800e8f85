"""The allocator probes' directory: what PyTorch's caching allocator holds in each server process.

Server processes that run the opt-in probe (`oomwatch.probe`, `OOMWATCH_PROBE=1`) each replace one file,
`<pid>.json` (format `oomwatch-probe/1`), in a directory shared with the daemon (`OOMWATCH_PROBE_DIR`,
default `/dev/shm/oomwatch`; in a pod, an `emptyDir` mounted in both containers). Every second this source
reads them all and returns one `AllocSample` per (process, card).

Joining: a probe numbers devices as its process sees them (CUDA_VISIBLE_DEVICES renumbers them), so the
card is found by UUID, never by index; a device without a UUID, or of a card this daemon does not watch, is
left out. A file older than 3 of its intervals, or of a PID that is gone, is stale: ignored and removed.
A PID once seen alive and now gone is dead at once (a dead server's last file, read on, would keep its
allocator's memory alive in the analysis and make GPUMemoryLeak fire and resolve a second time); a PID never
seen counts as gone only once its file has also missed a rewrite, since a server in another PID namespace
shows PIDs this one cannot see.
Malformed files are skipped (a probe of another version, a half-written file of a foreign writer), and so
are numbers that are not finite, negative byte counts and more devices than a host has.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Callable
from typing import Any

from ..model import AllocSample, GpuInfo, SourceStatus

log = logging.getLogger("oomwatch.allocator")

FORMAT = "oomwatch-probe/1"  # the probe's format (oomwatch.probe.FORMAT; not imported: sources stay apart)
DEFAULT_DIR = "/dev/shm/oomwatch"
STALE_INTERVALS = 3.0  # a file not replaced for this many of its intervals is from a dead or hung probe
GONE_INTERVALS = 1.5  # ... or this many, when its PID is not there: a live probe in another PID namespace
# (no shared process namespace) rewrites its file every interval, so it is never taken for a dead one
MAX_FILES = 256  # bound the work and the label cardinality: more server processes than this is not a pod
MAX_FILE_BYTES = 64 << 10  # a probe file is a few hundred bytes per device
MAX_DEVICES = 64  # devices one process sees: more is not a probe file
MIN_INTERVAL_S = 0.05  # a probe's own interval below this (or none) is read as this


class AllocatorSource:
    """Reads the probe directory; `poll(now)` returns the fresh `AllocSample`s stamped with `now`."""

    name = "allocator"

    def __init__(
        self,
        gpus: tuple[GpuInfo, ...] | list[GpuInfo],
        directory: str = DEFAULT_DIR,
        clock: Callable[[], float] = time.time,
        pid_alive: Callable[[int], bool] | None = None,
        create: bool = True,
    ):
        self.directory = directory
        self.clock = clock
        self._alive = pid_alive or _pid_alive
        self._by_uuid = {g.uuid: g for g in gpus if g.uuid}
        self.status = SourceStatus(self.name, True)
        self.removed = 0  # stale files removed since start
        self._seen_alive: set[int] = set()  # PIDs of probe files seen alive: in this PID namespace
        self.last: tuple[AllocSample, ...] = ()
        if create:
            self._create()

    @property
    def cards(self) -> tuple[GpuInfo, ...]:
        return ()

    def _create(self) -> None:
        """Create the directory (world-writable with the sticky bit, like /tmp: servers may run as other
        users); a failure is the source's status, not an error."""
        try:
            if not os.path.isdir(self.directory):
                os.makedirs(self.directory, exist_ok=True)
                os.chmod(self.directory, 0o1777)
        except OSError as e:  # read-only here: the probes cannot write either; say it once, page nobody
            log.warning("cannot create the probe directory %s: %s", self.directory, e.strerror or e)

    def card_index(self, uuid: str) -> int | None:
        g = self._by_uuid.get(uuid)
        return None if g is None else g.index

    def poll(self, now: float) -> list[AllocSample]:
        t0 = time.perf_counter()
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            # No probe has a place to write: nothing is failing (the probe is opt-in), there is nothing to read.
            self.status = SourceStatus(
                self.name, True, f"{self.directory} does not exist (no probes)", time.perf_counter() - t0
            )
            self.last = ()
            return []
        except OSError as e:
            self.status = SourceStatus(
                self.name, False, f"cannot read {self.directory}: {e.strerror or e}", time.perf_counter() - t0
            )
            self.last = ()
            return []
        wall = self.clock()
        out: list[AllocSample] = []
        files = 0
        pids: set[int] = set()
        for fn in sorted(names):
            if not fn.endswith(".json") or not fn[:-5].isdigit():
                continue  # the probes' temporary files start with '.', anything else is not ours
            files += 1
            if files > MAX_FILES:
                break
            path = os.path.join(self.directory, fn)
            doc = _read(path)
            if doc is None:
                continue
            pid = doc["pid"]
            pids.add(pid)
            age = wall - doc["time"]
            if self._stale(pid, age, doc["interval_s"]):
                self._remove(path, pid, age)
                continue
            for d in doc["devices"]:
                s = _device(now, pid, d)
                if s is not None and s.uuid in self._by_uuid:
                    out.append(s)
        self._seen_alive &= pids  # bounded by the files there are (MAX_FILES)
        self.status = SourceStatus(self.name, True, None, time.perf_counter() - t0)
        self.last = tuple(out)
        return out

    def _stale(self, pid: int, age: float, interval_s: float) -> bool:
        """Whether a file is stale: too old, or of a dead PID (see the module's docstring)."""
        if age > STALE_INTERVALS * interval_s:
            return True
        if self._alive(pid):
            self._seen_alive.add(pid)
            return False
        return pid in self._seen_alive or age > GONE_INTERVALS * interval_s

    def _remove(self, path: str, pid: int, age: float) -> None:
        try:
            os.unlink(path)
            self.removed += 1
            log.info("removed stale probe file %s (pid %d, %.0f s old)", path, pid, age)
        except OSError:
            pass  # another daemon removed it, or the directory is read-only to us: ignoring is enough

    def close(self) -> None:
        """Nothing held between polls."""


def _pid_alive(pid: int) -> bool:
    """Whether `pid` exists in this PID namespace (the sidecar shares the server's: shareProcessNamespace)."""
    return os.path.exists(f"/proc/{pid}") if os.path.isdir("/proc") else True


def _read(path: str) -> dict[str, Any] | None:
    """A probe file's document with `pid`, `time` and `interval_s` checked (finite, in range), or None."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            return None
        doc = json.loads(raw)  # 64 KiB cannot nest deep enough to exhaust the stack; RecursionError below
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return None
    pid, t, iv = doc.get("pid"), _finite(doc.get("time")), _finite(doc.get("interval_s"))
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0 or t is None:
        return None
    devices = doc.get("devices")
    if not isinstance(devices, list) or len(devices) > MAX_DEVICES:
        return None
    doc["time"] = t
    doc["interval_s"] = max(iv or 1.0, MIN_INTERVAL_S)
    return doc


def _device(now: float, pid: int, d: Any) -> AllocSample | None:
    """One device's readings; None for one without a UUID or with a byte count that is no finite count."""
    if not isinstance(d, dict) or not isinstance(d.get("uuid"), str):
        return None
    allocated, reserved = _int(d.get("allocated_bytes")), _int(d.get("reserved_bytes"))
    if allocated is None or reserved is None:
        return None
    return AllocSample(
        now,
        pid,
        d["uuid"],
        allocated,
        reserved,
        _int(d.get("inactive_split_bytes")),
        _int(d.get("alloc_retries")),
        _int(d.get("ooms")),
    )


def _finite(v: Any) -> float | None:
    """A JSON number as a finite float, else None (NaN would make every age comparison false)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def _int(v: Any) -> int | None:
    """A counter or byte count: a finite number from 0, else None."""
    f = _finite(v)
    return None if f is None or f < 0 else int(v)
