"""Central mode: `oomwatch run --prometheus URL`, one evaluator for a fleet, built from the backtest's pieces.

Instead of NVML on one host, it reads the GPU memory series the cluster's Prometheus already keeps
(dcgm-exporter, nvidia_gpu_exporter, oomwatch's own) and feeds every card, one `Analyzer` each, with each
scrape once, as it comes: the same records `oomwatch backtest` and `oomwatch replay` feed, so a card's verdict
is the one a sidecar on it would give at that sample rate. Alerts go to Alertmanager with the card's node
and pod labels; /metrics and the status page serve the fleet (at most `--max-cards` cards).

    reader.py   one read of the fleet: the raw samples since the last read, grouped into cards
    watch.py    one card: its Analyzer, fed incrementally; its snapshot, its alerts' labels
    central.py  the periodic read, the cards watched (the cap), Prometheus' health, the Alertmanager push
    view.py     the immutable fleet snapshot the exporters read (exporters/fleet.py, the status page)
    run.py      the process: checks, HTTP, signals

See docs/fleet.md, "Central mode".
"""

__all__: list[str] = []
