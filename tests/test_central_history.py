"""The central's first read takes each card's history (`CentralConfig.history_s`), so a central that restarts
judges a slow leak on hours of its curve at once. Against a real Prometheus whose TSDB holds eight hours of two
cards written as dcgm-exporter series (`promtool tsdb create-blocks-from openmetrics`): a server that serves
flat at 60 % of an H100 and from its second hour keeps 300 MiB an hour, and a healthy twin that stays flat."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from conftest import free_port, need_binary
from oomwatch.backtest.tsdb import PromServer, SeriesSpec, create_blocks, dcgm_labels, write_dcgm
from oomwatch.central.central import Central
from oomwatch.config import CentralConfig, DaemonConfig
from oomwatch.sources.prometheus import PrometheusClient

pytestmark = pytest.mark.integration
GIB, MIB, HOUR = 1 << 30, 1 << 20, 3600.0
TOTAL, RESERVED = 80 * GIB, GIB // 2
USABLE = TOTAL - RESERVED
BASE = 1_790_000_000.0  # old enough to be imported as blocks
SPAN = 8 * HOUR
END = BASE + SPAN  # the central (re)starts here
STEP = 30.0  # the scrape interval the series were written at
LEAK_PER_S = 300 * MIB / HOUR


def curve(leaks: bool):
    """(unix s, used, free, reserved): idle 10 min, the server's start, flat at 60 %, then (if `leaks`) +300
    MiB an hour from 30 min after its start, for the 7.5 hours left: 2.2 GiB of an 80 GB card, far from OOM."""
    for k in range(int(SPAN / STEP)):
        t = k * STEP
        used = 0 if t < 600 else int(0.6 * USABLE + (LEAK_PER_S * max(0.0, t - 1800) if leaks else 0))
        yield BASE + t, used, USABLE - used, RESERVED


@pytest.fixture(scope="module")
def tsdb(tmp_path_factory):
    need_binary("promtool")
    need_binary("prometheus")
    d = tmp_path_factory.mktemp("history")
    specs = [
        SeriesSpec(dcgm_labels("node-leak", 0, "GPU-history-0001", "NVIDIA H100 80GB HBM3"), lambda: curve(True)),
        SeriesSpec(dcgm_labels("node-ok", 0, "GPU-history-0002", "NVIDIA H100 80GB HBM3"), lambda: curve(False)),
    ]
    om = str(d / "fleet.om")
    with open(om, "w", encoding="utf-8") as f:
        write_dcgm(f, specs)
    create_blocks(om, str(d / "tsdb"))
    return str(d / "tsdb")


def fired(c: Central) -> dict[str, list[tuple[str, str]]]:
    """{node: [(alert, summary)]} of what fires on each card the central watches."""
    out = {}
    for w in c.watches.values():
        out[w.card.node] = [(a.labels["alertname"], a.annotations["summary"]) for a in w.snapshot.alerts]
    return out


def first_read(url: str, **central) -> dict[str, list[tuple[str, str]]]:
    """One central started at END with CentralConfig(**central): what fires after its first read."""
    cfg = DaemonConfig(prometheus=url, central=dataclasses.replace(CentralConfig(), **central))
    with PrometheusClient(url) as client:
        c = Central(cfg, client, clock=lambda: END)
        c.read()
    assert c.reads == 1 and c.state.health.sources[0].up
    return fired(c)


def test_a_restarted_central_warns_of_a_slow_leak_at_its_first_read(tsdb):
    with PromServer(tsdb) as p:
        with_history = first_read(p.url)
        without = first_read(p.url, history_s=0.0)
    assert [a for a, _ in with_history["node-leak"]] == ["GPUMemoryLeak"], with_history
    assert "MiB/hour" in with_history["node-leak"][0][1]  # a slow leak's pace, not "0 MiB/s"
    assert with_history["node-ok"] == []
    # the last 15 minutes alone (the read window) show 75 MiB of growth: nothing to judge a leak on
    assert without == {"node-leak": [], "node-ok": []}


def test_a_history_read_prometheus_refuses_leaves_the_central_running(tsdb, caplog):
    """A Prometheus whose query limit refuses the hours of history still serves the first read's window: one
    warning line, the cards are watched from the window on, and the source is up."""
    limit = ("--query.max-samples=1000",)  # the window's 180 samples fit, the history's 2,070 do not
    with PromServer(tsdb, args=limit) as p, caplog.at_level(logging.WARNING, logger="oomwatch.central"):
        got = first_read(p.url)
    assert got == {"node-leak": [], "node-ok": []}
    lines = [r.getMessage() for r in caplog.records if "history" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0], lines


def test_prometheus_down_at_start_gives_the_history_at_the_first_read_that_works(tsdb):
    """The central starts while Prometheus is down: that read is the source down, and the history comes with
    the first read that works, a minute later."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    clock = [END - 60.0]
    with PrometheusClient(url) as client:
        c = Central(DaemonConfig(prometheus=url), client, clock=lambda: clock[0])
        c.read()
        assert c.reads == 0 and not c.state.health.sources[0].up and not c.watches
        with PromServer(tsdb, port=port):
            clock[0] = END
            c.read()
    assert c.reads == 1 and c.state.health.sources[0].up
    assert [a for a, _ in fired(c)["node-leak"]] == ["GPUMemoryLeak"]
    assert fired(c)["node-ok"] == []
