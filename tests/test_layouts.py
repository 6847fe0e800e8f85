"""Server trees as the engines really lay them out, as real processes on this machine.

Each test starts a real process tree shaped like the engine's (titles as setproctitle leaves them, a
launch shell, workers forked by the server, a parent that dies), describes it with the real process
scanner, and joins it to an NVML-style holder list (the only fake: NVML cannot run here). Then the
analysis must name every rank `server`, put each server in its own group, judge imbalance per group,
and call a worker left behind by a crashed server a stray.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest
from proctree import Node, Tree

from oomwatch.analysis.hostmem import server_processes
from oomwatch.analysis.processes import GroupTracker, classify
from oomwatch.model import GpuInfo, GpuSample, Sample
from oomwatch.sources.processes import ProcessScanner

psutil = pytest.importorskip("psutil")
GB = 1_000_000_000
TOTAL = 141 * GB
API = "python3 -m vllm.entrypoints.openai.api_server"


@pytest.fixture
def trees():
    started = []

    def start(root: Node) -> Tree:
        t = Tree(root)
        started.append(t)
        return t

    yield start
    for t in started:
        t.kill()


def scan(*pid_sets):
    sc = ProcessScanner()
    pids = set().union(*pid_sets)
    sc.scan(pids)
    return sc


def analyze(sc, cards: list[list[tuple[int, float]]], seconds: float = 3.0):
    """Run the analysis on cards whose holders hold the given bytes (flat), with the scanned tree."""
    from oomwatch.analysis.analyzer import Analyzer

    a = Analyzer([GpuInfo(i, "H200", f"GPU-{i}", TOTAL) for i in range(len(cards))])
    for p in sc.known.values():
        a.add_proc(p)
    n = int(seconds / 0.1)
    for k in range(n):
        gs = tuple(
            GpuSample(i, int(sum(b for _, b in c)) + 500_000_000, procs=tuple((p, int(b)) for p, b in c))
            for i, c in enumerate(cards)
        )
        a.add_sample(Sample(k * 0.1, gs))
    return a


def kinds(a) -> list[str]:
    return [f.kind for f in a.findings]


def test_vllm_v0_tp_server_holds_card0_and_a_worker_outgrows_it(trees):
    """V0 TP=4: the server holds card 0 and forks one worker per other card; worker 1 outgrew the server.
    The server must stay `server` (it was once called a stray), and the imbalance must be found."""
    t = trees(Node("server", API, shell=True, children=[Node(f"w{i}", "python3") for i in (1, 2, 3)]))
    p = t.pids
    holders = {p["server"]: 20 * GB, p["w1"]: 45 * GB, p["w2"]: 20 * GB, p["w3"]: 20 * GB}
    sc = scan(holders)
    roles = classify(holders, sc.known)
    assert {r.role for r in roles.values()} == {"server"}, roles
    assert {r.group for r in roles.values()} == {str(p["server"])}
    a = analyze(sc, [[(p["server"], 20 * GB)], [(p["w1"], 45 * GB)], [(p["w2"], 20 * GB)], [(p["w3"], 20 * GB)]])
    assert "stray" not in kinds(a)
    imb = [f for f in a.findings if f.kind == "imbalance"]
    assert imb and imb[0].evidence["high_gpu"] == "1" and sorted(imb[0].evidence["gpus"]) == ["0", "1", "2", "3"]


def test_vllm_v1_api_server_holds_nothing_enginecore_and_workers_hold_the_cards(trees):
    t = trees(
        Node(
            "api",
            API,
            shell=True,
            children=[
                Node(
                    "core",
                    "VLLM::EngineCore",
                    "VLLM::EngineCor",
                    children=[
                        Node("tp0", "VLLM::Worker_TP0", "VLLM::Worker_T"),
                        Node("tp1", "VLLM::Worker_TP1", "VLLM::Worker_T"),
                    ],
                )
            ],
        )
    )
    p = t.pids
    holders = {p["tp0"]: 60 * GB, p["tp1"]: 60 * GB}
    sc = scan(holders)
    assert p["api"] in sc.known and p["core"] in sc.known  # parents up to the root are described
    roles = classify(holders, sc.known)
    assert all(r.role == "server" and r.group == str(p["api"]) for r in roles.values()), roles
    # host RAM is followed in the API server and EngineCore too (where vLLM's host leaks live)
    assert server_processes(roles, sc.known) == {p["api"], p["core"], p["tp0"], p["tp1"]}
    a = analyze(sc, [[(p["tp0"], 60 * GB)], [(p["tp1"], 60 * GB)]])
    assert "imbalance" not in kinds(a) and "stray" not in kinds(a)


def test_vllm_v1_tp1_enginecore_alone_holds_the_card(trees):
    t = trees(Node("api", API, shell=True, children=[Node("core", "VLLM::EngineCore", "VLLM::EngineCor")]))
    p = t.pids
    sc = scan({p["core"]})
    roles = classify({p["core"]: 70 * GB}, sc.known)
    assert roles[p["core"]].role == "server" and roles[p["core"]].group == str(p["api"])


def test_sglang_one_scheduler_per_rank_under_one_launcher(trees):
    t = trees(
        Node(
            "launcher",
            "python3 -m sglang.launch_server",
            shell=True,
            children=[
                *[Node(f"s{i}", f"sglang::scheduler_TP{i}", "sglang::schedul") for i in range(4)],
                Node("detok", "sglang::detokenizer", "sglang::detoken"),
            ],
        )
    )
    p = t.pids
    holders = {p[f"s{i}"]: 50 * GB for i in range(4)}
    holders[p["s2"]] = 66 * GB
    sc = scan(holders)
    roles = classify(holders, sc.known)
    assert {r.role for r in roles.values()} == {"server"}
    assert {r.group for r in roles.values()} == {str(p["launcher"])}
    a = analyze(sc, [[(p[f"s{i}"], holders[p[f"s{i}"]])] for i in range(4)])
    imb = [f for f in a.findings if f.kind == "imbalance"]
    assert imb and imb[0].evidence["high_gpu"] == "2"


def _replica(name: str) -> Node:
    workers = [Node(f"{name}-tp{r}", f"VLLM::Worker_TP{r}", "VLLM::Worker_T") for r in (0, 1)]
    return Node(
        name, API, shell=True, children=[Node(name + "-core", "VLLM::EngineCore", "VLLM::EngineCor", children=workers)]
    )


def test_data_parallel_replicas_are_groups_each_balanced_on_its_own(trees):
    """Two servers on one node, each TP=2: A at 60 GB per card, B at 30 GB. Across the node the cards
    differ by 21%, but each server is balanced: no imbalance. Then B's second card grows: only B is flagged."""
    a_, b_ = trees(_replica("a")), trees(_replica("b"))
    p = {**a_.pids, **b_.pids}
    cards = [[(p["a-tp0"], 60 * GB)], [(p["a-tp1"], 60 * GB)], [(p["b-tp0"], 30 * GB)], [(p["b-tp1"], 30 * GB)]]
    holders = {pid: b for c in cards for pid, b in c}
    sc = scan(holders)
    roles = classify(holders, sc.known)
    assert {r.role for r in roles.values()} == {"server"}
    assert roles[p["a-tp0"]].group == roles[p["a-tp1"]].group == str(p["a"])
    assert roles[p["b-tp0"]].group == roles[p["b-tp1"]].group == str(p["b"])
    assert "imbalance" not in kinds(analyze(sc, cards))
    cards[3] = [(p["b-tp1"], 48 * GB)]
    imb = [f for f in analyze(sc, cards).findings if f.kind == "imbalance"]
    assert len(imb) == 1 and sorted(imb[0].evidence["gpus"]) == ["2", "3"] and imb[0].evidence["high_gpu"] == "3"


