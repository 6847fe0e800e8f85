"""Suspected OOMs and flight dumps: what the daemon keeps of the moments before something went wrong.

A server process that vanishes while its card was nearly full is a suspected OOM (NVML does not say why a
process went away; this is the next best thing). When that happens, or a memory alert fires, the flight
recorder's last window of full-rate samples is written as a `gpu-memory-trace/1` file next to the event,
so the post-mortem can `oomwatch replay` it. Copying the window is cheap and done on the caller's thread;
writing it (up to 15 minutes of samples) runs on a short-lived thread so sampling never stalls.

The writer is a sink: a failed write marks it down (`oomwatch_sink_up{sink="flight"}`) and logs one line;
it never pages as telemetry.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
import time
from collections.abc import Iterable
from typing import Any

from .config import DUMP_ALERTS  # the alerts whose spec says `dumps` (daemon/config.py)
from .logbudget import LogBudget
from .model import GpuInfo, ProcInfo, Sample, SourceStatus

__all__ = ["DUMP_ALERTS", "FlightDumps", "VanishWatch"]

log = logging.getLogger("oomwatch.flight")

MAX_REASON_CHARS = 64  # the reason in a dump's file name (an alert name, "suspected-oom-gpu3")
MAX_NAME_TRIES = 1000  # dumps of one reason in one millisecond before giving up (never, in practice)


class VanishWatch:
    """Notices server processes that disappear from a card that was nearly full (a suspected OOM)."""

    def __init__(self, full_fraction: float):
        self.full_fraction = full_fraction
        self._last_pids: dict[int, set[int]] = {}
        self._last_used: dict[int, int | None] = {}
        self.count = 0
        self._log = LogBudget("suspected OOMs")  # a looped replay at a high speed repeats them

    def check(self, s: Sample, analyzer: Any) -> list[int]:
        """Cards on which a server process vanished while the card was full. Call with the analysis' lock.

        "Full" is judged at the last sample that still showed the process, not at the card's peak: a server
        that gave its memory back before it exited (a normal shutdown), or whose card had emptied, did not
        die of an OOM.
        """
        hit = []
        for g in s.gpus:
            pids = {p for p, _ in g.procs}
            gone = self._last_pids.get(g.index, set()) - pids
            used_before = self._last_used.get(g.index)
            self._last_pids[g.index] = pids
            self._last_used[g.index] = g.used_bytes
            st = analyzer.gpus.get(g.index)
            if not gone or st is None or used_before is None or not st.capacity_bytes:
                continue
            roles = analyzer.roles
            servers = sorted(p for p in gone if roles.get(p) is not None and roles[p].role == "server")
            if servers and used_before >= self.full_fraction * st.capacity_bytes:
                self.count += 1
                self._log.log(
                    log,
                    logging.WARNING,
                    "GPU %s: server process %s vanished while the card was %.0f%% full (a suspected OOM)",
                    g.index,
                    ", ".join(map(str, servers)),
                    100 * used_before / st.capacity_bytes,
                )
                hit.append(g.index)
        return hit


class FlightDumps:
    """Writes the flight recorder's window to `directory` on demand, in the background."""

    name = "flight"

    def __init__(self, recorder: Any, directory: str, gpus: Iterable[GpuInfo]):
        self.recorder = recorder  # oomwatch.exporters.recorder.FlightRecorder
        self.directory = directory
        self.gpus = tuple(gpus)
        self.count = 0  # dumps written (not begun)
        self.status = SourceStatus("flight", True)
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def add(self, s: Sample) -> None:
        self.recorder.add(s)

    def add_proc(self, t: float, p: ProcInfo) -> None:
        self.recorder.add_proc(t, p)

    def alloc(self, t: float, samples: Iterable[Any]) -> None:
        self.recorder.alloc(t, samples)

    def rss(self, r: Any) -> None:
        self.recorder.rss(r)

    def dump(self, reason: str) -> str | None:
        """Start writing a dump; returns the path it will have (None when even the folder failed).

        The name is reserved at once (created exclusively, empty, then replaced by the written trace), so two
        dumps of one alert in one second, or of two daemons on one folder, never overwrite each other."""
        try:
            os.makedirs(self.directory, exist_ok=True)
            path = self._reserve(reason)
        except OSError as e:
            self._failed(f"cannot write in {self.directory}: {e.strerror or e}")
            return None
        frozen = self.recorder.frozen()  # copy now (cheap); write in the background
        th = threading.Thread(target=self._write, args=(frozen, path, reason), name="oomwatch-flight", daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()] + [th]
        th.start()
        return path

    def _reserve(self, reason: str) -> str:
        """A new file name for a dump, created empty with O_EXCL (a taken name gets the next number)."""
        now = time.time()
        stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(now)) + f".{int(now * 1000) % 1000:03d}"
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in reason)[:MAX_REASON_CHARS] or "dump"
        for n in range(1, MAX_NAME_TRIES + 1):
            path = os.path.join(self.directory, f"oomwatch-{stamp}-{safe}{'' if n == 1 else f'-{n}'}.jsonl")
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
                return path
            except FileExistsError:
                continue
        raise FileExistsError(errno.EEXIST, f"{MAX_NAME_TRIES} dumps named oomwatch-{stamp}-{safe} already")

    def _write(self, frozen: Any, path: str, reason: str) -> None:
        try:
            frozen.dump(path, self.gpus, reason)
        except Exception as e:  # noqa: BLE001 - a sink's failure is its status and one line, never a traceback
            with contextlib.suppress(OSError):
                os.unlink(path)  # the empty reservation: no trace there
            self._failed(f"cannot write {path}: {getattr(e, 'strerror', None) or e}")
            return
        with self._lock:
            self.count += 1  # only dumps actually written count (oomwatch_flight_dumps_total)
            self.status = SourceStatus("flight", True)

    def _failed(self, why: str) -> None:
        self.status = SourceStatus("flight", False, why)
        log.error("flight recorder: %s", why)

    def join(self, timeout_s: float = 5.0) -> None:
        """Wait for dumps in progress (on shutdown, so a dump is not cut off)."""
        for th in self._threads:
            th.join(timeout_s)
