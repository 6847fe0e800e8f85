"""`oomwatch backtest` against a real Prometheus: real traces written as dcgm-exporter series, made into a TSDB
by `promtool tsdb create-blocks-from openmetrics`, served on 127.0.0.1 and read over HTTP.

The bundled traces always run; the real recordings of ../shared/traces run where that folder is present."""

import json
import os

import pytest

from conftest import SHARED, example, need_binary, shared
from oomwatch.backtest.tsdb import (
    PromServer,
    SeriesSpec,
    create_blocks,
    dcgm_labels,
    trace_gpus,
    trace_points,
    write_dcgm,
)
from oomwatch.cli import main
from oomwatch.feed import replay_trace
from oomwatch.sources.prometheus import PrometheusClient, PrometheusError

pytestmark = pytest.mark.integration
BASE = 1_790_000_000.0  # 2026-09-21: old enough to be imported as blocks, kept by the server's retention
SLOT_S = 1000.0  # each trace gets its own 1000 s of history: longer than any of them plus Prometheus' lookback
STEP = "1"
LEAKS_SHARED = ("slow_leak_to_oom", "leak_after_prealloc", "ramp")
HEALTHY_SHARED = ("vllm_realistic_start", "sawtooth", "empty_cache_serving")
POD = {"namespace": "ml", "pod": "vllm-0", "container": "vllm"}


def _cards():
    """(node, trace path) of every card in the TSDB: the bundled leak and healthy traces, copies of a
    bounded sawtooth on more nodes (for the shard test), and the shared recordings where present."""
    cards = [("node-leak", example("staircase.jsonl")), ("node-ok", example("vllm_startup.jsonl"))]
    cards += [(f"node-saw-{k}", example("sawtooth.jsonl")) for k in range(6)]
    d = os.path.join(SHARED, "traces")
    if os.path.isdir(d):
        cards += [(f"shared-{n}", os.path.join(d, f"{n}.jsonl")) for n in LEAKS_SHARED + HEALTHY_SHARED]
    return cards


def _restarts(base):
    """kube-state-metrics' restart counter of the leak card's pod: one restart a minute after its OOM."""
    oom_t = base + 58.0
    return [(base + s, 0.0 if base + s < oom_t + 60 else 1.0) for s in range(0, 600, 15)]


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    need_binary("promtool")
    need_binary("prometheus")
    d = tmp_path_factory.mktemp("backtest")
    specs = []
    for k, (node, path) in enumerate(_cards()):
        g = trace_gpus(path)[0]
        base = BASE + k * SLOT_S
        labels = dcgm_labels(node, g.index, f"{g.uuid[:-4]}{k:04d}", g.name, POD if node == "node-leak" else None)
        specs.append(SeriesSpec(labels, lambda p=path, i=g.index, b=base: trace_points(p, i, b)))
    om = str(d / "fleet.om")
    with open(om, "w", encoding="utf-8") as f:
        write_dcgm(f, specs, [("kube_pod_container_status_restarts_total", POD, _restarts(BASE))])
    create_blocks(om, str(d / "tsdb"))
    with PromServer(str(d / "tsdb")) as p:
        p.slots = {node: BASE + k * SLOT_S for k, (node, _) in enumerate(_cards())}
        yield p


def run_json(capsys, prom, *args):
    end = BASE + SLOT_S * len(prom.slots)
    code = main(["backtest", "--prometheus", prom.url, "--start", f"{BASE}", "--end", f"{end}", "--json", *args])
    out, err = capsys.readouterr()
    lines = [json.loads(x) for x in out.splitlines()]
    return code, {c["card"]["node"]: c for c in lines[:-1]}, lines[-1]["totals"], err


@pytest.fixture(scope="module")
def fleet(prom):
    """The whole fleet at 1 s steps, once for the module."""
    cap = _Cap()
    end = BASE + SLOT_S * len(prom.slots)
    code = main(
        ["backtest", "--prometheus", prom.url, "--start", f"{BASE}", "--end", f"{end}", "--step", STEP, "--json"]
    )
    lines = [json.loads(x) for x in cap.done().splitlines()]
    assert code == 0
    return {c["card"]["node"]: c for c in lines[:-1]}, lines[-1]["totals"]


class _Cap:
    """stdout captured for a module-scoped fixture (capsys is function-scoped)."""

    def __init__(self):
        import io
        import sys

        self._sys, self._old, self._buf = sys, sys.stdout, io.StringIO()
        sys.stdout = self._buf

    def done(self):
        self._sys.stdout = self._old
        return self._buf.getvalue()


def _fired(card, alert):
    return [a["t"] for a in card["alerts"] if a["alert"] == alert and a["state"] == "firing"]


