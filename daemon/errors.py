"""The errors a user sees. Each one's message is a single line meant for the user; `oomwatch` prints it on
stderr and exits with status 2, never with a traceback.

    Exception
     └── OomwatchError                      base: bad input or an unusable environment, never a bug
          ├── UsageError                    a bad flag, OOMWATCH_* variable, argument or bundled-trace name
          ├── TraceError (ValueError)       a trace that cannot be read          (also oomwatch.trace)
          ├── EngineUrlError (ValueError)   a URL that cannot be an engine       (also oomwatch.sources.engines)
          └── NvmlUnavailable (RuntimeError) NVML cannot start, no --replay given (also oomwatch.sources.nvml)

The second bases keep older `except ValueError` / `except RuntimeError` callers working. Anything else that
escapes a command is a bug and keeps its traceback. A failing source at run time is not an error here: it is
a metric and an alert while the daemon keeps running.
"""

from __future__ import annotations


class OomwatchError(Exception):
    """Base of every error a user sees: one line, exit status 2."""

    exit_status = 2


class UsageError(OomwatchError):
    """A bad flag, environment variable, argument or bundled-trace name."""


class TraceError(OomwatchError, ValueError):
    """A trace that cannot be read; the message names the file (and the line where there is one)."""


class EngineUrlError(OomwatchError, ValueError):
    """A URL that cannot be an engine endpoint."""


class NvmlUnavailable(OomwatchError, RuntimeError):  # noqa: N818 - a name importers already use
    """NVML cannot be started (no driver, no library, no GPU)."""


def show(v: object, limit: int = 80) -> str:
    """A user's value in a message: quoted, escaped to one line, cut when long."""
    r = repr(v)
    return r if len(r) <= limit else r[: limit - 4] + "...'"


def one_line(msg: str) -> str:
    """Escape whatever would break a message onto several lines (argparse echoes raw arguments)."""
    return "".join(c if c.isprintable() or c == " " else c.encode("unicode_escape").decode("ascii") for c in msg)


__all__ = ["OomwatchError", "UsageError", "TraceError", "EngineUrlError", "NvmlUnavailable", "one_line", "show"]
