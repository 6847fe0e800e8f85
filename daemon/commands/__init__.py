"""One module per `oomwatch` subcommand, each with a `main(args) -> exit status`; daemon/cli.py parses the
command line and dispatches here (`oomwatch backtest` lives in daemon/backtest/command.py).

    run        the daemon (its life in daemon/run.py, its wiring in daemon/wiring.py)
    replay     the whole analysis over a trace, as fast as it goes
    diagnose   a one-shot plain-language report, live (the daemon's wiring) or over a trace
    record     a gpu-memory-trace/1 from live NVML (the daemon's wiring, serving nothing)
    engines    what oomwatch reads from engine endpoints
    examples   the bundled real traces
    plot       --plot's checks and drawing, shared by replay and diagnose
"""
