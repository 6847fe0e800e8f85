"""The central mode's pieces without servers: cards from a read, the scrape interval, the exposition's merge,
the pushed labels. (The whole of it against real Prometheus and Alertmanager: tests/test_central.py.)"""

from __future__ import annotations

from prometheus_client.exposition import generate_latest

from oomwatch.backtest.series import cards_from_series
from oomwatch.central.reader import _one_per_card, _points, _spacing
from oomwatch.central.view import CardView, FleetSnapshot, merged
from oomwatch.central.watch import CardWatch
from oomwatch.config import DaemonConfig
from oomwatch.exporters.alertmanager import AlertmanagerPusher
from oomwatch.exporters.fleet import fleet_registry
from oomwatch.snapshot import Snapshot
from oomwatch.sources.prometheus import Series

G = 1 << 30


def _dcgm(node: str, uuid: str) -> dict[str, str]:
    return {"__name__": "DCGM_FI_DEV_FB_USED", "gpu": "0", "UUID": uuid, "Hostname": node}


def test_one_card_per_uuid_prefers_dcgm_over_oomwatchs_own_series():
    own = {"__name__": "oomwatch_gpu_memory_used_bytes", "gpu": "0", "uuid": "GPU-a", "node": "n1"}
    cards = _one_per_card(cards_from_series([own, _dcgm("n1", "GPU-a"), _dcgm("n2", "GPU-b")]))
    assert [(c.node, c.source.name) for c in cards] == [("n1", "dcgm-exporter"), ("n2", "dcgm-exporter")]


def test_points_merge_pod_series_and_take_free_from_total():
    base = {"__name__": "nvidia_smi_memory_used_bytes", "uuid": "GPU-x", "instance": "h:9835"}
    (card,) = cards_from_series([base, {**base, "__name__": "nvidia_smi_memory_total_bytes"}])
    used = [Series(base, [1.0, 2.0], [10.0 * G, 11.0 * G]), Series(base, [2.0], [12.0 * G])]
    total = [Series(base, [1.0, 2.0], [80.0 * G, 80.0 * G])]
    assert _points(card, {"used": used, "total": total}) == [(1.0, 10 * G, 70 * G, None), (2.0, 12 * G, 68 * G, None)]


def test_the_scrape_interval_is_the_median_spacing():
    assert _spacing([[(t, 0, 0, 0) for t in (0, 15, 30, 45)], [(t, 0, 0, 0) for t in (0, 30, 60)]]) == 22.5
    assert _spacing([[(0.0, 0, 0, 0)]]) is None


def _watch(node: str, uuid: str, pod: dict[str, str] | None = None) -> CardWatch:
    (card,) = cards_from_series([{**_dcgm(node, uuid), **(pod or {})}])
    w = CardWatch(card, 80 * G, DaemonConfig(), 0.0, 1.0)
    w.feed([(float(t), 20 * G, 60 * G, 0) for t in range(1, 40)])
    w.refresh()
    return w


def test_the_exposition_labels_each_card_with_its_node_and_has_each_family_once():
    ws = [_watch("n1", "GPU-a"), _watch("n2", "GPU-b")]
    cards = tuple(CardView(w.card.node, "0", w.card.uuid, "", "dcgm-exporter", w.labels(), w.snapshot) for w in ws)
    st = FleetSnapshot(cards, Snapshot(), merged(cards, Snapshot(), 40.0, 40.0), 5, cards_over_cap=3)
    text = generate_latest(fleet_registry(lambda: st, process_metrics=False)).decode()
    used = [ln for ln in text.splitlines() if ln.startswith("oomwatch_gpu_memory_used_bytes{")]
    assert len(used) == 2 and 'node="n1"' in used[0] and 'uuid="GPU-b"' in used[1]
    types = [ln for ln in text.splitlines() if ln.startswith("# TYPE ")]
    assert len(types) == len(set(types))  # one family per name, whatever the number of cards
    assert "oomwatch_fleet_cards{node=" in text and 'state="over_cap"} 3.0' in text
    assert [g.info.name for g in st.status.gpus] == ["n1 gpu0", "n2 gpu0"]


def test_a_pushed_alert_keeps_its_cards_node_and_pod():
    w = _watch("gpu-7", "GPU-c", {"namespace": "ml", "pod": "vllm-0"})
    assert w.labels() == {"node": "gpu-7", "namespace": "ml", "pod": "vllm-0"}
    from oomwatch.snapshot import AlertView

    view = AlertView({"alertname": "GPUMemoryLeak", "gpu": "0", **w.labels()}, {"summary": "leak"}, "firing", 0, 0)
    p = AlertmanagerPusher(["http://am:9093"], node="central-host")
    try:
        assert p._labels(view)["node"] == "gpu-7" and p._annotations(view)["summary"] == "gpu-7: leak"
        plain = AlertView({"alertname": "GPUTelemetryDown"}, {"summary": "down"}, "firing", 0, 0)
        assert p._labels(plain)["node"] == "central-host"
    finally:
        p.close()
