"""The one place that builds a daemon from its `DaemonConfig`: the source, the engines, the sinks and the
sampler that drives them. `oomwatch run`, live `oomwatch diagnose` and `oomwatch record` all call it, so
they read NVML, processes, engines and the allocator probes the same way and write the same traces.

    cfg = DaemonConfig(...)              the one source of defaults (daemon/config.py)
    src = open_source(cfg)               a replay of cfg.replay, else NVML (opened)
    sampler = build_sampler(cfg, src)    + engines, process scanner, recorder, Alertmanager, flight dumps
    sampler.start(); watch(stop, duration); sampler.stop(); src.close()

What is only the daemon's (the listen socket, the state folder and its lock, signals) is in daemon/run.py.
Everything a user can get wrong ends as a `UsageError`: one line and exit status 2.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .config import DaemonConfig
from .errors import UsageError

if TYPE_CHECKING:
    from oomwatch.exporters.alertmanager import AlertmanagerPusher
    from oomwatch.exporters.recorder import TraceRecorder

    from .central.central import Central
    from .sampler import Sampler
    from .sources.base import SampleTap
    from .sources.nvml import NvmlSource
    from .sources.replay import ReplaySource

__all__ = [
    "WAIT_SLICE_S",
    "alertmanager_pusher",
    "build_central",
    "build_sampler",
    "open_recorder",
    "open_source",
    "server_pids",
    "watch",
]

log = logging.getLogger("oomwatch")

#: Longest single wait of the main thread: it wakes this often to notice the end of a duration.
WAIT_SLICE_S = 1.0


def open_source(cfg: DaemonConfig) -> NvmlSource | ReplaySource:
    """A replay of `cfg.replay` (TraceError: one line), else NVML, opened (NvmlUnavailable: one line)."""
    if cfg.replay:
        from .sources.replay import ReplaySource

        return ReplaySource(cfg.replay, cfg.speed, cfg.loop)
    from .sources.nvml import NvmlSource

    src = NvmlSource()
    src.open()
    return src


def open_recorder(path: str, src: NvmlSource | ReplaySource, interval: float) -> TraceRecorder:
    """A trace writer on `path` for the cards of `src`; a path that cannot be written is one line."""
    from oomwatch.exporters.recorder import TraceRecorder

    try:
        return TraceRecorder(path, src.cards, 1.0 / interval, src.driver)
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot write {path}: {getattr(e, 'strerror', None) or e}") from None


def server_pids(cfg: DaemonConfig) -> set[int]:
    """The inference server's PIDs as the config names them (--server-pid, --server-cmdline, the engines'
    listening sockets)."""
    from .sources.processes import listening_pid, matching_pids

    pids: set[int] = set()
    if cfg.server_pid:
        pids.add(cfg.server_pid)
    if cfg.server_cmdline:
        pids |= matching_pids(cfg.server_cmdline)
    for u in cfg.engine_url:
        pid = listening_pid(u)
        if pid:
            pids.add(pid)
    return pids


def build_sampler(
    cfg: DaemonConfig, src: NvmlSource | ReplaySource, tap: SampleTap | None = None, scheme: str = "http"
) -> Sampler:
    """The sampler over `src` with everything `cfg` asks for: engines (EngineUrlError: one line), the process
    scanner (live only), a trace recorder (`cfg.record`; or `tap`, which takes every sample instead), the
    Alertmanager pusher and flight dumps. Nothing runs until `start()`."""
    from .sampler import Sampler
    from .sources.engines import EngineSource
    from .sources.processes import ProcessScanner

    verify = cfg.engine_auth.verify()  # UsageError: one line (checked at start too)
    engines = [EngineSource(u, auth=cfg.engine_auth.auth(u), verify=verify) for u in cfg.engine_url]
    recorder: SampleTap | None = tap
    if recorder is None and cfg.record:
        recorder = open_recorder(cfg.record, src, cfg.interval)
    pusher = alertmanager_pusher(cfg, scheme)
    flight = None
    if cfg.flight_dir:
        from oomwatch.exporters.recorder import FlightRecorder

        flight = FlightRecorder(cfg.analysis.window_s)
    return Sampler(
        cfg, src, engines, None if cfg.replay else ProcessScanner(), recorder, pusher, flight, server_pids(cfg)
    )


def alertmanager_pusher(cfg: DaemonConfig, scheme: str = "http") -> AlertmanagerPusher | None:
    """The Alertmanager pusher `cfg` asks for (`--alertmanager-url`, its credentials), or None."""
    if not cfg.alertmanager_url:
        return None
    from oomwatch.exporters.alertmanager import AlertmanagerPusher

    return AlertmanagerPusher(
        cfg.alertmanager_url,
        cfg.external_url or f"{scheme}://{cfg.listen}/",
        cfg.push_interval,
        credentials=cfg.alertmanager_auth,
    )


def build_central(cfg: DaemonConfig, scheme: str = "http") -> Central:
    """The central mode's evaluator (`--prometheus`): a Prometheus reader over `cfg.prometheus` and the same
    Alertmanager pusher as the daemon's. Nothing runs until its first `read_job()` and `start()`."""
    from .central.central import Central
    from .sources.prometheus import PrometheusClient, PrometheusError

    try:
        client = PrometheusClient(cfg.prometheus or "", cfg.central.timeout_s)
    except PrometheusError as e:
        raise UsageError(f"--prometheus: {e}") from None
    return Central(cfg, client, alertmanager_pusher(cfg, scheme))


def watch(stop: threading.Event, duration: float | None, tick: Callable[[], None] | None = None) -> None:
    """Wait until `stop` is set or `duration` seconds have passed, calling `tick` every `WAIT_SLICE_S`."""
    end = None if duration is None else time.monotonic() + duration
    while not stop.is_set():
        left = WAIT_SLICE_S if end is None else min(WAIT_SLICE_S, end - time.monotonic())
        if left <= 0:
            break
        stop.wait(left)
        if tick is not None:
            tick()
