"""Every PromQL query docs/metrics.md shows, run verbatim on a real Prometheus over a two-node fleet.

Two real `oomwatch run --replay` daemons (node-a, node-b) replay the same real recording: the same card index
and the same PID on both nodes, only the card's UUID differs, as on two real machines. Beside each, a small
HTTP server serves that node's dcgm-exporter exposition (dcgm-exporter's text format: `gpu`, `UUID`,
`device`, `modelName`, `Hostname`, `DCGM_FI_DRIVER_VERSION`), with a second card oomwatch does not watch.
The queries are read from the docs, so a query the docs change is the query tested; a query added there
without a check here fails `test_every_documented_query_has_a_check`.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
from urllib.parse import quote

import pytest

from conftest import ROOT, stop_process
from servers import Prometheus, StaticServer, start_oomwatch

DOC = os.path.join(ROOT, "docs", "metrics.md")
RULES = os.path.join(ROOT, "rules", "oomwatch.rules.yml")
TRACE = os.path.join(ROOT, "daemon", "examples", "staircase.jsonl")
CUT_S = 45.0  # the recording up to here: the leak is on, the process holds memory, an ETA is projected
SCAN_EVERY_S = 2.0  # the live process scan's period (DaemonConfig.process_interval)
PID = "669"  # the recording's GPU holder, the same PID on both nodes
NODES = {"node-a": "GPU-0a1b2c3d-0000-4000-8000-00000000000a", "node-b": "GPU-0a1b2c3d-0000-4000-8000-00000000000b"}
UNWATCHED = "GPU-ffffffff-0000-4000-8000-0000000000{}"  # each node's second card: dcgm sees it, oomwatch not
FB_USED_MIB = {"node-a": 101234, "node-b": 98765}
DCGM_METRICS = (
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
)


def doc_queries() -> list[tuple[str, str]]:
    """(comment, query) for every query in docs/metrics.md's ```promql blocks: each `# ...` line names the
    query that follows it (a comment may run over several lines)."""
    with open(DOC) as f:
        blocks = re.findall(r"```promql\n(.*?)```", f.read(), re.S)
    out: list[tuple[str, str]] = []
    for block in blocks:
        comment, lines = "", []
        for line in block.splitlines():
            if line.startswith("#"):
                if lines:
                    out.append((comment, "\n".join(lines)))
                    comment, lines = "", []
                comment = f"{comment} {line.lstrip('# ')}".strip()
            elif line.strip():
                lines.append(line)
        if lines:
            out.append((comment, "\n".join(lines)))
    return out


def doc_query(starts: str) -> str:
    (q,) = [q for c, q in doc_queries() if c.startswith(starts)]
    return q


def node_trace(path: str, uuid: str) -> None:
    """The real recording up to CUT_S with this node's card UUID, and the process scans a live recording has
    (`rss` lines: the holder's resident memory), so oomwatch_process_info is exposed."""
    with open(TRACE) as f:
        header, *rows = [json.loads(line) for line in f]
    header["gpus"][0]["uuid"] = uuid
    next_scan = 0.0
    with open(path, "w") as f:
        f.write(json.dumps(header) + "\n")
        for row in rows:
            if row["t"] > CUT_S:
                break
            f.write(json.dumps(row) + "\n")
            if "gpus" in row and row["t"] >= next_scan:  # every 2 s, as the live scan
                f.write(json.dumps({"t": row["t"], "rss": [[int(PID), 3 << 30]]}) + "\n")
                next_scan += SCAN_EVERY_S


def dcgm_exposition(node: str, k: int) -> bytes:
    """One node's dcgm-exporter /metrics: the watched card (gpu 0) and one oomwatch does not watch (gpu 1)."""
    cards = (("0", NODES[node], FB_USED_MIB[node]), ("1", UNWATCHED.format(k), 512))
    out = []
    for name, help_ in DCGM_METRICS:
        out += [f"# HELP {name} {help_}", f"# TYPE {name} gauge"]
        for gpu, uuid, used in cards:
            value = {"DCGM_FI_DEV_FB_USED": used, "DCGM_FI_DEV_FB_FREE": 137000 - used}.get(name, 87)
            out.append(
                f'{name}{{gpu="{gpu}",UUID="{uuid}",device="nvidia{gpu}",modelName="NVIDIA H200",'
                f'Hostname="{node}",DCGM_FI_DRIVER_VERSION="580.159.04"}} {value}'
            )
    return ("\n".join(out) + "\n").encode()


def run_query(prom: Prometheus, q: str) -> tuple[str, list | str]:
    """("success", rows) or ("error", Prometheus' message): a many-to-many join is an error, not rows."""
    try:
        with urllib.request.urlopen(f"{prom.url}/api/v1/query?query={quote(q)}", timeout=5) as r:
            body = json.loads(r.read())
    except urllib.error.HTTPError as e:
        body = json.loads(e.read())
        e.close()
    return body["status"], body["data"]["result"] if body["status"] == "success" else body["error"]


def rows(prom: Prometheus, q: str) -> list[dict]:
    status, result = run_query(prom, q)
    assert status == "success", result
    return sorted(result, key=lambda r: (r["metric"].get("node", ""), sorted(r["metric"].items())))


READY = {  # what Prometheus must hold before the joins are asked: both nodes, every side of every join
    'count(oomwatch_gpu_info{job="oomwatch"})': 2,
    "count(oomwatch_process_info)": 4,  # per node the holder and its parent (the server group's root)
    "count(oomwatch_gpu_oom_eta_seconds)": 2,
    "count(gpu:oomwatch_gpu_memory_used:ratio)": 2,
    "count(DCGM_FI_DEV_FB_USED)": 4,
}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fleet")
    daemons, dcgm, prom = [], [], None
    try:
        for k, (node, uuid) in enumerate(NODES.items()):
            trace = str(tmp / f"{node}.jsonl")
            node_trace(trace, uuid)
            env = {**os.environ, "NODE_NAME": node}
            daemons.append(start_oomwatch("--replay", trace, "--speed", "10", env=env))
            dcgm.append(StaticServer(dcgm_exposition(node, k)))
        prom = Prometheus(
            str(tmp),
            [addr for _, addr in daemons],
            [RULES],
            jobs={"dcgm-exporter": [s.base.removeprefix("http://") for s in dcgm]},
        )
        deadline = time.time() + 40
        while not all(_count(prom, q) == n for q, n in READY.items()):
            assert time.time() < deadline, {q: _count(prom, q) for q in READY}
            time.sleep(0.5)
        yield prom, {node: addr for node, (_, addr) in zip(NODES, daemons, strict=True)}
    finally:
        if prom:
            prom.stop()
        for p, _ in daemons:
            stop_process(p)
        for s in dcgm:
            s.close()


def _count(prom: Prometheus, q: str) -> int:
    status, result = run_query(prom, q)
    return int(float(result[0]["value"][1])) if status == "success" and result else 0


def check_process_pods(prom, daemons, q):
    got = rows(prom, q)
    assert [(r["metric"]["node"], r["metric"]["pid"], r["metric"]["gpu"]) for r in got] == [
        ("node-a", PID, "0"),
        ("node-b", PID, "0"),
    ]
    # the same join on the PID alone meets the other node's PID: the error the docs warn of
    status, err = run_query(prom, q.replace("on (node, pid)", "on (pid)"))
    assert status == "error" and "many-to-many" in err


def check_fleet_fullest_first(prom, daemons, q):
    got = run_query(prom, q)[1]
    values = [float(r["value"][1]) for r in got]
    assert sorted(r["metric"]["node"] for r in got) == ["node-a", "node-b"]
    assert values == sorted(values, reverse=True) and all(0 < v <= 1 for v in values)
    assert {r["metric"]["uuid"] for r in got} == set(NODES.values())


def check_own_memory(prom, daemons, q):
    got = rows(prom, q)
    assert sorted(r["metric"]["instance"] for r in got) == sorted(daemons.values())
    assert all(r["metric"]["version"] and float(r["value"][1]) > 1 << 20 for r in got)


def check_eta_with_dcgm_labels(prom, daemons, q):
    got = rows(prom, q)
    assert [(r["metric"]["node"], r["metric"]["uuid"], r["metric"]["dcgm_gpu"]) for r in got] == [
        ("node-a", NODES["node-a"], "0"),
        ("node-b", NODES["node-b"], "0"),
    ]
    assert all("GPU_I_ID" not in r["metric"] and float(r["value"][1]) > 0 for r in got)  # whole cards


def check_dcgm_on_uuid(prom, daemons, q):
    got = rows(prom, q)
    assert [(r["metric"]["Hostname"], r["metric"]["node"], r["metric"]["UUID"], r["metric"]["gpu"]) for r in got] == [
        ("node-a", "node-a", NODES["node-a"], "0"),
        ("node-b", "node-b", NODES["node-b"], "0"),
    ]
    assert [float(r["value"][1]) for r in got] == [FB_USED_MIB["node-a"], FB_USED_MIB["node-b"]]
    assert all(r["metric"]["job"] == "dcgm-exporter" for r in got)  # dcgm's series, the card unwatched dropped


def check_dcgm_on_hostname(prom, daemons, q):
    got = rows(prom, q)
    assert [(r["metric"]["node"], r["metric"]["uuid"], r["metric"]["UUID"], r["metric"]["gpu"]) for r in got] == [
        ("node-a", NODES["node-a"], NODES["node-a"], "0"),
        ("node-b", NODES["node-b"], NODES["node-b"], "0"),
    ]
    assert [float(r["value"][1]) for r in got] == [FB_USED_MIB["node-a"], FB_USED_MIB["node-b"]]


CHECKS = {  # a documented query's comment (its start) -> what it must return on the fleet
    "GPU memory per process with its pod's names": check_process_pods,
    "cards of one model across the fleet": check_fleet_fullest_first,
    "oomwatch's own memory and version per node": check_own_memory,
    "oomwatch's ETA with dcgm-exporter's labels": check_eta_with_dcgm_labels,
    "dcgm-exporter's framebuffer use of each whole card": check_dcgm_on_uuid,
    "the same for MIG instances too": check_dcgm_on_hostname,
}


def test_every_documented_query_has_a_check():
    comments = [c for c, _ in doc_queries()]
    assert len(comments) >= len(CHECKS)
    for c in comments:
        assert [k for k in CHECKS if c.startswith(k)], f"docs/metrics.md query without a test: {c!r}"


@pytest.mark.parametrize("starts", list(CHECKS))
def test_documented_query_on_a_real_prometheus(fleet, starts):
    prom, daemons = fleet
    CHECKS[starts](prom, daemons, doc_query(starts))
