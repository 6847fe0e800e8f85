"""`oomwatch`: the command line (parsing and dispatch). Bad input is one line on stderr and exit 2, never a
traceback; the errors a user can see are drawn in `oomwatch.errors`.

    oomwatch run        the daemon: sample, analyse, serve /metrics, push alerts    daemon/commands/run.py
    oomwatch replay     the whole analysis over a trace, as fast as it goes         daemon/commands/replay.py
    oomwatch diagnose   a one-shot plain-language report (live or over a trace)     daemon/commands/diagnose.py
    oomwatch record     write a gpu-memory-trace/1 from live NVML                   daemon/commands/record.py
    oomwatch engines    show what oomwatch reads from engine endpoints              daemon/commands/engines.py
    oomwatch examples   list the bundled real traces (`example:NAME` for a TRACE)   daemon/commands/examples.py
    oomwatch backtest   the analysis over a fleet's Prometheus history              daemon/backtest/command.py

This module only parses and dispatches: every flag is defined in `build_parser` (the `run` flags in one
block, each with `run_flag`), and the daemon's defaults come from `DaemonConfig` (daemon/config.py), never
from here. The daemon is built from its config in daemon/wiring.py.

Every `run` flag can also be set as `OOMWATCH_<FLAG>`. The environment is read after parsing, never while
the parser is built (so a bad variable cannot break `--help`), and each value goes through the very check
its flag does; a flag given on the command line wins over its variable.
"""

from __future__ import annotations

from .threads import pin_blas_threads

pin_blas_threads()  # before anything below loads numpy (daemon/threads.py says why)

import argparse
import contextlib
import dataclasses
import importlib
import logging
import math
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from . import __version__
from .config import DEFAULT_LISTEN, MAX_INTERVAL_S, MAX_SECONDS, MIN_INTERVAL_S, DaemonConfig
from .errors import OomwatchError, UsageError
from .errors import one_line as _one_line
from .errors import show as _show

__all__ = [
    "COMMANDS",
    "ENV_PREFIX",
    "RUN_DEFAULTS",
    "UsageError",
    "apply_env",
    "build_parser",
    "env_name",
    "main",
    "subcommands",
]

ENV_PREFIX = "OOMWATCH_"


def _run_defaults() -> dict[str, object]:
    """`run`'s flags without a value on the command line or in the environment: DaemonConfig's defaults
    (the one source), by field name (a tuple as a list); `--no-engine-discovery` is `engine_discovery`
    negated and `--duration` is no config. A flag not named here defaults to off, an empty list or None."""
    out: dict[str, object] = {
        f.name: list(f.default) if isinstance(f.default, tuple) else f.default
        for f in dataclasses.fields(DaemonConfig)
        if f.init and f.default is not dataclasses.MISSING
    }
    out["no_engine_discovery"] = not out.pop("engine_discovery")
    out["duration"] = None
    return out


RUN_DEFAULTS = _run_defaults()
PID_MAX = 4194304  # Linux's PID_MAX_LIMIT: no process ID is larger
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def env_name(dest: str) -> str:
    """The environment variable of a `run` flag: `engine_url` -> `OOMWATCH_ENGINE_URL`."""
    return ENV_PREFIX + dest.upper()


# ---- value checks: one per kind of value, shared by flags and OOMWATCH_* variables ------------------------
def _number(v: str) -> float:
    try:
        f = float(v)
    except (ValueError, TypeError):
        raise argparse.ArgumentTypeError(f"not a number: {_show(v)}") from None
    if not math.isfinite(f):
        raise argparse.ArgumentTypeError(f"must be a finite number: {_show(v)}")
    return f


def _positive(v: str) -> float:
    f = _number(v)
    if f <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0: {_show(v)}")
    return f


def _seconds(v: str) -> float:
    f = _positive(v)
    if f > MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_SECONDS:.0f} seconds: {_show(v)}")
    return f


def _interval(v: str) -> float:
    f = _positive(v)
    if not MIN_INTERVAL_S <= f <= MAX_INTERVAL_S:
        raise argparse.ArgumentTypeError(f"must be from {MIN_INTERVAL_S} to {MAX_INTERVAL_S:.0f} seconds: {_show(v)}")
    return f


