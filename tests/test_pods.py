"""Kubernetes names for a process: the sidecar's downward API, or a PID's cgroup mapped to its pod."""

import os

from oomwatch.sources.kubernetes import PodDirectory, PodRef, from_env, pod_of, pod_uid

UID = "1b2c3d4e-0000-1111-2222-333344445555"
CGROUPFS = f"12:memory:/kubepods/burstable/pod{UID}/0123456789abcdef\n"
SYSTEMD = (
    "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
    + UID.replace("-", "_")
    + ".slice/cri-containerd-abcdef.scope\n"
)


def test_pod_uid_from_both_cgroup_drivers():
    assert pod_uid(CGROUPFS) == UID and pod_uid(SYSTEMD) == UID
    assert pod_uid("0::/user.slice/user-0.slice/session-1.scope\n") is None


def test_sidecar_downward_api():
    env = {"POD_NAME": "vllm-7d9f", "POD_NAMESPACE": "llm", "SERVER_CONTAINER": "vllm"}
    assert from_env(env) == PodRef("vllm-7d9f", "llm", "vllm")
    assert from_env({"POD_NAME": "x"}) is None
    assert pod_of(os.getpid(), env=env) == PodRef("vllm-7d9f", "llm", "vllm")


def _layout(tmp_path, cgroup_text, containers=("vllm",)):
    proc = tmp_path / "proc" / "4242"
    proc.mkdir(parents=True)
    (proc / "cgroup").write_text(cgroup_text)
    logs = tmp_path / "pods"
    for c in containers:
        (logs / f"llm_vllm-7d9f_{UID}" / c).mkdir(parents=True)
    (logs / "kube-system_coredns-1_99999999-0000-1111-2222-333344445555" / "coredns").mkdir(parents=True)
    return str(tmp_path / "proc"), PodDirectory(str(logs))


def test_daemonset_maps_a_pids_cgroup_to_its_pod(tmp_path):
    proc, d = _layout(tmp_path, SYSTEMD)
    assert pod_of(4242, env={}, directory=d, proc=proc) == PodRef("vllm-7d9f", "llm", "vllm")


def test_a_pod_of_several_containers_names_no_container(tmp_path):
    proc, d = _layout(tmp_path, CGROUPFS, containers=("vllm", "oomwatch"))
    assert pod_of(4242, env={}, directory=d, proc=proc) == PodRef("vllm-7d9f", "llm", None)


def test_outside_kubernetes_nothing_is_named(tmp_path):
    proc, d = _layout(tmp_path, "0::/system.slice/vllm.service\n")
    assert pod_of(4242, env={}, directory=d, proc=proc) is None
    assert pod_of(4243, env={}, directory=d, proc=proc) is None  # no such process
    assert pod_of(os.getpid(), env={}, directory=PodDirectory(str(tmp_path / "none"))) is None


def test_the_pod_directory_is_reread_at_most_every_refresh(tmp_path):
    t = [0.0]
    proc, d = _layout(tmp_path, SYSTEMD)
    d.clock = lambda: t[0]
    assert d.lookup("00000000-0000-0000-0000-000000000000") is None
    (tmp_path / "pods" / "llm_new-pod_00000000-0000-0000-0000-000000000000" / "c").mkdir(parents=True)
    assert d.lookup("00000000-0000-0000-0000-000000000000") is None  # listed a moment ago
    t[0] = 31.0
    assert d.lookup("00000000-0000-0000-0000-000000000000") == PodRef("new-pod", "llm", "c")
