"""The checkout as the import package `oomwatch`, for a machine where it is not installed.

The folders are the design's layout (daemon/, exporters/); setuptools maps them onto `oomwatch` and
`oomwatch.exporters` at install time. The device machine runs the benchmarks from a bare copy of the tree,
with no install, so this lays the same mapping out as a tree of symbolic links under build/srctree/ and
puts it first on sys.path (and on the PYTHONPATH the scripts hand their subprocesses). The type check
(tests/test_tooling.py) reads the package through the same tree.
"""

from __future__ import annotations

import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAPPING = {"oomwatch": "daemon", "oomwatch/exporters": "exporters"}  # pyproject's package-dir, as paths


def build(dest: str) -> str:
    """Lay out `dest/oomwatch` as links into the checkout; returns `dest` (the folder to put on sys.path)."""
    pkg = os.path.join(dest, "oomwatch")
    os.makedirs(pkg, exist_ok=True)
    for entry in sorted(e for e in os.listdir(os.path.join(ROOT, MAPPING["oomwatch"])) if e != "__pycache__"):
        _link(os.path.join(ROOT, MAPPING["oomwatch"], entry), os.path.join(pkg, entry))
    _link(os.path.join(ROOT, MAPPING["oomwatch/exporters"]), os.path.join(dest, "oomwatch/exporters"))
    return dest


def _link(target: str, link: str) -> None:
    if os.path.islink(link) and os.readlink(link) == target:
        return
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(target, link)


_made: list[str] = []  # what the first call decided: the tree's folder, or "" where oomwatch is installed


def importable() -> str:
    """Make `import oomwatch` work in this process; returns the folder to add to subprocesses' PYTHONPATH
    ("" where the package is installed). Every call returns what the first decided: once the tree is on
    sys.path, `oomwatch` is found, but a subprocess still needs the folder."""
    if not _made:
        if importlib.util.find_spec("oomwatch") is not None:
            _made.append("")
        else:
            path = build(os.path.join(ROOT, "build", "srctree"))
            sys.path.insert(0, path)
            _made.append(path)
    return _made[0]


def pythonpath(*extra: str) -> str:
    """A PYTHONPATH under which subprocesses import this checkout as `oomwatch`."""
    return os.pathsep.join(p for p in (importable(), *extra, os.environ.get("PYTHONPATH", "")) if p)


if __name__ == "__main__":
    print(build(os.path.join(ROOT, "build", "srctree")))
