"""`oomwatch`: the command line. Bad input is one line on stderr and exit 2, never a traceback.

    oomwatch run        the daemon: sample, analyse, serve /metrics, push alerts
    oomwatch replay     the whole analysis over a trace, as fast as it goes
    oomwatch diagnose   a one-shot plain-language report (live or over a trace)
    oomwatch record     write a gpu-memory-trace/1 from live NVML
    oomwatch engines    show what oomwatch reads from engine endpoints
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time

from . import __version__
from .config import DEFAULT_LISTEN, AnalysisConfig, DaemonConfig, env_default

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "examples")


class UsageError(Exception):
    """Bad input: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{self.prog}: {message}")


def _env(name, default, conv=str):
    v = env_default(name, None)
    if v is None:
        return default
    try:
        return conv(v)
    except ValueError:
        raise UsageError(f"OOMWATCH_{name.upper()}={v!r} is not a valid value") from None


def _env_list(name):
    v = env_default(name, None)
    return [x for x in (v or "").replace(",", " ").split() if x]


def _positive(v):
    try:
        f = float(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {v!r}") from None
    if f <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0: {v!r}")
    return f


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="oomwatch", description="Watch GPU memory next to an LLM inference server and page before "
                "CUDA runs out of memory.", formatter_class=argparse.RawDescriptionHelpFormatter,
                epilog="Examples:\n  oomwatch run --replay " + "examples/staircase.jsonl --speed 4\n"
                "  oomwatch replay examples/staircase.jsonl --json\n  oomwatch diagnose --duration 60 "
                "--engine-url http://localhost:8000\n\nEvery `run` flag can also be set as OOMWATCH_<FLAG> "
                "(e.g. OOMWATCH_LISTEN=0.0.0.0:9846).")
    p.add_argument("--version", action="version", version=f"oomwatch {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log debug detail")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=_Parser)

    r = sub.add_parser("run", help="run the daemon (NVML, or --replay a trace)",
                       description="Sample GPU memory, analyse it, serve Prometheus metrics on --listen and push "
                       "alerts to Alertmanager. Without a GPU, --replay plays a recorded trace.")
    r.add_argument("--listen", default=_env("listen", DEFAULT_LISTEN),
                   help=f"address:port for /metrics and / (default {DEFAULT_LISTEN})")
    r.add_argument("--interval", type=_positive, default=_env("interval", 0.1, float),
                   help="NVML sample period in seconds (default 0.1)")
    r.add_argument("--engine-url", action="append", default=_env_list("engine_url"), metavar="URL",
                   help="inference engine base or /metrics URL (repeatable); kind auto-detected")
    r.add_argument("--alertmanager-url", action="append", default=_env_list("alertmanager_url"), metavar="URL",
                   help="Alertmanager to push alerts to (repeatable, for an HA pair)")
    r.add_argument("--record", default=_env("record", None), metavar="PATH", help="also write every sample to a trace")
    r.add_argument("--replay", default=_env("replay", None), metavar="TRACE", help="play a trace instead of NVML")
    r.add_argument("--speed", type=_positive, default=_env("speed", 1.0, float), help="replay speed factor (default 1)")
    r.add_argument("--loop", action="store_true", default=_env("loop", "") not in ("", "0", "false"),
                   help="restart the replay when it ends")
    r.add_argument("--server-pid", type=int, default=_env("server_pid", None, int),
                   help="PID of the inference server (its tree is 'server'); default: found from --engine-url")
    r.add_argument("--server-cmdline", default=_env("server_cmdline", None), metavar="REGEX",
                   help="find the server by a regular expression on command lines")
    r.add_argument("--flight-dir", default=_env("flight_dir", None), metavar="DIR",
                   help="write the last 15 minutes as a trace here when an alert fires")
    r.add_argument("--external-url", default=_env("external_url", None), metavar="URL",
                   help="URL of this oomwatch as others reach it (generatorURL of pushed alerts)")
    r.add_argument("--duration", type=_positive, default=None, help="stop after this many seconds")

    rp = sub.add_parser("replay", help="analyse a trace as fast as possible",
                        description="Run the whole analysis over a gpu-memory-trace/1 file and print alert "
                        "transitions and a summary (JSON Lines with --json).")
    rp.add_argument("trace")
    rp.add_argument("--json", action="store_true", help="JSON Lines: one per transition, then a summary line")
    rp.add_argument("--plot", metavar="FILE.png", help="also draw one annotated chart per card (needs matplotlib)")

    d = sub.add_parser("diagnose", help="one-shot plain-language report",
                       description="Watch live NVML for --duration seconds (or read --replay TRACE) and say what "
                       "each card is doing, what is wrong, and what to change. Exit 0 healthy, 1 when a warning "
                       "or worse was found, 2 for bad input.")
    d.add_argument("--duration", type=_positive, default=30.0, help="seconds to watch live (default 30)")
    d.add_argument("--replay", metavar="TRACE", help="analyse a trace instead of live NVML")
    d.add_argument("--engine-url", action="append", default=[], metavar="URL")
    d.add_argument("--interval", type=_positive, default=0.1)
    d.add_argument("--json", action="store_true")
    d.add_argument("--plot", metavar="FILE.png", help="also draw one annotated chart per card (needs matplotlib)")

    rc = sub.add_parser("record", help="write a trace from live NVML",
                        description="Sample NVML every --interval and write gpu-memory-trace/1 to -o.")
    rc.add_argument("-o", "--output", required=True, metavar="TRACE")
    rc.add_argument("--duration", type=_positive, default=None, help="seconds (default: until Ctrl-C)")
    rc.add_argument("--interval", type=_positive, default=0.05)

    e = sub.add_parser("engines", help="show what oomwatch reads from engine endpoints")
    e.add_argument("urls", nargs="+", metavar="URL")
    e.add_argument("--json", action="store_true")
    e.add_argument("--timeout", type=_positive, default=3.0)
    return p


