"""Who holds the memory: server groups, strays, and everything else. Pure; no psutil here.

A *server group* is one inference server's process tree: every GPU holder is walked up its parents while
the parent is part of a program (not an init, a shell, a container runtime or a session manager) and
until a process that leads its own process group (what a job-control shell, systemd, a container runtime
or `setsid` starts: engines fork their workers inside their group); the topmost such ancestor is the
group's root and its PID is the group id. That one rule covers the layouts
engines really have:

- vLLM V0 tensor parallel: the server holds card 0 and forks one worker per other card (root: the server);
- vLLM V1: the API server holds no GPU memory, its EngineCore child (and, with TP, the workers under it)
  hold the cards (root: the API server); with data parallelism each `EngineCore_DP<n>` is a subgroup;
- SGLang: a scheduler per TP rank, all children of one launcher (root: the launcher);
- data-parallel replicas: several servers started apart (by a shell, systemd, a container runtime) are
  several groups, and each is balanced on its own;
- a container whose entrypoint is the server: PID 1 is the root, its workers' parent is 1.

A stray holds GPU memory outside every server group *and* is orphaned (its parent died and it was
re-parented to init or a subreaper while it stayed in its dead parent's process group), or started before
the server it shares the node with, or holds memory on a card a server group holds too (a process outside
the served tree on the server's card takes headroom the server counted on, whenever it started): the
worker left behind by a crashed run, a forgotten notebook, a notebook opened on a serving card. A
process that is not described (another PID namespace) is never a stray by its card alone: without its
tree, a server's own worker would look like one. Anything else (a job alone on a card of its own) is
`other`.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from ..model import ProcInfo

# Names of real init processes: a parent of 1 under these means "re-parented", i.e. orphaned.
INIT_NAMES = {"init", "systemd", "tini", "dumb-init", "docker-init", "catatonit", "s6-svscan", "runit", ""}
# Parents that start programs but are not part of one: walking up a server tree stops below them.
LAUNCHER_NAMES = {
    "bash",
    "sh",
    "dash",
    "zsh",
    "fish",
    "ksh",
    "tcsh",
    "csh",
    "busybox",
    "ash",
    "sshd",
    "sudo",
    "su",
    "login",
    "tmux",
    "tmux: server",
    "screen",
    "SCREEN",
    "nohup",
    "setsid",
    "supervisord",
    "runsv",
    "s6-supervise",
    "conmon",
    "runc",
    "crun",
    "pause",
    "kubelet",
    "containerd",
    "dockerd",
    "systemd-run",
    "jupyter-lab",
    "jupyter-notebook",
    "code",
    "node",
    "cron",
    "crond",
    "xargs",
    "timeout",
    "make",
    "pytest",
    "entrypoint.sh",
}
LAUNCHER_PREFIXES = ("containerd-shim", "docker-containerd", "systemd", "sshd:", "bash ", "sh ")
# Words in a holder's name or command line that mark an inference engine (not a bare "python").
SERVER_HINTS = (
    "vllm",
    "sglang",
    "text-generation",
    "text_generation",
    "llama-server",
    "llama_cpp",
    "enginecore",
    "tgi",
    "torchrun",
    "ray::",
    "uvicorn",
    "tensorrt",
    "trtllm",
    "lmdeploy",
)
# Names PID 1 may have when it is the server itself (a container whose entrypoint is the engine).
PID1_SERVER_HINTS = ("python", "vllm", "sglang", "text-generation", "llama", "ray", "torchrun", "uvicorn")
_DP_RE = re.compile(r"EngineCore_DP(\d+)|_DP(\d+)\b")


@dataclass(frozen=True, slots=True)
class ProcRole:
    pid: int
    role: str  # server | stray | other
    why: str = ""
    group: str | None = None  # server group id (the root's PID, "<root>/dp<n>" for a DP engine); None: none


def _is_launcher(p: ProcInfo | None) -> bool:
    if p is None:
        return True
    n = p.name or ""
    return n in INIT_NAMES or n in LAUNCHER_NAMES or n.startswith(LAUNCHER_PREFIXES)


def _pid1_is_init(infos: dict[int, ProcInfo], holders: Collection[int], server_pids: Collection[int]) -> bool:
    """Whether PID 1 is an init (a re-parenting target) rather than the server itself (a container
    whose entrypoint is the server: its workers' parent is 1 and they are not orphans)."""
    if 1 in holders or 1 in server_pids:
        return False
    p1 = infos.get(1)
    if p1 is None or p1.name in INIT_NAMES or _is_launcher(p1):
        return True
    return not any(h in p1.name.lower() for h in PID1_SERVER_HINTS)


def _hinted(p: ProcInfo | None) -> bool:
    if p is None:
        return False
    text = (p.name + " " + " ".join(p.cmdline)).lower()
    return any(h in text for h in SERVER_HINTS)


def _dp_rank(p: ProcInfo | None) -> str | None:
    if p is None:
        return None
    m = _DP_RE.search(p.name + " " + " ".join(p.cmdline))
    return None if m is None else (m.group(1) or m.group(2))


class _Tree:
    """Parent walks over the described processes."""

    def __init__(self, infos: dict[int, ProcInfo], init_is_init: bool):
        self.infos = infos
        self.init_is_init = init_is_init

    def orphaned(self, pid: int) -> bool:
        """Re-parented to init (or a subreaper) after its parent died, or its parent is dead."""
        p = self.infos.get(pid)
        if p is None or p.ppid is None:
            return False
        if p.pgid is not None and p.pgid == pid:
            return False  # a group leader started on purpose (a systemd unit, a nohup'd server), not an orphan
        if p.ppid in (0, 1):
            # A re-parented worker keeps its dead parent's process group; without pgid, ppid 1 is all we know.
            return self.init_is_init and pid != 1
        parent = self.infos.get(p.ppid)
        # re-parented to a subreaper (systemd --user, tini) or its parent has died
        return parent is not None and (not parent.alive or parent.name in INIT_NAMES - {""})

    def ancestors(self, pid: int) -> list[int]:
        """`pid` and its parents while they belong to the same program (stops below launchers and init)."""
        chain = [pid]
        seen = {pid}
        cur = pid
        while len(chain) < 64:
            p = self.infos.get(cur)
            if p is None or p.ppid in (None, 0) or self.orphaned(cur):
                break
            if p.pgid is not None and p.pgid == cur:
                break  # it leads its own process group: started as a unit (a job, a unit, a container, setsid)
            ppid = p.ppid
            if ppid == 1 and self.init_is_init:
                break
            parent = self.infos.get(ppid)
            if parent is None and ppid != 1:
                chain.append(ppid)  # not described (a trace without its launcher): ranks under it are one server
                break
            if parent is None or not parent.alive or _is_launcher(parent) and ppid != 1 or ppid in seen:
                break
            chain.append(ppid)
            seen.add(ppid)
            cur = ppid
        return chain

    def group_of(self, pid: int) -> str:
        chain = self.ancestors(pid)
        root = chain[-1]
        for q in chain:  # the nearest data-parallel engine core names a subgroup
            r = _dp_rank(self.infos.get(q))
            if r is not None:
                return f"{root}/dp{r}"
        return str(root)


def server_groups(
    holders: Collection[int], infos: dict[int, ProcInfo], server_pids: Iterable[int] = ()
) -> dict[int, str]:
    """Group id for every holder (see the module docstring); pure."""
    server_pids = set(server_pids or ())
    tree = _Tree(infos, _pid1_is_init(infos, holders, server_pids))
    return {pid: tree.group_of(pid) for pid in holders}


def _root(group: str) -> int:
    return int(group.split("/", 1)[0])


def classify(
    holders: dict[int, float],
    infos: dict[int, ProcInfo],
    server_pids: set[int] | None = None,
    cards: Mapping[int, Collection[int]] | None = None,
) -> dict[int, ProcRole]:
    """Roles and server groups for every PID holding GPU memory. `holders` maps pid -> bytes held (summed
    over cards). `server_pids` are known server processes (`--server-pid`, a cmdline pattern, the process
    listening on a given or discovered engine port): their groups are servers whatever else holds memory.
    `cards` maps pid -> the cards it holds memory on; with it, a described non-server process on a card a
    server holds is a stray (without it, only orphans and processes older than the server are)."""
    if not holders:
        return {}
    server_pids = set(server_pids or ())
    tree = _Tree(infos, _pid1_is_init(infos, holders, server_pids))
    group = {pid: tree.group_of(pid) for pid in holders}
    members: dict[str, list[int]] = {}
    for pid, g in group.items():
        members.setdefault(g, []).append(pid)

    def g_orphaned(g: str) -> bool:
        return all(tree.orphaned(p) or tree.orphaned(_root(g)) for p in members[g])

    def g_bytes(g: str) -> float:
        return sum(holders[p] or 0 for p in members[g])

    def g_start(g: str) -> float | None:
        times = [ct for q in [_root(g), *members[g]] if q in infos and (ct := infos[q].create_time)]
        return min(times) if times else None

    servers: set[str] = set()
    if server_pids:
        roots = {tree.ancestors(p)[-1] for p in server_pids}
        for g in members:
            # its root or a member is a server PID, or a server PID sits below its root (the API server that
            # a launcher started)
            if (
                _root(g) in roots
                or any(p in server_pids for p in members[g])
                or any(_root(g) in tree.ancestors(p) for p in server_pids)
            ):
                servers.add(g)
    else:
        for g, ps in members.items():
            if not g_orphaned(g) and (_hinted(infos.get(_root(g))) or any(_hinted(infos.get(p)) for p in ps)):
                servers.add(g)
    if not servers:
        cands = [g for g in members if not g_orphaned(g)] or list(members)
        servers.add(max(cands, key=lambda g: (g_bytes(g), -_root(g))))

    server_start = min((s for s in map(g_start, servers) if s), default=None)
    server_cards: set[int] = set()
    if cards:
        for pid, g in group.items():
            if g in servers:
                server_cards.update(cards.get(pid, ()))
    out: dict[int, ProcRole] = {}
    for pid in holders:
        g = group[pid]
        if g in servers:
            out[pid] = ProcRole(pid, "server", "", g)
            continue
        p = infos.get(pid)
        if tree.orphaned(pid) or tree.orphaned(_root(g)):
            out[pid] = ProcRole(pid, "stray", "orphaned: its parent exited and it was re-parented to init", g)
        elif p is not None and server_start and p.create_time and p.create_time < server_start - 1.0:
            out[pid] = ProcRole(pid, "stray", "started before the server and is not part of it", g)
        elif p is not None and p.visible and cards and server_cards.intersection(cards.get(pid, ())):
            out[pid] = ProcRole(pid, "stray", "outside the server's process tree, on a card the server uses", g)
        else:
            out[pid] = ProcRole(pid, "other", "", g)
    return out


def card_group(procs: Iterable[tuple[int, int | None]], roles: dict[int, ProcRole]) -> str | None:
    """The server group a card belongs to: that of its largest server holder (None: no process seen).

    `procs` are the card's (pid, bytes) pairs. A card held only by non-server processes gets a group of
    its own (`pid<N>`), so it is never compared with a server's cards."""
    best, best_b = None, -1.0
    for pid, b in procs:
        r = roles.get(pid)
        if r is not None and r.role == "server" and (b or 0) > best_b:
            best, best_b = r.group, b or 0
    if best is not None:
        return best
    seen = [pid for pid, _ in procs if pid in roles]
    return f"pid{seen[0]}" if seen else None


def group_members(roles: dict[int, ProcRole], procs: dict[int, ProcInfo]) -> dict[str, set[int]]:
    """Each server group's processes: its GPU holders and their parents up to the group's root (vLLM V1's
    API server, SGLang's launcher), where the engine's HTTP port and most host memory live."""
    out: dict[str, set[int]] = {}
    for r in roles.values():
        if r.role != "server" or r.group is None:
            continue
        members = out.setdefault(r.group, set())
        members.add(r.pid)
        root = _root(r.group)
        cur = procs.get(r.pid)
        for _ in range(64):
            if cur is None or cur.pid == root or not cur.ppid or (cur.ppid <= 1 and root != 1):
                break
            members.add(cur.ppid)
            cur = procs.get(cur.ppid)
    return out


@dataclass(frozen=True, slots=True)
class GroupChange:
    """A server group that appeared (`started`) or whose every PID is gone (`ended`) at time `t`."""

    group: str
    kind: str  # started | ended
    t: float
    pids: tuple[int, ...]


class GroupTracker:
    """Server groups over time, for the lifecycle: a group whose PIDs are all gone ends its episode (a
    restart or a crash), a group not seen before starts a start phase. Pure bookkeeping over the roles
    the analysis computes each evaluation."""

    def __init__(self) -> None:
        self.live: dict[str, set[int]] = {}
        self.first_seen: dict[str, float] = {}

    def update(self, roles: dict[int, ProcRole], t: float) -> list[GroupChange]:
        now: dict[str, set[int]] = {}
        for r in roles.values():
            if r.role == "server" and r.group is not None:
                now.setdefault(r.group, set()).add(r.pid)
        changes = []
        for g, pids in self.live.items():
            if g not in now:
                changes.append(GroupChange(g, "ended", t, tuple(sorted(pids))))
                self.first_seen.pop(g, None)
        for g, pids in now.items():
            if g not in self.live:
                self.first_seen[g] = t
                changes.append(GroupChange(g, "started", t, tuple(sorted(pids))))
        self.live = now
        return changes
