"""`oomwatch run --prometheus URL`: the central mode's process (daemon/run.py hands it over when the flag is
set). The same life as the daemon's: check the config, build (daemon/wiring.py), serve /metrics and the
status page, run until SIGTERM or `duration`, push the last alerts on the way out.

Bad input is one line and exit 2 before anything runs: a URL that is not `http(s)://HOST[:PORT]`, a flag that
belongs to the NVML daemon (`--replay`, `--record`, ...), and, when Prometheus answers the first read, a
`--selector` it refuses. Prometheus being down, slow or not Prometheus at all is no bad input: the central
starts, says so in `oomwatch_source_up` and GPUTelemetryDown, and reads again at each interval.
"""

from __future__ import annotations

import logging
import threading

from .. import __version__, wiring
from ..config import DaemonConfig
from ..errors import UsageError
from ..run import check, on_signals, serve_http, web_config

__all__ = ["check_central", "run_central"]

log = logging.getLogger("oomwatch")

#: The daemon's flags that mean nothing without NVML on this host (the analysis of Prometheus' series has no
#: processes, no engines, no trace to write); given with --prometheus, they are refused rather than ignored.
NVML_ONLY = (
    ("replay", "--replay"),
    ("record", "--record"),
    ("engine_url", "--engine-url"),
    ("server_pid", "--server-pid"),
    ("server_cmdline", "--server-cmdline"),
    ("flight_dir", "--flight-dir"),
    ("state_dir", "--state-dir"),
)


def check_central(cfg: DaemonConfig) -> None:
    """Refuse what the central mode cannot do, in one line (UsageError), then the daemon's own checks."""
    given = [flag for name, flag in NVML_ONLY if getattr(cfg, name)]
    if given:
        flags = ", ".join(given)
        raise UsageError(
            f"--prometheus reads the fleet from Prometheus; {flags} need NVML on this host (leave them out)"
        )
    if not (isinstance(cfg.max_cards, int) and cfg.max_cards >= 1):
        raise UsageError(f"--max-cards must be a whole number of at least 1, got {cfg.max_cards!r}")
    check(cfg)


def run_central(cfg: DaemonConfig, duration: float | None = None, stop: threading.Event | None = None) -> int:
    check_central(cfg)
    web = web_config(cfg)
    scheme = web.scheme if web is not None else "http"
    central = wiring.build_central(cfg, scheme)  # UsageError for a URL that cannot be Prometheus'
    httpd = None
    try:
        central.read_job()  # the first read now: a refused --selector is exit 2; a down Prometheus is not
        from oomwatch.exporters.fleet import fleet_registry

        httpd, _ = serve_http(cfg, lambda: central.state.status, web, fleet_registry(lambda: central.state))
        if stop is None:
            stop = threading.Event()
            on_signals(stop, web.reload if web is not None else None)
        st = central.state
        log.info(
            "oomwatch %s: central mode over %s%s: %d card(s) watched (at most %d), reading every %.3g s; "
            "metrics on %s://%s/metrics, status page on %s://%s/",
            __version__,
            central.client.shown,
            f" matching {cfg.selector}" if cfg.selector else "",
            len(st.cards),
            cfg.max_cards,
            central.interval_s,
            scheme,
            cfg.listen,
            scheme,
            cfg.listen,
        )
        central.start()
        wiring.watch(stop, duration)
    finally:
        central.stop()
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        central.client.close()
    return 0
