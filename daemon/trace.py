"""The `gpu-memory-trace/1` format: JSON Lines, a header, then samples and `proc` lines in time order.

Reading keeps only what the analysis may use: samples and `proc` descriptions. Every other line type and
the header's annotations (`scenario`, `expect`, `note`) are skipped on purpose, so a recording's labels can
never leak into its verdict. Writing is used by the recorder and the flight recorder.

Input is validated here, where it enters (#22): a header's card total must be a finite number of bytes of
at least 1 (every ratio divides by it); byte counts are clipped into [0, total] (no "-4.2% used", no
"202.4% used"); a line whose time or numbers are not finite (NaN, Infinity, 1e400), or whose time runs
backwards, is skipped and counted, with one warning line for the file; a line nested deeper than
`MAX_NESTING` or longer than `MAX_LINE_CHARS` is never handed to `json.loads` (no RecursionError).
"""

from __future__ import annotations

import json
import logging
import math
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from .errors import TraceError  # one line for the user; defined with the other user errors
from .model import AllocSample, GpuInfo, GpuSample, ProcInfo, RssSample, Sample
from .redact import short_cmdline

FORMAT = "gpu-memory-trace/1"
MAX_HEADER_CHARS = 1 << 20  # a header is a few hundred bytes; a first line longer than this is not one
MAX_LINE_CHARS = 4 << 20  # a sample line is a few hundred bytes per card; a longer one is not a line
#: JSON nests a trace line three deep (line, gpus, procs); deeper than this is hostile, never parsed: the
#: C parser recurses once per level and a line of 100,000 '[' would end in RecursionError.
MAX_NESTING = 32

log = logging.getLogger("oomwatch.trace")

#: What one line of a trace reads as: a card sample, a process description, a host-memory scan, or the
#: allocator probe's readings (one per process and card).
Record = Sample | ProcInfo | RssSample | tuple[AllocSample, ...]


@dataclass(frozen=True)
class TraceHeader:
    gpus: tuple[GpuInfo, ...]
    sample_hz: float | None = None
    driver: str | None = None


class BadLineError(ValueError):
    """A well-formed line whose values are impossible (not finite, time running backwards): skipped and
    counted by `read_trace`, never fed to the analysis."""


def too_deep(text: str, limit: int = MAX_NESTING) -> bool:
    """Whether a JSON text nests deeper than `limit`: checked before `json.loads`, which recurses once per
    level. Brackets inside strings are skipped; a cheap count answers for every ordinary line."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    in_str = esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def finite(v: Any, what: str) -> float:
    """A JSON number as a finite float (a bool is no number here); `BadLineError` otherwise."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise BadLineError(f"{what} is not a number")
    try:
        f = float(v)
    except OverflowError:  # an integer of 400 digits
        raise BadLineError(f"{what} is out of range") from None
    if not math.isfinite(f):
        raise BadLineError(f"{what} is not finite")
    return f


def parse_header(line: str, where: str = "trace") -> TraceHeader:
    """The header line; anything that is not a usable header is a `TraceError` with one clear line."""
    if too_deep(line):
        raise TraceError(f"{where}: line 1 nests deeper than {MAX_NESTING} levels: not a {FORMAT} header")
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        why = e.msg if isinstance(e, json.JSONDecodeError) else type(e).__name__
        raise TraceError(f"{where}: line 1 is not JSON ({why})") from None
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise TraceError(f'{where}: not a {FORMAT} file (line 1 has no "format": "{FORMAT}")')
    try:
        gpus = tuple(_header_gpu(g, where) for g in obj["gpus"])
    except (KeyError, TypeError, ValueError, OverflowError, AttributeError) as e:
        if isinstance(e, TraceError):
            raise
        raise TraceError(f'{where}: header has no valid "gpus" list (index and total per card)') from None
    if not gpus:
        raise TraceError(f"{where}: header lists no GPU")
    try:
        hz: float | None = finite(obj.get("sample_hz"), '"sample_hz"')
    except BadLineError:  # absent, or no finite number: unknown
        hz = None
    driver = obj.get("driver")
    return TraceHeader(gpus, hz if hz is not None and hz > 0 else None, driver if isinstance(driver, str) else None)