# ---- commands -------------------------------------------------------------------------------------
def _open_source(args):
    if getattr(args, "replay", None):
        from .sources.replay import ReplaySource

        return ReplaySource(args.replay, getattr(args, "speed", 1.0), getattr(args, "loop", False))
    from .sources.nvml import NvmlSource

    src = NvmlSource()
    src.open()
    return src


def cmd_replay(args) -> int:
    from .feed import replay_trace
    from .report import render

    out = sys.stdout
    rec_plot = _plot_recorder(args)

    def show(tr):
        al = tr.alert
        if args.json:
            out.write(json.dumps({"t": round(tr.t, 3), "alert": al.alertname, "state": tr.state,
                                  "labels": al.all_labels(), "summary": al.summary,
                                  "eta_seconds": None if al.eta_seconds is None else round(al.eta_seconds, 1)})
                      + "\n")
        else:
            out.write(f"{tr.t:9.2f}s  {tr.state.upper():8s} {al.alertname:20s} {al.summary}\n")

    try:
        res = replay_trace(args.trace, show, rec_plot.add if rec_plot else None)
    except Exception as e:
        from .trace import TraceError

        if isinstance(e, TraceError):
            raise UsageError(str(e)) from None
        raise
    a, summary = res.analyzer, res.summary
    _draw(args, a, rec_plot)
    if args.json:
        out.write(json.dumps({"summary": summary}) + "\n")
    else:
        out.write(f"\n{summary['samples']} samples over {summary['seconds']:.1f} s\n")
        out.write(render(a, summary) + "\n")
    return 0


def _plot_recorder(args):
    """Check --plot up front (matplotlib present, file writable) so a long run does not fail at its end."""
    if not getattr(args, "plot", None):
        return None
    from exporters.plot import PlotUnavailable, Recorder

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(str(PlotUnavailable("--plot needs matplotlib: pip install 'oomwatch[plot]'"))) from None
    d = os.path.dirname(os.path.abspath(args.plot))
    if not os.path.isdir(d) or not os.access(d, os.W_OK):
        raise UsageError(f"cannot write {args.plot}: folder missing or not writable")
    return Recorder()


def _draw(args, a, rec_plot) -> None:
    if rec_plot is None:
        return
    from exporters.plot import plot

    plot(args.plot, a, rec_plot, a.transitions)
    print(f"chart written to {args.plot}", file=sys.stderr)