def test_a_leak_written_as_dcgm_series_yields_a_suspected_oom_paged_ahead(fleet, prom):
    cards, _ = fleet
    c = cards["node-leak"]
    assert c["source"] == "dcgm-exporter" and c["card"]["pod"] == POD and c["error"] is None
    assert len(c["suspected_ooms"]) == 1, c["suspected_ooms"]
    oom = c["suspected_ooms"][0]
    slot = prom.slots["node-leak"]
    assert slot + 50 <= oom["t"] <= slot + 62  # the real OOM of staircase.jsonl is at 57.3 s
    assert oom["peak_used_ratio"] >= 0.95
    assert oom["paged_ahead_s"] is not None and oom["paged_ahead_s"] >= 10, oom
    assert oom["restarted"] is True  # kube-state-metrics saw the container restart after it
    assert min(_fired(c, "GPUOOMImminent")) == pytest.approx(oom["t"] - oom["paged_ahead_s"], abs=0.01)
    assert _fired(c, "GPUMemoryLeak")
    assert any(e["alert"] == "GPUOOMImminent" for e in c["episodes"])
    assert all(slot <= e["start"] <= slot + SLOT_S for e in c["episodes"])  # unix times, not trace times


def test_a_healthy_trace_yields_nothing(fleet):
    cards, _ = fleet
    for node in ("node-ok", *(f"node-saw-{k}" for k in range(6))):
        c = cards[node]
        assert c["error"] is None and c["samples"] > 300, c
        assert c["suspected_ooms"] == [] and _fired(c, "GPUOOMImminent") == [] and _fired(c, "GPUMemoryLeak") == []


def test_totals_follow_the_contract(fleet):
    cards, t = fleet
    keys = {"cards", "card_days", "samples", "pages", "pages_per_card_day", "leak_warnings", "suspected_ooms"}
    keys |= {"suspected_ooms_paged", "lead_s_median", "seconds", "samples_per_second"}
    assert keys <= set(t)
    assert t["cards"] == len(cards) and t["samples"] == sum(c["samples"] for c in cards.values())
    assert t["pages"] == sum(len(_fired(c, "GPUOOMImminent")) for c in cards.values())
    assert t["pages_per_card_day"] == pytest.approx(t["pages"] / t["card_days"], rel=1e-3)
    assert t["suspected_ooms_paged"] >= 1 and t["lead_s_median"] > 0
    one = next(iter(cards.values()))
    assert {"card", "source", "start", "end", "step_s", "samples", "alerts", "suspected_ooms", "verdict"} <= set(one)


def test_the_same_alerts_as_replay(fleet, prom):
    """At a step the trace's own rate resolves, the backtest pages as `oomwatch replay` does on the file."""
    cards, _ = fleet
    rep = replay_trace(example("staircase.jsonl"))
    fired = sorted({tr.alert.alertname for tr in rep.transitions if tr.state == "firing"})
    got = sorted({a["alert"] for a in cards["node-leak"]["alerts"] if a["state"] == "firing"})
    assert got == fired


def test_shared_leaks_are_paged_ahead_and_healthy_recordings_are_quiet(fleet):
    shared("traces")
    cards, _ = fleet
    for n in LEAKS_SHARED:
        c = cards[f"shared-{n}"]
        assert len(c["suspected_ooms"]) == 1 and c["suspected_ooms"][0]["paged_ahead_s"] > 0, (n, c["suspected_ooms"])
    for n in HEALTHY_SHARED:
        c = cards[f"shared-{n}"]
        assert c["suspected_ooms"] == [] and _fired(c, "GPUOOMImminent") == [], (n, c["alerts"])


def test_shards_partition_the_fleet(capsys, prom, fleet):
    all_nodes = set(fleet[0])
    seen = []
    for k in range(3):
        code, cards, totals, err = run_json(capsys, prom, "--step", "5", "--shard", f"{k}/3")
        assert code == 0, err
        assert totals["cards"] == len(cards)
        seen.append(set(cards))
    assert set().union(*seen) == all_nodes
    assert sum(len(s) for s in seen) == len(all_nodes)  # no card in two shards
    assert sum(1 for s in seen if s) >= 2  # the split is real at this size


