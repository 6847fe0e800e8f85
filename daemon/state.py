"""Keep each card's analysis history across daemon restarts (`--state-dir`).

A leak of 30 MB an hour needs hours of history to show; a daemon restarted for an upgrade or a node
drain would otherwise start blind. The daemon writes one file per card every minute and on SIGTERM, and
reads it back at start:

- keyed by GPU UUID (`<uuid>.json`): a card swapped for another (another UUID) starts empty;
- versioned (`"format": "oomwatch-state/1"`) and checked against the history levels it was written with;
- written atomically (a temporary file, then `os.replace`), so a crash mid-write leaves the old file;
- a corrupt or foreign file is moved aside (`<name>.bad`) with one log line, never fatal.

Only the multi-resolution history is kept (times are the analysis clock: monotonic seconds live, trace
seconds in replay). Lifecycle and alerts start fresh: a restarted daemon re-learns the phase within one
settle time, while the long windows it needs for slow leaks are back at once.
"""

from __future__ import annotations

import binascii
import json
import logging
import os
import time
from typing import Any

log = logging.getLogger("oomwatch.state")

FORMAT = "oomwatch-state/1"


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
        tmp = path + ".tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(doc, f, separators=(",", ":"))
            os.replace(tmp, path)
            n += 1
        except OSError as e:
            log.error("cannot write %s: %s", path, e)
    return n


def load(analyzer: Any, state_dir: str, clock_offset: float = 0.0) -> int:
    """Restore each card's history from its file, if any; returns the number of cards restored. Times are
    shifted from the saved clock to this one (wall time is the common ground)."""
    n = 0
    for st in analyzer.gpus.values():
        path = _path(state_dir, st.info.uuid)
        if not os.path.exists(path):
            continue
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
            if not isinstance(doc, dict) or doc.get("format") != FORMAT:
                raise ValueError(f"not {FORMAT}")
            if doc.get("uuid") != st.info.uuid:
                raise ValueError("written for another card")
            if [tuple(x) for x in doc.get("levels", [])] != [tuple(x) for x in analyzer.cfg.history_levels]:
                raise ValueError("history levels differ")
            shift = float(doc.get("clock_offset", 0.0)) - clock_offset
            st.history.load(doc["history"], shift)
            n += 1
        except (OSError, ValueError, KeyError, TypeError, binascii.Error) as e:
            from .analysis.history import History

            st.history = History(analyzer.cfg.history_levels)  # nothing half-loaded
            bad = path + ".bad"
            try:
                os.replace(path, bad)
            except OSError:
                bad = "(could not move it)"
            log.warning("%s set aside as %s: %s", path, bad, e)
    return n