def cmd_diagnose(args) -> int:
    from .analysis.analyzer import Analyzer
    from .model import Sample
    from .report import render
    from .sources.engines import EngineSource

    engines = [EngineSource(u) for u in args.engine_url]
    src = _open_source(args)
    a = Analyzer(src.gpus, engines_expected=bool(engines))
    rec_plot = _plot_recorder(args)
    if args.replay:
        from .feed import feed

        feed(a, src.all(), on_sample=rec_plot.add if rec_plot else None)
        if src.status.error:
            raise UsageError(src.status.error)
    else:
        from .sources.processes import ProcessScanner

        scanner = ProcessScanner()
        end = time.monotonic() + args.duration
        next_engine = 0.0
        tty = sys.stderr.isatty()
        while True:
            now = time.monotonic()
            if now >= end:
                break
            s = src.read()
            a.set_source(src.status)
            for p in scanner.scan({pid for g in s.gpus for pid, _ in g.procs}):
                a.add_proc(p)
            if engines and now >= next_engine:
                a.set_engines([e.scrape() for e in engines])
                for e in engines:
                    a.set_source(e.status)
                next_engine = now + 5.0
            if rec_plot:
                rec_plot.add(s)
            a.add_sample(s)
            left = end - now
            if tty:
                done = 1 - left / args.duration
                sys.stderr.write(f"\rwatching [{'#' * int(30 * done):<30}] {left:4.0f} s left ")
                sys.stderr.flush()
            time.sleep(args.interval)
        if tty:
            sys.stderr.write("\r" + " " * 60 + "\r")
        if a.now is not None:
            a.evaluate(a.now)
    _draw(args, a, rec_plot)
    summary = a.summary()
    if args.json:
        print(json.dumps({"summary": summary}))
    else:
        print(render(a, summary))
    return 1 if any(f["severity"] in ("warning", "critical") for f in summary["findings"]) else 0


def cmd_record(args) -> int:
    from exporters.recorder import TraceRecorder

    from .sources.nvml import NvmlSource
    from .sources.processes import ProcessScanner

    src = NvmlSource()
    src.open()
    try:
        rec = TraceRecorder(args.output, src.gpus, 1.0 / args.interval, src.driver)
    except OSError as e:
        raise UsageError(f"cannot write {args.output}: {e.strerror or e}") from None
    scanner = ProcessScanner()
    stop = threading.Event()
    _on_signals(stop)
    t0 = time.monotonic()
    n = 0
    try:
        while not stop.is_set():
            now = time.monotonic()
            if args.duration and now - t0 >= args.duration:
                break
            s = src.read(t=now - t0)
            rec.sample(s)
            n += 1
            for p in scanner.scan({pid for g in s.gpus for pid, _ in g.procs}):
                if any(p.pid == pid for g in s.gpus for pid, _ in g.procs):
                    rec.proc(s.t, p)
            stop.wait(max(0.0, args.interval - (time.monotonic() - now)))
    finally:
        rec.close()
        src.close()
    print(f"wrote {n} samples of {len(src.gpus)} GPU(s) to {args.output}", file=sys.stderr)
    return 0 if rec.status.up else 1


def cmd_engines(args) -> int:
    from dataclasses import asdict

    from .sources.engines import EngineSource

    srcs = [EngineSource(u, timeout_s=args.timeout, retries=0) for u in args.urls]
    bad = 0
    for s in srcs:
        snap = s.scrape()
        s.close()
        bad += not snap.up
        if args.json:
            d = asdict(snap)
            print(json.dumps(d))
            continue
        if not snap.up:
            print(f"{snap.url}: DOWN: {snap.error}")
            continue
        print(f"{snap.url}: {snap.kind}" + (f", model {snap.model}" if snap.model else ""))
        for e in snap.engines or (snap,):
            tag = f"  engine {e.engine}: " if snap.engines else "  "
            kv = "n/a" if e.kv_cache_usage_ratio is None else f"{e.kv_cache_usage_ratio:.1%}"
            print(f"{tag}KV cache used {kv}; requests running {_n(e.requests_running)}, waiting "
                  f"{_n(e.requests_waiting)}; preemptions {_n(e.preemptions_total)}; prefix-cache hit ratio "
                  f"{'n/a' if e.prefix_cache_hit_ratio is None else f'{e.prefix_cache_hit_ratio:.1%}'}")
        if snap.gpu_memory_utilization is not None or snap.num_gpu_blocks is not None:
            print(f"  cache config: gpu_memory_utilization {snap.gpu_memory_utilization}, num_gpu_blocks "
                  f"{snap.num_gpu_blocks}, block_size {snap.block_size}, cache_dtype {snap.cache_dtype}, "
                  f"prefix caching {snap.prefix_caching}, kv_cache_memory_bytes {snap.kv_cache_memory_bytes}")
    return 1 if bad else 0


