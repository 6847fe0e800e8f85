import logging
import os
import shutil
import socket
import subprocess
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


def stop_process(p: subprocess.Popen, timeout: float = 10.0, kill: bool = False) -> int:
    """End a child a test started (SIGTERM, or SIGKILL with `kill`), reap it and close its pipes, so no
    process or open file outlives the test. A child that outlives `timeout` is killed and the test fails."""
    try:
        if p.poll() is None:
            p.kill() if kill else p.terminate()
        try:
            return p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            raise
    finally:
        for f in (p.stdin, p.stdout, p.stderr):
            if f is not None:
                f.close()


def daemon_run_argv(port: int, *args: str) -> list[str]:
    """The command line of `oomwatch run` serving on 127.0.0.1:`port`, from this checkout."""
    return [sys.executable, "-m", "oomwatch", "run", "--listen", f"127.0.0.1:{port}", *args]


def sample_until_engine_found(sampler, clock: list[float], steps: int = 100) -> None:
    """Drive a sampler on a fake clock (10 samples a second, a process scan every second) until engine
    discovery has found an engine or `steps` samples passed, then scrape the engines once."""
    for k in range(steps):
        sampler.sample_job()
        clock[0] += 0.1
        if k % 10 == 9:
            sampler.process_job()
        if sampler.engines:
            break
    sampler.engine_job()


#: The Debian packages that bring each system tool the integration tests run (.ci/run installs them).
APT_PACKAGES = {
    "prometheus": "prometheus",
    "promtool": "prometheus",
    "prometheus-alertmanager": "prometheus-alertmanager",
    "podman": "podman mmdebstrap runc uidmap",
    "mmdebstrap": "podman mmdebstrap runc uidmap",
    "runc": "podman mmdebstrap runc uidmap",
    "chromium": "chromium",
}


def need_binary(name: str) -> str:
    p = shutil.which(name)
    if p is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is not installed; .ci/run installs it")
        pytest.skip(f"{name} not installed (apt-get install {APT_PACKAGES.get(name, name)})")
    return p


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(autouse=True)
def _no_detector_raises(request):
    """The analysis isolates its detectors: one that raises is counted, logged and alerted on, and the others
    go on (daemon/analysis/detectors.py). In tests a raise is a bug, so it fails the test that caused it
    (in this process) unless the test is marked `analysis_errors`."""
    h = _Records()
    logger = logging.getLogger("oomwatch.analysis")
    logger.addHandler(h)
    try:
        yield
    finally:
        logger.removeHandler(h)
    if h.records and request.node.get_closest_marker("analysis_errors") is None:
        pytest.fail("a detector raised: " + "; ".join(r.getMessage() for r in h.records[:3]), pytrace=False)
