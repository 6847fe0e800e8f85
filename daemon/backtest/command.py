"""`oomwatch backtest`: its flags and its command. Kept here, beside what it runs, so `daemon/cli.py`
only registers it; importing this module loads nothing heavy (the parser is built for every command).
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from ..errors import UsageError
from .options import DEFAULT_WORKERS, DEFAULT_WORKERS_MAX

EPILOG = (
    "Examples:\n  oomwatch backtest --prometheus http://prometheus:9090 --since 30d\n"
    "  oomwatch backtest --prometheus http://prometheus:9090 --selector 'Hostname=~\"gpu-.*\"' --shard 0/4 --json\n"
    "  oomwatch backtest --prometheus http://prometheus:9090 --since 30d --plot charts/\n"
    "See docs/fleet.md."
)
MAX_WORKERS = 64


def add_parser(sub: Any, formatter: type[argparse.HelpFormatter]) -> argparse.ArgumentParser:
    b: argparse.ArgumentParser = sub.add_parser(
        "backtest",
        help="the analysis over a fleet's Prometheus history",
        formatter_class=formatter,
        description="Read GPU memory series (dcgm-exporter, nvidia_gpu_exporter, oomwatch) from Prometheus, "
        "run the analysis\n`oomwatch replay` runs on each card, and report pages, leak warnings and suspected "
        "OOMs\n(which were paged, how far ahead). Exit 0 done, 1 when a card failed, 2 for bad input.",
        epilog=EPILOG,
    )
    b.add_argument("--prometheus", required=True, metavar="URL", help="the Prometheus (or compatible) API base URL")
    b.add_argument("--selector", default="", metavar="MATCHERS", help='label matchers narrowing the cards: job="dcgm"')
    b.add_argument("--since", metavar="DURATION", help="how far back from --end (default 7d)")
    b.add_argument("--start", metavar="TIME", help="unix seconds or RFC 3339 (instead of --since)")
    b.add_argument("--end", metavar="TIME", help="unix seconds or RFC 3339 (default now)")
    b.add_argument("--step", metavar="DURATION", help="query resolution (default 30s, a common scrape interval)")
    b.add_argument("--shard", metavar="K/N", help="only the cards whose node hashes to K of N (docs/fleet.md)")
    b.add_argument(
        "--workers",
        type=_workers,
        default=DEFAULT_WORKERS,
        metavar="N",
        help=f"worker processes, one card each at a time (default {DEFAULT_WORKERS}: the usable CPUs, "
        f"at most {DEFAULT_WORKERS_MAX})",
    )
    b.add_argument("--timeout", type=_timeout, default=30.0, metavar="SECONDS", help="per request (default 30)")
    b.add_argument("--json", action="store_true", help="JSON Lines: one per card, then a totals line")
    b.add_argument(
        "--plot",
        metavar="DIR",
        help="draw a chart of each card it paged on into DIR (created if missing), one PNG per card, "
        "as `replay --plot` draws a trace (needs matplotlib)",
    )
    return b


def _workers(v: str) -> int:
    try:
        n = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {v!r}") from None
    if not 1 <= n <= MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"must be from 1 to {MAX_WORKERS}: {v!r}")
    return n


def _timeout(v: str) -> float:
    try:
        f = float(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {v!r}") from None
    if not 0 < f <= 3600:
        raise argparse.ArgumentTypeError(f"must be from 0 to 3600 seconds: {v!r}")
    return f


def options(args: argparse.Namespace) -> Any:
    """The `Options` of a parsed command line (UsageError, one line, for a bad value)."""
    from ..commands.plot import plot_folder
    from ..sources.prometheus import PrometheusError, check_url
    from .options import Options, parse_step, time_range
    from .series import parse_shard

    try:
        url = check_url(args.prometheus)
    except PrometheusError as e:
        raise UsageError(f"--prometheus: {e}") from None
    start, end = time_range(args.since, args.start, args.end)
    try:
        shard = parse_shard(args.shard) if args.shard else None
    except ValueError as e:
        raise UsageError(str(e)) from None
    plot_dir = plot_folder(args.plot) if args.plot is not None else None
    return Options(url, start, end, parse_step(args.step), args.selector, shard, args.workers, args.timeout, plot_dir)


def run(args: argparse.Namespace, out: TextIO) -> int:
    from ..sources.prometheus import redact_url
    from .fleet import backtest
    from .report import json_card, json_totals, text_card, text_totals

    opts = options(args)
    emit = json_card if args.json else text_card
    totals = backtest(opts, lambda r: emit(r, out))
    if totals.cards == 0:
        where = redact_url(opts.url) + (f" matching {opts.selector}" if opts.selector else "")
        shard = f" in shard {opts.shard[0]}/{opts.shard[1]}" if opts.shard else ""
        msg = f"no GPU memory series (dcgm-exporter, nvidia_gpu_exporter, oomwatch) at {where}{shard} in the range"
        if not args.json:
            out.write(msg + "\n")
    if args.json:
        json_totals(totals, out)
    else:
        text_totals(totals, out, opts.step_s)
    return 1 if totals.cards_failed else 0