def test_long_ranges_are_read_in_chunks_under_the_points_limit(capsys, prom):
    slot = prom.slots["node-leak"]
    step = 0.02  # 1000 s at 20 ms: 50,000 points, five chunks
    code = main(
        ["backtest", "--prometheus", prom.url, "--start", f"{slot}", "--end", f"{slot + 999}", "--step", f"{step}"]
        + ["--selector", 'Hostname="node-leak"', "--json"]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    card = json.loads(out.splitlines()[0])
    span = card["end"] - card["start"]
    assert card["samples"] == pytest.approx(span / step + 1, abs=2)  # every step once, none twice
    assert span > 11_000 * step  # more than one query's worth
    with PrometheusClient(prom.url) as c, pytest.raises(PrometheusError, match="too many points") as e:
        c.query_range("DCGM_FI_DEV_FB_USED", slot, slot + 999, step)  # one unchunked query: Prometheus' own 400
    assert e.value.fatal


def test_text_report_says_what_it_found(capsys, prom):
    slot = prom.slots["node-leak"]
    code = main(["backtest", "--prometheus", prom.url, "--start", f"{slot}", "--end", f"{slot + 400}", "--step", "1"])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    assert "suspected OOM" in out and "ahead" in out and "the container restarted" in out
    assert "pages per card-day" not in out and "per card-day" in out
    assert "cannot show transients shorter than" in out


def test_a_selector_that_is_not_promql_is_one_line(capsys, prom):
    code = main(["backtest", "--prometheus", prom.url, "--since", "1h", "--selector", "Hostname=~"])
    _, err = capsys.readouterr()
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--selector" in err


@pytest.mark.parametrize("source", ["nvidia_gpu_exporter", "oomwatch"])
def test_the_other_exporters_give_the_same_verdict(tmp_path, capsys, source):
    """staircase.jsonl as nvidia_gpu_exporter's or oomwatch's own series: the same OOM, paged ahead."""
    from oomwatch.backtest.series import SOURCES
    from oomwatch.backtest.tsdb import exporter_labels, write_series

    kind = next(s for s in SOURCES if s.name == source)
    path = example("staircase.jsonl")
    g = trace_gpus(path)[0]
    om = str(tmp_path / "one.om")
    with open(om, "w", encoding="utf-8") as f:
        write_series(
            f,
            [SeriesSpec(exporter_labels(kind, "gpu-1", 0, g.uuid, g.name), lambda: trace_points(path, 0, BASE))],
            kind,
        )
    create_blocks(om, str(tmp_path / "tsdb"))
    with PromServer(str(tmp_path / "tsdb")) as p:
        code = main(
            [
                "backtest",
                "--prometheus",
                p.url,
                "--start",
                f"{BASE}",
                "--end",
                f"{BASE + 400}",
                "--step",
                STEP,
                "--json",
            ]
        )
    out, err = capsys.readouterr()
    assert code == 0, err
    card = json.loads(out.splitlines()[0])
    assert card["source"] == source and card["card"]["uuid"] == g.uuid and card["error"] is None
    assert len(card["suspected_ooms"]) == 1 and card["suspected_ooms"][0]["paged_ahead_s"] >= 10


def test_worker_processes_give_what_one_process_gives(capsys, prom):
    """The cards analysed in a pool of worker processes (each with its own connection) give, card for card,
    the alerts, suspected OOMs and verdicts of the same cards analysed one at a time in this process."""
    code1, one, t1, err1 = run_json(capsys, prom, "--step", "5", "--workers", "1")
    code3, pool, t3, err3 = run_json(capsys, prom, "--step", "5", "--workers", "3")
    assert code1 == code3 == 0, err1 + err3
    assert set(one) == set(pool) and len(one) >= 8
    keys = ("alerts", "suspected_ooms", "verdict", "episodes", "samples", "error")
    for node in one:
        assert {k: one[node][k] for k in keys} == {k: pool[node][k] for k in keys}, node
    assert {k: t1[k] for k in ("pages", "leak_warnings", "suspected_ooms_paged")} == {
        k: t3[k] for k in ("pages", "leak_warnings", "suspected_ooms_paged")
    }


def test_plot_draws_each_card_it_paged_on_and_no_other(capsys, prom, tmp_path):
    """`--plot DIR` (made if missing): one chart per card that paged, drawn by replay's chart code in the
    worker that analysed it, marking the very alerts the card's line reports (at times since its first
    sample); a card that never paged gets none, and the line names the chart. The text report says where."""
    from PIL import Image

    charts = tmp_path / "charts" / "fleet"
    sel = 'Hostname=~"node-leak|node-ok|node-saw-0"'
    code, cards, totals, err = run_json(capsys, prom, "--step", "2", "--selector", sel, "--plot", str(charts))
    assert code == 0, err
    assert set(cards) == {"node-leak", "node-ok", "node-saw-0"}
    paged = {n for n, c in cards.items() if _fired(c, "GPUOOMImminent")}
    assert paged == {"node-leak"}, paged  # the staircase to its OOM pages; a start and a sawtooth do not
    drawn = sorted(p.name for p in charts.iterdir())
    assert drawn == [os.path.basename(cards["node-leak"]["chart"])], drawn
    assert all(cards[n]["chart"] is None and cards[n]["chart_error"] is None for n in ("node-ok", "node-saw-0"))
    c = cards["node-leak"]
    with Image.open(c["chart"]) as im:
        marks = json.loads(im.text["oomwatch"])
    (g,) = marks["gpus"].values()
    fired = sorted((a["alert"], round(a["t"] - c["start"], 1)) for a in c["alerts"] if a["state"] == "firing")
    assert sorted((a["alert"], round(a["t"], 1)) for a in g["alerts"]) == fired
    main(
        [
            "backtest",
            "--prometheus",
            prom.url,
            "--start",
            f"{BASE}",
            "--end",
            f"{BASE + SLOT_S * len(prom.slots)}",
            "--step",
            "2",
            "--selector",
            'Hostname="node-leak"',
            "--plot",
            str(charts),
            "--workers",
            "1",
        ]
    )
    out = capsys.readouterr().out
    assert f"chart: {c['chart']}" in out


def test_plot_into_a_folder_that_cannot_be_made_is_one_line(capsys, prom, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code = main(["backtest", "--prometheus", prom.url, "--since", "1h", "--plot", str(blocker / "charts")])
    err = capsys.readouterr().err
    assert code == 2 and "--plot: cannot make the folder" in err and "Traceback" not in err
