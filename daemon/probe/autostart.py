"""The generic start hook: `oomwatch-probe.pth` in site-packages imports this when `OOMWATCH_PROBE=1`.

A `.pth` line runs at every interpreter start (the way coverage.py measures subprocesses), so it must cost
nothing when the variable is unset: the line itself only compares an environment variable (`os` is already
loaded by `site`), and this module is imported only when it is set.

Once imported, it must start the probe only in a process that uses torch, and only once torch is there.
The choice: a meta-path finder that watches for `import torch` rather than a thread that polls
`sys.modules`. The finder costs one string comparison per top-level import and nothing else: a process
that never imports torch (pip, a shell helper, the daemon itself) gets no thread and writes no file. When
the import of torch begins, it starts the probe and removes itself; it never loads anything, so the import
system proceeds exactly as without it. The probe's first tick comes one interval later and skips while
torch is still half-imported, so no read races the import. A polling thread would instead run in every
Python process of the environment, forever, for nothing.
"""

from __future__ import annotations

import sys

from . import enabled, start


class TorchWatch:
    """A meta-path finder that finds nothing: it notices `import torch`, starts the probe, steps aside."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "torch":
            remove()
            start()
        return None


_watch = TorchWatch()


def install() -> None:
    """Start now if torch is already imported, else wait for it (idempotent)."""
    if "torch" in sys.modules:
        start()
    elif not any(isinstance(f, TorchWatch) for f in sys.meta_path):
        sys.meta_path.insert(0, _watch)


def remove() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, TorchWatch)]


if enabled():
    install()