def _listen(v: str) -> str:
    host, sep, port = v.rpartition(":")
    if not sep or not re.fullmatch(r"[0-9]{1,5}", port) or not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"must be HOST:PORT with a port from 1 to 65535: {_show(v)}")
    h = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if h and not re.fullmatch(r"[A-Za-z0-9._:%-]{1,253}", h):
        raise argparse.ArgumentTypeError(f"not a host name or address: {_show(host)}")
    return v


def _pid(v: str) -> int:
    try:
        n = int(v)
    except (ValueError, TypeError):
        raise argparse.ArgumentTypeError(f"not a process ID: {_show(v)}") from None
    if not 1 <= n <= PID_MAX:
        raise argparse.ArgumentTypeError(f"not a process ID (1 to {PID_MAX}): {_show(v)}")
    return n


def _regex(v: str) -> str:
    try:
        re.compile(v)
    except (re.error, RecursionError, OverflowError, ValueError) as e:
        raise argparse.ArgumentTypeError(f"not a regular expression ({_one_line(str(e))}): {_show(v)}") from None
    return v


def _http_url(v: str) -> str:
    from urllib.parse import urlsplit

    try:
        u = urlsplit(v)
        ok = u.scheme in ("http", "https") and bool(u.hostname) and (u.port is None or u.port > 0)
    except ValueError:
        ok = False
    if not ok:
        raise argparse.ArgumentTypeError(f"not an http(s)://HOST[:PORT] URL: {_show(v)}")
    return v


def _engine_url(v: str) -> str:
    import httpx

    from .sources.engines import metrics_url

    try:
        httpx.URL(metrics_url(v))  # what the scrape will ask httpx for
    except (ValueError, httpx.InvalidURL) as e:  # EngineUrlError, urllib's or httpx's own (a control character)
        msg = str(e) if isinstance(e, OomwatchError) else f"not an http(s) URL ({_one_line(str(e))}): {_show(v)}"
        raise argparse.ArgumentTypeError(msg) from None
    return v


def _auth_user(v: str) -> str:
    if not v or ":" in v or not v.isprintable():
        raise argparse.ArgumentTypeError(f"not a basic auth user name (printable, no ':'): {_show(v)}")
    return v


def _path(v: str) -> str:
    if not v:
        raise argparse.ArgumentTypeError("must not be empty")
    return v


def _prometheus_url(v: str) -> str:
    """A Prometheus API base URL; the message shows it without its credentials."""
    from .sources.prometheus import PrometheusError, check_url

    try:
        return check_url(v)
    except PrometheusError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


MAX_CARDS = 100_000  # a typo beyond this: each card is up to ~2 MiB of analysis history in one process


def _cards(v: str) -> int:
    try:
        n = int(v)
    except (ValueError, TypeError):
        raise argparse.ArgumentTypeError(f"not a whole number: {_show(v)}") from None
    if not 1 <= n <= MAX_CARDS:
        raise argparse.ArgumentTypeError(f"must be from 1 to {MAX_CARDS}: {_show(v)}")
    return n


