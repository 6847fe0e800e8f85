"""Kubernetes names for a process: pod, namespace and container, when they can be known.

Two deployments, two sources:
- Sidecar (one pod, `shareProcessNamespace: true`): every process seen belongs to this pod. The manifest
  passes the pod's name and namespace through the downward API (`POD_NAME`, `POD_NAMESPACE`, the usual
  names) and the served container's name as a plain value (`SERVER_CONTAINER`).
- DaemonSet (`hostPID: true`, one per node): a PID's cgroup path names its pod's UID
  (`.../kubepods/burstable/pod<uid>/<container-id>` with cgroupfs, `kubepods-burstable-pod<uid_>.slice` with
  the systemd driver). The kubelet keeps one directory per pod under `/var/log/pods`, named
  `<namespace>_<pod>_<uid>`, with one sub-directory per container: mounted read-only, it maps the UID to
  the pod's name and namespace, and to the container when the pod has one. The kubelet's pod-resources
  API (`/var/lib/kubelet/pod-resources/kubelet.sock`, gRPC) is the standard source of which pod holds which
  GPU (dcgm-exporter uses it); it lists devices per container, not processes, so it names the pod of a
  whole card; the cgroup path is what names the pod of a PID.

Label cardinality stays bounded: these names go only on the per-process series, which are capped.
Nothing here raises; an unknown pod is None.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

POD_LOG_DIR = "/var/log/pods"
_UID_RE = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
REFRESH_S = 30.0  # re-list the pod directories at most this often (pods come and go)


@dataclass(frozen=True, slots=True)
class PodRef:
    pod: str
    namespace: str
    container: str | None = None


def pod_uid(cgroup_text: str) -> str | None:
    """The pod UID in a /proc/<pid>/cgroup text (either cgroup driver), dashed, or None."""
    m = _UID_RE.search(cgroup_text)
    return m.group(1).replace("_", "-") if m else None


def from_env(env: Mapping[str, str] | None = None) -> PodRef | None:
    """The sidecar's own pod, from the downward API variables (None outside Kubernetes)."""
    env = os.environ if env is None else env
    pod, ns = env.get("POD_NAME"), env.get("POD_NAMESPACE")
    if not pod or not ns:
        return None
    return PodRef(pod, ns, env.get("SERVER_CONTAINER") or None)


class PodDirectory:
    """UID -> PodRef from the kubelet's per-pod log directories (`<namespace>_<pod>_<uid>/<container>/`)."""

    def __init__(self, root: str = POD_LOG_DIR, clock: Callable[[], float] = time.monotonic):
        self.root, self.clock = root, clock
        self._pods: dict[str, PodRef] = {}
        self._at = float("-inf")

    def _refresh(self) -> None:
        self._at = self.clock()
        pods = {}
        try:
            entries = os.listdir(self.root)
        except OSError:
            self._pods = {}
            return
        for e in entries:
            parts = e.split("_")
            if len(parts) != 3:
                continue
            ns, name, uid = parts
            try:
                containers = [
                    c for c in os.listdir(os.path.join(self.root, e)) if os.path.isdir(os.path.join(self.root, e, c))
                ]
            except OSError:
                containers = []
            pods[uid] = PodRef(name, ns, containers[0] if len(containers) == 1 else None)
        self._pods = pods

    def lookup(self, uid: str) -> PodRef | None:
        if uid not in self._pods and self.clock() - self._at >= REFRESH_S:
            self._refresh()
        return self._pods.get(uid)


_directory = PodDirectory()


def pod_of(
    pid: int, env: Mapping[str, str] | None = None, directory: PodDirectory | None = None, proc: str = "/proc"
) -> PodRef | None:
    """The pod a PID runs in: the downward API's (sidecar) or its cgroup's pod UID looked up (DaemonSet)."""
    own = from_env(env)
    if own is not None:
        return own
    try:
        with open(f"{proc}/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
            uid = pod_uid(f.read())
    except OSError:
        return None
    if uid is None:
        return None
    return (directory or _directory).lookup(uid)