def _header_gpu(g: dict[str, Any], where: str) -> GpuInfo:
    """One card of the header. Its total must be a finite whole number of bytes above 0: every ratio shown
    (used %, headroom, ETA) divides by it, so 0, a negative, 1e400, Infinity or NaN is refused here."""
    total, index = g["total"], g["index"]
    ok_total = isinstance(total, (int, float)) and not isinstance(total, bool)
    if not (ok_total and math.isfinite(float(total)) and total >= 1):  # 0.5 bytes would be a card of 0
        raise TraceError(f"{where}: GPU {index!r} has total {total!r}: it must be a number of bytes above 0")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise TraceError(f"{where}: a GPU index must be a whole number from 0, got {index!r}")
    return GpuInfo(index, str(g.get("name", "")), str(g.get("uuid", "")), int(total))


def _opt_int(v: Any) -> int | None:
    if v is None:
        return None
    if isinstance(v, float) and not math.isfinite(v):
        raise BadLineError("a byte count is not finite")
    return int(v)


def _clip(v: int | None, total: int | None = None) -> int | None:
    """A byte count inside [0, total]: NVML's used + free is the total, so anything outside is a broken
    reading (and would show as "-4.2% used" or "202.4% used")."""
    if v is None:
        return None
    v = max(0, v)
    return v if total is None else min(v, total)


def _gpu_sample(g: dict[str, Any], totals: dict[int, int] | None) -> GpuSample:
    index = int(g["i"])
    total = None if totals is None else totals.get(index)
    procs = tuple((int(p[0]), _clip(_opt_int(p[1]), total)) for p in g.get("procs") or ())
    util = _opt_int(g.get("util"))
    return GpuSample(
        index,
        _clip(_opt_int(g.get("used")), total),
        _clip(_opt_int(g.get("free")), total),
        _clip(_opt_int(g.get("reserved")), total),
        None if util is None else min(max(util, 0), 100),
        procs,
    )


def parse_line(obj: dict[str, Any], totals: dict[int, int] | None = None) -> Record | None:
    """A `Sample`, a `ProcInfo`, ... or None for any line the analysis must not read.

    `totals` (card index -> total bytes, from the header) clips byte counts into [0, total]; without it only
    negatives are clipped. A time or byte count that is not finite raises `BadLineError`.
    """
    if "gpus" in obj and "t" in obj:
        gpus = [_gpu_sample(g, totals) for g in obj["gpus"]]
        return Sample(finite(obj["t"], '"t"'), tuple(gpus))
    if obj.get("event") == "proc" and "pid" in obj:
        cmd = obj.get("cmdline") or ()
        ct = obj.get("create_time")
        user = obj.get("username")
        return ProcInfo(
            pid=int(obj["pid"]),
            name=str(obj.get("name") or ""),
            cmdline=short_cmdline(cmd if isinstance(cmd, list) else str(cmd).split()),
            ppid=_opt_int(obj.get("ppid")),
            create_time=None if ct is None else finite(ct, '"create_time"'),
            username=user if isinstance(user, str) else None,
            libtorch_cuda=obj.get("libtorch_cuda"),
            libcudart=obj.get("libcudart"),
            pgid=_opt_int(obj.get("pgid")),
            rss_bytes=_clip(_opt_int(obj.get("rss"))),
        )
    if "alloc" in obj and "t" in obj and isinstance(obj["alloc"], list):
        # The allocator probe's readings: a tuple of AllocSample, one per (process, card).
        t = finite(obj["t"], '"t"')
        return tuple(
            AllocSample(
                t,
                int(a["pid"]),
                str(a["uuid"]),
                max(0, int(a["allocated"])),
                max(0, int(a["reserved"])),
                _clip(_opt_int(a.get("inactive_split"))),
                _clip(_opt_int(a.get("retries"))),
                _clip(_opt_int(a.get("ooms"))),
            )
            for a in obj["alloc"]
        )
    if "rss" in obj and "t" in obj and isinstance(obj["rss"], list):
        lim: dict[str, Any] = obj["limit"] if isinstance(obj.get("limit"), dict) else {}
        source = lim.get("source")
        return RssSample(
            finite(obj["t"], '"t"'),
            tuple((int(p[0]), max(0, int(p[1]))) for p in obj["rss"]),
            _clip(_opt_int(lim.get("bytes"))),
            _clip(_opt_int(lim.get("used"))),
            source if isinstance(source, str) else None,
        )
    return None


