"""Keep secrets out of everything oomwatch shows: metrics, JSON, logs and recorded traces.

vLLM takes `--api-key` on its command line, Hugging Face tokens travel as `hf_...`, OpenAI-style keys as
`sk-...`, and environment-style `FOO_KEY=value` pairs end up in wrapper scripts' argv. A full command line is
never exported; what is shown is the program and a few arguments, each passed through `redact_args`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

REDACTED = "<redacted>"
_SECRET_FLAG = re.compile(
    r"^--?[\w.-]*(api[-_]?key|token|secret|password|passwd|auth|credential|private[-_]?key)[\w.-]*$",
    re.IGNORECASE,
)
_SECRET_ASSIGN = re.compile(
    r"^(--?)?([\w.-]*(key|token|secret|password|passwd|auth|credential)[\w.-]*)=(.+)$", re.IGNORECASE
)
_SECRET_VALUE = re.compile(
    r"(hf_[A-Za-z0-9]{8,}|sk-[A-Za-z0-9_-]{8,}|ghp_[A-Za-z0-9]{8,}|xox[abpr]-[A-Za-z0-9-]{8,}"
    r"|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]+|AKIA[0-9A-Z]{12,})"
)


def redact_args(args: Iterable[object]) -> list[str]:
    """Each argument with secret values replaced; `--api-key X` and `--api-key=X` both lose X."""
    out: list[str] = []
    hide_next = False
    for arg in args:
        arg = str(arg)
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        m = _SECRET_ASSIGN.match(arg)
        if m:
            out.append(f"{m.group(1) or ''}{m.group(2)}={REDACTED}")
            continue
        if _SECRET_FLAG.match(arg):
            out.append(arg)
            hide_next = True
            continue
        out.append(_SECRET_VALUE.sub(REDACTED, arg))
    return out


def short_cmdline(args: Iterable[object], max_args: int = 4, max_len: int = 120) -> tuple[str, ...]:
    """The program's base name and its first few arguments, redacted; never the full command line."""
    args = [str(a) for a in args if a is not None]
    if not args:
        return ()
    red = redact_args(args)
    head = [os.path.basename(red[0])] + red[1 : 1 + max_args]
    if len(red) > 1 + max_args:
        head.append("...")
    total = 0
    kept: list[str] = []
    for a in head:
        a = a if len(a) <= 48 else a[:45] + "..."
        total += len(a) + 1
        if total > max_len:
            kept.append("...")
            break
        kept.append(a)
    return tuple(kept)