def _shard(v: str) -> tuple[int, int]:
    from .backtest.series import parse_shard

    try:
        return parse_shard(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be K/N with 0 <= K < N (e.g. 0/4): {_show(v)}") from None


def credential_flags(add: Callable[..., object], kind: str, whom: str) -> None:
    """The four `--<kind>-*` credential flags (daemon/credentials.py; files, never values: those show in
    `ps`), defined once for every command that calls out: `run` (Alertmanager and engines), `diagnose` and
    `engines` (engines). `add` is the parser's add_argument (`run`'s own adds its OOMWATCH_ variable);
    `ClientAuth.from_args` reads them back as one."""
    add(
        f"--{kind}-bearer-token-file",
        type=_path,
        metavar="FILE",
        help=f"send `Authorization: Bearer` with the token in FILE to {whom} (read at every call)",
    )
    add(
        f"--{kind}-basic-auth-user",
        type=_auth_user,
        metavar="USER",
        help=f"basic auth user for {whom} (default: the URL's own USER@)",
    )
    add(
        f"--{kind}-basic-auth-password-file",
        type=_path,
        metavar="FILE",
        help=f"basic auth password for {whom}, in FILE (read at every call)",
    )
    add(
        f"--{kind}-ca-file",
        type=_path,
        metavar="FILE",
        help=f"PEM CA bundle that the certificate of {whom} must chain to (instead of the system's)",
    )


# ---- the parser ---------------------------------------------------------------------------------------
RECORD_INTERVAL_S = 0.05  # `record`'s own period: the 20 Hz of the bundled traces (the daemon samples at 10 Hz)
TRACE_HELP = "a gpu-memory-trace/1 file, or example:NAME for a bundled one (see `oomwatch examples`)"


def build_parser() -> argparse.ArgumentParser:
    """The whole command line. Builds without reading the environment (see `apply_env`)."""
    raw = argparse.RawDescriptionHelpFormatter
    p = _Parser(
        prog="oomwatch",
        formatter_class=raw,
        description="Watch GPU memory next to an LLM inference server and page before CUDA runs out of memory.",
        epilog="Examples (the bundled real traces need no GPU):\n"
        "  oomwatch examples                                    list the bundled traces\n"
        "  oomwatch run --replay example:staircase --speed 4    the daemon on a bundled trace\n"
        "  oomwatch replay example:staircase --json             the whole analysis, as JSON Lines\n"
        "  oomwatch diagnose --replay example:stray             a plain-language report\n"
        "  oomwatch diagnose --duration 60 --engine-url http://localhost:8000\n\n"
        "Every `run` flag can also be set as OOMWATCH_<FLAG> (e.g. OOMWATCH_LISTEN=0.0.0.0:9846);\n"
        "a flag on the command line wins.",
    )
    p.add_argument("--version", action="version", version=f"oomwatch {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log debug detail")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=_Parser)

    r = sub.add_parser(
        "run",
        help="run the daemon (NVML, or --replay a trace)",
        formatter_class=raw,
        description="Sample GPU memory, analyse it, serve Prometheus metrics on --listen and push "
        "alerts to Alertmanager.\nWithout a GPU, --replay plays a recorded trace. Each flag can "
        "also be set as OOMWATCH_<FLAG>\n(shown in brackets); a flag on the command line wins.",
        epilog="Examples:\n  oomwatch run --replay example:staircase --duration 70\n"
        "  oomwatch run --listen 0.0.0.0:9846 --engine-url http://localhost:8000 "
        "--alertmanager-url http://am:9093",
    )

    def run_flag(*names: str, help: str, **kw: Any) -> None:  # noqa: A002 - argparse's own name
        dest = kw.get("dest") or names[-1].lstrip("-").replace("-", "_")
        r.add_argument(*names, default=None, help=f"{help} [{env_name(dest)}]", **kw)

    run_flag(
        "--listen",
        type=_listen,
        metavar="HOST:PORT",
        help=f"address for /metrics, / and /api/v1/status (default {DEFAULT_LISTEN})",
    )
    run_flag(
        "--interval",
        type=_interval,
        metavar="SECONDS",
        help=f"NVML sample period (default {DaemonConfig.interval:g}; from {MIN_INTERVAL_S} to {MAX_INTERVAL_S:.0f})",
    )
    run_flag(
        "--engine-url",
        action="append",
        type=_engine_url,
        metavar="URL",
        help="inference engine base or /metrics URL (repeatable; a variable takes a comma-separated list); "
        "kind auto-detected",
    )
    run_flag(
        "--alertmanager-url",
        action="append",
        type=_http_url,
        metavar="URL",
        help="Alertmanager to push alerts to (repeatable, for an HA pair)",
    )
    run_flag("--record", type=_path, metavar="PATH", help="also write every sample to a trace")
    run_flag("--replay", type=_path, metavar="TRACE", help=f"play a trace instead of NVML: {TRACE_HELP}")
    run_flag("--speed", type=_positive, metavar="X", help="replay speed factor (default 1)")
    run_flag(
        "--loop",
        action="store_true",
        help="restart the replay when it ends (variable: 1/true/yes/on or 0/false/no/off)",
    )
    run_flag(
        "--server-pid",
        type=_pid,
        metavar="PID",
        help="PID of the inference server (its tree is 'server'); default: found from --engine-url",
    )
    run_flag(
        "--server-cmdline",
        type=_regex,
        metavar="REGEX",
        help="find the server by a regular expression on command lines",
    )
    run_flag(
        "--no-engine-discovery",
        action="store_true",
        help="do not probe the ports the GPU server processes listen on for an engine's /metrics",
    )
    run_flag(
        "--flight-dir", type=_path, metavar="DIR", help="write the last 15 minutes as a trace here when an alert fires"
    )
    run_flag(
        "--state-dir",
        type=_path,
        metavar="DIR",
        help="keep the analysis history (15 min, 6 h, 7 days per "
        "card) here across restarts: written every minute and on SIGTERM, one file per GPU UUID",
    )
    run_flag(
        "--external-url",
        type=_http_url,
        metavar="URL",
        help="URL of this oomwatch as others reach it (generatorURL of pushed alerts)",
    )
    run_flag(
        "--duration",
        type=_seconds,
        metavar="SECONDS",
        help="stop after this many seconds (default: run until SIGTERM or Ctrl-C)",
    )
    # The central mode (daemon/central/, docs/fleet.md): the fleet's GPU memory from Prometheus, not NVML.
    run_flag(
        "--prometheus",
        type=_prometheus_url,
        metavar="URL",
        help="central mode: evaluate every card whose GPU memory series (dcgm-exporter, nvidia_gpu_exporter, "
        "oomwatch) this Prometheus holds, instead of NVML here",
    )
    run_flag(
        "--selector",
        metavar="MATCHERS",
        help='with --prometheus: label matchers narrowing the cards (job="dcgm", Hostname=~"gpu-.*")',
    )
    run_flag(
        "--scrape-interval",
        type=_interval,
        metavar="SECONDS",
        help="with --prometheus: the exporters' scrape interval, read at (default: found from the samples' spacing)",
    )
    run_flag(
        "--max-cards",
        type=_cards,
        metavar="N",
        help=f"with --prometheus: cards evaluated at most; more are counted, not evaluated (default "
        f"{DaemonConfig.max_cards}; see docs/fleet.md)",
    )
    run_flag(
        "--shard",
        type=_shard,
        metavar="K/N",
        help="with --prometheus: only the cards whose node hashes to K of N, as `oomwatch backtest --shard` splits "
        "them: N centrals, K = 0 .. N-1, share a fleet (docs/fleet.md)",
    )
    # Credentials from files (never as values: those show in `ps`), checked at start (daemon/credentials.py),
    # and TLS and basic auth for oomwatch's own endpoints (exporters/webconfig.py); see docs/security.md.
    for kind, whom in (("alertmanager", "each --alertmanager-url"), ("engine", "each --engine-url")):
        credential_flags(run_flag, kind, whom)
    run_flag(
        "--web-config-file",
        type=_path,
        metavar="FILE",
        help="TLS and basic auth for /metrics, the status page and /api (Prometheus exporter-toolkit web "
        "config; re-read on SIGHUP)",
    )

    rp = sub.add_parser(
        "replay",
        help="analyse a trace as fast as possible",
        formatter_class=raw,
        description="Run the whole analysis over a gpu-memory-trace/1 file and print alert "
        "transitions and a summary\n(JSON Lines with --json). A trace cut in the middle of its last "
        "line is analysed up to the cut, with a warning.",
        epilog="Examples:\n  oomwatch replay example:staircase\n"
        "  oomwatch replay example:tp_imbalance --json\n"
        "  oomwatch replay my-recording.jsonl --plot chart.png",
    )
    rp.add_argument("trace", metavar="TRACE", help=TRACE_HELP)
    rp.add_argument("--json", action="store_true", help="JSON Lines: one per transition, then a summary line")
    rp.add_argument("--plot", metavar="FILE.png", help="also draw one annotated chart per card (needs matplotlib)")

    d = sub.add_parser(
        "diagnose",
        help="one-shot plain-language report",
        formatter_class=raw,
        description="Watch live NVML for --duration seconds (or read --replay TRACE) and say what "
        "each card is doing,\nwhat is wrong, and what to change. Exit 0 healthy, 1 when a warning "
        "or worse was found, 2 for bad input.",
        epilog="Examples:\n  oomwatch diagnose --replay example:stray\n"
        "  oomwatch diagnose --duration 60 --engine-url http://localhost:8000 --json",
    )
    d.add_argument(
        "--duration",
        type=_seconds,
        default=30.0,
        metavar="SECONDS",
        help="seconds to watch live NVML (default 30; ignored with --replay)",
    )
    d.add_argument("--replay", type=_path, metavar="TRACE", help=f"analyse a trace instead of live NVML: {TRACE_HELP}")
    d.add_argument(
        "--engine-url",
        action="append",
        type=_engine_url,
        default=[],
        metavar="URL",
        help="inference engine base or /metrics URL, scraped while watching live (repeatable): its KV "
        "cache and budget sharpen the verdict",
    )
    d.add_argument(
        "--interval",
        type=_interval,
        default=DaemonConfig.interval,
        metavar="SECONDS",
        help=f"live NVML sample period (default {DaemonConfig.interval:g})",
    )
    d.add_argument(
        "--no-engine-discovery",
        action="store_true",
        help="do not probe the ports the GPU server processes listen on for an engine's /metrics",
    )
    credential_flags(d.add_argument, "engine", "each --engine-url")
    d.add_argument("--json", action="store_true", help="print the summary as one JSON object instead of prose")
    d.add_argument("--plot", metavar="FILE.png", help="also draw one annotated chart per card (needs matplotlib)")

    rc = sub.add_parser(
        "record",
        help="write a trace from live NVML",
        formatter_class=raw,
        description="Sample NVML every --interval and write gpu-memory-trace/1 to -o, with the GPU "
        "holders' process tree,\ntheir resident memory and allocator-probe readings, as `run --record` "
        "writes them (replay it later\nwith `oomwatch replay`, `diagnose --replay` or `run --replay`).",
        epilog="Example:\n  oomwatch record -o incident.jsonl --duration 600",
    )
    rc.add_argument(
        "-o",
        "--output",
        required=True,
        type=_path,
        metavar="TRACE",
        help="the trace file to write (replaced if it exists)",
    )
    rc.add_argument(
        "--duration",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="stop after this many seconds (default: until Ctrl-C or SIGTERM)",
    )
    rc.add_argument(
        "--interval",
        type=_interval,
        default=RECORD_INTERVAL_S,
        metavar="SECONDS",
        help=f"sample period (default {RECORD_INTERVAL_S:g}, the 20 Hz of the bundled traces)",
    )

    e = sub.add_parser(
        "engines",
        help="show what oomwatch reads from engine endpoints",
        formatter_class=raw,
        description="Scrape each engine endpoint once and show what oomwatch reads from it: the "
        "engine kind,\nmodel, KV-cache use, running and waiting requests, preemptions and cache "
        "config. Exit 1 when one is down.",
        epilog="Example:\n  oomwatch engines http://localhost:8000 http://localhost:30000/metrics",
    )
    e.add_argument(
        "urls", nargs="+", type=_engine_url, metavar="URL", help="an engine's base URL or its full /metrics URL"
    )
    e.add_argument("--json", action="store_true", help="one JSON object per endpoint instead of prose")
    e.add_argument(
        "--timeout",
        type=_seconds,
        default=3.0,
        metavar="SECONDS",
        help="the whole command's time limit: every endpoint is read at once within it (default 3)",
    )
    credential_flags(e.add_argument, "engine", "each URL")

    from .backtest.command import add_parser as add_backtest

    add_backtest(sub, raw)

    sub.add_parser(
        "examples",
        help="list the bundled real traces",
        formatter_class=raw,
        description="List the real traces shipped with oomwatch. Name one as example:NAME wherever a "
        "TRACE is read,\nfrom any directory: `oomwatch replay example:staircase`.",
    )
    return p


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parser of each subcommand, by name (`run`, `replay`, ...)."""
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            return dict(a.choices)
    return {}


def _convert(a: argparse.Action, raw: str) -> object:
    """A variable's value through its flag's own check (what argparse would do with it on the command line)."""
    return a.type(raw) if callable(a.type) else raw


def apply_env(
    args: argparse.Namespace,
    environ: Mapping[str, str] = os.environ,
    parser: argparse.ArgumentParser | None = None,
) -> argparse.Namespace:
    """Fill `run`'s unset flags from OOMWATCH_<FLAG>, through the flag's own check, then from defaults.

    An empty variable counts as unset (compose files often carry `OOMWATCH_RECORD=`).
    """
    if getattr(args, "cmd", None) != "run":
        return args
    run = subcommands(parser or build_parser())["run"]
    for a in run._actions:
        if isinstance(a, argparse._HelpAction) or getattr(args, a.dest, None) is not None:
            continue
        name = env_name(a.dest)
        raw = environ.get(name, "")
        if raw.strip() == "":
            default: bool | list[str] | None = (
                False if a.nargs == 0 else [] if isinstance(a, argparse._AppendAction) else None
            )
            setattr(args, a.dest, RUN_DEFAULTS.get(a.dest, default))
            continue
        try:
            if a.nargs == 0:  # a switch
                if raw.strip().lower() not in _TRUE + _FALSE:
                    raise argparse.ArgumentTypeError(f"must be one of {'/'.join(_TRUE + _FALSE)}: {_show(raw)}")
                value: object = raw.strip().lower() in _TRUE
            elif isinstance(a, argparse._AppendAction):
                value = [_convert(a, x) for x in raw.replace(",", " ").split()]
            else:
                value = _convert(a, raw)
        except (argparse.ArgumentTypeError, ValueError, TypeError) as e:
            raise UsageError(f"oomwatch run: {name}: {e}") from None
        setattr(args, a.dest, value)
    return args


# ---- dispatch ---------------------------------------------------------------------------------------
def _command(module: str) -> Callable[[argparse.Namespace], int]:
    """A subcommand's `main`, imported when it runs (so `--help` and a bad flag load none of them)."""

    def cmd(args: argparse.Namespace) -> int:
        main: Callable[[argparse.Namespace], int] = importlib.import_module(f"oomwatch.commands.{module}").main
        return main(args)

    cmd.__name__ = cmd.__qualname__ = f"oomwatch_{module}"
    return cmd


