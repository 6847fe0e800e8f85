"""The daemon's life: check its `DaemonConfig`, lock the state folder, build the sampler (daemon/wiring.py),
serve HTTP, restore and save the state, wait for the end.

The command line parses and validates (daemon/commands/run.py); this module runs the daemon and checks
once more what would make it misbehave rather than fail (a sample period that would make the scheduler
spin, a listen address that cannot be bound), so a config built by other code gets the same guard.
Everything a user can get wrong ends as a `UsageError`: one line and exit status 2.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

from . import __version__, wiring
from .config import MAX_INTERVAL_S, MIN_INTERVAL_S, DaemonConfig
from .errors import UsageError

if TYPE_CHECKING:
    from .sampler import Sampler

__all__ = ["StateKeeper", "check", "on_signals", "run", "serve_http", "web_config", "writable_dir"]

log = logging.getLogger("oomwatch")


def on_signals(stop: threading.Event, on_hup: Callable[[], None] | None = None) -> None:
    """SIGTERM and SIGINT set `stop` (the main thread then shuts down cleanly). SIGHUP (a reload, a
    terminal that closed) runs `on_hup` on a thread of its own and the daemon goes on: by default it would
    end the process without saving anything."""

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    def hup(signum: int, frame: FrameType | None) -> None:
        # On a thread: the handler runs on the main thread, which may hold the lock a save needs.
        if on_hup is not None:
            threading.Thread(target=on_hup, name="oomwatch-sighup", daemon=True).start()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, hup)


#: Flags of the central mode alone (daemon/central/): without --prometheus they would be ignored, so they are refused.
CENTRAL_ONLY = (("selector", "--selector"), ("shard", "--shard"), ("scrape_interval", "--scrape-interval"))


def check(cfg: DaemonConfig) -> None:
    """Refuse a config the daemon would run badly with (the CLI checks the same; this guards other callers).

    A zero, negative or NaN `interval` would make apscheduler compute its next run forever (a hang at 100 %
    CPU that ignores SIGTERM); an infinite one overflows its timer.
    """
    for name, v, lo, hi in (
        ("interval", cfg.interval, MIN_INTERVAL_S, MAX_INTERVAL_S),
        ("process_interval", cfg.process_interval, MIN_INTERVAL_S, MAX_INTERVAL_S),
        ("engine_interval", cfg.engine_interval, MIN_INTERVAL_S, MAX_INTERVAL_S),
        ("push_interval", cfg.push_interval, MIN_INTERVAL_S, MAX_INTERVAL_S),
    ):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and lo <= v <= hi):
            raise UsageError(f"{name} must be from {lo} to {hi:.0f} seconds, got {v!r}")
    if not (math.isfinite(cfg.speed) and cfg.speed > 0):
        raise UsageError(f"--speed must be a finite number greater than 0, got {cfg.speed!r}")
    host, sep, port = cfg.listen.rpartition(":")
    if not sep or not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise UsageError(f"--listen must be HOST:PORT with a port from 1 to 65535, got {cfg.listen!r}")
    if cfg.record and cfg.replay:
        from . import bundled

        if os.path.abspath(cfg.record) == os.path.abspath(bundled.resolve(cfg.replay)):
            raise UsageError(f"--record {cfg.record} would overwrite the trace being replayed")
    for flag, folder in (("--flight-dir", cfg.flight_dir), ("--state-dir", cfg.state_dir)):
        if folder:
            writable_dir(flag, folder)
    given = [flag for name, flag in CENTRAL_ONLY if getattr(cfg, name) is not None and getattr(cfg, name) != ""]
    if given and not cfg.prometheus:
        raise UsageError(f"{', '.join(given)}: for the central mode only, which reads the fleet from --prometheus URL")
    cfg.alertmanager_auth.check(cfg.alertmanager_url)  # credential files readable, one way to authenticate
    cfg.engine_auth.check(cfg.engine_url)


def writable_dir(flag: str, folder: str) -> None:
    """Make `folder` if needed and write a file in it, as `--record` is opened at start: a folder that
    cannot be written fails now, in one line, not at the first dump or save hours later (a read-only mount,
    a full disk, a folder of another user; root passes `os.access`, so a real write is the only test)."""
    import tempfile

    if os.path.exists(folder) and not os.path.isdir(folder):
        raise UsageError(f"{flag} {folder} exists and is not a folder")
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder, prefix=".oomwatch-write-test-"):
            pass
    except (OSError, ValueError) as e:
        raise UsageError(f"{flag} {folder}: cannot write there: {getattr(e, 'strerror', None) or e}") from None


def web_config(cfg: DaemonConfig) -> Any:
    """The `--web-config-file` holder (exporters/webconfig.py), or None; WebConfigError: one line, exit 2."""
    if not cfg.web_config_file:
        return None
    from oomwatch.exporters.webconfig import WebConfigHolder

    return WebConfigHolder(cfg.web_config_file)


def _serve(cfg: DaemonConfig, sampler: Sampler, web: Any = None) -> tuple[Any, Any]:
    return serve_http(cfg, lambda: sampler.snapshot, web)


def serve_http(
    cfg: DaemonConfig, get_snapshot: Callable[[], Any], web: Any = None, registry: Any = None
) -> tuple[Any, Any]:
    """/metrics (the daemon's, or `registry`), the status page over `get_snapshot` and /healthz on
    `cfg.listen`; an address that cannot be bound is one line (UsageError)."""
    from oomwatch.exporters.metrics import serve
    from oomwatch.exporters.status import routes as status_routes

    try:
        httpd, thread = serve(cfg.listen, get_snapshot, status_routes(get_snapshot), web=web, registry=registry)
    except (OSError, OverflowError, UnicodeError, ValueError, TypeError) as e:  # taken, no such host, port > 65535,
        # a host name that cannot be encoded (socket raises TypeError for that)
        raise UsageError(f"cannot listen on {cfg.listen}: {getattr(e, 'strerror', None) or e}") from None
    return httpd, thread


def run(cfg: DaemonConfig, duration: float | None = None, stop: threading.Event | None = None) -> int:
    """Run the daemon until `stop` is set (SIGTERM, Ctrl-C) or `duration` seconds have passed.

    A replay that ends (without `loop`) does not stop it: the sampler says so and /metrics keeps serving
    the last state, so a demo or a test can still read it.
    """
    if cfg.prometheus:  # the central mode: the fleet from Prometheus instead of NVML (daemon/central/)
        from .central.run import run_central

        return run_central(cfg, duration, stop)
    check(cfg)
    web = web_config(cfg)  # before anything starts: a bad file is one line, exit 2
    scheme = web.scheme if web is not None else "http"
    state_lock = _lock_state(cfg)  # UsageError: one line (another daemon holds the folder)
    try:
        src = wiring.open_source(cfg)
    except BaseException:
        _unlock(state_lock)
        raise
    sampler = httpd = keeper = None
    try:
        sampler = wiring.build_sampler(cfg, src, scheme=scheme)  # EngineUrlError, unwritable --record: one line
        keeper = StateKeeper(cfg.state_dir, sampler) if cfg.state_dir else None
        httpd, _ = _serve(cfg, sampler, web)
        if stop is None:
            stop = threading.Event()
            on_signals(stop, _on_hup(keeper, web))
        what = (
            f"replaying {cfg.replay} at {cfg.speed:g}x"
            if cfg.replay
            else f"sampling {len(src.cards)} GPU(s) via NVML every {cfg.interval:g} s"
        )
        log.info(
            "oomwatch %s: %s; metrics on %s://%s/metrics, status page on %s://%s/%s",
            __version__,
            what,
            scheme,
            cfg.listen,
            scheme,
            cfg.listen,
            "" if web is None else f" (web config {cfg.web_config_file})",
        )
        sampler.start()
        wiring.watch(stop, duration, keeper.tick if keeper is not None else None)
    finally:
        if sampler is not None:
            sampler.stop()
            if keeper is not None:
                keeper.save()
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        src.close()
        _unlock(state_lock)
    return 0


def _lock_state(cfg: DaemonConfig) -> Any:
    """The `--state-dir` lock (daemon/state.py), held until the daemon ends; None without a state folder."""
    if not cfg.state_dir:
        return None
    from . import state

    return state.lock(cfg.state_dir)


def _unlock(lock: Any) -> None:
    if lock is not None:
        lock.close()  # closing the file releases the flock


def _on_hup(keeper: StateKeeper | None, web: Any) -> Callable[[], None]:
    """SIGHUP: save the state (--state-dir) and read the web config again (--web-config-file)."""

    def hup() -> None:
        if web is not None:
            web.reload()
        if keeper is not None:
            keeper.save()
        elif web is None:
            log.info("SIGHUP: no --state-dir, nothing to save; going on")

    return hup


class StateKeeper:
    """`--state-dir`: restore the analysis history at start, save it every minute and at the end."""

    def __init__(self, state_dir: str, sampler: Sampler, every_s: float = 60.0) -> None:
        from . import state

        self.state, self.dir, self.sampler, self.every = state, state_dir, sampler, every_s
        self._saving = threading.Lock()  # the minute's save and a SIGHUP's never write at once
        self.next = time.monotonic() + every_s
        with sampler.holding_analysis() as analyzer:
            n = state.load(analyzer, state_dir, sampler.wall_offset)
        if n:
            log.info("state: restored the history of %d card(s) from %s", n, state_dir)

    def tick(self) -> None:
        if time.monotonic() >= self.next:
            self.next = time.monotonic() + self.every
            self.save()

    def save(self) -> None:
        """Write the state now (every minute, on SIGHUP, at the end); one save at a time."""
        try:
            with self._saving, self.sampler.holding_analysis() as analyzer:
                n = self.state.save(analyzer, self.dir, self.sampler.wall_offset)
            log.debug("state: saved %d card(s) to %s", n, self.dir)
        except Exception as e:  # noqa: BLE001 - a state write must never stop the daemon
            log.error("state: could not save to %s: %s", self.dir, e)