#: What a line that is not JSON of the expected shape raises while read (a cut last line, or an error).
MALFORMED = (json.JSONDecodeError, KeyError, TypeError, ValueError, IndexError, OverflowError, AttributeError)


class _Skips:
    """The lines skipped for impossible values: how many, and the first one (for the one warning line)."""

    def __init__(self) -> None:
        self.count, self.first_line, self.first_why = 0, 0, ""
        self.last_sample_t = -math.inf

    def add(self, lineno: int, why: str) -> None:
        self.count += 1
        if self.count == 1:
            self.first_line, self.first_why = lineno, why


def _read_line(line: str, totals: dict[int, int], skips: _Skips) -> tuple[float, Record] | None:
    """One line as (t, record), None for a line to ignore; `BadLineError` for impossible values (a sample whose
    time runs backwards among them); one of `MALFORMED` for a line that is not a trace line at all."""
    if len(line) > MAX_LINE_CHARS or too_deep(line):
        raise ValueError("line too long or nested too deep")
    obj = json.loads(line)
    rec = parse_line(obj, totals) if isinstance(obj, dict) else None
    if rec is None:
        return None
    if isinstance(rec, Sample):
        if rec.t < skips.last_sample_t:
            raise BadLineError(f"time runs backwards ({rec.t:g} s after {skips.last_sample_t:g} s)")
        skips.last_sample_t = rec.t
    t = rec.t if isinstance(rec, (Sample, RssSample)) else finite(obj.get("t", 0.0), '"t"')
    return t, rec


def read_trace(path: str, warn: bool = True) -> tuple[TraceHeader, Iterator[tuple[float, object]]]:
    """Open a trace: its header now (errors raise `TraceError`), then (t, Sample|ProcInfo) lazily.

    `path` may name a bundled trace (`example:staircase`). A last line cut in half (a recorder killed
    mid-write) ends the trace with one warning (unless `warn` is false), so a cut trace is never reported
    as silently complete; a broken line in the middle is an error with its line number. Lines with
    impossible values are skipped and counted (one warning at the end, unless `warn` is false).
    """
    from . import bundled

    path = bundled.resolve(path)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a folder, a device, a pipe: would block or never end
            raise TraceError(f"cannot read trace {path}: not a regular file")
        f = open(path, encoding="utf-8")  # noqa: SIM115  # records() below owns the file and closes it
    except TraceError:
        raise  # a ValueError too: not to be wrapped a second time below
    except OSError as e:
        raise TraceError(f"cannot read trace {path}: {e.strerror or e}") from None
    except ValueError as e:  # an embedded NUL in the path
        raise TraceError(f"cannot read trace {path!r}: {e}") from None
    try:
        first = f.readline(MAX_HEADER_CHARS)
    except (OSError, UnicodeDecodeError) as e:
        f.close()
        raise TraceError(f"cannot read trace {path}: {e}") from None
    if not first.strip():
        f.close()
        raise TraceError(f"{path}: empty file, not a {FORMAT} trace")
    try:
        header = parse_header(first, path)
    except TraceError:
        f.close()
        raise

    totals = {g.index: g.total_bytes for g in header.gpus}

    def records() -> Iterator[tuple[float, Record]]:
        with f:
            lineno = 1
            bad_line = 0  # a malformed line: an error unless it turns out to be the last one
            last_t = None
            skips = _Skips()
            try:
                while line := f.readline(MAX_LINE_CHARS + 1):
                    lineno += 1
                    if not line.strip():
                        continue
                    if bad_line:
                        raise TraceError(f"{path}:{bad_line}: malformed line")
                    try:
                        got = _read_line(line, totals, skips)
                    except BadLineError as e:
                        skips.add(lineno, str(e))
                        continue
                    except MALFORMED:
                        bad_line = lineno
                        continue
                    if got is not None:
                        last_t = got[0]
                        yield got
            except UnicodeDecodeError:
                raise TraceError(f"{path}:{lineno}: not UTF-8 text") from None
            if skips.count and warn:
                log.warning(
                    "%s: skipped %d line(s) with impossible values (first: line %d, %s)",
                    path,
                    skips.count,
                    skips.first_line,
                    skips.first_why,
                )
            if bad_line and warn:
                upto = "nothing" if last_t is None else f"t={last_t:.2f} s"
                log.warning("%s ends with a truncated line at %d; analysed up to %s", path, bad_line, upto)

    return header, _Records(records(), f)


