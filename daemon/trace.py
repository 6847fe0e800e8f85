"""The `gpu-memory-trace/1` format: JSON Lines, a header, then samples and `proc` lines in time order.

Reading keeps only what the analysis may use: samples and `proc` descriptions. Every other line type and
the header's annotations (`scenario`, `expect`, `note`) are skipped on purpose, so a recording's labels can
never leak into its verdict. Writing is used by the recorder and the flight recorder.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from .errors import TraceError  # one line for the user; defined with the other user errors
from .model import AllocSample, GpuInfo, GpuSample, ProcInfo, RssSample, Sample
from .redact import short_cmdline

FORMAT = "gpu-memory-trace/1"
MAX_HEADER_CHARS = 1 << 20  # a header is a few hundred bytes; a first line longer than this is not one

log = logging.getLogger("oomwatch.trace")

#: What one line of a trace reads as: a card sample, a process description, a host-memory scan, or the
#: allocator probe's readings (one per process and card).
Record = Sample | ProcInfo | RssSample | tuple[AllocSample, ...]


@dataclass(frozen=True)
class TraceHeader:
    gpus: tuple[GpuInfo, ...]
    sample_hz: float | None = None
    driver: str | None = None


def parse_header(line: str, where: str = "trace") -> TraceHeader:
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TraceError(
            f"{where}: line 1 is not JSON ({e.msg if isinstance(e, json.JSONDecodeError) else e})"
        ) from None
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise TraceError(f'{where}: not a {FORMAT} file (line 1 has no "format": "{FORMAT}")')
    try:
        gpus = tuple(
            GpuInfo(int(g["index"]), str(g.get("name", "")), str(g.get("uuid", "")), int(g["total"]))
            for g in obj["gpus"]
        )
    except (KeyError, TypeError, ValueError):
        raise TraceError(f'{where}: header has no valid "gpus" list (index and total per card)') from None
    if not gpus:
        raise TraceError(f"{where}: header lists no GPU")
    hz = obj.get("sample_hz")
    return TraceHeader(gpus, float(hz) if isinstance(hz, (int, float)) else None, obj.get("driver"))


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)


def parse_line(obj: dict[str, Any]) -> Record | None:
    """A `Sample`, a `ProcInfo`, or None for any line the analysis must not read."""
    if "gpus" in obj and "t" in obj:
        gpus = []
        for g in obj["gpus"]:
            procs = tuple((int(p[0]), _opt_int(p[1])) for p in g.get("procs") or ())
            gpus.append(
                GpuSample(
                    int(g["i"]),
                    _opt_int(g.get("used")),
                    _opt_int(g.get("free")),
                    _opt_int(g.get("reserved")),
                    _opt_int(g.get("util")),
                    procs,
                )
            )
        return Sample(float(obj["t"]), tuple(gpus))
    if obj.get("event") == "proc" and "pid" in obj:
        cmd = obj.get("cmdline") or ()
        return ProcInfo(
            pid=int(obj["pid"]),
            name=str(obj.get("name") or ""),
            cmdline=short_cmdline(cmd if isinstance(cmd, list) else str(cmd).split()),
            ppid=_opt_int(obj.get("ppid")),
            create_time=obj.get("create_time"),
            username=obj.get("username"),
            libtorch_cuda=obj.get("libtorch_cuda"),
            libcudart=obj.get("libcudart"),
            pgid=_opt_int(obj.get("pgid")),
            rss_bytes=_opt_int(obj.get("rss")),
        )
    if "alloc" in obj and "t" in obj and isinstance(obj["alloc"], list):
        # The allocator probe's readings: a tuple of AllocSample, one per (process, card).
        t = float(obj["t"])
        return tuple(
            AllocSample(
                t,
                int(a["pid"]),
                str(a["uuid"]),
                int(a["allocated"]),
                int(a["reserved"]),
                _opt_int(a.get("inactive_split")),
                _opt_int(a.get("retries")),
                _opt_int(a.get("ooms")),
            )
            for a in obj["alloc"]
        )
    if "rss" in obj and "t" in obj and isinstance(obj["rss"], list):
        lim: dict[str, Any] = obj["limit"] if isinstance(obj.get("limit"), dict) else {}
        return RssSample(
            float(obj["t"]),
            tuple((int(p[0]), int(p[1])) for p in obj["rss"]),
            _opt_int(lim.get("bytes")),
            _opt_int(lim.get("used")),
            lim.get("source"),
        )
    return None


def read_trace(path: str, warn: bool = True) -> tuple[TraceHeader, Iterator[tuple[float, object]]]:
    """Open a trace: its header now (errors raise `TraceError`), then (t, Sample|ProcInfo) lazily.

    `path` may name a bundled trace (`example:staircase`). A last line cut in half (a recorder killed
    mid-write) ends the trace with one warning (unless `warn` is false), so a cut trace is never reported
    as silently complete; a broken line in the middle is an error with its line number.
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

    def records() -> Iterator[tuple[float, Record]]:
        with f:
            lineno = 1
            bad_line = 0  # a malformed line: an error unless it turns out to be the last one
            last_t = None
            try:
                for line in f:
                    lineno += 1
                    if not line.strip():
                        continue
                    if bad_line:
                        raise TraceError(f"{path}:{bad_line}: malformed line")
                    try:
                        obj = json.loads(line)
                        rec = parse_line(obj) if isinstance(obj, dict) else None
                        if rec is not None:
                            t = rec.t if isinstance(rec, (Sample, RssSample)) else float(obj.get("t", 0.0))
                    except (json.JSONDecodeError, KeyError, TypeError, ValueError, IndexError, OverflowError):
                        bad_line = lineno
                        continue
                    if rec is not None:
                        last_t = t
                        yield t, rec
            except UnicodeDecodeError:
                raise TraceError(f"{path}:{lineno}: not UTF-8 text") from None
            if bad_line and warn:
                upto = "nothing" if last_t is None else f"t={last_t:.2f} s"
                log.warning("%s ends with a truncated line at %d; analysed up to %s", path, bad_line, upto)

    return header, records()


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
