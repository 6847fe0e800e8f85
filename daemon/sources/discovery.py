"""Find the engine of each server group without `--engine-url`: probe the ports its processes listen on.

A sidecar deployed without `--engine-url` would page on every start (growth before the engine answers is
warm-up only when oomwatch knows there is an engine). So for each server group, the TCP ports that its
processes (the GPU holders and their parents up to the group's root: vLLM's API server, SGLang's
launcher) listen on are probed once for `/metrics`, with a short timeout. The first port that answers
with a known engine's metrics (vLLM, SGLang, TGI, llama.cpp) becomes an `EngineSource`, exactly as if
given by `--engine-url`. A group is probed again only when its processes change (a restart), and a
discovered engine is dropped when its group is gone, so a dead server's URL never pages as telemetry.
`--no-engine-discovery` turns this off.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from .engines import EngineSource, metrics_url

try:
    import psutil
except ImportError:  # pragma: no cover
    psutil = None

log = logging.getLogger("oomwatch.discovery")

PROBE_TIMEOUT_S = 0.5  # an engine on this host answers /metrics in milliseconds; a wrong port must not stall
MAX_PORTS_PER_GROUP = 8  # a server listens on a few ports (HTTP, ZMQ, NCCL); probe no more than this


def _other_netns_ip(pid: int, proc: str = "/proc") -> str | None:
    """The address a process in another network namespace (a pod, seen from a DaemonSet with hostPID)
    is reached at: the first non-loopback local address in its namespace's routing table; None when it
    shares ours (its loopback is ours) or it cannot be read."""
    try:
        if os.stat(f"{proc}/{pid}/ns/net").st_ino == os.stat(f"{proc}/self/ns/net").st_ino:
            return None
        with open(f"{proc}/{pid}/net/fib_trie", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for prev, line in zip(lines, lines[1:], strict=False):
        ip = prev.strip().removeprefix("|-- ").strip()
        if line.strip() == "/32 host LOCAL" and not ip.startswith("127."):
            return ip
    return None


def listening_ports(pid: int) -> list[tuple[str, int]]:
    """(address, port) a process listens on over TCP; a wildcard address is probed on loopback, or on the
    pod's address when the process lives in another network namespace."""
    if psutil is None:
        return []
    try:
        p = psutil.Process(pid)
        conns = p.net_connections(kind="tcp") if hasattr(p, "net_connections") else p.connections(kind="tcp")
    except (psutil.Error, OSError):
        return []
    out = []
    other = None
    for c in conns:
        if c.status != psutil.CONN_LISTEN or not c.laddr:
            continue
        ip = c.laddr.ip
        if ip in ("0.0.0.0", "::", ""):
            other = other if other is not None else (_other_netns_ip(pid) or "")
            ip = other or "127.0.0.1"
        elif ip.startswith("127.") or ip == "::1":
            if _other_netns_ip(pid):
                continue  # loopback of another namespace cannot be reached from here
        elif ip == "::1" or ":" in ip:
            ip = f"[{ip}]"
        out.append((ip, c.laddr.port))
    return sorted(set(out), key=lambda a: a[1])


@dataclass
class Discovered:
    group: str
    pid: int  # the process listening on the port
    source: EngineSource


class EngineDiscovery:
    """One probe per server group and membership; keeps the engines it found while their group lives."""

    def __init__(
        self,
        configured_urls: Iterable[str] = (),
        timeout_s: float = PROBE_TIMEOUT_S,
        ports: Callable[[int], list[tuple[str, int]]] = listening_ports,
        make_source: Callable[[str], EngineSource] | None = None,
    ):
        self.configured = {metrics_url(u) for u in configured_urls}
        self.configured_ports = {
            urlsplit(u).port or 80
            for u in self.configured
            if urlsplit(u).hostname in ("localhost", "127.0.0.1", "::1", "0.0.0.0")
        }
        self.timeout_s = timeout_s
        self._ports = ports
        self._make = make_source or (lambda url: EngineSource(url, timeout_s=2.0))
        self.found: dict[str, Discovered] = {}  # group -> the engine found for it
        self._probed: dict[str, frozenset[int]] = {}  # group -> the members it was probed with

    def _probe(self, url: str) -> bool:
        src = EngineSource(url, timeout_s=self.timeout_s, retries=0)
        try:
            snap = src.scrape()
        finally:
            src.close()
        return snap.up and snap.kind is not None

    def update(self, groups: dict[str, set[int]]) -> tuple[list[Discovered], list[Discovered]]:
        """Probe new or changed groups; returns (engines found now, engines whose group is gone)."""
        gone = []
        for g in list(self.found):
            if g not in groups:
                gone.append(self.found.pop(g))
        for g in list(self._probed):
            if g not in groups:
                del self._probed[g]
        new = []
        for g, pids in groups.items():
            key = frozenset(pids)
            if self._probed.get(g) == key:
                continue
            self._probed[g] = key
            if g in self.found and self.found[g].pid in pids:
                continue  # the engine's process is still there: a worker came or went
            if g in self.found:
                gone.append(self.found.pop(g))
            hit = self._probe_group(g, pids)
            if hit is not None:
                self.found[g] = hit
                new.append(hit)
        return new, gone

    def _probe_group(self, group: str, pids: Iterable[int]) -> Discovered | None:
        tried = 0
        for pid in sorted(pids):
            for ip, port in self._ports(pid):
                url = metrics_url(f"http://{ip}:{port}")
                if url in self.configured or port in self.configured_ports:
                    return None  # the user named this engine already
                if tried >= MAX_PORTS_PER_GROUP:
                    return None
                tried += 1
                if self._probe(url):
                    log.info(
                        "discovered an engine for server group %s: %s (PID %d listens on port %d)",
                        group,
                        url,
                        pid,
                        port,
                    )
                    return Discovered(group, pid, self._make(url))
        return None

    def close(self) -> None:
        for d in self.found.values():
            d.source.close()
