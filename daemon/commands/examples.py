"""`oomwatch examples`: the real traces shipped with oomwatch (`example:NAME` wherever a TRACE is read)."""

from __future__ import annotations

import argparse

from .. import bundled

__all__ = ["main"]


def main(args: argparse.Namespace) -> int:
    names = bundled.names()
    width = max((len(n) for n in names), default=0) + len(bundled.PREFIX)
    print("Real traces recorded on an NVIDIA H200, shipped with oomwatch. Name one as example:NAME wherever a TRACE")
    print("is read, from any directory (e.g. `oomwatch replay example:staircase`):\n")
    for n in names:
        print(f"  {bundled.PREFIX + n:<{width}}  {bundled.describe(n)}")
    return 0