def _n(v):
    return "n/a" if v is None else f"{v:.0f}"


def _on_signals(stop: threading.Event):
    def handler(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def cmd_run(args) -> int:
    from exporters.metrics import serve

    from .sampler import Sampler
    from .sources.engines import EngineSource
    from .sources.processes import ProcessScanner, listening_pid, matching_pids

    cfg = DaemonConfig(
        listen=args.listen, interval=args.interval, engine_url=tuple(args.engine_url),
        alertmanager_url=tuple(args.alertmanager_url), record=args.record, replay=args.replay, speed=args.speed,
        loop=args.loop, server_pid=args.server_pid, server_cmdline=args.server_cmdline, flight_dir=args.flight_dir,
        external_url=args.external_url, analysis=AnalysisConfig(),
    )
    if ":" not in cfg.listen or not cfg.listen.rpartition(":")[2].isdigit():
        raise UsageError(f"--listen must be HOST:PORT, got {cfg.listen!r}")
    engines = [EngineSource(u) for u in cfg.engine_url]
    src = _open_source(args)
    server_pids = set()
    if cfg.server_pid:
        server_pids.add(cfg.server_pid)
    if cfg.server_cmdline:
        server_pids |= matching_pids(cfg.server_cmdline)
    for u in cfg.engine_url:
        pid = listening_pid(u)
        if pid:
            server_pids.add(pid)
    recorder = pusher = flight = None
    if cfg.record:
        from exporters.recorder import TraceRecorder

        try:
            recorder = TraceRecorder(cfg.record, src.gpus, 1.0 / cfg.interval, getattr(src, "driver", None))
        except OSError as e:
            raise UsageError(f"cannot write {cfg.record}: {e.strerror or e}") from None
    if cfg.alertmanager_url:
        from exporters.alertmanager import AlertmanagerPusher

        gen = cfg.external_url or f"http://{cfg.listen}/"
        pusher = AlertmanagerPusher(cfg.alertmanager_url, gen, cfg.push_interval)
    if cfg.flight_dir:
        from exporters.recorder import FlightRecorder

        flight = FlightRecorder(cfg.analysis.window_s)
    sampler = Sampler(cfg, src, engines, None if cfg.replay else ProcessScanner(), recorder, pusher, flight,
                      server_pids)
    from exporters.status import routes as status_routes

    try:
        httpd, _ = serve(cfg.listen, lambda: sampler.snapshot, status_routes(sampler))
    except OSError as e:
        raise UsageError(f"cannot listen on {cfg.listen}: {e.strerror or e}") from None
    stop = threading.Event()
    _on_signals(stop)
    what = f"replaying {cfg.replay} at {cfg.speed}x" if cfg.replay else f"sampling {len(src.gpus)} GPU(s) via NVML"
    logging.getLogger("oomwatch").warning("oomwatch %s: %s; metrics on http://%s/metrics, status page on "
                                          "http://%s/", __version__, what, cfg.listen, cfg.listen)
    sampler.start()
    try:
        stop.wait(args.duration)
    finally:
        sampler.stop()
        httpd.shutdown()
        if hasattr(src, "close"):
            src.close()
    return 0


def main(argv=None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # A skipped cycle (a slow call, no pile-up) is by design; apscheduler would warn at 10 Hz.
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.verbose:
            logging.getLogger("oomwatch").setLevel(logging.DEBUG)
        if not args.cmd:
            parser.print_help()
            return 2
        return {"run": cmd_run, "replay": cmd_replay, "diagnose": cmd_diagnose, "record": cmd_record,
                "engines": cmd_engines}[args.cmd](args)
    except UsageError as e:
        msg = str(e)
        print(msg if msg.startswith("oomwatch") else f"oomwatch: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - bad input paths raise typed errors handled below
        from .sources.engines import EngineUrlError
        from .sources.nvml import NvmlUnavailable
        from .trace import TraceError

        if isinstance(e, (TraceError, NvmlUnavailable, EngineUrlError)):
            print(f"oomwatch: {e}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
