"""Write `gpu-memory-trace/1`: the recorder (`--record`, `oomwatch record`) and the flight recorder.

The recorder writes each sample as one line and flushes it, so a kill loses at most the line being
written, and replay tolerates a last line cut in half. A write that fails (disk full, folder removed)
marks the recorder down with its reason (a sink: `oomwatch_sink_up{sink="recorder"} 0` and one log line,
never a telemetry alert) and keeps the daemon running; samples already on disk stay.
A PID is described once, the first time it is seen holding memory, with a redacted short cmdline.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import math
import os
import time
from collections.abc import Iterable
from typing import TextIO

from oomwatch.model import AllocSample, GpuInfo, ProcInfo, RssSample, Sample, SourceStatus
from oomwatch.trace import alloc_line, header_line, proc_line, rss_line, sample_line

#: Process descriptions a flight recorder keeps before it first prunes (a pod has a few dozen processes).
MIN_PROCS_KEPT = 256

__all__ = ["FlightRecorder", "TraceRecorder"]

log = logging.getLogger("oomwatch.recorder")


class TraceRecorder:
    name = "recorder"

    def __init__(self, path: str, gpus: Iterable[GpuInfo], sample_hz: float | None = None, driver: str | None = None):
        self.path = path
        self._seen: set[int] = set()
        self.status = SourceStatus("recorder", True)
        self.lines = 0
        self._f: TextIO | None = open(path, "w", encoding="utf-8")  # noqa: SIM115 - held open for the daemon's life
        self._write(header_line(gpus, sample_hz, driver, recorded=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())))

    def _write(self, line: str) -> bool:
        f = self._f
        if f is None:
            return False
        try:
            f.write(line + "\n")
            f.flush()
            self.lines += 1
            if self.lines % 100 == 0:
                self._check_still_there(f)
            return True
        except OSError as e:
            self.status = SourceStatus("recorder", False, f"cannot write {self.path}: {e.strerror or e}")
            log.error("recorder stopped: %s", self.status.error)
            with contextlib.suppress(OSError):
                f.close()
            self._f = None
            return False

    def _check_still_there(self, f: TextIO) -> None:
        """A removed file or folder does not fail writes on Linux (the inode lives on): say so instead."""
        try:
            same = os.path.samestat(os.stat(self.path), os.fstat(f.fileno()))
        except OSError:
            same = False
        if not same:
            raise OSError(f"{self.path} was removed while recording")

    def sample(self, s: Sample) -> None:
        self._write(sample_line(s))

    def proc(self, t: float, p: ProcInfo) -> None:
        if p.pid in self._seen:
            return
        self._seen.add(p.pid)
        self._write(proc_line(t, p))

    def rss(self, r: RssSample) -> None:
        """One process scan's resident memory (an `RssSample`): a `{"t", "rss"}` line."""
        self._write(rss_line(r))

    def alloc(self, t: float, samples: Iterable[AllocSample]) -> None:
        """The allocator probes' readings (`AllocSample`s) of one read: an `{"t", "alloc"}` line."""
        self._write(alloc_line(t, samples))

    def close(self) -> None:
        if self._f is not None:
            try:
                self._f.flush()
                os.fsync(self._f.fileno())
                self._f.close()
            except OSError:
                pass
            self._f = None


class FlightRecorder:
    """The last `window_s` of samples at full rate, in memory, with the allocator probes' and the process
    scans' lines of the same span (what a post-mortem of a warm-cache leak or a host-RAM leak needs); dumped
    as a trace when something fires."""

    def __init__(self, window_s: float = 900.0):
        self.window_s = window_s
        self._samples: collections.deque[Sample] = collections.deque()
        self._lines: collections.deque[tuple[float, str]] = collections.deque()  # alloc and rss lines, rendered
        self._procs: dict[int, tuple[float, ProcInfo]] = {}
        self._prune_at = MIN_PROCS_KEPT

    def add(self, s: Sample) -> None:
        q = self._samples
        q.append(s)
        while q and s.t - q[0].t > self.window_s:
            q.popleft()
        lines = self._lines
        while lines and s.t - lines[0][0] > self.window_s:
            lines.popleft()
        if len(self._procs) > self._prune_at:
            self._prune()

    def _prune(self) -> None:
        """Forget the descriptions no dump can write: PIDs that hold nothing in the window and were described
        before it began. Run when the table has doubled since the last prune (amortised O(1) a sample), so it
        stays within twice the live set under any PID churn."""
        start = self._samples[0].t if self._samples else -math.inf
        live = {pid for s in self._samples for g in s.gpus for pid, _ in g.procs}
        self._procs = {pid: v for pid, v in self._procs.items() if pid in live or v[0] >= start}
        self._prune_at = max(MIN_PROCS_KEPT, 2 * len(self._procs))

    def alloc(self, t: float, samples: Iterable[AllocSample]) -> None:
        """The allocator probes' readings of one read (kept as its `alloc` line)."""
        self._lines.append((t, alloc_line(t, samples)))

    def rss(self, r: RssSample) -> None:
        """One process scan's resident memory (kept as its `rss` line)."""
        self._lines.append((r.t, rss_line(r)))

    def add_proc(self, t: float, p: ProcInfo) -> None:
        self._procs.setdefault(p.pid, (t, p))

    def frozen(self) -> FlightRecorder:
        """A copy to write from another thread while sampling goes on."""
        fr = FlightRecorder(self.window_s)
        fr._samples = collections.deque(self._samples)
        fr._lines = collections.deque(self._lines)
        fr._procs = dict(self._procs)
        return fr

    def dump(self, path: str, gpus: Iterable[GpuInfo], reason: str = "") -> str:
        tmp = path + ".part"
        try:
            self._write(tmp, gpus, reason)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        os.replace(tmp, path)
        return path

    def _write(self, tmp: str, gpus: Iterable[GpuInfo], reason: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(header_line(gpus, None, None, reason=reason) + "\n")
            t0 = self._samples[0].t if self._samples else 0.0
            pids = {pid for s in self._samples for g in s.gpus for pid, _ in g.procs}
            for pid in sorted(pids):
                if pid in self._procs:
                    f.write(proc_line(max(t0, self._procs[pid][0]), self._procs[pid][1]) + "\n")
            lines = iter(self._lines)
            nxt = next(lines, None)
            for s in self._samples:  # both in time order: merge them, a line before the sample of its time
                while nxt is not None and nxt[0] <= s.t:
                    f.write(nxt[1] + "\n")
                    nxt = next(lines, None)
                f.write(sample_line(s) + "\n")
            while nxt is not None:
                f.write(nxt[1] + "\n")
                nxt = next(lines, None)
