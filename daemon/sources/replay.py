"""Play a `gpu-memory-trace/1` file instead of NVML: the no-GPU demo, the test path, the post-mortem.

`ReplaySource.poll(now)` returns what became due since the last poll, at `speed` times real time, so
the daemon's sampler drives a replay exactly as it drives NVML. Only samples and `proc` lines are read
(see `oomwatch.trace`). With `loop`, the trace starts again with its times shifted, so counters and the
analysis see one continuous run.

One poll returns at most `MAX_RECORDS_PER_POLL` records: at `--speed 1e6 --loop` a poll would otherwise
play the trace over and over for as long as it is behind, never return, and hold up `--duration`, SIGTERM
and every other job. Beyond what the analysis can take, the replay simply runs behind its clock. Each new
pass of a loop is logged at most once every `LOOP_LOG_EVERY_S`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator

from ..errors import TraceError
from ..model import GpuInfo, GpuSample, ProcInfo, Sample, SourceStatus
from ..trace import read_trace

log = logging.getLogger("oomwatch.replay")

MAX_RECORDS_PER_POLL = 2000  # one poll's share: ~0.1 s of analysis, so a stop is never kept waiting
LOOP_LOG_EVERY_S = 10.0  # at most one "pass N" line this often, whatever the speed


class ReplaySource:
    name = "replay"

    def __init__(self, path: str, speed: float = 1.0, loop: bool = False, clock: Callable[[], float] = time.monotonic):
        if speed <= 0:
            raise TraceError("--speed must be greater than 0")
        self.path, self.speed, self.loop, self.clock = path, speed, loop, clock
        self.header, self._it = read_trace(path)  # raises TraceError with one clear line
        self.gpus = self.header.gpus
        self.driver = self.header.driver
        self._pending: tuple[float, object] | None = None
        self._start_wall: float | None = None
        self._t_first: float | None = None
        self._offset = 0.0
        self._t_last = 0.0
        self.finished = False
        self.passes = 1  # passes of the trace begun (a loop starts a new one at each end)
        self._loop_logged_at = -float("inf")
        self._loop_logged_passes = 1
        self.status = SourceStatus("replay", True)

    def _next(self) -> tuple[float, object] | None:
        if self._pending is not None:
            r, self._pending = self._pending, None
            return r
        try:
            return next(self._it)
        except StopIteration:
            if not self.loop:
                return None
            self._offset += self._t_last - (self._t_first or 0.0) + 0.05
            self.header, self._it = read_trace(self.path, warn=False)  # a cut end was reported on the first pass
            self.passes += 1
            self._log_pass()
            return next(self._it, None)
        except TraceError as e:
            self.status = SourceStatus("replay", False, str(e))
            return None

    def _log_pass(self) -> None:
        """Say that the loop started again, at most once every LOOP_LOG_EVERY_S (with how many passes)."""
        wall = time.monotonic()
        if wall - self._loop_logged_at < LOOP_LOG_EVERY_S:
            return
        n = self.passes - self._loop_logged_passes
        log.info(
            "replay of %s: pass %d begins%s", self.path, self.passes, f" ({n} since the last line)" if n > 1 else ""
        )
        self._loop_logged_at, self._loop_logged_passes = wall, self.passes

    def poll(self, now: float | None = None) -> list[object]:
        """What is due by `now` (wall clock), at most MAX_RECORDS_PER_POLL, each at its time in this pass."""
        now = self.clock() if now is None else now
        if self._start_wall is None:
            self._start_wall = now
        due: list[object] = []
        while len(due) < MAX_RECORDS_PER_POLL:
            rec = self._next()
            if rec is None:
                self.finished = True
                break
            t, obj = rec
            if self._t_first is None:
                self._t_first = t
            t_play = t + self._offset
            if (t_play - self._t_first) / self.speed > now - self._start_wall:
                self._pending = rec
                break
            self._t_last = t
            due.append(_shifted(obj, self._offset) if self._offset else obj)
        return due

    @property
    def cards(self) -> tuple[GpuInfo, ...]:
        return self.gpus

    def close(self) -> None:
        """The `Source` protocol: close the trace (it is read line by line, so its file stays open until
        then); safe to call twice."""
        close = getattr(self._it, "close", None)
        if close is not None:
            close()

    def all(self) -> Iterator[object]:
        """Every record as fast as possible (for `oomwatch replay`)."""
        while True:
            rec = self._next()
            if rec is None:
                return
            yield rec[1]


def _shifted(obj: object, offset: float) -> object:
    """A record of a later pass of the loop, at its time in that pass: samples, host RSS readings and the
    allocator probes' readings alike (each analysis keeps its own clock; one left behind sees time run back)."""
    if isinstance(obj, Sample):
        return Sample(obj.t + offset, obj.gpus)
    if isinstance(obj, tuple):  # an `alloc` line: one reading per process
        return tuple(_shifted(x, offset) for x in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type) and hasattr(obj, "t"):
        return dataclasses.replace(obj, t=obj.t + offset)
    return obj  # ProcInfo: a process, not a reading


__all__ = ["ReplaySource", "Sample", "GpuSample", "ProcInfo", "TraceError"]
