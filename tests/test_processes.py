"""Who holds the memory: roles from real processes on this machine, joined to NVML lists from the fake.

The psutil side is real (a real orphan made by double fork, a real tree, a real listening server);
only the GPU process list comes from the fake pynvml, since NVML cannot run without a GPU.
"""

import os
import socket
import subprocess
import sys
import time

import pytest

from conftest import stop_process
from oomwatch.analysis.processes import classify
from oomwatch.model import ProcInfo
from oomwatch.sources.processes import ProcessScanner, container_id, container_id_in, describe, listening_pid

psutil = pytest.importorskip("psutil")


def proc(pid, ppid, name="python3", ct=100.0, alive=True):
    return ProcInfo(pid, name, (name,), ppid, ct, "u", alive=alive)


def test_orphan_beside_server_is_stray():
    infos = {10: proc(10, 5), 11: proc(11, 10), 20: proc(20, 1)}
    roles = classify({10: 60e9, 11: 1e9, 20: 20e9}, infos)
    assert roles[10].role == "server" and roles[11].role == "server"
    assert roles[20].role == "stray" and "orphaned" in roles[20].why


def test_container_whose_pid1_is_the_server_has_no_orphans():
    infos = {1: proc(1, 0, "python3"), 7: proc(7, 1), 8: proc(8, 1)}
    roles = classify({7: 50e9, 8: 50e9}, infos)
    assert {r.role for r in roles.values()} == {"server"}


def test_older_than_server_and_outside_is_stray_newer_is_other():
    infos = {10: proc(10, 5, ct=1000.0), 30: proc(30, 6, ct=500.0), 31: proc(31, 6, ct=2000.0)}
    roles = classify({10: 60e9, 30: 5e9, 31: 5e9}, infos, server_pids={10})
    assert roles[30].role == "stray" and "before the server" in roles[30].why
    assert roles[31].role == "other"


def test_ranks_under_one_launcher_are_server():
    infos = {100: proc(100, 50), 101: proc(101, 50)}
    roles = classify({100: 70e9, 101: 50e9}, infos)
    assert roles[100].role == roles[101].role == "server"


def _double_fork_orphan():
    """Start a real orphan: a child forks a sleeper and exits; returns the sleeper's PID."""
    r, w = os.pipe()
    code = (
        "import os,sys,time\nw=int(sys.argv[1])\nif os.fork()==0:\n"
        "    os.write(w,str(os.getpid()).encode()); os.close(w); time.sleep(30)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code, str(w)], pass_fds=(w,))
    os.close(w)
    pid = int(os.read(r, 32))
    os.close(r)
    child.wait()
    return pid


def test_real_orphan_and_real_server_tree():
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess,sys,time;"
            "c=subprocess.Popen([sys.executable,'-c','import time;time.sleep(30)']);"
            "print(c.pid,flush=True);time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    worker = int(server.stdout.readline())
    orphan = _double_fork_orphan()
    try:
        for _ in range(50):
            if psutil.Process(orphan).ppid() != os.getpid():
                break
            time.sleep(0.05)
        sc = ProcessScanner()
        changed = sc.scan({server.pid, worker, orphan})
        infos = {p.pid: p for p in changed}
        assert infos[worker].ppid == server.pid
        # joined to an NVML-style holder list (the fake's role: NVML cannot run here)
        roles = classify({server.pid: 1e9, worker: 60e9, orphan: 20e9}, sc.known, server_pids={server.pid})
        assert roles[worker].role == "server" and roles[server.pid].role == "server"
        assert roles[orphan].role == "stray", (sc.known[orphan], sc.known.get(1))
    finally:
        stop_process(server, kill=True)
        psutil.Process(worker).kill()
        psutil.Process(orphan).kill()


def test_vanished_and_invisible_pids_are_handled():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    info = describe(p.pid)
    assert not info.alive and not info.visible
    assert describe(2**22 + 12345).visible is False


def test_listening_pid_finds_the_server():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    port = s.getsockname()[1]
    try:
        assert listening_pid(f"http://127.0.0.1:{port}") == os.getpid()
    finally:
        s.close()


def test_secret_cmdline_is_redacted_in_description():
    p = subprocess.Popen([sys.executable, "-c", "import time;time.sleep(10)", "--api-key", "topsecret123"])
    try:
        time.sleep(0.2)
        info = describe(p.pid)
        assert "topsecret123" not in " ".join(info.cmdline)
    finally:
        stop_process(p, kill=True)


@pytest.mark.parametrize(
    "text,cid",
    [
        (
            "0::/system.slice/docker-3f2a9c1b7d4e5f60718293a4b5c6d7e8f90112233445566778899aabbccddeeff.scope\n",
            "3f2a9c1b7d4e",
        ),
        ("12:memory:/docker/3f2a9c1b7d4e5f60718293a4b5c6d7e8f90112233445566778899aabbccddeeff\n", "3f2a9c1b7d4e"),
        (
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_0000_1111_2222_333344445555.slice/"
            "cri-containerd-abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789.scope\n",
            "abcdef012345",
        ),
        (
            "0::/machine.slice/libpod-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope\n",
            "0123456789ab",
        ),
        ("0::/user.slice/user-1000.slice/session-3.scope\n", None),
        ("0::/\n", None),
    ],
)
def test_container_id_from_real_cgroup_paths(text, cid):
    assert container_id_in(text) == cid


def test_container_id_of_self_matches_its_cgroup_file():
    with open(f"/proc/{os.getpid()}/cgroup") as f:
        expected = container_id_in(f.read())
    assert container_id(os.getpid()) == expected
    assert container_id(2**22 + 12345) is None  # no such process


def test_invisible_pids_give_the_pid_namespace_advice():
    from oomwatch.analysis.analyzer import Analyzer
    from oomwatch.model import GpuInfo, GpuSample, Sample

    a = Analyzer([GpuInfo(0, "g", "u", 100 << 30)])
    a.add_proc(ProcInfo(4242, visible=False, alive=False))
    for k in range(20):
        a.add_sample(Sample(k * 0.1, (GpuSample(0, 50 << 30, procs=((4242, 50 << 30),)),)))
    fs = [f for f in a.summary()["findings"] if f["kind"] == "pids_invisible"]
    assert fs and "--pid=host" in fs[0]["advice"] and "shareProcessNamespace" in fs[0]["advice"]
    assert all(r.role != "stray" for r in a.roles.values())
