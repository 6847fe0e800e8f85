"""`oomwatch diagnose`: a one-shot plain-language report. Live, it watches for --duration through the
daemon's own wiring (daemon/wiring.py: NVML, processes, engines and their discovery, allocator probes)
without serving anything; with --replay it feeds the trace to the analysis. Exit 1 when a warning or worse
was found."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING

from .. import wiring
from ..config import DaemonConfig
from ..credentials import ClientAuth
from ..errors import UsageError
from .plot import PlotTap, draw, plot_recorder

if TYPE_CHECKING:
    from oomwatch.exporters.plot import Recorder

    from ..analysis.analyzer import Analyzer
    from ..sources.nvml import NvmlSource
    from ..sources.replay import ReplaySource

__all__ = ["config_from_args", "main"]


def config_from_args(args: argparse.Namespace) -> DaemonConfig:
    """The daemon's config for what diagnose reads; the engine credentials are checked here, as `run` checks
    them at start (UsageError: one line, exit 2), before anything is opened."""
    cfg = DaemonConfig(
        interval=args.interval,
        engine_url=tuple(args.engine_url),
        replay=args.replay,
        engine_discovery=not args.no_engine_discovery,
        engine_auth=ClientAuth.from_args(args, "engine"),
    )
    cfg.engine_auth.check(cfg.engine_url)
    return cfg


def watch_live(cfg: DaemonConfig, src: NvmlSource | ReplaySource, seconds: float, rec: Recorder | None) -> Analyzer:
    """Watch for `seconds` with the daemon's sampler, serving nothing; its analysis, evaluated now."""
    sampler = wiring.build_sampler(cfg, src, PlotTap(rec) if rec else None)
    tty = sys.stderr.isatty()
    end = time.monotonic() + seconds
    sampler.start()
    try:
        while (left := end - time.monotonic()) > 0:
            if tty:
                done = 1 - left / seconds
                sys.stderr.write(f"\rwatching [{'#' * int(30 * done):<30}] {left:4.0f} s left ")
                sys.stderr.flush()
            time.sleep(min(0.5, left))
    finally:
        sampler.stop()
        if tty:
            sys.stderr.write("\r" + " " * 60 + "\r")
    found = sampler.discovery.found.values() if sampler.discovery is not None else ()
    for d in found:
        print(f"engine found: {d.source.url} (server group {d.group})", file=sys.stderr)
    a = sampler.analyzer
    if a.now is not None:
        a.evaluate(a.now)
    return a


def main(args: argparse.Namespace) -> int:
    from ..analysis.analyzer import Analyzer
    from ..report import render

    cfg = config_from_args(args)
    rec_plot = plot_recorder(args)
    src = wiring.open_source(cfg)
    try:
        if cfg.replay:
            from ..feed import feed
            from ..sources.replay import ReplaySource

            assert isinstance(src, ReplaySource)
            a = Analyzer(src.cards, engines_expected=bool(cfg.engine_url))
            feed(a, src.all(), on_sample=rec_plot.add if rec_plot else None)
            if src.status.error:
                raise UsageError(src.status.error)
        else:
            a = watch_live(cfg, src, args.duration, rec_plot)
    finally:
        src.close()
    draw(args, a, rec_plot)
    summary = a.summary()
    if args.json:
        print(json.dumps({"summary": summary}))
    else:
        print(render(a, summary))
    return 1 if any(f["severity"] in ("warning", "critical") for f in summary["findings"]) else 0
