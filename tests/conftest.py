import os
import shutil
import socket
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "daemon", "examples")
SHARED = os.environ.get("OOMWATCH_SHARED") or os.path.join(os.path.dirname(ROOT), "shared")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def example(name: str) -> str:
    return os.path.join(EXAMPLES, name)


def shared(*parts: str) -> str:
    """A path under ../shared, or skip: a user's clone has no ../shared (CI has it)."""
    p = os.path.join(SHARED, *parts)
    if not os.path.exists(p):
        pytest.skip(f"needs {os.path.join('..', 'shared', *parts)} (present in CI, absent in a user's clone)")
    return p


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def need_binary(name: str) -> str:
    p = shutil.which(name)
    if p is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed; .ci/run installs it")
        pytest.skip(f"{name} not installed (apt-get install prometheus prometheus-alertmanager)")
    return p