def test_vllm_data_parallel_engines_in_one_server_are_subgroups(trees):
    t = trees(
        Node(
            "api",
            API,
            shell=True,
            children=[Node(f"dp{r}", f"VLLM::EngineCore_DP{r}", "VLLM::EngineCor") for r in (0, 1)],
        )
    )
    p = t.pids
    holders = {p["dp0"]: 60 * GB, p["dp1"]: 30 * GB}
    sc = scan(holders)
    roles = classify(holders, sc.known)
    assert roles[p["dp0"]].group == f"{p['api']}/dp0" and roles[p["dp1"]].group == f"{p['api']}/dp1"
    assert {r.role for r in roles.values()} == {"server"}
    # each DP engine is its own group: two different loads are not an imbalance
    assert "imbalance" not in kinds(analyze(sc, [[(p["dp0"], 60 * GB)], [(p["dp1"], 30 * GB)]]))


def test_crashed_server_leaves_orphaned_workers_and_a_new_server_starts(trees):
    """V0 TP=2 crashes (the server exits, its worker is re-parented and keeps its dead parent's process
    group); the restarted server is another group. The old worker is a stray; the lifecycle sees the old
    group end and the new one start."""
    old = trees(Node("old", API, shell=True, children=[Node("old-w1", "python3")]))
    tracker = GroupTracker()
    holders = {old.pids["old"]: 40 * GB, old.pids["old-w1"]: 40 * GB}
    sc = scan(holders)
    ch = tracker.update(classify(holders, sc.known), 0.0)
    assert [(c.kind, c.group) for c in ch] == [("started", str(old.pids["old"]))]

    psutil.Process(old.pids["old"]).kill()
    w1 = old.pids["old-w1"]
    for _ in range(100):
        if psutil.Process(w1).ppid() != old.pids["old"]:
            break
        import time

        time.sleep(0.05)
    new = trees(Node("new", API, shell=True, children=[Node("new-w1", "python3")]))
    holders = {w1: 40 * GB, new.pids["new"]: 40 * GB, new.pids["new-w1"]: 40 * GB}
    sc.scan(holders)  # the scanner sees the worker re-parented
    roles = classify(holders, sc.known)
    assert roles[w1].role == "stray" and "orphaned" in roles[w1].why, (sc.known[w1], roles)
    assert roles[new.pids["new"]].role == roles[new.pids["new-w1"]].role == "server"
    ch = tracker.update(roles, 10.0)
    assert ("ended", str(old.pids["old"])) in [(c.kind, c.group) for c in ch]
    assert ("started", str(new.pids["new"])) in [(c.kind, c.group) for c in ch]


