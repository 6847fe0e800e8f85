"""Keep each card's analysis history across daemon restarts (`--state-dir`).

A leak of 30 MB an hour needs hours of history to show; a daemon restarted for an upgrade or a node
drain would otherwise start blind. The daemon writes one file per card every minute and on SIGTERM, and
reads it back at start:

- keyed by GPU UUID (`<uuid>.json`): a card swapped for another (another UUID) starts empty;
- versioned (`"format": "oomwatch-state/1"`) and checked against the history levels it was written with;
- written atomically (a temporary file of a unique name, then `os.replace`), so a crash mid-write leaves
  the old file and two writers never share a temporary file;
- owned by one daemon at a time (`fcntl.flock` on `.lock` in the folder): a second daemon on the same
  folder would overwrite the first one's history every minute, so it is refused at start;
- a corrupt or foreign file (not JSON, nested deeper than any state file, too large, numbers that are not
  finite) is moved aside (`<name>.bad`) with one log line, never fatal.

Only the multi-resolution history is kept (times are the analysis clock: monotonic seconds live, trace
seconds in replay). Lifecycle and alerts start fresh: a restarted daemon re-learns the phase within one
settle time, while the long windows it needs for slow leaks are back at once.
"""

from __future__ import annotations

import binascii
import contextlib
import errno
import json
import logging
import math
import os
import tempfile
import time
from typing import IO, Any

from .errors import UsageError

log = logging.getLogger("oomwatch.state")

FORMAT = "oomwatch-state/1"
LOCK_NAME = ".lock"
#: A card's file holds 5 levels of float64 buckets: a few MB. A larger one is not ours and is not read.
MAX_STATE_BYTES = 64 << 20
#: A state file nests four deep (document, history, level, column); deeper is foreign, never parsed.
MAX_NESTING = 16
#: What reading a broken or foreign file can raise; each sets it aside.
_BAD_FILE = (
    OSError,
    ValueError,
    KeyError,
    TypeError,
    AttributeError,
    IndexError,
    OverflowError,
    RecursionError,
    binascii.Error,
)


def lock(state_dir: str) -> IO[str]:
    """Take the folder for this daemon (an exclusive `flock`, released when the process ends) and return
    the open lock file (keep it open). Another daemon holding it, or a folder that cannot be written, is a
    `UsageError`: one line at start rather than two daemons overwriting each other's history."""
    import fcntl

    path = os.path.join(state_dir, LOCK_NAME)
    try:
        os.makedirs(state_dir, exist_ok=True)
        f = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held open for the daemon's life
    except OSError as e:
        raise UsageError(f"--state-dir {state_dir}: cannot write there: {e.strerror or e}") from None
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        f.close()
        if e.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
            raise UsageError(f"--state-dir {state_dir} is in use by another oomwatch (give each its own)") from None
        raise UsageError(f"--state-dir {state_dir}: cannot lock {path}: {e.strerror or e}") from None
    with contextlib.suppress(OSError):
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
    return f


def _path(state_dir: str, uuid: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in uuid) or "unknown"
    return os.path.join(state_dir, f"{safe}.json")


def save(analyzer: Any, state_dir: str, clock_offset: float = 0.0) -> int:
    """Write every card's history; returns the number of files written. `clock_offset` converts the
    analysis clock to wall time (stored, so a restart on another monotonic clock can shift it back)."""
    os.makedirs(state_dir, exist_ok=True)
    n = 0
    for st in analyzer.gpus.values():
        uuid = st.info.uuid
        doc = {
            "format": FORMAT,
            "uuid": uuid,
            "name": st.info.name,
            "saved_at": time.time(),
            "clock_offset": clock_offset,
            "levels": [list(lv) for lv in analyzer.cfg.history_levels],
            "history": st.history.dump(),
        }
        path = _path(state_dir, uuid)
        try:
            _write_atomic(path, doc)
            n += 1
        except OSError as e:
            log.error("cannot write %s: %s", path, e)
    return n


def _write_atomic(path: str, doc: dict[str, Any]) -> None:
    """Write `doc` to a temporary file of a unique name beside `path`, then move it over `path`."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, separators=(",", ":"))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _read_doc(path: str) -> dict[str, Any]:
    """The file's JSON document, checked for size and nesting before it is parsed (ValueError otherwise)."""
    from .trace import too_deep

    if os.path.getsize(path) > MAX_STATE_BYTES:
        raise ValueError(f"larger than {MAX_STATE_BYTES >> 20} MiB")
    with open(path, encoding="utf-8") as f:
        text = f.read(MAX_STATE_BYTES + 1)
    if too_deep(text, MAX_NESTING):
        raise ValueError(f"nested deeper than {MAX_NESTING} levels")
    doc = json.loads(text)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"not {FORMAT}")
    return doc


def _check_finite(history: Any) -> None:
    """Every restored time and level a finite number (a NaN would poison every fit it enters)."""
    import numpy as np

    for ring in history.levels:
        for col in ring.arrays():
            if len(col) and not np.all(np.isfinite(col)):
                raise ValueError("holds numbers that are not finite")


def load(analyzer: Any, state_dir: str, clock_offset: float = 0.0) -> int:
    """Restore each card's history from its file, if any; returns the number of cards restored. Times are
    shifted from the saved clock to this one (wall time is the common ground)."""
    n = 0
    for st in analyzer.gpus.values():
        path = _path(state_dir, st.info.uuid)
        if not os.path.exists(path):
            continue
        try:
            doc = _read_doc(path)
            if doc.get("uuid") != st.info.uuid:
                raise ValueError("written for another card")
            if [tuple(x) for x in doc.get("levels", [])] != [tuple(x) for x in analyzer.cfg.history_levels]:
                raise ValueError("history levels differ")
            offset = float(doc.get("clock_offset", 0.0))
            if not math.isfinite(offset):
                raise ValueError("clock_offset is not finite")
            st.history.load(doc["history"], offset - clock_offset)
            _check_finite(st.history)
            n += 1
        except _BAD_FILE as e:
            from .analysis.history import History

            st.history = History(analyzer.cfg.history_levels)  # nothing half-loaded
            bad = path + ".bad"
            try:
                os.replace(path, bad)
            except OSError:
                bad = "(could not move it)"
            log.warning("%s set aside as %s: %s", path, bad, _why(e))
    return n


def _why(e: BaseException) -> str:
    """The reason a file was set aside, in one short line."""
    if isinstance(e, RecursionError):
        return "nested too deep"
    return (str(e) or type(e).__name__).splitlines()[0][:200]
