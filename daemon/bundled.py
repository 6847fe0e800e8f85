"""The real traces shipped inside the package (`daemon/examples/*.jsonl`), reachable by name from any directory.

After `pip install` the files sit somewhere in site-packages, so a path in `--help` or the README would be
wrong for most users. `example:NAME` names one instead, wherever a TRACE is read (`run --replay`,
`replay`, `diagnose --replay`); `oomwatch examples` lists the names.
"""

from __future__ import annotations

import json
import os

from .errors import TraceError

#: Where the bundled traces live inside the installed package.
DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "examples")
#: A TRACE argument starting with this names a bundled trace: `example:staircase`.
PREFIX = "example:"


def names() -> list[str]:
    """The bundled traces' names, sorted (`staircase`, not the file name)."""
    try:
        files = os.listdir(DIR)
    except OSError:
        return []
    return sorted(f[: -len(".jsonl")] for f in files if f.endswith(".jsonl"))


def path(name: str) -> str:
    """The file of the bundled trace `name` (with or without `.jsonl`); `TraceError` if there is none."""
    base = name[: -len(".jsonl")] if name.endswith(".jsonl") else name
    if base in names():
        return os.path.join(DIR, base + ".jsonl")
    raise TraceError(f"no bundled trace {name!r}; bundled: {', '.join(names()) or 'none'} (see `oomwatch examples`)")


def resolve(trace: str) -> str:
    """A TRACE argument as a file path: `example:NAME` is a bundled trace, anything else a path as given."""
    if trace.startswith(PREFIX) and not os.path.exists(trace):
        return path(trace[len(PREFIX) :])
    return trace


def describe(name: str) -> str:
    """One line on what the bundled trace shows (its header's note: for people, never an analysis input)."""
    try:
        with open(path(name), encoding="utf-8") as f:
            head = json.loads(f.readline())
    except (OSError, ValueError):
        return ""
    note = head.get("note") if isinstance(head, dict) else None
    return note if isinstance(note, str) else ""


__all__ = ["DIR", "PREFIX", "describe", "names", "path", "resolve"]
