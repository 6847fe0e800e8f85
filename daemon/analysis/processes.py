"""Who holds the memory: the served process tree, strays, and everything else. Pure; no psutil here.

The served tree is the server (given by `--server-pid`, a cmdline pattern, the process listening on the
engine's port, or else the largest non-orphaned holder), its descendants and, for multi-rank servers,
the siblings under the same launcher. A stray holds GPU memory outside that tree *and* is orphaned (its
parent died or it was re-parented to an init that is not the server) or is older than the server: the
worker left behind by a crashed run, or a notebook someone forgot. Anything else is `other`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model import ProcInfo

# Names of real init processes: a parent of 1 under these means "re-parented", i.e. orphaned.
INIT_NAMES = {"init", "systemd", "tini", "dumb-init", "docker-init", "catatonit", "s6-svscan", "runit", ""}


@dataclass(frozen=True, slots=True)
class ProcRole:
    pid: int
    role: str  # server | stray | other
    why: str = ""


SERVER_HINTS = ("python", "vllm", "sglang", "text-generation", "llama", "ray", "torchrun", "uvicorn")


def _pid1_is_init(infos: dict[int, ProcInfo], holders, server_pids) -> bool:
    """Whether PID 1 is an init (a re-parenting target) rather than the server itself (a container
    whose entrypoint is the server: its workers' parent is 1 and they are not orphans)."""
    if 1 in holders or 1 in server_pids:
        return False
    p1 = infos.get(1)
    if p1 is None or p1.name in INIT_NAMES:
        return True
    return not any(h in p1.name.lower() for h in SERVER_HINTS)


def classify(
    holders: dict[int, float],
    infos: dict[int, ProcInfo],
    server_pids: set[int] | None = None,
) -> dict[int, ProcRole]:
    """Roles for every PID holding GPU memory. `holders` maps pid -> bytes held (summed over cards)."""
    if not holders:
        return {}
    server_pids = set(server_pids or ())
    init_is_init = _pid1_is_init(infos, holders, server_pids)

    def orphaned(pid: int) -> bool:
        p = infos.get(pid)
        if p is None or p.ppid is None:
            return False
        if p.ppid in (0, 1):
            return init_is_init and pid != 1
        parent = infos.get(p.ppid)
        # re-parented to a subreaper (systemd --user, tini) or its parent has died
        return parent is not None and (not parent.alive or parent.name in INIT_NAMES - {""})

    roots = set(server_pids)
    if not init_is_init:  # a container whose entrypoint (PID 1) is the server: its workers' parent is 1
        roots.add(1)
    if not roots:
        cands = [pid for pid in holders if not orphaned(pid)] or list(holders)
        roots = {max(cands, key=lambda p: (holders[p] or 0, -p))}
    tree = set(roots)
    # Siblings of a rank under one launcher (ppid > 1) belong to the same server.
    launchers = {infos[r].ppid for r in roots if r in infos and infos[r].ppid not in (None, 0, 1)}
    changed = True
    while changed:  # descendants (and siblings of server ranks), to a fixed point
        changed = False
        for pid, p in infos.items():
            if pid in tree or p.ppid is None:
                continue
            if p.ppid in tree or (p.ppid in launchers and pid in holders):
                tree.add(pid)
                changed = True

    server_start = min((infos[r].create_time for r in roots if r in infos and infos[r].create_time), default=None)
    out: dict[int, ProcRole] = {}
    for pid in holders:
        if pid in tree:
            out[pid] = ProcRole(pid, "server")
            continue
        p = infos.get(pid)
        if orphaned(pid):
            out[pid] = ProcRole(pid, "stray", "orphaned: its parent exited and it was re-parented to init")
        elif p is not None and server_start and p.create_time and p.create_time < server_start - 1.0:
            out[pid] = ProcRole(pid, "stray", "started before the server and is not part of it")
        else:
            out[pid] = ProcRole(pid, "other")
    return out
