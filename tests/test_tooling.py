"""The code checks CI runs, as tests: ruff's lint and format, and mypy strict on the package (daemon/, exporters/).

Each runs over the whole repository with the settings in pyproject.toml and fails with the tool's own
output. A tool that is not installed skips (`pip install -e '.[test]'` brings both).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from conftest import ROOT


def _run(module: str, *args: str) -> tuple[int, str]:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} not installed (pip install -e '.[test]')")
    r = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    return r.returncode, r.stdout + r.stderr


def test_ruff_lint_is_clean():
    rc, out = _run("ruff", "check", "--output-format", "concise", "--no-cache", ".")
    assert rc == 0, "ruff check:\n" + out


def test_ruff_format_is_clean():
    rc, out = _run("ruff", "format", "--check", "--no-cache", ".")
    assert rc == 0, "ruff format --check (run `ruff format FILE`):\n" + out


def test_mypy_strict_is_clean(tmp_path):
    """mypy names modules by their folders, so it reads daemon/ and exporters/ through the same mapping onto
    `oomwatch` that setuptools installs (a tree of links, bench/srctree.py); strictness from [tool.mypy]."""
    sys.path.insert(0, ROOT)
    try:
        from bench.srctree import build
    finally:
        sys.path.remove(ROOT)
    tree = build(str(tmp_path))
    rc, out = _run("mypy", "--cache-dir", str(tmp_path / "cache"), os.path.join(tree, "oomwatch"))
    assert rc == 0, "mypy:\n" + out