def test_server_started_as_a_daemon_is_not_an_orphan(trees):
    """`nohup vllm serve &` from a shell that then exits (or a systemd unit): the server's parent is init,
    but it leads its own process group, which a re-parented worker never does."""
    t = trees(
        Node(
            "sh", "sh-launcher", exit=True, children=[Node("srv", API, session=True, children=[Node("w1", "python3")])]
        )
    )
    p = t.pids
    holders = {p["srv"]: 40 * GB, p["w1"]: 40 * GB}
    sc = scan(holders)
    assert sc.known[p["srv"]].pgid == p["srv"]
    roles = classify(holders, sc.known)
    assert {r.role for r in roles.values()} == {"server"}, (sc.known[p["srv"]], roles)
    assert roles[p["w1"]].group == str(p["srv"])


def test_forgotten_notebook_started_before_the_server_is_a_stray(trees):
    nb = trees(Node("nb", "python3 -m ipykernel_launcher", shell=True))
    srv = trees(Node("srv", API, shell=True, children=[Node("w1", "python3")]))
    holders = {nb.pids["nb"]: 10 * GB, srv.pids["srv"]: 40 * GB, srv.pids["w1"]: 40 * GB}
    sc = scan(holders)
    # create_time has a 10 ms resolution; the server must be visibly younger than the notebook
    nb_info = sc.known[nb.pids["nb"]]
    from dataclasses import replace

    sc.known[nb.pids["nb"]] = replace(nb_info, create_time=nb_info.create_time - 60)
    roles = classify(holders, sc.known)
    assert roles[nb.pids["nb"]].role == "stray" and "before the server" in roles[nb.pids["nb"]].why
    assert roles[srv.pids["srv"]].role == "server"


# ---- containers: a PID namespace of our own, where the server or an init is PID 1 ---------------------
_IN_NS = r"""
import json, os, subprocess, sys, time
sys.path.insert(0, sys.argv[1])
mode = sys.argv[2]
from oomwatch.sources.processes import ProcessScanner
from oomwatch.analysis.processes import classify
sleep = [sys.executable, "-c", "import time; time.sleep(30)"]
if mode == "server-is-pid1":  # `docker run image vllm serve ...`: the entrypoint is the server
    ws = [subprocess.Popen(sleep) for _ in range(2)]
    time.sleep(0.3)
    holders = {w.pid: 40e9 for w in ws}
else:  # `tini -- vllm serve`: a server crashed, its worker was re-parented to tini; a new server runs
    with open("/proc/self/comm", "w") as f:
        f.write("tini")
    fork = "import subprocess,sys,time;w=subprocess.Popen(sys.argv[1:]);print(w.pid,flush=True)"
    crashed = subprocess.Popen([sys.executable, "-c", fork, *sleep], stdout=subprocess.PIPE, text=True)
    orphan = int(crashed.stdout.readline())
    crashed.wait()
    srv = subprocess.Popen([sys.executable, "-c", fork + ";time.sleep(30)", *sleep], stdout=subprocess.PIPE, text=True)
    worker = int(srv.stdout.readline())
    time.sleep(0.3)
    holders = {orphan: 20e9, srv.pid: 40e9, worker: 40e9}
sc = ProcessScanner()
sc.scan(set(holders))
roles = classify(holders, sc.known)
extra = {"orphan": orphan, "server": srv.pid} if mode != "server-is-pid1" else {}
print(json.dumps({"pid1": os.getpid(), "roles": {str(p): [r.role, r.group, r.why] for p, r in roles.items()},
                  "holders": sorted(holders), **extra}))
"""


def _in_pid_namespace(mode: str) -> dict:
    if not shutil.which("unshare"):
        pytest.skip("unshare (util-linux) not installed")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", _IN_NS, root, mode],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if r.returncode != 0 and ("Operation not permitted" in r.stderr or "unshare failed" in r.stderr):
        pytest.skip("no permission to create a PID namespace here (needs root or user namespaces)")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_container_whose_entrypoint_is_the_server_pid1():
    out = _in_pid_namespace("server-is-pid1")
    assert out["pid1"] == 1
    assert {tuple(v[:2]) for v in out["roles"].values()} == {("server", "1")}, out


def test_container_with_tini_a_crashed_servers_worker_is_a_stray():
    out = _in_pid_namespace("tini")
    roles = out["roles"]
    assert roles[str(out["orphan"])][0] == "stray" and "orphaned" in roles[str(out["orphan"])][2], out
    assert roles[str(out["server"])][0] == "server", out
