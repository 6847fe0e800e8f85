"""The `gpu-memory-trace/1` format: JSON Lines, a header, then samples and `proc` lines in time order.

Reading keeps only what the analysis may use: samples and `proc` descriptions. Every other line type and
the header's annotations (`scenario`, `expect`, `note`) are skipped on purpose, so a recording's labels can
never leak into its verdict. Writing is used by the recorder and the flight recorder.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from .model import GpuInfo, GpuSample, ProcInfo, Sample
from .redact import short_cmdline

FORMAT = "gpu-memory-trace/1"


class TraceError(ValueError):
    """A trace that cannot be read; the message is one line meant for the user."""


@dataclass(frozen=True)
class TraceHeader:
    gpus: tuple[GpuInfo, ...]
    sample_hz: float | None = None
    driver: str | None = None


def parse_header(line: str, where: str = "trace") -> TraceHeader:
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TraceError(f"{where}: line 1 is not JSON ({e.msg})") from None
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise TraceError(f"{where}: not a {FORMAT} file (line 1 has no \"format\": \"{FORMAT}\")")
    try:
        gpus = tuple(
            GpuInfo(int(g["index"]), str(g.get("name", "")), str(g.get("uuid", "")), int(g["total"]))
            for g in obj["gpus"]
        )
    except (KeyError, TypeError, ValueError):
        raise TraceError(f"{where}: header has no valid \"gpus\" list (index and total per card)") from None
    if not gpus:
        raise TraceError(f"{where}: header lists no GPU")
    hz = obj.get("sample_hz")
    return TraceHeader(gpus, float(hz) if isinstance(hz, (int, float)) else None, obj.get("driver"))


def _opt_int(v):
    return None if v is None else int(v)


def parse_line(obj: dict):
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
        )
    return None


def read_trace(path: str) -> tuple[TraceHeader, Iterator[tuple[float, object]]]:
    """Open a trace: its header now (errors raise `TraceError`), then (t, Sample|ProcInfo) lazily.

    A last line cut in half (a recorder killed mid-write) ends the trace quietly; a broken line in the
    middle is an error with its line number.
    """
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        raise TraceError(f"cannot read trace {path}: {e.strerror or e}") from None
    try:
        first = f.readline()
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

    def records():
        with f:
            lineno = 1
            pending_error = None
            try:
                for line in f:
                    lineno += 1
                    if pending_error:
                        raise TraceError(pending_error)
                    if not line.strip():
                        continue
                    try:
                        obj = json.loads(line)
                        rec = parse_line(obj) if isinstance(obj, dict) else None
                    except (json.JSONDecodeError, KeyError, TypeError, ValueError, IndexError):
                        # Tolerated only if it is the last line (cut mid-write).
                        pending_error = f"{path}:{lineno}: malformed line"
                        continue
                    if rec is not None:
                        yield (rec.t if isinstance(rec, Sample) else float(obj.get("t", 0.0))), rec
            except UnicodeDecodeError:
                raise TraceError(f"{path}:{lineno}: not UTF-8 text") from None

    return header, records()


def header_line(gpus, sample_hz: float | None = None, driver: str | None = None, **extra) -> str:
    obj = {"format": FORMAT}
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
        }
    )
