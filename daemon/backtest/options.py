"""What a backtest is asked to do, and the checks of its flags (`--since 30d`, `--start`, `--step 30s`).

The values are checked here once, for the CLI and for callers of `oomwatch.backtest.backtest`, so a bad value
is one line naming the flag, before any query is sent.
"""

from __future__ import annotations

import math
import os
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from ..errors import UsageError

DEFAULT_SINCE = "7d"
DEFAULT_STEP_S = 30.0  # a common scrape interval; finer steps only repeat the scraped values
#: Worker processes by default: one per usable CPU, as the analysis (not the HTTP reads) is the cost, up to
#: DEFAULT_WORKERS_MAX, so a default run from a large host does not put dozens of concurrent range queries on
#: a shared Prometheus.
DEFAULT_WORKERS_MAX = 8
DEFAULT_WORKERS = max(
    1,
    min(
        DEFAULT_WORKERS_MAX,
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1,
    ),
)
MIN_STEP_S = 0.001  # Prometheus' timestamp resolution
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")


@dataclass(frozen=True)
class Options:
    url: str
    start: float
    end: float
    step_s: float = DEFAULT_STEP_S
    selector: str = ""
    shard: tuple[int, int] | None = None
    workers: int = DEFAULT_WORKERS
    timeout_s: float = 30.0
    plot_dir: str | None = None  # a chart of each card that paged goes here (`--plot DIR`)


def parse_duration(text: str, flag: str) -> float:
    """`30d`, `1h30m`, `15s`, `250ms` or plain seconds -> seconds (> 0)."""
    s = text.strip()
    try:
        v = float(s)
    except ValueError:
        pos, v = 0, 0.0
        for m in _DURATION.finditer(s):
            if m.start() != pos:
                break
            v += float(m.group(1)) * _UNITS[m.group(2)]
            pos = m.end()
        if pos != len(s) or not s:
            raise UsageError(f"{flag}: not a duration (like 30s, 15m, 6h, 30d): {text!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise UsageError(f"{flag}: must be a duration greater than 0: {text!r}")
    return v


def parse_time(text: str, flag: str) -> float:
    """Unix seconds or RFC 3339 (`2026-11-01T00:00:00Z`; no zone means UTC) -> unix seconds."""
    s = text.strip()
    try:
        v = float(s)
    except ValueError:
        try:
            d = datetime.fromisoformat(s[:-1] + "+00:00" if s.endswith(("Z", "z")) else s)
        except ValueError:
            raise UsageError(f"{flag}: not a time (unix seconds or 2026-11-01T00:00:00Z): {text!r}") from None
        v = (d if d.tzinfo else d.replace(tzinfo=timezone.utc)).timestamp()
    if not math.isfinite(v) or v < 0:
        raise UsageError(f"{flag}: not a time: {text!r}")
    return v


def time_range(since: str | None, start: str | None, end: str | None, now: float | None = None) -> tuple[float, float]:
    """[start, end] in unix seconds from `--since` or `--start`/`--end` (`--end` defaults to now)."""
    now = time.time() if now is None else now
    if since is not None and start is not None:
        raise UsageError("give --since or --start, not both")
    t1 = parse_time(end, "--end") if end is not None else now
    t0 = parse_time(start, "--start") if start is not None else t1 - parse_duration(since or DEFAULT_SINCE, "--since")
    if t0 >= t1:
        raise UsageError("--start must be before --end")
    return t0, t1


def parse_step(text: str | None) -> float:
    if text is None:
        return DEFAULT_STEP_S
    v = parse_duration(text, "--step")
    if v < MIN_STEP_S:
        raise UsageError(f"--step: at least {MIN_STEP_S * 1000:g} ms: {text!r}")
    return v