def _backtest(args: argparse.Namespace) -> int:
    from .backtest.command import run

    return run(args, sys.stdout)


#: Each subcommand and what runs it: a module of daemon/commands, or daemon/backtest for `backtest`.
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": _command("run"),
    "replay": _command("replay"),
    "diagnose": _command("diagnose"),
    "record": _command("record"),
    "engines": _command("engines"),
    "examples": _command("examples"),
    "backtest": _backtest,
}


def _setup_logging(verbose: bool) -> None:
    """Our own lines at INFO (the start-up line, a replay's end), third-party chatter at WARNING."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("oomwatch").setLevel(logging.DEBUG if verbose else logging.INFO)
    # A skipped cycle (a slow call, no pile-up) is by design; apscheduler would warn at 10 Hz.
    logging.getLogger("apscheduler").setLevel(logging.ERROR)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        _setup_logging(args.verbose)
        if not args.cmd:
            parser.print_help()
            raise UsageError(f"a COMMAND is required: {', '.join(COMMANDS)}")
        apply_env(args, os.environ, parser)
        return COMMANDS[args.cmd](args)
    except OomwatchError as e:
        msg = _one_line(str(e))
        print(msg if msg.startswith("oomwatch") else f"oomwatch: {msg}", file=sys.stderr)
        return e.exit_status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `oomwatch replay ... | head`: the reader left; say nothing more
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps the interpreter's final flush quiet
        return 1


if __name__ == "__main__":
    sys.exit(main())
