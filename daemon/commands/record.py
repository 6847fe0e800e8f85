"""`oomwatch record -o TRACE`: a gpu-memory-trace/1 from live NVML, written by the daemon's own wiring
(daemon/wiring.py): the sampler polls NVML every --interval, the process scanner describes the holders and
their server tree and reads their resident memory, the allocator probes' files are read, and the trace
recorder writes all of it, exactly as `oomwatch run --record` does. Nothing is served or pushed."""

from __future__ import annotations

import argparse
import logging
import threading

from .. import wiring
from ..config import DaemonConfig

__all__ = ["config_from_args", "main"]

log = logging.getLogger("oomwatch")


def config_from_args(args: argparse.Namespace) -> DaemonConfig:
    # no engine scrapes (a trace carries no engine lines) and so no discovery of them either
    return DaemonConfig(interval=args.interval, record=args.output, engine_discovery=False)


def main(args: argparse.Namespace) -> int:
    from ..run import on_signals

    cfg = config_from_args(args)
    src = wiring.open_source(cfg)  # NvmlUnavailable: one line
    try:
        sampler = wiring.build_sampler(cfg, src)  # an unwritable -o: one line
        stop = threading.Event()
        on_signals(stop)
        sampler.start()
        try:
            wiring.watch(stop, args.duration)
        finally:
            sampler.stop()  # closes the recorder
    finally:
        src.close()
    rec = sampler.recorder
    log.info("wrote %d samples of %d GPU(s) to %s", sampler.analyzer.samples, len(src.cards), args.output)
    return 0 if rec is not None and rec.status.up else 1
