"""A budget of log lines: a burst of lines per window, then one line that says how many were held back.

Live, alert transitions and suspected OOMs are rare and every one is logged. A replay played at
`--speed 1e6 --loop` makes hundreds of them a second (the same trace over and over); without a budget the
log would take thousands of lines in seconds and bury anything else.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = ["LOG_BURST", "LOG_WINDOW_S", "LogBudget"]

LOG_BURST = 20  # lines a window may take in full
LOG_WINDOW_S = 10.0  # the window; what is held back is counted in one line when the next window opens


class LogBudget:
    """`log(logger, level, msg, *args)` logs while the window's budget lasts, then counts what it drops."""

    def __init__(
        self,
        what: str,
        burst: int = LOG_BURST,
        window_s: float = LOG_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what, self.burst, self.window_s, self.clock = what, burst, window_s, clock
        self._start = -float("inf")
        self._used = 0
        self.dropped = 0  # held back in the current window (told when the next one opens)

    def log(self, logger: logging.Logger, level: int, msg: str, *args: object) -> None:
        now = self.clock()
        if now - self._start >= self.window_s:
            if self.dropped:
                logger.warning("%d more %s not logged in the last %.0f s", self.dropped, self.what, self.window_s)
            self._start, self._used, self.dropped = now, 0, 0
        if self._used < self.burst:
            self._used += 1
            logger.log(level, msg, *args)
        else:
            self.dropped += 1