class _Records(Iterator[tuple[float, Record]]):
    """A trace's records, with `close()` closing its file even before the first record was read (closing
    a generator that never started does not run its `with`)."""

    def __init__(self, gen: Iterator[tuple[float, Record]], f: IO[str]) -> None:
        self._gen, self._f = gen, f

    def __next__(self) -> tuple[float, Record]:
        return next(self._gen)

    def close(self) -> None:
        close = getattr(self._gen, "close", None)
        if close is not None:
            close()
        self._f.close()


def header_line(
    gpus: Iterable[GpuInfo], sample_hz: float | None = None, driver: str | None = None, **extra: Any
) -> str:
    obj: dict[str, Any] = {"format": FORMAT}
    if sample_hz:
        obj["sample_hz"] = sample_hz
    if driver:
        obj["driver"] = driver
    obj["gpus"] = [{"index": g.index, "name": g.name, "uuid": g.uuid, "total": g.total_bytes} for g in gpus]
    obj.update(extra)
    return json.dumps(obj)


def sample_line(s: Sample) -> str:
    return json.dumps(
        {
            "t": round(s.t, 4),
            "gpus": [
                {
                    "i": g.index,
                    "used": g.used_bytes,
                    "free": g.free_bytes,
                    "reserved": g.reserved_bytes,
                    "util": g.util_percent,
                    "procs": [[p, b] for p, b in g.procs],
                }
                for g in s.gpus
            ],
        }
    )


def proc_line(t: float, p: ProcInfo) -> str:
    return json.dumps(
        {
            "t": round(t, 4),
            "event": "proc",
            "pid": p.pid,
            "name": p.name,
            "cmdline": list(short_cmdline(p.cmdline)),
            "ppid": p.ppid,
            "create_time": p.create_time,
            "username": p.username,
            "libtorch_cuda": p.libtorch_cuda,
            "libcudart": p.libcudart,
            **({"pgid": p.pgid} if p.pgid is not None else {}),
            **({"rss": p.rss_bytes} if p.rss_bytes is not None else {}),
        }
    )


def rss_line(r: RssSample) -> str:
    """One process scan's resident host memory: `{"t", "rss": [[pid, bytes], ...]}`, and the memory limit
    the servers live under when known (`"limit": {"bytes", "used", "source": "cgroup"|"host"}`)."""
    obj: dict[str, Any] = {"t": round(r.t, 4), "rss": [[int(p), int(b)] for p, b in r.rss]}
    if r.limit_bytes is not None:
        obj["limit"] = {"bytes": r.limit_bytes, "used": r.limit_used_bytes, "source": r.limit_source}
    return json.dumps(obj)


def alloc_line(t: float, samples: Iterable[AllocSample]) -> str:
    """One `alloc` line: the allocator probe's readings (AllocSample) at trace time `t`."""
    return json.dumps(
        {
            "t": round(t, 4),
            "alloc": [
                {
                    "pid": a.pid,
                    "uuid": a.uuid,
                    "allocated": a.allocated_bytes,
                    "reserved": a.reserved_bytes,
                    "inactive_split": a.inactive_split_bytes,
                    "retries": a.alloc_retries,
                    "ooms": a.ooms,
                }
                for a in samples
            ],
        }
    )
